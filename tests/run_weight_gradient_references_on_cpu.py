"""Run in the pinned torch's environment (no GPU): the float64 references of
tests/gpu/weight_gradient_references.py against torch's own, and its element-by-element
match against values it must accept and values it must refuse. Prints one JSON line of findings
for tests/test_weight_gradient_references.py:

  finite {case: bool}       with finite data, both references equal torch.nn.grad.conv2d_weight
  zero_padded {case: bool}  with an inf and a NaN in grad_output, zero_padded has the NaNs and
                            infinities of torch's float64 CPU weight gradient, and its finite values
  in_bounds {case: bool}    ... in_bounds equals a plain loop over the terms inside the plane
  padding_met {case: bool}  ... the two references differ (the inf's window reaches the padding)
  accepts {case: bool}      matches_either on values it must accept (True) or refuse (False)
"""

import itertools
import json
import math
import sys
import warnings
from pathlib import Path

warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))

import torch  # noqa: E402

from weight_gradient_references import matches_either, weight_gradients, with_inf_and_nan  # noqa: E402

# (label, n, c, multiplier, (h, w), kernel, stride, padding, dilation)
CASES = [
    ("3x3 padding 1", 2, 3, 1, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1)),
    ("5x5 stride 2, multiplier 2", 2, 2, 2, (12, 13), (5, 5), (2, 2), (2, 2), (1, 1)),
    ("3x3 dilation 2, padding 1 by 2", 1, 4, 1, (10, 8), (3, 3), (1, 1), (1, 2), (2, 2)),
    ("1x4 padding 3 (conv1d)", 2, 3, 1, (1, 20), (1, 4), (1, 1), (0, 3), (1, 1)),
]

# Its four channels give every kind of element: NaN (channel 0), +inf and -inf (1), +inf alone (2:
# inf in both references where the window stays inside), finite (3).
ACCEPTS_CASE = "5x5 stride 2, multiplier 2"


def same_values(a, b):
    return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.isinf(), b.isinf())
                and torch.equal(a[a.isinf()], b[b.isinf()])
                and torch.allclose(a[a.isfinite()], b[b.isfinite()], rtol=1e-12, atol=1e-12))


def plain_in_bounds(go, x, kernel, stride, padding, dilation):
    m = go.shape[1] // x.shape[1]
    out = torch.zeros(go.shape[1], 1, *kernel, dtype=torch.float64)
    for co, a, b in itertools.product(range(go.shape[1]), range(kernel[0]), range(kernel[1])):
        total = 0.0
        for i, y, z in itertools.product(range(go.shape[0]), range(go.shape[2]), range(go.shape[3])):
            sy, sx = y * stride[0] - padding[0] + a * dilation[0], z * stride[1] - padding[1] + b * dilation[1]
            if 0 <= sy < x.shape[2] and 0 <= sx < x.shape[3]:
                total += float(go[i, co, y, z]) * float(x[i, co // m, sy, sx])
        out[co, 0, a, b] = total
    return out


def main():
    torch.manual_seed(0)
    found = {"finite": {}, "zero_padded": {}, "in_bounds": {}, "padding_met": {}, "accepts": {}}
    for label, n, c, m, size, kernel, stride, padding, dilation in CASES:
        x = torch.randn(n, c, *size, dtype=torch.float64)
        w = torch.randn(c * m, 1, *kernel, dtype=torch.float64)
        go = torch.randn_like(torch.nn.functional.conv2d(x, w, None, stride, padding, dilation, groups=c))
        args = (kernel, stride, padding, dilation)
        torch_weight_gradient = lambda g: torch.nn.grad.conv2d_weight(x, w.shape, g, stride, padding, dilation,
                                                                       groups=c)
        in_bounds, zero_padded = weight_gradients(go, x, *args)
        found["finite"][label] = (same_values(in_bounds, torch_weight_gradient(go))
                                  and same_values(zero_padded, torch_weight_gradient(go)))
        go = with_inf_and_nan(go)
        in_bounds, zero_padded = weight_gradients(go, x, *args)
        found["zero_padded"][label] = same_values(zero_padded, torch_weight_gradient(go))
        found["in_bounds"][label] = same_values(in_bounds, plain_in_bounds(go, x, *args))
        found["padding_met"][label] = not same_values(in_bounds, zero_padded)
        if label == ACCEPTS_CASE:
            refs = in_bounds, zero_padded
    mixed = torch.where(torch.rand(refs[0].shape) < 0.5, *refs)
    nan_where_finite = refs[0].clone()
    nan_where_finite[refs[0].isfinite() & refs[1].isfinite()] = math.nan
    both_inf = refs[0].isinf() & refs[1].isinf()
    finite_where_inf, flipped_inf = refs[0].clone(), refs[0].clone()
    finite_where_inf[both_inf] = 1.0
    flipped_inf[both_inf] = -flipped_inf[both_inf]
    off = refs[0] + 1e-3 * (1 + refs[0].abs())
    for name, values, want in (("in_bounds", refs[0], True), ("zero_padded", refs[1], True), ("a mix", mixed, True),
                               ("NaN where both are finite", nan_where_finite, False),
                               ("finite where both are inf", finite_where_inf, False),
                               ("an inf of the other sign", flipped_inf, False), ("1e-3 off", off, False)):
        found["accepts"][name] = matches_either(values.float(), refs, 1e-5, 1e-5) == want
    found["accepts"]["every kind of element met"] = bool(
        both_inf.any() and (refs[0].isfinite() & refs[1].isnan()).any() and (refs[0].isfinite() & refs[1].isfinite()).any())
    print(json.dumps(found))


if __name__ == "__main__":
    main()
