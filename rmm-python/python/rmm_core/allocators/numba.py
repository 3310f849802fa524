"""Numba's External Memory Management plugin.

    from numba import cuda
    from rmm_core.allocators.numba import RMMNumbaManager
    cuda.set_memory_manager(RMMNumbaManager)

or, before Numba initialises CUDA: ``NUMBA_CUDA_MEMORY_MANAGER=rmm_core.allocators.numba``.
"""

import ctypes

from numba import cuda
from numba.cuda import HostOnlyCUDAMemoryManager, MemoryPointer
from numba.cuda.cudadrv import driver

from rmm_core._lib import Device, DeviceBuffer

try:  # Numba's mixin that exports IPC handles of device allocations.
    from numba.cuda import GetIpcHandleMixin
except ImportError:  # older releases keep it in the driver module
    GetIpcHandleMixin = driver.GetIpcHandleMixin


def _device_pointer(address):
    """The pointer type Numba's MemoryPointer takes: a CUdeviceptr with NVIDIA's bindings,
    a ctypes integer with Numba's own."""
    binding = getattr(driver, "binding", None)
    if getattr(driver, "USE_NV_BINDING", binding is not None) and binding is not None:
        return binding.CUdeviceptr(int(address))
    return ctypes.c_uint64(int(address))


class RMMNumbaManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    """Device memory from rmm_core's current resource of Numba's current device (host and
    pinned memory stay Numba's own). Allocations are ordered on the default stream, which Numba
    uses unless told otherwise."""

    def initialize(self):
        # The resource is set up by rmm_core.reinitialize / set_per_device_resource.
        pass

    def memalloc(self, size):
        device = cuda.get_current_device().id
        buffer = DeviceBuffer(size=size, device=device)
        return MemoryPointer(self.context, _device_pointer(buffer.ptr), size, owner=buffer)

    def get_memory_info(self):
        free, total = Device(cuda.get_current_device().id).memory_info()
        return driver.MemoryInfo(free=free, total=total)

    @property
    def interface_version(self):
        return 1


# What NUMBA_CUDA_MEMORY_MANAGER=rmm_core.allocators.numba looks for.
_numba_memory_manager = RMMNumbaManager
