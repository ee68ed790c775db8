"""Quantized linears against the f32 one and PyTorch's dynamic int8 linear, side by side:
y = x wᵀ for x (M, K), w (N, K), at the benchmark's shape (256x384 by 384x1536), a 128-token
prefill at stories110M's feed-forward (128x768 by 768x2048), 256 rows of stories110M's
width (256x768 by 768x768) and two decode-shaped matrix-vector products (1x768 by
768x2048, stories110M's feed-forward, and 1x288 by 288x768, stories15M's).

Rows (one thread, then two):
- `f32`: exactc's linear under the automatic plan (`--plan auto`: n in lanes of 16 over
  m in lanes of 8 where M allows, the weight panel packed, an 8-piece split).
- `q8 w` / `q4 w`: qlinear_w (weights dequantized in f32, then the f32 sum in index
  order) under LANED: n in lanes of 16 over m in lanes of 8 (each output's sum in
  order), n outermost and split in 8 pieces.
- `q8 i …` / `q4 i …`: quantize (the activations to q8, its own kernel, timed with it)
  then qlinear_i (exact int32 block sums, combined in f32 block by block), n outermost
  and split in 8 pieces: `i laned` under LANED, `i loops` the plain body with the block
  sums as loops (what the printer gave before exactc_dot.h), `i plain` the plain body
  with each whole block's sum one call of exactc_dot.h's kernel (AVX2 or VNNI where the
  build's target has it), `i` n in lanes of 8, each block's 8 rows one call of its x8
  kernel (the automatic plan's layout in blocks of 32 on one row), `i tile` rows in lanes
  of 4 over n in lanes of 8, each block's 4 x 8 outputs one call of its tile kernel (the
  automatic plan's where the rows fill the lanes: a prompt's prefill). (An integer sum in interleaved partial sums, `layout.sums`, does not
  combine with lanes on n and m, and was slower than them here.)
- `q4_k i` / `q5_k i` / `q6_k i`: quantize (blocks of 256) then qlinear_i over ggml's
  k-quant super-blocks (random bytes, d and dmin 2^-10), n outermost and split in 8
  pieces: `i` n in lanes of 8, each super-block's 8 rows one call of exactc_dot.h's x8
  kernel (the automatic plan's layout); `i plain` one row a call; `i loops` the plain
  body with the sub-block loops the lowering gives; `q4_k w …` the weight-only form
  under LANED.
- `torch f32`: torch.nn.functional.linear; `torch dyn int8`:
  torch.ao.nn.quantized.dynamic.Linear (its own per-tensor int8 weights, activations
  quantized per call), torch.set_num_threads(threads).

Every exactc row is checked against the numpy reference's bits before it is timed.
Build: STRICT_FLAGS + -O2 -march=native -fopenmp, gcc. Times are the best of several
runs (perf_counter), in one process, one after another.

Usage: .venv/bin/python bench/quant_speed.py [THREADS ...]   (1 and 2 unless given; bench/test_bench_quant.py runs it in make bench)
"""

from __future__ import annotations


import numpy as np

from exactc.exporter import quant, reference
from exactc.exporter.kernels.autoplan import auto_kernel_plan, even_split
from exactc.exporter.kernels.layouts import Layout
from exactc.exporter.kernels.lower import lower
from exactc.exporter.kernels.plans import NestPlan, Plan, validate_plan
from exactc.exporter.printer.kernels import print_kernel
from exactc.exporter.printer.nests import BodyPrinter
from exactc.exporter.printer.planned import PlannedBodyPrinter
from exactc.verify.build import BuildOptions, load_library, runtime_source
from exactc.verify.compare import assert_bits_equal
from exactc.verify.kernels import CDEF_PRELUDE
from linear_speed import best_seconds

# (M, K, N); the k-quant rows where K is whole super-blocks of 256 (not stories15M's 288)
SHAPES = {"prefill": (256, 384, 1536), "prefill110M": (128, 768, 2048), "decode": (1, 768, 2048),
          "decode15M": (1, 288, 768), "prefill768": (256, 768, 768)}
