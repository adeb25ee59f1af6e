"""`SLSTMTrainer`: the `transformers` Trainer of `run_ner.py` and `run_classification.py`.

It adds the paper's per-epoch exponential learning-rate decay and L2 regularisation, a length-grouped sampler that
resumes exactly and token-budget batches (`--max_tokens_per_batch`, both in `samplers.py`), evaluation in the data's
order, the S-LSTM model card (`model_card.py`) that `create_model_card` / `push_to_hub` write, with
`--cuda_graphs` whole training steps replayed from CUDA graphs (`graph_step.py`), and with `--torch_compile` off CUDA
the recurrence step compiled alone (`compile_recurrence_step`).
"""

import logging
import math
from functools import partial
from pathlib import Path

import torch
from accelerate.utils import TorchDynamoPlugin
from torch.utils.data import DataLoader
from transformers import EarlyStoppingCallback, Trainer
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import seed_worker
from transformers.training_args import OptimizerNames

from modeling_slstm.modeling_slstm import SLSTMStateTransition
from run_scripts.training.gpu_batching import StaticShapeBatches, is_bucket_shape
from run_scripts.training.graph_step import (
    GraphSteppedOptimizer,
    WholeStepGraphs,
    eager_reason,
    optimizer_eager_reason,
    training_step,
)
from run_scripts.training.model_card import model_card_info, write_model_card
from run_scripts.training.samplers import (
    EpochSeededLengthGroupedSampler,
    SamplerEpochCallback,
    TokenBudgetBatchSampler,
)
from run_scripts.training.threads import ThreadCountCallback
from run_scripts.training.usage_errors import UsageError

logger = logging.getLogger(__name__)

NUM_ITEMS = "num_items_in_batch"  # the Trainer's count of the batch's labels, a static input of the graphs too


