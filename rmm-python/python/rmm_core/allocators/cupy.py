"""CuPy's allocator: ``cupy.cuda.set_allocator(rmm_core.allocators.cupy.rmm_cupy_allocator)``.

Each allocation comes from the current rmm_core resource of CuPy's current device, ordered on
CuPy's current stream, and goes back to it when CuPy drops the array; an allocation the
resource cannot make raises MemoryError. The allocator is one Rust object (`CupyAllocator`):
it runs for every CuPy array, so it spends no Python frames.
"""

from rmm_core._lib import CupyAllocator

rmm_cupy_allocator = CupyAllocator()

__all__ = ["CupyAllocator", "rmm_cupy_allocator"]
