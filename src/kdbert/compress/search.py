"""Steps 2-3 of ``kdbert compress``: distil the candidates that meet the speed target by successive
halving, and pick the winner on held-out training rows.

Round 0 distils every candidate with its kind's recipe (:mod:`kdbert.compress.recipes`: TinyBERT
for BERT-style candidates from their weight-selected start, :func:`kdbert.compress.build.build_from_teacher`;
logit KD for MobileBERT; the distilled BiLSTM), every run an ordinary run folder
``rounds/<r>/<candidate>``; the better half by held-out score (``selection_score``, the rows
``--held-out-fraction`` keeps out of training; ties broken by the lower held-out loss,
``selection_loss``, then by name: :func:`rank`) goes on to the next round, which runs each from its
start again, longer. Round 0 spends at most ``first_round_share`` of the budget: its runs go in
:func:`spread_order` (families in turn, each spread over its speed range) and stop before one that
would end past that share, so that a long candidate list leaves the later rounds their time. Once
one candidate is left, it goes on alone, so that the budget left goes to the best one.

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
left out of them, but counts when a round is fitted into the budget. A round that would overrun
``budget_minutes`` leaves out its lowest-ranked candidates until it fits (:func:`plan_round`); the
rounds end at ``rounds``, or when not even the best candidate's round fits.

The winner (:func:`pick_winner`): among the last round's candidates, the fastest whose held-out
score keeps ``min_kept`` of the teacher's held-out score; if none does, the best held-out score,
ranked as in the rounds (all of them meet the speed target). A teacher fine-tuned on the held-out
rows (without ``kdbert finetune --held-out-fraction``) scores optimistically there and "kept" errs
low; the search says so when the teacher's run folder shows it
(:func:`kdbert.compress.pipeline.teacher_saw_held_out_rows`). Dev only reports.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path

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


def _distil(candidate: Candidate, start: Path | None, teacher_dir: str, task: TaskOptions, steps: int,
            settings: SearchSettings, out: Path, caches: Path) -> dict:
    """One run of ``candidate``'s recipe (:func:`kdbert.compress.recipes.run_options`) into ``out``;
    an augmented variant (:mod:`kdbert.compress.augment`) also trains on the search's augmented rows."""
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
    report = distill_task(task, options, str(out), overwrite=True)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # finished: its model and best stay, ~2 GB a search less
    labelling = [(report.get(key) or {}).get("seconds", 0.0) for key in ("teacher_logits", "unlabelled")]
    metrics = report["dev_metrics"]
    loss = {"selection_loss": metrics["selection_loss"]} if "selection_loss" in metrics else {}
    return {"candidate": candidate.name, "method": options["method"], "steps": steps,
            "seconds": round(time.time() - started, 1), "labelling_seconds": round(sum(labelling), 1),
            "train_seconds": report["train_seconds"],
            "selection_score": metrics.get("selection_score", metrics["score"]), **loss,
            "dev_score": metrics["score"], "run": str(out)}


def rank(rows: list[dict]) -> list[dict]:
    """``rows`` best first: by held-out score, ties broken by the lower held-out loss (a row without
    one, recorded before runs kept it, last among its ties), then by name, not by the running order,
    which follows timings that differ from one machine (or rerun) to the next."""
    return sorted(rows, key=lambda row: (-row["selection_score"], row.get("selection_loss", math.inf),
                                         row["candidate"]))


def check_budget(table: dict, candidates: list[Candidate], settings: SearchSettings, train_rows: int) -> None:
    """Refuse a budget too small for one candidate's first round: that round runs the teacher on
    at least ``first_steps * batch_size`` rows (the BiLSTM: every training row, labelled once),
    each costing about the deployed teacher's time per row on this machine (its throughput
    batch at the timed length, scaled to the task's median row length). A lower estimate: the
    student's own steps come on top."""
    teacher = table["teacher"]
    seconds_per_row = (1.0 / teacher["throughput"]) * teacher["real_length_p50"] / table["settings"]["seq_len"]
    rows = min(train_rows if not starts_from_teacher(c) else settings.first_steps * settings.batch_size
               for c in candidates)
    needed = rows * seconds_per_row
    if needed > settings.budget_minutes * 60:
        raise KdbertError(f"--budget-minutes {settings.budget_minutes:g} is too small for one candidate: its first "
                          f"round runs the teacher on at least {rows} rows, about {needed / 60:.1f} min on this "
                          "machine; raise --budget-minutes or lower --first-steps")


