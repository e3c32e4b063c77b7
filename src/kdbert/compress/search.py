"""Step 2 of ``kdbert compress``: distil the candidates that meet the speed target by asynchronous
successive halving, as an Optuna study that any number of worker processes share.

Every unit of work is one *segment* of one candidate's run: train it from where it paused to the
end of its next rung (:mod:`kdbert.compress.schedule` says which segment comes next and how many
steps a rung is), evaluate it on the held-out rows, pause. Each candidate has one run folder,
``runs/<candidate>``, an ordinary ``kdbert distill task`` folder set up once for
:func:`~kdbert.compress.schedule.horizon` steps (its recipe, :mod:`kdbert.compress.recipes`, with
the same options in every segment); a segment resumes it with a later ``pause_at_step``, so a
promoted candidate continues and none restarts. What a run prints goes to ``runs/<candidate>.log``.
The teacher and the task's rows are loaded once per process (:class:`Loaded`; compress hands over
its own), not once per segment.

Each segment is a trial of the study (:mod:`kdbert.compress.storage`: claimed so that no two
workers run the same one, the job named ``<candidate>#<k>``, its k-th segment), completed with its
held-out score and the segment's facts as the user attribute ``segment`` (steps in all and this
time, scores, seconds, the worker). The study's own user attributes hold the search's identity and
its :class:`Plan` (candidates in running order, latency, the winner's goal, the wall-time
:class:`Window`), so that a worker that joins needs nothing else. A worker loops: fail the trials
of workers that stopped beating (their segments become claimable again, and resume from the run
folder's last checkpoint), read every segment, ask the schedule, claim, train, tell. It stops when
nothing is left that fits the window and nothing runs. Runs are given the window's end as their
deadline: one that would overrun stops there, evaluated and saved.

``--workers N`` runs N worker processes at once on this machine (the cores split evenly between
them; on a machine with GPUs, worker i sees GPU ``i mod count``), while this process follows the
study and prints each finished segment. Several machines join one search by sharing ``--storage``
(and the output folder, where the runs are; :func:`join`).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import optuna
from optuna.trial import TrialState

from kdbert.compress import storage
from kdbert.compress.augment import base_name, is_augmented, variant_rows_file
from kdbert.compress.build import build_from_general, build_from_teacher
from kdbert.compress.options import CompressConfig
from kdbert.compress.recipes import SearchSettings, kind, reads_stored_logits, run_options, starts_from_teacher
from kdbert.compress.report import recipe_line
from kdbert.compress.schedule import Goal, Job, horizon, latest, next_job
from kdbert.compress.start_pooling import reads_pairs_apart
from kdbert.compress.speed import shape_context
from kdbert.core.hardware import available_cores
from kdbert.core.loading import load_task_model, load_tokenizer, resolve_model_path
from kdbert.data.load import TaskData, TaskOptions, load_task
from kdbert.errors import KdbertError
from kdbert.families.importance import ROWS, Importance, task_importance
from kdbert.families.registry import Candidate, family_of_folder
from kdbert.families.selection import KINDS as SELECTED_KINDS
from kdbert.families.selection import LAYER_CHOICES, layout_of
from kdbert.methods.front import distill_task

BEAT_SECONDS = 10.0  # a worker's heartbeat while it trains
GRACE_SECONDS = 90.0  # a running segment whose worker has not beaten for this long is taken back
POLL_SECONDS = 1.0  # how often an idle worker (or the process following the workers) reads the study
READY_SECONDS = 300.0  # the most a --workers process waits for the others to start
PLAN_ATTR, ENDED_ATTR, LEADER_ATTR = "plan", "ended", "leader"


@dataclass(frozen=True)
class Window:
    """The wall time the search may spend, as ``time.time()`` seconds (the runs' deadlines, shared
    by every worker of the study): all of it until ``end``, round 0 until ``first_round_end``."""

    end: float
    first_round_end: float

    @classmethod
    def from_now(cls, seconds: float, first_round_share: float, now: float | None = None,
                 labelling_seconds: float = 0.0) -> Window:
        """A window of ``seconds`` from ``now`` (default: now), round 0 getting ``first_round_share`` of
        it less ``labelling_seconds``, the teacher's labelling of the training rows, which falls in
        the first runs but is no round's training::

            first_round_end = now + labelled + first_round_share * (seconds - labelled),
            labelled = min(labelling_seconds, seconds)

        (on SST-2 against MPNet-base, 12 of a 60-minute window's minutes labelled the rows: counted
        in round 0's third, they left 8 minutes in which candidates could start, and an admitted
        4-layer student never did)."""
        now = time.time() if now is None else now
        labelled = min(max(labelling_seconds, 0.0), seconds)
        return cls(now + seconds, now + labelled + first_round_share * (seconds - labelled))


@dataclass(frozen=True)
class Plan:
    """What every worker of a study searches: the candidates in running order (``spread_order``),
    the teacher and task, the settings, the winner's goal and the window; ``general``: the folder of
    the general students (:mod:`kdbert.students.store`) that candidates of ``general_shapes`` start from."""

    candidates: list[Candidate]
    teacher_dir: str
    task: TaskOptions
    output_dir: str
    settings: SearchSettings
    goal: Goal
    window: Window
    threads: int | None = None
    clock: Callable[[], float] = time.time  # what "now" is to the schedule (the runs' deadlines: time.time)
    general: str | None = None  # the build of general students BERT-style candidates of its shapes start from
    general_shapes: tuple[str, ...] = ()
    labelling: dict | None = None  # {"cache": folder, "onnx": the teacher export that labels, or None}
    selection: str = CompressConfig.selection  # how candidates of the teacher's architecture take its weights
    head: str = CompressConfig.head  # whether they start with the teacher's task head or a fresh one
    by_name: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "by_name", {c.name: c for c in self.candidates})

    def summary(self) -> dict:
        """The plan as the study keeps it (JSON): what a joining worker checks and reads."""
        return {"candidates": [c.name for c in self.candidates], "window": asdict(self.window),
                "goal": asdict(self.goal), "settings": asdict(self.settings), "general": self.general,
                "general_shapes": list(self.general_shapes), "labelling": self.labelling}


def job_key(candidate: str, segments: list[dict]) -> str:
    """The job of ``candidate``'s next segment, ``<candidate>#<k>`` with k its done segments: two
    workers deciding on the same candidate at once claim the same job, and one of them runs it."""
    done = sum(1 for s in segments if s["candidate"] == candidate and s["state"] == "done")
    return f"{candidate}#{done}"


def segments_of(study: optuna.Study) -> list[dict]:
    """Every segment of the study: done ones (completed trials' ``segment``) and running ones
    (``candidate``, ``rung``, ``state: running``); failed claims and taken-back trials are left out."""
    segments = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
        attrs = trial.user_attrs
        if trial.state == TrialState.COMPLETE and "segment" in attrs:
            segments.append({**attrs["segment"], "state": "done"})
        elif trial.state == TrialState.RUNNING and "rung" in attrs:  # claim attrs are written one by one
            segments.append({"candidate": attrs["candidate"], "rung": attrs["rung"], "state": "running"})
    return segments


def run_folder(output_dir: str | Path, candidate: str) -> Path:
    return Path(output_dir) / "runs" / candidate


def _start(plan: Plan, candidate: Candidate) -> Path | None:
    """The folder a candidate's run starts from (its build from the teacher or its general student,
    ``starts/<base name>``; made by :func:`build_starts`), or None for a family that builds its own
    student (the BiLSTM)."""
    return Path(plan.output_dir) / "starts" / base_name(candidate.name) if starts_from_teacher(candidate) else None


def build_starts(plan: Plan, context=None, teacher: tuple | None = None, data: TaskData | None = None) -> None:
    """Build every candidate's start once, before any worker runs (an augmented variant shares its
    twin's): from its general student where ``plan.general`` has its shape, else from the teacher
    (by the importance of its units on the training rows with ``plan.selection`` importance,
    :func:`search_importance`; from the first, last and evenly-between layers with ``ends``, the first M
    with ``bottom``), with the teacher's task head unless ``plan.head`` is ``fresh`` (a pair-pooled
    classifier's: a threshold on its cosine fitted on the training rows); ``context``, ``teacher``
    (model, tokenizer) and the task's ``data``: as the caller loaded them, else loaded here."""
    todo = [c for c in plan.candidates if (start := _start(plan, c)) is not None and not (start / "config.json").is_file()]
    if not todo:
        return
    context = context or shape_context(plan.teacher_dir, plan.task)
    teacher = teacher or family_of_folder(plan.teacher_dir).load(Path(plan.teacher_dir))
    selected = [c for c in todo if kind(c) in SELECTED_KINDS and base_name(c.name) not in plan.general_shapes]
    if (selected and plan.selection == "importance") or (context.pair and context.num_labels > 1):
        data = data or load_task(plan.task, seed=plan.settings.seed)  # ranks units; fits pair-pooled heads
    if selected and plan.selection == "importance":
        apart = reads_pairs_apart(teacher[0], context, plan.settings.pooling, plan.head == "teacher")
        context = replace(context, importance=search_importance(plan, teacher, data, apart))
    if plan.selection in LAYER_CHOICES:
        context = replace(context, layer_map=plan.selection)
    context = replace(context, head=plan.head)
    for candidate in todo:
        base = replace(candidate, name=base_name(candidate.name))
        start = _start(plan, candidate)
        if base.name in plan.general_shapes:
            build_from_general(base, Path(plan.general) / base.name, plan.teacher_dir, plan.task, start, context,
                               teacher, plan.settings.pooling, data)
        else:
            build_from_teacher(base, plan.teacher_dir, plan.task, start, context, teacher, plan.settings.pooling, data)


