"""Steps 2-3 of ``kdbert compress``: distil the candidates that meet the speed target by successive
halving, and pick the winner on held-out training rows.

Round 0 distils every candidate with its kind's recipe (:mod:`kdbert.compress.recipes`: TinyBERT
for BERT-style candidates from their weight-selected start, :func:`kdbert.compress.build.build_from_teacher`;
logit KD for MobileBERT; the distilled BiLSTM), every run an ordinary run folder
``rounds/<r>/<candidate>``; the better half by held-out score (``selection_score``, the rows
``--held-out-fraction`` keeps out of training; ties broken by the lower held-out loss,
``selection_loss``, then by name: :func:`rank`) goes on to the next round, which runs each from its
start again, longer. The search runs in a :class:`Window` of wall time, from its start to the
command's deadline less what the finishing needs (:mod:`kdbert.compress.budget`); every run is
given the window's end as its deadline, so that a run that would overrun stops training there,
evaluated and saved (its row keeps the steps it trained, ``trained_steps``), and no run starts
once the window has ended. Round 0 spends at most ``first_round_share`` of the window: its runs
go in :func:`spread_order` (families in turn, each spread over its speed range) and stop before
one that would end past that share, so that a long candidate list leaves the later rounds their
time. Once one candidate is left, it goes on alone, so that the time left goes to the best one.

How long a run is: with ``round_share="time"`` (the default) every candidate of a round gets the
same wall time, so a family whose steps are cheap (the BiLSTM's cost a third to a tenth of a small
BERT's) gets proportionally more of them; with ``"steps"`` every candidate of round r gets
``first_steps * 2^r`` steps. Round r > 0 (:func:`round_steps`) gives each candidate ``2^r`` times what
``first_steps`` steps cost a candidate of round 0 on average. Round 0 (:func:`first_round_plan`)
learns the costs as it goes: a family's first run has ``first_steps`` steps; once the round's runs
show a family's steps cost less than ``1 / RERUN_FACTOR`` of the round's mean, its candidates get
``first_steps * mean / family cost`` steps, and one that ran with less than ``1 / RERUN_FACTOR``
of its new steps runs again (its earlier run's seconds stay counted). Costs are seconds per step
of a run's training loop, each candidate's from its latest run; what a run spends outside the loop
(loading and tokenising its rows, the teacher's labelling) does not grow with its steps and is
left out of them, but counts when a round is fitted into the window. A round that would end past
the window leaves out its lowest-ranked candidates until it fits (:func:`plan_round`); the rounds
end at ``rounds``, or when not even the best candidate's round fits.

What compress says of it (:class:`kdbert.compress.budget.Progress`): one line per finished run
(round, candidate, steps, held-out score, seconds; :func:`run_line`) and, once per search, the
precision and threads the runs train with (:func:`runtime_line`); what a run prints itself goes to
``rounds/<r>/<candidate>.log``.

The winner (:func:`pick_winner`): among the last round's candidates, the fastest whose held-out
score keeps ``min_kept`` of the teacher's held-out score; if none does, the best held-out score,
ranked as in the rounds (all of them meet the speed target). A teacher fine-tuned on the held-out
rows (without ``kdbert finetune --held-out-fraction``) scores optimistically there and "kept" errs
low; the search says so when the teacher's run folder shows it
(:func:`kdbert.compress.pipeline.teacher_saw_held_out_rows`). Dev only reports.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from kdbert.compress.augment import ROWS_FILE, base_name, is_augmented
from kdbert.compress.build import build_from_teacher
from kdbert.compress.recipes import SearchSettings, kind_of, run_options, starts_from_teacher
from kdbert.compress.speed import shape_context
from kdbert.core.atomic_io import write_json
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate
from kdbert.methods.front import distill_task

STATE = "search.json"


@dataclass(frozen=True)
class Window:
    """The wall time the search may spend, as ``clock()`` times (``time.time()`` for real runs,
    whose trainers stop by ``end``): all of it until ``end``, round 0 until ``first_round_end``."""

    end: float
    first_round_end: float
    clock: Callable[[], float] = time.time

    @classmethod
    def from_now(cls, seconds: float, first_round_share: float, clock: Callable[[], float] = time.time) -> Window:
        """A window of ``seconds`` from now, round 0 getting ``first_round_share`` of it."""
        now = clock()
        return cls(now + seconds, now + first_round_share * seconds, clock)


def _distil(candidate: Candidate, start: Path | None, teacher_dir: str, task: TaskOptions, steps: int,
            settings: SearchSettings, out: Path, caches: Path, deadline: float) -> dict:
    """One run of ``candidate``'s recipe (:func:`kdbert.compress.recipes.run_options`) into ``out``,
    training until ``deadline`` at most, what it prints kept in ``out.log``; an augmented variant
    (:mod:`kdbert.compress.augment`) also trains on the search's augmented rows."""
    options = {**run_options(candidate, steps, settings, str(caches / "teacher-cache")), "teacher": str(teacher_dir)}
    if start is not None:
        options["student"] = str(start)
    else:  # a student of its own (the BiLSTM): the teacher's logits stored once for every run
        options["logits_cache"] = str(caches / "teacher-logits")
    if is_augmented(candidate.name):
        if not (caches / ROWS_FILE).is_file():
            raise KdbertError(f"{candidate.name} trains on {caches / ROWS_FILE}, which is missing; rerun compress "
                              "with the same --augment to write it")
        task = replace(task, unlabelled=str(caches / ROWS_FILE))
    started = time.time()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_name(f"{out.name}.log"), "w") as log, contextlib.redirect_stdout(log):
        report = distill_task(task, options, str(out), overwrite=True, deadline=deadline)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # finished: its model and best stay, ~2 GB a search less
    labelling = [(report.get(key) or {}).get("seconds", 0.0) for key in ("teacher_logits", "unlabelled")]
    metrics = report["dev_metrics"]
    loss = {"selection_loss": metrics["selection_loss"]} if "selection_loss" in metrics else {}
    stopped = {"trained_steps": report["stopped_early"]["steps_run"]} if report.get("stopped_early") else {}
    return {"candidate": candidate.name, "method": options["method"], "steps": steps, **stopped,
            "seconds": round(time.time() - started, 1), "labelling_seconds": round(sum(labelling), 1),
            "train_seconds": report["train_seconds"],
            "selection_score": metrics.get("selection_score", metrics["score"]), **loss,
            "dev_score": metrics["score"], "run": str(out)}


