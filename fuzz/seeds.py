"""Write the seed corpora of fuzz/corpus/ (kept in the tree; rerun to regenerate):

    python fuzz/seeds.py

npy/: what numpy writes (each dtype exactc reads, 0-d to 8-d, empty, header versions 1.0,
2.0 and 3.0), headers written by hand in the syntax exactc reads (either quote, comments,
a carriage return ending a comment, tabs and form feeds, a '+' sign, -0, Python 2's L
suffix, no trailing comma), and files one step from valid (big-endian, Fortran order,
f2, a byte short, a byte long). Then a refusal for each rule of the reader, group by
group: the magic, the version and the length field (an empty file, a wrong magic,
version 1.1 and 4.0, a length cut or past the end); the dict (an empty or cut header, a
NUL, keys cut, unknown, twice or missing, a comma or a colon missing, bytes after the
'}'); descr and fortran_order (a list, empty, a line break, unprintable, a number, a
misspelt False, cut); and shape (cut, a list, an int, a missing comma, a sign, a
leading zero, hex, a dimension or a byte count past 63 bits, more than 8 dimensions).

safetensors/: what exactc's exporter and the safetensors library write (several dtypes,
empty tensors, metadata, escaped names, a padded header), headers written by hand that
the reader must still read (every JSON escape, whitespace everywhere, unknown fields,
more tensors than the first table holds, empty tensors sharing an offset, names and
metadata of 2-, 3- and 4-byte UTF-8), and files one
step from valid (a gap, an overlap, a name twice, trailing bytes, a header length one
off, a header nested past the limit). Then a refusal for each rule of the reader, group
by group: the length and the header's object (a length cut, over the limit or past the
end, no object, bytes after it, a comma or a colon missing, __metadata__ not an object
of strings); strings (a control byte, a cut or unknown escape, bad hex, each wrong use of
a surrogate, \\u0000, bytes that are not UTF-8: a stray continuation, a cut sequence, an
overlong form, a surrogate, past U+10FFFF); a tensor's object (cut, empty, a field
missing, twice, of the wrong type, an unknown dtype); its shape and data_offsets (cut,
signed, -0, a leading zero, fractions and exponents, past 63 bits, 9 dimensions, the
wrong number of offsets, reversed, a size that overflows or disagrees); and the tiling of the data section when empty tensors and
tensors that begin together sort among the others.
"""

from __future__ import annotations

import io
import json
import struct
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save as library_save

HERE = Path(__file__).resolve().parent

# ------------------------------------------------------------------------------------
# npy
# ------------------------------------------------------------------------------------

NPY_MAGIC = b"\x93NUMPY"
F4_SPECIALS = np.array([[-0.0, np.nan], [np.inf, 1e-45]], "<f4")  # (2, 2)
F4_COUNTING = bytes(range(16))  # the data of a (2, 2) '<f4' array, each byte its own offset


def npy_bytes(a: np.ndarray, version=None) -> bytes:
    """What np.save writes (version None: the lowest that holds the header)."""
    f = io.BytesIO()
    np.lib.format.write_array(f, a, version=version)
    return f.getvalue()


def handmade_npy(header: str, data: bytes = F4_COUNTING, version=(1, 0)) -> bytes:
    """A .npy file around a header written by hand (not padded; a 2-byte length in 1.0, 4 after)."""
    text = header.encode("ascii")
    length = struct.pack("<H" if version[0] == 1 else "<I", len(text))
    return NPY_MAGIC + bytes(version) + length + text + data


def npy_header(descr="'<f4'", fortran_order="False", shape="(2, 2)") -> str:
    """The header dict with each value's text as given, in np.save's key order."""
    return "{'descr': %s, 'fortran_order': %s, 'shape': %s, }\n" % (descr, fortran_order, shape)


def numpy_npy() -> dict[str, bytes]:
    """What numpy writes: every dtype exactc reads at 0-d to 8-d and empty; versions 2.0 and 3.0."""
    rng = np.random.default_rng(0)
    seeds = {}
    for descr in ("<f8", "<f4", "<i4", "<i8"):
        for shape in ((), (0,), (3,), (2, 3), (1, 2, 1, 2, 1, 2, 1, 2)):
            raw = rng.integers(0, 256, int(np.prod(shape)) * np.dtype(descr).itemsize, dtype=np.uint8)
            a = raw.view(descr).reshape(shape)
            name = f"{descr[1:]}-{'x'.join(map(str, shape)) or 'scalar'}"
            seeds[f"{name}.npy"] = npy_bytes(a)
    seeds["v2.npy"] = npy_bytes(F4_SPECIALS, (2, 0))
    seeds["v3.npy"] = npy_bytes(F4_SPECIALS, (3, 0))
    return seeds


