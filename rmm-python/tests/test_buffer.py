"""DeviceBuffer as RMM's Python users know it, on a simulated device."""

import array

import pytest

import rmm_core
from rmm_core import mr


def test_round_trip_of_bytes_like_objects(sim):
    for data in [b"hello", bytearray(b"\x00\x01\x02"), memoryview(b"abc"), array.array("i", [1, 2, 3])]:
        buf = rmm_core.DeviceBuffer.to_device(data)
        assert buf.size == buf.nbytes == len(buf) == len(bytes(data))
        assert buf.tobytes() == bytes(data)
        assert buf.device == sim


def test_empty_buffer(sim):
    buf = rmm_core.DeviceBuffer()
    assert (buf.size, buf.ptr, buf.tobytes()) == (0, 0, b"")


def test_copy_from_pointer_and_from_host(sim):
    src = rmm_core.DeviceBuffer.to_device(b"0123456789")
    copy = rmm_core.DeviceBuffer(ptr=src.ptr, size=10)
    assert copy.tobytes() == b"0123456789" and copy.ptr != src.ptr
    copy.copy_from_host(b"abcdefghij")
    assert copy.tobytes() == b"abcdefghij" and src.tobytes() == b"0123456789"
    copy.copy_from_host(b"XY")  # fewer bytes: the first ones only, as in RMM
    assert copy.tobytes() == b"XYcdefghij"
    with pytest.raises(ValueError):
        copy.copy_from_host(b"far too long for it")


def test_copies_as_in_rmm(sim):
    src = rmm_core.DeviceBuffer.to_device(b"abc")
    dst = rmm_core.DeviceBuffer(size=5)
    dst.copy_from_host(b"\0" * 5)
    dst.copy_from_device(src)
    assert dst.tobytes() == b"abc\0\0" and bytes(dst) == dst.tobytes()
    with pytest.raises(ValueError):
        src.copy_from_device(dst)  # 5 bytes into 3
    with pytest.raises(ValueError):
        dst.copy_from_device(b"host bytes")  # no __cuda_array_interface__

    class Strided:
        __cuda_array_interface__ = {"shape": (2,), "strides": (8,), "typestr": "<f4", "data": (src.ptr, False), "version": 3}

    with pytest.raises(ValueError):
        dst.copy_from_device(Strided())
    twin = src.copy()
    assert twin.tobytes() == b"abc" and twin.ptr != src.ptr
    import copy as copy_module

    assert copy_module.copy(src).tobytes() == copy_module.deepcopy(src).tobytes() == b"abc"
    host = bytearray(8)
    src.copy_to_host(host)  # a larger host buffer: the first bytes
    assert host == bytearray(b"abc\0\0\0\0\0")
    with pytest.raises(ValueError):
        src.copy_to_host(bytearray(2))
    src.prefetch()  # not managed memory: nothing to do, as in RMM
    managed = rmm_core.DeviceBuffer.to_device(b"um", mr=mr.ManagedMemoryResource(device=sim))
    managed.prefetch(device=sim)
    assert managed.tobytes() == b"um"
    assert src.__sizeof__() == 3


def test_resize_keeps_contents(sim):
    buf = rmm_core.DeviceBuffer.to_device(b"abcdef")
    buf.resize(3)
    assert buf.tobytes() == b"abc"
    buf.reserve(1000)
    assert buf.capacity() >= 1000 and buf.tobytes() == b"abc"
    buf.resize(4)
    assert buf.tobytes()[:3] == b"abc"


def test_cuda_array_interface(sim):
    buf = rmm_core.DeviceBuffer(size=64)
    cai = buf.__cuda_array_interface__
    assert cai == {"shape": (64,), "strides": None, "typestr": "|u1", "data": (buf.ptr, False), "version": 3}


def test_buffer_from_a_given_resource_is_freed_when_dropped(sim):
    stats = mr.StatisticsResourceAdaptor(mr.CudaMemoryResource(device=sim))
    buf = rmm_core.DeviceBuffer(size=1000, mr=stats)
    assert stats.allocation_counts["current_bytes"] == 1000
    del buf
    assert stats.allocation_counts["current_bytes"] == 0
    assert stats.allocation_counts["total_count"] == 1


def test_streams(sim):
    rmm_core.DeviceBuffer(size=8, stream=0)  # the default stream, by handle
    ours = rmm_core.Stream(sim)
    assert ours.__cuda_stream__() == (0, ours.ptr)
    rmm_core.DeviceBuffer(size=8, stream=ours).tobytes()
    other = rmm_core.Stream(rmm_core.Device.simulated(1 << 20))
    with pytest.raises(ValueError, match="belongs to"):
        rmm_core.DeviceBuffer(size=8, stream=other)
    # A simulated device has no foreign streams to borrow.
    with pytest.raises(ValueError, match="stream"):
        rmm_core.DeviceBuffer(size=8, stream=0x1234)

    class CupyLike:
        ptr = 0

    class TorchLike:
        cuda_stream = 0

    rmm_core.DeviceBuffer(size=8, stream=CupyLike())
    rmm_core.DeviceBuffer(size=8, stream=TorchLike())
    with pytest.raises(TypeError, match="stream"):
        rmm_core.DeviceBuffer(size=8, stream="default")


def test_bad_arguments_raise_clear_errors(sim):
    with pytest.raises(TypeError, match="device"):
        rmm_core.DeviceBuffer(size=8, device="gpu0")
    with pytest.raises(TypeError):
        rmm_core.DeviceBuffer(8)  # keyword-only, as in RMM
    with pytest.raises(MemoryError):
        rmm_core.DeviceBuffer(size=2 << 30)  # more than the 1 GiB device
    other = mr.CudaMemoryResource(device=rmm_core.Device.simulated(1 << 20))
    with pytest.raises(ValueError, match="mr belongs to"):
        rmm_core.DeviceBuffer(size=8, mr=other, device=sim)
    with pytest.raises(TypeError):
        rmm_core.DeviceBuffer.to_device(12345)


def test_copy_to_host_and_pickle(sim):
    import pickle

    buf = rmm_core.DeviceBuffer.to_device(b"0123456789")
    target = bytearray(10)
    assert buf.copy_to_host(target) is target and bytes(target) == b"0123456789"
    with pytest.raises(ValueError, match="holds 3 bytes"):
        buf.copy_to_host(bytearray(3))
    copy = pickle.loads(pickle.dumps(buf))
    assert isinstance(copy, rmm_core.DeviceBuffer) and copy.tobytes() == b"0123456789"
    assert copy.ptr != buf.ptr


def test_copy_to_host_gives_a_numpy_array(sim):
    np = pytest.importorskip("numpy")
    out = rmm_core.DeviceBuffer.to_device(bytes(range(16))).copy_to_host()
    assert isinstance(out, np.ndarray) and out.dtype == np.uint8 and out.tolist() == list(range(16))
