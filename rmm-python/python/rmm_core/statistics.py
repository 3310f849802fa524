"""Allocation statistics of the current device's resource, as RMM's `rmm.statistics`:

    from rmm_core import statistics
    with statistics.statistics():          # counts what the block allocates
        buf = rmm_core.DeviceBuffer(size=1000)
        print(statistics.get_statistics())  # {'current_bytes': 1000, ...}

Each function works on the current device's resource (`rmm_core.mr.get_current_device_resource`)."""

import contextlib

from rmm_core import mr


def enable_statistics():
    """Puts a StatisticsResourceAdaptor in front of the current device's resource, unless it is
    one already; returns the adaptor."""
    current = mr.get_current_device_resource()
    if isinstance(current, mr.StatisticsResourceAdaptor):
        return current
    adaptor = mr.StatisticsResourceAdaptor(current)
    mr.set_current_device_resource(adaptor)
    return adaptor


def _adaptor():
    current = mr.get_current_device_resource()
    return current if isinstance(current, mr.StatisticsResourceAdaptor) else None


def get_statistics():
    """The current scope's counters (a dict of current/peak/total bytes and counts), or None when
    statistics are not enabled."""
    adaptor = _adaptor()
    return None if adaptor is None else adaptor.allocation_counts


def push_statistics():
    """Starts a new scope of counters; returns the enclosing scope's (None when not enabled)."""
    adaptor = _adaptor()
    return None if adaptor is None else adaptor.push_counters()


def pop_statistics():
    """Ends the current scope (its counts join the enclosing one); returns its counters (None
    when not enabled)."""
    adaptor = _adaptor()
    return None if adaptor is None else adaptor.pop_counters()


@contextlib.contextmanager
def statistics():
    """Counts the allocations made inside the block in a scope of their own, enabling statistics
    for the block if they were not; afterwards the previous resource is current again."""
    previous = mr.get_current_device_resource()
    adaptor = enable_statistics()
    adaptor.push_counters()
    try:
        yield adaptor
    finally:
        adaptor.pop_counters()
        if adaptor is not previous:
            mr.set_current_device_resource(previous)
