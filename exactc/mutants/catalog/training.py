"""Mistakes in training's arithmetic (docs/semantics.md section 17): a backward rule
missing a term or summing in another order, the loss's mean, AdamW's corrections and
which parameters decay; and in the training loop's checkpoints (exactc/train.py, and the
exported program's loop, runtime/exactc_train.c): a part of the state not written or not
read back, so that a resumed run diverges."""

from exactc.mutants.model import Mutant

BACKWARD = "exactc/exporter/reference/backward.py"
TRAINING = "exactc/exporter/reference/training.py"
LOOP = "exactc/train.py"
LOWER = "exactc/exporter/kernels/lower.py"
GRAPH = "exactc/exporter/backprop.py"
C_LOOP = "exactc/runtime/exactc_train.c"
# One sequence's backward in loss_grad: the parameters' adjoints, the logits', the walk.
PER_SEQUENCE = (
    "            cells: Cells = {id(v): Cell(grads[spec.name]) for spec, v in zip(program.params, program.param_values)}\n"
    "            cells[id(logits_value)] = Cell(zeros(terms.shape, site) + terms)  # +0 ⊕ each term\n"
    "            _backward(program.function, tape, cells, site)\n"
)
# AdamW's element lines, from the clipping of the gradient to the update of the parameter.
CLIP_AND_UPDATE = (
    "    if clip is not None:\n"
    "        g = g * clip\n"
    "    if decays:\n"
    '        p = p * scalars["decay"]\n'
    '    mt = m + (scalars["w1"] * (g - m))\n'
    '    vt = (v * scalars["beta2"]) + (scalars["w2"] * (g * g))\n'
    '    den = (np.sqrt(vt) / scalars["root"]) + scalars["eps"]\n'
    '    p = p - (scalars["step"] * (mt / den))\n'
)

# The C loop's AdamW element lines (a macro: each line ends in a backslash), clip to update.
ADAMW_C_LINES = (
    "            T gc = g[i] * clip;                                                                         \\\n"
    "            T pd = decays ? p[i] * decay : p[i];                                                        \\\n"
    "            T mt = m[i] + (w1 * (gc - m[i]));                                                           \\\n"
    "            T vt = (v[i] * beta2) + (w2 * (gc * gc));                                                   \\\n"
    "            m[i] = mt;                                                                                  \\\n"
    "            v[i] = vt;                                                                                  \\\n"
    "            p[i] = pd - (step * (mt / ((SQRT(vt) / root) + eps)));                                      \\\n"
)

