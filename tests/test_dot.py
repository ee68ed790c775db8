"""exactc_dot.h, the int32 block sums of qlinear_i: each path this CPU runs (the plain
loops, AVX2's maddubs, VNNI's dpbusd where the CPU has it) gives numpy's exact sum on
drawn blocks and on the extremes (activations of -127 and 127, and -128, against q8
weights of -128 and 127 and q4 nibbles 0 and 15), built by gcc and clang at -O2 and -O3,
for this CPU or not; the VNNI paths, which this CPU may not run, are built for targets
that have them."""

import subprocess

import numpy as np
import pytest

from exactc.exporter import quant
from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS
from exactc.verify.build import BuildOptions, load_library
from installed import need  # tests/installed.py

SOURCE = r"""
#include "exactc_dot.h"
const char *dot_path(void) { return EXACTC_DOT_PATH; }
void dot_q8_all(const int8_t *x, const int8_t *w, int32_t *out, int64_t blocks) {
    for (int64_t b = 0; b < blocks; b++) out[b] = exactc_dot_q8_32(x + 32 * b, w + 32 * b);
}
void dot_q4_all(const int8_t *x, const uint8_t *w, int32_t *out, int64_t blocks) {
    for (int64_t b = 0; b < blocks; b++) out[b] = exactc_dot_q4_32(x + 32 * b, w + 16 * b);
}
/* Block b of 8 rows (row r of block b at w + (8 b + r) · stride) against x's block b. */
void dot_q8_rows(const int8_t *x, const int8_t *w, int32_t *out, int64_t blocks, int64_t stride) {
    for (int64_t b = 0; b < blocks; b++) exactc_dot_q8_32x8(x + 32 * b, w + 8 * b * stride, stride, out + 8 * b);
}
void dot_q4_rows(const int8_t *x, const uint8_t *w, int32_t *out, int64_t blocks, int64_t stride) {
    for (int64_t b = 0; b < blocks; b++) exactc_dot_q4_32x8(x + 32 * b, w + 8 * b * stride, stride, out + 8 * b);
}
/* Super-block b of 8 rows (row r at w + (8 b + r) · stride) against x's super-block b:
 * row r's S into out[16 b + r], its M into out[16 b + 8 + r]. */
void dot_k_rows(int fmt, const int8_t *x, const uint8_t *w, int32_t *out, int64_t blocks, int64_t stride) {
    for (int64_t b = 0; b < blocks; b++) {
        const int8_t *xb = x + 256 * b;
        const uint8_t *wb = w + 8 * b * stride;
        int32_t *s = out + 16 * b, *m = out + 16 * b + 8;
        if (fmt == 4) exactc_dot_q4_k_256x8(xb, wb, stride, s, m);
        if (fmt == 5) exactc_dot_q5_k_256x8(xb, wb, stride, s, m);
        if (fmt == 6) exactc_dot_q6_k_256x8(xb, wb, stride, s);
    }
}
/* Super-block b's S into out[2 b], M into out[2 b + 1] (fmt 4, 5 or 6: Q4_K, Q5_K, Q6_K). */
void dot_k_all(int fmt, const int8_t *x, const uint8_t *w, int32_t *out, int64_t blocks, int64_t size) {
    for (int64_t b = 0; b < blocks; b++) {
        int32_t s = 0, m = 0;
        if (fmt == 4) exactc_dot_q4_k_256(x + 256 * b, w + size * b, &s, &m);
        if (fmt == 5) exactc_dot_q5_k_256(x + 256 * b, w + size * b, &s, &m);
        if (fmt == 6) exactc_dot_q6_k_256(x + 256 * b, w + size * b, &s);
        out[2 * b] = s;
        out[2 * b + 1] = m;
    }
}
"""
CDEF = """
const char *dot_path(void);
void dot_q8_all(const int8_t *x, const int8_t *w, int32_t *out, int64_t blocks);
void dot_q4_all(const int8_t *x, const uint8_t *w, int32_t *out, int64_t blocks);
void dot_q8_rows(const int8_t *x, const int8_t *w, int32_t *out, int64_t blocks, int64_t stride);
void dot_q4_rows(const int8_t *x, const uint8_t *w, int32_t *out, int64_t blocks, int64_t stride);
void dot_k_all(int fmt, const int8_t *x, const uint8_t *w, int32_t *out, int64_t blocks, int64_t size);
void dot_k_rows(int fmt, const int8_t *x, const uint8_t *w, int32_t *out, int64_t blocks, int64_t stride);
"""
# Each compiler and level, for this CPU or not; for this CPU also with the plain loops
# forced and with VNNI's path turned off (AVX2's then, where the CPU has VNNI).
FORCED = {"": (), "-plain": ("EXACTC_DOT_PLAIN=1",), "-no-vnni": ("EXACTC_DOT_NO_VNNI=1",)}
BUILDS = {
    f"{cc}{opt}{'-native' if native else ''}{forced}": BuildOptions(
        cc, opt, march_native=native, defines=FORCED[forced]
    )
    for cc in ("gcc", "clang")
    for opt in ("-O2", "-O3")
    for native in (False, True)
    for forced in (FORCED if native else ("",))
}


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return set(next(line for line in f if line.startswith("flags")).split(":")[1].split())


