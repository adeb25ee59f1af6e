"""What `SLSTMTrainer`'s private `Trainer` hooks provide, observed in training and evaluation runs: the training
batches of every epoch come from the epoch-seeded length-grouped sampler (`_get_train_sampler`), evaluation keeps
the data's order (`_get_eval_sampler`), a second `train()` rebuilds the per-epoch decay schedule
(`_created_lr_scheduler`), and after a whole-step graph (`--cuda_graphs`) the Trainer logs the graph's gradient norm
(`_clip_grad_norm`, `_get_grad_norm`). Should transformers stop calling a hook, the run differs and these fail."""

import datasets
import pytest
import torch
from helpers import build, pad, random_ids

from modeling_slstm import SLSTMForSequenceClassification
from run_scripts.training.arguments import SLSTMTrainingArguments
from run_scripts.training.samplers import EpochSeededLengthGroupedSampler
from run_scripts.training.trainer import SLSTMTrainer

SEED = 5
BATCH_SIZE = 2
LENGTHS = [3, 7, 4, 4, 6, 2, 5, 3, 7, 6, 2, 5]


def sentences() -> list[list[int]]:
    rows = [ids + [index] for index, ids in enumerate(random_ids([n - 1 for n in LENGTHS], seed=1))]
    assert len({tuple(row) for row in rows}) == len(rows)  # every batch row names its example
    return rows


def collate(rows: list[dict]) -> dict:
    ids, mask = pad([row["input_ids"] for row in rows])
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([row["labels"] for row in rows])}


class RecordingTrainer(SLSTMTrainer):
    """Records the example of every training row, in the order the batches come."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def compute_loss(self, model, inputs, *args, **kwargs):
        for ids, mask in zip(inputs["input_ids"], inputs["attention_mask"]):
            self.seen.append(ids[mask.bool()].tolist())
        return super().compute_loss(model, inputs, *args, **kwargs)


def trainer(tmp_path, **options) -> RecordingTrainer:
    rows = sentences()
    # No length column, as the training scripts' data: the length-grouped sampler reads the lengths of `input_ids`.
    dataset = datasets.Dataset.from_dict({"input_ids": rows, "labels": [index % 2 for index in range(len(rows))]})
    args = SLSTMTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=BATCH_SIZE, per_device_eval_batch_size=BATCH_SIZE,
        train_sampling_strategy="group_by_length", seed=SEED, report_to="none", use_cpu=True, save_strategy="no",
        dataloader_pin_memory=False, **options,
    )  # fmt: skip
    model = build(SLSTMForSequenceClassification, num_labels=2)
    return RecordingTrainer(model=model, args=args, train_dataset=dataset, eval_dataset=dataset, data_collator=collate)


def test_each_epoch_draws_the_epoch_seeded_length_grouped_order(tmp_path):
    run = trainer(tmp_path, num_train_epochs=2, learning_rate=0.0)
    run.train()
    rows = sentences()
    observed = [[rows.index(ids) for ids in run.seen[epoch * len(rows) : (epoch + 1) * len(rows)]] for epoch in (0, 1)]
    expected = []
    for epoch in (0, 1):
        sampler = EpochSeededLengthGroupedSampler(BATCH_SIZE, lengths=LENGTHS, seed=SEED)
        sampler.set_epoch(epoch)
        expected.append(list(sampler))
    assert observed == expected
    assert expected[0] != expected[1]  # the epochs are shuffled differently


def test_evaluation_keeps_the_datas_order(tmp_path):
    """With `group_by_length` the stock Trainer groups evaluation batches by length too; predictions.txt needs the
    data's order."""
    run = trainer(tmp_path)
    batches = list(run.get_eval_dataloader())
    order = [ids[mask].tolist() for batch in batches for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
    assert order == sentences()


def test_a_second_train_restarts_the_per_epoch_decay(tmp_path):
    learning_rate, decay = 1e-3, 0.5
    steps_per_epoch = len(LENGTHS) // BATCH_SIZE
    run = trainer(tmp_path, num_train_epochs=2, learning_rate=learning_rate, lr_decay_per_epoch=decay, logging_steps=1)

    def logged_rates():
        return [entry["learning_rate"] for entry in run.state.log_history if "learning_rate" in entry]

    run.train()
    first = logged_rates()
    expected = [learning_rate * decay ** (step // steps_per_epoch) for step in range(2 * steps_per_epoch)]
    assert first == pytest.approx(expected)
    run.train()  # a new run of the same trainer: a new schedule, not the first run's continued
    assert logged_rates() == pytest.approx(expected)


@pytest.mark.parametrize("max_grad_norm", [0.01, 0.0])  # clipped (`_clip_grad_norm`), only measured (`_get_grad_norm`)
def test_the_whole_step_graphs_gradient_norm_is_logged(tmp_path, max_grad_norm):
    """With `--cuda_graphs` (uncaptured on a CPU) the graph has clipped and released the gradients: the loop's own
    clipping would find none (norm 0). The oracle is the eager run's logged norms."""

    def logged_norms(graphs: bool) -> list[float]:
        run = trainer(tmp_path / str(graphs), max_steps=4, max_grad_norm=max_grad_norm, logging_steps=1)
        run.args.cuda_graphs = graphs  # parsing refuses it without a CUDA GPU
        run.train()
        return [entry["grad_norm"] for entry in run.state.log_history if "grad_norm" in entry]

    eager = logged_norms(False)
    assert len(eager) == 4 and min(eager) > 0.01
    assert logged_norms(True) == pytest.approx(eager, rel=1e-5)
