"""ChaCha20 keys (docs/semantics.md section 13): the C runtime and its numpy twin give the
same words, and both give the words of independent implementations.

Oracles, independent of exactc: pycryptodome's ChaCha20 with an 8-byte nonce (the same
state layout: nonce = stream, seek(64 n) for block n), rand_chacha's own test vectors
(the IETF draft's, its multi-block, nonce and construction tests) and rand_core's
value-breakage test of seed_from_u64. The twin: Hypothesis-drawn keys, streams, counters
near 2^32 and 2^64, draws straddling two blocks, seeds 0 and 2^64 - 1.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exactc.runtime import keys_twin
from exactc.strategies.keys import U64_MAX, DrawPosition, draw_positions, seeds
from exactc.verify.build import EXTREME_BUILDS, build_label
from exactc.verify.kernels import record_checks
from exactc.verify.keys import key_hex, load_keys

from installed import need  # tests/installed.py

# Positions, seeds or cases per example: many more in the campaign (make verify).
CAMPAIGN = os.environ.get("HYPOTHESIS_PROFILE") == "campaign"
BATCH = 128 if CAMPAIGN else 32
MIN_BATCH = BATCH // 2 if CAMPAIGN else 1


@pytest.fixture(scope="module")
def keys_c():
    return load_keys()


@pytest.fixture(scope="module", params=["c", "numpy"])
def impl(request, keys_c):
    """Either implementation: the oracle checks hold the C runtime and the numpy twin
    alike. (The ids avoid the word "twin", which selects the C-against-twin checks.)"""
    return keys_c if request.param == "c" else keys_twin


def words(values) -> np.ndarray:
    return np.array(values, dtype=np.uint32)


def u64(values) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def key_bytes(key) -> bytes:
    return np.asarray(key, dtype="<u4").tobytes()


def oracle_words(key, stream: int, counter: int, blocks: int) -> np.ndarray:
    """pycryptodome's keystream: `blocks` blocks from block `counter` of `stream`."""
    need("pycryptodome")  # a skip by hand, a failure under make test
    from Crypto.Cipher import ChaCha20

    cipher = ChaCha20.new(key=key_bytes(key), nonce=stream.to_bytes(8, "little"))
    cipher.seek(64 * counter)
    return np.frombuffer(cipher.encrypt(bytes(64 * blocks)), dtype="<u4").astype(np.uint32)


def checked(what: str, same: np.ndarray) -> np.ndarray:
    """Count the comparisons in make verify's `keys:` line; give them back to assert."""
    same = np.asarray(same, dtype=bool).reshape(-1)
    record_checks("keys", what, ["equal" if s else "mismatch" for s in same])
    return same


# ------------------------------------------------------------------------------------
# Known values, published with rand_chacha and rand_core
# ------------------------------------------------------------------------------------
ZERO_KEY = words([0] * 8)
# The IETF draft's test vectors 1 and 2: key 0, blocks 0 and 1 (rand_chacha's
# test_chacha_true_values_a).
ZERO_KEY_BLOCKS_0_1 = [
    0xADE0B876, 0x903DF1A0, 0xE56A5D40, 0x28BD8653, 0xB819D2BD, 0x1AED8DA0, 0xCCEF36A8, 0xC70D778B,
    0x7C5941DA, 0x8D485751, 0x3FE02477, 0x374AD8B8, 0xF4B8436A, 0x1CA11815, 0x69B687C3, 0x8665EEB2,
    0xBEE7079F, 0x7A385155, 0x7C97BA98, 0x0D082D73, 0xA0290FCB, 0x6965E348, 0x3E53C612, 0xED7AEE32,
    0x7621B729, 0x434EE69C, 0xB03371D5, 0xD539D874, 0x281FED31, 0x45FB0A51, 0x1F0AE1AC, 0x6F4D794B,
]