MUTANTS = [
    # ---- the backward primitives' C (exporter/kernels/lower.py), caught bit for bit
    Mutant(
        "c-weight-grad-positions-reversed",
        "linear_bar_w's C sums the positions last first (the same value, other bits)",
        LOWER,
        '    m, k, n = ix("m"), ix("k"), ix("n")\n    body = _accumulated(ctx, (n, k), [Axis("m", rows, REDUCE)],',
        '    m, k, n = ix("m") * -1 + (rows - 1), ix("k"), ix("n")\n'
        '    body = _accumulated(ctx, (n, k), [Axis("m", rows, REDUCE)],',
        ("kernels:linear_bar_w",),
        family="training",
    ),
    Mutant(
        "c-embedding-grad-last-write",
        "embedding_bar's C keeps the last write of a repeated token: acc's row plus that token's dy",
        LOWER,
        '            If(in_range, (Write(at, add(Load(at), ctx.load("dy", t, d))),)),',
        '            If(in_range, (Write(at, add(ctx.load("acc", ix("row"), d), ctx.load("dy", t, d))),)),',
        ("kernels:embedding_bar",),
        family="training",
    ),
    Mutant(
        "c-softmax-grad-no-row-sum",
        "softmax_bar's C drops the row-sum term: probs ⊗ dy",
        LOWER,
        'mul(ctx.load("probs", bi, i, jy), sub(ctx.load("dy", bi, i, jy), dot))',
        'mul(ctx.load("probs", bi, i, jy), ctx.load("dy", bi, i, jy))',
        ("kernels:softmax_bar",),
        family="training",
    ),
    Mutant(
        "c-layernorm-grad-no-mean-term",
        "layernorm_bar_x's C drops the gradient's mean ma",
        LOWER,
        '    if kind == "layernorm":  # the gradient\'s mean, ma\n'
        '        body += [Declare(sa, ctx.R(0.0)), Loop(Axis("da", dim, REDUCE), (Assign(sa, add(sa, a(ix("da")))),)),\n'
        "                 Declare(ma, div(sa, n))]\n"
        "        centred = sub(centred, ma)\n",
        "",
        ("kernels:layernorm_bar_x",),
        family="training",
    ),
    Mutant(
        "c-grad-accumulator-from-zero",
        "an accumulating backward kernel starts from +0 instead of acc, the adjoint so far",
        LOWER,
        '    return [Declare(v, ctx.load("acc", *out)), step, Write(ctx.at("y", *out), v)]',
        '    return [Declare(v, ctx.R(0.0)), step, Write(ctx.at("y", *out), v)]',
        ("kernels:linear_bar_w", "kernels:linear_bar_b", "kernels:sum_rows"),
        family="training",
    ),
    Mutant(
        "embedding-grad-last-write",
        "the embedding's scatter-add keeps the last write of a repeated token (numpy's fancy-index +=)",
        BACKWARD,
        "    for t in range(ids.shape[0]):\n"
        "        if 0 <= ids[t] < table_bar.shape[0]:\n"
        "            table_bar[ids[t]] = table_bar[ids[t]] + dy[t]\n",
        "    inside = (ids >= 0) & (ids < table_bar.shape[0])\n    table_bar[ids[inside]] += dy[inside]\n",
        ("backward",),
        family="training",
    ),
    Mutant(
        "softmax-grad-no-row-sum",
        "softmax's backward drops its row-sum term: x̄ ⊕= y ⊗ ȳ",
        BACKWARD,
        "    term = y * (dy - dot[:, :, None])",
        "    term = y * dy",
        ("backward",),
        family="training",
    ),
    Mutant(
        "layernorm-grad-no-mean-term",
        "layernorm's backward drops the mean of the gradient (a - ma)",
        BACKWARD,
        '    centred = a - _row_mean(a, site)[:, None] if kind == "layernorm" else a',
        "    centred = a",
        ("backward",),
        family="training",
    ),
    Mutant(
        "gelu-grad-constant",
        "gelu_tanh's derivative is taken as a constant 1/2 (the slope at 0)",
        BACKWARD,
        "    q = dr * du\n    q = dl + q\n",
        "    q = dr * du\n    q = half + zeros(x.shape, site)\n",
        ("backward",),
        family="training",
    ),
    Mutant(
        "weight-grad-positions-reversed",
        "a linear weight's gradient sums the positions last first (the same value, other bits)",
        BACKWARD,
        "    for m in range(x.shape[0]):\n        bar[...] = bar + dy[m, :, None] * x[None, m, :]\n",
        "    for m in reversed(range(x.shape[0])):\n        bar[...] = bar + dy[m, :, None] * x[None, m, :]\n",
        ("backward",),
        family="training",
    ),
    Mutant(
        "loss-mean-not-divided",
        "the loss's 1/(B·T) is dropped from the logits' adjoint (a sum's gradient, not a mean's)",
        TRAINING,
        "    r = np.divide(real(1.0, site), n)",
        "    r = real(1.0, site)",
        ("training:autograd",),
        family="training",
    ),
    Mutant(
        "adamw-bias-correction-t-minus-1",
        "AdamW's bias corrections take the step counted from 0: 1 - β^(t-1)",
        TRAINING,
        "    bc1, bc2 = 1.0 - _power(opt.beta1, step), 1.0 - _power(opt.beta2, step)",
        "    bc1, bc2 = 1.0 - _power(opt.beta1, step - 1), 1.0 - _power(opt.beta2, step - 1)",
        ("training:adamw",),
        family="training",
    ),
    Mutant(
        "adamw-decays-norms-and-biases",
        "AdamW decays every parameter, the norms' gains and the biases too",
        "exactc/exporter/training.py",
        "    return len(spec.shape) == 2",
        "    return len(spec.shape) >= 1",
        ("training:adamw",),
        family="training",
    ),
    Mutant(
        "backward-fold-first-layer-up",
        "the reverse walk runs a fold's layers from the first up (each layer's adjoint wired to the wrong one)",
        TRAINING,
        "    for layer in reversed(range(fold.count)):",
        "    for layer in range(fold.count):",
        ("training:autograd",),
        family="training",
    ),
    Mutant(
        "adamw-clips-after-the-update",
        "clipping scales the update instead of the gradient: the moments see the unclipped gradient",
        BACKWARD,
        CLIP_AND_UPDATE,
        CLIP_AND_UPDATE.replace("    if clip is not None:\n        g = g * clip\n", "").replace(
            '    p = p - (scalars["step"] * (mt / den))\n',
            '    update = scalars["step"] * (mt / den)\n    p = p - (update * clip if clip is not None else update)\n',
        ),
        ("training:clipping",),
        family="training",
    ),
    Mutant(
        "batch-gradients-summed-per-sequence",
        "each sequence's gradients are summed from +0 and added afterwards, not carried over in one accumulator",
        TRAINING,
        PER_SEQUENCE,
        PER_SEQUENCE.replace("Cell(grads[spec.name])", "Cell(zeros(grads[spec.name].shape, site))")
        + "            for spec, v in zip(program.params, program.param_values):\n"
        "                grads[spec.name] = grads[spec.name] + cells[id(v)].array\n",
        ("training:orders",),
        family="training",
    ),
    Mutant(
        "dead-code-differentiated",
        "an operation whose output reaches no loss runs its backward on a zero adjoint (0 ⊗ ∞ = NaN leaks in)",
        TRAINING,
        "    if out is None or out.array is None:\n        return  # no term reached this value: dead code, after differentiation\n",
        "    if out is None or out.array is None:\n        out = _cell(cells, op.out)\n"
        "        out.bar(values[id(op.out)].shape, site)\n",
        ("training:dead-code",),
        family="training",
    ),
    Mutant(
        "checkpoint-without-moments",
        "the checkpoint holds the weights but not AdamW's moments: a run cannot resume from it",
        LOOP,
        "    for prefix, moment in zip(trained.MOMENTS, (state.m, state.v)):\n"
        "        tensors.update({prefix + name: t for name, t in export.weight_tensors(program, moment, run.dtype).items()})\n",
        "",
        ("train:resume",),
        family="training",
    ),
    Mutant(
        "resume-moments-from-zero",
        "a resumed run starts AdamW's moments at +0 instead of reading them back: it diverges",
        LOOP,
        "    m, v = stacked(trained.MOMENTS[0]), stacked(trained.MOMENTS[1])",
        "    m, v = {k: 0 * a for k, a in params.items()}, {k: 0 * a for k, a in params.items()}",
        ("train:resume",),
        family="training",
    ),
    Mutant(
        "resume-data-position-not-restored",
        "a resumed run reads its batches from the stream's start, not from the checkpoint's data position",
        LOOP,
        'int(record["position"])',
        "0",
        ("train:resume",),
        family="training",
    ),
    Mutant(
        "resume-step-counter-not-restored",
        "a resumed run counts its steps from 0: the schedule, the bias corrections and the step count start over",
        LOOP,
        'int(record["step"])',
        "0",
        ("train:resume",),
        family="training",
    ),
    Mutant(
        "train-step-rate-not-passed",
        "the loop's AdamW updates at the peak rate every step, not the schedule's rate of the step",
        LOOP,
        "state.m, state.v, lr=rate\n",
        "state.m, state.v\n",
        ("train:pytorch",),
        family="training",
    ),
    Mutant(
        "train-warmup-one-step-long",
        "the loop's schedule warms up over W + 1 steps: each step's rate is its neighbour's",
        LOOP,
        "run.lr, run.warmup)",
        "run.lr, run.warmup + 1)",
        ("train:pytorch",),
        family="training",
    ),
    Mutant(
        "token-file-size-not-checked",
        "the token file's size is only bounded below by the header's count: trailing bytes are read as nothing",
        LOOP,
        "    if count < 0 or len(data) != HEADER_BYTES + 2 * count:",
        "    if count < 0 or len(data) < HEADER_BYTES + 2 * count:",
        ("train:tokens",),
        family="training",
    ),
    Mutant(
        "token-file-magic-not-checked",
        "a file without llm.c's magic is read as tokens",
        LOOP,
        "    if magic != MAGIC:",
        "    if False:",
        ("train:tokens",),
        family="training",
    ),
    Mutant(
        "batch-runs-past-the-end-of-the-stream",
        "the loader starts over only when the next batch's first token is past the end: a batch runs short",
        LOOP,
        "    if following + size + 1 > len(stream):",
        "    if following >= len(stream):",
        ("train:tokens",),
        family="training",
    ),
    Mutant(
        "graph-backward-fold-first-layer-up",
        "the loss_grad graph's backward fold runs its layers from the first up",
        GRAPH,
        "        reverse=True,\n",
        "        reverse=False,\n",
        ("training:graph",),
        family="training",
    ),
    Mutant(
        "graph-position-slice-joined-back-at-t-max",
        "the backward of a slice whose bounds follow T joins x̄'s rows after it back as a part of "
        "extent positions - T, sized at T_max: at a shorter run-time length it overflows its buffer",
        GRAPH,
        "    if dims.is_symbolic(start) or dims.is_symbolic(stop):\n",
        "    if dims.is_symbolic(stop) and not dims.lt(stop, end):\n",
        ("programs:loss-grad-lengths",),
        family="training",
    ),
    Mutant(
        "graph-loss-mean-not-divided",
        "the loss_grad graph drops the loss's 1/(B·T) from the logits' adjoint (r = 1)",
        GRAPH,
        '        r = g.apply("xent_mean", {"x": one, "targets": targets}, {"ignore": lg.ignore}, name="r")  # 1 ⊘ n\n',
        "        r = one\n",
        ("training:graph",),
        family="training",
    ),
    Mutant(
        "graph-backward-recomputes-the-forward",
        "the backward fold runs its layer's forward again instead of reading the residuals kept (same bits)",
        GRAPH,
        "        for v, p in zip(formals[carry:], params + list(shared[:-1])):\n"
        "            inner.env[((), id(v))] = p\n",
        "        for v, p in zip(formals[carry:], params + list(shared[:-1])):\n"
        "            inner.env[((), id(v))] = p\n"
        "        _forward(body_fn, [inner.env[((), id(v))] for v in formals[:carry]] + params + list(shared[:-1]),\n"
        "                 inner, ())\n",
        ("training:graph",),
        family="training",
    ),
    Mutant(
        "iota-lowered-one-row-late",
        "iota's C kernel counts from start + 1: a position slice's backward adds each row's term to the next row",
        "exactc/exporter/kernels/lower.py",
        '    value = Convert(ix("i") + ctx.attrs["start"], "i32")\n',
        '    value = Convert(ix("i") + ctx.attrs["start"] + 1, "i32")\n',
        ("kernels:iota",),
        family="training",
    ),
    Mutant(
        "train-threads-not-checked",
        "exactc train hands --threads 0 to OpenMP instead of refusing it",
        LOOP,
        "    if args.threads is not None and args.threads < 1:\n",
        "    if args.threads is not None and args.threads < 0:\n",
        ("train:c-refusals",),
        family="training",
    ),
    # ---- the exported program's loop (runtime/exactc_train.c), against the reference's bytes
    Mutant(
        "c-resume-data-position-not-restored",
        "the C loop resumed reads its batches from the stream's start, not from the checkpoint's position",
        C_LOOP,
        "&s->position) != 0)",
        "&s->position) != 0 || (s->position = 0) != 0)",
        ("train:c",),
        family="training",
    ),
    Mutant(
        "c-checkpoint-without-moments",
        "the C loop's checkpoint holds the weights but not AdamW's moments: a run cannot resume from it",
        C_LOOP,
        "#define BLOCKS 3",
        "#define BLOCKS 1",
        ("train:c",),
        family="training",
    ),
    Mutant(
        "c-adamw-bias-correction-t-minus-1",
        "the C loop's host scalars take the bias corrections with the step counted from 0: 1 - β^(t-1)",
        C_LOOP,
        "power(BETA1, t), bc2 = 1.0 - power(BETA2, t);",
        "power(BETA1, t - 1), bc2 = 1.0 - power(BETA2, t - 1);",
        ("train:c",),
        family="training",
    ),
    Mutant(
        "c-adamw-clips-after-the-update",
        "the C loop's AdamW scales the update by the clip factor instead of the gradient",
        C_LOOP,
        ADAMW_C_LINES,
        ADAMW_C_LINES.replace("g[i] * clip;", "g[i];       ").replace("+ eps)));", "+ eps))) * clip;"),
        ("train:c",),
        family="training",
    ),
]
