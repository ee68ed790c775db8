/* exactc runtime: ChaCha20 keys (exactc_keys.c), twinned by runtime/keys_twin.py.
 *
 * docs/semantics.md section 13 is the definition: the keystream is rand_chacha's
 * ChaCha20 (a 64-bit block counter, a 64-bit stream number, ten double rounds), a key
 * from a 64-bit seed is rand_core's seed_from_u64, a child key is one block of the
 * parent's key-derivation stream, and a uniform double is the top 53 bits of a draw.
 * C11, standard headers only; integer arithmetic only, so every compiler gives the same
 * bits.
 */
#ifndef EXACTC_KEYS_H
#define EXACTC_KEYS_H

#include <stddef.h>
#include <stdint.h>

/* A ChaCha20 key: its 32 bytes read as 8 little-endian 32-bit words (state words 4-11). */
typedef struct {
    uint32_t w[8];
} exactc_key;

/* The stream that child keys are drawn from; draws for sampling use other streams. */
#define EXACTC_KEY_DERIVE_STREAM UINT64_C(0xFFFFFFFFFFFFFFFF)

/* One 64-byte block: 16 words, state words 12-13 the counter (low word first), 14-15
 * the stream (low word first). */
void exactc_chacha20_block(const exactc_key *key, uint64_t counter, uint64_t stream,
                           uint32_t out[16]);
/* rand_core's seed_from_u64: eight PCG32 outputs are the key's eight words. */
void exactc_key_from_seed(uint64_t seed, exactc_key *key);
/* The child key `index` of `key` (JAX's fold_in): words 0-7 of block `index` of the
 * stream EXACTC_KEY_DERIVE_STREAM. */
void exactc_key_fold_in(const exactc_key *key, uint64_t index, exactc_key *child);
/* JAX's split: children[j] = fold_in(key, j) for j < n. */
void exactc_key_split(const exactc_key *key, size_t n, exactc_key *children);
/* The 64-bit draw at word position 16 * counter + word of `stream`: that word is the
 * low half, the next word the high half (the next block's word 0 after word 15; the
 * counter wraps modulo 2^64). A word of 16 or more moves on by whole blocks. */
uint64_t exactc_key_draw(const exactc_key *key, uint64_t stream, uint64_t counter,
                         uint64_t word);
/* A double in [0, 1): the top 53 bits of the draw over 2^53 (exact). */
double exactc_uniform(uint64_t draw);

#endif /* EXACTC_KEYS_H */
