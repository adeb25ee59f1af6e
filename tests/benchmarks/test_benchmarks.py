"""Smoke tests of the benchmark scripts on tiny settings (they are scripts, not timed tests), the FLOP count, the plain
reference S-LSTM, and the pictures of docs/benchmarks.md."""

import csv
import json
import math
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import markdown_rows

from modeling_slstm import cpu_matmul
from modeling_slstm.configuration_slstm import SLSTMConfig
from run_scripts.benchmarks import benchmark_speed
from run_scripts.benchmarks.support import flop_and_byte_counts, reference_slstm, timing, workloads

REPO = Path(__file__).resolve().parents[2]


def test_slstm_flop_count_matches_the_equations():
    config = SLSTMConfig(vocab_size=10, hidden_size=300, embedding_dim=300, num_steps=9, window_size=1)
    batch, length = 2, 5
    hidden, tokens = 300, batch * length
    per_token_step = 2 * 3 * hidden * 7 * hidden + 2 * hidden * hidden  # W ξ_i (7 blocks) + U_f h_i
    per_sentence_step = 2 * hidden * 7 * hidden + 2 * 2 * hidden * 2 * hidden + 2 * hidden * hidden
    expected = 2 * tokens * 300 * 7 * hidden + 9 * (tokens * per_token_step + batch * per_sentence_step)
    assert flop_and_byte_counts.slstm_forward_flops(config, batch, length) == expected
    assert flop_and_byte_counts.step_flops(config, batch, length, "train") == 3 * expected


