"""The fused S-LSTM recurrence: all steps of Eq. 2 and Eq. 3 in one `torch.autograd.Function` (`FusedRecurrence`),
per step one matmul of the word states with all their weights, one `addmm` for the sentence states and one Triton
kernel (`triton_kernels.py`) for everything after them, forward and backward; and the one check that decides where it
runs (`uses_fused_step`).

`SLSTMStateTransition` (`modeling_slstm.py`) keeps its readable PyTorch step beside it as the reference and the
fallback; `config.step_implementation` chooses.

In eager mode the kernels are launched directly (`StepKernels`, grids and options worked out once per forward).
Under `torch.compile` (and the profiler) each launch is a `torch.library.custom_op` instead, so that `torch.compile`
keeps the fused recurrence in its graph (no graph break) as an opaque call, and traces the autograd function around
it.

This module imports without Triton (see `kernel_dispatch.py`); the fused recurrence then never runs (`"auto"` takes
the readable step, `"triton"` is an error that says why).
"""

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from .custom_operators import operator_name
from .kernel_dispatch import kernel_buffer, triton_obstacles, uses_kernels
from .triton_kernels import step_backward_kernel, step_forward_kernel, step_sums_kernel, tile_options, tiles_in_force

FUSED_STEP_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
OPTIONS_NOT_COVERED = ("context_independent_content", "remove_output_gate")
"""Config switches the kernels do not implement (Levy et al.'s weighted-sum simplifications): set, the readable step
runs. The kernels cover every other option of the step: any `window_size` and `num_sentence_nodes` (0 included),
both `gate_normalization`s, `hidden_dropout` (applied before the kernels), both `initial_state`s (outside the step)."""


def options_not_covered(config) -> list[str]:
    """The switches of `config` set that the kernels do not cover, as `name=value` (empty when all are covered)."""
    return [f"{name}={getattr(config, name)!r}" for name in OPTIONS_NOT_COVERED if getattr(config, name)]


def fused_step_obstacles(config, states: torch.Tensor, replaced_layers: Sequence[str] = ()) -> list[str]:
    """Why the fused step cannot run for `config` on `states` (`h^{t-1}`), one reason a string; empty when it can.
    `replaced_layers`: the step's linear layers that are no longer plain (`SLSTMStateTransition.replaced_layers`)."""
    obstacles = [f"{option} is not covered by the kernels" for option in options_not_covered(config)]
    if replaced_layers:
        obstacles.append(
            f"the step's layers {', '.join(replaced_layers)} are replaced (a PEFT adapter, a quantised layer), and "
            "the fused recurrence reads their weights bare, without what the replacement adds"
        )
    obstacles += triton_obstacles(states)
    if states.dtype not in FUSED_STEP_DTYPES:
        obstacles.append(f"the dtype is {states.dtype}, and the kernels take {', '.join(map(str, FUSED_STEP_DTYPES))}")
    return obstacles


def uses_fused_step(config, states: torch.Tensor, replaced_layers: Sequence[str] = ()) -> bool:
    """Whether a step of a model with `config` on `states` (`h^{t-1}`) runs the Triton kernels, from
    `config.step_implementation` (`kernel_dispatch.uses_kernels`): `"eager"` never, `"auto"` when the tensors are on a
    CUDA GPU, Triton is importable, the dtype is float32, bfloat16 or float16 and the config's options are covered
    (else the readable step), `"triton"` always. Reads only the config, the tensor's device and dtype (never its
    values) and which layers `replaced_layers` names (`"auto"` takes the readable step where any is, which runs the
    replacements).

    Raises:
        `ValueError`: If `step_implementation` is none of `"auto"`, `"eager"`, `"triton"`, or is `"triton"` where
        the kernels cannot run (the message says why).
    """
    obstacles = fused_step_obstacles(config, states, replaced_layers)
    return uses_kernels(config.step_implementation, states, obstacles, "step_implementation", "the fused step")


def next_power_of_2(value: int) -> int:
    """`triton.next_power_of_2`, without importing Triton."""
    return 1 << max(value - 1, 0).bit_length()


