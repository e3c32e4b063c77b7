"""Which run a search worker starts next: asynchronous successive halving (ASHA, Li et al. 2020)
over the candidates that meet the speed target, where a promoted candidate continues from where it
paused and none restarts.

A candidate trains in segments. Its segment of rung ``r`` ends at :func:`rung_steps` cumulative
steps: ``first_steps * eta^r`` with ``round_share="steps"``; with ``"time"`` (the default) that
times ``mean_cost / own_cost`` (the mean seconds per step of the runs so far over those of its
family), so every family gets the same wall time at a rung and cheap steps buy more of them. A
family's cost is known once one of its candidates has trained; a candidate that trained before
its family's cost was known is topped up to its count (continued, not rerun) once that count is
``RERUN_FACTOR`` times what it trained.

Segments are dicts: ``candidate``, ``rung``, ``state`` (``"running"``: claimed by a worker;
``"done"``), and for a done one ``steps`` (cumulative), ``trained`` (this segment's steps),
``score`` and ``se`` (on the held-out rows that pick: the score of the run's best checkpoint by
them, and its bootstrap standard error), ``decide_score`` and ``decide_se`` (that checkpoint on
the rows that decide; ``decide_paired_se``: the standard error of its difference from the teacher's
score there, where the goal has the teacher's predictions), ``loss`` (held-out, may be missing), ``seconds`` (wall), ``train_seconds``
(the training loop's). :func:`next_job`
reads them all (every worker's) and says what to run, in this order:

1. rung 0 for the first candidate of each kind not reached yet (BERT, BiLSTM, MobileBERT; candidates
   come in ``spread_order``: pre-trained students first, then families in turn), so that the
   search reaches every kind; a kind's augmented twins, whose first run also waits for the
   teacher to label their extra rows, start as its other candidates do (3), so that promotions
   are not held up behind them;
2. rung-0 top-ups (a cheap family's equal time, so that rung 0 compares like with like), then
   promotions, the highest rung first: of the ``n`` candidates that finished rung ``r``, the top
   ``floor(n / eta)`` by :func:`promotion_order` go on to rung ``r + 1`` (below ``rounds``); but
   near the window's end, when the leader (:func:`closing_leader`: the best of the highest rung)
   cannot train its next rung whole, only a candidate :func:`within_reach` of winning goes on
   before it, and then the leader, until the window's end stops it: a promotion from a lower rung
   gains a few points at most in the time left (the main job gave 32 s of its last 33 to three
   1-layer students' rungs 1-2, 81.4-82.0 on the rows that pick where keeping the share took 85.7,
   while its 2-layer leader, at 1,600 steps and 86.6, stopped);
3. the other candidates' rung 0, while round 0's share of the window lasts (``first_round_share``
   of it after the teacher's labelling, :meth:`~kdbert.compress.search.Window.from_now`);
4. when nothing else can run, the top ``ceil(n / eta)`` (a candidate left alone goes on); if none
   of those fits whole, the first that fits ``first_steps`` more steps, which the window's end then
   stops (past round 0's share, a new candidate's first rung cannot catch a leader with eight
   times its steps: the main job gave its last 40 s to two 1-layer students' 100-200 steps while
   its 2-layer leader, at 800, stopped); when none of those can go on (each has stalled, below),
   the other candidates' rung 0, past round 0's share; and then stalled candidates too.

A candidate has *stalled* (:func:`stalled`) when its last :data:`STALL_PATIENCE` promotions found no
better checkpoint on the rows that pick: its score there, its best checkpoint's, did not rise while
it trained three times the steps it had. It is not promoted while another candidate can be (its
place among a rung's top is not given to the next), and its time goes to candidates not started
yet: on MRPC a 1-layer student that stayed at its first score (one class nearly always) for 12,000
steps took 19 of a search's 30 minutes, while the BiLSTM that won the search before trained 300
steps. One promotion without a gain is not enough: on SST-2 the best candidate (bert-2x384, 87.5
on 344 rows, a standard error of 1.8) found no better checkpoint in one doubling, which the noise
of a best-of-pauses score does often.

With ``max_epochs`` a candidate cut from the teacher or brought by the user trains at most that many
passes over its rows (:func:`last_step`): its rungs end there, and once it has trained them it is
done: never promoted again, its place among a rung's top going to the next.

A job starts only when it should end inside the window (its candidate's measured seconds per step
and the runs' mean overhead outside training and the teacher's labelling; the first run of a
search always starts). The order serves the
winner rule (:func:`pick_winner`: the fastest candidate whose score on the held-out rows that
decide keeps ``min_kept`` of the teacher's there, within the noise margin (paired with the
teacher's predictions on the same rows where known, :meth:`Goal.decide_margin`), among every
candidate trained): once a candidate keeps it, a slower one can no longer win, so only candidates at least as
fast are promoted, best score on the rows that pick first; scores within the margin of their
standard errors count as a tie, which the faster candidate wins. Until one keeps it, the best score
goes on first, as the winner will be the best on all held-out rows when none keeps the share, and a
tie goes to the slower candidate, which a rung's early score underrates (:func:`promotion_order`).
The rows that decide never order a promotion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kdbert.compress.augment import is_augmented
from kdbert.compress.recipes import SearchSettings, kind_of, starts_from_teacher
from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate

ETA = 2  # the reduction factor: the top 1/ETA of a rung goes on
RERUN_FACTOR = 1.5
TIMER_RESOLUTION = 0.1  # seconds: a shorter training loop counts as this long
CHEAP_STEPS_FACTOR = 16  # the most a cheap family's steps at a rung outnumber first_steps * eta^r
STALL_PATIENCE = 2  # promotions in a row without a better checkpoint before a candidate has stalled


def horizon(settings: SearchSettings, eta: int = ETA) -> int:
    """The optimiser steps a candidate's run is set up for (its learning-rate schedule's length, the
    same in every segment so that a segment continues the last exactly): the last rung's steps,
    ``first_steps * eta^(rounds - 1)``, times ``CHEAP_STEPS_FACTOR``. No rung goes past it."""
    return settings.first_steps * eta ** (settings.rounds - 1) * CHEAP_STEPS_FACTOR


def epoch_steps(candidates: list[Candidate], train_rows: int, unlabelled_rows: int, variant_rows: int,
                batch_size: int) -> dict[str, float]:
    """Steps of one pass over its rows for each of ``candidates`` that trains at the search's
    ``batch_size`` (cut from the teacher or brought by the user; the BiLSTM's Adadelta runs have
    their own batch and are not limited): the training rows and the ``--unlabelled`` ones over the
    batch; an augmented variant's augmented and transfer rows (``variant_rows``) in place of the
    unlabelled ones, as it trains on them instead."""
    return {c.name: (train_rows + (variant_rows if is_augmented(c.name) else unlabelled_rows)) / batch_size
            for c in candidates if starts_from_teacher(c)}


def last_step(candidate: str, settings: SearchSettings, goal: Goal | None = None, eta: int = ETA) -> int:
    """The most cumulative steps ``candidate``'s run trains in the search: :func:`horizon`, or with
    ``settings.max_epochs`` and the candidate's epoch known (``goal.epoch_steps``) at most
    ``ceil(max_epochs * epoch_steps)``, never below ``first_steps``. Students cut from the teacher
    peak and then lose what they kept as a continuing search trains them on the same rows: CoLA's
    bert-2x384-ffn768 kept 80.2% of the teacher's dev MCC after ~11 epochs and 71.3% after ~40,
    MRPC's bert-3x256-ffn512 98.1% of its dev score after ~23 and 89.8% after ~93 (three seeds each,
    BENCHMARKS.md), and the rows that pick are too few to stop them: MRPC's search kept that cut's
    46-epoch student, and at 24 epochs shipped it keeping 98.0%."""
    end = horizon(settings, eta)
    epoch = (goal.epoch_steps if goal is not None else {}).get(candidate)
    if settings.max_epochs is None or epoch is None:
        return end
    return min(end, max(settings.first_steps, math.ceil(settings.max_epochs * epoch)))


def family(name: str) -> tuple[str, bool]:
    """The family of the candidate called ``name``: its kind, and whether it is an augmented variant."""
    return kind_of(name), is_augmented(name)


def spread_order(candidates: list[Candidate], latency: dict[str, float],
                 first: frozenset[str] = frozenset(), lead: frozenset[str] = frozenset(),
                 near_line: frozenset[str] = frozenset()) -> list[Candidate]:
    """The order candidates start in, so that the first k span the families and the speed range
    whatever k the budget allows: families in turn, each family's candidates by bisection of their
    order by ``latency`` (the fastest, the slowest, the middle one, then the middles of the two
    halves, ...); a kind's augmented variants are a family of their own. Candidates named in
    ``first`` (those that start from a general student) lead their family, fastest first; then those
    named in ``lead`` (:func:`~kdbert.families.selection.lead_cuts`: the teacher's whole width, and
    from two layers the widest width below it) in :func:`lead_rank`'s order: from two layers, those
    clear of the speed line, the widest first, then the deepest, then the slowest; then those named
    in ``near_line`` (admitted within ``budget.SHIP_LINE_BAND`` of the target speedup), the fastest
    first; one layer last; then the rest. Whole-width students learnt more at equal steps (SST-2,
    1,200 steps, three seeds: bert-2x384-ffn768 84.2 dev, bert-3x256 80.9) and won the searches that trained them, but as the
    middles of a bisection over every width a short search reached them last (the main job: 2 of 5
    candidates trained, 2026-12-01); the deeper keep more (the main job's teacher at 1,200 steps:
    bert-2x384-ffn384 94.7% of it on dev, bert-1x384-ffn384 91.0%; at 3,000 steps on an AMX Xeon,
    where 4x admits no 2-layer cut of the teacher's width, bert-2x256-ffn512 94.7%, bert-1x384 93.0%),
    so depth, not latency, leads: timing noise put bert-2x384-ffn192 at 6.02x and bert-1x384 at 5.5x,
    and the 1-layer one, started first, took the main job's whole search (91.0% on dev, where 2-layer
    winners shipped 94.8-95.3%). A near-line candidate may time under the target as shipped
    (bert-2x384-ffn384, admitted at 4.02x, took a search to 95.5% on dev and timed 3.97x), so of
    one depth it starts after those clear of the line, the likeliest to pass first; but before the
    shallower ones (started after the 1-layer ones, near-line 2-layer cuts never trained in a main
    job that shipped a 1-layer student at 91.2%). Of two widths from two layers the teacher's leads,
    whatever the other's depth: it learns faster (MRPC with 60,000 mined pairs, 4,800 steps, seed 42:
    bert-2x384-ffn384 82.49 dev at 2,400 steps and 81.95 at the end, 78.49 and 80.38 on the rows that
    pick, where bert-3x256-ffn512 read 79.26 and 80.88, 71.98 and 79.21; the first's seed 43 81.71
    at 1,200 steps and 79.93 at the end), and a search of such pairs trains one or two BERT-style
    cuts in its half hour (each of MRPC's six mined-pair searches up to 2026-12-07 started
    bert-3x256-ffn512, the deepest, first).

    Pre-trained students (``Candidate.start`` "pretrained" or "user": their own weights, trained on
    text) come first, slowest (deepest) first, one a turn: they led the first round of every search
    that had one (against MPNet-base on four GLUE tasks, 2026-11-30), the deepest by most, and as
    the last family in turn the deepest started too late in round 0 to be promoted (CoLA at 8x:
    23.3 on the rows that pick against 15.7 for the BiLSTM that took every promotion). The other
    families follow, the one with the fastest candidate first."""
    families: dict[tuple[str, bool], list[Candidate]] = {}
    for candidate in sorted(candidates, key=lambda c: (not pretrained(c), latency[c.name])):
        families.setdefault(family(candidate.name), []).append(candidate)

    def family_order(members: list[Candidate]) -> list[Candidate]:
        if all(pretrained(c) for c in members):  # the deeper, the likelier to keep the share
            return members[::-1]
        rest = [c for c in members if c.name not in first]
        leading = sorted((c for c in rest if c.name in lead), key=lambda c: lead_rank(c, latency, near_line))
        return ([c for c in members if c.name in first] + leading
                + _bisection([c for c in rest if c.name not in lead]))

    queues = [family_order(members) for members in families.values()]
    return [queue[i] for i in range(max(map(len, queues), default=0)) for queue in queues if i < len(queue)]


def lead_rank(candidate: Candidate, latency: dict[str, float], near_line: frozenset[str]) -> tuple:
    """Where a lead cut starts among the others (:func:`spread_order`; lowest first): one layer after
    two or more; then those clear of the speed line before those near it; then the widest first, the
    deepest first, and of one shape the slowest first if clear of the line, else the fastest first."""
    shape = dict(candidate.shape)
    layers, width = shape.get("num_hidden_layers", 0), shape.get("hidden_size", 0)
    near = candidate.name in near_line
    return (layers < 2, near, -width, -layers, latency[candidate.name] if near else -latency[candidate.name])


def pretrained(candidate: Candidate) -> bool:
    """Whether ``candidate`` starts from its own weights, pre-trained on text (``--student`` and the
    packaged pre-trained students), not from the teacher's or from random ones."""
    return candidate.start in ("pretrained", "user")


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


