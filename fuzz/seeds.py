"""Write the seed corpora of fuzz/corpus/ (kept in the tree; rerun to regenerate):

    python fuzz/seeds.py

npy/: what numpy writes (each dtype exactc reads, 0-d to 8-d, empty, header versions 1.0,
2.0 and 3.0), headers written by hand in the syntax exactc reads (either quote, comments,
Python 2's L suffix, no trailing comma), and files one step from valid (big-endian,
Fortran order, f2, a byte short, a byte long). safetensors/: what exactc's exporter and
the safetensors library write (several dtypes, empty tensors, metadata, escaped names,
a padded header), and files one step from valid (a gap, an overlap, a name twice,
trailing bytes, a header length one off, a header nested past the limit).
"""

from __future__ import annotations

import io
import json
import struct
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save as library_save

HERE = Path(__file__).resolve().parent


def npy_bytes(a: np.ndarray, version=None) -> bytes:
    """What np.save writes (version None: the lowest that holds the header)."""
    f = io.BytesIO()
    np.lib.format.write_array(f, a, version=version)
    return f.getvalue()


def handmade_npy(header: str, data: bytes) -> bytes:
    text = header.encode("ascii")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def npy_seeds() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    seeds = {}
    for descr in ("<f8", "<f4", "<i4", "<i8"):
        for shape in ((), (0,), (3,), (2, 3), (1, 2, 1, 2, 1, 2, 1, 2)):
            raw = rng.integers(0, 256, int(np.prod(shape)) * np.dtype(descr).itemsize, dtype=np.uint8)
            a = raw.view(descr).reshape(shape)
            name = f"{descr[1:]}-{'x'.join(map(str, shape)) or 'scalar'}"
            seeds[f"{name}.npy"] = npy_bytes(a)
    f4 = np.array([[-0.0, np.nan], [np.inf, 1e-45]], "<f4")
    seeds["v2.npy"] = npy_bytes(f4, (2, 0))
    seeds["v3.npy"] = npy_bytes(f4, (3, 0))
    data = f4.tobytes()
    seeds["hand-double-quotes.npy"] = handmade_npy('{"descr": "<f4", "fortran_order": False, "shape": (2, 2)}\n', data)
    seeds["hand-comments.npy"] = handmade_npy("{'shape': (2, 2), # rows, columns\n 'descr': '<f4',\n"
                                              " 'fortran_order': False}\n", data)
    seeds["hand-long-suffix.npy"] = handmade_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L), }\n",
                                                 data)
    seeds["refused-big-endian.npy"] = npy_bytes(f4.astype(">f4"))
    seeds["refused-fortran.npy"] = npy_bytes(np.asfortranarray(np.arange(6, dtype="<f8").reshape(2, 3)))
    seeds["refused-f2.npy"] = npy_bytes(np.zeros(3, "<f2"))
    seeds["refused-short.npy"] = npy_bytes(f4)[:-1]
    seeds["refused-long.npy"] = npy_bytes(f4) + b"\0"
    return seeds


def safetensors_image(header: dict | bytes, data: bytes, length_delta: int = 0) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text) + length_delta) + text + data


def f32_entry(begin: int, end: int, shape) -> dict:
    return {"dtype": "F32", "shape": list(shape), "data_offsets": [begin, end]}


def safetensors_seeds() -> dict[str, bytes]:
    sys.path.insert(0, str(HERE.parent))
    from exactc.exporter import export

    rng = np.random.default_rng(1)
    seeds = {}
    tensors = {"wte.weight": ("F32", rng.standard_normal((4, 3)).astype("<f4")),
               "h.0.ln_1.bias": ("F32", rng.standard_normal(3).astype("<f4")),
               "h.0.attn.c_attn.weight": ("F32", rng.standard_normal((9, 3)).astype("<f4"))}
    seeds["exactc-f32.safetensors"] = export.safetensors_bytes(tensors)
    bf16 = {k: ("BF16", (v.view("<u4") >> 16).astype("<u2")) for k, (_, v) in tensors.items()}
    seeds["exactc-bf16.safetensors"] = export.safetensors_bytes(bf16)
    seeds["library-dtypes.safetensors"] = library_save({
        "f64": rng.standard_normal((2, 2)), "i32": np.arange(5, dtype="<i4"), "i64": np.arange(3, dtype="<i8"),
        "u8": np.arange(7, dtype="u1"), "f16": np.ones(3, "<f2"), "empty": np.zeros((0, 4), "<f4"),
        "scalar": np.array(2.5, "<f4")}, metadata={"format": "np"})
    seeds["empty.safetensors"] = safetensors_image(b"{}", b"")
    seeds["escaped-names.safetensors"] = safetensors_image(
        b'{"caf\\u00e9":' + json.dumps(f32_entry(0, 4, (1,))).encode() + b',"\\ud83d\\ude00 \\"q\\"":'
        + json.dumps(f32_entry(4, 8, (1,))).encode() + b"}", bytes(8))
    one = {"a": f32_entry(0, 8, (2,))}
    seeds["padded-header.safetensors"] = safetensors_image(json.dumps(one).encode() + b"      ", bytes(8))
    seeds["metadata-null.safetensors"] = safetensors_image(dict(one, __metadata__=None), bytes(8))
    seeds["refused-gap.safetensors"] = safetensors_image(
        {"a": f32_entry(0, 8, (2,)), "b": f32_entry(12, 20, (2,))}, bytes(20))
    seeds["refused-overlap.safetensors"] = safetensors_image(
        {"a": f32_entry(0, 8, (2,)), "b": f32_entry(4, 12, (2,))}, bytes(12))
    seeds["refused-name-twice.safetensors"] = safetensors_image(
        b'{"a":' + json.dumps(f32_entry(0, 8, (2,))).encode() + b',"a":' + json.dumps(f32_entry(8, 16, (2,))).encode()
        + b"}", bytes(16))
    seeds["refused-trailing.safetensors"] = safetensors_image(one, bytes(9))
    seeds["refused-length-plus-one.safetensors"] = safetensors_image(one, b" " + bytes(7), +1)
    seeds["refused-length-minus-one.safetensors"] = safetensors_image(one, bytes(8), -1)
    seeds["refused-nested-metadata.safetensors"] = safetensors_image(
        b'{"__metadata__":' + b'{"k":' * 20 + b'"v"' + b"}" * 20 + b"}", b"")
    return seeds


def main() -> int:
    for kind, seeds in (("npy", npy_seeds()), ("safetensors", safetensors_seeds())):
        folder = HERE / "corpus" / kind
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, data in sorted(seeds.items()):
            (folder / name).write_bytes(data)
        print(f"{folder}: {len(seeds)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
