"""The one deadline of ``kdbert compress``, the time its finishing phase needs, and its progress.

``--budget-minutes M`` is the wall time of the whole command: every phase plans against one
:class:`Deadline`, ``start + M``:

0. checks, before anything is written: the teacher is scored on the dev and held-out rows and
   its dev outputs (for the agreement) computed, both timed, and a budget shorter than what
   compress needs whatever it searches is refused (the seconds spent so far, then
   :func:`fixed_seconds`: two exports, each scoring the dev rows and a held-out sample
   :func:`export_passes` times at the teacher's measured speed, the teacher's timing, and one
   first round; an estimate, so a budget it passes may still be refused after the timing, by
   :func:`~kdbert.compress.search.check_budget`);
1. timing (:mod:`kdbert.compress.speed`): the teacher is exported (its int8 choice scored on the
   task's rows; static methods only while the export stays within ``TEACHER_EXPORT_SHARE`` of the
   budget, :mod:`kdbert.deploy.int8_choice`) and timed, and its steps of the speedup breakdown; then the candidates, families
   in turn and each spread over its sizes, until the next one would leave too little for one
   first round of the search and the most the finishing can need whichever are admitted, or would
   take more than ``TIMING_SHARE`` of the time from the timing's start to the search's latest end
   (a rerun with more time times the rest);
2. the search (:mod:`kdbert.compress.search`) runs in the window from its start to the deadline
   less the finishing reserve: a segment starts only when it should end within it, and every run is given
   the window's end as its deadline (:attr:`kdbert.core.trainer.RunConfig.deadline`), so no run
   trains past it;
3. the finishing: the winner exported as it ships (with its int8 choice, scored on the task's
   rows; static methods only while they leave the rest of the finishing its time,
   :func:`after_export_seconds`), timed in turns with the teacher (once more after a narrow miss,
   :func:`narrowly_missed`, while a next check still fits), its steps of the breakdown, its dev agreement with the
   teacher, the report.

The finishing reserve (:func:`finishing_seconds`) is estimated from what this machine measured
on the teacher in step 1, scaled by the latency of the slowest candidate that can win against
the teacher's: the export costs the teacher's export times that ratio (it scores as many rows,
through a model that much faster; what making it took, where a kept one was read) plus the candidate's own export
with random weights (:func:`export_estimate`); timing
in turns what the longest one of the timing phase took (else ``TURNS`` rounds of the teacher's
timing and the candidate's, :func:`turns_seconds`); the threads row as much again; the agreement the
teacher's dev pass times the ratio; all of it
``RESERVE_FACTOR`` times, for the machine's slower spells; twice the export and timing where a
candidate that can win may time below the speedup asked as shipped (:func:`checks_to_reserve`), and a timing
more, so that a narrow miss can be timed again and the next still be checked when it times below
the speed asked as shipped. What is estimated and measured is in
the report (``budget``). A rerun gets a fresh ``M`` from its own start; what earlier runs of the
command measured or trained is reused, not paid again.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from tqdm.auto import tqdm

from kdbert.compress.search import runtime_line, segment_line
from kdbert.compress.speed import TURNS, other_threads

RESERVE_FACTOR = 1.25
# A candidate admitted below this factor of --target-speedup may time under it as shipped. The ship chance below reads
# the speedup as shipped over the admitted one from ship checks timed where compress times them now, in a process that
# never trained (timing_process.py): over the 9 graphs of the main job's nine seeds on an Intel Xeon with AMX, each
# graph's checks averaged, 0.932 (sd 0.038, its upper 90% confidence bound over 9 graphs 0.057; 2026-12-05,
# benchmarks/ship_vs_admitted.py). Checks timed in the process that had searched read lower and wider (the same
# machine's 7 graphs: 0.905; 0.852, sd 0.072, over 8 checks on an AMD EPYC with AVX-512; 0.956, sd 0.060, over 11 on
# an AVX2 EPYC; 0.912 over both, the reading before): that process times the int8 graphs slower
# (benchmarks/timing_process.py), while the admission's timing in turns, before anything trains, reads in it what a
# fresh process reads (0.97-1.01). Not read again on those machines, the spread is taken as the widest read on any,
# 0.072 (their process only adds to it). One admitted at 1.15x the target passes with about 81% chance, at 1.2x 91%.
SHIP_LINE_BAND = 1.15
SHIPPED_OVER_ADMITTED = 0.932  # the mean of that ratio: below target / 0.932 a candidate more likely fails than passes
SHIPPED_SPREAD = 0.072  # ... and its standard deviation (the widest read on any machine)
# The chance to ship at the target below which a candidate is a risk (ship_at_risk): a near-tie goes to the others first.
# At one half (more likely than not), bert-2x384-ffn384 admitted at 4.19x (51%) led the main job on a near-tie with
# bert-2x384-ffn192 (4.42x, 79%), shipped at 3.76x, and the 100-step ffn192 shipped in its place at 87.4% (2026-12-02,
# chances by the AVX2 checks alone). On the AVX-512 machine bert-2x384-ffn768, admitted at 4.44x (80% by those, 55% by
# all 19, 67% by the fresh-process reading), took a near-tie's promotions, timed 3.37x as shipped, and a 416-step bert-2x384-ffn384 shipped at 91.9%.
SHIP_CHANCE = 0.75
# A graph that times under the speedup asked as shipped by at most this share of it (one sd of the shipped/admitted
# ratio) is timed once more, and the mean of the two decides, where the time left still holds the next check: one
# timing of a minute's machine decided the main job's bert-2x384-ffn192, 4.53x in turns at admission, too slow at
# 3.95x, and a 200-step fallback shipped at 89.4% of the teacher (2026-12-02).
NARROW_MISS = SHIPPED_SPREAD
# The chance to ship at the target below which the finishing reserves a second check (checks_to_reserve). Within
# SHIP_LINE_BAND alone (a chance under 70%) left winners admitted at 4.6-5.2x with one: on the AVX-512 machine the
# main job's bert-2x384-ffn384 admitted at 4.73x (79%) ran with one (2026-12-02). The odds, not a guarantee: one
# admitted at 5.40x (98%) timed 3.94x as shipped. A second check costs the search about 30 s of the main job's 8
# minutes.
CHECK_CHANCE = 0.95
TEACHER_EXPORT_SHARE = 0.2  # of the budget, the most the teacher's export spends on static int8 methods
# Of the time from the candidates' timing to the search's latest end, the most their timing takes: in the
# main job's 6 minutes, 22 candidates timed (10 of them again in turns) left the search none; at half,
# 18 timed in 2.6 minutes left it 2.0 (2026-12-01). At 0.3, once the candidates near the line were timed
# together, the main job timed 8 (2.0-2.5 minutes), the 3 more never shipped; at 0.2 it times 6 in 1.6 and
# its search trains the winner 1,992-2,116 steps where it trained 1,454-1,926 (2026-12-02). On an AVX2-only
# EPYC it times one (bert-1x384-ffn192, 8.6x, 91.8% kept on dev); timing three whatever the share timed
# bert-2x384-ffn192 near the line (4.79x), whose second ship check the finishing then reserved (156 s, 58 used):
# the search trained it 311 steps, compress ended 1.6 minutes early, 92.6% kept at 4.9x (2026-12-04)
TIMING_SHARE = 0.2


@dataclass
class Deadline:
    """``minutes`` of wall time from ``clock()`` at creation (``time.time`` unless a test injects a fake
    clock)."""

    minutes: float
    clock: Callable[[], float] = time.time
    start: float = field(init=False)

    def __post_init__(self):
        self.start = self.clock()

    @property
    def end(self) -> float:
        return self.start + 60.0 * self.minutes

    def spent(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.end - self.clock()


def finishing_seconds(teacher: dict, ratio: float, candidate_export_seconds: float, teacher_dev_seconds: float,
                      threads_row: bool, checks: int = 1) -> float:
    """Seconds the finishing phase should take for a winner ``ratio`` times the teacher's latency
    (module doc): ``teacher`` is its speed-table row (``export_seconds``, ``timing_seconds``, and
    ``turns_seconds`` where measured, :func:`with_turns_measured`),
    ``candidate_export_seconds`` the winner's export with random weights, ``teacher_dev_seconds`` the
    teacher's pass over the dev rows, ``threads_row`` whether the breakdown times the winner at other
    threads too, ``checks`` the candidates it may export and time in turns (:func:`checks_to_reserve`);
    where that is more than one, each may first time the one before it once more (a narrow miss,
    :func:`narrowly_missed`)."""
    export = export_estimate(teacher, ratio, candidate_export_seconds)
    another = check_seconds(teacher, ratio, candidate_export_seconds)  # each check after the first
    again = turns_seconds(teacher, ratio)  # ... after the one before it was timed once more
    return (RESERVE_FACTOR * (export + (checks - 1) * (another + again))
            + after_export_seconds(teacher, ratio, teacher_dev_seconds, threads_row))


def export_estimate(teacher: dict, ratio: float, candidate_export_seconds: float) -> float:
    """Seconds to export a candidate ``ratio`` times the teacher's latency as compress ships it: the
    teacher's export (its int8 choice and its scores on the task's rows, ``teacher["export_seconds"]``,
    what making it took even where a kept one was read) times ``ratio``, as it scores as many rows
    through a model that much faster, plus the candidate's own export with random weights."""
    return teacher.get("export_seconds", 0.0) * ratio + candidate_export_seconds


