"""The resources, adaptors, registry and reinitialize, on a simulated device."""

import csv

import pytest

import rmm_core
from rmm_core import mr


def upstream(device):
    return mr.CudaMemoryResource(device=device)


def resources(device):
    """One of each resource that works on a simulated device."""
    cuda = upstream(device)
    return [
        cuda,
        mr.ManagedMemoryResource(device=device),
        mr.PoolMemoryResource(cuda, initial_pool_size=1 << 20),
        mr.ExpandablePoolMemoryResource(device=device),
        mr.ArenaMemoryResource(cuda, arena_size=64 << 20),
        mr.BinningMemoryResource(cuda, 10, 20),
        mr.FixedSizeMemoryResource(cuda, block_size=1 << 16, blocks_to_preallocate=4),
        mr.LimitingResourceAdaptor(cuda, 1 << 30),
        mr.StatisticsResourceAdaptor(cuda),
        mr.TrackingResourceAdaptor(cuda),
    ]


def test_every_resource_allocates_and_frees(sim):
    for resource in resources(sim):
        assert isinstance(resource, mr.DeviceMemoryResource)
        size = 1 << 12 if isinstance(resource, mr.FixedSizeMemoryResource) else 3000
        ptrs = [resource.allocate(size) for _ in range(10)]
        assert len(set(ptrs)) == 10 and all(p % 256 == 0 for p in ptrs), resource
        buf = rmm_core.DeviceBuffer.to_device(b"x" * size, mr=resource)
        assert buf.tobytes() == b"x" * size
        for p in ptrs:
            resource.deallocate(p, size)
        assert resource.device == sim


def test_upstream_and_equality(sim):
    cuda = upstream(sim)
    pool = mr.PoolMemoryResource(cuda, initial_pool_size=1 << 20)
    assert pool.upstream_mr is cuda and pool.get_upstream() is cuda and cuda.upstream_mr is None
    assert pool.is_equal(pool) and not pool.is_equal(mr.PoolMemoryResource(cuda, initial_pool_size=1 << 20))
    assert cuda.is_equal(upstream(sim))  # driver memory: any of them frees it
    assert pool.name == "pool(cuda)"
    with pytest.raises(TypeError):
        mr.DeviceMemoryResource()  # the abstract base


def test_pool_sizes_and_release(sim):
    pool = mr.PoolMemoryResource(upstream(sim), initial_pool_size=1 << 20, maximum_pool_size=8 << 20)
    p = pool.allocate(3 << 20)
    assert pool.pool_size() >= 3 << 20 and pool.free_bytes() < pool.pool_size()
    with pytest.raises(MemoryError):
        pool.allocate(16 << 20)  # past the maximum
    pool.deallocate(p, 3 << 20)
    pool.release()
    expandable = mr.ExpandablePoolMemoryResource(device=sim)
    q = expandable.allocate(40 << 20)
    assert expandable.pool_size() == 64 << 20
    expandable.deallocate(q, 40 << 20)
    assert expandable.release() == 64 << 20 and expandable.pool_size() == 0


def test_sizes_take_units_as_reinitialize_does(sim):
    pool = mr.PoolMemoryResource(upstream(sim), initial_pool_size="1MiB", maximum_pool_size="8 MiB")
    assert pool.pool_size() == 1 << 20
    with pytest.raises(MemoryError):
        pool.allocate(16 << 20)  # past the maximum given as a string
    assert mr.LimitingResourceAdaptor(upstream(sim), allocation_limit="64MiB").get_allocation_limit() == 64 << 20
    fixed = mr.FixedSizeMemoryResource(upstream(sim), block_size="64KiB", blocks_to_preallocate=2)
    fixed.deallocate(fixed.allocate(1000), 1000)
    assert mr.ExpandablePoolMemoryResource(initial_pool_size="32MiB", device=sim).pool_size() >= 32 << 20
    for bad, error in [("lots", ValueError), (-1, ValueError), ("4 parsecs", ValueError), ([1], TypeError)]:
        with pytest.raises(error):
            mr.PoolMemoryResource(upstream(sim), initial_pool_size=bad)


def test_statistics_scopes(sim):
    stats = mr.StatisticsResourceAdaptor(upstream(sim))
    a = stats.allocate(100)
    outer = stats.push_counters()
    assert outer["current_bytes"] == 100
    b = stats.allocate(50)
    assert stats.allocation_counts == {
        "current_bytes": 50, "current_count": 1, "peak_bytes": 50, "peak_count": 1, "total_bytes": 50, "total_count": 1,
    }
    inner = stats.pop_counters()
    assert inner["total_bytes"] == 50 and stats.allocation_counts["current_bytes"] == 150
    stats.deallocate(a, 100)
    stats.deallocate(b, 50)
    with pytest.raises(ValueError):
        stats.pop_counters()  # no scope left to pop


