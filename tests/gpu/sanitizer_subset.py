"""A small subset of the depthwise kernels for compute-sanitizer (memcheck, racecheck):
every kernel of DepthwiseConv2d.cu at least once, forward and backward, both layouts."""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overlay_loader  # noqa: E402,F401

CASES = [  # (n, c, m, h, w, kernel, stride, padding, dilation)
    (2, 8, 1, 33, 70, (3, 3), (1, 1), (1, 1), (1, 1)),     # NCHW register-tiled: forward, backward-input, weight
    (5, 2, 1, 32, 32, (7, 7), (1, 1), (3, 3), (1, 1)),     # register-tiled weight gradient: 4 batch entries a block,
                                                           # the last group part-filled, sums reduced in two chunks
    (3, 37, 1, 14, 14, (7, 7), (1, 1), (3, 3), (1, 1)),    # NCHW register-tiled, 16 planes a block, the last part-filled
    (2, 5, 2, 28, 28, (5, 5), (1, 1), (2, 2), (1, 1)),     # NCHW register-tiled, multiplier 2
    (2, 4, 2, 9, 10, (5, 5), (2, 2), (2, 2), (1, 1)),      # multiplier 2, stride 2: NCHW register-tiled forward and
                                                           # weight gradient, stride-2 backward-input; channels_last
                                                           # direct forward and backward-input
    (1, 2, 1, 112, 112, (3, 3), (2, 2), (1, 1), (1, 1)),   # NCHW register-tiled at stride 2: tiles split their rows
    (2, 40, 1, 15, 17, (3, 3), (2, 2), (1, 1), (1, 1)),    # stride-2 backward-input kernels, both layouts (bf16: 5
                                                           # vectors, a part-filled group), odd sizes
    (1, 16, 1, 14, 14, (5, 5), (2, 2), (2, 2), (1, 1)),    # stride-2 backward-input kernels, 5x5, rows of 4-column stores
    (1, 16, 1, 1, 300, (1, 4), (1, 1), (0, 3), (1, 1)),    # conv1d (Mamba): NCHW row kernels, rows at 8 offsets
    (3, 5, 2, 1, 203, (1, 3), (1, 1), (0, 1), (1, 1)),     # row kernels, multiplier 2, odd rows
    (1, 16, 1, 1, 40, (1, 4), (1, 1), (0, 3), (1, 1)),     # a short conv1d row: NCHW tiled, 256-wide tile rows
    (2, 136, 1, 1, 47, (1, 4), (1, 1), (0, 3), (1, 1)),    # channels_last conv1d: column kernels (bf16: 17
                                                           # vectors, a part-filled group), segments past the ends
    (3, 40, 1, 12, 12, (3, 3), (1, 1), (2, 2), (2, 2)),    # dilation (NCHW tiled), channels over one lane group
    (2, 144, 1, 9, 30, (3, 3), (1, 1), (1, 1), (1, 1)),    # channels_last register tiles: a lane row past the plane;
                                                           # register weight gradient, 8 channel lanes for bf16
    (2, 40, 1, 14, 14, (7, 7), (1, 1), (3, 3), (1, 1)),    # channels_last register tiles, 7x7 (bf16: 5 vectors, a
                                                           # part-filled group), blocks under 256 threads
    (1, 16, 1, 23, 30, (5, 5), (2, 2), (0, 0), (1, 1)),    # channels_last register tiles at stride 2, no padding
    (2, 64, 1, 14, 14, (7, 7), (2, 2), (3, 3), (1, 1)),    # channels_last tiled forward, direct backward-input,
                                                           # register weight gradient at stride 2, chunked sums
    (2, 3, 1, 28, 30, (13, 13), (1, 1), (6, 6), (1, 1)),   # large-filter kernels, both layouts: a 1-tap rest,
                                                           # output rows not a whole number of stores
    (1, 10, 2, 7, 7, (9, 9), (1, 1), (4, 4), (1, 1)),      # large-filter kernels, 8 planes a block, the last part-
                                                           # filled; backward sums two planes
]

with torch.backends.cudnn.flags(enabled=False):
    for dtype in (torch.float32, torch.bfloat16):
        for n, c, m, h, w, kernel, stride, padding, dilation in CASES:
            for channels_last in (False, True):
                x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
                if channels_last:
                    x = x.to(memory_format=torch.channels_last)
                x.requires_grad_()
                weight = torch.randn(c * m, 1, *kernel, device="cuda", dtype=dtype, requires_grad=True)
                out = F.conv2d(x, weight, None, stride, padding, dilation, groups=c)
                out.backward(torch.randn_like(out))
torch.cuda.synchronize()
print("sanitizer subset done")
