"""Which CPUs get bf16 matmuls under bf16 autocast (`cpu_matmul.bf16_decision`): the rule against the CPU kinds
measured (bf16 where its matmuls ran faster than float32's), /proc/cpuinfo texts through to the decision, and the
one-time probe for the CPUs no measurement covers, against its own timings."""

import logging

import pytest
import torch

from modeling_slstm import cpu_matmul

# The CPU kinds measured, with how fast bf16 ran against float32 there (docs/benchmarks.md, "CPU: bf16 only where it
# is faster"): matmul GFLOP/s bf16 / float32, or for the AVX2 EPYC, whose bf16 is emulated, the training step's speed.
# The oracle of the rule is whether that ratio is above 1.
MEASURED_CPU_KINDS = {
    "AMD EPYC family 25 (avx512_bf16)": ("AuthenticAMD", "avx2 avx512f avx512bw avx512_bf16", 2.03),
    "AMD EPYC family 26 (avx512_bf16)": ("AuthenticAMD", "avx2 avx512f avx512bw avx512_bf16", 447 / 240),
    "Intel Xeon family 6 model 207 (avx512_bf16, no AMX)": ("GenuineIntel", "avx2 avx512f avx512_bf16", 165 / 303),
    "AMD EPYC AVX2 (no bf16 instructions)": ("AuthenticAMD", "avx2 fma", 1 / 19),
}

# /proc/cpuinfo as such machines print it (first processor, flags shortened to the ones that matter and a few others).
INTEL_AVX512_BF16_NO_AMX = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 207
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16

