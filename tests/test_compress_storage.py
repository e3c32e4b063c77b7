"""compress's Optuna study storage: identity, bad URLs, the journal default, and the claim protocol
across real worker processes on a journal file and on a real PostgreSQL server (no training)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from kdbert.compress import storage
from kdbert.errors import KdbertError

IDENTITY = {"teacher": "teacher-abc", "task": "sst2"}
JOBS = [f"cand-{i}@0" for i in range(20)]


def jobs_in(study, state) -> set[str]:
    """The jobs that have a trial in ``state``."""
    return {t.user_attrs["job"] for t in study.get_trials(deepcopy=False, states=(state,)) if "job" in t.user_attrs}


def done_jobs(study) -> set[str]:
    return jobs_in(study, TrialState.COMPLETE)


def running_jobs(study) -> set[str]:
    return jobs_in(study, TrialState.RUNNING)


def open_jobs(study, jobs) -> list[str]:
    """``jobs`` that are neither done nor running: the ones a worker may claim."""
    taken = done_jobs(study) | running_jobs(study)
    return [job for job in jobs if job not in taken]

# A worker: wait for the start file, then go over the jobs in order (both workers in the same
# order, so that they race for the same job), claiming each that is neither done nor running.
WORKER = """
import os, sys, time
from pathlib import Path
import optuna
from optuna.trial import TrialState
from kdbert.compress import storage

optuna.logging.set_verbosity(optuna.logging.WARNING)

out, url, go, jobs = sys.argv[1], sys.argv[2] or None, Path(sys.argv[3]), sys.argv[4].split(",")
study = storage.open_study(out, {"teacher": "teacher-abc", "task": "sst2"}, storage=url)
(go.parent / f"ready-{os.getpid()}").write_text("")
while not go.exists():
    time.sleep(0.01)
for job in jobs:
    taken = {t.user_attrs.get("job") for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,
                                                                                         TrialState.RUNNING))}
    if job in taken:
        continue
    trial = storage.claim(study, job, {"pid": os.getpid()})
    if trial is not None:
        time.sleep(0.05)
        storage.finish(study, trial, 1.0, {"done_by": os.getpid()})
"""

# A worker that claims one job, says so, and then hangs without a heartbeat (until killed).
HOLDER = """
import sys, time
from pathlib import Path
import optuna
from kdbert.compress import storage

optuna.logging.set_verbosity(optuna.logging.WARNING)

