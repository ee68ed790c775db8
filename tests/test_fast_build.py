"""The default build is the fast build, and it changes no bit.

- The exported Makefile's default CFLAGS target the CPU at hand (-march=native, where the
  compiler accepts it), for gcc and clang.
- A planned export (laned linear layers, thread splits, gelu, softmax) built with the
  default and with plain `CFLAGS=-O2` (SSE2 only on x86-64) gives the reference's bytes
  in both builds, on 1 and 2 threads, with gcc and with clang: the conformance check is
  the proof that -march=native moves no bit under the STRICT flags.
- The laned linear keeps its accumulators in registers across the reduction, with gcc as
  with clang (the printed pack is read through a pointer; printer/planned.py, pack()).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from exactc.exporter import export
from exactc.exporter.kernels import lower
from exactc.exporter.kernels.autoplan import AutoPlan
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.plans import NestPlan, Plan, validate_plan
from exactc.exporter.printer.kernels import print_kernel
from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS
from exactc.runtime.toolchain import native_macros
from exactc.programs import Build, make

COMPILERS = ("gcc", "clang")
# Large enough that the laned linear's full chunks (8 rows by 16 outputs) run.
GPT = {"vocab": 64, "positions": 16, "dim": 32, "heads": 2, "layers": 1, "mlp": 64, "tokens": 16}
BERT = {"vocab": 64, "positions": 16, "dim": 32, "heads": 2, "layers": 1, "mlp": 64, "tokens": 16}


def accepts_native(cc: str) -> bool:
    return bool(native_macros(cc))


def has_avx512(cc: str) -> bool:
    """Does -march=native give this compiler AVX-512 (the CPU has it)?"""
    return "__AVX512F__" in native_macros(cc)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("fast")
    out = []
    for model, entry, overrides in (("gpt", "forward", GPT), ("bert", "embed", BERT)):
        prepared = export.prepare(model, entry, "f32", seed=5, overrides=overrides, plan=AutoPlan())
        out.append(export.write(prepared, root / f"{model}-{entry}"))
    return out


@pytest.mark.needs("clang")
@pytest.mark.parametrize("cc", COMPILERS)
def test_default_cflags_target_this_cpu(exports, cc):
    if not accepts_native(cc):
        pytest.skip(f"{cc} does not accept -march=native here")
    dry = subprocess.run(["make", "-n", "-C", str(exports[0]), f"CC={cc}"], capture_output=True, text=True, check=True)
    commands = [line for line in dry.stdout.splitlines() if line.startswith(cc)]
    compiles = [command for command in commands if " -c " in command]
    assert len(commands) - len(compiles) == 3, dry.stdout  # links: the program, the comparer, libmodel.so
    sources = [p for p in exports[0].rglob("*.c") if p.parent.name != "examples"]  # the example: `make example`
    assert len(compiles) == len(sources) + 1, dry.stdout  # and the comparer's exactc_npy.c
    wide = has_avx512(cc)  # the Makefile then prefers 512-bit vectors too
    for command in commands:
        assert "-march=native" in command.split(), command
        assert ("-mprefer-vector-width=512" in command.split()) == wide, command
    for command in compiles:
        for flag in STRICT_FLAGS:
            assert flag in command.split(), command


@pytest.mark.needs("clang", "libomp")
@pytest.mark.parametrize("cc", COMPILERS)
def test_native_and_portable_builds_give_the_reference_bytes(exports, cc):
    for root in exports:
        for cflags in (None, "-O2"):  # the default (-O2 -march=native), the portable build
            program = make(root, Build(cc=cc, cflags=cflags), refuse_warnings=True)
            for threads in (1, 2):
                done = program.check(threads)
                assert done.returncode == 0, (f"{program.make_line()}, {threads} thread(s):\n"
                                              f"{done.stdout}{done.stderr}")


# ---- the laned linear's accumulators ------------------------------------------------------------


def reduction_loop(assembly: str) -> list[str]:
    """The innermost loop (a label and the backward branch to it) with at least two
    vector multiplies: the laned reduction's step."""
    lines = assembly.splitlines()
    labels = {}
    for i, line in enumerate(lines):
        found = re.match(r"^(\.?L\w+):", line)
        if found:
            labels[found.group(1)] = i
    loops = []
    for j, line in enumerate(lines):
        branch = re.match(r"\s+j\w+\s+(\.?L\w+)", line)
        if branch and branch.group(1) in labels and labels[branch.group(1)] < j:
            loops.append(lines[labels[branch.group(1)]: j + 1])
    multiplying = [loop for loop in loops if sum(bool(re.search(r"\bv?mulps\b", x)) for x in loop) >= 2]
    assert multiplying, "no loop of vector multiplies: the lanes were not vectorized"
    return min(multiplying, key=len)


@pytest.mark.needs("clang")
@pytest.mark.parametrize("cc", COMPILERS)
def test_laned_accumulators_stay_in_registers(cc, tmp_path):
    """At -O2 -march=native (the default build), the reduction step of a laned linear with
    2 x 16 lanes adds into its accumulators without storing them back: fewer vector
    stores than half its vector adds (kept in memory, every add is followed by a store)."""
    if not accepts_native(cc):
        pytest.skip(f"{cc} does not accept -march=native here")
    kernel = lower("linear", "f32", {"x": (64, 96), "w": (128, 96)}, {})
    plan = Plan((("linear", NestPlan(Layout(order=("n", "m"), lanes=(("m", 2), ("n", 16)), packs=("w",)))),))
    validate_plan(kernel, plan)
    source = tmp_path / "kernel.c"
    source.write_text(print_kernel(kernel, "k", plan).source)
    done = subprocess.run([cc, *STRICT_FLAGS, "-O2", "-march=native", "-S", f"-I{RUNTIME_DIR}", str(source), "-o", "-"],
                          capture_output=True, text=True, check=True)
    loop = reduction_loop(done.stdout)
    adds = [x for x in loop if re.search(r"\bv?addps\b", x)]
    stores = [x for x in loop if re.match(r"\s+v?mov[au]ps\s+%[xyz]mm\d+, ", x)]
    assert 2 * len(stores) < len(adds), (f"{cc}: {len(stores)} vector stores for {len(adds)} vector adds in the "
                                         "reduction step: the accumulators live in memory\n" + "\n".join(loop))
