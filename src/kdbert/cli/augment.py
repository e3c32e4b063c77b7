"""``kdbert augment``: data augmentation of a task's training file, in the task's format.

Reads the task's own training file row by row (a GLUE ``train.tsv``, or the user's CSV / TSV /
JSONL) and writes ``train_aug.tsv`` (``.jsonl`` for JSONL input) with the same columns, so that
it can be passed back as ``--train-file`` (GLUE) or ``--task`` (own data). Resumable: a rerun
continues a killed run. Two methods:

- ``tinybert`` (:func:`augment_task`): each text column separately, with :class:`TinyBertAugmenter`;
- ``bilstm`` (:func:`augment_task_bilstm`): the distilled BiLSTM's masking / POS / n-gram rules
  (:mod:`kdbert.augment.bilstm`), a pair's columns together; optionally labelled by the
  teacher right away (the logits are stored beside the output and reused by distillation).
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import torch

from kdbert.augment.tinybert import (
    BATCH_TOKENS, TinyBertAugmenter, augment_file_rows, load_word_vectors,
)
from kdbert.data.custom import read_rows
from kdbert.data.glue import split_file, resolve_glue_dir
from kdbert.data.textfile import open_text
from kdbert.data.load import TaskOptions, is_data_file
from kdbert.data.tasks import GLUE_TASKS, canonical_task_name
from kdbert.errors import KdbertError
from kdbert.methods.mlm_head import load_mlm_model


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


def default_output(task: TaskOptions, suffix: str) -> str:
    """``train_aug.tsv`` (or ``.jsonl``) beside the user's file, or in the working folder for GLUE."""
    base = Path(task.task).parent if is_data_file(task.task) else Path(".")
    return str(base / f"train_aug{suffix}")


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
    output = output or default_output(task, suffix)
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


def augment_task_bilstm(task: TaskOptions, output: str | None = None, p_mask: float = 0.1, p_pos: float = 0.1,
                        p_ng: float | None = None, n_iter: int = 20, ngram_mode: str = "keep", max_n: int = 5,
                        seed: int = 42, nltk_data: str | None = None, max_rows: int | None = None,
                        teacher: str | None = None, max_seq_len: int | None = None,
                        batch_size: int = 64, device: str | None = None, num_workers: int = 1,
                        teacher_dtype: str = "float32") -> dict:
    """The distilled BiLSTM's augmentation of ``task``'s training rows (defaults: the paper's
    settings; ``p_ng`` defaults to :data:`~kdbert.augment.bilstm.P_NG`, or
    :data:`~kdbert.augment.bilstm.PAIR_P_NG` for sentence pairs); returns counts, output
    path and throughput.

    POS candidates come from all of the task's training rows, also with ``max_rows`` (which
    limits the rows augmented). ``num_workers`` processes tag the texts (the slow part). With ``teacher`` (a model fine-tuned on the task), its logits on
    every output row are computed and stored beside the output
    (:func:`kdbert.data.teacher_logits.label_with_teacher`), with ``max_seq_len`` defaulting to
    the task's, in ``teacher_dtype`` (float32, or bfloat16 under autocast).
    """
    from kdbert.augment.bilstm import P_NG, PAIR_P_NG, BiLSTMAugmenter, augment_rows
    from kdbert.augment.pos_tagging import NltkTagger

    if teacher is not None:
        from kdbert.data.teacher_logits import check_dtype

        check_dtype(teacher_dtype)  # before the slow part
    rows, columns, has_header, suffix = task_rows(task)
    if len(columns) not in (1, 2):
        raise KdbertError(f"--text-columns: BiLSTM augmentation reads one text column or two, got {columns}")
    missing = [c for c in columns if rows and c not in rows[0]]
    if missing:
        raise KdbertError(f"--text-columns: column(s) {missing} not in the training file (it has {sorted(rows[0])})")
    output = output or default_output(task, suffix)
    if p_ng is None:
        p_ng = PAIR_P_NG if len(columns) == 2 else P_NG
    started = time.time()
    texts = [str(row[c]) for row in rows for c in columns if c in row]
    chosen = rows[:max_rows] if max_rows else rows
    with NltkTagger(nltk_data, num_workers) as tagger:
        augmenter = BiLSTMAugmenter.from_texts(texts, tagger, p_mask=p_mask, p_pos=p_pos, p_ng=p_ng, n_iter=n_iter,
                                               ngram_mode=ngram_mode, max_n=max_n, seed=seed)
        tagged = time.time()
        written = augment_rows(chosen, columns, output, augmenter, write_header=has_header)
        finished = time.time()
    result = {"output": output, "input_rows": len(chosen), "output_rows": written, "columns": columns,
              "p_ng": p_ng, "tagging_seconds": round(tagged - started, 1), "seconds": round(finished - started, 1),
              "examples_per_second": round(len(chosen) / max(finished - started, 1e-9), 2)}
    if teacher is not None:
        result.update(label_augmented(task, output, columns, has_header, teacher, max_seq_len, batch_size, device,
                                      teacher_dtype))
    return result


def label_augmented(task: TaskOptions, output: str, columns: list[str], has_header: bool, teacher: str,
                    max_seq_len: int | None, batch_size: int, device: str | None, dtype: str = "float32") -> dict:
    """Store ``teacher``'s logits (computed in ``dtype``) on every row of the augmented file ``output``."""
    from kdbert.data.load import load_task
    from kdbert.data.teacher_logits import label_with_teacher, store_path, teacher_identity
    from kdbert.core.loading import load_sequence_classifier, load_tokenizer

    spec = load_task(task).spec if is_data_file(task.task) else GLUE_TASKS[canonical_task_name(task.task)]
    model = load_sequence_classifier(teacher, spec.num_labels, new_head_ok=False)
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer = load_tokenizer(teacher)
    max_seq_len = max_seq_len or spec.max_seq_len
    examples = [tuple(str(row[c]) for c in columns) for row in read_written_rows(output, has_header)]
    started = time.time()
    label_with_teacher(model, tokenizer, examples, output, max_seq_len, batch_size, spec.num_labels, dtype)
    return {"teacher_logits": str(store_path(output, teacher_identity(model, tokenizer, max_seq_len, dtype))),
            "teacher_dtype": dtype, "teacher_rows": len(examples), "teacher_seconds": round(time.time() - started, 1)}


def read_written_rows(path: str | os.PathLike, has_header: bool) -> list[dict]:
    """Rows of a file written by augmentation (TSV or JSONL), keyed like :func:`task_rows`' rows."""
    if str(path).endswith(".jsonl"):
        return [row for _, row in read_rows(path)]
    with open(path, encoding="utf-8", newline="") as handle:
        lines = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    if has_header:
        return [dict(zip(lines[0], line)) for line in lines[1:] if line]
    return [{f"column{i}": value for i, value in enumerate(line)} for line in lines if line]
