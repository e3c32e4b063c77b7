"""Latency at a task's real lengths: rows of the task, one at a time, without padding.

A fixed padded length says little about a deployed model at batch 1: SST-2 rows average about 25
tokens, TREC about 12, and a served request pays only for its own tokens. :func:`task_feeds`
encodes rows of a task the way the model's family reads them (tokens, or words for a word-level
student) and makes each one a batch of one of exactly its length; :func:`time_feeds` times a
model on every feed and reports the distribution over rows::

    latency_real_p50_ms = median over rows r of (median over repeats of the time of model(feed_r))

with ``p90`` the nearest-rank 90th percentile and ``mean`` the mean over rows.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import numpy as np

from kdbert.deploy.timing import percentile
from kdbert.errors import KdbertError

__all__ = ["model_feeds", "task_feeds", "time_feeds", "time_in_turns", "time_task_rows"]


def _feed(row: dict, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """A (1, L) int64 array per input name from one encoded row (masks all ones, segment ids
    zeros when the row has none); a row with per-model inputs gives its student's."""
    row = row.get("student", row)
    feed = {}
    for name in names:
        ids = row["input_ids_b" if name.endswith("_b") else "input_ids"]
        if name in row:
            values = row[name]
        elif name.startswith("attention_mask"):
            values = [1] * len(ids)
        else:  # token_type_ids of a row encoded without them
            values = [0] * len(ids)
        feed[name] = np.asarray([values], dtype=np.int64)
    return feed


