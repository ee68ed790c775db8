"""Mistakes in generation with a key/value cache (docs/semantics.md section 16).

Each gives tokens or logits that differ from the spec's: a decode step at the wrong
position, without its cache or writing it at the wrong row differs from recomputing the
whole sequence; a step that reuses a key, or a stop token that does not stop, differs
from the spec's loop; a step that copies the cache's past rows costs more with every
position (the decode probe). The
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
        "    q, k, v = project(cfg, x, p, start=position)",
        "    q, k, v = project(cfg, x, p, start=position + 1)",
        ("generate:cache",),
        family="generate",
    ),
    Mutant(
        "generate-cache-prompt-one-row-late",
        "the generation loop places the prompt's keys and values one row late in the cache, "
        "row 0 left empty",
        GENERATION,
        "    cache[:, :, : rows.shape[2]] = rows",
        "    cache[:, :, 1 : rows.shape[2] + 1] = rows",
        ("generate:cache",),
        family="generate",
    ),
    Mutant(
        "generate-decode-ignores-cache",
        "a GPT decode step attends over its own key and value only, not the cached ones",
        GPT,
        "    return attend(cfg, q, keys, values, p, causal=False, rows=position + 1), keys, values",
        "    return attend(cfg, q, k, v, p, causal=False), keys, values",
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
        "np.stack([r[k] for k in range(node.count)])",
        "np.stack([r[k] for k in reversed(range(node.count))])",
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
        "the C generation loop runs each step after the first one position early: its keys and "
        "values go over the last cached row, and its own row stays unwritten",
        C_LOOP,
        "    d->program->run(d->weights, d->T, d->in, d->out, d->arena);",
        "    d->program->run(d->weights, d->T > 0 ? d->T - 1 : 0, d->in, d->out, d->arena);",
        ("generate:program",),
        family="generate",
    ),
    Mutant(
        "c-generate-every-step-first-key",
        "the C generation loop draws every step's u from the first step's child key",
        C_LOOP,
        "        exactc_key_fold_in(key, (uint64_t)n, &child);",
        "        exactc_key_fold_in(key, 0, &child);",
        ("generate:program",),
        family="generate",
    ),
    Mutant(
        "c-generate-prompt-from-its-second-token",
        "the C generation loop feeds the prompt from its second token: the first position is never cached",
        C_LOOP,
        "    for (int64_t t = 0; rc == 0 && t < len; t++) step(d, prompt[t]);",
        "    for (int64_t t = len > 1; rc == 0 && t < len; t++) step(d, prompt[t]);",
        ("generate:program",),
        family="generate",
    ),
    Mutant(
        "c-generate-stop-token-ignored",
        "the C generation loop runs on past a drawn stop token",
        C_LOOP,
        "        if (stopped || drawn.token == stop || n == count) break;",
        "        if (stopped || n == count) break;",
        ("generate:program",),
        family="generate",
    ),
    Mutant(
        "c-generate-recomputes-every-step",
        "the C generation loop ignores its cache: every new token runs the whole sequence "
        "through decode again from position 0 (the same bits, a cost quadratic in the tokens; "
        "probe only)",
        C_LOOP,
        "        step(d, (int32_t)drawn.token);\n",
        "        d->T = 0; /* the whole sequence again */\n"
        "        for (int64_t t = 0; t < len; t++) step(d, prompt[t]);\n"
        "        for (int64_t t = 0; t < n; t++) step(d, g->tokens[t]);\n",
        ("probes:generate",),
        family="generate",
    ),
    Mutant(
        "decode-copies-the-past-cache-rows",
        "a decode step's cache_write copies the cache's rows before row T onto themselves, "
        "as the concatenation of the past rows did: the same bits, a loop over the position "
        "(the decode probe's loop check; its counts hardly show a memcpy of a few hundred bytes)",
        LOWER,
        '    return [Nest("cache_write", tuple(axes), (CopyBits(ctx.at("y", *dst), ctx.at("rows", *src)),))]',
        '    past = (Axis("p0", ctx.shape("y")[0]), Axis("p1", ctx.attrs["pos"]), Axis("p2", ctx.shape("y")[2]))\n'
        '    at = (ix("p0"), ix("p1"), ix("p2"))\n'
        '    copy = Nest("cache_past", past, (CopyBits(ctx.at("y", *at), ctx.at("cache", *at)),))\n'
        '    return [copy, Nest("cache_write", tuple(axes), (CopyBits(ctx.at("y", *dst), ctx.at("rows", *src)),))]',
        ("probes:decode",),
        family="generate",
    ),
    Mutant(
        "decode-writes-its-row-one-early",
        "a GPT decode step writes its keys over row T - 1 of the cache, the last cached one, "
        "and attends over a row T it never wrote",
        GPT,
        '    keys = g.cache_write(past_k, k, position, name="keys")',
        '    keys = g.cache_write(past_k, k, position - 1, name="keys")',
        ("generate:cache", "generate:program"),
        family="generate",
    ),
    Mutant(
        "cache-write-one-row-late",
        "cache_write writes its rows one row after `pos`: a decode step's keys and values land "
        "past its position (past the cache's end at the last one)",
        LOWER,
        '    dst[1] = src[1] + Affine.of(ctx.attrs["pos"])',
        '    dst[1] = src[1] + Affine.of(ctx.attrs["pos"]) + 1',
        ("kernels:cache_write", "generate:programs"),
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
        "weights=weights, cc=args.cc, contract=args.contract, form=args.form)",
        "cc=args.cc, contract=args.contract, form=args.form)",
        ("generate:fast",),
        family="generate",
    ),
    Mutant(
        "generate-reference-ignores-the-weights",
        "exactc generate's reference evaluates the float graph under --weights q8|q4: other "
        "tokens than the C program's quantized one",
        COMMAND,
        "reference_programs(model, args.dtype, user, checkpoint, weights, args.contract,",
        "reference_programs(model, args.dtype, user, checkpoint, None, args.contract,",
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
