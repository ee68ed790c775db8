"""The one bit comparison, docs/semantics.md's rule: every bit, except that any f64 or f32
NaN equals any other; bf16 (and a bf16 site's values widened to f32) and integers on
every bit. Its Python form (verify/compare.py) and its C form (conformance/compare,
runtime/exactc_compare.c, which check.sh runs) give the same verdict, the same first
differing index, count and values on every pair; check.sh applies it to a program's
outputs with the export's site type.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactc.exporter import export
from exactc.exporter.types import BF16
from exactc.runtime import RUNTIME_DIR, STRICT_FLAGS
from exactc import programs
from exactc.verify.compare import bit_equal_mask, first_mismatch, hexval
from installed import need  # tests/installed.py

F32_NANS = (0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FC12345, 0xFFFFFFFF)
F64_NANS = (0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FFFFFFFFFFFFFFF)


def f32(*patterns: int) -> np.ndarray:
    return np.array(patterns, dtype=np.uint32).view(np.float32)


def f64(*patterns: int) -> np.ndarray:
    return np.array(patterns, dtype=np.uint64).view(np.float64)


# ---- the rule, in Python ----------------------------------------------------------------------


def test_f64_and_f32_nans_are_equal_whatever_their_payload_and_sign():
    assert bit_equal_mask(f32(*F32_NANS), f32(*reversed(F32_NANS))).all()
    assert bit_equal_mask(f64(*F64_NANS), f64(*reversed(F64_NANS))).all()


def test_everything_else_is_compared_on_every_bit():
    assert not bit_equal_mask(f32(0x00000000), f32(0x80000000)).any()  # +0, -0
    assert not bit_equal_mask(f32(0x7FC00000), f32(0x7F800000)).any()  # NaN, infinity
    assert not bit_equal_mask(f64(0x3FF0000000000000), f64(0x3FF0000000000001)).any()
    bf16 = np.array([0x7FC0, 0x7FC1, 0xFFC0], dtype=np.uint16).view(BF16)
    assert bit_equal_mask(bf16, bf16).all()
    assert not bit_equal_mask(bf16, bf16[[1, 2, 0]]).any(), "bf16 NaN payloads must differ"
    assert not bit_equal_mask(np.array([1, 2], np.int32), np.array([1, -2], np.int32))[1]


def test_a_bf16_sites_values_widened_to_f32_keep_every_bit():
    """A bf16 output travels as f32 in .npy files; its NaN is still canonical."""
    widened, other = f32(0x7FC00000), f32(0x7FC10000)
    assert bit_equal_mask(widened, other).all()  # as f32 values: NaN equals NaN
    assert not bit_equal_mask(widened, other, site="bf16").any()


def test_copies_keep_every_bit():
    assert not bit_equal_mask(f32(0x7FC00000), f32(0x7FC00001), every_bit=True).any()


def test_the_report_names_the_first_index_both_values_and_the_count():
    expected = np.zeros((2, 3), np.float32)
    actual = expected.copy()
    actual[1, 0], actual[1, 2] = np.float32(1.5), np.float32(-0.0)
    mismatch = first_mismatch("y", expected, actual)
    assert str(mismatch) == ("output y: 2 of 6 elements differ; first at index (1, 0): "
                             "reference 0x00000000 (0), C 0x3fc00000 (1.5)")
    assert hexval(np.float64(0.1)) == "0x3fb999999999999a (0.10000000000000001)"


# ---- the rule, in C: conformance/compare ---------------------------------------------------------


@pytest.fixture(scope="module")
def comparer(tmp_path_factory) -> Path:
    need("gcc")
    exe = tmp_path_factory.mktemp("comparer") / "compare"
    subprocess.run(["gcc", *STRICT_FLAGS, "-O2", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME_DIR}", "-o", str(exe),
                    str(RUNTIME_DIR / "exactc_compare.c"), str(RUNTIME_DIR / "exactc_npy.c")], check=True)
    return exe


def c_compare(comparer: Path, folder: Path, expected: np.ndarray, actual: np.ndarray,
              site: str | None = None) -> subprocess.CompletedProcess:
    np.save(folder / "y.npy", expected)
    np.save(folder / "got.npy", actual)
    args = [str(comparer), *(["--site", site] if site else []), str(folder / "y.npy"), str(folder / "got.npy")]
    return subprocess.run(args, capture_output=True, text=True)


def python_line(expected: np.ndarray, actual: np.ndarray, site: str | None) -> str:
    """What conformance/compare prints for a pair, from the Python comparison."""
    mismatch = first_mismatch("y.npy", expected, actual, site)
    if mismatch is None:
        return ""
    return (f"DIFFERS  y.npy: {mismatch.count} of {mismatch.size} elements differ; first at index "
            f"{mismatch.index}: expected {mismatch.expected}, got {mismatch.actual}\n")


PAIRS = {
    "f32 NaN payloads": (f32(0x3F800000, 0x7FC00000), f32(0x3F800000, 0xFFC00001), None),
    "f64 NaN payloads": (f64(*F64_NANS), f64(*reversed(F64_NANS)), "f64"),
    "bf16 NaN payloads": (f32(0x7FC00000, 0x3F800000), f32(0x7FC10000, 0x3F800000), "bf16"),
    "signed zeros": (f32(0, 0, 0), f32(0, 0x80000000, 0x80000000), "f32"),
    "int32": (np.array([[1, 2], [3, 4]], np.int32), np.array([[1, 2], [3, -4]], np.int32), None),
    "int64": (np.array([1, 2], np.int64), np.array([1, 2], np.int64), None),
    "f64 last bit": (f64(0x3FF0000000000000), f64(0x3FF0000000000001), "f64"),
}


@pytest.mark.parametrize("name", PAIRS)
def test_the_c_comparer_says_what_python_says(comparer, tmp_path, name):
    expected, actual, site = PAIRS[name]
    done = c_compare(comparer, tmp_path, expected, actual, site)
    want = python_line(expected, actual, site)
    assert (done.returncode, done.stdout) == (1 if want else 0, want), done.stderr


NAN_PATTERNS = st.sampled_from(F32_NANS + (0x00000000, 0x80000000, 0x7F800000, 0x3F800000, 0x00000001))


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=3), data=st.data(),
       site=st.sampled_from([None, "f32", "bf16"]))
def test_the_c_comparer_agrees_with_python_on_drawn_pairs(comparer, tmp_path_factory, shape, data, site):
    size = int(np.prod(shape, dtype=np.int64))
    patterns = st.lists(st.one_of(NAN_PATTERNS, st.integers(0, 2**32 - 1)), min_size=size, max_size=size)
    expected = np.array(data.draw(patterns), dtype=np.uint32).view(np.float32).reshape(shape)
    actual = expected.copy()
    flips = data.draw(st.lists(st.tuples(st.integers(0, max(size - 1, 0)), NAN_PATTERNS), max_size=3))
    for at, pattern in flips:
        if size:
            actual.reshape(-1).view(np.uint32)[at] = pattern
    done = c_compare(comparer, tmp_path_factory.mktemp("pair"), expected, actual, site)
    want = python_line(expected, actual, site)
    assert (done.returncode, done.stdout) == (1 if want else 0, want)


def test_the_c_comparer_refuses_what_it_cannot_compare(comparer, tmp_path):
    done = c_compare(comparer, tmp_path, np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert done.returncode == 1 and done.stdout == "DIFFERS  y.npy: expected f32 (2, 3), got f32 (3, 2)\n"
    done = c_compare(comparer, tmp_path, np.zeros(2, np.float32), np.zeros(2, np.float64))
    assert done.returncode == 1 and done.stdout == "DIFFERS  y.npy: expected f32 (2,), got f64 (2,)\n"
    (tmp_path / "got.npy").unlink()
    done = subprocess.run([str(comparer), str(tmp_path / "y.npy"), str(tmp_path / "got.npy")],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "DIFFERS  y.npy: the program's output cannot be read" in done.stdout
    done = subprocess.run([str(comparer), "--site", "f16", "a", "b"], capture_output=True, text=True)
    assert done.returncode == 2 and "unknown site type f16" in done.stderr


# ---- check.sh: the rule, applied to a program's outputs with its site type ------------------------


SMALL = {"vocab": 48, "positions": 8, "dim": 16, "heads": 2, "layers": 1, "mlp": 24, "tokens": 6}


@pytest.mark.needs("gcc")
@pytest.mark.parametrize("site", ["f32", "bf16"])
def test_check_sh_applies_the_rule_with_the_exports_site_type(tmp_path, site):
    """A stand-in program writes chosen outputs: a NaN of another payload passes at f32
    and fails at bf16; a value one bit off fails with its index, both values and the count."""
    prepared = export.ExportSpec("gpt", "forward", site, 0, SMALL).prepare()
    root = export.write(prepared, tmp_path / "program")
    programs.make(root, programs.Build(cc="gcc"))
    logits = export.npy_value(prepared.expected["logits"]).copy()
    logits.reshape(-1)[0] = np.nan
    np.save(root / "conformance" / "expected" / "logits.npy", logits)  # a NaN the reference computed
    given = tmp_path / "given"
    given.mkdir()
    stand_in = tmp_path / "program.sh"
    # the main case writes the chosen outputs; the other lengths (conformance/lengths/T<n>)
    # their expected ones, so that only the main case's comparison is at stake
    stand_in.write_text(f'#!/bin/sh\ncp "{given}"/*.npy "$3"/\nshift 3\n'
                        'while [ $# -ge 2 ]; do cp "$1"/../expected/*.npy "$2"/; shift 2; done\n')
    stand_in.chmod(0o755)

    def check(outputs: np.ndarray) -> subprocess.CompletedProcess:
        np.save(given / "logits.npy", outputs)
        return subprocess.run([str(root / "conformance" / "check.sh"), str(stand_in)], capture_output=True, text=True)

    other_nan = logits.copy()
    other_nan.reshape(-1).view(np.uint32)[0] = 0xFFC10000  # another sign and payload
    done = check(other_nan)
    if site == "f32":
        assert done.returncode == 0 and done.stdout.startswith("ok       logits.npy\n"), done.stdout + done.stderr
    else:
        assert done.returncode == 1 and done.stdout.startswith(
            "DIFFERS  logits.npy: 1 of 288 elements differ; first at index (0, 0): expected 0x7fc00000 (nan), "
            "got 0xffc10000 ("), done.stdout
    one_off = logits.copy()
    one_off.reshape(-1).view(np.uint32)[50] ^= 1 << 16  # the last bit of a bf16
    one_off.reshape(-1).view(np.uint32)[60] ^= 1 << 16
    done = check(one_off)
    want = first_mismatch("logits", logits, one_off, site)
    assert done.returncode == 1 and done.stdout.startswith(
        f"DIFFERS  logits.npy: 2 of 288 elements differ; first at index (1, 2): expected {want.expected}, "
        f"got {want.actual}\nok       T1/logits.npy\n"), done.stdout
