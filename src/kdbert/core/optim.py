"""A stage's optimiser and learning-rate schedule, by name (:class:`kdbert.core.trainer.StageConfig`)."""

from __future__ import annotations

import torch
from transformers import get_constant_schedule, get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

from kdbert.errors import KdbertError

OPTIMIZERS = {
    # fused: one kernel for every parameter instead of a loop of small ops (a tinybert4 step's
    # AdamW: 164 ms -> 25 ms on one CPU thread); the same update up to float rounding
    "adamw": lambda groups, lr: torch.optim.AdamW(groups, lr=lr, fused=True),
    "adadelta": lambda groups, lr: torch.optim.Adadelta(groups, lr=lr, rho=0.95, eps=1e-6),
}
SCHEDULES = ("linear", "linear-from-first-step", "constant", "constant_warmup")


def make_optimizer(config, groups: list[dict]) -> torch.optim.Optimizer:
    """``config.optimizer`` (a key of :data:`OPTIMIZERS`) over the parameter ``groups``."""
    if config.optimizer not in OPTIMIZERS:
        raise KdbertError(f"stage '{config.name}': unknown optimizer '{config.optimizer}'; use one of "
                          f"{', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[config.optimizer](groups, config.learning_rate)


def make_scheduler(config, optimizer, total: int):
    """``config.schedule`` over ``total`` steps with ``w = int(warmup_ratio * total)`` warm-up steps:
    linear (lr * s / w, then down to 0 at ``total``), linear-from-first-step (lr * (s + 1) / w,
    w >= 1), constant, constant_warmup (linear warm-up, then constant)."""
    warmup = int(config.warmup_ratio * total)
    if config.schedule == "constant":
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