IMPORTANCE_SHARE = 0.1  # of the search's window, the most the ranking of the teacher's units may take: on MRPC
# the layers' pair cosine elimination takes 55-75 s on one AVX-512 core, past 5% of a 30-minute window, where
# the 3-layer cut fell back to evenly spaced layers


def search_importance(plan: Plan, teacher: tuple, data: TaskData | None = None,
                      pairs_apart: bool = False) -> Importance:
    """The teacher's units ranked on the task's training rows (of ``data``, else loaded;
    :func:`~kdbert.families.importance.task_importance`; ``pairs_apart``: for cuts that pool pairs)
    within ``IMPORTANCE_SHARE`` of what is left of the search's window, once per search: kept in its
    output folder."""
    out = Path(plan.output_dir)
    found = Importance.load(out)
    if found is not None:
        return found
    model, tokenizer = teacher
    data = data or load_task(plan.task, seed=plan.settings.seed)
    rows = data.train
    started = time.time()
    allowed = IMPORTANCE_SHARE * max(0.0, plan.window.end - plan.clock())
    ranked = task_importance(model, layout_of(model.config), rows, tokenizer, data.spec.max_seq_len, allowed,
                             pairs_apart)
    out.mkdir(parents=True, exist_ok=True)
    ranked.save(out)
    order = ", ".join(str(i + 1) for i in ranked.dropped)
    print(f"importance: the teacher's heads, FFN units and hidden units ranked on up to {min(len(rows), ROWS)} "
          f"training rows, its layers by {ranked.layer_rule}" + (f" (dropped in the order {order})" if order else "")
          + f", in {time.time() - started:.0f} s of the {allowed:.0f} s allowed"
          + (" (ranking the layers would have taken longer: a longer --budget-minutes affords it)"
             if ranked.layer_rule == "uniform" else ""), flush=True)
    return ranked


