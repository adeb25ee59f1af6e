"""Matmul FLOPs (2 per multiply-add; elementwise work is not counted) and the least bytes moved of one call of a
benchmarked encoder: the work a timed row is credited with."""

from baselines import BaselineEncoderConfig
from modeling_slstm.configuration_slstm import SLSTMConfig


def slstm_blocks(config: SLSTMConfig) -> tuple[int, int, int, int]:
    """`(window width 2w+1, output gate 0/1, context blocks C, input blocks I)` of an S-LSTM step: C and I count the
    gate/content blocks that the window states and the input each feed (`2w+1` window gates, `K` sentence gates and
    the content gate are normalized together; then the output gate and, unless context-independent, the content)."""
    width = 2 * config.window_size + 1
    output_gate = 0 if config.remove_output_gate else 1
    normalized = width + config.num_sentence_nodes + 1
    context_blocks = normalized + output_gate + (0 if config.context_independent_content else 1)
    return width, output_gate, context_blocks, normalized + output_gate + 1


def slstm_forward_flops(config: SLSTMConfig, batch: int, length: int) -> float:
    r"""
    Matmul FLOPs of one S-LSTM forward pass over `batch` sentences of `length` tokens (2 FLOPs per multiply-add).

    Per token, once: the input term `U x_i`, `2·E·(G+1)·H` with `G` gate/content blocks. Per token and step: the window
    term `W ξ_i`, `2·(2w+1)·H·C·H` with `C` context blocks (`2w+1` window gates, `K` sentence gates, the content gate,
    the output gate and the content: 7 for w=1, K=1), and the sentence node's per-word forget gate `U_f h_i`,
    `2·H·K·H`. Per sentence and step (small): `V g` (`2·K·H·C·H`), the sentence gates (`2·(K+1)·H·(1+o)·K·H`) and
    `W_f g` (`2·(K·H)²`). Forward+backward is counted as 3x forward (two matmuls of the same size per forward matmul).
    The plain reference (`slstm-reference`) is credited with these FLOPs too, the work the equations need, although it
    does more (`U x_i` and `V g` per token and step), so that GFLOP/s compare like tokens/s.
    """
    hidden, nodes = config.hidden_size, config.num_sentence_nodes
    width, output_gate, context_blocks, input_blocks = slstm_blocks(config)
    tokens = batch * length
    flops = 2.0 * tokens * config.embedding_dim * input_blocks * hidden
    per_token_step = 2.0 * width * hidden * context_blocks * hidden
    per_sentence_step = 0.0
    if nodes:
        per_token_step += 2.0 * hidden * nodes * hidden
        per_sentence_step = 2.0 * nodes * hidden * context_blocks * hidden
        per_sentence_step += 2.0 * (nodes + 1) * hidden * (1 + output_gate) * nodes * hidden
        per_sentence_step += 2.0 * (nodes * hidden) ** 2
    return flops + config.num_steps * (tokens * per_token_step + batch * per_sentence_step)


def baseline_forward_flops(config: BaselineEncoderConfig, batch: int, length: int) -> float:
    """Matmul FLOPs of one baseline forward pass (LSTM gate matmuls, convolutions, attention and feed-forward)."""
    tokens = batch * length
    hidden, embedding, layers = config.hidden_size, config.embedding_dim, config.num_layers
    widths = [embedding] + [hidden] * (layers - 1)  # input width of each layer
    if config.encoder_type == "bilstm":
        units = hidden // 2
        return sum(2 * 2.0 * tokens * 4 * units * (width + units) for width in widths)  # 2 directions, W x + U h
    if config.encoder_type == "cnn":
        return sum(2.0 * tokens * config.kernel_size * width * hidden for width in widths)
    # transformer: input projection, then per layer QKV + output projections, attention scores and mixing, FFN
    per_layer = 2.0 * tokens * 4 * hidden * hidden + 2 * 2.0 * batch * length * length * hidden
    per_layer += 2 * 2.0 * tokens * hidden * config.intermediate_size
    return 2.0 * tokens * embedding * hidden + layers * per_layer


def step_flops(config, batch: int, length: float, mode: str) -> float:
    """FLOPs of one timed call: forward, or forward+backward (`mode == "train"`, 3x forward). `length` may be a mean
    length (`Workload`): every count here is linear in the tokens except the Transformer's attention."""
    if isinstance(config, SLSTMConfig):
        forward = slstm_forward_flops(config, batch, length)
    else:
        forward = baseline_forward_flops(config, batch, length)
    return forward * (3.0 if mode == "train" else 1.0)


def slstm_forward_elements(config: SLSTMConfig, batch: int, length: float) -> float:
    r"""
    Elements that one S-LSTM forward pass must move between the GPU's memory and its cores at the least, when every
    matrix product is one cuBLAS call and everything between two products is one fused kernel (the fused step).

    Once: the word embeddings read (`E` per token) and the input term `U x_i` written (`I·H` per token, `I` input
    blocks). Per step: the step's weights read (`W`, `U_f`, the sentence node's matrices: the parameters the FLOP
    count multiplies by), the input term read again (`I·H` per token), the word states `h, c` read and written
    (`4H` per token), the window product written by its GEMM and read by the fused kernel (`2·C·H` per token with `C`
    context blocks), and the sentence node's state (`4·K·H` per sentence, small). Forward+backward is counted as 3x
    forward, as the FLOPs are.
    """
    hidden, nodes = config.hidden_size, config.num_sentence_nodes
    width, output_gate, context_blocks, input_blocks = slstm_blocks(config)
    tokens = batch * length
    step_weights = width * hidden * context_blocks * hidden + hidden * nodes * hidden
    if nodes:
        step_weights += nodes * hidden * context_blocks * hidden
        step_weights += (nodes + 1) * hidden * (1 + output_gate) * nodes * hidden + (nodes * hidden) ** 2
    once = tokens * (config.embedding_dim + input_blocks * hidden)
    per_step = step_weights + tokens * (input_blocks * hidden + 4 * hidden + 2 * context_blocks * hidden)
    per_step += batch * 4 * nodes * hidden
    return once + config.num_steps * per_step


def baseline_forward_elements(config: BaselineEncoderConfig, batch: int, length: float) -> float:
    """Elements a BiLSTM forward pass must move at the least (cuDNN keeps the recurrent weights and `c` on chip): per
    layer its weights once, its input read, the input term `W x` written and read (`2·4·H` per token, both directions
    together) and the output `h` written. NaN for the other baselines (no estimate)."""
    if config.encoder_type != "bilstm":
        return float("nan")
    tokens = batch * length
    hidden, embedding, layers = config.hidden_size, config.embedding_dim, config.num_layers
    units = hidden // 2
    elements = tokens * embedding  # the embedding lookup's reads
    for width in [embedding] + [hidden] * (layers - 1):
        weights = 2 * 4 * units * (width + units)
        elements += weights + tokens * (width + 2 * 4 * hidden + hidden)
    return elements


def step_bytes(config, batch: int, length: float, mode: str, element_bytes: int) -> float:
    """Bytes one timed call must move at the least (`slstm_forward_elements`, `baseline_forward_elements`), with
    `element_bytes` per element (4 float32, 2 bf16); forward+backward 3x forward."""
    if isinstance(config, SLSTMConfig):
        forward = slstm_forward_elements(config, batch, length)
    else:
        forward = baseline_forward_elements(config, batch, length)
    return forward * element_bytes * (3.0 if mode == "train" else 1.0)
