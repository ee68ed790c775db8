"""The numpy twin of exactc's ChaCha20 keys (runtime/exactc_keys.c).

The twin contract: every function here gives the same words as its namesake in C
(`chacha20_block` ~ exactc_chacha20_block, `key_from_seed` ~ exactc_key_from_seed, ...),
for every key, counter, stream and seed. docs/semantics.md section 13 is the definition
both follow; tests/test_keys.py compares the two over Hypothesis-drawn cases, and both
with pycryptodome's ChaCha20 and with rand_chacha's and rand_core's published values.

Everything is unsigned integer arithmetic on numpy arrays (uint32 words, uint64 counters,
streams and seeds), which wraps exactly as C's does; no float appears before `uniform`,
whose two steps are exact. The functions broadcast: a key is an array (..., 8) of uint32,
counters, streams, seeds and draws are arrays (...) of uint64, so one call computes many
cases.
"""

from __future__ import annotations

import numpy as np

# --------------------------------------------------------------------------------------
# Constants (exactc_keys.c holds its own copy of each)
# --------------------------------------------------------------------------------------
CHACHA_CONSTANTS = np.array([0x61707865, 0x3320646E, 0x79622D32, 0x6B206574], dtype=np.uint32)
CHACHA_DOUBLE_ROUNDS = 10
PCG_MUL = np.uint64(6364136223846793005)
PCG_INC = np.uint64(11634580027462260723)
# The stream child keys are drawn from (EXACTC_KEY_DERIVE_STREAM).
DERIVE_STREAM = 0xFFFFFFFFFFFFFFFF

_U32 = np.uint64(0xFFFFFFFF)


def _u64(values) -> np.ndarray:
    """Values (Python ints 0 <= v < 2^64, or arrays) as a uint64 array of at least 1-d."""
    if isinstance(values, np.ndarray):
        if values.dtype != np.uint64:
            raise TypeError(f"expected uint64 values, got {values.dtype}")
        return values
    return np.asarray(values, dtype=np.uint64)


def _key_words(key) -> np.ndarray:
    key = np.asarray(key)
    if key.dtype != np.uint32 or key.shape[-1:] != (8,):
        raise ValueError(f"a key is an array (..., 8) of uint32 words; got {key.dtype} {key.shape}")
    return key


# --------------------------------------------------------------------------------------
# The block function
# --------------------------------------------------------------------------------------
def _rotl32(x: np.ndarray, n: int) -> np.ndarray:
    return (x << np.uint32(n)) | (x >> np.uint32(32 - n))


def _quarter_round(x: list, a: int, b: int, c: int, d: int) -> None:
    x[a] = x[a] + x[b]
    x[d] = _rotl32(x[d] ^ x[a], 16)
    x[c] = x[c] + x[d]
    x[b] = _rotl32(x[b] ^ x[c], 12)
    x[a] = x[a] + x[b]
    x[d] = _rotl32(x[d] ^ x[a], 8)
    x[c] = x[c] + x[d]
    x[b] = _rotl32(x[b] ^ x[c], 7)


def chacha20_block(key, counter, stream) -> np.ndarray:
    """The 16 words (..., 16) of block `counter` of `stream` under `key` (..., 8)."""
    key = _key_words(key)
    counter, stream = _u64(counter), _u64(stream)
    shape = np.broadcast_shapes(key.shape[:-1], counter.shape, stream.shape)
    # Flat 1-d arrays inside: numpy wraps array arithmetic silently, scalar arithmetic
    # with a warning.
    flat = (int(np.prod(shape)),)
    key = np.broadcast_to(key, shape + (8,)).reshape(flat + (8,))
    counter = np.broadcast_to(counter, shape).reshape(flat)
    stream = np.broadcast_to(stream, shape).reshape(flat)
    state = [np.full(flat, CHACHA_CONSTANTS[i]) for i in range(4)]
    state += [key[..., i] for i in range(8)]
    state += [
        (counter & _U32).astype(np.uint32),  # the low word first
        (counter >> np.uint64(32)).astype(np.uint32),
        (stream & _U32).astype(np.uint32),
        (stream >> np.uint64(32)).astype(np.uint32),
    ]
    x = [w.copy() for w in state]
    for _ in range(CHACHA_DOUBLE_ROUNDS):
        _quarter_round(x, 0, 4, 8, 12)  # columns
        _quarter_round(x, 1, 5, 9, 13)
        _quarter_round(x, 2, 6, 10, 14)
        _quarter_round(x, 3, 7, 11, 15)
        _quarter_round(x, 0, 5, 10, 15)  # diagonals
        _quarter_round(x, 1, 6, 11, 12)
        _quarter_round(x, 2, 7, 8, 13)
        _quarter_round(x, 3, 4, 9, 14)
    return np.stack([x[i] + state[i] for i in range(16)], axis=-1).reshape(shape + (16,))