processor\t: 1
vendor_id\t: GenuineIntel
"""
INTEL_AMX = INTEL_AVX512_BF16_NO_AMX.replace("avx512_fp16", "avx512_fp16 amx_bf16 amx_tile amx_int8")
AMD_EPYC_AVX512_BF16 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni
"""
AMD_EPYC_AVX2 = AMD_EPYC_AVX512_BF16.replace(" avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni", "")
ARM_NEOVERSE = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm bf16 i8mm
CPU implementer\t: 0x41
"""


@pytest.fixture(autouse=True)
def fresh_decision(monkeypatch):
    """Each test decides afresh (as a new process would) and leaves no decision behind."""
    monkeypatch.delenv(cpu_matmul.CPU_BF16_ENV, raising=False)
    cpu_matmul.set_cpu_bf16(None)
    cpu_matmul._warn_float32_under_bf16_autocast.cache_clear()
    yield
    cpu_matmul.set_cpu_bf16(None)
    cpu_matmul._warn_float32_under_bf16_autocast.cache_clear()


def pretend_cpu(monkeypatch, cpuinfo_text: str, onednn_bf16: bool | None = True):
    """This process's CPU described by `cpuinfo_text`, with or without a oneDNN bf16 path (`None`: this PyTorch's)."""
    info = cpu_matmul.parse_cpuinfo(cpuinfo_text)
    monkeypatch.setattr(cpu_matmul, "cpu_info", lambda: info)
    if onednn_bf16 is not None:
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: onednn_bf16)
    cpu_matmul.set_cpu_bf16(None)


def no_probe():
    raise AssertionError("a CPU kind that was measured must not be probed")


@pytest.mark.parametrize("kind", MEASURED_CPU_KINDS)
def test_bf16_matmuls_exactly_on_the_cpu_kinds_where_they_ran_faster(kind):
    vendor, flags, bf16_speed_over_float32 = MEASURED_CPU_KINDS[kind]
    decision = cpu_matmul.measured_bf16_speed(vendor, frozenset(flags.split()), onednn_bf16=True)
    assert decision is not None and decision.fast is (bf16_speed_over_float32 > 1), decision


@pytest.mark.parametrize(
    "vendor, flags, onednn_bf16, expected",
    [
        ("GenuineIntel", "avx512f avx512bw avx512vl", True, False),  # AVX-512 that only emulates bf16
        ("GenuineIntel", "avx512f avx512_bf16 amx_bf16 amx_tile", True, True),  # AMX
        ("AuthenticAMD", "avx512f avx512_bf16", False, False),  # no oneDNN bf16 path in this PyTorch
        ("", "fp asimd bf16", True, None),  # aarch64 bf16: not measured, probed
        ("", "", True, None),  # no /proc/cpuinfo: probed
        ("HygonGenuine", "avx2 avx512_bf16", True, None),  # another vendor: probed
    ],
)
def test_cpus_without_a_measurement_are_probed(vendor, flags, onednn_bf16, expected):
    decision = cpu_matmul.measured_bf16_speed(vendor, frozenset(flags.split()), onednn_bf16)
    assert (decision if decision is None else decision.fast) is expected


@pytest.mark.parametrize(
    "cpuinfo_text, fast",
    [(INTEL_AVX512_BF16_NO_AMX, False), (INTEL_AMX, True), (AMD_EPYC_AVX512_BF16, True), (AMD_EPYC_AVX2, False)],
    ids=["intel_avx512_bf16_no_amx", "intel_amx", "amd_avx512_bf16", "amd_avx2"],
)
def test_cpuinfo_to_decision(monkeypatch, cpuinfo_text, fast):
    pretend_cpu(monkeypatch, cpuinfo_text)
    monkeypatch.setattr(cpu_matmul, "probe_bf16_matmul", no_probe)
    assert cpu_matmul.bf16_decision().fast is fast
    assert cpu_matmul.cpu_has_fast_bf16() is fast


def test_parse_cpuinfo_reads_the_first_processor():
    info = cpu_matmul.parse_cpuinfo(INTEL_AVX512_BF16_NO_AMX)
    assert (info["vendor_id"], info["cpu family"], info["model"]) == ("GenuineIntel", "6", "207")
    assert info["flags"].split()[-2:] == ["avx512_bf16", "avx512_fp16"] and info["processor"] == "0"
    assert cpu_matmul.parse_cpuinfo(ARM_NEOVERSE)["Features"].split()[-2:] == ["bf16", "i8mm"]


def test_intel_avx512_bf16_without_amx_keeps_float32_matmuls_and_says_so_once(monkeypatch, caplog):
    """Under bf16 autocast the layers compute in float32 on that CPU, with one warning that names why."""
    pretend_cpu(monkeypatch, INTEL_AVX512_BF16_NO_AMX)
    monkeypatch.setattr(cpu_matmul, "probe_bf16_matmul", no_probe)
    caplog.set_level(logging.WARNING, logger=cpu_matmul.logger.name)
    layer = cpu_matmul.SLSTMLinear(6, 4)
    inputs = torch.randn(3, 6)
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            output = layer(inputs)
        assert output.dtype == torch.float32
        torch.testing.assert_close(output, torch.nn.functional.linear(inputs, layer.weight, layer.bias))
    warnings = [record.getMessage() for record in caplog.records if "no fast bf16 matmul path" in record.getMessage()]
    assert len(warnings) == 1 and "avx512_bf16 without AMX on an Intel CPU" in warnings[0], warnings


def test_intel_amx_runs_bf16_matmuls(monkeypatch):
    pretend_cpu(monkeypatch, INTEL_AMX)
    monkeypatch.setattr(cpu_matmul, "probe_bf16_matmul", no_probe)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert cpu_matmul.SLSTMLinear(6, 4)(torch.randn(3, 6)).dtype == torch.bfloat16


def test_float16_autocast_computes_in_float16_without_a_bf16_warning(monkeypatch, caplog):
    """The float32 rule is for bf16 autocast only: under float16 CPU autocast the layers compute as `nn.Linear` and
    `nn.Conv1d` do there (in float16), with no warning about bf16."""
    pretend_cpu(monkeypatch, INTEL_AVX512_BF16_NO_AMX)
    monkeypatch.setattr(cpu_matmul, "probe_bf16_matmul", no_probe)
    caplog.set_level(logging.WARNING, logger=cpu_matmul.logger.name)
    linear, conv = cpu_matmul.SLSTMLinear(6, 4), cpu_matmul.SLSTMConv1d(6, 4, kernel_size=3, padding=1)
    rows, sequences = torch.randn(3, 6), torch.randn(2, 6, 5)
    with torch.autocast("cpu", dtype=torch.float16):
        outputs = linear(rows), conv(sequences)
        expected = torch.nn.Linear.forward(linear, rows), torch.nn.Conv1d.forward(conv, sequences)
    assert expected[0].dtype == expected[1].dtype == torch.float16  # what autocast itself gives
    for output, reference in zip(outputs, expected):
        assert output.dtype == torch.float16
        torch.testing.assert_close(output, reference)
    assert "no fast bf16 matmul path" not in caplog.text


# The probe


class FakeClock:
    """A clock that each timed call moves on by its own next duration."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def call_taking(self, durations: list[float], order: list[str], name: str):
        durations = iter(durations)

        def call():
            order.append(name)
            self.now += next(durations)

        return call


def test_best_seconds_in_turn_takes_each_calls_fastest_timed_round():
    clock, order = FakeClock(), []
    calls = {
        "float32": clock.call_taking([9.0, 3.0, 2.0, 4.0], order, "float32"),  # first: the untimed round
        "bf16": clock.call_taking([9.0, 5.0, 6.0, 1.5], order, "bf16"),
    }
    best = cpu_matmul.best_seconds_in_turn(calls, repeats=3, clock=clock)
    assert best == {"float32": 2.0, "bf16": 1.5}
    assert order == ["float32", "bf16"] * 4  # in turn, round by round


@pytest.mark.parametrize(
    "float32_seconds, bf16_seconds, faster",
    [(1.0, 0.5, True), (1.0, 0.8, True), (1.0, 0.81, False), (1.0, 1.0, False), (0.5, 1.0, False)],
)
def test_probe_counts_bf16_faster_only_beyond_its_margin(float32_seconds, bf16_seconds, faster):
    assert cpu_matmul.PROBE_MARGIN == 0.8
    assert cpu_matmul.Bf16Probe(float32_seconds, bf16_seconds).bf16_faster is faster


