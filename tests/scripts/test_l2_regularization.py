"""`--l2_regularization`: the paper's coupled L2 in Adam, checked against an Adam step computed by hand."""

import pytest
import torch
from helpers import build, pad, random_ids

from modeling_slstm import SLSTMForSequenceClassification
from run_scripts.training.arguments import SLSTMTrainingArguments
from run_scripts.training.trainer import SLSTMTrainer

L2 = 0.05
LEARNING_RATE = 0.01
BETA1, BETA2, EPSILON = 0.9, 0.999, 1e-8


def one_adam_step(tmp_path, include_word_embeddings: bool):
    """Parameters before and after one optimizer step of `SLSTMTrainer.create_optimizer` with `--l2_regularization`,
    the gradients of that step, and the optimizer."""
    model = build(SLSTMForSequenceClassification, num_labels=2).train()
    args = SLSTMTrainingArguments(
        output_dir=str(tmp_path), learning_rate=LEARNING_RATE, adam_beta1=BETA1, adam_beta2=BETA2,
        adam_epsilon=EPSILON, l2_regularization=L2, l2_include_word_embeddings=include_word_embeddings,
        report_to="none", use_cpu=True,
    )  # fmt: skip
    trainer = SLSTMTrainer(model=model, args=args)
    optimizer = trainer.create_optimizer()
    ids, mask = pad(random_ids([4, 2]))  # a few words of the 20-word vocabulary: most embedding rows get no gradient
    model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1])).loss.backward()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    gradients = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    optimizer.step()
    return model, before, gradients, optimizer


@pytest.mark.parametrize("include_word_embeddings", [False, True])
def test_l2_is_added_to_the_gradient_before_adam(tmp_path, include_word_embeddings):
    model, before, gradients, optimizer = one_adam_step(tmp_path, include_word_embeddings)
    embedding_name = "slstm.embeddings.word_embeddings.weight"
    for name, parameter in model.named_parameters():
        regularized = include_word_embeddings or name != embedding_name
        # The L2 gradient of loss + L2/2 * ||θ||², then Adam's first step by its definition (bias-corrected moments).
        gradient = gradients[name] + (L2 * before[name] if regularized else 0.0)
        first_moment, second_moment = (1 - BETA1) * gradient, (1 - BETA2) * gradient**2
        corrected_first, corrected_second = first_moment / (1 - BETA1), second_moment / (1 - BETA2)
        expected = before[name] - LEARNING_RATE * corrected_first / (corrected_second.sqrt() + EPSILON)
        state = optimizer.state[parameter]
        torch.testing.assert_close(state["exp_avg"], first_moment, rtol=1e-6, atol=1e-9, msg=name)
        torch.testing.assert_close(state["exp_avg_sq"], second_moment, rtol=1e-6, atol=1e-12, msg=name)
        torch.testing.assert_close(parameter.detach(), expected, rtol=1e-6, atol=1e-7, msg=name)

    # Embedding rows of words outside the batch have no data gradient: only the L2 term can move them.
    embedding = model.slstm.embeddings.word_embeddings.weight.detach()
    unseen = (gradients[embedding_name] == 0).all(-1) & (before[embedding_name] != 0).all(-1)
    assert unseen.sum() >= 5
    moved = embedding[unseen] - before[embedding_name][unseen]
    if include_word_embeddings:  # Adam's first step on the gradient L2 * θ: a step of the learning rate toward zero
        torch.testing.assert_close(moved, -LEARNING_RATE * before[embedding_name][unseen].sign(), rtol=1e-4, atol=0)
    else:
        assert torch.all(moved == 0)


def test_decoupled_weight_decay_is_not_coupled_l2(tmp_path):
    """The oracle above tells the two apart: AdamW's first moment holds the data gradient alone."""
    model = build(SLSTMForSequenceClassification, num_labels=2).train()
    args = SLSTMTrainingArguments(output_dir=str(tmp_path), weight_decay=L2, report_to="none", use_cpu=True)
    trainer = SLSTMTrainer(model=model, args=args)
    optimizer = trainer.create_optimizer()
    ids, mask = pad(random_ids([3]))
    model(input_ids=ids, attention_mask=mask, labels=torch.tensor([1])).loss.backward()
    weight = model.classifier.weight
    gradient = weight.grad.detach().clone()
    optimizer.step()
    torch.testing.assert_close(optimizer.state[weight]["exp_avg"], (1 - args.adam_beta1) * gradient)


def test_l2_and_weight_decay_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="--l2_regularization 0.001 .* and --weight_decay 0.01"):
        SLSTMTrainingArguments(output_dir=str(tmp_path), l2_regularization=0.001, weight_decay=0.01)
    with pytest.raises(ValueError, match="--l2_regularization must be >= 0"):
        SLSTMTrainingArguments(output_dir=str(tmp_path), l2_regularization=-1.0)
