"""llama2.c's tokenizer.bin: read it, turn text into ids and ids into bytes as run.c does.

    tok = tokenizer_bin.read("tokenizer.bin", vocab_size=32000)
    ids = tok.encode("Once upon a time")          # [1, ...]: BOS, the dummy prefix, merges
    piece = tok.decode(prev_token, token)         # bytes: what run.c prints for `token`

The file (written by llama2.c's tokenizer.py, read by run.c's build_tokenizer), all
little-endian: an int32 max_token_length, then for each token of the vocab a float32
score, an int32 length and that many bytes of the token's piece. The vocab size is not
in the file: it is the model's (the checkpoint's vocab_size), and a file that ends
before the model's last token or goes on after it is refused, as is a length that is
negative or over max_token_length. Ids 0, 1, 2 are <unk>, <s> (BOS) and </s>, then the
256 byte tokens <0x00> ... <0xFF> (id = byte + 3), then the merged pieces. A piece
holds its leading space as a space (llama2.c's tokenizer.py turns sentencepiece's "▁"
into " " when it writes the file).

Encoding is run.c's `encode` with its defaults (the dummy prefix on, EOS off):

1. BOS (id 1) first, when asked.
2. A non-empty text gets the piece " " next, the dummy prefix: sentencepiece's leading
   space, so that the first word is tokenized like a word after a space.
3. The text's UTF-8 bytes are cut into codepoints (a byte that is not a continuation
   byte, 10xxxxxx, starts one). A codepoint that is a piece is that piece's id; one that
   is not becomes a byte token per byte.
4. Then, while some adjacent pair merges: of the pairs whose two pieces put together are
   a piece, the one whose piece scores highest (the leftmost of equal scores) becomes
   that one piece. run.c starts its search from a best score of -1e10, so a piece scored
   at or below that never merges. Every token takes part, BOS and the dummy prefix too.

Decoding a token after the one before it is run.c's `decode`: the token's piece, without
its leading space after BOS (the first word of a text has no space before it), and a
piece <0xXX> (two hex digits) is the one byte 0xXX. A piece is bytes, not text: a
character of several bytes drawn as byte tokens is whole only once its last byte is,
so a caller that streams text decodes the bytes of the whole sequence (`decode_ids`)
and shows only its complete characters.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from pathlib import Path

BOS = 1
BYTE_OFFSET = 3  # id of <0x00>: after <unk>, <s>, </s>
NO_MERGE_SCORE = -1e10  # run.c's starting best score: a merge must score above it
_BYTE_PIECE = re.compile(rb"<0x([0-9A-Fa-f]{2})>")


class TokenizerError(ValueError):
    """A tokenizer.bin that does not fit the model, or text it cannot encode: the
    message names the file, the token and the rule."""


@dataclasses.dataclass
class BinTokenizer:
    """A tokenizer.bin read for a model's vocab: each id's piece and score."""

    path: Path
    max_token_length: int
    pieces: tuple[bytes, ...]  # (vocab,)
    scores: tuple[float, ...]  # (vocab,): float32 values, exact as Python floats
    ids: dict[bytes, int] = dataclasses.field(init=False, repr=False)  # piece -> id

    def __post_init__(self) -> None:
        self.ids = {}
        for i, piece in enumerate(self.pieces):
            self.ids.setdefault(piece, i)  # a piece stored twice is its first id

    def piece_id(self, piece: bytes) -> int | None:
        return self.ids.get(piece)

    def encode(self, text: str, bos: bool = True) -> list[int]:
        """The ids of `text` (steps 1 to 4 of the module docstring); no EOS."""
        ids = [BOS] if bos else []
        if text:
            ids.append(self._required(b" ", "the dummy prefix"))
        for codepoint in split_codepoints(text.encode("utf-8")):
            found = self.piece_id(codepoint)
            ids += [found] if found is not None else [self._byte_id(b, codepoint) for b in codepoint]
        return merge_pairs(ids, self)

    def decode(self, prev_token: int, token: int) -> bytes:
        """The bytes run.c prints for `token` drawn after `prev_token`."""
        piece = self.pieces[token]
        if prev_token == BOS and piece.startswith(b" "):
            piece = piece[1:]
        byte = _BYTE_PIECE.fullmatch(piece)
        return bytes([int(byte.group(1), 16)]) if byte else piece

    def decode_ids(self, ids: list[int]) -> bytes:
        """The bytes of a sequence, each token decoded after the one before it (the
        first after none, so that its piece is kept whole)."""
        return b"".join(self.decode(prev, token) for prev, token in zip([-1] + ids[:-1], ids))

    def _required(self, piece: bytes, what: str) -> int:
        found = self.piece_id(piece)
        if found is None:
            raise TokenizerError(f"{self.path}: no piece {piece.decode()!r} ({what}); a llama2.c tokenizer has one")
        return found

    def _byte_id(self, byte: int, codepoint: bytes) -> int:
        if BYTE_OFFSET + byte >= len(self.pieces):
            raise TokenizerError(f"{self.path}: {codepoint.decode(errors='replace')!r} is no piece and the vocab of "
                                 f"{len(self.pieces)} has no byte token <0x{byte:02X}> (id {BYTE_OFFSET + byte})")
        return BYTE_OFFSET + byte


def split_codepoints(data: bytes) -> list[bytes]:
    """UTF-8 bytes cut before every byte that is not a continuation byte (10xxxxxx)."""
    starts = [i for i, b in enumerate(data) if b & 0xC0 != 0x80] + [len(data)]
    return [data[a:b] for a, b in zip(starts, starts[1:])]


def merge_pairs(ids: list[int], tok: BinTokenizer) -> list[int]:
    """Step 4: merge the best-scoring adjacent pair until none merges. Quadratic in the
    length, as run.c's is: prompts are short."""
    ids = list(ids)
    while True:
        best_score, best_index, best_id = NO_MERGE_SCORE, -1, -1
        for i in range(len(ids) - 1):
            merged = tok.piece_id(tok.pieces[ids[i]] + tok.pieces[ids[i + 1]])
            if merged is not None and tok.scores[merged] > best_score:
                best_score, best_index, best_id = tok.scores[merged], i, merged
        if best_index < 0:
            return ids
        ids[best_index:best_index + 2] = [best_id]


