"""Mistakes in generation with a key/value cache (docs/semantics.md section 16).

Each gives tokens or logits that differ from the spec's: a decode step at the wrong
position or without its cache differs from recomputing the whole sequence; a step that
reuses a key, or a stop token that does not stop, differs from the spec's loop. The
cache-against-recompute property, the decode-against-forward check at every position,
the per-step key check and the stop-token check of tests/test_generation.py catch them.
"""

from exactc.mutants.model import Mutant

GENERATION = "exactc/exporter/reference/generation.py"
LLAMA = "exactc/exporter/models/llama.py"
GPT = "exactc/exporter/models/gpt.py"
GRAPH = "exactc/exporter/graph.py"
STRUCTURED = "exactc/exporter/printer/structured.py"
LOWER = "exactc/exporter/kernels/lower.py"

MUTANTS = [
    Mutant(
        "generate-position-one-late",
        "a Llama decode step rotates its q and k at position T + 1, one after the cache's end",
        LLAMA,
        "    q, k, v = project(cfg, x, p, start=past_k.shape[1])",
        "    q, k, v = project(cfg, x, p, start=past_k.shape[1] + 1)",
        ("generate:cache",),
        family="generate",
    ),
    Mutant(
        "generate-cache-row-written-first",
        "the generation loop writes a step's keys and values before the cached ones, not after",
        GENERATION,
        '            past = {"past_k": np.concatenate([past["past_k"], got["k"]], axis=2),',
        '            past = {"past_k": np.concatenate([got["k"], past["past_k"]], axis=2),',
        ("generate:cache",),
        family="generate",
    ),
    Mutant(
        "generate-decode-ignores-cache",
        "a GPT decode step attends over its own key and value only, not the cached ones",
        GPT,
        "    return attend(cfg, q, keys, values, p, causal=False), k, v",
        "    return attend(cfg, q, k, v, p, causal=False), k, v",
        ("generate:cache",),
        family="generate",
    ),
    Mutant(
        "generate-every-step-first-key",
        "every step draws its u from the first step's child key fold_in(key, 0)",
        GENERATION,
        "    child = keys_twin.fold_in(key, step)",
        "    child = keys_twin.fold_in(key, 0)",
        ("generate:keys",),
        family="generate",
    ),
    Mutant(
        "generate-stop-token-ignored",
        "generation runs on past a drawn stop token",
        GENERATION,
        "        if token == stop:\n            break",
        "        if token == stop and False:\n            break",
        ("generate:stop",),
        family="generate",
    ),
    Mutant(
        "fold-rows-stacked-in-reverse",
        "the reference stacks a fold's per-layer rows last layer first (the cache's layers swapped)",
        GRAPH,
        "            values.update({id(v): np.stack(r) for v, r in zip(node.row_outs, rows)})",
        "            values.update({id(v): np.stack(r[::-1]) for v, r in zip(node.row_outs, rows)})",
        ("generate:cache",),
        family="generate",
    ),
    Mutant(
        "fold-rows-all-in-slice-0",
        "the structured host has every layer of a fold write its rows into slice 0",
        STRUCTURED,
        "            call_args = args + nexts + [fold_slice(b, layer, chunk) for b, chunk in rows]",
        "            call_args = args + nexts + [fold_slice(b, \"0\", chunk) for b, chunk in rows]",
        ("generate:programs",),
        family="generate",
    ),
    Mutant(
        "decode-rope-table-every-position",
        "a decode step's rope kernel computes its cos and sin tables for every position up to "
        "T instead of its own: the same bits, a cost that grows with the position (probe only)",
        LOWER,
        '        Declare(angle, mul(Convert(t + Affine.of(pos0), "f64"), freq)),\n'
        '        Write(ctx.at("cos_table", t + row, i), rounded(Call("cos", angle))),\n'
        '        Write(ctx.at("sin_table", t + row, i), rounded(Call("sin", angle))),\n'
        '    )\n'
        '    table = Nest("rope_table", (Axis("t", positions), Axis("i", half)), table_body)',
        '        Declare(angle, mul(Convert(t, "f64"), freq)),\n'
        '        Write(ctx.at("cos_table", t, i), rounded(Call("cos", angle))),\n'
        '        Write(ctx.at("sin_table", t, i), rounded(Call("sin", angle))),\n'
        '    )\n'
        '    table = Nest("rope_table", (Axis("t", rows), Axis("i", half)), table_body)',
        ("probes:decode",),
        family="generate",
    ),
]
