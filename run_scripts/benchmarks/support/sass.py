"""The SASS of a kernel compiled for sm_90, read instruction by instruction with the scheduling that `ptxas` encoded
in it, for `step_time_model.py`.

`disassemble` runs `nvdisasm` (the CUDA disassembler Triton's NVIDIA backend ships beside `ptxas`) on a cubin, with
the instruction encodings (`-hex`) and the source line of each instruction (`-g`: Triton compiles with line info).
`parse_sass` reads that listing (or `cuobjdump -sass`'s, without the lines) into `Instruction`s.

Since Volta, every 128-bit instruction carries its scheduling in bits 105-125 (bits 41-61 of its second 64-bit word),
which the hardware obeys instead of tracking dependencies itself (Jia et al., "Dissecting the NVIDIA Volta GPU
Architecture via Microbenchmarking", 2018, section 2.1; the same layout through Hopper):

- `stall` (4 bits): cycles the warp waits before it issues its next instruction: the fixed latency of a dependent
  arithmetic result, set by `ptxas` where the next instruction needs it;
- `yield` (1 bit);
- `write_barrier` (3 bits, 7 = none): the scoreboard (0-5) that a variable-latency instruction (a load from global or
  shared memory, a shuffle, a special-function or conversion unit op) releases when its result is written;
- `read_barrier` (3 bits, 7 = none): the scoreboard released once its source registers are read (a store's data);
- `wait_mask` (6 bits): the scoreboards the instruction waits for before it issues;
- `reuse` (4 bits): operand-reuse cache flags.
"""

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

NO_BARRIER = 7

_INSTRUCTION = re.compile(
    r"/\*(?P<address>[0-9a-f]{4,})\*/\s+(?P<text>[^;]*?)\s*;\s*/\*\s*(?P<low>0x[0-9a-f]{16})\s*\*/\s*\n"
    r"\s*/\*\s*(?P<high>0x[0-9a-f]{16})\s*\*/"
)
_LINE = re.compile(r'//## File "(?P<file>[^"]+)", line (?P<line>\d+)')
_LABEL = re.compile(r"^(?P<label>\.L_x_\d+):", re.MULTILINE)
_TARGET = re.compile(r"`\((?P<label>\.L_x_\d+)\)|(?<![0-9a-fx])0x(?P<address>[0-9a-f]+)\s*$")


@dataclass
class Instruction:
    """One SASS instruction: its byte address, its text (`@P0 LDG.E R2, desc[UR4][R4.64]`), its opcode with
    modifiers (`LDG.E`), the control fields `ptxas` encoded (see the module docstring), the source file and line it
    came from (empty and 0 where the listing has none), and for a branch, the address it jumps to."""

    address: int
    text: str
    opcode: str
    stall: int
    yield_flag: int
    write_barrier: int
    read_barrier: int
    wait_mask: int
    reuse: int
    file: str = ""
    line: int = 0
    target: int | None = None

    @property
    def base(self) -> str:
        """The opcode without modifiers (`LDG`)."""
        return self.opcode.split(".")[0]

    @property
    def waits_on(self) -> list[int]:
        """The scoreboards this instruction waits for."""
        return [barrier for barrier in range(6) if self.wait_mask >> barrier & 1]


def control_fields(high_word: int) -> dict[str, int]:
    """The scheduling fields of an instruction from the second 64-bit word of its encoding (bits 41-61)."""
    control = high_word >> 41 & 0x1FFFFF
    return {
        "stall": control & 0xF, "yield_flag": control >> 4 & 1, "write_barrier": control >> 5 & 7,
        "read_barrier": control >> 8 & 7, "wait_mask": control >> 11 & 0x3F, "reuse": control >> 17 & 0xF,
    }  # fmt: skip


def _opcode(text: str) -> str:
    """The opcode of an instruction's text, after its predicate guard (`@!P0`)."""
    words = text.split()
    return words[1] if words[0].startswith("@") else words[0]


def parse_sass(listing: str) -> list[Instruction]:
    """The instructions of a one-kernel listing (`nvdisasm -hex [-g]` or `cuobjdump -sass`), in address order, each
    with the last source file and line named before it and a branch's target address.

    Raises:
        `ValueError`: If `listing` holds no instruction with its two encoding words.
    """
    labels = {}
    for match in _LABEL.finditer(listing):
        following = _INSTRUCTION.search(listing, match.end())
        if following:
            labels[match["label"]] = int(following["address"], 16)
    lines = [(match.start(), match["file"], int(match["line"])) for match in _LINE.finditer(listing)]
    instructions, line_index, file, line = [], 0, "", 0
    for match in _INSTRUCTION.finditer(listing):
        while line_index < len(lines) and lines[line_index][0] < match.start():
            _, file, line = lines[line_index]
            line_index += 1
        text = " ".join(match["text"].split())
        target = None
        if _opcode(text) in ("BRA", "BRX", "JMP", "CALL"):
            found = _TARGET.search(text)
            if found:
                target = labels.get(found["label"]) if found["label"] else int(found["address"], 16)
        instructions.append(
            Instruction(int(match["address"], 16), text, _opcode(text), **control_fields(int(match["high"], 16)),
                        file=file, line=line, target=target)
        )  # fmt: skip
    if not instructions:
        raise ValueError(f"expected a SASS listing with instruction encodings, got {listing[:200]!r}")
    return instructions


def disassemble(cubin: bytes, tools: Path) -> str:
    """`nvdisasm -g -hex -c` of `cubin` (an sm_90 binary), with `tools` the folder holding `nvdisasm` (Triton's
    `backends/nvidia/bin`)."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        run = subprocess.run([str(tools / "nvdisasm"), "-g", "-hex", "-c", file.name], capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"nvdisasm failed: {run.stderr[-2000:]}")
    return run.stdout


def loops(instructions: list[Instruction]) -> list[tuple[int, int]]:
    """Each loop as `(first, last)` indices into `instructions`: a branch back to an earlier address (`last`) and its
    target (`first`), innermost loops first where they nest."""
    index = {instruction.address: position for position, instruction in enumerate(instructions)}
    found = [
        (index[instruction.target], position)
        for position, instruction in enumerate(instructions)
        if instruction.target is not None and instruction.target <= instruction.address
    ]
    return sorted(found, key=lambda loop: loop[1] - loop[0])
