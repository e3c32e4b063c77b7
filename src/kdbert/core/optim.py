"""A stage's optimiser and learning-rate schedule, by name (:class:`kdbert.core.stages.StageConfig`).

A schedule-free stage (``schedule_free``, Defazio et al. 2024, the ``schedulefree`` package) runs
AdamW without a planned decay: the optimiser keeps the trained point y, a fast iterate z and their
average x = (1 - c) x + c z, and x is what is evaluated, kept and shipped
(:func:`averaged_weights`). It matches a linear decay that ends at the step where the run is
stopped, whichever step that is: what a search that continues its runs needs.

A stage with ``ema_decay`` runs its optimiser (AdamW or Adadelta) and keeps an exponential moving
average of its weights (:class:`MovingAverage`); the average is what is evaluated, kept and shipped, by the same
:func:`averaged_weights`. It plays the part of a decay at any step without planning one: the
average's horizon (about ``1 / (1 - ema_decay)`` steps) trails the trained point.
"""

from __future__ import annotations

import contextlib
import fnmatch

import schedulefree
import torch
from torch import nn
from transformers import get_constant_schedule, get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from kdbert.core.stages import StageConfig, param_groups
from kdbert.errors import KdbertError

# fused: one kernel for every parameter instead of a loop of small ops (a tinybert4 step's
# AdamW: 164 ms -> 25 ms on one CPU thread); the same update up to float rounding
ADAMW_OPTIONS = {"fused": True}
ADADELTA_OPTIONS = {"rho": 0.95, "eps": 1e-6}  # the distilled BiLSTM paper's
OPTIMIZERS = {
    "adamw": lambda groups, lr: torch.optim.AdamW(groups, lr=lr, **ADAMW_OPTIONS),
    "adadelta": lambda groups, lr: torch.optim.Adadelta(groups, lr=lr, **ADADELTA_OPTIONS),
}
SCHEDULES = ("linear", "linear-from-first-step", "constant", "constant_warmup")


def optimizer_groups(modules: nn.Module, config: StageConfig) -> list[dict]:
    """The stage's optimiser groups over ``modules``' parameters (in module order): one per (learning
    rate, decayed or not); parameters that match none of ``config.train`` are frozen.

    A parameter's group is the first ``config.train`` pattern its name matches (lr = the stage's
    rate x that pattern's ``lr_scale``); biases and LayerNorm weights get no weight decay unless
    ``config.decay_all``. Parameters matching a ``config.frozen`` pattern are frozen first."""
    groups = param_groups(config.train)
    merged: dict[tuple, dict] = {}
    used = set()
    for name, param in modules.named_parameters():
        frozen = any(fnmatch.fnmatchcase(name, pattern) for pattern in config.frozen)
        index = None if frozen else next((i for i, g in enumerate(groups) if fnmatch.fnmatchcase(name, g.pattern)), None)
        param.requires_grad_(index is not None)
        if index is None:
            continue
        used.add(index)
        lr = config.learning_rate * groups[index].lr_scale
        decay = config.decay_all or not (param.ndim < 2 or "LayerNorm" in name or "layer_norm" in name)
        group = merged.setdefault((lr, decay), {"params": [], "lr": lr,
                                                "weight_decay": config.weight_decay if decay else 0.0})
        group["params"].append(param)
    for i, group in enumerate(groups):
        if i not in used:
            raise KdbertError(f"stage '{config.name}': no parameter matches '{group.pattern}'")
    return list(merged.values())


class IndependentModels(nn.ModuleDict):
    """Models trained side by side in one run, sharing nothing but the batch (and what the loss
    computes once for all of them, e.g. the teacher's pass): the trainer clips each one's gradient
    norm alone, so that they train exactly as they would apart."""


def clip_groups(module: nn.Module) -> list[list[nn.Parameter]]:
    """The parameters whose gradient norm is clipped together: every model of an
    :class:`IndependentModels` part on its own, everything else as one group. ``module``: the
    trainer's stage module (``.parts``), or DDP's wrapper of it."""
    groups, shared = [], []
    for part in getattr(module, "module", module).parts.values():
        if isinstance(part, IndependentModels):
            groups.extend(list(model.parameters()) for model in part.values())
        else:
            shared.extend(part.parameters())
    return ([shared] if shared or not groups else []) + groups


