"""Character features (`config.use_char_features`): exact under padding of the sentence and of the words, equal to the
sentence alone, for S-LSTM and the baselines; clear errors; and the way characters reach the model from raw text or
words (tokenizer, data collators, `Trainer`, `pipeline`)."""

import json
from pathlib import Path

import pytest
import torch
from helpers import (
    BIO_LABELS,
    BOS,
    EOS,
    build,
    char_settings,
    pad,
    pad_spellings,
    random_ids,
    random_spellings,
    real,
    tagger_config,
    tiny_config,
)
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding, pipeline

from baselines import BaselineEncoderConfig, BaselineForTokenClassification
from modeling_slstm import SLSTMConfig, SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel
from modeling_slstm.tokenization_slstm import build_word_tokenizer

LENGTHS = (5, 1, 3, 2)
ATOL = 1e-5
REPO_CONFIGS = Path(__file__).resolve().parents[2] / "hub_configs"
MODELS = {
    "encoder": (SLSTMModel, tiny_config(num_sentence_nodes=2, **char_settings())),
    "classifier": (SLSTMForSequenceClassification, tiny_config(num_labels=3, classifier_pooling="attention",
                                                               **char_settings())),
    "tagger": (SLSTMForTokenClassification, tagger_config(**char_settings())),
    "crf_tagger": (SLSTMForTokenClassification, tagger_config(use_crf=True, **char_settings())),
}  # fmt: skip


def per_sentence_outputs(output, mask: torch.Tensor, row: int) -> list[torch.Tensor]:
    """The outputs of sentence `row` at its real positions: word states and sentence state, or logits."""
    if hasattr(output, "last_hidden_state"):
        return [real(output.last_hidden_state, mask, row), output.pooler_output[row]]
    if output.logits.dim() == 2:
        return [output.logits[row]]
    return [real(output.logits, mask, row)]


def assert_batch_equals_sentences_alone(model, side: str, **extra_batch):
    """Runs a padded batch (words padded to the longest word of the batch, plus `extra_batch` inputs) and every
    sentence alone (words padded to its own longest word) and compares them."""
    sentences, spellings = random_ids(LENGTHS), random_spellings(LENGTHS)
    ids, mask = pad(sentences, side)
    chars = pad_spellings(spellings, side)
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask, char_ids=chars, **extra_batch)
        for row, sentence in enumerate(sentences):
            alone = model(input_ids=torch.tensor([sentence]), char_ids=pad_spellings([spellings[row]]))
            one_mask = torch.ones(1, len(sentence), dtype=torch.bool)
            for got, expected in zip(
                per_sentence_outputs(batched, mask, row), per_sentence_outputs(alone, one_mask, 0)
            ):
                torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("kind", MODELS)
def test_padded_batch_equals_each_sentence_alone(kind, side):
    model_class, config = MODELS[kind]
    assert_batch_equals_sentences_alone(build(model_class, config), side)