def test_known_vector_key_0_nonce_0(impl):
    block = impl.chacha20_block(ZERO_KEY, u64(0), u64(0))
    assert key_bytes(block)[:8].hex(" ") == "76 b8 e0 ad a0 f1 3d 90"
    both = impl.chacha20_block(np.stack([ZERO_KEY] * 2), u64([0, 1]), u64([0, 0]))
    assert checked("known vector", both.reshape(-1) == words(ZERO_KEY_BLOCKS_0_1)).all()


@pytest.mark.parametrize(
    "key_bytes_, counter, stream, expected",
    [
        # test vector 3: the key's last byte 1, block 1 (test_chacha_true_values_b)
        (bytes(31) + b"\x01", 1, 0, [
            0x2452EB3A, 0x9249F8EC, 0x8D829D9B, 0xDDD4CEB1, 0xE8252083, 0x60818B01, 0xF38422B8, 0x5AAA49C9,
            0xBB00CA8E, 0xDA3BA7B4, 0xC4B592D1, 0xFDF2732F, 0x4436274E, 0x2561B3C8, 0xEBDD4AA6, 0xA0136C00]),
        # test vector 4: key byte 1 is 0xff, block 2 (test_chacha_true_values_c)
        (b"\x00\xff" + bytes(30), 2, 0, [
            0xFB4DD572, 0x4BC42EF1, 0xDF922636, 0x327F1394, 0xA78DEA8F, 0x5E269039, 0xA1BEBBC1, 0xCAF09AAE,
            0xA25AB213, 0x48A6B46C, 0x1B9D9BCB, 0x092C5BE6, 0x546CA624, 0x1BEC45D5, 0x87F47473, 0x96F0992E]),
        # test vector 5: the nonce in the stream's high byte (test_chacha_nonce)
        (bytes(32), 0, 2 << 56, [
            0x374DC6C2, 0x3736D58C, 0xB904E24A, 0xCD3F93EF, 0x88228B1A, 0x96A4DFB3, 0x5B76AB72, 0xC727EE54,
            0x0E0E978A, 0xF3145C95, 0x1B748EA8, 0xF786C297, 0x99C28F5F, 0x628314E8, 0x398A19FA, 0x6DED1B53]),
    ],
    ids=["vector-3", "vector-4", "nonce"],
)
def test_known_blocks_from_rand_chacha(impl, key_bytes_, counter, stream, expected):
    key = np.frombuffer(key_bytes_, dtype="<u4").astype(np.uint32)
    block = impl.chacha20_block(key, u64(counter), u64(stream))
    assert checked("known vector", block.reshape(-1) == words(expected)).all()


def test_known_multiple_blocks(impl):
    """rand_chacha's test_chacha_multiple_blocks: word i of block i, for i < 16."""
    key = words(range(8))
    blocks = impl.chacha20_block(np.stack([key] * 16), u64(range(16)), u64([0] * 16)).reshape(16, 16)
    expected = [0xF225C81A, 0x6AB1BE57, 0x04D42951, 0x70858036, 0x49884684, 0x64EFEC72, 0x4BE2D186, 0x3615B384,
                0x11CFA18E, 0xD3C50049, 0x75C775F6, 0x434C6530, 0x2C5BAD8F, 0x898881DC, 0x5F1C86D9, 0xC1F8E7F4]
    assert checked("known vector", blocks[np.arange(16), np.arange(16)] == words(expected)).all()


def test_known_construction(impl):
    """rand_chacha's test_chacha_construction: the first word of a key, then the first
    word of the key made of the next 8 words (Rust's from_rng, which fills the seed's 32
    bytes from the stream)."""
    key = words([0, 0, 1, 0, 2, 0, 3, 0])
    block = impl.chacha20_block(key, u64(0), u64(0)).reshape(16)
    assert int(block[0]) == 137206642
    child = block[1:9]
    assert int(impl.chacha20_block(child, u64(0), u64(0)).reshape(16)[0]) == 1325750369


