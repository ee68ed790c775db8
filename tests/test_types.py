"""The fixed kinds and site types (exporter/types.py): their spellings, an unknown name
refused, the C declaration of a site type."""

from __future__ import annotations

import pytest

from exactc.exporter import types

# ---- the spellings of each fixed kind, and an unknown name refused


def test_storage_of_each_fixed_kind_and_an_unknown_name():
    for kind in types.FIXED_KINDS + ("f64", "bf16"):
        assert types.storage(kind) is types.STORAGE[kind], kind
    with pytest.raises(types.SiteTypeError) as caught:
        types.storage("f16")
    assert str(caught.value) == "unknown site type 'f16'; exactc knows f64, f32, bf16"


def test_a_c_declaration_takes_a_site_type_only():
    from exactc.exporter import types

    assert types.c_site_type("bf16") == "exactc_bf16"
    with pytest.raises(types.SiteTypeError, match="f16"):
        types.c_site_type("f16")
