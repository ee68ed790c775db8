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


# ---- bf16's numpy type: ml_dtypes', imported on first use only


def test_the_numpy_types_of_the_storage_table():
    import ml_dtypes
    import numpy as np

    got = {kind: s.numpy for kind, s in types.STORAGE.items()}
    assert got == {"f64": np.float64, "f32": np.float32, "bf16": np.dtype(ml_dtypes.bfloat16), "i32": np.int32,
                   "i8": np.int8, "u8": np.uint8}
    assert types.BF16 is types.numpy_dtype("bf16")
    with pytest.raises(AttributeError, match="no attribute 'BF17'"):
        types.BF17  # noqa: B018


def test_bf16_is_told_from_the_types_of_its_width():
    import numpy as np

    assert types.is_bf16(types.BF16) and types.is_bf16(np.zeros(2, types.BF16).dtype)
    assert not any(types.is_bf16(np.dtype(t)) for t in (np.float32, np.uint16, np.float16, np.int16))


def test_the_types_module_leaves_ml_dtypes_unimported_until_bf16_is_used():
    import subprocess
    import sys

    script = ("import sys; from exactc.exporter import types; import numpy as np; "
              "print('ml_dtypes' in sys.modules, types.is_bf16(np.dtype(np.float32)), "
              "types.storage('f32').numpy, 'ml_dtypes' in sys.modules, types.storage('bf16').numpy, "
              "'ml_dtypes' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False", "float32", "False", "bfloat16", "True"]