def test_speed_benchmark_tiny(tmp_path):
    models = ["slstm", "slstm-reference", "bilstm1", "cnn3", "transformer5"]
    argv = [
        "--models", *models, "--batch-sizes", "2", "--lengths", "8", "--variants", "fp32", "bf16",
        "--slstm-variants", "checkpoint", "--slstm-variant-lengths", "8", "--warmup", "0", "--repeats", "1",
        "--min-time", "0", "--max-repeats", "1", "--ceiling-size", "64", "--output-dir", str(tmp_path),
        "--name", "speed_test", "--matmul-share",
    ]  # fmt: skip
    rows = benchmark_speed.main(argv)
    measured = {(r["model"], r["variant"], r["mode"]) for r in rows}
    expected = {(m, v, mode) for m in models for v in ("fp32", "bf16") for mode in ("forward", "train")}
    expected.add(("slstm", "fp32+checkpoint", "train"))
    # oneDNN's bf16 LSTM cannot run on a CPU without bf16 support: the benchmark skips it there.
    assert expected - {("bilstm1", "bf16", "forward"), ("bilstm1", "bf16", "train")} <= measured <= expected
    assert len(rows) == len(measured)
    for suffix in (".csv", ".md", ".json", "_throughput.png", "_memory.png"):
        assert (tmp_path / f"speed_test{suffix}").stat().st_size > 0
    with (tmp_path / "speed_test.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert {r["model"] for r in table} == set(models)
    assert all(float(r["tokens_per_s"]) > 0 and float(r["peak_mem_mb"]) > 0 for r in table)
    assert all(0 < float(r["matmul_time_share"]) < 1 for r in table if r["model"].startswith("slstm"))
    # The machine is in every row, the report and the metadata.
    capability, backend = torch.backends.cpu.get_cpu_capability(), cpu_matmul.selected_backend()
    assert {(r["cpu_capability"], r["matmul_backend"], r["threads"]) for r in table} == {
        (capability, backend, str(torch.get_num_threads()))
    }
    report = (tmp_path / "speed_test.md").read_text()
    assert "Speed ratio" in report and "Share of the time in matrix products" in report
    assert f"CPU capability {capability}" in report and f"matmul backend: {backend}" in report
    meta = json.loads((tmp_path / "speed_test.json").read_text())
    assert meta["machines"][0]["cpu_capability"] == capability and meta["machines"][0]["matmul_backend"] == backend
    # The same-run comparisons: package vs reference per variant, mode and shape; bf16 vs fp32 per S-LSTM.
    assert len(meta["reference_comparison"]) == 2 * 2  # variants x modes
    (comparison,) = [c for c in meta["reference_comparison"] if (c["variant"], c["mode"]) == ("fp32", "train")]
    package, reference = comparison["package_tokens_per_s"], comparison["reference_tokens_per_s"]
    assert comparison["package_over_reference"] == pytest.approx(package / reference)
    (row,) = [r for r in markdown_rows(report) if (r.get("variant"), r.get("mode")) == ("fp32", "forward+backward")]
    assert row == {"variant": "fp32", "mode": "forward+backward", "batch×length": "2×8",
                   "package tokens/s": f"{package:,.0f}", "reference tokens/s": f"{reference:,.0f}",
                   "package / reference": f"{package / reference:.2f}"}  # fmt: skip
    assert {c["model"] for c in meta["autocast_comparison"]} == {"slstm", "slstm-reference"}
    assert "bf16 time / fp32 time" in report

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
    assert [r["cpu_capability"] for r in merged] == [capability] * len(rows)


def test_speed_benchmark_quick_arguments():
    args = benchmark_speed.parse_args(["--quick"])
    assert args.models == ["slstm", "slstm-reference"] and args.batch_sizes == [32] and args.lengths == [128]
    assert args.variants == ["fp32", "bf16"] and args.modes == ["train"] and not args.memory and args.matmul_share
    assert args.slstm_variants == []


def test_matmul_time_share_tells_products_from_elementwise_work():
    square = torch.randn(256, 256)
    assert timing.matmul_time_share(lambda: square @ square) > 0
    assert timing.matmul_time_share(lambda: torch.tanh(square).sum()) == 0.0
    # oneDNN or PyTorch's matmul, whichever the backend rule picks: the products of the step's linear layer are
    # counted (the share was 0.0 with the oneDNN operator left out of MATMUL_OPERATORS).
    linear, rows = cpu_matmul.SLSTMLinear(1024, 1024), torch.randn(512, 1024)
    assert timing.matmul_time_share(lambda: linear(rows).sum().backward()) > 0


def test_interleaved_timing_times_a_slow_call_once(monkeypatch):
    """On a fake clock that only the calls move: the slow call is timed once, the fast one every round."""
    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    calls = {"fast": lambda: None, "slow": lambda: clock.__setitem__(0, clock[0] + 0.02)}
    rounds = timing.Timing(warmup=1, repeats=3, min_time=0.0, max_repeats=3, time_once_above=0.01)
    times = timing.time_interleaved(calls, torch.device("cpu"), rounds)
    assert times == {"fast": [0.0, 0.0, 0.0], "slow": [pytest.approx(0.02)]}


def test_reference_slstm_is_finite_and_ignores_right_padding():
    torch.manual_seed(0)
    model = reference_slstm.ReferenceSLSTM(vocab_size=20, embedding_dim=5, hidden_size=6, num_steps=3).eval()
    with torch.no_grad():
        model.initial_state.normal_()  # a zero initial state would hide a padding leak in the first step
    sentences = [[5, 6, 7, 8, 9], [10, 11, 12]]
    ids = torch.tensor([sentences[0], sentences[1] + [0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.no_grad():
        states, sentence_state = model(ids, attention_mask=mask)
        alone_states, alone_sentence = model(torch.tensor([sentences[1]]))
    assert torch.isfinite(states).all() and torch.isfinite(sentence_state).all()
    torch.testing.assert_close(states[1, :3], alone_states[0])
    torch.testing.assert_close(sentence_state[1], alone_sentence[0])
    assert torch.all(states[1, 3:] == 0)


def test_training_throughput_benchmark_tiny(tmp_path, capsys):
    """benchmark_training_throughput.py on a generated CoNLL file: one row per setup, its bookkeeping checked against
    the batches it trains on."""
    from script_helpers import write_generated_ner

    from run_scripts.benchmarks import benchmark_training_throughput as benchmark

    paths = write_generated_ner(tmp_path, n_train=30)
    argv = ["--train_file", str(paths["train"]), "--config_name", "hub_configs/slstm-ner-crf-small.json"]
    argv += ["--max_tokens_per_batch", "40", "--synthetic_shape", "2", "8", "--rounds", "2", "--warmup_rounds", "1"]
    rows = benchmark.main(argv)
    names = [row["setup"] for row in rows]
    assert names[:2] == ["paper batches", "token budget 40"]
    assert names[2].startswith("synthetic, paper-batch shape 10x") and names[3] == "synthetic 2x8"
    # The synthetic batches have no padding: each step trains on exactly one batch of 2x8 = 16 real tokens, and each
    # round on the 16 tokens a round asks for.
    assert rows[3]["padding_share"] == 0 and rows[3]["real_tokens"] == 2 * 16 and rows[3]["steps"] == 2
    assert rows[2]["padding_share"] == 0
    for row in rows:
        assert row["real_tokens"] >= 2 * 16  # two timed rounds of at least one synthetic batch's tokens
        assert row["padded_tokens_per_second"] >= row["real_tokens_per_second"] > 0
        seconds = row["real_tokens"] / row["real_tokens_per_second"]
        assert row["mean_step_seconds"] == pytest.approx(seconds / row["steps"])
    assert "| paper batches |" in capsys.readouterr().out


def test_length_grouped_batches_cover_the_epoch_once():
    lengths = torch.randint(1, 50, (103,), generator=torch.Generator().manual_seed(0)).tolist()
    batches = workloads.length_grouped_batches(lengths, 10, seed=1)
    assert sorted(index for batch in batches for index in batch) == list(range(103))
    assert [len(batch) for batch in batches] == [10] * 10 + [3]
    assert batches == workloads.length_grouped_batches(lengths, 10, seed=1)
    # Grouped: the sentences of a batch are closer in length than those of the epoch's order cut into tens.
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
    ungrouped = [list(range(start, min(start + 10, 103))) for start in range(0, 103, 10)]
    assert spread < sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in ungrouped)


def test_long_documents_benchmark_tags_the_whole_document():
    from run_scripts.benchmarks import benchmark_long_documents as benchmark

    rows = benchmark.main(["--words", "300", "--repeats", "1"])
    text = benchmark.document(300)
    tag = benchmark.tagging_pipeline(benchmark.parse_arguments(benchmark.LongDocumentArguments, []), text)
    assert [row["words"] for row in rows] == [300]
    assert rows[0]["entities"] == len(tag(text))  # the same seed, the same random tagger
    assert rows[0]["peak_memory_mib"] > 0  # the document's activations are seen by the allocator


def test_feature_encoder_benchmark_tiny(tmp_path):
    """The three setups run on a tiny random BERT and a generated movie-review folder, each timed, S-LSTM the
    reference (ratio 1)."""
    from helpers import save_tiny_encoder

    from run_scripts.benchmarks import benchmark_feature_encoder

    reviews = tmp_path / "movie_review"
    reviews.mkdir()
    for polarity, word in (("pos", "great"), ("neg", "awful")):
        lines = [f"the {word} cat number {i} was unbelievable" for i in range(30)]
        (reviews / f"rt-polarity.{polarity}").write_text("\n".join(lines) + "\n", encoding="latin-1")
    argv = [
        "--rt_polarity_dir", str(reviews), "--feature_encoder", save_tiny_encoder(tmp_path / "tiny_bert"),
        "--batches", "2", "--rounds", "1", "--batch_size", "3",
    ]  # fmt: skip
    rows = benchmark_feature_encoder.main(argv)
    assert [row["setup"] for row in rows] == ["S-LSTM", "S-LSTM + encoder features", "encoder forward only"]
    assert rows[0]["ratio"] == 1.0 and all(row["ms_per_batch"] > 0 for row in rows)


def series_in_picture(path) -> tuple[tuple[int, int], int]:
    """`((width, height), series)` of a PNG: the series are the plot colours (`SERIES_COLORS`) that cover at least 150
    pixels, up to the small colour shifts of the PNG's reduced palette (a legend swatch alone covers fewer)."""
    from PIL import Image

    from run_scripts.benchmarks.support.speed_report import SERIES_COLORS

    image = Image.open(path)
    pixels = np.asarray(image.convert("RGB")).astype(int)  # (height, width, 3)
    colors = [np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)]) for color in SERIES_COLORS]
    return image.size, sum(int((np.abs(pixels - color).sum(-1) < 30).sum() >= 150) for color in colors)