@pytest.fixture(scope="module", params=sorted(BUILDS))
def dot(request):
    options = BUILDS[request.param]
    need(options.cc)
    return load_library({"dot.c": SOURCE}, CDEF, options)


def expected_path(options: BuildOptions) -> str:
    if "EXACTC_DOT_PLAIN=1" in options.defines or not options.march_native:
        return "plain"
    flags = cpu_flags()
    if "EXACTC_DOT_NO_VNNI=1" in options.defines:
        return "avx2" if "avx2" in flags else "plain"
    if {"avx512_vnni", "avx512vl"} <= flags:
        return "avx512vnni"
    return "avxvnni" if "avx_vnni" in flags else "avx2" if "avx2" in flags else "plain"


def run(dot, fmt: str, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    blocks = x.size // 32
    x, w = np.ascontiguousarray(x, np.int8), np.ascontiguousarray(w, np.int8 if fmt == "q8" else np.uint8)
    out = np.zeros(blocks, np.int32)
    ffi = dot.ffi
    call = dot.lib.dot_q8_all if fmt == "q8" else dot.lib.dot_q4_all
    call(
        ffi.cast("int8_t *", x.ctypes.data),
        ffi.cast("void *", w.ctypes.data),
        ffi.cast("int32_t *", out.ctypes.data),
        blocks,
    )
    return out


def run_rows(dot, fmt: str, x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """Each block of x against 8 rows of w (rows of `stride` elements, 8 a block, the
    block's values at each row's start): the 8 sums of each block."""
    blocks = x.size // 32
    x, w = np.ascontiguousarray(x, np.int8), np.ascontiguousarray(w, np.int8 if fmt == "q8" else np.uint8)
    out = np.zeros(8 * blocks, np.int32)
    call = dot.lib.dot_q8_rows if fmt == "q8" else dot.lib.dot_q4_rows
    call(
        dot.ffi.cast("int8_t *", x.ctypes.data),
        dot.ffi.cast("void *", w.ctypes.data),
        dot.ffi.cast("int32_t *", out.ctypes.data),
        blocks,
        stride,
    )
    return out


def exact_q8(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (x.reshape(-1, 32).astype(np.int64) * w.reshape(-1, 32).astype(np.int64)).sum(axis=1)


def exact_q4(x: np.ndarray, nibbles: np.ndarray) -> np.ndarray:
    return (x.reshape(-1, 32).astype(np.int64) * (nibbles.reshape(-1, 32).astype(np.int64) - 8)).sum(axis=1)


def test_the_build_takes_the_path_its_target_has(dot):
    assert dot.ffi.string(dot.lib.dot_path()).decode() == expected_path(dot.options)


# Blocks of one value each (every combination of the extremes), then blocks alternating
# two extremes (the pairs vpmaddubsw adds and the quadruples vpdpbusd adds), then blocks
# with one extreme among zeros at each position (a lane dropped shows there).
X_EXTREMES = (-128, -127, -1, 0, 1, 127)
Q8_EXTREMES = (-128, -127, -1, 0, 1, 127)
NIBBLE_EXTREMES = (0, 1, 7, 8, 9, 15)


def extreme_blocks(xs, ws) -> tuple[np.ndarray, np.ndarray]:
    x_rows, w_rows = [], []
    for a in xs:
        for b in ws:
            x_rows.append(np.full(32, a))
            w_rows.append(np.full(32, b))
            x_rows.append(np.where(np.arange(32) % 2, a, -a if a != -128 else 127))
            w_rows.append(np.where(np.arange(32) % 4 < 2, b, ws[0]))
    for j in range(32):
        x_rows.append(np.where(np.arange(32) == j, xs[1], 0))
        w_rows.append(np.where(np.arange(32) == j, ws[-1], ws[0] if ws[0] >= 0 else 0))
    return np.concatenate(x_rows), np.concatenate(w_rows)


def test_q8_extremes(dot):
    x, w = extreme_blocks(X_EXTREMES, Q8_EXTREMES)
    assert (run(dot, "q8", x, w) == exact_q8(x, w)).all()


def test_q8_extremes_reach_the_int16_bound_of_the_sign_trick(dot):
    """Activations of ±127 times weights of -128 in every lane: each pair vpmaddubsw adds
    is 2 · 128 · 127 = 32512, the largest the sign trick forms; the block sums ±520192."""
    x = np.concatenate([np.full(32, 127), np.full(32, -127), np.tile([127, -127], 16)])
    w = np.concatenate([np.full(32, -128), np.full(32, -128), np.tile([-128, 127], 16)])
    assert run(dot, "q8", x, w).tolist() == [-520192, 520192, -518160] == exact_q8(x, w).tolist()


def test_q4_extremes(dot):
    x, nibbles = extreme_blocks(X_EXTREMES, NIBBLE_EXTREMES)
    packed = quant.pack_q4(nibbles.reshape(-1, 32).astype(np.uint8))
    assert (run(dot, "q4", x, packed) == exact_q4(x, nibbles)).all()


def test_q4_reads_low_nibbles_first():
    """Value j of a block is byte j's low nibble and value j + 16 its high one (ggml's
    Q4_0): one byte 0xF0 (low 0, high 15) against x = 1 at j only gives -8."""
    dot = load_library({"dot.c": SOURCE}, CDEF, BuildOptions("gcc", "-O2", march_native=True))
    w = np.full(16, 0x88, np.uint8)
    w[3] = 0xF0
    x = np.zeros(32, np.int8)
    x[3] = 1
    assert run(dot, "q4", x, w).tolist() == [-8]
    x[3], x[19] = 0, 1
    assert run(dot, "q4", x, w).tolist() == [7]


def test_drawn_blocks(dot):
    rng = np.random.default_rng(42)
    x = rng.integers(-128, 128, 32 * 500)
    w = rng.integers(-128, 128, 32 * 500)
    nibbles = rng.integers(0, 16, 32 * 500)
    assert (run(dot, "q8", x, w) == exact_q8(x, w)).all()
    packed = quant.pack_q4(nibbles.reshape(-1, 32).astype(np.uint8))
    assert (run(dot, "q4", x, packed) == exact_q4(x, nibbles)).all()


# The VNNI paths, built (not run) for targets that have them, and the assembly holds vpdpbusd.
VNNI_TARGETS = [
    ("gcc", "sapphirerapids", "avx512vnni"),
    ("gcc", "icelake-server", "avx512vnni"),
    ("gcc", "alderlake", "avxvnni"),
    ("clang-19", "sapphirerapids", "avx512vnni"),
    ("clang-19", "alderlake", "avxvnni"),
]


@pytest.mark.parametrize("cc,march,path", VNNI_TARGETS, ids=[f"{cc}-{march}" for cc, march, _ in VNNI_TARGETS])
def test_vnni_paths_build(cc, march, path):
    need(cc)
    source = SOURCE + TILE_SOURCE + f'_Static_assert(sizeof "{path}" == sizeof EXACTC_DOT_PATH, "the {path} path");\n'
    done = subprocess.run(
        [
            cc,
            *STRICT_FLAGS,
            "-O2",
            f"-march={march}",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{RUNTIME_DIR}",
            "-S",
            "-o",
            "-",
            "-x",
            "c",
            "-",
        ],
        input=source,
        text=True,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    assert "vpdpbusd" in done.stdout


@pytest.mark.parametrize("gap", [8, 0], ids=["rows-apart", "block-panel"])
@pytest.mark.parametrize("fmt", ["q8", "q4"])
def test_eight_rows_at_once(dot, fmt, gap):
    """exactc_dot_q8_32x8 and exactc_dot_q4_32x8: each of the 8 rows (at a stride longer
    than the block, or the block's own length: a block panel laid out at load, the rows'
    blocks one after another) against the block of activations, row r's sum in out[r]:
    the single kernel's sums, on drawn blocks and the extremes (an activation of -128 in
    some)."""
    rng = np.random.default_rng(7)
    xs, ws = extreme_blocks(X_EXTREMES, Q8_EXTREMES if fmt == "q8" else NIBBLE_EXTREMES)
    blocks = xs.size // 32
    x = xs.reshape(blocks, 32)
    width = 32 if fmt == "q8" else 16
    stride = width + gap  # the rows lie apart, as a weight's rows of several blocks do, or adjacent
    rows = rng.integers(-128, 128, (blocks, 8, 32)) if fmt == "q8" else rng.integers(0, 16, (blocks, 8, 32))
    rows[:, 0] = ws.reshape(blocks, 32)  # the extremes in row 0, drawn values in the others
    stored = rows if fmt == "q8" else quant.pack_q4(rows.reshape(-1, 32).astype(np.uint8)).reshape(blocks, 8, 16)
    w = np.zeros((blocks, 8, stride), np.int64)
    w[:, :, :width] = stored
    want = [(exact_q8 if fmt == "q8" else exact_q4)(x[b], rows[b, r]) for b in range(blocks) for r in range(8)]
    assert run_rows(dot, fmt, x.ravel(), w.ravel(), stride).tolist() == [int(v[0]) for v in want]


# ---- the k-quants' super-block sums ----
K_SIZES = {"q4_k": 144, "q5_k": 176, "q6_k": 210}


def run_k(dot, fmt: str, x: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """(S, M) of each super-block of raw (blocks, size) against x's 256 values each."""
    blocks = raw.shape[0]
    x, raw = np.ascontiguousarray(x, np.int8), np.ascontiguousarray(raw, np.uint8)
    out = np.zeros(2 * blocks, np.int32)
    dot.lib.dot_k_all(
        int(fmt[1]),
        dot.ffi.cast("int8_t *", x.ctypes.data),
        dot.ffi.cast("uint8_t *", raw.ctypes.data),
        dot.ffi.cast("int32_t *", out.ctypes.data),
        blocks,
        K_SIZES[fmt],
    )
    return out.reshape(blocks, 2)


def exact_k(fmt: str, x: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """numpy's S = Σ_j sc_j · Σ x·q and M = Σ_j m_j · Σ x from the reference's unpacking."""
    q, scales, mins = quant.k_quant_integers(fmt.upper(), raw)
    xs = x.reshape(raw.shape[0], q.shape[1], q.shape[2]).astype(np.int64)
    s = ((xs * q.astype(np.int64)).sum(axis=2) * scales.astype(np.int64)).sum(axis=1)
    m = np.zeros_like(s) if mins is None else (xs.sum(axis=2) * mins.astype(np.int64)).sum(axis=1)
    return np.stack([s, m], axis=1)


def extreme_super_blocks(fmt: str, rng) -> tuple[np.ndarray, np.ndarray]:
    """Super-blocks at the extremes, against activations of 127, -127, -128 and alternating
    ±127: every byte 0xFF (Q4_K, Q5_K: all-63 scales and mins, quants 15 and 31; Q6_K:
    quants at their top 31, scales -1), Q6_K also with scales of -128 and 127 and quants at
    -32 (bytes 0), then drawn bytes."""
    size = K_SIZES[fmt]
    raws = [np.full(size, 0xFF, np.uint8)]
    if fmt == "q6_k":
        for scale, quants in ((0x80, 0x00), (0x7F, 0xFF), (0x80, 0xFF), (0x7F, 0x00)):
            raw = np.full(size, quants, np.uint8)
            raw[192:208] = scale
            raws.append(raw)
    raws += list(rng.integers(0, 256, (6, size), dtype=np.uint8))
    xs = [
        np.full(256, 127),
        np.full(256, -127),
        np.full(256, -128),
        np.tile([127, -127], 128),
        np.tile([-128, 127], 128),
    ]
    x_rows, w_rows = [], []
    for raw in raws:
        for x in xs + [rng.integers(-128, 128, 256)]:
            x_rows.append(x)
            w_rows.append(raw)
    return np.concatenate(x_rows), np.stack(w_rows)


@pytest.mark.parametrize("fmt", sorted(K_SIZES))
def test_k_quant_super_blocks_extremes_and_drawn(dot, fmt):
    rng = np.random.default_rng(5)
    x, raw = extreme_super_blocks(fmt, rng)
    assert (run_k(dot, fmt, x, raw) == exact_k(fmt, x, raw)).all()
    blocks = 300
    x, raw = rng.integers(-128, 128, 256 * blocks), rng.integers(0, 256, (blocks, K_SIZES[fmt]), dtype=np.uint8)
    assert (run_k(dot, fmt, x, raw) == exact_k(fmt, x, raw)).all()


@pytest.mark.parametrize("fmt", sorted(K_SIZES))
def test_k_quant_sub_block_placement(fmt):
    """One activation at a time (value v = 1, the others 0) against drawn super-blocks: S
    is that value's quant times its sub-block's scale, so a scale or a bit field read for
    the wrong sub-block or quarter shows at the value it moves."""
    dot = load_library({"dot.c": SOURCE}, CDEF, BuildOptions("gcc", "-O2", march_native=True))
    rng = np.random.default_rng(11)
    raw = np.repeat(rng.integers(0, 256, (1, K_SIZES[fmt]), dtype=np.uint8), 256, axis=0)
    x = np.eye(256, dtype=np.int64).ravel()
    assert (run_k(dot, fmt, x, raw) == exact_k(fmt, x, raw)).all()


@pytest.mark.parametrize("fmt", sorted(K_SIZES))
def test_k_quant_eight_rows_at_once(dot, fmt):
    """exactc_dot_<fmt>_256x8: 8 rows (at a stride longer than the super-block) against one
    super-block of activations, row r's S and M in out[r] and out[8 + r]: numpy's sums, on
    the extreme super-blocks in row 0 and drawn ones in the others."""
    rng = np.random.default_rng(3)
    x, extremes = extreme_super_blocks(fmt, rng)
    blocks, size = extremes.shape[0], K_SIZES[fmt]
    rows = rng.integers(0, 256, (blocks, 8, size), dtype=np.uint8)
    rows[:, 0] = extremes
    stride = size + 16
    w = np.zeros((blocks, 8, stride), np.uint8)
    w[:, :, :size] = rows
    out = np.zeros(16 * blocks, np.int32)
    x = np.ascontiguousarray(x, np.int8)
    dot.lib.dot_k_rows(
        int(fmt[1]),
        dot.ffi.cast("int8_t *", x.ctypes.data),
        dot.ffi.cast("uint8_t *", w.ctypes.data),
        dot.ffi.cast("int32_t *", out.ctypes.data),
        blocks,
        stride,
    )
    want = exact_k(fmt, np.repeat(x.reshape(blocks, 1, 256), 8, axis=1).ravel(), rows.reshape(-1, size))
    got = out.reshape(blocks, 2, 8).transpose(0, 2, 1).reshape(-1, 2)
    assert (got == want).all()  # Q6_K's M: 0 in both (its out[8 + r] is not written)
TILE_SOURCE = r"""
void tile_q8(int64_t rows, const int8_t *x, int64_t xs, const float *xd, int64_t xds, const int8_t *w, int64_t ws,
             const float *wd, int64_t wds, float *acc) {
    exactc_qtile_q8(rows, x, xs, xd, xds, w, ws, wd, wds, acc);
}
void tile_q4(int64_t rows, const int8_t *x, int64_t xs, const float *xd, int64_t xds, const uint8_t *w, int64_t ws,
             const float *wd, int64_t wds, float *acc) {
    exactc_qtile_q4(rows, x, xs, xd, xds, w, ws, wd, wds, acc);
}
"""
TILE_CDEF = """
void tile_q8(int64_t, const int8_t *, int64_t, const float *, int64_t, const int8_t *, int64_t, const float *,
             int64_t, float *);
void tile_q4(int64_t, const int8_t *, int64_t, const float *, int64_t, const uint8_t *, int64_t, const float *,
             int64_t, float *);
"""


@pytest.fixture(scope="module", params=sorted(BUILDS))
def tile(request):
    options = BUILDS[request.param]
    need(options.cc)
    return load_library({"tile.c": SOURCE + TILE_SOURCE}, CDEF + TILE_CDEF, options)


def tile_case(rng, fmt: str, rows: int, x_rows: np.ndarray | None = None, w_rows: np.ndarray | None = None):
    """Operands of one tile: rows activation blocks (at a stride of 48 bytes), 8 weight
    blocks (at a stride of 40 bytes), their scales at strides 3 and 5, and an acc of
    EXACTC_QTILE_M x 8 floats (the rows past `rows` must stay as they are). The buffers
    hold EXACTC_QTILE_M rows whatever `rows` is, the ones past the tail drawn too: a
    kernel that reads past its tail reads numbers, and its outputs show it."""
    x = rng.integers(-127, 128, (rows, 32)) if x_rows is None else x_rows
    values = (
        (rng.integers(-128, 128, (8, 32)) if fmt == "q8" else rng.integers(0, 16, (8, 32)))
        if w_rows is None
        else w_rows
    )
    stored = values if fmt == "q8" else quant.pack_q4(values.astype(np.uint8)).reshape(8, 16)
    xbuf = rng.integers(-127, 128, (4, 48)).astype(np.int8)
    xbuf[:rows, :32] = x
    wbuf = np.zeros((8, 40), np.int8 if fmt == "q8" else np.uint8)
    wbuf[:, : stored.shape[1]] = stored
    xd = np.zeros((4, 3), np.float32)
    xd[:, 0] = rng.uniform(1e-3, 1e-1, 4)
    wd = np.zeros((8, 5), np.float32)
    wd[:, 0] = rng.uniform(1e-3, 1e-1, 8) * rng.choice([-1, 1], 8)
    acc = rng.standard_normal((4, 8)).astype(np.float32)
    return x, values, xbuf, wbuf, xd, wd, acc


def run_tile(tile, fmt: str, rows: int, xbuf, wbuf, xd, wd, acc) -> np.ndarray:
    out, ffi = acc.copy(), tile.ffi
    call = tile.lib.tile_q8 if fmt == "q8" else tile.lib.tile_q4
    call(
        rows,
        ffi.cast("int8_t *", xbuf.ctypes.data),
        48,
        ffi.cast("float *", xd.ctypes.data),
        3,
        ffi.cast("void *", wbuf.ctypes.data),
        40,
        ffi.cast("float *", wd.ctypes.data),
        5,
        ffi.cast("float *", out.ctypes.data),
    )
    return out


def tile_reference(fmt: str, x, values, xd, wd, acc) -> np.ndarray:
    """acc ⊕ (A(s) ⊗ (W(xd) ⊗ W(wd))) in f32, each operation rounded (numpy's float32)."""
    offset = 0 if fmt == "q8" else 8
    s = x.astype(np.int64) @ (values.astype(np.int64) - offset).T
    want = acc.copy()
    rows = x.shape[0]
    scale = xd[:rows, :1] * wd[:, 0][None, :]
    want[:rows] = acc[:rows] + s.astype(np.float32) * scale
    return want


@pytest.mark.parametrize("fmt", ["q8", "q4"])
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_tile_drawn_blocks_and_short_tails_of_m(tile, fmt, rows):
    """exactc_qtile_q8 and exactc_qtile_q4 on a full tile and its short tails of m (1 to 3
    activation rows): each row's step of the sum is the reference's, bit for bit, and the
    accumulator's rows past the tail are left as they were."""
    rng = np.random.default_rng(100 + rows)
    for _ in range(20):
        x, values, xbuf, wbuf, xd, wd, acc = tile_case(rng, fmt, rows)
        got = run_tile(tile, fmt, rows, xbuf, wbuf, xd, wd, acc)
        assert got.view(np.uint32).tolist() == tile_reference(fmt, x, values, xd, wd, acc).view(np.uint32).tolist()


@pytest.mark.parametrize("fmt", ["q8", "q4"])
def test_tile_extremes(tile, fmt):
    """Activations of -128, -127 and 127 (one per row, the fourth row mixed) against weights
    of -128 and 127 or nibbles 0 and 15 (each weight row its own pattern): the int32 sums
    at their bounds, and -128 sends a q8 tile on AVX2 to the plain loops."""
    rng = np.random.default_rng(5)
    lo, hi = (-128, 127) if fmt == "q8" else (0, 15)
    patterns = [np.full(32, lo), np.full(32, hi), np.tile([lo, hi], 16), np.tile([hi, lo], 16)]
    w_rows = np.stack(patterns + [np.where(np.arange(32) == j, hi, lo) for j in (0, 15, 16, 31)])
    for xs in ((-127, 127, 127, -127), (-128, 127, -127, 0), (127, 127, 127, 127), (-128, -128, -128, -128)):
        x = np.stack([np.full(32, xs[0]), np.full(32, xs[1]), np.tile([xs[2], xs[3]], 16), np.tile([xs[3], xs[0]], 16)])
        for rows in (4, 3, 1):
            case = tile_case(rng, fmt, rows, x[:rows], w_rows)
            got = run_tile(tile, fmt, rows, *case[2:])
            want = tile_reference(fmt, case[0], case[1], case[4], case[5], case[6])
            assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist(), (xs, rows)
