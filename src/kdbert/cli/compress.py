"""``kdbert compress``: its flags are :class:`~kdbert.compress.pipeline.CompressConfig`'s fields and
the data options; the work is :func:`kdbert.compress.pipeline.compress`. ``kdbert mine-pairs``: sentence
pairs mined from plain text for a pair task's ``--unlabelled`` rows (:mod:`kdbert.compress.mined_pairs`)."""

from __future__ import annotations

from pathlib import Path
from statistics import median

from kdbert.cli.common import OptionFlags, add_command, add_task_arguments, given_options, require, task_options
from kdbert.compress.mined_pairs import LOW, ROWS, mine_pairs, write_rows
from kdbert.compress.pipeline import CompressConfig, compress
from kdbert.data.load import load_task, text_columns
from kdbert.errors import KdbertError
from kdbert.options import build_config


def cmd_compress(args) -> int:
    config = build_config(CompressConfig, given_options(args, CompressConfig))
    report = compress(task_options(args), config, args.output_dir, command=args.command_line)
    if report is None:  # this process joined a search another one leads, which ships the winner
        return 0
    print((Path(args.output_dir) / "compress_report.md").read_text())
    print(f"shipped: {report['shipped']['folder']}")
    return 0


def cmd_mine_pairs(args) -> int:
    task = task_options(args)
    data = load_task(task)
    fields = text_columns(task, data.spec)
    if len(fields) != 2:
        raise KdbertError(f"--task {task.task}: {len(fields)} text field(s); mined pairs are rows of a pair task "
                          "(for single texts, pass sentences to `kdbert compress --unlabelled` or --transfer-text)")
    mined = mine_pairs(args.corpus, low=args.low, rows=args.rows, seed=args.seed)
    write_rows(Path(args.output), fields, mined.pairs)
    own = mined.cosines_of([example.texts for example in data.train])
    print(f"mined {len(mined.pairs):,} pairs of {mined.sentences:,} sentences (cosine >= {args.low}, median "
          f"{median(mined.cosines):.2f}; the task's training pairs: median {median(own):.2f}) -> {args.output}\n"
          f"distil on them: kdbert compress --task {task.task} --unlabelled {args.output} --kd-labels export ...")
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

    p = add_command(sub, table, "mine-pairs", cmd_mine_pairs,
                    help="sentence pairs mined from plain text by word overlap, for a pair task's --unlabelled rows",
                    description="Pair each sentence of 10-40 words in the corpus with its nearest other by TF-IDF "
                                "cosine, as paraphrase corpora are mined, keep the pairs at --low or above (copies "
                                "out), and write at most --rows of them as JSONL in the task's text columns, for "
                                "`kdbert compress --unlabelled FILE`: the teacher labels them and every candidate "
                                "distils on them beside the training rows.")
    add_task_arguments(p)
    p.add_argument("--corpus", nargs="+", required=True, help="plain text files or folders (.txt, .gz; "
                   "WikiExtractor output too), cut into sentences")
    p.add_argument("--output", required=True, help="the JSONL file to write")
    p.add_argument("--low", type=float, default=LOW, help=f"the least cosine a kept pair has (default {LOW}, "
                   "measured on MRPC; lower gives more pairs; the task's own pairs' median is printed beside the mined ones)")
    p.add_argument("--rows", type=int, default=ROWS, help=f"at most this many pairs (default {ROWS:,}); the "
                   "teacher labels each once, which compress's budget counts")
    p.add_argument("--seed", type=int, default=0, help="which pairs are kept when more are found, and their order")
