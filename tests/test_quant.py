"""Integer operands (docs/semantics.md, section 15): the quantizer twins, the nibble
order, the two quantized linears, and the layout of stacked q4 parameters.

- C against the reference, bit for bit, for `quantize`, `qlinear_w` and `qlinear_i` at
  every site type (strategies/quant.py: blocks of zeros, one value, limits, ties, mixed
  signs; subnormal and huge scales; K that is and is not a multiple of the block; q4
  rows of an odd byte count, padding nibbles of garbage). These cases are the `quant`
  line of `make verify`.
- Pinned examples whose expected values are written here by hand, so that the twins
  cannot agree on a wrong answer: ties away from zero, zeros of both signs, the
  largest magnitude on ±127 and on -8, a subnormal scale that clamps, a scale that
  underflows to zero, NaN and ±inf blocks, a short last block.
- The exporter's side alone: ggml's Q4_0 byte order and sign rule, f16 scales, refusals.
- ggml's k-quants (Q4_K, Q5_K, Q6_K): quant.dequantize_k against the gguf package's
  dequantization on drawn super-blocks (strategies/quant.py's k_quant_rows), and the 6-bit
  scale packing and a value of each kind by hand.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exactc.exporter import export, graph, models, quant, reference, types
from exactc.exporter.primitives import K_FORMATS, PrimitiveError, block_count
from exactc.exporter.types import SITE_TYPES
from exactc.strategies.cases import Case, cases
from exactc.strategies.quant import ArraySpec, k_quant_linear_operands, k_quant_rows, stacked_q4
from exactc.verify.compare import assert_bits_equal
from exactc.verify.kernels import QUANTIZED_PRIMITIVES, assert_all_equal, run_cases

# Cases compiled together per example: in the campaign at least 6, so that its 40
# examples per primitive and type give the quant line its 2,000 cases.
BATCH = (6, 12) if os.environ.get("HYPOTHESIS_PROFILE") == "campaign" else (1, 4)
TINY = 2.0**-149  # the smallest f32 subnormal
F32_MAX = float(np.finfo(np.float32).max)


def _quantize_case(rows, site: str, block: int) -> Case:
    return Case("quantize", site, (("block", block),), (("x", ArraySpec(tuple(map(tuple, rows)), site)),))


def _c_equals_reference(case: Case) -> dict[str, np.ndarray]:
    """Run `case` in C, require the reference's bits; give the reference's outputs."""
    assert_all_equal(run_cases([case]))
    return reference.run(case.primitive, case.site, case.inputs(), case.attr_dict)


# ---- C against the reference ----------------------------------------------------------------


@pytest.mark.parametrize("site", SITE_TYPES)
@pytest.mark.parametrize("primitive", QUANTIZED_PRIMITIVES)
def test_quantized_kernels_give_the_reference_bits(primitive, site):
    @given(batch=st.lists(cases(primitive, site), min_size=BATCH[0], max_size=BATCH[1]))
    def check(batch):
        assert_all_equal(run_cases(batch))

    check()


# ---- the quantizer twins, on values chosen by hand ---------------------------------------------


def test_ties_round_away_from_zero_and_the_largest_lands_on_127():
    # amax 127 gives d = 1: every half is a tie
    (out,) = [_c_equals_reference(_quantize_case([[0.5, -2.5, 2.5, 127.0, -0.5, 1.5, -126.5, 3.0]], site, 8))
              for site in ("f32",)]
    assert out["q"].tolist() == [[1, -3, 3, 127, -1, 2, -127, 3]]
    assert out["d"].tolist() == [[1.0]]
    for site in ("f64", "bf16"):
        assert _c_equals_reference(_quantize_case([[0.5, -2.5, 2.5, 127.0]], site, 4))["q"].tolist() == [[1, -3, 3, 127]]


def test_a_tie_against_the_rounded_scale_is_a_tie():
    # amax = 1 gives d = RN(1/127), below 1/127: x = d/2 is an exact tie of x ⊘ d (so 1),
    # but below one half of 1/127's quotient: a scale kept in f64 would give 0.
    d = np.float32(1) / np.float32(127)
    assert float(d) < 1 / 127
    out = _c_equals_reference(_quantize_case([[1.0, float(d) / 2, -float(d) / 2, 3 * float(d) / 2]], "f32", 4))
    assert out["q"].tolist() == [[127, 1, -1, 2]]


def test_zeros_of_both_signs_give_scale_plus_zero_and_values_zero():
    out = _c_equals_reference(_quantize_case([[0.0, -0.0, -0.0, 0.0], [-0.0, -0.0, -0.0, -0.0]], "f32", 4))
    assert out["q"].tolist() == [[0, 0, 0, 0], [0, 0, 0, 0]]
    assert types.bits(out["d"]).tolist() == [[0], [0]]  # +0, never -0


def test_a_subnormal_scale_clamps_and_an_underflowing_one_is_zero():
    # amax = 190 * 2^-149: d = RN(190/127 * 2^-149) = 2^-149, quotients 190 -> clamped
    # amax = 63 * 2^-149: d = RN(0.496 * 2^-149) = +0: values 0, no division
    rows = [[190 * TINY, -190 * TINY, TINY, 0.0], [63 * TINY, -63 * TINY, TINY, 0.0]]
    out = _c_equals_reference(_quantize_case(rows, "f32", 4))
    assert out["q"].tolist() == [[127, -127, 1, 0], [0, 0, 0, 0]]
    assert out["d"].tolist() == [[TINY], [0.0]]


def test_huge_values_and_non_finite_blocks():
    rows = [[F32_MAX, -F32_MAX, 0.0, 1.0], [1.0, np.nan, 2.0, 3.0], [np.inf, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, -np.inf]]
    out = _c_equals_reference(_quantize_case(rows, "f32", 4))
    assert out["q"].tolist() == [[127, -127, 0, 0], [0] * 4, [0] * 4, [0] * 4]
    assert out["d"][0, 0] == np.float32(F32_MAX) / np.float32(127)
    assert np.isnan(out["d"][1:]).all()


def test_a_short_last_block_is_a_block_of_its_own():
    # K = 7, G = 4: blocks [0, 4) and [4, 7); each its own largest magnitude
    out = _c_equals_reference(_quantize_case([[1.0, 2.0, 4.0, 127.0, 0.5, -1.0, 1.0]], "f32", 4))
    assert out["q"].tolist() == [[1, 2, 4, 127, 64, -127, 127]]
    assert out["d"].tolist() == [[1.0, float(np.float32(1) / np.float32(127))]]
    assert out["q"].shape == (1, 7) and out["d"].shape == (1, block_count(7, 4))


def test_the_numpy_quantizer_matches_the_rules_on_its_own():
    """The exporter's side without the kernel: the same values as the pinned cases."""
    q, d = quant.quantize_q8_blocks(np.array([[0.5, -2.5, 2.5, 127.0, 0.0, -0.0, 0.0, 0.0]], np.float32), 4)
    assert q.tolist() == [[1, -3, 3, 127, 0, 0, 0, 0]] and d.tolist() == [[1.0, 0.0]]
    r = np.array([0.49999997, 0.5, -0.5, 1.5, 2.5, -2.5, 8388607.5, -0.0], np.float32)
    assert quant.round_half_away(r).tolist() == [0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 8388608.0, 0.0]


