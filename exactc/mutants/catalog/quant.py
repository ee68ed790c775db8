"""Quantized operands (docs/semantics.md, section 15): the nibble order, the sign rule,
block boundaries and scales, the quantizer's rounding, division and clamp, the width of
the integer sums, the integer-sum layouts and the one-byte poison of the harness.

Each mistake sits in one twin only: the C side (the lowering, the printer) or the numpy
side (exporter/quant.py, the reference), so that the other twin disagrees with it. One
changes no bit (the automatic plan's quantized layouts dropped): the layout assertions
of tests/test_autoplan.py catch it.
"""

from exactc.mutants.model import Mutant

LOWER = "exactc/exporter/kernels/lower.py"
QUANT = "exactc/exporter/quant.py"
OPS = "exactc/exporter/reference/ops.py"
NESTS = "exactc/exporter/printer/nests.py"
SUMS = "exactc/exporter/printer/sums.py"
HOST = "exactc/runtime/exactc_host.c"
GRAPH = "exactc/exporter/graph.py"
EXPORT = "exactc/exporter/export.py"
LLAMA2C = "exactc/exporter/checkpoints/llama2c.py"
GGUF = "exactc/exporter/checkpoints/gguf_file.py"
LAYOUTS = "exactc/exporter/kernels/layouts.py"
AUTOPLAN = "exactc/exporter/kernels/autoplan.py"
REQUIRES = (QUANT,)

# The integer form's k-quant combination, per super-block (docs/semantics.md, section 15):
# the reference's statements in the spec's order and swapped; the C lowering's min term.
K_SCALE_TERM_THEN_MIN = """\
        acc = acc + sums[:, :, blk].astype(np.int32).astype(acc.dtype) * (x_scale * widen(fields[:, blk, 0], site))
        if min_sums is not None:
            term = min_sums[:, :, blk].astype(np.int32).astype(acc.dtype) * (x_scale * widen(fields[:, blk, 1], site))
            acc = acc - term
"""
K_MIN_TERM_THEN_SCALE = """\
        if min_sums is not None:
            term = min_sums[:, :, blk].astype(np.int32).astype(acc.dtype) * (x_scale * widen(fields[:, blk, 1], site))
            acc = acc - term
        acc = acc + sums[:, :, blk].astype(np.int32).astype(acc.dtype) * (x_scale * widen(fields[:, blk, 0], site))
"""
K_C_MIN_TERM = "            stmts.append(Assign(acc, sub(acc, min_term)))\n"
K_C_MIN_TERM_FIRST = "            stmts.insert(len(stmts) - 1, Assign(acc, sub(acc, min_term)))\n"

