"""The method registry: the one place that lists the distillation methods.

A method is one :class:`kdbert.core.method.Method` object (its configs and hooks), ``METHOD`` in
its own module, listed here. The command line's ``--method`` choices and method options, YAML
recipes and the Python API are all derived from this table (adding a method = one module + one
line here).
"""

from __future__ import annotations

import importlib
from dataclasses import fields

from kdbert.core.method import Method
from kdbert.options import build_config
from kdbert.errors import KdbertError

# One line per method: the module whose ``METHOD`` it is (the order of ``--method``'s choices).
METHOD_MODULES = (
    "kdbert.methods.tinybert",
    "kdbert.methods.kd",
    "kdbert.methods.pkd",
    "kdbert.methods.distilbert",
    "kdbert.methods.mobilebert",
    "kdbert.methods.bilstm",
    "kdbert.methods.minilm",
)
METHODS: dict[str, Method] = {m.name: m for m in (importlib.import_module(path).METHOD for path in METHOD_MODULES)}


def general_methods() -> list[str]:
    """The methods with a general (pre-training) stage."""
    return [name for name, method in METHODS.items() if method.general_config is not None]


def get_method(name: str, general: bool = False) -> Method:
    """Method ``name`` (one with a general stage when ``general``)."""
    names = general_methods() if general else list(METHODS)
    if name not in names:
        raise KdbertError(f"unknown {'general ' if general else ''}--method '{name}'; use one of {', '.join(names)}")
    return METHODS[name]


def config_class(name: str, general: bool = False) -> type:
    method = get_method(name, general)
    return method.general_config if general else method.config


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