out, url, flag = sys.argv[1], sys.argv[2] or None, Path(sys.argv[3])
study = storage.open_study(out, {"teacher": "teacher-abc", "task": "sst2"}, storage=url)
assert storage.claim(study, "cand-0@0", {}) is not None
flag.write_text("claimed")
time.sleep(600)
"""


@pytest.fixture(autouse=True)
def _quiet_optuna():
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    optuna.logging.set_verbosity(level)


@pytest.fixture(params=["journal", "postgresql"])
def url(request) -> str | None:
    """None (the output folder's journal file) or the test PostgreSQL server's URL, its studies
    deleted so that each test starts a new one."""
    if request.param == "journal":
        return None
    url = request.getfixturevalue("postgres_url")
    for summary in optuna.get_all_study_summaries(storage=url):
        optuna.delete_study(study_name=summary.study_name, storage=url)
    return url


def worker_env() -> dict[str, str]:
    src = str(Path(storage.__file__).resolve().parents[2])
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": src}


def start(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args], env=worker_env(),
                            stderr=subprocess.PIPE, text=True)


def wait_for(ready, processes: list[subprocess.Popen], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        for process in processes:
            assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "the worker processes did not get ready"
        time.sleep(0.02)


def wait_ok(process: subprocess.Popen, timeout: float = 120) -> None:
    _, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err


# ---- opening a study ----------------------------------------------------------------------------

def test_the_default_study_is_a_journal_in_the_output_folder_and_resumes(tmp_path):
    study = storage.open_study(tmp_path / "out", IDENTITY)
    assert (tmp_path / "out" / "study.journal").is_file()
    assert study.study_name == "kdbert-compress"
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    trial = storage.claim(study, "cand-0@0", {"rung": 0})
    storage.finish(study, trial, 0.75, {"steps": 100})
    held = storage.claim(study, "cand-1@0", {"rung": 0})
    assert held is not None

    again = storage.open_study(tmp_path / "out", IDENTITY)
    assert again.user_attrs == IDENTITY
    assert done_jobs(again) == {"cand-0@0"}
    assert running_jobs(again) == {"cand-1@0"}
    done = again.get_trials(states=(TrialState.COMPLETE,))[0]
    assert done.value == 0.75
    assert done.user_attrs["rung"] == 0 and done.user_attrs["steps"] == 100
    assert done.user_attrs["worker"] == storage.worker_id()
    assert open_jobs(again, ["cand-0@0", "cand-1@0", "cand-2@0"]) == ["cand-2@0"]
    # another --study in the same journal is another search
    other = storage.open_study(tmp_path / "out", {"teacher": "teacher-xyz"}, study_name="other")
    assert done_jobs(other) == set()


def test_a_study_of_another_identity_is_refused_in_one_line(tmp_path):
    storage.open_study(tmp_path, IDENTITY)
    with pytest.raises(KdbertError) as caught:
        storage.open_study(tmp_path, {"teacher": "teacher-xyz", "task": "sst2"})
    assert str(caught.value) == (
        "study 'kdbert-compress' is a search with teacher 'teacher-abc', not 'teacher-xyz': "
        "pass another --study NAME for this search (or another output folder)")
    with pytest.raises(KdbertError, match="with task 'sst2', not 'mrpc'"):
        storage.open_study(tmp_path, {"teacher": "teacher-abc", "task": "mrpc"})
    storage.open_study(tmp_path, {"teacher": "teacher-xyz", "task": "sst2"}, study_name="kd-xyz")


@pytest.mark.parametrize("bad, cause", [
    ("postgresql+psycopg://kd:secret@127.0.0.1:1/kd", "127.0.0.1"),
    ("nosuchdb://kd:secret@somewhere/kd", "nosuchdb"),
    ("not a url", "Could not parse"),
])
def test_a_storage_that_cannot_open_is_refused_in_one_line(tmp_path, bad, cause):
    with pytest.raises(KdbertError) as caught:
        storage.open_study(tmp_path, IDENTITY, storage=bad)
    message = str(caught.value)
    assert message.startswith(f"cannot open the study storage {storage.hide_password(bad)}: ")
    assert cause in message and "secret" not in message and "\n" not in message
    assert message.endswith("(check --storage: the URL, the server and its driver)")


def test_hide_password():
    assert storage.hide_password("postgresql+psycopg://me:pw@db:5432/kd") == "postgresql+psycopg://me:***@db:5432/kd"
    assert storage.hide_password("postgresql+psycopg://me@db/kd") == "postgresql+psycopg://me@db/kd"
    assert storage.hide_password("sqlite:///x.db") == "sqlite:///x.db"


# ---- claims in one process ----------------------------------------------------------------------

def test_a_job_held_or_done_elsewhere_is_not_claimed_again(tmp_path):
    mine, theirs = storage.open_study(tmp_path, IDENTITY), storage.open_study(tmp_path, IDENTITY)
    held = storage.claim(mine, "cand-0@0", {})
    assert held is not None
    assert storage.claim(theirs, "cand-0@0", {}) is None
    lost = theirs.get_trials()[-1]
    assert lost.state == TrialState.FAIL and lost.user_attrs["duplicate_of"] == held.number
    storage.finish(mine, held, 0.5)
    assert storage.claim(theirs, "cand-0@0", {}) is None  # done
    assert open_jobs(theirs, ["cand-0@0"]) == []


def test_a_claim_waits_for_an_earlier_trial_to_name_its_job(tmp_path):
    """Trial 0 asked but not yet named when trial 1 reads: trial 1 waits, sees 0 take the job."""
    slow, fast = storage.open_study(tmp_path, IDENTITY), storage.open_study(tmp_path, IDENTITY)
    unnamed = slow.ask()
    later = threading.Timer(0.3, lambda: unnamed.set_user_attr("job", "cand-0@0"))
    later.start()
    started = time.monotonic()
    assert storage.claim(fast, "cand-0@0", {}) is None
    assert time.monotonic() - started >= 0.25
    later.join()
    # a trial left unnamed past the timeout (its claimer died) holds nothing up
    slow.ask()
    assert storage.claim(fast, "cand-1@0", {}, name_timeout=0.2) is not None


def test_stale_trials_are_failed_and_their_jobs_claimable(tmp_path):
    study = storage.open_study(tmp_path, IDENTITY)
    trial = storage.claim(study, "cand-0@0", {})
    assert storage.stale_jobs(study, grace_seconds=60) == []
    assert storage.beat(trial)
    assert storage.stale_jobs(study, 60, now=lambda: time.time() + 61) == ["cand-0@0"]
    failed = study.get_trials()[0]
    assert failed.state == TrialState.FAIL and failed.user_attrs["stale"] > 60
    assert not storage.beat(trial)  # the worker learns it lost the job
    assert open_jobs(study, ["cand-0@0"]) == ["cand-0@0"]
    again = storage.claim(study, "cand-0@0", {})
    assert again is not None
    storage.finish(study, again, 1.0)
    assert done_jobs(study) == {"cand-0@0"}


# ---- worker processes ---------------------------------------------------------------------------

def test_two_worker_processes_run_every_job_exactly_once(tmp_path, url):
    out, go = tmp_path / "out", tmp_path / "go"
    storage.open_study(out, IDENTITY, storage=url)  # created once, so the workers only join
    workers = [start(WORKER, str(out), url or "", str(go), ",".join(JOBS)) for _ in range(2)]
    wait_for(lambda: len(list(tmp_path.glob("ready-*"))) == 2, workers)
    go.write_text("go")
    for worker in workers:
        wait_ok(worker)

    trials = storage.open_study(out, IDENTITY, storage=url).get_trials()
    completed = collections.Counter(t.user_attrs["job"] for t in trials if t.state == TrialState.COMPLETE)
    assert completed == collections.Counter(JOBS)  # every job, none twice
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
    assert all("duplicate_of" in t.user_attrs for t in trials if t.state == TrialState.FAIL)
    done_by = {t.user_attrs["done_by"] for t in trials if t.state == TrialState.COMPLETE}
    assert done_by == {w.pid for w in workers}  # both worked
    assert all(t.user_attrs["pid"] == t.user_attrs["done_by"] for t in trials if t.state == TrialState.COMPLETE)


@pytest.mark.parametrize("same_host", [True, False])
def test_a_killed_workers_job_is_taken_up_by_another(tmp_path, url, monkeypatch, same_host):
    out, flag = tmp_path / "out", tmp_path / "claimed"
    holder = start(HOLDER, str(out), url or "", str(flag))
    wait_for(flag.exists, [holder])
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=30)
    holder.stderr.close()

    study = storage.open_study(out, IDENTITY, storage=url)
    assert running_jobs(study) == {"cand-0@0"}
    if same_host:  # its process is gone from this host: taken back at once
        assert storage.stale_jobs(study, grace_seconds=30) == ["cand-0@0"]
    else:  # a worker on another machine is judged by its heartbeat alone
        monkeypatch.setattr(storage.socket, "gethostname", lambda: "another-machine")
        assert storage.claim(study, "cand-0@0", {}) is None  # still held until the grace runs out
        assert storage.stale_jobs(study, grace_seconds=30) == []
        half_a_minute_later = lambda: time.time() + 30.5  # noqa: E731
        assert storage.stale_jobs(study, grace_seconds=30, now=half_a_minute_later) == ["cand-0@0"]
        monkeypatch.undo()

    taker = start(WORKER, str(out), url or "", str(flag), "cand-0@0")
    wait_ok(taker)
    trials = storage.open_study(out, IDENTITY, storage=url).get_trials()
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert [t.user_attrs["job"] for t in done] == ["cand-0@0"]
    assert done[0].user_attrs["done_by"] == taker.pid
    killed = trials[0]
    assert killed.state == TrialState.FAIL and "stale" in killed.user_attrs
    assert killed.user_attrs["worker"].endswith(f":{holder.pid}")


def test_opening_a_study_prints_no_optuna_line_and_keeps_the_callers_verbosity(tmp_path):
    import logging

    optuna.logging.set_verbosity(optuna.logging.INFO)  # a user's setting, undone by the autouse fixture
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger("optuna").addHandler(handler)  # Optuna's own handler writes to the stream it found first
    try:
        storage.open_study(tmp_path, {"teacher": "teacher-abc", "task": "sst2"})
    finally:
        logging.getLogger("optuna").removeHandler(handler)
    assert not any("A new study created" in message for message in seen)
    assert optuna.logging.get_verbosity() == optuna.logging.INFO
