"""The C runtime's .npy reader and writer (runtime/exactc_npy.c) against numpy.

Grouped by what they protect: the writer's bytes are np.save's bytes; the reader reads
what numpy writes (versions 1.0, 2.0, 3.0) and what a person may write by hand; a C write
loads in numpy unchanged; every malformed file is refused with a message naming the field;
and no input, however mangled, makes the parser crash (checked in a child process built
with AddressSanitizer and UBSan, so that a crash fails a test instead of killing pytest).

Arrays are compared as bytes, never as floats: NaN payloads and -0.0 must survive.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import io
import os
import random
import re
import struct
import subprocess
import tokenize
import warnings

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from exactc.exporter.export import safetensors_bytes
from exactc.verify.build import (
    RUNTIME_DIR,
    STRICT_FLAGS,
    BuildOptions,
    load_library,
    pointer,
    runtime_source,
)

from installed import need  # tests/installed.py

CDEF = """
typedef enum { EXACTC_F64 = 0, EXACTC_F32 = 1, EXACTC_I32 = 2, EXACTC_I64 = 3 } exactc_dtype;
typedef struct {
    exactc_dtype dtype;
    int ndim;
    int64_t shape[8];
    void *data;
    size_t nbytes;
} exactc_array;
size_t exactc_dtype_size(exactc_dtype t);
int exactc_npy_parse(const unsigned char *buf, size_t len, exactc_array *out, char *err,
                     size_t errlen);
int exactc_npy_read(const char *path, exactc_array *out, char *err, size_t errlen);
int exactc_npy_format(const exactc_array *a, unsigned char **buf, size_t *len, char *err,
                      size_t errlen);
int exactc_npy_write(const char *path, const exactc_array *a, char *err, size_t errlen);
void exactc_array_free(exactc_array *a);
void free(void *p);
"""

DESCRS = ("<f8", "<f4", "<i4", "<i8")
CODE_OF = {"<f8": 0, "<f4": 1, "<i4": 2, "<i8": 3}
DESCR_OF = {v: k for k, v in CODE_OF.items()}
MAGIC = b"\x93NUMPY"


class NpyLibrary:
    """The loaded runtime, with a short repr: Hypothesis prints every argument of a
    failing example, and the Library's own repr carries the whole C source."""

    def __init__(self, library):
        self.ffi, self.lib, self.path = library.ffi, library.lib, library.path

    def __repr__(self):
        return f"<exactc_npy.c in {self.path.name}>"


@pytest.fixture(scope="module")
def npy():
    return NpyLibrary(load_library({"exactc_npy.c": runtime_source("exactc_npy.c")}, CDEF))


# ------------------------------------------------------------------------------------
# Calling the C side
# ------------------------------------------------------------------------------------


def c_parse(npy, data: bytes):
    """(rc, message, array or None) from exactc_npy_parse; the array is a copy."""
    ffi, lib = npy.ffi, npy.lib
    out = ffi.new("exactc_array *")
    err = ffi.new("char[256]")
    rc = lib.exactc_npy_parse(data, len(data), out, err, 256)
    if rc != 0:
        assert out.data == ffi.NULL and out.ndim == 0 and out.nbytes == 0, "out not zeroed"
        return rc, ffi.string(err).decode(), None
    try:
        return rc, "", array_from_c(npy, out)
    finally:
        lib.exactc_array_free(out)
        assert out.data == ffi.NULL and out.ndim == 0


def array_from_c(npy, out) -> np.ndarray:
    ffi = npy.ffi
    shape = tuple(out.shape[i] for i in range(out.ndim))
    raw = bytes(ffi.buffer(out.data, out.nbytes)) if out.nbytes else b""
    return np.frombuffer(raw, dtype=DESCR_OF[out.dtype]).reshape(shape)


def c_array(npy, a: np.ndarray):
    """An exactc_array viewing `a` (keep `a` alive while it is used)."""
    out = npy.ffi.new("exactc_array *")
    out.dtype = CODE_OF[a.dtype.str]
    out.ndim = a.ndim
    for i, d in enumerate(a.shape):
        out.shape[i] = d
    out.data = pointer(npy.ffi, a)
    out.nbytes = a.nbytes
    return out


def c_format(npy, a: np.ndarray) -> bytes:
    ffi, lib = npy.ffi, npy.lib
    a = np.array(a, order="C")  # not ascontiguousarray: it turns 0-d into 1-d
    buf = ffi.new("unsigned char **")
    n = ffi.new("size_t *")
    err = ffi.new("char[256]")
    rc = lib.exactc_npy_format(c_array(npy, a), buf, n, err, 256)
    assert rc == 0, ffi.string(err).decode()
    try:
        return bytes(ffi.buffer(buf[0], n[0]))
    finally:
        lib.free(buf[0])


def np_save_bytes(a: np.ndarray, version=None) -> bytes:
    f = io.BytesIO()
    if version is None:
        np.save(f, a)
    else:
        np.lib.format.write_array(f, a, version=version)
    return f.getvalue()


def assert_same_array(got: np.ndarray, want: np.ndarray):
    assert got.dtype.str == want.dtype.str
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes(), "data bytes differ"


# ------------------------------------------------------------------------------------
# Strategies
# ------------------------------------------------------------------------------------

# Bit patterns worth having in every dtype of a width: signed zeros, infinities, quiet,
# signalling and negative NaNs with payloads, the smallest and largest subnormals and
# normals, and the integer extremes.
SPECIAL_BITS = {
    4: [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFA5A5A5,
        0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x7FFFFFFF, 0xFFFFFFFF],
    8: [0, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
        0x7FF8000000000000, 0x7FF0000000000001, 0xFFF4DEADBEEF0123,
        0x0000000000000001, 0x000FFFFFFFFFFFFF, 0x0010000000000000,
        0x7FEFFFFFFFFFFFFF, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF],
}


@st.composite
def npy_arrays(draw, max_dims=5):
    """A C-order array of a supported dtype, 0-d to `max_dims`-d, sides 0 to 4, drawn as
    bit patterns; favours NaN payloads, -0.0, subnormals and integer extremes."""
    descr = draw(st.sampled_from(DESCRS))
    width = np.dtype(descr).itemsize
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=4))
    bits = st.one_of(st.sampled_from(SPECIAL_BITS[width]), st.integers(0, 2 ** (8 * width) - 1))
    raw = draw(hnp.arrays(np.dtype(f"<u{width}"), shape, elements=bits))
    return raw.view(descr)


def zeros(descr, shape):
    return np.zeros(shape, dtype=descr)


# Shapes whose header text is unusual: 0-d, 1-tuples, 8-d, a first dimension with many
# digits (numpy's growth padding shrinks), and zero-size arrays with huge dimensions up to
# numpy's own limit (product of nonzero dims times itemsize <= 2**63 - 1).
EDGE_ARRAYS = [
    np.array(-0.0),
    np.array(np.int64(-(2**63)), dtype="<i8"),
    zeros("<f4", (0,)),
    zeros("<i4", (1,)),
    zeros("<f8", (2, 3)),
    zeros("<i8", (1,) * 8),
    zeros("<f4", (2, 1, 2, 1, 2, 1, 2, 1)),
    zeros("<f8", (0, 2**60 - 1)),
    zeros("<i4", (2**61 - 1, 0)),
    zeros("<i8", (0, 10**18, 0)),
    zeros("<f4", (0,) * 8),
    zeros("<i4", (123456789012, 0)),
]


