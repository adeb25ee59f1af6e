#!/usr/bin/env python
"""Exports a saved S-LSTM model (encoder, sequence classifier or token classifier, softmax or CRF) to ONNX and checks
the file against PyTorch in onnxruntime.

    pip install -e ".[onnx]"
    python run_scripts/utilities/export_onnx.py --model_dir outputs/demo-wnut16 --output outputs/demo-wnut16.onnx

The export is `torch.onnx.export(..., dynamo=True)` with a dynamic batch size and sequence length (and word width for
character features). The check runs the file on sentences of another batch size and length than the export's, with
padding, and prints the largest difference from PyTorch at real positions; for a CRF tagger it also requires the same
Viterbi path (the argmax of its logits). It fails (exit status 1) beyond `--tolerance`.

Inputs of the ONNX graph: `input_ids`, `attention_mask` (and `char_ids`; and `subword_ids`, `subword_attention_mask`,
`subword_to_word` for a model with a feature encoder), int64, as the saved tokenizer returns them
with `return_tensors="np"`; outputs: `logits` for task models, `last_hidden_state` and `pooler_output` for the encoder.
A CRF graph handles up to `modeling_slstm.crf.MAX_TRACED_LENGTH` tokens per sentence.
"""

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from modeling_slstm.tokenization_slstm import SUBWORD_INPUT_NAMES
from run_scripts.training.arguments import parse_arguments
from run_scripts.training.usage_errors import DebugArguments, MissingFileError, check_saved_model_dir, run_script

# Sentences to trace the export with, and different ones (more of them, other lengths) to check it on.
EXPORT_SENTENCES = ["Just landed in New York.", "Heading to Madison Square Garden tonight with friends."]
CHECK_SENTENCES = [
    "U.S. officials met in Geneva on Tuesday, the e-mail said.",
    "Hi!",
    "Taylor Swift plays Madison Square Garden.",
]


@dataclass
class ExportArguments(DebugArguments):
    model_dir: str = field(metadata={"help": "folder of a saved model and its tokenizer (a training script's output)"})
    output: str = field(default="model.onnx", metadata={"help": "the ONNX file to write"})
    tolerance: float = field(default=1e-4, metadata={"help": "largest allowed difference from PyTorch"})


class NamedOutputs(nn.Module):
    """The tensors of a model's output as a tuple, in the order of `names`, for a graph with fixed outputs.

    Args:
        model (`PreTrainedModel`): the model to export.
        names (`tuple[str]`): output fields to return, e.g. `("logits",)`.
    """

    def __init__(self, model: nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model = model
        self.names = names
        self.train(model.training)  # the export checks the mode of the module it is given, this wrapper

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        char_ids: torch.Tensor | None = None,
        subword_ids: torch.Tensor | None = None,
        subword_attention_mask: torch.Tensor | None = None,
        subword_to_word: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """`(batch, seq)`, `(batch, seq)`, `(batch, seq, word_width)`, then the feature encoder's three
        `(batch, subwords)` inputs -> the `names` outputs. Inputs the model does not read are left out."""
        given = {"char_ids": char_ids, "subword_ids": subword_ids, "subword_attention_mask": subword_attention_mask,
                 "subword_to_word": subword_to_word}  # fmt: skip
        optional = {name: value for name, value in given.items() if value is not None}
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, **optional, return_dict=True)
        return tuple(outputs[name] for name in self.names)


AUTO_CLASSES = {
    "ForTokenClassification": (AutoModelForTokenClassification, ("logits",)),
    "ForSequenceClassification": (AutoModelForSequenceClassification, ("logits",)),
}
ENCODER = (AutoModel, ("last_hidden_state", "pooler_output"))


