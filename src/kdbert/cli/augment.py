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

from kdbert.augment.bilstm import P_NG, PAIR_P_NG
from kdbert.augment.tinybert import (
    BATCH_TOKENS, TinyBertAugmenter, augment_file_rows, load_word_vectors,
)
from kdbert.cli.common import add_command, add_task_arguments, task_options
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
    (:func:`kdbert.core.teacher_logits.label_with_teacher`), with ``max_seq_len`` defaulting to
    the task's, in ``teacher_dtype`` (float32, or bfloat16 under autocast).
    """
    from kdbert.augment.bilstm import P_NG, PAIR_P_NG, BiLSTMAugmenter, augment_rows
    from kdbert.augment.pos_tagging import NltkTagger

    if teacher is not None:
        from kdbert.core.teacher_logits import check_dtype

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
    from kdbert.core.teacher_logits import label_with_teacher, store_folder
    from kdbert.core.loading import load_sequence_classifier, load_tokenizer

    spec = load_task(task).spec if is_data_file(task.task) else GLUE_TASKS[canonical_task_name(task.task)]
    model = load_sequence_classifier(teacher, spec.num_labels, new_head_ok=False)
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer = load_tokenizer(teacher)
    max_seq_len = max_seq_len or spec.max_seq_len
    examples = [tuple(str(row[c]) for c in columns) for row in read_written_rows(output, has_header)]
    started = time.time()
    label_with_teacher(model, tokenizer, examples, store_folder(output), max_seq_len, batch_size, spec.num_labels,
                       dtype)
    return {"teacher_logits": str(store_folder(output)),
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


# ----------------------------------------------------------------------------- the command
BILSTM_OPTIONS = ("p_mask", "p_pos", "p_ng", "n_iter", "ngram_mode", "max_n", "nltk_data", "teacher")
TINYBERT_OPTIONS = ("mlm", "word_vectors")
TINYBERT_SETTINGS = ("p", "n_aug", "top_k", "max_words", "batch_tokens", "dtype")  # defaults: augment_task's


def cmd_augment(args) -> int:
    own, foreign = ((BILSTM_OPTIONS, TINYBERT_OPTIONS) if args.method == "bilstm"
                    else (TINYBERT_OPTIONS, BILSTM_OPTIONS))
    if args.method == "bilstm":  # --dtype: the teacher's labelling precision there
        foreign += tuple(name for name in TINYBERT_SETTINGS if name != "dtype")
    given = [name for name in foreign if getattr(args, name) is not None]
    if given:
        raise KdbertError(f"--{given[0].replace('_', '-')} is not an option of --method {args.method}; remove it")
    if args.method == "bilstm":
        options = {name: getattr(args, name) for name in own if getattr(args, name) is not None}
        result = augment_task_bilstm(task_options(args), args.output, seed=args.seed, max_rows=args.max_rows,
                                     batch_size=args.batch_size, device=args.device, num_workers=args.num_workers,
                                     teacher_dtype=args.dtype or "float32", **options)
        print(f"augmented {result['input_rows']} rows ({', '.join(map(str, result['columns']))}) -> "
              f"{result['output_rows']} rows in {result['output']} ({result['seconds']:.0f}s, "
              f"{result['examples_per_second']:.1f} examples/s)"
              + (f"; teacher logits in {result['teacher_logits']}" if "teacher_logits" in result else ""))
        return 0
    missing = [name for name in own if getattr(args, name) is None]
    if missing:
        raise KdbertError(f"--method tinybert needs --{missing[0].replace('_', '-')}")
    settings = {name: getattr(args, name) for name in TINYBERT_SETTINGS if getattr(args, name) is not None}
    result = augment_task(task_options(args), args.mlm, args.word_vectors, args.output, seed=args.seed,
                          batch_size=args.batch_size, num_workers=args.num_workers, max_rows=args.max_rows,
                          device=args.device, **settings)
    print(f"augmented {result['input_rows']} rows ({', '.join(map(str, result['columns']))}) -> "
          f"{result['output_rows']} rows in {result['output']} ({result['seconds']:.0f}s, "
          f"{result['sentences_per_second']:.1f} sentences/s)")
    return 0


def add_commands(sub, table: dict) -> None:
    p = add_command(sub, table, "augment", cmd_augment,
                    help="data augmentation of a task's training file (TinyBERT or BiLSTM rules)",
                    description="Write train_aug.tsv in the task's format. tinybert: MLM candidates for "
                                "single-piece words, word-vector neighbours for multi-piece words (TinyBERT, "
                                "Alg. 1). bilstm: masking, POS-guided replacement and n-gram sampling "
                                "(Tang et al. 2019).")
    add_task_arguments(p)
    p.add_argument("--method", choices=["tinybert", "bilstm"], default="tinybert", help="augmentation rules")
    p.add_argument("--mlm", help="tinybert: BertForMaskedLM folder (e.g. from `kdbert mlm-head`) or hub id")
    p.add_argument("--word-vectors", help="tinybert: GloVe-format text file (.txt or .gz)")
    p.add_argument("--p-mask", type=float, help="bilstm: probability of masking a word (default 0.1)")
    p.add_argument("--p-pos", type=float, help="bilstm: probability of a same-POS replacement (default 0.1)")
    p.add_argument("--p-ng", type=float, help=f"bilstm: probability of n-gram sampling (default {P_NG}, the paper's; "
                                              f"sentence pairs: {PAIR_P_NG}; the authors' pair augmenter uses 0)")
    p.add_argument("--n-iter", type=int, help="bilstm: versions drawn per example (default 20)")
    p.add_argument("--ngram-mode", choices=["keep", "mask"],
                   help="bilstm: keep only the sampled n-gram (default, the paper) or mask its words")
    p.add_argument("--max-n", type=int, help="bilstm: longest n-gram (default 5)")
    p.add_argument("--nltk-data", help="bilstm: folder with NLTK's taggers/averaged_perceptron_tagger_eng "
                                       "(default: NLTK's search path, e.g. $NLTK_DATA)")
    p.add_argument("--teacher", help="bilstm: fine-tuned teacher whose logits on the output are stored beside it")
    p.add_argument("--output", help="output file (default: train_aug.tsv, or .jsonl for JSONL input)")
    p.add_argument("--p", type=float, help="tinybert: probability of replacing each candidate word (p_t, default 0.4)")
    p.add_argument("--n-aug", type=int, help="tinybert: augmented versions tried per sentence (N_a, default 20)")
    p.add_argument("--top-k", type=int, help="tinybert: candidates per word (K, default 15)")
    p.add_argument("--max-words", type=int, help="tinybert: word vectors loaded (first N of the file, default 100000)")
    p.add_argument("--max-rows", type=int, help="augment only the first N training rows")
    p.add_argument("--batch-size", type=int, default=64,
                   help="most MLM queries (bilstm: teacher rows) per forward pass")
    p.add_argument("--batch-tokens", type=int,
                   help="tinybert: most padded tokens per forward pass (default 2048; long inputs get smaller "
                        "batches; faster on CPU)")
    p.add_argument("--num-workers", type=int, default=1, help="worker processes (bilstm: for POS tagging)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"],
                   help="tinybert: MLM precision (default float32): bfloat16 is ~2-3x faster on CPUs with AMX "
                        "and on GPUs; some candidates differ, also between batch sizes / worker counts. bilstm: "
                        "the --teacher's labelling precision (bfloat16 under autocast; logits stored in float32, "
                        "in a store of their own: distil with --teacher-dtype bfloat16 to use them)")
    p.add_argument("--device", help="where the MLM runs (default: cuda when available, else cpu)")
    p.add_argument("--seed", type=int, default=42, help="random seed (in float32 the output is identical for any "
                                                         "batch size or worker count)")