def contiguous(*tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """`tensors` in the layout the kernels read (row-major, no gaps, no stride 0), `None` kept."""
    return tuple(None if tensor is None else tensor.contiguous() for tensor in tensors)


def product_width(hidden: int, nodes: int, window_size: int) -> int:
    """Columns `P` of the product `h̃^{t-1} W_h^T` (`words_weight`'s rows): `2w + 1` window blocks of the `2w + K + 4`
    gate blocks a word's context feeds, then `U_f h`, `U_g h`, `U_o h` (`K` blocks each), each `hidden` wide."""
    return ((2 * window_size + 1) * (2 * window_size + nodes + 4) + 3 * nodes) * hidden


SUMS_BLOCK = 256
"""Columns per program of `step_sums_kernel`."""

MAX_GRID = (2**31 - 1, 65_535, 65_535)
"""The most programs CUDA launches on each axis of a grid (x, y, z); Triton's interpreter does not check them."""
INT32_OFFSETS_LIMIT = 2**31
"""Values of a sentence's product from which the step kernels compute offsets in int64 (`_offset_unit`)."""


def is_long(programs: int) -> bool:
    """Whether a sentence of a step kernel's launch takes more programs than grid axis 1 holds: then they go on
    axis 0 and the sentences on axes 1 and 2 (`LONG_SENTENCES`, `triton_kernels._program_and_sentence`)."""
    return programs > MAX_GRID[1]


def sentence_axes(batch: int) -> tuple[int, int]:
    """Grid axes 1 and 2 for `batch` sentences of a long sentences' launch, each within `MAX_GRID`:
    `(sentences per row, rows)`, as few rows of equal length as hold the batch (one up to 65,535 sentences). The
    programs past the batch's end, fewer than a row, return at once."""
    rows = max(1, -(-batch // MAX_GRID[1]))
    return -(-batch // rows), rows


def launch_grid(programs: int, batch: int) -> tuple[int, int, int]:
    """The grid of a step kernel's launch on `batch` sentences of `programs` programs each: the sentences on axis 0
    and their programs on axis 1, or for long sentences (`is_long`) the programs on axis 0 and the sentences on axes
    1 and 2 (`sentence_axes`). Any batch and any length fits `MAX_GRID` either way.

    Raises:
        `ValueError`: If `programs` is past CUDA's limit on axis 0 (a sentence of about 2^31 / 10 words at hidden
        300, more than a GPU's memory holds).
    """
    if programs > MAX_GRID[0]:
        raise ValueError(f"a sentence takes at most {MAX_GRID[0]:,} programs of a step kernel, got {programs:,}")
    return (programs, *sentence_axes(batch)) if is_long(programs) else (batch, programs, 1)


class StepKernels:
    """The kernel launches of a step (`step_forward_kernel`; `step_backward_kernel`, then with sentence nodes
    `step_sums_kernel`) for sentences of one shape: the grids and options, worked out once and the same at every
    step.

    The kernels read every tensor as contiguous: the callers (`step_update`, `step_update_backward`,
    `FusedRecurrence`) make them so at their boundaries, once, rather than at every step.

    Args:
        batch, seq, hidden, nodes (`int`): the sizes: `batch` sentences of `seq` positions, `hidden` units,
            `nodes` sentence nodes.
        window_size (`int`): `w` of Eq. 2.
        sigmoid_scores (`bool`): whether the gates are normalised as `softmax(σ(z))` (`"sigmoid_softmax"`).
    """

    def __init__(self, batch: int, seq: int, hidden: int, nodes: int, window_size: int, sigmoid_scores: bool):
        self.nodes = nodes
        gates, nodes_p = next_power_of_2(2 * window_size + nodes + 4), next_power_of_2(max(nodes, 1))
        # The sentence body's tile (BLOCK_S, nodes, BLOCK_H) is sized as for twice its nodes: it keeps more tiles of
        # that size live (the forget scores, their exponentials, the keep and output terms) than the word body keeps
        # of its own; at 2 nodes, sized as the word body's, it spilled under Triton 3.6.
        word_tiles, sentence_tiles = tile_options(seq, hidden, gates), tile_options(seq, hidden, 2 * nodes_p)
        shared = {
            "seq": seq,
            "hidden": hidden,
            "WINDOW": window_size,
            "NODES": nodes,
            "NODES_P": nodes_p,
            "CONTEXT_BLOCKS": 2 * window_size + nodes + 4,  # the normalised gates, o and u: the slots of a tile
            "SIGMOID_SCORES": sigmoid_scores,
            "INT64_OFFSETS": seq * product_width(hidden, nodes, window_size) >= INT32_OFFSETS_LIMIT,
            "num_warps": word_tiles["num_warps"],
        }
        self.forward_options = {
            **shared,
            "WORD_BLOCK_S": word_tiles["BLOCK_S"],
            "WORD_BLOCK_H": word_tiles["BLOCK_H"],
            "SENTENCE_BLOCK_S": sentence_tiles["BLOCK_S"],
            "SENTENCE_BLOCK_H": sentence_tiles["BLOCK_H"],
        }
        # The backward's tile holds w halo rows on each side of the rows it owns, and at least as many owned rows
        # (in the interpreter, which takes a sentence per tile, the sentence and its halo rows).
        backward_tiles = tile_options(seq + 2 * window_size, hidden, gates, backward=True)
        backward_block_s = max(backward_tiles["BLOCK_S"], next_power_of_2(4 * window_size))
        tiles = backward_tiles["TILES"]
        self.backward_options = {
            **shared,
            "GATES": gates,
            "BLOCK_S": backward_block_s,
            "BLOCK_H": backward_tiles["BLOCK_H"],
            "TILES": tiles,
        }
        word_hidden_blocks = -(-hidden // word_tiles["BLOCK_H"])
        sentence_programs = -(-hidden // sentence_tiles["BLOCK_H"]) if nodes else 0
        self.forward_programs = sentence_programs + -(-seq // word_tiles["BLOCK_S"]) * word_hidden_blocks
        self.forward_grid = launch_grid(self.forward_programs, batch)
        self.forward_options["LONG_SENTENCES"] = is_long(self.forward_programs)
        self.position_blocks = -(-seq // ((backward_block_s - 2 * window_size) * tiles))
        self.backward_programs = self.position_blocks * -(-hidden // backward_tiles["BLOCK_H"])
        self.backward_grid = launch_grid(self.backward_programs, batch)
        self.backward_options["LONG_SENTENCES"] = is_long(self.backward_programs)
        # The partial sums per position block, with sentence nodes: the sentence terms' gradient (batch, W), then
        # the two parts of c_g^{t-1}'s (2, batch, K, H).
        sentence_width = (shared["CONTEXT_BLOCKS"] + 3 * nodes) * hidden  # W, the sentence terms'
        self.sentence_gradients_size = batch * (sentence_width + 2 * nodes * hidden) if nodes else 0
        self.sums_grid = (-(-self.sentence_gradients_size // SUMS_BLOCK),)

    @classmethod
    def for_cells(cls, cells: torch.Tensor, sentence_cells: torch.Tensor, window_size: int, sigmoid_scores: bool):
        """The launches for `c^{t-1}` `(batch, seq, hidden)` and `c_g^{t-1}` `(batch, nodes, hidden)` under the tiling
        in force (`triton_kernels.use_tiles`): one instance per set of sizes and tiling (`step_kernels`), so that a
        training step with the shapes of the previous one works out no grids or tile options."""
        batch, seq, hidden = cells.shape
        nodes = sentence_cells.shape[1]
        return step_kernels(batch, seq, hidden, nodes, window_size, sigmoid_scores, tiles_in_force())

    def sentence_tensors(self, **tensors) -> dict:
        """`tensors` as kernel arguments: as they are with sentence nodes, `None` (never read) without."""
        return tensors if self.nodes else dict.fromkeys(tensors)

    def forward(self, product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths):
        """Eqs. 2 and 3 of one step (as `step_update`), on contiguous tensors."""
        outputs = step_update_outputs(cells, sentence_cells)
        new_states, new_cells, new_sentence_states, new_sentence_cells, statistics = outputs
        step_forward_kernel[self.forward_grid](
            product_ptr=product, input_terms_ptr=input_terms, cells_ptr=cells, mask_ptr=mask, lengths_ptr=lengths,
            new_states_ptr=new_states, new_cells_ptr=new_cells,
            **self.sentence_tensors(
                sentence_terms_ptr=sentence_terms, sentence_cells_ptr=sentence_cells, statistics_ptr=statistics,
                new_sentence_states_ptr=new_sentence_states, new_sentence_cells_ptr=new_sentence_cells,
            ),
            batch=cells.shape[0], **self.forward_options,
        )  # fmt: skip
        return outputs

    def backward(
        self, d_states, d_output_states, d_cells, d_sentence_states, d_sentence_cells, d_input_terms, later_steps,
        d_product, product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths, statistics,
    ):  # fmt: skip
        """The gradients of one step (as `step_update_backward`: the product's written into `d_product`), on
        contiguous tensors."""
        gradients = step_update_gradients(sentence_terms, cells, sentence_cells)
        d_sentence_terms, d_prev_cells, d_prev_sentence_cells = gradients
        partials = None
        if self.nodes:  # float32 partial sums per position block, (blocks, sentence_gradients_size)
            partials = kernel_buffer(cells, (self.position_blocks, self.sentence_gradients_size), torch.float32)
        step_backward_kernel[self.backward_grid](
            d_states_ptr=d_states, d_output_states_ptr=d_output_states, d_cells_ptr=d_cells, product_ptr=product,
            input_terms_ptr=input_terms, cells_ptr=cells, mask_ptr=mask, lengths_ptr=lengths,
            d_product_ptr=d_product, d_input_terms_ptr=d_input_terms, d_prev_cells_ptr=d_prev_cells,
            **self.sentence_tensors(
                d_sentence_states_ptr=d_sentence_states, d_sentence_cells_ptr=d_sentence_cells,
                sentence_terms_ptr=sentence_terms, sentence_cells_ptr=sentence_cells, statistics_ptr=statistics,
                partials_ptr=partials,
            ),
            batch=cells.shape[0], LATER_STEPS=later_steps, **self.backward_options,
        )  # fmt: skip
        if self.nodes:
            step_sums_kernel[self.sums_grid](
                partials, d_sentence_terms, d_prev_sentence_cells, self.position_blocks, d_sentence_terms.numel(),
                self.sentence_gradients_size, BLOCK=SUMS_BLOCK,
            )  # fmt: skip
        return gradients


@functools.lru_cache(maxsize=64)
def step_kernels(
    batch: int, seq: int, hidden: int, nodes: int, window_size: int, sigmoid_scores: bool, tiling: tuple
) -> StepKernels:
    """The `StepKernels` of these sizes, made once (they hold no tensors, and nothing changes them after `__init__`)
    per `tiling`: `triton_kernels.tiles_in_force()`, which `__init__` works the tile options out from, so that after
    `use_tiles` a shape already launched takes the new tiles too."""
    return StepKernels(batch, seq, hidden, nodes, window_size, sigmoid_scores)


@torch.library.custom_op(operator_name("step_update"), mutates_args=())
def step_update(
    product: torch.Tensor,
    input_terms: torch.Tensor,
    sentence_terms: torch.Tensor | None,
    cells: torch.Tensor,
    sentence_cells: torch.Tensor,
    mask: torch.Tensor,
    lengths: torch.Tensor,
    window_size: int,
    sigmoid_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launches `step_forward_kernel` (Eqs. 2 and 3 of one step): the product `h̃^{t-1} W_h^T`
    `(batch, seq, product width)`, `U x + b` `(batch, seq, blocks * hidden)`, the sentence terms
    `(batch, sentence width)` (`None` without sentence nodes), `c^{t-1}`, `c_g^{t-1}`, the mask and lengths ->
    `(h^t, c^t, g^t, c_g^t)` in the dtype of the cells, and the float32 statistics `(batch, 4, nodes, hidden)` that
    the backward reads. Any layout is taken (copied to a contiguous one here)."""
    kernels = StepKernels.for_cells(cells, sentence_cells, window_size, sigmoid_scores)
    return kernels.forward(*contiguous(product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths))


def step_update_outputs(cells, sentence_cells):
    """Empty `(h^t, c^t)` like `cells`, `(g^t, c_g^t)` like `sentence_cells`, and float32 statistics
    `(batch, 4, nodes, hidden)`."""
    batch, nodes, hidden = sentence_cells.shape
    new_states, new_cells = (kernel_buffer(cells, cells.shape) for _ in range(2))
    new_sentence_states, new_sentence_cells = (kernel_buffer(sentence_cells, sentence_cells.shape) for _ in range(2))
    statistics = kernel_buffer(sentence_cells, (batch, 4, nodes, hidden), torch.float32)
    return new_states, new_cells, new_sentence_states, new_sentence_cells, statistics


@step_update.register_fake
def _(product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths, window_size, sigmoid_scores):
    return step_update_outputs(cells, sentence_cells)


@torch.library.custom_op(operator_name("step_update_backward"), mutates_args=("d_input_terms", "d_product"))
def step_update_backward(
    d_states: torch.Tensor,
    d_output_states: torch.Tensor | None,
    d_cells: torch.Tensor | None,
    d_sentence_states: torch.Tensor | None,
    d_sentence_cells: torch.Tensor | None,
    d_input_terms: torch.Tensor,
    later_steps: bool,
    d_product: torch.Tensor,
    product: torch.Tensor,
    input_terms: torch.Tensor,
    sentence_terms: torch.Tensor | None,
    cells: torch.Tensor,
    sentence_cells: torch.Tensor,
    mask: torch.Tensor,
    lengths: torch.Tensor,
    statistics: torch.Tensor | None,
    window_size: int,
    sigmoid_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launches `step_backward_kernel` (and with sentence nodes `step_sums_kernel`), from the gradients of `h^t`
    (`d_states`, plus `d_output_states` where the encoder's output `h^t` has one), `c^t`, `g^t` and `c_g^t` (the
    cells' `None` after the last step, else each the pair of parts through the words and through the sentence nodes
    that this returned for the next step, stacked) -> the gradients of the sentence terms, and of `c^{t-1}` and
    `c_g^{t-1}`, each of the two a pair `(2, ...)` of the parts through the words and through the sentence nodes
    (one part without sentence nodes). The gradient of the product is written into `d_product` (contiguous, the
    product's shape and dtype; a tensor apart from `product`, so that no program's writes wait for another's reads).
    The gradient of `U x + b` is written into `d_input_terms` (float32, contiguous), or with `later_steps` added to
    it (the sum over the later steps). Any other layout is taken (copied to a contiguous one here)."""
    for name, tensor in (("d_input_terms", d_input_terms), ("d_product", d_product)):
        if not tensor.is_contiguous():
            raise ValueError(
                f"{name} must be contiguous (the kernel writes it in place), got strides {tensor.stride()}"
            )
    kernels = StepKernels.for_cells(cells, sentence_cells, window_size, sigmoid_scores)
    gradients = contiguous(d_states, d_output_states, d_cells, d_sentence_states, d_sentence_cells)
    inputs = contiguous(product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths, statistics)
    return kernels.backward(*gradients, d_input_terms, later_steps, d_product, *inputs)


def step_update_gradients(sentence_terms, cells, sentence_cells):
    """Empty gradients of the sentence terms (empty without sentence nodes), and the pairs of parts `(2, *shape)` of
    the gradients of `c^{t-1}` and `c_g^{t-1}` (one part without sentence nodes)."""
    parts = 2 if sentence_cells.shape[1] else 1
    d_sentence_terms = cells.new_empty(0)
    if sentence_terms is not None:
        d_sentence_terms = kernel_buffer(sentence_terms, sentence_terms.shape)
    d_prev_cells = kernel_buffer(cells, (parts, *cells.shape))
    d_prev_sentence_cells = kernel_buffer(sentence_cells, (parts, *sentence_cells.shape))
    return d_sentence_terms, d_prev_cells, d_prev_sentence_cells


@step_update_backward.register_fake
def _(d_states, d_output_states, d_cells, d_sentence_states, d_sentence_cells, d_input_terms, later_steps, d_product,
      product, input_terms, sentence_terms, cells, sentence_cells, *rest):  # fmt: skip
    return step_update_gradients(sentence_terms, cells, sentence_cells)


def words_weight(window_weight, forget_from_word, gates_on_mean, window_width: int) -> torch.Tensor:
    """`W_h` `(R, H)`: every weight that multiplies `h^{t-1}`, stacked so that one matmul per step computes them all
    (`docs/equations.md`, "The stacked weights"): Eq. 2's `W_d` for each window offset `d = 0 … 2w` (column block
    `d` of `word_window`, `(C·H, H)` each), then with sentence nodes Eq. 3's `U_f` `(K·H, H)` and `U_g`, `U_o`
    (`gates_on_mean`, the `h̄` columns of `sentence_gates`, `(2K·H, H)`)."""
    context_width, hidden = window_weight.shape[0], window_weight.shape[1] // window_width
    blocks = [window_weight.view(context_width, window_width, hidden).transpose(0, 1).flatten(0, 1)]
    if forget_from_word is not None:
        blocks += [forget_from_word, gates_on_mean]
    return torch.cat(blocks)


def sentences_weight(word_sentence, forget_weight, forget_bias, gates_on_sentences, gates_bias):
    """`(W_G, b_G)`: every weight that multiplies `γ^{t-1}`, stacked: Eq. 2's `V` `(C·H, K·H)`, Eq. 3's `W_f`
    `(K·H, K·H)`, `W_g` and `W_o` (`gates_on_sentences`, the `γ` columns of `sentence_gates`, `(2K·H, K·H)`), and
    their biases (none for `V`, whose bias is in `U x + b`)."""
    weight = torch.cat([word_sentence, forget_weight, gates_on_sentences])
    bias = torch.cat([word_sentence.new_zeros(word_sentence.shape[0]), forget_bias, gates_bias])
    return weight, bias


def dropped(states: torch.Tensor, rate: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    """What a step's matmuls read: `states` dropped out at `rate` (the draw of `nn.Dropout`), in `dtype`, and the
    dropout's keep mask (`None` at rate 0, where nothing is launched)."""
    if not rate:
        return states.to(dtype), None
    dropped_states, keep = torch.ops.aten.native_dropout(states, rate, True)
    return dropped_states.to(dtype), keep


def undropped(gradient: torch.Tensor, keep: torch.Tensor | None, rate: float) -> torch.Tensor:
    """The gradient of `dropped`'s input from that of its output."""
    return gradient if keep is None else torch.ops.aten.native_dropout_backward(gradient, keep, 1.0 / (1.0 - rate))


class StepInputs(NamedTuple):
    """What the backward keeps of one step: its inputs, as gradient checkpointing of every step would keep."""

    word_states: torch.Tensor
    """`h̃^{t-1}` `(batch, seq, H)`: dropped out, in the matmuls' dtype."""
    word_keep: torch.Tensor | None
    """Its dropout keep mask (`None` without dropout)."""
    word_cells: torch.Tensor
    """`c^{t-1}` `(batch, seq, H)`."""
    sentence_states: torch.Tensor | None
    """`γ̃^{t-1}` `(batch, K, H)`: dropped out, in the matmuls' dtype (`None` without sentence nodes)."""
    sentence_keep: torch.Tensor | None
    """Its dropout keep mask."""
    sentence_cells: torch.Tensor
    """`c_g^{t-1}` `(batch, K, H)`."""
    sentence_terms: torch.Tensor | None
    """`γ̃^{t-1} W_G^T + b_G` `(batch, W)` (`None` without sentence nodes)."""
    statistics: torch.Tensor
    """The sentence kernel's `(batch, 4, K, H)`, float32."""


@dataclass(frozen=True)
class RecurrenceOptions:
    """The settings of a `FusedRecurrence`: `num_steps` (`T`), `window_size` (`w`), `sigmoid_scores`
    (`gate_normalization == "sigmoid_softmax"`) and `dropout_rate` (the hidden dropout, 0 in evaluation)."""

    num_steps: int
    window_size: int
    sigmoid_scores: bool
    dropout_rate: float


def step_launchers(cells, sentence_cells, options: RecurrenceOptions):
    """The two launches of a step as functions of its tensors, `(forward, backward)` (arguments as `step_update`'s
    and `step_update_backward`'s, less the options): under `torch.compile` the custom operators, which keep the
    kernels opaque to the graph, and under the profiler too, where each launch then shows as one named operator (the
    launch counts of `run_scripts/benchmarks/launch_counts.py`); otherwise the kernels launched directly
    (`StepKernels`), their grids and options worked out here once for all steps, without the custom operators'
    dispatch (the same launches, for a fraction of the host time)."""
    if torch.compiler.is_compiling() or torch._C._autograd._profiler_enabled():
        settings = {"window_size": options.window_size, "sigmoid_scores": options.sigmoid_scores}
        return functools.partial(step_update, **settings), functools.partial(step_update_backward, **settings)
    kernels = StepKernels.for_cells(cells, sentence_cells, options.window_size, options.sigmoid_scores)
    return kernels.forward, kernels.backward


KEPT_PRODUCTS_BYTES = 128 * 2**20
"""The most memory that the fused recurrence keeps every step's product `P = h̃^{t-1} W_h^T` in, from the forward to
the backward, off a GPU (on one: `KEPT_PRODUCTS_FREE_FRACTION`). Short batches, where a step's matmuls are
launch-bound, fit: the backward then reads `P` instead of recomputing it, and takes the gradient of `W_h` in one
matmul over all steps (two operators fewer per step). Longer ones recompute `P` step by step and sum the gradient of
`W_h` step by step, holding one `P` at a time (the paper configuration in float32 keeps `P` up to about 500 words per
batch: 10 sentences of 50 words, or 32 of 16)."""
KEPT_PRODUCTS_FREE_FRACTION = 0.25
"""On a CUDA device, the kept products take at most this fraction of the memory the device had free at the process's
first fused forward on it (`kept_products_limit`). The paper NER configuration's products at 32 sentences of 512
words in bf16 take 2.1 GB (9 steps of `(16,384, 7,200)`), kept on a GPU with more than 8.5 GB free (an H200 has
about 140 GB); the rest of a step (its inputs kept for the backward, `dP`, the optimizer's state) keeps the other
three quarters."""


@torch.compiler.assume_constant_result  # `torch.compile` reads it once, as a constant (it is one)
@functools.cache
def free_device_memory(device: torch.device) -> int:
    """Bytes free on the CUDA `device` at the first call for it: free on the device, plus what PyTorch's caching
    allocator holds unused (free for PyTorch's tensors, not the device's). One query a process and device, so that the
    kept products' limit stays the same at every step (a later query would count the memory the step before kept)."""
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def kept_products_limit(device: torch.device) -> int:
    """The most bytes of products the fused recurrence keeps on `device`: `KEPT_PRODUCTS_FREE_FRACTION` of the memory
    a CUDA device had free at the first query (`free_device_memory`), `KEPT_PRODUCTS_BYTES` on any other device."""
    if device.type != "cuda":
        return KEPT_PRODUCTS_BYTES
    return int(KEPT_PRODUCTS_FREE_FRACTION * free_device_memory(device))


def kept_products(num_steps: int, states: torch.Tensor, words_weight: torch.Tensor) -> torch.Tensor | None:
    """Room `(T, batch * seq, R)` for the product of every step with `words_weight` `(R, H)`, where it takes at
    most `kept_products_limit` on the states' device, else `None` (the backward recomputes them). Decided by the
    shapes and that limit alone."""
    batch, seq, _ = states.shape
    shape = (num_steps, batch * seq, words_weight.shape[0])
    if shape[0] * shape[1] * shape[2] * words_weight.element_size() > kept_products_limit(states.device):
        return None
    return kernel_buffer(words_weight, shape)


def d_product_room(product: torch.Tensor, step_products: tuple, step: int) -> torch.Tensor:
    """Where step `step`'s backward writes `dP` (like `product` `(batch, seq, R)`): the kept product of step
    `step + 1`, which that step's backward (run before this one) has read for the last time, or a new tensor where
    there is none (the last step, or products recomputed)."""
    if step + 1 < len(step_products) and step_products[step + 1] is not None:
        return step_products[step + 1].view_as(product)
    return kernel_buffer(product, product.shape)


def per_step(products: torch.Tensor | None, num_steps: int) -> tuple:
    """Each step's kept product `(batch * seq, R)` of `products` `(T, batch * seq, R)`, or `None` for each step."""
    return (None,) * num_steps if products is None else products.unbind(0)


class FusedRecurrence(torch.autograd.Function):
    """All `num_steps` steps of Eqs. 2-3 with the Triton kernels, forward and backward, as
    `SLSTMStateTransition.forward` computes them step by step.

    Each step is two matmuls and one kernel launch: `P = h̃^{t-1} W_h^T` (every weight on the word states,
    `words_weight`: the kernel reads `W ξ_i` as the sum of the window blocks of `P` at the neighbours' rows, `U_f h_j`
    from its block, and `U h̄` as the mean of the `U_g h_j`, `U_o h_j` blocks) and `γ̃^{t-1} W_G^T + b_G` (every weight
    on the sentence states, `sentences_weight`). Each step's inputs are saved (`StepInputs`, what gradient
    checkpointing of every step would keep), and on short batches every step's `P` too (`kept_products_limit`). The
    backward launches the backward kernels, which write `dP` into a tensor apart from `P` (`d_product_room`), then two
    matmuls for the gradients of `h^{t-1}` and `γ^{t-1}`. With the products kept, each step's `dP` takes the kept
    product of the step after it, which that step's backward has read for the last time (the last step's, a tensor
    of its own): the gradient of `W_h` is one matmul for the last step and one over all the others at the end (a
    later backward through the same graph, `retain_graph=True`, finds `dP` there and recomputes `P`); without, the
    backward recomputes each step's `P` and sums the gradient of `W_h` step by step in place, holding one `P` and one
    `dP` at a time (the backward's largest tensors). That of `W_G` is one matmul over all steps at the end (its inputs
    are one vector per sentence). The weights come stacked (autograd splits their gradients back to the layers).

    Inputs: `U x + b` `(batch, seq, C·H)`, `h^0`, `c^0` `(batch, seq, H)`, `g^0`, `c_g^0` `(batch, K, H)`, the float
    mask `(batch, seq, 1)` and lengths `(batch, 1)`; `W_h` `(R, H)` (its dtype is the matmuls', autocast's where
    autocast is on), `W_G` `(W, K·H)` and `b_G` `(W,)` (both `None` without sentence nodes); the `RecurrenceOptions`.
    Returns `h^1 … h^T` and `g^T` (`(batch, 0, H)` without sentence nodes). Tensors of any layout are taken: the
    inputs and the upstream gradients are made contiguous once, as the kernels read them.
    """

    @staticmethod
    def forward(
        ctx, input_terms, h, c, g, c_g, mask, lengths, words_weight, sentences_weight, sentences_bias, options
    ):
        ctx.set_materialize_grads(False)
        rate, dtype = options.dropout_rate, words_weight.dtype
        with torch.autocast(h.device.type, enabled=False):
            input_terms, mask, lengths, c, c_g = contiguous(input_terms, mask, lengths, c, c_g)
            update, _ = step_launchers(c, c_g, options)
            words_weight_t = words_weight.t()  # (H, R)
            sentences_weight_t = None if sentences_weight is None else sentences_weight.t()  # (K·H, W)
            products = kept_products(options.num_steps, h, words_weight)  # (T, batch * seq, R) or None
            saved, outputs = [], []
            for step_product in per_step(products, options.num_steps):
                h_in, h_keep = dropped(h, rate, dtype)  # h̃^{t-1}
                product = torch.mm(h_in.flatten(0, 1), words_weight_t, out=step_product).view(*h.shape[:2], -1)
                g_in = g_keep = sentence_terms = None
                if sentences_weight is not None:
                    g_in, g_keep = dropped(g, rate, dtype)  # γ̃^{t-1}
                    sentence_terms = torch.addmm(sentences_bias, g_in.flatten(1), sentences_weight_t)  # (batch, W)
                h, new_c, g, new_c_g, statistics = update(product, input_terms, sentence_terms, c, c_g, mask, lengths)
                saved += StepInputs(h_in, h_keep, c, g_in, g_keep, c_g, sentence_terms, statistics)
                del product  # without `products`: freed before the next step allocates its own
                c, c_g = new_c, new_c_g
                outputs.append(h)
        ctx.save_for_backward(input_terms, mask, lengths, words_weight, sentences_weight, products, *saved)
        ctx.options = options
        ctx.products_hold_d_products = False  # set by the backward, which writes dP over all but the first
        return (*outputs, g)

    @staticmethod
    def backward(ctx, *d_outputs):
        options, rate = ctx.options, ctx.options.dropout_rate
        input_terms, mask, lengths, words_weight, sentences_weight, products, *saved = ctx.saved_tensors
        if ctx.products_hold_d_products:  # a later backward through the graph (`retain_graph=True`): recompute P
            products = None
        elif products is not None:
            ctx.products_hold_d_products = True  # this backward writes dP over all but the first
        width = len(StepInputs._fields)
        steps = [StepInputs(*saved[start : start + width]) for start in range(0, len(saved), width)]
        # d h^1 … d h^T, d g^T: each None where the loss has none, and of any layout (expanded, sliced, ...).
        *d_word_outputs, d_sentence_states = contiguous(*d_outputs)
        last = steps[-1]
        _, update_backward = step_launchers(last.word_cells, last.sentence_cells, options)
        d_states = torch.zeros_like(last.word_cells) if d_word_outputs[-1] is None else d_word_outputs[-1]
        if d_sentence_states is None:
            d_sentence_states = torch.zeros_like(last.sentence_cells)
        d_output_states = (*d_word_outputs[:-1], None)  # the encoder outputs' gradients beside the recurrence's
        d_cells = d_sentence_cells = None  # none after the last step
        d_words_weight = None
        d_input_terms = kernel_buffer(input_terms, input_terms.shape, torch.float32)  # summed over the steps
        d_sentence_terms_per_step = []
        step_products = per_step(products, options.num_steps)
        with torch.autocast(input_terms.device.type, enabled=False):
            for step in reversed(range(options.num_steps)):
                inputs = steps[step]
                flat_h_in = inputs.word_states.flatten(0, 1)  # (batch * seq, H)
                product = step_products[step]
                if product is None:  # recomputed
                    product = torch.mm(flat_h_in, words_weight.t())
                product = product.view(*inputs.word_cells.shape[:2], -1)  # (batch, seq, R)
                d_product = d_product_room(product, step_products, step)
                # The cells' gradients come in two parts (through the words, through the sentence nodes): (2, ...).
                d_sentence_terms, d_cells, d_sentence_cells = update_backward(
                    d_states, d_output_states[step], d_cells, d_sentence_states, d_sentence_cells, d_input_terms,
                    step < options.num_steps - 1, d_product, product, input_terms, inputs.sentence_terms,
                    inputs.word_cells, inputs.sentence_cells, mask, lengths, inputs.statistics,
                )  # fmt: skip
                if sentences_weight is not None:
                    d_sentence_terms_per_step.append(d_sentence_terms)
                    d_g_in = torch.mm(d_sentence_terms, sentences_weight)  # (batch, K·H)
                    d_sentence_states = undropped(d_g_in.view_as(inputs.sentence_cells), inputs.sentence_keep, rate)
                flat_d_product = d_product.flatten(0, 1)  # dP: (batch * seq, R)
                d_states = undropped(torch.mm(flat_d_product, words_weight).view_as(inputs.word_cells),
                                     inputs.word_keep, rate)  # fmt: skip
                if products is None or step == options.num_steps - 1:  # W_h's gradient of the dP held apart
                    if d_words_weight is None:
                        d_words_weight = torch.mm(flat_d_product.t(), flat_h_in)
                    else:
                        d_words_weight.addmm_(flat_d_product.t(), flat_h_in)
                del product, d_product, flat_d_product  # freed before the next step allocates its own
            if products is not None and options.num_steps > 1:  # dP of the steps before the last, in the kept
                # products after the first: one matmul for their part of W_h's gradient
                word_inputs = torch.cat([inputs.word_states for inputs in steps[:-1]]).flatten(0, 1)
                d_words_weight.addmm_(products[1:].flatten(0, 1).t(), word_inputs)
            d_sentences_weight = d_sentences_bias = None
            if sentences_weight is not None:
                d_terms = torch.cat(d_sentence_terms_per_step[::-1])  # (steps * batch, W)
                sentence_inputs = torch.cat([inputs.sentence_states.flatten(1) for inputs in steps])  # (.., K·H)
                d_sentences_weight, d_sentences_bias = torch.mm(d_terms.t(), sentence_inputs), d_terms.sum(0)
        return (d_input_terms, d_states, d_cells.sum(0), d_sentence_states, d_sentence_cells.sum(0), None, None,
                d_words_weight, d_sentences_weight, d_sentences_bias, None)  # fmt: skip


def fused_recurrence(transition, h, c, g, c_g, input_terms, mask, lengths, options: RecurrenceOptions):
    """`FusedRecurrence` of the step module `transition` (`SLSTMStateTransition`): its weights stacked once, in the
    matmuls' dtype (`input_terms`'s, autocast's where autocast is on) -> `((h^1, …, h^T), g^T)`."""
    nodes, hidden = g.shape[1:]
    with torch.autocast(h.device.type, enabled=False):
        forget_from_word = gates_on_mean = None
        sentence_weights = (None, None)
        if nodes:
            forget_from_word = transition.word_forget_from_word.weight
            gates_on_sentences, gates_on_mean = transition.sentence_gates.weight.split([nodes * hidden, hidden], dim=1)
            sentence_weights = sentences_weight(
                transition.word_sentence.weight, transition.word_forget_from_sentence.weight,
                transition.word_forget_from_sentence.bias, gates_on_sentences, transition.sentence_gates.bias,
            )  # fmt: skip
        weight = words_weight(
            transition.word_window.weight, forget_from_word, gates_on_mean, 2 * options.window_size + 1
        )
        dtype = input_terms.dtype
        weights = [None if w is None else w.to(dtype) for w in (weight, *sentence_weights)]
    *states, sentence_states = FusedRecurrence.apply(input_terms, h, c, g, c_g, mask, lengths, *weights, options)
    return tuple(states), sentence_states
