"""Allocators that make CuPy, Numba and PyTorch take their device memory from rmm_core's
current resource of each device (see `rmm_core.mr.set_per_device_resource` and
`rmm_core.reinitialize`). Each module imports its library only when used."""