def edge_id(a):
    return f"{a.dtype.str}{a.shape}".replace(" ", "")


# ------------------------------------------------------------------------------------
# (1) The writer's bytes are np.save's bytes
# ------------------------------------------------------------------------------------


@given(npy_arrays())
@example(np.array(np.float32(-0.0)))
@example(np.zeros((0,), "<i8"))
def test_format_equals_np_save(npy, a):
    assert c_format(npy, a) == np_save_bytes(a)


@pytest.mark.parametrize("a", EDGE_ARRAYS, ids=edge_id)
def test_format_equals_np_save_edge_shapes(npy, a):
    assert c_format(npy, a) == np_save_bytes(a)


def test_format_header_is_numpy_text(npy):
    data = c_format(npy, np.zeros((2, 3), "<f4"))
    header = data[10 : 10 + struct.unpack("<H", data[8:10])[0]]
    assert header.startswith(b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }")
    assert header.endswith(b" \n") and (10 + len(header)) % 64 == 0
    assert b"(5,)" in c_format(npy, np.zeros(5, "<i8"))
    assert b"'shape': ()" in c_format(npy, np.array(1.0))


# ------------------------------------------------------------------------------------
# (2) The reader reads what numpy writes, in every version
# ------------------------------------------------------------------------------------


@given(npy_arrays(), st.sampled_from([None, (1, 0), (2, 0), (3, 0)]))
@example(np.array(np.float64("nan")), (3, 0))
def test_parse_reads_numpy_files(npy, a, version):
    rc, msg, got = c_parse(npy, np_save_bytes(a, version))
    assert rc == 0, msg
    assert_same_array(got, a)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("a", EDGE_ARRAYS, ids=edge_id)
def test_parse_reads_numpy_files_edge_shapes(npy, a, version):
    rc, msg, got = c_parse(npy, np_save_bytes(a, version))
    assert rc == 0, msg
    assert_same_array(got, a)


def handmade(header: str, data: bytes = b"", version=(1, 0), encoding="latin1") -> bytes:
    """A .npy image around a header text, with no padding added."""
    h = header.encode(encoding)
    size = struct.pack("<H" if version == (1, 0) else "<I", len(h))
    return MAGIC + bytes(version) + size + h + data


F4_2x2 = np.arange(4, dtype="<f4").reshape(2, 2)

# Headers a person or another writer may produce; all mean <f4, C order, shape (2, 2).
HANDMADE_HEADERS = [
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)}",
    '{"descr": "<f4", "fortran_order": False, "shape": (2, 2)}\n',
    "{'shape': (2, 2), 'fortran_order': False, 'descr': '<f4'}",
    "{'fortran_order':False,'shape':(2,2),'descr':'<f4',}",
    "  {\n  'descr' : '<f4' ,\n\t'fortran_order' : False ,\n  'shape' : ( 2 , 2 , ) ,\n}\n",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }" + " " * 3000 + "\n",
    "{'descr': '<f4', # a comment\n 'fortran_order': False, 'shape': (+2, 2)}  # end\n",
    "{'descr': '<f4', # a comment ended by CR\r 'fortran_order': False, 'shape': (2, 2)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }\f\r\n\t",
]


@pytest.mark.parametrize("header", HANDMADE_HEADERS,
                         ids=[f"handmade{i}" for i in range(len(HANDMADE_HEADERS))])
def test_parse_reads_handmade_headers(npy, header):
    for version in [(1, 0), (2, 0)]:
        data = handmade(header, F4_2x2.tobytes(), version)
        assert_same_array(numpy_reading(data), F4_2x2)  # the header means what we claim
        rc, msg, got = c_parse(npy, data)
        assert rc == 0, msg
        assert_same_array(got, F4_2x2)


def test_parse_version_3_utf8_header(npy):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }  \n"
    rc, msg, got = c_parse(npy, handmade(header, F4_2x2.tobytes(), (3, 0), "utf8"))
    assert rc == 0, msg
    assert_same_array(got, F4_2x2)


# ------------------------------------------------------------------------------------
# (3) A C write loads in numpy unchanged
# ------------------------------------------------------------------------------------


@given(npy_arrays())
def test_c_format_loads_in_numpy(npy, a):
    data = c_format(npy, a)
    assert_same_array(np.load(io.BytesIO(data)), a)
    rc, msg, again = c_parse(npy, data)
    assert rc == 0, msg
    assert_same_array(again, a)


def test_files_round_trip(npy, tmp_path):
    ffi, lib = npy.ffi, npy.lib
    a = np.array([[np.nan, -0.0, 5e-324]], dtype="<f8")
    err = ffi.new("char[256]")
    path = str(tmp_path / "c.npy").encode()
    assert lib.exactc_npy_write(path, c_array(npy, a), err, 256) == 0, ffi.string(err)
    assert_same_array(np.load(path.decode()), a)
    assert (tmp_path / "c.npy").read_bytes() == np_save_bytes(a)

    np.save(tmp_path / "np.npy", a)
    out = ffi.new("exactc_array *")
    assert lib.exactc_npy_read(str(tmp_path / "np.npy").encode(), out, err, 256) == 0
    assert_same_array(array_from_c(npy, out), a)
    lib.exactc_array_free(out)
    lib.exactc_array_free(out)  # freeing twice is harmless: free zeroes
    lib.exactc_array_free(ffi.NULL)

    big = np.arange(100_000, dtype="<i8").reshape(100, 1000)  # past the first read buffer
    np.save(tmp_path / "big.npy", big)
    assert lib.exactc_npy_read(str(tmp_path / "big.npy").encode(), out, err, 256) == 0
    assert_same_array(array_from_c(npy, out), big)
    lib.exactc_array_free(out)


def test_file_errors(npy, tmp_path):
    ffi, lib = npy.ffi, npy.lib
    err = ffi.new("char[256]")
    out = ffi.new("exactc_array *")
    missing = str(tmp_path / "missing.npy").encode()
    assert lib.exactc_npy_read(missing, out, err, 256) == -1
    assert "missing.npy" in ffi.string(err).decode()
    assert lib.exactc_npy_read(missing, out, ffi.NULL, 0) == -1

    a = np.zeros(3, "<f4")
    no_dir = str(tmp_path / "no" / "such" / "dir.npy").encode()
    assert lib.exactc_npy_write(no_dir, c_array(npy, a), err, 256) == -1
    assert "dir.npy" in ffi.string(err).decode()

    assert lib.exactc_npy_read(str(tmp_path).encode(), out, err, 256) == -1  # a directory
    assert str(tmp_path) in ffi.string(err).decode()

    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    assert lib.exactc_npy_read(str(tmp_path / "bad.npy").encode(), out, err, 256) == -1
    assert "magic" in ffi.string(err).decode()


