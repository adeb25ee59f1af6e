"""`weighted_sum_decomposition`: the maps reconstruct the model's final states exactly (every window, sentence node
count, gate normalisation and padding side), padding gets exactly zero weight, sentences are independent of their
batch, the weights mean what they say (bounds, locality), bad models get clear errors; and the plot script."""

import base64
import html
import io
import re

import numpy as np
import pytest
import torch
from helpers import build, char_settings, pad, pad_spellings, random_ids, random_spellings, tiny_config
from torch import nn

from modeling_slstm import (
    SLSTMForSequenceClassification,
    SLSTMForTokenClassification,
    SLSTMModel,
    weighted_sum_decomposition,
)
from modeling_slstm.tokenization_slstm import build_word_tokenizer

SIMPLIFIED = {"context_independent_content": True, "remove_output_gate": True}
LENGTHS = [5, 2, 7]


def weighted_sums(maps) -> tuple[torch.Tensor, torch.Tensor]:
    """`Σ_j w_ij ⊙ u_j` for the word cells `(batch, seq, hidden)` and the sentence cells `(batch, nodes, hidden)`."""
    contents = maps.contents.unsqueeze(1)  # (batch, 1, seq, hidden)
    return (maps.word_weights * contents).sum(2), (maps.sentence_weights * contents).sum(2)


