"""What a distillation recipe receives and returns.

A recipe is a function ``build(context) -> Plan``: it turns the loaded pieces (teacher,
tokenizer, task data, options) into the modules to train and the list of stages the shared
:class:`~kdbert.trainer.Trainer` runs. It never contains a training loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from kdbert.data.batching import EncodedDataset
from kdbert.data.tasks import TaskSpec
from kdbert.trainer import Stage


@dataclass
class DistillContext:
    """Inputs of a task-distillation recipe.

    Attributes:
        teacher: fine-tuned HF sequence classifier (eval mode, frozen by the trainer).
        student: the initial student (HF ``...ForSequenceClassification``), built by the front
            from a preset, a folder (e.g. a general-distilled student) or teacher layers.
        tokenizer: shared by teacher and student (vocabularies checked equal).
        spec: the task.
        train_set: tokenised training rows (``labels`` included).
        options: the method's options (recipe YAML merged with CLI overrides).
        seed: run seed.
    """

    teacher: nn.Module
    student: nn.Module
    tokenizer: Any
    spec: TaskSpec
    train_set: EncodedDataset
    options: dict
    seed: int = 42


@dataclass
class Plan:
    """Output of a recipe: ``modules["student"]`` plus extra trainable modules (projections),
    frozen models (``{"teacher": ...}``), the stages, and facts for the report (layer map...)."""

    modules: dict[str, nn.Module]
    frozen: dict[str, nn.Module]
    stages: list[Stage]
    report: dict = field(default_factory=dict)