@dataclass(frozen=True)
class Job:
    """Train ``candidate`` until ``steps`` cumulative steps, the end of its rung ``rung``."""

    candidate: str
    rung: int
    steps: int


@dataclass(frozen=True)
class Goal:
    """What the winner must do: keep ``min_kept`` of the teacher's score; ``latency`` (ms per row, by
    candidate) decides among those that do. The search compares on the held-out rows that pick
    (the teacher's ``teacher_score``), the winner on those that decide (``teacher_decide``, with its
    bootstrap standard error ``teacher_decide_se``; None: the rows that pick decide too), where
    always answering the majority class scores ``majority_decide`` (None: not known);
    ``teacher_decide_predictions``: the teacher's predictions there, in their order (None: not known),
    against which every run is scored on the same rows (``decide_paired_se``, :meth:`decide_margin`);
    ``decide_weight``: the share of the held-out rows that decide (:meth:`pooled`); ``lead_cuts``:
    the candidates cut from the teacher that lead (:func:`~kdbert.families.selection.lead_cuts`: its
    whole width, and from two layers the widest width below it) and their layers, ``ship_risk``
    those admitted so near the speedup asked that they ship at it less than three times in four
    (:func:`~kdbert.compress.budget.ship_at_risk`), each with its chance to ship at it
    (:func:`~kdbert.compress.budget.ship_chance`; both :func:`near_ties_first`); ``epoch_steps``: the
    optimiser steps of one pass over the rows of each candidate :func:`last_step` may limit
    (:func:`epoch_steps`)."""

    teacher_score: float
    min_kept: float
    latency: dict[str, float]
    teacher_decide: float | None = None
    teacher_decide_se: float = 0.0
    majority_decide: float | None = None
    teacher_decide_predictions: tuple | None = None
    decide_weight: float = 0.5
    lead_cuts: dict[str, int] = field(default_factory=dict)  # name -> layers
    ship_risk: dict[str, float] = field(default_factory=dict)  # name -> chance to ship at the speedup asked
    epoch_steps: dict[str, float] = field(default_factory=dict)  # name -> steps of one pass over its rows

    def informative(self, score: float) -> bool:
        """Whether ``score`` on the rows that decide beats always answering the majority class there
        (a student at or below it has shown nothing of the teacher, whatever share it "keeps")."""
        return self.majority_decide is None or score > self.majority_decide

    @staticmethod
    def margin(*errors: float) -> float:
        """The standard error of a difference of independent scores with these standard errors,
        ``sqrt(sum se_i^2)``: what two scores closer than this cannot be told apart by."""
        return math.sqrt(sum(error * error for error in errors))

    def keeps(self, score: float) -> bool:
        """Whether ``score`` on the rows that pick keeps ``min_kept`` of the teacher's there."""
        if self.teacher_score <= 0:  # a teacher scoring 0: a student keeps it all when it does as well
            return score >= self.teacher_score
        return score / self.teacher_score >= self.min_kept

    def keeps_clearly(self, row: dict) -> bool:
        """Whether a segment's score on the rows that pick keeps the share by more than its standard
        error, ``keeps(score - se)``: what turns the search from capacity to speed. A score just past
        the line is as likely a lucky draw: the main job's bert-2x256-ffn512 read 86.63 +- 1.80 against
        a line of 86.00, so near-ties went to speed, a 1-layer cut took the last promotions, and the
        2-layer one, shipped after 1,673 steps, kept 91.0% on the rows that decide."""
        return self.keeps(row["score"] - row.get("se", 0.0))

    def teacher_deciding(self) -> float:
        """The teacher's score on the rows that decide (on the rows that pick where none decide)."""
        return self.teacher_score if self.teacher_decide is None else self.teacher_decide

    def line(self) -> float:
        """The score on the rows that decide that keeps ``min_kept`` of the teacher's."""
        teacher = self.teacher_deciding()
        return teacher if teacher <= 0 else self.min_kept * teacher

    def keeps_decided(self, score: float, error: float = 0.0, paired_error: float | None = None) -> bool:
        """Whether ``score`` (standard error ``error``) on the rows that decide keeps the share: at or
        above :meth:`line` unless its shortfall is within :meth:`decide_margin` (a shortfall the rows
        cannot tell from noise does not disqualify)."""
        return self.keeps_within(score, self.decide_margin(error, paired_error)[0])

    def keeps_within(self, score: float, margin: float) -> bool:
        """Whether ``score`` on the rows that decide is at or above :meth:`line` or short of it by at most ``margin``."""
        return self.line() - score <= margin

    def decide_margin(self, error: float, paired_error: float | None = None) -> tuple[float, str]:
        """The noise margin of ``line - score`` on the rows that decide, and its kind.

        ``"paired"`` where the run was scored against the teacher's predictions on the same resamples
        (``paired_error``: the bootstrap standard error of ``score - teacher``, ``decide_paired_se``):
        with ``w`` the teacher's weight in the line (``min_kept``; 1 where the line is the teacher's own
        score), ``s``, ``t``, ``d`` the standard errors of the student's score, the teacher's and their
        difference on those resamples, ``Var(S - wT) = (1 - w) s^2 + (w^2 - w) t^2 + w d^2``, exactly
        (``2 Cov(S, T) = s^2 + t^2 - d^2``). Two models err on many of the same rows, so this is
        narrower than ``"independent"``, :meth:`margin` of ``error`` and ``min_kept * teacher_decide_se``,
        which treats the scores as drawn apart (the rule where the teacher's predictions are not known)."""
        if paired_error is None:
            return self.margin(error, self.min_kept * self.teacher_decide_se), "independent"
        teacher = self.teacher_deciding()
        w = 1.0 if teacher <= 0 else self.min_kept
        variance = (1 - w) * error ** 2 + (w * w - w) * self.teacher_decide_se ** 2 + w * paired_error ** 2
        return math.sqrt(max(0.0, variance)), "paired"

    def pooled(self, row: dict) -> float:
        """A segment's score on all its held-out rows: those that pick and those that decide, each
        weighted by its share of the rows, ``(1 - w) * score + w * decide_score`` (``w``:
        :attr:`decide_weight`; a search without rows that decide: the picking score)."""
        if "decide_score" not in row:
            return row["score"]
        return (1 - self.decide_weight) * row["score"] + self.decide_weight * row["decide_score"]

    def kept(self, score: float) -> float:
        """``score`` over the teacher's on the rows that decide (a teacher scoring at most 0: 1 when
        the score is at least as high, else 0)."""
        teacher = self.teacher_deciding()
        return float(score >= teacher) if teacher <= 0 else score / teacher


