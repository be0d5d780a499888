"""The two float64 weight gradients of a depthwise convolution whose grad_output holds an inf or a NaN.

Where such an output's window reaches into the padding, the weight gradient's sum has a term
grad_output x 0. torch's float64 CPU convolution multiplies the padding's zeros in (0 x inf is NaN);
upstream's CUDA kernel leaves those terms out (the sum stays finite, or inf). Our tiled kernels
multiply the zeros they staged and our direct ones skip them, so a kernel may give either, element
by element; with finite data the two are one.
"""

import math

import torch


def with_inf_and_nan(grad_output):
    """A copy of grad_output (N, C, H, W) with +inf at each plane's first output, -inf at every
    other plane's last and NaN in the first plane's first column, in all but the last channel (which
    stays finite): outputs whose windows reach into the padding."""
    grad_output = grad_output.clone()
    grad_output[:, :-1, 0, 0] = math.inf
    grad_output[:, 1:-1:2, -1, -1] = -math.inf
    grad_output[0, 0, grad_output.shape[2] // 2, 0] = math.nan
    return grad_output


def weight_gradients(grad_output, x, kernel, stride, padding, dilation):
    """(in_bounds, zero_padded): the weight gradient of the depthwise convolution of x (N, C, H, W),
    with C_out / C filters a channel, as float64 on the CPU, with the padding's terms left out and
    kept."""
    go = grad_output.detach().double().cpu()
    src = x.detach().double().cpu().repeat_interleave(go.shape[1] // x.shape[1], dim=1)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    padded = torch.nn.functional.pad(src, (pw, pw, ph, ph))
    inside_plane = torch.nn.functional.pad(torch.ones(src.shape[2:], dtype=torch.bool), (pw, pw, ph, ph))
    oh, ow = go.shape[2:]
    in_bounds = torch.zeros(go.shape[1], 1, kh, kw, dtype=torch.float64)
    zero_padded = torch.zeros_like(in_bounds)
    for a in range(kh):
        rows = slice(a * dh, a * dh + sh * (oh - 1) + 1, sh)
        for b in range(kw):
            cols = slice(b * dw, b * dw + sw * (ow - 1) + 1, sw)
            products = go * padded[:, :, rows, cols]  # the padding's zeros in
            zero_padded[:, 0, a, b] = products.sum((0, 2, 3))
            in_bounds[:, 0, a, b] = torch.where(inside_plane[rows, cols], products, 0.0).sum((0, 2, 3))
    return in_bounds, zero_padded


def matches(got, want, atol, rtol):
    """Element by element: the same NaN, the same inf, or finite and within atol + rtol * |want|."""
    got = got.double().cpu()
    both_finite = got.isfinite() & want.isfinite()
    close = (got - want).abs() <= atol + rtol * want.abs()
    return (got.isnan() & want.isnan()) | (got.isinf() & (got == want)) | (both_finite & close)


def matches_either(got, references, atol, rtol):
    """Whether every element of got matches one of the references (weight_gradients' pair)."""
    accepted = torch.zeros(got.shape, dtype=torch.bool)
    for want in references:
        accepted |= matches(got, want, atol, rtol)
    return bool(accepted.all())