@pytest.mark.parametrize("encoder_type", ["bilstm", "cnn", "transformer"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_baselines_read_the_same_character_features(encoder_type, side):
    config = BaselineEncoderConfig(
        encoder_type=encoder_type, vocab_size=20, embedding_dim=5, hidden_size=6, num_attention_heads=2,
        embedding_dropout=0.0, id2label=dict(enumerate(BIO_LABELS)), **char_settings(),
    )  # fmt: skip
    model = build(BaselineForTokenClassification, config)
    # The same word representations as S-LSTM: embedding then char-CNN features, in that order.
    assert model.encoder.embeddings.output_dim == config.word_representation_dim == 5 + 3
    assert_batch_equals_sentences_alone(model, side)


def test_width_and_content_of_padding_do_not_matter():
    model = build(*MODELS["crf_tagger"])
    sentences, spellings = random_ids(LENGTHS), random_spellings(LENGTHS)
    ids, mask = pad(sentences)
    chars = pad_spellings(spellings)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, char_ids=chars).logits
        wider = pad_spellings(spellings, width=chars.shape[-1] + 7)
        torch.testing.assert_close(model(input_ids=ids, attention_mask=mask, char_ids=wider).logits, expected)
        # Characters at padding positions (attention_mask 0) are never read.
        noisy = chars.clone()
        noisy[~mask] = torch.randint(1, 12, noisy[~mask].shape)
        assert torch.equal(model(input_ids=ids, attention_mask=mask, char_ids=noisy).logits, expected)


def test_out_of_vocabulary_words_are_told_apart_by_their_spelling():
    unknown = torch.tensor([[BOS, 1, EOS], [BOS, 1, EOS]])  # the same <unk> word, spelled two ways
    spellings = torch.tensor([[[2, 0, 0], [5, 6, 7], [3, 0, 0]], [[2, 0, 0], [8, 9, 0], [3, 0, 0]]])
    with torch.no_grad():
        words_only = build(SLSTMModel, tiny_config())(input_ids=unknown, char_ids=spellings).last_hidden_state
        with_chars = build(*MODELS["encoder"])(input_ids=unknown, char_ids=spellings).last_hidden_state
    torch.testing.assert_close(words_only[0], words_only[1])
    assert not torch.allclose(with_chars[0, 1], with_chars[1, 1])


def test_inputs_embeds_are_the_word_part_only():
    model = build(*MODELS["tagger"])
    ids, chars = torch.tensor([random_ids([4])[0]]), pad_spellings(random_spellings([4]))
    with torch.no_grad():
        from_ids = model(input_ids=ids, char_ids=chars).logits
        embeds = model.get_input_embeddings()(ids)  # (1, 4, embedding_dim): no character part
        torch.testing.assert_close(model(inputs_embeds=embeds, char_ids=chars).logits, from_ids)


def test_gradients_reach_the_character_encoder():
    """The loss's gradients for the character CNN's parameters are those of finite differences (float64,
    `torch.autograd.gradcheck`), not zero, and none for the padding character's row."""
    model = build(*MODELS["crf_tagger"], dtype=torch.float64).train()
    ids, chars = torch.tensor([random_ids([4])[0]]), pad_spellings(random_spellings([4]), width=8)
    batch = {"input_ids": ids, "char_ids": chars, "labels": torch.tensor([[0, 1, 2, 0]])}
    prefix = "slstm.embeddings.char_encoder."
    names = [prefix + "convolution.weight", prefix + "convolution.bias", prefix + "char_embeddings.weight"]
    parameters = dict(model.named_parameters())
    values = [parameters[name].detach().clone().requires_grad_() for name in names]

    def loss(*tensors):
        return torch.func.functional_call(model, dict(zip(names, tensors)), kwargs=batch).loss

    assert torch.autograd.gradcheck(loss, values, eps=1e-6, atol=1e-7, rtol=1e-5)
    gradients = torch.autograd.grad(loss(*values), values)
    assert all(torch.count_nonzero(gradient) > 0 for gradient in gradients)
    assert torch.count_nonzero(gradients[2][0]) == 0  # the padding row stays untrained


def test_export_with_dynamic_batch_length_and_word_width():
    """The character CNN keeps the model traceable: one `torch.export` runs any batch size, length and width."""
    model = build(*MODELS["tagger"])
    ids, mask = pad(random_ids([4, 2]))
    chars = pad_spellings(random_spellings([4, 2]), width=6)
    batch, seq, width = torch.export.Dim("batch"), torch.export.Dim("seq"), torch.export.Dim("width")
    dynamic = {
        "input_ids": {0: batch, 1: seq},
        "attention_mask": {0: batch, 1: seq},
        "char_ids": {0: batch, 1: seq, 2: width},
    }
    program = torch.export.export(
        model, (), {"input_ids": ids, "attention_mask": mask.long(), "char_ids": chars}, dynamic_shapes=dynamic
    )
    new_ids, new_mask = pad(random_ids([7, 1, 5], seed=3), side="left")
    new_chars = pad_spellings(random_spellings([7, 1, 5], seed=3), side="left", width=9)
    new_inputs = {"input_ids": new_ids, "attention_mask": new_mask.long(), "char_ids": new_chars}
    with torch.no_grad():
        torch.testing.assert_close(program.module()(**new_inputs).logits, model(**new_inputs).logits)


def test_missing_or_malformed_char_ids_are_clear_errors():
    model = build(*MODELS["tagger"])
    ids = torch.tensor([[4, 5, 6]])
    with pytest.raises(ValueError, match=r"use_char_features=True\): pass char_ids"):
        model(input_ids=ids)
    with pytest.raises(ValueError, match=r"char_ids must have shape .* \(1, 3\) like the input, got \(1, 2, 4\)"):
        model(input_ids=ids, char_ids=torch.ones(1, 2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"char_ids must be in \[0, 12\) \(char_vocab_size\)"):
        model(input_ids=ids, char_ids=torch.full((1, 3, 4), 12))


def test_char_ids_are_optional_and_ignored_without_character_features():
    model = build(SLSTMModel, tiny_config())
    ids = torch.tensor([[4, 5, 6]])
    assert model.embeddings.char_encoder is None
    with torch.no_grad():
        expected = model(input_ids=ids).last_hidden_state
        assert torch.equal(model(input_ids=ids, char_ids=torch.ones(1, 3, 4, dtype=torch.long)).last_hidden_state,
                           expected)  # fmt: skip


def test_config_defaults_keep_the_word_only_model():
    config = SLSTMConfig()
    assert config.use_char_features is False
    assert config.word_representation_dim == config.embedding_dim == 300
    assert "word_representation_dim" not in config.to_dict()  # derived, not saved
    chars = SLSTMConfig(use_char_features=True)
    assert (chars.char_embedding_dim, chars.char_hidden_size, chars.char_kernel_size, chars.char_dropout) == (
        30,
        30,
        3,
        0.5,
    )  # Ma & Hovy (2016)
    assert chars.word_representation_dim == 330


@pytest.mark.parametrize("name", ["slstm-ner-crf.json", "slstm-pos.json", "slstm-ner-crf-small.json"])
def test_paper_tagging_configs_use_character_features(name):
    values = json.loads((REPO_CONFIGS / name).read_text(encoding="utf-8"))
    values = {key: value for key, value in values.items() if key not in ("_comment", "training_recipe", "model_type")}
    config = SLSTMConfig(**values)
    assert config.use_char_features and config.word_representation_dim == config.embedding_dim + 30


@pytest.mark.parametrize("config_class", [SLSTMConfig, BaselineEncoderConfig])
@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"char_kernel_size": 2}, "char_kernel_size must be odd, got 2"),
        ({"char_vocab_size": 1}, "char_vocab_size must be an integer >= 2, got 1"),
        ({"char_hidden_size": 0}, "char_hidden_size must be an integer >= 1, got 0"),
        ({"char_dropout": 1.0}, r"char_dropout must be in \[0, 1\), got 1.0"),
        ({"use_char_features": "yes"}, "use_char_features must be a bool, got 'yes'"),
    ],
)
def test_config_validation(config_class, overrides, message):
    with pytest.raises(ValueError, match=f"{config_class.__name__}.{message}"):
        config_class(**overrides)


