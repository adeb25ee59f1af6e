#!/usr/bin/env python
"""The CRF's share of a NER training step: is it worth fusing?

A training step of the paper's NER tagger (`SLSTMForTokenClassification`, S-LSTM of `timed_models.slstm_config`
with a CRF over the BIOES tags of CoNLL-2003's labels) runs the CRF twice: the forward algorithm for the loss (with
its backward) and the max-marginal Viterbi pass for the logits. Timed in turn on the same batches:

- `step`: the whole training step (forward, loss, backward);
- `crf`: the CRF alone on that step's own inputs (recorded by a hook on `model.crf`): the loss with its backward,
  then the max-marginals; `forward algorithm` and `viterbi` the two halves alone;
- `step without CRF`: the same tagger with a softmax head.

`crf_share` is `crf / step`. Workloads: a random 32x32 batch and, with `--data_dir`, CoNLL-2003 NER training batches
as `run_ner.py` draws them (`workloads.real_workload`). Writes `<name>.csv` and `<name>.md`.

    python run_scripts/benchmarks/benchmark_crf_share.py --device cuda --data_dir ../shared/data --output_dir out
"""

import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from modeling_slstm.modeling_slstm import SLSTMForTokenClassification
from run_scripts.benchmarks.support.csv_tables import write_csv
from run_scripts.benchmarks.support.speed_report import markdown_table
from run_scripts.benchmarks.support.timed_models import VARIANTS, TimedModel, skip_reason, slstm_config
from run_scripts.benchmarks.support.timing import Timing, machine_info, time_interleaved
from run_scripts.benchmarks.support.workloads import Workload, random_workload, real_workloads
from run_scripts.training.arguments import check_choices, parse_arguments

CONLL_LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
PARTS = ("step", "crf", "forward algorithm", "viterbi", "step without CRF")
FIELDS = ["device_name", "torch", "variant", "data", "batch", "length", "batches"]


def part_key(part: str) -> str:
    """The CSV column of a part's milliseconds: `forward algorithm` -> `forward_algorithm_ms`."""
    return part.replace(" ", "_") + "_ms"


FIELDS += [part_key(part) for part in PARTS] + ["crf_share"]


@dataclass
class CRFShareArguments:
    """Arguments of benchmark_crf_share.py."""

    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda"})
    variants: list[str] = field(default_factory=lambda: ["fp32", "bf16"], metadata={"help": "fp32, bf16"})
    lengths: list[int] = field(default_factory=lambda: [32], metadata={"help": "random batches of 32 x these"})
    data_dir: Path | None = field(default=None, metadata={"help": "the shared data folder (conll2003/ner/)"})
    batch_sizes: list[int] = field(default_factory=lambda: [10, 32], metadata={"help": "real batch sizes"})
    real_batches: int = field(default=16, metadata={"help": "CoNLL-2003 batches per timed call"})
    repeats: int = field(default=5)
    min_time: float = field(default=0.5)
    output_dir: Path = field(default=Path("."))
    name: str = field(default="crf_share")

    def __post_init__(self):
        check_choices("variants", self.variants, ["fp32", "bf16"])
        self.output_dir = Path(self.output_dir)


def tagger(use_crf: bool, device: torch.device) -> SLSTMForTokenClassification:
    """The paper's NER tagger: BIOES head over CoNLL-2003's IOB2 labels, with the CRF or a softmax; seed 0."""
    config = slstm_config(
        id2label=dict(enumerate(CONLL_LABELS)),
        label2id={label: index for index, label in enumerate(CONLL_LABELS)},
        use_crf=use_crf,
        head_tag_scheme="BIOES",
    )
    torch.manual_seed(0)
    return SLSTMForTokenClassification(config).to(device).train()


class TaggerSteps:
    """Training steps of a tagger over `encoder`'s batches (`TimedModel`: its ids, masks and autocast), with every
    real token but `<s>` and `</s>` labelled `O` (a path every CRF constraint allows)."""

    def __init__(self, model: SLSTMForTokenClassification, encoder: TimedModel):
        self.model, self.encoder = model, encoder
        self.labels = []
        for _, attention_mask in encoder.batches:
            inside = attention_mask.bool() & (attention_mask.cumsum(-1) > 1)  # (batch, seq): not <s>
            inside &= attention_mask.flip(-1).cumsum(-1).flip(-1) > 1  # not </s>
            self.labels.append(torch.where(inside, 0, -100))  # (batch, seq)

    def __call__(self):
        for (input_ids, attention_mask), labels in zip(self.encoder.batches, self.labels):
            with self.encoder.autocast():
                loss = self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
            loss.backward()
            self.model.zero_grad(set_to_none=True)

    def crf_inputs(self) -> list[tuple[tuple, dict]]:
        """The `(args, kwargs)` of every `model.crf` call of one step (emissions detached), one per batch."""
        recorded = []

        def record(module, args, kwargs):
            recorded.append(((args[0].detach(), *args[1:]), kwargs))

        hook = self.model.crf.register_forward_pre_hook(record, with_kwargs=True)
        self()
        hook.remove()
        return recorded


