"""The C runtime's .safetensors reader (runtime/exactc_safetensors.c) against the
`safetensors` library, and the bounds of both runtime readers' file reads.

Grouped by what they protect: a file's tensors tile its data section exactly (a gap, an
overlap, a header length that does not land on the first tensor, trailing bytes: each
refused, as the library refuses it, with a message naming the tensor and the rule); what
the library writes, the C reader reads, every tensor found with its bytes; a file is read
no further than its header declares, so /dev/zero or an endless pipe is refused with
bounded memory; the checks over all names grow as n log n, not n² (instruction counts).
"""

from __future__ import annotations

import functools
import json
import os
import resource
import struct
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors import SafetensorError
from safetensors.numpy import load as library_load
from safetensors.numpy import save as library_save

from exactc.exporter.export import safetensors_bytes
from exactc.verify.build import RUNTIME_DIR, STRICT_FLAGS, load_library, runtime_source
from exactc.runtime.toolchain import have_compiler
from exactc.verify.callgrind import run_callgrind

from test_npy import EAGAIN, ST, F4_2x3, message, pipe_stream, rt  # noqa: F401 (rt: a fixture)

CDEF = """
typedef struct {
    char *name; char dtype[12]; int ndim; int64_t shape[8]; uint64_t begin, end;
} exactc_st_tensor;
typedef struct {
    const unsigned char *bytes; size_t len; size_t data_start;
    exactc_st_tensor *tensors; size_t count; int owned;
} exactc_safetensors;
int exactc_st_parse(const unsigned char *buf, size_t len, exactc_safetensors *st, char *err, size_t errlen);
int exactc_st_open(const char *path, exactc_safetensors *st, char *err, size_t errlen);
const exactc_st_tensor *exactc_st_find(const exactc_safetensors *st, const char *name);
int exactc_st_read(const exactc_safetensors *st, const char *name, const char *dtype, int ndim,
                   const int64_t *shape, void *dst, char *err, size_t errlen);
void exactc_st_close(exactc_safetensors *st);
typedef enum { EXACTC_F64 = 0, EXACTC_F32 = 1, EXACTC_I32 = 2, EXACTC_I64 = 3 } exactc_dtype;
const char *exactc_dtype_name(exactc_dtype t);
"""

ST_DTYPE = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<i4"): "I32", np.dtype("<i8"): "I64",
            np.dtype("<f2"): "F16", np.dtype("u1"): "U8", np.dtype("i1"): "I8"}


@functools.lru_cache(maxsize=None)
def runtime():
    """The runtime's readers, loaded once (a function, not a fixture: Hypothesis would
    print a fixture's whole repr, C source included, with every failing example)."""
    return load_library({name: runtime_source(name) for name in ("exactc_safetensors.c", "exactc_npy.c")}, CDEF)


def c_parse(data: bytes):
    """(None, {name: (dtype, shape, bytes)}) if the C reader accepts `data`, else
    (message, None)."""
    ffi, lib = runtime().ffi, runtime().lib
    st_ = ffi.new("exactc_safetensors *")
    err = ffi.new("char[512]")
    if lib.exactc_st_parse(data, len(data), st_, err, 512) != 0:
        assert st_.count == 0 and st_.tensors == ffi.NULL
        return ffi.string(err).decode(), None
    try:
        found = {}
        for k in range(st_.count):
            t = st_.tensors[k]
            name = ffi.string(t.name).decode()
            shape = tuple(t.shape[d] for d in range(t.ndim))
            assert lib.exactc_st_find(st_, t.name) == ffi.addressof(st_.tensors, k)
            dst = ffi.new("unsigned char[]", max(1, t.end - t.begin))
            assert lib.exactc_st_read(st_, t.name, t.dtype, t.ndim, t.shape, dst, err, 512) == 0
            found[name] = (ffi.string(t.dtype).decode(), shape, bytes(ffi.buffer(dst, t.end - t.begin)))
        assert lib.exactc_st_find(st_, b"no such tensor") == ffi.NULL
        return None, found
    finally:
        lib.exactc_st_close(st_)


