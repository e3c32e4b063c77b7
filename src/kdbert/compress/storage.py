"""Where ``kdbert compress``'s Optuna study lives, and how workers share its units of work.

Storage (:func:`open_study`): with no URL the study is Optuna's journal file
``<output>/study.journal``, which one process or several on one machine share with no server
(Optuna's symlink lock on the file; a lock left by a killed process is broken after 30 s); with ``--storage URL`` it is any database
Optuna takes through SQLAlchemy, PostgreSQL being the documented one for several machines
(``postgresql+psycopg://user@host:5432/db``). The study is named ``kdbert-compress`` unless
``--study NAME`` says otherwise, maximizes, and keeps the search's identity (teacher, task, ...) as
study user attributes: joining a study made for another identity is refused in one line.

Claims (:func:`claim`): a job is a string naming one unit of work (``"bert-2x128@0"``: that
candidate at rung 0) and every trial of the study is one claim of one job. Optuna has no atomic
"create a trial with these attributes", so a claim is:

1. ``study.ask()``, then set the trial's user attributes ``job``, the caller's, ``worker``
   (``host:pid``) and ``heartbeat`` (epoch seconds);
2. wait until every lower-numbered running trial names its job (a claim that has asked but not
   yet written its ``job``); one that stays unnamed for ``name_timeout`` seconds after its start
   is a claimer that died in between and is left out;
3. read the trials again: if the job already has a completed trial, or a running trial with a
   lower number, this claim lost; its trial is told FAIL with user attribute ``duplicate_of``
   (the winner's number) and :func:`claim` returns ``None``.

Each claimer writes its ``job`` before it reads, so of two claims of one job the later-numbered
one sees the other (step 2 makes sure, whatever the order of the writes), and the lowest-numbered
running claim is the one that runs it. This needs nothing from the storage but read-after-write,
so it holds for the journal file and for a database shared by machines alike. Every trial of a
study these functions serve must be made by :func:`claim` (``study.ask()`` would hand over a trial
queued by ``enqueue_trial`` instead of a fresh one).

Faults: a worker calls :func:`beat` while it works; :func:`stale_jobs` fails the running trials
whose heartbeat is older than the grace period (user attribute ``stale``) and returns their jobs.
A job is claimable again once none of its trials is running or complete (:func:`claim`'s step 3),
so a killed worker's job goes to the next claimer. Optuna's own heartbeat (``heartbeat_interval``,
``RetryFailedTrialCallback``) does not serve here: in Optuna 5 only ``RDBStorage`` implements it
(``JournalStorage`` is no ``BaseHeartbeat``), and only ``study.optimize`` runs its thread, never
ask-and-tell; hence the ``heartbeat`` attribute, the same on every storage.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, Trial, TrialState

from kdbert.errors import KdbertError

STUDY_NAME = "kdbert-compress"
JOURNAL_FILE = "study.journal"
# a claimer asks, then names its job at once: a trial unnamed this long after its start is dead
NAME_TIMEOUT = 30.0
POLL_SECONDS = 0.05
CONNECT_TIMEOUT = 10


# ---- the study ----------------------------------------------------------------------------------

def open_study(output_dir: str | Path, identity: dict[str, Any], storage: str | None = None,
               study_name: str | None = None) -> optuna.Study:
    """Create or join the study ``study_name`` (default ``kdbert-compress``) in ``storage``.

    ``storage`` None: the journal file ``<output_dir>/study.journal``; else any SQLAlchemy URL
    Optuna takes. ``identity`` is written as study user attributes when missing and must equal
    what a joined study holds (:class:`KdbertError` otherwise, as for a storage that cannot open).
    """
    name = study_name or STUDY_NAME
    backend = _storage(Path(output_dir), storage)
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # compress prints its own lines, not Optuna's INFO one
    try:
        study = optuna.create_study(storage=backend, study_name=name, direction="maximize",
                                    load_if_exists=True)
    except Exception as error:  # a database that accepts the connection but not the study
        raise _storage_error(storage, error, Path(output_dir)) from error
    finally:
        optuna.logging.set_verbosity(level)
    _check_identity(study, identity, where=storage and hide_password(storage))
    return study


def journal_path(output_dir: str | Path) -> Path:
    """The default study's journal file in ``output_dir``."""
    return Path(output_dir) / JOURNAL_FILE


def hide_password(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part replaced by ``***``."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def _storage(output_dir: Path, url: str | None) -> optuna.storages.BaseStorage:
    try:
        if url is None:
            output_dir.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(journal_path(output_dir))))
        kwargs = {"connect_args": {"connect_timeout": CONNECT_TIMEOUT}} if url.startswith("postgres") else {}
        return RDBStorage(url, engine_kwargs=kwargs)
    except Exception as error:  # a bad URL, a missing driver, a server that does not answer
        raise _storage_error(url, error, output_dir) from error


def _storage_error(url: str | None, error: BaseException, output_dir: Path) -> KdbertError:
    cause = (str(error).strip().splitlines() or [type(error).__name__])[0].strip()
    if url is None:
        return KdbertError(f"cannot open the study storage {journal_path(output_dir)}: {cause} "
                           "(check that --output-dir can be written)")
    return KdbertError(f"cannot open the study storage {hide_password(url)}: {cause} "
                       "(check --storage: the URL, the server and its driver)")