def crf_calls(crf: torch.nn.Module, inputs: list[tuple[tuple, dict]]) -> dict:
    """The CRF's two passes on recorded inputs: the loss with its backward, the max-marginals, and both."""

    def forward_algorithm():
        for (emissions, *rest), kwargs in inputs:
            leaf = emissions.requires_grad_()
            crf(leaf, *rest, **kwargs).sum().backward()  # the head asks for each sentence's loss

    def viterbi():
        with torch.no_grad():
            for (emissions, _tags, chain), kwargs in inputs:
                crf.max_marginals(emissions, chain, implementation=kwargs["implementation"])

    def both():
        forward_algorithm()
        viterbi()

    return {"crf": both, "forward algorithm": forward_algorithm, "viterbi": viterbi}


def measure(workload: Workload, variant_key: str, device: torch.device, timing: Timing) -> dict:
    """One row: median ms of every part of `PARTS` over `workload`, timed in turn, and the CRF's share."""
    encoder = TimedModel("slstm", VARIANTS[variant_key], workload, device)
    with_crf = TaggerSteps(tagger(True, device), encoder)
    without_crf = TaggerSteps(tagger(False, device), encoder)
    calls = {"step": with_crf, **crf_calls(with_crf.model.crf, with_crf.crf_inputs()), "step without CRF": without_crf}
    times = time_interleaved(calls, device, timing)
    medians = {part: statistics.median(times[part]) * 1e3 for part in PARTS}
    row = {"variant": variant_key, "data": workload.data, "batch": workload.batch, "length": workload.length}
    row["batches"] = len(workload.batches)
    row.update({part_key(part): medians[part] for part in PARTS})
    row["crf_share"] = medians["crf"] / medians["step"]
    print(
        f"{workload.label()} {variant_key}: step {medians['step']:.2f} ms, CRF {medians['crf']:.2f} ms "
        f"({100 * row['crf_share']:.0f}%), without CRF {medians['step without CRF']:.2f} ms",
        flush=True,
    )
    return row


def write_report(rows: list[dict], machine: dict, command: str, output_dir: Path, name: str):
    output_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"device_name": machine["device_name"], "torch": machine["torch"], **row} for row in rows]
    write_csv(rows, output_dir / f"{name}.csv", FIELDS)
    header = ["variant", "workload", *(f"{part} (ms)" for part in PARTS), "CRF share"]
    body = [
        [r["variant"], f"{r['data']} {r['batch']}×{r['length']} ({r['batches']} batches)"]
        + [f"{r[part_key(part)]:.2f}" for part in PARTS]
        + [f"{100 * r['crf_share']:.0f}%"]
        for r in rows
    ]
    lines = ["# The CRF's share of a NER training step", "", f"Command: `{command}`  "]
    lines += [f"Device: {machine['device_name']}, torch {machine['torch']}", ""]
    (output_dir / f"{name}.md").write_text("\n".join(lines + markdown_table(header, body)) + "\n")


def main(argv=None) -> list[dict]:
    args = parse_arguments(CRFShareArguments, argv, description=__doc__)
    device = torch.device(args.device)
    machine = machine_info(device)
    variants = [v for v in args.variants if not skip_reason(VARIANTS[v], device)]
    workloads = [random_workload(32, length) for length in args.lengths]
    workloads += real_workloads(args.data_dir, ["conll2003-ner"], args.batch_sizes, args.real_batches, device)
    timing = Timing(warmup=1, repeats=args.repeats, min_time=args.min_time, max_repeats=50)
    arguments = sys.argv[1:] if argv is None else argv
    command = " ".join(["python", "run_scripts/benchmarks/benchmark_crf_share.py", *arguments])
    rows = []
    for workload in workloads:
        for variant in variants:
            rows.append(measure(workload, variant, device, timing))
            write_report(rows, machine, command, args.output_dir, args.name)  # what a time limit would leave
    return rows


if __name__ == "__main__":
    main()
