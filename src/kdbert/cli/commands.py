"""The ``kdbert`` command line: one entry point, one subcommand per operation.

The training commands live in :mod:`kdbert.cli.train`, ``augment`` and ``quickstart`` in their
modules, the deployment commands' work in :mod:`kdbert.cli.deploy`; this module assembles the
parser, reads ``--config FILE.yaml`` / ``--recipe NAME`` and runs the command. Keys of the file
are option names (``learning_rate`` or ``learning-rate``); options given on the command line
override the file. A user error prints one line, ``kdbert: error: ...``, and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kdbert.cli import augment, quickstart, train
from kdbert.cli.common import INTERNAL, add_command, add_task_arguments, require
from kdbert.cli.deploy import cmd_bench, cmd_evaluate, cmd_export, cmd_report
from kdbert.errors import KdbertError

RECIPE_DIR = Path(__file__).parents[1] / "methods" / "presets"


def add_deploy_commands(sub, table: dict) -> None:
    p = add_command(sub, table, "evaluate", cmd_evaluate,
                    help="evaluate a fine-tuned classifier on a task's dev split(s)",
                    description="Print and save a fine-tuned model's GLUE metrics on dev.")
    p.add_argument("--model", help="fine-tuned HF folder or hub id, or an export of `kdbert export` (its folder or "
                                   ".onnx file, run in ONNX Runtime) (required)")
    require(p, "model")
    add_task_arguments(p)
    p.add_argument("--max-seq-len", type=int, help="token limit (default: the task's)")
    p.add_argument("--batch-size", type=int, default=64, help="evaluation batch size")
    p.add_argument("--output", help="metrics JSON path (default: MODEL/eval_TASK.json)")

    p = add_command(sub, table, "bench", cmd_bench,
                    help="size, FLOPs, CPU latency and throughput, optionally against another model",
                    description="Parameters, FLOPs per example, batch-1 latency, batch-32 throughput, size on "
                                "disk and efficiency (share of the measured matrix-multiply rate), in PyTorch "
                                "or, for an exported model, ONNX Runtime.")
    p.add_argument("--model", help="HF folder or hub id ('default' = the packaged teacher), or an export of "
                                   "`kdbert export` (folder or .onnx file: ONNX Runtime) (required)")
    require(p, "model")
    p.add_argument("--compare", help="baseline model (e.g. the teacher, PyTorch or ONNX) for speedup and size ratios")
    p.add_argument("--seq-len", type=int, default=128, help="sequence length of the synthetic input")
    p.add_argument("--threads", type=int, help="CPU threads of torch / ONNX Runtime (default: torch's)")
    p.add_argument("--runs", type=int, default=30, help="timed runs for latency")
    p.add_argument("--output", help="write the rows as JSON here")
    p.add_argument("--length-rows", type=int, default=200,
                   help="with --task: how many dev rows are timed, each at its own length, batch 1")
    add_task_arguments(p, required=False, task_help="also time batch-1 latency over this task's dev rows at their "
                                                    "own lengths (p50/p90 over rows)")

    p = add_command(sub, table, "export", cmd_export,
                    help="export a fine-tuned model to ONNX (optionally int8) with a parity check",
                    description="Export a fine-tuned classifier to ONNX with dynamic batch and sequence axes, "
                                "tokenizer and config beside it, optionally a dynamic int8 copy, and "
                                "export_report.json: max |logit difference| against PyTorch and, with --task, "
                                "the dev metric of PyTorch, ONNX fp32 and ONNX int8.")
    p.add_argument("--model", help="fine-tuned model folder (teacher or student) (required)")
    require(p, "model")
    p.add_argument("--format", choices=["onnx"], default="onnx", help="export format")
    p.add_argument("--quantize", choices=["int8"], help="also write model.int8.onnx (ONNX Runtime dynamic int8)")
    p.add_argument("--output-dir", help="export folder (default: MODEL/onnx)")
    p.add_argument("--max-seq-len", type=int, help="token limit of the parity rows (default: the task's, else 128)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size of the parity check")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --output-dir")
    add_task_arguments(p, required=False, task_help="check parity and metrics on this task's dev rows "
                                                    "(default: synthetic rows, no metric)")

    p = add_command(sub, table, "report", cmd_report,
                    help="paper-style table (methods x tasks) and Pareto plot of run folders",
                    description="Mean +/- std over seeds of each method's dev score per task, the share of the "
                                "teacher's score kept, parameters, FLOPs, and batch-1 latency and speedup in "
                                "PyTorch and ONNX Runtime int8; written as Markdown, CSV and JSON with a "
                                "Pareto plot (PNG) of dev score against latency.")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="finetune / distill run folders (a distilled student's teacher is added automatically)")
    p.add_argument("--results", help="instead of RUN_DIRs: a JSON file of run records "
                                     "(e.g. benchmarks/results/deploy.json)")
    p.add_argument("--output-dir", default="report", help="where report.md/.csv/.json and pareto.png go")
    p.add_argument("--bench", action="store_true",
                   help="time each method's first run: PyTorch, and ONNX int8 where RUN_DIR/onnx/model.int8.onnx "
                        "exists (see `kdbert export`)")
    p.add_argument("--seq-len", type=int, default=128, help="sequence length of FLOPs and timings")
    p.add_argument("--threads", type=int, help="CPU threads for timings (default: torch's)")
    p.add_argument("--plot-latency", choices=["onnx_int8", "pytorch"], default=None,
                   help="latency axis of the Pareto plot (default: ONNX int8 when every point has it)")


def build_parser(table: dict[str, argparse.ArgumentParser] | None = None) -> argparse.ArgumentParser:
    """The ``kdbert`` parser; ``table`` receives each command's parser by name ("distill task")."""
    table = {} if table is None else table
    parser = argparse.ArgumentParser(prog="kdbert", description="Knowledge distillation for BERT-family models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    quickstart.add_commands(sub, table)
    train.add_commands(sub, table)
    augment.add_commands(sub, table)
    add_deploy_commands(sub, table)
    for name, command in table.items():
        if command.get_default("func") is None:  # a group of commands (distill)
            continue
        group = command.add_argument_group("options from a file")
        group.add_argument("--config", metavar="FILE",
                           help="YAML file of option names and values; the command line wins")
        group.add_argument("--recipe", metavar="NAME", help="a packaged preset (src/kdbert/methods/presets), "
                                                            "e.g. tinybert/rte, pkd/skip, examples/last-layer")
    return parser


def config_file(args: argparse.Namespace) -> Path | None:
    """The file of ``--config FILE`` or ``--recipe NAME`` (a packaged preset, e.g. tinybert/rte)."""
    if args.config and args.recipe:
        raise KdbertError("pass --config FILE or --recipe NAME, not both")
    if args.recipe:
        path = Path(args.recipe)
        if not path.is_file():
            path = RECIPE_DIR / f"{args.recipe.removesuffix('.yaml')}.yaml"
        if not path.is_file():
            known = sorted(str(p.relative_to(RECIPE_DIR).with_suffix("")) for p in RECIPE_DIR.rglob("*.yaml"))
            raise KdbertError(f"--recipe {args.recipe}: no such preset; known presets: {', '.join(known)}")
        return path
    if args.config and not Path(args.config).is_file():
        raise KdbertError(f"--config {args.config} does not exist")
    return Path(args.config) if args.config else None


def read_config_file(path: Path, known: set[str], command: str) -> dict:
    """The option values of a YAML file, keys spelled as option names (``max_steps`` or ``max-steps``)."""
    import yaml

    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict):
        raise KdbertError(f"{path}: expected a mapping of option names to values")
    options = {}
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise KdbertError(f"{path}: unknown option '{key}'; see `kdbert {command} --help` for its options")
        options[name] = value
    return options