def run_line(round_index: int, row: dict) -> str:
    """The line a finished run prints: round, candidate, steps, held-out score, seconds."""
    steps = (f"{row['trained_steps']} of {row['steps']} steps (stopped at the budget's end)"
             if "trained_steps" in row else f"{row['steps']} steps")
    return (f"round {round_index}  {row['candidate']}  {steps}  held-out {row['selection_score']:.2f}  "
            f"{row['seconds']:.0f} s")


def runtime_line(row: dict) -> str:
    """The precision and threads the search's runs train with (from the run of ``row``), said once."""
    runtime = json.loads((Path(row["run"]) / "distill_report.json").read_text())["runtime"]
    precision = "float32" if runtime["mixed_precision"] == "no" else runtime["mixed_precision"]
    return (f"runs train in {precision} ({runtime['mixed_precision_reason']}) on {runtime['threads']} thread(s) "
            f"({runtime['threads_reason']}); each run's own output: rounds/<round>/<candidate>.log")


def rank(rows: list[dict]) -> list[dict]:
    """``rows`` best first: by held-out score, ties broken by the lower held-out loss (a row without
    one, recorded before runs kept it, last among its ties), then by name, not by the running order,
    which follows timings that differ from one machine (or rerun) to the next."""
    return sorted(rows, key=lambda row: (-row["selection_score"], row.get("selection_loss", math.inf),
                                         row["candidate"]))


def teacher_row_seconds(table: dict) -> float:
    """About the deployed teacher's time per row on this machine, from the speed ``table``: its
    throughput batch at the timed length, scaled to the task's median row length."""
    teacher = table["teacher"]
    return (1.0 / teacher["throughput"]) * teacher["real_length_p50"] / table["settings"]["seq_len"]


def first_round_seconds(candidates: list[Candidate], settings: SearchSettings, train_rows: int,
                        row_seconds: float) -> tuple[int, float]:
    """The fewest rows one of ``candidates``' first round runs the teacher on, ``first_steps *
    batch_size`` (the BiLSTM: every training row, labelled once), and their seconds at ``row_seconds``
    a row. A lower estimate: the student's own steps come on top."""
    rows = min(train_rows if not starts_from_teacher(c) else settings.first_steps * settings.batch_size
               for c in candidates)
    return rows, rows * row_seconds


