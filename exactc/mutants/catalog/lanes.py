"""The transcendentals in lanes: the runtime's laned forms (exactc_libm.c), which must give
the scalar functions' bits element by element, and the printer's calls of them."""

from exactc.mutants.model import Mutant

LIBM = "exactc/runtime/exactc_libm.c"
PLANNED = "exactc/exporter/printer/planned.py"
NESTS = "exactc/exporter/printer/nests.py"

MUTANTS = [
    Mutant(
        "laned-forms-skip-the-fixup",
        "the laned forms keep their lanes' result for every element of a whole block, also "
        "outside the lane range (NaN, infinities, saturated arguments), where the scalar "
        "function must compute it",
        LIBM,
        "|| !fn##_in_lanes(x[i])) y[i] = exactc_##fn(x[i]);",
        "|| 0) y[i] = exactc_##fn(x[i]);               ",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "laned-forms-ignore-the-outside-flag",
        "the scalar loop of the laned forms starts after the lanes' elements even when the "
        "reduction found one outside the lane range: NaN, infinities and saturated "
        "arguments keep the lanes' result",
        LIBM,
        "        for (int64_t i = outside ? 0 : whole; i < n; i++) {                                     \\\n"
        "            if (i >= whole || !fn##_in_lanes(x[i])) y[i] = exactc_##fn(x[i]);",
        "        for (int64_t i = whole; i < n; i++) {                                                   \\\n"
        "            if (i >= whole || !fn##_in_lanes(x[i])) y[i] = exactc_##fn(x[i]);",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "laned-tanh-switches-branch-early",
        "a lane of tanh takes the exp branch from a = 0.125 where the scalar function "
        "takes it from 0.25: a lane that runs another branch than the scalar code",
        LIBM,
        "    double t = blend(a < TANH_SMALL, tanh_small(a), tanh_mid(a));",
        "    double t = blend(a < 0.5 * TANH_SMALL, tanh_small(a), tanh_mid(a));",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "f64-tanh-lanes-skip-the-series",
        "tanh's f64 lanes take the exp branch alone too, as its f32 lanes may: below 0.25 "
        "a double's tanh then differs from the scalar function's series in its last bits",
        LIBM,
        "    double t = blend(a < TANH_SMALL, tanh_small(a), tanh_mid(a));",
        "    double t = tanh_mid(a);",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "f32-tanh-lanes-lose-the-sign",
        "tanh's f32 lanes return tanh(|x|): the sign is never put back",
        LIBM,
        "    return from_bits(bits_of(tanh_mid(a)) | sign);",
        "    return from_bits(bits_of(tanh_mid(a)) | (sign & 0));",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "laned-erf-select-inverted",
        "erf's lanes blend the series where the scalar function takes the erfc tail, and "
        "the other way round",
        LIBM,
        "    double y = blend(a < ERF_SERIES_END, erf_series(a), erf_tail(a));",
        "    double y = blend(a >= ERF_SERIES_END, erf_series(a), erf_tail(a));",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "laned-exp-range-into-subnormals",
        "exp's lane range starts at -710, where 2^k (k < -1021) scales the result into the "
        "subnormals in a second rounding; the scalar function rounds once there",
        LIBM,
        "#define EXP_LANES_LO (-0x1.618p+9) /* -707 */",
        "#define EXP_LANES_LO (-0x1.63p+9) /* -710 */",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "laned-sin-takes-cos-signs",
        "sin's lanes negate the kernel's result in quadrants 1 and 2, as cos does, where "
        "sin is negative in quadrants 2 and 3",
        LIBM,
        "    double y = negated_if((p.n >> 1) & 1, blend((int)(p.n & 1), p.cos_r, p.sin_r));",
        "    double y = negated_if((p.n ^ (p.n >> 1)) & 1, blend((int)(p.n & 1), p.cos_r, p.sin_r));",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "laned-cos-kernels-swapped",
        "cos's lanes take the cos kernel in the odd quadrants and the sin kernel in the even "
        "ones, the other way round from the scalar function",
        LIBM,
        "    return negated_if((p.n ^ (p.n >> 1)) & 1, blend((int)(p.n & 1), p.sin_r, p.cos_r));",
        "    return negated_if((p.n ^ (p.n >> 1)) & 1, blend((int)(p.n & 1), p.cos_r, p.sin_r));",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "laned-trig-range-past-cody-waite",
        "sin's and cos's lane range reaches 2^21, where Cody-Waite's products n * part are no "
        "longer exact and the scalar functions reduce with Payne-Hanek",
        LIBM,
        "    return (a >= TRIG_TINY) & (a < TRIG_CODY_WAITE_END);",
        "    return (a >= TRIG_TINY) & (a < 2.0 * TRIG_CODY_WAITE_END);",
        ("libm-twin",),
        family="lanes",
        requires=(LIBM,),
    ),
    Mutant(
        "array-loop-form-by-the-destination",
        "an array loop picks the laned form by the type it stores, not the type of the call: "
        "rope's f32 tables call exactc_cosf_array on the f64 angles",
        NESTS,
        "form = f\"exactc_{call.fn}{'' if call.type == 'f64' else 'f'}_array\"",
        "form = f\"exactc_{call.fn}{'' if write.dst.type == 'f64' else 'f'}_array\"",
        ("kernels:rope", "programs"),
        family="lanes",
        requires=(NESTS,),
    ),
    Mutant(
        "rope-tables-in-scalar-calls",
        "sin and cos are not among the printer's array functions: rope's tables call the "
        "scalar functions once per entry (the same bits, 4 to 5 times the time)",
        NESTS,
        'ARRAY_FUNCTIONS = ("exp", "tanh", "erf", "sin", "cos")',
        'ARRAY_FUNCTIONS = ("exp", "tanh", "erf")',
        ("kernel-print",),
        family="lanes",
        requires=(NESTS,),
    ),
    Mutant(
        "laned-call-misses-the-last-lane",
        "the printed call of a laned form covers one lane fewer than the chunk: the last "
        "lane's value is whatever its array held",
        PLANNED,
        '{form}({source}, {stmt.var.name}, {width});',
        '{form}({source}, {stmt.var.name}, {width - 1});',
        ("fast-build", "layouts:property"),
        family="lanes",
        requires=(PLANNED,),
    ),
    Mutant(
        "array-loop-drops-the-last-visible-column",
        "the causal softmax's exp pass, printed as calls of exp's laned form, stops one "
        "column short of the row's visible prefix (j < i + offset, not j <= i + offset): "
        "that column's y keeps what was there",
        NESTS,
        'limit = f"{self.expr(bound)} + 1"',
        'limit = f"{self.expr(bound)}"',
        ("kernels:softmax",),
        family="lanes",
        requires=(NESTS,),
    ),
    Mutant(
        "last-chunk-rows-unbounded",
        "the last, partial chunk of the outer lane axis (linear's rows past the last "
        "multiple of 8), run with the inner axis in lanes, runs a full chunk of rows: "
        "it writes rows past the end",
        PLANNED,
        'f"{outer} < {inner_stop(outer)}; {outer}++) {{")',
        'f"1; {outer}++) {{")',
        ("layouts:property",),
        family="lanes",
        requires=(PLANNED,),
    ),
    Mutant(
        "last-chunk-reads-an-unfilled-pack",
        "the last, partial chunk of the outer lane axis reads the pack of a buffer whose "
        "panel follows that axis too, which is filled only for full chunks",
        PLANNED,
        "        if {a for a, _ in lane_dims} <= {a for a, _ in lanes}:",
        "        if True:",
        ("layouts:property",),
        family="lanes",
        requires=(PLANNED,),
    ),
]