class MovingAverage:
    """An optimiser that also keeps an exponential moving average of each parameter it steps:
    ``a_1 = p_1``, then ``a_t = d_t * a_(t-1) + (1 - d_t) * p_t`` with ``d_t = min(decay, (1 + t) / (10 + t))``
    (``t``: the optimiser steps taken; the warm-up keeps early steps from being the average).
    ``eval()`` puts the averages in the parameters (what is evaluated and saved), ``train()`` the
    trained weights back; the averages are optimiser state, so checkpoints carry them. Mixed in
    before a ``torch.optim`` optimiser whose state counts its ``step`` per parameter."""

    decay: float
    averaged_in: bool = False

    @torch.no_grad()
    def step(self, closure=None):
        if self.averaged_in:
            raise KdbertError(f"{type(self).__name__}.step() with the averaged weights in the model: call train() "
                              "first")
        loss = super().step(closure)
        for group in self.param_groups:
            for param in group["params"]:
                state = self.state[param]
                if "step" not in state:  # no gradient yet
                    continue
                if "ema" not in state:
                    state["ema"] = param.detach().clone()
                    continue
                t = float(state["step"])
                state["ema"].lerp_(param, 1.0 - min(self.decay, (1.0 + t) / (10.0 + t)))
        return loss

    @torch.no_grad()
    def _swap(self) -> None:
        for group in self.param_groups:
            for param in group["params"]:
                average = self.state[param].get("ema")
                if average is not None:
                    trained = param.detach().clone()
                    param.copy_(average)
                    average.copy_(trained)
        self.averaged_in = not self.averaged_in

    def eval(self) -> None:
        """Put the averaged weights in the model (again: nothing)."""
        if not self.averaged_in:
            self._swap()

    def train(self) -> None:
        """Put the trained weights back in the model (again: nothing)."""
        if self.averaged_in:
            self._swap()


class EmaAdamW(MovingAverage, torch.optim.AdamW):
    """Fused AdamW (as :data:`OPTIMIZERS`' ``adamw``) with a :class:`MovingAverage` of its weights."""

    def __init__(self, groups: list[dict], lr: float, decay: float):
        super().__init__(groups, lr=lr, **ADAMW_OPTIONS)
        self.decay = decay


class EmaAdadelta(MovingAverage, torch.optim.Adadelta):
    """Adadelta (as :data:`OPTIMIZERS`' ``adadelta``: rho 0.95, eps 1e-6) with a :class:`MovingAverage`
    of its weights: the BiLSTM's optimiser, whose constant rate never settles on its own."""

    def __init__(self, groups: list[dict], lr: float, decay: float):
        super().__init__(groups, lr=lr, **ADADELTA_OPTIONS)
        self.decay = decay


AVERAGING = {"adamw": EmaAdamW, "adadelta": EmaAdadelta}
"""Optimiser name -> its :class:`MovingAverage` form (a stage's ``ema_decay``)."""


def is_schedule_free(config) -> bool:
    """Whether the stage runs schedule-free AdamW (module doc); other optimisers ignore the flag."""
    return config.schedule_free and config.optimizer == "adamw"


def make_optimizer(config, groups: list[dict], total: int) -> torch.optim.Optimizer:
    """``config.optimizer`` (a key of :data:`OPTIMIZERS`) over the parameter ``groups``; schedule-free
    AdamW warms up over ``int(warmup_ratio * total)`` steps itself. Left in training mode."""
    if config.optimizer not in OPTIMIZERS:
        raise KdbertError(f"stage '{config.name}': unknown optimizer '{config.optimizer}'; use one of "
                          f"{', '.join(OPTIMIZERS)}")
    if config.ema_decay is not None:
        if is_schedule_free(config):
            raise KdbertError(f"stage '{config.name}': ema_decay and schedule_free each average the weights; "
                              "keep one")
        return AVERAGING[config.optimizer](groups, config.learning_rate, config.ema_decay)
    if not is_schedule_free(config):
        return OPTIMIZERS[config.optimizer](groups, config.learning_rate)
    optimizer = schedulefree.AdamWScheduleFree(groups, lr=config.learning_rate,
                                               warmup_steps=int(config.warmup_ratio * total))
    optimizer.train()
    return optimizer


@contextlib.contextmanager
def averaged_weights(optimizer):
    """While the block runs, the parameters hold a schedule-free optimiser's average x or an
    :class:`MovingAverage` (what is evaluated and saved), then the trained weights again; other
    optimisers: nothing changes. ``optimizer``: the optimiser or accelerate's wrapper of it."""
    if not isinstance(getattr(optimizer, "optimizer", optimizer), (schedulefree.AdamWScheduleFree, MovingAverage)):
        yield
        return
    optimizer.eval()
    try:
        yield
    finally:
        optimizer.train()


def make_scheduler(config, optimizer, total: int):
    """``config.schedule`` over ``total`` steps with ``w = int(warmup_ratio * total)`` warm-up steps:
    linear (lr * s / w, then down to 0 at ``total``), linear-from-first-step (lr * (s + 1) / w,
    w >= 1), constant, constant_warmup (linear warm-up, then constant); constant for a
    schedule-free stage, whatever it says."""
    warmup = int(config.warmup_ratio * total)
    if config.schedule == "constant" or is_schedule_free(config):  # schedule-free: the optimiser warms up
        return get_constant_schedule(optimizer)
    if config.schedule == "constant_warmup":
        return get_constant_schedule_with_warmup(optimizer, warmup)
    if config.schedule == "linear":
        return get_linear_schedule_with_warmup(optimizer, warmup, total)
    if config.schedule == "linear-from-first-step":
        warmup = max(1, warmup)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(
            (s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    raise KdbertError(f"stage '{config.name}': unknown schedule '{config.schedule}'; use "
                      f"{', '.join(SCHEDULES)}")
