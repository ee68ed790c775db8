"""The exported directory: a program, its weights, and the proof it gives the reference's bits.

    DIR/
      README.md            build, run, threads, what is guaranteed
      Makefile             STRICT flags apart from CFLAGS; OPENMP=0, CC=clang, CHECKING=1
      model.c              the host (structured, or straight-line with --straight-line)
      kernels.h, kernels/  one file per kernel, each nest one function
      exactc_rt.h, exactc_host.c, exactc_libm.c, exactc_npy.c, exactc_safetensors.c   the runtime
      weights.safetensors  the parameters at the site type (per-layer tensors, HF names)
      exactc.json          what was exported: model, entry, type, seed, config, figures
      .exactc-export       the mark of an export: the only kind of directory --force replaces
      conformance/         inputs/*.npy, expected/*.npy (the numpy reference), check.sh;
                           for a program that takes its length at run time, the same at
                           more lengths in lengths/T<n>/ (check.sh runs them all)

The directory is written beside its destination and renamed into place: an export never
leaves a half-written directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import struct
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from exactc.exporter import dims, graph, models, types

from exactc.exporter.reference import walk
from exactc.exporter.printer.host import PrintedProgram, print_program

from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS

# The runtime's files every exported directory carries; exactc_compare.c is the
# conformance comparer (conformance/compare), the others build into the program.
RUNTIME_FILES = ("exactc_rt.h", "exactc_libm.c", "exactc_npy.c", "exactc_safetensors.c", "exactc_host.c",
                 "exactc_keys.h", "exactc_keys.c", "exactc_sample.h", "exactc_sample.c", "exactc_generate.c",
                 "exactc_compare.c")


class ExportError(ValueError):
    """An export that cannot be made; nothing was written."""


# ---- .safetensors and .npy -----------------------------------------------------------------


def safetensors_bytes(tensors: Mapping[str, tuple[str, np.ndarray]]) -> bytes:
    """A .safetensors image of `tensors` (name -> (dtype tag, array)), names sorted, the
    header padded with spaces to a multiple of 8 bytes: the same bytes every time."""
    header: dict[str, Any] = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        tag, array = tensors[name]
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": tag, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def weight_tensors(program: graph.Program, params: Mapping[str, np.ndarray], site: str) -> dict[str, tuple[str, np.ndarray]]:
    """Each parameter as the checkpoint names it: stacked ones one tensor per layer; a
    quantized weight as its I8 or U8 values and its F32 scales (`<name>_scale`)."""
    out = {}
    for spec in program.params:
        tag = types.kind_storage(spec.kind, site).safetensors
        array = params[spec.name]
        if spec.layers:
            for layer in range(spec.layers):
                out[spec.layer_name(layer)] = (tag, array[layer])
        else:
            out[spec.name] = (tag, array)
    return out


def npy_value(array: np.ndarray) -> np.ndarray:
    """An array as the program's .npy files hold it: bf16 widened to f32 (exact)."""
    if array.dtype == types.BF16:
        return array.astype(np.float32)
    return array


def npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(npy_value(array)), allow_pickle=False)
    return buf.getvalue()


@dataclasses.dataclass(frozen=True)
class OutputTarget:
    """Where replace_file writes a path it is given, and how."""

    path: Path  # the file written: a symlink's target, else the path as given
    replaced: bool  # True: a temporary written beside it and renamed over it; False: written through
    descriptor: int | None = None  # the path names this process's open descriptor (/dev/stdout: 1)


# A name of an open descriptor, once its folders are resolved: /dev/stdout is a link to
# /proc/self/fd/1, /proc/self to /proc/PID, /dev/fd to /proc/self/fd.
_DESCRIPTOR_NAME = re.compile(r"/proc/(\d+)(?:/task/\d+)?/fd/(\d+)")


def output_target(path: str | os.PathLike) -> OutputTarget:
    """How replace_file writes `path`. A regular file, or nothing yet, is replaced whole
    (a temporary renamed over it). What is not a file is written through, never renamed
    over: a character device (a terminal, /dev/null, /dev/full), a FIFO, a name of an open
    descriptor (/dev/stdout, even when it is a file: the shell's redirection keeps
    writing to it). A symlink is followed, the link left as it is: its target is what
    is written, as a shell's `>` writes it. A directory or a block device is refused (an
    OSError, nothing written)."""
    here = Path(path).absolute()
    for _ in range(40):  # the kernel's own bound on links followed
        here = Path(os.path.realpath(here.parent)) / here.name  # the folders' links resolved
        named = _DESCRIPTOR_NAME.fullmatch(str(here))
        if named:
            own = int(named[1]) == os.getpid()
            return OutputTarget(Path(path), False, int(named[2]) if own else None)
        try:
            link = os.readlink(here)
        except OSError:  # not a link (EINVAL), or nothing there (ENOENT): the end of the chain
            break
        here = here.parent / link  # a relative link names a path in its own folder
    else:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    try:
        mode = os.stat(here).st_mode
    except FileNotFoundError:
        return OutputTarget(here, True)
    if stat.S_ISREG(mode):
        return OutputTarget(here, True)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return OutputTarget(here, False)
    raise OSError(errno.EINVAL, "a block device or a socket: give a file, a character device or a FIFO")


