"""Runtime choices made once per training run: the autocast precision and the CPU thread count.

Precision (``--mixed-precision auto``, the default): bfloat16 autocast where the hardware runs it
natively, float32 elsewhere. Native means a GPU that reports bf16 support, or a CPU with the
``avx512_bf16`` or ``amx_bf16`` instructions (a bf16 matrix multiply there runs ~4x the float32
rate; on other CPUs bf16 is emulated and slower than float32). ``$KDBERT_MIXED_PRECISION``
(``no``/``bf16``/``fp16``) replaces the hardware's answer for ``auto``: the test suite sets it to
``no`` so its pinned values stay float32 and exact.

Threads (``--threads``, default: shared fairly): a run pinned by ``--threads N`` or by
``$OMP_NUM_THREADS`` keeps that count. Otherwise every kdbert training process on the machine
registers itself in a per-user folder, and each takes ``cores // live kdbert runs`` threads (at
least one), fewer when other programs keep cores busy at its start; it checks again every
:data:`REBALANCE_SECONDS` and follows when a run starts or ends. Two runs that each took every
core would oversubscribe them: the OpenMP workers then wait on each other, and on a 2-core
machine such a pair ran ~15x slower than one run after the other.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from kdbert.errors import KdbertError

PRECISIONS = ("no", "bf16", "fp16")
NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
REBALANCE_SECONDS = 30.0


# ----------------------------------------------------------------------------- precision
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The instruction-set flags of the first CPU in ``cpuinfo`` (empty where there is none)."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def native_bf16(flags: set[str] | None = None) -> tuple[bool, str]:
    """Does this machine run bf16 matrix multiplies natively? ``(answer, why)``."""
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        if torch.cuda.is_bf16_supported():
            return True, f"{name} supports bf16"
        return False, f"{name} has no native bf16"
    found = sorted((cpu_flags() if flags is None else flags) & set(NATIVE_BF16_CPU_FLAGS))
    if found:
        return True, f"this CPU has {', '.join(found)}"
    return False, f"this CPU has none of {', '.join(NATIVE_BF16_CPU_FLAGS)} (bf16 would be emulated)"


def resolve_precision(requested: str, flags: set[str] | None = None) -> tuple[str, str]:
    """The autocast precision to train in, and why: ``requested`` unless it is ``auto``."""
    if requested in PRECISIONS:
        return requested, "--mixed-precision"
    if requested != "auto":
        raise KdbertError(f"--mixed-precision must be auto, {', '.join(PRECISIONS)} (got {requested!r})")
    forced = os.environ.get("KDBERT_MIXED_PRECISION")
    if forced:
        if forced not in PRECISIONS:
            raise KdbertError(f"$KDBERT_MIXED_PRECISION must be one of {', '.join(PRECISIONS)} (got {forced!r})")
        return forced, "auto, from $KDBERT_MIXED_PRECISION"
    native, why = native_bf16(flags)
    return ("bf16" if native else "no"), f"auto: {why}"


# ----------------------------------------------------------------------------- threads
def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def busy_cores(seconds: float = 0.2, stat: str = "/proc/stat") -> float:
    """Cores kept busy by the whole machine over ``seconds`` (0 where ``/proc/stat`` is missing)."""

    def sample():
        fields = [int(x) for x in Path(stat).read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields), idle

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return 0.0
    if total1 == total0:
        return 0.0
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / (total1 - total0))


def registry_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"kdbert-{os.getuid() if hasattr(os, 'getuid') else 'user'}" / "runs"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def live_runs(folder: Path) -> int:
    """kdbert training processes registered in ``folder`` that are still running (stale entries,
    left by a killed process, are removed)."""
    count = 0
    for entry in folder.glob("*"):
        if entry.name.isdigit() and _alive(int(entry.name)):
            count += 1
        else:
            entry.unlink(missing_ok=True)
    return count


def fair_share(cores: int, runs: int, busy_elsewhere: float = 0.0) -> int:
    """Threads for one of ``runs`` kdbert runs on ``cores`` cores, ``busy_elsewhere`` of which
    other programs keep busy: ``min(cores // runs, cores - round(busy_elsewhere))``, at least 1."""
    return max(1, min(cores // max(1, runs), cores - round(busy_elsewhere)))


@dataclass
class ThreadChoice:
    threads: int
    reason: str
    pinned: bool


class ThreadShare:
    """This process's share of the CPU cores among kdbert training runs (see the module doc).

    ``start()`` registers the process and sets torch's thread count; ``rebalance()`` (cheap; acts
    at most every :data:`REBALANCE_SECONDS`) follows runs that started or ended; ``stop()``
    unregisters. With ``requested`` (``--threads``) or ``$OMP_NUM_THREADS`` the count is pinned.
    """

    def __init__(self, requested: int | None = None, folder: Path | None = None, cores: int | None = None):
        self.requested = requested
        self.folder = folder or registry_dir()
        self.cores = cores or available_cores()
        self.entry = self.folder / str(os.getpid())
        self.choice: ThreadChoice | None = None
        self._checked = 0.0
        self.changes: list[dict] = []

    def start(self) -> ThreadChoice:
        if self.requested:
            self.choice = ThreadChoice(self.requested, "--threads", True)
        elif os.environ.get("OMP_NUM_THREADS"):
            self.choice = ThreadChoice(torch.get_num_threads(), "$OMP_NUM_THREADS", True)
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.entry.touch()
            runs = live_runs(self.folder)
            # peers are counted in runs; what is busy beyond their shares is other programs'
            elsewhere = max(0.0, busy_cores() - (runs - 1) * (self.cores // runs))
            threads = fair_share(self.cores, runs, elsewhere)
            why = f"auto: {self.cores} cores, {runs} kdbert run(s)"
            if round(elsewhere):
                why += f", ~{elsewhere:.1f} busy with other programs"
            self.choice = ThreadChoice(threads, why, False)
        torch.set_num_threads(self.choice.threads)
        self._checked = time.monotonic()
        return self.choice

    def rebalance(self, step: int | None = None) -> int | None:
        """The new thread count if the fair share changed (and set it), else ``None``."""
        if self.choice is None or self.choice.pinned or time.monotonic() - self._checked < REBALANCE_SECONDS:
            return None
        self._checked = time.monotonic()
        self.entry.touch()  # re-register should a peer have removed us by mistake
        threads = fair_share(self.cores, live_runs(self.folder))
        if threads == self.choice.threads:
            return None
        self.changes.append({"step": step, "from": self.choice.threads, "to": threads})
        self.choice.threads = threads
        torch.set_num_threads(threads)
        return threads

    def stop(self) -> None:
        if self.choice is not None and not self.choice.pinned:
            self.entry.unlink(missing_ok=True)