def final_cells(model: SLSTMModel, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's own final word and sentence cells, read from the last call of its step."""
    outputs = []
    handle = model.transition.register_forward_hook(lambda module, inputs, output: outputs.append(output))
    with torch.no_grad():
        model(*args, **kwargs)
    handle.remove()
    _, word_cells, _, sentence_cells = outputs[-1]
    return word_cells, sentence_cells


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("gate_normalization", ["sigmoid_softmax", "softmax"])
@pytest.mark.parametrize("num_sentence_nodes", [0, 1, 2])
@pytest.mark.parametrize("window_size", [1, 2])
def test_maps_reconstruct_the_final_states_and_give_padding_zero_weight(
    window_size, num_sentence_nodes, gate_normalization, side
):
    model = build(
        SLSTMModel,
        dtype=torch.float64,
        window_size=window_size,
        num_sentence_nodes=num_sentence_nodes,
        gate_normalization=gate_normalization,
        **SIMPLIFIED,
    )
    ids, mask = pad(random_ids(LENGTHS, seed=window_size), side)
    maps = weighted_sum_decomposition(model, ids, attention_mask=mask)
    with torch.no_grad():
        outputs = model(ids, attention_mask=mask)
    batch, seq = ids.shape
    assert maps.word_weights.shape == (batch, seq, seq, 6)
    assert maps.sentence_weights.shape == (batch, num_sentence_nodes, seq, 6)
    assert maps.contents.shape == (batch, seq, 6)

    word_cells, sentence_cells = weighted_sums(maps)
    torch.testing.assert_close(torch.tanh(word_cells), outputs.last_hidden_state, rtol=0, atol=1e-12)
    if num_sentence_nodes:
        torch.testing.assert_close(torch.tanh(sentence_cells[:, 0]), outputs.pooler_output, rtol=0, atol=1e-12)
    else:
        pooled = (torch.tanh(word_cells) * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
        torch.testing.assert_close(pooled, outputs.pooler_output, rtol=0, atol=1e-12)

    padding = ~mask  # (batch, seq)
    assert torch.all(maps.word_weights.transpose(1, 2)[padding] == 0)  # columns of padding words
    assert torch.all(maps.word_weights[padding] == 0)  # rows of padding words
    assert torch.all(maps.sentence_weights.transpose(1, 2)[padding] == 0)
    assert torch.all(maps.contents[padding] == 0)
    # Not zero by accident: every real word keeps a share of its own content.
    assert torch.all(maps.word_weights.diagonal(dim1=1, dim2=2).transpose(1, 2)[mask] > 0)


def test_maps_are_exact_to_1e_5_in_float32():
    model = build(SLSTMModel, num_steps=5, window_size=2, num_sentence_nodes=2, **SIMPLIFIED)
    ids, mask = pad(random_ids([9, 4, 12], seed=3), "left")
    maps = weighted_sum_decomposition(model, ids, attention_mask=mask)
    with torch.no_grad():
        outputs = model(ids, attention_mask=mask)
    word_cells, sentence_cells = weighted_sums(maps)
    assert maps.word_weights.dtype == torch.float32
    torch.testing.assert_close(torch.tanh(word_cells), outputs.last_hidden_state, rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.tanh(sentence_cells[:, 0]), outputs.pooler_output, rtol=0, atol=1e-5)


def test_weights_are_shares_and_reach_only_as_far_as_the_window_moves():
    """Gates are normalised, so every weight lies in [0, 1] and the weights of a cell sum to at most 1. Without a
    sentence node, a content enters its own cell at the first step and moves `w` positions per later step, so
    `w_ij = 0` exactly beyond `w·(T - 1)`; a sentence node carries it everywhere."""
    window, steps = 1, 3
    reach = window * (steps - 1)
    model = build(
        SLSTMModel, dtype=torch.float64, window_size=window, num_steps=steps, num_sentence_nodes=0, **SIMPLIFIED
    )
    ids, mask = pad(random_ids([9, 6]), "right")
    weights = weighted_sum_decomposition(model, ids, attention_mask=mask).word_weights  # (batch, seq, seq, hidden)
    assert torch.all(weights >= 0) and torch.all(weights.sum(2) <= 1 + 1e-12)
    positions = torch.arange(ids.shape[1])
    distance = (positions[:, None] - positions[None, :]).abs()  # (seq, seq)
    assert torch.all(weights[0][distance > reach] == 0)
    assert torch.all(weights[0][distance <= reach] > 0)

    with_node = build(SLSTMModel, dtype=torch.float64, window_size=window, num_steps=steps, **SIMPLIFIED)
    maps = weighted_sum_decomposition(with_node, ids, attention_mask=mask)
    assert torch.all(maps.word_weights[0][distance > reach] > 0)
    assert torch.all(maps.sentence_weights >= 0) and torch.all(maps.sentence_weights.sum(2) <= 1 + 1e-12)


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_sentence_gets_the_same_maps_alone_and_in_a_padded_batch(side):
    model = build(SLSTMModel, dtype=torch.float64, num_sentence_nodes=2, **SIMPLIFIED)
    sentences = random_ids(LENGTHS, seed=1)
    ids, mask = pad(sentences, side)
    batched = weighted_sum_decomposition(model, ids, attention_mask=mask)
    for row, sentence in enumerate(sentences):
        alone = weighted_sum_decomposition(model, torch.tensor([sentence]))
        real = mask[row]
        torch.testing.assert_close(batched.word_weights[row][real][:, real], alone.word_weights[0], rtol=0, atol=1e-12)
        torch.testing.assert_close(
            batched.sentence_weights[row][:, real], alone.sentence_weights[0], rtol=0, atol=1e-12
        )
        torch.testing.assert_close(batched.contents[row][real], alone.contents[0], rtol=0, atol=1e-12)


def test_with_the_output_gate_the_maps_are_exact_for_the_cells():
    """With the output gate, `h = o ⊙ tanh(c)`: the cells are still exactly the weighted sums."""
    model = build(SLSTMModel, dtype=torch.float64, num_sentence_nodes=2, context_independent_content=True)
    ids, mask = pad(random_ids(LENGTHS), "left")
    maps = weighted_sum_decomposition(model, ids, attention_mask=mask)
    word_cells, sentence_cells = final_cells(model, ids, attention_mask=mask)
    expected_word_cells, expected_sentence_cells = weighted_sums(maps)
    torch.testing.assert_close(expected_word_cells, word_cells, rtol=0, atol=1e-12)
    torch.testing.assert_close(expected_sentence_cells, sentence_cells, rtol=0, atol=1e-12)


@pytest.mark.parametrize("model_class", [SLSTMForSequenceClassification, SLSTMForTokenClassification])
def test_task_models_and_extra_inputs_such_as_char_ids_are_passed_to_the_encoder(model_class):
    config = tiny_config(num_labels=3, **SIMPLIFIED, **char_settings())
    model = build(model_class, config, dtype=torch.float64)
    ids, mask = pad(random_ids(LENGTHS), "right")
    char_ids = pad_spellings(random_spellings(LENGTHS), "right")
    maps = weighted_sum_decomposition(model, ids, attention_mask=mask, char_ids=char_ids)
    with torch.no_grad():
        outputs = model.slstm(ids, attention_mask=mask, char_ids=char_ids)
    torch.testing.assert_close(torch.tanh(weighted_sums(maps)[0]), outputs.last_hidden_state, rtol=0, atol=1e-12)
    other_spellings = weighted_sum_decomposition(model, ids, attention_mask=mask, char_ids=char_ids.flip(-1))
    assert not torch.equal(other_spellings.contents, maps.contents)  # char_ids reached the embeddings
    with pytest.raises(ValueError, match="char_ids"):
        weighted_sum_decomposition(model, ids, attention_mask=mask)


def test_inputs_embeds_give_the_maps_of_the_ids():
    model = build(SLSTMModel, dtype=torch.float64, **SIMPLIFIED)
    ids, mask = pad(random_ids(LENGTHS), "right")
    from_ids = weighted_sum_decomposition(model, ids, attention_mask=mask)
    embeds = model.get_input_embeddings()(ids).detach()
    from_embeds = weighted_sum_decomposition(model, inputs_embeds=embeds, attention_mask=mask)
    torch.testing.assert_close(from_embeds.word_weights, from_ids.word_weights, rtol=0, atol=0)


@pytest.mark.parametrize(
    "settings",
    [{}, {"remove_output_gate": True}],
    ids=["default", "output-gate-removed-only"],
)
def test_step_dependent_content_is_refused_naming_both_settings(settings):
    model = build(SLSTMModel, **settings)
    with pytest.raises(ValueError, match="context_independent_content=False") as error:
        weighted_sum_decomposition(model, torch.tensor([[4, 5, 6]]))
    assert "remove_output_gate" in str(error.value)


def test_a_model_without_an_slstm_encoder_is_refused():
    with pytest.raises(TypeError, match="needs an SLSTMModel.*got a Linear"):
        weighted_sum_decomposition(nn.Linear(2, 2), torch.tensor([[4, 5]]))
    holder = nn.Module()
    holder.slstm = nn.GRU(2, 2)
    with pytest.raises(TypeError, match="got a Module whose .slstm is a GRU"):
        weighted_sum_decomposition(holder, torch.tensor([[4, 5]]))


def test_active_dropout_is_refused_and_a_dropout_free_training_model_works():
    ids = torch.tensor([[4, 5, 6, 7]])
    model = build(SLSTMModel, hidden_dropout=0.3, **SIMPLIFIED).train()
    with pytest.raises(ValueError, match=r"transition\.hidden_dropout.*model\.eval\(\)"):
        weighted_sum_decomposition(model, ids)
    model.eval()
    evaluated = weighted_sum_decomposition(model, ids)

    without_dropout = build(SLSTMModel, **SIMPLIFIED)
    training = weighted_sum_decomposition(without_dropout.train(), ids)
    torch.testing.assert_close(
        training.word_weights, weighted_sum_decomposition(without_dropout.eval(), ids).word_weights
    )
    assert evaluated.word_weights.shape == training.word_weights.shape


def test_bad_model_inputs_get_the_models_own_errors():
    model = build(SLSTMModel, **SIMPLIFIED)
    with pytest.raises(ValueError, match="attention_mask must have the shape"):
        weighted_sum_decomposition(model, torch.tensor([[4, 5, 6]]), attention_mask=torch.ones(1, 2))
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        weighted_sum_decomposition(model)


def assert_svg_shows_the_map(svg: str, norms: torch.Tensor, labels: list[str]) -> None:
    """The SVG's axes name the tokens (columns) and the tokens then g1, g2 (rows), and the centre of each cell of its
    heatmap has the colour of matplotlib's "Greys" map at that cell's norm over the largest (vmin 0)."""
    import matplotlib
    from PIL import Image

    texts = [html.unescape(text) for text in re.findall(r"<!-- (.*?) -->", svg)]
    axes = [*labels, "word j (content weighted)", *labels, "g1", "g2", "cell: word i, then sentence node"]
    assert texts[: len(axes)] == axes
    heatmap = re.search(r'<image xlink:href="data:image/png;base64,([^"]*)"[^>]*transform="([^"]*)"', svg)
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(heatmap.group(1)))).convert("RGB")) / 255
    assert heatmap.group(2).startswith("scale(1 -1)")  # the backend stores the rows bottom up
    pixels = pixels[::-1]
    rows, columns = norms.shape
    centres = pixels[((np.arange(rows) + 0.5) * pixels.shape[0] / rows).astype(int)]
    centres = centres[:, ((np.arange(columns) + 0.5) * pixels.shape[1] / columns).astype(int)]  # (rows, columns, 3)
    expected = matplotlib.colormaps["Greys"]((norms / norms.max()).numpy())[..., :3]
    np.testing.assert_allclose(centres, expected, atol=2 / 255)