def task_feeds(family, encoder, spec, data, max_seq_len: int | None, rows: int = 200,
               split: str = "dev") -> list[dict[str, np.ndarray]]:
    """Up to ``rows`` evenly spaced rows of ``data``'s first dev split (``split="train"``: of its
    training rows; ``"held-out"``: of its held-out training rows), encoded by ``family``'s evaluator
    with ``encoder`` (cut to ``max_seq_len``), as batch-1 feeds named by ``spec`` (an
    :class:`~kdbert.families.registry.InputSpec`)."""
    if rows < 1:
        raise KdbertError(f"--length-rows {rows} must be positive; pass at least 1 row")
    if split != "dev":  # encode only the rows kept
        source = {"train": data.train, "held-out": data.held_out}[split]
        data = dataclasses.replace(data, dev={split: source[::max(1, len(source) // rows)][:rows]}, held_out=[])
    evaluator = family.evaluator(data, encoder, max_seq_len, 1)
    dataset = next(iter(evaluator.splits.values()))
    step = max(1, len(dataset) // rows)
    return [_feed(dataset[i], spec.names) for i in range(0, len(dataset), step)][:rows]


def _row_ms(call: Callable[[dict[str, np.ndarray]], object], feed: dict[str, np.ndarray], repeats: int) -> float:
    """The median of ``repeats`` timings of ``call(feed)``, in ms."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call(feed)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def time_feeds(call: Callable[[dict[str, np.ndarray]], object], feeds: list[dict[str, np.ndarray]],
               repeats: int = 3, warmup: int = 3) -> dict[str, float]:
    """Time ``call(feed)`` on every feed (``repeats`` times each, after ``warmup`` untimed calls on
    the first ones): the per-row medians' median, 90th percentile (nearest rank) and mean in ms,
    and the rows' token counts (median, 90th percentile)."""
    if not feeds:
        raise KdbertError("no rows to time; pass a task with dev rows")
    for feed in feeds[:warmup]:
        call(feed)
    per_row = sorted(_row_ms(call, feed, repeats) for feed in feeds)
    lengths = sorted(sum(v.shape[-1] for k, v in feed.items() if k.startswith("input_ids")) for feed in feeds)
    return {"latency_real_p50_ms": statistics.median(per_row), "latency_real_p90_ms": percentile(per_row, 0.9),
            "latency_real_mean_ms": statistics.fmean(per_row), "real_rows": len(feeds),
            "real_length_p50": statistics.median(lengths), "real_length_p90": percentile(lengths, 0.9)}


TURN_ROWS = 10  # rows a model is timed on in one turn (time_in_turns)
TURN_REPEATS = 3  # times each row is run in its turn


def time_in_turns(timed: dict[str, tuple[Callable[[dict[str, np.ndarray]], object], list[dict[str, np.ndarray]]]],
                  rounds: int = 3, rows_per_turn: int = TURN_ROWS, repeats: int = TURN_REPEATS, warmup: int = 3) -> dict:
    """Time the models of ``timed`` (name -> (call, feeds), the same rows in each model's encoding)
    taking turns on ``rows_per_turn`` rows at a time: each model runs each of those rows ``repeats``
    times, the first model first on even turns and last on odd ones, so that a slow spell of the
    machine longer than a turn (tens of ms) falls on every model alike. Over ``rounds`` passes,
    against the first model ``ref``::

        p50_k[m] = median over rows r of (median over repeats of the time of m(feed_r)), in pass k
        latency_real_p50_ms[m] = median over passes k of p50_k[m]
        speedup[m] = median over passes k of p50_k[ref] / p50_k[m]

    Timed a whole pass apart (each model over every row, then the other), a 2-layer student's
    speedup over SST-2's int8 teacher read 3.9x to 5.0x over eight passes on a 2-core machine
    (standard deviation 0.42; one admitted at 4.33x shipped at 3.78x); in turns of 10 rows, 4.1x
    to 4.5x (0.15), at the same milliseconds. A turn of one row is too short: each model then runs
    just after the other and reads slower than alone (the teacher 8.4 ms against 5.3,
    ``benchmarks/timing_turns.py``). Returns
    ``{"rounds": [{name: p50_k}], "latency_real_p50_ms": {...}, "speedup": {...}}``."""
    if rounds < 1:
        raise KdbertError(f"rounds {rounds} must be positive")
    if rows_per_turn < 1:
        raise KdbertError(f"rows_per_turn {rows_per_turn} must be positive")
    if not timed or not all(feeds for _, feeds in timed.values()):
        raise KdbertError("no rows to time; pass a task with dev rows")
    names = list(timed)
    rows = min(len(feeds) for _, feeds in timed.values())
    for call, feeds in timed.values():
        for feed in feeds[:warmup]:
            call(feed)
    per_round = []
    for _ in range(rounds):
        per_row: dict[str, list[float]] = {name: [] for name in names}
        for turn, first in enumerate(range(0, rows, rows_per_turn)):
            for name in names if turn % 2 == 0 else names[::-1]:
                call, feeds = timed[name]
                per_row[name] += [_row_ms(call, feed, repeats) for feed in feeds[first:min(rows, first + rows_per_turn)]]
        per_round.append({name: statistics.median(times) for name, times in per_row.items()})
    reference = names[0]
    return {"rounds": per_round,
            "latency_real_p50_ms": {name: statistics.median(r[name] for r in per_round) for name in names},
            "speedup": {name: statistics.median(r[reference] / r[name] for r in per_round) for name in names}}


def time_task_rows(call: Callable[[dict[str, np.ndarray]], object], family, encoder, spec, task,
                   rows: int = 200, repeats: int = 3) -> dict:
    """:func:`time_feeds` on :func:`task_feeds` of ``task`` (a :class:`~kdbert.data.load.TaskOptions`),
    cut to the task's length within the model's limit, each row run ``repeats`` times; adds the
    task's name."""
    from kdbert.data.load import load_task

    data = load_task(task)
    return {**time_feeds(call, model_feeds(family, encoder, spec, data, rows), repeats),
            "real_task": data.spec.name}


def model_feeds(family, encoder, spec, data, rows: int = 200) -> list[dict[str, np.ndarray]]:
    """:func:`task_feeds` of ``data`` (a TaskData) cut to the task's length within the model's
    position limit (``spec.max_positions``)."""
    max_seq_len = min(data.spec.max_seq_len, spec.max_positions or data.spec.max_seq_len)
    return task_feeds(family, encoder, spec, data, max_seq_len, rows)
