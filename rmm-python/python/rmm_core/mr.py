"""Memory resources and adaptors, named as in RMM's `rmm.mr`, and each device's current one."""

import os

from rmm_core._lib import (
    AlignedResourceAdaptor,
    ArenaMemoryResource,
    BinningMemoryResource,
    CallbackMemoryResource,
    CudaAsyncMemoryResource,
    CudaAsyncViewMemoryResource,
    CudaMemoryResource,
    DeviceMemoryResource,
    ExpandablePoolMemoryResource,
    FailureCallbackResourceAdaptor,
    FixedSizeMemoryResource,
    LimitingResourceAdaptor,
    LoggingResourceAdaptor,
    ManagedMemoryResource,
    PoolMemoryResource,
    PrefetchResourceAdaptor,
    StatisticsResourceAdaptor,
    SystemMemoryResource,
    TrackingResourceAdaptor,
    get_current_device,
)
from rmm_core._lib import _device_log_path
from rmm_core._lib import get_per_device_resource as _get_per_device_resource
from rmm_core._lib import set_per_device_resource as _set_per_device_resource

__all__ = [
    "AlignedResourceAdaptor",
    "ArenaMemoryResource",
    "BinningMemoryResource",
    "CallbackMemoryResource",
    "CudaAsyncMemoryResource",
    "CudaAsyncViewMemoryResource",
    "CudaMemoryResource",
    "DeviceMemoryResource",
    "ExpandablePoolMemoryResource",
    "FailureCallbackResourceAdaptor",
    "FixedSizeMemoryResource",
    "LimitingResourceAdaptor",
    "LoggingResourceAdaptor",
    "ManagedMemoryResource",
    "PoolMemoryResource",
    "PrefetchResourceAdaptor",
    "StatisticsResourceAdaptor",
    "SystemMemoryResource",
    "TrackingResourceAdaptor",
    "available_device_memory",
    "disable_logging",
    "enable_logging",
    "get_current_device_resource",
    "get_log_filenames",
    "get_per_device_resource",
    "set_current_device_resource",
    "set_per_device_resource",
]

# The Python objects set per device, so that `get_*` returns the very object that was set (and
# its methods: a pool's size, an adaptor's counters). Keyed by the Device.
_set_objects = {}


def _device(device):
    from rmm_core._lib import Device

    if device is None:
        return get_current_device()
    if isinstance(device, Device):
        return device
    return Device(device)


def set_per_device_resource(device, mr):
    """Makes `mr` the resource of `device` (an ordinal or Device): used by every allocation on
    that device that names none, including CuPy's, Numba's and PyTorch's through
    `rmm_core.allocators`. Memory already handed out keeps its resource."""
    device = _device(device)
    _set_per_device_resource(device, mr)
    _set_objects[device] = mr


def get_per_device_resource(device=None):
    """The resource of `device` (default: the current device)."""
    device = _device(device)
    mr = _set_objects.get(device)
    return mr if mr is not None else _get_per_device_resource(device)


def set_current_device_resource(mr):
    """Makes `mr` the resource of the device it belongs to (RMM: of the current device)."""
    set_per_device_resource(mr.device, mr)


def get_current_device_resource():
    """The resource of the current device."""
    return get_per_device_resource(None)


def _forget(devices):
    """After `reinitialize`: the Rust side holds the new resources."""
    for device in devices:
        _set_objects.pop(_device(device), None)


def available_device_memory():
    """`(free, total)` bytes of the current device's memory."""
    return get_current_device().memory_info()


def enable_logging(log_file_name=None):
    """Logs every allocation and free of each device that has a resource set, and of the current
    device, to a CSV file of its own (RMM's `enable_logging`): its resource is wrapped in a
    `LoggingResourceAdaptor` writing `log_file_name` (default: $RMM_LOG_FILE) with `.dev<N>`
    before the extension. A device already logging is left as it is."""
    name = log_file_name if log_file_name is not None else os.environ.get("RMM_LOG_FILE")
    if not name:
        raise ValueError("enable_logging needs log_file_name (or RMM_LOG_FILE in the environment)")
    for device in {*_set_objects, get_current_device()}:
        current = get_per_device_resource(device)
        if not isinstance(current, LoggingResourceAdaptor):
            logged = LoggingResourceAdaptor(current, str(_device_log_path(str(name), device)))
            set_per_device_resource(device, logged)


def disable_logging():
    """Ends what `enable_logging` started: each logging device gets back the resource the
    adaptor wraps, its log flushed."""
    for device, current in list(_set_objects.items()):
        if isinstance(current, LoggingResourceAdaptor):
            current.flush()
            set_per_device_resource(device, current.upstream_mr)


def get_log_filenames():
    """Each device's log file (None where its resource does not log), by device: the CUDA
    ordinal, or the Device itself for a simulated one."""
    return {
        (device.ordinal if device.ordinal is not None else device): (
            mr.get_file_name() if isinstance(mr, LoggingResourceAdaptor) else None
        )
        for device, mr in _set_objects.items()
    }
