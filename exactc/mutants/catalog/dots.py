"""The block sums of qlinear_i as one call of runtime/exactc_dot.h's kernel: its vector
paths (AVX2's maddubs and madd, VNNI's dpbusd) and the printer's choice of the blocks it
stands for (printer/dots.py). The header's tests run each path the CPU has against
numpy; a mistake in a path the CPU lacks does not apply there."""

from exactc.mutants.model import Mutant

DOT = "exactc/runtime/exactc_dot.h"
DOTS = "exactc/exporter/printer/dots.py"
PLANNED = "exactc/exporter/printer/planned.py"
REQUIRES = (DOT,)
AVX2 = ("__AVX2__",)

MUTANTS = [
    Mutant(
        "dot-avx2-without-sign-trick",
        "AVX2's q8 block sum hands vpmaddubsw the activations as its unsigned operand and the "
        "weights as its signed one, without the sign trick: a negative activation reads as "
        "256 plus it",
        DOT,
        "    const __m256i magnitudes = _mm256_sign_epi8(vw, vw); /* |w|, read unsigned: 0 … 128 */\n"
        "    const __m256i signed_x = _mm256_sign_epi8(vx, vw);   /* x · sign(w): -127 … 127 */\n",
        "    const __m256i magnitudes = vx;\n    const __m256i signed_x = vw;\n",
        ("dot", "layouts:block-kernels"),
        family="dot",
        requires=REQUIRES,
        cpu=AVX2,
    ),
    Mutant(
        "dot-q4-high-nibbles-first",
        "the intrinsic paths unpack a q4 block's high nibbles into its first 16 values and the "
        "low ones into the last 16 (ggml's Q4_0 order exchanged)",
        DOT,
        "_mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);",
        "_mm256_set_m128i(bytes, _mm_srli_epi16(bytes, 4));",
        ("dot", "layouts:block-kernels"),
        family="dot",
        requires=REQUIRES,
        cpu=AVX2,
    ),
    Mutant(
        "dot-madd-drops-odd-pairs",
        "AVX2's q8 block sum multiplies vpmaddubsw's int16 pairs by 32-bit ones in vpmaddwd, so "
        "every odd pair is multiplied by 0 and dropped",
        DOT,
        "_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)); /* pairs of pairs, int32 */",
        "_mm256_madd_epi16(pairs, _mm256_set1_epi32(1)); /* pairs of pairs, int32 */",
        ("dot", "layouts:block-kernels"),
        family="dot",
        requires=REQUIRES,
        cpu=AVX2,
    ),
    Mutant(
        "dot-vnni-without-offset-correction",
        "VNNI's q8 block sum hands vpdpbusd the activations as its unsigned operand as they are, "
        "neither biased by 128 nor corrected by 128 · Σ w",
        DOT,
        "    const __m256i biased = _mm256_xor_si256(vx, _mm256_set1_epi8((char)0x80)); /* x + 128, unsigned */\n"
        "    const __m256i zero = _mm256_setzero_si256();\n"
        "    const __m256i sums = EXACTC_DPBUSD(zero, biased, vw);                     /* Σ (x + 128) · w */\n"
        "    const __m256i w_sums = EXACTC_DPBUSD(zero, _mm256_set1_epi8(1), vw);     /* Σ w */\n"
        "    return _mm256_sub_epi32(sums, _mm256_slli_epi32(w_sums, 7));\n",
        "    const __m256i zero = _mm256_setzero_si256();\n    return EXACTC_DPBUSD(zero, vx, vw);\n",
        ("dot", "layouts:block-kernels"),
        family="dot",
        requires=REQUIRES,
        cpu=("__AVXVNNI__|__AVX512VNNI__",),
    ),
    Mutant(
        "dot-kernel-for-a-short-block",
        "the printer calls the q8 kernel of 32 values for a loop of at most 32, so a short last "
        "block (or a block of 16) sums values past its end",
        DOTS,
        "if head.axis.extent == BLOCK else None",
        "if head.axis.extent <= BLOCK else None",
        ("kernel-print", "layouts:block-kernels"),
        family="dot",
    ),
    Mutant(
        "dot-rows-drop-the-upper-half",
        "the x8 kernels' reduction of 8 rows keeps the lower 128 bits' partial sums of each "
        "row and drops the upper ones (the products of values 16 to 31 for q4)",
        DOT,
        "    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));",
        "    return _mm256_permute2x128_si256(ab, cd, 0x20);",
        ("dot", "layouts:block-kernels"),
        family="dot",
        requires=REQUIRES,
        cpu=AVX2,
    ),
    Mutant(
        "dot-panel-read-at-the-row-stride",
        "the printer hands the x8 kernel a block panel laid out at load with the weight's row "
        "length as the stride from row to row, not the block's run: rows 1 to 7 read other "
        "blocks and other chunks",
        PLANNED,
        '        return f"{pointer}[{affine_text(start, self.printer.rename)}]", values',
        '        return f"{pointer}[{affine_text(start, self.printer.rename)}]", '
        "math.prod(self.printer.buffers[found.w.buffer].shape[1:])",
        ("prepack", "quant:block-panels", "layouts:block-kernels"),
        family="dot",
    ),
    Mutant(
        "dot-panel-every-block-reads-the-first",
        "the x8 call's start in a block panel drops the block loop's term with the lane's: "
        "every block of the chunk sums the panel's first block",
        PLANNED,
        "if t[0] not in (lane, found.axes[0])",
        "if t[0] in ()",
        ("prepack", "quant:block-panels", "compilers:block-kernels", "layouts:block-kernels"),
        family="dot",
    ),
    Mutant(
        "dot-q4k-scale-of-the-next-sub-block",
        "the AVX2 x8 kernel of Q4_K and Q5_K multiplies the even sub-block j's products by "
        "scale j + 1 (the pick of the scale off by one)",
        DOT,
        "const __m256i lo = _mm256_madd_epi16(_mm256_maddubs_epi16(low, vx[j]), exactc_dot_k_scale(scales, j));",
        "const __m256i lo = _mm256_madd_epi16(_mm256_maddubs_epi16(low, vx[j]), exactc_dot_k_scale(scales, j + 1));",
        ("dot", "layouts:k-quants"),
        family="dot",
        requires=REQUIRES,
        cpu=AVX2,
    ),
    Mutant(
        "qtile-m-tail-reads-the-next-row",
        "the q4 tile kernel's loop over activation rows runs to EXACTC_QTILE_M whatever the tile's "
        "rows: an m tail of fewer rows reads the next row's block and scale and adds into the "
        "accumulator's rows past the tail",
        DOT,
        "    for (int64_t i = 0; i < rows; i++) {\n"
        "        const __m256i vx = _mm256_loadu_si256((const __m256i *)(x + i * x_stride));\n",
        "    for (int64_t i = 0; i < EXACTC_QTILE_M; i++) {\n"
        "        const __m256i vx = _mm256_loadu_si256((const __m256i *)(x + i * x_stride));\n",
        ("dot",),
        family="dot",
        requires=REQUIRES,
        cpu=AVX2,
    ),
    Mutant(
        "dot-q6k-high-bits-from-the-wrong-quarter",
        "the AVX2 x8 kernel of Q6_K takes a quarter's 2 high bits from the bit pair of the "
        "other quarter of its half (quarter 0's from bits 2-3 of qh, quarter 1's from 0-1)",
        DOT,
        "const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * quarter), two);",
        "const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * (quarter ^ 1)), two);",
        ("dot", "layouts:k-quants"),
        family="dot",
        requires=REQUIRES,
        cpu=AVX2,
    ),
    Mutant(
        "qtile-sign-from-the-wrong-row",
        "the q8 tile kernel makes each weight block's |w| once but signs every activation row's "
        "products with the first row's activations (x · sign(w) of row 0 for all four)",
        DOT,
        "exactc_qtile_q8_row(vx[i], u, w, w_stride)",
        "exactc_qtile_q8_row(vx[0], u, w, w_stride)",
        ("dot", "layouts:block-kernels"),
        family="dot",
        requires=REQUIRES,
        cpu=AVX2,
    ),
    Mutant(
        "dot-q4k-mins-against-the-wrong-sums",
        "the AVX2 x8 kernel of Q4_K and Q5_K packs the sub-blocks' activation sums upper half "
        "first, so min j multiplies the sum of sub-block j + 4 (mod 8)",
        DOT,
        "_mm_packs_epi32(_mm256_castsi256_si128(x_sums32), _mm256_extracti128_si256(x_sums32, 1));",
        "_mm_packs_epi32(_mm256_extracti128_si256(x_sums32, 1), _mm256_castsi256_si128(x_sums32));",
        ("dot", "layouts:k-quants"),
        family="dot",
        requires=REQUIRES,
        cpu=AVX2,
    ),
    Mutant(
        "dot-q5k-call-at-the-wrong-byte",
        "the printer takes Q5_K's first quant byte to be at 16 (Q4_K's) rather than 48, so the "
        "super-block kernel's call points 32 bytes past the super-block's start",
        DOTS,
        '"q5_k": (8, 32, 48)',
        '"q5_k": (8, 32, 16)',
        ("layouts:k-quants", "gguf:k-quants"),
        family="dot",
    ),
    Mutant(
        "qtile-combine-fused",
        "the tile kernels' combine is one fused multiply-add, acc + A(s) · scale rounded once, "
        "where the spec has the product rounded, then the sum",
        DOT,
        "    const __m256 term = _mm256_mul_ps(_mm256_cvtepi32_ps(s), scale); /* |s| <= 2^19: exact in f32 */\n"
        "    _mm256_storeu_ps(acc, _mm256_add_ps(_mm256_loadu_ps(acc), term));\n",
        "    _mm256_storeu_ps(acc, _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, _mm256_loadu_ps(acc)));\n",
        ("dot", "layouts:block-kernels"),
        family="dot",
        requires=REQUIRES,
        cpu=("__AVX2__", "__FMA__"),
    ),
]
