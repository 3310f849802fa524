"""RMM's Python guide, run as written with `import rmm_core as rmm`: the DeviceBuffer and
MemoryResource examples on a simulated device (CI has no GPU), and the whole guide, CuPy and
Numba included (`NUMBA_CUDA_MEMORY_MANAGER=rmm_core` too), on a GPU in fresh interpreters."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import rmm_core
import rmm_core as rmm
from conftest import require_gpu


def test_device_buffers_as_the_guide_makes_them(sim):
    buf = rmm.DeviceBuffer(size=100)
    assert buf.size == 100
    assert isinstance(buf.ptr, int) and buf.ptr != 0
    a = np.array([1, 2, 3], dtype="float64")
    buf = rmm.to_device(a.tobytes())
    assert buf.size == 24
    assert np.array_equal(np.frombuffer(buf.tobytes()), np.array([1.0, 2.0, 3.0]))


def test_memory_resources_as_the_guide_sets_them(sim):
    rmm.mr.set_current_device_resource(rmm.mr.ManagedMemoryResource())
    assert isinstance(rmm.mr.get_current_device_resource(), rmm.mr.ManagedMemoryResource)
    # The guide's pools (1 GiB initial, 4 GiB maximum), scaled to the simulated device.
    for upstream in (rmm.mr.CudaMemoryResource(), rmm.mr.ManagedMemoryResource()):
        pool = rmm.mr.PoolMemoryResource(
            upstream=upstream,
            initial_pool_size=2**24,
            maximum_pool_size=2**26,
        )
        rmm.mr.set_current_device_resource(pool)
        buf = rmm.DeviceBuffer(size=1000)
        assert pool.pool_size() == 2**24 and buf.size == 1000
        del buf
    # RMM's own keyword still works; both, or neither, is refused by name.
    rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=2**20)
    rmm.mr.PoolMemoryResource(upstream_mr=rmm.mr.CudaMemoryResource(), initial_pool_size=2**20)
    with pytest.raises(TypeError, match="not both"):
        rmm.mr.PoolMemoryResource(
            upstream_mr=rmm.mr.CudaMemoryResource(), upstream=rmm.mr.CudaMemoryResource()
        )
    with pytest.raises(TypeError, match="upstream"):
        rmm.mr.PoolMemoryResource(initial_pool_size=2**20)
    assert rmm.mr.FixedSizeMemoryResource and rmm.mr.BinningMemoryResource


def test_the_plugins_load_only_when_asked_for():
    # CI has neither CuPy nor Numba: importing rmm_core must not need them; asking for their
    # plugins loads them (the GPU tests below use both). In a fresh interpreter: other test
    # modules import scanpy, which may load both.
    fresh = "import sys, rmm_core; assert 'cupy' not in sys.modules and 'numba' not in sys.modules"
    subprocess.run([sys.executable, "-c", fresh], check=True)
    assert rmm.to_device is rmm_core.to_device
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        rmm.nothing_here


GUIDE = """
    import rmm_core as rmm
    import numpy as np
    buf = rmm.DeviceBuffer(size=100)
    assert buf.size == 100 and buf.ptr != 0
    a = np.array([1, 2, 3], dtype='float64')
    buf = rmm.to_device(a.tobytes())
    assert buf.size == 24
    assert (np.frombuffer(buf.tobytes()) == a).all()
    rmm.mr.set_current_device_resource(rmm.mr.ManagedMemoryResource())
    pool = rmm.mr.PoolMemoryResource(
        upstream=rmm.mr.CudaMemoryResource(),
        initial_pool_size=2**30,
        maximum_pool_size=2**32
    )
    rmm.mr.set_current_device_resource(pool)
    pool = rmm.mr.PoolMemoryResource(
        upstream=rmm.mr.ManagedMemoryResource(),
        initial_pool_size=2**30,
        maximum_pool_size=2**32
    )
    rmm.mr.set_current_device_resource(pool)
    import cupy
    cupy.cuda.set_allocator(rmm.rmm_cupy_allocator)
    x = cupy.arange(1000, dtype=cupy.float32)
    assert float(x.sum()) == 499500.0
    from numba import cuda
    cuda.set_memory_manager(rmm.RMMNumbaManager)
    d = cuda.to_device(np.arange(10.0))
    assert (d.copy_to_host() == np.arange(10.0)).all()
    print("guide ok", pool.pool_size())
"""

NUMBA_BY_ENV = """
    import numpy as np
    from numba import cuda
    d = cuda.to_device(np.arange(10.0))
    assert (d.copy_to_host() == np.arange(10.0)).all()
    print(type(cuda.current_context().memory_manager).__name__)
"""


def run(code, **env):
    require_gpu()
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        timeout=300,
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout.strip().splitlines()[-1]


def test_the_whole_guide_on_a_gpu():
    assert run(GUIDE).startswith("guide ok")


def test_numba_takes_the_manager_from_the_environment():
    assert run(NUMBA_BY_ENV, NUMBA_CUDA_MEMORY_MANAGER="rmm_core") == "RMMNumbaManager"
