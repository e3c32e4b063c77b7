"""The method registry: the one place that lists the distillation methods.

A method is a recipe module registered here. The module provides

- ``Config``: its task-distillation options, a :class:`kdbert.core.options.MethodConfig` dataclass;
- ``initial_student(teacher, spec, config) -> Student`` and ``build_task_plan(ctx) -> Plan``; a
  student that does not read the teacher's tokens provides ``task_inputs`` instead of
  ``initial_student`` (:func:`kdbert.core.distill.token_inputs` is the default);
- for methods with a general (pre-training) stage, ``GeneralConfig`` and ``general_teacher``,
  ``general_student``, ``general_max_seq_len``, ``general_data`` and ``build_general_plan``.

The command line's ``--method`` choices and method options, YAML recipes and the Python API are
all derived from this table (adding a method = one recipe module + one line here).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, fields
from types import ModuleType

from kdbert.core.options import build_config
from kdbert.errors import KdbertError


@dataclass(frozen=True)
class Method:
    name: str
    module: str
    help: str


METHODS: dict[str, Method] = {m.name: m for m in [
    Method("tinybert", "kdbert.methods.tinybert", "intermediate-layer then prediction-layer stages"),
    Method("kd", "kdbert.methods.kd", "Hinton soft targets"),
    Method("pkd", "kdbert.methods.pkd", "BERT-PKD patient loss"),
    Method("distilbert", "kdbert.methods.distilbert", "DistilBERT: logit distillation while fine-tuning a "
                                                      "DistilBERT student; general: MLM KL + MLM + cosine"),
    Method("mobilebert", "kdbert.methods.mobilebert", "MobileBERT: fine-tuning (+ optional logit KD) of a "
                                                      "MobileBERT student; general: progressive/joint/auxiliary "
                                                      "layer-wise transfer + MLM distillation"),
]}

# Word-level students (their own vocabulary; the teacher's logits computed once and stored).
METHODS["bilstm"] = Method("bilstm", "kdbert.methods.bilstm", "distilled BiLSTM (Tang et al.): a word-level "
                                                                "BiLSTM fitted to the teacher's stored logits")


def recipe(name: str, general: bool = False) -> ModuleType:
    """The recipe module of method ``name`` (with a general stage when ``general``)."""
    names = general_methods() if general else list(METHODS)
    if name not in names:
        raise KdbertError(f"unknown {'general ' if general else ''}--method '{name}'; use one of {', '.join(names)}")
    return importlib.import_module(METHODS[name].module)


def general_methods() -> list[str]:
    return [n for n in METHODS if hasattr(importlib.import_module(METHODS[n].module), "GeneralConfig")]


def config_class(name: str, general: bool = False):
    module = recipe(name, general)
    return module.GeneralConfig if general else module.Config


def option_owners(general: bool = False) -> dict[str, list[str]]:
    """Option name -> the methods whose config has it."""
    owners: dict[str, list[str]] = {}
    for name in (general_methods() if general else METHODS):
        for f in fields(config_class(name, general)):
            owners.setdefault(f.name, []).append(name)
    return owners


def method_config(name: str, values: dict, general: bool = False):
    """The typed config of method ``name`` from option ``values`` (CLI, YAML or a Python dict):
    another method's option is refused with a one-line error, every value checked."""
    return build_config(config_class(name, general), values, option_owners(general), name)
