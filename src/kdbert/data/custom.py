"""Users' own data: CSV, TSV or JSONL files with named text column(s) and a label column.

Classification reads its label set from the training file (sorted; numeric labels sorted
numerically) and is scored with accuracy and macro-F1; regression (``regression=True``) with
Pearson and Spearman. The dev set is a separate file or a seeded held-out fraction of train.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

from kdbert.data.glue import Example, TaskData, parse_label
from kdbert.data.tasks import TaskSpec
from kdbert.data.textfile import open_text
from kdbert.errors import KdbertError

SUPPORTED_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json")


def _format_of(path: Path) -> str:
    suffix = path.suffixes[-2] if path.suffix == ".gz" and len(path.suffixes) > 1 else path.suffix
    if suffix not in SUPPORTED_SUFFIXES:
        raise KdbertError(
            f"{path}: unsupported file type '{suffix}'; use .csv, .tsv or .jsonl (optionally .gz)"
        )
    return suffix


def jsonl_rows(lines, where: str) -> list[tuple[int, dict]]:
    """``(line_number, row)`` of each non-blank line of ``lines``, one JSON object a line; ``where``
    (a path, ``stdin``) names the source in errors."""
    rows = []
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise KdbertError(f"{where}:{line_no}: not valid JSON ({exc.msg}); one JSON object per line") from None
        if not isinstance(row, dict):
            raise KdbertError(f"{where}:{line_no}: expected a JSON object per line")
        rows.append((line_no, row))
    return rows


def read_rows(path: str | Path) -> list[tuple[int, dict]]:
    """Read ``(line_number, row_dict)`` pairs from a CSV/TSV (with header) or JSONL file."""
    path = Path(path)
    if not path.is_file():
        raise KdbertError(f"data file {path} does not exist; check the path")
    kind = _format_of(path)
    rows = []
    with open_text(path) as handle:
        if kind in (".jsonl", ".json"):
            rows = jsonl_rows(handle, str(path))
        else:
            reader = csv.DictReader(handle, delimiter="\t" if kind == ".tsv" else ",")
            for offset, row in enumerate(reader):
                line_no = offset + 2
                if None in row or None in row.values():
                    raise KdbertError(
                        f"{path}:{line_no}: expected {len(reader.fieldnames)} fields as in the header, "
                        "found a different number; fix the row's quoting or separators"
                    )
                rows.append((line_no, row))
    if not rows:
        raise KdbertError(f"{path}: no data rows found")
    return rows


def check_columns(path, line_no, row, columns):
    """Refuse a row of ``path`` that lacks any of ``columns``, naming the line and the columns it has."""
    missing = [c for c in columns if c not in row]
    if missing:
        raise KdbertError(
            f"{path}:{line_no}: column(s) {missing} not found (have {sorted(row)}); "
            "set --text-columns and --label-column to the file's column names"
        )


def _sorted_labels(values) -> tuple[str, ...]:
    values = set(values)
    try:
        return tuple(sorted(values, key=float))
    except ValueError:
        return tuple(sorted(values))


def load_custom_task(
    train_file: str | Path,
    text_columns: list[str],
    label_column: str = "label",
    dev_file: str | Path | None = None,
    dev_fraction: float = 0.1,
    regression: bool = False,
    max_seq_len: int | None = None,
    seed: int = 42,
    labels: tuple[str, ...] | None = None,
) -> TaskData:
    """Load a user data set; see the module docstring. ``labels`` fixes the label set (else read
    from the training file)."""
    if not 1 <= len(text_columns) <= 2:
        raise KdbertError("--text-columns takes one column name or two comma-separated names")
    train_file = Path(train_file)
    train_rows = read_rows(train_file)
    columns = list(text_columns) + [label_column]
    for line_no, row in train_rows:
        check_columns(train_file, line_no, row, columns)
    if regression:
        label_set = None
    else:
        label_set = labels or _sorted_labels(str(row[label_column]).strip() for _, row in train_rows)
    spec = TaskSpec(
        name=train_file.name.split(".")[0],
        text_fields=tuple(text_columns),
        labels=label_set,
        metrics=("pearson", "spearman") if regression else ("accuracy", "macro_f1"),
        max_seq_len=max_seq_len or (128 if len(text_columns) == 2 else 64),
    )

    def to_examples(path, rows):
        out = []
        for line_no, row in rows:
            check_columns(path, line_no, row, columns)
            texts = tuple(str(row[c]) for c in text_columns)
            out.append(Example(texts, parse_label(spec, str(row[label_column]), f"{path}:{line_no}")))
        return out

    train = to_examples(train_file, train_rows)
    if dev_file is not None:
        dev = to_examples(Path(dev_file), read_rows(dev_file))
    else:
        if not 0.0 < dev_fraction < 1.0:
            raise KdbertError("--dev-fraction must be between 0 and 1 when no --dev-file is given")
        order = list(range(len(train)))
        random.Random(seed).shuffle(order)
        n_dev = max(1, int(round(len(train) * dev_fraction)))
        dev_ids = set(order[:n_dev])
        dev = [ex for i, ex in enumerate(train) if i in dev_ids]
        train = [ex for i, ex in enumerate(train) if i not in dev_ids]
    return TaskData(spec, train, {"dev": dev})
