"""The excerpt of a failed process's log that a failure shows: the first error-looking block
and the last lines, each once.

A crash's cause is rarely in the last lines: gunicorn prints its shutdown after the
worker's traceback, a Django settings ``SyntaxError`` sits a hundred lines up. So the
excerpt is the first block that looks like an error — a Python traceback (through its
exception line), a Go ``panic:``, a line with ``Error``/``Exception``/``ERROR``/``FATAL``
and the indented lines under it — then the tail, leaving out the lines the block already
showed. A line repeated back to back is shown once, followed by how many times it came
(a failing health check's access log is one line 25 times), and the tail is the last
``TAIL`` such runs, so it reaches back to lines that differ. A process restarted by its
supervisor before the failure was told crashes the same way again: the block's lines
coming again (the same but for numbers: times, pids) are one line in the tail, saying
where, so the cause is shown once however many times it came. Pure: the caller reads the
log and masks each line (spec.secrets.Masker) first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

TAIL = 12  #: the last lines shown
TIMES = "\N{MULTIPLICATION SIGN}"  #: a repeated line's count follows it: "… (<TIMES>12)"
MAX_BLOCK = 40  #: a longer block keeps its first lines and its last (the exception) ones
_SCAN = 2000  #: how far a block is followed

_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
_START = re.compile(
    r"Traceback \(most recent call last\):"
    r"|^\s*panic: |^fatal error: "
    r"|\b[A-Za-z_.]*(Error|Exception)\b"
    r"|(^|[\s\[])(ERROR|FATAL|CRITICAL)\b| ERR! |^\s*(error|fatal)(\[\w+\])?: "
)
_INDENTED = re.compile(r"^[ \t]+\S")
_PANIC = re.compile(r"^\s*panic: ")
#: what a Go panic's stack is made of: blank lines, goroutine headers, frames
_GO_STACK = re.compile(r"^(\s*$|goroutine \d+ |[\t ]|[\w./*()-]+\(.*\)$|exit status \d+$)")
#: what differs between two crashes of one cause: times, pids, addresses
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")


@dataclass(frozen=True)
class Excerpt:
    """Line numbers are 1-based in the lines given."""

    block: tuple[str, ...] = ()
    block_start: int = 0
    tail: tuple[str, ...] = ()
    tail_start: int = 0

    def lines(self, log: str, full: str = "") -> list[str]:
        """The failure's detail lines: the block, the tail, and where the full log is."""
        if not self.block and not self.tail:
            return [f"its log ({log}) is empty"]
        out: list[str] = []
        if self.block:
            out.append(f"first error in its log (from line {self.block_start}):")
            out += [f"| {line}" for line in collapsed(self.block)]
        if self.tail:
            out.append(f"last lines of its log ({log}):" if not self.block else "last lines:")
            out += [f"| {line}" for line in collapsed(self.tail)]
        elif self.block:
            out.append(f"(the block is the end of its log, {log})")
        if full:
            out.append(f"full log: {full}")
        return out


def collapsed(lines: Sequence[str]) -> list[str]:
    """``lines`` with each run of one line repeated back to back shown once, then its
    count."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        j = i + 1
        while j < len(lines) and lines[j] == lines[i]:
            j += 1
        out.append(lines[i] if j - i == 1 else f"{lines[i]} … ({TIMES}{j - i})")
        i = j
    return out


def _tail_start(lines: Sequence[str], tail: int) -> int:
    """Where the last ``tail`` runs of ``lines`` begin (a run: one line repeated back to
    back, shown once)."""
    start, runs = len(lines), 0
    while start > 0 and runs < tail:
        start -= 1
        while start > 0 and lines[start - 1] == lines[start]:
            start -= 1
        runs += 1
    return start


def excerpt(lines: Sequence[str], tail: int = TAIL) -> Excerpt:
    """The first error block of ``lines`` and their last ``tail`` lines (repeats counted
    once), none twice."""
    found = error_block(lines)
    tail_start = _tail_start(lines, tail)
    if found is None or found[0] >= tail_start:  # none, or the tail shows it
        return Excerpt(tail=tuple(lines[tail_start:]), tail_start=tail_start + 1)
    start, end = found
    units = _units(lines, start, end)  # what follows the block
    shown = units[_tail_start([text for _, text in units], tail) :]
    block = list(lines[start:end])
    if len(block) > MAX_BLOCK:
        head = 3
        keep = MAX_BLOCK - head - 1
        block = [*block[:head], f"… ({len(block) - head - keep} lines)", *block[-keep:]]
    return Excerpt(
        block=tuple(block),
        block_start=start + 1,
        tail=tuple(text for _, text in shown),
        tail_start=shown[0][0] + 1 if shown else 0,
    )


def _units(lines: Sequence[str], start: int, end: int) -> list[tuple[int, str]]:
    """The lines after the block ``lines[start:end]`` as ``(index, line)``; where the block
    comes again (the same lines but for their numbers), back to back once or more, one
    line says so instead."""
    want = [_NUMBERS.sub("#", line) for line in lines[start:end]]
    seen = [_NUMBERS.sub("#", line) for line in lines[end:]]  # seen[i - end]: lines[i]

    def again(i: int) -> bool:
        return seen[i - end : i - end + len(want)] == want

    units: list[tuple[int, str]] = []
    i = end
    while i < len(lines):
        if not again(i):
            units.append((i, lines[i]))
            i += 1
            continue
        j, times = i, 0
        while j < len(lines) and again(j):
            j, times = j + len(want), times + 1
        count = f" {TIMES}{times}" if times > 1 else ""
        units.append((i, f"… the first error again{count} (lines {i + 1}-{j})"))
        i = j
    return units


def error_block(lines: Sequence[str]) -> tuple[int, int] | None:
    """``(start, end)`` (end exclusive) of the first error-looking block, or None."""
    for i, line in enumerate(lines):
        if _START.search(line):
            return i, _block_end(lines, i)
    return None


def _block_end(lines: Sequence[str], start: int) -> int:
    in_traceback = bool(_TRACEBACK.search(lines[start]))
    j = start + 1
    if _PANIC.match(lines[start]):
        while j < len(lines) and j - start < _SCAN and _GO_STACK.match(lines[j]):
            j += 1
        while j > start + 1 and not lines[j - 1].strip():
            j -= 1
        return j
    while j < len(lines) and j - start < _SCAN:
        line = lines[j]
        if _TRACEBACK.search(line):
            in_traceback = True
        elif in_traceback:
            if not _INDENTED.match(line):
                return j + 1  # the exception line ends the traceback
        elif not _INDENTED.match(line):
            return j
        j += 1
    return j