def check_seconds(teacher: dict, ratio: float, candidate_export_seconds: float) -> float:
    """Seconds one ship check of a candidate ``ratio`` times the teacher's latency takes: its export
    (:func:`export_estimate`) and its timing in turns with the teacher, ``TURNS`` rounds of both."""
    return export_estimate(teacher, ratio, candidate_export_seconds) + turns_seconds(teacher, ratio)


def turns_seconds(teacher: dict, ratio: float) -> float:
    """Seconds to time a candidate ``ratio`` times the teacher's latency in turns with it: what the
    longest such timing took on this machine (``teacher["turns_seconds"]``, :func:`with_turns_measured`),
    else ``TURNS`` rounds of the teacher's whole timing and the candidate's, an upper bound (a round
    times the rows' latency only: on the main job's AVX2 machine 10-12 s where this said 21)."""
    if teacher.get("turns_seconds"):
        return teacher["turns_seconds"]
    return TURNS * teacher.get("timing_seconds", 0.0) * (1.0 + ratio)


def with_turns_measured(table: dict) -> dict:
    """The speed ``table``'s teacher row with ``turns_seconds``, the longest timing in turns of its
    candidates (those timed again near the line, :func:`~kdbert.compress.speed.retimed_in_turns`: its
    share of their timing together, as if timed alone with the teacher), where there is one."""
    measured = [row["turns_seconds"] for row in table["candidates"].values() if row.get("turns_seconds")]
    return {**table["teacher"], **({"turns_seconds": max(measured)} if measured else {})}


