"""run_scripts/utilities/export_onnx.py: ONNX export with default settings of every task model, checked in onnxruntime
on a new, padded batch (logits within 1e-4 at real positions; the CRF's Viterbi path identical)."""

import pytest
from helpers import build, save_tiny_encoder, tagger_config, tiny_config
from transformers import AutoConfig, AutoTokenizer

from modeling_slstm import SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel, cpu_matmul
from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")  # used by torch's ONNX exporter

from run_scripts.utilities import export_onnx  # only once the optional ONNX packages are known to be there

WORDS = [["Just", "landed", "in", "New", "York", "."], ["Madison", "Square", "Garden", "tonight", "U.S.", "Hi", "!"]]

MODELS = {
    "encoder": (SLSTMModel, tiny_config, {}),
    "sentence_pooling": (SLSTMForSequenceClassification, tiny_config, {"num_labels": 3}),
    "attention_pooling": (
        SLSTMForSequenceClassification,
        tiny_config,
        {"num_labels": 3, "classifier_pooling": "attention"},
    ),
    "mean_pooling": (SLSTMForSequenceClassification, tiny_config, {"num_labels": 3, "classifier_pooling": "mean"}),
    "softmax_tagger": (SLSTMForTokenClassification, tagger_config, {}),
    # One CRF tagger with every input the CRF models read (BIOES head, characters, a feature encoder's subwords): the
    # CRF's export is the slowest, so it is exported once.
    "crf_tagger_bioes_chars_feature_encoder": (
        SLSTMForTokenClassification,
        tagger_config,
        {"use_crf": True, "head_tag_scheme": "BIOES", "use_char_features": True, "char_dropout": 0.0},
    ),
}


def saved_model(directory, name: str):
    """A random tiny model of kind `name` with a tokenizer of `WORDS`, saved as a training script saves one; a
    `feature_encoder` model reads a tiny random BERT's word features."""
    model_class, make_config, settings = MODELS[name]
    subword_tokenizer = None
    if name.endswith("feature_encoder"):
        encoder_folder = save_tiny_encoder(directory.parent / "tiny_bert")
        subword_tokenizer = AutoTokenizer.from_pretrained(encoder_folder)
        settings = {**settings, "feature_encoder_config": AutoConfig.from_pretrained(encoder_folder)}
    tokenizer = build_word_tokenizer(WORDS, subword_tokenizer=subword_tokenizer)
    config = make_config(**settings)
    update_config_from_tokenizer(config, tokenizer)
    model = build(model_class, config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_export_runs_in_onnxruntime_like_pytorch(tmp_path, capsys, recwarn, name):
    """The export is the process's first matmul of an S-LSTM layer (the float32 backend not yet decided, as in a fresh
    `export_onnx.py`), and `torch.export`'s first, non-strict way takes the graph, with no failed way before it."""
    cpu_matmul._decide_backend.cache_clear()
    model_dir = saved_model(tmp_path / "model", name)
    output = tmp_path / "model.onnx"
    differences = export_onnx.main(["--model_dir", str(model_dir), "--output", str(output)])
    assert not [w for w in recwarn if "training mode" in str(w.message)]  # the exported module is in eval mode
    assert output.is_file()
    expected_outputs = {"last_hidden_state", "pooler_output"} if name == "encoder" else {"logits"}
    assert set(differences) == expected_outputs
    assert max(differences.values()) < 1e-4
    printed = capsys.readouterr().out
    assert all(f"{output_name}: max |onnxruntime - PyTorch|" in printed for output_name in expected_outputs)
    assert "strict=False)`... ✅" in printed and "❌" not in printed, printed


def test_missing_folders_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json there"):
        export_onnx.main(["--model_dir", str(tmp_path / "missing"), "--output", str(tmp_path / "m.onnx")])
    assert not (tmp_path / "m.onnx").exists()
    model_dir = saved_model(tmp_path / "model", "softmax_tagger")
    with pytest.raises(FileNotFoundError, match="the folder .*no_such_folder does not exist"):
        export_onnx.main(["--model_dir", str(model_dir), "--output", str(tmp_path / "no_such_folder" / "m.onnx")])
