"""Strategies for the files users hand to exactc's Python readers: JSON values of every
kind, safetensors images, Hugging Face config.json objects, llama2.c headers and plans;
and, for the checkpoint writers tests use, well-formed configs whose every field is drawn.

Each draws mostly well-formed input with one or a few things wrong, since that is what
reaches past the first check: the right keys with values of the wrong type, integers at
the edges (0, negative, 2^31, 2^63, 2^70), offsets that almost tile, a header length one
off. The readers must answer each with their own error or a correct result.
"""

from __future__ import annotations

import json
import math
import struct

from hypothesis import strategies as st

# Integers where readers go wrong: signs, int32 and int64 edges, beyond int64.
EDGE_INTS = [0, 1, 2, -1, 3, 16, 2**31 - 1, 2**31, -(2**31), 2**32, 2**63 - 1, 2**63, 2**64, 2**70]


def edge_ints() -> st.SearchStrategy[int]:
    """Small integers, and now and then one from EDGE_INTS."""
    return _EDGE_INTS


def json_scalars() -> st.SearchStrategy:
    """null, booleans, edge integers, any float (NaN and infinities too), short strings."""
    return _SCALARS


def json_values(max_leaves: int = 10) -> st.SearchStrategy:
    """Any JSON value, nested a few levels: what a key's value may be in a bad file."""
    if max_leaves not in _JSON:  # built once per size: a recursive strategy is costly to build
        _JSON[max_leaves] = st.recursive(
            json_scalars(), lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids, max_size=3),
            max_leaves=max_leaves)
    return _JSON[max_leaves]


def sometimes_wrong(draw, value, strategy: st.SearchStrategy | None = None):
    """`value` three times in four, else a draw of `strategy` (any JSON value by
    default): for use inside a composite strategy, with its `draw`."""
    return value if draw(_QUARTERS) else draw(strategy if strategy is not None else json_values(4))


_EDGE_INTS = st.one_of(st.integers(-3, 40), st.sampled_from(EDGE_INTS))
_SCALARS = st.one_of(st.none(), st.booleans(), _EDGE_INTS, st.floats(), st.text(max_size=6))
_JSON: dict[int, st.SearchStrategy] = {}
_QUARTERS = st.integers(0, 3)
_PIECES = st.lists(st.lists(_EDGE_INTS, max_size=3), max_size=3)


# ---- safetensors ----------------------------------------------------------------------------

ST_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}


@st.composite
def safetensors_images(draw) -> bytes:
    """A safetensors file: half of them well formed (tensors of several dtypes, empty
    ones too, tiling the data exactly, the header padded with spaces); the other half
    broken in a few places: offsets moved by a byte or more, fields of the wrong type,
    a header length one off or huge, the data a byte short or long, the file cut."""
    broken = draw(st.booleans())

    def fault(value, wrong: st.SearchStrategy):
        return draw(wrong) if broken and draw(_QUARTERS) == 0 else value

    names = draw(st.lists(st.text("abc.0123", min_size=1, max_size=4), max_size=5, unique=True))
    header: dict = {}
    at = 0
    for name in names:
        dtype = draw(st.sampled_from(sorted(ST_SIZES)))
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        begin = at + fault(0, st.sampled_from([-1, 1, -4]))
        end = begin + math.prod(shape) * ST_SIZES[dtype] + fault(0, st.sampled_from([-1, 1]))
        at = end
        header[name] = {"dtype": fault(dtype, json_values(4)), "shape": fault(shape, json_values(4)),
                        "data_offsets": fault([begin, end], json_values(4))}
    if draw(st.integers(0, 3)) == 0:
        header["__metadata__"] = fault({"format": "pt"}, json_values(4))
    text = json.dumps(header).encode() + b" " * draw(st.integers(0, 3))
    text = fault(text, json_values().map(lambda v: json.dumps(v).encode()))
    length = len(text) + fault(0, st.sampled_from([1, -1, 2**40]))
    data = draw(st.binary(min_size=max(at, 0), max_size=max(at, 0)))
    data = fault(data, st.sampled_from([data[:-1], data + b"\0"]))
    image = struct.pack("<Q", max(length, 0) % 2**64) + text + data
    return fault(image, st.integers(0, len(image)).map(lambda cut: image[:cut]))


# ---- config.json ----------------------------------------------------------------------------

GPT2_CONFIG = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 40, "n_positions": 10,
               "n_embd": 16, "n_head": 2, "n_layer": 2, "n_inner": 24, "layer_norm_epsilon": 1e-5,
               "activation_function": "gelu_new", "tie_word_embeddings": True}
BERT_CONFIG = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 40, "max_position_embeddings": 10,
               "type_vocab_size": 2, "hidden_size": 16, "num_attention_heads": 2, "num_hidden_layers": 2,
               "intermediate_size": 24, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
LLAMA_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 40, "hidden_size": 24,
                "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "intermediate_size": 20,
                "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "max_position_embeddings": 64,
                "tie_word_embeddings": False, "rope_scaling": None, "head_dim": 6}


