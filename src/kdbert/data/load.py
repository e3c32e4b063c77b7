"""One entry point for every command's ``--task``: a GLUE task name or a user data file."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from kdbert.options import CheckedOptions, in_range, option
from kdbert.data.custom import SUPPORTED_SUFFIXES, check_columns, load_custom_task, read_rows
from kdbert.data.glue import Example, TaskData, load_glue_dir, load_glue_hf, read_glue_tsv
from kdbert.data.held_out import (RECORD_FILE, held_out_indices, hold_out_recorded, move_held_out,
                                  split_decide, split_recorded)
from kdbert.data.imdb import load_imdb, load_imdb_hf, load_imdb_unlabelled
from kdbert.data.squad import load_squad
from kdbert.data.tasks import DOC_STRIDE, GLUE_TASKS, IMDB_TASK, SQUAD_TASKS, TRUNCATIONS, canonical_task_name
from kdbert.errors import KdbertError


@dataclass
class TaskOptions(CheckedOptions):
    """How to find a task's data (every command's data options: ``--task``, ``--data-dir``, ...).

    ``task`` is a GLUE name (read from ``data_dir`` or, with ``data_source="hf"``, from HF datasets)
    or the path of a CSV/TSV/JSONL training file described by the other fields. ``text_columns``
    may be given as one comma-separated string ("question,sentence").
    """

    task: str | None = option(None, "GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli), imdb, or a "
                                    ".csv/.tsv/.jsonl training file of your own", group="data")
    data_dir: str | None = option(None, "GLUE root in the standard glue_data layout (default: $KDBERT_GLUE_DIR, "
                                        "else ./glue_data); for imdb the aclImdb folder, its parent or a folder "
                                        "of its .tar.gz files (default: $KDBERT_IMDB_DIR)", group="data")
    data_source: str = option("dir", "read GLUE or IMDb from --data-dir (dir) or from HF datasets, online (hf)",
                              group="data", choices=("dir", "hf"))
    text_columns: tuple[str, ...] = option(("text",), "own data: the text column, or two comma-separated columns "
                                                      "for pairs", group="data")
    label_column: str = option("label", "own data: the label column", group="data")
    dev_file: str | None = option(None, "own data: dev file (default: hold out --dev-fraction of train); squad: "
                                        "the SQuAD-format file to score on",
                                  group="data")
    dev_fraction: float = option(0.1, "own data: held-out fraction without --dev-file", type=float, group="data")
    regression: bool = option(False, "own data: the label is a real-valued score", type=bool, group="data")
    train_file: str | None = option(None, "replace the GLUE task's training split with this file in the task's "
                                          "format (e.g. train_aug.tsv)", group="data")
    held_out_fraction: float = option(0.0, "hold out this share of the training rows (the same rows for every run) "
                                           "to pick the best checkpoint on; dev then only scores it (0: dev picks "
                                           "and scores, as the papers do)", type=float, group="data",
                                      check=in_range(0, 0.5, what="a share of the training rows in [0, 0.5]"))
    held_out_rows: str | None = option(None, "hold out the training rows a `kdbert finetune` folder lists in its "
                                             "held_out.json (the folder or the file): the rows that teacher never "
                                             "trained on; replaces --held-out-fraction", group="data")
    decide_share: float = option(0.0, "keep this share of the held-out rows apart to decide between runs; they never "
                                      "pick a checkpoint (kdbert finetune with --held-out-fraction and kdbert "
                                      "compress: 0.5 unless given; with --held-out-rows, the rows that the folder's "
                                      "record says decide)", type=float,
                                 group="data", check=in_range(0, 0.9, what="a share of the held-out rows in [0, 0.9]"))
    truncation: str = option("head", "what a text longer than the token limit keeps: its first tokens (head), its "
                                     "last (tail), a quarter from the head and the rest from the tail (head+tail, "
                                     "best on IMDb in Sun et al. 2019), or all of it in windows sharing --doc-stride "
                                     "tokens, each a training row, scored by the mean of a text's window logits "
                                     "(windows); single-text tasks", group="data",
                             choices=TRUNCATIONS)
    unlabelled: str | None = option(None, "distillation: more training rows without labels, labelled by the "
                                          "teacher (its logits, argmax as the hard label): a .csv/.tsv/.jsonl file "
                                          "with the task's text column(s), or imdb-unsup (IMDb's 50,000 unlabelled "
                                          "reviews, from --data-dir)", group="data")
    max_unlabelled: int | None = option(None, "use only the first N rows of --unlabelled", type=int, group="data",
                                        check=in_range(1, 10**9, int, what="a positive integer"))
    unlabelled_from_epoch: int = option(0, "distillation: the epoch from which the --unlabelled rows join the "
                                           "training rows (0: from the first); an epoch before it reads the "
                                           "labelled rows alone (in a search, its first rungs where an epoch of "
                                           "them is longer than those rungs)",
                                        type=int, group="data",
                                        check=in_range(0, 10**6, int, what="a non-negative integer"))
    train_articles: int | None = option(None, "squad without a training file: train on the first N articles of "
                                              "the dev file and score the rest (not comparable with published "
                                              "figures)", type=int, group="data",
                                        check=in_range(1, 10**6, int, what="a positive integer"))
    doc_stride: int = option(DOC_STRIDE, "squad and --truncation windows: tokens shared by consecutive windows of a "
                                         "text longer than the token limit", type=int, group="data",
                             check=in_range(1, 10**6, int, what="a positive integer"))
    max_held_out_examples: int | None = option(None, "score only the first N held-out rows that pick and N that "
                                                     "decide (a seeded order)", type=int, group="data",
                                               check=in_range(1, 10**9, int, what="a positive integer"))
    max_dev_examples: int | None = option(None, "score only the first N rows of each evaluation split (IMDb's "
                                                "come in a fixed shuffled order, so they are a sample of both "
                                                "classes)", type=int, group="data",
                                          check=in_range(1, 10**9, int, what="a positive integer"))

    def __post_init__(self) -> None:
        if isinstance(self.text_columns, str):
            self.text_columns = tuple(c.strip() for c in self.text_columns.split(",") if c.strip())


def is_data_file(task: str) -> bool:
    name = task.lower().removesuffix(".gz")
    return name.endswith(SUPPORTED_SUFFIXES)


# options that change the rows a run trains or is scored on, once set (a resumed run must share them)
ROW_OPTIONS = ("truncation", "unlabelled", "max_unlabelled", "unlabelled_from_epoch", "max_dev_examples",
               "train_articles", "doc_stride", "held_out_rows", "decide_share", "max_held_out_examples")


def task_identity(options: TaskOptions) -> dict:
    """The :data:`ROW_OPTIONS` a run was given, for its identity (``run_config.json``); defaults
    left out, so earlier runs' identities are unchanged."""
    defaults = TaskOptions()
    return {name: getattr(options, name) for name in ROW_OPTIONS if getattr(options, name) != getattr(defaults, name)}