def handmade_npy_read() -> dict[str, bytes]:
    """Headers numpy's literal_eval reads and exactc must read too: the rarer corners of
    the dict syntax (quotes, comments, whitespace, signs, the L suffix, the commas)."""
    data = F4_SPECIALS.tobytes()
    return {
        "hand-double-quotes.npy": handmade_npy('{"descr": "<f4", "fortran_order": False, "shape": (2, 2)}\n', data),
        "hand-comments.npy": handmade_npy("{'shape': (2, 2), # rows, columns\n 'descr': '<f4',\n"
                                          " 'fortran_order': False}\n", data),
        "hand-long-suffix.npy": handmade_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L), }\n",
                                             data),
        "hand-long-suffix-v2.npy": handmade_npy(npy_header(shape="(2L, 2)"), version=(2, 0)),
        "hand-plus-sign.npy": handmade_npy(npy_header(shape="(+2, + 2)")),
        "hand-minus-zero.npy": handmade_npy(npy_header(shape="(-0, 2)"), b""),  # -0 is 0: no elements
        "hand-no-trailing-comma.npy": handmade_npy("{'descr':'<f4','fortran_order':False,'shape':(2,2)}"),
        # a comment ends at a carriage return, and the header may end inside one
        "hand-comment-cr.npy": handmade_npy("{'descr': '<f4', # cr\r'fortran_order': False, 'shape': (2, 2)}#end"),
        "hand-tabs-formfeeds.npy": handmade_npy("\t{\f'descr'\t:\r\n'<f4' , 'fortran_order' : False , "
                                                "'shape' : ( 2 , 2 , ) }\n"),
    }


def one_step_refused_npy() -> dict[str, bytes]:
    """Files numpy writes that exactc refuses, or a valid file a byte off: the dtype, the
    order and the data length rules."""
    return {
        "refused-big-endian.npy": npy_bytes(F4_SPECIALS.astype(">f4")),
        "refused-fortran.npy": npy_bytes(np.asfortranarray(np.arange(6, dtype="<f8").reshape(2, 3))),
        "refused-f2.npy": npy_bytes(np.zeros(3, "<f2")),
        "refused-short.npy": npy_bytes(F4_SPECIALS)[:-1],
        "refused-long.npy": npy_bytes(F4_SPECIALS) + b"\0",
    }


def refused_npy_preamble() -> dict[str, bytes]:
    """The bytes before the header: the magic, versions 1.0, 2.0 and 3.0 only, and a
    length field that is whole and within the file."""
    after_version = handmade_npy(npy_header())[8:]
    return {
        "refused-empty-file.npy": b"",
        "refused-magic.npy": b"\x93NUMPX\x01\x00" + after_version,
        "refused-no-version.npy": NPY_MAGIC + b"\x01",
        "refused-version-1.1.npy": NPY_MAGIC + b"\x01\x01" + after_version,
        "refused-version-4.npy": NPY_MAGIC + b"\x04\x00" + after_version,
        "refused-no-length-v3.npy": NPY_MAGIC + b"\x03\x00\x10\x00\x00",  # 3 of the 4 length bytes
        "refused-header-length-past-end.npy": NPY_MAGIC + b"\x02\x00\xff\xff\xff\xff{}",
    }


def refused_npy_dict() -> dict[str, bytes]:
    """The header's dict: ASCII without NUL bytes, quoted keys with a colon, commas between
    entries, the three keys each once and no other, nothing after the '}' but whitespace."""
    return {
        "refused-header-empty.npy": handmade_npy(""),
        "refused-header-nul.npy": handmade_npy(npy_header() + "\0"),
        "refused-dict-unclosed.npy": handmade_npy("{'descr': '<f4',"),
        "refused-after-dict.npy": handmade_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)} x"),
        "refused-no-comma.npy": handmade_npy("{'descr': '<f4' 'shape': (2, 2)}"),
        "refused-key-unterminated.npy": handmade_npy("{'descr"),
        "refused-key-newline.npy": handmade_npy("{'de\nscr': '<f4'}"),
        "refused-key-no-colon.npy": handmade_npy("{'descr' '<f4'}"),
        "refused-key-unknown.npy": handmade_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), "
                                                "'extra': 1}"),
        "refused-key-twice.npy": handmade_npy("{'descr': '<f4', 'shape': (2, 2), 'descr': '<f4', "
                                              "'fortran_order': False}"),
        "refused-no-descr.npy": handmade_npy("{'fortran_order': False, 'shape': (2, 2)}"),
        "refused-no-fortran-order.npy": handmade_npy("{'descr': '<f4', 'shape': (2, 2)}"),
        "refused-no-shape.npy": handmade_npy("{'descr': '<f4', 'fortran_order': False}"),
    }


