"""Which training rows are held out, and which of them decide.

Held-out rows stand in for the rows a model will meet, so they are drawn to look like dev:

- **The rule.** Where the rows say which collection they come from (``Example.source``: STS-B's
  file name column) and the training rows' mix of sources differs from dev's, the rows are drawn
  *source-matched*: each source that training and dev share holds out ``count * dev_share(source)``
  of its rows (dev's shares among the shared sources), uniformly, at most ``MAX_BIN_SHARE`` of them.
  "Differs" is a chi-square test of the two mixes with a total variation distance above
  ``MIN_SOURCE_SHIFT`` and a p-value below ``MAX_SHIFT_P``. A dev source training lacks cannot be
  held out: :func:`unseen_sources` counts its rows, and the report says that the kept share on
  held-out rows does not speak for them. STS-B: a third of dev (answers-forums 2015, track5 2017)
  comes from collections its training file lacks, and its forums and news are other collections
  than training's (deft-forum, deft-news), so genre labels mislead: rows drawn to dev's mix of
  genres read a 4x winner's kept share 6.6 points under dev's; on the collections both share, at
  dev's mix, the deciding rows and dev agreed within the noise for the earlier (length-matched)
  winner (97.8% ± 1.6 against 96.9%) and read two standard deviations apart for the genre-matched
  one (92.3% ± 2.0 against 96.2%) (docs/benchmarks/compress.md, "The kept share per source").
  Otherwise, when the training rows' lengths (words per row, both texts of a pair) differ
  from dev's, as SST-2's do (its training file is mostly phrases cut from the treebank's parse
  trees, its dev set whole sentences: median 7 words against 19), the rows are drawn
  *length-matched*: dev's lengths cut into ``LENGTH_BINS`` quantile bins (a row shorter or longer
  than every dev row in none), each bin holding out
  ``count * dev_share(bin)`` rows of the training rows of that length, at most ``MAX_BIN_SHARE``
  of them (the count shrinks until every bin fits). "Differ" is a two-sample Kolmogorov-Smirnov
  test: statistic ``D > MIN_LENGTH_SHIFT`` and p-value below ``MAX_SHIFT_P`` (SST-2: D = 0.49;
  STS-B, whose dev comes from other genres: 0.20; CoLA, MRPC and RTE: 0.03-0.04, drawn uniformly).
  Where, besides, most training rows are parts of other rows (their words a contiguous run of
  another's: SST-2's phrases of its sentences, 90% of its rows), a held-out phrase would have its
  sentence, and a held-out sentence its phrases, in training. Then *whole rows* are held out: the
  share of the rows that are no other's part (SST-2's 6,885 sentences; length-matched among them
  if their lengths still differ), and every part of them is dropped from training
  (``data.held_out_parts``), so that nothing of a held-out row is trained on.
  Where lengths match but a training row sits nearer the other training rows than dev's rows sit
  to them (:mod:`kdbert.data.nearness`: the largest word-set Jaccard similarity; a KS test,
  statistic above ``MIN_NEARNESS_SHIFT``, p-value below ``MAX_SHIFT_P``), the rows are drawn
  *nearness-matched*: dev's nearness deciles as bins, as for lengths. CoLA: its training file holds
  groups of example sentences a word or two apart, so a uniform draw held out rows whose siblings
  trained (nearness 0.64 on average, 72% at 0.5 or more, against dev's 0.50 and 43%; KS D = 0.29),
  and the teacher scored 36.9 MCC on them against 27.3 on dev. MRPC (D = 0.06) and RTE (0.08) stay
  uniform. Training files above :data:`kdbert.data.nearness.MAX_ROWS` rows are not measured.
  Otherwise *uniform*: a shuffle seeded by :data:`HELD_OUT_SEED` (the rule of every earlier run).
  Every run, seed and method of a task holds out the same rows.
- **The record.** ``kdbert finetune`` writes which rows it held out (``held_out.json``:
  :func:`record`, a hash of each row's texts and label), so that a distillation from that teacher
  holds out the very rows the teacher never trained on (:func:`hold_out_recorded`), whatever share
  it was asked for.
- **Two halves.** Rows that pick checkpoints and promote candidates drift upwards from their
  picking, so a search keeps ``decide_share`` of the held-out rows apart
  (:func:`split_decide`, seeded): they are scored only to choose the winner and to state its
  kept share. The teacher's own checkpoint is a pick too: ``kdbert finetune`` picks it on the
  first half alone (:data:`DECIDE_SHARE` apart) and records the rows that decide (``decide`` in
  ``held_out.json``), which a distillation from it then decides on (:func:`split_recorded`): the
  teacher's score there is not its luckiest draw either, so the kept share does not read low. ``--max-held-out-examples N`` scores the first N of each (the exports' int8 choice).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

import numpy as np

from kdbert.data.glue import Example, TaskData
from kdbert.data.nearness import MAX_ROWS as MAX_NEARNESS_ROWS
from kdbert.data.nearness import TrainingTexts
from kdbert.errors import KdbertError

HELD_OUT_SEED = "kdbert-held-out"
DECIDE_SEED = "kdbert-decide"
RECORD_FILE = "held_out.json"
DECIDE_SHARE = 0.5  # of the held-out rows, kept apart to decide (a search's winner; a teacher's score)
LENGTH_BINS = 10
MAX_BIN_SHARE = 0.5  # the most of a length bin's training rows held out
MIN_LENGTH_SHIFT = 0.1  # the KS statistic above which training and dev lengths differ ...
MIN_NEARNESS_SHIFT = 0.1  # the KS statistic above which held-out rows would sit nearer training than dev ...
MIN_SOURCE_SHIFT = 0.1  # the total variation distance above which training's mix of sources differs from dev's ...
MAX_SHIFT_P = 0.01  # ... (and lengths) when its test's p-value is also below this
MIN_RECORDED_FOUND = 0.9  # the share of a record's rows a task's training rows must hold
MIN_PART_SHARE = 0.5  # above this share of rows that are parts of other rows, whole rows are held out


def row_length(row: Example) -> int:
    """Words in a row (:func:`words`)."""
    return len(words(row))


def row_hash(row: Example) -> str:
    """A row's identity across loads and seeds: 16 hex digits of the SHA-256 of its texts and label."""
    return hashlib.sha256(json.dumps([list(row.texts), row.label]).encode()).hexdigest()[:16]