def library_reading(data: bytes):
    """The library's tensors, or None if it refuses the file."""
    try:
        return library_load(data)
    except SafetensorError:
        return None


def image(header: dict | bytes, data: bytes, length_delta: int = 0) -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) + length_delta) + text + data


def f32(offsets, shape=(2,)):
    return {"dtype": "F32", "shape": list(shape), "data_offsets": list(offsets)}


# ------------------------------------------------------------------------------------
# (1) The data section is tiled exactly: refused as the library refuses, by name
# ------------------------------------------------------------------------------------

A_B = {"a": f32([0, 8]), "b": f32([8, 16])}
ONE = json.dumps({"a": f32([0, 8])}).encode()

# (case, file, words of the C reader's message, or None if it must read the file)
TILING = [
    ("two tensors, tiled", image(A_B, bytes(16)), None),
    ("a gap between tensors", image({"a": f32([0, 8]), "b": f32([12, 20])}, bytes(20)),
     "tensor b: data_offsets [12, 20] leave data bytes [8, 12) to no tensor"),
    ("the first tensor after byte 0", image({"a": f32([4, 12])}, bytes(12)),
     "tensor a: data_offsets [4, 12] leave data bytes [0, 4) to no tensor"),
    ("overlapping tensors", image({"a": f32([0, 8]), "b": f32([4, 12])}, bytes(12)),
     "tensor b: data_offsets [4, 12] overlap tensor a's [0, 8]"),
    ("two names, one range", image({"a": f32([0, 8]), "b": f32([0, 8])}, bytes(8)),
     "tensor b: data_offsets [0, 8] overlap tensor a's [0, 8]"),
    ("a byte after the last tensor", image(A_B, bytes(17)), "the tensors end at data byte 16 and the file goes on"),
    ("no tensors, one data byte", image({}, b"x"), "the tensors end at data byte 0 and the file goes on"),
    ("no tensors, no data", image({}, b""), None),
    ("a tensor past the data", image({"a": f32([0, 8]), "b": f32([8, 16])}, bytes(12)),
     "tensor b: data_offsets [8, 16] outside the 12 data bytes"),
    ("empty tensors between and at 0", image({"y": f32([0, 0], (0,)), "a": f32([0, 8]), "z": f32([8, 8], (0, 3)),
                                              "b": f32([8, 16])}, bytes(16)), None),
    ("an empty tensor past the end", image({"a": f32([0, 8]), "z": f32([9, 9], (0,))}, bytes(8)),
     "tensor z: data_offsets [9, 9] leave data bytes [8, 9) to no tensor"),
    ("an empty tensor inside another", image({"a": f32([0, 8]), "z": f32([4, 4], (0,))}, bytes(8)),
     "tensor z: data_offsets [4, 4] overlap tensor a's [0, 8]"),
    ("header length one too many, a space", image(ONE, b" " + bytes(7), +1),
     "tensor a: data_offsets [0, 8] outside the 7 data bytes"),
    ("header length one too many", image(ONE, b"\x01" + bytes(7), +1), "bytes after the header's object"),
    ("header length one too few", image(ONE, bytes(8), -1), "the JSON ends early"),
    ("the header padded with spaces", image(ONE + b"   ", bytes(8)), None),
    ("__metadata__ null", image(b'{"__metadata__": null, ' + ONE[1:], bytes(8)), None),
    ("__metadata__ a list", image(b'{"__metadata__": [], ' + ONE[1:], bytes(8)), "__metadata__ must be an object"),
    ("a header past the library's limit", struct.pack("<Q", 100_000_001) + b"{}",
     "header length 100000001 is more than the 100000000 bytes a header may have"),
]


@pytest.mark.parametrize("case,data,words", TILING, ids=[c[0] for c in TILING])
def test_tiling_is_refused_as_the_library_refuses_it(case, data, words):
    message, found = c_parse(data)
    by_library = library_reading(data)
    if words is None:
        assert message is None, message
        assert by_library is not None and set(by_library) == set(found)
        for name, array in by_library.items():
            assert found[name][1] == array.shape and found[name][2] == array.tobytes()
    else:
        assert message is not None and words in message, message
        assert by_library is None, f"the library reads {case!r}"