def _check_identity(study: optuna.Study, identity: dict[str, Any], where: str | None) -> None:
    for key, value in identity.items():
        if key not in study.user_attrs:
            study.set_user_attr(key, value)
    stored = study.user_attrs  # read again: two processes may have created the study at once
    for key, value in identity.items():
        if stored.get(key) != value:
            place = f" in {where}" if where else ""
            raise KdbertError(
                f"study '{study.study_name}'{place} is a search with {key} {stored.get(key)!r}, "
                f"not {value!r}: pass another --study NAME for this search (or another output folder)")


# ---- claims -------------------------------------------------------------------------------------

def worker_id() -> str:
    """``host:pid`` of this process, as claims record it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def claim(study: optuna.Study, job: str, attrs: dict[str, Any] | None = None, *,
          name_timeout: float = NAME_TIMEOUT) -> Trial | None:
    """A running trial that holds ``job`` for this process, or None if another claim has it."""
    trial = study.ask()
    for key, value in {"job": job, **(attrs or {}), "worker": worker_id(), "heartbeat": time.time()}.items():
        trial.set_user_attr(key, value)
    trials = _wait_for_names(study, trial.number, name_timeout)
    winner = _holder(trials, job, trial.number)
    if winner is None:
        return trial
    trial.set_user_attr("duplicate_of", winner)
    study.tell(trial, state=TrialState.FAIL)
    return None


def finish(study: optuna.Study, trial: Trial, value: float, attrs: dict[str, Any] | None = None) -> None:
    """Record ``attrs`` on ``trial``, then complete it with ``value``."""
    for key, value_ in (attrs or {}).items():
        trial.set_user_attr(key, value_)
    study.tell(trial, value)


def give_back(study: optuna.Study, trial: Trial) -> None:
    """Fail this process's ``trial`` (its segment stopped on an error), so that its job goes to the next
    claimer at once; where the study cannot be written (a full disk), a later process takes it back
    as a gone worker's (:func:`stale_jobs`)."""
    with contextlib.suppress(Exception):
        trial.set_user_attr("given_back", True)
        study.tell(trial, state=TrialState.FAIL)


def beat(trial: Trial, now: Callable[[], float] = time.time) -> bool:
    """Tell the study that the worker holding ``trial`` is alive; False if the trial was failed
    meanwhile (:func:`stale_jobs` in another process took the job back: stop working on it)."""
    try:
        trial.set_user_attr("heartbeat", now())
    except UpdateFinishedTrialError:
        return False
    return True


def _wait_for_names(study: optuna.Study, number: int, name_timeout: float) -> list[FrozenTrial]:
    while True:
        trials = study.get_trials(deepcopy=False)
        if not any(_unnamed(t, name_timeout) for t in trials if t.number < number):
            return trials
        time.sleep(POLL_SECONDS)


def _unnamed(trial: FrozenTrial, name_timeout: float) -> bool:
    return (trial.state == TrialState.RUNNING and "job" not in trial.user_attrs
            and _age(trial) < name_timeout)


def _age(trial: FrozenTrial) -> float:
    start = trial.datetime_start  # naive local time on every Optuna storage
    return (datetime.now() - start).total_seconds() if start else 0.0


def _holder(trials: Iterable[FrozenTrial], job: str, number: int) -> int | None:
    """The number of a trial that holds ``job`` ahead of trial ``number``, if any."""
    for other in trials:
        if other.number == number or other.user_attrs.get("job") != job:
            continue
        if other.state == TrialState.COMPLETE or (other.state == TrialState.RUNNING and other.number < number):
            return other.number
    return None


def worker_gone(worker: str) -> bool:
    """Whether the worker ``host:pid`` is known to have ended: it ran on this host and its process
    is gone (a worker on another host is judged by its heartbeat alone)."""
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process
        return False
    return False


def stale_jobs(study: optuna.Study, grace_seconds: float, now: Callable[[], float] = time.time) -> list[str]:
    """Fail the running trials whose heartbeat is older than ``grace_seconds``, or whose worker ran
    on this host and has ended (:func:`worker_gone`); their jobs.

    A running trial with no job (a claimer that died before naming it) older than the grace is
    failed too, and names no job.
    """
    jobs = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        beat_at = trial.user_attrs.get("heartbeat")
        age = now() - beat_at if beat_at is not None else _age(trial)
        gone = worker_gone(trial.user_attrs.get("worker", ""))
        if (age > grace_seconds or gone) and _fail(study, trial, {"stale": round(age, 1)}):
            if "job" in trial.user_attrs:
                jobs.append(trial.user_attrs["job"])
    return jobs


def _fail(study: optuna.Study, trial: FrozenTrial, attrs: dict[str, Any]) -> bool:
    """Fail another process's running trial; False if it finished meanwhile (or another did it)."""
    try:
        held = Trial(study, trial._trial_id)  # Optuna names a trial of another process only by id
        for key, value in attrs.items():
            held.set_user_attr(key, value)
        study.tell(trial.number, state=TrialState.FAIL)
    except (UpdateFinishedTrialError, ValueError):
        return False
    return True
