"""The private `Trainer` members that `SLSTMTrainer` relies on (its "Private Trainer methods" section) still exist
with the signatures and roles it assumes: when transformers changes one, this fails by name instead of training
silently differently (unshuffled batches, shuffled evaluation, a stale scheduler)."""

import inspect

from transformers import Trainer


def parameters(method) -> list[str]:
    return list(inspect.signature(method).parameters)


def test_sampler_methods_take_what_slstm_trainer_passes():
    assert parameters(Trainer._get_train_sampler)[:2] == ["self", "train_dataset"]
    assert inspect.signature(Trainer._get_train_sampler).parameters["train_dataset"].default is None
    assert parameters(Trainer._get_eval_sampler) == ["self", "eval_dataset"]
    assert parameters(Trainer._remove_unused_columns)[:3] == ["self", "dataset", "description"]


def test_the_trainer_still_builds_its_loaders_through_them():
    assert "sampler_fn=self._get_train_sampler" in inspect.getsource(Trainer.get_train_dataloader)
    assert "sampler_fn=self._get_eval_sampler" in inspect.getsource(Trainer.get_eval_dataloader)


def test_created_lr_scheduler_still_marks_a_scheduler_to_rebuild():
    assert "self._created_lr_scheduler = True" in inspect.getsource(Trainer.create_scheduler)
    assert "if self._created_lr_scheduler:" in inspect.getsource(Trainer)


def test_epoch_callbacks_run_before_the_epoch_draws_its_batches():
    """`SamplerEpochCallback` sets the sampler's epoch in `on_epoch_begin`: that must come before the Trainer iterates
    the loader of the epoch."""
    source = inspect.getsource(Trainer)
    begin = source.index("self.callback_handler.on_epoch_begin(")
    run_epoch = inspect.getsource(Trainer._run_epoch)
    assert begin < source.index("self._run_epoch(", begin)
    assert "epoch_iterator = iter(train_dataloader)" in run_epoch
