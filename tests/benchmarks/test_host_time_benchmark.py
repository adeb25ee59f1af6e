"""benchmark_host_time.py on the smallest shapes: a row per model with every phase, the Trainer steps of the real
training script timed, and Triton launches that do nothing while the benchmark runs (and work again after)."""

import logging
import time

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from run_scripts.benchmarks import benchmark_host_time


@pytest.mark.parametrize("clock", ["wall", "thread"])
def test_host_time_benchmark_tiny(capsys, clock):
    argv = ["--tasks", "classification", "--classification_shapes", "2x5", "--models", "slstm-fused", "bilstm",
            "--steps", "2", "--warmup", "1", "--rounds", "1", "--clock", clock]  # fmt: skip
    scripts_level = logging.getLogger("run_scripts").level
    rows = benchmark_host_time.main(argv)
    # The training script it ran in this process (--log_level error) leaves the caller's log levels as they were.
    assert logging.getLogger("run_scripts").level == scripts_level
    assert [(row["model"], row["shape"]) for row in rows] == [("slstm-fused", "2x5"), ("bilstm", "2x5")]
    for row in rows:
        assert row["bare step"] == pytest.approx(sum(row[phase] for phase in benchmark_host_time.PHASES))
        assert 0 < row["Trainer's own"] < row["Trainer step"]
        assert row["small operator"] < row["clipping"]
    table = capsys.readouterr().out
    assert "| classification | bilstm | 2 × 5 |" in table and "Trainer's own" in table
    assert f"{clock} clock" in table and benchmark_host_time.clock is time.perf_counter  # the wall clock again


def test_ner_bilstm_has_the_slstm_character_cnn():
    """The NER BiLSTM-CRF reads characters as the S-LSTM does, at the benchmark's sizes too; the one without
    characters is NER's extra row only."""
    configs = {}
    for model in ("slstm-fused", "bilstm", "bilstm-no-chars"):
        network, inputs = benchmark_host_time.bare_model_and_batch("ner", model, 8, 2, 5)
        configs[model] = network.config
        assert ("char_ids" in inputs) == (model != "bilstm-no-chars")
    sizes = ("use_char_features", "char_embedding_dim", "char_hidden_size", "char_kernel_size", "char_dropout")
    assert [getattr(configs["bilstm"], name) for name in sizes] == [
        getattr(configs["slstm-fused"], name) for name in sizes
    ]
    assert configs["bilstm"].char_hidden_size == 8 and not configs["bilstm-no-chars"].use_char_features
    assert not benchmark_host_time.task_has("classification", "bilstm-no-chars")


@triton.jit
def store_kernel(output_ptr, value):
    tl.store(output_ptr, value)


def test_triton_launches_do_nothing_inside_the_context_only():
    output = torch.zeros(1)
    with benchmark_host_time.triton_launches_as_no_ops():
        store_kernel[(1,)](output, 7.0)
    assert output.item() == 0.0
    store_kernel[(1,)](output, 7.0)
    assert output.item() == 7.0