def test_a_name_given_twice_is_refused():
    """Stricter than the library on purpose, which keeps the last entry: two entries for
    one name are two readings of the file, whichever another reader keeps."""
    text = b'{"b":' + json.dumps(f32([0, 8])).encode() + b',"b":' + json.dumps(f32([8, 16])).encode() + b"}"
    data = image(text, bytes(16))
    message, _ = c_parse(data)
    assert message == "tensor b appears twice in the header"
    text = b'{"b":' + json.dumps(f32([0, 8])).encode() + b',"b":' + json.dumps(f32([0, 8])).encode() + b"}"
    assert set(library_load(image(text, bytes(8)))) == {"b"}
    assert c_parse(image(text, bytes(8)))[0] == "tensor b appears twice in the header"


def tensor_a(offsets: bytes = b"[0,8]", name: bytes = b"a", metadata: bytes | None = None) -> bytes:
    """A file of one F32 tensor of 2 values, its header written by hand: `offsets` and
    `name` as their JSON text, and a __metadata__ object's text first if given."""
    first = b'"__metadata__":' + metadata + b"," if metadata is not None else b""
    return image(b"{" + first + b'"' + name + b'":{"dtype":"F32","shape":[2],"data_offsets":' + offsets + b"}}",
                 bytes(8))


# What the library (safetensors 0.x, serde_json underneath) does with each, found by
# running it: a number with a leading zero is "invalid JSON in header: invalid number"; -0
# is "invalid type: floating point `-0.0`, expected usize"; a byte that is not UTF-8 is
# "invalid UTF-8 in header: invalid utf-8 sequence"; a __metadata__ value other than a
# string is "invalid type: integer `1` (null, map, sequence, boolean), expected a string".
# (case, file, words of the library's message, words of the C reader's, or None where both read it)
LIBRARY_RULES = [
    ("offsets [00, 8]", tensor_a(b"[00,8]"), "invalid number", "an offset has a leading zero"),
    ("offsets [0, 08]", tensor_a(b"[0,08]"), "invalid number", "an offset has a leading zero"),
    ("offsets [0, 8]", tensor_a(b"[0,8]"), None, None),
    ("a shape of [02]", image(b'{"a":{"dtype":"F32","shape":[02],"data_offsets":[0,8]}}', bytes(8)),
     "invalid number", "a dimension has a leading zero"),
    ("a number 01 in an unknown field", image(b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":01}}',
                                               bytes(8)), "invalid number", "a number has a leading zero"),
    ("offsets [-0, 8]", tensor_a(b"[-0,8]"), "invalid type: floating point `-0.0`, expected usize",
     "an offset must be a non-negative integer"),
    ("a name of byte 0xff", tensor_a(name=b"a\xff"), "invalid UTF-8 in header", "not UTF-8 (0xff begins no UTF-8"),
    ("a name cut inside a UTF-8 sequence", tensor_a(name=b"caf\xc3"), "invalid UTF-8 in header",
     "not UTF-8 (0xc3 begins no UTF-8"),
    ("an overlong '/' (c0 af)", tensor_a(name=b"\xc0\xaf"), "invalid UTF-8 in header", "not UTF-8 (0xc0"),
    ("a surrogate as UTF-8 (ed a0 80)", tensor_a(name=b"\xed\xa0\x80"), "invalid UTF-8 in header",
     "not UTF-8 (0xed"),
    ("past U+10FFFF (f4 90 80 80)", tensor_a(name=b"\xf4\x90\x80\x80"), "invalid UTF-8 in header",
     "not UTF-8 (0xf4"),
    ("a __metadata__ value not UTF-8", tensor_a(metadata=b'{"k":"\xc3("}'), "invalid UTF-8 in header",
     "not UTF-8 (0xc3"),
    ("names of 2, 3 and 4 UTF-8 bytes", image('{"café":%s,"€":%s,"😀":%s}'.encode() % tuple(
        json.dumps(f32([4 * k, 4 * k + 4], (1,))).encode() for k in range(3)), bytes(12)), None, None),
    ("a __metadata__ value 1", tensor_a(metadata=b'{"k":1}'), "invalid type: integer `1`, expected a string",
     "a __metadata__ value must be a string"),
    ("a __metadata__ value null", tensor_a(metadata=b'{"k":null}'), "invalid type: null, expected a string",
     "a __metadata__ value must be a string"),
    ("a __metadata__ value {}", tensor_a(metadata=b'{"k":"v","l":{}}'), "invalid type: map, expected a string",
     "a __metadata__ value must be a string"),
    ("a __metadata__ value []", tensor_a(metadata=b'{"k":[]}'), "invalid type: sequence, expected a string",
     "a __metadata__ value must be a string"),
    ("a __metadata__ value true", tensor_a(metadata=b'{"k":true}'), "invalid type: boolean `true`, expected a string",
     "a __metadata__ value must be a string"),
    ("__metadata__ of strings", tensor_a(metadata=b'{"k":"v","caf\xc3\xa9":"\xe2\x82\xac"}'), None, None),
]