@pytest.mark.needs("/dev/full")
def test_write_to_full_disk_is_an_error(npy):
    ffi, lib = npy.ffi, npy.lib
    err = ffi.new("char[256]")
    a = np.zeros(100_000, "<f8")  # more than any stdio buffer
    assert lib.exactc_npy_write(b"/dev/full", c_array(npy, a), err, 256) == -1
    assert "/dev/full" in ffi.string(err).decode()
    small = np.zeros(1, "<f4")  # fits the stdio buffer: the error shows only at fclose
    assert lib.exactc_npy_write(b"/dev/full", c_array(npy, small), err, 256) == -1


def test_format_refuses_inconsistent_arrays(npy):
    ffi, lib = npy.ffi, npy.lib
    a = np.zeros((2, 3), "<f4")
    buf = ffi.new("unsigned char **")
    n = ffi.new("size_t *")
    err = ffi.new("char[256]")

    def refuse(field, **changes):
        arr = c_array(npy, a)
        for k, v in changes.items():
            if k == "shape":
                for i, d in enumerate(v):
                    arr.shape[i] = d
            else:
                setattr(arr, k, v)
        assert lib.exactc_npy_format(arr, buf, n, err, 256) == -1
        assert buf[0] == ffi.NULL and n[0] == 0
        assert field in ffi.string(err).decode()
        assert lib.exactc_npy_format(arr, buf, n, ffi.NULL, 0) == -1

    refuse("nbytes", nbytes=23)
    refuse("shape", shape=(-2, 3))
    refuse("shape", shape=(2**62, 2**62))
    refuse("ndim", ndim=9)
    refuse("ndim", ndim=-1)
    refuse("dtype", dtype=7)
    refuse("data", data=ffi.NULL)


def test_dtype_size(npy):
    assert [npy.lib.exactc_dtype_size(i) for i in range(4)] == [8, 4, 4, 8]


# ------------------------------------------------------------------------------------
# (4) Refusals: each names its field
# ------------------------------------------------------------------------------------


def header_file(descr="'<f4'", fortran="False", shape="(2, 2)", data=None, version=(1, 0)):
    text = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}\n"
    return handmade(text, F4_2x2.tobytes() if data is None else data, version)


VALID = np_save_bytes(F4_2x2)
VALID_V2 = np_save_bytes(F4_2x2, (2, 0))

