"""save_pretrained / from_pretrained round trips, the Auto classes, and loading with `trust_remote_code` in a fresh
interpreter that cannot import the installed package."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from helpers import (
    build,
    char_settings,
    pad,
    pad_spellings,
    random_ids,
    random_spellings,
    save_tiny_encoder,
    tagger_config,
    tiny_config,
)  # fmt: skip
from scipy import stats
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)  # fmt: skip

from modeling_slstm import SLSTMConfig, SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel
from modeling_slstm.tokenization_slstm import build_word_tokenizer

CODE_FILES = {
    "configuration_slstm.py", "modeling_slstm.py", "cpu_matmul.py", "custom_operators.py", "crf.py", "crf_parallel.py",
    "kernel_dispatch.py", "tag_schemes.py", "token_tagging.py", "triton_crf.py", "triton_kernels.py", "triton_step.py",
    "validation.py",
}  # fmt: skip
AUTO_MAP = {
    "AutoConfig": "configuration_slstm.SLSTMConfig",
    "AutoModel": "modeling_slstm.SLSTMModel",
    "AutoModelForSequenceClassification": "modeling_slstm.SLSTMForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_slstm.SLSTMForTokenClassification",
}
MODELS = {
    "encoder": (SLSTMModel, tiny_config(num_sentence_nodes=2), AutoModel),
    "classifier": (SLSTMForSequenceClassification, tiny_config(num_labels=3, classifier_pooling="attention"),
                   AutoModelForSequenceClassification),
    "tagger": (SLSTMForTokenClassification, tagger_config(), AutoModelForTokenClassification),
    "crf_tagger": (SLSTMForTokenClassification, tagger_config(use_crf=True), AutoModelForTokenClassification),
    "char_crf_tagger": (SLSTMForTokenClassification, tagger_config(use_crf=True, **char_settings()),
                        AutoModelForTokenClassification),
}  # fmt: skip

HERE = Path(__file__).parent  # the child-process scripts beside this file


def inputs():
    """A left-padded batch; `char_ids` are read by the models with character features only."""
    ids, mask = pad(random_ids([5, 2]), side="left")
    return {"input_ids": ids, "attention_mask": mask, "char_ids": pad_spellings(random_spellings([5, 2]), side="left")}


def outputs(model):
    with torch.no_grad():
        out = model(**inputs())
    if hasattr(out, "logits"):
        return out.logits
    return torch.cat([out.last_hidden_state.flatten(), out.pooler_output.flatten()])


@pytest.mark.parametrize("kind", MODELS)
def test_round_trip(kind, tmp_path):
    model_class, config, auto_class = MODELS[kind]
    model = build(model_class, config)
    model.save_pretrained(tmp_path)
    assert {"model.safetensors", "config.json"} | CODE_FILES <= {p.name for p in tmp_path.iterdir()}

    for loader in (model_class, auto_class):  # the Auto class works in-process: importing the package registers it
        loaded = loader.from_pretrained(tmp_path).eval()
        assert type(loaded) is model_class
        assert torch.equal(outputs(loaded), outputs(model))
    assert type(AutoConfig.from_pretrained(tmp_path)) is SLSTMConfig
    if kind.endswith("crf_tagger"):  # the constraint buffers are rebuilt from id2label, not left uninitialised
        assert torch.equal(loaded.crf.transition_allowed, model.crf.transition_allowed)
        assert not loaded.crf.transition_allowed.all()


def test_character_features_added_to_a_word_only_checkpoint_start_initialised(tmp_path):
    # The convolution is missing from the checkpoint: loading must draw it as a fresh model would, not leave the
    # uninitialised memory that transformers allocates for missing weights.
    original = build(SLSTMForTokenClassification, tagger_config())
    original.save_pretrained(tmp_path)
    # The word representation grows by the character features: the input layer is redrawn too.
    torch.manual_seed(1)
    wide = char_settings(char_embedding_dim=8, char_hidden_size=40)  # 1,000 draws: a KS test that tells bounds apart
    loaded = SLSTMForTokenClassification.from_pretrained(tmp_path, ignore_mismatched_sizes=True, **wide)
    kept = {name: value for name, value in loaded.state_dict().items()
            if name in original.state_dict() and original.state_dict()[name].shape == value.shape}  # fmt: skip
    assert "slstm.embeddings.word_embeddings.weight" in kept and "classifier.weight" in kept
    for name, value in kept.items():  # everything the checkpoint holds, exactly as saved
        assert torch.equal(value, original.state_dict()[name]), name
    # The convolution: PyTorch's nn.Conv1d draw, uniform on (-1/sqrt(fan_in), 1/sqrt(fan_in)), by a KS test.
    convolution = loaded.slstm.embeddings.char_encoder.convolution
    bound = convolution.weight[0].numel() ** -0.5
    draws = torch.cat([convolution.weight.flatten(), convolution.bias]).detach().double().numpy()
    assert stats.kstest(draws, stats.uniform(loc=-bound, scale=2 * bound).cdf).pvalue > 1e-3
    # Nothing else is left unset: the loaded model computes what the same parameters compute in a model built
    # from the config (its buffers, such as the CRF constraints, rebuilt rather than read).
    rebuilt = SLSTMForTokenClassification(loaded.config)
    rebuilt.load_state_dict(loaded.state_dict())
    assert torch.equal(outputs(loaded.eval()), outputs(rebuilt.eval()))


@pytest.mark.parametrize("kind", MODELS)
def test_saved_config_maps_every_auto_class(kind, tmp_path):
    model_class, config, _ = MODELS[kind]
    build(model_class, config).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "sentence_state_lstm"
    assert saved["auto_map"] == AUTO_MAP


def run_without_the_package(tmp_path, checkpoint, data: dict) -> None:
    """Saves `data` (model inputs, expected `logits`, optionally the `text` to tokenize) and runs
    `load_without_the_package.py` on
    `checkpoint` in an interpreter that cannot import `modeling_slstm`."""
    torch.save(data, tmp_path / "data.pt")
    # -I: no PYTHONPATH, user site or cwd on sys.path; -S: no site-packages, hence no .pth files, among them the
    # editable install's finder. Site-packages are then put back as plain directories.
    site_dirs = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    assert not any(os.path.isdir(os.path.join(d, "modeling_slstm")) for d in site_dirs), "non-editable install found"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("HF_", "TRANSFORMERS_"))}
    module_cache = str(tmp_path / "modules")  # fresh: no stale copy of the code can be picked up
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_MODULES_CACHE=module_cache, HF_HUB_OFFLINE="1")
    arguments = [str(checkpoint), str(tmp_path / "data.pt"), module_cache, *site_dirs]
    result = subprocess.run(
        [sys.executable, "-I", "-S", str(HERE / "load_without_the_package.py"), *arguments],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fresh process OK" in result.stdout


def tag_text_without_the_package(tmp_path, model, tokenizer, text: str) -> None:
    """Saves `model` and `tokenizer` as one checkpoint and checks that `text`, tokenized and tagged where the package
    cannot be imported (`run_without_the_package`), gives the inputs and logits it gives here."""
    model.save_pretrained(tmp_path / "checkpoint")
    tokenizer.save_pretrained(tmp_path / "checkpoint")
    data = dict(tokenizer(text, return_tensors="pt"))
    with torch.no_grad():
        data["logits"] = model(**data).logits
    run_without_the_package(tmp_path, tmp_path / "checkpoint", dict(data, text=text))


def test_trust_remote_code_in_a_fresh_process_without_the_package(tmp_path):
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True))
    model.save_pretrained(tmp_path / "checkpoint")
    data = inputs()
    del data["char_ids"]  # what a word-only model is given
    with torch.no_grad():
        data["logits"] = model(**data).logits
    run_without_the_package(tmp_path, tmp_path / "checkpoint", data)


def test_tokenizer_and_character_model_in_a_fresh_process_without_the_package(tmp_path):
    """Raw text through the saved tokenizer (its own code: CoNLL-style splitting, character ids) into a model with
    character features, both loaded with `trust_remote_code=True` where the package cannot be imported."""
    tokenizer = build_word_tokenizer([["New", "York", ",", "Madison", "Square", "Garden", "."]])
    config = tagger_config(
        vocab_size=len(tokenizer), use_crf=True, **char_settings(char_vocab_size=tokenizer.char_vocab_size)
    )
    model = build(SLSTMForTokenClassification, config)
    tag_text_without_the_package(
        tmp_path, model, tokenizer, "Just landed in New York, heading to Madison Square Garden."
    )


def test_installed_package_loads_model_and_tokenizer_without_trust_remote_code(tmp_path):
    """`import modeling_slstm` alone registers the model and the tokenizer with the Auto classes (a fresh process, so
    nothing else has imported the tokenizer module): no `trust_remote_code`, the package's own classes."""
    tokenizer = build_word_tokenizer([["New", "York", "."]])
    model = build(SLSTMForTokenClassification, tagger_config(vocab_size=len(tokenizer)))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    command = [sys.executable, str(HERE / "load_with_the_package.py"), str(tmp_path)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["modeling_slstm.tokenization_slstm", "modeling_slstm.modeling_slstm"]


def test_the_saved_auto_map_names_every_auto_class_of_the_package():
    """`AUTO_MAP` (written into every saved config) and `AUTO_CLASSES` (what the package registers and ships) agree."""
    from modeling_slstm.configuration_slstm import AUTO_MAP
    from modeling_slstm.modeling_slstm import AUTO_CLASSES

    expected = {"AutoConfig": "configuration_slstm.SLSTMConfig"}
    expected |= {name: f"modeling_slstm.{model_class.__name__}" for name, model_class in AUTO_CLASSES.items()}
    assert AUTO_MAP == expected
    for name, model_class in AUTO_CLASSES.items():
        assert model_class._auto_class == name


def test_feature_encoder_model_in_a_fresh_process_without_the_package(tmp_path):
    """A model with a pretrained encoder's word features (a tiny BERT inside the checkpoint) and its tokenizer (the
    encoder's subword tokenizer inside), loaded with `trust_remote_code=True` where the package cannot be imported:
    raw text gives the same subword inputs and logits."""
    encoder_folder = save_tiny_encoder(tmp_path / "tiny_bert")
    tokenizer = build_word_tokenizer(
        [["New", "York", ",", "unbelievable", "."]], subword_tokenizer=AutoTokenizer.from_pretrained(encoder_folder)
    )
    config = tagger_config(
        vocab_size=len(tokenizer), use_crf=True, feature_encoder_config=AutoConfig.from_pretrained(encoder_folder)
    )
    model = SLSTMForTokenClassification(config).eval()
    tag_text_without_the_package(tmp_path, model, tokenizer, "Unbelievable: New York, 1996.")
