"""What several commands share: flags generated from the typed configs, the data options, how a
command is registered and how metrics are printed."""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import MISSING, Field, fields

from kdbert.options import build_config, flag
from kdbert.data.load import TaskOptions

# the namespace entries a command line carries besides its options
INTERNAL = ("func", "command", "stage", "command_name", "required_options", "config", "recipe")


def add_command(sub, table: dict[str, argparse.ArgumentParser], name: str, func, key: str | None = None,
                **kwargs) -> argparse.ArgumentParser:
    """A subcommand ``name`` running ``func(args)``, kept in ``table`` under ``key`` (e.g. "distill task")
    for the ``--config`` loader of :mod:`kdbert.cli.commands`."""
    parser = sub.add_parser(name, allow_abbrev=False, **kwargs)  # a renamed option must not match a prefix
    key = key or name
    parser.set_defaults(func=func, command_name=key)
    table[key] = parser
    return parser


def require(parser: argparse.ArgumentParser, *names: str, spelled: dict[str, str] | None = None) -> None:
    """Options the command needs, from the command line or its ``--config`` file (checked after
    both); ``spelled`` gives a flag that is not ``--<name>`` (``{"teacher": "--from"}``)."""
    needed = {name: (spelled or {}).get(name, flag(name)) for name in names}
    parser.set_defaults(required_options={**(parser.get_default("required_options") or {}), **needed})


def _text(value) -> str | None:
    """How a default reads in ``--help``; ``None`` for "no default" (None, off, empty)."""
    if value is None or value is False or (isinstance(value, (list, tuple)) and not value):
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if value == "default":
        return "the packaged model"
    return f"{value:g}" if isinstance(value, float) else str(value)


def default_note(defaults: dict[str, object]) -> str:
    """`` (default X)``, or ``(default X; bilstm Y)`` naming the variants whose default differs from
    the most common one; nothing when no variant has one."""
    texts = {label: _text(value) for label, value in defaults.items()}
    if not any(texts.values()):
        return ""
    common = Counter(texts.values()).most_common(1)[0][0]
    others = ", ".join(f"{label} {text}" for label, text in texts.items() if text != common and text is not None)
    if common is None:
        return f" (default: {others})"
    return f" (default {common}{'; ' + others if others else ''})"


class OptionFlags:
    """The flags of one command, generated from config dataclasses (:func:`kdbert.options.option`
    fields): help, group, type and choices from each field's metadata, the default noted in the help.
    A flag not given parses to ``None``, so the config's own default stands: the command line has no
    defaults of its own."""

    def __init__(self, parser: argparse.ArgumentParser, titles: dict[str, str] | None = None):
        self.parser = parser
        self.titles = titles or {}
        self.groups: dict[str, object] = {}
        self.added: set[str] = set()

    def add(self, variants, required: tuple[str, ...] = (), help: dict[str, str] | None = None) -> None:
        """The flags of ``variants``: one config class, or {label: class} whose options are united
        (every method of ``distill task``; an option some variants lack names its users)."""
        variants = variants if isinstance(variants, dict) else {"": variants}
        users: dict[str, dict[str, Field]] = {}
        for label, cls in variants.items():
            for f in fields(cls):
                if f.metadata:
                    users.setdefault(f.name, {})[label] = f
        for name, found in users.items():
            if name not in self.added:
                self.added.add(name)
                self._add_flag(name, found, len(variants), (help or {}).get(name), name in required)
        if required:
            require(self.parser, *required)

    def _add_flag(self, name: str, found: dict[str, Field], n_variants: int, help_text: str | None,
                  required: bool) -> None:
        meta = next(iter(found.values())).metadata
        if not meta["command_line"]:
            self.parser.set_defaults(**{name: None})  # YAML recipes and Python only (e.g. a stage plan)
            return
        help_text = help_text or meta["help"]
        if meta["type"] is not bool and "default" not in help_text:
            help_text += default_note({label: f.default for label, f in found.items() if f.default is not MISSING})
        if len(found) < n_variants:
            help_text += f" [{'/'.join(found)}]"
        help_text += " (required)" if required else ""
        kwargs: dict = {"help": help_text.replace("%", "%%"), "default": None}  # argparse formats help with %
        if meta["type"] is bool:
            kwargs["action"] = "store_true"
        elif meta["type"] is list:  # --corpus A B, or --corpus A --corpus B
            kwargs.update(nargs="+", action="extend")
        else:
            kwargs["type"] = meta["type"]
            choices = [c for f in found.values() for c in (f.metadata.get("choices") or ())]
            if choices:
                kwargs["choices"] = list(dict.fromkeys(choices))
        title = self.titles.get(meta["group"], meta["group"])
        group = self.groups.get(title) or self.groups.setdefault(title, self.parser.add_argument_group(title))
        group.add_argument(flag(name), **kwargs)


def given_options(args: argparse.Namespace, cls=None) -> dict:
    """The options set on the command line or in its ``--config`` file (of config ``cls`` only, when given)."""
    names = {f.name for f in fields(cls)} if cls is not None else None
    return {k: v for k, v in vars(args).items()
            if v is not None and k not in INTERNAL and (names is None or k in names)}


def add_task_arguments(parser: argparse.ArgumentParser, required: bool = True, task_help: str | None = None) -> None:
    """The data options (:class:`kdbert.data.load.TaskOptions`: ``--task``, ``--data-dir``, ...)."""
    OptionFlags(parser).add(TaskOptions, required=("task",) if required else (),
                            help={"task": task_help} if task_help else None)


def task_options(args: argparse.Namespace) -> TaskOptions:
    return build_config(TaskOptions, given_options(args, TaskOptions))


def format_metrics(title: str, metrics: dict | None) -> str:
    if not metrics:
        return f"{title}: no evaluation"
    body = "  ".join(f"{k}={v:.2f}" for k, v in metrics.items())
    return f"{title}\n  {body}"