def test_plot_script_draws_the_map_of_a_saved_model(tmp_path):
    pytest.importorskip("matplotlib")
    from run_scripts.utilities import plot_weighted_sum

    tokenizer = build_word_tokenizer([["a", "gripping", ",", "funny", "film", "."]])
    config = tiny_config(vocab_size=len(tokenizer), num_sentence_nodes=2, num_labels=2, **SIMPLIFIED)
    model = build(SLSTMForSequenceClassification, config)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    output = tmp_path / "figures" / "map.png"
    sentence = "A gripping, funny film."

    plot_weighted_sum.main(["--model_dir", str(tmp_path / "model"), "--sentence", sentence, "--output", str(output)])
    assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # The map is the saved encoder's: the norms of the in-memory model's weights (rows: 8 tokens, then 2 nodes).
    norms = plot_weighted_sum.plot(str(tmp_path / "model"), sentence, str(tmp_path / "again.svg"))
    encoding = tokenizer(sentence, return_tensors="pt")
    maps = weighted_sum_decomposition(model, **encoding)
    expected = torch.cat([maps.word_weights[0], maps.sentence_weights[0]]).norm(dim=-1)
    assert norms.shape == (8 + 2, 8)
    torch.testing.assert_close(norms, expected)
    # Words as written, also where the vocabulary has none ("A" is <unk>).
    labels = ["<s>", "A", "gripping", ",", "funny", "film", ".", "</s>"]
    assert plot_weighted_sum.token_labels(encoding, sentence) == labels
    assert_svg_shows_the_map((tmp_path / "again.svg").read_text(), norms, labels)