# --------------------------------------------------------------------------------------------------------------------
# From text to the model
# --------------------------------------------------------------------------------------------------------------------

TRAIN = [["John", "lives", "in", "New", "York", "."], ["Mary", "visited", "Paris", ",", "France", "."]]
TEXT = "Just landed in New York, heading to Madison Square Garden."
TEXT_WORDS = ["Just", "landed", "in", "New", "York", ",", "heading", "to", "Madison", "Square", "Garden", "."]


@pytest.fixture(scope="module")
def tokenizer():
    return build_word_tokenizer(TRAIN, max_word_length=6)


def char_tagger(tokenizer, **overrides):
    settings = char_settings(char_vocab_size=tokenizer.char_vocab_size)
    config = tagger_config(vocab_size=len(tokenizer), use_crf=True, **{**settings, **overrides})
    return build(SLSTMForTokenClassification, config)


@pytest.mark.parametrize("side", ["right", "left"])
def test_model_reads_the_tokenizer_output_and_collators_pad_it_exactly(tokenizer, side):
    model = char_tagger(tokenizer)
    sentences = [["Mary", "lives", "in", "Zürich"], ["John"], ["Madison", "Square", "Garden", "!"]]
    tokenizer.padding_side = side
    try:
        batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
        features = [dict(tokenizer(words, is_split_into_words=True)) for words in sentences]
        token_collator = DataCollatorForTokenClassification(tokenizer)
        labelled = token_collator([dict(feature, labels=[0] * len(feature["input_ids"])) for feature in features])
        plain = DataCollatorWithPadding(tokenizer)(features)
    finally:
        tokenizer.padding_side = "right"
    for collated in (labelled, plain):
        for key in ("input_ids", "attention_mask", "char_ids"):
            assert torch.equal(collated[key], batch[key]), key
    assert batch["char_ids"].shape == (3, 6, 6)
    with torch.no_grad():
        logits = model(**batch).logits
        for row, words in enumerate(sentences):
            alone = model(**tokenizer(words, is_split_into_words=True, return_tensors="pt")).logits[0]
            torch.testing.assert_close(real(logits, batch["attention_mask"].bool(), row), alone, atol=ATOL, rtol=0)


