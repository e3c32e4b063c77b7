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

import kdbert.cli.augment as augment
import kdbert.cli.compress as compress
import kdbert.cli.predict as predict
import kdbert.cli.quickstart as quickstart
import kdbert.cli.serve as serve
import kdbert.cli.students as students
import kdbert.cli.train as train
from kdbert.cli.common import INTERNAL
from kdbert.cli.deploy import add_deploy_commands
from kdbert.errors import KdbertError

RECIPE_DIR = Path(__file__).parents[1] / "methods" / "presets"


def build_parser(table: dict[str, argparse.ArgumentParser] | None = None) -> argparse.ArgumentParser:
    """The ``kdbert`` parser; ``table`` receives each command's parser by name ("distill task")."""
    table = {} if table is None else table
    parser = argparse.ArgumentParser(prog="kdbert", description="Knowledge distillation for BERT-family models.",
                                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    quickstart.add_commands(sub, table)
    train.add_commands(sub, table)
    augment.add_commands(sub, table)
    students.add_commands(sub, table)
    compress.add_commands(sub, table)
    add_deploy_commands(sub, table)
    predict.add_commands(sub, table)
    serve.add_commands(sub, table)
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
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # keep HF load reports and save progress bars out of the output
    hf_logging.disable_progress_bar()
    try:
        args = parse_command_line(argv)
        args.command_line = ["kdbert", *argv]  # as typed, for the model cards exports write
        args.own_process = own_process  # the process's own command line, not main([...]) in a running one
        return args.func(args)
    except KdbertError as exc:
        print(f"kdbert: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path option naming a file for a folder, no permission, a full disk...
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"kdbert: error: {where}{exc.strerror or exc}; check the path, its permissions and free space",
              file=sys.stderr)
        return 2
    finally:
        _end_process_group()


def _end_process_group() -> None:
    """Tear down the process group of a multi-process run (torchrun) before the interpreter exits:
    left to the exit, a rank's communication threads could be destroyed still joinable, which
    aborts it (SIGABRT, "terminate called without an active exception") after its work is done."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