def lengths_differ(train: list[Example], dev: list[Example]) -> bool:
    """Whether the training rows' lengths differ from dev's (module doc: KS statistic and p-value)."""
    from scipy.stats import ks_2samp  # here: scipy.stats takes 2 s to import, which most commands never need

    if not train or not dev:
        return False
    test = ks_2samp([row_length(r) for r in train], [row_length(r) for r in dev])
    return test.statistic > MIN_LENGTH_SHIFT and test.pvalue < MAX_SHIFT_P


def sources_differ(train: list[Example], dev: list[Example]) -> bool:
    """Whether the training rows' mix of sources differs from dev's (module doc: total variation
    distance and a chi-square test); False where any row does not say its source."""
    from scipy.stats import chi2_contingency

    if not train or not dev or any(row.source is None for row in (*train, *dev)):
        return False
    mixes = [Counter(row.source for row in rows) for rows in (train, dev)]
    names = sorted(mixes[0].keys() | mixes[1].keys())
    if len(names) < 2:
        return False
    counts = np.array([[mix[name] for name in names] for mix in mixes])
    shares = counts / counts.sum(axis=1, keepdims=True)
    distance = 0.5 * np.abs(shares[0] - shares[1]).sum()
    return distance > MIN_SOURCE_SHIFT and chi2_contingency(counts).pvalue < MAX_SHIFT_P