def load(model_dir: str) -> tuple[nn.Module, tuple[str, ...], object]:
    """The saved model (eval mode), the names of its exported outputs and its tokenizer."""
    check_saved_model_dir(model_dir)
    config = AutoConfig.from_pretrained(model_dir, trust_remote_code=True)
    architecture = (config.architectures or [""])[0]
    auto_class, names = next(
        (found for suffix, found in AUTO_CLASSES.items() if architecture.endswith(suffix)), ENCODER
    )
    model = auto_class.from_pretrained(model_dir, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    return model, names, tokenizer


def encode(tokenizer, sentences: list[str]) -> dict[str, torch.Tensor]:
    """The model inputs of `sentences`, padded: int64 `input_ids`, `attention_mask` (and `char_ids`)."""
    encoded = tokenizer(sentences, padding=True, return_tensors="pt")
    return {name: tensor.long() for name, tensor in encoded.items() if name != "token_type_ids"}


def dynamic_shapes(inputs: dict[str, torch.Tensor]) -> dict[str, dict]:
    """Batch and sequence length dynamic for every input, the word width too for `char_ids`, the number of subwords
    for the feature encoder's inputs. The length is bounded by what a traced CRF handles (see
    `crf.MAX_TRACED_LENGTH`)."""
    from modeling_slstm.crf import MAX_TRACED_LENGTH

    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=MAX_TRACED_LENGTH)
    shapes = {name: {0: batch, 1: seq} for name in inputs}
    if "char_ids" in inputs:
        shapes["char_ids"] = {0: batch, 1: seq, 2: torch.export.Dim("word_width")}
    subwords = torch.export.Dim("subwords")
    for name in SUBWORD_INPUT_NAMES:
        if name in inputs:
            shapes[name] = {0: batch, 1: subwords}
    return shapes


def export(model: nn.Module, names: tuple[str, ...], inputs: dict[str, torch.Tensor], path: str) -> None:
    wrapped = NamedOutputs(model, names)
    program = torch.onnx.export(
        wrapped, (), path, kwargs=inputs, dynamic_shapes=dynamic_shapes(inputs), output_names=list(names), dynamo=True
    )
    program.save(path)


def compare(model, names, inputs: dict[str, torch.Tensor], path: str) -> dict[str, float]:
    """Runs the ONNX file in onnxruntime on `inputs`; returns the largest absolute difference from PyTorch per output,
    at real positions. Raises `AssertionError` if a CRF tagger's Viterbi path differs."""
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feed = {node.name: inputs[node.name].numpy() for node in session.get_inputs()}
    onnx_outputs = dict(zip(names, (torch.from_numpy(array) for array in session.run(list(names), feed))))
    with torch.no_grad():
        torch_outputs = NamedOutputs(model, names)(**inputs)
    real = inputs["attention_mask"].bool()  # (batch, seq)
    differences = {}
    for name, expected in zip(names, torch_outputs):
        got = onnx_outputs[name]
        at_real = (got - expected)[real] if expected.dim() == 3 else got - expected
        differences[name] = at_real.abs().max().item()
    if getattr(model, "crf", None) is not None and not torch.equal(
        onnx_outputs["logits"].argmax(-1)[real], torch_outputs[0].argmax(-1)[real]
    ):
        raise AssertionError(f"{path}: the ONNX CRF decodes another tag path than PyTorch")
    return differences


def main(argv=None) -> dict[str, float]:
    args = parse_arguments(ExportArguments, argv, description=__doc__)
    if not Path(args.output).resolve().parent.is_dir():
        raise MissingFileError(f"--output {args.output}: the folder {Path(args.output).parent} does not exist")
    model, names, tokenizer = load(args.model_dir)
    export(model, names, encode(tokenizer, EXPORT_SENTENCES), args.output)
    differences = compare(model, names, encode(tokenizer, CHECK_SENTENCES), args.output)
    print(f"Wrote {args.output} ({type(model).__name__}; outputs {', '.join(names)})")
    for name, difference in differences.items():
        print(f"  {name}: max |onnxruntime - PyTorch| = {difference:.2e} at real positions of a new, padded batch")
    if max(differences.values()) > args.tolerance:
        raise SystemExit(f"difference above --tolerance {args.tolerance}")
    return differences


if __name__ == "__main__":
    run_script(main)
