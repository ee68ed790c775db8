"""Strategies for ChaCha20 keys, seeds, block counters, streams and draw positions.

Each 64-bit quantity favours the places where a layout mistake shows: 0 and 2^64 - 1,
the low word's overflow into the high word (counters near 2^32), the counter's wrap
(near 2^64), and draws that straddle two blocks (word 15).
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1


def _near(*points: int) -> list[int]:
    """Each point and its neighbours within 2, clipped to [0, 2^64)."""
    return sorted({p + d for p in points for d in range(-2, 3) if 0 <= p + d <= U64_MAX})


def seeds() -> st.SearchStrategy[int]:
    """A 64-bit seed: 0, 2^64 - 1 and the word boundaries half the time; shrinks to 0."""
    return st.one_of(st.sampled_from(_near(0, 2**32, 2**63, U64_MAX)), st.integers(0, U64_MAX))


def counters() -> st.SearchStrategy[int]:
    """A 64-bit block counter, favouring 0, the low word's overflow (near 2^32) and the
    wrap (near 2^64)."""
    return st.one_of(st.sampled_from(_near(0, 2**32, U64_MAX)), st.integers(0, U64_MAX))


def streams() -> st.SearchStrategy[int]:
    """A 64-bit stream number: 0, 1, the word boundary, the key-derivation stream 2^64 - 1
    and its neighbour, or any."""
    return st.one_of(st.sampled_from([0, 1, U32_MAX, 2**32, U64_MAX - 1, U64_MAX]), st.integers(0, U64_MAX))


def words() -> st.SearchStrategy[int]:
    """A word within a block: any of 0-15, with 15 (a draw straddling two blocks) and 14
    favoured, and sometimes 16 or more (moving on by whole blocks)."""
    return st.one_of(st.sampled_from([15, 14, 0]), st.integers(0, 15), st.integers(16, 80))


def keys() -> st.SearchStrategy[tuple[int, ...]]:
    """A key as 8 words: all zero, all ones, or any; shrinks towards zero words."""
    word = st.one_of(st.sampled_from([0, U32_MAX]), st.integers(0, U32_MAX))
    return st.one_of(st.just((0,) * 8), st.just((U32_MAX,) * 8), st.tuples(*[word] * 8))


@dataclasses.dataclass(frozen=True)
class DrawPosition:
    """One 64-bit draw: a key, a stream and a word position (block counter, word)."""

    key: tuple[int, ...]
    stream: int
    counter: int
    word: int


def draw_positions() -> st.SearchStrategy[DrawPosition]:
    """A key, a stream and a word position, each from the strategies above."""
    return st.builds(DrawPosition, keys(), streams(), counters(), words())
