"""What every checkpoint reader shares: the Checkpoint it gives (config, tensor index,
parameters at a site type), its one error, and the checks of JSON fields and scales. The
readers (hf.py, gguf_file.py, llama2c.py) build on it; the package's load picks one.
"""


from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from exactc.exporter import graph, jsonfile, models, types


class CheckpointError(ValueError):
    """A checkpoint that exactc cannot use: the message names the file, field or tensor."""


# The float dtypes a tensor may be stored in: every value is exact in f64.
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")


@dataclasses.dataclass
class Tensor:
    """A stored tensor under exactc's name: its dtype tag and shape as stored, the name
    the file gives it, and how to read it (a function returning the values in exactc's
    orientation, f64)."""

    dtype: str
    shape: tuple[int, ...]  # as stored in the file (before any transpose)
    source: str  # the file's own name for it
    read: Callable[[], np.ndarray]
    expected: Callable[[tuple[int, ...]], tuple[int, ...]] = lambda shape: shape  # exactc shape -> stored shape
    # A tensor the file holds quantized: its blocks as stored (a quant.QuantizedTensor in
    # exactc's orientation); `read` gives their dequantized values (exact in f32).
    blocks: Callable[[], Any] | None = None
    # A tensor the file holds in a quantized type exactc has no program format for (a
    # GGUF k-quant): `read` gives its dequantized values (exact in f32), and a program
    # computes with them as f32 weights, never quantizing them again.
    dequantized: bool = False
    # The (fmt, block) its blocks are in, when it has blocks: what `--weights file` keeps.
    stored_format: tuple[str, int] | None = None


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint read far enough to check: its model, its config fields, its tensors."""

    path: Path
    format: str  # "hf", "sentence-transformers", "llama2c"
    model: str  # gpt | bert | llama
    fields: dict[str, Any]  # exactc Config fields given by the checkpoint
    tensors: dict[str, Tensor]  # exactc name -> Tensor
    ignored: list[str] = dataclasses.field(default_factory=list)  # stored names exactc does not use
    max_tokens: int | None = None  # the longest sequence the checkpoint's positions allow
    entries: dict[str, str] = dataclasses.field(default_factory=dict)  # entry -> why it is refused
    content: list[Path] = dataclasses.field(default_factory=list)  # the files the weights come from
    name: str = ""
    weights: tuple[str, int] | None = None  # (fmt, block) of the tensors the file holds quantized

    def overrides(self, user: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The Config fields: the checkpoint's, plus `tokens` (the only field a user sets)."""
        user = dict(user or {})
        fixed = sorted(k for k in user if k != "tokens")
        if fixed:
            raise CheckpointError(
                f"--set {', '.join(fixed)}: with a checkpoint the config comes from {self.path.name}; "
                "only tokens (the sequence length the program is exported for) can be set")
        out = dict(self.fields)
        default = models.architecture(self.model).Config().tokens
        tokens = user.get("tokens", default if self.max_tokens is None else min(default, self.max_tokens))
        if isinstance(tokens, str) and tokens.strip().isdigit():
            tokens = int(tokens)
        tokens = positive_int("--set", "tokens", tokens)
        if self.max_tokens is not None and tokens > self.max_tokens:
            raise CheckpointError(f"tokens {tokens} > {self.max_tokens}, the most positions {self.path.name} has")
        out["tokens"] = tokens
        return out

    def check_entry(self, entry: str) -> None:
        if entry in self.entries:
            raise CheckpointError(self.entries[entry])

    def check(self, specs: tuple[graph.ParamSpec, ...] | list[graph.ParamSpec]) -> None:
        """Every tensor the specs need is there, at its shape, in a float dtype, and no
        other: else one CheckpointError listing all that differ."""
        wanted: dict[str, tuple[int, ...]] = {}
        for spec in specs:
            if spec.layers:
                for layer in range(spec.layers):
                    wanted[spec.layer_name(layer)] = tuple(spec.shape)
            else:
                wanted[spec.name] = tuple(spec.shape)
        missing = [n for n in wanted if n not in self.tensors]
        extra = [t.source for n, t in self.tensors.items() if n not in wanted]
        wrong = []
        for name, shape in wanted.items():
            t = self.tensors.get(name)
            if t is None:
                continue
            stored = t.expected(shape)
            if tuple(t.shape) != tuple(stored) or (t.dtype not in FLOAT_DTYPES and t.blocks is None and not t.dequantized):
                want_type = t.dtype if t.dtype in FLOAT_DTYPES else "a float type (" + ", ".join(FLOAT_DTYPES) + ")"
                wrong.append(f"{t.source} is {t.dtype} {tuple(t.shape)}, expected {want_type} {tuple(stored)}")
        if missing or extra or wrong:
            parts = []
            if missing:
                parts.append("missing " + ", ".join(missing))
            if extra:
                parts.append("extra " + ", ".join(extra))
            if wrong:
                parts.append("mis-shaped " + "; ".join(wrong))
            config = ", ".join(f"{k}={v}" for k, v in self.fields.items())
            raise CheckpointError(f"{self.path} does not match the {self.model} config ({config}): " + "; ".join(parts))

    def parameters(self, program: graph.Program, site: str) -> dict[str, np.ndarray]:
        """Every parameter of `program` (checked first), rounded to `site`, keyed as
        models.draw_parameters keys them (stacked over layers)."""
        types.check_site(site)
        self.check(program.params)
        out = {}
        for spec in program.params:
            if spec.layers:
                array = np.stack([self.tensors[spec.layer_name(layer)].read() for layer in range(spec.layers)])
            else:
                array = self.tensors[spec.name].read()
            out[spec.name] = types.round_to_site(array, site)
        return out

    def quantized_weights(self, program: graph.Program) -> dict[str, Any]:
        """The weights `program` holds quantized that the file holds quantized: ParamSpec
        name -> quant.QuantizedTensor (stacked over layers), its blocks as stored."""
        from exactc.exporter import quant

        out = {}
        for spec in program.params:
            if spec.name not in program.quantized:
                continue
            names = [spec.layer_name(layer) for layer in range(spec.layers)] if spec.layers else [spec.name]
            if any(self.tensors[n].blocks is None for n in names):
                continue
            parts = [self.tensors[n].blocks() for n in names]
            if not spec.layers:
                out[spec.name] = parts[0]
                continue
            first = parts[0]
            out[spec.name] = quant.QuantizedTensor(first.fmt, first.block, first.k,
                                                   np.stack([p.values for p in parts]),
                                                   np.stack([p.scales for p in parts]))
        return out

    def stored_formats(self, program: graph.Program) -> dict[str, tuple[str, int]]:
        """The linear weights of `program` (graph.linear_weights) that the file holds as
        blocks of one format in every layer: ParamSpec name -> (fmt, block), a GGUF file's
        k-quants included (`--weights file`). A parameter whose layers mix formats, or
        hold floats, is not in it: it is the f32 weight it is read as."""
        out = {}
        for spec in program.params:
            if spec.name not in graph.linear_weights(program):
                continue
            names = [spec.layer_name(layer) for layer in range(spec.layers)] if spec.layers else [spec.name]
            formats = {self.tensors[n].stored_format if self.tensors[n].blocks is not None else None for n in names}
            if len(formats) == 1 and None not in formats:
                out[spec.name] = formats.pop()
        return out

    def dequantized_weights(self, program: graph.Program) -> set[str]:
        """The parameters (ParamSpec names) of `program` with a tensor (of any layer) the
        file holds dequantized (Tensor.dequantized): they stay f32 weights whatever
        --weights or the file's blocks make of the others."""
        out = set()
        for spec in program.params:
            names = [spec.layer_name(layer) for layer in range(spec.layers)] if spec.layers else [spec.name]
            if any(n in self.tensors and self.tensors[n].dequantized for n in names):
                out.add(spec.name)
        return out

    def digest(self) -> str:
        """A content hash of the weight files and the config: the key of cached exports."""
        h = hashlib.sha256(self.format.encode() + repr(sorted(self.fields.items())).encode())
        for path in self.content:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
        return h.hexdigest()[:24]