MUTANTS = [
    Mutant(
        "q4-nibbles-swapped",
        "the C kernels read block value j from the high nibble of byte j and value j + G/2 "
        "from the low one (ggml's Q4_0 order exchanged)",
        LOWER,
        'nibble = Binary("&", byte, _i32(0x0F)) if offset == 0 else Binary(">>", byte, _i32(4))',
        'nibble = Binary(">>", byte, _i32(4)) if offset == 0 else Binary("&", byte, _i32(0x0F))',
        ("quant", "kernels:qlinear_w"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "q4-sign-rule-nibble-8-is-plus-8",
        "the numpy unpacking reads a nibble as two's complement past 8 (n > 8: n - 16, "
        "else n), so nibble 8 is +8 instead of 0, instead of offset binary n - 8",
        QUANT,
        "    values = nibbles.astype(np.int8) - np.int8(Q4_OFFSET)\n",
        "    values = np.where(nibbles > 8, nibbles.astype(np.int8) - np.int8(16), nibbles.astype(np.int8))\n",
        ("quant", "kernels:qlinear_i"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "q-block-boundary-off-by-one",
        "the reference's integer block sum runs one value past its block (into the next "
        "block, whose scale differs)",
        OPS,
        "        for k in range(blk * block, builtins.min(blk * block + block, k_total)):",
        "        for k in range(blk * block, builtins.min(blk * block + block + 1, k_total)):",
        ("quant", "kernels:qlinear_i"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "q-previous-block-scale",
        "the reference scales each block sum by the previous block's activation scale "
        "(the first block by the last one's)",
        OPS,
        "        scale = widen(xd[:, blk], site)[:, None] * widen(wd[:, blk], site)[None, :]",
        "        scale = widen(xd[:, blk - 1], site)[:, None] * widen(wd[:, blk], site)[None, :]",
        ("quant", "kernels:qlinear_i"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "quantize-scale-in-f64-c-only",
        "the C quantizer keeps the scale and the quotients in f64 at f32 and bf16 sites (the "
        "stored scale rounds to the same f32, but a tie of the f32 scale is not one of the "
        "f64 scale)",
        LOWER,
        "    work = ctx.acc  # the type of the scale and the quotients: A, as the rule says\n",
        '    work = "f64"\n',
        ("quant", "kernels:quantize"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "quantize-ties-toward-zero-c-only",
        "the C quantizer rounds exact halves toward zero instead of away from it",
        LOWER,
        'Select(Binary(">=", f, Const(0.5, work)), _i32(1),\n'
        '                                                Select(Binary("<=", f, Const(-0.5, work))',
        'Select(Binary(">", f, Const(0.5, work)), _i32(1),\n'
        '                                                Select(Binary("<", f, Const(-0.5, work))',
        ("quant", "kernels:quantize"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "quantize-zero-block-divided",
        "the numpy quantizer divides a block of zeros by its zero scale (0/0, NaN, as "
        "runq.c does) instead of writing zeros without a division",
        QUANT,
        "        quotients = _quotients(blocks, scales, zero | nonfinite)",
        "        quotients = _quotients(blocks, scales, nonfinite)",
        ("quant", "kernels:quantize"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "quantize-clamp-at-minus-128",
        "the C quantizer clamps at -128 instead of -127 (reached when a subnormal scale "
        "makes a quotient pass -127.5)",
        LOWER,
        'Select(Binary("<", near, _i32(-Q8_LIMIT)), _i32(-Q8_LIMIT),',
        'Select(Binary("<", near, _i32(-Q8_LIMIT - 1)), _i32(-Q8_LIMIT - 1),',
        ("quant", "kernels:quantize"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "int-sum-narrowed-to-int16",
        "the printed C declares int32 scalars (the integer block sums) as int16_t: a block "
        "sum past 32767 wraps",
        NESTS,
        '"bool": "int", "i32": "int32_t"}',
        '"bool": "int", "i32": "int16_t"}',
        ("quant", "kernels:qlinear_i"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "quantize-zero-block-left-unwritten",
        "the C quantizer writes no value for a block whose scale is zero (the harness's "
        "one-byte poison, -128, shows the unwritten elements)",
        LOWER,
        'If(Binary("==", d, Const(0.0, work)), (fill("jz", zero),),',
        'If(Binary("==", d, Const(0.0, work)), (Assign(bad, Affine.constant(0)),),',
        ("quant", "kernels:quantize"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "qlinear-scale-found-by-search",
        "each block of the integer linear finds its weight scale by walking the row's scales "
        "(for sb < nb: if sb == blk: ws = wd[n, sb]): the same bits, a cost quadratic in K; "
        "only the growth probe sees it (quant stays green)",
        LOWER,
        "        scale = mul(ctx.W(\"xd\", m, blk), ctx.W(\"wd\", n, blk))\n"
        "        return [\n"
        "            Declare(s, _i32(0)),\n",
        "        ws, sb = ctx.var(f\"ws_{sum_name}\", \"f32\"), f\"sb_{sum_name}\"\n"
        "        search = [Declare(ws, Const(0.0, \"f32\")), Loop(Axis(sb, block_count(k, ctx.attrs[\"block\"]), REDUCE), (If(\n"
        "            Binary(\"==\", ix(sb), _affine(blk)), (Assign(ws, ctx.load(\"wd\", n, ix(sb))),)),))]\n"
        "        scale = mul(ctx.W(\"xd\", m, blk), ctx.widen(ws))\n"
        "        return [\n"
        "            *search,\n"
        "            Declare(s, _i32(0)),\n",
        ("probes:quant-growth", "quant"),
        family="quant",
        requires=REQUIRES,
    ),
    Mutant(
        "int-sum-remainder-dropped",
        "a laned integer sum skips the values of each part past its last full chunk of lanes",
        SUMS,
        'out.append(f"{inner}for (int64_t {axis} = {end}; {axis} < {hi}; {axis}++) {{")',
        'out.append(f"{inner}for (int64_t {axis} = {end}; {axis} < {end}; {axis}++) {{")',
        ("layouts:integer-sums", "layouts:property"),
        family="quant",
        requires=(SUMS,),
    ),
    Mutant(
        "float-reduction-summed-in-lanes",
        "the layout rules take an f32 or f64 accumulator for an integer sum, so a float "
        "reduction may be regrouped in lanes and parts",
        LAYOUTS,
        'isinstance(stmt, Assign) and stmt.var.type == "i32"',
        'isinstance(stmt, Assign) and stmt.var.type in ("i32", "f32", "f64")',
        ("layouts:property",),
        family="quant",
        requires=(SUMS,),
    ),
    Mutant(
        "st-i8-weights-read-as-u8",
        "the program's weights reader asks the file for U8 where a parameter is int8 (q8 "
        "values), so it refuses the file exactc wrote",
        HOST,
        '[EXACTC_KIND_I8] = {1, EXACTC_I32, "I8"},',
        '[EXACTC_KIND_I8] = {1, EXACTC_I32, "U8"},',
        ("host-runtime", "quant:programs"),
        family="quant",
        requires=(HOST,),
    ),
    Mutant(
        "param-layer-stride-in-elements",
        "the weights reader places layer l of a stacked parameter l * chunk bytes after the "
        "first instead of l * chunk elements (the block is addressed in bytes)",
        HOST,
        "p->offset + (size_t)l * chunk * size;",
        "p->offset + (size_t)l * chunk;",
        ("host-runtime", "quant:programs"),
        family="quant",
        requires=(HOST,),
    ),
    Mutant(
        "tied-head-quantized",
        "--weights quantizes every weight that reaches linear, also one read otherwise (GPT's "
        "tied head is its embedding table)",
        GRAPH,
        'if used == {("linear", "w")}]',
        'if ("linear", "w") in used]',
        ("quant:programs",),
        family="quant",
        requires=(GRAPH,),
    ),
    Mutant(
        "q-weights-quantized-from-site-values",
        "--weights quantizes the parameters rounded to the site type (bf16) instead of the "
        "reals rounded to f32",
        EXPORT,
        'at = site if weights is None else "f64"',
        "at = site",
        ("quant:programs",),
        family="quant",
        requires=(EXPORT,),
    ),
    Mutant(
        "llama2c-v2-group-size-fixed",
        "the llama2.c version-2 reader takes runq.c's usual group size, 64, instead of the "
        "header's group_size",
        LLAMA2C,
        'group = params.get("group_size", 0)',
        'group = 64 if version == 2 else 0',
        ("quant:programs",),
        family="quant",
        requires=(LLAMA2C,),
    ),
    Mutant(
        "llama2c-v2-scales-not-permuted",
        "the llama2.c version-2 reader permutes wq's and wk's int8 rows to Hugging Face's "
        "order but leaves their scales in llama2.c's",
        LLAMA2C,
        "values, scales = interleaved_to_half(values, heads), interleaved_to_half(scales, heads)",
        "values = interleaved_to_half(values, heads)",
        ("quant:programs",),
        family="quant",
        requires=(LLAMA2C,),
    ),
    Mutant(
        "gguf-q4-nibbles-swapped",
        "the GGUF reader takes Q4_0's high nibble for block element j and the low one for "
        "j + 16 (each byte's nibbles exchanged)",
        GGUF,
        'values = payload.view(np.int8) if fmt == "q8" else payload',
        'values = payload.view(np.int8) if fmt == "q8" else (payload >> 4) | (payload << 4)',
        ("quant:programs",),
        family="quant",
        requires=(GGUF,),
    ),
    Mutant(
        "gguf-qk-rows-not-permuted",
        "the GGUF reader keeps attn_q's and attn_k's rows in the converter's interleaved "
        "order instead of putting them back in Hugging Face's",
        GGUF,
        'heads = H if ".self_attn.q_proj." in name else KV if ".self_attn.k_proj." in name else None',
        "heads = None",
        ("quant:programs",),
        family="quant",
        requires=(GGUF,),
    ),
    Mutant(
        "quantized-layouts-dropped",
        "the automatic plan gives the quantized nests no layouts of their own: qlinear_w, "
        "qlinear_i and quantize keep their plain loops split on rows, so a decode step's one "
        "row runs unlaned on one thread (speed only: the bits stay)",
        AUTOPLAN,
        "            + quantized_layouts(kernel, nest) if lanes_fill(nest, layout)]",
        "            if lanes_fill(nest, layout)]",
        ("autoplan:quantized",),
        family="speed",
    ),
    Mutant(
        "q4k-scale-high-bits-from-the-wrong-byte",
        "Q4_K's and Q5_K's 6-bit scales 4-7 take their top 2 bits from bytes 4-7 (the mins') "
        "instead of bytes 0-3",
        QUANT,
        "    high_scales = (third & 0x0F) | ((first >> 6) << 4)\n",
        "    high_scales = (third & 0x0F) | ((second >> 6) << 4)\n",
        ("quant:k-quants", "gguf:k-quants"),
        family="quant",
    ),
    Mutant(
        "q6k-high-bits-shifted-by-2",
        "Q6_K's 2-bit high parts are placed at bits 2-3 of the quant instead of 4-5",
        QUANT,
        "    q = (low.reshape(lead + (2, 4, 32)) | (high << 4)).astype(np.int16) - 32\n",
        "    q = (low.reshape(lead + (2, 4, 32)) | (high << 2)).astype(np.int16) - 32\n",
        ("quant:k-quants", "gguf:k-quants"),
        family="quant",
    ),
    Mutant(
        "q5k-high-bit-dropped",
        "Q5_K's fifth bit of the last sub-block (bit 7 of each qh byte) is dropped: values "
        "224-255 of a super-block lose their 16",
        QUANT,
        "    high = (qh[..., None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1  # (..., 8, 32)\n",
        "    high = (qh[..., None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & (np.arange(8)[:, None] < 7)\n",
        ("quant:k-quants", "gguf:k-quants"),
        family="quant",
    ),
    Mutant(
        "k-quant-dmin-term-added",
        "Q4_K's and Q5_K's values add dmin x min instead of subtracting it",
        QUANT,
        "        values = values - offset[..., None]\n",
        "        values = values + offset[..., None]\n",
        ("quant:k-quants", "gguf:k-quants"),
        family="quant",
    ),
    Mutant(
        "q4k-c-scale-high-bits-from-the-wrong-byte",
        "the C k-quant kernels take the top 2 bits of Q4_K's and Q5_K's 6-bit scales 4-7 from "
        "bytes 4-7 (the mins') instead of bytes 0-3",
        LOWER,
        "    scale = _above(_bits(p(j + 4), 0, 15), _bits(p(j - 4), 6, 3), 4)\n",
        "    scale = _above(_bits(p(j + 4), 0, 15), _bits(p(j), 6, 3), 4)\n",
        ("quant:k-quants",),
        family="quant",
    ),
    Mutant(
        "q6k-c-high-bits-shifted-by-2",
        "the C k-quant kernels place Q6_K's 2-bit high parts at bits 2-3 of the quant instead "
        "of 4-5",
        LOWER,
        '        return Binary("-", _above(low, high, 4), _i32(32))\n',
        '        return Binary("-", _above(low, high, 2), _i32(32))\n',
        ("quant:k-quants",),
        family="quant",
    ),
    Mutant(
        "q5k-c-high-bit-dropped",
        "the C k-quant kernels drop Q5_K's fifth bit of the last sub-block (bit 7 of each qh "
        "byte): values 224-255 of a super-block lose their 16",
        LOWER,
        "            return _above(low, _bits(_k_byte(ctx, blk, 16 + v), j, 1), 4)\n",
        "            return _above(low, _bits(_k_byte(ctx, blk, 16 + v), j, 1 if j < 7 else 0), 4)\n",
        ("quant:k-quants", "compilers:k-quants"),
        family="quant",
    ),
    Mutant(
        "k-quant-c-weight-only-dmin-added",
        "the C weight-only k-quant kernel adds dmin x min to each Q4_K and Q5_K weight instead of "
        "subtracting it",
        LOWER,
        "                w = sub(w, off)\n",
        "                w = add(w, off)\n",
        ("quant:k-quants", "layouts:k-quants"),
        family="quant",
    ),
    Mutant(
        "k-quant-c-integer-dmin-added",
        "the C integer-form k-quant kernel adds the min term A(M) x (xd x dmin) instead of "
        "subtracting it",
        LOWER,
        K_C_MIN_TERM,
        K_C_MIN_TERM.replace("sub(acc", "add(acc"),
        ("quant:k-quants", "layouts:k-quants"),
        family="quant",
    ),
    Mutant(
        "k-quant-c-sums-out-of-order",
        "the C integer-form k-quant kernel subtracts a super-block's min term before it adds "
        "the scale term (the spec adds first)",
        LOWER,
        K_C_MIN_TERM,
        K_C_MIN_TERM_FIRST,
        ("quant:k-quants",),
        family="quant",
    ),
    Mutant(
        "k-quant-reference-sums-out-of-order",
        "the reference's integer-form k-quant linear subtracts a super-block's min term before "
        "it adds the scale term (the spec adds first)",
        OPS,
        K_SCALE_TERM_THEN_MIN,
        K_MIN_TERM_THEN_SCALE,
        ("quant:k-quants",),
        family="quant",
    ),
    Mutant(
        "k-quant-reference-integer-dmin-added",
        "the reference's integer-form k-quant linear adds the min term instead of subtracting it",
        OPS,
        "            acc = acc - term\n",
        "            acc = acc + term\n",
        ("quant:k-quants",),
        family="quant",
    ),
    Mutant(
        "k-quant-sums-out-of-order-in-both",
        "both twins subtract a super-block's min term before adding the scale term: C and "
        "reference agree, the tie pinned by hand does not",
        LOWER,
        K_C_MIN_TERM,
        K_C_MIN_TERM_FIRST,
        ("quant:k-quants",),
        family="quant",
        also=((OPS, K_SCALE_TERM_THEN_MIN, K_MIN_TERM_THEN_SCALE),),
    ),
    Mutant(
        "weights-file-read-as-float",
        "the command line reads --weights file as float weights: a GGUF file's k-quants are "
        "exported as f32 weights, as without it",
        "exactc/commands.py",
        "        return FILE_WEIGHTS\n",
        "        return None\n",
        ("gguf:k-quants",),
        family="quant",
    ),
    Mutant(
        "file-weights-keep-a-mix-of-formats",
        "--weights file keeps a parameter whose layers mix formats (Q4_K_M's ffn_down: Q6_K in one "
        "layer, Q4_K in another) in one of them, instead of the f32 weight it reads as",
        "exactc/exporter/checkpoints/base.py",
        "            if len(formats) == 1 and None not in formats:\n",
        "            if None not in formats:\n",
        ("gguf:k-quants",),
        family="quant",
    ),
    Mutant(
        "k-quant-blocks-rows-not-permuted",
        "a GGUF file's k-quant blocks of attn_q and attn_k keep llama.cpp's interleaved row order "
        "under --weights file (the f32 reading puts them back; the blocks do not)",
        GGUF,
        "        values, scales = raw.reshape(rows, -1), fields.reshape(rows, -1)\n"
        "        if heads is not None:\n",
        "        values, scales = raw.reshape(rows, -1), fields.reshape(rows, -1)\n"
        "        if heads is None:\n",
        ("gguf:k-quants",),
        family="quant",
    ),
    Mutant(
        "k-quant-q-and-k-rows-left-interleaved",
        "a GGUF k-quant attn_q or attn_k is read in the file's interleaved row order, not put "
        "back in Hugging Face's rotate_half order as the other types are",
        GGUF,
        "        values = quant.dequantize_k(kind, raw.reshape(rows, -1)).astype(np.float64)\n"
        "        return interleaved_to_half(values, heads) if heads is not None else values\n",
        "        values = quant.dequantize_k(kind, raw.reshape(rows, -1)).astype(np.float64)\n"
        "        return values\n",
        ("gguf:k-quants", "bench:gguf"),
        family="quant",
    ),
    Mutant(
        "k-quant-weights-quantized-again",
        "a GGUF file's k-quant weights are quantized again to the program's q8/q4 with the "
        "file's Q8_0/Q4_0 blocks (a Q4_0 file's Q6_K head), instead of staying the f32 "
        "weights they were read as",
        EXPORT,
        "    kept = checkpoint.dequantized_weights(program) if checkpoint is not None else set()\n",
        "    kept: set[str] = set()\n",
        ("gguf:k-quants",),
        family="quant",
    ),
    Mutant(
        "generate-decode-quantizes-a-k-quant-head",
        "generate's decode program is traced without the checkpoint: a Q4_0 file's Q6_K head, "
        "an f32 weight in the prefill program, is a q4 weight in the decode one",
        "exactc/generate.py",
        'export.trace(model, "decode", overrides, weights, checkpoint, form)',
        'export.trace(model, "decode", overrides, weights, form=form)',
        ("generate:fast",),
        family="quant",
    ),
    Mutant(
        "quant-given-blocks-block-unchecked",
        "quantize_parameters takes a checkpoint's blocks in any block size: only their format is "
        "compared with the program's",
        QUANT,
        "            if (qt.fmt, qt.block, qt.shape) != (fmt, block, np.shape(array)):\n",
        "            if (qt.fmt, qt.shape) != (fmt, np.shape(array)):\n",
        ("quant",),
        family="quant",
    ),
    Mutant(
        "integer-form-xd-from-another-quantize",
        "in the integer form a linear reads the quantized activations of an earlier linear of "
        "the same function and shape (attention's output projection gets the normed input's "
        "q and d) instead of its own activations'",
        GRAPH,
        "    key = (x, block)",
        "    key = (id(trace.current()), x.shape, block)  # type: ignore[assignment]",
        ("quant:programs",),
        family="quant",
        requires=(GRAPH,),
    ),
    Mutant(
        "form-flag-ignored",
        "--form is not heard: every quantized program is traced weight-only (qlinear_w), also "
        "for --form integer and the default",
        EXPORT,
        "    form = form or graph.INTEGER\n",
        "    form = graph.WEIGHT_ONLY\n",
        ("quant:programs",),
        family="quant",
        requires=(EXPORT,),
    ),
    Mutant(
        "quantize-outputs-swapped-in-host",
        "the structured host hands quantize's kernel the scales' buffer as its values q and the "
        "values' buffer as its scales d",
        "exactc/exporter/printer/structured.py",
        'names.update({k: expr[id(v)] for k, v in op.results().items()})',
        'names.update({k: expr[id(v)] for k, v in zip(reversed(op.results()), op.outs)})',
        ("quant:programs",),
        family="quant",
    ),
]