def near_ship_line(speedup: float, target_speedup: float | None) -> bool:
    """Whether a candidate admitted at ``speedup`` is within :data:`SHIP_LINE_BAND` above
    ``target_speedup``, where it may time below the target as shipped."""
    return target_speedup is not None and speedup < target_speedup * SHIP_LINE_BAND


def ship_chance(speedup: float, target_speedup: float) -> float:
    """The chance that a candidate admitted at ``speedup`` times at or above ``target_speedup`` as
    shipped, the shipped/admitted ratio taken as normal (mean :data:`SHIPPED_OVER_ADMITTED`, sd
    :data:`SHIPPED_SPREAD`)::

        P = Phi((speedup * 0.932 - target) / (speedup * 0.072))
    """
    from scipy.stats import norm

    return float(norm.cdf((speedup * SHIPPED_OVER_ADMITTED - target_speedup) / (speedup * SHIPPED_SPREAD)))


def ship_at_risk(speedup: float, target_speedup: float | None) -> bool:
    """Whether a candidate admitted at ``speedup`` ships at ``target_speedup`` with less than
    :data:`SHIP_CHANCE` (:func:`ship_chance`; 4.53x at a 4x target is 75%): the main job's
    bert-2x384-ffn384, admitted at 4.04x, shipped at 3.90x after taking every promotion, so a
    100-step cut shipped in its place at 86.8% kept."""
    return target_speedup is not None and ship_chance(speedup, target_speedup) < SHIP_CHANCE


def ship_risks(speedups: dict[str, float], target_speedup: float | None) -> dict[str, float]:
    """Of ``speedups`` (candidate -> speedup as admitted), those at risk (:func:`ship_at_risk`), each
    with its :func:`ship_chance`."""
    return {name: ship_chance(speedup, target_speedup) for name, speedup in speedups.items()
            if ship_at_risk(speedup, target_speedup)}


def ship_risk_line(risks: dict[str, float], speedups: dict[str, float], target_speedup: float) -> str:
    """The line compress prints for :func:`ship_risks`: each one's admitted speedup and chance."""
    named = ", ".join(f"{name} (admitted at {speedups[name]:.2f}x: {chance:.0%})" for name, chance in risks.items())
    return (f"ship risk: {named} may time under {target_speedup:g}x as shipped (by the speedups as shipped so far, "
            f"{SHIPPED_OVER_ADMITTED:g} of the admitted ones, sd {SHIPPED_SPREAD:g}; a chance under "
            f"{SHIP_CHANCE:.0%}), so a near-tie goes to the others first")


def narrowly_missed(speedup: float, latency_ms: float, target_speedup: float | None,
                    target_latency_ms: float | None) -> bool:
    """Whether a shipped graph misses the target by at most :data:`NARROW_MISS` of it: ``speedup`` in
    ``[(1 - NARROW_MISS) * target_speedup, target_speedup)``, or, for a latency asked, ``latency_ms`` in
    ``(target_latency_ms, (1 + NARROW_MISS) * target_latency_ms]``."""
    if target_speedup is not None:
        return (1 - NARROW_MISS) * target_speedup <= speedup < target_speedup
    return target_latency_ms < latency_ms <= (1 + NARROW_MISS) * target_latency_ms


