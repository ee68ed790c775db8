"""The C readers' doors that no file opens: what runtime/exactc_npy.c and
runtime/exactc_safetensors.c do when the caller, the array or the stream is at fault.

The fuzz harnesses (fuzz/) and their seed corpora reach the parsers with every kind of
file; these tests call the public functions directly for what a file cannot provoke.
Grouped by what they protect:

1. the guards of the public functions: a NULL where an array, a buffer or a path belongs
   is refused with the message that names it, and nothing is left behind;
2. the writer's refusals of an array that is not one (a dtype outside the enum, a
   negative or overflowing shape, nbytes that disagree with the shape, no data, more
   bytes than memory can hold), whole messages, from exactc_npy_format and
   exactc_npy_write alike, with no file written;
3. read errors at each step of the stepwise reads: a stream that fails (a non-blocking
   pipe that runs dry) is an error naming the stream, never taken for a file that ended
   early; the same bytes on a pipe that is closed read whole;
4. looking tensors up: a missing tensor, or one of another dtype, rank or shape, is
   refused with both its dtype and shape and the ones asked for;
5. the dtype names and sizes of values outside the enum.

Messages are compared whole where the runtime builds them from the input, so that a
message naming the wrong field, or a refusal that moved, fails here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct

import numpy as np
import pytest

from exactc.exporter.export import safetensors_bytes
from exactc.verify.build import load_library, runtime_source

from test_npy import CODE_OF, c_array, np_save_bytes  # tests/test_npy.py


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


NPY = np_save_bytes(F4_2x3)

NPY_DATA_AT = len(NPY) - F4_2x3.nbytes

ST = safetensors_bytes({"w": ("F32", F4_2x3)})

ST_DATA_AT = len(ST) - F4_2x3.nbytes

# (the step that fails, the bytes the stream holds before its read error)
NPY_STEPS = [
    ("the magic and version", b""),
    ("the header length", NPY[:8]),
    ("the header", NPY[:10]),
    ("the data", NPY[:NPY_DATA_AT]),
    ("the byte after the data", NPY),
]

ST_STEPS = [
    ("the header length", b""),
    ("the header", ST[:8]),
    ("the data", ST[:ST_DATA_AT]),
    ("the byte after the data", ST),
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


@pytest.mark.parametrize("step, held", ST_STEPS, ids=[s for s, _ in ST_STEPS])
def test_a_safetensors_stream_that_fails_is_a_read_error(rt, step, held):
    ffi, lib = rt.ffi, rt.lib
    st = ffi.new("exactc_safetensors *")
    err = ffi.new("char[512]")
    with pipe_stream(rt, held, fails_after=True) as f:
        assert lib.exactc_st_open_stream(f, b"pipe.safetensors", st, err, 512) == -1
    assert message(rt, err) == f"error reading 'pipe.safetensors': {EAGAIN}"
    assert (st.tensors, st.count, st.bytes) == (ffi.NULL, 0, ffi.NULL)


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


@pytest.mark.parametrize("code, name, size", [(0, "<f8", 8), (1, "<f4", 4), (2, "<i4", 4), (3, "<i8", 8),
                                              (4, "?", 0), (2**31, "?", 0), (2**32 - 1, "?", 0)])
def test_dtype_names_and_sizes(rt, code, name, size):
    """Messages name a dtype as numpy spells it; a value outside the enum is '?' and has
    no size, which is how exactc_npy_format tells it is not a dtype."""
    assert rt.ffi.string(rt.lib.exactc_dtype_name(code)).decode() == name
    assert rt.lib.exactc_dtype_size(code) == size
