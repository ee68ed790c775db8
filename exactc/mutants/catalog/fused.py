"""Mistakes in the fused realization (docs/semantics.md section 18): the reference's
fused multiply-add (exactc/exporter/reference/fma.py) rounding twice or losing the bits
that make one rounding exact; the C kernels leaving the contraction to the compiler; the
two backends fusing different primitives."""

from exactc.mutants.model import Mutant

FMA = "exactc/exporter/reference/fma.py"
NESTS = "exactc/exporter/printer/nests.py"
KERNELS = "exactc/exporter/printer/kernels.py"
LOWER = "exactc/exporter/kernels/lower.py"
WALK = "exactc/exporter/reference/walk.py"
RUNTIME_HEADER = "exactc/runtime/exactc_rt.h"
SOFT_FMA = "exactc/runtime/exactc_fma.h"
AUTOPLAN = "exactc/exporter/kernels/autoplan.py"
COMMANDS = "exactc/commands.py"
CASES = "exactc/strategies/cases.py"
KERNEL_CAMPAIGN = "exactc/verify/kernel_campaign.py"
CAMPAIGN = "exactc/verify/campaign.py"
DESIGN = "exactc/strategies/fused.py"
EMBED = "exactc/embed.py"
PRINTER_KERNELS = "exactc/exporter/printer/kernels.py"
GENERATE = "exactc/generate.py"