def check_budget(table: dict, candidates: list[Candidate], settings: SearchSettings, train_rows: int,
                 budget_minutes: float, seconds: float) -> None:
    """Refuse a search of ``seconds`` (what ``budget_minutes`` leaves after the timing and before the
    finishing) too short for one candidate's first round (:func:`first_round_seconds`, at the deployed
    teacher's time per row, :func:`teacher_row_seconds`)."""
    rows, needed = first_round_seconds(candidates, settings, train_rows, teacher_row_seconds(table))
    if needed > seconds:
        raise KdbertError(f"--budget-minutes {budget_minutes:g} leaves {max(0.0, seconds) / 60:.1f} min to distil on "
                          f"this machine after timing and before shipping the winner, too little for one candidate: "
                          f"its first round runs the teacher on at least {rows} rows, about {needed / 60:.1f} min; "
                          "raise --budget-minutes or lower --first-steps")


def successive_halving(candidates: list[Candidate], teacher_dir: str, task: TaskOptions, output_dir,
                       settings: SearchSettings, window: Window,
                       on_run: Callable[[int, dict], None] | None = None) -> dict:
    """Distil ``candidates`` (those meeting the speed target; built from the teacher) by rounds of
    successive halving within ``window`` (module doc), calling ``on_run(round, row)`` after each
    finished run. Each round's plan (who runs, how many steps) is recorded in
    ``output_dir/search.json`` before it starts and every finished run after it ends, so a resumed
    search carries out the same plan, in a window of its own, and runs nothing twice (a round the
    window cut short is recorded as the runs it finished). A search that ended (its last round,
    or no round fitting its window) is marked ``ended``: run again, it is returned as it is.
    Returns ``{"plans": [...], "rounds": [[row, ...], ...], "ended": True}``."""
    if not task.held_out_fraction:
        raise KdbertError("the search picks on held-out training rows: pass --held-out-fraction (e.g. 0.1)")
    out = Path(output_dir)
    state_path = out / STATE
    state = json.loads(state_path.read_text()) if state_path.is_file() else {"rounds": []}
    state.setdefault("plans", [{row["candidate"]: row["steps"] for row in rows} for rows in state["rounds"]])
    if state.get("ended"):
        return state
    by_name = {candidate.name: candidate for candidate in candidates}
    ranked, context = list(candidates), None
    for round_index in range(settings.rounds):
        if round_index == len(state["plans"]):
            plan = plan_round(state["rounds"], ranked, round_index, settings, window)
            if not plan:
                break
            state["plans"].append(plan)
            state["rounds"].append([])
            out.mkdir(parents=True, exist_ok=True)
            write_json(state_path, state)
        rows = state["rounds"][round_index]
        while True:
            if len(state["plans"]) == 1:  # round 0 under way; resumed, it plans the same (from its runs)
                state["plans"][0] = first_round_plan(rows, [c for c in ranked if c.name in state["plans"][0]],
                                                     settings)
            plan, done = state["plans"][round_index], {row["candidate"]: row["steps"] for row in rows}
            # in ranked order: search.json keeps the plan's keys sorted
            todo = [c for c in ranked if c.name in plan and done.get(c.name) != plan[c.name]]
            if not todo:
                break
            candidate, steps = todo[0], plan[todo[0].name]
            if not may_start(rows, candidate, steps, round_index, window):
                state["plans"][round_index] = done
                write_json(state_path, state)
                break
            start = out / "starts" / base_name(candidate.name) if starts_from_teacher(candidate) else None
            if start is not None and not (start / "config.json").is_file():
                context = context or shape_context(teacher_dir, task)
                build_from_teacher(replace(candidate, name=base_name(candidate.name)), teacher_dir, task, start,
                                   context)
            row = _distil(candidate, start, teacher_dir, task, steps, settings,
                          out / "rounds" / str(round_index) / candidate.name, out, window.end)
            earlier = [r for r in rows if r["candidate"] == candidate.name]
            if earlier:  # a rerun of round 0 with more steps replaces the shorter run, whose time was spent
                rows.remove(earlier[0])
                row["superseded_seconds"] = round(spent_seconds(earlier[0]), 1)
            rows.append(row)
            write_json(state_path, state)
            if on_run is not None:
                on_run(round_index, row)
        if not rows:  # the window ended before this round's first run
            state["plans"].pop()
            state["rounds"].pop()
            break
        rows = rank(rows)  # ties: by the lower held-out loss, then by name
        ranked = [by_name[row["candidate"]] for row in rows[: max(1, math.ceil(len(rows) / 2))]]
    state["ended"] = True
    out.mkdir(parents=True, exist_ok=True)
    write_json(state_path, state)
    return state


