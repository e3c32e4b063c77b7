"""One entry point for every command's ``--task``: a GLUE task name or a user data file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kdbert.data.custom import SUPPORTED_SUFFIXES, load_custom_task
from kdbert.data.glue import TaskData, load_glue_dir, load_glue_hf, read_glue_tsv
from kdbert.data.tasks import GLUE_TASKS, canonical_task_name
from kdbert.errors import KdbertError


@dataclass
class TaskOptions:
    """How to find a task's data (the CLI's data options, see :func:`kdbert.cli.commands.add_task_arguments`).

    ``task`` is a GLUE name (read from ``data_dir`` or, with ``source="hf"``, from HF datasets)
    or the path of a CSV/TSV/JSONL training file described by the other fields.
    """

    task: str
    data_dir: str | None = None
    source: str = "dir"
    text_columns: tuple[str, ...] = ("text",)
    label_column: str = "label"
    dev_file: str | None = None
    dev_fraction: float = 0.1
    regression: bool = False
    train_file: str | None = None


def is_data_file(task: str) -> bool:
    name = task.lower().removesuffix(".gz")
    return name.endswith(SUPPORTED_SUFFIXES)


def load_task(options: TaskOptions, seed: int = 42) -> TaskData:
    """Load train and dev examples for ``options.task``.

    ``train_file`` replaces a GLUE task's training split (e.g. TinyBERT's ``train_aug.tsv``),
    read in the task's own format.
    """
    if is_data_file(options.task):
        return load_custom_task(
            options.task, list(options.text_columns), options.label_column, options.dev_file,
            options.dev_fraction, options.regression, seed=seed,
        )
    name = canonical_task_name(options.task)
    if name is None:
        raise KdbertError(
            f"unknown task '{options.task}'; use one of {sorted(GLUE_TASKS)} or a .csv/.tsv/.jsonl "
            "training file with --text-columns and --label-column"
        )
    spec = GLUE_TASKS[name]
    if options.source == "hf":
        data = load_glue_hf(spec)
    elif options.source == "dir":
        splits = spec.dev_splits if options.train_file else None
        data = load_glue_dir(spec, options.data_dir, splits)
    else:
        raise KdbertError(f"unknown --data-source '{options.source}'; use 'dir' or 'hf'")
    if options.train_file:
        path = Path(options.train_file)
        if not path.is_file():
            raise KdbertError(f"--train-file {path} does not exist")
        data.train = read_glue_tsv(spec, path)
    return data