def test_limiting_adaptor_refuses_past_its_limit(sim):
    limited = mr.LimitingResourceAdaptor(upstream(sim), 1 << 20)
    p = limited.allocate(768 << 10)
    assert limited.get_allocated_bytes() == 768 << 10 and limited.get_allocation_limit() == 1 << 20
    with pytest.raises(MemoryError):
        limited.allocate(512 << 10)
    limited.deallocate(p, 768 << 10)
    limited.deallocate(limited.allocate(1 << 20), 1 << 20)


def test_tracking_adaptor_catches_bad_frees(sim):
    tracked = mr.TrackingResourceAdaptor(upstream(sim))
    p = tracked.allocate(512)
    assert tracked.get_allocated_bytes() == 512
    assert "512" in tracked.get_outstanding_allocations_str()
    with pytest.raises(ValueError):
        tracked.deallocate(p, 256)  # wrong size
    tracked.deallocate(p, 512)
    with pytest.raises(ValueError):
        tracked.deallocate(p, 512)  # double free
    assert tracked.get_allocated_bytes() == 0


def test_logging_adaptor_writes_rmm_csv(sim, tmp_path):
    path = tmp_path / "log.csv"
    logged = mr.LoggingResourceAdaptor(upstream(sim), log_file_name=path)
    logged.deallocate(logged.allocate(4096), 4096)
    logged.flush()
    assert logged.get_file_name() == str(path)
    rows = list(csv.reader(open(path)))
    assert [r[2].strip() for r in rows[1:]] == ["allocate", "free"]
    with pytest.raises(ValueError, match="log_file_name"):
        mr.LoggingResourceAdaptor(upstream(sim))


def test_registry_returns_the_object_set(sim):
    assert mr.get_current_device_resource().name == "cuda"
    stats = mr.StatisticsResourceAdaptor(mr.PoolMemoryResource(upstream(sim), initial_pool_size=1 << 20))
    mr.set_current_device_resource(stats)
    assert mr.get_current_device_resource() is stats and mr.get_per_device_resource(sim) is stats
    buf = rmm_core.DeviceBuffer(size=123)  # from the current device's resource
    assert stats.allocation_counts["current_bytes"] == 123
    del buf
    other = mr.CudaMemoryResource(device=rmm_core.Device.simulated(1 << 20))
    with pytest.raises(ValueError):
        mr._set_per_device_resource(sim, other)  # a resource of another device


def test_reinitialize_like_rmm(sim, tmp_path):
    rmm_core.reinitialize(pool_allocator=True, initial_pool_size="64MiB", maximum_pool_size="128MiB", devices=sim)
    assert rmm_core.is_initialized()
    assert mr.get_current_device_resource().name.startswith("pool")
    buf = rmm_core.DeviceBuffer.to_device(b"pooled")
    assert buf.tobytes() == b"pooled"
    log = tmp_path / "rmm_log.csv"
    rmm_core.reinitialize(logging=True, log_file_name=log, devices=[sim])
    rmm_core.DeviceBuffer(size=10)
    assert log.exists()
    # A bad request changes nothing.
    before = mr.get_current_device_resource().name
    with pytest.raises(MemoryError):
        rmm_core.reinitialize(pool_allocator=True, initial_pool_size="4GiB", devices=sim)
    assert mr.get_current_device_resource().name == before
    with pytest.raises(ValueError):
        rmm_core.reinitialize(pool_allocator=True, initial_pool_size="lots", devices=sim)


def test_logging_switched_on_and_off_like_rmm(sim, tmp_path, monkeypatch):
    pool = mr.PoolMemoryResource(upstream(sim), initial_pool_size="1MiB")
    mr.set_current_device_resource(pool)
    monkeypatch.delenv("RMM_LOG_FILE", raising=False)
    with pytest.raises(ValueError):
        mr.enable_logging()
    mr.enable_logging(tmp_path / "rmm.csv")
    logged = mr.get_current_device_resource()
    assert isinstance(logged, mr.LoggingResourceAdaptor) and logged.upstream_mr is not None
    mr.enable_logging(tmp_path / "other.csv")  # already logging: unchanged
    assert mr.get_current_device_resource() is logged
    name = rmm_core.get_log_filenames()[sim]
    assert name.startswith(str(tmp_path / "rmm.sim")) and name.endswith(".csv")
    rmm_core.DeviceBuffer(size=100)
    mr.disable_logging()
    assert mr.get_current_device_resource().name == pool.name
    assert mr.get_log_filenames()[sim] is None
    with open(name) as f:
        rows = list(csv.reader(f))
    assert rows[0][:3] == ["Thread", "Time", "Action"] and any(r[2] == "allocate" for r in rows[1:])
    free, total = mr.available_device_memory()
    assert total == 1 << 30 and 0 < free <= total