def decided(row: dict) -> tuple[float, float]:
    """A segment's score and standard error on the rows that decide (a search without them: on the
    rows that pick)."""
    if "decide_score" in row:
        return row["decide_score"], row.get("decide_se", 0.0)
    return row["score"], row.get("se", 0.0)


def keeps_decided(row: dict, goal: Goal) -> bool:
    """Whether a segment keeps the share on the rows that decide (:meth:`Goal.keeps_decided`, paired
    with the teacher where the run was scored against it)."""
    return goal.keeps_decided(*decided(row), row.get("decide_paired_se") if "decide_score" in row else None)


def latest(segments: list[dict]) -> dict[str, dict]:
    """Each candidate's done segment with the most steps."""
    best: dict[str, dict] = {}
    for segment in segments:
        if segment["state"] == "done" and segment["steps"] >= best.get(segment["candidate"], {"steps": -1})["steps"]:
            best[segment["candidate"]] = segment
    return best


def _step_cost(segments: list[dict]) -> float | None:
    """Mean training seconds per step over done ``segments`` (None without any)."""
    done = [s for s in segments if s["state"] == "done" and s["trained"] > 0]
    if not done:
        return None
    return sum(max(s["train_seconds"], TIMER_RESOLUTION) / s["trained"] for s in done) / len(done)


