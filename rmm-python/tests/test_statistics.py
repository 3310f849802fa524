"""rmm_core.statistics as RMM's rmm.statistics, on a simulated device."""

import pytest

import rmm_core
from rmm_core import mr, statistics


def test_disabled_until_enabled(sim):
    assert statistics.get_statistics() is None
    assert statistics.push_statistics() is None and statistics.pop_statistics() is None
    adaptor = statistics.enable_statistics()
    assert statistics.enable_statistics() is adaptor  # not wrapped twice
    buf = rmm_core.DeviceBuffer(size=300)
    assert statistics.get_statistics()["current_bytes"] == 300
    del buf
    assert statistics.get_statistics()["total_count"] == 1


def test_scopes_nest(sim):
    statistics.enable_statistics()
    a = rmm_core.DeviceBuffer(size=100)
    statistics.push_statistics()
    b = rmm_core.DeviceBuffer(size=20)
    inner = statistics.pop_statistics()
    assert inner["total_bytes"] == 20 and statistics.get_statistics()["current_bytes"] == 120
    del a, b


def test_context_manager_counts_the_block_and_restores_the_resource(sim):
    before = mr.get_current_device_resource()
    with statistics.statistics() as adaptor:
        buf = rmm_core.DeviceBuffer(size=64)
        assert statistics.get_statistics()["current_bytes"] == 64
        del buf
        assert statistics.get_statistics()["peak_bytes"] == 64
    assert mr.get_current_device_resource() is before or mr.get_current_device_resource().name == before.name
    assert isinstance(adaptor, mr.StatisticsResourceAdaptor)
    assert statistics.get_statistics() is None


def test_profiler_records_functions_and_blocks(sim):
    records = statistics.ProfilerRecords()

    @statistics.profiler(records=records)
    def allocate(n):
        return rmm_core.DeviceBuffer(size=n)

    allocate(10)  # statistics off: nothing recorded
    assert records.records == {}
    statistics.enable_statistics()
    keep = [allocate(100), allocate(300)]
    with statistics.profiler(records=records, name="block"):
        tmp = rmm_core.DeviceBuffer(size=1000)
        del tmp
        keep.append(allocate(50))
    by_name = records.records
    fn = next(k for k in by_name if k.startswith("test_profiler_records_functions_and_blocks.<locals>.allocate"))
    assert (by_name[fn].num_calls, by_name[fn].memory_total, by_name[fn].memory_peak) == (3, 450, 300)
    assert (by_name["block"].num_calls, by_name["block"].memory_total, by_name["block"].memory_peak) == (1, 1050, 1000)
    report = records.report()
    assert report.index("block") < report.index("allocate")  # larger peak first
    assert "ncalls" in records.report(ordered_by="num_calls")
    with pytest.raises(ValueError):
        records.report(ordered_by="nothing")
    with pytest.raises(ValueError):
        with statistics.profiler(records=records):
            pass
    del keep