MUTANTS = [
    Mutant(
        "fma-f32-sum-rounded-to-nearest",
        "the f32 emulation rounds the f64 sum of the product and c to nearest instead of to "
        "odd, then to f32: a double rounding, wrong only on a tie missed by less than f64 resolves",
        FMA,
        "        odd = add_odd(p, c64)\n",
        "        odd = p + c64\n",
        ("fma",),
        family="fused",
    ),
    Mutant(
        "fma-parity-fix-wrong-way",
        "rounding to odd moves an inexact even sum one ulp away from the exact sum instead of towards it",
        FMA,
        "    step = np.where((err > 0) == (s > 0), 1, -1)",
        "    step = np.where((err > 0) == (s > 0), -1, 1)",
        ("fma",),
        family="fused",
    ),
    Mutant(
        "fma-f64-product-low-part-dropped",
        "Dekker's product returns the rounded product with a zero error term: the f64 fma adds "
        "c to the product rounded once already",
        FMA,
        "    return p, (((xh * yh - p) + xh * yl) + xl * yh) + xl * yl",
        "    return p, 0.0 * p",
        ("fma",),
        family="fused",
    ),
    Mutant(
        "fused-kernel-multiplies-then-adds",
        "the fused kernels print the step as x*w + acc instead of the written fma: under "
        "-ffp-contract=off the product and the sum are rounded apart, the default's bits",
        NESTS,
        '            return f"{name}({self.bare(expr.a)}, {self.bare(expr.b)}, {self.bare(expr.c)})"',
        '            return f"({self.expr(expr.a)} * {self.expr(expr.b)} + {self.expr(expr.c)})"',
        ("kernels:fused",),
        family="fused",
    ),
    Mutant(
        "fused-kernel-leaves-the-contraction-to-the-compiler",
        "the fused step printed as x*w + acc under a `#pragma STDC FP_CONTRACT ON` in every "
        "kernel file: whether it is fused is the compiler's choice (gcc ignores the pragma "
        "and rounds twice), not the written one",
        NESTS,
        '            return f"{name}({self.bare(expr.a)}, {self.bare(expr.b)}, {self.bare(expr.c)})"',
        '            return f"({self.expr(expr.a)} * {self.expr(expr.b)} + {self.expr(expr.c)})"',
        ("kernels:fused",),
        family="fused",
        also=(
            (
                KERNELS,
                """    out += ['#include "exactc_rt.h"']""",
                """    out += ['#include "exactc_rt.h"', "#pragma STDC FP_CONTRACT ON"]""",
            ),
        ),
    ),
    Mutant(
        "fused-qlinear-w-unfused-in-c",
        "the C lowering leaves qlinear_w's steps as a rounded product and sum while the "
        "reference fuses them: the backends fuse different primitives",
        LOWER,
        '            return Assign(acc, multiply_add(ctx, acc, ctx.W("x", m, at), ctx.widen(w)))',
        '            return Assign(acc, add(acc, mul(ctx.W("x", m, at), ctx.widen(w))))',
        ("kernels:fused",),
        family="fused",
    ),
    Mutant(
        "fused-realization-lost-in-layer-bodies",
        "the reference walk runs a fold's layers unfused: the program's realization is "
        "carried to its top function only, while the C fuses every layer",
        WALK,
        "                            _inner_tape(tape, node), contract)",
        "                            _inner_tape(tape, node))",
        ("programs:fused",),
        family="fused",
    ),
    Mutant(
        "fused-step-unfused-without-fma-instructions",
        "the runtime's fma for a target without the instruction is a multiply and an add: a "
        "portable build rounds twice, where exactc's software fma rounds once",
        SOFT_FMA,
        "#define exactc_fma exactc_soft_fma\n#define exactc_fmaf exactc_soft_fmaf\n",
        "#define exactc_fma(a, b, c) ((a) * (b) + (c))\n#define exactc_fmaf(a, b, c) ((a) * (b) + (c))\n",
        ("programs:fused-portable", "compilers:fused"),
        family="fused",
    ),
    Mutant(
        "soft-fma-f32-sum-rounded-to-nearest",
        "the runtime's software fmaf rounds the double sum of the product and c to nearest "
        "instead of to odd, then to float: a double rounding, wrong only near a tie",
        SOFT_FMA,
        "    double s = isfinite(p) && isfinite(c64) ? exactc_fma_add_odd(p, c64) : p + c64;",
        "    double s = p + c64;",
        ("fma:soft",),
        family="fused",
    ),
    Mutant(
        "soft-fma-parity-fix-wrong-way",
        "the runtime's rounding to odd moves an inexact even sum one ulp away from the exact sum instead of towards it",
        SOFT_FMA,
        "        bits += ((err > 0) == (s > 0)) ? 1 : -1;",
        "        bits += ((err > 0) == (s > 0)) ? -1 : 1;",
        ("fma:soft",),
        family="fused",
    ),
    Mutant(
        "soft-fma-f64-product-low-part-dropped",
        "the runtime's Dekker product returns a zero error term: the software fma adds c to "
        "the product rounded once already",
        SOFT_FMA,
        "    *err = (((xh * yh - *p) + xh * yl) + xl * yh) + xl * yl;",
        "    *err = 0.0 * *p;",
        ("fma:soft",),
        family="fused",
    ),
    Mutant(
        "soft-fma-where-the-hardware-has-one",
        "the fused kernels take the software fma on every target, FMA instruction or not: "
        "the same bits, a call or a dozen operations a step instead of one vfmadd (cost only)",
        SOFT_FMA,
        "#if defined(__FMA__) || defined(__aarch64__) || defined(__FP_FAST_FMA)\n",
        "#if 0\n",
        ("layouts:fused-asm",),
        family="fused",
    ),
    Mutant(
        "fused-nest-takes-the-default-s-tuned-layout",
        "a fused nest's tuning signature is the default nest's: the layout measured for one "
        "realization is taken for the other, and tuning one overwrites the other's",
        AUTOPLAN,
        '    fused = "|fma" if fuses(nest) else ""',
        '    fused = ""',
        ("autoplan:fused",),
        family="fused",
    ),
    Mutant(
        "fused-realization-made-the-default",
        "the command line's --contract lists fma first, so that every export without the "
        "option is fused: no existing program keeps its bits",
        COMMANDS,
        'CONTRACT_CHOICES = ("off", "fma")',
        'CONTRACT_CHOICES = ("fma", "off")',
        ("cli:contract",),
        family="fused",
    ),
    Mutant(
        "campaign-fused-tasks-run-unfused",
        "the kernel campaign's families drop the task's realization: its fused tasks run "
        "the default kernels, and make verify's fma line counts cases that fused nothing",
        CASES,
        "    case = dataclasses.replace(case, contract=contract)\n",
        "",
        ("campaign:fused",),
        family="fused",
    ),
    Mutant(
        "campaign-fused-cases-counted-as-kernels",
        "the campaign's merge counts the fused tasks' cases in the kernels table of the "
        "default realization instead of the fma family",
        KERNEL_CAMPAIGN,
        '            families = ["fma" if fused else "kernels"]',
        '            families = ["kernels"]',
        ("campaign:fused",),
        family="fused",
    ),
    Mutant(
        "campaign-fused-cases-planned-at-a-quarter",
        "the kernel phase plans a quarter of --cases in the fused realization instead of "
        "half: make verify's default fma line falls short of its 5,000 cases",
        KERNEL_CAMPAIGN,
        "    fused_cases = -(-cases // 2) if fused_cases is None else fused_cases",
        "    fused_cases = -(-cases // 4) if fused_cases is None else fused_cases",
        ("campaign:fused",),
        family="fused",
    ),
    Mutant(
        "campaign-fma-line-minimum-not-enforced",
        "make verify passes with fewer fused kernel cases than --min-fused-cases",
        CAMPAIGN,
        "    if args.cases > 0 and fused < args.min_fused_cases:",
        "    if False:",
        ("campaign:fused",),
        family="fused",
    ),
    Mutant(
        "campaign-fused-families-never-designed",
        "the fused campaign's linear and matmul kernels never take designed operands: no "
        "tie, cancellation or overflow that comes back is built against the running sum",
        CASES,
        "    if fused and primitive in DESIGNED_PRIMITIVES and draw(st.booleans()):",
        "    if False:",
        ("campaign:fused",),
        family="fused",
    ),
    Mutant(
        "fused-design-ties-missed",
        "the designed tie steps take the product three times a third of half an ulp: near the tie but never on it",
        DESIGN,
        '    shape = shapes[0] if kind == "tie" else shapes[1 + int(shared[0] * (len(shapes) - 1))]',
        '    shape = shapes[2] if kind == "tie" else shapes[1 + int(shared[0] * (len(shapes) - 1))]',
        ("campaign:fused",),
        family="fused",
    ),
    Mutant(
        "fused-design-overflow-does-not-come-back",
        "the designed overflow step's product is |acc| plus a part of the largest value of "
        "acc's own sign: the sum overflows instead of coming back",
        DESIGN,
        "    w = -np.sign(acc.astype(np.float64)) * magnitude",
        "    w = np.sign(acc.astype(np.float64)) * magnitude",
        ("campaign:fused",),
        family="fused",
    ),
    Mutant(
        "embed-program-drops-the-contract",
        "exactc embed --contract fma builds the default realization's program",
        EMBED,
        "    return run_program(cached_program(ckpt, dtype, tokens, cc, progress, plan, weights, contract, form), batch)",
        "    return run_program(cached_program(ckpt, dtype, tokens, cc, progress, plan, weights, form=form), batch)",
        ("commands:contract",),
        family="fused",
    ),
    Mutant(
        "generate-reference-unfused-under-contract-fma",
        "exactc generate's reference runs the default realization under --contract fma: "
        "other tokens than the fused C program's",
        GENERATE,
        "    return {entry: dataclasses.replace(p, contract=contract) for entry, p in programs.items()}, params",
        "    return programs, params",
        ("commands:contract",),
        family="fused",
    ),
    Mutant(
        "run-drops-the-contract",
        "exactc run (and export, info) build the default realization whatever --contract says",
        COMMANDS,
        '                             cc=cc, contract=getattr(args, "contract", CONTRACT_CHOICES[0]), form=args.form)',
        "                             cc=cc, contract=CONTRACT_CHOICES[0], form=args.form)",
        ("commands:contract",),
        family="fused",
    ),
    Mutant(
        "fused-narrow-layout-keeps-8-rows",
        "the fused nests' narrow layout keeps rows in lanes of 8: on AVX2 gcc keeps two of "
        "their 16 accumulators on the stack, a store and a load every step (cost only)",
        AUTOPLAN,
        "NARROW_FMA_ROWS = {8: 6}",
        "NARROW_FMA_ROWS = {8: 8}",
        ("layouts:fused-registers", "autoplan:fused-narrow"),
        family="fused",
    ),
    Mutant(
        "fused-narrow-layout-under-the-default-macro",
        "a fused nest's narrow layout is printed under EXACTC_NARROW_LANES, which gcc does "
        "not define: gcc compiles the spilling 8-row lanes (cost only)",
        PRINTER_KERNELS,
        'FUSED_VARIANT_MACROS = {"narrow": "EXACTC_NARROW_FMA_LANES", "wide": "EXACTC_WIDE_LANES"}',
        'FUSED_VARIANT_MACROS = {"narrow": "EXACTC_NARROW_LANES", "wide": "EXACTC_WIDE_LANES"}',
        ("layouts:fused-registers", "autoplan:fused-narrow"),
        family="fused",
    ),
]