def refused_npy_descr_and_fortran_order() -> dict[str, bytes]:
    """descr one of the four dtypes as a quoted string without escapes or line breaks (in
    the message at most 24 bytes, unprintable ones as '?'); fortran_order the word False."""
    return {
        "refused-descr-cut.npy": handmade_npy("{'descr':"),
        "refused-descr-list.npy": handmade_npy(npy_header(descr="[('a', '<f4')]")),
        "refused-descr-empty.npy": handmade_npy(npy_header(descr="''")),
        "refused-descr-carriage-return.npy": handmade_npy(npy_header(descr="'<f4\r'")),
        "refused-descr-long-unprintable.npy": handmade_npy(npy_header(descr="'<f4\x01 and then some more words'")),
        "refused-fortran-order-number.npy": handmade_npy(npy_header(fortran_order="0")),
        "refused-fortran-order-underscore.npy": handmade_npy(npy_header(fortran_order="F_alse")),
        "refused-header-cut-after-false.npy": handmade_npy("{'descr': '<f4', 'fortran_order': False"),
    }


def refused_npy_shape() -> dict[str, bytes]:
    """shape a tuple of at most 8 plain decimal dimensions, each at most 2**63 - 1, whose
    byte count fits too; past 8, the rest of the tuple is counted for the message."""
    before_shape = "{'descr': '<f4', 'fortran_order': False, 'shape': "
    nine_dims = "(1,1,1,1,1,1,1,1,1,"
    return {
        "refused-shape-cut.npy": handmade_npy(before_shape),
        "refused-shape-cut-after-comma.npy": handmade_npy(before_shape + "(2, "),
        "refused-shape-unclosed.npy": handmade_npy(before_shape + "(2, 2"),
        "refused-shape-list.npy": handmade_npy(npy_header(shape="[2, 2]")),
        "refused-shape-int-in-parens.npy": handmade_npy(npy_header(shape="(4)")),
        "refused-shape-no-comma.npy": handmade_npy(npy_header(shape="(2 2)")),
        "refused-shape-negative.npy": handmade_npy(npy_header(shape="(-2, 2)")),
        "refused-shape-leading-zero.npy": handmade_npy(npy_header(shape="(02, 2)")),
        "refused-shape-hex.npy": handmade_npy(npy_header(shape="(0x2, 2)")),
        "refused-shape-huge-dim.npy": handmade_npy(npy_header(shape="(99999999999999999999, 0)")),
        "refused-shape-bytes-overflow.npy": handmade_npy(npy_header(descr="'<f8'", shape="(1152921504606846976, 8)")),
        "refused-shape-ten-dims.npy": handmade_npy(npy_header(shape="(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)")),
        "refused-shape-nine-dims-unclosed.npy": handmade_npy(before_shape + nine_dims + "  "),
        "refused-shape-nine-dims-comma.npy": handmade_npy(npy_header(shape=nine_dims + " \t)")),
    }


def npy_seeds() -> dict[str, bytes]:
    return {**numpy_npy(), **handmade_npy_read(), **one_step_refused_npy(), **refused_npy_preamble(),
            **refused_npy_dict(), **refused_npy_descr_and_fortran_order(), **refused_npy_shape()}


# ------------------------------------------------------------------------------------
# safetensors
# ------------------------------------------------------------------------------------

def safetensors_image(header: dict | bytes, data: bytes = b"", length_delta: int = 0) -> bytes:
    """A .safetensors file: the header (a dict as compact JSON, or bytes as given), then data."""
    text = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text) + length_delta) + text + data


def f32_entry(begin: int, end: int, shape) -> dict:
    return {"dtype": "F32", "shape": list(shape), "data_offsets": [begin, end]}