def start_of(plan: Plan, candidate: str) -> str:
    """How ``candidate``'s run started, from its start's ``student_init.json``: ``teacher-weights``,
    ``general`` or, for a family that builds its own student, ``own``."""
    start = _start(plan, plan.by_name[candidate])
    if start is None:
        return "own"
    return json.loads((start / "student_init.json").read_text()).get("start", "teacher-weights")


def _options(plan: Plan, candidate: Candidate) -> dict:
    """The ``kdbert distill task`` options of ``candidate``'s run: its recipe for :func:`horizon`
    steps, warm-up over a tenth of the first rung, one checkpoint kept; the same in every segment."""
    out = Path(plan.output_dir)
    steps = horizon(plan.settings)
    labelling = plan.labelling or {}
    export_labels = bool(labelling.get("kd"))
    options = {**run_options(candidate, steps, plan.settings, str(out / "teacher-cache"), export_labels),
               "teacher": plan.teacher_dir, "warmup_ratio": 0.1 * plan.settings.first_steps / steps,
               "keep_checkpoints": 1}  # the one a later segment continues from
    if plan.threads:
        options["threads"] = plan.threads
    start = _start(plan, candidate)
    if start is not None:
        options["student"] = str(start)
    if reads_stored_logits(candidate, plan.settings, export_labels):  # stored once for every run and search
        options["logits_cache"] = labelling.get("cache") or str(out / "teacher-logits")
        if labelling.get("onnx"):
            options["teacher_onnx"] = labelling["onnx"]
    if plan.task.unlabelled or is_augmented(candidate.name):  # rows without labels: labelled once for every
        # run, by the labeller the plan timed (plan_labelling), into the store it counted them in
        options["unlabelled_cache"] = labelling.get("cache") or str(out / "teacher-logits")
        if labelling.get("onnx"):
            options["unlabelled_onnx"] = labelling["onnx"]
    return options


