"""`make source`: a shallow clone of the pinned tag, or a check of an existing checkout.
GitHub is out of reach here, so the clone is tested against a local repository."""

import pytest

from build_scripts.errors import HarnessError
from build_scripts.gitutil import head_commit
from build_scripts.source import clone_pinned, make_source, source_dir, validate_checkout
from tests.fake_pytorch import make_fake_pytorch, pin_for, run


def test_clone_checks_out_the_pinned_commit(fake_tree, fake_pin, tmp_path):
    dest = tmp_path / "src" / "pytorch"
    checkout = make_source(dest, fake_pin)
    assert checkout.commit == fake_tree[1] == head_commit(dest)
    assert run(dest, "git", "rev-parse", "--is-shallow-repository").strip() == "true"
    assert (dest / "aten/src/ATen/native/native_functions.yaml").is_file()
    assert not dest.with_name("pytorch.partial").exists()


def test_clone_of_a_tag_at_another_commit_leaves_nothing(fake_tree, tmp_path):
    tree, commit = fake_tree
    pinned = "0123456789abcdef0123456789abcdef01234567"
    dest = tmp_path / "src" / "pytorch"
    with pytest.raises(HarnessError) as error:
        clone_pinned(dest, pin_for(pinned, url=f"file://{tree}"))
    assert f"tag v2.11.0 at file://{tree} is commit {commit}, but the pin is commit {pinned}" in str(error.value)
    assert not dest.exists() and not dest.with_name("pytorch.partial").exists()


def test_clone_failure_reports_git(tmp_path, fake_pin):
    dest = tmp_path / "clone"
    pin = pin_for(fake_pin.commit, url=f"file://{tmp_path}/no-such-repo")
    with pytest.raises(HarnessError, match=r"git clone of v2.11.0 from file://.*/no-such-repo failed"):
        clone_pinned(dest, pin)
    assert not dest.exists()


def test_existing_checkout_is_validated_not_recloned(fake_tree, fake_pin, capsys):
    tree, commit = fake_tree
    assert make_source(tree, fake_pin).commit == commit
    assert "unpatched" in capsys.readouterr().out


def test_existing_checkout_at_a_wrong_commit(fake_tree, fake_pin):
    tree, pinned = fake_tree
    (tree / "extra.txt").write_text("x")
    run(tree, "git", "add", "extra.txt")
    run(tree, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "local")
    moved = head_commit(tree)
    with pytest.raises(HarnessError) as error:
        make_source(tree, fake_pin)
    assert f"is at commit {moved}" in str(error.value)
    assert f"the pin is PyTorch v2.11.0 ({pinned})" in str(error.value)
    assert validate_checkout(tree, fake_pin, force=True).commit == moved


def test_dirty_checkout_is_refused_unless_forced(fake_tree, fake_pin, capsys):
    tree, _ = fake_tree
    (tree / "aten/src/ATen/native/Convolution.cpp").write_text("// mine\n")
    with pytest.raises(HarnessError, match=r"has changes that are not the patch set's.*\n +M aten/src/ATen/native/Convolution.cpp"):
        validate_checkout(tree, fake_pin)
    validate_checkout(tree, fake_pin, force=True)
    assert "warning (forced)" in capsys.readouterr().err


def test_not_a_checkout(tmp_path, fake_pin):
    (tmp_path / "plain").mkdir()
    with pytest.raises(HarnessError, match=r"is not the root of a git checkout of PyTorch; run `make source`"):
        validate_checkout(tmp_path / "plain", fake_pin)


def test_uninitialised_submodule_is_reported(tmp_path):
    sub, _ = make_fake_pytorch(tmp_path / "third_party_repo", tag="v1")
    tree, _ = make_fake_pytorch(tmp_path / "pytorch")
    run(tree, "git", "-c", "protocol.file.allow=always", "submodule", "add", "-q", f"file://{sub}", "third_party/dep")
    run(tree, "git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "submodule")
    run(tree, "git", "submodule", "deinit", "-q", "-f", "third_party/dep")
    with pytest.raises(HarnessError, match=r"submodule problems.*\n  third_party/dep: not initialised"):
        validate_checkout(tree, pin_for(head_commit(tree)))


def test_source_dir_comes_from_pytorch_src(tmp_path):
    assert source_dir({"PYTORCH_SRC": str(tmp_path)}) == tmp_path.resolve()
    assert source_dir({}).name == "pytorch"