def tensor_a_with(fields: bytes) -> bytes:
    """A file of one tensor "a" over 8 data bytes whose object holds `fields` as written."""
    return safetensors_image(b'{"a":{' + fields + b"}}", bytes(8))


def written_safetensors() -> dict[str, bytes]:
    """What exactc's exporter and the safetensors library write: several dtypes, an empty
    tensor, a scalar, metadata."""
    sys.path.insert(0, str(HERE.parent))
    from exactc.exporter import export

    rng = np.random.default_rng(1)
    seeds = {}
    tensors = {"wte.weight": ("F32", rng.standard_normal((4, 3)).astype("<f4")),
               "h.0.ln_1.bias": ("F32", rng.standard_normal(3).astype("<f4")),
               "h.0.attn.c_attn.weight": ("F32", rng.standard_normal((9, 3)).astype("<f4"))}
    seeds["exactc-f32.safetensors"] = export.safetensors_bytes(tensors)
    bf16 = {k: ("BF16", (v.view("<u4") >> 16).astype("<u2")) for k, (_, v) in tensors.items()}
    seeds["exactc-bf16.safetensors"] = export.safetensors_bytes(bf16)
    seeds["library-dtypes.safetensors"] = library_save({
        "f64": rng.standard_normal((2, 2)), "i32": np.arange(5, dtype="<i4"), "i64": np.arange(3, dtype="<i8"),
        "u8": np.arange(7, dtype="u1"), "f16": np.ones(3, "<f2"), "empty": np.zeros((0, 4), "<f4"),
        "scalar": np.array(2.5, "<f4")}, metadata={"format": "np"})
    return seeds


def handmade_safetensors_read() -> dict[str, bytes]:
    """Headers no writer here produces that the reader must still read: escapes, spaces,
    fields it skips, a growing tensor table, empty tensors in the tiling."""
    one = {"a": f32_entry(0, 8, (2,))}
    return {
        "empty.safetensors": safetensors_image(b"{}"),
        "escaped-names.safetensors": safetensors_image(
            b'{"caf\\u00e9":' + json.dumps(f32_entry(0, 4, (1,))).encode() + b',"\\ud83d\\ude00 \\"q\\"":'
            + json.dumps(f32_entry(4, 8, (1,))).encode() + b"}", bytes(8)),
        # every escape JSON has, in a name long enough to grow the string's buffer
        "escapes-all.safetensors": safetensors_image(
            rb'{"\"\\\/\b\f\n\r\t\u0041\u00e9\u20ac\uD83D\uDE00\uabcd":' + json.dumps(f32_entry(0, 4, (1,))).encode()
            + b"}", bytes(4)),
        "padded-header.safetensors": safetensors_image(json.dumps(one).encode() + b"      ", bytes(8)),
        "spaces-everywhere.safetensors": safetensors_image(
            b' \t\r\n{ "a" : { "dtype" : "F32" , "shape" : [ 2 ] , "data_offsets" : [ 0 , 8 ] , "extra" : '
            b'{ "k" : [ 1 , true , false , null , "s" , { } , [ ] ] } } , "__metadata__" : { } }\n ', bytes(8)),
        "unknown-fields-skipped.safetensors": tensor_a_with(
            b'"x":{},"dtype":"F32","y":[],"shape":[2],"z":"s","data_offsets":[0,8],"w":123'),
        "metadata-null.safetensors": safetensors_image(dict(one, __metadata__=None), bytes(8)),
        # one more than the 16 entries the tensor table starts with
        "seventeen-tensors.safetensors": safetensors_image(
            {f"t{k:02d}": f32_entry(4 * k, 4 * k + 4, (1,)) for k in range(17)}, bytes(68)),
        "same-begin-empty-first.safetensors": safetensors_image(
            {"a": f32_entry(0, 0, (0,)), "b": f32_entry(0, 8, (2,)), "c": f32_entry(8, 8, (2, 0))}, bytes(8)),
        "utf8-names-and-metadata.safetensors": safetensors_image(
            '{"__metadata__":{"café":"€","k":"😀"},"é":%s,"€":%s,"😀":%s}'.encode()
            % tuple(json.dumps(f32_entry(4 * k, 4 * k + 4, (1,))).encode() for k in range(3)), bytes(12)),
    }


