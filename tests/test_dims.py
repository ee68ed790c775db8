"""exporter/dims.py's refusals and its walks over nested values: the branches the kernel
and program tests never take (docs/coverage.md). Each refusal names both sides."""

import pytest

from exactc.exporter import dims
from exactc.exporter.dims import Dim, DimError

T = dims.length(8)


def test_a_dim_refuses_a_bad_bound_and_trailing_zero_coefficients():
    with pytest.raises(DimError, match="bounded by an int >= 1, not 0"):
        Dim((0, 1), 0)
    with pytest.raises(DimError, match="bounded by an int >= 1, not True"):
        Dim((0, 1), True)
    with pytest.raises(DimError, match=r"\(0, 1, 0\) must end with a non-zero one"):
        Dim((0, 1, 0), 8)


def test_lengths_of_different_bounds_do_not_mix():
    with pytest.raises(DimError, match=r"T \(T <= 8\) and T \(T <= 9\) follow different lengths"):
        T + dims.length(9)
    with pytest.raises(DimError, match=r"different bounds \[8, 9\]"):
        dims.top_of({"a": (T,)}, [dims.length(9)])
    assert dims.top_of({"a": [(2, 3 * T)]}, 4) == 8 and dims.top_of((1, 2), {}) is None


def test_arithmetic_with_what_is_not_an_extent_is_a_type_error():
    for value in ("2", 2.0, None):
        for operation in (lambda: T + value, lambda: T - value, lambda: value - T, lambda: T * value):
            with pytest.raises(TypeError):
                operation()
    with pytest.raises(TypeError):
        T // 0
    with pytest.raises(TypeError):
        T // True


def test_a_division_must_be_exact_for_every_length():
    assert (4 * T + 2) // 2 == 2 * T + 1 and (T * 4) // 4 == T
    with pytest.raises(DimError, match="3 \\* T is not a multiple of 2 for every length T"):
        (3 * T) // 2
    assert (2 * T) - T - T == 0 and isinstance((2 * T) - T - T, int)


def test_substitute_takes_every_dim_at_the_length_in_nested_values():
    value = {"shape": (T, 3), "list": [T * T, "x"], "n": T - 1}
    assert dims.substitute(value, 5) == {"shape": (5, 3), "list": [25, "x"], "n": 4}
    assert dims.shape_at((T, 2 * T, 7), 3) == (3, 6, 7) and dims.shape_upper((T, 7)) == (8, 7)


def test_comparisons_hold_for_every_length_and_refuse_a_cubic():
    assert dims.le(T, 8) and not dims.lt(T, 8) and dims.positive(T) and not dims.positive(T - 1)
    assert dims.minimum(T * T - 6 * T + 10) == 1  # the parabola's vertex at T = 3
    with pytest.raises(DimError, match="degree at most 2"):
        dims.minimum(T * T * T)
    assert dims.c_factor(T - 1) == "(T - 1)" and dims.c_factor(3 * T) == "3 * T" and dims.c_factor(4) == "4"


# ---- the run-time length's polynomials


def test_dims_products_and_sums_keep_every_term():
    T = dims.length(8)
    assert (T + 1) * (T + 1) == T * T + 2 * T + 1
    assert ((T + 1) * (T + 1)).coefs == (1, 2, 1)
    assert (T * T + T) - T * T == T  # the vanished square is stripped: T again, not a constant
    assert (T * T + T) - T * T - T == 0


def test_dims_exact_division_keeps_integer_coefficients():
    T = dims.length(8)
    half = (4 * T + 2) // 2
    assert half.coefs == (1, 2) and all(type(c) is int for c in half.coefs)
    assert str(half) == "2 * T + 1"


def test_dims_a_length_may_be_bounded_by_one():
    assert dims.length(1).upper == 1
    assert dims.upper(3 * dims.length(1)) == 3
    with pytest.raises(dims.DimError, match="an int >= 1, not 0"):
        dims.length(0)


def test_dims_c_spelling_of_every_sign_and_gap():
    T = dims.length(8)
    assert str(T * T + 1) == "T * T + 1"  # a zero coefficient between two terms
    assert str(1 - T) == "-T + 1"
    assert str(-3 * T) == "-3 * T"
    assert str(2 - 3 * T * T) == "-3 * T * T + 2"
    assert dims.c_text(3 * T) == "3 * T" and dims.c_text(16) == "16"
    assert dims.c_factor(T + 1) == "(T + 1)" and dims.c_factor(T - 1) == "(T - 1)"
    assert dims.c_factor(2 * T) == "2 * T" and dims.c_factor(5) == "5"


def test_dims_minimum_at_a_parabola_s_vertex_and_at_its_ends():
    T = dims.length(20)
    assert dims.minimum(2 * T * T - 20 * T + 60) == 10  # vertex 5: f(5) = 10
    assert dims.minimum(5 * T * T - 57 * T) == -162  # vertex 5.7: f(6) < f(5) = -160
    assert dims.minimum(10 * T - T * T) == -200  # concave: the least value at T_max = 20
    assert dims.minimum(T * T - 50 * T) == 400 - 1000  # vertex 25, past T_max: at the end


def test_dims_strict_order_holds_at_a_difference_of_one():
    T = dims.length(8)
    assert dims.lt(T, T + 1) and not dims.lt(T, T)
    assert dims.lt(T - 1, 8) and not dims.lt(T, 8)
    assert dims.le(T, 8) and not dims.le(T, 7)
