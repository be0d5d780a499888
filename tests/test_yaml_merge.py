"""Overrides merge into native_functions.yaml / derivatives.yaml by operator name,
touching no byte of the entries they do not name."""

import difflib
import textwrap

import pytest
import yaml

from build_scripts.errors import HarnessError
from build_scripts.patchset import PatchSet
from build_scripts.yaml_merge import (
    DERIVATIVES, NATIVE_FUNCTIONS, check_unique, merge_overrides, operator_key, parse_override_file,
)
from tests.fake_pytorch import DERIVATIVES as UPSTREAM_DERIVATIVES
from tests.fake_pytorch import NATIVE_FUNCTIONS as UPSTREAM
from tests.fake_pytorch import write_patch_set


def overrides_from(tmp_path, text, flavour=NATIVE_FUNCTIONS, name="o.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return parse_override_file(path, flavour, name)


def changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:1] in "+-"]


def test_operator_key():
    assert operator_key("add.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)") == "add.out"
    assert operator_key("convolution(Tensor input) -> Tensor") == "convolution"


def test_replace_changes_only_that_entry(tmp_path):
    overrides = overrides_from(tmp_path, """\
        replace:
          - func: _conv_depthwise2d(Tensor self, Tensor weight, SymInt[2] kernel_size, Tensor? bias, SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation) -> Tensor
            python_module: nn
            dispatch:
              CUDA: dwconv_depthwise2d_cuda
        """)
    merged = merge_overrides(UPSTREAM, overrides, NATIVE_FUNCTIONS, "upstream").text
    assert changed_lines(UPSTREAM, merged) == [
        "-     CUDA: conv_depthwise2d_cuda",
        "+     CUDA: dwconv_depthwise2d_cuda",
    ]


def test_add_appends_and_delete_removes_entry_with_its_comment(tmp_path):
    overrides = overrides_from(tmp_path, """\
        add:
          - func: _conv_depthwise2d_backward(Tensor grad_output, Tensor self, Tensor weight, SymInt[2] kernel_size, SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation, bool[2] output_mask) -> (Tensor grad_input, Tensor grad_weight)
            # comments inside an entry travel with it
            dispatch:
              CUDA: conv_depthwise2d_backward_cuda
        delete:
          - _conv_depthwise2d.out
        """)
    merged = merge_overrides(UPSTREAM, overrides, NATIVE_FUNCTIONS, "upstream").text
    deleted_block = UPSTREAM[UPSTREAM.index("# Only exists"):UPSTREAM.index("- func: _conv_depthwise2d(")]
    assert deleted_block not in merged
    assert merged.startswith(UPSTREAM[:UPSTREAM.index("# Only exists")])
    assert merged.endswith(
        "\n- func: _conv_depthwise2d_backward(Tensor grad_output, Tensor self, Tensor weight, SymInt[2] kernel_size, "
        "SymInt[2] stride, SymInt[2] padding, SymInt[2] dilation, bool[2] output_mask) -> "
        "(Tensor grad_input, Tensor grad_weight)\n"
        "  # comments inside an entry travel with it\n"
        "  dispatch:\n    CUDA: conv_depthwise2d_backward_cuda\n"
    )
    keys = [operator_key(e["func"]) for e in yaml.safe_load(merged)]
    assert keys == ["_cast_Byte", "convolution", "convolution_backward", "_conv_depthwise2d",
                    "conv_depthwise3d", "_conv_depthwise2d_backward"]


def test_no_overrides_is_byte_identical():
    assert merge_overrides(UPSTREAM, [], NATIVE_FUNCTIONS, "upstream").text == UPSTREAM


