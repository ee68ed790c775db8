"""The hosts (exporter/printer/host.py): an input's or output's dimensions affine in T, or
refused by name."""

from __future__ import annotations

import pytest

from exactc.exporter import dims, graph
from exactc.exporter.printer.host import HostError, spec_dims

# ---- an input's or output's dimensions: affine in T, or refused by name


def test_a_program_output_not_affine_in_the_length_is_refused_by_its_name():
    from exactc.exporter.printer.host import HostError, print_program

    t = dims.length(8)

    def entry(params, x):
        return {"y": graph.reshape(graph.matmul(x, x, trans_b=True), (t * t,))}

    program = graph.trace("m", "square", entry, [], [graph.InputSpec("x", (1, t, 4), "x")])
    with pytest.raises(HostError) as caught:
        print_program(program, "f32", None, False)
    assert str(caught.value) == "y: dimension T * T is not affine in T; an input's or output's dimensions are b + a * T"


T8 = dims.length(8)


def test_an_input_dimension_must_be_affine_in_the_length():
    assert spec_dims("x", (3, 2 * T8 + 1)) == (["3", "1"], ["0", "2"])
    with pytest.raises(HostError) as err:
        spec_dims("x", (T8 * T8,))
    assert str(err.value) == "x: dimension T * T is not affine in T; an input's or output's dimensions are b + a * T"