def one_step_refused_safetensors() -> dict[str, bytes]:
    """A valid file one step off: the tiling, a name twice, the header length, the depth limit."""
    one = {"a": f32_entry(0, 8, (2,))}
    return {
        "refused-gap.safetensors": safetensors_image(
            {"a": f32_entry(0, 8, (2,)), "b": f32_entry(12, 20, (2,))}, bytes(20)),
        "refused-overlap.safetensors": safetensors_image(
            {"a": f32_entry(0, 8, (2,)), "b": f32_entry(4, 12, (2,))}, bytes(12)),
        "refused-name-twice.safetensors": safetensors_image(
            b'{"a":' + json.dumps(f32_entry(0, 8, (2,))).encode() + b',"a":'
            + json.dumps(f32_entry(8, 16, (2,))).encode() + b"}", bytes(16)),
        "refused-trailing.safetensors": safetensors_image(one, bytes(9)),
        "refused-length-plus-one.safetensors": safetensors_image(one, b" " + bytes(7), +1),
        "refused-length-minus-one.safetensors": safetensors_image(one, bytes(8), -1),
        "refused-nested-metadata.safetensors": safetensors_image(
            b'{"__metadata__":' + b'{"k":' * 20 + b'"v"' + b"}" * 20 + b"}"),
    }


def refused_safetensors_length_and_object() -> dict[str, bytes]:
    """An 8-byte length within the limit and the file; one JSON object of names, a colon
    and a comma each, nothing after it; __metadata__ an object of JSON values."""
    return {
        "refused-length-cut.safetensors": b"\x08\x00\x00",
        "refused-length-over-limit.safetensors": struct.pack("<Q", 100_000_001) + b"{}",
        "refused-length-past-end.safetensors": struct.pack("<Q", 64) + b"{}",
        "refused-header-not-object.safetensors": safetensors_image(b"[]"),
        "refused-header-open.safetensors": safetensors_image(b"{"),
        "refused-header-after-object.safetensors": safetensors_image(b"{} x"),
        "refused-header-no-comma.safetensors": safetensors_image(
            b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]} "b"}'),
        "refused-name-no-colon.safetensors": safetensors_image(b'{"a" {}}'),
        "refused-metadata-list.safetensors": safetensors_image(b'{"__metadata__":[]}'),
        "refused-metadata-cut.safetensors": safetensors_image(b'{"__metadata__":'),
        "refused-metadata-cut-after-brace.safetensors": safetensors_image(b'{"__metadata__":{'),
        "refused-metadata-cut-in-object.safetensors": safetensors_image(b'{"__metadata__":{"k":"v"'),
        "refused-metadata-bad-value.safetensors": safetensors_image(b'{"__metadata__":{"k":-1}}'),
        # the library reads __metadata__ as a map of string to string: any other value is refused
        "refused-metadata-number.safetensors": safetensors_image(b'{"__metadata__":{"k":1}}'),
        "refused-metadata-null-value.safetensors": safetensors_image(b'{"__metadata__":{"k":null}}'),
        "refused-metadata-object-value.safetensors": safetensors_image(b'{"__metadata__":{"k":"v","l":{}}}'),
        "refused-metadata-cut-after-colon.safetensors": safetensors_image(b'{"__metadata__":{"k":'),
        "refused-metadata-no-comma.safetensors": safetensors_image(b'{"__metadata__":{"k":"v" "l":"w"}}'),
        "refused-metadata-key-no-colon.safetensors": safetensors_image(b'{"__metadata__":{"k" "v"}}'),
    }