# ---- the two linears, by hand ----------------------------------------------------------------------


def _linear_case(primitive: str, site: str, fmt: str, block: int, operands: dict) -> Case:
    attrs = (("block", block), ("fmt", fmt), ("has_b", "b" in operands))
    return Case(primitive, site, attrs, tuple(operands.items()))


@pytest.mark.parametrize("site", SITE_TYPES)
def test_integer_form_sums_each_block_then_scales(site):
    """K = 7 in blocks of 4 (a short last block of 3): with every value 1, the block
    sums are 4 and 3; xd = (1, 2), wd = (0.5, 1): y = 4·(1·0.5) + 3·(2·1) = 8."""
    acc = "f64" if site == "f64" else "f32"
    case = _linear_case("qlinear_i", site, "q8", 4, {
        "xq": ArraySpec(((1,) * 7,), "int8"), "xd": ArraySpec(((1.0, 2.0),), acc),
        "wq": ArraySpec(((1,) * 7,), "int8"), "wd": ArraySpec(((0.5, 1.0),), "f32"),
    })
    assert _c_equals_reference(case)["y"].tolist() == [[8.0]]


def test_integer_form_sums_in_int32_at_the_limits():
    """Blocks of 64 at -128 · -128 and 127 · 127 (sums 2^20 and 1032256, past int16):
    y = (2^20 + 1032256) · 2^-20 exactly."""
    case = _linear_case("qlinear_i", "f32", "q8", 64, {
        "xq": ArraySpec(((-128,) * 64 + (127,) * 64,), "int8"), "xd": ArraySpec(((2.0**-10, 2.0**-10),), "f32"),
        "wq": ArraySpec(((-128,) * 64 + (127,) * 64,), "int8"), "wd": ArraySpec(((2.0**-10, 2.0**-10),), "f32"),
    })
    assert _c_equals_reference(case)["y"].tolist() == [[(2**20 + 1032256) * 2.0**-20]]


@pytest.mark.parametrize("primitive", ["qlinear_w", "qlinear_i"])
def test_q4_values_come_from_both_nibbles_of_a_byte(primitive):
    """One block of 4 (two bytes): byte 0 holds values 0 (low) and 2 (high), byte 1
    values 1 and 3. Bytes 0x80, 0xF7 are nibbles 0, 7 | 8, 15: values -8, -1, 0, 7.
    With x = (1, 10, 100, 1000) and scale 1: y = -8 - 10 + 0 + 7000 = 6982."""
    weights = {"wq": ArraySpec(((0x80, 0xF7),), "uint8"), "wd": ArraySpec(((1.0,),), "f32")}
    if primitive == "qlinear_w":
        operands = {"x": ArraySpec(((1.0, 10.0, 100.0, 1000.0),), "f32"), **weights}
    else:
        operands = {"xq": ArraySpec(((1, 10, 100, 127),), "int8"), "xd": ArraySpec(((1.0,),), "f32"), **weights}
    y = _c_equals_reference(_linear_case(primitive, "f32", "q4", 4, operands))["y"]
    assert y.tolist() == [[6982.0 if primitive == "qlinear_w" else -8 - 10 + 0 + 7 * 127.0]]


