"""GLUE metrics, exactly as GLUE defines them, computed with scikit-learn and scipy.

- ``mcc``: Matthews correlation (CoLA)
- ``accuracy``: SST-2, QNLI, RTE, WNLI, MNLI (matched and mismatched separately), MRPC, QQP
- ``f1``: binary F1 of the positive class (MRPC, QQP)
- ``macro_f1``: unweighted mean of per-class F1 (users' classification data)
- ``pearson`` / ``spearman``: STS-B and users' regression data

A task's *score* is the mean of its metrics (MNLI: over both dev splits); Metrics are reported in percent (x100), as in the papers.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef


def compute_metric(name: str, predictions, references) -> float:
    """One metric in percent. Classification: ``predictions`` are class ids; regression: floats."""
    predictions = np.asarray(predictions)
    references = np.asarray(references)
    if name == "accuracy":
        value = accuracy_score(references, predictions)
    elif name == "f1":
        value = f1_score(references, predictions, pos_label=1, average="binary", zero_division=0)
    elif name == "macro_f1":
        value = f1_score(references, predictions, average="macro", zero_division=0)
    elif name == "mcc":
        value = matthews_corrcoef(references, predictions)
    elif name in ("pearson", "spearman"):
        if np.ptp(predictions) == 0 or np.ptp(references) == 0:
            return 0.0  # correlation is undefined for a constant; score it as no correlation
        value = (pearsonr if name == "pearson" else spearmanr)(predictions, references)[0]
    else:
        raise ValueError(f"unknown metric {name}")
    return float(value) * 100.0


def compute_metrics(metric_names, predictions, references, prefix: str = "") -> dict[str, float]:
    """All of a split's metrics, keyed ``prefix + name``."""
    return {prefix + name: compute_metric(name, predictions, references) for name in metric_names}


def task_score(metrics: dict[str, float], metric_names, dev_splits) -> float:
    """Mean of a task's metrics over its dev splits (keys as written by :func:`split_prefix`)."""
    values = [metrics[split_prefix(split, dev_splits) + name] for split in dev_splits for name in metric_names]
    return float(np.mean(values))


def split_prefix(split: str, dev_splits) -> str:
    """Key prefix for a split's metrics: none for a single dev split, 'dev_matched/' for MNLI's."""
    return "" if len(dev_splits) == 1 else f"{split}/"
