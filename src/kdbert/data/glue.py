"""Read GLUE tasks from a ``glue_data`` directory (the standard download layout) or HF datasets.

Files may be ``.tsv`` or ``.tsv.gz``. Every row is checked: the number of tab-separated
fields must match the header, and the label must belong to the task's label vocabulary;
a bad row raises :class:`KdbertError` naming the file and line.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kdbert.data.tasks import TaskSpec
from kdbert.data.textfile import open_text
from kdbert.errors import KdbertError

GLUE_DIR_ENV = "KDBERT_GLUE_DIR"

csv.field_size_limit(1 << 24)


@dataclass(frozen=True)
class Example:
    """One labelled row: ``texts`` holds one or two strings; ``label`` is a class id, a float
    score (regression) or ``None`` (unlabelled); ``source``: the collection the row comes from, where
    the file says (STS-B's file name column, MNLI's genre), else ``None``: held-out rows are drawn to
    follow dev's mix of sources (:mod:`kdbert.data.held_out`)."""

    texts: tuple[str, ...]
    label: int | float | None
    source: str | None = None


@dataclass
class TaskData:
    """A task's training rows, its evaluation split(s), the training rows held out to pick
    checkpoints on (empty unless ``--held-out-fraction``; :mod:`kdbert.data.held_out`), the rule
    that drew them and the rows left out of training as parts of them, the held-out rows kept apart to decide between runs (``--decide-share``), and
    rows without labels for the teacher to label (``--unlabelled``). ``decide_baseline``: another
    model's predictions on the rows that decide (``kdbert compress``: the teacher's), which an
    evaluation compares each model with on the same rows (``decide_paired_se``), or None."""

    spec: TaskSpec
    train: list[Example]
    dev: dict[str, list[Example]]
    held_out: list[Example] = field(default_factory=list)
    held_out_rule: str = ""
    held_out_parts: list[Example] = field(default_factory=list)
    decide: list[Example] = field(default_factory=list)
    unlabelled: list[Example] = field(default_factory=list)
    decide_baseline: np.ndarray | None = None


def resolve_glue_dir(data_dir: str | os.PathLike | None) -> Path:
    """The GLUE root: ``data_dir``, else ``$KDBERT_GLUE_DIR``, else ``./glue_data``."""
    chosen = data_dir or os.environ.get(GLUE_DIR_ENV) or "glue_data"
    path = Path(chosen)
    if not path.is_dir():
        raise KdbertError(
            f"GLUE data dir '{path}' does not exist; pass --data-dir DIR (the standard glue_data "
            f"layout) or set {GLUE_DIR_ENV}"
        )
    return path


def split_file(task_dir: Path, split: str) -> Path:
    for candidate in (task_dir / f"{split}.tsv", task_dir / f"{split}.tsv.gz"):
        if candidate.is_file():
            return candidate
    raise KdbertError(
        f"missing {task_dir / (split + '.tsv')} (or .tsv.gz); download the task's GLUE files "
        f"into {task_dir} or use a different --data-dir"
    )


def parse_label(spec: TaskSpec, raw: str, where: str) -> int | float:
    """Map a raw label string to its id (or float score for regression); errors name ``where``."""
    raw = raw.strip()
    if spec.labels is None:
        try:
            return float(raw)
        except ValueError:
            raise KdbertError(f"{where}: score '{raw}' is not a number; fix or remove the row") from None
    if raw not in spec.labels:
        raise KdbertError(
            f"{where}: label '{raw}' is not one of {list(spec.labels)} for task {spec.name}; "
            "fix or remove the row"
        )
    return spec.labels.index(raw)


def read_glue_tsv(spec: TaskSpec, path: Path) -> list[Example]:
    """Read one GLUE split file of ``spec`` into examples, checking every row."""
    columns = spec.file_columns
    examples = []
    with open_text(path) as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        positional = isinstance(columns["label"], int)
        header = None
        width = None
        if not positional:
            header = next(reader, None)
            if header is None:
                raise KdbertError(f"{path}: file is empty; expected a header line")
            missing = [name for field, name in columns.items() if name not in header and field != "source"]
            if missing:
                raise KdbertError(
                    f"{path}:1: header lacks column(s) {missing} expected for task {spec.name}; "
                    "is this the right task folder?"
                )
            width = len(header)
            index = {field: header.index(name) for field, name in columns.items() if name in header}
        else:
            index = dict(columns)
        for line_no, row in enumerate(reader, start=2 if header else 1):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            where = f"{path}:{line_no}"
            if width is not None and len(row) != width:
                raise KdbertError(
                    f"{where}: expected {width} tab-separated fields, found {len(row)}; "
                    "fix the row (stray tab or quote?) or remove it"
                )
            if width is None and len(row) <= max(index.values()):
                raise KdbertError(
                    f"{where}: expected at least {max(index.values()) + 1} tab-separated fields, "
                    f"found {len(row)}; fix or remove the row"
                )
            texts = tuple(row[index[name]] for name in spec.text_fields)
            source = row[index["source"]] if "source" in index else None
            examples.append(Example(texts, parse_label(spec, row[index["label"]], where), source))
    return examples


def load_glue_dir(spec: TaskSpec, data_dir: str | os.PathLike | None, splits=None) -> TaskData:
    """Load train and dev split(s) of a GLUE task from the standard directory layout."""
    root = resolve_glue_dir(data_dir)
    task_dir = root / spec.glue_folder
    if not task_dir.is_dir():
        raise KdbertError(
            f"task folder {task_dir} does not exist; put the {spec.glue_folder} GLUE files there "
            "or pass another --data-dir"
        )
    wanted = splits or ("train",) + spec.dev_splits
    loaded = {split: read_glue_tsv(spec, split_file(task_dir, split)) for split in wanted}
    train = loaded.pop("train", [])
    return TaskData(spec, train, loaded)


_HF_SPLITS = {"train": "train", "dev": "validation", "dev_matched": "validation_matched",
              "dev_mismatched": "validation_mismatched"}


def load_glue_hf(spec: TaskSpec, splits=None) -> TaskData:  # pragma: no cover - needs network
    """Load a GLUE task from HF ``datasets`` ("nyu-mll/glue"), mapping labels by name."""
    import datasets

    wanted = splits or ("train",) + spec.dev_splits
    loaded = {}
    for split in wanted:
        rows = datasets.load_dataset("nyu-mll/glue", spec.hf_config, split=_HF_SPLITS[split])
        names = None if spec.labels is None else rows.features["label"].names
        examples = []
        for row in rows:
            texts = tuple(row[name] for name in spec.text_fields)
            label = float(row["label"]) if names is None else hf_label_to_id(spec, names, row["label"])
            examples.append(Example(texts, label))
        loaded[split] = examples
    train = loaded.pop("train", [])
    return TaskData(spec, train, loaded)


def hf_label_to_id(spec: TaskSpec, hf_names: list[str], hf_id: int) -> int:
    """Map an HF ``datasets`` label id to our id through its name ('entailment' -> 0 in MNLI)."""
    name = hf_names[hf_id]
    # HF names binary GLUE labels ('not_equivalent', 'equivalent', ...) by meaning; ours are the
    # TSV strings. Binary tasks whose TSV labels are '0'/'1' keep HF's ids, which match them.
    if spec.labels == ("0", "1"):
        return hf_id
    return spec.labels.index(name)
