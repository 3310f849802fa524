"""Allocation statistics of the current device's resource, as RMM's `rmm.statistics`:

    from rmm_core import statistics
    with statistics.statistics():          # counts what the block allocates
        buf = rmm_core.DeviceBuffer(size=1000)
        print(statistics.get_statistics())  # {'current_bytes': 1000, ...}

Each function works on the current device's resource (`rmm_core.mr.get_current_device_resource`).
`profiler` records the memory of named functions and blocks, as RMM's memory profiler does:

    statistics.enable_statistics()

    @statistics.profiler()
    def step():
        return rmm_core.DeviceBuffer(size=1000)

    with statistics.profiler(name="a block"):
        step()
    print(statistics.default_profiler_records.report())
"""

import contextlib
import dataclasses
import functools
import threading

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


@dataclasses.dataclass
class MemoryRecord:
    """What the calls of one profiled function or block allocated: how many calls, the bytes
    they allocated in all, and the largest peak of bytes live within one call."""

    num_calls: int = 0
    memory_total: int = 0
    memory_peak: int = 0

    def add(self, memory_total, memory_peak):
        self.num_calls += 1
        self.memory_total += memory_total
        self.memory_peak = max(self.memory_peak, memory_peak)


class ProfilerRecords:
    """The records of `profiler`, by name (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._records = {}

    def add(self, name, data):
        """Adds one call of `name`, with the counters of its scope (`pop_statistics`'s dict)."""
        with self._lock:
            record = self._records.setdefault(name, MemoryRecord())
            record.add(data["total_bytes"], data["peak_bytes"])

    @property
    def records(self):
        """A copy of the records, by name."""
        with self._lock:
            return {k: dataclasses.replace(v) for k, v in self._records.items()}

    def report(self, ordered_by="memory_peak"):
        """A table of the records, largest first by `ordered_by` (a field of MemoryRecord)."""
        if ordered_by not in {f.name for f in dataclasses.fields(MemoryRecord)}:
            raise ValueError(f"ordered_by must name a field of MemoryRecord, not {ordered_by!r}")
        rows = sorted(self.records.items(), key=lambda kv: getattr(kv[1], ordered_by), reverse=True)
        lines = ["Memory profiling", "================", "",
                 f"{'ncalls':>8} {'memory_peak':>14} {'memory_total':>14}  name"]
        for name, r in rows:
            lines.append(f"{r.num_calls:>8} {r.memory_peak:>14} {r.memory_total:>14}  {name}")
        return "\n".join(lines) + "\n"


default_profiler_records = ProfilerRecords()


class profiler:
    """Records the memory each call of a function (as a decorator) or each run of a block (as a
    context manager, with a `name`) allocates, in `records`: its counters in a scope of their own
    (see `push_statistics`). Records nothing while statistics are not enabled."""

    def __init__(self, *, records=None, name=""):
        self.records = default_profiler_records if records is None else records
        self.name = name

    def __call__(self, func):
        name = self.name or f"{func.__qualname__} ({func.__code__.co_filename}:{func.__code__.co_firstlineno})"

        @functools.wraps(func)
        def profiled(*args, **kwargs):
            with profiler(records=self.records, name=name):
                return func(*args, **kwargs)

        return profiled

    def __enter__(self):
        if not self.name:
            raise ValueError("profiler as a context manager needs a name")
        self._adaptor = _adaptor()
        if self._adaptor is not None:
            self._adaptor.push_counters()
        return self

    def __exit__(self, *exc):
        if self._adaptor is not None:
            self.records.add(self.name, self._adaptor.pop_counters())
        return False