def test_one_pack_of_q4_bytes_serves_both_nibble_loops():
    """q4's values are read twice a byte, by the low-nibble loop k and the high-nibble
    loop kh (wq[n, 16 blk + k], wq[n, 16 blk + kh]): one panel of the bytes serves both
    (layouts.pack_accesses), each read renamed to its loop. Under lanes of rows and
    columns, of columns alone, and a split, the reference's bits."""
    from exactc.exporter.kernels.layouts import Layout
    from exactc.exporter.kernels.plans import NestPlan, Plan
    from exactc.exporter.kernels.splits import Split

    rng = np.random.default_rng(11)
    rows, k, n, block = 5, 64, 19, 32
    operands = {"x": ArraySpec(tuple(map(tuple, rng.uniform(-2, 2, (rows, k)).astype(np.float32).tolist())), "f32"),
                "wq": ArraySpec(tuple(map(tuple, rng.integers(0, 256, (n, k // 2)).tolist())), "uint8"),
                "wd": ArraySpec(tuple(map(tuple, rng.uniform(0.01, 0.1, (n, k // block)).tolist())), "f32")}
    case = _linear_case("qlinear_w", "f32", "q4", block, operands)
    layouts = [Layout(order=("n", "m"), lanes=(("m", 2), ("n", 4)), packs=("wq", "wd")),
               Layout(order=("n", "m"), lanes=(("n", 16),), packs=("wq",))]
    plans = [Plan((("qlinear_w", NestPlan(layout)),)) for layout in layouts]
    plans.append(Plan((("qlinear_w", NestPlan(layouts[0], Split(0, ((0, 8), (8, 19))))),)))
    assert_all_equal(run_cases([case] * len(plans), plans=plans))


def test_weight_only_form_dequantizes_in_f32_then_sums_in_order():
    """w = wd ⊗ value in f32 (1.5 · 3 = 4.5), then the ordinary linear, bias last."""
    case = _linear_case("qlinear_w", "bf16", "q8", 2, {
        "x": ArraySpec(((1.0, 2.0, 4.0),), "bf16"), "wq": ArraySpec(((3, -1, 2),), "int8"),
        "wd": ArraySpec(((1.5, 0.25),), "f32"), "b": ArraySpec((0.5,), "bf16"),
    })
    assert _c_equals_reference(case)["y"].astype(np.float32).tolist() == [[1 * 4.5 - 2 * 1.5 + 4 * 0.5 + 0.5]]


def test_shapes_that_break_the_block_rules_are_refused():
    refuse = [
        ({"x": (2, 7)}, {"block": 0}, "quantize", "block is 0; it must be an int in 1..65536"),
        ({"x": (2, 7), "wq": (3, 4), "wd": (3, 2)}, {"fmt": "q4", "block": 3}, "qlinear_w",
         "block is 3; a q4 block is an even number of values"),
        ({"x": (2, 7), "wq": (3, 7), "wd": (3, 2)}, {"fmt": "q4", "block": 4}, "qlinear_w",
         "wq has shape (3, 7); a q4 row of 7 values in blocks of 4 is 4 bytes (2 blocks of 2)"),
        ({"x": (2, 7), "wq": (3, 7), "wd": (3, 7)}, {"fmt": "q8", "block": 4}, "qlinear_w",
         "wd has shape (3, 7); it must be (3, 2): one scale per row and block of 4"),
        ({"xq": (2, 7), "xd": (2, 1), "wq": (3, 7), "wd": (3, 2)}, {"block": 4}, "qlinear_i",
         "xd has shape (2, 1); it must be (2, 2)"),
        ({"x": (2, 7), "wq": (3, 7), "wd": (3, 2)}, {"fmt": "q2", "block": 4}, "qlinear_w",
         "fmt is 'q2'; it must be one of q8, q4"),
    ]
    from exactc.exporter.kernels import lower

    for shapes, attrs, primitive, message in refuse:
        with pytest.raises(PrimitiveError, match=rf"^{primitive}: " + message.replace("(", r"\(").replace(")", r"\)")):
            lower(primitive, "f32", shapes, attrs)


# ---- the exporter's quantizer: ggml's Q4_0 order, f16 scales, refusals -------------------------------


def test_q4_byte_order_is_ggml_q4_0():
    """Block element j in the low nibble of byte j, element j + 16 in the high nibble;
    value = nibble - 8 (nibble 8 is 0, nibble 0 is -8)."""
    nibbles = np.arange(32, dtype=np.uint8).reshape(1, 1, 32) % 16
    packed = quant.pack_q4(nibbles)
    assert packed.shape == (1, 16)
    assert packed[0, 0] == 0x00 | (16 % 16) << 4 and packed[0, 3] == 3 | (19 % 16) << 4
    assert [int(b) for b in packed[0]] == [j | (((j + 16) % 16) << 4) for j in range(16)]
    assert quant.unpack_q4(np.array([[0x80, 0xF7]], np.uint8), 4, 4).tolist() == [[-8, -1, 0, 7]]
    assert quant.unpack_q4(np.array([[0x88]], np.uint8), 2, 2).tolist() == [[0, 0]]


def test_q4_quantizer_puts_the_first_largest_magnitude_on_minus_8():
    """m = 4 (the first of |4| and |-4|), d = 4 ⊘ -8 = -0.5; -4 ⊘ d = 8 clamps to 7."""
    qt = quant.quantize_tensor("w", np.array([[1.0, -2.0, 4.0, -4.0]]), "q4", 4)
    assert qt.scales.tolist() == [[-0.5]]
    assert quant.unpack_q4(qt.values, 4, 4).tolist() == [[-2, 4, -8, 7]]
    zeros = quant.quantize_tensor("w", np.zeros((1, 5)), "q4", 6)  # a short block of 5 in 6
    assert zeros.values.tolist() == [[0x88, 0x88, 0x88]]
    assert types.bits(zeros.scales).tolist() == [[0x80000000]]  # +0 ⊘ -8 = -0


def test_q8_quantizer_refuses_nan_and_infinity_naming_the_tensor_and_index():
    w = np.ones((2, 5))
    w[1, 3] = np.nan
    with pytest.raises(quant.QuantError, match=r"tensor layers\.0\.wq: element at index \(1, 3\) is nan"):
        quant.quantize_tensor("layers.0.wq", w, "q8", 4)
    big = np.ones((3,))
    big[2] = 1e39  # finite as a real, infinite in f32
    with pytest.raises(quant.QuantError, match=r"tensor wo: element at index \(2,\) is inf"):
        quant.quantize_tensor("wo", big, "q4", 2)


def test_f16_scales_widen_exactly_and_non_finite_ones_are_refused():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = every[np.isfinite(every)]
    widened = quant.scales_from_f16("blk.0.attn_q", finite)
    assert widened.dtype == np.float32
    assert (widened.astype(np.float64) == finite.astype(np.float64)).all()  # exact, subnormals too
    with pytest.raises(quant.QuantError, match=r"tensor blk\.0\.attn_q: scale at index \(1,\) is inf"):
        quant.scales_from_f16("blk.0.attn_q", np.array([1.0, np.inf], np.float16))


@given(k=st.integers(1, 70), block=st.sampled_from([1, 3, 4, 32, 64]), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([1.0, 1e-3, 1e30, 1e-38]))
def test_q8_dequantized_error_is_at_most_half_a_step(k, block, seed, scale):
    """Normal scales: |w - d·q| <= d/2 (one rounding of the quotient, d ≈ amax/127),
    and each block's largest magnitude lands on ±127."""
    w = types.round_to_site(np.random.default_rng(seed).standard_normal((3, k)) * scale, "f32")
    qt = quant.quantize_tensor("w", w, "q8", block)
    d = np.repeat(qt.scales, block, axis=-1)[:, :k].astype(np.float64)
    normal = d > 2.0**-126
    error = np.abs(w.astype(np.float64) - qt.values.astype(np.float64) * d)
    assert (error[normal] <= d[normal] * (0.5 + 2.0**-20)).all()
    for b in range(block_count(k, block)):
        largest = np.abs(qt.values[:, b * block : (b + 1) * block].astype(np.int16)).max(axis=-1)
        assert ((largest == 127) | (qt.scales[:, b] == 0)).all()


# ---- stacked q4 parameters: whole rows of whole blocks ---------------------------------------------


@given(stacked=stacked_q4())
@example(stacked=(3, 5, 5, 6, 1))  # 3 bytes a row (G/2 = 3, one block): odd rows, odd layers
def test_a_layer_of_a_stacked_q4_parameter_starts_on_a_block_and_a_byte(stacked):
    layers, rows, k, block, seed = stacked
    w = np.random.default_rng(seed).standard_normal((layers, rows, k))
    qt = quant.quantize_tensor("layers.w1", w, "q4", block)
    row_bytes = block_count(k, block) * (block // 2)
    flat = qt.values.reshape(-1)
    for layer in range(layers):
        alone = quant.quantize_tensor(f"layers.{layer}.w1", w[layer], "q4", block)
        offset = qt.layer_byte_offset(layer)
        assert offset == layer * rows * row_bytes and offset % (block // 2) == 0
        assert_bits_equal(alone.values.reshape(-1), flat[offset : offset + rows * row_bytes], f"layer {layer}'s bytes")
        sliced = qt.layer(layer)
        for what, want, got in (("values", alone.values, sliced.values), ("scales", alone.scales, sliced.scales),
                                ("dequantized", alone.dequantize(), sliced.dequantize())):
            assert_bits_equal(want, got, f"layer {layer}'s {what}", every_bit=True)


def test_a_slice_inside_a_byte_cannot_be_made():
    """A QuantizedTensor is indexed by whole rows: values cut along the reduction axis
    (a slice that would start inside a byte or a block) are refused, and a single row
    has no layer to take."""
    qt = quant.quantize_tensor("w", np.ones((2, 3, 10)), "q4", 4)
    with pytest.raises(quant.QuantError, match=r"rows of 10 values in blocks of 4 are uint8 \(\.\.\., 6\)"):
        quant.QuantizedTensor("q4", 4, 10, qt.values[..., 1:], qt.scales)
    with pytest.raises(quant.QuantError, match="a row of blocks has no layer to take"):
        quant.QuantizedTensor("q4", 4, 10, qt.values[0, 0], qt.scales[0, 0]).layer(0)


# ---- the quantizer: refusals, stacked tensors, the float parameters beside


def test_quant_block_refusals_whole():
    from exactc.exporter import quant
    top = quant.MAX_BLOCK
    for fmt, block in [("q8", True), ("q8", 2.0), ("q8", 0), ("q4", top + 1)]:
        with pytest.raises(quant.QuantError) as caught:
            quant.check_block(fmt, block)
        assert str(caught.value) == f"block {block!r} must be an int in 1..{top}"
    with pytest.raises(quant.QuantError) as caught:
        quant.check_block("q4", 3)
    assert str(caught.value) == "block 3: a q4 block holds an even number of values (two to a byte)"
    quant.check_block("q8", 3)  # an odd block is a q8 block
    quant.check_block("q8", top)
    quant.check_block("q4", top - top % 2)


def test_quant_stacked_tensors_are_their_layers():
    """A stacked weight (layers, rows, k) quantizes, packs, unpacks and dequantizes as
    its layers one by one; `layer` takes one, and a single row has none to take."""
    from exactc.exporter import quant
    rng = np.random.default_rng(4)
    values = rng.standard_normal((3, 2, 20)).astype(np.float32)
    for fmt, block in [("q8", 8), ("q4", 8)]:
        whole = quant.quantize_tensor("w", values, fmt, block)
        assert whole.shape == (3, 2, 20) and whole.scales.shape == (3, 2, 3)
        for i in range(3):
            one = quant.quantize_tensor("w", values[i], fmt, block)
            layer = whole.layer(i)
            assert (layer.values == one.values).all() and (layer.scales == one.scales).all()
            assert (whole.dequantize()[i] == one.dequantize()).all()
            assert whole.layer_byte_offset(i) == i * one.values.size * one.values.itemsize
            if fmt == "q4":
                unpacked = quant.unpack_q4(whole.values, 20, block)
                assert unpacked.dtype == np.int8 and unpacked.shape == (3, 2, 20)
                assert (unpacked[i] == quant.unpack_q4(one.values, 20, block)).all()
                assert (quant.pack_q4((unpacked[i, :, :16].reshape(2, 2, 8) + 8).astype(np.uint8))
                        == one.values[:, :8]).all()
        assert (whole.dequantize() == quant.dequantize(fmt, whole.values, whole.scales, 20, block)).all()
        row = whole.layer(0).layer(1)
        with pytest.raises(quant.QuantError) as caught:
            row.layer(0)
        assert str(caught.value) == "a row of blocks has no layer to take; index a stacked tensor"
    with pytest.raises(quant.QuantError) as caught:
        quant.QuantizedTensor("q8", 8, 20, whole.values[:, :, :0].astype(np.int8), whole.scales)
    assert str(caught.value).startswith("q8 values int8(3, 2, 0): rows of 20 values in blocks of 8 are int8 (..., 20)")
    bad = quant.quantize_tensor("w", values, "q8", 8)
    with pytest.raises(quant.QuantError) as caught:
        quant.QuantizedTensor("q8", 8, 20, bad.values, bad.scales[:, :, :2])
    assert str(caught.value) == "scales float32(3, 2, 2): one f32 per row and block, (3, 2, 3)"


def test_quant_parameters_round_the_float_ones_to_the_site():
    from exactc.exporter import export, quant
    program = export.trace("llama", "forward", {"vocab": 16, "dim": 16, "heads": 2, "kv_heads": 1, "layers": 1,
                                                "mlp": 16, "tokens": 4}, ("q8", 8))
    from exactc.exporter import models
    reals = models.draw_parameters(program, 0, "f64")
    out = quant.quantize_parameters(program, {k: np.asarray(v, np.float64) for k, v in reals.items()}, "bf16")
    floats = [name for name in reals if name not in program.quantized]
    assert floats and all(out[n].dtype == types.round_to_site(np.asarray(reals[n], np.float64), "bf16").dtype
                          and (out[n] == types.round_to_site(np.asarray(reals[n], np.float64), "bf16")).all()
                          for n in floats)


# ---- the quantizer at its edges (exporter/quant.py)


def test_q4_clips_a_quotient_below_when_a_subnormal_scale_rounds_down():
    from exactc.exporter import quant
    ulp = 2.0 ** -149
    # m = 9 ulp: m / -8 = -1.125 ulp rounds to -1 ulp, so m's own quotient is -9, clipped to -8
    nibbles, scales = quant.quantize_q4_blocks(np.array([[9 * ulp, 0, 0, 0, 3 * ulp, 0]], np.float32), 4)
    assert scales.dtype == np.float32 and scales.tolist() == [[np.float32(-ulp), 0]]
    # m = 3 ulp: its scale underflows to 0, and the block (with its padding) is stored as 8s
    assert nibbles.tolist() == [[[0, 8, 8, 8], [8, 8, 8, 8]]]


def test_quant_rounding_keeps_the_type_and_dequantize_overflows_quietly():
    import warnings

    from exactc.exporter import quant
    r = quant.round_half_away(np.array([0.5, -2.5, 1.49], np.float32))
    assert r.dtype == np.float32 and r.tolist() == [1, -3, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # IEEE's inf, not numpy's overflow warning
        w = quant.dequantize("q8", np.array([[127, 1]], np.int8), np.array([[3e38]], np.float32), 2, 2)
    assert w.dtype == np.float32 and w.tolist() == [[np.inf, np.float32(3e38)]]


def test_quant_parameters_refuse_a_nonfinite_weight_by_its_name():
    from exactc.exporter import export, models, quant
    program = export.trace("llama", "forward", {"vocab": 16, "dim": 16, "heads": 2, "kv_heads": 1, "layers": 1,
                                                "mlp": 16, "tokens": 4}, ("q8", 8))
    reals = {k: np.asarray(v, np.float64) for k, v in models.draw_parameters(program, 0, "f64").items()}
    name = "model.layers.{l}.mlp.up_proj.weight"
    reals[name][0, 3, 7] = np.nan
    with pytest.raises(quant.QuantError) as caught:
        quant.quantize_parameters(program, reals, "f32")
    assert str(caught.value).startswith(f"tensor {name}: element at index (0, 3, 7) is nan")


# ---- zero and non-finite blocks quantized without a NaN cast (warnings as errors)


def test_zero_and_nonfinite_blocks_quantize_to_zero_without_a_nan_cast():
    """A block of scale 0 (zeros, or values whose amax / 127 underflows) and a block
    holding NaN or inf (zeroed first) are divided by 1, not by NaN: q 0 with no
    `invalid value encountered in cast` (that NaN is 0 in int8 only by x86-64's
    conversion)."""
    from exactc.exporter import quant

    ulp = 2.0 ** -149
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q, scales = quant.quantize_q8_blocks(
            np.array([[0, 0, 0, 0, np.nan, 1, 2, 3, ulp, 0, 0, -ulp, 127, -254, 0, 1]], np.float32), 4)
        q64, scales64 = quant.quantize_q8_blocks(np.array([[0, 0, 0, np.inf, 1, 2]], np.float64), 3)
        nibbles, scales4 = quant.quantize_q4_blocks(np.array([[0, 0, 0, 0, 8, -16, 0, 1]], np.float32), 4)
    assert q.dtype == np.int8 and q.tolist() == [[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, -127, 0, 1]]
    assert scales.dtype == np.float32 and np.array_equal(scales, np.array([[0, np.nan, 0, 2]], np.float32),
                                                         equal_nan=True)
    assert q64.tolist() == [[0, 0, 0, 0, 0, 0]] and np.array_equal(scales64, [[0, np.nan]], equal_nan=True)
    assert nibbles.tolist() == [[[8, 8, 8, 8], [12, 0, 8, 9]]] and scales4.tolist() == [[0, 2]]


# ---- the quantizer


F32 = np.float32

# (case, the call, the whole message)
QUANT_REFUSALS = [
    ("an unknown format", lambda: quant.check_block("q5", 32), "format 'q5' is not one of q8, q4"),
    ("q8 of integers", lambda: quant.quantize_q8_blocks(np.arange(4), 4),
     "values have dtype int64; quantize f32 or f64 values"),
    ("q4 of f64", lambda: quant.quantize_q4_blocks(np.ones(4), 4),
     "q4 quantizes finite f32 values (quantize_tensor checks and rounds them)"),
    ("q4 of an infinity", lambda: quant.quantize_q4_blocks(np.array([1, np.inf], F32), 2),
     "q4 quantizes finite f32 values (quantize_tensor checks and rounds them)"),
    ("a q4 row a byte short", lambda: quant.unpack_q4(np.zeros(3, np.uint8), 8, 8),
     "q4 row of 3 bytes; 8 values in blocks of 8 take 4"),
    ("a scale per row, not per block", lambda: quant.QuantizedTensor("q8", 4, 8, np.zeros((2, 8), np.int8),
                                                                     np.zeros((2, 1), F32)),
     "scales float32(2, 1): one f32 per row and block, (2, 2)"),
    ("f64 scales", lambda: quant.QuantizedTensor("q4", 4, 8, np.zeros((2, 4), np.uint8), np.zeros((2, 2))),
     "scales float64(2, 2): one f32 per row and block, (2, 2)"),
    ("a scalar", lambda: quant.quantize_tensor("norm.g", 1.5, "q8", 4),
     "tensor norm.g: a scalar has no reduction axis to quantize along"),
    ("f32 scales for f16", lambda: quant.scales_from_f16("blk.0.attn_q.weight", np.ones(2, F32)),
     "tensor blk.0.attn_q.weight: scales of dtype float32; this reads f16 scales"),
]


@pytest.mark.parametrize("case, call, message", QUANT_REFUSALS, ids=[c for c, _, _ in QUANT_REFUSALS])
def test_the_quantizer_refuses_with_the_whole_message(case, call, message):
    with pytest.raises(quant.QuantError, match=f"^{re.escape(message)}$"):
        call()


def test_given_blocks_that_do_not_fit_the_program_are_refused():
    """A checkpoint's own blocks are used as they are only in the program's format and
    block; in blocks of 4 for a program of blocks of 8 they are refused by name."""
    overrides = {"vocab": 40, "positions": 10, "dim": 16, "heads": 2, "layers": 1, "mlp": 24, "tokens": 6}
    program = export.trace("gpt", "forward", overrides, ("q8", 8))
    reals = models.draw_parameters(models.build("gpt", "forward", overrides), 5, "f64")
    name = "transformer.h.{l}.attn.c_attn.weight"  # stacked over layers, as ParamSpecs name it
    assert name in program.quantized
    fitting = quant.quantize_tensor(name, reals[name], "q8", 8)
    out = quant.quantize_parameters(program, reals, "f32", {name: fitting})
    assert out[name] is fitting.values and out[name + graph.SCALE_SUFFIX] is fitting.scales
    shape = tuple(np.shape(reals[name]))
    message = (f"tensor {name}: q8 in blocks of 4, shape {shape}; the program holds it as q8 in blocks of 8, "
               f"shape {shape}")
    with pytest.raises(quant.QuantError, match=f"^{re.escape(message)}$"):
        quant.quantize_parameters(program, reals, "f32", {name: quant.quantize_tensor(name, reals[name], "q8", 4)})


# ---- ggml's k-quants (Q4_K, Q5_K, Q6_K): the reference dequantization against the gguf
# package's own, and the 6-bit scale packing by hand


@pytest.mark.parametrize("kind", sorted(quant.K_QUANT_BYTES))
@given(data=st.data())
def test_k_quants_dequantize_to_the_gguf_packages_f32_bits(kind, data):
    """Drawn super-blocks (random, zero and 0xFF bytes, finite f16 d and dmin): exactc's
    f32 values are the gguf package's, bit for bit (its dequantization is ggml's, written
    apart from exactc's)."""
    import gguf

    rows = data.draw(k_quant_rows(kind))
    ours = quant.dequantize_k(kind, rows)
    theirs = gguf.quants.dequantize(rows, getattr(gguf.GGMLQuantizationType, kind))
    assert ours.dtype == np.float32 and ours.shape == (rows.shape[0], rows.shape[1] // quant.K_QUANT_BYTES[kind] * 256)
    assert_bits_equal(theirs, ours, f"{kind} values", every_bit=True, labels=("gguf.quants", "quant.dequantize_k"))


def test_k_quant_scales_and_mins_unpack_six_bits_by_hand():
    """Scales 0-3 and mins 0-3 are the low 6 bits of bytes 0-7; scale 4 + j is byte 8 + j's
    low nibble below byte j's top 2 bits, min 4 + j byte 8 + j's high nibble below byte
    4 + j's top 2 bits."""
    packed = np.array([0b11_000001, 0b00_000010, 0b01_000011, 0b10_111111,
                       0b01_000100, 0b10_000101, 0b11_000110, 0b00_000111,
                       0xA5, 0x3C, 0x0F, 0xF0], dtype=np.uint8)
    scales, mins = quant.k_scales_and_mins(packed)
    assert scales.tolist() == [1, 2, 3, 63, 0x35, 0x0C, 0x1F, 0x20]
    assert mins.tolist() == [4, 5, 6, 7, 0x1A, 0x23, 0x30, 0x0F]


def test_k_quant_values_by_hand():
    """One super-block of each kind with chosen bytes: Q4_K and Q5_K give (d·scale)·q −
    dmin·min, Q6_K (d·scale)·(q − 32), each value at its place in the row."""
    q4 = np.zeros(144, np.uint8)
    q4[0:2], q4[2:4] = _f16(0.5), _f16(0.25)  # d, dmin
    q4[4], q4[8] = 3, 2  # scale 0 = 3, min 0 = 2
    q4[4 + 8] = 0x61  # scale 4 = 1, min 4 = 6
    q4[16] = 0x9F  # value 0 nibble 15, value 32 nibble 9 (scale 1, min 1: 0)
    q4[16 + 64] = 0x07  # value 128 (sub-block 4) nibble 7
    got = quant.dequantize_k("Q4_K", q4)
    assert got[0] == 0.5 * 3 * 15 - 0.25 * 2 and got[1] == -0.5 and got[32] == 0.0
    assert got[128] == 0.5 * 1 * 7 - 0.25 * 6 and got[129] == -1.5
    q5 = np.zeros(176, np.uint8)
    q5[0:2] = _f16(1.0)
    q5[4:8] = 1  # scales 0-3 = 1
    q5[16] = 0b0000_0011  # value 0: the high bit of sub-blocks 0 and 1
    q5[48] = 0x21  # value 0 low nibble 1, value 32 low nibble 2
    got = quant.dequantize_k("Q5_K", q5)
    assert (got[0], got[32], got[1], got[64]) == (17.0, 18.0, 0.0, 0.0)
    q6 = np.zeros(210, np.uint8)
    q6[208:210] = _f16(0.5)
    q6[192:208] = (np.arange(1, 17) * np.tile([1, -1], 8)).astype(np.int8).view(np.uint8)  # 1, -2, 3, ...
    q6[0], q6[32] = 0x5A, 0x03  # values 0 and 64 low nibbles 10 and 5; value 32 low nibble 3
    q6[128] = 0b11_10_01_00  # value 0 high 0, value 32 high 1, value 64 high 2, value 96 high 3
    got = quant.dequantize_k("Q6_K", q6)
    assert got[0] == 0.5 * 1 * (10 - 32) and got[32] == 0.5 * 3 * (3 + 16 - 32)
    assert got[64] == 0.5 * 5 * (5 + 32 - 32) and got[96] == 0.5 * 7 * (48 - 32)
    assert got[16] == 0.5 * -2 * -32 and got[128] == 0.5 * 9 * -32


def _f16(value: float) -> np.ndarray:
    return np.frombuffer(np.float16(value).tobytes(), np.uint8)


def test_k_quant_rows_of_another_length_or_kind_are_refused():
    with pytest.raises(quant.QuantError, match=r"^Q6_K rows of uint8\(2, 200\): uint8 rows of whole super-blocks "
                                               r"of 210 bytes$"):
        quant.dequantize_k("Q6_K", np.zeros((2, 200), np.uint8))
    with pytest.raises(quant.QuantError, match=r"^'Q3_K' is not a k-quant exactc reads \(Q4_K, Q5_K, Q6_K\)$"):
        quant.dequantize_k("Q3_K", np.zeros(110, np.uint8))


# ---- k-quants as the weights of qlinear_w and qlinear_i: both twins, bit for bit, and
# against the gguf package's dequantization and exact arithmetic


@pytest.mark.parametrize("site", SITE_TYPES)
@pytest.mark.parametrize("fmt", K_FORMATS)
@pytest.mark.parametrize("primitive", ["qlinear_w", "qlinear_i"])
def test_k_quant_kernels_give_the_reference_bits(primitive, fmt, site):
    """Drawn super-blocks (random, zero and 0xFF bytes: every scale and min 63), their own
    f16 fields or drawn f32 ones (subnormal, huge, zero, negative) as wd: C against the
    reference."""
    @given(batch=st.lists(k_quant_linear_operands(primitive, site, fmt), min_size=BATCH[0], max_size=BATCH[1]))
    def check(batch):
        assert_all_equal(run_cases([_linear_case(primitive, site, fmt, 256, specs) for _, specs in batch]))

    check()


@pytest.mark.parametrize("fmt", K_FORMATS)
@given(data=st.data())
def test_k_quant_weight_only_form_is_the_f32_linear_of_the_gguf_packages_weights(fmt, data):
    """qlinear_w over a k-quant weight whose wd is its own f16 fields: the bits of the
    float linear over the weights the gguf package dequantizes (ggml's reading, written
    apart from exactc's), in C and in the reference."""
    import gguf

    attrs, specs = data.draw(k_quant_linear_operands("qlinear_w", "f32", fmt))
    specs = {**specs, "wd": dataclasses.replace(specs["wq"], part="fields")}
    case = _linear_case("qlinear_w", "f32", fmt, 256, specs)
    inputs = case.inputs()
    weights = gguf.quants.dequantize(inputs["wq"], getattr(gguf.GGMLQuantizationType, fmt.upper()))
    want = reference.run("linear", "f32", {"x": inputs["x"], "w": weights, **({"b": inputs["b"]} if "b" in inputs else {})},
                         {"has_b": "b" in inputs})["y"]
    assert_bits_equal(want, _c_equals_reference(case)["y"], f"{fmt} qlinear_w", every_bit=True,
                      labels=("linear of gguf's weights", "qlinear_w"))


def _k_exact_case(primitive_site: str, fmt: str, rng) -> tuple[Case, float]:
    """A qlinear_i case of two super-blocks in which every rounding is exact (powers of two
    for d, dmin and xd at f64, small integers elsewhere): y is Σ_k xd·xq[k]·w[k] with the
    weights the gguf package dequantizes, computed here in exact rationals."""
    import gguf

    size, fields = K_FORMATS[fmt]
    raw = rng.integers(0, 256, (1, 2 * size), dtype=np.uint8)
    halves = [2.0**-3, 2.0**-5] if fields == 2 else [2.0**-4]
    for blk in range(2):
        for field, at in enumerate((0, 2) if fields == 2 else (size - 2,)):
            raw[0, blk * size + at:blk * size + at + 2] = _f16(halves[field] * (blk + 1))
    xq = rng.integers(-128, 128, (1, 512), dtype=np.int8)
    xd = np.array([[2.0**-7, 2.0**-6]])
    case = _linear_case("qlinear_i", primitive_site, fmt, 256, {
        "xq": ArraySpec(tuple(map(tuple, xq.tolist())), "int8"), "xd": ArraySpec(tuple(map(tuple, xd.tolist())), "f64"),
        "wq": ArraySpec(tuple(map(tuple, raw.tolist())), "uint8"),
        "wd": ArraySpec(tuple(map(tuple, quant.k_quant_scales(fmt.upper(), raw.reshape(1, 2, size)).reshape(1, -1).tolist())),
                        "f32"),
    })
    weights = gguf.quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, fmt.upper()))[0]
    exact = sum(Fraction(float(xd[0, k // 256])) * int(xq[0, k]) * Fraction(float(weights[k])) for k in range(512))
    return case, float(exact)


@pytest.mark.parametrize("fmt", K_FORMATS)
def test_k_quant_integer_form_is_exact_when_no_step_rounds(fmt):
    """At f64, with power-of-two d, dmin and xd, the integer form's sums S and M scaled and
    combined lose nothing: y is the exact Σ xd·xq·w over the gguf package's weights."""
    case, exact = _k_exact_case("f64", fmt, np.random.default_rng(5))
    assert _c_equals_reference(case)["y"].tolist() == [[exact]]


def test_k_quant_integer_form_adds_the_scale_term_then_subtracts_the_min_term():
    """Q4_K, two super-blocks, d = dmin = 1 in both, at f32. Block 0: sub-block 0's scale 1
    and min 0, value 0's nibble 1, xq[0] = 1 and xd = 2^24: S = 1, M = 0, acc = 2^24.
    Block 1: scale and min 1, value 256's nibble 1, xq[256] = 1 and xd = 1: S = M = 1.
    The spec's order, (2^24 ⊕ 1) ⊖ 1, rounds the tie 2^24 + 1 to 2^24 and gives
    2^24 − 1; the other order (2^24 ⊖ 1) ⊕ 1 would give 2^24, adding the min term 2^24."""
    raw = np.zeros((1, 288), np.uint8)
    for blk in range(2):
        raw[0, 144 * blk:144 * blk + 4] = np.concatenate([_f16(1.0), _f16(1.0)])
        raw[0, 144 * blk + 4] = 1  # scale 0
        raw[0, 144 * blk + 16] = 0x01  # value 0 of the super-block: nibble 1
    raw[0, 144 + 8] = 1  # block 1's min 0
    xq = np.zeros((1, 512), np.int8)
    xq[0, 0] = xq[0, 256] = 1
    case = _linear_case("qlinear_i", "f32", "q4_k", 256, {
        "xq": ArraySpec(tuple(map(tuple, xq.tolist())), "int8"), "xd": ArraySpec(((2.0**24, 1.0),), "f32"),
        "wq": ArraySpec(tuple(map(tuple, raw.tolist())), "uint8"), "wd": ArraySpec(((1.0, 1.0, 1.0, 1.0),), "f32"),
    })
    assert _c_equals_reference(case)["y"].tolist() == [[2.0**24 - 1]]