def rung_steps(candidate: str, rung: int, segments: list[dict], settings: SearchSettings, goal: Goal | None = None,
               eta: int = ETA) -> int:
    """Cumulative steps at the end of ``candidate``'s rung ``rung`` (module doc), at most
    :func:`last_step` (``goal``: its ``epoch_steps``; None: at most :func:`horizon`), and that when
    less than ``first_steps`` would be left after it (a search at 24 epochs trained MRPC's 4x
    cuts to 2,400 steps and then 76 more in a segment of their own)."""
    base = settings.first_steps * eta ** rung
    mean = _step_cost(segments)
    own = _step_cost([s for s in segments if family(s["candidate"]) == family(candidate)])
    if settings.round_share == "time" and mean is not None and own is not None:
        base = max(base, round(base * mean / own))
    last = last_step(candidate, settings, goal, eta)
    return last if base > last - settings.first_steps else base


def predicted_seconds(candidate: str, steps: int, segments: list[dict]) -> float:
    """Seconds training ``candidate`` for ``steps`` more steps should take: its own (else its family's,
    else every run's) seconds per step, plus the runs' mean time outside the training loop."""
    done = [s for s in segments if s["state"] == "done"]
    if not done:
        return 0.0
    own = [s for s in done if s["candidate"] == candidate]
    kin = [s for s in done if family(s["candidate"]) == family(candidate)]
    cost = _step_cost(own) or _step_cost(kin) or _step_cost(done) or 0.0
    overhead = sum(max(0.0, s["seconds"] - s["train_seconds"] - s.get("labelling_seconds", 0.0))
                   for s in done) / len(done)  # the teacher's labelling is paid once per search
    return cost * steps + overhead


