"""The allocator a PyTorch benchmark runs under, chosen by name (one per process: PyTorch can
switch only before its first allocation)."""

import torch


def use_allocator(name, initial_pool_size=0):
    """`torch`: PyTorch's caching allocator. `pool` / `expandable`: rmm_core's pool or
    expandable pool of `initial_pool_size` bytes on device 0, through
    `rmm_core.allocators.torch`. Returns the rmm_core pool (None for PyTorch's)."""
    if name == "torch":
        return None
    from rmm_core import mr

    if name == "pool":
        pool = mr.PoolMemoryResource(mr.CudaMemoryResource(0), initial_pool_size=initial_pool_size)
    elif name == "expandable":
        pool = mr.ExpandablePoolMemoryResource(initial_pool_size=initial_pool_size, device=0)
    else:
        raise SystemExit(f"unknown allocator {name!r} (torch, pool or expandable)")
    mr.set_per_device_resource(0, pool)
    from rmm_core.allocators.torch import rmm_torch_allocator

    torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
    return pool