def hold_out(data: TaskData, fraction: float) -> TaskData:
    """Move ``fraction`` of the training rows into ``data.held_out``, drawn by
    :func:`kdbert.data.held_out.held_out_indices` (the same rows for every run, seed and method), and
    the rows that are parts of them out of training."""
    indices, data.held_out_rule, parts = held_out_indices(data, fraction)
    return move_held_out(data, indices, parts)


def held_out_record_of(path: str) -> tuple[dict, str]:
    """The record ``--held-out-rows`` names (a model folder or its ``held_out.json``) and where it is."""
    file = Path(path).expanduser()
    file = file / RECORD_FILE if file.is_dir() else file
    if not file.is_file():
        raise KdbertError(f"--held-out-rows {path}: no {RECORD_FILE} there; pass the folder `kdbert finetune "
                          "--held-out-fraction` wrote")
    return json.loads(file.read_text()), str(file)


def load_task(options: TaskOptions, seed: int = 42) -> TaskData:
    """Load train and dev examples for ``options.task``, with training rows held out
    (:mod:`kdbert.data.held_out`: those ``held_out_rows`` lists, else ``held_out_fraction`` of them
    drawn by :func:`hold_out`; ``decide_share`` of them kept apart to decide), the task's
    ``truncation`` and at most ``max_dev_examples`` rows per evaluation split.

    ``train_file`` replaces a GLUE task's training split (e.g. TinyBERT's ``train_aug.tsv``),
    read in the task's own format.
    """
    if (options.held_out_fraction or options.held_out_rows) and options.train_file:
        raise KdbertError("--held-out-fraction with --train-file would train on augmented copies of held-out rows; "
                          "hold out rows before augmenting, or leave one of them out")
    data = _load_task(options, seed)
    if options.truncation != "head":
        if data.spec.is_pair:
            raise KdbertError(f"--truncation {options.truncation} applies to single-text tasks and {data.spec.name} "
                              "has pairs; leave --truncation at head")
        data.spec = replace(data.spec, truncation=options.truncation)
    if data.spec.question_answering or options.truncation == "windows":
        data.spec = replace(data.spec, doc_stride=options.doc_stride)
    if options.max_dev_examples:
        data.dev = {name: rows[: options.max_dev_examples] for name, rows in data.dev.items()}
    if options.unlabelled:
        data.unlabelled = load_unlabelled(options, data.spec)[: options.max_unlabelled]
    decide = None  # the rows that decide, where a record lists them
    if options.held_out_rows:
        recorded, source = held_out_record_of(options.held_out_rows)
        data = hold_out_recorded(data, recorded, f"--held-out-rows {source}")
        data.held_out_rule = recorded["rule"]
        decide = recorded.get("decide")
    elif options.held_out_fraction:
        data = hold_out(data, options.held_out_fraction)
    if data.held_out and decide:
        data = split_recorded(data, decide)
        if not options.decide_share:  # every held-out row picks: those that decide last, as split_decide's
            data.held_out, data.decide = data.held_out + data.decide, []
    elif data.held_out:
        data = split_decide(data, options.decide_share)
    if options.max_held_out_examples:
        data.held_out, data.decide = (rows[: options.max_held_out_examples] for rows in (data.held_out, data.decide))
    return data


