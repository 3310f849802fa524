"""CuPy's allocator: ``cupy.cuda.set_allocator(rmm_core.allocators.cupy.rmm_cupy_allocator)``."""

from rmm_core._lib import DeviceBuffer


def rmm_cupy_allocator(nbytes):
    """Allocates `nbytes` on CuPy's current device and stream from that device's rmm_core
    resource; the memory goes back to it when CuPy drops the array."""
    import cupy

    device = cupy.cuda.runtime.getDevice()
    stream = cupy.cuda.get_current_stream().ptr
    buffer = DeviceBuffer(size=nbytes, stream=stream, device=device)
    memory = cupy.cuda.memory.UnownedMemory(buffer.ptr, nbytes, buffer, device_id=device)
    return cupy.cuda.memory.MemoryPointer(memory, 0)