def test_known_seed_from_u64(impl):
    """rand_core's value-breakage test: seed_from_u64(0) for an 8-byte seed reads the
    first two outputs as a little-endian u64; a 32-byte seed begins with the same two."""
    key = impl.key_from_seed(u64([0])).reshape(8)
    assert int(key[0]) | int(key[1]) << 32 == 5029875928683246316


def test_known_uniforms(impl):
    """The top 53 bits over 2^53: the low 11 bits never count; 1 - 2^-53 is the largest."""
    draws = u64([0, 2**11 - 1, 2**11, 2**63, 2**64 - 1, 2**64 - 2**11])
    expected = [0.0, 0.0, 2.0**-53, 0.5, 1.0 - 2.0**-53, 1.0 - 2.0**-53]
    assert impl.uniform(draws).tolist() == expected


# ------------------------------------------------------------------------------------
# pycryptodome, the keystream oracle
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("counter", [0, 2**32 - 2, 2**32 - 1, 2**63, 2**64 - 2])
def test_oracle_counter_crosses_words(impl, counter):
    """Two blocks from `counter`: at 2^32 - 1 the low word overflows into the high word."""
    key = keys_twin.key_from_seed(u64(counter))
    mine = impl.chacha20_block(np.stack([key] * 2), u64([counter, counter + 1]), u64([7, 7]))
    assert checked("oracle block", mine.reshape(-1) == oracle_words(key, 7, counter, 2)).all()


def test_oracle_draw_straddles_blocks(impl):
    """A draw at word 15 takes its high half from the next block's word 0, across the
    counter's low-word overflow too; after counter 2^64 - 1 comes counter 0."""
    key = keys_twin.key_from_seed(u64(2024))
    stream = 2**64 - 2
    for counter in (0, 2**32 - 1):
        stream_words = oracle_words(key, stream, counter, 2)
        for word in (13, 14, 15, 16, 17):
            got = int(impl.draw(key, u64(stream), u64(counter), u64(word)).reshape(-1)[0])
            want = int(stream_words[word]) | int(stream_words[word + 1]) << 32
            assert checked("oracle draw", [got == want]).all(), (counter, word, hex(got), hex(want))
    last = int(oracle_words(key, stream, U64_MAX, 1)[15])
    first = int(oracle_words(key, stream, 0, 1)[0])
    got = int(impl.draw(key, u64(stream), u64(U64_MAX), u64(15)).reshape(-1)[0])
    assert checked("oracle draw", [got == last | first << 32]).all()


@given(position=draw_positions())
@example(position=DrawPosition((0,) * 8, 0, 2**32 - 1, 15))
@example(position=DrawPosition((2**32 - 1,) * 8, U64_MAX, U64_MAX - 1, 15))
def test_oracle_drawn_positions(keys_c, position):
    """Blocks and draws at drawn positions, C and twin, against pycryptodome."""
    key, stream = words(position.key), position.stream
    counter = min(position.counter, U64_MAX - 1)  # pycryptodome will not wrap
    want = oracle_words(key, stream, counter, 2)
    for impl in (keys_c, keys_twin):
        got = impl.chacha20_block(np.stack([key] * 2), u64([counter, counter + 1]), u64([stream] * 2))
        assert checked("oracle block", got.reshape(-1) == want).all(), key_hex(key)
        word = position.word % 16
        draw = int(impl.draw(key, u64(stream), u64(counter), u64(word)).reshape(-1)[0])
        assert checked("oracle draw", [draw == int(want[word]) | int(want[word + 1]) << 32]).all()


