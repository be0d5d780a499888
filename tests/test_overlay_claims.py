"""interfaces.toml [overlay]: what the overlay claims to register, by dispatch key."""

import pytest

from build_scripts.errors import HarnessError
from build_scripts.symbols import load_overlay_ops


def claims(tmp_path, text):
    path = tmp_path / "interfaces.toml"
    path.write_text(text)
    return load_overlay_ops(path)


def test_claims_by_dispatch_key(tmp_path):
    assert claims(tmp_path, '[overlay]\ncuda = ["aten::a", "aten::b.out"]\nautograd = ["aten::a"]\n') == {
        "CUDA": ["aten::a", "aten::b.out"], "Autograd": ["aten::a"]}
    assert claims(tmp_path, "") == {}


def test_an_unknown_field_is_named(tmp_path):
    with pytest.raises(HarnessError, match=r"\[overlay\] has \['ops'\]; it may name cuda, autograd"):
        claims(tmp_path, '[overlay]\nops = ["aten::a"]\n')


def test_ops_must_be_aten_names(tmp_path):
    with pytest.raises(HarnessError, match=r"\[overlay\] autograd must be a list of 'aten::name.overload' strings"):
        claims(tmp_path, '[overlay]\nautograd = ["a"]\n')