@dataclass
class Loaded:
    """What every segment a process runs reads, loaded once per process (or handed over by the
    caller that has it): the teacher as (model, tokenizer), and the task's rows by task options
    (an augmented variant's task adds its rows file)."""

    teacher: tuple | None = None
    rows: dict[str, TaskData] = field(default_factory=dict)

    def keep(self, task: TaskOptions, seed: int, data: TaskData) -> None:
        self.rows[self._key(task, seed)] = data

    def task_data(self, task: TaskOptions, seed: int) -> TaskData:
        key = self._key(task, seed)
        if key not in self.rows:
            self.rows[key] = load_task(task, seed=seed)
        return self.rows[key]

    @staticmethod
    def _key(task: TaskOptions, seed: int) -> str:
        return json.dumps([asdict(task), seed], sort_keys=True)

    def teacher_of(self, plan: Plan, data: TaskData) -> tuple:
        if self.teacher is None:
            path = resolve_model_path(plan.teacher_dir)
            self.teacher = (load_task_model(path, data.spec, new_head_ok=False), load_tokenizer(path))
        return self.teacher


def distil_segment(plan: Plan, job: Job, done_steps: int, loaded: Loaded | None = None,
                   folder: Path | None = None) -> dict:
    """Train ``job.candidate``'s run from ``done_steps`` to ``job.steps`` (or the window's end),
    evaluated on the held-out rows; the segment's facts (module doc). ``loaded``: the teacher and
    rows this process has loaded (filled as it goes); ``folder``: the run's folder (default:
    :func:`run_folder`)."""
    candidate = plan.by_name[job.candidate]
    task = plan.task
    out = Path(plan.output_dir)
    if is_augmented(candidate.name):
        rows = variant_rows_file(out)
        if not rows.is_file():
            raise KdbertError(f"{candidate.name} trains on {rows}, which is missing; rerun compress "
                              "with the same --augment to write it")
        task = replace(task, unlabelled=str(rows))
    loaded = loaded if loaded is not None else Loaded()
    data = loaded.task_data(task, plan.settings.seed)
    if plan.goal.teacher_decide_predictions is not None and data.decide:  # scored against the teacher's
        data = replace(data, decide_baseline=np.asarray(plan.goal.teacher_decide_predictions))
    folder = folder or run_folder(out, candidate.name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    options = _options(plan, candidate)
    started = time.time()
    with open(folder.with_name(f"{folder.name}.log"), "a") as log, contextlib.redirect_stdout(log):
        report = distill_task(task, options, str(folder), resume=True,
                             overwrite=not (folder / "run_config.json").is_file(), deadline=plan.window.end,
                             pause_at_step=job.steps, data=data, teacher=loaded.teacher_of(plan, data))
    steps = (report["paused_at_step"] or (report["stopped_early"] or {}).get("steps_run")
             or horizon(plan.settings))
    labelling = [(report.get(key) or {}).get("seconds", 0.0) for key in ("teacher_logits", "unlabelled")]
    metrics = report["dev_metrics"]
    return {"candidate": candidate.name, "rung": job.rung, "method": options["method"], "recipe": recipe_line(report),
            "steps": steps,
            "trained": max(0, steps - done_steps), "stopped": bool(report["stopped_early"]),
            "best_step": report["best_step"],
            "score": metrics.get("selection_score", metrics["score"]),
            **{key: metrics[name] for key, name in (("se", "selection_se"), ("loss", "selection_loss"),
                                                     ("decide_score", "decide_score"), ("decide_se", "decide_se"),
                                                     ("decide_paired_se", "decide_paired_se"))
               if name in metrics},
            "dev_score": metrics["score"], "seconds": round(time.time() - started, 1),
            "labelling_seconds": round(sum(labelling), 1), "train_seconds": report["train_seconds"],
            "run": str(folder), "worker": storage.worker_id(),
            **({"gpu": os.environ["CUDA_VISIBLE_DEVICES"]} if os.environ.get("CUDA_VISIBLE_DEVICES") else {})}


@contextlib.contextmanager
def _every(seconds: float, action: Callable[[], object]):
    """Call ``action()`` now and every ``seconds`` while the block runs, until it returns False."""
    stop = threading.Event()

    def repeat():
        while action() is not False and not stop.wait(seconds):
            pass

    thread = threading.Thread(target=repeat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def missing_starts(plan: Plan) -> list[str]:
    """The candidates whose start from the teacher is not in the plan's output folder."""
    return [c.name for c in plan.candidates if (start := _start(plan, c)) is not None
            and not (start / "config.json").is_file()]


def under_way(study: optuna.Study) -> bool:
    """Whether a search has started in ``study`` (its plan written)."""
    return PLAN_ATTR in study.user_attrs


def other_leader(study: optuna.Study) -> bool:
    """Whether another live process leads the search in ``study`` (its heartbeat, :func:`leading`,
    younger than ``GRACE_SECONDS``): this one joins it as a worker."""
    leader = study.user_attrs.get(LEADER_ATTR)
    return (leader is not None and leader["worker"] != storage.worker_id()
            and time.time() - leader["heartbeat"] < GRACE_SECONDS and not storage.worker_gone(leader["worker"]))


def wait_for_plan(study: optuna.Study) -> dict:
    """The plan of the search another process leads in ``study``, once it has timed the candidates
    and built their starts (or ended); refused if that process stops first."""
    while PLAN_ATTR not in study.user_attrs and not study.user_attrs.get(ENDED_ATTR):
        if not other_leader(study):
            raise KdbertError(f"the process leading study '{study.study_name}' stopped before it planned the "
                              "search; run this command again (it then leads the search)")
        time.sleep(POLL_SECONDS)
    return study.user_attrs.get(PLAN_ATTR, {})


def ended_elsewhere(study: optuna.Study, output_dir: str | Path) -> bool:
    """Whether the search in ``study`` has ended and was led from another host or output folder
    (this process has nothing to do there; a rerun where it was led writes its report again)."""
    leader = study.user_attrs.get(LEADER_ATTR)
    if not study.user_attrs.get(ENDED_ATTR) or leader is None:
        return False
    return (leader["worker"].rpartition(":")[0] != storage.worker_id().rpartition(":")[0]
            or leader["output_dir"] != str(Path(output_dir).resolve()))


def leading(study: optuna.Study, output_dir: str | Path):
    """Mark this process as the search's leader (the one that times, follows and ships, into
    ``output_dir``) while the block runs, beating every ``BEAT_SECONDS``."""
    folder = str(Path(output_dir).resolve())
    return _every(BEAT_SECONDS, lambda: study.set_user_attr(
        LEADER_ATTR, {"worker": storage.worker_id(), "heartbeat": time.time(), "output_dir": folder}))


def current_window(study: optuna.Study, plan: Plan) -> Window:
    """The window the study holds now (a resumed search gives itself a new one)."""
    window = study.user_attrs.get(PLAN_ATTR, {}).get("window")
    return Window(**window) if window else plan.window


def work(study: optuna.Study, plan: Plan, on_segment: Callable[[dict], None] | None = None,
         loaded: Loaded | None = None) -> int:
    """Run segments of ``plan`` claimed from ``study`` until nothing is left (module doc), calling
    ``on_segment(row)`` after each; returns how many this worker ran. ``loaded``: what the caller
    has loaded of the teacher and the task (:class:`Loaded`)."""
    order = [c.name for c in plan.candidates]
    loaded = loaded if loaded is not None else Loaded()
    ran = 0
    while True:
        storage.stale_jobs(study, GRACE_SECONDS)
        segments = segments_of(study)
        window = current_window(study, plan)
        job = next_job(order, segments, plan.settings, plan.goal, plan.clock(), window.end, window.first_round_end)
        if job is None:
            if not any(s["state"] == "running" for s in segments):
                return ran
            time.sleep(POLL_SECONDS)  # what runs may make a promotion possible
            continue
        done = latest(segments).get(job.candidate, {}).get("steps", 0)
        trial = storage.claim(study, job_key(job.candidate, segments),
                              {"candidate": job.candidate, "rung": job.rung, "steps": job.steps})
        if trial is None:
            continue
        try:
            with _every(BEAT_SECONDS, lambda: storage.beat(trial)):  # False once the trial was taken back
                row = distil_segment(replace(plan, window=window), job, done, loaded)
        except BaseException:
            storage.give_back(study, trial)
            raise
        storage.finish(study, trial, row["score"], {"segment": row})
        ran += 1
        if on_segment is not None:
            on_segment(row)


def _worker(index: int, plan: Plan, storage_url: str | None, study_name: str | None, identity: dict,
            gpus: int, ready) -> None:
    """One of ``--workers``' processes: its GPU chosen, its output to ``workers/<index>.log``; it
    starts working once every worker has opened the study (``ready``, a barrier), so that the
    first segments spread over all of them."""
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
    log_path = Path(plan.output_dir) / "workers" / f"{index}.log"
    with open(log_path, "a") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        study = storage.open_study(plan.output_dir, identity, storage_url, study_name)
        with contextlib.suppress(threading.BrokenBarrierError):  # a worker that died first: go on
            ready.wait(timeout=READY_SECONDS)
        work(study, plan)


def run_search(plan: Plan, study: optuna.Study, workers: int = CompressConfig.workers, storage_url: str | None = None,
               study_name: str | None = None, identity: dict | None = None,
               on_segment: Callable[[dict], None] | None = None, context=None, loaded: Loaded | None = None) -> dict:
    """Distil ``plan``'s candidates in ``study`` with ``workers`` processes (module doc); returns the
    search as the report keeps it (:func:`summary`). A study marked ended is returned as it is.
    ``context``: for :func:`build_starts`; ``loaded``: what this process has loaded of the teacher
    and the task (its segments with one worker, and the starts, use them)."""
    if not plan.task.held_out_fraction:
        raise KdbertError("the search picks on held-out training rows: pass --held-out-fraction (e.g. 0.1)")
    if not study.user_attrs.get(ENDED_ATTR):
        build_starts(plan, context, loaded and loaded.teacher, loaded and loaded.task_data(plan.task, plan.settings.seed))
        study.set_user_attr(PLAN_ATTR, plan.summary())  # what joining processes wait for
        if workers == 1:
            work(study, plan, on_segment, loaded)
        else:
            _run_workers(plan, study, workers, storage_url, study_name, identity or {}, on_segment)
        study.set_user_attr(ENDED_ATTR, True)
    return summary(study)


def _run_workers(plan: Plan, study, workers: int, storage_url, study_name, identity: dict, on_segment) -> None:
    """``workers`` processes working the study, the cores split evenly (unless ``--threads`` said),
    while this one prints each segment any worker finishes."""
    import torch

    gpus = torch.cuda.device_count()
    threads = plan.threads or (None if gpus else max(1, available_cores() // workers))
    plan = replace(plan, threads=threads)
    (Path(plan.output_dir) / "workers").mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(workers)
    processes = [context.Process(target=_worker, args=(i, plan, storage_url, study_name, identity, gpus, ready))
                 for i in range(workers)]
    for process in processes:
        process.start()
    seen: set[tuple] = set()
    try:
        while True:
            alive = any(p.is_alive() for p in processes)
            for row in (s for s in segments_of(study) if s["state"] == "done"):
                key = (row["candidate"], row["steps"], row["worker"])
                if key not in seen:
                    seen.add(key)
                    if on_segment is not None:
                        on_segment(row)
            if not alive:
                break
            time.sleep(POLL_SECONDS)
    finally:
        for process in processes:
            process.join(timeout=0 if any(p.exitcode not in (None, 0) for p in processes) else None)
            if process.is_alive():
                process.terminate()
    failed = [i for i, p in enumerate(processes) if p.exitcode != 0]
    if failed:
        raise KdbertError(f"search worker(s) {', '.join(map(str, failed))} failed; see "
                          f"{Path(plan.output_dir) / 'workers'}/<worker>.log")


def summary(study: optuna.Study) -> dict:
    """The search for the report: every done segment in the order they ended, and ``rounds``: per
    rung, each candidate's segment there (its last one, a topped-up rung 0's longest)."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    segments = [t.user_attrs["segment"] for t in sorted(trials, key=lambda t: t.datetime_complete)
                if "segment" in t.user_attrs]
    rounds: list[dict[str, dict]] = []
    for row in segments:
        while len(rounds) <= row["rung"]:
            rounds.append({})
        rounds[row["rung"]][row["candidate"]] = row
    return {"segments": segments, "rounds": [list(rung.values()) for rung in rounds],
            "workers": sorted({row["worker"] for row in segments})}


def segment_line(row: dict) -> str:
    """The line a finished segment prints: rung, candidate, steps, held-out score, seconds."""
    stopped = " (stopped at the budget's end)" if row.get("stopped") else ""
    return (f"rung {row['rung']}  {row['candidate']}  {row['steps']} steps (+{row['trained']}){stopped}  "
            f"held-out {row['score']:.2f}{_error(row.get('se'))}  {row['seconds']:.0f} s")


def _error(se: float | None) -> str:
    return "" if se is None else f" ± {se:.2f}"


def runtime_line(row: dict) -> str:
    """The precision and threads the search's runs train with (from the run of ``row``), said once."""
    runtime = json.loads((Path(row["run"]) / "distill_report.json").read_text())["runtime"]
    precision = "float32" if runtime["mixed_precision"] == "no" else runtime["mixed_precision"]
    return (f"runs train in {precision} ({runtime['mixed_precision_reason']}) on {runtime['threads']} thread(s) "
            f"({runtime['threads_reason']}); each run's own output: runs/<candidate>.log")


def teacher_row_seconds(table: dict) -> float:
    """About the deployed teacher's time per row on this machine, from the speed ``table``: its
    throughput batch at the timed length, scaled to the task's median row length."""
    teacher = table["teacher"]
    return (1.0 / teacher["throughput"]) * teacher["real_length_p50"] / table["settings"]["seq_len"]


def first_round_seconds(candidates: list[Candidate], settings: SearchSettings, unlabelled_rows: int,
                        row_seconds: float, export_labels: bool = False,
                        every_run_labels: bool = False) -> tuple[int, float]:
    """The fewest rows one of ``candidates``' first segments runs the teacher on, ``first_steps *
    batch_size`` (stored logits: the ``unlabelled_rows`` of training not stored yet, labelled once;
    ``export_labels``: :func:`~kdbert.compress.recipes.reads_stored_logits`; ``every_run_labels``,
    with ``--unlabelled`` rows: a candidate with the teacher beside it waits for those labels too,
    counted as all ``unlabelled_rows``), and their seconds at ``row_seconds`` a row. A lower
    estimate: the student's own steps come on top."""
    beside = settings.first_steps * settings.batch_size + (unlabelled_rows if every_run_labels else 0)
    rows = min(unlabelled_rows if reads_stored_logits(c, settings, export_labels) else beside for c in candidates)
    return rows, rows * row_seconds


def check_budget(table: dict, candidates: list[Candidate], settings: SearchSettings, unlabelled_rows: int,
                 budget_minutes: float, seconds: float, export_labels: bool = False,
                 every_run_labels: bool = False) -> None:
    """Refuse a search of ``seconds`` (what ``budget_minutes`` leaves after the timing and before the
    finishing) too short for one candidate's first segment (:func:`first_round_seconds`, at the
    deployed teacher's time per row, :func:`teacher_row_seconds`)."""
    rows, needed = first_round_seconds(candidates, settings, unlabelled_rows, teacher_row_seconds(table),
                                       export_labels, every_run_labels)
    if needed > seconds:
        raise KdbertError(f"--budget-minutes {budget_minutes:g} leaves {max(0.0, seconds) / 60:.1f} min to distil on "
                          f"this machine after timing and before shipping the winner, too little for one candidate: "
                          f"its first round runs the teacher on at least {rows} rows, about {needed / 60:.1f} min; "
                          "raise --budget-minutes or lower --first-steps")
