"""Where an analysis spends its time: wall and CPU seconds per stage, for benchmarks and ``--timings``.

The pipeline's stages (ingest, parse, redact, match, reason, classify, report) run one after the
other and are timed as wall time and the process's CPU time (every thread). Inside ingest, blocks
are read, prefiltered and decoded by several threads at once: those parts are timed per thread and
added up, so their seconds are busy time summed over threads, not wall time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager


class Stages:
    """Seconds per stage, in the order the stages first ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, name: str, seconds: float, cpu: float) -> None:
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds
            self.cpu[name] = self.cpu.get(name, 0.0) + cpu

    def stage(self, name: str) -> AbstractContextManager[None]:
        """A stage of the pipeline: wall time, and CPU time of the whole process."""
        return self._timed(name, time.process_time)

    def part(self, name: str) -> AbstractContextManager[None]:
        """A part of a stage that threads run side by side: this thread's busy and CPU time."""
        return self._timed(name, time.thread_time)

    @contextmanager
    def _timed(self, name: str, cpu_clock: Callable[[], float]) -> Iterator[None]:
        wall, cpu = time.perf_counter(), cpu_clock()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - wall, cpu_clock() - cpu)

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {k: {"s": round(v, 4), "cpu_s": round(self.cpu[k], 4)} for k, v in self.seconds.items()}


_current = Stages()


def begin() -> Stages:
    """Start timing a new analysis (the previous one's times are dropped)."""
    global _current
    _current = Stages()
    return _current


def current() -> Stages:
    """The times of the analysis running now, or of the last one."""
    return _current
