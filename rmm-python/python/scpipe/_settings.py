"""`scpipe.settings`: where the functions run, with how many threads, from which seed, and
whether they show their progress."""

from __future__ import annotations

import os


class Settings:
    """scpipe's process-wide settings.

    Attributes
    ----------
    device
        ``"auto"`` (the default: the GPU when one is usable, else the CPU), ``"gpu"`` or
        ``"cpu"``. On the GPU every step allocates from the resource that ``rmm_core`` sets
        (``rmm_core.reinitialize(pool_allocator=True)`` makes a pool, as for RMM).
    n_jobs
        Threads of the CPU steps (``None``: every core). Takes effect before the first call.
    random_state
        The seed of the functions whose ``random_state`` is left at ``None`` (UMAP, Leiden,
        harmony); 0, as scanpy's defaults.
    progress
        Print each call's time to standard error as it ends, split into handing the parts
        over, the step, and writing the results back (``recipe``: each of its steps); off by
        default.
    """

    def __init__(self) -> None:
        self._device = "auto"
        self.random_state = 0
        self.progress = False
        self._n_jobs: int | None = None

    @property
    def device(self) -> str:
        return self._device

    @device.setter
    def device(self, value: str) -> None:
        if value not in ("auto", "gpu", "cpu"):
            raise ValueError(f"scpipe.settings.device must be 'auto', 'gpu' or 'cpu', not {value!r}")
        self._device = value

    @property
    def n_jobs(self) -> int | None:
        return self._n_jobs

    @n_jobs.setter
    def n_jobs(self, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"scpipe.settings.n_jobs must be a positive int or None, not {value!r}")
        self._n_jobs = value
        if value is None:
            os.environ.pop("RAYON_NUM_THREADS", None)
        else:
            os.environ["RAYON_NUM_THREADS"] = str(value)

    def resolved_device(self) -> str:
        """``"gpu"`` or ``"cpu"``: where the next call runs."""
        from rmm_core import gpu_available

        if self._device == "auto":
            return "gpu" if gpu_available else "cpu"
        return self._device

    def __repr__(self) -> str:
        return (
            f"scpipe.settings(device={self._device!r}, n_jobs={self._n_jobs!r}, "
            f"random_state={self.random_state!r}, progress={self.progress!r})"
        )


settings = Settings()
