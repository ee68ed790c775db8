"""The runtime's host (runtime/exactc_host.c): what every exported program runs around its
network. A small program described in C (four parameters: f32, f32 stacked, and the
int8 and uint8 of quantized weights; an int32 and an f32 input; one output) goes through exactc_main, called in this process; the readers
and the writer are called one by one through cffi. Each refusal (a missing input, a
mis-shaped input, a wrong dtype, a missing or mis-typed tensor, a usage error) returns
non-zero with a message that names what is wrong; a good run writes the output; bf16
values are rounded on reading and widened on writing.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactc.exporter import export, types
from exactc.verify.build import load_library, runtime_source
from exactc.verify.compare import assert_bits_equal

RUNTIME = ("exactc_host.c", "exactc_npy.c", "exactc_safetensors.c")

# z = y + w + b[layer 0] + b[layer 1] + q + u + x (per column); exactc_main runs it. The
# parameters sit at 64-byte offsets of the block, each at its own dtype.
DRIVER = r"""
#include "exactc_rt.h"

static const exactc_param_spec PARAMS[] = {
    {"w", EXACTC_KIND_F32, 0, 2, {2, 3}, 0},
    {"h.%d.b", EXACTC_KIND_F32, 2, 1, {3}, 64},
    {"q", EXACTC_KIND_I8, 0, 1, {3}, 128},
    {"u", EXACTC_KIND_U8, 0, 1, {3}, 192},
};
static const exactc_tensor_spec INPUTS[] = {
    {"x", EXACTC_KIND_I32, 1, {3}, {0}},
    {"y", EXACTC_KIND_F32, 2, {2, 3}, {0}},
};
static const exactc_tensor_spec OUTPUTS[] = {
    {"z", EXACTC_KIND_F32, 2, {2, 3}, {0}},
};
static const float *params;
static const int8_t *q;
static const uint8_t *u;

static int map_weights(void *block, void *weights) {
    (void)weights; /* this driver keeps its pointers in globals of its own */
    params = block;
    q = (const int8_t *)((unsigned char *)block + 128);
    u = (const uint8_t *)((unsigned char *)block + 192);
    return 0;
}

static void run(const void *weights, int64_t length, void *const *in, void *const *out, unsigned char *arena) {
    (void)weights;
    (void)length;
    const int32_t *x = in[0];
    const float *y = in[1];
    float *z = out[0];
    float *tmp = ARENA(float, arena, 6);
    for (int i = 0; i < 6; i++) tmp[i] = y[i] + params[i] + params[16 + i % 3] + params[19 + i % 3] + (float)q[i % 3] + (float)u[i % 3];
    for (int i = 0; i < 6; i++) z[i] = tmp[i] + (float)x[i % 3];
    RELEASE(tmp, 6);
}

int driver_main(int argc, char **argv) {
    static const exactc_program program = {
        .site = EXACTC_KIND_F32,
        .params = PARAMS,
        .param_count = 4,
        .param_bytes = 256,
        .inputs = INPUTS,
        .input_count = 2,
        .outputs = OUTPUTS,
        .output_count = 1,
        .arena_bytes = 24,
        .max_length = 0,
        .map_weights = map_weights,
        .run = run,
    };
    return exactc_main(argc, argv, &program);
}
"""

CDEF = """
typedef enum { EXACTC_KIND_I32 = 0, EXACTC_KIND_F64 = 1, EXACTC_KIND_F32 = 2, EXACTC_KIND_BF16 = 3,
               EXACTC_KIND_I8 = 4, EXACTC_KIND_U8 = 5 } exactc_kind;
typedef struct { const char *name; exactc_kind kind; int ndim; int64_t shape[8]; int64_t per_length[8]; } exactc_tensor_spec;
typedef struct { const char *name; exactc_kind kind; int layers; int ndim; int64_t shape[8]; size_t offset; } exactc_param_spec;
int driver_main(int argc, char **argv);
int exactc_input_parse(const unsigned char *buf, size_t len, const exactc_tensor_spec *spec, void *dst,
                       char *err, size_t errlen);
int exactc_input_read(const char *dir, const exactc_tensor_spec *spec, void *dst, char *err, size_t errlen);
int exactc_output_write(const char *dir, const exactc_tensor_spec *spec, const void *src, char *err,
                        size_t errlen);
int exactc_weights_load(const char *path, const exactc_param_spec *params, size_t count, size_t bytes,
                        void **block, char *err, size_t errlen);
int exactc_pack_panels(void *data, size_t layers, int64_t rows, int64_t cols, int64_t lanes, size_t size);
int exactc_pack_block_panels(void *data, size_t layers, int64_t rows, int64_t cols, int64_t lanes, int64_t run,
                             size_t size);