# --------------------------------------------------------------------------------------
# Keys: from a seed, and children
# --------------------------------------------------------------------------------------
def _pcg32_next(state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """rand_core's step: advance first, then the XSH-RR output of the new state."""
    state = state * PCG_MUL + PCG_INC
    xorshifted = (((state >> np.uint64(18)) ^ state) >> np.uint64(27)) & _U32
    rot = state >> np.uint64(59)
    out = ((xorshifted >> rot) | (xorshifted << ((np.uint64(32) - rot) & np.uint64(31)))) & _U32
    return state, out.astype(np.uint32)


def key_from_seed(seed) -> np.ndarray:
    """rand_core's seed_from_u64 for ChaCha20's 32-byte seed: eight PCG32 outputs, each
    4 little-endian bytes, which is one key word as it is. (...) seeds -> (..., 8)."""
    seed = _u64(seed)
    state = seed.reshape(-1).copy()  # 1-d: array arithmetic wraps without a warning
    words = []
    for _ in range(8):
        state, out = _pcg32_next(state)
        words.append(out)
    return np.stack(words, axis=-1).reshape(seed.shape + (8,))


def fold_in(key, index) -> np.ndarray:
    """The child key `index` of `key`: words 0-7 of block `index` of DERIVE_STREAM."""
    return chacha20_block(key, index, DERIVE_STREAM)[..., :8]


def split(key, n: int) -> np.ndarray:
    """JAX's split: (..., n, 8), child j = fold_in(key, j)."""
    key = _key_words(key)
    return fold_in(key[..., None, :], np.arange(n, dtype=np.uint64))


# --------------------------------------------------------------------------------------
# Draws and uniform doubles
# --------------------------------------------------------------------------------------
def draw(key, stream, counter, word) -> np.ndarray:
    """The 64-bit draw at word position 16 counter + word of `stream` (modulo 2^68):
    that word the low half, the next word the high half (word 0 of the next block,
    counter + 1 modulo 2^64, after word 15)."""
    key = _key_words(key)
    stream, counter, word = _u64(stream), _u64(counter), _u64(word)
    shape = np.broadcast_shapes(key.shape[:-1], stream.shape, counter.shape, word.shape)
    flat = (int(np.prod(shape)),)  # 1-d inside, as in chacha20_block
    key = np.broadcast_to(key, shape + (8,)).reshape(flat + (8,))
    stream, counter, word = (np.broadcast_to(v, shape).reshape(flat) for v in (stream, counter, word))
    counter = counter + word // np.uint64(16)
    word = (word % np.uint64(16)).astype(np.intp)
    block = chacha20_block(key, counter, stream)
    following = chacha20_block(key, counter + np.uint64(1), stream)
    both = np.concatenate([block, following[:, :1]], axis=1)  # (n, 17)
    rows = np.arange(flat[0])
    lo, hi = both[rows, word].astype(np.uint64), both[rows, word + 1].astype(np.uint64)
    return ((hi << np.uint64(32)) | lo).reshape(shape)


def uniform(draws) -> np.ndarray:
    """Doubles in [0, 1): the top 53 bits of each draw over 2^53 (both steps exact)."""
    return (_u64(draws) >> np.uint64(11)).astype(np.float64) * 2.0**-53
