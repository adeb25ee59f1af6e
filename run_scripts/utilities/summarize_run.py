#!/usr/bin/env python
"""Prints the per-epoch dev curve (and final results, if the run finished) of a run_ner/run_classification output
folder, as a Markdown table: works on a run still in progress (reads its newest checkpoint's trainer_state.json).

    python run_scripts/utilities/summarize_run.py --output_dir ../runs/conll_ner_chars [--metrics eval_f1 eval_accuracy]
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from run_scripts.training.arguments import parse_arguments
from run_scripts.training.usage_errors import DebugArguments, run_script


@dataclass
class SummarizeArguments(DebugArguments):
    output_dir: Path = field(metadata={"help": "the run's output folder (run_ner.py / run_classification.py)"})
    metrics: list[str] = field(
        default_factory=lambda: [
            "eval_f1",
            "eval_precision",
            "eval_recall",
            "eval_accuracy",
            "eval_macro_f1",
            "eval_loss",
        ],
        metadata={"help": "logged metrics to show (those the run logged)"},
    )

    def __post_init__(self):
        self.output_dir = Path(self.output_dir)


def newest_state(output_dir: Path) -> Path | None:
    candidates = [output_dir / "trainer_state.json"] if (output_dir / "trainer_state.json").is_file() else []
    checkpoints = sorted(
        output_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[-1])
    )
    candidates += checkpoints[-1:]
    if not candidates:
        return None
    return max(candidates, key=lambda p: json.loads(p.read_text())["global_step"])


def main(argv=None):
    args = parse_arguments(SummarizeArguments, argv, description=__doc__)
    state_path = newest_state(args.output_dir)
    if state_path is None:
        print(f"{args.output_dir}: no trainer_state.json yet (first epoch not finished)")
        return
    state = json.loads(state_path.read_text())
    evals = [h for h in state["log_history"] if any(m in h for m in args.metrics)]
    metrics = [m for m in args.metrics if any(m in h for h in evals)]
    print(
        f"{args.output_dir}: step {state['global_step']} of {state['max_steps']}, epoch {state['epoch']:.2f} "
        f"(from {state_path.relative_to(args.output_dir)})"
    )
    print("| epoch | " + " | ".join(metrics) + " |")
    print("|---|" + "---|" * len(metrics))
    for h in evals:
        print(f"| {h['epoch']:.0f} | " + " | ".join(f"{h[m]:.4f}" if m in h else "" for m in metrics) + " |")
    results = args.output_dir / "all_results.json"
    if results.is_file():
        final = json.loads(results.read_text())
        keys = [
            k
            for k in final
            if k.startswith(("eval_", "test_"))
            and k.split("_", 1)[1] in ("f1", "precision", "recall", "accuracy", "macro_f1")
        ]
        print("final (best checkpoint): " + ", ".join(f"{k} {final[k]:.4f}" for k in keys))


if __name__ == "__main__":
    run_script(main)