def parse_command_line(argv: list[str]) -> argparse.Namespace:
    """Parse ``argv``; the values of a ``--config``/``--recipe`` file become the command's defaults
    (the command line wins), then every required option must have a value."""
    if argv and argv[0] in ("--config", "--recipe"):
        raise KdbertError("--config/--recipe come after the command, e.g. `kdbert finetune --config FILE`")
    table: dict[str, argparse.ArgumentParser] = {}
    parser = build_parser(table)
    args = parser.parse_args(argv)
    path = config_file(args)
    if path is not None:
        known = set(vars(args)) - set(INTERNAL)
        table[args.command_name].set_defaults(**read_config_file(path, known, args.command_name))
        args = parser.parse_args(argv)
    needed = getattr(args, "required_options", None) or {}
    missing = [spelling for name, spelling in needed.items() if getattr(args, name) is None]
    if missing:
        raise KdbertError(f"{missing[0]} is required; give it on the command line or in the --config file "
                          f"(`kdbert {args.command_name} --help`)")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # keep HF load reports and save progress bars out of the output
    hf_logging.disable_progress_bar()
    try:
        args = parse_command_line(argv)
        return args.func(args)
    except KdbertError as exc:
        print(f"kdbert: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path option naming a file for a folder, no permission, a full disk...
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"kdbert: error: {where}{exc.strerror or exc}; check the path, its permissions and free space",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
