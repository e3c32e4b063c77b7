"""The teacher's labels of the rows that candidates of stored logits learn from (the BiLSTM, students
of another tokenizer and, with ``--kd-labels export``, every candidate distilled by logit KD alone:
:func:`~kdbert.compress.recipes.reads_stored_logits`): who labels them, where they are kept,
and whether the budget affords it.

- **Who**: the teacher's export in the runtime it is timed and compared in (``--runtime``: its int8
  graph by default), in ONNX Runtime, its rows batched shortest first
  (:class:`~kdbert.core.teacher_logits.Labeller`): several times faster on a CPU than the PyTorch
  teacher, which matters once the teacher is base-size. On a GPU, the PyTorch teacher there, its
  time per row measured the same way (:func:`measured_row_seconds`).
- **Where**: one store shared by every search (``--logits-cache``, default
  ``$XDG_CACHE_HOME/kdbert/teacher-logits``), each row keyed by the export's bytes and its text, so
  a second search of the same teacher on the same rows labels nothing.
- **Whether**: labelling the rows not stored yet costs ``rows * row_seconds``, the labeller's time
  measured on a random sample of the rows and scaled by the tokens it will run on
  (:func:`measured_row_seconds`), so that long rows (sentence pairs) count as long. Every candidate of stored logits waits for
  it in its first segment (with ``--unlabelled`` rows, every candidate: the export labels those
  once for all of them, the teacher beside a student or not), so when it takes more than the share of the search in which candidates
  start (``--first-round-share``) they are left out, in one line with the budget that would admit
  them; when they are all the search has, the budget is refused in that line. The candidates
  distilled by logit KD alone read the labels only where they fit (:attr:`Labelling.kd`); else the
  teacher runs beside them, as on a GPU and by default (``--kd-labels beside``).
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from kdbert.compress.augment import is_augmented
from kdbert.compress.recipes import reads_stored_logits
from kdbert.core.teacher_logits import Labeller, label_rows, padded_tokens, shared_store_folder, unstored_rows
from kdbert.errors import KdbertError

SAMPLE_ROWS = 256  # rows the labeller is timed on, drawn at random from the task's
WARM_UP_ROWS = 8  # labelled untimed first (the runtime's or a GPU's start-up)


@dataclass(frozen=True)
class Labelling:
    """What labelling the training rows (and the ``--unlabelled`` rows) costs this search: the store
    (``cache``), the export that labels (``onnx``), the distinct rows, how many of them are stored
    already, the seconds per row measured, and how many of the rows came from ``--unlabelled``."""

    cache: str
    onnx: str | None
    rows: int
    stored: int
    row_seconds: float
    kd: bool = False  # candidates distilled by logit KD alone read the export's labels too (afford_labelling)
    unlabelled: int = 0

    def what(self) -> str:
        """The rows labelled, in words."""
        if not self.unlabelled:
            return f"{self.rows:,} training rows"
        return f"{self.rows:,} {'training and ' if self.rows > self.unlabelled else ''}--unlabelled rows"

    @property
    def seconds(self) -> float:
        return (self.rows - self.stored) * self.row_seconds

    def summary(self) -> dict:
        return {**asdict(self), "seconds": round(self.seconds, 1)}

    def plan_options(self) -> dict:
        """What the runs read (:attr:`kdbert.compress.search.Plan.labelling`)."""
        return {"cache": self.cache, "onnx": self.onnx, "kd": self.kd}


def plan_labelling(cache: str | None, export: Path, teacher, tokenizer, spec, rows: list,
                   candidates: list, settings=None, unlabelled: list = ()) -> Labelling:
    """The labelling of ``rows`` and ``unlabelled`` (:class:`~kdbert.data.glue.Example`: the training
    rows, and the ``--unlabelled`` rows every run labels in its first segment) into ``cache`` (None: the shared
    store) for ``candidates``: by the teacher ``export`` (an ``.onnx`` file), or on a GPU or when the
    export is missing by the PyTorch ``teacher``. Its time per row is measured here
    (:func:`measured_row_seconds`) where it is needed: rows not stored yet that a candidate reads
    (with the export, those ``settings`` distil by logit KD alone too; ``--unlabelled`` rows, which
    every candidate reads, the teacher beside it or not), or augmented candidates, whose rows are
    capped at that rate (else 0)."""
    folder = str(Path(cache).expanduser() if cache else shared_store_folder())
    onnx = str(export) if export.is_file() and not torch.cuda.is_available() else None
    if onnx is None:
        teacher.to("cuda" if torch.cuda.is_available() else "cpu")
    labeller = Labeller(teacher, tokenizer, spec.max_seq_len, onnx=onnx, truncation=spec.truncation,
                        doc_stride=spec.doc_stride)
    readers = any(reads_stored_logits(c, settings, onnx is not None) for c in candidates)
    # the training rows' labels are read by candidates of stored logits alone; the --unlabelled rows' by all
    texts = list(dict.fromkeys(row.texts for row in ([*rows, *unlabelled] if readers or not unlabelled else unlabelled)))
    unstored = unstored_rows(folder, labeller.namespace, texts)
    row_seconds = 0.0
    if (unstored and (readers or unlabelled)) or any(is_augmented(c.name) for c in candidates):
        # the export's sample stays in the store the runs read (counted in ``seconds``: this search labels
        # it); the PyTorch teacher's (float32) would not be read
        row_seconds = measured_row_seconds(labeller, texts, unstored, folder if onnx else None)
    return Labelling(folder, onnx, len(texts), len(texts) - len(unstored), row_seconds, unlabelled=len(unlabelled))


def measured_row_seconds(labeller: Labeller, texts: list, to_label: list, folder: str | None,
                         sample: int = SAMPLE_ROWS, clock=time.perf_counter) -> float:
    """The labeller's seconds per row on ``to_label`` (rows of ``texts`` not stored yet): timed on
    ``sample`` rows drawn at random from them (labelled into the store in ``folder``, where they stay;
    None, or none left to label: a sample of ``texts`` into a store of its own), after the sample's
    first :data:`WARM_UP_ROWS` untimed, per token it ran on, times the tokens ``to_label`` takes in
    its batches (:func:`~kdbert.core.teacher_logits.padded_tokens`)::

        row_seconds = sample_seconds / tokens(timed rows) * tokens(to_label) / len(to_label)

    A random sample of the task's rows has their lengths; its batches pad more than the whole set's,
    which the token count corrects."""
    drawn = random.Random(0).sample(to_label or texts, min(sample, len(to_label or texts)))
    warm_up, timed = drawn[:WARM_UP_ROWS], drawn[WARM_UP_ROWS:] or drawn  # a small sample: all timed again
    keep = folder is not None and bool(to_label)
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        label_rows(labeller, warm_up, folder if keep else first)
        started = clock()
        label_rows(labeller, timed, folder if keep and timed is not drawn else second)
        seconds = clock() - started
    per_token = seconds / max(1, padded_tokens(labeller, timed))
    return max(per_token * padded_tokens(labeller, to_label or texts) / max(1, len(to_label or texts)), 1e-9)


NAMED = 3
"""The most candidates a labelling line names: more read as their count and the first few (a search with
``--unlabelled`` rows has every candidate read them, two dozen names in one error line)."""


def named(candidates: list) -> str:
    """``a, b, c`` for at most :data:`NAMED` candidates, else ``24 candidates (a, b, c, ...)``."""
    names = [c.name for c in candidates]
    if len(names) <= NAMED:
        return ", ".join(names)
    return f"{len(names)} candidates ({', '.join(names[:NAMED])}, ...)"


def afford_labelling(candidates: list, labelling: Labelling, window_seconds: float, first_round_share: float,
                     minutes_before: float, budget_minutes: float,
                     settings=None) -> tuple[list, str | None, Labelling]:
    """``candidates`` less those of stored logits when labelling takes more than ``first_round_share``
    of the search's ``window_seconds``, the line that says so (None when all are kept), and
    ``labelling`` with ``kd`` set where ``settings`` ask for it (``--kd-labels export``), it fits and
    the export labels: then the candidates they distil by logit KD alone read its labels too (else
    the teacher runs beside them).
    Refused when no candidate is left. ``minutes_before``: what the budget spends outside the window
    (the timing so far and the finishing), for the budget that would admit them."""
    fits = labelling.seconds <= first_round_share * window_seconds
    asked = settings is not None and settings.kd_labels == "export"
    labelling = replace(labelling, kd=fits and asked and labelling.onnx is not None)
    # with --unlabelled rows every candidate waits for their labels in its first segment
    readers = [c for c in candidates if labelling.unlabelled or reads_stored_logits(c)]
    if not readers or fits:
        return candidates, None, labelling
    needed = math.ceil(minutes_before + labelling.seconds / first_round_share / 60)
    who = "the teacher's export " + Path(labelling.onnx).name if labelling.onnx else "the teacher"
    line = (f"{named(readers)} learn from the teacher's labels of the {labelling.what()}: "
            f"{who} labels the {labelling.rows - labelling.stored:,} not stored yet in about "
            f"{labelling.seconds / 60:.1f} min here ({1 / labelling.row_seconds:.0f} rows/s), more than the "
            f"{first_round_share * window_seconds / 60:.1f} min in which candidates start; --budget-minutes {needed} "
            f"or more admits them (labels are kept in {labelling.cache} for the next search of this teacher)")
    kept = [c for c in candidates if c not in readers]
    if not kept:
        raise KdbertError(f"--budget-minutes {budget_minutes:g} is too short to label the rows: {line}")
    return kept, f"left out: {line}", labelling