@pytest.mark.parametrize("case,data,library_words,words", LIBRARY_RULES, ids=[c[0] for c in LIBRARY_RULES])
def test_the_c_reader_refuses_what_the_library_refuses(case, data, library_words, words):
    """Each of these the C reader once read (a leading zero, bytes that are not UTF-8, a
    __metadata__ value that is not a string) or the Python reader did (-0): the library,
    the outside oracle, decides."""
    message, found = c_parse(data)
    try:
        by_library, library_message = library_load(data), None
    except SafetensorError as exc:
        by_library, library_message = None, str(exc)
    if library_words is None:
        assert message is None and by_library is not None, (message, library_message)
        assert {name: (dtype, shape) for name, (dtype, shape, _) in found.items()} == {
            name: ("F32", array.shape) for name, array in by_library.items()}
    else:
        assert library_message is not None and library_words in library_message, library_message
        assert message is not None and words in message, message


# ------------------------------------------------------------------------------------
# (2) What the library writes, the C reader reads; one byte off, refused
# ------------------------------------------------------------------------------------


@st.composite
def tensor_sets(draw):
    """A few named arrays of the dtypes both readers know, empty shapes favoured now
    and then (they may sit anywhere in the tiling)."""
    names = draw(st.lists(st.text("abcxyz._0123456789", min_size=1, max_size=6), min_size=1, max_size=6,
                          unique=True))
    out = {}
    for name in names:
        dtype = draw(st.sampled_from(sorted(ST_DTYPE, key=str)))
        shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
        raw = draw(st.binary(min_size=int(np.prod(shape)) * dtype.itemsize,
                             max_size=int(np.prod(shape)) * dtype.itemsize))
        out[name] = np.frombuffer(raw, dtype=dtype).reshape(shape)
    return out


@given(tensor_sets())
def test_every_tensor_the_library_writes_is_found_and_read(tensors):
    data = library_save(tensors)
    message, found = c_parse(data)
    assert message is None, message
    assert set(found) == set(tensors)
    for name, array in tensors.items():
        assert found[name] == (ST_DTYPE[array.dtype], array.shape, array.tobytes())
    n = int.from_bytes(data[:8], "little")
    for bad in (data + b"\0", data[:-1] if len(data) > 8 + n else data + b"\0\0",
                struct.pack("<Q", n + 1) + data[8:], struct.pack("<Q", n - 1) + data[8:]):
        message, _ = c_parse(bad)
        assert message is not None and library_reading(bad) is None, bad


# ------------------------------------------------------------------------------------
# (3) Reading files: never further than the header declares
# ------------------------------------------------------------------------------------

