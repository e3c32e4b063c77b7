"""The ship check's timings in turns (:func:`~kdbert.compress.speed.time_against_teacher`) run in a
process of their own, started with the command and idle until the finishing asks.

Timed in the process that had searched, the same int8 graphs ran slower than in a fresh one, the
small student more than the teacher: alternating the two at the main job's ship check (Intel Xeon
with AMX, 2 cores), the teacher 2.14 ms against 1.81 and bert-1x384 0.46 against 0.355 (4.64x
against 5.12x; ``benchmarks/timing_process.py``). The candidates are admitted on timings taken
before the search trains, and a shipped graph runs in a server process of its own; so the ship
check times it where nothing has trained. The process is spawned, not forked (a fork inherits the
state), when the command starts, so that its imports overlap the teacher's loading; :meth:`wait_ready`
before anything is timed keeps them off every timing."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Callable, TypeVar

from kdbert.compress.speed import SpeedSettings, time_against_teacher
from kdbert.data.load import TaskOptions

T = TypeVar("T")


def _imported() -> bool:
    """Run first in the fresh process: unpickling it imports this module, and with it
    :mod:`kdbert.compress.speed`, everything a timing needs."""
    return True


class TimingProcess:
    """A spawned process that times exported graphs in turns with the teacher; use as a context manager
    (the process ends with the block)."""

    def __init__(self):
        self._pool = multiprocessing.get_context("spawn").Pool(1)
        self._ready = self._pool.apply_async(_imported)

    def wait_ready(self) -> None:
        """Block until the process has imported what timing needs."""
        self._ready.get()

    def call(self, function: Callable[..., T], *args) -> T:
        """``function(*args)`` run in the process (both picklable), its result returned here."""
        return self._pool.apply(function, args)

    def time_against_teacher(self, teacher_file: Path, student_file: Path, task: TaskOptions,
                             settings: SpeedSettings) -> dict:
        """:func:`~kdbert.compress.speed.time_against_teacher` run in the process (the teacher's rows
        loaded there once per teacher, task and settings)."""
        return self.call(time_against_teacher, teacher_file, student_file, task, settings)

    def close(self) -> None:
        """End the process (again: nothing more)."""
        self._pool.terminate()
        self._pool.join()

    def __enter__(self) -> TimingProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
