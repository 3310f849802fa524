"""CuPy, Numba and PyTorch on rmm_core's resources (GPU only: skipped without one, failed under
REQUIRE_GPU=1). Each case runs in a fresh interpreter, because an allocator must be installed
before its library first allocates, and results are compared with the library's own allocator."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import require_gpu


def run(code, *args):
    """Runs `code` in a new interpreter; returns the JSON it prints last."""
    require_gpu()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


CUPY_WORK = """
    import json, sys
    import cupy as cp
    use_ours = sys.argv[1] == "ours"
    if use_ours:
        import rmm_core
        from rmm_core import mr
        from rmm_core.allocators.cupy import rmm_cupy_allocator
        stats = mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(mr.CudaMemoryResource(0), initial_pool_size=1 << 28))
        mr.set_per_device_resource(0, stats)
        cp.cuda.set_allocator(rmm_cupy_allocator)
    rng = cp.random.default_rng(42)
    a = rng.standard_normal((512, 300), dtype=cp.float64)
    b = rng.standard_normal((300, 200), dtype=cp.float64)
    out = {}
    with cp.cuda.Stream(non_blocking=True):  # allocations on another stream too
        c = a @ b
        idx = cp.argsort(c[:, 0])
        d = cp.cumsum(c[idx] ** 2, axis=0)
        out["sum"] = float(d.sum())
        out["first"] = c[idx][:3, :3].get().tolist()
        out["unique"] = int(cp.unique(cp.round(c)).size)
    if use_ours:
        out["allocations"] = stats.allocation_counts["total_count"]
        out["fast_stream"] = rmm_cupy_allocator.reads_stream_in_c
    print(json.dumps(out))