BLOCK = 32
# The quantized nests' layout: linear's first candidate of the automatic plan, without the
# pack (kernels/autoplan.py), with n outermost for the split.
LANED = Layout(order=("n", "m"), lanes=(("m", 8), ("n", 16)))
# qlinear_i's plain body with n outermost: its whole blocks' sums as exactc_dot.h's calls
# (`i plain`), or as the loops the printer gave them before (`i loops`); n in lanes of 8,
# 8 rows' sums a call (`i`, the automatic plan's in blocks of 32).
PLAIN = Layout(order=("n", "m"))
ROWS = Layout(order=("n", "m"), lanes=(("n", 8),))
# rows in lanes of 4 over n in lanes of 8, each block's 4 x 8 outputs one call of the tile
# kernel (`i tile`, the automatic plan's in blocks of 32 where the rows fill the lanes)
TILE = Layout(order=("n", "m"), lanes=(("m", 4), ("n", 8)))


class Kernel:
    """One compiled kernel (its plan applied) and the arrays it runs on."""

    def __init__(self, primitive: str, arrays: dict[str, np.ndarray], attrs: dict, plan_of,
                 options: BuildOptions | None = None, block_sums: bool = True):
        self.kernel = lower(primitive, "f32", {k: v.shape for k, v in arrays.items()}, attrs)
        plan = plan_of(self.kernel)
        if plan is not None:
            validate_plan(self.kernel, plan)
        BodyPrinter.block_sums = PlannedBodyPrinter.super_block_sums = block_sums
        try:
            printed = print_kernel(self.kernel, primitive, plan) if plan else print_kernel(self.kernel, primitive)
        finally:
            BodyPrinter.block_sums = PlannedBodyPrinter.super_block_sums = True
        options = options or BuildOptions(cc="gcc", opt="-O2", march_native=True, openmp=True)
        cdef = CDEF_PRELUDE + printed.cdef + "void omp_set_num_threads(int);\n"
        self.library = load_library({"kernels.c": printed.source, "exactc_libm.c": runtime_source("exactc_libm.c")},
                                    cdef, options)
        self.buffers = {}
        for buf in self.kernel.buffers:
            if buf.role == "input":
                self.buffers[buf.name] = np.ascontiguousarray(arrays[buf.name])
            else:
                dtype = np.int8 if buf.ctype == "int8_t" else np.float32
                self.buffers[buf.name] = np.zeros(buf.shape, dtype=dtype)
        ffi = self.library.ffi
        self.args = [ffi.cast("void *", self.buffers[b.name].ctypes.data) for b in self.kernel.buffers]
        self.launches = list(zip(printed.functions, printed.ranges, printed.drivers))

    def threads(self, count: int) -> None:
        try:
            self.library.lib.omp_set_num_threads(count)
        except AttributeError:
            pass

    def run(self) -> None:
        lib = self.library.lib
        for function, extent, driver in self.launches:
            if driver:
                getattr(lib, driver)(*self.args)
            else:
                getattr(lib, function)(*self.args, 0, extent)


def split_in_8(layout: Layout):
    """`layout` for every nest, its outer loop (n) split in 8 pieces."""

    def plan(kernel) -> Plan:
        nests = []
        for nest in kernel.nests:
            extent = next(a.extent for a in nest.axes if a.name == layout.loop_order(nest)[0])
            nests.append((nest.name, NestPlan(layout, even_split(extent))))
        return Plan(tuple(nests))

    return plan


laned = split_in_8(LANED)
# The integer form's rows: (name, layout, whole blocks by exactc_dot.h)
INTEGER_ROWS = (("i laned", LANED, True), ("i loops", PLAIN, False), ("i plain", PLAIN, True), ("i", ROWS, True),
                ("i tile", TILE, True))


