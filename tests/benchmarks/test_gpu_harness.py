"""The GPU harness on a CPU: what `run_scripts/benchmarks/gpu_checks.sh` plans and runs (its Python stages with tiny
shapes), the floor arithmetic, the CSV columns, the real batches, the training scripts' GPU padding; and, on a CUDA
machine only, the CUDA-graph replay against eager. No timings are asserted."""

import csv
import math
import re
import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import markdown_rows, shared_data_root
from torch import nn
from transformers import DataCollatorWithPadding
from transformers.trainer_pt_utils import LengthGroupedSampler

from baselines import BaselineEncoderConfig
from modeling_slstm.configuration_slstm import SLSTMConfig
from modeling_slstm.tokenization_slstm import build_word_tokenizer
from run_scripts.benchmarks import (
    benchmark_crf_share,
    benchmark_epochs,
    benchmark_graph_step,
    benchmark_kernel_profile,
    benchmark_speed,
)
from run_scripts.benchmarks.support import flop_and_byte_counts, machine_peaks, speed_report, timed_models, workloads
from run_scripts.training import gpu_batching

REPO = Path(__file__).resolve().parents[2]
GPU_CHECKS = REPO / "run_scripts" / "benchmarks" / "gpu_checks.sh"
CPU = torch.device("cpu")
# The columns of every speed CSV written before the floor and the real batches: later runs keep them, in this order.
EARLIER_COLUMNS = [
    "device", "device_name", "cpu_capability", "native_bf16", "threads", "torch", "matmul_backend", "model", "variant",
    "batch", "length", "mode", "tokens_per_s", "median_ms", "runs", "peak_mem_mb", "params", "encoder_params",
    "gflops_per_s", "ceiling_gflops_per_s", "pct_of_ceiling", "interleaved_ceiling_gflops_per_s",
    "pct_of_interleaved_ceiling", "matmul_time_share",
]  # fmt: skip
TINY = ["--device", "cpu", "--min_time", "0", "--repeats", "1"]