def test_oracle_child_keys(impl):
    """fold_in(key, i) is bytes 64 i .. 64 i + 31 of the stream 2^64 - 1, and split's
    children are fold_in's."""
    key = keys_twin.key_from_seed(u64(99))
    indices = [0, 1, 2, 2**32 - 1, 2**32, 2**64 - 2]
    children = impl.fold_in(np.stack([key] * len(indices)), u64(indices)).reshape(-1, 8)
    for index, child in zip(indices, children):
        want = oracle_words(key, keys_twin.DERIVE_STREAM, index, 1)[:8]
        assert checked("oracle child", child == want).all(), (index, key_hex(child), key_hex(want))
    split = impl.split(key, 3).reshape(3, 8)
    assert checked("oracle child", split == children[:3]).all()


# ------------------------------------------------------------------------------------
# The C runtime against its twin
# ------------------------------------------------------------------------------------
def _batch(positions):
    keys = np.array([p.key for p in positions], dtype=np.uint32)
    return keys, *(u64([getattr(p, f) for p in positions]) for f in ("stream", "counter", "word"))


@given(positions=st.lists(draw_positions(), min_size=MIN_BATCH, max_size=BATCH))
def test_c_equals_twin_blocks_and_draws(keys_c, positions):
    keys, streams, counters, word_positions = _batch(positions)
    c_blocks = keys_c.chacha20_block(keys, counters, streams)
    same = checked("block", (c_blocks == keys_twin.chacha20_block(keys, counters, streams)).all(axis=1))
    assert same.all(), f"first differing block: {positions[int(np.argmin(same))]}"
    c_draws = keys_c.draw(keys, streams, counters, word_positions)
    same = checked("draw", c_draws == keys_twin.draw(keys, streams, counters, word_positions))
    assert same.all(), f"first differing draw: {positions[int(np.argmin(same))]}"
    same = checked("uniform", keys_c.uniform(c_draws).view(np.uint64) == keys_twin.uniform(c_draws).view(np.uint64))
    assert same.all(), f"first differing uniform: draw {int(c_draws[int(np.argmin(same))]):#018x}"


@given(seed_list=st.lists(seeds(), min_size=MIN_BATCH, max_size=BATCH))
@example(seed_list=[0, U64_MAX])
def test_c_equals_twin_keys_from_seeds(keys_c, seed_list):
    got, want = keys_c.key_from_seed(u64(seed_list)), keys_twin.key_from_seed(u64(seed_list))
    same = checked("key from seed", (got == want).all(axis=1))
    assert same.all(), f"seed {seed_list[int(np.argmin(same))]}: C {key_hex(got[np.argmin(same)])}"


@given(positions=st.lists(draw_positions(), min_size=MIN_BATCH, max_size=BATCH), n=st.integers(1, 5))
def test_c_equals_twin_child_keys(keys_c, positions, n):
    """fold_in at drawn indices (the positions' counters) and split into n children."""
    keys, _, indices, _ = _batch(positions)
    same = checked("fold_in", (keys_c.fold_in(keys, indices) == keys_twin.fold_in(keys, indices)).all(axis=1))
    assert same.all(), f"first differing child: {positions[int(np.argmin(same))]}"
    same = checked("split", (keys_c.split(keys[0], n) == keys_twin.split(keys[0], n)).all(axis=1))
    assert same.all(), f"split({key_hex(keys[0])}, {n})"


@pytest.mark.parametrize("options", EXTREME_BUILDS, ids=build_label)
def test_c_equals_twin_every_build(options):
    need(options.cc)
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**32, (64, 8), dtype=np.uint64).astype(np.uint32)
    counters = rng.integers(0, 2**64, 64, dtype=np.uint64, endpoint=False)
    streams = rng.integers(0, 2**64, 64, dtype=np.uint64, endpoint=False)
    word_positions = rng.integers(0, 40, 64, dtype=np.uint64)
    built = load_keys(options)
    assert (built.draw(keys, streams, counters, word_positions)
            == keys_twin.draw(keys, streams, counters, word_positions)).all(), options.describe()


# ---- the ChaCha20 twin's array contract


