"""What a sequence classifier's head reads: the first token ([CLS], the default) or the masked mean
of the last hidden states, as sentence-transformers models such as all-MiniLM-L6-v2 were trained.

The choice lives in the model's ``config.json`` (``kdbert_pooling: "mean"``; absent: ``cls``), so a
saved model pools the same way wherever kdbert loads or builds it: every load and build point calls
:func:`apply_pooling` (or :func:`pool_like_folder` where a folder gets a new head), which puts a
forward hook on the model's base model. The hook reads the config at each call, so
:func:`set_pooling` switches a built model either way; ONNX exports trace it like any forward.
Question-answering models read every token and are left alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from kdbert.errors import KdbertError

POOLING_KEY = "kdbert_pooling"
POOLINGS = ("cls", "mean")
MEAN_POOLED_TYPES = ("bert", "roberta", "xlm-roberta", "electra", "mpnet", "distilbert", "mobilebert")
"""Model types whose sequence-classification head reads the first token (BERT and MobileBERT through
their pooler output), which the mean can replace."""


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """pooled_b = sum_t m_bt h_bt / max(1, sum_t m_bt): hidden (B, L, H), attention mask m (B, L) -> (B, H)."""
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


def pooling_of(config) -> str:
    """The pooling ``config`` records (``cls`` when it records none); an unknown value is refused."""
    pooling = getattr(config, POOLING_KEY, None) or "cls"
    if pooling not in POOLINGS:
        raise KdbertError(f"config.json has {POOLING_KEY} {pooling!r}; use one of {', '.join(POOLINGS)}")
    return pooling


def _mean_pool(base: nn.Module, args: tuple, kwargs: dict, output):
    """Forward hook on a classifier's base model: under mean pooling, what the head reads of the first
    token becomes the masked mean of ``last_hidden_state``: the pooler output where the base model
    has a pooler (BERT, MobileBERT: the classifier reads the mean directly, no dense + tanh), else
    the first position of ``last_hidden_state`` (RoBERTa, XLM-R, ELECTRA, MPNet, DistilBERT heads)."""
    if pooling_of(base.config) != "mean":
        return None
    hidden = output.last_hidden_state
    mask = kwargs.get("attention_mask")  # transformers' heads pass it by name; None: every token is real
    pooled = masked_mean(hidden, torch.ones(hidden.shape[:2], device=hidden.device) if mask is None else mask)
    if getattr(output, "pooler_output", None) is not None:
        output.pooler_output = pooled
    else:
        output.last_hidden_state = torch.cat([pooled.unsqueeze(1), hidden[:, 1:]], dim=1)
    return output


def _is_sequence_classifier(model: nn.Module) -> bool:
    return type(model).__name__.endswith("ForSequenceClassification")


def apply_pooling(model: nn.Module) -> nn.Module:
    """Make ``model`` pool as its config records (a no-op for ``cls`` and for models other than
    sequence classifiers; idempotent); returns it. Mean pooling of an architecture whose head does
    not read the first token is refused."""
    if not _is_sequence_classifier(model) or pooling_of(model.config) != "mean":
        return model
    if model.config.model_type not in MEAN_POOLED_TYPES:
        raise KdbertError(f"mean pooling is offered for {', '.join(MEAN_POOLED_TYPES)} classifiers, not "
                          f"{model.config.model_type}; use --pooling cls")
    base = model.base_model
    if not any(hook is _mean_pool for hook in base._forward_hooks.values()):
        base.register_forward_hook(_mean_pool, with_kwargs=True)
    return model


def set_pooling(model: nn.Module, pooling: str) -> nn.Module:
    """Record ``pooling`` (``cls``: no record) in ``model``'s config and apply it; returns ``model``."""
    if pooling == "mean":
        setattr(model.config, POOLING_KEY, "mean")
    elif hasattr(model.config, POOLING_KEY):
        delattr(model.config, POOLING_KEY)
    return apply_pooling(model)


def inherit_pooling(config, source_config):
    """``config`` with the pooling ``source_config`` (None: none) records, for a student built from a
    teacher; returns it."""
    if pooling_of(source_config) == "mean":
        setattr(config, POOLING_KEY, "mean")
    return config


def _sentence_transformers_pooling(folder: Path) -> Path | None:
    """The config of a sentence-transformers folder's Pooling module (``modules.json`` names its folder,
    by default ``1_Pooling``), None where there is none."""
    modules = folder / "modules.json"
    try:
        listed = json.loads(modules.read_text()) if modules.is_file() else []
    except (OSError, ValueError) as err:
        raise KdbertError(f"could not read {modules}: {err}") from None
    paths = [module.get("path", "") for module in listed if str(module.get("type", "")).endswith(".Pooling")]
    config = folder / (paths[0] if paths else "1_Pooling") / "config.json"
    return config if config.is_file() else None


def choose_pooling(requested: str | None, path: str, config) -> tuple[str, str]:
    """The pooling of a model loaded from ``path`` (its ``config`` as saved) to train a head on, and
    why: ``requested`` (``cls`` / ``mean``); else (``None`` / ``auto``) what ``config`` records (a model
    kdbert fine-tuned keeps its pooling); else ``mean`` where the folder's sentence-transformers Pooling
    module pools by mean tokens alone and kdbert can mean-pool the architecture; else ``cls``."""
    if requested in POOLINGS:
        return requested, f"--pooling {requested}"
    if getattr(config, POOLING_KEY, None) is not None:
        return pooling_of(config), f"{path} records {POOLING_KEY} {pooling_of(config)} in its config.json"
    file = _sentence_transformers_pooling(Path(path)) if Path(path).is_dir() else None
    if file is None:
        return "cls", f"{path} has no sentence-transformers pooling config"
    try:
        modes = sorted(key for key, value in json.loads(file.read_text()).items()
                       if key.startswith("pooling_mode_") and value is True)
    except (OSError, ValueError, AttributeError) as err:
        raise KdbertError(f"could not read {file}: {err}") from None
    if modes != ["pooling_mode_mean_tokens"]:
        return "cls", f"{file} pools by {', '.join(modes) or 'nothing'}, not mean tokens alone"
    if getattr(config, "model_type", None) not in MEAN_POOLED_TYPES:
        return "cls", f"{file} pools by mean tokens, which kdbert offers for {', '.join(MEAN_POOLED_TYPES)} only"
    return "mean", f"{file} pools by mean tokens"


def pool_like_folder(model: nn.Module, path: str) -> nn.Module:
    """``model``, loaded from ``path`` (its config as saved) for a new head, pooling as
    :func:`choose_pooling` decides without a request; returns it."""
    return set_pooling(model, choose_pooling(None, path, model.config)[0])
