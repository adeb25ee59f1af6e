"""The H200 time model of the fused step's kernels (`run_scripts/benchmarks/support/step_time_model.py`): its SASS
reader against a real sm_90 listing, and its calibration against the one GPU measurement, from the statistics of
that run's kernels committed in `tests/benchmarks/data/` (how they were made: `CALIBRATION_COMMAND`)."""

import json
import re
from pathlib import Path

import pytest

from run_scripts.benchmarks.support import sass, step_time_model

DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "step_sums_kernel_sm90.sass"
"""`cuobjdump -sass` of `step_sums_kernel` compiled for sm_90 by Triton 3.6 (whitespace runs collapsed)."""
CALIBRATION = DATA / "step_kernel_statistics_fa948a1_triton36.json"
CALIBRATION_COMMAND = (
    "python run_scripts/benchmarks/benchmark_step_kernel_times.py --kernels_from fa948a1^1 --triton_path TRITON36 "
    "--shapes 32x512 32x32 --save_statistics tests/benchmarks/data/step_kernel_statistics_fa948a1_triton36.json --fit"
)
"""`TRITON36`: a folder holding Triton 3.6 (`pip install --no-deps --target TRITON36 triton==3.6.0`)."""


def test_the_control_fields_of_a_real_listing_match_a_decoding_by_hand():
    instructions = {instruction.address: instruction for instruction in sass.parse_sass(SAMPLE.read_text())}
    # /*0000*/ LDC R1, c[0x0][0x28], second word 0x000e220000000800: bits 41-61 are 0x711 = 0b0_0111_0001_0001:
    # stall 0b0001, yield 1, write barrier 0b000, read barrier 0b111 (none), wait mask 0.
    first = instructions[0x0]
    assert (first.opcode, first.stall, first.yield_flag, first.write_barrier, first.read_barrier, first.wait_mask) == (
        "LDC", 1, 1, 0, 7, 0
    )
    # /*00b0*/ IMAD.WIDE.U32 R12, R12, 0x100, RZ, second word 0x004fc800078e00ff: bits 41-61 are 0x27e4 =
    # 0b10_0111_1110_0100: stall 4, yield 0, no barriers set, waits on scoreboard 2 (S2R R12, SR_CTAID.X's).
    wide = instructions[0xB0]
    assert (wide.stall, wide.yield_flag, wide.write_barrier, wide.read_barrier, wide.waits_on) == (4, 0, 7, 7, [2])
    assert instructions[0x50].write_barrier == 2 and instructions[0x50].text == "S2R R12, SR_CTAID.X"


def _registers(text: str) -> set[str]:
    """The registers an operand list names, a 64-bit pair (`R8.64`) as both halves."""
    named = set()
    for number, wide in re.findall(r"\bR(\d+)(\.64)?", text):
        named.add(f"R{number}")
        if wide:
            named.add(f"R{int(number) + 1}")
    return named


def test_every_variable_latency_result_is_waited_for_before_it_is_read():
    """An independent check of the fields' positions: the hardware does not track registers, so the first
    instruction that reads the result of a load, shuffle or special-register read must wait on (or follow an
    instruction that waits on) the scoreboard that instruction set. Read with the fields at any other place, the
    listing breaks this everywhere."""
    instructions = sass.parse_sass(SAMPLE.read_text())
    checked = 0
    for position, writer in enumerate(instructions):
        if writer.write_barrier == sass.NO_BARRIER or writer.base in ("BAR", "STG", "STS"):
            continue
        operands = writer.text.split(None, 2 if writer.text.startswith("@") else 1)[-1]
        written = _registers(operands.split(",")[0])
        for later in range(position + 1, len(instructions)):
            reader = instructions[later]
            if reader.base == "BRA":  # the first reader on the straight path only
                break
            if written & _registers(reader.text.split(None, 1)[-1].split(",", 1)[-1]):
                waited = any(writer.write_barrier in instructions[between].waits_on
                             for between in range(position + 1, later + 1))  # fmt: skip
                assert waited, f"{reader.text} reads {writer.text}'s result without waiting on its scoreboard"
                checked += 1
                break
    assert checked >= 20


