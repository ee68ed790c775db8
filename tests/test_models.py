"""The models (exporter/models/): configs parsed, bounded and typed, entries built or
refused, parameters and inputs drawn, the cache's shapes, the models as traced."""

from __future__ import annotations

import numpy as np
import pytest

from exactc.exporter import models
from exactc.exporter.models import ModelError

# ---- the cache's shapes, T_max and drawn decode inputs (models/cache.py)


def test_cache_shapes_and_longest():
    from exactc.exporter import models
    from exactc.exporter.models import cache
    gpt, llama = models.config("gpt", {}), models.config("llama", {"kv_heads": "2", "heads": "4", "vocab": "8"})
    assert cache.cache_shape(gpt, 5) == (gpt.layers, gpt.heads, 5, gpt.dim // gpt.heads)
    assert cache.cache_shape(llama, 5) == (llama.layers, 2, 5, llama.dim // 4)
    assert (cache.longest(8, "decode"), cache.longest(8, "prefill"), cache.longest(8, "forward")) == (7, 8, 8)
    drawn = cache.draw_decode_inputs(llama, np.random.default_rng(0), 3)
    assert sorted(drawn) == ["past_k", "past_v", "position", "token"]
    assert drawn["token"].dtype == np.int32 and drawn["token"].shape == (1,) and 0 <= drawn["token"][0] < llama.vocab
    assert drawn["position"].dtype == np.int32 and drawn["position"].tolist() == [3]
    # the cache has its capacity, `tokens` rows per run, whatever the position
    assert drawn["past_k"].shape == drawn["past_v"].shape == cache.cache_shape(llama, llama.tokens)
    assert drawn["past_k"].dtype == np.float64 and not (drawn["past_k"] == drawn["past_v"]).all()
    tokens = {int(cache.draw_decode_inputs(llama, np.random.default_rng(s), 1)["token"][0]) for s in range(200)}
    assert tokens == set(range(8))  # every token of the vocab, none past it
    assert abs(drawn["past_k"].std() - 1) < 0.2 and abs(drawn["past_k"].mean()) < 0.2  # normal reals


# ---- the models as traced (exporter/models/gpt.py, llama.py): what each entry's own nodes are
# named, the config's eps in every layer norm, the head's spread, the ids drawn


def test_a_llama_entrys_own_nodes_and_outputs_are_named():
    from exactc.exporter import graph, models

    cfg = {"vocab": 16, "dim": 8, "heads": 2, "kv_heads": 1, "layers": 1, "mlp": 8, "tokens": 4}

    def named(entry):
        program = models.build("llama", entry, cfg)
        return program.output_names, [(n.primitive, n.out.name) for n in program.function.nodes
                                      if isinstance(n, graph.Op)]
    assert named("next_token") == (("next_token",), [
        ("embedding", "x"), ("slice", "last"), ("rmsnorm", "norm"), ("linear", "logits"),
        ("argmax", "next_token_")])  # the output's own name taken by the entry's result
    # the stacked keys and values are written by the fold straight into the outputs: no copy
    assert named("prefill") == (("logits", "k", "v"), [
        ("embedding", "x"), ("slice", "last"), ("rmsnorm", "norm"), ("linear", "logits")])


@pytest.mark.parametrize("entry", ["forward", "prefill", "decode"])
def test_every_gpt_layer_norm_takes_the_configs_eps(entry):
    from exactc.exporter import graph, models

    program = models.build("gpt", entry, {"vocab": 16, "positions": 8, "dim": 8, "heads": 2, "layers": 2, "mlp": 8,
                                          "tokens": 4, "eps": 1e-3})
    found = {}
    for fn in program.function.walk():
        for node in fn.nodes:
            for body in ([node.body, *node.apart.values()] if isinstance(node, graph.Fold) else []):
                found |= {n.out.name: n.attrs["eps"] for f in body.walk() for n in f.nodes
                          if isinstance(n, graph.Op) and n.primitive == "layernorm"}
            if isinstance(node, graph.Op) and node.primitive == "layernorm":
                found[node.out.name] = node.attrs["eps"]
    assert found == {"ln_1": 1e-3, "ln_2": 1e-3, "ln_f": 1e-3}


def test_a_gpt_configs_heads_refusal_and_its_own_heads_spread():
    import math

    from exactc.exporter import models
    from exactc.exporter.models import gpt

    with pytest.raises(ValueError) as caught:
        gpt.Config(dim=10, heads=4).check()
    assert str(caught.value) == "gpt config: dim 10 is not a multiple of heads 4"
    cfg = models.config("gpt", {"vocab": 16, "dim": 16, "heads": 2, "tied": False})
    (head,) = [s for s in gpt.parameters(cfg) if s.name == "lm_head.weight"]
    assert (head.shape, head.std) == ((16, 16), 1 / math.sqrt(16))


@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_the_drawn_ids_take_every_token_zero_included(model):
    from exactc.exporter import models

    cfg = {"vocab": 2, "tokens": 64} | ({"positions": 64} if model == "gpt" else {})
    ids = models.draw_inputs(models.build(model, "forward", cfg), 3)["input_ids"]
    assert set(ids.tolist()) == {0, 1}


# ---- the models' configs and entries (exporter/models/__init__.py): every field's parsing,
# bounds and type, every refusal whole


def test_a_config_parses_and_bounds_each_field_and_refuses_it_whole():
    from exactc.exporter import models
    from exactc.exporter.models import ModelError

    cfg = models.config("llama", {"dim": "16", "heads": 4, "kv_heads": np.int64(2), "eps": "0.5", "theta": 100,
                                  "layers": 1, "vocab": 1, "mlp": 16})
    assert (cfg.dim, cfg.heads, cfg.kv_heads, cfg.eps, cfg.theta, cfg.vocab) == (16, 4, 2, 0.5, 100.0, 1)
    assert [type(v) for v in (cfg.dim, cfg.kv_heads, cfg.eps, cfg.theta)] == [int, int, float, float]
    for spelled, flag in (("TRUE", True), ("False", False), ("1", True), ("0", False), (True, True)):
        assert models.config("gpt", {"tied": spelled}).tied is flag
    assert models.config("gpt", {"vocab": 2**31 - 1, "dim": 1, "heads": 1, "layers": 1, "mlp": 1,
                                 "positions": 1, "tokens": 1}).vocab == 2**31 - 1
    count = "must be an integer from 1 to 2,147,483,647 (2^31 - 1)"
    for model, overrides, message in (
            ("gpt", {"dim": 0}, f"gpt config field dim=0 {count}"),
            ("gpt", {"dim": 2**31}, f"gpt config field dim=2147483648 {count}"),
            ("gpt", {"dim": 8.0}, f"gpt config field dim=8.0 {count}"),
            ("gpt", {"dim": True}, f"gpt config field dim=True {count}"),
            ("gpt", {"dim": "eight"}, "gpt config field dim='eight' is not a int"),
            ("gpt", {"tied": "yes"}, "gpt config field tied='yes' is not a bool"),
            ("gpt", {"tied": 1}, "gpt config field tied=1 must be true or false"),
            ("gpt", {"eps": 0.0}, "gpt config field eps=0.0 must be a positive finite number"),
            ("gpt", {"eps": "inf"}, "gpt config field eps=inf must be a positive finite number"),
            ("gpt", {"eps": True}, "gpt config field eps=True must be a positive finite number"),
            ("gpt", {"eps": "small"}, "gpt config field eps='small' is not a float"),
            ("gpt", {"width": 8}, "gpt config has no field 'width'; its fields are vocab, positions, dim, heads, "
                                  "layers, mlp, tokens, eps, tied"),
            ("gpt", {"dim": 2**16, "vocab": 2**16 + 1},
             "gpt config: the parameters have 73,155,412,992 elements; exactc exports at most 4,294,967,296 "
             "(2^32)"),
            ("llama", {"heads": 4, "kv_heads": 3}, "llama config: heads 4 is not a multiple of kv_heads 3"),
            ("t5", {}, "unknown model 't5'; exactc knows bert, gpt, llama")):
        with pytest.raises(ModelError) as caught:
            models.config(model, overrides)
        assert str(caught.value) == message, overrides


def test_an_entry_is_built_at_its_config_or_refused_whole():
    from exactc.exporter import dims, models
    from exactc.exporter.models import ModelError

    program = models.build("gpt", "decode", {"tokens": 3, "positions": 4})
    assert (program.model, program.entry, program.config.tokens, program.max_length) == ("gpt", "decode", 3, 2)
    assert models.entries("gpt") == ("forward", "next_token", "prefill", "decode")
    for model, entry, overrides, message in (
            ("gpt", "embed", {}, "gpt has no entry 'embed'; its entries are forward, next_token, prefill, decode "
                                 "and loss_grad"),
            ("bert", "loss_grad", {}, "bert has no entry 'loss_grad'; its entries are forward, embed"),
            ("gpt", "loss_grad", {"batch": 0}, "gpt config field batch=0 must be an integer from 1 to 2,147,483,647 "
                                               "(2^31 - 1)"),
            ("gpt", "decode", {"tokens": 1}, "gpt.decode: tokens=1 leaves no room for a cached position; a decode "
                                             "step needs tokens >= 2")):
        with pytest.raises(ModelError) as caught:
            models.build(model, entry, overrides)
        assert str(caught.value) == message
    assert models.build("llama", "forward", {"tokens": 5}).max_length == 5
    lg = models.build("llama", "loss_grad", {"tokens": 5, "batch": "3", "layers": 1})
    assert (lg.entry, lg.config.tokens, [spec.shape[0] for spec in lg.inputs]) == ("loss_grad", 5, [3, 3])
    drawn = models.draw_inputs(lg, seed=4, length=2)
    tokens, targets = drawn["tokens"], drawn["targets"]
    assert tokens.shape == targets.shape == (3, 2) and tokens.dtype == targets.dtype == np.int32
    assert 0 <= targets[0, 0] < lg.config.vocab  # the first position always counts
    assert dims.is_extent(models.build("llama", "forward", {"tokens": 5}).inputs[0].shape[0])


def test_a_seed_is_an_integer_in_range_and_a_draw_past_memory_is_refused(monkeypatch):
    from exactc.exporter import models
    from exactc.exporter.models import ModelError

    assert models.check_seed(2**64 - 1) == 2**64 - 1 and models.check_seed(np.uint8(0)) == 0
    for bad in (-1, 2**64, True, 1.0, "1"):
        with pytest.raises(ModelError) as caught:
            models.check_seed(bad)
        assert str(caught.value) == f"seed {bad!r} must be an integer from 0 to 18,446,744,073,709,551,615 (2^64 - 1)"
    # tokens=2: one cached position, the least a decode step takes
    assert models.build("gpt", "decode", {"tokens": 2, "positions": 2}).max_length == 1
    program = models.build("gpt", "forward", {"vocab": 4, "positions": 2, "dim": 2, "heads": 1, "layers": 1,
                                              "mlp": 2, "tokens": 2})

    class NoMemory:
        def standard_normal(self, shape):
            raise MemoryError()

    monkeypatch.setattr(np.random, "default_rng", lambda seed: NoMemory())
    with pytest.raises(ModelError) as caught:
        models.draw_parameters(program, 0, "f32")
    assert str(caught.value) == (f"gpt: its {program.parameter_count():,} parameters, drawn as f64, do not fit in "
                                 "this machine's memory")


def test_bert_draws_a_padded_pair_of_segments_at_each_length():
    from exactc.exporter import models

    program = models.build("bert", "embed", {"vocab": 2, "tokens": 64, "positions": 64})
    for length, types_, kept in ((4, [0, 0, 1, 1], 3), (7, [0, 0, 0, 1, 1, 1, 1], 6), (8, [0] * 4 + [1] * 4, 6),
                                 (10, [0] * 5 + [1] * 5, 8)):
        drawn = models.draw_inputs(program, 3, length)
        assert drawn["token_type_ids"].tolist() == types_, length
        assert drawn["attention_mask"].tolist() == [1] * kept + [0] * (length - kept), length
    assert set(models.draw_inputs(program, 3, 64)["input_ids"].tolist()) == {0, 1}
    (key,) = [s for s in program.params if s.name.endswith("attention.self.key.bias")]
    assert key.std == 0.1


def test_bert_parameters_are_drawn_at_their_own_spreads():
    """Every BERT parameter's shape, layers and draw (D 16, mlp 64: linear weights at
    1/sqrt of their inputs, biases 0.1, embeddings 1 and 0.5, norms' gains about 1), and
    tokens up to the positions."""
    from exactc.exporter import models
    from exactc.exporter.models import bert

    cfg = models.config("bert", {"dim": 16, "mlp": 64, "heads": 2, "tokens": 64, "positions": 64})
    layer = [("attention.self.query.weight", (16, 16), 0.25), ("attention.self.query.bias", (16,), 0.1),
             ("attention.self.key.weight", (16, 16), 0.25), ("attention.self.key.bias", (16,), 0.1),
             ("attention.self.value.weight", (16, 16), 0.25), ("attention.self.value.bias", (16,), 0.1),
             ("attention.output.dense.weight", (16, 16), 0.25), ("attention.output.dense.bias", (16,), 0.1),
             ("attention.output.LayerNorm.weight", (16,), "gain"), ("attention.output.LayerNorm.bias", (16,), 0.1),
             ("intermediate.dense.weight", (64, 16), 0.25), ("intermediate.dense.bias", (64,), 0.1),
             ("output.dense.weight", (16, 64), 0.125), ("output.dense.bias", (16,), 0.1),
             ("output.LayerNorm.weight", (16,), "gain"), ("output.LayerNorm.bias", (16,), 0.1)]
    want = [("embeddings.word_embeddings.weight", (512, 16), 0, 1.0),
            ("embeddings.position_embeddings.weight", (64, 16), 0, 0.5),
            ("embeddings.token_type_embeddings.weight", (2, 16), 0, 0.5),
            ("embeddings.LayerNorm.weight", (16,), 0, "gain"), ("embeddings.LayerNorm.bias", (16,), 0, 0.1),
            *((f"encoder.layer.{{l}}.{name}", shape, 4, draw) for name, shape, draw in layer)]
    got = [(s.name, s.shape, s.layers, "gain" if s.init == "gain" else s.std) for s in bert.parameters(cfg)]
    assert got == want
    assert all(s.init == "normal" for s in bert.parameters(cfg) if not s.name.endswith("LayerNorm.weight"))


# ---- the models' parameter bound at its edge


def test_a_config_of_exactly_two_to_the_32_parameter_elements_is_taken_and_one_more_refused_whole():
    import math

    from exactc.exporter import models
    from exactc.exporter.models import ModelError, gpt

    # D = 1, one layer, an MLP of 1: vocab + positions + 18 elements
    edge = {"vocab": 2**31 - 1, "positions": 2**31 - 17, "dim": 1, "heads": 1, "layers": 1, "mlp": 1}
    cfg = models.config("gpt", edge)
    assert sum(math.prod(spec.full_shape) for spec in gpt.parameters(cfg)) == models.MAX_PARAMETERS == 2**32
    assert cfg.positions == 2**31 - 17
    with pytest.raises(ModelError) as caught:
        models.config("gpt", dict(edge, positions=2**31 - 16))
    assert str(caught.value) == ("gpt config: the parameters have 4,294,967,297 elements; exactc exports at most "
                                 "4,294,967,296 (2^32)")


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
