"""`--push_to_hub` and `model.push_to_hub` with the real `huggingface_hub` client, over HTTP, against the Hub stand-in
of tests/hub_stand_in.py on 127.0.0.1: the one commit at the end of a run (`--hub_strategy end`, the scripts' default)
must hold the model, the tokenizer, the code for `trust_remote_code`, the model card and the results, and a fresh
process that cannot import `modeling_slstm` nor `triton` must `snapshot_download` them and load the model and tokenizer by repo id
with `trust_remote_code=True`, downloading their code from the stand-in."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
import yaml
from hub_stand_in import HubStandIn, git_blob_id
from script_helpers import REPO, run_args, write_generated_ner
from transformers import AutoModelForTokenClassification, AutoTokenizer

from baselines import BaselineEncoderConfig
from modeling_slstm import SLSTMConfig
from run_scripts.training.model_card import model_description, write_model_card

REPO_ID = "someone/slstm-tiny-ner"
PUSHED_REPO_ID = "someone/slstm-pushed-by-the-model"
TEXT = "the Mr Smith went in New York ."
MODEL_PUSH = Path(__file__).parent / "push_with_the_model.py"
FRESH_PROCESS = Path(__file__).parent / "load_from_the_hub_without_the_package.py"


@pytest.fixture
def hub(tmp_path):
    """The stand-in, serving while the test runs, and `env`: the environment of a process that talks to it (its own
    Hugging Face cache, a dummy token, the Hub online)."""
    with HubStandIn() as stand_in:
        stand_in.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))},
            "HF_ENDPOINT": stand_in.url,
            "HF_TOKEN": "hf_dummy_token",
            "HF_HOME": str(tmp_path / "hf_home"),
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
        yield stand_in


def run(command: list[str], env: dict, cwd, timeout: int = 300) -> str:
    result = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result.stdout


def load_in_a_fresh_process(hub: HubStandIn, repo_id: str, tmp_path) -> dict:
    """Runs `load_from_the_hub_without_the_package.py` for `repo_id`: an interpreter that cannot import
    `modeling_slstm` (-I: no PYTHONPATH, user site or cwd on sys.path; -S: no .pth files, among them the editable
    install's finder) nor `triton`, with an empty cache and module cache, so that every file, the code included, comes
    from the stand-in. It loads the model by repo id and from the downloaded folder, which runs the readable step and
    refuses `step_implementation="triton"` with a message that names Triton."""
    site_dirs = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    assert not any(os.path.isdir(os.path.join(d, "modeling_slstm")) for d in site_dirs), "non-editable install found"
    module_cache = str(tmp_path / f"modules-{repo_id.replace('/', '--')}")
    env = {k: v for k, v in hub.env.items() if k != "PYTHONPATH"}
    env.update(HF_HOME=str(tmp_path / f"fresh-home-{repo_id.replace('/', '--')}"), HF_MODULES_CACHE=module_cache)
    stdout = run([sys.executable, "-I", "-S", str(FRESH_PROCESS), repo_id, TEXT, module_cache, *site_dirs],
                 env, cwd=tmp_path)  # fmt: skip
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, stdout[-2000:]
    return json.loads(lines[-1][len("RESULT ") :])


def expected_tags(folder) -> list[int]:
    """The tag ids the model saved in `folder` gives `TEXT`, loaded here with the package."""
    model = AutoModelForTokenClassification.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        return model(**tokenizer(TEXT, return_tensors="pt")).logits.argmax(-1)[0].tolist()


def assert_downloaded_as_pushed(hub: HubStandIn, repo_id: str, loaded: dict) -> None:
    """The fresh process got every file of the repository, byte for byte, and downloaded the code files by their
    `resolve` URLs."""
    files = hub.files(repo_id)
    assert loaded["blobs"] == {path: git_blob_id(data) for path, data in files.items()}
    code_files = {path for path in files if path.endswith(".py")}
    assert {"configuration_slstm.py", "modeling_slstm.py", "tokenization_slstm.py"} <= code_files
    fetched = {path.rsplit("/resolve/", 1)[1].split("/", 1)[1] for method, path in hub.requests
               if method == "GET" and path.startswith(f"/{repo_id}/resolve/")}  # fmt: skip
    assert code_files <= fetched, sorted(code_files - fetched)
    assert loaded["module"].startswith("transformers_modules.") and loaded["tokenizer"] == "SLSTMTokenizer"


@pytest.mark.slow
def test_push_to_hub_commit_and_fresh_load(tmp_path, hub):
    paths = write_generated_ner(tmp_path)
    out = tmp_path / "out"
    arguments = run_args(out, paths, max_steps=3, save_steps=2, push_to_hub=True, hub_model_id=REPO_ID,
                         hub_token="hf_dummy_token")  # fmt: skip
    run([sys.executable, "-m", "run_scripts.run_ner", *arguments], {**hub.env, "PYTHONPATH": str(REPO)}, cwd=REPO)

    commits = [path for method, path in hub.requests if method == "POST" and "/commit/" in path]
    assert commits == [f"/api/models/{REPO_ID}/commit/main"]  # one commit, at the end of the run
    files = hub.files(REPO_ID)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "README.md",
                 "configuration_slstm.py", "modeling_slstm.py", "crf.py", "all_results.json"):  # fmt: skip
        assert name in files, (name, sorted(files))
    code_files = {path.name for path in out.glob("*.py")}  # every module the saved model code imports
    assert code_files <= set(files), sorted(code_files - set(files))
    assert not any(name.startswith("checkpoint-") for name in files)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "all_results.json", *code_files):
        assert files[name] == (out / name).read_bytes(), name  # what the run saved, byte for byte
    config = json.loads(files["config.json"])
    assert config["auto_map"]["AutoModelForTokenClassification"] == "modeling_slstm.SLSTMForTokenClassification"
    card = files["README.md"].decode()
    metadata = yaml.safe_load(card.split("---")[1])
    assert metadata["pipeline_tag"] == "token-classification" and metadata["library_name"] == "transformers"
    for expected in ("Sentence-State LSTM", "trust_remote_code=True", "AutoModelForTokenClassification",
                     'pipeline("token-classification"', "Zhang, Yue and Liu, Qi and Song, Linfeng", "run_ner.py",
                     "test_f1", REPO_ID, "--push_to_hub", str(paths["train"])):  # fmt: skip
        assert expected in card, expected

    loaded = load_in_a_fresh_process(hub, REPO_ID, tmp_path)
    assert_downloaded_as_pushed(hub, REPO_ID, loaded)
    assert loaded["ids"] == loaded["local_ids"] == expected_tags(out)

    # The same model pushed by `model.push_to_hub` and `tokenizer.push_to_hub`, without the training script.
    run([sys.executable, str(MODEL_PUSH), str(out), PUSHED_REPO_ID], {**hub.env, "PYTHONPATH": str(REPO)}, tmp_path)
    pushed = hub.files(PUSHED_REPO_ID)
    for name in ("config.json", "model.safetensors", "tokenizer.json", *code_files):
        assert name in pushed, (name, sorted(pushed))
    loaded = load_in_a_fresh_process(hub, PUSHED_REPO_ID, tmp_path)
    assert_downloaded_as_pushed(hub, PUSHED_REPO_ID, loaded)
    assert loaded["ids"] == loaded["local_ids"] == expected_tags(out)


@pytest.mark.parametrize("baseline", [False, True])
def test_model_card_names_the_model_and_how_its_code_loads(tmp_path, baseline):
    config = BaselineEncoderConfig(encoder_type="bilstm", num_layers=1) if baseline else SLSTMConfig()
    info = {"task_description": "named entity recognition", **model_description(config)}
    card = write_model_card(str(tmp_path), info, "someone/model").read_text()
    metadata = yaml.safe_load(card.split("---")[1])
    assert ("baseline" in metadata["tags"], "custom_code" in metadata["tags"]) == (baseline, not baseline)
    first_line = next(line for line in card.splitlines() if "trained for named entity recognition" in line)
    if baseline:
        assert first_line.startswith("A **1-layer BiLSTM baseline**")
        assert "`baselines` package" in card and "trust_remote_code" not in card
    else:
        assert first_line.startswith("A **Sentence-State LSTM**") and "trust_remote_code=True" in card