def successive_halving(candidates: list[Candidate], teacher_dir: str, task: TaskOptions, output_dir,
                       settings: SearchSettings = SearchSettings()) -> dict:
    """Distil ``candidates`` (those meeting the speed target; built from the teacher) by rounds of
    successive halving (module doc). Each round's plan (who runs, how many steps) is recorded in
    ``output_dir/search.json`` before it starts and every finished run after it ends, so a resumed
    search carries out the same plan and runs nothing twice. Returns ``{"plans": [...],
    "rounds": [[row, ...], ...]}``."""
    if not task.held_out_fraction:
        raise KdbertError("the search picks on held-out training rows: pass --held-out-fraction (e.g. 0.1)")
    out = Path(output_dir)
    state_path = out / STATE
    state = json.loads(state_path.read_text()) if state_path.is_file() else {"rounds": []}
    state.setdefault("plans", [{row["candidate"]: row["steps"] for row in rows} for rows in state["rounds"]])
    by_name = {candidate.name: candidate for candidate in candidates}
    ranked, context = list(candidates), None
    for round_index in range(settings.rounds):
        if round_index == len(state["plans"]):
            plan = plan_round(state["rounds"], ranked, round_index, settings)
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
            if round_index == 0 and not fits_first_round(rows, candidate, steps, settings):
                state["plans"][0] = done
                write_json(state_path, state)
                break
            start = out / "starts" / base_name(candidate.name) if starts_from_teacher(candidate) else None
            if start is not None and not (start / "config.json").is_file():
                context = context or shape_context(teacher_dir, task)
                build_from_teacher(replace(candidate, name=base_name(candidate.name)), teacher_dir, task, start,
                                   context)
            row = _distil(candidate, start, teacher_dir, task, steps, settings,
                          out / "rounds" / str(round_index) / candidate.name, out)
            earlier = [r for r in rows if r["candidate"] == candidate.name]
            if earlier:  # a rerun of round 0 with more steps replaces the shorter run, whose time was spent
                rows.remove(earlier[0])
                row["superseded_seconds"] = round(spent_seconds(earlier[0]), 1)
            rows.append(row)
            write_json(state_path, state)
        rows = rank(rows)  # ties: by the lower held-out loss, then by name
        ranked = [by_name[row["candidate"]] for row in rows[: max(1, math.ceil(len(rows) / 2))]]
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


def fits_first_round(done: list[dict], candidate: Candidate, steps: int, settings: SearchSettings) -> bool:
    """Whether round 0's next run, ``candidate`` for ``steps`` steps, should end within
    ``first_round_share`` of the budget after the runs ``done`` (its seconds per step and overhead:
    its family's means in ``done``, else the means of all; the first run always goes ahead)."""
    if not done:
        return True
    predicted = _predicted_seconds(_family_runs(done, candidate.name) or done, steps)
    return _spent(done) + predicted <= settings.first_round_share * settings.budget_minutes * 60


def _family_runs(runs: list[dict], name: str) -> list[dict]:
    """The ``runs`` of candidates of the same family as ``name``."""
    return [row for row in runs if family(row["candidate"]) == family(name)]


def plan_round(earlier_rounds: list[list[dict]], ranked: list[Candidate], round_index: int,
               settings: SearchSettings) -> dict[str, int]:
    """Round ``round_index``'s plan, ``{candidate name: steps}``: the ``ranked`` candidates (best
    first) with :func:`round_steps`, the lowest ranked left out while the round would overrun
    ``budget_minutes`` (empty: not even the best one fits, the search ends)."""
    steps = round_steps(earlier_rounds, ranked, round_index, settings)
    runs = [row for rows in earlier_rounds for row in rows]
    chosen = list(ranked)
    while chosen and runs and _spent(runs) + _needed(runs, chosen, steps) > settings.budget_minutes * 60:
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
    if "train_seconds" in row:
        return max(row["train_seconds"], TIMER_RESOLUTION) / row["steps"]
    return (row["seconds"] - row.get("labelling_seconds", 0.0)) / row["steps"]


def _overhead(row: dict) -> float:
    """A run's seconds outside its training loop and the teacher's labelling (loading, tokenising,
    the last evaluation): paid once per run, whatever its steps."""
    if "train_seconds" not in row:
        return 0.0
    return max(0.0, row["seconds"] - row.get("labelling_seconds", 0.0) - row["train_seconds"])


def spent_seconds(row: dict) -> float:
    """The wall seconds a row's candidate spent in its round, shorter runs it replaced included."""
    return row["seconds"] + row.get("superseded_seconds", 0.0)


def _spent(runs: list[dict]) -> float:
    return sum(spent_seconds(row) for row in runs)


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
