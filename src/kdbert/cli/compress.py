"""``kdbert compress``: its flags are :class:`~kdbert.compress.pipeline.CompressConfig`'s fields and
the data options; the work is :func:`kdbert.compress.pipeline.compress`."""

from __future__ import annotations

from pathlib import Path

from kdbert.cli.common import OptionFlags, add_command, add_task_arguments, given_options, require, task_options
from kdbert.compress.pipeline import CompressConfig, compress
from kdbert.options import build_config


def cmd_compress(args) -> int:
    config = build_config(CompressConfig, given_options(args, CompressConfig))
    report = compress(task_options(args), config, args.output_dir, command=args.command_line)
    if report is None:  # this process joined a search another one leads, which ships the winner
        return 0
    print((Path(args.output_dir) / "compress_report.md").read_text())
    print(f"shipped: {report['shipped']['folder']}")
    return 0


def add_commands(sub, table: dict) -> None:
    p = add_command(sub, table, "compress", cmd_compress,
                    help="find, distil and ship the fastest student that keeps the teacher's score",
                    description="Time the exported teacher and candidate students on this machine at the task's "
                                "real lengths, distil those that meet the speed target by asynchronous successive "
                                "halving on an Optuna study (--workers processes here; more processes, on this or "
                                "other machines, join with the same --storage and --study), "
                                "pick on the training rows the teacher never trained on (its held_out.json), half "
                                "of them picking checkpoints and half deciding the winner, ship it as int8 checked "
                                "on those rows, and report. Rerun to continue an interrupted search.")
    p.add_argument("--output-dir", help="where the timings, runs, winner and report go (required)")
    require(p, "output_dir")
    add_task_arguments(p)
    OptionFlags(p).add(CompressConfig, required=("teacher",))