def stalled(candidate: str, segments: list[dict]) -> bool:
    """Whether ``candidate``'s last :data:`STALL_PATIENCE` segments, each a promotion (rung >= 1), found
    no better checkpoint: its score on the rows that pick (its best checkpoint's so far) is no higher
    after them than before."""
    runs = sorted((s for s in segments if s["state"] == "done" and s["candidate"] == candidate),
                  key=lambda s: s["steps"])
    last = runs[-STALL_PATIENCE:]
    return (len(runs) > STALL_PATIENCE and all(s["rung"] >= 1 for s in last)
            and max(s["score"] for s in last) <= runs[-STALL_PATIENCE - 1]["score"])


def promotion_order(candidates: list[str], rung: int, segments: list[dict], goal: Goal) -> list[str]:
    """``candidates`` that may still win, best first by their score at ``rung`` on the rows that pick
    (then lower held-out loss, then name), near-ties (scores within :meth:`Goal.margin` of the best's,
    their bootstrap standard errors ``se``) broken by :func:`near_ties_first`.

    While no candidate keeps the share clearly (:meth:`Goal.keeps_clearly`), every one may win and the
    winner will be the best score at the search's end, so a near-tie goes to capacity
    (:func:`near_ties_first`). A rung's score is read early in a run, where a small student leads by
    learning fast and a larger one catches up and passes it (the main job's teacher, SST-2, three seeds:
    bert-1x384-ffn384 and bert-2x384-ffn384 tied at 100 steps, 78.5 each, the 1-layer led at 200, 81.7
    to 79.9, and the 2-layer kept 3.7 points more of the teacher at 1,200 steps; on MRPC at 8x a
    near-tie to speed gave three rungs in a row to a 90x student over a 12x pre-trained cut that led the
    first round by 3.3 points, within the margin of 3.85). Once one keeps it clearly, only candidates at
    least as fast may win, and a near-tie goes to speed: the fastest of the tied goes on."""
    keepers = [name for name, s in latest(segments).items() if goal.keeps_clearly(s)]
    limit = min((goal.latency[name] for name in keepers), default=math.inf)
    at_rung = {s["candidate"]: s for s in sorted(segments, key=lambda s: s.get("steps", 0))
               if s["state"] == "done" and s["rung"] == rung}  # a topped-up rung 0: its longest run
    useful = [name for name in candidates if name in at_rung and goal.latency[name] <= limit]
    rows = [{**at_rung[name], "candidate": name} for name in useful]
    ordered = near_ties_first(rows, lambda row: (row["score"], row.get("se", 0.0)), goal, fastest=bool(keepers))
    return [row["candidate"] for row in ordered]


