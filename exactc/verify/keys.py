"""The runtime's ChaCha20 keys (runtime/exactc_keys.c) over whole arrays, for the tests.

`load_keys()` compiles exactc_keys.c with array-at-a-time wrappers (a cffi call per
element would dominate every check) and gives `KeysC`, whose methods take and return
numpy arrays shaped as keys_twin's functions take and return them, so a test compares
the two with one `==`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from exactc.verify.build import BuildOptions, load_library, runtime_source

KEYS_ARRAYS_C = r"""
#include <string.h>
#include "exactc_keys.h"

static exactc_key key_at(const uint32_t *keys, size_t i) {
    exactc_key k;
    memcpy(k.w, keys + 8 * i, sizeof k.w);
    return k;
}

void keys_block_array(const uint32_t *keys, const uint64_t *counters, const uint64_t *streams,
                      uint32_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        exactc_key k = key_at(keys, i);
        exactc_chacha20_block(&k, counters[i], streams[i], out + 16 * i);
    }
}

void keys_from_seed_array(const uint64_t *seeds, uint32_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        exactc_key k;
        exactc_key_from_seed(seeds[i], &k);
        memcpy(out + 8 * i, k.w, sizeof k.w);
    }
}

void keys_fold_in_array(const uint32_t *keys, const uint64_t *indices, uint32_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        exactc_key k = key_at(keys, i), child;
        exactc_key_fold_in(&k, indices[i], &child);
        memcpy(out + 8 * i, child.w, sizeof child.w);
    }
}

void keys_split(const uint32_t *key, size_t n, uint32_t *out) {
    exactc_key k = key_at(key, 0);
    exactc_key_split(&k, n, (exactc_key *)out);
}

void keys_draw_array(const uint32_t *keys, const uint64_t *streams, const uint64_t *counters,
                     const uint64_t *words, uint64_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        exactc_key k = key_at(keys, i);
        out[i] = exactc_key_draw(&k, streams[i], counters[i], words[i]);
    }
}

void keys_uniform_array(const uint64_t *draws, double *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = exactc_uniform(draws[i]);
}
"""

KEYS_ARRAYS_CDEF = """
void keys_block_array(const uint32_t *keys, const uint64_t *counters, const uint64_t *streams,
                      uint32_t *out, size_t n);
void keys_from_seed_array(const uint64_t *seeds, uint32_t *out, size_t n);
void keys_fold_in_array(const uint32_t *keys, const uint64_t *indices, uint32_t *out, size_t n);
void keys_split(const uint32_t *key, size_t n, uint32_t *out);
void keys_draw_array(const uint32_t *keys, const uint64_t *streams, const uint64_t *counters,
                     const uint64_t *words, uint64_t *out, size_t n);
void keys_uniform_array(const uint64_t *draws, double *out, size_t n);
"""


def _keys(keys) -> np.ndarray:
    keys = np.ascontiguousarray(keys, dtype=np.uint32)
    if keys.shape[-1:] != (8,):
        raise ValueError(f"keys must be an array (..., 8) of uint32; got shape {keys.shape}")
    return keys.reshape(-1, 8)


def _u64(values, n: int) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=np.uint64), (n,)))


@dataclasses.dataclass
class KeysC:
    """exactc_keys.c compiled with the array wrappers; one method per twin function.
    Arguments are 1-d: n keys (n, 8) and n counters, streams, ... (or one, broadcast)."""

    library: object

    def _ptr(self, ctype: str, array: np.ndarray):
        return self.library.ffi.cast(f"{ctype} *", array.ctypes.data)

    def chacha20_block(self, keys, counters, streams) -> np.ndarray:
        keys = _keys(keys)
        n = keys.shape[0]
        counters, streams = _u64(counters, n), _u64(streams, n)
        out = np.empty((n, 16), dtype=np.uint32)
        self.library.lib.keys_block_array(self._ptr("uint32_t", keys), self._ptr("uint64_t", counters),
                                          self._ptr("uint64_t", streams), self._ptr("uint32_t", out), n)
        return out

    def key_from_seed(self, seeds) -> np.ndarray:
        seeds = np.ascontiguousarray(seeds, dtype=np.uint64).reshape(-1)
        out = np.empty((seeds.size, 8), dtype=np.uint32)
        self.library.lib.keys_from_seed_array(self._ptr("uint64_t", seeds), self._ptr("uint32_t", out),
                                              seeds.size)
        return out

    def fold_in(self, keys, indices) -> np.ndarray:
        keys = _keys(keys)
        n = keys.shape[0]
        indices = _u64(indices, n)
        out = np.empty((n, 8), dtype=np.uint32)
        self.library.lib.keys_fold_in_array(self._ptr("uint32_t", keys), self._ptr("uint64_t", indices),
                                            self._ptr("uint32_t", out), n)
        return out

    def split(self, key, n: int) -> np.ndarray:
        key = _keys(key)[:1]
        out = np.empty((n, 8), dtype=np.uint32)
        self.library.lib.keys_split(self._ptr("uint32_t", key), n, self._ptr("uint32_t", out))
        return out

    def draw(self, keys, streams, counters, words) -> np.ndarray:
        keys = _keys(keys)
        n = keys.shape[0]
        streams, counters, words = _u64(streams, n), _u64(counters, n), _u64(words, n)
        out = np.empty(n, dtype=np.uint64)
        self.library.lib.keys_draw_array(self._ptr("uint32_t", keys), self._ptr("uint64_t", streams),
                                         self._ptr("uint64_t", counters), self._ptr("uint64_t", words),
                                         self._ptr("uint64_t", out), n)
        return out

    def uniform(self, draws) -> np.ndarray:
        draws = np.ascontiguousarray(draws, dtype=np.uint64).reshape(-1)
        out = np.empty(draws.size, dtype=np.float64)
        self.library.lib.keys_uniform_array(self._ptr("uint64_t", draws), self._ptr("double", out), draws.size)
        return out


def load_keys(options: BuildOptions = BuildOptions()) -> KeysC:
    sources = {"exactc_keys.c": runtime_source("exactc_keys.c"), "keys_arrays.c": KEYS_ARRAYS_C}
    return KeysC(load_library(sources, KEYS_ARRAYS_CDEF, options))


def key_hex(key) -> str:
    """A key as its 8 words in hex, the way a failure report shows it."""
    return " ".join(f"{int(w):08x}" for w in np.asarray(key).reshape(-1))