def test_the_loops_are_the_branches_back():
    instructions = sass.parse_sass(SAMPLE.read_text())
    back = [(instructions[first].address, instructions[last].address) for first, last in sass.loops(instructions)]
    # By hand from the listing: `@P3 BRA 0x3d0` at 0x750, `@P0 BRA 0xa20` at 0xb30, and the trap `BRA 0xea0` at 0xea0.
    assert sorted(back) == [(0x3D0, 0x750), (0xA20, 0xB30), (0xEA0, 0xEA0)]


def test_a_warp_waits_its_stalls_and_its_loads():
    """`warp_cycles` on a hand-made stream (`(class, stall, write barrier, read barrier, wait mask)`) against its
    cycles worked out by hand."""
    instructions = [
        ("G", 1, 0, 7, 0),  # LDG: issues at 0, scoreboard 0 released at 0 + latency
        ("O", 4, 7, 7, 0),  # FADD: issues at 1
        ("O", 2, 7, 7, 1),  # FMUL: waits on scoreboard 0, issues at latency
        ("U", 1, 1, 7, 0),  # MUFU: issues at latency + 2, scoreboard 1 at latency + 2 + SHORT_LATENCY_CYCLES
        ("O", 1, 7, 7, 2),  # FADD: waits on scoreboard 1
    ]
    latency = 500
    cost = step_time_model.warp_cycles(instructions, [[0, 4]], lambda loop: 1, latency)
    assert cost.issued == 5
    assert cost.chain_cycles == latency + 2 + step_time_model.SHORT_LATENCY_CYCLES + 1
    assert cost.issue_cycles == step_time_model.SLOW_PIPE_CYCLES  # the special-function pipe is the busiest
    looped = step_time_model.warp_cycles(instructions, [{"loop": "f", "body": [[0, 4]]}], lambda loop: 3, latency)
    assert looped.issued == 15 and looped.chain_cycles == pytest.approx(3 * cost.chain_cycles)


@pytest.fixture(scope="module")
def calibration() -> dict:
    return json.loads(CALIBRATION.read_text())


@pytest.mark.parametrize(("batch", "length"), list(step_time_model.MEASURED))
def test_the_model_gives_the_measured_h200_steps_within_25_percent(calibration, batch, length):
    """The kernels of fa948a1^1 under Triton 3.6, as the H200 ran them: 48.0 ms a step at 32x512, 3.66 ms at 32x32
    (docs/benchmarks/speed_cuda_h200.md), with the model's constants as they stand."""
    predicted = step_time_model.step_prediction(calibration, f"{batch}x{length}")["seconds"] * 1e3
    measured = step_time_model.MEASURED[(batch, length)]
    assert abs(predicted / measured - 1) <= 0.25, (
        f"{batch}x{length}: predicted {predicted:.2f} ms, measured {measured}"
    )


def test_a_loop_run_at_once_once_periodic_takes_what_every_trip_run_takes(calibration):
    """`warp_cycles` adds a loop's later trips at once when a trip ends in the state it began in; against every
    trip issued one by one, on the measured backward's word programs at 32x512 (two loops of 32 trips)."""
    launch = next(launch for launch in calibration["steps"]["32x512"]["launches"]
                  if launch["kernel"] == "step_backward_kernel")  # fmt: skip
    variant = calibration["variants"][launch["variant"]]
    instructions = step_time_model.decode_instructions(variant["instructions"])
    trips_of = step_time_model._trips(launch)
    (path, _), *_ = sorted(step_time_model.launch_kinds(launch, variant), key=lambda kind: -len(str(kind[0])))

    def every_trip(steps):
        for step in steps:
            if isinstance(step, dict):
                for _ in range(trips_of(step)):
                    yield from every_trip(step["body"])
            else:
                yield step

    fast = step_time_model.warp_cycles(instructions, path["steps"], trips_of)
    plain = step_time_model.warp_cycles(instructions, list(every_trip(path["steps"])), trips_of)
    assert fast.issued == plain.issued > 200_000
    assert fast.chain_cycles == pytest.approx(plain.chain_cycles, rel=1e-9)