def uniform_indices(rows: int, count: int) -> list[int]:
    """The first ``count`` of ``range(rows)`` shuffled by :data:`HELD_OUT_SEED`."""
    order = list(range(rows))
    random.Random(HELD_OUT_SEED).shuffle(order)
    return order[:count]


def matched_indices(train_bins: np.ndarray, dev_bins: np.ndarray, count: int,
                    max_share: float = MAX_BIN_SHARE) -> list[int]:
    """At most ``count`` training row indices whose bins follow dev's: bin ``b`` (0..B-1; -1: in no
    bin) gives ``n * dev_share(b)`` of its rows (rounded by largest remainders, so that they add up
    to ``n``) in :data:`HELD_OUT_SEED` order, with ``n`` the largest count up to ``count`` for which
    no bin gives more than ``max_share`` of its rows."""
    dev_share = np.bincount(dev_bins, minlength=int(max(train_bins.max(), dev_bins.max())) + 1) / len(dev_bins)
    members = [[] for _ in dev_share]
    for index in uniform_indices(len(train_bins), len(train_bins)):
        if train_bins[index] >= 0:
            members[train_bins[index]].append(index)
    fits = [len(m) * max_share / share for m, share in zip(members, dev_share) if share > 0]
    quotas = min(count, int(min(fits))) * dev_share
    counts = np.floor(quotas).astype(int)
    for b in np.argsort(counts - quotas)[: int(round(quotas.sum())) - counts.sum()]:  # largest remainders
        counts[b] += 1
    return [i for m, n in zip(members, counts) for i in m[:n]]


def length_matched_indices(train: list[Example], dev: list[Example], count: int,
                           max_share: float = MAX_BIN_SHARE) -> list[int]:
    """At most ``count`` training row indices whose lengths follow dev's (:func:`decile_matched_indices`)."""
    return decile_matched_indices(np.array([row_length(r) for r in train]), np.array([row_length(r) for r in dev]),
                                  count, max_share)


def decile_matched_indices(train_values: np.ndarray, dev_values: np.ndarray, count: int,
                           max_share: float = MAX_BIN_SHARE) -> list[int]:
    """At most ``count`` training row indices whose values (a length, a nearness) follow dev's:
    :func:`matched_indices` over the bins of dev's deciles, a row below or above every dev row in none."""
    quantiles = np.quantile(dev_values, np.linspace(0, 1, LENGTH_BINS + 1))
    edges = np.unique(quantiles[1:-1])
    bins = np.where((train_values >= quantiles[0]) & (train_values <= quantiles[-1]),
                    np.searchsorted(edges, train_values, side="right"), -1)
    return matched_indices(bins, np.searchsorted(edges, dev_values, side="right"), count, max_share)


def nearness_shift(train: list[Example], dev: list[Example]) -> tuple[np.ndarray, np.ndarray] | None:
    """Each training row's nearness to the other training rows and each dev row's to the training
    rows (:mod:`kdbert.data.nearness`) where the two differ (a KS test as for lengths: statistic
    above ``MIN_NEARNESS_SHIFT``, p-value below ``MAX_SHIFT_P``); None where they do not, or where
    training has more than :data:`kdbert.data.nearness.MAX_ROWS` rows (not measured)."""
    from scipy.stats import ks_2samp

    if not train or not dev or len(train) > MAX_NEARNESS_ROWS:
        return None
    texts = TrainingTexts(train)
    own, devs = texts.nearness(train, leave_out_self=True), texts.nearness(dev)
    test = ks_2samp(own, devs)
    return (own, devs) if test.statistic > MIN_NEARNESS_SHIFT and test.pvalue < MAX_SHIFT_P else None


def unseen_sources(train: list[Example], dev: list[Example]) -> dict[str, int]:
    """Dev's rows per source that no training row comes from (empty where the rows do not say)."""
    seen = {row.source for row in train}
    return dict(Counter(row.source for row in dev if row.source is not None and row.source not in seen))