def test_docs_pictures_show_every_model_and_setting_of_their_csvs(tmp_path):
    """The pictures of docs/benchmarks.md, drawn again from the CSVs beside them, and the committed ones: each shows
    one line per model (training, batch 32, fp32 or bf16) and S-LSTM step variant drawn (readable, fused + CUDA
    graphs) that the CSVs hold at two lengths or more on one machine (a lone point covers no more pixels than its
    legend entry), or per thread setting, counted from the decoded pixels, at the size the plot code sets (72 dpi,
    two panels a row, one panel per machine and precision)."""
    from run_scripts.benchmarks import docs_plots

    benchmarks = REPO / "docs" / "benchmarks"
    lengths = defaultdict(set)  # (machine, precision, model, step variant) -> lengths
    for path in [*benchmarks.glob("speed_*.csv"), *benchmarks.glob("quick_*.csv")]:
        with path.open() as handle:
            for row in csv.DictReader(handle):
                drawn = row["variant"] in ("fp32", "bf16") or row["variant"].endswith(("+eager", "+fused+graphs"))
                if (row["mode"], row["batch"], row.get("data") or "random") == ("train", "32", "random") and drawn:
                    precision, _, step = row["variant"].partition("+")
                    lengths[row["device_name"], precision, row["model"], step].add(row["length"])
    panels = {(machine, precision) for machine, precision, *_ in lengths}
    series = {(model, step) for (*_, model, step), measured in lengths.items() if len(measured) > 1}
    with (benchmarks / "busy_machine_avx512_family25_2cores.csv").open() as handle:
        settings = {row["setting"] for row in csv.DictReader(handle)}
    assert len(series) == 5 and len(settings) == 5
    written = docs_plots.main(["--output_dir", str(tmp_path)])
    assert [path.name for path in written] == ["tokens_per_length.png", "busy_machine_avx512_family25_2cores.png"]
    size = (9 * 72, math.ceil(len(panels) / 2) * 3 * 72)
    for folder in (tmp_path, benchmarks):
        assert series_in_picture(folder / "tokens_per_length.png") == (size, len(series))
        assert series_in_picture(folder / "busy_machine_avx512_family25_2cores.png") == ((7 * 72, 230), len(settings))
        assert (folder / "tokens_per_length.png").stat().st_size < 40_000


