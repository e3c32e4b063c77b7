"""A stage of training (:class:`Stage`: its settings, loss and data), a run's settings
(:class:`RunConfig`), and stages as data: built from a method's options, or from a stage plan written in YAML (``stages:`` in a recipe), which may generate one stage per layer.

A stage plan in YAML (any key left out takes the method's option of the same name)::

    stages:
      - name: intermediate
        matches:                        # see kdbert.core.matching for features and losses
          - {feature: attention_scores, layers: mapped, loss: attention_mse}
          - {feature: hidden, layers: last, loss: hidden_mse, projection: linear}
        train: ["student.*", "projections.*"]
        learning_rate: 5.0e-5
        schedule: constant              # or linear (warmup_ratio)
        epochs: 20                      # or max_steps
        evaluate: false
      - name: prediction
        matches: [{feature: logits, loss: soft_cross_entropy, temperature: 1}]
        evaluate: true

Match keys: ``feature``, ``loss``, ``weight`` (1), ``term`` (default: the feature's name),
``target`` (teacher | labels), ``projection`` (linear | a shared name), ``layers``: ``mapped``
(one match per pair of the method's layer map, layer 0 excluded), ``last`` (last layer to last
layer), ``l`` (inside ``for_each_layer``: student layer l to its mapped teacher layer), or a list
of ``[student, teacher]`` pairs; ``stack: true`` stacks the pairs into one match (PKD's
[CLS] states). Other keys are the loss's options (``temperature``, ``reduction``...).

``for_each_layer: true`` repeats a stage for each student layer l = 1..M (MobileBERT's
progressive transfer): ``{l}`` in the name and train patterns becomes l, ``{i}`` becomes l - 1
(0-based module index), and a train entry ``{match: "student.*.layer.{j}.*", below: true,
lr_scale: 0.3}`` expands to every earlier layer j < l - 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from kdbert.core.layer_maps import LayerMap
from kdbert.core.matching import LAYERED, Match, MatchLoss
from kdbert.data.batching import EncodedDataset
from kdbert.errors import KdbertError

LossFn = Callable[[nn.ModuleDict, dict, dict], dict]


@dataclass
class StageConfig:
    """Optimisation settings of one stage.

    ``epochs`` may be fractional; ``max_steps`` (optimiser steps), when set, wins. ``schedule``
    is "linear" (warmup from 0, then linear decay to 0), "linear-from-first-step" (the same with the
    first step at lr / warmup_steps instead of 0, at least one warmup step; ``kdbert mlm-head``),
    "constant" (TinyBERT's intermediate stage) or "constant_warmup" (warmup then constant:
    MobileBERT's layer-wise phases). ``decay_all`` applies weight decay to biases and LayerNorm
    weights too.
    ``eval_every`` is in optimiser steps; ``None`` evaluates at the end of each epoch.
    ``optimizer`` is a key of :data:`kdbert.core.optim.OPTIMIZERS`: "adamw" (decoupled weight decay) or
    "adadelta" (rho 0.95, eps 1e-6; the distilled BiLSTM's, with ``learning_rate`` 1.0 and a
    constant schedule; weight decay there is an L2 term added to the gradient); ``schedule_free``
    runs AdamW schedule-free (:mod:`kdbert.core.optim`: its own warm-up, no decay, the averaged
    weights evaluated, kept and left in the model when the stage ends); ``ema_decay`` keeps AdamW's
    exponential moving average of the weights, evaluated, kept and left in the model the same way.
    ``train`` selects the parameters this stage updates by name in the trainer's module dict
    (``student.bert.encoder.layer.3.output.dense.weight``, ``projections.layer_1.bias``): each
    entry is a glob pattern, or a :class:`ParamGroup` with a learning-rate multiplier; the first
    pattern a parameter matches decides its group, and parameters matching none are frozen;
    ``frozen``: glob patterns of parameters kept as they start whatever ``train`` says.
    """

    name: str
    epochs: float = 3.0
    max_steps: int | None = None
    learning_rate: float = 5e-5
    schedule: str = "linear"
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    batch_size: int = 32
    grad_accum: int = 1
    max_grad_norm: float = 1.0
    optimizer: str = "adamw"
    schedule_free: bool = False
    ema_decay: float | None = None
    evaluate: bool = True
    eval_every: int | None = None
    train: tuple = ("student.*",)
    frozen: tuple = ()
    decay_all: bool = False

    @classmethod
    def from_options(cls, name: str, options, **overrides) -> StageConfig:
        """Stage ``name`` with the :data:`STAGE_OPTIONS` of a resolved config (``overrides`` win)."""
        return cls(name, **{**{key: getattr(options, key) for key in STAGE_OPTIONS}, **overrides})


# the optimisation options (kdbert.options.OptimOptions) a stage takes over as they are
STAGE_OPTIONS = ("epochs", "max_steps", "learning_rate", "warmup_ratio", "weight_decay", "batch_size", "grad_accum",
                 "eval_every", "schedule_free", "ema_decay")


@dataclass(frozen=True)
class ParamGroup:
    """Parameters whose name matches ``pattern`` (glob), trained at ``lr_scale`` x the stage's rate.

    "Layer 3 at 3x, earlier layers at 0.3x, the rest frozen" is
    ``(ParamGroup("student.*.layer.3.*", 3.0), ParamGroup("student.*.layer.[0-2].*", 0.3))``.
    """

    pattern: str
    lr_scale: float = 1.0


def param_groups(train: tuple) -> list[ParamGroup]:
    return [g if isinstance(g, ParamGroup) else ParamGroup(str(g)) for g in train]


@dataclass
class Stage:
    """A stage: its settings, its loss ``loss_fn(modules, frozen, batch) -> {term: tensor}``
    and its training data.

    A loss with a ``setup(modules, frozen, batch)`` method (e.g. :class:`~kdbert.core.matching.MatchLoss`
    creating projections from the widths it sees) gets the stage's first batch before the
    optimiser is built. ``order(epoch) -> [[row indices of a batch], ...]`` replaces the default
    length-grouped order, a pure function of (seed, epoch).
    """

    config: StageConfig
    loss_fn: LossFn
    dataset: EncodedDataset
    order: Callable[[int], list[list[int]]] | None = None

@dataclass
class RunConfig:
    """Settings of a whole run (shared by its stages). ``reseed=False`` keeps the caller's torch RNG
    stream instead of seeding it with ``seed`` when training starts."""

    output_dir: str
    seed: int = 42
    mixed_precision: str = "auto"  # or no, bf16, fp16 (kdbert.core.hardware.resolve_precision)
    threads: int | None = None  # None: a fair share of the cores (kdbert.core.hardware.ThreadShare)
    log_every: int = 20
    save_every: int | None = None
    keep_checkpoints: int = 2
    group_by_length: bool = True
    progress: bool = True
    reseed: bool = True
    deadline: float | None = None  # time.time() by which training ends (module doc)
    pause_at_step: int | None = None  # optimiser steps over all stages after which training pauses (module doc)

    @classmethod
    def from_options(cls, output_dir, options, **overrides) -> RunConfig:
        """The run settings of a config's :class:`~kdbert.options.RunOptions` (``overrides`` win)."""
        return cls(str(output_dir), **{"seed": options.seed, "mixed_precision": options.mixed_precision,
                                       "threads": options.threads, "keep_checkpoints": options.keep_checkpoints,
                                       "progress": not options.no_progress, **overrides})


STAGE_KEYS = {"name", "matches", "train", "learning_rate", "schedule", "epochs", "max_steps", "warmup_ratio",
              "weight_decay", "batch_size", "grad_accum", "evaluate", "eval_every", "max_grad_norm", "for_each_layer"}
MATCH_KEYS = {"feature", "loss", "weight", "term", "target", "projection", "layers", "stack"}


def init_std(model) -> float:
    return float(getattr(getattr(model, "config", None), "initializer_range", 0.02))


def task_stage(name: str, config, matches: list[Match], ctx, projections_from=None, projection_init: str = "random",
               **overrides) -> Stage:
    """A stage with the method's optimisation options (``overrides`` win) and a :class:`MatchLoss`
    (``projections_from``: a folder whose saved projections seed the new ones; ``projection_init``:
    how new ones start, random or fitted to the first batch)."""
    loss = MatchLoss(matches, seed=ctx.seed, init_std=init_std(ctx.student.model), projections_from=projections_from,
                     projection_init=projection_init)
    return Stage(StageConfig.from_options(name, config, **overrides), loss, ctx.train_set)


# ----------------------------------------------------------------------------- plans written as data
def _pairs(spec: Any, layer_map: LayerMap | None, layer: int | None, where: str) -> list[tuple[int, int]]:
    if spec == "mapped" or spec == "l":
        if layer_map is None:
            raise KdbertError(f"{where}: 'layers: {spec}' needs a method with a layer map (tinybert, pkd)")
        pairs = [p for p in layer_map.pairs if p[0] > 0]
        if spec == "l":
            if layer is None:
                raise KdbertError(f"{where}: 'layers: l' is only meaningful inside for_each_layer")
            pairs = [p for p in pairs if p[0] == layer]
        return pairs
    if spec == "last":
        return [(-1, -1)]
    try:
        return [(int(s), int(t)) for s, t in spec]
    except (TypeError, ValueError):
        raise KdbertError(f"{where}: layers must be mapped, last, l or a list of [student, teacher] pairs, "
                          f"not {spec!r}") from None


def match_from_data(data: dict, layer_map: LayerMap | None, layer: int | None = None,
                    where: str = "match") -> list[Match]:
    """The :class:`Match` objects one YAML match entry stands for."""
    if not isinstance(data, dict) or "feature" not in data or "loss" not in data:
        raise KdbertError(f"{where}: a match needs at least 'feature' and 'loss', got {data!r}")
    options = {k: v for k, v in data.items() if k not in MATCH_KEYS}
    common = dict(term=str(data.get("term", data["feature"])), feature=data["feature"], loss=data["loss"],
                  weight=float(data.get("weight", 1.0)), target=data.get("target", "teacher"),
                  projection=data.get("projection"), options=options)
    if data["feature"] == "embeddings":
        return [Match(**common, student_layer=0, teacher_layer=0)]
    if data["feature"] not in LAYERED:
        if "layers" in data:
            raise KdbertError(f"{where}: feature '{data['feature']}' has no layers")
        return [Match(**common)]
    pairs = _pairs(data.get("layers", "mapped"), layer_map, layer, where)
    if data.get("stack"):
        return [Match(**common, student_layer=tuple(s for s, _ in pairs), teacher_layer=tuple(t for _, t in pairs))]
    return [Match(**common, student_layer=s, teacher_layer=t) for s, t in pairs]


def _train_groups(entries, layer: int | None, where: str) -> tuple:
    groups = []
    for entry in entries or ["student.*"]:
        if isinstance(entry, str):
            entry = {"match": entry}
        pattern, scale = str(entry.get("match", "")), float(entry.get("lr_scale", 1.0))
        if not pattern:
            raise KdbertError(f"{where}: a train entry needs 'match' (a parameter-name pattern)")
        if layer is not None:
            pattern = pattern.replace("{l}", str(layer)).replace("{i}", str(layer - 1))
        if entry.get("below"):
            if layer is None:
                raise KdbertError(f"{where}: 'below' is only meaningful inside for_each_layer")
            groups += [ParamGroup(pattern.replace("{j}", str(j)), scale) for j in range(layer - 1)]
        else:
            groups.append(ParamGroup(pattern, scale))
    return tuple(groups)


def stages_from_data(plan: list, config, ctx, layer_map: LayerMap | None, student_depth: int) -> list[Stage]:
    """The stages of a YAML stage plan (module docstring); option defaults from ``config``."""
    if not isinstance(plan, list) or not plan:
        raise KdbertError("stages: expected a non-empty list of stages")
    stages = []
    for index, data in enumerate(plan):
        where = f"stages[{index}]"
        if not isinstance(data, dict):
            raise KdbertError(f"{where}: expected a mapping, got {data!r}")
        unknown = set(data) - STAGE_KEYS
        if unknown:
            raise KdbertError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                              f"use {', '.join(sorted(STAGE_KEYS))}")
        layers = range(1, student_depth + 1) if data.get("for_each_layer") else [None]
        for layer in layers:
            name = str(data.get("name", f"stage{index}")).replace("{l}", str(layer))
            matches = [m for i, entry in enumerate(data.get("matches") or [])
                       for m in match_from_data(entry, layer_map, layer, f"{where}.matches[{i}]")]
            settings = {k: data[k] for k in ("learning_rate", "schedule", "epochs", "max_steps", "warmup_ratio",
                                              "weight_decay", "batch_size", "grad_accum", "evaluate", "eval_every",
                                              "max_grad_norm") if k in data}
            stages.append(task_stage(name, config, matches, ctx, train=_train_groups(data.get("train"), layer, where),
                                     **settings))
    return stages