def json_kind(value: Any) -> str:
    """What a JSON value is, for messages: 'an object', 'a list', 'a string', ..."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _top_level(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind):
        raise CheckpointError(f"{where}: the top level is {json_kind(value)}; {json_kind(kind())} is expected")
    return value


def read_json(path: Path, kind: type = dict) -> Any:
    """A checkpoint's JSON file (config.json, an index, modules.json), read strictly
    (exporter/jsonfile.py), its top level a `kind` (an object unless said)."""
    try:
        return _top_level(jsonfile.load(path), kind, str(path))
    except jsonfile.JSONFileError as exc:
        raise CheckpointError(str(exc)) from None


def json_object(data: bytes, where: str) -> dict[str, Any]:
    """JSON text held in memory (a safetensors header), read as read_json reads a file,
    its integers as the safetensors library reads them (-0 is no count)."""
    try:
        return _top_level(jsonfile.parse(data, where, serde_numbers=True), dict, where)
    except jsonfile.JSONFileError as exc:
        raise CheckpointError(str(exc)) from None


def boolean(where: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise CheckpointError(f"{where}: {key}={value!r} must be true or false")
    return value


def positive_int(where: str, key: str, value: Any) -> int:
    """A count read from a checkpoint, within models.config's bounds, refused by its key."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= models.MAX_COUNT:
        raise CheckpointError(f"{where}: {key}={value!r} must be a positive integer (at most {models.MAX_COUNT:,})")
    return value


def finite_float(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise CheckpointError(f"{where}: {key}={value!r} must be a positive number")
    return float(value)


def finite_scales(path: Path, tensor: str, scales: np.ndarray, block: str) -> None:
    """A quantized tensor's scales (rows, blocks per row) as stored: an inf or NaN scale
    is refused, naming the first such block (`block`: the format's word for it); its
    dequantized values would be inf or NaN, which a checkpoint's weights never are."""
    bad = np.argwhere(~np.isfinite(scales))
    if bad.size:
        row, index = (int(i) for i in bad[0])
        raise CheckpointError(f"{path}: tensor {tensor}: the scale of {block} {index} of row {row} is "
                              f"{scales[row, index]}; every scale must be finite ({len(bad)} of its {scales.size} are not)")