REFUSALS = {
    # descr
    "big-endian": (header_file(descr="'>f4'"), "descr '>f4' is big-endian"),
    "big-endian-network": (header_file(descr="'!f8'"), "descr"),
    "bool": (header_file(descr="'|b1'"), "descr '|b1' is not supported"),
    "f2": (header_file(descr="'<f2'"), "descr"),
    "complex": (header_file(descr="'<c8'"), "descr"),
    "object": (header_file(descr="'|O'"), "descr"),
    "uint32": (header_file(descr="'<u4'"), "descr"),
    "pipe-f4": (header_file(descr="'|f4'"), "descr"),
    "native-order": (header_file(descr="'=f4'"), "descr"),
    "structured": (header_file(descr="[('a', '<f4')]"), "descr is a list"),
    "descr-not-string": (header_file(descr="4"), "descr"),
    "descr-escape": (header_file(descr="'<f\\x34'"), "descr"),
    "descr-unterminated": (handmade("{'descr': '<f4"), "descr"),
    # fortran_order
    "fortran": (header_file(fortran="True"), "fortran_order True is not supported"),
    "fortran-int": (header_file(fortran="0"), "fortran_order"),
    "fortran-word": (header_file(fortran="Falsey"), "fortran_order"),
    # shape
    "9-dims": (header_file(shape="(1, 1, 1, 1, 1, 1, 1, 1, 1)", data=b"\0" * 4),
               "shape has 9 dimensions; at most 8"),
    "12-dims": (header_file(shape="(" + "1, " * 12 + ")"), "shape has 12 dimensions"),
    "negative": (header_file(shape="(-1, 2)"), "shape dimension 0 is -1"),
    "int-not-tuple": (header_file(shape="(5)"), "shape (5)"),
    "list": (header_file(shape="[2, 2]"), "shape"),
    "float-dim": (header_file(shape="(2.0, 2)"), "shape"),
    "hex-dim": (header_file(shape="(0x2, 2)"), "shape"),
    "leading-zero": (header_file(shape="(02, 2)"), "shape"),
    "empty-dim": (header_file(shape="(2, , 2)"), "shape"),
    "nested": (header_file(shape="((2, 2),)"), "shape"),
    "huge-dim": (header_file(shape="(99999999999999999999, 0)"), "shape dimension 0"),
    "product-overflow": (header_file(shape="(4294967296, 4294967296)"), "shape"),
    "zero-size-overflow": (header_file(descr="'<f8'", shape="(0, 1152921504606846976)",
                                       data=b""), "shape"),
    "shape-unclosed": (handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2"),
                       "shape"),
    "L-in-v3": (header_file(shape="(2L, 2L)", version=(3, 0)), "shape"),
    "lower-l": (header_file(shape="(2l, 2)"), "shape"),
    "line-continuation": (header_file(shape="(2, \\\n 2)"), "shape"),
    # keys and dict syntax
    "unknown-key": (handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), "
                             "'extra': 1}", F4_2x2.tobytes()), "key 'extra' is unknown"),
    "missing-shape": (handmade("{'descr': '<f4', 'fortran_order': False}", b"\0" * 4),
                      "no 'shape' key"),
    "missing-descr": (handmade("{'fortran_order': False, 'shape': (1,)}", b"\0" * 4),
                      "no 'descr' key"),
    "missing-fortran": (handmade("{'descr': '<f4', 'shape': (1,)}", b"\0" * 4),
                        "no 'fortran_order' key"),
    "duplicate-key": (handmade("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                               "'shape': (1,)}", b"\0" * 4), "'descr' appears twice"),
    "no-brace": (handmade("'descr': '<f4'"), "header expected '{'"),
    "no-colon": (handmade("{'descr' '<f4'}"), "header expected ':'"),
    "no-comma": (handmade("{'descr': '<f4' 'shape': (1,)}"), "header"),
    "after-brace": (handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x",
                             b"\0" * 4), "after the closing '}'"),
    "nul-padding": (handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\0",
                             b"\0" * 4), "header byte 55 is 0x00"),
    "latin1-comment": (handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)} "
                                "# \xe9t\xe9", F4_2x2.tobytes()), "ASCII"),
    "utf8-comment": (handmade("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)} "
                              "# \u00e9t\u00e9", F4_2x2.tobytes(), (3, 0), "utf8"), "ASCII"),
    "key-not-string": (handmade("{descr: '<f4'}"), "key"),
    "empty-header": (handmade(""), "header"),
    # magic, version, lengths, data
    "empty-file": (b"", "not a .npy file (magic)"),
    "magic": (b"\x93NUMPX" + VALID[6:], "not a .npy file (magic)"),
    "magic-prefix": (b"\x93NU", "magic"),
    "zip": (b"PK\x03\x04" + VALID, "magic"),
    "version-4": (MAGIC + b"\x04\x00" + VALID[8:], "version 4.0"),
    "version-1.1": (MAGIC + b"\x01\x01" + VALID[8:], "version 1.1"),
    "version-0": (MAGIC + b"\x00\x00" + VALID[8:], "version"),
    "no-length": (MAGIC + b"\x01\x00\x10", "header length"),
    "header-length-v1": (VALID[:8] + b"\xff\xff" + VALID[10:], "header length 65535"),
    "header-length-v2": (VALID_V2[:8] + b"\xff\xff\xff\xff" + VALID_V2[12:],
                         "header length 4294967295"),
    "data-short": (VALID[:-4], "npy: data is 12 bytes; shape (2, 2) of <f4 needs 16"),
    "data-long": (VALID + b"\0" * 4, "data is 20 bytes; shape (2, 2) of <f4 needs 16"),
    "data-zero-size-extra": (np_save_bytes(np.zeros((0, 3), "<i8")) + b"\0", "data is 1 bytes"),
    "data-0d-missing": (np_save_bytes(np.array(1.0))[:-8], "data is 0 bytes; shape () of <f8"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals_name_the_field(npy, name):
    data, expected = REFUSALS[name]
    rc, msg, _ = c_parse(npy, data)
    assert rc == -1
    assert expected in msg, f"{name}: {msg!r} lacks {expected!r}"
    assert msg.startswith("npy: ")


def test_numpy_also_refuses_what_we_refuse():
    """Cross-check: the refusals that are malformed for numpy too, not just unsupported."""
    for name in ["int-not-tuple", "list", "negative", "unknown-key", "missing-shape",
                 "magic", "version-4", "data-short", "zero-size-overflow"]:
        with pytest.raises(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.load(io.BytesIO(REFUSALS[name][0]), allow_pickle=False)


def test_error_buffer_limits(npy):
    """err may be NULL, errlen 0 or tiny: nothing is written past errlen, and the message
    is always terminated."""
    ffi, lib = npy.ffi, npy.lib
    bad = REFUSALS["big-endian"][0]
    out = ffi.new("exactc_array *")
    assert lib.exactc_npy_parse(bad, len(bad), out, ffi.NULL, 0) == -1
    assert lib.exactc_npy_parse(bad, len(bad), out, ffi.NULL, 100) == -1
    for errlen in [0, 1, 2, 5, 17]:
        err = ffi.new("char[64]", b"X" * 63)
        assert lib.exactc_npy_parse(bad, len(bad), out, err, errlen) == -1
        raw = bytes(ffi.buffer(err, 64))
        assert raw[errlen:63] == b"X" * (63 - errlen), "wrote past errlen"
        if errlen:
            assert b"\0" in raw[:errlen]
    assert lib.exactc_npy_parse(ffi.NULL, 0, out, ffi.NULL, 0) == -1
    assert lib.exactc_npy_parse(VALID, len(VALID), ffi.NULL, ffi.NULL, 0) == -1


# Valid files of every version, dtype and rank class; the truncation sweep and the fuzz
# loop start from these.
SEEDS = [
    VALID,
    VALID_V2,
    np_save_bytes(np.arange(6, dtype="<i8").reshape(1, 2, 3), (3, 0)),
    np_save_bytes(np.array(-0.0)),
    np_save_bytes(np.zeros((0,), "<i4")),
    np_save_bytes(np.arange(3, dtype="<i4")[::-1].copy()),
    np_save_bytes(np.ones((1,) * 8, "<f8")),
    handmade(HANDMADE_HEADERS[5], F4_2x2.tobytes()),
    handmade(HANDMADE_HEADERS[6], F4_2x2.tobytes(), (2, 0)),
]

# Zero-size arrays with unpadded headers: the file ends where the header text ends, so a
# parser that reads one byte past the header reads past the buffer, where AddressSanitizer
# sees it.
HEADER_ONLY = [
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (0,)}", (1, 0)),
    ('{"shape": (0, 3), "descr": "<i8", "fortran_order": False, }', (2, 0)),
    ("{'descr':'<f8','fortran_order':False,'shape':(1,1,1,1,1,1,1,0)}", (3, 0)),
    ("{'descr': '<i4', 'fortran_order': False, 'shape': (0L, 2L)}", (1, 0)),
]
SEEDS += [handmade(text, b"", version) for text, version in HEADER_ONLY]


def header_prefixes():
    """Every proper prefix of each HEADER_ONLY text, as a file whose header length says
    exactly that prefix and which holds nothing after it."""
    for text, version in HEADER_ONLY:
        for cut in range(len(text)):
            yield handmade(text[:cut], b"", version)


def test_every_truncation_is_refused(npy):
    for seed in SEEDS:
        assert c_parse(npy, seed)[0] == 0
        for cut in range(len(seed)):
            rc, msg, _ = c_parse(npy, seed[:cut])
            assert rc == -1 and msg.startswith("npy: "), (cut, seed[:cut])
    for data in header_prefixes():
        rc, msg, _ = c_parse(npy, data)
        assert rc == -1 and msg.startswith("npy: "), data


# ------------------------------------------------------------------------------------
# (5) Fuzzing: mutated files in a sanitized child process
# ------------------------------------------------------------------------------------

# Reads records (u32 little-endian length, bytes) and parses each from a heap block of
# exactly its length, so that AddressSanitizer sees a read one byte past the end. An
# accepted file must survive format -> parse unchanged; a refused one must leave a message
# and a zeroed array. Prints one line per record, "R" or "A dtype ndim dims... fnv1a", for
# the differential check against numpy; exits 0 only if every record behaved.
FUZZ_DRIVER = r"""
#include "exactc_rt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 14695981039346656037u;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211u;
    return h;
}

static int check(const unsigned char *rec, size_t len) {
    unsigned char *buf = malloc(len ? len : 1);
    memcpy(buf, rec, len);
    exactc_array a, b;
    char *err = malloc(100);
    char *tiny = malloc(7);
    int ok = 1;
    int rc = exactc_npy_parse(buf, len, &a, err, 100);
    if (exactc_npy_parse(buf, len, &b, NULL, 0) != rc) ok = 0;
    if (rc == 0) exactc_array_free(&b);
    if (exactc_npy_parse(buf, len, &b, tiny, 7) != rc) ok = 0;
    if (rc == 0) exactc_array_free(&b);
    if (rc != 0) {
        if (err[0] == '\0' || a.data != NULL || a.ndim != 0 || strlen(tiny) > 6) ok = 0;
        printf("R\n");
    } else {
        printf("A %d %d", (int)a.dtype, a.ndim);
        for (int i = 0; i < a.ndim; i++) printf(" %lld", (long long)a.shape[i]);
        printf(" %llu\n", (unsigned long long)fnv1a(a.data, a.nbytes));
        unsigned char *out;
        size_t outlen;
        if (exactc_npy_format(&a, &out, &outlen, err, 100) != 0) {
            ok = 0;
        } else {
            if (exactc_npy_parse(out, outlen, &b, err, 100) != 0 || b.dtype != a.dtype ||
                b.ndim != a.ndim || b.nbytes != a.nbytes ||
                memcmp(b.shape, a.shape, sizeof a.shape) != 0 ||
                (a.nbytes && memcmp(a.data, b.data, a.nbytes) != 0))
                ok = 0;
            exactc_array_free(&b);
            free(out);
        }
        exactc_array_free(&a);
    }
    if (!ok) fprintf(stderr, "inconsistent result (rc %d): %s\n", rc, err);
    free(tiny);
    free(err);
    free(buf);
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *all = malloc((size_t)size + 1);
    if (fread(all, 1, (size_t)size, f) != (size_t)size) return 2;
    fclose(f);
    long pos = 0, index = 0;
    while (pos + 4 <= size) {
        size_t len = (size_t)all[pos] | (size_t)all[pos + 1] << 8 |
                     (size_t)all[pos + 2] << 16 | (size_t)all[pos + 3] << 24;
        pos += 4;
        if ((long)len > size - pos) return 2;
        if (!check(all + pos, len)) {
            fprintf(stderr, "record %ld\n", index);
            return 1;
        }
        pos += (long)len;
        index++;
    }
    free(all);
    return 0;
}
"""


@pytest.fixture(scope="module")
def fuzz_driver(tmp_path_factory):
    need("gcc")
    work = tmp_path_factory.mktemp("npy_fuzz")
    (work / "driver.c").write_text(FUZZ_DRIVER)
    exe = work / "driver"
    cmd = ["gcc", *STRICT_FLAGS, "-O1", "-g", "-Wall", "-Wextra", "-Werror",
           "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           f"-I{RUNTIME_DIR}", "-o", str(exe), str(work / "driver.c"),
           str(RUNTIME_DIR / "exactc_npy.c")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    return exe


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to four edits, most of them in the first 128 bytes (magic, length, header)."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.random()
        pos = rng.randrange(max(1, min(len(b), 128) if rng.random() < 0.8 else len(b)))
        if kind < 0.35 and b:
            b[min(pos, len(b) - 1)] = rng.randrange(256)
        elif kind < 0.45 and b:
            b[min(pos, len(b) - 1)] = rng.choice(b" ,:(){}'\"-0129LTF<>|\n\\#")
        elif kind < 0.5:  # a token of the header grammar: dims, huge numbers, keys
            b[pos:pos] = rng.choice([b"1, ", b"0, ", b"4294967296, ", b"99999999999999999999",
                                     b"'shape': (1,), ", b"True", b"'", b"\\\n", b"# c\n"])
        elif kind < 0.58:
            b.insert(pos, rng.randrange(256))
        elif kind < 0.66 and b:
            del b[min(pos, len(b) - 1)]
        elif kind < 0.74 and b:  # repeat a short slice: more dims, more digits, more keys
            n = rng.randint(1, 6)
            b[pos:pos] = b[pos : pos + n]
        elif kind < 0.8:
            del b[rng.randrange(len(b) + 1):]
        elif kind < 0.86:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 9)))
        elif kind < 0.93 and len(b) >= 12:  # extreme or shifted header lengths
            b[8:12] = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x01\x00\x00\x80",
                                  bytes([(b[8] + rng.randint(-3, 3)) % 256]) + b[9:12]])
        elif len(b) >= 8:  # another version
            b[6:8] = bytes([rng.choice([1, 2, 3]), 0])
    return bytes(b)


