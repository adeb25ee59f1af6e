"""Helpers for the tests of run_scripts/ (imported by tests/test_run_*.py and tests/test_data_*.py); holds no tests.

Fixtures (isolated Hugging Face caches, the shared benchmark data) are in conftest.py.
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "run_scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

# The run_scripts modules, importable by the tests as `from test_run_helpers import data_utils` (whatever the order
# in which isort puts the imports of a test module).
import data_utils
import training_arguments
import training_setup

__all__ = ["REPO", "SCRIPTS", "data_utils", "training_arguments", "training_setup"]

NER_CONFIG = "hub_configs/slstm-ner-crf-small.json"
TINY_MODEL = "hidden_size=16,embedding_dim=16,num_steps=2"
COMMON_TRAINING = {
    "report_to": "none",
    "disable_tqdm": "true",
    "seed": 7,
    "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 16,
    "learning_rate": 0.01,
    "dataloader_num_workers": 0,
}


def cli(**options) -> list[str]:
    """`--name value` for each keyword argument, in order; `True` gives a bare `--name` and `None` leaves it out."""
    args = []
    for name, value in options.items():
        if value is not None:
            args += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return args


def run_args(output_dir, paths: dict | None = None, **options) -> list[str]:
    """The command line of run_ner.py / run_classification.py: a tiny fresh model from NER_CONFIG, the data files in
    `paths` (by split: train, validation, test), do_train/do_eval/do_predict and COMMON_TRAINING, each of them
    replaced by the `options` of the same name (`None` drops one), then the other `options`."""
    files = {f"{split}_file": path for split, path in (paths or {}).items()}
    defaults = {"config_name": NER_CONFIG, "config_overrides": TINY_MODEL, **files, "output_dir": output_dir}
    defaults |= {"do_train": True, "do_eval": True, "do_predict": True, **COMMON_TRAINING}
    return cli(**(defaults | options))


def write_generated_ner(directory: Path, n_train=40, n_eval=12, seed=0, tab=True, n_test=None) -> dict[str, Path]:
    """A tiny generated NER corpus in IOB2: names after 'Mr', cities after 'in'."""
    rng = random.Random(seed)
    names, cities, fillers = (
        ["Smith", "Jones", "Brown"],
        ["Paris", "Rome", "New York"],
        ["the", "a", "saw", "went", "."],
    )

    def sentence():
        tokens, tags = [], []
        for _ in range(rng.randint(1, 3)):
            tokens += [rng.choice(fillers) for _ in range(rng.randint(0, 3))]
            tags += ["O"] * (len(tokens) - len(tags))
            if rng.random() < 0.5:
                tokens += ["Mr", rng.choice(names)]
                tags += ["O", "B-PER"]
            else:
                city = rng.choice(cities).split()
                tokens += ["in", *city]
                tags += ["O", "B-LOC"] + ["I-LOC"] * (len(city) - 1)
        return tokens, tags

    paths = {}
    separator = "\t" if tab else " "
    for split, n in (("train", n_train), ("validation", n_eval), ("test", n_test or n_eval)):
        paths[split] = directory / f"{split}.txt"
        with paths[split].open("w") as file:
            file.write(f"-DOCSTART-{separator}O\n\n")
            for _ in range(n):
                for token, tag in zip(*sentence()):
                    file.write(f"{token}{separator}{tag}\n")
                file.write("\n")
            file.write("\n\n")
    return paths


def run_main(module_name: str, argv: list[str], monkeypatch) -> None:
    """Runs `run_scripts/<module_name>.py`'s main() in this process with the given command line."""
    import importlib

    module = importlib.import_module(module_name)
    monkeypatch.setattr(sys, "argv", [f"{module_name}.py", *argv])
    module.main()


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def run_subprocess(args: list[str], env_extra: dict | None = None, timeout=240, check=True):
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONHASHSEED="0")
    env.pop("LOCAL_RANK", None)
    env.update(env_extra or {})
    result = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}")
    return result
