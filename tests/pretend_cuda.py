"""In the pinned torch on a machine without a GPU: torch.cuda reports one sm_90 device and the
device-type test base sets up without touching it, so that tests/gpu imports, decorates and
instantiates as on the GPU machine (nothing reaches a device)."""

import torch
import torch.utils._triton


def pretend_one_cuda_device():
    """Call before anything imports torch.testing._internal (which reads torch.cuda on import)."""
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_capability = lambda *args, **kwargs: (9, 0)
    torch.cuda.get_device_name = lambda *args, **kwargs: "no GPU: a pretend device"
    torch.utils._triton.has_triton = lambda: False
    from torch.testing._internal import common_device_type

    def set_up_without_a_device(cls):
        cls.primary_device = "cuda:0"
        cls.no_magma = True
        cls.no_cudnn = False
        cls.cudnn_version = torch.backends.cudnn.version()

    common_device_type.CUDATestBase.setUpClass = classmethod(set_up_without_a_device)
