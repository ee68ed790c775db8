"""The JSON users hand over, read strictly (exporter/jsonfile.py): a key twice, not UTF-8,
not JSON, nested too deep, a number Python cannot hold, an unreadable path, the size bound."""

from __future__ import annotations

import re

import pytest

from exactc.exporter import jsonfile

# ---- the JSON users hand over, read strictly (exporter/jsonfile.py): each refusal whole


def test_json_files_are_refused_whole_by_rule(tmp_path):
    from exactc.exporter import jsonfile

    def refusal(data: bytes) -> str:
        with pytest.raises(jsonfile.JSONFileError) as caught:
            jsonfile.parse(data, "f.json")
        return str(caught.value)

    assert jsonfile.parse('{"a": [1, {"b": "é"}]}'.encode(), "f.json") == {"a": [1, {"b": "é"}]}
    assert refusal(b'{"a": 1, "b": {"c": 1, "c": 2}}') == "f.json: key 'c' appears twice in one object"
    assert refusal(b'{"a": "\xff"}') == "f.json: not UTF-8 (byte 7 is 0xff); JSON is UTF-8 text"
    assert refusal(b'{"a": }') == "f.json: not JSON (Expecting value: line 1 column 7 (char 6))"
    assert refusal(b"[" * 100_000 + b"]" * 100_000) == "f.json: nested too deep for Python's JSON parser"
    assert refusal(b"1" * 5000).startswith("f.json: a value JSON allows but Python cannot hold (")
    path = tmp_path / "g.json"
    path.write_bytes(b'{"x": 1}')
    assert jsonfile.load(path) == {"x": 1}
    with pytest.raises(jsonfile.JSONFileError) as caught:
        jsonfile.load(tmp_path / "none.json")
    assert str(caught.value) == f"{tmp_path / 'none.json'}: cannot read (No such file or directory)"


def test_a_bad_json_file_is_named_by_its_path(tmp_path):
    from exactc.exporter import jsonfile

    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": }')
    with pytest.raises(jsonfile.JSONFileError) as caught:
        jsonfile.load(bad)
    assert str(caught.value) == f"{bad}: not JSON (Expecting value: line 1 column 7 (char 6))"


# ---- strict JSON files


def test_an_unreadable_json_path_is_refused_naming_it(tmp_path):
    with pytest.raises(jsonfile.JSONFileError) as missing:
        jsonfile.load(tmp_path / "config.json")
    assert str(missing.value) == f"{tmp_path / 'config.json'}: cannot read (No such file or directory)"
    with pytest.raises(jsonfile.JSONFileError) as folder:
        jsonfile.load(tmp_path)
    assert str(folder.value) == f"{tmp_path}: cannot read (Is a directory)"


TOO_LONG = f"more than {jsonfile.MAX_BYTES:,} bytes; exactc reads JSON files up to that size"


def test_a_json_file_of_max_bytes_is_read_and_one_byte_more_is_refused(tmp_path):
    at_bound, past = tmp_path / "at.json", tmp_path / "past.json"
    for path, size in ((at_bound, jsonfile.MAX_BYTES), (past, jsonfile.MAX_BYTES + 1)):
        with open(path, "wb") as f:  # sparse: NUL bytes, no disk taken
            f.truncate(size)
    with pytest.raises(jsonfile.JSONFileError, match=re.escape(f"{at_bound}: not JSON (Expecting value")):
        jsonfile.load(at_bound)
    for endless in (past, "/dev/zero"):
        with pytest.raises(jsonfile.JSONFileError) as refused:
            jsonfile.load(endless)
        assert str(refused.value) == f"{endless}: {TOO_LONG}"