def near_ties_first(rows: list[dict], scored, goal: Goal, fastest: bool) -> list[dict]:
    """``rows`` (one per candidate) best first by ``scored(row)``'s score (then lower held-out loss,
    then name), where a near-tie goes to speed (``fastest``) or to capacity: of the rows left, the
    fastest (the slowest, one of the teacher's lead cuts, ``goal.lead_cuts``, before any other)
    whose score is within :meth:`Goal.margin` of the best's (``scored(row)``: score and bootstrap
    standard error) comes next. Capacity is the lead cuts before the latency across families: the
    main job's mobilebert-2x384 (4.86x), near-tied with bert-2x384-ffn384 (6.02x) after 100-200
    steps, took every promotion and kept 91.7% of the teacher at 2,619 steps, where that bert shape
    kept 95.0-95.9% at 1,551 in the searches it won. Within the lead cuts, capacity is one that ships
    at the speedup asked at least three times in four (``goal.ship_risk``): the main job's
    bert-2x384-ffn384, admitted at 4.04x, near-tied with bert-2x384-ffn192 (4.45x) at rung 0, took
    every promotion, timed 3.90x as shipped, and the 100-step ffn192 shipped in its place at 86.8%;
    and of two at risk, the likelier to ship (on an AVX2 EPYC both were, bert-2x384-ffn192 admitted at
    4.41x, 64%, and bert-2x384-ffn384 at 4.07x, 24%; near-tied at rung 1, the slower took every
    promotion, timed 3.87x as shipped, and the 200-step ffn192 shipped at 90.4% of the rows that decide);
    then the deepest (the layers ``goal.lead_cuts`` gives each), as they start
    (:func:`spread_order`), then the slowest: on an AMX Xeon bert-1x384 (4.94x) and bert-2x256-ffn512
    (4.96x) near-tied at rung 2, 81.4 to 83.4, and by latency alone the 1-layer cut took every
    promotion after it, where the 2-layer one kept 94.7% on dev at 3,000 steps to its 93.0%."""
    left = _best_first(rows, lambda row: scored(row)[0])

    def capacity_first(row: dict) -> tuple:
        name = row["candidate"]
        return (name not in goal.lead_cuts, -goal.ship_risk.get(name, 1.0), -goal.lead_cuts.get(name, 0),
                -goal.latency[name])

    order = []
    while left:
        best, best_se = scored(left[0])
        tied = [left[0]] + [row for row in left[1:] if best - scored(row)[0] < goal.margin(best_se, scored(row)[1])]
        order.append(min(tied, key=(lambda row: goal.latency[row["candidate"]]) if fastest else capacity_first))
        left.remove(order[-1])
    return order


