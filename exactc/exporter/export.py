"""The exported directory: a program, its weights, and the proof it gives the reference's bits.

    DIR/
      README.md            build, run, threads, what is guaranteed
      Makefile             STRICT flags apart from CFLAGS; OPENMP=0, CC=clang, CHECKING=1
      model.c              the host (structured, or straight-line with --straight-line)
      kernels.h, kernels/  one file per kernel, each nest one function
      exactc_rt.h, exactc_fma.h, exactc_dot.h, exactc_host.c, exactc_libm.c, exactc_npy.c, exactc_safetensors.c   the runtime
      model.h, exactc_api.c  the library's API (`make lib`: libmodel.a, libmodel.so)
      examples/run.c       a C program of the API (`make example`; check.sh runs it)
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

import dataclasses
import hashlib
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from exactc.exporter import dims, graph, models, types
from exactc.exporter.files import signals_held, umask
from exactc.exporter.primitives import CONTRACT_OFF, check_contract

from exactc.runtime import RUNTIME_DIR

if TYPE_CHECKING:  # imported where used: a cached export is named (ExportSpec.digest) without them
    from exactc.exporter.printer.host import PrintedProgram

# The runtime's files every exported directory carries; exactc_compare.c is the
# conformance comparer (conformance/compare), the others build into the program.
RUNTIME_FILES = ("exactc_rt.h", "exactc_fma.h", "exactc_dot.h", "exactc_libm.c", "exactc_npy.c", "exactc_safetensors.c", "exactc_host.c",
                 "exactc_keys.h", "exactc_keys.c", "exactc_sample.h", "exactc_sample.c", "exactc_generate.h",
                 "exactc_generate.c", "exactc_train.c", "exactc_main.c", "model.h", "exactc_api.c", "exactc_compare.c")
# The library's example (examples/run.c, `make example`): the runtime's example_run.c.
EXAMPLE = ("example_run.c", "examples/run.c")


class ExportError(ValueError):
    """An export that cannot be made; nothing was written."""


# ---- .safetensors and .npy -----------------------------------------------------------------


def safetensors_bytes(tensors: Mapping[str, tuple[str, np.ndarray]], metadata: Mapping[str, str] | None = None) -> bytes:
    """A .safetensors image of `tensors` (name -> (dtype tag, array)), names sorted, the
    header padded with spaces to a multiple of 8 bytes: the same bytes every time.
    `metadata` joins the header's __metadata__ (strings, beside format "pt")."""
    header: dict[str, Any] = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        tag, array = tensors[name]
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": tag, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt", **(metadata or {})}
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
    if types.is_bf16(array.dtype):
        return array.astype(np.float32)
    return array


def npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    # np.asarray, not np.ascontiguousarray, which makes a 0-d array (loss_grad's loss) 1-d
    np.save(buf, np.asarray(npy_value(array), order="C"), allow_pickle=False)
    return buf.getvalue()


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
        # The realization is named only when fused: a default export's manifest is unchanged.
        contract = {} if p.contract == CONTRACT_OFF else {"contract": p.contract}
        return contract | {
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
            "inputs": {s.name: {"shape": json_shape(s.shape), "kind": s.kind,
                                **({"value": "T"} if s.length is not None else {})} for s in p.inputs},
            "outputs": {n: {"shape": json_shape(v.shape), "kind": v.kind,
                            **({"written_over": p.in_place[n]} if n in p.in_place else {})}
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


# `--weights file`: every linear weight in the format its file stores it, per tensor (a
# GGUF file's Q8_0, Q4_0 and k-quants), as (fmt, block) where a single format goes
FILE_WEIGHTS = ("file", 0)


def quantized_weights(program: graph.Program) -> dict[str, Any] | None:
    """What `--weights` made of the program's linear weights, for exactc.json: None, or
    their format, block, the form of their linears and the tensors; for weights of several
    formats (`--weights file` on a file that mixes them), each tensor's."""
    if not program.quantized:
        return None
    formats = set(program.quantized.values())
    if len(formats) > 1:
        return {"format": "mixed", "form": program.form,
                "tensors": {name: {"format": fmt, "block": block}
                            for name, (fmt, block) in sorted(program.quantized.items())}}
    ((fmt, block),) = formats
    return {"format": fmt, "block": block, "form": program.form, "tensors": sorted(program.quantized)}


def build_program(model: str, entry: str, site: str, seed: int, overrides: Mapping[str, Any] | None,
                  checkpoint: Any, weights: tuple[str, int] | None,
                  form: str | None = None) -> tuple[graph.Program, dict[str, np.ndarray]]:
    """The traced program and its parameters, drawn from `seed` or read from `checkpoint`
    (checked against the config before anything runs). `weights` = (fmt, block) holds
    every linear weight quantized (graph.linear_weights): the program is traced again
    with them quantized, their linears in `form` (None: the integer form), and their
    reals quantized by exactc.exporter.quant."""
    overrides, weights = checkpoint_request(checkpoint, entry, overrides, weights)
    check_form(form, weights)
    program = models.build(model, entry, overrides)
    at = site if weights is None else "f64"  # quantized: the reals, each rounded where it goes
    params = checkpoint.parameters(program, at) if checkpoint is not None else models.draw_parameters(program, seed, at)
    if weights is None:
        return program, params
    from exactc.exporter import quant

    program = with_weights(program, model, entry, overrides, weights, checkpoint, form)
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
        if weights is not None and tuple(weights) == FILE_WEIGHTS:
            raise ExportError("--weights file keeps the formats a checkpoint stores: give --checkpoint")
        return overrides, weights
    checkpoint.check_entry(entry)
    # loss_grad's batch is the entry's, not the model's: the checkpoint leaves it to the request
    request = dict(overrides or {})
    batch = {"batch": request.pop("batch")} if entry == "loss_grad" and "batch" in request else {}
    overrides = {**checkpoint.overrides(request), **batch}
    if weights is not None and tuple(weights) == FILE_WEIGHTS:
        return overrides, FILE_WEIGHTS
    if checkpoint.weights is not None:  # a quantized file: its own blocks
        if weights is not None and tuple(weights) != checkpoint.weights:
            raise ExportError(f"--weights {weights[0]} --block {weights[1]}: {checkpoint.path.name} holds its "
                              f"weights as {checkpoint.weights[0]} in blocks of {checkpoint.weights[1]}; exactc "
                              "exports them as they are (leave --weights out)")
        weights = checkpoint.weights
    return overrides, weights


def trace(model: str, entry: str, overrides: Mapping[str, Any] | None, weights: tuple[str, int] | None,
          checkpoint: Any = None, form: str | None = None) -> graph.Program:
    """The traced program, its linear weights quantized when `weights` = (fmt, block) is
    given (with_weights), but those `checkpoint` holds dequantized."""
    check_form(form, weights)
    return with_weights(models.build(model, entry, overrides), model, entry, overrides, weights, checkpoint, form)


def check_form(form: str | None, weights: tuple[str, int] | None) -> None:
    """An ExportError unless `form` is None (the default) or a form of quantized linears
    (graph.FORMS) given with quantized weights."""
    if form is None:
        return
    if form not in graph.FORMS:
        raise ExportError(f"--form {form}: a quantized linear takes the form {' or '.join(graph.FORMS)}")
    if weights is None:
        raise ExportError(f"--form {form} goes with quantized weights: --weights q8 or q4, or a checkpoint "
                          "that holds them")


def check_weights(weights: tuple[str, int] | None) -> None:
    """An ExportError unless `weights` = (fmt, block) is a format and a block exactc
    quantizes to (None, float weights, is)."""
    if weights is None or tuple(weights) == FILE_WEIGHTS:
        return
    from exactc.exporter import quant

    fmt, block = weights
    try:
        quant.check_block(fmt, block)
    except quant.QuantError as exc:
        raise ExportError(f"--weights {fmt} --block {block}: {exc}") from None


def with_weights(program: graph.Program, model: str, entry: str, overrides: Mapping[str, Any] | None,
                 weights: tuple[str, int] | None, checkpoint: Any = None, form: str | None = None) -> graph.Program:
    """`program`, the float trace, traced again with the linear weights it chooses
    (graph.linear_weights) quantized as `weights` = (fmt, block), their linears in `form`
    (None: the integer form); itself for None. The weights `checkpoint` holds dequantized
    (a GGUF file's k-quants) stay f32 weights. With FILE_WEIGHTS, each weight the file
    holds as blocks of one format keeps that format (Checkpoint.stored_formats); the
    others are f32 weights."""
    if weights is None:
        return program
    form = form or graph.INTEGER
    if tuple(weights) == FILE_WEIGHTS:
        formats = checkpoint.stored_formats(program) if checkpoint is not None else {}
        return models.build(model, entry, overrides, quantized=formats, form=form)
    check_weights(weights)
    fmt, block = weights
    kept = checkpoint.dequantized_weights(program) if checkpoint is not None else set()
    chosen = [name for name in graph.linear_weights(program) if name not in kept]
    return models.build(model, entry, overrides, quantized={name: (fmt, block) for name in chosen},
                        form=form)


def prepare(model: str, entry: str, site: str, seed: int = 0, overrides: Mapping[str, Any] | None = None,
            plan: Any = None, straight: bool = False, inputs: Mapping[str, np.ndarray] | None = None,
            checkpoint: Any = None, weights: tuple[str, int] | None = None,
            contract: str = CONTRACT_OFF, form: str | None = None) -> Export:
    """Trace, draw (or read `checkpoint`'s parameters: a checkpoints.Checkpoint, checked
    against the config before anything runs), print and run the reference: everything
    an export writes. With a checkpoint, `overrides` may set `tokens` only. `weights`
    (fmt, block) quantizes the linear weights, their linears in `form` (build_program). `contract` is the
    products' realization (semantics.md section 18), carried by the program to the
    printer and the reference alike."""
    from exactc.exporter.printer.host import print_program
    from exactc.exporter.reference import walk

    types.check_site(site)
    check_contract(contract)
    program, params = build_program(model, entry, site, seed, overrides, checkpoint, weights, form)
    program = dataclasses.replace(program, contract=contract)
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
    form: str | None = None  # the form of the quantized linears (graph.FORMS; None: integer)
    cc: str | None = None  # the compiler whose tune table `auto` reads (default $CC, else cc)
    contract: str = CONTRACT_OFF  # the products' realization (semantics.md section 18)

    def loaded_plan(self) -> Any:
        from exactc.exporter.kernels.autoplan import load_plan_option

        return load_plan_option(self.plan, self.cc)

    def prepare(self) -> Export:
        return prepare(self.model, self.entry, self.site, self.seed, self.overrides, plan=self.loaded_plan(),
                       straight=self.straight, inputs=self.inputs, checkpoint=self.checkpoint, weights=self.weights,
                       contract=self.contract, form=self.form)

    def prepare_scop(self) -> ScopExport:
        """SCoP mode's directory: the plain nests, so no plan and no host."""
        if self.plan not in (None, "none") or self.straight:
            raise ExportError("--mode scop prints every nest at point zero: leave out --plan and --straight-line")
        return prepare_scop(self.model, self.entry, self.site, self.seed, self.overrides, self.checkpoint,
                            self.weights, self.contract, self.form)

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
        if self.form not in (None, graph.INTEGER):  # the default form's digest unchanged
            request["form"] = self.form
        if self.contract != CONTRACT_OFF:  # the default's digest unchanged: its cached exports stay valid
            request["contract"] = self.contract
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


def write(export: Export | ScopExport, target: str | os.PathLike, force: bool = False) -> Path:
    """Write the directory beside `target`, then rename it into place. `force` replaces
    a directory an earlier export wrote, and nothing else (check_target)."""
    target = check_target(target, force)
    work = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with signals_held():
            work = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        os.chmod(work, 0o777 & ~umask())  # mkdtemp's 0700 is for a temporary, not for an export
        (_fill_scop if isinstance(export, ScopExport) else _fill)(export, work)
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


# ---- SCoP mode ------------------------------------------------------------------------------

# The runtime's files a SCoP directory carries: the libm and the conversions its nests
# call, the .npy reader and the comparison rule of its driver.
SCOP_RUNTIME_FILES = ("exactc_rt.h", "exactc_fma.h", "exactc_libm.c", "exactc_npy.c", "exactc_compare.c")
SCOP_JSON = "scop.json"


@dataclasses.dataclass
class ScopExport:
    """What `exactc export --mode scop` writes: each kernel of the program, lowered at the
    run-time length the reference ran at, its nests one file each (printer/scop.py), and
    the reference's values around the first launch of each kernel."""

    program: graph.Program
    site: str
    length: int  # the run-time length every extent is fixed at (0: the program has none)
    kernels: list  # (name, Kernel, the outputs that start as an input's value)
    nests: list  # printer.scop.ScopNest, in launch order
    inputs: dict[str, np.ndarray]  # file name -> the reference's value
    expected: dict[str, np.ndarray]

    def table(self) -> list[dict[str, Any]]:
        """Per nest: its function, kernel, file and exactc's verdict (scop.json)."""
        return [{"function": n.function, "kernel": n.kernel, "file": n.path, "static": n.verdict.static,
                 "why": n.verdict.why} for n in self.nests]

    def files(self) -> dict[str, str]:
        from exactc.exporter.printer import scop
        from exactc.exporter.templates import SCOP_MAKEFILE

        p = self.program
        out = {n.path: n.source for n in self.nests}
        out[scop.SCOP_HEADER] = scop.scop_header()
        out["scop_rt.c"] = scop.scop_runtime()
        out[scop.NESTS_HEADER] = scop.nests_header(self.nests)
        out[scop.DRIVER] = scop.scop_driver(self.kernels, self.nests, self.site)
        out["Makefile"] = SCOP_MAKEFILE
        about = {"model": p.model, "entry": p.entry, "dtype": self.site, "length": self.length,
                 "kernels": len(self.kernels), "nests": self.table()}
        out[SCOP_JSON] = json.dumps(about, indent=2, sort_keys=True) + "\n"
        return out


def first_launches(program: graph.Program, site: str, params: Mapping[str, np.ndarray],
                   inputs: Mapping[str, np.ndarray]) -> dict[tuple, tuple[graph.Op, dict[str, np.ndarray]]]:
    """Per kernel (launches.kernel_key): its first launch in the reference's run and the
    operands it was given there."""
    from exactc.exporter.frames import is_view
    from exactc.exporter.launches import kernel_key
    from exactc.exporter.reference import walk

    tape: dict = {}
    walk.evaluate(program, site, params, inputs, tape=tape)
    found: dict[tuple, tuple[graph.Op, dict[str, np.ndarray]]] = {}

    def visit(fn: graph.Function, run: dict) -> None:
        values = run[walk.VALUES]
        for node in fn.nodes:
            if isinstance(node, graph.Op):
                if not is_view(node) and kernel_key(node) not in found:
                    found[kernel_key(node)] = (node, {k: values[id(v)] for k, v in node.operands().items()})
            elif isinstance(node, graph.Call):
                visit(node.function, run[id(node)][0])
            else:
                for layer, inner in enumerate(run[id(node)]):
                    visit(node.body_of(layer), inner)

    visit(program.function, tape)
    return found


def prepare_scop(model: str, entry: str, site: str, seed: int = 0, overrides: Mapping[str, Any] | None = None,
                 checkpoint: Any = None, weights: tuple[str, int] | None = None,
                 contract: str = CONTRACT_OFF, form: str | None = None) -> ScopExport:
    """Trace and draw as prepare does, run the reference, and print each kernel's nests
    at point zero, lowered at the run-time length of the drawn inputs (T_max)."""
    from exactc.exporter import reference
    from exactc.exporter.kernels import lower
    from exactc.exporter.launches import launched_ops, op_shapes
    from exactc.exporter.primitives import IN_PLACE
    from exactc.exporter.printer import scop
    from exactc.exporter.printer.kernel_table import host_names, kernel_names

    types.check_site(site)
    check_contract(contract)
    program, params = build_program(model, entry, site, seed, overrides, checkpoint, weights, form)
    program = dataclasses.replace(program, contract=contract)
    ins = check_inputs(program, site, models.draw_inputs(program, seed))
    length = graph.run_length(program, ins)
    first = first_launches(program, site, params, ins)
    kernels, cases = {}, {}
    for key, (op, operands) in first.items():
        attrs = dims.substitute(op.attrs, length) if length else op.attrs
        shapes = {k: dims.shape_at(s, length) if length else s for k, s in op_shapes(op).items()}
        kernels[key] = lower(op.primitive, site, shapes, attrs, program.contract)
        outs = reference.run(op.primitive, site, operands, attrs, program.contract)
        initial = {IN_PLACE[op.primitive][0]: operands[IN_PLACE[op.primitive][1]]} if op.primitive in IN_PLACE else {}
        cases[key] = (operands, outs, initial)
    names = kernel_names(launched_ops(program), kernels, host_names(program))
    listed, nests, inputs, expected = [], [], {}, {}
    for key, kernel in kernels.items():
        name = names[key]
        operands, outs, initial = cases[key]
        listed.append((name, kernel, frozenset(initial)))
        nests += scop.scop_nests(name, kernel)
        for buf in kernel.buffers:
            if buf.role == "input":
                inputs[scop.npy_name(name, buf.name)] = operands[buf.name]
            elif buf.role == "output":
                expected[scop.npy_name(name, buf.name)] = outs[buf.name]
        for buffer, value in initial.items():
            inputs[scop.npy_name(name, buffer)] = value
    return ScopExport(program, site, length, listed, nests, inputs, expected)


def _fill_scop(export: ScopExport, root: Path) -> None:
    for name, text in export.files().items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for name in SCOP_RUNTIME_FILES:
        shutil.copyfile(RUNTIME_DIR / name, root / name)
    for part, arrays in (("inputs", export.inputs), ("expected", export.expected)):
        (root / part).mkdir()
        for name, array in arrays.items():
            (root / part / name).write_bytes(npy_bytes(integers_as_int32(array)))
    (root / "actual").mkdir()
    (root / MARKER).write_text(MARKER_TEXT)


def integers_as_int32(array: np.ndarray) -> np.ndarray:
    """int8 and uint8 operands (quantized weights) travel as int32 (.npy files hold no
    narrower integers for the runtime's reader)."""
    return array.astype(np.int32) if array.dtype in (np.int8, np.uint8) else array


def _fill(export: Export, root: Path) -> None:
    from exactc.exporter.templates import CHECK_SH, MAKEFILE, readme

    for name, text in export.printed.files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for name in RUNTIME_FILES:
        shutil.copyfile(RUNTIME_DIR / name, root / name)
    (root / EXAMPLE[1]).parent.mkdir()
    shutil.copyfile(RUNTIME_DIR / EXAMPLE[0], root / EXAMPLE[1])
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