def operands(m: int, k: int, n: int, seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(np.float32), (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)


def exactc_rows(m: int, k: int, n: int) -> dict[str, tuple[list[Kernel], np.ndarray]]:
    """name -> (the kernels run in order, the output array), each checked against the reference."""
    x, w = operands(m, k, n)
    rows = {}
    f32 = Kernel("linear", {"x": x, "w": w}, {"has_b": False}, auto_kernel_plan)
    f32.run()
    assert_bits_equal(reference.run("linear", "f32", {"x": x, "w": w}, {"has_b": False})["y"], f32.buffers["y"], "f32")
    rows["f32"] = ([f32], f32.buffers["y"])
    for fmt in ("q8", "q4"):
        qt = quant.quantize_tensor("w", w, fmt, BLOCK)
        attrs = {"fmt": fmt, "block": BLOCK, "has_b": False}
        weight = Kernel("qlinear_w", {"x": x, "wq": qt.values, "wd": qt.scales}, attrs, laned)
        weight.run()
        want = reference.run("qlinear_w", "f32", {"x": x, "wq": qt.values, "wd": qt.scales}, attrs)["y"]
        assert_bits_equal(want, weight.buffers["y"], f"{fmt} w")
        rows[f"{fmt} w"] = ([weight], weight.buffers["y"])
        quantize = Kernel("quantize", {"x": x}, {"block": BLOCK}, lambda kernel: None)
        quantize.run()
        xq, xd = quantize.buffers["q"], quantize.buffers["d"]
        refq = reference.run("quantize", "f32", {"x": x}, {"block": BLOCK})
        want = reference.run("qlinear_i", "f32", {"xq": refq["q"], "xd": refq["d"], "wq": qt.values,
                                                   "wd": qt.scales}, attrs)["y"]
        for name, layout, block_sums in INTEGER_ROWS:
            integer = Kernel("qlinear_i", {"xq": xq, "xd": xd, "wq": qt.values, "wd": qt.scales}, attrs,
                             split_in_8(layout), block_sums=block_sums)
            # qlinear_i reads the quantize kernel's outputs in place: the two run as one
            integer.buffers["xq"], integer.buffers["xd"] = xq, xd
            ffi = integer.library.ffi
            integer.args = [ffi.cast("void *", integer.buffers[b.name].ctypes.data) for b in integer.kernel.buffers]
            integer.run()
            assert_bits_equal(want, integer.buffers["y"], f"{fmt} {name}")
            rows[f"{fmt} {name}"] = ([quantize, integer], integer.buffers["y"])
    if k % SUPER_BLOCK == 0:
        rows.update(k_quant_rows(x, n))
    return rows


K_SIZES = {"q4_k": 144, "q5_k": 176, "q6_k": 210}
K_ROWS = (("i", ROWS, True), ("i plain", PLAIN, True), ("i loops", PLAIN, False))
SUPER_BLOCK = 256


def k_quant_weight(fmt: str, n: int, k: int, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """(wq, wd) of random super-blocks of `fmt` with d (and dmin) 2^-10."""
    rng = np.random.default_rng(seed)
    size, blocks = K_SIZES[fmt], k // SUPER_BLOCK
    raw = rng.integers(0, 256, (n, blocks, size), dtype=np.uint8)
    field = np.frombuffer(np.float16(2.0**-10).tobytes(), np.uint8)
    for at in (208,) if fmt == "q6_k" else (0, 2):
        raw[..., at : at + 2] = field
    return raw.reshape(n, blocks * size), quant.k_quant_scales(fmt.upper(), raw).reshape(n, -1)


def k_quant_rows(x: np.ndarray, n: int) -> dict[str, tuple[list[Kernel], np.ndarray]]:
    """The k-quant rows at x's shape by n outputs, each checked against the reference."""
    rows = {}
    quantize = Kernel("quantize", {"x": x}, {"block": SUPER_BLOCK}, lambda kernel: None)
    quantize.run()
    xq, xd = quantize.buffers["q"], quantize.buffers["d"]
    for fmt in K_SIZES:
        wq, wd = k_quant_weight(fmt, n, x.shape[1])
        attrs = {"fmt": fmt, "block": SUPER_BLOCK, "has_b": False}
        want = reference.run("qlinear_i", "f32", {"xq": xq, "xd": xd, "wq": wq, "wd": wd}, attrs)["y"]
        for name, layout, block_sums in K_ROWS:
            integer = Kernel("qlinear_i", {"xq": xq, "xd": xd, "wq": wq, "wd": wd}, attrs, split_in_8(layout),
                             block_sums=block_sums)
            integer.buffers["xq"], integer.buffers["xd"] = xq, xd
            ffi = integer.library.ffi
            integer.args = [ffi.cast("void *", integer.buffers[b.name].ctypes.data) for b in integer.kernel.buffers]
            integer.run()
            assert_bits_equal(want, integer.buffers["y"], f"{fmt} {name}")
            rows[f"{fmt} {name}"] = ([quantize, integer], integer.buffers["y"])
        weight = Kernel("qlinear_w", {"x": x, "wq": wq, "wd": wd}, attrs, laned)
        weight.run()
        assert_bits_equal(reference.run("qlinear_w", "f32", {"x": x, "wq": wq, "wd": wd}, attrs)["y"],
                          weight.buffers["y"], f"{fmt} w")
        rows[f"{fmt} w"] = ([weight], weight.buffers["y"])
    return rows


def torch_rows(m: int, k: int, n: int):
    import torch
    import torch.ao.nn.quantized.dynamic as dynamic

    x, w = operands(m, k, n)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    layer = dynamic.Linear(k, n, bias_=False, dtype=torch.qint8)
    scale = float(np.abs(w).max()) / 127
    layer.set_weight_bias(torch.quantize_per_tensor(tw, scale, 0, torch.qint8), None)
    return {"torch f32": lambda: torch.nn.functional.linear(tx, tw), "torch dyn int8": lambda: layer(tx)}


def measure(threads: int) -> list[tuple[str, str, float]]:
    """(shape, row, seconds) for every shape and row at `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    out = []
    for shape, (m, k, n) in SHAPES.items():
        for name, (kernels, _) in exactc_rows(m, k, n).items():
            for kernel in kernels:
                kernel.threads(threads)
            out.append((shape, name, best_seconds(lambda: [kernel.run() for kernel in kernels], 7)))
        with torch.inference_mode():
            for name, run in torch_rows(m, k, n).items():
                out.append((shape, name, best_seconds(run, 7)))
    return out


def machine() -> str:
    """The CPU (`cpu family`, `model`) and the path exactc_dot.h takes in this build."""
    from programs_speed import cpu_field

    source = '#include "exactc_dot.h"\nconst char *dot_path(void) { return EXACTC_DOT_PATH; }\n'
    library = load_library({"dot_path.c": source}, "const char *dot_path(void);",
                           BuildOptions(cc="gcc", opt="-O2", march_native=True, openmp=True))
    path = library.ffi.string(library.lib.dot_path()).decode()
    return (f"{cpu_field('model name')}, cpu family {cpu_field('cpu family')}, model {cpu_field('model')}; "
            f"exactc_dot.h path: {path}")


def table(rows: list[tuple[int, str, str, float]]) -> list[str]:
    lines = ["| threads | shape | row | time (us) | f32 / row |", "|---|---|---|---|---|"]
    base = {(t, s): sec for t, s, name, sec in rows if name == "f32"}
    for t, s, name, sec in rows:
        m, k, n = SHAPES[s]
        lines.append(f"| {t} | {m}x{k} by {k}x{n} | {name} | {sec * 1e6:.1f} | {base[(t, s)] / sec:.2f} |")
    return lines


if __name__ == "__main__":
    import sys

    counts = [int(t) for t in sys.argv[1:]] or [1, 2]  # the thread counts, 1 and 2 unless given
    measured = [(t, s, name, sec) for t in counts for s, name, sec in measure(t)]
    print(machine())
    print("\n".join(table(measured)))
