"""rmm_core: GPU memory resources for Python (the ideas of the RAPIDS Memory Manager, in Rust).

    import rmm_core
    rmm_core.reinitialize(pool_allocator=True, initial_pool_size="2GiB")
    buf = rmm_core.DeviceBuffer.to_device(b"hello")
    assert buf.tobytes() == b"hello"

`rmm_core.mr` has the resources and adaptors; `rmm_core.allocators` plugs a resource into CuPy,
Numba and PyTorch, so that one pool can serve all three in one process.
"""

from rmm_core import mr, statistics
from rmm_core._lib import (
    __version__,
    Device,
    DeviceBuffer,
    Stream,
    get_current_device,
    gpu_available,
    set_current_device,
)
from rmm_core._units import parse_bytes
from rmm_core.mr import get_log_filenames

__all__ = [
    "Device",
    "DeviceBuffer",
    "Stream",
    "get_current_device",
    "get_log_filenames",
    "gpu_available",
    "is_initialized",
    "mr",
    "parse_bytes",
    "reinitialize",
    "set_current_device",
    "statistics",
    "to_device",
]


def to_device(data, stream=None, mr=None, device=None):
    """A new DeviceBuffer holding a copy of `data` (bytes-like), as RMM's `rmm.to_device`."""
    return DeviceBuffer.to_device(data, stream=stream, mr=mr, device=device)


# RMM's top-level names for the CuPy and Numba plugins, loaded when first asked for, so that
# `import rmm_core` needs neither library. `_numba_memory_manager` is what
# NUMBA_CUDA_MEMORY_MANAGER=rmm_core makes Numba look up.
_PLUGINS = {
    "rmm_cupy_allocator": "rmm_core.allocators.cupy",
    "RMMNumbaManager": "rmm_core.allocators.numba",
    "_numba_memory_manager": "rmm_core.allocators.numba",
}


def __getattr__(name):
    if name in _PLUGINS:
        import importlib

        return getattr(importlib.import_module(_PLUGINS[name]), name)
    raise AttributeError(f"module 'rmm_core' has no attribute {name!r}")

_initialized = False


def reinitialize(
    pool_allocator=False,
    managed_memory=False,
    initial_pool_size=None,
    maximum_pool_size=None,
    devices=0,
    logging=False,
    log_file_name=None,
):
    """Sets up each device's memory resource, as RMM's `rmm.reinitialize` does.

    pool_allocator: put a pool in front of the base resource (fast; keeps memory reserved).
    managed_memory: use managed (unified) memory as the base resource.
    initial_pool_size, maximum_pool_size: bytes, as an int or a string such as "4GiB"
        (defaults: half of the free memory, and no maximum).
    devices: an ordinal, a Device, or a list of them.
    logging, log_file_name: log every allocation to a CSV file (default rmm_log.<device>.csv).

    Every resource is built before any is installed: on an error nothing changes. Memory
    already handed out keeps its resource.
    """
    global _initialized
    if isinstance(devices, (list, tuple)):
        devices = list(devices)
    else:
        devices = [devices]
    _lib_reinitialize(
        bool(pool_allocator),
        bool(managed_memory),
        parse_bytes(initial_pool_size),
        parse_bytes(maximum_pool_size),
        devices,
        bool(logging),
        None if log_file_name is None else str(log_file_name),
    )
    mr._forget(devices)
    _initialized = True


def is_initialized():
    """True once `reinitialize` has run in this process."""
    return _initialized


from rmm_core._lib import _reinitialize as _lib_reinitialize  # noqa: E402
