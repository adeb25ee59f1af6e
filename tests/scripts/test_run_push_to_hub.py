"""`--push_to_hub` offline: `HfApi.create_repo`/`create_commit` are mocked; the one commit at the end of the run
(`--hub_strategy end`, the scripts' default) must hold the model, the tokenizer, the code for `trust_remote_code`, the
model card and the results, and that exact set of files must load in a fresh process that cannot import the installed
`modeling_slstm` package (with the Hugging Face caches isolated and the Hub offline, see conftest.py)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
import yaml
from huggingface_hub import CommitOperationAdd, HfApi, RepoUrl
from script_helpers import run_args, run_main, write_generated_ner

from baselines import BaselineEncoderConfig
from modeling_slstm import SLSTMConfig
from run_scripts.training.model_card import model_description, write_model_card

REPO_ID = "someone/slstm-tiny-ner"

FRESH_PROCESS = r"""
import json, sys
sys.modules["modeling_slstm"] = None  # the installed package must not be needed
from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline
folder = sys.argv[1]
model = AutoModelForTokenClassification.from_pretrained(folder, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple", trust_remote_code=True)
entities = tagger("the Mr Smith went in New York .")
encoded = tokenizer("the Mr Smith went in New York .", return_tensors="pt")
ids = model(**encoded).logits.argmax(-1)[0].tolist()
print("RESULT " + json.dumps({"module": type(model).__module__, "ids": ids, "n_entities": len(entities)}))
"""


@pytest.mark.slow
def test_push_to_hub_commit_and_fresh_load(tmp_path, monkeypatch):
    paths = write_generated_ner(tmp_path)
    out = tmp_path / "out"
    commits = []

    def fake_create_commit(self, repo_id, operations, **kwargs):
        copied = []
        for operation in operations:
            assert isinstance(operation, CommitOperationAdd)
            source = operation.path_or_fileobj
            data = source if isinstance(source, bytes) else Path(source).read_bytes()
            copied.append((operation.path_in_repo, data))
        commits.append({"repo_id": repo_id, "files": dict(copied), "message": kwargs.get("commit_message")})
        return mock.MagicMock()

    with (
        mock.patch.object(HfApi, "create_repo", return_value=RepoUrl(f"https://huggingface.co/{REPO_ID}")) as create,
        mock.patch.object(HfApi, "create_commit", autospec=True, side_effect=fake_create_commit),
        # upload_folder asks the Hub to validate the model card's YAML header; checked locally below instead.
        mock.patch.object(HfApi, "_validate_yaml"),
        # With hf_xet installed upload_folder streams through its own pipeline (more HTTP calls); without it, it
        # makes the single create_commit that the Hub receives.
        mock.patch("huggingface_hub.hf_api.is_xet_available", return_value=False),
    ):
        run_main(
            "run_ner",
            run_args(
                out, paths, max_steps=3, save_steps=2, push_to_hub=True, hub_model_id=REPO_ID, hub_token="hf_fake"
            ),
            monkeypatch,
        )

    assert create.call_args.args[0] == REPO_ID
    assert len(commits) == 1 and commits[0]["repo_id"] == REPO_ID
    files = commits[0]["files"]
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "README.md",
        "configuration_slstm.py",
        "modeling_slstm.py",
        "crf.py",
        "all_results.json",
    ):
        assert name in files, (name, sorted(files))
    code_files = {path.name for path in out.glob("*.py")}  # every module the saved model code imports
    assert code_files <= set(files), sorted(code_files - set(files))
    assert not any(name.startswith("checkpoint-") for name in files)
    config = json.loads(files["config.json"])
    assert config["auto_map"]["AutoModelForTokenClassification"] == "modeling_slstm.SLSTMForTokenClassification"
    card = files["README.md"].decode()
    metadata = yaml.safe_load(card.split("---")[1])
    assert metadata["pipeline_tag"] == "token-classification" and metadata["library_name"] == "transformers"
    for expected in (
        "Sentence-State LSTM",
        "trust_remote_code=True",
        "AutoModelForTokenClassification",
        'pipeline("token-classification"',
        "Zhang, Yue and Liu, Qi and Song, Linfeng",
        "run_ner.py",
        "test_f1",
        REPO_ID,
        "--push_to_hub",
        str(paths["train"]),
    ):
        assert expected in card, expected

    # Exactly the committed files, in a folder, loaded in a fresh process.
    folder = tmp_path / "from_hub"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(folder)],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout[-2000:] + result.stderr[-2000:]
    loaded = json.loads(lines[-1][len("RESULT ") :])
    assert loaded["module"].startswith("transformers_modules.")
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    model = AutoModelForTokenClassification.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        expected_ids = model(**tokenizer("the Mr Smith went in New York .", return_tensors="pt")).logits.argmax(-1)
    assert loaded["ids"] == expected_ids[0].tolist()
    shutil.rmtree(folder)


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
