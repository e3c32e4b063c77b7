"""The teacher's labels of the rows that candidates of stored logits learn from (the BiLSTM, students
of another tokenizer, :func:`~kdbert.compress.recipes.reads_stored_logits`): who labels them, where
they are kept, and whether the budget affords it.

- **Who**: the teacher's export in the runtime it is timed and compared in (``--runtime``: its int8
  graph by default), in ONNX Runtime, its rows batched shortest first
  (:class:`~kdbert.core.teacher_logits.Labeller`): several times faster on a CPU than the PyTorch
  teacher, which matters once the teacher is base-size. On a GPU, the PyTorch teacher there, its
  time per row measured on a sample (:func:`pytorch_row_seconds`).
- **Where**: one store shared by every search (``--logits-cache``, default
  ``$XDG_CACHE_HOME/kdbert/teacher-logits``), each row keyed by the export's bytes and its text, so
  a second search of the same teacher on the same rows labels nothing.
- **Whether**: labelling the rows not stored yet costs ``rows * row_seconds``, at the deployed
  teacher's time per row measured in the timing step. Every candidate of stored logits waits for
  it in its first segment, so when it takes more than the share of the search in which candidates
  start (``--first-round-share``) they are left out, in one line with the budget that would admit
  them; when they are all the search has, the budget is refused in that line.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kdbert.compress.recipes import reads_stored_logits
from kdbert.core import teacher_logits
from kdbert.core.teacher_logits import Labeller, shared_store_folder, stored_rows
from kdbert.errors import KdbertError

SAMPLE_ROWS = 256  # rows the PyTorch teacher's labelling is timed on
WARM_UP_ROWS = 8  # labelled untimed first (a GPU's start-up)


@dataclass(frozen=True)
class Labelling:
    """What labelling the training rows costs this search: the store (``cache``), the export that
    labels (``onnx``), the rows, how many of them are stored already, the seconds per row measured."""

    cache: str
    onnx: str | None
    rows: int
    stored: int
    row_seconds: float

    @property
    def seconds(self) -> float:
        return (self.rows - self.stored) * self.row_seconds

    def summary(self) -> dict:
        return {**asdict(self), "seconds": round(self.seconds, 1)}

    def plan_options(self) -> dict:
        """What the runs read (:attr:`kdbert.compress.search.Plan.labelling`)."""
        return {"cache": self.cache, "onnx": self.onnx}


def plan_labelling(cache: str | None, export: Path, teacher, tokenizer, spec, rows: list,
                   export_row_seconds: float) -> Labelling:
    """The labelling of ``rows`` (:class:`~kdbert.data.glue.Example`) into ``cache`` (None: the shared
    store): by the teacher ``export`` (an ``.onnx`` file) at ``export_row_seconds`` a row, measured in
    the timing; on a GPU, or when the export is missing, by the PyTorch ``teacher``, timed here."""
    folder = str(Path(cache).expanduser() if cache else shared_store_folder())
    onnx = str(export) if export.is_file() and not torch.cuda.is_available() else None
    labeller = Labeller(teacher, tokenizer, spec.max_seq_len, onnx=onnx, truncation=spec.truncation,
                        doc_stride=spec.doc_stride)
    texts = [row.texts for row in rows]
    row_seconds = export_row_seconds if onnx else pytorch_row_seconds(teacher, tokenizer, rows, spec)
    return Labelling(folder, onnx, len(set(texts)), stored_rows(folder, labeller.namespace, texts), row_seconds)


def pytorch_row_seconds(teacher, tokenizer, rows: list, spec, sample: int = SAMPLE_ROWS) -> float:
    """The PyTorch teacher's seconds per row labelling rows like ``rows``: timed in float32 on the first
    ``sample`` of them (a fresh store), on the device the runs label on (a GPU when there is one),
    after an untimed first batch (a GPU's start-up would otherwise count as labelling time)."""
    teacher.to("cuda" if torch.cuda.is_available() else "cpu")
    timed = [row.texts for row in rows[:sample]]
    with tempfile.TemporaryDirectory() as warm_up, tempfile.TemporaryDirectory() as folder:
        for texts, store in ((timed[:WARM_UP_ROWS], warm_up), (timed, folder)):
            started = time.perf_counter()
            teacher_logits.label_with_teacher(teacher, tokenizer, texts, store, spec.max_seq_len,
                                              truncation=spec.truncation, doc_stride=spec.doc_stride)
    return max((time.perf_counter() - started) / max(1, len(timed)), 1e-9)


def afford_labelling(candidates: list, labelling: Labelling, window_seconds: float, first_round_share: float,
                     minutes_before: float, budget_minutes: float) -> tuple[list, str | None]:
    """``candidates`` less those of stored logits when labelling takes more than ``first_round_share``
    of the search's ``window_seconds``, and the line that says so (None when all are kept). Refused
    when no candidate is left. ``minutes_before``: what the budget spends outside the window (the
    timing so far and the finishing), for the budget that would admit them."""
    readers = [c for c in candidates if reads_stored_logits(c)]
    if not readers or labelling.seconds <= first_round_share * window_seconds:
        return candidates, None
    needed = math.ceil(minutes_before + labelling.seconds / first_round_share / 60)
    who = "the teacher's export " + Path(labelling.onnx).name if labelling.onnx else "the teacher"
    line = (f"{', '.join(c.name for c in readers)} learn from the teacher's labels of the {labelling.rows:,} training "
            f"rows: {who} labels the {labelling.rows - labelling.stored:,} not stored yet in about "
            f"{labelling.seconds / 60:.1f} min here ({1 / labelling.row_seconds:.0f} rows/s), more than the "
            f"{first_round_share * window_seconds / 60:.1f} min in which candidates start; --budget-minutes {needed} "
            f"or more admits them (labels are kept in {labelling.cache} for the next search of this teacher)")
    kept = [c for c in candidates if not reads_stored_logits(c)]
    if not kept:
        raise KdbertError(f"--budget-minutes {budget_minutes:g} is too short to label the rows: {line}")
    return kept, f"left out: {line}"
