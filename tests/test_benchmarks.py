"""Smoke tests of the benchmark scripts on tiny settings (they are scripts, not timed tests), the FLOP count, and the
oneDNN matmul path of the S-LSTM step."""

import csv
import importlib
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "run_scripts"))

benchmark_speed = importlib.import_module("benchmark_speed")
benchmark_accuracy = importlib.import_module("benchmark_accuracy")

from modeling_slstm import fast_linear, modeling_slstm
from modeling_slstm.configuration_slstm import SLSTMConfig


def test_slstm_flop_count_matches_the_equations():
    config = SLSTMConfig(vocab_size=10, hidden_size=300, embedding_dim=300, num_steps=9, window_size=1)
    batch, length = 2, 5
    hidden, tokens = 300, batch * length
    per_token_step = 2 * 3 * hidden * 7 * hidden + 2 * hidden * hidden  # W ξ_i (7 blocks) + U_f h_i
    per_sentence_step = 2 * hidden * 7 * hidden + 2 * 2 * hidden * 2 * hidden + 2 * hidden * hidden
    expected = 2 * tokens * 300 * 7 * hidden + 9 * (tokens * per_token_step + batch * per_sentence_step)
    assert benchmark_speed.slstm_forward_flops(config, batch, length) == expected
    assert benchmark_speed.step_flops(config, batch, length, "train") == 3 * expected


def test_speed_benchmark_tiny(tmp_path):
    argv = [
        "--models", "slstm", "bilstm1", "cnn3", "transformer5", "--batch-sizes", "2", "--lengths", "4", "8",
        "--variants", "fp32", "--slstm-variants", "checkpoint", "--slstm-variant-lengths", "8",
        "--warmup", "0", "--repeats", "1", "--min-time", "0", "--max-repeats", "1", "--ceiling-size", "64",
        "--output-dir", str(tmp_path), "--name", "speed_test",
    ]  # fmt: skip
    rows = benchmark_speed.main(argv)
    assert len(rows) == 4 * 2 * 2 + 1  # models x lengths x modes, + the checkpointed S-LSTM (training only)
    for suffix in (".csv", ".md", ".json", "_throughput.png", "_memory.png"):
        assert (tmp_path / f"speed_test{suffix}").stat().st_size > 0
    with (tmp_path / "speed_test.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert {r["model"] for r in table} == {"slstm", "bilstm1", "cnn3", "transformer5"}
    assert all(float(r["tokens_per_s"]) > 0 and float(r["peak_mem_mb"]) > 0 for r in table)
    assert "Speed ratio" in (tmp_path / "speed_test.md").read_text()

    merged = benchmark_speed.main(
        [
            "--from-csv",
            str(tmp_path / "speed_test.csv"),
            "--output-dir",
            str(tmp_path),
            "--name",
            "merged",
            "--no-plots",
        ]
    )
    assert len(merged) == len(rows) and (tmp_path / "merged.md").exists()


def test_speed_benchmark_quick_arguments():
    args = benchmark_speed.parse_args(["--quick"])
    assert args.models == ["slstm"] and args.batch_sizes == [32] and args.lengths == [128]
    assert args.slstm_variants == []


def test_accuracy_benchmark_plans_and_collects(tmp_path, capsys):
    benchmark_accuracy.main(["--suite", "main", "--dry-run", "--runs-dir", str(tmp_path)])
    commands = capsys.readouterr().out.strip().splitlines()
    assert len(commands) == 9  # 3 tasks x (S-LSTM, BiLSTM 1 and 2 layers)
    assert all("--num_train_epochs 10" in command for command in commands)
    assert sum("baselines/bilstm2" in command for command in commands) == 3

    # A finished ablation run is collected into the report; the others are listed as not run.
    finished = tmp_path / "ablations" / "movie_review" / "steps=9"
    finished.mkdir(parents=True)
    (finished / "all_results.json").write_text(json.dumps({"eval_accuracy": 0.8, "epoch": 2.0, "train_runtime": 50.0}))
    (finished / "config.json").write_text(json.dumps({"model_type": "sentence_state_lstm"}))
    rows = benchmark_accuracy.main(
        ["--suite", "ablations", "--collect-only", "--runs-dir", str(tmp_path), "--output-dir", str(tmp_path)]
    )
    done = [r for r in rows if r["status"] == "done"]
    assert [r["name"] for r in done] == ["steps=9"] and done[0]["seconds_per_epoch"] == 25.0
    report = (tmp_path / "accuracy_ablations.md").read_text()
    assert "| movie_review | steps=9 | slstm | done | 80.00 |" in report


@pytest.mark.skipif(not fast_linear._HAS_ONEDNN_LINEAR, reason="no oneDNN in this torch build")
def test_onednn_step_matches_default_matmuls(monkeypatch):
    """The oneDNN route of the step's float32 matmuls gives the outputs and gradients of PyTorch's default backend."""
    torch.manual_seed(0)
    model = modeling_slstm.SLSTMModel(
        SLSTMConfig(
            vocab_size=30, embedding_dim=8, hidden_size=12, num_steps=3, num_sentence_nodes=2, embedding_dropout=0.0
        )
    )
    input_ids = torch.randint(4, 30, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 0, 0]])
    results = []
    for onednn in (True, False):
        monkeypatch.setattr(fast_linear, "ONEDNN_FLOAT32_MATMULS", onednn)
        model.zero_grad()
        outputs = model(input_ids, attention_mask=mask)
        (outputs.last_hidden_state.pow(2).sum() + outputs.pooler_output.sum()).backward()
        results.append((outputs.last_hidden_state, [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-5, rtol=1e-5)
    for with_onednn, default in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(with_onednn, default, atol=1e-5, rtol=1e-4)
