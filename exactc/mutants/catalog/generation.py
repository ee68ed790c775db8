"""Mistakes in generation with a key/value cache (docs/semantics.md section 16).

Each gives tokens or logits that differ from the spec's: a decode step at the wrong
position or without its cache differs from recomputing the whole sequence; a step that
reuses a key, or a stop token that does not stop, differs from the spec's loop. The
cache-against-recompute property, the decode-against-forward check at every position,
the per-step key check and the stop-token check of tests/test_generation.py catch them.
A llama2.c tokenizer.bin that merges pairs in another order than run.c gives other
prompt ids: the hand-worked encodings of tests/test_tokenizer_bin.py catch it.
The program `exactc generate --backend c` builds without its plan or weights, a reference
that ignores --weights, a timing line lost: tests/test_generate.py catches them.
"""

from exactc.mutants.model import Mutant

GENERATION = "exactc/exporter/reference/generation.py"
LLAMA = "exactc/exporter/models/llama.py"
GPT = "exactc/exporter/models/gpt.py"
GRAPH = "exactc/exporter/graph.py"
STRUCTURED = "exactc/exporter/printer/structured.py"
LOWER = "exactc/exporter/kernels/lower.py"
TOKENIZER_BIN = "exactc/tokenizer_bin.py"
COMMAND = "exactc/generate.py"
C_LOOP = "exactc/runtime/exactc_generate.c"

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
        "generate-vocab-at-default-length",
        "exactc generate reads the vocabulary from the config at its default 16 positions, so a "
        "GPT of fewer positions is refused before its prompt is read",
        "exactc/generate.py",
        '             else models.config(model, {"tokens": "1", **user}).vocab)',
        '             else models.config(model, user).vocab)',
        ("generate:command",),
        family="generate",
    ),
    Mutant(
        "fold-rows-stacked-in-reverse",
        "the reference stacks a fold's per-layer rows last layer first (the cache's layers swapped)",
        "exactc/exporter/reference/walk.py",
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
        "c-generate-cache-row-one-early",
        "the C generation loop writes a step's keys and values over the last cached row, one "
        "position early, and leaves its own row unwritten",
        C_LOOP,
        "        memcpy(cache + r * run_after + run_before, rows + r * shape.row_bytes, shape.row_bytes);",
        "        memcpy(cache + r * run_after + run_before - (T > 0 ? shape.row_bytes : 0), rows + r * shape.row_bytes,\n"
        "               shape.row_bytes);",
        ("generate:program",),
        family="generate",
    ),
    Mutant(
        "c-generate-every-step-first-key",
        "the C generation loop draws every step's u from the first step's child key",
        C_LOOP,
        "        exactc_key_fold_in(&key, (uint64_t)n, &child);",
        "        exactc_key_fold_in(&key, 0, &child);",
        ("generate:program",),
        family="generate",
    ),
    Mutant(
        "c-generate-prompt-from-its-second-token",
        "the C generation loop feeds the prompt from its second token: the first position is never cached",
        C_LOOP,
        "    for (int64_t t = 0; rc == 0 && t < len; t++) step(&d, prompt[t]);",
        "    for (int64_t t = len > 1; rc == 0 && t < len; t++) step(&d, prompt[t]);",
        ("generate:program",),
        family="generate",
    ),
    Mutant(
        "c-generate-stop-token-ignored",
        "the C generation loop runs on past a drawn stop token",
        C_LOOP,
        "        if (drawn.token == r->stop || n == r->count) break;",
        "        if (n == r->count) break;",
        ("generate:program",),
        family="generate",
    ),
    Mutant(
        "c-generate-recomputes-every-step",
        "the C generation loop ignores its cache: every new token runs the whole sequence "
        "through decode again from position 0 (the same bits, a cost quadratic in the tokens; "
        "probe only)",
        C_LOOP,
        "        step(&d, (int32_t)drawn.token);\n",
        "        d.T = 0; /* the whole sequence again */\n"
        "        for (int64_t t = 0; t < len; t++) step(&d, prompt[t]);\n"
        "        for (int64_t t = 0; t < n; t++) step(&d, tokens[t]);\n",
        ("probes:generate",),
        family="generate",
    ),
    Mutant(
        "decode-rope-table-every-position",
        "a decode step's rope kernel computes its cos and sin tables for every position up to "
        "T instead of its own: the same bits, a cost that grows with the position (probe only)",
        LOWER,
        '        angle = mul(Convert(p + Affine.of(pos0), "f64"), freq)\n'
        '        write = Write(ctx.at(f"{fn}_table", p + row, i), rounded(Call(fn, angle)))\n'
        '        return Loop(Axis(name, positions, PARALLEL), (write,))',
        '        angle = mul(Convert(p, "f64"), freq)\n'
        '        write = Write(ctx.at(f"{fn}_table", p, i), rounded(Call(fn, angle)))\n'
        '        return Loop(Axis(name, rows, PARALLEL), (write,))',
        ("probes:decode",),
        family="generate",
    ),
    Mutant(
        "tokenizer-bin-lowest-score-merges-first",
        "llama2.c's encode merges the adjacent pair whose piece scores lowest, not highest",
        TOKENIZER_BIN,
        "            if merged is not None and tok.scores[merged] > best_score:",
        "            if merged is not None and -tok.scores[merged] > best_score:",
        ("generate:tokenizer",),
        family="generate",
    ),
    Mutant(
        "tokenizer-bin-last-pair-of-a-tie",
        "llama2.c's encode merges the last of the pairs whose pieces score the same, not the first "
        "(and a piece at run.c's starting best of -1e10 merges)",
        TOKENIZER_BIN,
        "            if merged is not None and tok.scores[merged] > best_score:",
        "            if merged is not None and tok.scores[merged] >= best_score:",
        ("generate:tokenizer",),
        family="generate",
    ),
    Mutant(
        "generate-program-built-without-its-plan",
        "exactc generate --backend c exports its decode program without --plan: the plain nests, "
        "3 to 7 times slower, whatever the plan asked for",
        COMMAND,
        "plan=args.plan, checkpoint=checkpoint,",
        "checkpoint=checkpoint,",
        ("generate:fast",),
        family="generate",
    ),
    Mutant(
        "generate-program-ignores-the-weights",
        "exactc generate --backend c exports float weights whatever --weights says",
        COMMAND,
        "weights=weights, cc=args.cc)",
        "cc=args.cc)",
        ("generate:fast",),
        family="generate",
    ),
    Mutant(
        "generate-reference-ignores-the-weights",
        "exactc generate's reference evaluates the float graph under --weights q8|q4: other "
        "tokens than the C program's quantized one",
        COMMAND,
        "reference_programs(model, args.dtype, user, checkpoint, weights)",
        "reference_programs(model, args.dtype, user, checkpoint, None)",
        ("generate:fast",),
        family="generate",
    ),
    Mutant(
        "generate-json-drops-the-timing",
        "the C backend's --json document leaves out the program's timing",
        COMMAND,
        '    } | ({"timing": timed} if timed is not None else {})\n',
        "    }\n",
        ("generate:fast",),
        family="generate",
    ),
    Mutant(
        "generate-verbose-drops-the-timing-line",
        "exactc generate --verbose prints no timing line: the program's is thrown away",
        COMMAND,
        "    if args.verbose and timed is not None:\n",
        "    if False:\n",
        ("generate:fast",),
        family="generate",
    ),
]
