/* exactc_keys.c: ChaCha20 keys, the draws they give, and child keys.
 *
 * Why ChaCha20 as rand_chacha lays it out: a key names a reproducible stream of random
 * words that the C program and the numpy reference (runtime/keys_twin.py) both compute,
 * word for word, and that Rust's rand_chacha and pycryptodome compute too (the tests use
 * pycryptodome's ChaCha20 with an 8-byte nonce as an independent oracle). The state is
 *
 *     words  0- 3  "expand 32-byte k"
 *     words  4-11  the key, its 32 bytes as little-endian words
 *     words 12-13  a 64-bit block counter, low word first
 *     words 14-15  a 64-bit stream number, low word first
 *
 * and a block is the state after ten double rounds (a column round then a diagonal
 * round) added word-wise to the state it started from. docs/semantics.md section 13 is
 * the definition; every function below has a twin of the same name in keys_twin.py.
 *
 * Only 32- and 64-bit unsigned integer arithmetic: wrapping, shifting and rotating are
 * exact, so no compiler flag can move a bit.
 */
#include "exactc_keys.h"

/* ------------------------------------------------------------------------------------
 * Constants
 * ---------------------------------------------------------------------------------- */
/* "expand 32-byte k" as four little-endian words. */
static const uint32_t CHACHA_CONSTANTS[4] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u};
static const int CHACHA_DOUBLE_ROUNDS = 10;

/* PCG32's multiplier and increment, as rand_core's seed_from_u64 uses them. */
static const uint64_t PCG_MUL = UINT64_C(6364136223846793005);
static const uint64_t PCG_INC = UINT64_C(11634580027462260723);

/* ------------------------------------------------------------------------------------
 * The block function
 * ---------------------------------------------------------------------------------- */
static inline uint32_t rotl32(uint32_t x, int n) {
    return (x << n) | (x >> (32 - n));
}

static inline void quarter_round(uint32_t *x, int a, int b, int c, int d) {
    x[a] += x[b];
    x[d] ^= x[a];
    x[d] = rotl32(x[d], 16);
    x[c] += x[d];
    x[b] ^= x[c];
    x[b] = rotl32(x[b], 12);
    x[a] += x[b];
    x[d] ^= x[a];
    x[d] = rotl32(x[d], 8);
    x[c] += x[d];
    x[b] ^= x[c];
    x[b] = rotl32(x[b], 7);
}

void exactc_chacha20_block(const exactc_key *key, uint64_t counter, uint64_t stream,
                           uint32_t out[16]) {
    uint32_t state[16];
    for (int i = 0; i < 4; i++) state[i] = CHACHA_CONSTANTS[i];
    for (int i = 0; i < 8; i++) state[4 + i] = key->w[i];
    state[12] = (uint32_t)counter; /* the low word first */
    state[13] = (uint32_t)(counter >> 32);
    state[14] = (uint32_t)stream;
    state[15] = (uint32_t)(stream >> 32);

    uint32_t x[16];
    for (int i = 0; i < 16; i++) x[i] = state[i];
    for (int r = 0; r < CHACHA_DOUBLE_ROUNDS; r++) {
        quarter_round(x, 0, 4, 8, 12); /* columns */
        quarter_round(x, 1, 5, 9, 13);
        quarter_round(x, 2, 6, 10, 14);
        quarter_round(x, 3, 7, 11, 15);
        quarter_round(x, 0, 5, 10, 15); /* diagonals */
        quarter_round(x, 1, 6, 11, 12);
        quarter_round(x, 2, 7, 8, 13);
        quarter_round(x, 3, 4, 9, 14);
    }
    for (int i = 0; i < 16; i++) out[i] = x[i] + state[i];
}

/* ------------------------------------------------------------------------------------
 * Keys: from a seed, and children
 * ---------------------------------------------------------------------------------- */
/* One PCG32 step as rand_core writes it: advance the state first (away from a seed of
 * low Hamming weight), then the XSH-RR output of the new state. */
static inline uint32_t pcg32_next(uint64_t *state) {
    *state = *state * PCG_MUL + PCG_INC;
    uint64_t s = *state;
    uint32_t xorshifted = (uint32_t)(((s >> 18) ^ s) >> 27);
    unsigned rot = (unsigned)(s >> 59);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

void exactc_key_from_seed(uint64_t seed, exactc_key *key) {
    /* Each output becomes 4 little-endian key bytes, that is one key word as it is. */
    uint64_t state = seed;
    for (int i = 0; i < 8; i++) key->w[i] = pcg32_next(&state);
}

void exactc_key_fold_in(const exactc_key *key, uint64_t index, exactc_key *child) {
    uint32_t block[16];
    exactc_chacha20_block(key, index, EXACTC_KEY_DERIVE_STREAM, block);
    for (int i = 0; i < 8; i++) child->w[i] = block[i];
}

void exactc_key_split(const exactc_key *key, size_t n, exactc_key *children) {
    for (size_t j = 0; j < n; j++) exactc_key_fold_in(key, (uint64_t)j, &children[j]);
}

/* ------------------------------------------------------------------------------------
 * Draws and uniform doubles
 * ---------------------------------------------------------------------------------- */
uint64_t exactc_key_draw(const exactc_key *key, uint64_t stream, uint64_t counter,
                         uint64_t word) {
    counter += word / 16; /* word position 16 counter + word, modulo 2^68 */
    word %= 16;
    uint32_t block[16];
    exactc_chacha20_block(key, counter, stream, block);
    uint32_t lo = block[word];
    uint32_t hi;
    if (word < 15) {
        hi = block[word + 1];
    } else { /* the draw straddles two blocks: the high half is the next block's word 0 */
        uint32_t next[16];
        exactc_chacha20_block(key, counter + 1, stream, next);
        hi = next[0];
    }
    return ((uint64_t)hi << 32) | lo;
}

double exactc_uniform(uint64_t draw) {
    return (double)(draw >> 11) * 0x1p-53; /* both steps exact: draw >> 11 < 2^53 */
}