def family(name: str) -> tuple[str, bool]:
    """The family of the candidate called ``name``: its kind, and whether it is an augmented variant."""
    return kind_of(name), is_augmented(name)


def spread_order(candidates: list[Candidate], latency: dict[str, float]) -> list[Candidate]:
    """Round 0's running order, so that its first k runs span the families and the speed range
    whatever k the budget allows: families in turn (the one with the fastest candidate first; a
    kind's augmented variants are a family of their own), each family's candidates by bisection
    of their order by ``latency`` (the fastest, the slowest, the middle one, then the middles of
    the two halves, ...)."""
    families: dict[tuple[str, bool], list[Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: latency[c.name]):
        families.setdefault(family(candidate.name), []).append(candidate)
    queues = [_bisection(members) for members in families.values()]
    return [queue[i] for i in range(max(map(len, queues), default=0)) for queue in queues if i < len(queue)]


def _bisection(items: list) -> list:
    """``items`` reordered: the first, the last, then the midpoints of ever finer halves."""
    if len(items) <= 2:
        return list(items)
    order, intervals = [0, len(items) - 1], [(0, len(items) - 1)]
    for low, high in intervals:  # breadth first: the list grows while it is read
        if high - low >= 2:
            middle = (low + high) // 2
            order.append(middle)
            intervals += [(low, middle), (middle, high)]
    return [items[i] for i in order]


RERUN_FACTOR = 1.5


def first_round_plan(done: list[dict], order: list[Candidate], settings: SearchSettings) -> dict[str, int]:
    """Round 0's steps for each of ``order`` given its runs ``done`` so far (module doc): with
    ``round_share="time"``, ``first_steps * mean / family cost`` for a candidate whose family's steps
    cost less than ``1 / RERUN_FACTOR`` of the mean (mean over the candidates that ran of their
    training seconds per step; family cost: the same over its members), else ``first_steps``; a
    candidate that ran keeps its steps unless the new count is ``RERUN_FACTOR`` times them or more."""
    plan = {}
    for candidate in order:
        ran = next((row["steps"] for row in done if row["candidate"] == candidate.name), None)
        steps = _equal_time_steps(candidate, done, settings)
        plan[candidate.name] = steps if ran is None or steps >= RERUN_FACTOR * ran else ran
    return plan


def _equal_time_steps(candidate: Candidate, done: list[dict], settings: SearchSettings) -> int:
    kin = _family_runs(done, candidate.name)
    if settings.round_share == "steps" or not kin:
        return settings.first_steps
    ratio = _mean_step_cost(done) / _mean_step_cost(kin)
    return round(settings.first_steps * ratio) if ratio >= RERUN_FACTOR else settings.first_steps


def may_start(done: list[dict], candidate: Candidate, steps: int, round_index: int, window: Window) -> bool:
    """Whether the next run of round ``round_index``, ``candidate`` for ``steps`` steps, starts after
    the round's runs ``done``: never once the window has ended; in round 0, a run after the first
    only when it should end by ``window.first_round_end`` (its seconds per step and overhead: its
    family's means in ``done``, else the means of all)."""
    now = window.clock()
    if now >= window.end:
        return False
    if round_index > 0 or not done:
        return True
    return now + _predicted_seconds(_family_runs(done, candidate.name) or done, steps) <= window.first_round_end


def _family_runs(runs: list[dict], name: str) -> list[dict]:
    """The ``runs`` of candidates of the same family as ``name``."""
    return [row for row in runs if family(row["candidate"]) == family(name)]


def plan_round(earlier_rounds: list[list[dict]], ranked: list[Candidate], round_index: int,
               settings: SearchSettings, window: Window) -> dict[str, int]:
    """Round ``round_index``'s plan, ``{candidate name: steps}``: the ``ranked`` candidates (best
    first) with :func:`round_steps`, the lowest ranked left out while the round would end past the
    ``window`` (empty: not even the best one fits, the search ends)."""
    steps = round_steps(earlier_rounds, ranked, round_index, settings)
    runs = [row for rows in earlier_rounds for row in rows]
    chosen = list(ranked)
    while chosen and runs and window.clock() + _needed(runs, chosen, steps) > window.end:
        chosen.pop()
    return {candidate.name: steps[candidate.name] for candidate in chosen}


def round_steps(earlier_rounds: list[list[dict]], remaining: list[Candidate], round_index: int,
                settings: SearchSettings) -> dict[str, int]:
    """Each remaining candidate's steps in round ``round_index`` (module doc): ``first_steps * 2^r``
    for all in round 0 or with ``round_share="steps"``; else ``2^r * first_steps * mean_cost /
    own_cost`` (at least ``first_steps``), the same wall time for every candidate."""
    base = settings.first_steps * 2 ** round_index
    if round_index == 0 or settings.round_share == "steps":
        return {candidate.name: base for candidate in remaining}
    mean_cost = _mean_step_cost(earlier_rounds[0])
    own_cost = {row["candidate"]: _step_seconds(row) for rows in earlier_rounds for row in rows}
    return {c.name: max(settings.first_steps, round(base * mean_cost / max(own_cost.get(c.name, mean_cost), 1e-6)))
            for c in remaining}


TIMER_RESOLUTION = 0.1  # seconds: runs record train_seconds to a tenth; a shorter loop counts as this long


def _step_seconds(row: dict) -> float:
    """A run's seconds per optimiser step: its training loop's (``train_seconds``), else (rows written
    before runs recorded it) its wall time less the teacher's labelling."""
    steps = row.get("trained_steps", row["steps"])
    if "train_seconds" in row:
        return max(row["train_seconds"], TIMER_RESOLUTION) / steps
    return (row["seconds"] - row.get("labelling_seconds", 0.0)) / steps


def _overhead(row: dict) -> float:
    """A run's seconds outside its training loop and the teacher's labelling (loading, tokenising,
    the last evaluation): paid once per run, whatever its steps."""
    if "train_seconds" not in row:
        return 0.0
    return max(0.0, row["seconds"] - row.get("labelling_seconds", 0.0) - row["train_seconds"])


def spent_seconds(row: dict) -> float:
    """The wall seconds a row's candidate spent in its round, shorter runs it replaced included."""
    return row["seconds"] + row.get("superseded_seconds", 0.0)


def _mean_step_cost(runs: list[dict]) -> float:
    """The mean over ``runs`` of their seconds per step."""
    return sum(_step_seconds(row) for row in runs) / len(runs)


def _predicted_seconds(like: list[dict], steps: int) -> float:
    """Seconds a run of ``steps`` steps should take, by the mean seconds per step and overhead of the
    runs ``like`` it."""
    return _mean_step_cost(like) * steps + sum(_overhead(row) for row in like) / len(like)


def _needed(runs: list[dict], todo: list[Candidate], steps: dict[str, int]) -> float:
    """Seconds ``todo``'s runs of ``steps[name]`` steps should take: each candidate's seconds per step
    and overhead in its latest run, else the means over all runs."""
    latest = {row["candidate"]: row for row in runs}
    return sum(_predicted_seconds([latest[c.name]] if c.name in latest else runs, steps[c.name]) for c in todo)


def pick_winner(last_round: list[dict], speed: dict[str, dict], teacher_selection_score: float,
                min_kept: float) -> dict:
    """The fastest of ``last_round``'s candidates keeping ``min_kept`` of the teacher's held-out score,
    else the best held-out score (:func:`rank`'s first); with ``kept`` and ``rule`` (which of the two
    picked it)."""
    if not last_round:
        raise KdbertError("no candidate finished a round within --budget-minutes; raise it or lower --first-steps")
    def kept(score: float) -> float:  # a teacher scoring 0 there: a student keeps it all when it does as well
        return score / teacher_selection_score if teacher_selection_score > 0 else float(score >= teacher_selection_score)

    rows = [{**row, "kept": kept(row["selection_score"]),
             "latency_real_p50_ms": speed[row["candidate"]]["latency_real_p50_ms"]} for row in last_round]
    keeping = [row for row in rows if row["kept"] >= min_kept]
    if keeping:
        return {**min(keeping, key=lambda row: row["latency_real_p50_ms"]), "rule": f"fastest keeping {min_kept:g}"}
    return {**rank(rows)[0], "rule": f"none keeps {min_kept:g}: best score"}