def test_trainer_passes_char_ids_to_the_model(tokenizer, tmp_path):
    datasets = pytest.importorskip("datasets")
    from transformers import Trainer, TrainingArguments

    model = char_tagger(tokenizer).train()
    encoded = tokenizer(TRAIN, is_split_into_words=True)
    encoded["labels"] = [[0] * len(ids) for ids in encoded["input_ids"]]
    dataset = datasets.Dataset.from_dict(dict(encoded))
    before = model.slstm.embeddings.char_encoder.convolution.weight.detach().clone()
    arguments = TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, learning_rate=0.1, report_to=[],
        use_cpu=True, save_strategy="no", logging_strategy="no",
    )  # fmt: skip
    trainer = Trainer(
        model, arguments, train_dataset=dataset, data_collator=DataCollatorForTokenClassification(tokenizer)
    )
    trainer.train()  # without char_ids (dropped as an unused column) the forward would raise
    assert not torch.equal(model.slstm.embeddings.char_encoder.convolution.weight, before)


def test_pipeline_tags_raw_text_word_by_word(tokenizer):
    model = char_tagger(tokenizer)
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, ignore_labels=[])
    entities = tagger(TEXT)
    assert [entity["word"] for entity in entities] == TEXT_WORDS  # "York" and "," apart, none dropped
    assert all(TEXT[entity["start"] : entity["end"]] == entity["word"] for entity in entities)
    # The same words given pre-split get the same tags and scores.
    (split,) = tagger([TEXT_WORDS], is_split_into_words=True)
    assert [(e["word"], e["entity"]) for e in split] == [(e["word"], e["entity"]) for e in entities]
    assert tagger(" ") == []  # no words, no entities (a direct tokenizer call raises: test_pipeline_inputs.py)


@pytest.mark.parametrize("literal", ["<s>", "</s>", "<pad>"])
def test_words_that_look_like_special_tokens_stay_on_the_crf_chain(tokenizer, literal):
    model = char_tagger(tokenizer)
    words = ["John", literal, "lives"]
    encoded = tokenizer(words, is_split_into_words=True, return_tensors="pt")
    assert encoded["input_ids"][0, 2] == tokenizer.unk_token_id
    with torch.no_grad():
        logits = model(**encoded).logits[0]
    # Positions off the CRF chain have all-zero logits: only <s> and </s> may be off it.
    on_chain = logits.abs().sum(-1) > 0
    assert on_chain.tolist() == [False, True, True, True, False]
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, ignore_labels=[])
    assert [entity["word"] for entity in tagger(f"John {literal} lives")] == ["John", *literal_pieces(literal),
                                                                            "lives"]  # fmt: skip
    assert [entity["word"] for entity in tagger([words], is_split_into_words=True)[0]] == words


def literal_pieces(literal: str) -> list[str]:
    """How raw text splits a special-token look-alike: punctuation apart, like any `<`/`>` in text."""
    return {"<s>": ["<", "s", ">"], "</s>": ["<", "/", "s", ">"], "<pad>": ["<", "pad", ">"]}[literal]