"""


def test_cupy_results_equal_cupys_own_allocator():
    ours = run(CUPY_WORK, "ours")
    theirs = run(CUPY_WORK, "cupy")
    assert ours.pop("allocations") > 5
    print("CuPy's current stream read in C:", ours.pop("fast_stream"))
    assert ours == theirs


def test_cupy_out_of_memory_is_memory_error_and_not_a_crash():
    out = run(
        """
        import json
        import cupy as cp
        from rmm_core import mr
        from rmm_core.allocators.cupy import rmm_cupy_allocator
        mr.set_per_device_resource(0, mr.LimitingResourceAdaptor(mr.CudaMemoryResource(0), 1 << 30))
        cp.cuda.set_allocator(rmm_cupy_allocator)
        small = cp.ones(1000)
        try:
            cp.empty(2 << 30, dtype=cp.uint8)
            raised = None
        except MemoryError as e:
            raised = [type(e).__name__, str(e)]
        print(json.dumps({"raised": raised, "after": float((cp.ones(1000) + small).sum())}))
        """
    )
    assert out["raised"] is not None and "limit" in out["raised"][1].lower(), out
    assert out["after"] == 2000.0


NUMBA_WORK = """
    import json, os, sys
    import numpy as np
    if not hasattr(np, "row_stack"):  # numba-cuda 0.2x still names it; NumPy 2.5 removed it
        np.row_stack = np.vstack
    use_ours = sys.argv[1] == "ours"
    if use_ours:
        os.environ["NUMBA_CUDA_MEMORY_MANAGER"] = "rmm_core.allocators.numba"
        from rmm_core import mr
        stats = mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(mr.CudaMemoryResource(0), initial_pool_size=1 << 28))
        mr.set_per_device_resource(0, stats)
    from numba import cuda

    @cuda.jit
    def axpy(out, a, x, y):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + y[i]

    x = np.arange(100_000, dtype=np.float32)
    y = np.linspace(0, 1, 100_000, dtype=np.float32)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    dout = cuda.device_array_like(x)
    axpy[(x.size + 255) // 256, 256](dout, np.float32(2.5), dx, dy)
    out = {"checksum": float(dout.copy_to_host().astype(np.float64).sum())}
    out["memory_info_total"] = cuda.current_context().get_memory_info().total > 0
    if use_ours:
        assert type(cuda.current_context().memory_manager).__name__ == "RMMNumbaManager"
        out["allocations"] = stats.allocation_counts["total_count"]
        del dx, dy, dout
        import gc; gc.collect()
        out["left"] = stats.allocation_counts["current_bytes"]
    print(json.dumps(out))
"""


def test_numba_results_equal_numbas_own_allocator():
    ours = run(NUMBA_WORK, "ours")
    theirs = run(NUMBA_WORK, "numba")
    assert ours.pop("allocations") >= 3
    assert ours.pop("left") == 0
    assert ours == theirs


TORCH_TRAINING = """
    import json, sys
    import torch
    use_ours = sys.argv[1] == "ours"
    if use_ours:
        from rmm_core import mr
        stats = mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(mr.CudaMemoryResource(0), initial_pool_size=1 << 28))
        mr.set_per_device_resource(0, stats)
        from rmm_core.allocators.torch import rmm_torch_allocator, live_allocations
        torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(512, 64, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    out = {"loss": loss.item(), "weights": float(model[0].weight.double().sum())}
    if use_ours:
        out["allocations"] = stats.allocation_counts["total_count"]
        out["live"] = live_allocations() > 0
    print(json.dumps(out))
"""


def test_torch_training_equals_torchs_own_allocator():
    ours = run(TORCH_TRAINING, "ours")
    theirs = run(TORCH_TRAINING, "torch")
    assert ours.pop("allocations") > 20 and ours.pop("live")
    assert ours == pytest.approx(theirs, rel=1e-6)


def test_torch_out_of_memory_is_torchs_error_and_not_a_crash():
    out = run(
        """
        import json
        import torch
        from rmm_core import mr
        mr.set_per_device_resource(0, mr.LimitingResourceAdaptor(mr.PoolMemoryResource(mr.CudaMemoryResource(0), initial_pool_size=1 << 28), 1 << 30))
        from rmm_core.allocators.torch import rmm_torch_allocator
        torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
        small = torch.ones(1000, device="cuda")
        try:
            torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
            raised = None
        except torch.OutOfMemoryError as e:
            raised = ["OutOfMemoryError", str(e)]
        except Exception as e:
            raised = [type(e).__name__, str(e)]
        after = float((torch.ones(1000, device="cuda") + small).sum())
        print(json.dumps({"raised": raised, "after": after}))
        """
    )
    assert out["raised"][0] == "OutOfMemoryError", out
    assert "out of memory" in out["raised"][1]
    assert out["after"] == 2000.0


def test_one_pool_serves_cupy_numba_and_torch_in_one_process():
    out = run(
        """
        import json, os
        os.environ["NUMBA_CUDA_MEMORY_MANAGER"] = "rmm_core.allocators.numba"
        import rmm_core
        from rmm_core import mr
        pool = mr.PoolMemoryResource(mr.CudaMemoryResource(0), initial_pool_size=1 << 28)
        stats = mr.StatisticsResourceAdaptor(pool)
        mr.set_per_device_resource(0, stats)
        import torch, cupy as cp
        from numba import cuda
        from rmm_core.allocators.torch import rmm_torch_allocator
        from rmm_core.allocators.cupy import rmm_cupy_allocator
        torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
        cp.cuda.set_allocator(rmm_cupy_allocator)
        counts = {}
        t = torch.arange(1000, device="cuda", dtype=torch.float32)
        counts["torch"] = stats.allocation_counts["current_count"]
        c = cp.asarray(t) * 2  # zero-copy from torch, result from the pool
        counts["cupy"] = stats.allocation_counts["current_count"]
        n = cuda.to_device(c.get())
        counts["numba"] = stats.allocation_counts["current_count"]
        b = rmm_core.DeviceBuffer.to_device(b"shared")
        total = float(cp.asarray(n).sum()) + float(torch.as_tensor(c, device="cuda").sum())
        print(json.dumps({"counts": counts, "total": total, "pool": pool.pool_size(), "buffer": b.tobytes().decode()}))
        """
    )
    counts = out["counts"]
    assert 0 < counts["torch"] < counts["cupy"] < counts["numba"], counts
    assert out["total"] == 2 * 2 * sum(range(1000))
    assert out["pool"] == 1 << 28 and out["buffer"] == "shared"