def source_matched_indices(train: list[Example], dev: list[Example], count: int) -> list[int]:
    """At most ``count`` training row indices whose sources follow dev's mix among the sources both
    have (:func:`matched_indices` with a bin per source; a training row of a source dev lacks in none,
    a dev row of a source training lacks left out of the mix)."""
    names = sorted({row.source for row in dev} & {row.source for row in train})
    bins = np.array([names.index(row.source) if row.source in names else -1 for row in train])
    return matched_indices(bins, np.array([names.index(row.source) for row in dev if row.source in names]), count)


def words(row: Example) -> tuple[str, ...]:
    """A row's whitespace-separated words, over all its texts."""
    return tuple(word for text in row.texts for word in text.split())


def parts_of(rows) -> set[tuple[str, ...]]:
    """Every contiguous run of words of ``rows`` shorter than its row (their proper parts)."""
    parts = set()
    for row in rows:
        tokens = words(row)
        parts.update(tokens[i:j] for i in range(len(tokens)) for j in range(i + 1, len(tokens) + 1)
                     if j - i < len(tokens))
    return parts


def whole_rows(train: list[Example]) -> list[int] | None:
    """The indices of the rows that are no other row's part, where more than ``MIN_PART_SHARE`` of
    the rows are parts of others (SST-2: 60,464 of its 67,349 rows are phrases of its 6,885
    sentences); None otherwise."""
    parts = parts_of(train)
    whole = [i for i, row in enumerate(train) if words(row) not in parts]
    return whole if len(whole) < (1 - MIN_PART_SHARE) * len(train) else None


def held_out_indices(data: TaskData, fraction: float) -> tuple[list[int], str, list[int]]:
    """The indices of ``data.train`` to hold out for ``fraction``, the rule that drew them, and the
    indices of the rows left out of training because they are parts of a held-out row (module doc):
    ``"source-matched"`` where the rows' mix of sources differs from dev's; otherwise ``"uniform"``,
    or ``"nearness-matched"`` where training rows sit nearer each other than dev's rows sit to them,
    or ``"length-matched"`` where the lengths differ from dev's, or ``"whole rows"`` where
    most rows are parts of others: ``fraction`` of the whole rows (length-matched among them if
    theirs differ too), every part of them dropped from training."""
    count = max(1, round(fraction * len(data.train)))
    if count >= len(data.train):
        raise KdbertError(f"--held-out-fraction {fraction:g} leaves no training rows of {len(data.train)}; "
                          "lower it")
    dev = [row for rows in data.dev.values() for row in rows]
    if sources_differ(data.train, dev):
        return source_matched_indices(data.train, dev, count), "source-matched", []
    if not lengths_differ(data.train, dev):
        shift = nearness_shift(data.train, dev)
        matched = decile_matched_indices(*shift, count) if shift is not None else []
        if matched:  # none where no training row sits as far as dev's (SQuAD: every context repeats): uniform
            return matched, "nearness-matched", []
        return uniform_indices(len(data.train), count), "uniform", []
    whole = whole_rows(data.train)
    if whole is None:
        return length_matched_indices(data.train, dev, count), "length-matched", []
    candidates = [data.train[i] for i in whole]
    count = max(1, round(fraction * len(whole)))
    picked = (length_matched_indices(candidates, dev, count) if lengths_differ(candidates, dev)
              else uniform_indices(len(whole), count))
    chosen = [whole[i] for i in picked]
    parts = parts_of(data.train[i] for i in chosen)
    dropped = [i for i, row in enumerate(data.train) if words(row) in parts]
    return chosen, "whole rows", dropped


def move_held_out(data: TaskData, indices, dropped=()) -> TaskData:
    """Move the training rows at ``indices`` into ``data.held_out`` (both keep the file's order) and
    those at ``dropped`` into ``data.held_out_parts`` (out of training, scored nowhere)."""
    chosen, parts = set(indices), set(dropped) - set(indices)
    data.held_out = [row for index, row in enumerate(data.train) if index in chosen]
    data.held_out_parts = [row for index, row in enumerate(data.train) if index in parts]
    data.train = [row for index, row in enumerate(data.train) if index not in chosen and index not in parts]
    return data