def next_job(order: list[str], segments: list[dict], settings: SearchSettings, goal: Goal, now: float,
             window_end: float, first_round_end: float, eta: int = ETA) -> Job | None:
    """The run to start at ``now`` (module doc), or None: nothing left that fits before ``window_end``.
    ``order``: the candidates in ``spread_order``; ``segments``: every worker's."""
    running = {s["candidate"] for s in segments if s["state"] == "running"}
    trained = latest(segments)
    started = running | set(trained)

    def fits(job: Job, end: float) -> bool:
        if not any(s["state"] == "done" for s in segments) and not running:
            return True  # the search's first run
        done_steps = trained[job.candidate]["steps"] if job.candidate in trained else 0
        return now + predicted_seconds(job.candidate, job.steps - done_steps, segments) <= end

    def goes_on(job: Job) -> bool:  # at least first_steps more fit: the window's end may stop it
        return fits(Job(job.candidate, job.rung, trained[job.candidate]["steps"] + settings.first_steps), window_end)

    def rung0(name: str) -> Job:
        return Job(name, 0, rung_steps(name, 0, segments, settings, goal, eta))

    reached = {kind_of(name) for name in started}
    for name in order:  # the first candidate of each kind not reached yet
        if name not in started and kind_of(name) not in reached:
            reached.add(kind_of(name))
            if fits(rung0(name), window_end):
                return rung0(name)
    leader = closing_leader(order, segments, running, trained, goal, settings, eta)
    closing = leader is not None and not fits(leader, window_end) and goes_on(leader)
    top_ups = [rung0(name) for name in order if name in trained and name not in running
               and trained[name]["rung"] == 0 and rung0(name).steps >= RERUN_FACTOR * trained[name]["steps"]]
    for job in top_ups + _promotions(order, segments, running, trained, goal, settings, eta, math.floor):
        if fits(job, window_end) and (not closing or within_reach(job.candidate, leader.candidate, trained, goal)):
            return job
    if closing:
        return leader  # the window's end is near: the leader goes on until it stops it
    for job in (rung0(name) for name in order if name not in started):
        if fits(job, first_round_end):
            return job
    if running:
        return None  # what is running may make promotions possible
    for stalled_too in (False, True):  # stalled candidates only when nothing else is left
        last = _promotions(order, segments, running, trained, goal, settings, eta, math.ceil, stalled_too)
        for job in last:
            if fits(job, window_end):
                return job
        for job in last:  # none fits whole: the best goes on until the window's end stops it
            if goes_on(job):
                return job
        for job in () if stalled_too else (rung0(name) for name in order if name not in started):
            if fits(job, window_end):  # what could go on has stalled: the time goes to new candidates
                return job
    return None


def closing_leader(order: list[str], segments: list[dict], running: set[str], trained: dict[str, dict], goal: Goal,
                   settings: SearchSettings, eta: int = ETA) -> Job | None:
    """The leader's next rung (module doc, 2): the first of :func:`promotion_order` at the highest rung
    reached (``trained``: :func:`latest` of ``segments``), where it is neither running nor :func:`stalled`
    and that rung is below the last; else None."""
    if not trained:
        return None
    top = max(s["rung"] for s in trained.values())
    ranked = promotion_order([name for name in order if name in trained and trained[name]["rung"] == top], top,
                             segments, goal)
    if not ranked or top >= settings.rounds - 1 or ranked[0] in running or stalled(ranked[0], segments):
        return None
    name = ranked[0]
    if trained[name]["steps"] >= last_step(name, settings, goal, eta):
        return None
    return Job(name, top + 1, _next_rung_steps(name, top, trained[name]["steps"], segments, settings, goal, eta))


def within_reach(name: str, leader: str, trained: dict[str, dict], goal: Goal) -> bool:
    """Whether ``name``'s score on the rows that pick (its latest run in ``trained``) is within the noise
    margin of what winning takes: the line of the share (``min_kept`` of the teacher's score there)
    where a candidate keeps it, the fastest keeper winning, else the ``leader``'s score::

        target - score <= sqrt(se^2 [+ se_leader^2])
    """
    row, best = trained[name], trained[leader]
    if any(goal.keeps_clearly(s) for s in trained.values()):
        line = goal.teacher_score * (goal.min_kept if goal.teacher_score > 0 else 1.0)  # as Goal.keeps
        return line - row["score"] <= goal.margin(row.get("se", 0.0))
    return best["score"] - row["score"] <= goal.margin(row.get("se", 0.0), best.get("se", 0.0))