def test_programs_take_the_first_slot_to_come_free_in_grid_order():
    # By hand: 3 programs of 10 cycles on 2 slots end at 20; a long program first beside 10 short ones on the other
    # slot ends with them at 100; the long one last waits for the short ones' slots (50 each) and ends at 150.
    assert step_time_model.makespan([(10, 3)], 2) == 20
    assert step_time_model.makespan([(100, 1), (10, 10)], 2) == 100
    assert step_time_model.makespan([(10, 10), (100, 1)], 2) == 150


def test_a_loop_that_loop_trips_does_not_know_takes_its_trips_from_its_while(monkeypatch):
    from modeling_slstm import triton_kernels

    _, whiles = step_time_model._source_functions(triton_kernels)
    # The kernels' loops by hand: `while tile < TILES` (tile += 1), `while block < blocks` (block += 1), and
    # `while start < seq` (start += BLOCK_S).
    assert {"bound": "TILES", "step": 1} in whiles.values() and {"bound": "blocks", "step": 1} in whiles.values()
    assert {"bound": "seq", "step": "BLOCK_S"} in whiles.values()
    monkeypatch.setattr(step_time_model, "LOOP_TRIPS", {})
    loop = {"loop": "_a_new_helper", "line": 1, "bound": "seq", "step": "BLOCK_S", "body": []}
    trips_of = step_time_model._trips({"kernel": "k", "arguments": {"seq": 100, "WORD_BLOCK_S": 8, "hidden": 300}})
    assert trips_of(loop) == 13  # ceil(100 / 8)
    ambiguous = {"kernel": "k", "arguments": {"seq": 100, "WORD_BLOCK_S": 8, "SENTENCE_BLOCK_S": 32}}
    with pytest.raises(ValueError, match="_a_new_helper.*LOOP_TRIPS"):
        step_time_model._trips(ambiguous)(loop)


def test_the_profile_stage_prints_each_kernels_measured_time_beside_the_prediction(calibration, monkeypatch):
    """`benchmark_kernel_profile.prediction_table` on a GPU, its two GPU-only inputs stood in for: the statistics of
    the step that ran (those of the measured kernels at 32x32) and the profiler's rows (device µs per key)."""
    from types import SimpleNamespace

    from run_scripts.benchmarks import benchmark_kernel_profile

    statistics = {**calibration, "steps": {"profiled": calibration["steps"]["32x32"]}}
    monkeypatch.setattr(step_time_model, "run_statistics", lambda step, name: statistics)
    rows = [SimpleNamespace(key="step_backward_kernel", count=9, self_device_time_total=2000.0),
            SimpleNamespace(key="step_forward_kernel", count=9, self_device_time_total=250.0),
            SimpleNamespace(key="sm90_xmma_gemm_bf16", count=50, self_device_time_total=500.0)]  # fmt: skip
    table = benchmark_kernel_profile.prediction_table(SimpleNamespace(call_for=lambda mode: None), rows)
    predicted = step_time_model.step_prediction(statistics, "profiled")
    cells = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()]
    lines = {row[0]: row[1:] for row in cells}
    backward_ms = predicted["kernels"]["step_backward_kernel"]["seconds"] * 1e3
    assert lines["`step_backward_kernel`"][:4] == ["9", "2.000", f"{backward_ms:.3f}", f"{backward_ms / 2:.2f}"]
    assert lines["`step_forward_kernel`"][1] == "0.250"
    assert lines["matmuls and other operators"][1] == "0.500"
    assert lines["**step (device time)**"][1:3] == ["2.750", f"{predicted['seconds'] * 1e3:.3f}"]