def record(data: TaskData, fraction: float, rule: str) -> dict:
    """What ``held_out.json`` says of a hold-out: the share asked for, the rule, each held-out row's
    :func:`row_hash` (those that decide included), those of the rows that decide (the model's
    checkpoint was not picked on them) and those of the rows dropped as their parts."""
    rows = data.held_out + data.decide
    return {"fraction": fraction, "rule": rule, "rows": len(rows), "hashes": [row_hash(row) for row in rows],
            "decide": [row_hash(row) for row in data.decide],
            "parts": [row_hash(row) for row in data.held_out_parts]}


def read_record(folder: str | Path) -> dict | None:
    """A model folder's ``held_out.json`` (None without one)."""
    path = Path(folder) / RECORD_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def hold_out_recorded(data: TaskData, recorded: dict, source: str) -> TaskData:
    """Hold out the training rows ``recorded`` lists (:func:`record`; duplicates of a listed row go
    too, so none of them trains), refused in one line when this task's training rows lack more than
    ``1 - MIN_RECORDED_FOUND`` of them (``source``: where the record came from, for the message)."""
    wanted = set(recorded["hashes"])
    hashes = [row_hash(row) for row in data.train]
    indices = [i for i, digest in enumerate(hashes) if digest in wanted]
    found = len({hashes[i] for i in indices})
    if found < MIN_RECORDED_FOUND * len(wanted) or not indices:
        raise KdbertError(f"{source}: {len(wanted) - found} of the {len(wanted)} held-out rows it lists are not "
                          f"among this task's {len(data.train)} training rows; pass the task and --train-file "
                          "the teacher was fine-tuned on")
    if len(indices) >= len(data.train):
        raise KdbertError(f"{source}: it lists every training row of this task as held out; fine-tune the teacher "
                          "with a --held-out-fraction below 0.5")
    parts = set(recorded.get("parts", ()))
    return move_held_out(data, indices, [i for i, digest in enumerate(hashes) if digest in parts])


def split_recorded(data: TaskData, decide: list[str]) -> TaskData:
    """Move the held-out rows whose :func:`row_hash` ``decide`` lists (a record's, :func:`record`) into
    ``data.decide``, the others staying to pick, each in the order :func:`split_decide` gives them."""
    data = split_decide(data, 0.0)
    wanted = set(decide)
    rows = data.held_out
    data.held_out = [row for row in rows if row_hash(row) not in wanted]
    data.decide = [row for row in rows if row_hash(row) in wanted]
    if not data.held_out or not data.decide:
        raise KdbertError(f"the record's {len(wanted)} rows that decide leave {len(data.held_out)} held-out row(s) to "
                          f"pick and {len(data.decide)} to decide; fine-tune the teacher again with "
                          "`kdbert finetune --held-out-fraction`")
    return data


def split_decide(data: TaskData, share: float) -> TaskData:
    """Put the held-out rows in an order seeded by :data:`DECIDE_SEED` and move the last
    ``round(share * n)`` of the ``n`` (at least one, and one left to pick on; none for share 0) into
    ``data.decide``: a prefix of ``data.held_out`` never holds a row that decides, whatever the share."""
    order = list(range(len(data.held_out)))
    random.Random(DECIDE_SEED).shuffle(order)
    rows = [data.held_out[i] for i in order]
    count = min(len(rows) - 1, max(1, round(share * len(rows)))) if share else 0
    if share and count < 1:
        raise KdbertError(f"the {len(rows)} held-out row(s) cannot be split into rows that pick and rows that "
                          "decide; raise --held-out-fraction")
    data.held_out, data.decide = rows[: len(rows) - count], rows[len(rows) - count:]
    return data
