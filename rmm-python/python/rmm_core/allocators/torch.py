"""PyTorch's allocator:

    import torch
    from rmm_core.allocators.torch import rmm_torch_allocator
    torch.cuda.memory.change_current_allocator(rmm_torch_allocator)

before PyTorch allocates any CUDA memory. Allocations come from rmm_core's current resource of
each device, on PyTorch's current stream; an allocation that fails raises
torch.OutOfMemoryError. The entry points are C functions of rmm_core's own library
(`rmm_core_torch_alloc` / `rmm_core_torch_free`), so one pool serves PyTorch, CuPy and Numba.
"""

import torch

from rmm_core import _lib

LIBRARY_PATH = _lib.__file__
ALLOC_FUNCTION = "rmm_core_torch_alloc"
FREE_FUNCTION = "rmm_core_torch_free"

_lib._set_torch_oom_type(getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError)

rmm_torch_allocator = torch.cuda.memory.CUDAPluggableAllocator(
    LIBRARY_PATH, ALLOC_FUNCTION, FREE_FUNCTION
)


def live_allocations():
    """How many PyTorch allocations are alive in rmm_core (0 once every tensor is gone)."""
    return _lib._torch_live_allocations()