def test_benchmark_csvs_read_back_what_was_written(tmp_path):
    """The one CSV reader against the rows that were written (floats to six digits) and against the csv module's own
    reading of the committed files: busy-machine results, and a speed CSV that lacks the columns added since."""
    from run_scripts.benchmarks.support import busy_machine_report, speed_report

    results = {(0, "default"): {"median_s": 0.0384567891, "steps": 30, "threads": 2}}
    results[1, "auto"] = {"median_s": 0.05, "steps": 3, "threads": 1}
    busy_machine_report.write_results_csv(results, tmp_path / "busy.csv")
    read = busy_machine_report.read_results_csv(tmp_path / "busy.csv")
    assert read.keys() == results.keys()
    for key, result in results.items():
        assert read[key] == {**result, "median_s": pytest.approx(result["median_s"], rel=1e-5)}
    committed = REPO / "docs" / "benchmarks" / "busy_machine_avx512_family25_2cores.csv"
    with committed.open() as handle:
        expected = {
            (int(row["busy_cores"]), row["setting"]): (float(row["median_ms"]), int(row["steps"]), int(row["threads"]))
            for row in csv.DictReader(handle)
        }
    read = busy_machine_report.read_results_csv(committed)
    assert read.keys() == expected.keys()
    for key, (median_ms, steps, threads) in expected.items():
        assert (read[key]["median_s"] * 1000, read[key]["steps"], read[key]["threads"]) == (
            pytest.approx(median_ms),
            steps,
            threads,
        )

    earlier = ["model", "variant", "batch", "length", "mode", "tokens_per_s"]
    (tmp_path / "old.csv").write_text(",".join(earlier) + "\nslstm,fp32,32,128,train,1234.5\n")
    (row,) = speed_report.read_speed_csv(tmp_path / "old.csv")
    assert list(row) == speed_report.FIELDS
    assert (row["model"], row["batch"], row["length"], row["tokens_per_s"]) == ("slstm", 32, 128, 1234.5)
    assert row["data"] == "random" and row["step_implementation"] == "" and math.isnan(row["gflop"])


