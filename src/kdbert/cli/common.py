"""What several commands share: the data options and how metrics are printed."""

from __future__ import annotations

import argparse


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data")
    group.add_argument("--task", required=True,
                       help="GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli) or a .csv/.tsv/.jsonl "
                            "training file of your own")
    group.add_argument("--data-dir", help="GLUE root in the standard glue_data layout (default: $KDBERT_GLUE_DIR, "
                                          "else ./glue_data)")
    group.add_argument("--data-source", choices=["dir", "hf"], default="dir",
                       help="read GLUE from --data-dir (dir) or from HF datasets, online (hf)")
    group.add_argument("--train-file", help="replace the GLUE task's training split with this file in the task's "
                                            "format (e.g. train_aug.tsv)")
    group.add_argument("--text-columns", default="text",
                       help="own data: the text column, or two comma-separated columns for pairs")
    group.add_argument("--label-column", default="label", help="own data: the label column")
    group.add_argument("--dev-file", help="own data: dev file (default: hold out --dev-fraction of train)")
    group.add_argument("--dev-fraction", type=float, default=0.1, help="own data: held-out fraction without --dev-file")
    group.add_argument("--regression", action="store_true", help="own data: the label is a real-valued score")


def task_options(args):
    from kdbert.data.load import TaskOptions

    return TaskOptions(task=args.task, data_dir=args.data_dir, source=args.data_source,
                       text_columns=tuple(c.strip() for c in args.text_columns.split(",") if c.strip()),
                       label_column=args.label_column, dev_file=args.dev_file, dev_fraction=args.dev_fraction,
                       regression=args.regression, train_file=args.train_file)


def format_metrics(title: str, metrics: dict | None) -> str:
    if not metrics:
        return f"{title}: no evaluation"
    body = "  ".join(f"{k}={v:.2f}" for k, v in metrics.items())
    return f"{title}\n  {body}"
