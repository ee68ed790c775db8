"""The arena (exporter/frames.py): where each buffer starts."""

from __future__ import annotations

# ---- the arena: a buffer beside one of odd bytes


def test_a_buffer_beside_one_of_odd_bytes_starts_at_the_next_64_byte_boundary_past_it():
    from exactc.exporter import frames

    # an int8 buffer (a q8 row's codes) may end anywhere; the next one alive beside it
    # starts on the first 64-byte boundary at or past that end, never inside it
    for nbytes, after in ((1, 64), (63, 64), (64, 64), (65, 128), (127, 128), (129, 192)):
        first = frames.Buffer("a", "int8_t", nbytes, nbytes, 0, 1, (nbytes,))
        second = frames.Buffer("b", "float", 2, 8, 1, 1, (2,))
        frames.place([first, second])
        assert (first.offset, second.offset) == (0, after), nbytes
    assert frames.align(0) == 0
