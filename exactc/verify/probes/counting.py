"""Counting instructions: exported programs, kernels alone and Python regions under
callgrind (docs/design.md, principle 7), with the toolchain key every count depends on."""

from __future__ import annotations

import dataclasses
import platform
import re
import tempfile
from pathlib import Path
from typing import Sequence

from exactc.programs import Build
from exactc.verify.callgrind import Profile, run_callgrind, toolchain_key

CC = "gcc"
# -DEXACTC_PROBE turns on the client requests the host prints around the entry's call in
# main (CALLGRIND_TOGGLE_COLLECT): callgrind, started with collection off, counts the
# network only. The code is compiled as `make OPENMP=0` compiles it for a user.
CFLAGS = "-O2 -DEXACTC_PROBE"
BUILD = Build(cc=CC, openmp=False, cflags=CFLAGS)
MAKE_ARGS = tuple(BUILD.make_args())


class ProbeError(RuntimeError):
    """A probe could not be measured (a build failed, valgrind is missing)."""


# ---- the toolchain key ------------------------------------------------------------------------


def probe_key() -> dict[str, str]:
    """What every count here depends on besides the program and its input."""
    key = toolchain_key(CC, [CFLAGS, "OPENMP=0"])
    libc, version = platform.libc_ver()
    key["libc"] = f"{libc} {version}".strip()
    return key


def key_text(key: dict[str, str]) -> str:
    return "; ".join(f"{k}: {key[k]}" for k in sorted(key))


# ---- exported programs under callgrind ----------------------------------------------------------


@dataclasses.dataclass
class Counted:
    """One exported program run under callgrind, collection limited to its entry."""

    profile: Profile
    entry: str  # the C function of the entry (`forward`)
    primitives: dict[str, str]  # a kernel's C function (linear_qkv) -> its primitive (linear)

    @property
    def entry_count(self) -> int:
        """Everything collected: the entry's call with what it calls."""
        return self.profile.total

    def kernels(self, primitives: Sequence[str]) -> int:
        """Inclusive counts of the kernels of these primitives (their nest functions,
        with the libm functions they call)."""
        return sum(
            c.inclusive_ir for name, c in self.profile.functions.items() if self.primitives.get(name) in primitives
        )


def export_program(workdir: Path, model: str, entry: str, site: str, overrides: dict, straight: bool = False):
    """Export into `workdir` (a folder of its own: tests patch its sources); the root and
    the entry's C function."""
    from exactc.exporter import export

    prepared = export.ExportSpec(model, entry, site, 0, overrides, straight=straight).prepare()
    name = f"{model}-{entry}-{site}-" + "-".join(f"{k}{v}" for k, v in sorted(overrides.items()))
    root = export.write(prepared, workdir / name, force=True)
    return root, prepared.program.function.name


def build_probe(root: Path) -> Path:
    """`make OPENMP=0 CFLAGS=...` in the exported directory (programs.py, cached)."""
    from exactc.programs import ProgramBuildError, make

    try:
        return make(root, BUILD).path
    except ProgramBuildError as error:
        raise ProbeError(str(error)) from None


def kernel_primitives(root: Path) -> dict[str, str]:
    """Each kernel function of kernels.h and its primitive: the declarations under a
    kernel's `/* linear_qkv: linear */` line."""
    out, primitive = {}, None
    for line in (root / "kernels.h").read_text().splitlines():
        head = re.match(r"/\* (\w+): (\w+) \*/$", line)
        if head:
            primitive = head.group(2)
            continue
        declared = re.match(r"(?:void|int) (\w+)\(", line)
        if declared and primitive:
            out[declared.group(1)] = primitive
    return out


def count_program(root: Path, entry: str, inputs: Path | None = None) -> Counted:
    """The counts of one run of the exported program at `root` on `inputs` (default: its
    conformance inputs)."""
    program = build_probe(root)
    with tempfile.TemporaryDirectory(prefix="exactc-probe-out-") as out:
        profile = run_callgrind(
            [str(program), str(root / "weights.safetensors"), str(inputs or root / "conformance" / "inputs"), out],
            collect_at_start=False,
        )
    if profile.total == 0:
        raise ProbeError(f"{root}: nothing collected around {entry} (is EXACTC_PROBE in CFLAGS {CFLAGS}?)")
    return Counted(profile, entry, kernel_primitives(root))


