"""The JSON that users hand to exactc (a checkpoint's config.json and index, a safetensors
header, a plan), read strictly: UTF-8, one JSON value, no key given twice in an object,
numbers Python can hold, nesting no deeper than Python's parser goes.

Python's json module alone lets a duplicated key silently win (the last one), raises
RecursionError on deep nesting and ValueError on a 5,000-digit integer, and a file that
is not UTF-8 fails before JSON is even tried. Here each of those is one JSONFileError whose
message names the file and the rule; each reader re-raises it as its own error
(CheckpointError, PlanError) so that the command line prints one line and exits 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class JSONFileError(ValueError):
    """A JSON text exactc refuses; the message starts with what was read."""


def _no_key_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JSONFileError(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def _serde_int(text: str) -> int | float:
    """An integer as serde_json (the safetensors library's parser) reads it: -0 is the
    float -0.0 there, so a count written -0 ([-0, 768]) is refused as a float, as that
    library refuses it; Python's json reads it as the integer 0."""
    return -0.0 if text == "-0" else int(text)


def parse(data: bytes, where: str, serde_numbers: bool = False) -> Any:
    """The JSON value of `data` (`where`: how messages name it, e.g. a path). With
    `serde_numbers`, integers are read as the safetensors library reads them (-0 a float)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONFileError(f"{where}: not UTF-8 (byte {exc.start} is 0x{data[exc.start]:02x}); JSON is UTF-8 "
                            "text") from None
    try:
        return json.loads(text, object_pairs_hook=_no_key_twice, parse_int=_serde_int if serde_numbers else None)
    except JSONFileError as exc:
        raise JSONFileError(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise JSONFileError(f"{where}: not JSON ({exc})") from None
    except RecursionError:
        raise JSONFileError(f"{where}: nested too deep for Python's JSON parser") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise JSONFileError(f"{where}: a value JSON allows but Python cannot hold ({exc})") from None


# The most bytes a JSON file may have: the safetensors library's limit for a header, far
# above any config or plan, and a bound on what a pipe or /dev/zero can make exactc read.
MAX_BYTES = 100_000_000


def load(path: str | Path) -> Any:
    """The JSON value of the file at `path` (at most MAX_BYTES long)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise JSONFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise JSONFileError(f"{path}: more than {MAX_BYTES:,} bytes; exactc reads JSON files up to that size")
    return parse(data, str(path))