def test_callback_resource_calls_python(sim):
    backing = upstream(sim)
    calls = []

    def allocate(size, stream):
        calls.append(("allocate", size, type(stream).__name__))
        return backing.allocate(size) if size < (1 << 20) else None

    def deallocate(ptr, size, stream):
        calls.append(("deallocate", size, type(stream).__name__))
        backing.deallocate(ptr, size)

    cb = mr.CallbackMemoryResource(allocate, deallocate, device=sim)
    buf = rmm_core.DeviceBuffer.to_device(b"through python", mr=cb)
    assert buf.tobytes() == b"through python"
    del buf
    assert calls == [("allocate", 14, "Stream"), ("deallocate", 14, "Stream")]
    with pytest.raises(MemoryError):
        rmm_core.DeviceBuffer(size=2 << 20, mr=cb)  # None: out of memory

    def raising(size, stream):
        raise RuntimeError("no memory today")

    with pytest.raises(ValueError, match="no memory today"):
        rmm_core.DeviceBuffer(size=10, mr=mr.CallbackMemoryResource(raising, deallocate, device=sim))

    def oom(size, stream):
        raise MemoryError("full")

    with pytest.raises(MemoryError):
        rmm_core.DeviceBuffer(size=10, mr=mr.CallbackMemoryResource(oom, deallocate, device=sim))


def test_a_pool_over_python_callbacks_serves_several_threads(sim):
    import threading

    backing = upstream(sim)
    cb = mr.CallbackMemoryResource(lambda size, s: backing.allocate(size), lambda p, size, s: backing.deallocate(p, size), device=sim)
    # A small pool: the threads keep growing it, calling the Python functions under its lock.
    pool = mr.PoolMemoryResource(cb, initial_pool_size="1MiB")
    errors = []

    def work():
        try:
            for i in range(200):
                keep = [rmm_core.DeviceBuffer(size=(i % 7 + 1) << 16, mr=pool) for _ in range(4)]
                del keep
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "deadlocked"
    assert errors == []


def test_resources_that_need_a_gpu_say_so(sim):
    for make in (lambda: mr.SystemMemoryResource(device=sim), lambda: mr.CudaAsyncMemoryResource(device=sim)):
        try:
            resource = make()
        except (RuntimeError, ValueError, MemoryError) as error:
            assert str(error)
        else:
            resource.deallocate(resource.allocate(1024), 1024)


def test_failure_callback_retries_while_it_frees(sim):
    limited = mr.LimitingResourceAdaptor(upstream(sim), 1 << 20)
    held = [limited.allocate(768 << 10)]
    asked = []

    def spill(nbytes):
        asked.append(nbytes)
        if held:
            limited.deallocate(held.pop(), 768 << 10)
            return True
        return False

    adaptor = mr.FailureCallbackResourceAdaptor(limited, spill)
    p = adaptor.allocate(512 << 10)  # fails once, the callback frees, the retry succeeds
    assert asked == [512 << 10] and adaptor.upstream_mr is limited
    with pytest.raises(MemoryError):
        adaptor.allocate(1 << 20)  # nothing left to free: the callback says no
    assert asked == [512 << 10, 1 << 20]
    adaptor.deallocate(p, 512 << 10)


# The callback's exception is reported as unraisable (it cannot cross the allocator).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_failure_callback_that_raises_counts_as_no(sim):
    def broken(nbytes):
        raise RuntimeError("the spill failed")

    adaptor = mr.FailureCallbackResourceAdaptor(mr.LimitingResourceAdaptor(upstream(sim), 1024), broken)
    with pytest.raises(MemoryError):
        adaptor.allocate(4096)


def test_aligned_and_prefetch_adaptors(sim):
    aligned = mr.AlignedResourceAdaptor(upstream(sim), alignment=4096, alignment_threshold=1024)
    ptrs = [aligned.allocate(2000) for _ in range(5)]
    assert all(p % 4096 == 0 for p in ptrs)
    for p in ptrs:
        aligned.deallocate(p, 2000)
    with pytest.raises(ValueError):
        mr.AlignedResourceAdaptor(upstream(sim), alignment=1000)
    prefetch = mr.PrefetchResourceAdaptor(mr.ManagedMemoryResource(device=sim))
    buf = rmm_core.DeviceBuffer.to_device(b"prefetched", mr=prefetch)
    assert buf.tobytes() == b"prefetched"