def refused_safetensors_strings() -> dict[str, bytes]:
    """A string: no control byte, whole escapes of JSON's set, four hex digits after \\u,
    surrogates in pairs, no \\u0000 (names are C strings)."""
    return {
        "refused-string-control-byte.safetensors": safetensors_image(b'{"a\x01":{}}'),
        "refused-string-escape-cut.safetensors": safetensors_image(b'{"a\\'),
        "refused-string-unknown-escape.safetensors": safetensors_image(rb'{"a\x":{}}'),
        "refused-string-bad-hex.safetensors": safetensors_image(rb'{"a\u00g0":{}}'),
        "refused-string-lone-high-surrogate.safetensors": safetensors_image(rb'{"a\ud83d":{}}'),
        "refused-string-high-surrogate-at-end.safetensors": safetensors_image(rb'{"\ud83d"'),
        "refused-string-high-surrogate-cut.safetensors": safetensors_image(rb'{"a\ud83d\ude0'),
        "refused-string-high-surrogate-then-a.safetensors": safetensors_image(rb'{"a\ud83d\u0041":{}}'),
        "refused-string-high-surrogate-then-newline.safetensors": safetensors_image(rb'{"a\ud83d\n":{}}'),
        "refused-string-lone-low-surrogate.safetensors": safetensors_image(rb'{"a\ude00":{}}'),
        "refused-string-u0000.safetensors": safetensors_image(rb'{"a\u0000":{}}'),
        # not UTF-8, which the library refuses before it reads the JSON
        "refused-string-byte-ff.safetensors": safetensors_image(b'{"a\xff":{}}'),
        "refused-string-continuation-first.safetensors": safetensors_image(b'{"\x80":{}}'),
        "refused-string-utf8-cut.safetensors": safetensors_image(b'{"caf\xc3":{}}'),
        "refused-string-utf8-cut-by-header-end.safetensors": safetensors_image(b'{"caf\xe2\x82'),
        "refused-string-utf8-bad-third-byte.safetensors": safetensors_image(b'{"\xe2\x82\x41":{}}'),
        "refused-string-utf8-overlong.safetensors": safetensors_image(b'{"\xc0\xaf":{}}'),
        "refused-string-utf8-overlong-3.safetensors": safetensors_image(b'{"\xe0\x80\xaf":{}}'),
        "refused-string-utf8-surrogate.safetensors": safetensors_image(b'{"\xed\xa0\x80":{}}'),
        "refused-string-utf8-past-10ffff.safetensors": safetensors_image(b'{"\xf4\x90\x80\x80":{}}'),
        "refused-string-utf8-overlong-4.safetensors": safetensors_image(b'{"\xf0\x80\x80\xaf":{}}'),
        "refused-string-utf8-f5.safetensors": safetensors_image(b'{"\xf5\x80\x80\x80":{}}'),
        "refused-metadata-value-not-utf8.safetensors": safetensors_image(b'{"__metadata__":{"k":"\xc3("}}'),
    }


def refused_safetensors_tensor_object() -> dict[str, bytes]:
    """A tensor's object: fields as "key": value with commas, dtype, shape and
    data_offsets each exactly once, dtype a string naming a known dtype, unknown fields
    skipped as whole JSON values."""
    return {
        "refused-tensor-cut.safetensors": safetensors_image(b'{"a":'),
        "refused-tensor-cut-in-object.safetensors": safetensors_image(b'{"a":{'),
        "refused-tensor-cut-after-field.safetensors": safetensors_image(b'{"a":{"dtype":"F32"'),
        "refused-tensor-cut-after-unknown-key.safetensors": safetensors_image(b'{"a":{"x":'),
        "refused-tensor-empty-object.safetensors": safetensors_image(b'{"a":{}}'),
        "refused-tensor-key-not-string.safetensors": tensor_a_with(b"dtype:1"),
        "refused-tensor-key-no-colon.safetensors": tensor_a_with(b'"dtype" "F32"'),
        "refused-tensor-no-comma.safetensors": tensor_a_with(b'"dtype":"F32" "shape":[2]'),
        "refused-tensor-no-shape.safetensors": tensor_a_with(b'"dtype":"F32","data_offsets":[0,8]'),
        "refused-tensor-no-offsets.safetensors": tensor_a_with(b'"dtype":"F32","shape":[2]'),
        "refused-tensor-dtype-twice.safetensors": tensor_a_with(
            b'"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]'),
        "refused-tensor-shape-twice.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[2],"shape":[2],"data_offsets":[0,8]'),
        "refused-tensor-offsets-twice.safetensors": tensor_a_with(
            b'"dtype":"F32","data_offsets":[0,8],"shape":[2],"data_offsets":[0,8]'),
        "refused-tensor-dtype-number.safetensors": tensor_a_with(b'"dtype":4'),
        "refused-tensor-dtype-unknown.safetensors": tensor_a_with(b'"dtype":"F31","shape":[2],"data_offsets":[0,8]'),
        # longer than the tensor's dtype field holds
        "refused-tensor-dtype-long.safetensors": tensor_a_with(
            b'"dtype":"F32F32F32F32F32","shape":[2],"data_offsets":[0,8]'),
        "refused-tensor-unknown-field-unclosed-string.safetensors": safetensors_image(b'{"a":{"x":"abc'),
        "refused-tensor-unknown-field-key-not-string.safetensors": safetensors_image(b'{"a":{"x":{1:2}}}'),
    }


