"""`--torch_compile` off CUDA: `SLSTMTrainer` compiles the S-LSTM's recurrence step alone (`compile_recurrence_step`),
not the whole model, which Inductor compiled for tens of minutes per batch shape on a CPU. The compiled step must train
as eager does, keep padding exact, and compile a bounded number of times whatever widths the batches take. Dynamo's
`eager` and `aot_eager` backends stand in for Inductor (the same graphs, no C++ compile)."""

import datasets
import pytest
import torch
from helpers import build, pad, random_ids, real, tagger_config
from torch._dynamo.testing import CompileCounter
from torch._dynamo.utils import counters

from modeling_slstm import SLSTMForTokenClassification
from run_scripts.training.arguments import SLSTMTrainingArguments
from run_scripts.training.threads import ThreadCountCallback
from run_scripts.training.trainer import SLSTMTrainer, compile_recurrence_step

LENGTHS = [3, 7, 4, 9, 5, 2, 6, 8, 3, 10, 5]  # batches of 2 in the sampler's order, of several widths, then 1 row


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every test compiles from scratch: no cached graph or compile count carries over between tests."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def collate(rows: list[dict]) -> dict:
    ids, mask = pad([row["input_ids"] for row in rows])
    labels, _ = pad([row["labels"] for row in rows], value=-100)
    return {"input_ids": ids, "attention_mask": mask.long(), "labels": labels}


def trained(tmp_path, **options) -> SLSTMTrainer:
    """A tiny CRF tagger trained one epoch (6 steps) on a CPU; `options` are extra training arguments."""
    rows = random_ids(LENGTHS, seed=3)
    labels = [[(0, 1, 3)[(token + position) % 3] for position, token in enumerate(row)] for row in rows]  # valid BIO
    dataset = datasets.Dataset.from_dict({"input_ids": rows, "labels": labels})
    args = SLSTMTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=3, num_train_epochs=1,
        learning_rate=0.05, logging_steps=1, seed=7, report_to="none", use_cpu=True, save_strategy="no",
        dataloader_pin_memory=False, **options,
    )  # fmt: skip
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True)).train()
    run = SLSTMTrainer(model=model, args=args, train_dataset=dataset, eval_dataset=dataset, data_collator=collate)
    run.train()
    return run


def logged_losses(run: SLSTMTrainer) -> list[float]:
    return [entry["loss"] for entry in run.state.log_history if "loss" in entry]


def test_torch_compile_on_a_cpu_compiles_the_step_alone_and_trains_as_eager(tmp_path, caplog):
    """The losses and weights of 6 steps (5 batches of 2 rows, of 4 widths, then 1 row) are those of
    eager training. `aot_eager` traces the step's forward and backward through AOTAutograd, as Inductor does, and runs
    the traced operators: in torch 2.13 equal to eager's to the last bit; the tolerance of 1e-6 leaves room for a
    decomposition that sums in another order, far below what a step changes (learning rate 0.05).

    Seen failing: with the accelerator's whole-model compile left on (no `_build_accelerator_args` override), the
    model is wrapped whole; without `dynamic=True`, each new width compiles the step again; with the thread count
    re-measured during training (`--threads auto` on a busy machine), each new count compiles it again."""
    eager = trained(tmp_path / "eager")
    run = trained(tmp_path / "compiled", torch_compile_backend="aot_eager")
    warnings = [record.getMessage() for record in caplog.records if "--torch_compile" in record.getMessage()]
    assert len(warnings) == 1 and "costs about" in warnings[0]  # once, with what it costs on a CPU
    # Dynamo guards on the thread count: `--threads auto` moving it on a busy machine would compile the step again.
    assert not any(isinstance(callback, ThreadCountCallback) for callback in run.callback_handler.callbacks)
    assert any(isinstance(callback, ThreadCountCallback) for callback in eager.callback_handler.callbacks)
    step = run.model.slstm.transition
    assert step._compiled_call_impl is not None  # compiled in place: the parameters keep their names
    assert not isinstance(run.model_wrapped, torch._dynamo.eval_frame.OptimizedModule)  # the rest stays eager
    # For every width: one graph for the first step (its initial cells need no gradient), one for the later steps,
    # and both again for the last batch of 1 row (Dynamo specialises sizes of 1).
    assert counters["stats"]["unique_graphs"] == 4
    tolerance = 1e-6
    assert logged_losses(run) == pytest.approx(logged_losses(eager), rel=tolerance, abs=tolerance)
    assert len(logged_losses(run)) == 6
    for (name, weight), (_, eager_weight) in zip(
        run.model.named_parameters(), eager.model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(weight, eager_weight, rtol=tolerance, atol=tolerance, msg=name)
    run.evaluate()  # without gradients: one graph more for batches of 3 rows, one for the last row, all widths
    assert counters["stats"]["unique_graphs"] == 6


def test_the_compiled_step_keeps_padding_exact_and_compiles_once_for_all_widths():
    """Through the compiled step, a sentence padded in batches of several widths, right or left, gets the outputs of
    the eager model on the sentence alone, and the step compiles in the first batch only (`CompileCounter`): every
    later width and batch size reuses its graphs. Seen failing (4 compiles) without `dynamic=True`."""
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True))
    sentences = random_ids([4, 9, 6, 2], seed=5)
    with torch.no_grad():
        alone = model(input_ids=torch.tensor([sentences[0]])).logits[0]  # eager: (4, labels)
        counter = CompileCounter()
        compile_recurrence_step(model.slstm.transition, {"backend": counter, "dynamic": True})
        for rows in (2, 3, 4):
            ids, mask = pad(sentences[:rows], side="left" if rows == 3 else "right")
            logits = model(input_ids=ids, attention_mask=mask).logits  # (rows, seq, labels)
            torch.testing.assert_close(real(logits, mask, 0), alone, rtol=1e-6, atol=1e-6)
    # Two graphs, both made in the first batch: the first step (whose sentence state is the learned h^0 broadcast over
    # the batch, of stride 0) and the later steps. Without `dynamic=True`, each new width compiles both again.
    assert counter.frame_count == 2