def _load_task(options: TaskOptions, seed: int) -> TaskData:
    if not options.task:
        raise KdbertError("--task is required: a GLUE task name (e.g. rte) or a .csv/.tsv/.jsonl training file")
    if is_data_file(options.task):
        return load_custom_task(
            options.task, list(options.text_columns), options.label_column, options.dev_file,
            options.dev_fraction, options.regression, seed=seed,
        )
    if options.task.strip().lower() == IMDB_TASK.name:
        return _load_imdb(options)
    if options.task.strip().lower() in SQUAD_TASKS:
        return load_squad(SQUAD_TASKS[options.task.strip().lower()], options.data_dir, options.train_file,
                          options.dev_file, options.train_articles)
    name = canonical_task_name(options.task)
    if name is None:
        raise KdbertError(
            f"unknown task '{options.task}'; use one of {sorted(GLUE_TASKS)}, imdb, or a .csv/.tsv/.jsonl "
            "training file with --text-columns and --label-column"
        )
    spec = GLUE_TASKS[name]
    if options.data_source == "hf":
        data = load_glue_hf(spec)
    elif options.data_source == "dir":
        splits = spec.dev_splits if options.train_file else None
        data = load_glue_dir(spec, options.data_dir, splits)
    else:
        raise KdbertError(f"unknown --data-source '{options.data_source}'; use 'dir' or 'hf'")
    return _replace_train_file(data, options)


IMDB_UNLABELLED = "imdb-unsup"


def text_columns(options: TaskOptions, spec) -> list[str]:
    """The task's text columns: ``--text-columns`` for the user's own file, else the task's fields."""
    return list(options.text_columns) if is_data_file(options.task) else list(spec.text_fields)


def load_unlabelled(options: TaskOptions, spec) -> list[Example]:
    """The rows of ``--unlabelled``: IMDb's unlabelled reviews, or the text column(s) of a file."""
    if options.unlabelled == IMDB_UNLABELLED:
        if spec.name != IMDB_TASK.name:
            raise KdbertError(f"--unlabelled {IMDB_UNLABELLED} is IMDb's transfer set and the task is {spec.name}; "
                              "pass a file of the task's texts")
        return load_imdb_unlabelled(options.data_dir)
    if not is_data_file(options.unlabelled):
        raise KdbertError(f"--unlabelled {options.unlabelled}: expected a .csv/.tsv/.jsonl file of texts or "
                          f"{IMDB_UNLABELLED}")
    columns = text_columns(options, spec)
    if len(columns) != len(spec.text_fields):
        raise KdbertError(f"--unlabelled rows need {len(spec.text_fields)} text column(s) for {spec.name}; "
                          "set --text-columns")
    examples = []
    for line_no, row in read_rows(options.unlabelled):
        check_columns(options.unlabelled, line_no, row, columns)
        examples.append(Example(tuple(str(row[c]) for c in columns), None))
    return examples


def _load_imdb(options: TaskOptions) -> TaskData:
    if options.data_source == "hf":
        data = load_imdb_hf(("test",) if options.train_file else ("train", "test"))
    else:
        data = load_imdb(options.data_dir, ("test",) if options.train_file else ("train", "test"))
    return _replace_train_file(data, options)


def _replace_train_file(data: TaskData, options: TaskOptions) -> TaskData:
    if options.train_file:
        path = Path(options.train_file)
        if not path.is_file():
            raise KdbertError(f"--train-file {path} does not exist")
        data.train = read_glue_tsv(data.spec, path)
    return data