def checks_to_reserve(speedups: list[float], target_speedup: float | None) -> int:
    """How many candidates the finishing reserves time to export and check: two where one that can win
    (``speedups``: theirs as admitted) ships at ``target_speedup`` with less than :data:`CHECK_CHANCE`
    (:func:`ship_chance`: below 4.92x at a 4x target), so that when it times below the target as
    shipped it can be timed again and the next checked (:func:`~kdbert.compress.ship.ship_checked`);
    else one, and one where there is no next (a search of one candidate: on SST-2, a 2-layer cut
    admitted at 4.85x and searched alone for 6 minutes left 2 of them unused, a second check's
    reserve among them)."""
    return 2 if target_speedup is not None and len(speedups) > 1 and any(
        ship_chance(s, target_speedup) < CHECK_CHANCE for s in speedups) else 1


def after_export_seconds(teacher: dict, ratio: float, teacher_dev_seconds: float, threads_row: bool) -> float:
    """What the finishing needs once the winner is exported (:func:`finishing_seconds` without the
    export): timing in turns, the threads row (timed in turns too), the agreement, ``RESERVE_FACTOR`` times."""
    in_turns = turns_seconds(teacher, ratio)
    return RESERVE_FACTOR * ((2 if threads_row else 1) * in_turns + teacher_dev_seconds * ratio)


def export_passes(runtime: str) -> int:
    """How many times exporting a model as compress ships it scores the task's rows at least: int8,
    the int8 choice scores fp32, ``dynamic`` and a static method (more only when the first loses the
    score and time allows, :mod:`kdbert.deploy.int8_choice`), the parity check scores the PyTorch
    model; fp32, the parity check scores PyTorch and the file. The parity check compares the dev
    logits those scorings computed (:func:`kdbert.deploy.export.export_classifier`)."""
    return 3 + 1 if runtime == "onnx-int8" else 2


TIMING_PASSES = 4  # the teacher's timing and its steps of the breakdown, in scoring passes (fixed_seconds)


def fixed_seconds(pass_seconds: float, runtime: str, ratio: float) -> float:
    """What compress costs whatever the search, a pass taking the teacher ``pass_seconds`` (from its
    measured scoring): exporting the teacher and a winner ``ratio`` times its latency, each scoring
    its rows :func:`export_passes` times, and timing the teacher with its steps of the breakdown,
    ``TIMING_PASSES`` passes (on an AMD EPYC, 33 s where the quickstart's teacher took 7 s a pass)."""
    return (export_passes(runtime) * (1.0 + ratio) + TIMING_PASSES) * pass_seconds


def threads_row(threads: int | None) -> bool:
    """Whether the breakdown times the winner again at other threads than ``threads``
    (:func:`~kdbert.compress.speed.other_threads`: not on a one-core machine)."""
    return other_threads(threads) is not None


class Progress:
    """What compress prints while it works: a tqdm bar of the budget's seconds spent (its description
    the phase; moved at each phase and each finished run; hidden with ``--no-progress``) and lines
    (printed above the bar): each finished run's, the runs' precision and threads once."""

    def __init__(self, deadline: Deadline, enabled: bool = True):
        self.deadline = deadline
        self.seconds: dict[str, float] = {}
        self.said_runtime = False
        self.bar = tqdm(total=round(60 * deadline.minutes), unit="s", desc="compress", disable=not enabled,
                        dynamic_ncols=True, file=sys.stderr,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s of the budget")

    @contextlib.contextmanager
    def phase(self, name: str):
        """The bar names the phase while it runs; its seconds are kept (:meth:`phase_seconds`)."""
        self.bar.set_description_str(name, refresh=False)
        self.tick()
        started = self.deadline.clock()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + self.deadline.clock() - started

    def phase_seconds(self) -> dict[str, float]:
        """Seconds spent in each phase so far, and outside them (``other``: loading, checks, the report)."""
        before = self.deadline.spent() - sum(self.seconds.values())
        return {name: round(seconds, 1) for name, seconds in {**self.seconds, "other": before}.items()}

    def tick(self) -> None:
        """Move the bar to the seconds spent (at most the budget's: tqdm cannot draw a bar past its total)."""
        self.bar.n = min(round(self.deadline.spent()), self.bar.total)
        self.bar.refresh()

    def line(self, text: str) -> None:
        self.bar.write(text, file=sys.stdout)
        self.tick()

    def segment_finished(self, row: dict) -> None:
        """A finished segment's line (:func:`~kdbert.compress.search.segment_line`), after the runs'
        precision and threads the first time (:func:`~kdbert.compress.search.runtime_line`)."""
        if not self.said_runtime:
            self.line(runtime_line(row))
            self.said_runtime = True
        self.line(segment_line(row))

    def close(self) -> None:
        self.tick()
        self.bar.close()
