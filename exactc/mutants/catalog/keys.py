"""Mistakes in the random keys (ChaCha20, seeds, child keys, uniforms) and in sampling.

Each would make generated tokens differ between the C program and the reference, or
between exactc and every other ChaCha20; the keys' oracle checks (pycryptodome,
rand_chacha's and rand_core's published values), the C-against-twin checks, the
sampler's worked examples and its C-against-reference check must catch them.
"""

from exactc.mutants.model import Mutant

KEYS_C = "exactc/runtime/exactc_keys.c"
KEYS_TWIN = "exactc/runtime/keys_twin.py"
SAMPLE_C = "exactc/runtime/exactc_sample.c"
SAMPLE_REFERENCE = "exactc/exporter/reference/sampling.py"

MUTANTS = [
    Mutant(
        "keys-rotation-constant",
        "ChaCha20's quarter round rotates b by 11 instead of 12 in the C runtime",
        KEYS_C,
        "    x[b] = rotl32(x[b], 12);",
        "    x[b] = rotl32(x[b], 11);",
        ("keys:oracle", "keys:twin"),
        family="keys",
    ),
    Mutant(
        "keys-counter-words-swapped",
        "the block counter's high word goes into state word 12 and its low word into 13",
        KEYS_C,
        "    state[12] = (uint32_t)counter; /* the low word first */\n"
        "    state[13] = (uint32_t)(counter >> 32);",
        "    state[12] = (uint32_t)(counter >> 32);\n"
        "    state[13] = (uint32_t)counter;",
        ("keys:oracle", "keys:twin"),
        family="keys",
    ),
    Mutant(
        "keys-draw-stream-off-by-one",
        "a draw reads its low word from stream s + 1",
        KEYS_C,
        "    exactc_chacha20_block(key, counter, stream, block);",
        "    exactc_chacha20_block(key, counter, stream + 1, block);",
        ("keys:oracle", "keys:twin"),
        family="keys",
    ),
    Mutant(
        "keys-twin-child-index-off-by-one",
        "the numpy twin derives child key i from block i + 1 of the derivation stream",
        KEYS_TWIN,
        "    return chacha20_block(key, index, DERIVE_STREAM)[..., :8]",
        "    return chacha20_block(key, _u64(index) + np.uint64(1), DERIVE_STREAM)[..., :8]",
        ("keys:oracle", "keys:twin"),
        family="keys",
    ),
    Mutant(
        "keys-uniform-from-32-bits",
        "a uniform double is made from the draw's top 32 bits instead of 53",
        KEYS_C,
        "    return (double)(draw >> 11) * 0x1p-53;",
        "    return (double)(draw >> 32) * 0x1p-32;",
        ("keys:oracle", "keys:twin"),
        family="keys",
    ),
    Mutant(
        "sampling-greedy-ties-to-last-index",
        "greedy sampling takes the last index of the maximum (>= in the maximum's loop)",
        SAMPLE_C,
        "        if (e[i] > m) {",
        "        if (e[i] >= m) {",
        ("sampling:spec", "sampling:reference"),
        family="sampling",
    ),
    Mutant(
        "sampling-rank-ties-to-last-index",
        "the rank order puts the later index first among equal weights (top-k, top-p)",
        SAMPLE_C,
        "    return e[i] > e[j] || (e[i] == e[j] && i < j);",
        "    return e[i] > e[j] || (e[i] == e[j] && i > j);",
        ("sampling:spec", "sampling:reference"),
        family="sampling",
    ),
    Mutant(
        "sampling-top-p-less-or-equal",
        "top-p keeps the next token while the kept sum is <= P * S instead of < P * S",
        SAMPLE_C,
        "            while (kept < candidates && q < threshold) {",
        "            while (kept < candidates && q <= threshold) {",
        ("sampling:spec", "sampling:reference"),
        family="sampling",
    ),
    Mutant(
        "sampling-temperature-after-softmax",
        "the temperature divides the exponentials instead of the logits (exp(x - m) / T)",
        SAMPLE_C,
        "    for (int64_t i = 0; i < n; i++) e[i] = exactc_exp((e[i] - m) / t);",
        "    for (int64_t i = 0; i < n; i++) e[i] = exactc_exp(e[i] - m) / t;",
        ("sampling:spec", "sampling:reference"),
        family="sampling",
    ),
    Mutant(
        "sampling-top-p-before-top-k",
        "top-p measures its nucleus over every token and top-k cuts it after, in the C runtime "
        "and the reference alike (the C-against-reference check cannot see it)",
        SAMPLE_C,
        "        int64_t candidates = top_k_on ? k : n;\n",
        "        int64_t candidates = n;\n",
        ("sampling:oracle", "sampling:spec"),
        family="sampling",
        also=(
            (SAMPLE_C,
             "        for (int64_t j = kept; j < n; j++) e[order[j]] = 0.0;\n",
             "        if (top_k_on && kept > k) kept = k;\n"
             "        for (int64_t j = kept; j < n; j++) e[order[j]] = 0.0;\n"),
            (SAMPLE_REFERENCE,
             "    candidates = order[:k] if 1 <= k < x.size else order  # step 7: top-k\n"
             "    kept = np.zeros(x.size, dtype=bool)\n"
             "    kept[nucleus(candidates, e, options.top_p)] = True  # step 8: top-p\n",
             "    kept = np.zeros(x.size, dtype=bool)\n"
             "    nucleus_first = nucleus(order, e, options.top_p)\n"
             "    kept[nucleus_first[:k] if 1 <= k < x.size else nucleus_first] = True\n"),
        ),
    ),
]
