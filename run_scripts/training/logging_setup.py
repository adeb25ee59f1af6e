"""Logging of the training scripts' processes."""

import logging
import sys

import datasets
import torch
import transformers
from transformers import TrainingArguments

from modeling_slstm import cpu_matmul

logger = logging.getLogger(__name__)


def setup_logging(training_args: TrainingArguments, logger_names: tuple[str, ...]) -> None:
    """Logs of the scripts' modules (`logger_names`), `datasets` and `transformers` at the process's log level (the
    main process's by default, errors only on the others), one line saying which process this is."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    if training_args.should_log:
        # As transformers' example scripts: progress at INFO on the main process (TrainingArguments' default log level,
        # "passive", would otherwise keep the library's WARNING); the other processes keep log_level_replica.
        transformers.utils.logging.set_verbosity_info()
    log_level = training_args.get_process_log_level()
    for name in ("run_scripts", *logger_names):  # every module of run_scripts, then the entry point's own
        logging.getLogger(name).setLevel(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    logger.info(
        f"Process rank {training_args.process_index}, device {training_args.device}, world size "
        f"{training_args.world_size}, distributed {training_args.parallel_mode.value}"
    )
    warn_if_bf16_is_slow(training_args)


def warn_if_bf16_is_slow(training_args: TrainingArguments) -> None:
    """`--bf16` on a CPU where bf16 matmuls are not faster than float32 (`cpu_matmul.bf16_decision`: emulated bf16,
    many times slower; Intel's avx512_bf16 without AMX, about half float32's speed): the S-LSTM layers keep their
    matmuls in float32 there, but say so, and that training without `--bf16` is the better choice."""
    if training_args.bf16 and training_args.device.type == "cpu" and not cpu_matmul.cpu_has_fast_bf16():
        logger.warning(
            f"--bf16 on a CPU whose bf16 matmuls are not faster than float32 ({cpu_matmul.bf16_decision().reason}; "
            f"CPU capability {torch.backends.cpu.get_cpu_capability()}). The S-LSTM layers keep their matmuls in "
            "float32, so this run gains nothing from --bf16; train without it."
        )