def _promotions(order, segments, running, trained, goal: Goal, settings: SearchSettings, eta: int,
                share, stalled_too: bool = False) -> list[Job]:
    """Promotions the rungs allow, the highest rung first: of the ``n`` candidates done at rung ``r``,
    the top ``share(n / eta)`` of :func:`promotion_order` that have not gone on yet nor :func:`stalled`
    (unless ``stalled_too``); a stalled one's place is not given to the next (the rung's share stays
    the top's), its time going to candidates not started yet (:func:`next_job`). One that has trained
    its :func:`last_step` is done: it takes no place."""
    jobs = []
    top = max((s["rung"] for s in segments if s["state"] == "done"), default=-1)
    for rung in range(min(top, settings.rounds - 2), -1, -1):
        finished = [name for name in order if any(s["candidate"] == name and s["rung"] == rung
                                                  and s["state"] == "done" for s in segments)]
        ranked = [name for name in promotion_order(finished, rung, segments, goal)
                  if trained[name]["steps"] < last_step(name, settings, goal, eta)]
        for name in ranked[: share(len(finished) / eta)]:
            if name not in running and trained[name]["rung"] == rung and (stalled_too or not stalled(name, segments)):
                jobs.append(Job(name, rung + 1, _next_rung_steps(name, rung, trained[name]["steps"], segments,
                                                                settings, goal, eta)))
    return jobs


def _next_rung_steps(name: str, rung: int, done: int, segments: list[dict], settings: SearchSettings, goal: Goal,
                     eta: int) -> int:
    """Where ``name``'s rung ``rung + 1`` ends (:func:`rung_steps`), or, when the families' costs have
    moved since it trained so that this is not past the ``done`` steps it has, ``done`` plus its
    rung's increment ``first_steps * eta^rung``; at most :func:`last_step` (a candidate that has
    trained them does not go on)."""
    steps = rung_steps(name, rung + 1, segments, settings, goal, eta)
    last = last_step(name, settings, goal, eta)
    return steps if steps > done else min(done + settings.first_steps * eta ** rung, last)


def ranked_candidates(segments: list[dict], goal: Goal) -> list[dict]:
    """Every candidate trained (its latest segment) in the order the winner rule prefers them: those
    that keep the share on the rows that decide (:meth:`Goal.keeps_decided`), fastest first, then
    the rest best score on all the held-out rows first (:meth:`Goal.pooled`; then lower held-out
    loss, then name). Every candidate already meets the speed target, so when none keeps the share
    the best estimate of quality decides, not speed within the noise margin (which shipped a 101x
    MRPC student that nearly always answered one class, 75.0, over a BiLSTM at 76.7). Either half
    alone misleads: the best of many candidates the rows that decide cannot tell apart is the
    luckiest draw there (CoLA at 4x: a BiLSTM at -4.29 on the rows that pick and 7.98 on those that
    decide shipped at 9.2% kept on dev over a 3-layer student at 25.05 and 5.82, 49.6% on dev), and a
    score on the rows that pick is the best of a run's many pauses (CoLA at 8x: a BiLSTM's 25.73 after
    13,813 steps, 5.94 on the rows that decide, over a MiniLM at 23.34 and 26.15); both halves
    together halve each bias and the noise. A candidate that does not beat the majority class on the
    rows that decide (:meth:`Goal.informative`) comes after every one that does. Each with ``kept``
    (on the rows that decide), ``keeps`` and ``rule``."""
    rows = list(latest(segments).values())
    if not rows:
        raise KdbertError("no candidate finished a run within --budget-minutes; raise it or lower --first-steps")
    informative = [row for row in rows if goal.informative(decided(row)[0])]
    keeping = sorted((row for row in informative if keeps_decided(row, goal)),
                     key=lambda row: (goal.latency[row["candidate"]], row["candidate"]))
    rest = _best_first([row for row in informative if row not in keeping], goal.pooled)
    fallback = "best score on all held-out rows"
    rule = f"fastest keeping {goal.min_kept:g}" if keeping else f"none keeps {goal.min_kept:g}: {fallback}"
    if not informative:
        rule = f"none beats the majority class ({goal.majority_decide:.2f}): {fallback}"
    uninformative = _best_first([row for row in rows if row not in informative], goal.pooled)
    return [{**row, "kept": goal.kept(decided(row)[0]), "keeps": row in keeping, "rule": rule}
            for row in keeping + rest + uninformative]


def _best_first(rows: list[dict], score) -> list[dict]:
    """``rows`` by ``score(row)``, best first (then lower held-out loss, then name)."""
    return sorted(rows, key=lambda row: (-score(row), row.get("loss", math.inf), row["candidate"]))


def pick_winner(segments: list[dict], goal: Goal) -> dict:
    """The first of :func:`ranked_candidates`: the fastest candidate keeping ``goal.min_kept`` on the
    rows that decide, else the best score on all held-out rows."""
    return ranked_candidates(segments, goal)[0]
