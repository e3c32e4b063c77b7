"""Typed options: one dataclass per command or method, the single source of its options, defaults and checks.

Every option is a dataclass field made with :func:`option`, whose metadata carries the help text,
the command-line group and the check. The command line's flags are generated from these fields
(:class:`kdbert.cli.common.OptionFlags`: ``finetune``, ``distill task|general``, ``mlm-head``,
the data options), and the command line, YAML recipes (``--recipe``, ``--config``) and Python dicts
all become a config through :func:`build_config`, so a value is checked, and an option of another
method refused, the same way whichever door it came in.

``None`` in a field means "the default for this task": :meth:`CheckedOptions.resolved` fills
those once, from :meth:`CheckedOptions.task_defaults` (TinyBERT's per-task epochs, the
fine-tuning table...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, ClassVar

from kdbert.errors import KdbertError

TRAIN_SUBSETS = ("first", "like-dev")  # which rows --max-train-examples keeps (kdbert.data.subsets)


def flag(dest: str) -> str:
    """The CLI spelling of an option: ``kd_loss`` -> ``--kd-loss``."""
    return "--" + dest.replace("_", "-")


# ----------------------------------------------------------------------------- checks
Check = Callable[[str, Any], None]


def _number(name: str, value, kind: type) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = kind(value)
        except (TypeError, ValueError):
            raise KdbertError(f"{flag(name)} must be a{'n integer' if kind is int else ' number'} "
                              f"(got {value!r})") from None
    if kind is int and (not float(value).is_integer()):
        raise KdbertError(f"{flag(name)} must be an integer (got {value})")
    return value


def in_range(low: float, high: float, kind: type = float, low_open: bool = False, what: str = "") -> Check:
    """A check that the value is a finite ``kind`` in [low, high] (``(low, high]`` with ``low_open``)."""

    def check(name: str, value) -> None:
        number = _number(name, value, kind)
        ok = math.isfinite(number) and (number > low if low_open else number >= low) and number <= high
        if not ok:
            description = what or (f"{'an integer' if kind is int else 'a number'} in "
                                   f"{'(' if low_open else '['}{low:g}, {high:g}]")
            raise KdbertError(f"{flag(name)} must be {description} (got {value})")

    return check


POSITIVE_INT = in_range(1, 10**9, int, what="a positive integer")
POSITIVE = in_range(0, 1e9, low_open=True, what="a positive finite number")
NON_NEGATIVE = in_range(0, 1e9, what="a finite number >= 0")
EPOCHS = in_range(0, 10**5, low_open=True, what="a positive number of epochs (at most 100000)")
LEARNING_RATE = in_range(0, 1, low_open=True, what="a learning rate in (0, 1]")
UNIT = in_range(0, 1)


def warmup(name: str, value) -> None:
    number = _number(name, value, float)
    if not (math.isfinite(number) and 0 <= number < 1):
        raise KdbertError(f"{flag(name)} must be a fraction in [0, 1) (got {value})")


def one_of(*choices: str) -> Check:
    def check(name: str, value) -> None:
        if value not in choices:
            raise KdbertError(f"{flag(name)} {value!r} is unknown; use one of {', '.join(choices)}")

    return check


def option(default=None, help: str = "", check: Check | None = None, type: type = str, group: str = "method",
           choices: tuple[str, ...] | None = None, command_line: bool = True):
    """A config field: ``default`` (``None`` = the method's default for the task), its ``--help``
    text, CLI ``group``, value ``type`` (``bool`` makes a switch, ``list`` takes one or more values)
    and ``check``; ``command_line=False`` leaves it to YAML recipes and Python (e.g. a stage plan)."""
    if choices and check is None:
        check = one_of(*choices)
    meta = {"help": help, "check": check, "type": type, "group": group, "choices": choices,
            "command_line": command_line}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default), metadata=meta)
    return field(default=default, metadata=meta)


def override(cls, name: str, default):
    """Field ``name`` of ``cls`` (help, check) with another default, for a subclass."""
    return field(default=default, metadata=cls.__dataclass_fields__[name].metadata)


# ----------------------------------------------------------------------------- configs
class CheckedOptions:
    """A config whose fields check themselves (:meth:`check`) and whose ``None`` fields may take
    per-task defaults (:meth:`task_defaults`, filled once by :meth:`resolved`)."""

    def check(self) -> None:
        """Run every field's check on the values that are set."""
        for f in fields(self):
            value = getattr(self, f.name)
            check = f.metadata.get("check")
            if value is not None and value is not False and check is not None:
                check(f.name, value)

    def task_defaults(self, task: str) -> dict:
        """Per-task defaults for fields left at ``None`` (``task`` is the GLUE name or a file stem)."""
        return {}

    def resolved(self, task: str):
        """A copy with the task's defaults filled in where a field is ``None``; checked."""
        defaults = {k: v for k, v in self.task_defaults(task).items() if getattr(self, k) is None}
        config = replace(self, **defaults)
        config.check()
        return config


@dataclass
class OptimOptions(CheckedOptions):
    """How every training command optimises (``--epochs``, ``--learning-rate``, ...); the fields
    a stage takes from them are :data:`kdbert.core.stages.STAGE_OPTIONS`."""

    epochs: float | None = option(None, "training epochs (may be fractional)", EPOCHS, float, "optimisation")
    max_steps: int | None = option(None, "optimiser steps; overrides --epochs", POSITIVE_INT, int, "optimisation")
    learning_rate: float | None = option(None, "peak learning rate", LEARNING_RATE, float, "optimisation")
    batch_size: int | None = option(None, "examples per optimiser step per process (before accumulation)",
                                    POSITIVE_INT, int, "optimisation")
    grad_accum: int = option(1, "gradient accumulation steps", POSITIVE_INT, int, "optimisation")
    max_seq_len: int | None = option(None, "token limit (default: the task's, 64 single sentence or 128 "
                                           "pairs; general distillation: the method's)",
                                     in_range(3, 10**6, int, what="an integer >= 3"), int, "optimisation")
    warmup_ratio: float = option(0.1, "fraction of steps with linear warmup", warmup, float, "optimisation")
    weight_decay: float = option(0.01, "weight decay, not on bias/LayerNorm", in_range(0, 10), float, "optimisation")
    schedule_free: bool = option(False, "AdamW without a planned decay (the schedulefree package): the averaged "
                                        "weights are evaluated and saved, so a run can stop or go on at any step "
                                        "as if its rate had decayed there", type=bool, group="optimisation")
    ema_decay: float | None = option(None, "keep an exponential moving average of the weights with this decay "
                                           "(e.g. 0.998: about the last 500 steps); the average is evaluated and "
                                           "saved, so a run that stops at any step ships averaged weights",
                                     in_range(0.5, 0.99999, what="a decay in [0.5, 1)"), float, "optimisation")
    eval_every: int | None = option(None, "evaluate every N steps (default: each epoch)", POSITIVE_INT, int,
                                    "optimisation")
    max_train_examples: int | None = option(None, "use only N training rows (quick runs; which: --train-subset)",
                                            POSITIVE_INT, int, "optimisation")
    train_subset: str = option("first", "which rows --max-train-examples keeps: first (the file's first N) or "
                                        "like-dev (where the training rows' lengths differ from dev's, as SST-2's "
                                        "phrases do, rows of dev's lengths first)", type=str,
                               group="optimisation", choices=TRAIN_SUBSETS)


@dataclass
class RunOptions(CheckedOptions):
    """How a training run runs (seed, precision, threads, checkpoints kept, progress bar), whatever
    it trains; :meth:`kdbert.core.trainer.RunConfig.from_options` reads them."""

    seed: int = option(42, "random seed (data order, initialisation, dropout)", in_range(0, 2**32 - 1, int), int,
                       "run")
    mixed_precision: str = option("auto", "autocast precision: auto = bf16 where the hardware runs it natively "
                                          "(CPUs with avx512_bf16/amx_bf16, GPUs with bf16), else float32; fp16 "
                                          "needs a GPU", group="run", choices=("auto", "no", "bf16", "fp16"))
    threads: int | None = option(None, "CPU threads (default: the cores shared fairly among the kdbert runs on "
                                       "this machine; $OMP_NUM_THREADS also pins it)", POSITIVE_INT, int, "run")
    keep_checkpoints: int = option(2, "how many recent checkpoints to keep", POSITIVE_INT, int, "run")
    no_progress: bool = option(False, "hide the progress bar", type=bool, group="run")


@dataclass
class TrainOptions(RunOptions, OptimOptions):
    """Options every training command shares: :class:`OptimOptions` then :class:`RunOptions`."""


@dataclass
class OutputOptions(CheckedOptions):
    """Where a training command writes its run, and what to do with a run already there."""

    output_dir: str | None = option(None, "where the model, metrics, logs and checkpoints go", group="run")
    resume: bool = option(False, "continue the run in --output-dir from its last checkpoint", type=bool, group="run")
    overwrite: bool = option(False, "replace a run already in --output-dir", type=bool, group="run")


@dataclass
class MethodConfig(TrainOptions):
    """Base of a method's task-distillation options (teacher and student included)."""

    method: ClassVar[str] = ""
    teacher: str | None = option(None, "teacher fine-tuned on the task (HF folder)", group="models")
    student: str | None = option(None, "student: a preset, an HF folder, or none", group="models")
    unlabelled_onnx: str | None = option(None, "label the --unlabelled rows with this ONNX export of the teacher "
                                               "(default: --teacher-onnx where the method has it, else the PyTorch "
                                               "teacher)", group="models")
    unlabelled_cache: str | None = option(None, "folder for the teacher's labels of the --unlabelled rows (default: "
                                                "--logits-cache where the method has it, else beside the file)",
                                          group="models")


@dataclass
class TeacherCacheOptions:
    """Task distillation's teacher-output cache (:mod:`kdbert.core.teacher_cache`), for every method whose
    stages run an HF teacher per batch. Off by default; a folder shared by runs (seeds, methods)
    reuses their teacher outputs."""

    teacher_cache: str | None = option(None, "folder of stored teacher outputs, reused across epochs, stages, "
                                             "seeds and runs (keyed by teacher, tokens and precision)",
                                       group="teacher cache")
    teacher_cache_features: bool = option(False, "also store the hidden states and attention scores a stage "
                                                 "matches (bf16, which rounds them) and [CLS] states (exact)",
                                          type=bool, group="teacher cache")


# ----------------------------------------------------------------------------- building
def config_fields(cls) -> dict[str, Any]:
    return {f.name: f for f in fields(cls)}


def build_config(cls, values: dict, owners: dict[str, list[str]] | None = None, method: str = "") -> Any:
    """``cls(**values)`` after refusing what ``cls`` does not have, then checked.

    ``owners`` maps option names of *other* methods to the methods that have them, for the
    message "--alpha is a kd/pkd option and --method tinybert does not use it". ``None``/``False``
    values count as "not given"; ``method`` (the registry key) is not an option of the config.
    """
    known = config_fields(cls)
    kept = {}
    for key, value in values.items():
        key = str(key).replace("-", "_")
        if key == "method":
            continue
        if key in known:
            if value is not None:
                kept[key] = value
            continue
        if value is None or value is False:
            continue
        users = (owners or {}).get(key)
        if users:
            raise KdbertError(f"{flag(key)} is a {'/'.join(users)} option and --method {method} does not use it; "
                              f"drop it or use --method {users[0]}")
        raise KdbertError(f"unknown option {flag(key)}" + (f" for --method {method}" if method else "")
                          + "; see the command's --help for its options")
    for name, f in known.items():
        if name in kept and f.metadata.get("type") is bool:
            kept[name] = bool(kept[name])
    config = cls(**kept)
    config.check()
    return config