def fnv1a(data: bytes) -> int:
    h = 14695981039346656037
    for byte in data:
        h = ((h ^ byte) * 1099511628211) % 2**64
    return h


def split_npy(data: bytes):
    """(version, header text, data bytes) of a file whose magic, version and header length
    are sound, else None."""
    if len(data) < 10 or data[:6] != MAGIC or data[6] not in (1, 2, 3) or data[7] != 0:
        return None
    fmt, start = ("<H", 10) if data[6] == 1 else ("<I", 12)
    if len(data) < start:
        return None
    (hlen,) = struct.unpack(fmt, data[start - struct.calcsize(fmt) : start])
    if start + hlen > len(data):
        return None
    encoding = "utf8" if data[6] == 3 else "latin1"
    try:
        text = data[start : start + hlen].decode(encoding)
    except UnicodeDecodeError:
        return None
    return (data[6], 0), text, data[start + hlen :]


def numpy_reading(data: bytes):
    """np.load's result for `data`, or None if numpy refuses it. Whitespace around the
    dict is first trimmed: Python's tokenizer refuses some of it ("{...}\n  " is an
    unexpected indent), and exactc deliberately does not copy that rule."""
    parts = split_npy(data)
    if parts is not None:
        version, text, rest = parts
        data = handmade(text.strip(" \t\r\n\f") + "\n", rest, version,
                        "utf8" if version == (3, 0) else "latin1")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.load(io.BytesIO(data), allow_pickle=False)
    except Exception:
        return None


DECIMAL = re.compile(r"0|[1-9][0-9]*")