DRIVER = r"""
#include "exactc_rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* reader st|npy PATH: open the file as the programs do; reader parse-st PATH: read it
 * whole with stdio, then parse the image (the region callgrind counts). */
int main(int argc, char **argv) {
    char err[512];
    if (argc != 3) return 2;
    if (strcmp(argv[1], "st") == 0) {
        exactc_safetensors st;
        if (exactc_st_open(argv[2], &st, err, sizeof err) != 0) { printf("refused: %s\n", err); return 1; }
        printf("ok %zu\n", st.count);
        exactc_st_close(&st);
    } else if (strcmp(argv[1], "npy") == 0) {
        exactc_array a;
        if (exactc_npy_read(argv[2], &a, err, sizeof err) != 0) { printf("refused: %s\n", err); return 1; }
        printf("ok %s %zu\n", exactc_dtype_name(a.dtype), a.nbytes);
        exactc_array_free(&a);
    } else {
        FILE *f = fopen(argv[2], "rb");
        unsigned char *buf = NULL;
        size_t len = 0;
        if (f == NULL || exactc_read_more(f, argv[2], &buf, &len, (size_t)1 << 30, err, sizeof err) != 0) return 2;
        fclose(f);
        exactc_safetensors st;
        if (exactc_st_parse(buf, len, &st, err, sizeof err) != 0) { printf("refused: %s\n", err); return 1; }
        printf("ok %zu\n", st.count);
        exactc_st_close(&st);
        free(buf);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    """The readers in a program of their own: a file read that grows without bound
    must hit a memory limit or a timeout in a child, not in pytest."""
    if not have_compiler("gcc"):
        pytest.skip("gcc not found")
    work = tmp_path_factory.mktemp("reader")
    (work / "reader.c").write_text(DRIVER)
    exe = work / "reader"
    subprocess.run(["gcc", *STRICT_FLAGS, "-O1", "-g", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME_DIR}", "-o", str(exe),
                    str(work / "reader.c"), str(RUNTIME_DIR / "exactc_safetensors.c"),
                    str(RUNTIME_DIR / "exactc_npy.c")], check=True)
    return exe


MEMORY_LIMIT = 1 << 30  # bytes of address space for the reader: far more than a bounded read takes


def read_with(driver: Path, kind: str, path: Path | str) -> str:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    done = subprocess.run([str(driver), kind, str(path)], capture_output=True, text=True, timeout=60,
                          preexec_fn=limit)
    return done.stdout.strip() or f"exit {done.returncode}: {done.stderr.strip()[-300:]}"


def endless_pipe(path: Path, head: bytes) -> threading.Thread:
    """A FIFO at `path` that gives `head`, then zeros until its reader goes away."""
    os.mkfifo(path)

    def write():
        try:
            with open(path, "wb") as f:
                f.write(head)
                while True:
                    f.write(bytes(1 << 16))
        except (BrokenPipeError, ConnectionResetError):
            pass

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_dev_zero_is_refused_at_its_header(driver):
    assert read_with(driver, "st", "/dev/zero") == (
        "refused: header: the JSON ends where the header's object ('{') was expected")
    assert read_with(driver, "npy", "/dev/zero") == "refused: npy: not a .npy file (magic)"


def test_an_endless_pipe_is_read_no_further_than_its_header_declares(driver, tmp_path):
    good = image(ONE, bytes(8))
    writer = endless_pipe(tmp_path / "weights", good)
    assert read_with(driver, "st", tmp_path / "weights") == (
        "refused: the tensors end at data byte 8 and the file goes on (a header length too small, or trailing "
        "bytes); a file's tensors must tile its data section exactly")
    writer.join(timeout=10)
    np.save(tmp_path / "x.npy", np.arange(6, dtype="<i4"))
    writer = endless_pipe(tmp_path / "input", (tmp_path / "x.npy").read_bytes())
    assert read_with(driver, "npy", tmp_path / "input") == (
        f"refused: npy: '{tmp_path / 'input'}' goes on after the 24 data bytes of shape (6,) of <i4 (trailing "
        "bytes after the data are refused)")
    writer.join(timeout=10)


def test_a_header_that_promises_more_than_the_file_holds(driver, tmp_path):
    """A header declaring a terabyte of data costs the bytes the file has, not a terabyte."""
    huge = {"a": {"dtype": "U8", "shape": [1 << 40], "data_offsets": [0, 1 << 40]}}
    (tmp_path / "huge.safetensors").write_bytes(image(huge, bytes(100)))
    assert read_with(driver, "st", tmp_path / "huge.safetensors") == (
        f"refused: tensor a: data_offsets [0, {1 << 40}] outside the 100 data bytes (a header length too large, "
        "or a truncated file)")
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }".ljust(117) + "\n"
    (tmp_path / "huge.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()
                                        + bytes(100))
    assert read_with(driver, "npy", tmp_path / "huge.npy") == (
        "refused: npy: data is 100 bytes; shape (1099511627776,) of <f8 needs 8796093022208")


def test_files_read_whole(driver, tmp_path):
    tensors = {f"t{k}": np.full((k, 3), k, dtype="<f4") for k in range(40)}
    (tmp_path / "w.safetensors").write_bytes(library_save(tensors))
    assert read_with(driver, "st", tmp_path / "w.safetensors") == "ok 40"
    big = {"big": np.arange(300_000, dtype="<f8")}  # past the first read chunk
    (tmp_path / "big.safetensors").write_bytes(library_save(big))
    assert read_with(driver, "st", tmp_path / "big.safetensors") == "ok 1"
    np.save(tmp_path / "x.npy", np.zeros((3, 5), "<f4"))
    assert read_with(driver, "npy", tmp_path / "x.npy") == "ok <f4 60"
    assert read_with(driver, "st", tmp_path).startswith("refused: error reading")
    assert read_with(driver, "npy", tmp_path / "none.npy").startswith("refused: npy: cannot open")


def test_dtypes_are_named_as_numpy_names_them():
    ffi, lib = runtime().ffi, runtime().lib
    assert [ffi.string(lib.exactc_dtype_name(k)).decode() for k in range(4)] == ["<f8", "<f4", "<i4", "<i8"]


# ------------------------------------------------------------------------------------
# (4) Cost: the checks over all names are n log n (counts, not clocks)
# ------------------------------------------------------------------------------------


def many_tensors(n: int) -> bytes:
    header = {f"layer.{k}.weight": f32([4 * k, 4 * k + 4], (1,)) for k in range(n)}
    return image(header, bytes(4 * n))


def test_the_name_and_tiling_checks_grow_as_n_log_n(driver, tmp_path):
    """Parsing 1,000 / 2,000 / 4,000 tensors: the instructions per doubling stay near 2
    (measured 2.0 and 2.1); a check over all pairs of names gives 3.5 and 3.7 (80,000 tensors
    took 6.5 s that way)."""
    counts = []
    for n in (1000, 2000, 4000):
        path = tmp_path / f"{n}.safetensors"
        path.write_bytes(many_tensors(n))
        counts.append(run_callgrind([str(driver), "parse-st", str(path)], toggle_collect="exactc_st_parse").total)
    ratios = [counts[k + 1] / counts[k] for k in range(2)]
    assert all(r < 2.6 for r in ratios), f"instructions {counts}, ratios per doubling {ratios}"


# ---- read errors at each step of the stepwise reads


ST_DATA_AT = len(ST) - F4_2x3.nbytes

ST_STEPS = [
    ("the header length", b""),
    ("the header", ST[:8]),
    ("the data", ST[:ST_DATA_AT]),
    ("the byte after the data", ST),
]


@pytest.mark.parametrize("step, held", ST_STEPS, ids=[s for s, _ in ST_STEPS])
def test_a_safetensors_stream_that_fails_is_a_read_error(rt, step, held):
    ffi, lib = rt.ffi, rt.lib
    st = ffi.new("exactc_safetensors *")
    err = ffi.new("char[512]")
    with pipe_stream(rt, held, fails_after=True) as f:
        assert lib.exactc_st_open_stream(f, b"pipe.safetensors", st, err, 512) == -1
    assert message(rt, err) == f"error reading 'pipe.safetensors': {EAGAIN}"
    assert (st.tensors, st.count, st.bytes) == (ffi.NULL, 0, ffi.NULL)


# ---- looking tensors up


# (case, the name, dtype and shape asked for, the whole message); the file holds w, F32 (2, 3)
LOOKUPS = [
    ("a missing tensor", "v", "F32", (2, 3), "tensor v is missing"),
    ("a name past the last", "z", "F32", (2, 3), "tensor z is missing"),
    ("another dtype", "w", "F64", (2, 3), "tensor w is F32 (2, 3); it must be F64 (2, 3)"),
    ("another rank", "w", "F32", (6,), "tensor w is F32 (2, 3); it must be F32 (6)"),
    ("a scalar", "w", "F32", (), "tensor w is F32 (2, 3); it must be F32 ()"),
    ("another shape", "w", "F32", (3, 2), "tensor w is F32 (2, 3); it must be F32 (3, 2)"),
    ("another last dimension", "w", "F32", (2, 4), "tensor w is F32 (2, 3); it must be F32 (2, 4)"),
    ("a shape one longer", "w", "F32", (2, 3, 1), "tensor w is F32 (2, 3); it must be F32 (2, 3, 1)"),
]


@pytest.fixture(scope="module")
def parsed(rt):
    """The file of w (F32, (2, 3)) and b (I32, (1,)), parsed; its bytes kept alive."""
    image = safetensors_bytes({"w": ("F32", F4_2x3), "b": ("I32", np.array([7], "<i4"))})
    keep = rt.ffi.new("unsigned char[]", image)
    st = rt.ffi.new("exactc_safetensors *")
    assert rt.lib.exactc_st_parse(keep, len(image), st, rt.ffi.NULL, 0) == 0
    yield st
    rt.lib.exactc_st_close(st)


@pytest.mark.parametrize("case, name, dtype, shape, expected", LOOKUPS, ids=[row[0] for row in LOOKUPS])
def test_a_tensor_read_at_another_dtype_or_shape_is_refused(rt, parsed, case, name, dtype, shape, expected):
    ffi, lib = rt.ffi, rt.lib
    dims = ffi.new("int64_t[8]", list(shape))
    dst = ffi.new("unsigned char[64]", b"\xaa" * 64)
    err = ffi.new("char[512]")
    assert lib.exactc_st_read(parsed, name.encode(), dtype.encode(), len(shape), dims, dst, err, 512) == -1
    assert message(rt, err) == expected
    assert bytes(dst) == b"\xaa" * 64, "a refused read wrote its destination"


def test_a_tensor_read_at_its_own_dtype_and_shape_gives_its_bytes(rt, parsed):
    ffi, lib = rt.ffi, rt.lib
    dst = ffi.new("unsigned char[24]")
    assert lib.exactc_st_read(parsed, b"w", b"F32", 2, ffi.new("int64_t[8]", [2, 3]), dst, ffi.NULL, 0) == 0
    assert bytes(dst) == F4_2x3.tobytes()
    assert lib.exactc_st_read(parsed, b"b", b"I32", 1, ffi.new("int64_t[8]", [1]), dst, ffi.NULL, 0) == 0
    assert bytes(dst)[:4] == b"\x07\0\0\0"


def test_a_file_without_tensors_finds_none(rt):
    ffi, lib = rt.ffi, rt.lib
    image = safetensors_bytes({})
    st = ffi.new("exactc_safetensors *")
    assert lib.exactc_st_parse(image, len(image), st, ffi.NULL, 0) == 0
    try:
        assert st.count == 0 and lib.exactc_st_find(st, b"w") == ffi.NULL
        err = ffi.new("char[256]")
        assert lib.exactc_st_read(st, b"w", b"F32", 0, ffi.new("int64_t[8]"), ffi.NULL, err, 256) == -1
        assert message(rt, err) == "tensor w is missing"
    finally:
        lib.exactc_st_close(st)
