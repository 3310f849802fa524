"""Memory resources and adaptors, named as in RMM's `rmm.mr`, and each device's current one."""

from rmm_core._lib import (
    AlignedResourceAdaptor,
    ArenaMemoryResource,
    BinningMemoryResource,
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
from rmm_core._lib import get_per_device_resource as _get_per_device_resource
from rmm_core._lib import set_per_device_resource as _set_per_device_resource

__all__ = [
    "AlignedResourceAdaptor",
    "ArenaMemoryResource",
    "BinningMemoryResource",
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
    "get_current_device_resource",
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