def refused_safetensors_shape_and_offsets() -> dict[str, bytes]:
    """shape and data_offsets: arrays of non-negative integers that fit in 63 bits (no
    sign, fraction or exponent), at most 8 dimensions, exactly [begin, end] with
    begin <= end, and end - begin the tensor's size without overflow."""
    return {
        "refused-tensor-shape-not-array.safetensors": tensor_a_with(b'"dtype":"F32","shape":2'),
        "refused-tensor-shape-cut.safetensors": safetensors_image(b'{"a":{"dtype":"F32","shape":['),
        "refused-tensor-shape-cut-after-dim.safetensors": safetensors_image(b'{"a":{"dtype":"F32","shape":[2'),
        "refused-tensor-shape-cut-after-comma.safetensors": safetensors_image(b'{"a":{"dtype":"F32","shape":[2,'),
        "refused-tensor-shape-no-comma.safetensors": tensor_a_with(b'"dtype":"F32","shape":[2 2],"data_offsets":[0,8]'),
        "refused-tensor-shape-negative.safetensors": tensor_a_with(b'"dtype":"F32","shape":[-2],"data_offsets":[0,8]'),
        "refused-tensor-shape-fraction.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[2.0],"data_offsets":[0,8]'),
        "refused-tensor-shape-capital-exponent.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[2E0],"data_offsets":[0,8]'),
        "refused-tensor-shape-63-bits.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]'),
        "refused-tensor-shape-nine-dims.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,8]'),
        "refused-tensor-offsets-letter.safetensors": tensor_a_with(b'"dtype":"F32","shape":[2],"data_offsets":[0,x]'),
        # JSON numbers have no leading zero (the library: "invalid number"), and -0 is the float -0.0 to it
        "refused-tensor-offsets-leading-zero.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[2],"data_offsets":[00,8]'),
        "refused-tensor-offsets-end-leading-zero.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[2],"data_offsets":[0,08]'),
        "refused-tensor-shape-leading-zero.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[02],"data_offsets":[0,8]'),
        "refused-tensor-unknown-field-leading-zero.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":007'),
        "refused-tensor-offsets-minus-zero.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[2],"data_offsets":[-0,8]'),
        "refused-tensor-offsets-one.safetensors": tensor_a_with(b'"dtype":"F32","shape":[2],"data_offsets":[8]'),
        "refused-tensor-offsets-three.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[2],"data_offsets":[0,8,8]'),
        "refused-tensor-offsets-reversed.safetensors": tensor_a_with(
            b'"dtype":"F32","shape":[0],"data_offsets":[8,0]'),
        "refused-tensor-shape-overflows.safetensors": tensor_a_with(
            b'"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]'),
        "refused-tensor-size-wrong.safetensors": tensor_a_with(b'"dtype":"F32","shape":[3],"data_offsets":[0,8]'),
    }


def refused_safetensors_tiling() -> dict[str, bytes]:
    """The tiling when empty tensors and tensors that begin together sort among the others:
    the last tensor must end at the data's end, and no two may share bytes."""
    return {
        "refused-data-short-empty-tensor-at-end.safetensors": safetensors_image(
            {"a": f32_entry(0, 8, (2,)), "z": f32_entry(16, 16, (0,)), "b": f32_entry(8, 16, (2,))}, bytes(12)),
        "refused-overlap-same-begin.safetensors": safetensors_image(
            {"a": f32_entry(0, 8, (2,)), "b": f32_entry(0, 4, (1,)), "c": f32_entry(0, 0, (0,)),
             "d": f32_entry(0, 8, (2,))}, bytes(8)),
    }


def safetensors_seeds() -> dict[str, bytes]:
    return {**written_safetensors(), **handmade_safetensors_read(), **one_step_refused_safetensors(),
            **refused_safetensors_length_and_object(), **refused_safetensors_strings(),
            **refused_safetensors_tensor_object(), **refused_safetensors_shape_and_offsets(),
            **refused_safetensors_tiling()}


def main() -> int:
    for kind, seeds in (("npy", npy_seeds()), ("safetensors", safetensors_seeds())):
        folder = HERE / "corpus" / kind
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, data in sorted(seeds.items()):
            (folder / name).write_bytes(data)
        print(f"{folder}: {len(seeds)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