@pytest.mark.parametrize("bf16_seconds, fast", [(0.02, True), (0.09, False)])
def test_an_unmeasured_cpu_is_decided_by_one_probe(monkeypatch, caplog, bf16_seconds, fast):
    pretend_cpu(monkeypatch, ARM_NEOVERSE)
    probes = []

    def probe():
        probes.append(cpu_matmul.Bf16Probe(float32_seconds=0.05, bf16_seconds=bf16_seconds))
        return probes[-1]

    monkeypatch.setattr(cpu_matmul, "probe_bf16_matmul", probe)
    caplog.set_level(logging.INFO, logger=cpu_matmul.logger.name)
    assert [cpu_matmul.cpu_has_fast_bf16() for _ in range(3)] == [fast] * 3
    assert len(probes) == 1  # once per process
    gflops = 2 * 1024**3 / 1e9
    reason = cpu_matmul.bf16_decision().reason
    assert f"{gflops / bf16_seconds:.0f} GFLOP/s in bf16 and {gflops / 0.05:.0f} in float32" in reason
    assert sum("S-LSTM CPU bf16 matmuls" in record.getMessage() for record in caplog.records) == 1


def test_the_probe_times_both_matmuls_and_decides_by_its_own_timings():
    """The real probe on this machine: two positive timings, and the decision they imply."""
    probe = cpu_matmul.probe_bf16_matmul(repeats=1)
    assert probe.float32_seconds > 0 and probe.bf16_seconds > 0
    assert probe.bf16_faster is (probe.bf16_seconds <= 0.8 * probe.float32_seconds)


def test_the_probe_runs_under_autocast_without_asking_itself(monkeypatch):
    """The decision is first asked by a layer under bf16 autocast: the probe's own float32 layer must not ask again."""
    pretend_cpu(monkeypatch, ARM_NEOVERSE)
    monkeypatch.setattr(cpu_matmul, "PROBE_SHAPE", (8, 16, 4))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = cpu_matmul.SLSTMLinear(6, 4)(torch.randn(3, 6))
    expected = torch.bfloat16 if cpu_matmul.bf16_decision().fast else torch.float32
    assert output.dtype == expected and "matmul ran at" in cpu_matmul.bf16_decision().reason


@pytest.mark.parametrize("choice, fast", [("bf16", True), ("float32", False)])
def test_the_environment_variable_overrides_the_rule(monkeypatch, choice, fast):
    pretend_cpu(monkeypatch, INTEL_AVX512_BF16_NO_AMX if fast else AMD_EPYC_AVX512_BF16)
    monkeypatch.setenv(cpu_matmul.CPU_BF16_ENV, choice)
    assert cpu_matmul.cpu_has_fast_bf16() is fast
    assert cpu_matmul.bf16_decision().reason == f"SLSTM_CPU_BF16={choice}"


def test_a_bad_override_names_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv(cpu_matmul.CPU_BF16_ENV, "fast")
    with pytest.raises(ValueError, match=r"SLSTM_CPU_BF16 must be one of \('auto', 'bf16', 'float32'\), got 'fast'"):
        cpu_matmul.bf16_decision()
    with pytest.raises(ValueError, match="CPU bf16 choice must be one of"):
        cpu_matmul.set_cpu_bf16("yes")


def test_a_compiled_model_keeps_one_graph_with_float32_matmuls_under_bf16_autocast(monkeypatch, caplog):
    """`fullgraph=True` on the Intel kind: the decision and its warning are constants to `torch.compile`, not traced;
    the compiled outputs are the eager ones. Dynamo's graph capture is what is checked (`backend="eager"`)."""
    from modeling_slstm import SLSTMConfig, SLSTMModel

    pretend_cpu(monkeypatch, INTEL_AVX512_BF16_NO_AMX, onednn_bf16=None)  # torch.compile reads the real mkldnn ops
    monkeypatch.setattr(cpu_matmul, "probe_bf16_matmul", no_probe)
    caplog.set_level(logging.WARNING, logger=cpu_matmul.logger.name)
    torch.manual_seed(0)
    model = SLSTMModel(SLSTMConfig(vocab_size=20, embedding_dim=8, hidden_size=8, num_steps=2)).eval()
    input_ids = torch.randint(4, 20, (2, 5))
    torch._dynamo.reset()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        compiled = torch.compile(model, fullgraph=True, backend="eager")(input_ids).last_hidden_state
        eager = model(input_ids).last_hidden_state
    torch._dynamo.reset()
    torch.testing.assert_close(compiled, eager, atol=1e-2, rtol=1e-2)
    assert sum("no fast bf16 matmul path" in record.getMessage() for record in caplog.records) == 1