def exactc_syntax_dict(text: str, version):
    """The header's dict if it is written in the subset of Python literal syntax that
    exactc reads, else None. The subset: plain quoted strings without escapes or
    prefixes, plain decimal integers with at most one sign (and Python 2's L suffix
    before version 3.0), True and False, one level of parentheses, each key once,
    comments and whitespace anywhere; ASCII only, no line continuations."""
    if not text.isascii() or "\0" in text or "\\" in text:
        return None
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                  if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT,
                                    tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)]
    except (tokenize.TokenError, SyntaxError):
        return None
    keys = []
    for i, tok in enumerate(tokens):
        before = tokens[i - 1].string if i else ""
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if tok.type == tokenize.STRING:
            body = tok.string[1:-1]
            if tok.string[0] not in "'\"" or tok.string[0] in body or "\\" in body:
                return None
            if i and tokens[i - 1].type == tokenize.STRING:
                return None  # implicit concatenation
            if after is not None and after.string == ":":
                keys.append(body)
        elif tok.type == tokenize.NUMBER:
            if not DECIMAL.fullmatch(tok.string):
                return None
        elif tok.type == tokenize.NAME:
            if tok.string == "L":  # right after the digits, as Python 2 wrote it
                if (version == (3, 0) or tokens[i - 1].type != tokenize.NUMBER
                        or tok.start != tokens[i - 1].end):
                    return None
            elif tok.string not in ("True", "False"):
                return None
        elif tok.string in "+-":
            if before not in ("(", ",") or after is None or after.type != tokenize.NUMBER:
                return None
        elif tok.string == "(":
            if before != ":":
                return None
        elif tok.string not in ("{", "}", ":", ",", ")"):
            return None
    if len(keys) != len(set(keys)):
        return None
    kept = [t.string for t in tokens if t.type != tokenize.NAME or t.string != "L"]
    try:
        d = ast.literal_eval(" ".join(kept))
    except (SyntaxError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def exactc_should_read(data: bytes, a: np.ndarray) -> bool:
    """Whether exactc promises to read a file that numpy read as `a`: a descr written as
    one of DESCRS, fortran_order False, at most 8 integer dimensions, no bytes after the
    data, and a header in the syntax exactc reads."""
    version, text, rest = split_npy(data)
    d = exactc_syntax_dict(text, version)
    return (d is not None and d["descr"] in DESCRS and d["fortran_order"] is False
            and len(d["shape"]) <= 8 and all(type(x) is int for x in d["shape"])
            and len(rest) == a.nbytes)


def test_mutated_files_never_crash(fuzz_driver, tmp_path):
    rng = random.Random(20240607)
    cases = [seed[:cut] for seed in SEEDS for cut in range(len(seed) + 1)]
    cases += list(header_prefixes())
    cases += [mutate(rng, rng.choice(SEEDS)) for _ in range(4000)]
    corpus = tmp_path / "corpus.bin"
    corpus.write_bytes(b"".join(struct.pack("<I", len(c)) + c for c in cases))
    proc = subprocess.run([str(fuzz_driver), str(corpus)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"driver exit {proc.returncode}\n{proc.stderr[-4000:]}"
    results = proc.stdout.splitlines()
    assert len(results) == len(cases)

    # Differential check against np.load: what exactc accepts, numpy reads the same way;
    # what exactc refuses, numpy refuses too or reads as something exactc does not promise.
    accepted = 0
    disagreements = []
    for data, line in zip(cases, results):
        a = numpy_reading(data)
        if line == "R":
            if a is not None and exactc_should_read(data, a):
                disagreements.append(("exactc refused", data))
            continue
        accepted += 1
        fields = [int(x) for x in line.split()[1:]]
        dtype, ndim, shape, digest = fields[0], fields[1], tuple(fields[2:-1]), fields[-1]
        if a is None or (DESCR_OF[dtype], ndim, shape) != (a.dtype.str, a.ndim, a.shape) \
                or digest != fnv1a(a.tobytes()):
            disagreements.append((f"exactc read {line}", data))
    assert not disagreements, "\n".join(f"{why}: {data!r}" for why, data in disagreements[:10])
    assert accepted > len(SEEDS) and accepted < len(cases) // 2, accepted


# ------------------------------------------------------------------------------------
# Builds: warning-free under both compilers
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cc", ["gcc", "clang"])
@pytest.mark.parametrize("opt", ["-O0", "-O3"])
def test_builds_without_warnings(cc, opt):
    need(cc)
    lib = load_library({"exactc_npy.c": runtime_source("exactc_npy.c")}, CDEF,
                       BuildOptions(cc=cc, opt=opt))
    data = np_save_bytes(F4_2x2)
    out = lib.ffi.new("exactc_array *")
    assert lib.lib.exactc_npy_parse(data, len(data), out, lib.ffi.NULL, 0) == 0
    lib.lib.exactc_array_free(out)


READERS_CDEF = """
typedef enum { EXACTC_F64 = 0, EXACTC_F32 = 1, EXACTC_I32 = 2, EXACTC_I64 = 3 } exactc_dtype;
typedef struct { exactc_dtype dtype; int ndim; int64_t shape[8]; void *data; size_t nbytes; } exactc_array;
size_t exactc_dtype_size(exactc_dtype t);
const char *exactc_dtype_name(exactc_dtype t);
int exactc_npy_parse(const unsigned char *buf, size_t len, exactc_array *out, char *err, size_t errlen);
int exactc_npy_read(const char *path, exactc_array *out, char *err, size_t errlen);
int exactc_npy_read_stream(FILE *f, const char *path, exactc_array *out, char *err, size_t errlen);
int exactc_read_more(FILE *f, const char *path, unsigned char **buf, size_t *len, size_t want,
                     char *err, size_t errlen);
int exactc_npy_format(const exactc_array *a, unsigned char **buf, size_t *len, char *err, size_t errlen);
int exactc_npy_write(const char *path, const exactc_array *a, char *err, size_t errlen);
void exactc_array_free(exactc_array *a);
typedef struct { char *name; char dtype[12]; int ndim; int64_t shape[8]; uint64_t begin, end; } exactc_st_tensor;
typedef struct { const unsigned char *bytes; size_t len; size_t data_start; exactc_st_tensor *tensors; size_t count;
                 int owned; } exactc_safetensors;
int exactc_st_parse(const unsigned char *buf, size_t len, exactc_safetensors *st, char *err, size_t errlen);
int exactc_st_open(const char *path, exactc_safetensors *st, char *err, size_t errlen);
int exactc_st_open_stream(FILE *f, const char *path, exactc_safetensors *st, char *err, size_t errlen);
const exactc_st_tensor *exactc_st_find(const exactc_safetensors *st, const char *name);
int exactc_st_read(const exactc_safetensors *st, const char *name, const char *dtype, int ndim,
                   const int64_t *shape, void *dst, char *err, size_t errlen);
void exactc_st_close(exactc_safetensors *st);
FILE *fdopen(int fd, const char *mode);
int fclose(FILE *f);
void free(void *p);
"""

SIZE_MAX = 2 ** (8 * struct.calcsize("N")) - 1

F4_2x3 = np.arange(6, dtype="<f4").reshape(2, 3)


@pytest.fixture(scope="module")
def rt():
    """Both readers in one library, as tests/test_safetensors.py loads them."""
    return load_library({name: runtime_source(name) for name in ("exactc_safetensors.c", "exactc_npy.c")}, READERS_CDEF)


def message(rt, err) -> str:
    return rt.ffi.string(err).decode()


@contextlib.contextmanager
def pipe_stream(rt, data: bytes, fails_after: bool):
    """A FILE* reading `data` from a pipe. fails_after: the pipe is non-blocking and its
    writing end stays open, so the read after the last byte fails (EAGAIN), as a real
    read error does; else the writing end is closed and the stream ends there."""
    r, w = os.pipe()
    try:
        os.write(w, data)  # a few hundred bytes: well within any pipe's buffer
        if fails_after:
            os.set_blocking(r, False)
        else:
            os.close(w)
            w = -1
        f = rt.lib.fdopen(r, b"rb")
        assert f != rt.ffi.NULL
        r = -1  # the stream owns it now
        try:
            yield f
        finally:
            rt.lib.fclose(f)
    finally:
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)


# ---- the guards of the public functions


class Arguments:
    """Good arguments for every function of exactc_npy.c, kept alive for one test: the
    (2, 3) <f4 array, its file, an output array, an output buffer and its length."""

    def __init__(self, rt, tmp_path):
        ffi = rt.ffi
        self.image = np_save_bytes(F4_2x3)
        self.keep = F4_2x3.copy()
        self.array = c_array(rt, self.keep)
        self.path = str(tmp_path / "a.npy").encode()
        (tmp_path / "a.npy").write_bytes(self.image)
        self.unwritten = tmp_path / "b.npy"
        self.out = ffi.new("exactc_array *")
        self.buf, self.len = ffi.new("unsigned char **"), ffi.new("size_t *")


# (case, the whole message, the call with one argument NULL: (lib, NULL, arguments, err) -> rc)
GUARDS = [
    ("parse: no output array", "npy: no output array given",
     lambda lib, null, a, err: lib.exactc_npy_parse(a.image, len(a.image), null, err, 256)),
    ("parse: no input buffer", "npy: no input buffer given",
     lambda lib, null, a, err: lib.exactc_npy_parse(null, len(a.image), a.out, err, 256)),
    ("parse: no buffer and no bytes", "npy: not a .npy file (magic)",
     lambda lib, null, a, err: lib.exactc_npy_parse(null, 0, a.out, err, 256)),
    ("read: no output array", "npy: no output array given",
     lambda lib, null, a, err: lib.exactc_npy_read(a.path, null, err, 256)),
    ("read: no path", "npy: no path given", lambda lib, null, a, err: lib.exactc_npy_read(null, a.out, err, 256)),
    ("read_stream: no output array", "npy: no output array given",
     lambda lib, null, a, err: lib.exactc_npy_read_stream(null, a.path, null, err, 256)),
    ("format: no output buffer", "npy: no output buffer given",
     lambda lib, null, a, err: lib.exactc_npy_format(a.array, null, a.len, err, 256)),
    ("format: no output length", "npy: no output buffer given",
     lambda lib, null, a, err: lib.exactc_npy_format(a.array, a.buf, null, err, 256)),
    ("format: no array", "npy: no array given",
     lambda lib, null, a, err: lib.exactc_npy_format(null, a.buf, a.len, err, 256)),
    ("write: no path", "npy: no path given", lambda lib, null, a, err: lib.exactc_npy_write(null, a.array, err, 256)),
    ("write: no array", "npy: no array given",
     lambda lib, null, a, err: lib.exactc_npy_write(str(a.unwritten).encode(), null, err, 256)),
]


@pytest.mark.parametrize("case, expected, call", GUARDS, ids=[row[0] for row in GUARDS])
def test_a_null_argument_is_refused_by_name(rt, tmp_path, case, expected, call):
    ffi = rt.ffi
    a = Arguments(rt, tmp_path)
    err = ffi.new("char[256]")
    assert call(rt.lib, ffi.NULL, a, err) == -1
    assert message(rt, err) == expected
    assert (a.out.data, a.out.ndim, a.out.nbytes) == (ffi.NULL, 0, 0), "a refused parse left an array"
    assert a.buf[0] == ffi.NULL and a.len[0] == 0, "a refused format left a buffer"
    assert not a.unwritten.exists(), "a refused write made its file"


def test_freeing_and_closing_null_or_twice_is_harmless(rt):
    """exactc_array_free and exactc_st_close take NULL, and leave what they free zeroed
    so that a second call frees nothing twice."""
    ffi, lib = rt.ffi, rt.lib
    lib.exactc_array_free(ffi.NULL)
    lib.exactc_st_close(ffi.NULL)
    data = np_save_bytes(F4_2x3)
    out = ffi.new("exactc_array *")
    assert lib.exactc_npy_parse(data, len(data), out, ffi.NULL, 0) == 0
    lib.exactc_array_free(out)
    assert (out.data, out.ndim, out.nbytes) == (ffi.NULL, 0, 0)
    lib.exactc_array_free(out)
    image = safetensors_bytes({"w": ("F32", np.zeros(2, "<f4"))})
    st = ffi.new("exactc_safetensors *")
    assert lib.exactc_st_parse(image, len(image), st, ffi.NULL, 0) == 0 and st.count == 1
    lib.exactc_st_close(st)
    assert (st.tensors, st.count, st.bytes) == (ffi.NULL, 0, ffi.NULL)
    lib.exactc_st_close(st)


# ---- the writer's refusals of an array that is not one


def npy_header_bytes(descr: str, shape: tuple[int, ...]) -> int:
    """What exactc_npy_format puts before the data: np.save's header, its growth room
    and padding included (numpy/lib/format.py, _wrap_header)."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    text += " " * (21 - len(repr(shape[0]))) if shape else ""
    return 10 + len(text) + 64 - (10 + len(text) + 1) % 64 + 1


HUGE = 2**59  # f8 elements: 2**62 bytes, within INT64_MAX, beyond any address space

# (case, the exactc_array's fields changed from a (2, 3) <f4 array's, the whole message)
BAD_ARRAYS = [
    ("a dtype past the enum", {"dtype": 7},
     "npy: dtype value 7 is not an exactc_dtype: EXACTC_F64 ('<f8'), EXACTC_F32 ('<f4'), EXACTC_I32 ('<i4') "
     "or EXACTC_I64 ('<i8')"),
    # gcc's type for this enum is unsigned int: the value all ones, which the message prints as an int
    ("a dtype of all ones", {"dtype": 2**32 - 1}, "npy: dtype value -1 is not an exactc_dtype: EXACTC_F64 ('<f8'), "
     "EXACTC_F32 ('<f4'), EXACTC_I32 ('<i4') or EXACTC_I64 ('<i8')"),
    ("nine dimensions", {"ndim": 9}, "npy: ndim is 9; it must be 0 to 8"),
    ("a negative ndim", {"ndim": -1}, "npy: ndim is -1; it must be 0 to 8"),
    ("a negative dimension", {"shape": (2, -3)},
     "npy: shape (2, -3): dimension 1 is negative; dimensions must be >= 0"),
    ("the most negative dimension", {"ndim": 1, "shape": (-2**63,)},
     "npy: shape (-9223372036854775808,): dimension 0 is negative; dimensions must be >= 0"),
    ("a byte count past INT64_MAX", {"shape": (2**62, 2**62)},
     "npy: shape (4611686018427387904, 4611686018427387904) of <f4 is too large: its byte count overflows"),
    ("a zero and a dimension too large", {"shape": (0, 2**62)},
     "npy: shape (0, 4611686018427387904) of <f4 is too large: its byte count overflows"),
    ("nbytes one short", {"nbytes": 23}, "npy: nbytes is 23; shape (2, 3) of <f4 needs 24"),
    ("nbytes for another dtype", {"dtype": CODE_OF["<f8"]}, "npy: nbytes is 24; shape (2, 3) of <f8 needs 48"),
    ("no data", {"data": None}, "npy: data is NULL for 24 bytes"),
    ("more bytes than memory holds", {"dtype": CODE_OF["<f8"], "ndim": 1, "shape": (HUGE,), "nbytes": 8 * HUGE},
     f"npy: out of memory for {npy_header_bytes('<f8', (HUGE,)) + 8 * HUGE} bytes"),
]


def bad_array(rt, keep: np.ndarray, changes: dict):
    arr = c_array(rt, keep)
    for field, value in changes.items():
        if field == "shape":
            for i, d in enumerate(value):
                arr.shape[i] = d
        elif field == "data":
            arr.data = rt.ffi.NULL
        else:
            setattr(arr, field, value)
    return arr


@pytest.mark.parametrize("case, changes, expected", BAD_ARRAYS, ids=[row[0] for row in BAD_ARRAYS])
def test_format_and_write_refuse_an_array_that_is_not_one(rt, tmp_path, case, changes, expected):
    ffi, lib = rt.ffi, rt.lib
    keep = F4_2x3.copy()
    arr = bad_array(rt, keep, changes)
    buf, n = ffi.new("unsigned char **"), ffi.new("size_t *")
    err = ffi.new("char[256]")
    assert lib.exactc_npy_format(arr, buf, n, err, 256) == -1
    assert message(rt, err) == expected
    assert buf[0] == ffi.NULL and n[0] == 0
    path = tmp_path / "refused.npy"
    err = ffi.new("char[256]")
    assert lib.exactc_npy_write(str(path).encode(), arr, err, 256) == -1
    assert message(rt, err) == expected
    assert not path.exists(), f"{case}: a refused array made its file"


def test_an_array_that_is_one_formats_as_numpy_saves_it(rt):
    """The other side of the table: the (2, 3) <f4 array every row starts from formats."""
    ffi, lib = rt.ffi, rt.lib
    buf, n = ffi.new("unsigned char **"), ffi.new("size_t *")
    assert lib.exactc_npy_format(c_array(rt, F4_2x3), buf, n, ffi.NULL, 0) == 0
    try:
        assert bytes(ffi.buffer(buf[0], n[0])) == np_save_bytes(F4_2x3)
    finally:
        lib.free(buf[0])


# ---- read errors at each step of the stepwise reads


NPY = np_save_bytes(F4_2x3)

NPY_DATA_AT = len(NPY) - F4_2x3.nbytes

ST = safetensors_bytes({"w": ("F32", F4_2x3)})

# (the step that fails, the bytes the stream holds before its read error)
NPY_STEPS = [
    ("the magic and version", b""),
    ("the header length", NPY[:8]),
    ("the header", NPY[:10]),
    ("the data", NPY[:NPY_DATA_AT]),
    ("the byte after the data", NPY),
]

EAGAIN = os.strerror(errno.EAGAIN)


@pytest.mark.parametrize("step, held", NPY_STEPS, ids=[s for s, _ in NPY_STEPS])
def test_an_npy_stream_that_fails_is_a_read_error(rt, step, held):
    """Each step of exactc_npy_read_stream reports a failing read as one, naming the
    stream: taken for the end of the file, it would say 'truncated' or read the array."""
    ffi, lib = rt.ffi, rt.lib
    out = ffi.new("exactc_array *")
    err = ffi.new("char[512]")
    with pipe_stream(rt, held, fails_after=True) as f:
        assert lib.exactc_npy_read_stream(f, b"pipe.npy", out, err, 512) == -1
    assert message(rt, err) == f"npy: error reading 'pipe.npy': {EAGAIN}"
    assert (out.data, out.ndim, out.nbytes) == (ffi.NULL, 0, 0)


def test_the_same_bytes_on_a_closed_pipe_read_whole(rt):
    """The control of the two tables above: the stream that ends instead of failing."""
    ffi, lib = rt.ffi, rt.lib
    out = ffi.new("exactc_array *")
    with pipe_stream(rt, NPY, fails_after=False) as f:
        assert lib.exactc_npy_read_stream(f, b"pipe.npy", out, ffi.NULL, 0) == 0
    try:
        assert (out.ndim, tuple(out.shape)[:2], out.nbytes) == (2, (2, 3), 24)
        assert bytes(ffi.buffer(out.data, out.nbytes)) == F4_2x3.tobytes()
    finally:
        lib.exactc_array_free(out)
    st = ffi.new("exactc_safetensors *")
    with pipe_stream(rt, ST, fails_after=False) as f:
        assert lib.exactc_st_open_stream(f, b"pipe.safetensors", st, ffi.NULL, 0) == 0
    try:
        assert st.count == 1 and st.owned == 1 and bytes(ffi.buffer(st.bytes, st.len)) == ST
    finally:
        lib.exactc_st_close(st)


def test_a_read_past_what_memory_can_address_is_refused_before_it_starts(rt):
    """exactc_read_more refuses a request whose end would not fit in a size_t, and one
    whose buffer cannot be had, naming the stream and the size, the buffer untouched."""
    ffi, lib = rt.ffi, rt.lib
    buf, n = ffi.new("unsigned char **"), ffi.new("size_t *")
    err = ffi.new("char[256]")
    with pipe_stream(rt, b"abc", fails_after=False) as f:
        for have, want, expected in [
            (SIZE_MAX - 1, 2, "'pipe': 2 more bytes do not fit in memory"),
            # the largest request that fits a size_t: asked for, and more than any address space
            (SIZE_MAX - 1, 1, f"out of memory reading 'pipe' ({SIZE_MAX} bytes)"),
            (2**62, 1, f"out of memory reading 'pipe' ({2**62 + 1} bytes)"),
        ]:
            n[0] = have
            assert lib.exactc_read_more(f, b"pipe", buf, n, want, err, 256) == -1
            assert message(rt, err) == expected
            assert buf[0] == ffi.NULL and n[0] == have
        n[0] = 0  # the same stream, asked sanely, still holds its bytes
        assert lib.exactc_read_more(f, b"pipe", buf, n, 8, err, 256) == 0
        assert n[0] == 3 and bytes(ffi.buffer(buf[0], 3)) == b"abc"
    lib.free(buf[0])


def test_files_that_cannot_be_opened_are_named(rt, tmp_path):
    ffi, lib = rt.ffi, rt.lib
    missing = tmp_path / "missing.safetensors"
    err = ffi.new("char[512]")
    st = ffi.new("exactc_safetensors *")
    assert lib.exactc_st_open(str(missing).encode(), st, err, 512) == -1
    assert message(rt, err) == f"cannot open '{missing}' for reading: {os.strerror(errno.ENOENT)}"
    assert (st.tensors, st.count) == (ffi.NULL, 0)
    (tmp_path / "w.safetensors").write_bytes(ST)
    assert lib.exactc_st_open(str(tmp_path / "w.safetensors").encode(), st, err, 512) == 0
    assert st.count == 1 and ffi.string(st.tensors[0].name) == b"w"
    lib.exactc_st_close(st)
    out = ffi.new("exactc_array *")
    assert lib.exactc_npy_read(str(missing).encode(), out, err, 512) == -1
    assert message(rt, err) == f"npy: cannot open '{missing}' for reading: {os.strerror(errno.ENOENT)}"
    assert lib.exactc_npy_write(str(tmp_path).encode(), c_array(rt, F4_2x3), err, 512) == -1
    assert message(rt, err) == f"npy: cannot open '{tmp_path}' for writing: {os.strerror(errno.EISDIR)}"


# ---- dtype names and sizes outside the enum


@pytest.mark.parametrize("code, name, size", [(0, "<f8", 8), (1, "<f4", 4), (2, "<i4", 4), (3, "<i8", 8),
                                              (4, "?", 0), (2**31, "?", 0), (2**32 - 1, "?", 0)])
def test_dtype_names_and_sizes(rt, code, name, size):
    """Messages name a dtype as numpy spells it; a value outside the enum is '?' and has
    no size, which is how exactc_npy_format tells it is not a dtype."""
    assert rt.ffi.string(rt.lib.exactc_dtype_name(code)).decode() == name
    assert rt.lib.exactc_dtype_size(code) == size