def test_derivatives_merge_by_name(tmp_path):
    overrides = overrides_from(tmp_path, """\
        replace:
          - name: conv_depthwise3d(Tensor self, Tensor weight, SymInt[3] kernel_size, Tensor? bias, SymInt[3] stride, SymInt[3] padding, SymInt[3] dilation) -> Tensor
            self, weight, bias: "my_formula(grad)"
            result: my_jvp(self_t)
        """, flavour=DERIVATIVES)
    merged = merge_overrides(UPSTREAM_DERIVATIVES, overrides, DERIVATIVES, "upstream").text
    entries = {operator_key(e["name"]): e for e in yaml.safe_load(merged)}
    assert entries["conv_depthwise3d"]["result"] == "my_jvp(self_t)"
    assert merged.count("\n") == UPSTREAM_DERIVATIVES.count("\n") + 1
    assert merged.startswith(UPSTREAM_DERIVATIVES[:UPSTREAM_DERIVATIVES.index("- name: conv_depthwise3d")])


def test_unknown_operator_is_an_error_with_a_suggestion(tmp_path):
    overrides = overrides_from(tmp_path, """\
        replace:
          - func: _conv_depthwise2dd(Tensor self) -> Tensor
        """)
    with pytest.raises(HarnessError, match=r"o.yaml:2: replace names operator '_conv_depthwise2dd', which the "
                                           r"pinned native_functions.yaml does not have \(did you mean _conv_depthwise2d"):
        merge_overrides(UPSTREAM, overrides, NATIVE_FUNCTIONS, "upstream")


def test_delete_of_unknown_operator_is_an_error(tmp_path):
    overrides = overrides_from(tmp_path, "delete:\n  - no_such_op.out\n")
    with pytest.raises(HarnessError, match="delete names operator 'no_such_op.out'"):
        merge_overrides(UPSTREAM, overrides, NATIVE_FUNCTIONS, "upstream")


def test_add_of_existing_operator_is_an_error(tmp_path):
    overrides = overrides_from(tmp_path, """\
        add:
          - func: convolution(Tensor input) -> Tensor
        """)
    with pytest.raises(HarnessError, match="add names 'convolution', which the pinned native_functions.yaml already has; use replace"):
        merge_overrides(UPSTREAM, overrides, NATIVE_FUNCTIONS, "upstream")


def test_same_operator_twice_is_an_error(tmp_path):
    first = overrides_from(tmp_path, "delete:\n  - convolution\n", name="a.yaml")
    second = overrides_from(tmp_path, "replace:\n  - func: convolution(Tensor input) -> Tensor\n", name="b.yaml")
    with pytest.raises(HarnessError, match=r"'convolution' .* overridden twice: delete at a.yaml:2 and replace at b.yaml:2"):
        check_unique(first + second, NATIVE_FUNCTIONS)


def test_same_operator_twice_across_series_items_is_refused_at_load(tmp_path):
    series = (
        "override native_functions/a.yaml | one | upstream: no\n"
        "override native_functions/b.yaml | two | upstream: no\n"
    )
    dirs = write_patch_set(tmp_path, series=series, files={
        "native_functions_overrides/native_functions/a.yaml": "delete:\n  - convolution\n",
        "native_functions_overrides/native_functions/b.yaml": "delete:\n  - convolution\n",
    }, defaults=False)
    with pytest.raises(HarnessError, match="overridden twice"):
        PatchSet.load(*dirs)


@pytest.mark.parametrize("text, message", [
    ("replace:\n  - func: [unclosed\n", r"o.yaml:\d+:\d+: malformed YAML"),
    ("replace:\n  - python_module: nn\n", r"o.yaml:2: an entry of native_functions.yaml needs a 'func:'"),
    ("rename:\n  - a\n", r"o.yaml:1: unknown section 'rename'"),
    ("- func: a() -> ()\n", r"expected a mapping with sections replace, add, delete"),
    ("replace: []\n", r"section 'replace' must be a non-empty list"),
    ("replace:\n  - func: a() -> ()\n    dispatch: {}\n    dispatch: {}\n", r"o.yaml:4: duplicate key 'dispatch'"),
    ("", r"the override file is empty"),
])
def test_malformed_override_files(tmp_path, text, message):
    with pytest.raises(HarnessError, match=message):
        overrides_from(tmp_path, text)


def test_malformed_upstream_is_reported():
    with pytest.raises(HarnessError, match=r"upstream:\d+:\d+: malformed YAML"):
        merge_overrides("- func: a(\n  x: [\n", [], NATIVE_FUNCTIONS, "upstream")
