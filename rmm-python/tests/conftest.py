"""Shared fixtures: a simulated device (CI has no GPU), and the GPU gate of the framework tests:
they skip without a GPU, and fail instead under REQUIRE_GPU=1 (as the Rust GPU tests do)."""

import os

import pytest

import rmm_core


@pytest.fixture
def sim():
    """A fresh simulated device of 1 GiB, current on this thread for the test."""
    device = rmm_core.Device.simulated(1 << 30)
    rmm_core.set_current_device(device)
    yield device
    rmm_core.set_current_device(None)  # back to CUDA's current device for the next test


def require_gpu():
    if rmm_core.gpu_available:
        return
    if os.environ.get("REQUIRE_GPU") == "1":
        pytest.fail("REQUIRE_GPU=1 but no GPU is usable")
    pytest.skip("no GPU: the CuPy, Numba and PyTorch tests need one")