class SLSTMTrainer(Trainer):
    """`Trainer` with the paper's per-epoch exponential LR decay (`--lr_decay_per_epoch`), token-budget batches
    (`--max_tokens_per_batch`), early stopping (`--early_stopping_patience`), whole-step CUDA graphs
    (`--cuda_graphs`) and the S-LSTM model card.

    With `--cuda_graphs`, `training_step` trains each batch with `graph_step.WholeStepGraphs` (forward, loss,
    backward, clipping and the optimizer's step in one graph per batch shape) inside the Trainer's own loop, whose
    later calls then do no work twice: the optimizer (a `graph_step.GraphSteppedOptimizer`) skips the step the
    graph made, and the gradient clipping returns the graph's norm. The scheduler steps after the replay, as after an
    eager step, writing the next rate into the optimizer's rate tensors. Where no graph applies (`eager_reason`, an
    optimizer without `capturable`, a shape past `--cuda_graphs_max_shapes`), the step is the Trainer's, and the
    reason is logged once.

    The decay is a `LambdaLR` over optimizer steps, `lr = lr_0 * decay ** (step // steps_per_epoch)`, so it is saved
    in and restored from checkpoints like every other scheduler.

    Args:
        model_card (`dict`, *optional*):
            The task's fields of the model card: `pipeline_tag`, `auto_class`, `task_description`, `training_data`,
            `usage_example` (whose `REPO_ID` becomes the Hub repository or the output folder) and
            `training_recipe` (the arguments that a config's recipe set, shown under the command). The command line,
            labels, config and the `eval_`/`test_` metrics given to `report_metrics` are added when the card is
            written.
        train_data_collator (`Callable[[list[dict]], dict]`, *optional*):
            The collator of the training batches, where it differs from `data_collator` (which then collates the
            evaluation and prediction batches): e.g. `gpu_batching.StaticShapeBatches`, whose fillers must not reach
            the predictions.
        *args, **kwargs: those of `Trainer`.
    """

    def __init__(self, *args, model_card: dict | None = None, train_data_collator=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_data_collator = train_data_collator
        if getattr(self.args, "early_stopping_patience", None):
            self.add_callback(EarlyStoppingCallback(self.args.early_stopping_patience))
        self.add_callback(SamplerEpochCallback(self))
        if getattr(self.args, "threads", None) == "auto":
            if self.args.torch_compile:
                # Dynamo guards on the thread count: each count the callback moved to would compile the model again.
                logger.info("Threads: kept for the whole run (a compiled model compiles again for each thread count)")
            else:
                self.add_callback(ThreadCountCallback())
        self.model_card = model_card or {}
        self.reported_metrics = {}
        self.epoch_seeded_sampler = None  # the training (batch) sampler whose order depends on the epoch
        self.flops_per_token = None  # `floating_point_ops`' factor, counted on the first step
        self.graph_optimizer = None  # with --cuda_graphs: the `GraphSteppedOptimizer` of `create_optimizer`
        self.uncapturable_optimizer = None  # with --cuda_graphs: why the optimizer's step cannot be captured
        self.whole_step = None  # with --cuda_graphs: the run's `WholeStepGraphs`, made at its first training step
        self.whole_step_checked = False  # whether this run's first training step decided on `whole_step`
        self.graph_step_norm = None  # the gradient norm of the step a graph just made
        step = recurrence_step_to_compile(self.model, self.args)
        if step is not None:
            compile_recurrence_step(step, torch_compile_kwargs(self.args))

    def train(self, *args, **kwargs):
        # Each run its own graphs: an earlier run's would replay the optimizer state it captured, which resuming
        # from a checkpoint replaces.
        self.whole_step, self.whole_step_checked = None, False
        return super().train(*args, **kwargs)

    def training_step(self, model, inputs: dict, num_items_in_batch=None) -> torch.Tensor:
        """The Trainer's step or, with `--cuda_graphs`, the whole optimizer step from this batch shape's graph; the
        loss returned is a copy of the graph's, which the Trainer adds up on the device."""
        self.graph_step_norm = None
        whole_step = self.whole_step_for(model) if getattr(self.args, "cuda_graphs", False) else None
        if whole_step is not None and self.past_the_buckets(inputs):
            shape = "x".join(map(str, inputs["input_ids"].shape))
            whole_step.log_once(f"a batch of a shape past the static-shape buckets ({shape})")
            whole_step = None
        if whole_step is not None:
            batch = dict(inputs) if num_items_in_batch is None else {**inputs, NUM_ITEMS: num_items_in_batch}
            model.train()
            outputs = whole_step(batch)
            if outputs is not None:
                loss, self.graph_step_norm = outputs
                self.graph_optimizer.stepped = True
                return loss
        return super().training_step(model, inputs, num_items_in_batch)

    def evaluation_loop(self, *args, **kwargs):
        """The Trainer's evaluation and prediction loop on the run's threads (`--threads`, which a number forces): the
        model's own choice for CPU inference (`config.inference_threads`) is set aside meanwhile, and is what the
        saved config keeps. A model without that choice (a pretrained encoder of the Hub's) runs as it is."""
        config = self.model.config
        if not hasattr(config, "inference_threads"):
            return super().evaluation_loop(*args, **kwargs)
        models_choice, config.inference_threads = config.inference_threads, "torch"
        try:
            return super().evaluation_loop(*args, **kwargs)
        finally:
            config.inference_threads = models_choice

    def past_the_buckets(self, inputs: dict) -> bool:
        """Whether the training batches come in static shapes (`StaticShapeBatches`) and this one is not among them:
        a sentence past the last bucket gives its batch a width of its own, a graph that no other batch would replay."""
        collator = self.train_data_collator
        if not isinstance(collator, StaticShapeBatches) or "input_ids" not in inputs:
            return False
        return not is_bucket_shape(inputs["input_ids"].shape, collator.batch_size, collator.buckets)

    def whole_step_for(self, model) -> WholeStepGraphs | None:
        """This run's `WholeStepGraphs`, made at its first step, or `None` (logged) where it cannot train `model`.
        Without a CUDA device (as in the tests) the step is not captured but called directly."""
        if self.whole_step_checked:
            return self.whole_step
        self.whole_step_checked = True
        reason = eager_reason(self.args, model)
        if reason is None and self.graph_optimizer is None:
            reason = self.uncapturable_optimizer or (
                "the optimizer was not made by SLSTMTrainer.create_optimizer (given to the Trainer?)"
            )
        if reason is not None:
            logger.warning(f"--cuda_graphs: training eagerly: {reason}")
            return None
        capture = self.args.device.type == "cuda"
        if not capture:
            logger.warning(f"--cuda_graphs on {self.args.device}: no CUDA device, the whole step runs uncaptured")
        optimizer = self.graph_optimizer.optimizer
        step = partial(
            training_step,
            partial(self.whole_step_loss, model),
            parameters=[parameter for parameter in model.parameters() if parameter.requires_grad],
            optimizer=optimizer,
            max_grad_norm=self.args.max_grad_norm,
        )
        self.whole_step = WholeStepGraphs(step, optimizer, self.args.cuda_graphs_max_shapes, capture)
        return self.whole_step

    def whole_step_loss(self, model, inputs: dict) -> torch.Tensor:
        """The loss of the Trainer's `training_step` (with gradient accumulation 1 and one device)."""
        batch = dict(inputs)  # `compute_loss` may take labels out
        num_items_in_batch = batch.pop(NUM_ITEMS, None)
        with self.compute_loss_context_manager():
            return self.compute_loss(model, batch, num_items_in_batch=num_items_in_batch)

    def floating_point_ops(self, inputs: dict) -> int:
        """The Trainer's estimate, 6 x tokens x parameters without the embeddings, with the parameters counted once
        (the Trainer counts them again on every training step: a walk over all parameters per step)."""
        main_input = inputs.get(self.model.main_input_name)
        if main_input is None:
            return super().floating_point_ops(inputs)
        if self.flops_per_token is None:
            self.flops_per_token = 6 * self.model.num_parameters(exclude_embeddings=True)
        return self.flops_per_token * main_input.numel()

    def report_metrics(self, split: str, metrics: dict, num_samples: int) -> None:
        """Logs the metrics of `split` (`train`, `eval` or `test`) with its number of examples, saves them in
        `<split>_results.json` and `all_results.json`, and keeps them for the model card."""
        metrics = dict(metrics, **{f"{split}_samples": num_samples})
        self.log_metrics(split, metrics)
        self.save_metrics(split, metrics)
        self.reported_metrics.update(metrics)

    def optimizer_steps_per_epoch(self) -> int:
        """Optimizer steps per epoch of each process, as the Trainer counts them (batches / accumulation, rounded
        up)."""
        args = self.args
        if isinstance(self.epoch_seeded_sampler, TokenBudgetBatchSampler):
            batches = len(self.epoch_seeded_sampler) // args.world_size
        elif args.dataloader_drop_last:
            batches = len(self.train_dataset) // (args.per_device_train_batch_size * args.world_size)
        else:
            batches = math.ceil(len(self.train_dataset) / (args.per_device_train_batch_size * args.world_size))
        return max(1, math.ceil(batches / args.gradient_accumulation_steps))

    def data_seed(self) -> int:
        return self.args.data_seed if self.args.data_seed is not None else self.args.seed

    def get_train_dataloader(self) -> DataLoader:
        """With `--max_tokens_per_batch`: batches of a token budget from `TokenBudgetBatchSampler` (in place of
        `--per_device_train_batch_size` and `--train_sampling_strategy`); otherwise the Trainer's."""
        budget = getattr(self.args, "max_tokens_per_batch", None)
        if budget is None:
            if self.train_data_collator is None:
                return super().get_train_dataloader()
            # The Trainer's loader reads `self.data_collator` when it is made: the training collator for that moment.
            evaluation_collator, self.data_collator = self.data_collator, self.train_data_collator
            try:
                return super().get_train_dataloader()
            finally:
                self.data_collator = evaluation_collator
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        column = self.args.length_column_name
        if column in self.train_dataset.column_names:
            lengths = self.train_dataset[column]
        else:
            lengths = [len(ids) for ids in self.train_dataset["input_ids"]]
        sampler = TokenBudgetBatchSampler(lengths, budget, seed=self.data_seed(), num_processes=self.args.world_size)
        self.epoch_seeded_sampler = sampler
        logger.info(
            f"Token-budget batches: at most {budget} padded tokens per batch and process, {len(sampler)} batches per "
            f"epoch over all processes ({len(lengths) / len(sampler):.1f} examples on average); "
            "--per_device_train_batch_size and --train_sampling_strategy are not used"
        )
        args = self.args
        loader = DataLoader(
            self._remove_unused_columns(self.train_dataset, description="Training"),
            batch_sampler=sampler,
            collate_fn=self.train_data_collator or self.data_collator,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            worker_init_fn=partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index),
        )
        return self.accelerator.prepare(loader)

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        """The per-epoch decay (`--lr_decay_per_epoch`), else the Trainer's schedule; with `--cuda_graphs`, a
        `LambdaLR` schedule (linear, cosine, constant...) becomes a `HostComputedLambdaLR` with the same factors,
        which writes each rate into the optimizer's rate tensors without reading one back."""
        decay = getattr(self.args, "lr_decay_per_epoch", None)
        if self.lr_scheduler is not None:
            return super().create_scheduler(num_training_steps, optimizer)
        if decay is None:
            scheduler = super().create_scheduler(num_training_steps, optimizer)
            if getattr(self.args, "cuda_graphs", False) and type(scheduler) is torch.optim.lr_scheduler.LambdaLR:
                self.lr_scheduler = HostComputedLambdaLR(scheduler.optimizer, scheduler.lr_lambdas)
            return self.lr_scheduler
        steps_per_epoch = self.optimizer_steps_per_epoch()
        self.lr_scheduler = HostComputedLambdaLR(
            optimizer if optimizer is not None else self.optimizer,
            lambda step: decay ** (step // steps_per_epoch),
        )
        self._created_lr_scheduler = True
        return self.lr_scheduler

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        """The Trainer's optimizer, except: with `--l2_regularization`, the paper's Adam with coupled L2
        (`torch.optim.Adam(weight_decay=...)` adds the coefficient times each weight to its gradient), the word
        embeddings in a group without it unless `--l2_include_word_embeddings`; with
        `--feature_encoder_learning_rate`, the trainable feature-encoder weights in groups of their own with that
        learning rate; with `--cuda_graphs`, capturable, with learning rates on the device (`capturable_options`),
        wrapped in a `GraphSteppedOptimizer` (`training_step`), unless its class cannot be captured (SGD, Adagrad,
        Adafactor: `optimizer_eager_reason`, then it trains eagerly, logged at the first step). Resuming keeps the
        run's own learning-rate tensors or floats (`keep_the_runs_rates`)."""
        l2 = self.args.l2_regularization
        encoder_learning_rate = self.args.feature_encoder_learning_rate
        graphed = getattr(self.args, "cuda_graphs", False)
        if self.optimizer is not None:
            return super().create_optimizer(model)
        if l2 is None and encoder_learning_rate is None and not graphed:
            optimizer = super().create_optimizer(model)
            keep_the_runs_rates(optimizer)
            return optimizer
        model = self.model if model is None else model
        if l2 is not None:
            if self.args.optim not in (OptimizerNames.ADAMW_TORCH, OptimizerNames.ADAMW_TORCH_FUSED):
                logger.warning(
                    f"--l2_regularization trains with torch.optim.Adam: --optim {self.args.optim} is not used"
                )
            groups = l2_parameter_groups(model, l2, self.args.l2_include_word_embeddings)
            optimizer_class = torch.optim.Adam
            optimizer_kwargs = {"lr": self.args.learning_rate, "betas": (self.args.adam_beta1, self.args.adam_beta2),
                                "eps": self.args.adam_epsilon}  # fmt: skip
        else:
            optimizer_class, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
            groups = weight_decay_parameter_groups(
                model, self.get_decay_parameter_names(model), self.args.weight_decay
            )
        if encoder_learning_rate is not None:
            groups = with_feature_encoder_learning_rate(model, groups, encoder_learning_rate)
        if graphed:
            self.uncapturable_optimizer = optimizer_eager_reason(optimizer_class)  # then trained as without graphs
            graphed = self.uncapturable_optimizer is None
        if graphed:
            groups, optimizer_kwargs = capturable_options(groups, optimizer_kwargs, self.args.device)
        self.optimizer = optimizer_class(groups, **optimizer_kwargs)
        keep_the_runs_rates(self.optimizer)
        if graphed:
            self.graph_optimizer = self.optimizer = GraphSteppedOptimizer(self.optimizer)
        return self.optimizer

    def create_model_card(self, model_name: str | None = None, **kwargs):
        """Writes the S-LSTM model card (README.md) into `--output_dir` instead of the generic one; `push_to_hub`
        calls it before the upload."""
        if not self.is_world_process_zero():
            return
        info = model_card_info(self.args, self.model.config, self.model_card, self.reported_metrics)
        write_model_card(
            self.args.output_dir, info, self.args.hub_model_id or model_name or Path(self.args.output_dir).name
        )

    # Private `Trainer` methods and attributes, all in this section: transformers has no public hook for what they do.
    # tests/scripts/test_private_trainer_hooks.py fails loudly when transformers changes any of them.
    # - `_get_train_sampler`: the length-grouped sampler, made resumable (`EpochSeededLengthGroupedSampler`);
    # - `_get_eval_sampler`: evaluation in the data's order;
    # - `_remove_unused_columns` (called in `get_train_dataloader`): the Trainer's column filter, for our own loader;
    # - `_created_lr_scheduler` (set in `create_scheduler`): lets the Trainer rebuild our scheduler on a new `train()`;
    # - `_clip_grad_norm`, `_get_grad_norm`: after a whole-step graph (`training_step`), the norm it took before
    #   clipping, instead of clipping (again) the gradients that the graph has already used and released.
    # - `_build_accelerator_args`: with `--torch_compile` off CUDA, no whole-model compile by the accelerator, whose
    #   model `compile_recurrence_step` has compiled in part (`accelerate` would compile all of it again); observed by
    #   tests/scripts/test_torch_compile.py.

    def _build_accelerator_args(self, **kwargs) -> dict:
        args = super()._build_accelerator_args(**kwargs)
        if recurrence_step_to_compile(self.model, self.args) is not None:
            args["dynamo_plugin"] = TorchDynamoPlugin(backend="no")
        return args

    def _clip_grad_norm(self, model):
        return self.graph_step_norm if self.graph_step_norm is not None else super()._clip_grad_norm(model)

    def _get_grad_norm(self, model, grad_norm=None):
        return super()._get_grad_norm(model, self.graph_step_norm if grad_norm is None else grad_norm)

    def _get_train_sampler(self, train_dataset=None):
        sampler = super()._get_train_sampler(train_dataset)
        if isinstance(sampler, LengthGroupedSampler):
            sampler = EpochSeededLengthGroupedSampler(
                sampler.batch_size, lengths=sampler.lengths, seed=self.data_seed()
            )
            self.epoch_seeded_sampler = sampler
        return sampler

    def _get_eval_sampler(self, eval_dataset):
        """Evaluation and prediction keep the dataset's order even with `--train_sampling_strategy group_by_length`
        (which `transformers` also applies to evaluation, shuffling it): predictions.txt must line up with the data."""
        if eval_dataset is None or not hasattr(eval_dataset, "__len__"):
            return None
        return torch.utils.data.SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

    def end(self):
        """Releases the distributed model wrapper, waits for every process, then ends the run (destroys the process
        group). Left to interpreter exit, gloo's threads sometimes abort a process that has finished and saved
        everything.

        The wrapper goes first because its C++ gradient reducer holds the gloo process group: when the reducer drops
        the group's last reference, the group's destructor waits for gloo's worker threads while holding the GIL, and
        a worker that is still freeing a finished collective's tensors waits for the GIL: the process hangs after
        everything is saved (https://github.com/pytorch/pytorch/issues/56297). With the wrapper gone, the group's
        last reference is the one `destroy_process_group` drops, through a binding that releases the GIL first."""
        self.model_wrapped = self.model
        self.accelerator.free_memory()  # drops the accelerator's references to the wrapper, then collects garbage
        self.accelerator.wait_for_everyone()
        super().end()


class HostComputedLambdaLR(torch.optim.lr_scheduler.LambdaLR):
    """`LambdaLR` whose rates are computed on the host, also for an optimizer whose learning rates are tensors (a
    capturable one, whose step a CUDA graph replays: `capturable_options`). `LambdaLR` would multiply tensor base
    rates on the device and read each product back (`fill_(tensor.item())`), and the Trainer reads `get_last_lr()`
    back every step: a host sync each. Here the base rates are floats, each step writes the new rate into the tensor
    with `fill_(float)` (one launch, no sync) and `get_last_lr()` returns floats. For float learning rates it is
    `LambdaLR`.

    Args:
        optimizer (`torch.optim.Optimizer`): the optimizer, its learning rates floats or 0-dimensional tensors.
        lr_lambda (`Callable[[int], float]`): the factor of the base rate at each step.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, lr_lambda):
        for group in optimizer.param_groups:  # read once, before training (`LRScheduler` keeps a set initial_lr)
            group.setdefault("initial_lr", float(group["lr"]))
        super().__init__(optimizer, lr_lambda)

    def get_last_lr(self) -> list[float]:
        return [base * factor(self.last_epoch) for factor, base in zip(self.lr_lambdas, self.base_lrs, strict=True)]


def recurrence_step_to_compile(model: torch.nn.Module | None, args) -> SLSTMStateTransition | None:
    """The module that `--torch_compile` compiles alone (`compile_recurrence_step`): the S-LSTM's state transition,
    where the training device is not a CUDA GPU. `None` without `--torch_compile`, on CUDA (where the Trainer's
    whole-model compile was measured to pay, with the fused recurrence one custom operator in its graph) and for a
    model without an S-LSTM step (the baseline encoders): the Trainer then compiles the whole model, if at all."""
    if model is None or not args.torch_compile or args.device.type == "cuda":
        return None
    transition = getattr(model.base_model, "transition", None)
    return transition if isinstance(transition, SLSTMStateTransition) else None


def torch_compile_kwargs(args) -> dict:
    """The `torch.compile` arguments of `--torch_compile_backend` and `--torch_compile_mode`, as the Trainer hands
    them to `accelerate`, with every tensor size of the step dynamic (`dynamic=True`): the batch width changes from
    batch to batch, and the default (a first compile for fixed sizes, another once a size changes) would compile each
    variant of the step once more."""
    plugin = TorchDynamoPlugin(backend=args.torch_compile_backend, mode=args.torch_compile_mode, dynamic=True)
    return plugin.to_kwargs()


def compile_recurrence_step(step: SLSTMStateTransition, compile_kwargs: dict) -> None:
    """Compiles the S-LSTM's state transition in place (`nn.Module.compile`), the rest of the model staying eager:
    PyTorch's regional compilation of a repeated block.

    Why not the whole model, as the Trainer's `--torch_compile` does: `SLSTMModel` calls the same transition
    `num_steps` times, and a whole-model compile unrolls them all, with the CRF's recursions, into one graph whose
    generated C++ Inductor then compiles for minutes on a CPU, at the first batch and again (with dynamic sizes) at
    the second (the paper's NER config on 2 cores: 161 s and 246 s, docs/benchmarks.md). The transition alone is one
    small graph (about 40 s there), compiled once for every step and every batch width (`torch_compile_kwargs`): a
    few variants (the first step's cells need no gradient, evaluation none at all, a batch of one row has a size of 1,
    which Dynamo specialises), each compiled on its first call. The parameters keep their names, so checkpoints are
    those of an eager run.

    Args:
        step (`SLSTMStateTransition`): the model's transition (`model.base_model.transition`).
        compile_kwargs (`dict`): the arguments of `torch.compile` (`torch_compile_kwargs`).
    """
    logger.warning(
        "--torch_compile without a CUDA GPU compiles the S-LSTM's recurrence step alone (the rest of the model runs "
        f"eagerly; torch.compile arguments {compile_kwargs}). On a CPU it costs about 40 s of compiling in the first "
        "training steps and 10 s in the first evaluation step, and then trains at about eager's speed (the "
        "paper's NER config on a 2-core AMD EPYC: docs/benchmarks.md, 'torch.compile on a CPU'). It pays on a CUDA "
        "GPU (where the Trainer compiles the whole model), hardly on a CPU."
    )
    step.compile(**compile_kwargs)


def capturable_options(groups: list[dict], optimizer_kwargs: dict, device: torch.device) -> tuple[list[dict], dict]:
    """`(groups, optimizer_kwargs)` of an optimizer whose step a CUDA graph can hold: on a CUDA device
    `capturable=True` (Adam and AdamW keep their step counts on the device and never read them back; elsewhere
    torch.optim refuses it, and no graph captures the step), and every group's learning rate a tensor on `device` of
    its own, which the scheduler fills between steps (`HostComputedLambdaLR`)."""
    rates = [float(group.get("lr", optimizer_kwargs["lr"])) for group in groups]
    groups = [
        {**group, "lr": torch.tensor(rate, device=device), "initial_lr": rate}  # the scheduler's exact base rate
        for group, rate in zip(groups, rates, strict=True)
    ]
    return groups, {**optimizer_kwargs, "capturable": device.type == "cuda"}


def keep_the_runs_rates(optimizer: torch.optim.Optimizer) -> None:
    """Makes `optimizer.load_state_dict` (resuming from a checkpoint) take the checkpoint's learning rates by value
    into this run's own: the tensors that a whole-step graph reads and the scheduler fills (`capturable_options`), or
    floats; and keep this run's `capturable`, which decides where the loaded step counts go.

    `Optimizer.load_state_dict` takes the saved parameter groups as they are: a checkpoint of eager training gives
    float rates, and one of `--cuda_graphs` loaded by the Trainer with `map_location="cpu"` (one GPU) new CPU
    tensors. Either way a captured step would no longer read the rates that the scheduler writes, and an eager
    foreach Adam refuses tensor rates.

    Args:
        optimizer (`torch.optim.Optimizer`): the run's optimizer, as made (its rates are read now).
    """
    rates = [group["lr"] for group in optimizer.param_groups]  # a tensor each, kept by every load, or floats

    def own_capturable(optimizer: torch.optim.Optimizer, state_dict: dict) -> dict | None:
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(optimizer.param_groups):
            return None  # `load_state_dict` refuses it, naming the mismatch
        groups = [
            {**saved, "capturable": group["capturable"]} if "capturable" in group else saved
            for saved, group in zip(saved_groups, optimizer.param_groups, strict=True)
        ]
        return {**state_dict, "param_groups": groups}

    def own_rates(optimizer: torch.optim.Optimizer) -> None:
        for group, rate in zip(optimizer.param_groups, rates, strict=True):
            loaded = group["lr"]  # a float, or a tensor on any device
            group["lr"] = rate.copy_(torch.as_tensor(loaded)) if isinstance(rate, torch.Tensor) else float(loaded)

    optimizer.register_load_state_dict_pre_hook(own_capturable)
    optimizer.register_load_state_dict_post_hook(own_rates)


def l2_parameter_groups(model: torch.nn.Module, coefficient: float, include_word_embeddings: bool) -> list[dict]:
    """Adam parameter groups: every trainable parameter with `weight_decay=coefficient`, except the word embedding
    matrix (`model.get_input_embeddings()`), which gets 0 unless `include_word_embeddings`."""
    embedding = model.get_input_embeddings().weight
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    exempt = None if include_word_embeddings else embedding
    regularized = [p for p in trainable if p is not exempt]
    groups = [
        {"params": regularized, "weight_decay": coefficient},
        {"params": [p for p in trainable if p is exempt], "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def weight_decay_parameter_groups(model: torch.nn.Module, decay_names: list[str], weight_decay: float) -> list[dict]:
    """The Trainer's own two groups: trainable parameters named in `decay_names` with `weight_decay`, the others
    (biases, norms) without."""
    trainable = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    groups = [
        {"params": [p for name, p in trainable if name in decay_names], "weight_decay": weight_decay},
        {"params": [p for name, p in trainable if name not in decay_names], "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def with_feature_encoder_learning_rate(model: torch.nn.Module, groups: list[dict], learning_rate: float) -> list[dict]:
    """`groups` with the feature encoder's parameters (`model.base_model.embeddings.subword_features`) moved into
    copies of their groups that set `lr` to `learning_rate`."""
    features = getattr(model.base_model.embeddings, "subword_features", None)
    if features is None:
        raise UsageError("--feature_encoder_learning_rate is set but the model has no feature encoder")
    encoder = {id(parameter) for parameter in features.parameters()}
    split = []
    for group in groups:
        split.append({**group, "params": [p for p in group["params"] if id(p) not in encoder]})
        split.append({**group, "params": [p for p in group["params"] if id(p) in encoder], "lr": learning_rate})
    return [group for group in split if group["params"]]