def read(path: str | Path, vocab_size: int) -> BinTokenizer:
    """The tokenizer.bin at `path` for a model of `vocab_size` tokens, checked whole."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenizerError(f"{path}: not readable ({exc.strerror or exc})") from None
    if len(data) < 4:
        raise TokenizerError(f"{path}: ends before max_token_length (an int32); the file has {len(data)} bytes")
    (max_length,) = struct.unpack_from("<i", data, 0)
    if max_length < 0:
        raise TokenizerError(f"{path}: max_token_length {max_length} is negative")
    pieces, scores = [], []
    offset = 4
    for i in range(vocab_size):
        where = f"{path}: token {i} of the model's {vocab_size}"
        if len(data) - offset < 8:
            raise TokenizerError(f"{where}: the file ends early ({len(data) - offset} bytes left, a score and a "
                                 "length need 8); is the tokenizer for a smaller vocab?")
        score, length = struct.unpack_from("<fi", data, offset)
        offset += 8
        if length < 0:
            raise TokenizerError(f"{where}: length {length} is negative")
        if length > max_length:
            raise TokenizerError(f"{where}: length {length} is over max_token_length {max_length}")
        if len(data) - offset < length:
            raise TokenizerError(f"{where}: the file ends early (its piece of {length} bytes has "
                                 f"{len(data) - offset} left)")
        pieces.append(data[offset:offset + length])
        scores.append(score)
        offset += length
    if offset != len(data):
        raise TokenizerError(f"{path}: {len(data) - offset} bytes left over after token {vocab_size - 1}, the "
                             f"model's last; is the tokenizer for a larger vocab than {vocab_size}?")
    return BinTokenizer(path, max_length, tuple(pieces), tuple(scores))


def write(path: str | Path, pieces: list[bytes], scores: list[float], max_token_length: int | None = None) -> Path:
    """A tokenizer.bin of these pieces and scores (max_token_length: the longest piece
    unless given)."""
    longest = max((len(p) for p in pieces), default=0) if max_token_length is None else max_token_length
    chunks = [struct.pack("<i", longest)]
    chunks += [struct.pack("<fi", score, len(piece)) + piece for piece, score in zip(pieces, scores, strict=True)]
    path = Path(path)
    path.write_bytes(b"".join(chunks))
    return path
