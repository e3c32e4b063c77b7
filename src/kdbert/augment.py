"""``kdbert augment``: TinyBERT data augmentation of a task's training file, in the task's format.

Reads the task's own training file row by row (a GLUE ``train.tsv``, or the user's CSV / TSV /
JSONL), augments each text column separately with :class:`TinyBertAugmenter`, and writes
``train_aug.tsv`` (``.jsonl`` for JSONL input) with the same columns, so that it can be passed
back as ``--train-file`` (GLUE) or ``--task`` (own data). Resumable: a rerun continues a killed run.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import torch

from kdbert.data.augment_tinybert import (
    BATCH_TOKENS, TinyBertAugmenter, augment_file_rows, load_word_vectors,
)
from kdbert.data.custom import read_rows
from kdbert.data.glue import split_file, resolve_glue_dir
from kdbert.data.textfile import open_text
from kdbert.data.load import TaskOptions, is_data_file
from kdbert.data.tasks import GLUE_TASKS, canonical_task_name
from kdbert.errors import KdbertError
from kdbert.mlm_head import load_mlm_model


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def task_rows(task: TaskOptions) -> tuple[list[dict], list[str], bool, str]:
    """(rows as dicts, text columns to augment, whether the file has a header, output suffix)."""
    if is_data_file(task.task):
        rows = [row for _, row in read_rows(task.task)]
        suffix = ".jsonl" if ".jsonl" in Path(task.task).suffixes or ".json" in Path(task.task).suffixes else ".tsv"
        return rows, list(task.text_columns), True, suffix
    name = canonical_task_name(task.task)
    if name is None:
        raise KdbertError(f"unknown task '{task.task}'; use a GLUE task name or a .csv/.tsv/.jsonl file")
    spec = GLUE_TASKS[name]
    path = split_file(resolve_glue_dir(task.data_dir) / spec.glue_folder, "train")
    with open_text(path) as handle:
        lines = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    columns = [spec.file_columns[field] for field in spec.text_fields]
    if isinstance(columns[0], int):  # CoLA: no header; columns are positions
        width = max(len(line) for line in lines)
        header = [f"column{i}" for i in range(width)]
        rows = [dict(zip(header, line)) for line in lines if line]
        return rows, [header[c] for c in columns], False, ".tsv"
    header, body = lines[0], lines[1:]
    return [dict(zip(header, line)) for line in body if line], columns, True, ".tsv"


def augment_task(task: TaskOptions, mlm_model: str, word_vectors: str, output: str | None = None,
                 p: float = 0.4, n_aug: int = 20, top_k: int = 15, seed: int = 42, batch_size: int = 64,
                 batch_tokens: int = BATCH_TOKENS, num_workers: int = 1, max_rows: int | None = None,
                 max_words: int = 100000, dtype: str = "float32", device: str | None = None) -> dict:
    """Augment ``task``'s training rows; returns counts, output path and throughput.

    ``dtype`` ``"bfloat16"`` runs the MLM in bfloat16 (about 2-3x faster on CPUs with AMX, and on
    GPUs; some candidates differ from float32, and, since rounding depends on the batch, between
    batch sizes and worker counts; a rerun with the same settings is identical). ``device``
    defaults to ``cuda`` when available. ``num_workers > 1`` spawns processes: a script that
    calls this must do so under ``if __name__ == "__main__":``.
    """
    if dtype not in DTYPES:
        raise KdbertError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows, columns, has_header, suffix = task_rows(task)
    if max_rows:
        rows = rows[:max_rows]
    if output is None:
        base = Path(task.task).parent if is_data_file(task.task) else Path(".")
        output = str(base / f"train_aug{suffix}")
    model, tokenizer = load_mlm_model(mlm_model)
    model = model.to(device=device, dtype=DTYPES[dtype])
    vectors = load_word_vectors(word_vectors, max_words=max_words)
    started = time.time()
    with TinyBertAugmenter(model, tokenizer, vectors, p=p, n_aug=n_aug, top_k=top_k, seed=seed,
                           batch_size=batch_size, batch_tokens=batch_tokens, num_workers=num_workers) as augmenter:
        written = augment_file_rows(rows, columns, output, augmenter, write_header=has_header)
    seconds = time.time() - started
    return {"output": output, "input_rows": len(rows), "output_rows": written, "columns": columns,
            "dtype": dtype, "device": device,
            "seconds": round(seconds, 1), "sentences_per_second": round(len(rows) * len(columns) / max(seconds, 1e-9), 2)}