def replace_file(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` as output_target says: a file is written to a temporary name
    beside it and renamed into place, so that a reader never sees a half-written file
    and a failed or interrupted write leaves none (an OSError propagates, the temporary
    removed); a device, a FIFO or a descriptor is written through."""
    target = output_target(path)
    if not target.replaced:
        _write_through(target, data)
        return
    path = target.path
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.partial-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        with signals_held():
            Path(temporary).unlink(missing_ok=True)
        raise


def _write_through(target: OutputTarget, data: bytes) -> None:
    """Write `data` to a device, a FIFO or a descriptor as it is (a FIFO's open waits for
    its reader, as a shell's redirection does); a write error (ENOSPC from /dev/full,
    EPIPE) propagates as an OSError."""
    # What this process printed comes first: /dev/stdout may be the same pipe or file.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    # This process's own descriptor is written where it stands: opened again by its name,
    # a file would be written from its start, over what the process printed before.
    fd = target.descriptor if target.descriptor is not None else os.open(target.path, os.O_WRONLY)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        if target.descriptor is None:
            os.close(fd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---- the export -----------------------------------------------------------------------------


@dataclasses.dataclass
class Export:
    program: graph.Program
    site: str
    seed: int
    printed: PrintedProgram
    params: dict[str, np.ndarray]
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    straight: bool
    planned: bool = False
    checkpoint: Any = None  # the checkpoints.Checkpoint the parameters come from (None: drawn from seed)
    # more conformance cases: run-time length -> (inputs, expected), for lengths below T_max
    lengths: dict[int, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = dataclasses.field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        p = self.program
        return {
            "model": p.model,
            "entry": p.entry,
            "dtype": self.site,
            "seed": self.seed,
            "checkpoint": None if self.checkpoint is None else {
                "path": str(self.checkpoint.path), "format": self.checkpoint.format, "name": self.checkpoint.name},
            "host": "straight-line" if self.straight else "structured",
            "planned": self.planned,
            "config": dataclasses.asdict(p.config) if p.config is not None else None,
            "weights": quantized_weights(p),
            "inputs": {s.name: {"shape": json_shape(s.shape), "kind": s.kind} for s in p.inputs},
            "outputs": {n: {"shape": json_shape(v.shape), "kind": v.kind}
                        for n, v in zip(p.output_names, p.function.outputs)},
            "parameters": p.parameter_count(),
            "max_length": p.max_length,
            "conformance_lengths": sorted({*self.lengths, graph.run_length(p, self.inputs)} - {0}),
            "arena_peak": self.printed.arena_peak,
            "structured_arena_peak": self.printed.structured_peak,
            "straight_line_arena_peak": self.printed.straight_peak,
            "kernels": self.printed.kernels,
            "nests": self.printed.nests,
            "launches": self.printed.launches,
        }


def json_shape(shape) -> list:
    """A shape for exactc.json: ints, and a dimension that follows the run-time length as
    its text (`"T"`, `"T - 1"`)."""
    return [d.text() if dims.is_symbolic(d) else d for d in shape]


def quantized_weights(program: graph.Program) -> dict[str, Any] | None:
    """What `--weights` made of the program's linear weights, for exactc.json: None, or
    their format, block and count."""
    if not program.quantized:
        return None
    ((fmt, block),) = set(program.quantized.values())
    return {"format": fmt, "block": block, "tensors": sorted(program.quantized)}


def build_program(model: str, entry: str, site: str, seed: int, overrides: Mapping[str, Any] | None,
                  checkpoint: Any, weights: tuple[str, int] | None) -> tuple[graph.Program, dict[str, np.ndarray]]:
    """The traced program and its parameters, drawn from `seed` or read from `checkpoint`
    (checked against the config before anything runs). `weights` = (fmt, block) holds
    every linear weight quantized (graph.linear_weights): the program is traced again
    with them quantized, and their reals quantized by exactc.exporter.quant."""
    overrides, weights = checkpoint_request(checkpoint, entry, overrides, weights)
    program = models.build(model, entry, overrides)
    at = site if weights is None else "f64"  # quantized: the reals, each rounded where it goes
    params = checkpoint.parameters(program, at) if checkpoint is not None else models.draw_parameters(program, seed, at)
    if weights is None:
        return program, params
    from exactc.exporter import quant

    program = with_weights(program, model, entry, overrides, weights)
    try:
        given = checkpoint.quantized_weights(program) if checkpoint is not None else {}
        return program, quant.quantize_parameters(program, params, site, given)
    except quant.QuantError as exc:
        raise ExportError(str(exc)) from None


def checkpoint_request(checkpoint: Any, entry: str, overrides: Mapping[str, Any] | None,
                       weights: tuple[str, int] | None) -> tuple[Mapping[str, Any] | None, tuple[str, int] | None]:
    """The config overrides and the weights' (fmt, block) an export of `entry` takes: the
    request's, or, with a checkpoint (checked to have the entry), its config (the request
    may set `tokens` only) and, for a quantized file, its own blocks (another --weights is
    refused)."""
    if checkpoint is None:
        return overrides, weights
    checkpoint.check_entry(entry)
    overrides = checkpoint.overrides(overrides)
    if checkpoint.weights is not None:  # a quantized file: its own blocks
        if weights is not None and tuple(weights) != checkpoint.weights:
            raise ExportError(f"--weights {weights[0]} --block {weights[1]}: {checkpoint.path.name} holds its "
                              f"weights as {checkpoint.weights[0]} in blocks of {checkpoint.weights[1]}; exactc "
                              "exports them as they are (leave --weights out)")
        weights = checkpoint.weights
    return overrides, weights


def trace(model: str, entry: str, overrides: Mapping[str, Any] | None, weights: tuple[str, int] | None) -> graph.Program:
    """The traced program, its linear weights quantized when `weights` = (fmt, block) is
    given (with_weights)."""
    return with_weights(models.build(model, entry, overrides), model, entry, overrides, weights)


def with_weights(program: graph.Program, model: str, entry: str, overrides: Mapping[str, Any] | None,
                 weights: tuple[str, int] | None) -> graph.Program:
    """`program`, the float trace, traced again with the linear weights it chooses
    (graph.linear_weights) quantized as `weights` = (fmt, block); itself for None."""
    if weights is None:
        return program
    from exactc.exporter import quant

    fmt, block = weights
    try:
        quant.check_block(fmt, block)
    except quant.QuantError as exc:
        raise ExportError(f"--weights {fmt} --block {block}: {exc}") from None
    chosen = graph.linear_weights(program)
    return models.build(model, entry, overrides, quantized={name: (fmt, block) for name in chosen})


def prepare(model: str, entry: str, site: str, seed: int = 0, overrides: Mapping[str, Any] | None = None,
            plan: Any = None, straight: bool = False, inputs: Mapping[str, np.ndarray] | None = None,
            checkpoint: Any = None, weights: tuple[str, int] | None = None) -> Export:
    """Trace, draw (or read `checkpoint`'s parameters: a checkpoints.Checkpoint, checked
    against the config before anything runs), print and run the reference: everything
    an export writes. With a checkpoint, `overrides` may set `tokens` only. `weights`
    (fmt, block) quantizes the linear weights (build_program)."""
    types.check_site(site)
    program, params = build_program(model, entry, site, seed, overrides, checkpoint, weights)
    ins = dict(inputs) if inputs is not None else models.draw_inputs(program, seed)
    ins = check_inputs(program, site, ins)
    printed = print_program(program, site, plan=plan, straight=straight)
    expected = walk.evaluate(program, site, params, ins)
    lengths = {}
    for length in conformance_lengths(program.max_length):
        if length != graph.run_length(program, ins):
            at = check_inputs(program, site, models.draw_inputs(program, seed, length))
            lengths[length] = (at, walk.evaluate(program, site, params, at))
    return Export(program, site, seed, printed, params, ins, expected, straight, plan is not None, checkpoint,
                  lengths)


CONFORMANCE_LENGTHS = (1, 2, 7)  # besides T_max: the shortest, an even and an odd one


def conformance_lengths(top: int | None) -> list[int]:
    """The run-time lengths conformance/ holds for a program of T_max `top`: 1, 2, 7 and
    T_max (those that are at most T_max); none for a program without a run-time length."""
    if not top:
        return []
    return sorted({n for n in CONFORMANCE_LENGTHS if n <= top} | {top})


def sources_digest() -> str:
    """exactc's own sources that shape an exported directory (the exporter and the
    runtime): part of every cache key of exports."""
    import exactc

    root = Path(exactc.__file__).resolve().parent
    h = hashlib.sha256(exactc.__version__.encode())
    for path in sorted([*(root / "exporter").rglob("*.py"), *(root / "runtime").glob("*.[ch]")]):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


@dataclasses.dataclass
class ExportSpec:
    """What an export is made from: enough to make it again (prepare), and to name it in
    a cache (digest). `plan` is a --plan option: None or `none`, `auto`, or a file."""

    model: str
    entry: str
    site: str
    seed: int = 0
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    plan: str | None = None
    straight: bool = False
    checkpoint: Any = None  # a checkpoints.Checkpoint
    inputs: Mapping[str, np.ndarray] | None = None
    weights: tuple[str, int] | None = None  # (fmt, block): the linear weights quantized

    def loaded_plan(self) -> Any:
        from exactc.exporter.kernels.plans import load_plan_option

        return load_plan_option(self.plan)

    def prepare(self) -> Export:
        return prepare(self.model, self.entry, self.site, self.seed, self.overrides, plan=self.loaded_plan(),
                       straight=self.straight, inputs=self.inputs, checkpoint=self.checkpoint, weights=self.weights)

    def digest(self) -> str:
        """Everything the exported directory depends on: exactc's sources, the request,
        the plan's content, the checkpoint's and the inputs' bytes."""
        from exactc.exporter.kernels.plans import plan_text

        h = hashlib.sha256(sources_digest().encode())
        request = {"model": self.model, "entry": self.entry, "site": self.site, "seed": self.seed,
                   "overrides": {str(k): str(v) for k, v in self.overrides.items()},
                   "plan": plan_text(self.loaded_plan()), "straight": self.straight,
                   "checkpoint": None if self.checkpoint is None else self.checkpoint.digest()}
        if self.weights is not None:
            request["weights"] = list(self.weights)
        h.update(json.dumps(request, sort_keys=True).encode())
        for name in sorted(self.inputs or {}):
            array = np.ascontiguousarray(self.inputs[name])
            h.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode() + array.tobytes())
        return h.hexdigest()[:24]


def check_inputs(program: graph.Program, site: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The entry's inputs at their types: int32 as given; floats rounded to the site
    (bf16 given as f32 is rounded as the program rounds it)."""
    out = {}
    missing = [spec.name for spec in program.inputs if spec.name not in inputs]
    if missing:
        raise ExportError(f"{program.model}.{program.entry}: input {missing[0]} is missing")
    try:
        length = graph.run_length(program, inputs)
    except graph.GraphError as e:
        raise ExportError(str(e)) from None
    for spec in program.inputs:
        array = np.asarray(inputs[spec.name])
        want = dims.shape_at(spec.shape, length)
        if tuple(array.shape) != want:
            raise ExportError(f"input {spec.name} has shape {array.shape}; the program takes {want}"
                              + (f" at length {length}" if length else ""))
        if spec.kind == "i32":
            if array.dtype != np.int32:
                raise ExportError(f"input {spec.name} is {array.dtype}; it must be int32")
            out[spec.name] = array
        else:
            out[spec.name] = types.round_to_site(array, site)  # bf16 through f32, as the program reads it
    extra = sorted(set(inputs) - {s.name for s in program.inputs})
    if extra:
        raise ExportError(f"{program.model}.{program.entry} takes no input named {', '.join(extra)}")
    return out


# Every exported directory carries this file; `--force` replaces a directory only if it
# has it, so that a mistyped -o never removes a directory exactc did not write.
MARKER = ".exactc-export"
MARKER_TEXT = "Written by `exactc export`: `exactc export --force` may replace this directory.\n"


def check_target(target: str | os.PathLike, force: bool = False) -> Path:
    """The absolute directory `target` names, if an export may be written there: a new
    path, or with `force` a directory an export wrote (its MARKER file), never the
    current directory or one that holds it; else an ExportError that says why."""
    if not os.fspath(target).strip():
        raise ExportError("-o '': give the name of the directory to write")
    try:
        here = Path.cwd().resolve()
    except FileNotFoundError:  # the directory the command runs in was removed under it
        if not Path(target).is_absolute():
            raise ExportError(f"-o {os.fspath(target)}: the current directory no longer exists, so a relative path "
                              "names nothing; give an absolute one") from None
        here = None
    path = Path(target).resolve()
    if here is not None and (path == here or path in here.parents):
        raise ExportError(f"{path} is the current directory or holds it; an export is written to a directory of "
                          "its own")
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ExportError(f"cannot write {path}: {existing} is not a directory")
    if path.exists() or path.is_symlink():
        if not force:
            raise ExportError(f"{path} exists; choose another directory or pass --force")
        if not path.is_dir():
            raise ExportError(f"{path} is not a directory; --force replaces only a directory exactc export wrote")
        if not (path / MARKER).is_file():
            raise ExportError(f"{path} was not written by exactc export (it has no {MARKER} file): --force replaces "
                              "only such a directory; remove it yourself or choose another")
    return path


def write(export: Export, target: str | os.PathLike, force: bool = False) -> Path:
    """Write the directory beside `target`, then rename it into place. `force` replaces
    a directory an earlier export wrote, and nothing else (check_target)."""
    target = check_target(target, force)
    work = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with signals_held():
            work = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        os.chmod(work, 0o777 & ~_umask())  # mkdtemp's 0700 is for a temporary, not for an export
        _fill(export, work)
        with signals_held():  # the swap runs to its end; a signal lands after it
            _swap(work, target)
    except BaseException as exc:  # an error, Ctrl-C or SIGTERM (cli.py raises it): no partial directory left
        with signals_held():
            if work is not None:
                shutil.rmtree(work, ignore_errors=True)
        if isinstance(exc, OSError):  # a folder that cannot be made, a full disk: the user's to fix
            where = f" ({exc.filename})" if exc.filename and ".partial-" not in str(exc.filename) else ""
            raise ExportError(f"cannot write {target}: {exc.strerror or exc}{where}") from None
        raise
    return target


def _swap(work: Path, target: Path) -> None:
    """Rename `work` to `target`, replacing an earlier export there (put back if the
    rename fails)."""
    if not target.exists():
        os.replace(work, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    try:
        os.replace(target, old / "dir")
        try:
            os.replace(work, target)
        except BaseException:
            os.replace(old / "dir", target)
            raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back until the block ends (then raised again): for renames
    and clean-ups that must not stop halfway. Python handlers that only take note, not a
    blocked signal mask: the kernel may hand a process's signal to any of its threads
    (numpy's among them), and Python then runs the handler in the main thread at once.
    Outside the main thread, where handlers cannot be set, nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {number: signal.signal(number, lambda number, frame: caught.append(number))
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        for number in dict.fromkeys(caught):
            signal.raise_signal(number)


def _fill(export: Export, root: Path) -> None:
    for name, text in export.printed.files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for name in RUNTIME_FILES:
        shutil.copyfile(RUNTIME_DIR / name, root / name)
    (root / "weights.safetensors").write_bytes(
        safetensors_bytes(weight_tensors(export.program, export.params, export.site)))
    conf = root / "conformance"
    (conf / "inputs").mkdir(parents=True)
    (conf / "expected").mkdir()
    for name, array in export.inputs.items():
        (conf / "inputs" / f"{name}.npy").write_bytes(npy_bytes(array))
    for name, array in export.expected.items():
        (conf / "expected" / f"{name}.npy").write_bytes(npy_bytes(array))
    for length, (inputs, expected) in sorted(export.lengths.items()):
        for part, arrays in (("inputs", inputs), ("expected", expected)):
            folder = conf / "lengths" / f"T{length}" / part
            folder.mkdir(parents=True)
            for name, array in arrays.items():
                (folder / f"{name}.npy").write_bytes(npy_bytes(array))
    check = conf / "check.sh"
    check.write_text(CHECK_SH.replace("@SITE@", export.site))
    check.chmod(0o755)
    (root / "Makefile").write_text(MAKEFILE)
    manifest = export.manifest()
    (root / "exactc.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (root / "README.md").write_text(readme(manifest))
    (root / MARKER).write_text(MARKER_TEXT)


CHECK_SH = """\
#!/bin/sh
# Conformance: run the program on conformance/inputs and compare each output with the
# numpy reference's (conformance/expected) by exactc's rule (docs/semantics.md): every
# bit, except that any f64 or f32 NaN equals any other; bf16 values on every bit.
# conformance/compare (built by make) applies it and, for an output that differs, prints
# the first differing index, both values in hex and how many elements differ.
# Usage: conformance/check.sh [PROGRAM]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
program=${1:-$here/../model}
compare=$here/compare
site=@SITE@
if [ ! -x "$compare" ]; then
    echo "check.sh: $compare is not built: run make in $(dirname "$here")" >&2
    exit 2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The main case (conformance/inputs), then one per run-time length in lengths/T<n>/:
# one process runs them all, the weights loaded once.
set -- "$here/inputs" "$out/main"
mkdir "$out/main"
for case in "$here"/lengths/T*; do
    [ -d "$case" ] || continue
    mkdir "$out/$(basename "$case")"
    set -- "$@" "$case/inputs" "$out/$(basename "$case")"
done
"$program" "$here/../weights.safetensors" "$@"
status=0
compare_case() {  # expected folder, output folder, label
    for expected in "$1"/*.npy; do
        name=$(basename "$expected")
        if "$compare" --site "$site" "$expected" "$2/$name"; then
            echo "ok       $3$name"
        else
            status=1
        fi
    done
}
compare_case "$here/expected" "$out/main" ""
for case in "$here"/lengths/T*; do
    [ -d "$case" ] || continue
    compare_case "$case/expected" "$out/$(basename "$case")" "$(basename "$case")/"
done
exit $status
"""

# The flags that let gcc or clang change a floating-point value, from the floating-point
# sections of their manuals (gcc: Optimize Options and x86 Options; clang: Controlling
# Floating-Point Behavior). The exported Makefile refuses each (its UNSAFE line; `%` is
# make's wildcard). Allowed, since they only make the compiler more careful or touch no
# value: -frounding-math, -fsignaling-nans, -ffloat-store, -fno-math-errno,
# -fno-trapping-math, -ffp-exception-behavior=..., -fexcess-precision=standard.
VALUE_CHANGING_FLAGS = (
    # whole modes
    "-ffast-math", "-Ofast", "-ffp-model=%",
    # their parts: reassociation, reciprocals, no NaN, infinity or signed zero, approximate functions
    "-funsafe-math-optimizations", "-fassociative-math", "-freciprocal-math", "-fno-signed-zeros",
    "-ffinite-math-only", "-fno-honor-nans", "-fno-honor-infinities", "-fapprox-func",
    # contraction into fused multiply-adds (one rounding where the spec has two)
    "-ffp-contract=fast", "-ffp-contract=on", "-ffp-contract=fast-honor-pragmas",
    # constants and intermediates at another precision
    "-fsingle-precision-constant", "-fexcess-precision=fast", "-fexcess-precision=16",
    "-ffp-eval-method=double", "-ffp-eval-method=extended",
    "-mfpmath=387", "-mfpmath=387+sse", "-mfpmath=sse+387", "-mfpmath=both",
    # subnormals flushed to zero
    "-mdaz-ftz", "-fdenormal-fp-math=preserve-sign", "-fdenormal-fp-math=positive-zero",
    "-fdenormal-fp-math=dynamic", "-fdenormal-fp-math-f32=preserve-sign",
    "-fdenormal-fp-math-f32=positive-zero", "-fdenormal-fp-math-f32=dynamic",
    # approximate reciprocals and square roots
    "-mrecip", "-mrecip=%",
    # complex arithmetic without the C rules
    "-fcx-limited-range", "-fcx-fortran-rules", "-fcomplex-arithmetic=basic",
    "-fcomplex-arithmetic=improved", "-fcomplex-arithmetic=promoted",
)

MAKEFILE = """\
# Build the exported program.
#   make                 with OpenMP (-fopenmp), for this machine's CPU (-march=native)
#   make OPENMP=0        without
#   make CC=clang        any C11 compiler
#   make CHECKING=1      the checking build (model-checking): NaN-filled arena, bounds
#                        checked, the arena peak reached reported on stderr, and with
#                        EXACTC_TRACE_DIR set, each layer's output written there
#   make check           build, then conformance/check.sh
#   make -j              compile the sources in parallel
#
# Each source compiles to an object in build/<n>/, n a checksum of the compile line: a
# build with other flags, another compiler or OPENMP=0 gets its own folder, so an
# object is never reused under flags it was not compiled with, and switching back and
# forth compiles nothing twice.
# STRICT holds the flags bit identity rests on: never change them (`make STRICT=...` is
# ignored). CFLAGS is yours (-O3, -march=..., ...): any value gives the same bits.
# STRICT comes last on every compiler line, so that no flag before it overrides it, and
# a flag that lets the compiler change values (fast-math and its parts, contraction into
# FMAs) is refused with a message, whichever variable brings it. The default builds for
# this machine's CPU (-march=native, where the compiler accepts it): the vector
# instructions it has, the same bits; `make CFLAGS=-O2` builds a program for any CPU of
# the architecture.
override STRICT := @STRICT@
NATIVE  := $(shell $(CC) $(STRICT) -march=native -x c -c -o /dev/null /dev/null 2>/dev/null && echo -march=native)
# With AVX-512, gcc and clang still prefer 256-bit vectors under -march=native; the laned
# kernels run faster in 512-bit ones (a lane chunk of 16 floats is one register).
WIDE    := $(if $(NATIVE),$(shell $(CC) $(STRICT) -march=native -dM -E -x c /dev/null 2>/dev/null | grep -q __AVX512F__ && \
             $(CC) $(STRICT) -mprefer-vector-width=512 -x c -c -o /dev/null /dev/null 2>/dev/null && echo -mprefer-vector-width=512))
CFLAGS  ?= -O2 $(NATIVE) $(WIDE)
WARN    ?= -Wall -Wextra
OPENMP  ?= 1
CHECKING ?= 0

ifeq ($(OPENMP),1)
OMPFLAGS := -fopenmp
endif
ifeq ($(CHECKING),1)
PROGRAM := model-checking
DEFINES := -DEXACTC_CHECKING
else
PROGRAM := model
endif

# The flags that let the compiler change a value (gcc's and clang's manuals, their
# floating-point options; exactc/exporter/export.py's VALUE_CHANGING_FLAGS says why each):
# refused whichever variable brings them.
UNSAFE  := @UNSAFE@
REFUSED := $(filter $(UNSAFE),$(CC) $(CFLAGS) $(WARN) $(OMPFLAGS) $(DEFINES))
ifneq ($(REFUSED),)
$(error $(REFUSED) would change the program's bits; exactc's outputs rest on STRICT ($(STRICT)): build without it)
endif

SOURCES := model.c exactc_host.c exactc_libm.c exactc_npy.c exactc_safetensors.c exactc_keys.c exactc_sample.c \\
           exactc_generate.c $(sort $(wildcard kernels/*.c))
HEADERS := exactc_rt.h exactc_keys.h exactc_sample.h kernels.h
COMPARE := conformance/compare
COMPARE_SOURCES := exactc_compare.c exactc_npy.c

# The compile lines, and the object folders named by their checksums.
COMPILE := $(CC) $(CFLAGS) $(WARN) $(OMPFLAGS) $(DEFINES) $(STRICT) -I.
COMPARE_COMPILE := $(CC) $(CFLAGS) $(WARN) $(STRICT) -I.
OBJ := build/$(firstword $(shell echo '$(COMPILE)' | cksum))
COMPARE_OBJ := build/$(firstword $(shell echo '$(COMPARE_COMPILE)' | cksum))
OBJECTS := $(SOURCES:%.c=$(OBJ)/%.o)
COMPARE_OBJECTS := $(COMPARE_SOURCES:%.c=$(COMPARE_OBJ)/%.o)

.PHONY: all check clean
all: $(PROGRAM) $(COMPARE)

$(PROGRAM): $(OBJECTS)
\t$(CC) $(CFLAGS) $(OMPFLAGS) -o $@ $(OBJECTS) -lm

$(OBJ)/%.o: %.c $(HEADERS)
\t@mkdir -p $(@D)
\t$(COMPILE) -c -o $@ $<

# The conformance comparer: the spec's comparison, for check.sh (no Python needed).
$(COMPARE): $(COMPARE_OBJECTS)
\t$(CC) $(CFLAGS) -o $@ $(COMPARE_OBJECTS) -lm

ifneq ($(COMPARE_OBJ),$(OBJ))
$(COMPARE_OBJ)/%.o: %.c exactc_rt.h
\t@mkdir -p $(@D)
\t$(COMPARE_COMPILE) -c -o $@ $<
endif

check: $(PROGRAM) $(COMPARE)
\t./conformance/check.sh ./$(PROGRAM)

clean:
\trm -rf model model-checking $(COMPARE) build
""".replace("@STRICT@", " ".join(STRICT_FLAGS)).replace("@UNSAFE@", " \\\n           ".join(
    " ".join(VALUE_CHANGING_FLAGS[i:i + 5]) for i in range(0, len(VALUE_CHANGING_FLAGS), 5)))


def readme(m: Mapping[str, Any]) -> str:
    ins = "\n".join(f"| `{k}` | input | {tuple(v['shape'])} | {_dtype_doc(v['kind'], m['dtype'], True)} |"
                    for k, v in m["inputs"].items())
    outs = "\n".join(f"| `{k}` | output | {tuple(v['shape'])} | {_dtype_doc(v['kind'], m['dtype'], False)} |"
                     for k, v in m["outputs"].items())
    config = ", ".join(f"{k}={v}" for k, v in (m["config"] or {}).items())
    ckpt = m.get("checkpoint")
    origin = (f"parameters from the checkpoint `{ckpt['name']}` ({ckpt['format']}), inputs drawn from seed "
              f"{m['seed']}" if ckpt else f"parameters drawn from seed {m['seed']}")
    if m.get("planned"):
        threads = ("This export follows a plan: the nests it splits run their pieces on an\nOpenMP "
                   "team (one after another without OpenMP); the others run on the calling thread.")
    else:
        threads = ("This export runs each nest over its whole range on the calling thread; a\nplan "
                   "(`exactc export --plan`) splits them.")
    return f"""\
# {m['model']} `{m['entry']}` at {m['dtype']}, exported by exactc

A standalone C11 program: no Python, no BLAS, no platform libm in its results. Its
outputs are the bit-for-bit twins of exactc's numpy reference for the same weights and
inputs, on any number of threads, built with gcc or clang, at any optimization level,
with or without OpenMP.

- model: `{m['model']}` ({config}), entry `{m['entry']}`, site type `{m['dtype']}`,
  {origin} ({m['parameters']} values)
- host: {m['host']}; {m['kernels']} kernels, {m['nests']} nest functions, {m['launches']} launches per run
- arena: {m['arena_peak']} bytes (the peak computed from the host's structure; the
  straight-line host would need {m['straight_line_arena_peak']})

## Build

    make                # gcc or cc, with OpenMP, for this machine's CPU (-O2 -march=native)
    make OPENMP=0       # without OpenMP
    make CC=clang
    make CFLAGS=-O2     # for any CPU of the architecture (x86-64: SSE2 only, slower)

The Makefile keeps the flags bit identity rests on (`STRICT`: `{" ".join(STRICT_FLAGS)}`)
apart from `CFLAGS` and puts them last on every compiler line, so no other flag
overrides them; the default `CFLAGS` adds `-march=native` where the compiler accepts it
(and `-mprefer-vector-width=512` on a CPU with AVX-512): the same bits, the vector
instructions of the CPU at hand. It refuses, with a message, a
flag that lets the compiler change values (`-ffast-math`, `-Ofast`,
`-funsafe-math-optimizations`, `-fassociative-math`, `-ffp-contract=fast` and the like),
and the kernels refuse a target whose `FLT_EVAL_METHOD` is not 0.

## Run

    ./model weights.safetensors INPUT_DIR OUTPUT_DIR [INPUT_DIR OUTPUT_DIR ...]

reads `INPUT_DIR/<name>.npy` for each input and writes `OUTPUT_DIR/<name>.npy` for each
output; more pairs run the network once each with the weights loaded once:

| name | | shape | .npy dtype |
|---|---|---|---|
{ins}
{outs}

bf16 values travel through .npy as f32: a bf16 output is written widened to f32 (exact,
so the bytes still compare); a bf16 input is read as f32 and rounded to bf16 (nearest,
ties to even) as the reference rounds it. A missing or mis-shaped input or tensor is
refused with a message naming it, and the exit status is non-zero.

`EXACTC_REPEAT=N ./model ...` runs the network N times and prints the time per run.

## Threads

`OMP_NUM_THREADS` sets the thread count of an OpenMP build, `OMP_WAIT_POLICY=passive`
keeps idle threads from spinning. The outputs do not depend on either: a thread split
divides a loop into pieces that write disjoint elements, and every reduction runs in
index order in its accumulator type (docs/semantics.md in exactc). {threads}

## Check

    make check          # or: conformance/check.sh [PROGRAM]

runs the program on `conformance/inputs` and compares every output with
`conformance/expected`, written by the numpy reference: every bit, except that any f64
or f32 NaN equals any other (their payload and sign are not specified); bf16 values on
every bit. `conformance/compare` (built by `make`) does the comparing and, for an output
that differs, prints its first differing index, both values in hex and decimal, and how
many elements differ. `make CHECKING=1`
builds `model-checking`: its arena is filled with NaN before the run and every buffer
again when it is released, allocations are bounds-checked, and it prints the arena peak
it reaches, which equals the computed one.

## What is guaranteed

Every bit of every output equals the reference's (docs/semantics.md in exactc defines
each primitive's rounded operations), except the payload and sign of an f64/f32 NaN.
That holds for any `CFLAGS`, compiler, thread count and OpenMP setting, given the
`STRICT` flags, IEEE binary32/binary64 arithmetic and `FLT_EVAL_METHOD == 0`.
"""


def _dtype_doc(kind: str, site: str, is_input: bool) -> str:
    if kind == "i32":
        return f"int32 (`{types.STORAGE['i32'].npy}`)"
    text = f"{'f32' if site == 'bf16' else site} (`{types.storage(site).npy}`)"
    if site == "bf16":
        text += ", rounded to bf16" if is_input else ", bf16 values widened"
    return text