def count_export(workdir: Path, model: str, entry: str, site: str, overrides: dict) -> Counted:
    root, fn = export_program(workdir, model, entry, site, overrides)
    return count_program(root, fn)


# The exporter under callgrind: a tiny library whose two functions are the client requests.
_REGION_C = """\
#include <valgrind/callgrind.h>
/* exactc's probe region: instrumentation on from start to stop, then one dump. */
void exactc_probe_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void exactc_probe_stop(const char *label) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(label); }
"""


def region_library() -> Path:
    from exactc.verify.build import BuildOptions, compile_shared

    if not Path("/usr/include/valgrind/callgrind.h").exists():
        raise ProbeError("valgrind/callgrind.h is missing (Debian's valgrind package installs it)")
    return compile_shared(
        {"exactc_probe_region.c": _REGION_C}, BuildOptions(cc=CC, warnings=False, instrumentable=False)
    )


# ---- kernels alone: the quantized linear --------------------------------------------------------

_FILL = {  # how the driver fills an input buffer of each C type: a pattern, never NaN
    "float": "(float)(i % 7) * 0.25f - 0.5f",
    "double": "(double)(i % 7) * 0.25 - 0.5",
    "exactc_bf16": "(exactc_bf16)(0x3f00u + (unsigned)(i % 7))",
    "int8_t": "(int8_t)((i * 37) % 255 - 127)",
    "uint8_t": "(uint8_t)(i * 37)",
    "int32_t": "(int32_t)(i % 3)",
}


def kernel_driver(kernel, printed) -> str:
    """A main() for one printed kernel: its buffers allocated and filled, each launch
    called over its whole range, a checksum of the outputs printed (so that nothing is
    dead code). Callgrind counts the kernel's functions only (toggle-collect)."""
    lines = ["#include <stdio.h>", "#include <stdlib.h>", "", "int main(void)", "{"]
    for buf in kernel.buffers:
        lines.append(f"    {buf.ctype} *{buf.name} = calloc({buf.size}, sizeof *{buf.name});")
        if buf.role == "input":
            lines.append(f"    for (int64_t i = 0; i < {buf.size}; i++) {buf.name}[i] = {_FILL[buf.ctype]};")
    for name, item in zip(printed.functions, kernel.launches):
        lines.append(f"    {name}({', '.join(item.args)}, 0, {item.extent});")
    lines.append("    double sum = 0.0;")
    for buf in kernel.buffers:
        if buf.role == "output":
            lines.append(f"    for (int64_t i = 0; i < {buf.size}; i++) sum += (double){buf.name}[i];")
    lines += ['    printf("%g\\n", sum);', *(f"    free({b.name});" for b in kernel.buffers), "    return 0;", "}"]
    return "\n".join(lines) + "\n"


def count_kernel(kernel) -> int:
    """Callgrind's inclusive count of a kernel's functions, called once each from a
    driver built as `make OPENMP=0` builds a program (gcc, CFLAGS, the strict flags)."""
    from exactc.exporter.printer.kernels import print_kernel
    from exactc.verify.build import BuildOptions, compile_shared, runtime_source

    printed = print_kernel(kernel, "probe")  # functions probe, probe_tail (plans.function_name)
    sources = {
        "probe.c": printed.source + kernel_driver(kernel, printed),
        "exactc_libm.c": runtime_source("exactc_libm.c"),
    }
    program = compile_shared(
        sources, BuildOptions(cc=CC, opt="-O2", warnings=False, instrumentable=False), executable=True
    )
    profile = run_callgrind([str(program)], toggle_collect="probe*")
    if profile.total == 0:
        raise ProbeError(f"nothing collected in the kernel {kernel.primitive}'s functions probe*")
    return profile.total


def quantized_kernel(primitive: str, fmt: str, m: int, k: int, n: int, block: int):
    """The f32 kernel of a quantized primitive at these sizes (docs/semantics.md, section 15)."""
    from exactc.exporter.kernels import lower
    from exactc.exporter.primitives import block_count, quantized_row_length

    nb = block_count(k, block)
    if primitive == "quantize":
        return lower("quantize", "f32", {"x": (m, k)}, {"block": block})
    weights = {"wq": (n, quantized_row_length(fmt, k, block)), "wd": (n, nb)}
    activations = {"x": (m, k)} if primitive == "qlinear_w" else {"xq": (m, k), "xd": (m, nb)}
    return lower(primitive, "f32", {**activations, **weights}, {"fmt": fmt, "block": block})
