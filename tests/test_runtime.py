"""The runtime choices: autocast precision (``auto``) and the thread share among kdbert runs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from kdbert.core import hardware as runtime
from kdbert.errors import KdbertError
from kdbert.core.hardware import ThreadShare, fair_share, live_runs, resolve_precision


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_cpu_flags_are_read_from_the_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu sse avx512f avx512_bf16\n\nflags\t: other\n")
    assert runtime.cpu_flags(str(info)) == {"fpu", "sse", "avx512f", "avx512_bf16"}
    assert runtime.cpu_flags(str(tmp_path / "missing")) == set()


def test_auto_precision_follows_the_cpu(monkeypatch):
    monkeypatch.delenv("KDBERT_MIXED_PRECISION", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_precision("auto", {"avx512f", "avx512_bf16"}) == ("bf16", "auto: this CPU has avx512_bf16")
    assert resolve_precision("auto", {"amx_bf16", "amx_tile"})[0] == "bf16"
    precision, why = resolve_precision("auto", {"avx2", "avx512f"})
    assert precision == "no" and "emulated" in why


def test_explicit_precision_and_the_environment_override(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_precision("bf16", set()) == ("bf16", "--mixed-precision")
    assert resolve_precision("no", {"avx512_bf16"}) == ("no", "--mixed-precision")
    monkeypatch.setenv("KDBERT_MIXED_PRECISION", "no")
    assert resolve_precision("auto", {"avx512_bf16"}) == ("no", "auto, from $KDBERT_MIXED_PRECISION")
    monkeypatch.setenv("KDBERT_MIXED_PRECISION", "half")
    with pytest.raises(KdbertError, match=r"\$KDBERT_MIXED_PRECISION must be one of no, bf16, fp16"):
        resolve_precision("auto", set())
    with pytest.raises(KdbertError, match="--mixed-precision must be auto"):
        resolve_precision("fp8", set())


@pytest.mark.parametrize("cores, runs, busy, expected", [
    (2, 1, 0.0, 2), (2, 2, 0.0, 1), (2, 3, 0.0, 1), (16, 3, 0.0, 5), (2, 1, 1.2, 1), (8, 1, 2.6, 5), (2, 1, 2.0, 1),
])
def test_fair_share(cores, runs, busy, expected):
    assert fair_share(cores, runs, busy) == expected


def _finished_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_live_runs_counts_running_processes_and_removes_stale_entries(tmp_path):
    (tmp_path / str(os.getpid())).touch()
    (tmp_path / str(_finished_pid())).touch()
    (tmp_path / "notes.txt").touch()
    assert live_runs(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [str(os.getpid())]


def test_threads_follow_the_kdbert_runs_on_the_machine(tmp_path, monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(runtime, "busy_cores", lambda *a, **k: 0.0)
    share = ThreadShare(folder=tmp_path, cores=4)
    choice = share.start()
    assert (choice.threads, choice.pinned) == (4, False) and torch.get_num_threads() == 4
    assert (tmp_path / str(os.getpid())).exists()
    assert share.rebalance() is None  # checked at most every REBALANCE_SECONDS

    peer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / str(peer.pid)).touch()
        share._checked -= runtime.REBALANCE_SECONDS
        assert share.rebalance(step=7) == 2 and torch.get_num_threads() == 2
    finally:
        peer.kill()
        peer.wait()
    share._checked -= runtime.REBALANCE_SECONDS
    assert share.rebalance(step=9) == 4
    assert share.changes == [{"step": 7, "from": 4, "to": 2}, {"step": 9, "from": 2, "to": 4}]
    share.stop()
    assert not any(tmp_path.iterdir())


def test_a_second_run_starts_with_its_share_and_busy_cores_count(tmp_path, monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    (tmp_path / "1").touch()  # pid 1 (init) is always alive: a peer kdbert run
    monkeypatch.setattr(runtime, "busy_cores", lambda *a, **k: 2.0)  # the peer's 2 threads
    assert ThreadShare(folder=tmp_path, cores=4).start().threads == 2
    (tmp_path / "1").unlink()
    monkeypatch.setattr(runtime, "busy_cores", lambda *a, **k: 3.0)  # another program
    choice = ThreadShare(folder=tmp_path, cores=4).start()
    assert choice.threads == 1 and "busy with other programs" in choice.reason


def test_pinned_threads_are_kept(tmp_path, monkeypatch, restore_threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    share = ThreadShare(requested=3, folder=tmp_path, cores=4)
    assert share.start().threads == 3 and torch.get_num_threads() == 3
    share._checked -= runtime.REBALANCE_SECONDS
    assert share.rebalance() is None and not any(tmp_path.iterdir())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    choice = ThreadShare(folder=tmp_path, cores=4).start()
    assert (choice.threads, choice.reason, choice.pinned) == (1, "$OMP_NUM_THREADS", True)
