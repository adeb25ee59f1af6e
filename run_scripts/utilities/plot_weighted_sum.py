#!/usr/bin/env python
"""Draws the weighted-sum map of one sentence: how much of each word's content every final cell holds.

    python run_scripts/utilities/plot_weighted_sum.py --model_dir outputs/sst-simplified \\
        --sentence "A gripping, funny film." --output weighted_sum.png

The model (any S-LSTM checkpoint with its tokenizer, trained with `context_independent_content=True`) makes every
final cell an exact element-wise weighted sum of the words' contents, `c_i = Σ_j w_ij ⊙ u_j`
(`modeling_slstm.weighted_sum_decomposition`). The heatmap shows `||w_ij||_2` over the hidden dimensions, as Table 4
of Levy et al. (2018) does, transposed: row `i` is the word whose cell is the sum, column `j` the word whose content
is weighted; the rows under the line are the sentence nodes' cells. Needs matplotlib (`pip install
"modeling-slstm[plots]"`).
"""

from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer, BatchEncoding

from modeling_slstm import weighted_sum_decomposition
from run_scripts.training.arguments import parse_arguments
from run_scripts.training.usage_errors import DebugArguments, UsageError, run_script


@dataclass
class PlotArguments(DebugArguments):
    model_dir: str = field(
        metadata={
            "help": "folder of a saved S-LSTM model (any task head) and its tokenizer, trained with "
            "context_independent_content=True"
        }
    )
    sentence: str = field(metadata={"help": "the sentence to decompose, as one quoted argument"})
    output: str = field(
        default="weighted_sum.png", metadata={"help": "image to write; the suffix picks the format (.png, .pdf, .svg)"}
    )

    def __post_init__(self):
        if not self.sentence.strip():
            raise UsageError("--sentence is empty; give the sentence to decompose as one quoted argument")


def token_labels(encoding: BatchEncoding, sentence: str) -> list[str]:
    """The text of every token of the (single) encoded `sentence`: the words as written (also those the vocabulary
    maps to `<unk>`), and the token itself for the framing tokens `<s>`/`</s>`."""
    labels = []
    for index, token in enumerate(encoding.tokens()):
        span = encoding.token_to_chars(index)
        labels.append(sentence[span.start : span.end] if span is not None and span.end > span.start else token)
    return labels


def weight_norms(word_weights: torch.Tensor, sentence_weights: torch.Tensor) -> torch.Tensor:
    """`||w_ij||_2` over the hidden dimensions of one sentence: word rows `(seq, seq, hidden)` and sentence-node rows
    `(num_sentence_nodes, seq, hidden)` -> `(seq + num_sentence_nodes, seq)`."""
    return torch.linalg.vector_norm(torch.cat([word_weights, sentence_weights]), dim=-1)


def draw(norms: torch.Tensor, labels: list[str], output: Path) -> None:
    """Heatmap of `norms` `(seq + num_sentence_nodes, seq)` with `labels` on both axes, the sentence nodes last."""
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError('Drawing the map needs matplotlib: pip install "modeling-slstm[plots]"') from error

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seq = len(labels)
    num_sentence_nodes = norms.shape[0] - seq
    row_labels = labels + [f"g{k + 1}" if num_sentence_nodes > 1 else "g" for k in range(num_sentence_nodes)]
    size = 1.5 + 0.35 * max(seq, 8)
    figure, axis = plt.subplots(figsize=(size + 1.5, size * norms.shape[0] / seq))
    image = axis.imshow(norms.float().numpy(), cmap="Greys", vmin=0.0, aspect="equal")
    axis.set_xticks(range(seq), labels, rotation=90)
    axis.set_yticks(range(len(row_labels)), row_labels)
    axis.set_xlabel("word j (content weighted)")
    axis.set_ylabel("cell: word i, then sentence node")
    if num_sentence_nodes:
        axis.axhline(seq - 0.5, color="tab:red", linewidth=1.0)
    figure.colorbar(image, ax=axis, label=r"$\|w_{ij}\|_2$")
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=150)
    plt.close(figure)


def plot(model_dir: str, sentence: str, output: str) -> torch.Tensor:
    """Decompose `sentence` with the model saved in `model_dir` and draw its map to `output`; returns the norms
    `(seq + num_sentence_nodes, seq)`."""
    model = AutoModel.from_pretrained(model_dir).eval()  # the encoder of whatever task model was saved
    # trust_remote_code: AutoTokenizer reads the model config, whose model type is defined by the shipped code.
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    encoding = tokenizer(sentence, return_tensors="pt")
    maps = weighted_sum_decomposition(model, **encoding)
    norms = weight_norms(maps.word_weights[0], maps.sentence_weights[0])
    draw(norms, token_labels(encoding, sentence), Path(output))
    return norms


def main(argv=None):
    args = parse_arguments(PlotArguments, argv, description=__doc__)
    plot(args.model_dir, args.sentence, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    run_script(main)
