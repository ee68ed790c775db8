"""Instruction counts under callgrind: run a command, limit collection to the region of
interest, parse callgrind.out files (totals, each function's self and inclusive
instructions), and record the toolchain that every figure depends on.

Counts, not clocks (docs/design.md, principle 7): the same binary, input and toolchain give
the same count whatever else the machine is doing. The parser reads callgrind's file
format itself (name compression, subposition compression, calls= lines) and does not
depend on callgrind_annotate's text layout.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import platform
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping, Sequence


class CallgrindError(RuntimeError):
    """valgrind is missing, the command failed under it, or its output is malformed."""


@dataclasses.dataclass
class FunctionCost:
    self_ir: int = 0  # instructions executed in the function's own code
    inclusive_ir: int = 0  # self plus everything it called
    calls: int = 0  # times it was called from collected code


@dataclasses.dataclass
class Profile:
    """One callgrind run: the collected total and per-function costs."""

    total: int
    functions: dict[str, FunctionCost]
    events: tuple[str, ...] = ("Ir",)


@functools.lru_cache(maxsize=None)
def valgrind_version() -> str:
    path = shutil.which("valgrind")
    if path is None:
        raise CallgrindError("valgrind is not installed (make install installs it)")
    return subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip()


def toolchain_key(cc: str = "gcc", flags: Sequence[str] = ()) -> dict[str, str]:
    """What an instruction count depends on besides the program and its input."""
    from exactc.runtime.toolchain import compiler_version

    return {
        "valgrind": valgrind_version(),
        "compiler": compiler_version(cc),
        "flags": " ".join(flags),
        "arch": platform.machine(),
    }


def run_callgrind(
    command: Sequence[str],
    *,
    toggle_collect: str | None = None,
    collect_at_start: bool | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    timeout: float = 600.0,
) -> Profile:
    """Run `command` under callgrind and parse its output.

    With `toggle_collect` (a function name or glob), only that function and what it
    calls is counted. Otherwise, if the program uses callgrind's client requests
    (CALLGRIND_START_INSTRUMENTATION / CALLGRIND_TOGGLE_COLLECT), pass
    collect_at_start=False so only the region between the requests counts.
    """
    args = []
    if toggle_collect:
        args += [f"--toggle-collect={toggle_collect}"]
        if collect_at_start is None:
            collect_at_start = False
    if collect_at_start is False:
        args.append("--collect-atstart=no")
    with tempfile.TemporaryDirectory(prefix="exactc-callgrind-") as tmp:
        out = _run(command, args, Path(tmp), env, cwd, timeout)
        return parse_callgrind(out.read_text())


def run_callgrind_parts(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    timeout: float = 600.0,
) -> list[tuple[str, Profile]]:
    """Run a program that marks its own regions under callgrind, instrumentation off at
    the start: each region is CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION ...
    CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(label). Returns (label,
    profile) per dump, in order. Code outside the regions runs uninstrumented (fast)."""
    with tempfile.TemporaryDirectory(prefix="exactc-callgrind-") as tmp:
        out = _run(command, ["--instr-atstart=no"], Path(tmp), env, cwd, timeout)
        parts = sorted(out.parent.glob(out.name + ".*"), key=lambda p: int(p.suffix[1:]))
        result = []
        for part in parts:
            text = part.read_text()
            label = re.search(r"^desc: Trigger: Client Request: ?(.*)$", text, re.M)
            result.append((label.group(1).strip() if label else part.suffix[1:], parse_callgrind(text)))
        return result


def _run(command: Sequence[str], args: list[str], tmp: Path, env, cwd, timeout: float) -> Path:
    """valgrind --tool=callgrind with `args`; the path of the (first) output file."""
    if shutil.which("valgrind") is None:
        raise CallgrindError("valgrind is not installed (make install installs it)")
    out = tmp / "callgrind.out"
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *args, *command],
        capture_output=True, text=True, timeout=timeout,
        env=dict(env) if env is not None else None, cwd=cwd,
    )
    if proc.returncode != 0:
        raise CallgrindError(
            f"command failed under callgrind (exit {proc.returncode}): "
            f"{' '.join(command)}\n{proc.stderr[-2000:]}"
        )
    return out


_NAME = re.compile(r"^\((\d+)\)(?:\s+(.*))?$")


def _resolve(table: dict[str, str], value: str) -> str:
    """callgrind's name compression: '(12) name' defines id 12, '(12)' refers to it."""
    value = value.strip()
    match = _NAME.match(value)
    if not match:
        return value
    key, name = match.groups()
    if name is not None:
        table[key] = name
        return name
    if key not in table:
        raise CallgrindError(f"callgrind.out refers to undefined name id ({key})")
    return table[key]


def parse_callgrind(text: str) -> Profile:
    """Parse a callgrind.out file (format version 1) into per-function costs.

    Self cost: the cost lines under `fn=`. Inclusive cost: self plus the cost line that
    follows each `calls=` line (the inclusive cost of that call). Only the first event
    (Ir) is read.
    """
    fn_names: dict[str, str] = {}
    functions: dict[str, FunctionCost] = collections.defaultdict(FunctionCost)
    events: tuple[str, ...] = ("Ir",)
    current: str | None = None
    pending_call: str | None = None
    total: int | None = None
    positions = 1
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("events:"):
            events = tuple(line.split(":", 1)[1].split())
            continue
        if line.startswith("positions:"):
            positions = len(line.split(":", 1)[1].split())
            continue
        if line.startswith(("summary:", "totals:")):
            total = int(line.split(":", 1)[1].split()[0])
            continue
        if line.startswith("fn="):
            current = _resolve(fn_names, line[3:])
            functions[current]  # a function with no cost line still exists
            continue
        if line.startswith(("cfn=", "cfni=")):
            pending_name = _resolve(fn_names, line.split("=", 1)[1])
            functions[pending_name]
            pending_call = pending_name
            continue
        if line.startswith("calls="):
            count = int(line[6:].split()[0])
            functions[pending_call or "???"].calls += count
            pending_call = f"\0call:{pending_call}"
            continue
        if "=" in line.split()[0] or ":" in line.split()[0]:
            continue  # fl=, fi=, fe=, ob=, cob=, cfi=, jump=, headers
        if line[0] in "0123456789+-*":
            fields = line.split()
            cost = int(fields[positions]) if len(fields) > positions else 0
            if current is None:
                raise CallgrindError("callgrind.out has a cost line before any fn=")
            if pending_call and pending_call.startswith("\0call:"):
                functions[current].inclusive_ir += cost  # the call's inclusive cost
                pending_call = None
            else:
                functions[current].self_ir += cost
                functions[current].inclusive_ir += cost
            continue
    summed = sum(c.self_ir for c in functions.values())
    if total is None:
        total = summed
    elif total != summed:
        raise CallgrindError(f"callgrind.out totals {total} but its cost lines sum to {summed}")
    return Profile(total=total, functions=dict(functions), events=events)
