"""interfaces.toml [overlay]: what the overlay claims to register, by dispatch key."""

import pytest

from build_scripts.errors import HarnessError
from build_scripts.symbols import load_overlay_ops


def claims(tmp_path, text):
    path = tmp_path / "interfaces.toml"
    path.write_text(text)
    return load_overlay_ops(path)


def test_claims_by_dispatch_key(tmp_path):
    assert claims(tmp_path, '[overlay]\ncuda = ["aten::a", "aten::b.out"]\nmeta = ["aten::a"]\nautograd = ["aten::a"]\n') \
        == {"CUDA": ["aten::a", "aten::b.out"], "Meta": ["aten::a"], "Autograd": ["aten::a"]}
    assert claims(tmp_path, "") == {}


def test_an_unknown_field_is_named(tmp_path):
    with pytest.raises(HarnessError, match=r"\[overlay\] has \['ops'\]; it may name cuda, meta, autograd"):
        claims(tmp_path, '[overlay]\nops = ["aten::a"]\n')


def test_ops_must_be_aten_names(tmp_path):
    with pytest.raises(HarnessError, match=r"\[overlay\] autograd must be a list of 'aten::name.overload' strings"):
        claims(tmp_path, '[overlay]\nautograd = ["a"]\n')


def test_the_claims_must_cover_every_key_the_added_operators_dispatch_to(tmp_path):
    """The repository's claims cover what its overrides make the overlay register; dropping the
    Meta claims (of _conv_depthwise2d's replaced entry and of the added backward operators) is
    refused, naming them."""
    from build_scripts.check import L0Check
    from build_scripts.patchset import PatchSet
    from build_scripts.symbols import INTERFACES_FILE

    patch_set = PatchSet.load()
    checker = L0Check(pin=None, patch_set=patch_set, archs=(), cache=tmp_path, work=tmp_path, codegen_cache=tmp_path)
    claimed = load_overlay_ops(patch_set.patches_dir / INTERFACES_FILE)
    checker._check_claims_cover_overrides(claimed, checker._overlay_ops())
    without_meta = {key: ops for key, ops in claimed.items() if key != "Meta"}
    with pytest.raises(HarnessError, match=r"does not claim what the overrides make the overlay register: "
                                           r"Meta: aten::_conv_depthwise2d, aten::_conv_depthwise2d_backward, "
                                           r"aten::_conv_depthwise3d_backward"):
        checker._check_claims_cover_overrides(without_meta, checker._overlay_ops())