"""

W = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
B = [np.array([1, 2, 3], dtype=np.float32), np.array([10, 20, 30], dtype=np.float32)]
X = np.array([100, 200, 300], dtype=np.int32)
Y = np.full((2, 3), 0.5, dtype=np.float32)
Q = np.array([-127, 5, 127], dtype=np.int8)  # q8 values
U = np.array([0x0F, 0x80, 0xFF], dtype=np.uint8)  # q4 bytes


@pytest.fixture(scope="module")
def lib():
    sources = {name: runtime_source(name) for name in RUNTIME}
    sources["host_driver.c"] = DRIVER
    return load_library(sources, CDEF)


def weights(tensors: dict[str, np.ndarray]) -> bytes:
    tags = {s.numpy: s.safetensors for s in types.STORAGE.values()}
    return export.safetensors_bytes({name: (tags[a.dtype], a) for name, a in tensors.items()})


def good_tensors() -> dict[str, np.ndarray]:
    return {"w": W, "h.0.b": B[0], "h.1.b": B[1], "q": Q, "u": U}


@pytest.fixture
def files(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "weights.safetensors").write_bytes(weights(good_tensors()))
    np.save(tmp_path / "in" / "x.npy", X)
    np.save(tmp_path / "in" / "y.npy", Y)
    return tmp_path


def main(lib, *args: str) -> int:
    keep = [lib.ffi.new("char[]", a.encode()) for a in ("model", *args)]
    argv = lib.ffi.new("char *[]", keep)
    return lib.lib.driver_main(len(keep), argv)


def run(lib, files, capfd) -> tuple[int, str]:
    rc = main(lib, str(files / "weights.safetensors"), str(files / "in"), str(files / "out"))
    return rc, capfd.readouterr().err


def test_a_good_run_writes_the_output(lib, files, capfd):
    rc, err = run(lib, files, capfd)
    assert rc == 0, err
    z = np.load(files / "out" / "z.npy")
    assert z.dtype == np.float32 and z.shape == (2, 3)
    want = (Y + W + B[0] + B[1] + Q.astype(np.float32) + U.astype(np.float32)) + X.astype(np.float32)
    assert_bits_equal(want, z, "z")


def test_a_missing_input_is_named(lib, files, capfd):
    (files / "in" / "y.npy").unlink()
    rc, err = run(lib, files, capfd)
    assert rc == 1
    assert "exactc: input y: " in err and "cannot open" in err and "y.npy" in err, err
    assert not (files / "out" / "z.npy").exists()


def test_a_misshaped_input_is_named(lib, files, capfd):
    np.save(files / "in" / "y.npy", Y.reshape(3, 2))
    rc, err = run(lib, files, capfd)
    assert rc == 1
    assert "input y must be f32 (<f4) of shape (2, 3); the file holds f32 (<f4) of shape (3, 2)" in err, err


def test_an_input_of_the_wrong_dtype_is_named(lib, files, capfd):
    np.save(files / "in" / "x.npy", X.astype(np.int64))
    rc, err = run(lib, files, capfd)
    assert rc == 1
    assert "input x must be int32 (<i4) of shape (3,); the file holds int64 (<i8) of shape (3,)" in err, err


def test_missing_and_mistyped_tensors_are_all_named(lib, files, capfd):
    tensors = good_tensors()
    del tensors["h.1.b"]
    tensors["w"] = W.astype(np.float64)
    tensors["q"] = Q.view(np.uint8)  # the bytes of the int8 values, as U8
    tensors["u"] = U.view(np.int8)
    (files / "weights.safetensors").write_bytes(weights(tensors))
    rc, err = run(lib, files, capfd)
    assert rc == 1
    path = files / "weights.safetensors"
    assert f"exactc: {path}: tensor w is F64 (2, 3); it must be F32 (2, 3)" in err, err
    assert f"exactc: {path}: tensor h.1.b is missing" in err, err
    assert f"exactc: {path}: tensor q is U8 (3); it must be I8 (3)" in err, err
    assert f"exactc: {path}: tensor u is I8 (3); it must be U8 (3)" in err, err
    assert f"exactc: {path}: 4 tensor(s) missing or wrong" in err, err


def test_a_usage_error_exits_2(lib, files, capfd):
    rc = main(lib, str(files / "weights.safetensors"), str(files / "in"))
    assert rc == 2 and "usage:" in capfd.readouterr().err


def test_several_pairs_run_with_the_weights_loaded_once(lib, files, capfd):
    (files / "out2").mkdir()
    rc = main(lib, str(files / "weights.safetensors"), str(files / "in"), str(files / "out"), str(files / "in"),
              str(files / "out2"))
    assert rc == 0, capfd.readouterr().err
    assert (files / "out" / "z.npy").read_bytes() == (files / "out2" / "z.npy").read_bytes()


def test_a_later_pair_that_fails_leaves_no_output_of_the_earlier_ones(lib, files, capfd):
    (files / "out2").mkdir()
    rc = main(lib, str(files / "weights.safetensors"), str(files / "in"), str(files / "out"), str(files / "nothing"),
              str(files / "out2"))
    assert rc == 1 and "input x" in capfd.readouterr().err
    assert list((files / "out").iterdir()) == [] and list((files / "out2").iterdir()) == []


def test_a_write_that_fails_midway_leaves_no_truncated_output(lib, files):
    """A file size limit of 100 bytes (the .npy is 152): the write fails midway, as on a
    full disk. Run in a child process, which the limit cannot outlive."""
    import os
    import resource
    import signal

    said, stderr = os.pipe()  # the limit applies to every file the child writes, stderr too
    pid = os.fork()
    if pid == 0:  # the child: the limit, SIGXFSZ ignored so that the write fails with EFBIG
        code = 99
        try:
            os.dup2(stderr, 2)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
            code = main(lib, str(files / "weights.safetensors"), str(files / "in"), str(files / "out"))
        finally:
            os._exit(code)
    os.close(stderr)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(said) as f:
        err = f.read()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1, (status, err)
    assert "output z: npy: writing" in err and "File too large" in err, err
    assert list((files / "out").iterdir()) == []


# ---- the readers and the writer, one by one ---------------------------------------------------


def spec(lib, name: str, kind: str, shape: tuple[int, ...]):
    keep = lib.ffi.new("char[]", name.encode())
    s = lib.ffi.new("exactc_tensor_spec *")
    s.name, s.kind, s.ndim = keep, getattr(lib.lib, f"EXACTC_KIND_{kind}"), len(shape)
    for d, n in enumerate(shape):
        s.shape[d] = n
    return s, keep


def npy(array: np.ndarray) -> bytes:
    return export.npy_bytes(array)


def test_bf16_inputs_are_rounded_and_outputs_widened(lib, tmp_path):
    s, _ = spec(lib, "v", "BF16", (4,))
    given = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, np.nan], dtype=np.float32)
    data = npy(given)
    dst = np.zeros(4, dtype=np.uint16)
    err = lib.ffi.new("char[256]")
    assert lib.lib.exactc_input_parse(data, len(data), s, lib.ffi.from_buffer(dst), err, 256) == 0
    assert dst.tolist() == types.bits(types.f32_to_bf16(given)).tolist() == [0x3F80, 0x3F80, 0x3F82, 0x7FC0]
    assert lib.lib.exactc_output_write(str(tmp_path).encode(), s, lib.ffi.from_buffer(dst), err, 256) == 0
    back = np.load(tmp_path / "v.npy")
    assert back.dtype == np.float32 and back[:3].tolist() == [1.0, 1.0, 1 + 2**-6] and np.isnan(back[3])


@pytest.mark.parametrize("data,message", [
    (b"", "input v: "),
    (b"\x93NUMPY\x01\x00" + b"\xff" * 8, "input v: "),
    (npy(np.zeros(3, dtype=np.float64)), "input v must be f32 (<f4) of shape (3,); the file holds f64 (<f8) of shape (3,)"),
    (npy(np.zeros((3, 1), dtype=np.float32)), "input v must be f32 (<f4) of shape (3,); the file holds f32 (<f4) of shape (3, 1)"),
])
def test_input_images_are_refused_by_name(lib, data, message):
    s, _ = spec(lib, "v", "F32", (3,))
    dst = np.zeros(3, dtype=np.float32)
    err = lib.ffi.new("char[512]")
    assert lib.lib.exactc_input_parse(data, len(data), s, lib.ffi.from_buffer(dst), err, 512) == -1
    text = lib.ffi.string(err).decode()
    assert text.startswith(message) if message.endswith(": ") else message in text, text


def test_a_weights_file_that_is_not_there_is_named(lib, tmp_path):
    params = lib.ffi.new("exactc_param_spec[1]")
    name = lib.ffi.new("char[]", b"w")
    params[0].name, params[0].kind, params[0].ndim, params[0].shape[0] = name, lib.lib.EXACTC_KIND_F32, 1, 3
    block = lib.ffi.new("void **")
    err = lib.ffi.new("char[512]")
    path = str(tmp_path / "nothing.safetensors")
    assert lib.lib.exactc_weights_load(path.encode(), params, 1, 12, block, err, 512) == -1
    assert path in lib.ffi.string(err).decode()
    assert block[0] == lib.ffi.NULL


def as_panels(w: np.ndarray, lanes: int) -> np.ndarray:
    """exactc_pack_panels' layout, from its definition (exporter/printer/prepack.py): in
    each layer, the first N - N % lanes rows as panels of `lanes` rows, k-major with the
    lane index innermost; the last N % lanes rows as they were."""
    layers, rows, cols = w.shape
    out = w.copy()
    full = rows - rows % lanes
    panels = w[:, :full].reshape(layers, full // lanes, lanes, cols).transpose(0, 1, 3, 2)
    out[:, :full] = panels.reshape(layers, full, cols)  # the same bytes, rows x cols per layer
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.uint16])  # f64, f32, bf16's bits
@pytest.mark.parametrize("layers,rows,cols,lanes", [(1, 16, 3, 16), (2, 40, 5, 16), (3, 7, 4, 16), (1, 33, 2, 8)])
def test_pack_panels_lays_out_each_layer_as_its_panels(lib, dtype, layers, rows, cols, lanes):
    w = np.arange(layers * rows * cols).astype(dtype).reshape(layers, rows, cols)
    data = lib.ffi.from_buffer(w)
    assert lib.lib.exactc_pack_panels(data, layers, rows, cols, lanes, w.itemsize) == 0
    want = as_panels(np.arange(layers * rows * cols).astype(dtype).reshape(layers, rows, cols), lanes)
    assert w.tobytes() == want.tobytes()


def as_block_panels(w: np.ndarray, lanes: int, run: int) -> np.ndarray:
    """exactc_pack_block_panels' layout, from its definition (layouts.RUN_PANELS): in each
    layer, the first N - N % lanes rows as panels of `lanes` rows, block by block (a block
    `run` columns), the lanes' runs of the block one after another; the rest as it was."""
    layers, rows, cols = w.shape
    out = w.copy()
    full = rows - rows % lanes
    chunks = w[:, :full].reshape(layers, full // lanes, lanes, cols // run, run).transpose(0, 1, 3, 2, 4)
    out[:, :full] = chunks.reshape(layers, full, cols)
    return out


@pytest.mark.parametrize("layers,rows,cols,lanes,run", [(1, 16, 64, 8, 32), (2, 41, 48, 8, 16), (3, 7, 32, 8, 32),
                                                        (1, 24, 6, 4, 1)])
def test_pack_block_panels_keeps_each_rows_block_together(lib, layers, rows, cols, lanes, run):
    w = np.arange(layers * rows * cols).astype(np.int16).reshape(layers, rows, cols)
    want = as_block_panels(w, lanes, run)
    assert lib.lib.exactc_pack_block_panels(lib.ffi.from_buffer(w), layers, rows, cols, lanes, run, w.itemsize) == 0
    assert w.tobytes() == want.tobytes()
    if run == 1:  # runs of one column: the plain panels
        assert want.tobytes() == as_panels(np.arange(w.size).astype(np.int16).reshape(w.shape), lanes).tobytes()


def test_pack_block_panels_refuses_a_run_that_does_not_divide_the_row(lib):
    w = np.arange(2 * 8 * 48).astype(np.int8).reshape(2, 8 * 48 // 48, 48)
    before = w.tobytes()
    assert lib.lib.exactc_pack_block_panels(lib.ffi.from_buffer(w), 2, 8, 48, 8, 32, 1) == -1
    assert w.tobytes() == before



# ---- the arena's births (exactc_rt.h's SCRATCH and BORN, the structured host's table)

# b reuses a's bytes once a is dead and is read before anything writes it: a checking build
# NaN-fills b at its birth, so the stale read shows; a plain build reads a's last value.
REUSED_READ = r"""
#include "exactc_rt.h"

float NAME(unsigned char *arena) {
    exactc_arena_check check = {0};
    exactc_arena_open(&check, arena, 64);
    float *a = SCRATCH(float, arena + 0);
    float *b = SCRATCH(float, arena + 0);
    BORN(a, 4);
    for (int i = 0; i < 4; i++) a[i] = 1.0f;
    BORN(b, 4);
    return b[0];
}
"""


def test_a_checking_build_shows_a_read_of_a_reused_region_before_it_is_written():
    sources = {name: runtime_source(name) for name in RUNTIME}
    sources["reused_checking.c"] = "#define EXACTC_CHECKING 1\n" + REUSED_READ.replace("NAME", "read_checking")
    sources["reused_plain.c"] = REUSED_READ.replace("NAME", "read_plain")
    lib = load_library(sources, "float read_checking(unsigned char *arena); float read_plain(unsigned char *arena);")
    arena = lib.ffi.new("unsigned char[64]")
    assert np.isnan(lib.lib.read_checking(arena))
    assert lib.lib.read_plain(arena) == 1.0