def stage_arguments(stage: str, data_dir: Path, output_dir: Path) -> list[str]:
    """The arguments after the script of `stage <stage> ...` in gpu_checks.sh, its variables filled in."""
    text = GPU_CHECKS.read_text().replace("\\\n", " ")
    speed = re.search(r"^SPEED=\((.*?)\)", text, re.DOTALL | re.MULTILINE).group(1).replace("\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith(f"stage {stage} ")]
    line = line.replace('"${SPEED[@]}"', speed).replace('"$DATA"', str(data_dir))
    line = line.replace('"$OUTPUT_DIR"', str(output_dir)).replace('"$PYTHON"', "python")
    words = shlex.split(line)
    script = next(i for i, word in enumerate(words) if word.endswith(".py"))
    return words[script + 1 :]


# --------------------------------------------------------------------------------------------------------------------
# What the GPU run plans
# --------------------------------------------------------------------------------------------------------------------


def test_the_gpu_speed_stage_plans_every_variant_at_every_shape(tmp_path, monkeypatch, shared_data):
    data_dir = shared_data("conll2003").parent
    args = benchmark_speed.parse_args(stage_arguments("speed", data_dir, tmp_path))
    monkeypatch.setattr(
        benchmark_speed, "skip_reason", lambda variant, device, fused_in_interpreter: None
    )  # as on a GPU
    plan = benchmark_speed.plan(args, torch.device("cpu"))
    random = {(w.batch, w.length) for w in plan if w.data == "random"}
    assert random == {(32, length) for length in (16, 32, 64, 128, 512)}
    real = {(w.data, w.batch) for w in plan if w.data != "random"}
    assert real == {(corpus, batch) for corpus in ("conll2003-ner", "movie-review") for batch in (10, 32)}
    variants = ["eager", "fused", "fused+graphs"]
    expected = {(m, v) for m in ("slstm", "bilstm1", "bilstm2") for v in ("fp32", "bf16")}
    expected |= {("slstm", f"{precision}+{v}") for v in variants for precision in ("fp32", "bf16")}
    for workload, cases in plan.items():
        assert {(model, variant.name) for model, variant in cases} == expected, workload.label()
    for workload in plan:
        assert workload.batches and all(len(b) <= workload.batch for b in workload.batches)


def test_the_compile_stage_plans_compile_and_reduce_overhead(tmp_path, monkeypatch):
    args = benchmark_speed.parse_args(stage_arguments("compile", tmp_path, tmp_path))
    monkeypatch.setattr(benchmark_speed, "skip_reason", lambda variant, device, fused_in_interpreter: None)
    plan = benchmark_speed.plan(args, CPU)
    assert {(w.batch, w.length) for w in plan} == {(32, 32), (32, 512)} and args.modes == ["train"]
    for cases in plan.values():
        names = {(model, variant.name) for model, variant in cases}
        assert names == {("slstm", "bf16"), ("bilstm1", "bf16"), ("slstm", "bf16+compile"),
                         ("slstm", "bf16+fused+reduce-overhead")}  # fmt: skip
    assert timed_models.VARIANTS["bf16+fused+reduce-overhead"].compile_mode == "reduce-overhead"


def test_gpu_variants_alias_and_cuda_only_variants_are_skipped_with_a_reason_on_cpu(capsys):
    args = benchmark_speed.parse_args(
        ["--slstm_variants", "gpu", "checkpoint", "--batch_sizes", "2", "--lengths", "4"]
    )
    assert args.slstm_variants == [*timed_models.GPU_SLSTM_VARIANTS, "checkpoint"]
    assert {"fused", "bf16+fused+graphs", "fused+reduce-overhead", "bf16+compile"} <= set(args.slstm_variants)
    args.slstm_variant_lengths = [4]
    plan = benchmark_speed.plan(args, CPU)
    planned = {variant.name for cases in plan.values() for _, variant in cases}
    printed = capsys.readouterr().out
    for key in ("fused", "bf16+fused", "fused+graphs", "bf16+fused+graphs", "fused+reduce-overhead"):
        reason = timed_models.skip_reason(timed_models.VARIANTS[key], CPU)
        assert reason and ("CUDA" in reason or "step_implementation" in reason), key
        assert f"skipping {key}: {reason}" in printed
        assert timed_models.VARIANTS[key].name not in planned
    assert {"fp32+eager", "bf16+eager", "fp32+compile", "fp32+checkpoint"} <= planned


def test_gpu_checks_stages_name_existing_scripts_and_the_script_parses(tmp_path):
    text = GPU_CHECKS.read_text()
    assert subprocess.run(["bash", "-n", str(GPU_CHECKS)], check=False).returncode == 0
    default = re.search(r"STAGES=\$\{STAGES:-([^}]*)\}", text).group(1).split()
    stages = re.findall(r"^stage (\w+) (\d+) ", text, re.MULTILINE)
    assert [name for name, _ in stages] == [*default, "compile", "graphs", "epochs", "scripts"]  # optional ones last
    assert sum(int(limit) for name, limit in stages if name in default) <= int(re.search(r"BUDGET:-(\d+)", text)[1])
    # The kernel profile right after the tests, within the run's first three minutes.
    limits = dict(stages)
    assert default[:2] == ["tests", "profile"] and int(limits["tests"]) + int(limits["profile"]) <= 180
    for path in re.findall(r"(run_scripts/\S+\.py|tests/\S+\.py)", text):
        assert (REPO / path).is_file(), path


# --------------------------------------------------------------------------------------------------------------------
# The floor: FLOPs, bytes, peaks
# --------------------------------------------------------------------------------------------------------------------


def test_slstm_bytes_floor_matches_a_hand_count():
    config = SLSTMConfig(vocab_size=10, hidden_size=4, embedding_dim=3, num_steps=2, window_size=1)
    # hidden 4, 3 window positions, 1 sentence node: 7 context blocks (3 window + 1 sentence + 1 cell gate, output
    # gate, content), 7 input blocks. Batch 2 x 5 tokens.
    weights = 3 * 4 * 7 * 4 + 4 * 4  # W over the window, U_f
    weights += 4 * 7 * 4 + 2 * 4 * 2 * 4 + 4 * 4  # the sentence node's V, its gates, W_f
    once = 10 * 3 + 10 * 7 * 4  # embeddings read, U x written
    per_step = weights + 10 * 7 * 4 + 10 * 4 * 4 + 10 * 2 * 7 * 4 + 2 * 4 * 4  # U x, h/c, window product, node state
    assert flop_and_byte_counts.slstm_forward_elements(config, 2, 5) == once + 2 * per_step == 3462
    assert flop_and_byte_counts.step_bytes(config, 2, 5, "train", 2) == 3 * 2 * 3462
    assert flop_and_byte_counts.step_bytes(config, 2, 5, "forward", 4) == 4 * 3462


def test_bilstm_bytes_floor_matches_a_hand_count():
    config = BaselineEncoderConfig(
        encoder_type="bilstm", num_layers=2, vocab_size=10, embedding_dim=3, hidden_size=8
    )  # 4 units per direction
    first = 2 * 4 * 4 * (3 + 4) + 10 * (3 + 2 * 4 * 8 + 8)
    second = 2 * 4 * 4 * (8 + 4) + 10 * (8 + 2 * 4 * 8 + 8)
    assert flop_and_byte_counts.baseline_forward_elements(config, 2, 5) == 10 * 3 + first + second
    cnn = BaselineEncoderConfig(encoder_type="cnn", num_layers=1, vocab_size=10, embedding_dim=3, hidden_size=8)
    assert math.isnan(flop_and_byte_counts.step_bytes(cnn, 2, 5, "train", 4))


def test_peaks_come_from_the_device_table_or_the_run():
    assert machine_peaks.table_peaks("NVIDIA H100 80GB HBM3")["bandwidth"] == 3.35e12
    assert machine_peaks.table_peaks("NVIDIA H100 PCIe")["bfloat16"] == 756e12
    assert machine_peaks.table_peaks("NVIDIA H200")["bandwidth"] == 4.8e12
    assert machine_peaks.table_peaks("NVIDIA H200 NVL")["float32"] == 60e12
    assert machine_peaks.table_peaks("AMD EPYC 7B13") is None
    ceilings = {"float32": {"gflops": 100.0}, "bfloat16": {"gflops": 300.0}}
    assert machine_peaks.run_peaks("AMD EPYC", ceilings, 5e10) == {
        "float32": 1e11, "bfloat16": 3e11, "bandwidth": 5e10, "source": "measured"
    }  # fmt: skip
    assert machine_peaks.run_peaks("NVIDIA H200", ceilings, 5e10)["source"] == "table"


def test_floor_and_shares_of_peak_by_hand():
    peaks = {**machine_peaks.table_peaks("NVIDIA H100 80GB HBM3"), "source": "table"}
    memory_bound = {"variant": "bf16+fused", "gflop": 2.0, "gbytes": 1.0, "median_ms": 10.0}
    compute_bound = {"variant": "fp32", "gflop": 670.0, "gbytes": 1.0, "median_ms": 20.0}
    machine_peaks.apply_peaks([memory_bound, compute_bound], peaks)
    # bf16: 2 GFLOP at 989 TFLOP/s take 2.0 µs, 1 GB at 3.35 TB/s 298.5 µs: the bytes set the floor.
    assert memory_bound["floor_ms"] == pytest.approx(1e9 / 3.35e12 * 1e3)
    assert memory_bound["pct_of_floor"] == pytest.approx(100 * (1e9 / 3.35e12) / 0.010)
    assert memory_bound["pct_of_peak_flops"] == pytest.approx(100 * 2e9 / 0.010 / 989e12)
    assert memory_bound["pct_of_peak_bandwidth"] == pytest.approx(100 * 1e9 / 0.010 / 3.35e12)
    assert memory_bound["peak_gflops_per_s"] == 989e3
    # float32: 670 GFLOP at 67 TFLOP/s take 10 ms, more than the bytes' 0.3 ms.
    assert compute_bound["floor_ms"] == pytest.approx(10.0) and compute_bound["pct_of_floor"] == pytest.approx(50.0)
    assert compute_bound["peak_gflops_per_s"] == 67e3 and compute_bound["peak_source"] == "table"


# --------------------------------------------------------------------------------------------------------------------
# Real batches and the training scripts' GPU padding
# --------------------------------------------------------------------------------------------------------------------


def test_real_batches_are_an_epochs_length_grouped_batches_spread_and_padded():
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(3, 40, (41,), generator=generator).tolist()
    whole = workloads.real_workload(lengths, "conll2003-ner", 4, 100, pad_multiple=8)
    assert len(whole.batches) == 11 and sorted(n for b in whole.batches for n in b) == sorted(lengths)
    order = list(LengthGroupedSampler(4, lengths=lengths, generator=torch.Generator().manual_seed(42)))
    assert [n for b in whole.batches for n in b] == [lengths[i] for i in order]
    for batch, width in zip(whole.batches, whole.widths):
        assert width % 8 == 0 and max(batch) <= width < max(batch) + 8
    assert whole.tokens == sum(lengths) and whole.length == round(sum(whole.widths) / 11)
    spread = workloads.real_workload(lengths, "conll2003-ner", 4, 5, pad_multiple=None)
    assert spread.batches == whole.batches[1::2][:5]  # every other batch, not the longest, which comes first
    assert spread.widths == tuple(max(b) for b in spread.batches)


def test_real_batches_skip_cleanly_without_the_data(tmp_path, capsys):
    assert workloads.real_workloads(tmp_path, ["movie-review"], [10], 4, CPU) == []
    assert workloads.real_workloads(None, ["conll2003-ner"], [10], 4, CPU) == []
    assert "skipping the real movie-review batches" in capsys.readouterr().out


def test_corpus_lengths_frame_sentences_as_the_training_scripts(shared_data):
    data_dir = shared_data("conll2003").parent
    conll = workloads.corpus_lengths(data_dir, "conll2003-ner")
    with (data_dir / "conll2003/ner/train.txt").open() as handle:
        sentences = handle.read().strip().split("\n\n")
    assert conll == [len(sentence.splitlines()) + 2 for sentence in sentences]
    movie = workloads.corpus_lengths(data_dir, "movie-review")
    assert len(movie) == 8530  # the 80% train part of 10,662 sentences


def test_collators_pad_to_a_multiple_of_8_on_cuda_only():
    assert gpu_batching.pad_multiple_for(torch.device("cuda")) == 8
    assert gpu_batching.pad_multiple_for(CPU) is None
    tokenizer = build_word_tokenizer([["a", "b", "c"]])
    features = [{"input_ids": [2, 4, 3]}, {"input_ids": [2, 4, 5, 6, 7, 3]}]
    for device, width in ((torch.device("cuda"), 8), (CPU, 6)):
        collator = gpu_batching.data_collator(DataCollatorWithPadding, tokenizer, SimpleNamespace(device=device))
        batch = collator(features)
        assert batch["input_ids"].shape == (2, width)
        assert batch["attention_mask"].sum(-1).tolist() == [3, 6]


# --------------------------------------------------------------------------------------------------------------------
# The Python stages of gpu_checks.sh, on a CPU with tiny shapes
# --------------------------------------------------------------------------------------------------------------------


def test_speed_stage_dry_run_keeps_the_csv_columns_and_states_the_floor(tmp_path):
    tiny = TINY + ["--lengths", "4", "--slstm_variant_lengths", "4", "--batch_sizes", "2", "--real_batch_sizes", "2"]
    tiny += ["--real_batches", "1", "--ceiling_size", "32", "--no_memory", "--output_dir", str(tmp_path)]
    rows = benchmark_speed.main(stage_arguments("speed", shared_data_root(), tmp_path) + tiny)
    with (tmp_path / "speed_cuda.csv").open() as handle:
        reader = csv.DictReader(handle)
        table = list(reader)
    assert reader.fieldnames[: len(EARLIER_COLUMNS)] == EARLIER_COLUMNS
    assert reader.fieldnames == speed_report.FIELDS and len(table) == len(rows)
    measured = {(r["model"], r["variant"], r["mode"]) for r in table if r["data"] == "random"}
    assert ("slstm", "fp32+eager", "train") in measured and ("slstm", "bf16+eager", "forward") in measured
    assert not any("fused" in variant for _, variant, _ in measured)  # CUDA only
    for row in rows:
        floor = max(row["gflop"] * 1e9 / row["peak_gflops_per_s"] / 1e9, row["gbytes"] / row["peak_gb_per_s"])
        assert row["floor_ms"] == pytest.approx(floor * 1e3)
        assert row["pct_of_floor"] == pytest.approx(100 * floor / (row["median_ms"] / 1e3))
        assert row["peak_source"] == "measured"  # a CPU is not in the table
        config = timed_models.MODELS[row["model"]]()
        if row["data"] == "random":
            assert row["gflop"] == pytest.approx(flop_and_byte_counts.step_flops(config, 2, 4, row["mode"]) / 1e9)
    real = [row for row in rows if row["data"] != "random"]
    if shared_data_root().exists():
        assert {row["data"] for row in real} == {"conll2003-ner", "movie-review"}
        assert all(row["tokens_per_s"] > 0 and row["batches"] == 1 for row in real)
    report = (tmp_path / "speed_cuda.md").read_text()
    assert "variants / `bilstm1` in the same precision" in report and "Share of the floor reached" in report


def test_real_ner_rows_give_the_bilstm_the_slstm_character_cnn():
    """On real CoNLL-2003 NER batches the S-LSTM and the BiLSTM both read characters through the NER config's
    character CNN (the same module and sizes); movie-review and random rows, and the plain reference, read none."""
    ner = workloads.Workload("conll2003-ner", 2, 6, ((6, 4),), (6,))
    assert [benchmark_speed.reads_characters(name, ner) for name in ("slstm", "bilstm1", "slstm-reference")] == [
        True, True, False,
    ]  # fmt: skip
    assert not benchmark_speed.reads_characters("bilstm1", workloads.Workload("movie-review", 2, 6, ((6, 4),), (6,)))
    character_cnns = []
    for name in ("slstm", "bilstm1"):
        timed = timed_models.TimedModel(name, timed_models.VARIANTS["fp32"], ner, CPU, char_features=True)
        (char_ids,) = timed.char_ids
        assert char_ids.shape == (2, 6, timed_models.WORD_CHARACTERS)
        assert not char_ids[1, 4:].any() and (char_ids[:, :, 0] > 0).sum() == 10  # padding words: no characters
        character_cnns.append(timed.model.embeddings.char_encoder)
        assert timed.config.word_representation_dim == timed.config.embedding_dim + 30
        timed.call_for("train")()
    slstm_cnn, bilstm_cnn = character_cnns
    assert type(slstm_cnn) is type(bilstm_cnn)
    assert [p.shape for p in slstm_cnn.parameters()] == [p.shape for p in bilstm_cnn.parameters()]


def self_cpu_milliseconds(table: str) -> list[float]:
    """The "Self CPU" column of a CPU-only `key_averages().table`, in milliseconds, row by row: the fifth field from
    the right (after it: CPU total %, CPU total, CPU time avg, # of Calls; names may hold spaces)."""
    units = {"s": 1e3, "ms": 1.0, "us": 1e-3}
    values = []
    for line in table.strip().splitlines()[3:-2]:  # between the header's rules and the closing rule
        value = re.fullmatch(r"([\d.]+)(s|ms|us)", line.split()[-5])
        values.append(float(value[1]) * units[value[2]])
    return values


def test_profile_stage_dry_run_prints_each_steps_top_operators_by_self_time(tmp_path, capsys):
    arguments = stage_arguments("profile", shared_data_root(), tmp_path)
    args = benchmark_kernel_profile.parse_arguments(benchmark_kernel_profile.KernelProfileArguments, arguments)
    assert (args.device, args.variant, args.shapes, args.real_batch_size, args.top) == ("cuda", "bf16", ["32x512"], 10,
                                                                                       15)  # fmt: skip
    rows = benchmark_kernel_profile.main([*arguments, "--dry_run", "--warmup", "0"])
    expected = ["2x6"] + (["conll2003-ner"] if shared_data_root().exists() else [])
    assert [row["workload"].split()[0] for row in rows] == expected
    printed = capsys.readouterr().out
    report = (tmp_path / "kernel_profile.md").read_text()
    for row in rows:
        assert row["table"] in printed and row["table"] in report
        milliseconds = self_cpu_milliseconds(row["table"])
        assert len(milliseconds) == 15 and milliseconds == sorted(milliseconds, reverse=True)


def test_crf_stage_dry_run_times_the_crf_on_the_steps_own_inputs(tmp_path):
    tiny = TINY + ["--variants", "fp32", "--lengths", "4", "--batch_sizes", "2", "--real_batches", "1"]
    rows = benchmark_crf_share.main(stage_arguments("crf", shared_data_root(), tmp_path) + tiny)
    assert len(rows) == (2 if shared_data_root().exists() else 1)  # 32x4, and CoNLL-2003 batches of 2
    for row in rows:
        assert row["crf_share"] == pytest.approx(row["crf_ms"] / row["step_ms"])
    with (tmp_path / "crf_share.csv").open() as handle:
        assert len(list(csv.DictReader(handle))) == len(rows)


def test_crf_inputs_are_the_taggers_own_chain_without_the_sentence_boundaries():
    workload = workloads.Workload("random", 2, 6, ((6, 4),), (6,))
    encoder = timed_models.TimedModel("slstm", timed_models.VARIANTS["fp32"], workload, CPU)
    steps = benchmark_crf_share.TaggerSteps(benchmark_crf_share.tagger(True, CPU), encoder)
    (labels,) = steps.labels
    expected = [[-100, 0, 0, 0, 0, -100], [-100, 0, 0, -100, -100, -100]]  # <s> w w w w </s>; <s> w w </s> pad pad
    assert labels.tolist() == expected
    ((emissions, _, chain), kwargs), *rest = steps.crf_inputs()
    assert not rest and kwargs == {"reduction": "none", "implementation": "auto"} and emissions.shape[:2] == (2, 6)
    assert chain.tolist() == [[label != -100 for label in row] for row in expected]


def test_epochs_compare_the_ner_bilstm_with_the_slstm_character_cnn(tmp_path):
    """The NER epochs' BiLSTM-CRF reads characters as the S-LSTM does (`bilstm1-ner-crf-chars.json`); the one without
    characters is an extra run of its own."""
    arguments = benchmark_epochs.parse_arguments(benchmark_epochs.EpochArguments, ["--data_dir", str(tmp_path)])

    def config_and_overrides(run):
        command = benchmark_epochs.training_command(run, arguments, tmp_path)
        overrides = command[command.index("--config_overrides") + 1] if "--config_overrides" in command else ""
        return Path(command[command.index("--config_name") + 1]).name, overrides

    assert config_and_overrides("ner-slstm") == ("slstm-ner-crf.json", "")
    assert config_and_overrides("ner-bilstm1") == ("bilstm1-ner-crf-chars.json", "")
    assert config_and_overrides("ner-bilstm1-no-chars") == ("bilstm1-ner-crf.json", "")
    assert config_and_overrides("movie-review-bilstm1") == ("bilstm1-classification.json", "use_char_features=true")


@pytest.mark.slow
def test_epochs_stage_dry_run_runs_the_training_scripts(tmp_path, shared_data):
    data_dir = shared_data("conll2003").parent
    arguments = stage_arguments("epochs", data_dir, tmp_path)
    arguments += ["--runs", "ner-slstm", "ner-bilstm1", "--max_train_samples", "6", "--run_timeout", "300"]
    rows = benchmark_epochs.main(arguments)
    assert [(r["run"], r["status"]) for r in rows] == [("ner-slstm", "ok"), ("ner-bilstm1", "ok")]
    assert all(r["seconds_per_epoch"] > 0 and r["paper_seconds_per_epoch"] in (79, 82) for r in rows)
    command = benchmark_epochs.training_command("ner-slstm", benchmark_epochs.parse_arguments(
        benchmark_epochs.EpochArguments, arguments), tmp_path)  # fmt: skip
    assert "hub_configs/slstm-ner-crf.json" in " ".join(command) and "--num_train_epochs" in command
    ratio = rows[0]["seconds_per_epoch"] / rows[1]["seconds_per_epoch"]
    report = (tmp_path / "epochs.md").read_text()
    (row,) = [r for r in markdown_rows(report) if r.get("S-LSTM run") == "ner-slstm"]
    assert (row["ours"], row["paper"]) == (f"{ratio:.2f}", f"{79 / 82:.2f}")
    assert (tmp_path / "ner-slstm.log").stat().st_size > 0


def test_wholestep_stage_dry_run_matches_eager_and_plans_the_epochs(tmp_path, capsys):
    # The stage's own arguments, on the CPU: the whole step uncaptured against the Trainer's eager step (4 steps of
    # each task), the host-time rows, the Triton launch rows skipped with a reason; the epochs planned.
    arguments = stage_arguments("wholestep", tmp_path, tmp_path)
    args = benchmark_graph_step.parse_arguments(benchmark_graph_step.GraphStepArguments, arguments)
    assert args.parts == list(benchmark_graph_step.PARTS) and args.match_steps == 50
    assert args.epoch_runs[:3] == ["ner-slstm+cuda-graphs", "ner-slstm", "ner-bilstm1"]
    assert {benchmark_epochs.RUNS[run][:2] for run in args.epoch_runs} == {
        (task, model) for task in ("ner", "movie-review") for model in ("slstm", "bilstm1")
    }
    graphed = [run for run in args.epoch_runs if benchmark_epochs.RUNS[run][2] == ["--cuda_graphs"]]
    assert graphed == ["ner-slstm+cuda-graphs", "movie-review-slstm+cuda-graphs"]
    assert benchmark_graph_step.main([*arguments, "--dry_run", "--parts", "match", "host", "launch"])
    rows = [dict(item.split("=", 1) for item in line.split(" | ")) for line in capsys.readouterr().out.splitlines()
            if line.startswith("part=")]  # fmt: skip
    assert {row["run"]: row["verdict"] for row in rows if "verdict" in row} == {
        "ner-fp32": "match", "classification-fp32": "match"
    }  # fmt: skip
    assert sum(row["part"] == "match" and "step" in row for row in rows) == 2 * 4  # a row per step, as made
    host = {row["run"] for row in rows if row["part"] == "host" and "host_ms" in row}
    assert host == {f"{task}-{model}" for task in ("ner", "classification") for model in ("slstm", "slstm+graph",
                                                                                           "bilstm")}  # fmt: skip
    assert [row.get("skipped", "") for row in rows if row["part"] == "launch"] == [
        "needs a CUDA GPU (Triton's interpreter has no launcher to time)"
    ]


# --------------------------------------------------------------------------------------------------------------------
# On a CUDA GPU only (gpu_checks.sh runs this file's CUDA tests in its tests stage)
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["forward", "train"])
def test_cuda_graph_replay_matches_eager(mode):
    cuda = torch.device("cuda")
    workload = workloads.Workload("random", 2, 8, ((8, 5),), (8,))
    eager = timed_models.TimedModel("slstm", timed_models.VARIANTS["fp32"], workload, cuda)
    graphed = timed_models.TimedModel("slstm", timed_models.VARIANTS["fp32+eager"], workload, cuda)
    graphed.runner = timed_models.GraphedModel(graphed.model)
    results = []
    for timed in (eager, graphed):
        for module in timed.model.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0.0  # the same outputs without the same random draws
        timed.model.train(mode == "train")
        input_ids, attention_mask = timed.batches[0]
        with torch.set_grad_enabled(mode == "train"):
            for _ in range(3):  # the capture, then replays
                states, pooled = timed.outputs(input_ids, attention_mask)
        if mode == "train":
            (states.sum() + pooled.sum()).backward()
        grads = [p.grad.clone() for p in timed.model.parameters() if p.grad is not None]
        results.append((states.detach().clone(), pooled.detach().clone(), grads))
    (states, pooled, grads), (graph_states, graph_pooled, graph_grads) = results
    torch.testing.assert_close(graph_states, states)
    torch.testing.assert_close(graph_pooled, pooled)
    assert len(graph_grads) == len(grads)
    for graph_grad, grad in zip(graph_grads, grads):
        torch.testing.assert_close(graph_grad, grad)