def test_keys_twin_broadcasts_each_operand_and_matches_one_at_a_time():
    """chacha20_block and draw broadcast key (..., 8), counter, stream and word to one
    shape, each operand alone the one that carries the leading axes, and give per
    element what a call of scalars gives."""
    from exactc.runtime import keys_twin as k
    keys = k.key_from_seed(np.array([[1, 2, 3], [4, 5, 6]], np.uint64))  # (2, 3, 8)
    one = keys[0, 0]
    u64 = lambda *v: np.array(v, np.uint64)  # noqa: E731
    for key, counter, stream in [(keys, u64(7), u64(9)), (one, u64(1, 2, 3, 4), u64(9)),
                                 (one, u64(7), u64(1, 2, 3, 4, 5)), (keys[:, :1], u64(1, 2), u64(3, 4, 5)[:, None, None])]:
        out = k.chacha20_block(key, counter, stream)
        shape = np.broadcast_shapes(key.shape[:-1], counter.shape, stream.shape)
        assert out.shape == shape + (16,)
        K, C, S = np.broadcast_to(key, shape + (8,)), np.broadcast_to(counter, shape), np.broadcast_to(stream, shape)
        for at in np.ndindex(*shape):
            assert (out[at] == k.chacha20_block(K[at], C[at][None], S[at][None])[0]).all(), at
    for key, stream, counter, word in [(keys, u64(1), u64(2), u64(15)), (one, u64(1, 2, 3), u64(2), u64(3)),
                                       (one, u64(1), u64(2, 2**64 - 1), u64(15)), (one, u64(1), u64(2), u64(0, 16, 31))]:
        out = k.draw(key, stream, counter, word)
        shape = np.broadcast_shapes(key.shape[:-1], stream.shape, counter.shape, word.shape)
        assert out.shape == shape and out.dtype == np.uint64
        b = [np.broadcast_to(v, shape) for v in (stream, counter, word)]
        K = np.broadcast_to(key, shape + (8,))
        for at in np.ndindex(*shape):
            assert out[at] == k.draw(K[at], int(b[0][at]), int(b[1][at]), int(b[2][at])), at


def test_keys_twin_takes_python_ints_as_uint64():
    from exactc.runtime import keys_twin as k
    key = k.key_from_seed(3)
    assert k.draw(key, 5, 2**64 - 1, 17) == k.draw(key, np.uint64(5), np.uint64(2**64 - 1), np.uint64(17))
    assert (k.key_from_seed(np.array([[7], [8]], np.uint64)) == np.stack([k.key_from_seed(7), k.key_from_seed(8)])[:, None]).all()
    assert k.uniform(2**64 - 1) == 1 - 2.0**-53 and k.uniform([0, 2**11])[1] == 2.0**-53


def test_keys_twin_refusals_whole():
    from exactc.runtime import keys_twin as k
    for bad, text in [(np.zeros(7, np.uint32), "uint32 (7,)"), (np.zeros(8, np.int32), "int32 (8,)"),
                      (np.zeros((2, 8), np.uint64), "uint64 (2, 8)")]:
        with pytest.raises(ValueError) as caught:
            k.chacha20_block(bad, np.uint64(0), np.uint64(0))
        assert str(caught.value) == f"a key is an array (..., 8) of uint32 words; got {text}"
    with pytest.raises(TypeError) as caught:
        k.draw(k.key_from_seed(1), np.array([1], np.int64), np.uint64(0), np.uint64(0))
    assert str(caught.value) == "expected uint64 values, got int64"


# ---- the ChaCha20 twin's scalar seed (runtime/keys_twin.py)


def test_keys_twin_scalar_seed_wraps_without_a_warning():
    import warnings

    from exactc.runtime import keys_twin
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy scalars warn when they wrap; 1-d arrays do not
        key = keys_twin.key_from_seed(2**64 - 1)
    assert key.shape == (8,) and (key == keys_twin.key_from_seed(np.array([2**64 - 1], np.uint64))[0]).all()