@st.composite
def hf_configs(draw) -> object:
    """A config.json value: one architecture's config with some keys given values of any
    type or edge integers, some keys dropped; now and then not an object at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values())
    config = dict(draw(st.sampled_from([GPT2_CONFIG, BERT_CONFIG, LLAMA_CONFIG])))
    for key in draw(st.lists(st.sampled_from(sorted(config)), max_size=3, unique=True)):
        change = draw(st.integers(0, 2))
        if change == 0:
            del config[key]
        else:
            config[key] = draw(edge_ints() if change == 1 else json_values(4))
    return config


# ---- llama2.c -------------------------------------------------------------------------------

LLAMA2C_GOOD = (8, 4, 1, 2, 1, 4, 2)  # dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len


@st.composite
def llama2c_files(draw) -> bytes:
    """A llama2.c file: half of them a good legacy or version-1 header and exactly its
    f32 weights; the other half with some of the seven int32s at edge values, version 2,
    too few or too many weights, or the file cut inside its header."""
    broken = draw(st.booleans())
    fields = list(LLAMA2C_GOOD)
    version = draw(st.sampled_from([0, 1]))
    if broken:
        for k in draw(st.lists(st.integers(0, 6), max_size=3, unique=True)):
            fields[k] = draw(st.one_of(st.integers(-3, 64), st.sampled_from([2**31 - 1, -(2**31), 2**30])))
        version = draw(st.sampled_from([0, 1, 2]))
    if version == 0:
        header = struct.pack("<7i", *fields)
    else:
        header = struct.pack("<Ii7iB", 0x616B3432, version, *fields, draw(st.integers(0, 1)))
        header += bytes(256 - len(header))
    dim, hidden, layers, heads, kv, vocab, seq = LLAMA2C_GOOD
    hd = dim // heads
    weights = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * kv * hd * dim + 3 * dim * hidden) + dim
    weights += 0 if version else seq * hd
    shared = version == 0 or header[36] == 1
    weights += 0 if shared else vocab * dim
    if broken:
        weights = draw(st.sampled_from([weights, weights + vocab * dim, weights - 1, 0]))
    image = header + draw(st.binary(min_size=4 * weights, max_size=4 * weights))
    return image[: draw(st.integers(0, 300))] if broken and draw(_QUARTERS) == 0 else image


# ---- plans ----------------------------------------------------------------------------------


@st.composite
def plan_values(draw) -> object:
    """A plan's JSON value: nests with layouts and splits whose fields are now and then
    of the wrong type, misspelt or at edge values; now and then any JSON at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values())
    nests = {}
    for name in draw(st.lists(st.sampled_from(["linear", "k04_linear", "softmax", ""]), max_size=2, unique=True)):
        layout = {"order": sometimes_wrong(draw, ["t", "n"]), "tiles": sometimes_wrong(draw, {"n": draw(edge_ints())}),
                  "lanes": sometimes_wrong(draw, {"n": 8}), "packs": sometimes_wrong(draw, []), "blocks": sometimes_wrong(draw, {"k": 4})}
        plan = {"layout": {k: v for k, v in layout.items() if draw(st.booleans())}}
        if draw(st.booleans()):
            plan["split"] = {"depth": sometimes_wrong(draw, 0, edge_ints()),
                             "pieces": sometimes_wrong(draw, [[0, 3], [3, 6]], _PIECES)}
        if draw(st.integers(0, 5)) == 0:
            plan[draw(st.text(max_size=4))] = draw(json_values(3))
        nests[name] = sometimes_wrong(draw, plan)
    value = {"nests": sometimes_wrong(draw, nests)}
    if draw(st.booleans()):
        value["comment"] = "drawn"
    return value


# ---- well-formed checkpoints: every field a reader takes, drawn -----------------------------

# eps: the common ones and some large enough that a reader which drops one shows beyond an
# f32 oracle's tolerance. theta: the common ones, and some far from 10000 and from each other.
EPSILONS = (1e-6, 1e-5, 1e-12, 0.01, 0.25, 1.0)
THETAS = (10000.0, 500000.0, 1000000.0, 500.0, 2.5)


def epsilons() -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(EPSILONS), st.floats(1e-7, 1.0))


def thetas() -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(THETAS), st.floats(1.5, 2e6))


@st.composite
def llama_configs(draw) -> dict:
    """A small Llama's fields as a checkpoint states them: vocab, dim (heads of an even
    size), heads, kv_heads (a divisor of heads), layers, mlp, eps, theta, whether the head
    is the token embedding (tied), and the context (the most positions the file allows)."""
    heads = draw(st.integers(1, 4))
    return {
        "vocab": draw(st.integers(2, 40)),
        "dim": heads * draw(st.sampled_from([2, 4, 6, 8])),
        "heads": heads,
        "kv_heads": draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0])),
        "layers": draw(st.integers(1, 2)),
        "mlp": draw(st.integers(1, 24)),
        "eps": draw(epsilons()),
        "theta": draw(thetas()),
        "tied": draw(st.booleans()),
        "context": draw(st.integers(1, 24)),
    }


@st.composite
def gpt_configs(draw, model: str = "gpt") -> dict:
    """A small GPT-2's (or with model="bert", BERT's) fields as a config.json states them:
    vocab, positions, dim, heads, layers, mlp, eps, and GPT-2's tied head or BERT's
    type_vocab."""
    heads = draw(st.integers(1, 4))
    fields = {
        "vocab": draw(st.integers(2, 40)),
        "positions": draw(st.integers(1, 24)),
        "dim": heads * draw(st.sampled_from([2, 4, 6, 8])),
        "heads": heads,
        "layers": draw(st.integers(1, 2)),
        "mlp": draw(st.integers(1, 24)),
        "eps": draw(epsilons()),
    }
    if model == "bert":
        return dict(fields, type_vocab=draw(st.integers(1, 3)))
    return dict(fields, tied=draw(st.booleans()))