def test_cpu_bf16_benchmark_tiny(tmp_path, capsys):
    """The table of each setup, the package's own decision beside it, and that decision left as it was."""
    from run_scripts.benchmarks import benchmark_cpu_bf16

    before = cpu_matmul.bf16_decision()
    tiny = ["--threads", "1", "--matmul_size", "32", "--batch", "2", "--length", "4", "--repeats", "1"]
    tiny += ["--min_time", "0", "--max_repeats", "1", "--output_dir", str(tmp_path)]
    threads = torch.get_num_threads()
    try:
        result = benchmark_cpu_bf16.main(tiny)
    finally:
        torch.set_num_threads(threads)
    assert result["decision"] == before == cpu_matmul.bf16_decision()
    assert list(result["matmul_seconds"]) == ["float32", "bf16"]
    assert list(result["model_seconds"]) == [label for label, _, _ in benchmark_cpu_bf16.MODEL_SETUPS]
    printed = capsys.readouterr().out
    assert f"({before.reason})" in printed and "| bf16 autocast, float32 matmuls |" in printed
    assert "| float32 |" in printed and (tmp_path / "cpu_bf16.md").read_text().strip() == printed.strip()


def test_step_kernel_costs_of_the_paper_configuration():
    """`benchmark_step_kernel_costs.py` at 32 x 512 words, bf16 matmuls: the backward holds beside `P` its gradient
    (32 * 512 words x 7200 columns x 2 bytes) and one float32 row of partial sums per position block of 6 words
    (86 of them, each `(batch·W + 2·batch·K·H)` wide: W = 3000, K·H = 300); one pass per backward program, and 16
    of 32 positions for the forward's sentence programs."""
    pytest.importorskip("triton")
    from modeling_slstm import triton_kernels
    from run_scripts.benchmarks.benchmark_step_kernel_costs import StepCostArguments, launch_costs

    with triton_kernels.using_tiles(triton_kernels.KernelTiles()):
        forward, backward, sums = launch_costs(32, 512, StepCostArguments())
    partials = 86 * 32 * (3000 + 2 * 300) * 4
    assert backward["held"] == 32 * 512 * 7200 * 2 + partials
    assert (forward["passes"], backward["passes"], sums["passes"]) == (16, 1, 86)
    assert backward["programs"] == 32 * 86 * 19  # position blocks x hidden blocks of 16 (300 units)
    assert sums["bytes"] > partials and backward["bytes"] > forward["bytes"] > 0


def test_the_tile_sweep_times_each_tiling(monkeypatch):
    """`benchmark_kernel_tiles.py` times every tiling of its sweep on the same shape, in turn: each call's launches
    are those its own tiling makes (anew), not those of the tiling that launched the shape first. The paper
    configuration at 32 x 64 words."""
    pytest.importorskip("triton")
    from types import SimpleNamespace

    from modeling_slstm import triton_kernels, triton_step
    from run_scripts.benchmarks.benchmark_kernel_tiles import TileSweepArguments, tiled_call, tilings

    for name in ("GPU_TILES", "TILE_IN_THE_INTERPRETER"):  # as they are, restored after the sweep's `use_tiles`
        monkeypatch.setattr(triton_kernels, name, getattr(triton_kernels, name))
    cells, sentence_cells = torch.empty(32, 64, 300, device="meta"), torch.empty(32, 1, 300, device="meta")
    launched = []  # each call's launches, as their attributes

    def forward_backward():
        launched.append(vars(triton_step.StepKernels.for_cells(cells, sentence_cells, 1, True)))

    sweep = tilings(TileSweepArguments())
    calls = {tiles: tiled_call(SimpleNamespace(forward_backward=forward_backward), tiles) for tiles in sweep}
    timing.time_interleaved(calls, torch.device("cpu"), timing.Timing(warmup=0, repeats=2, min_time=0, max_repeats=2))
    made_anew = []
    for tiles in sweep:
        triton_kernels.use_tiles(tiles, in_the_interpreter=True)
        made_anew.append(vars(triton_step.StepKernels(32, 64, 300, 1, 1, True)))
    assert launched == made_anew * 2
    # Caps not reached at this shape: max_block_s 64 and 128 give 32's tiles at 2048 values a tile (3 tilings alike),
    # and 4096 and 8192 values the same at max_block_s 32 (2 alike).
    assert len({repr(launches) for launches in made_anew}) >= len(sweep) - 3
