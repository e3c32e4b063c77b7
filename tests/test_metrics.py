"""GLUE metrics against hand-computed values."""

import math

import numpy as np
import pytest

from kdbert.core.metrics import compute_metric, compute_metrics, task_score


def test_accuracy_and_binary_f1():
    predictions, references = [1, 0, 1, 1, 0], [1, 0, 0, 1, 1]
    assert compute_metric("accuracy", predictions, references) == pytest.approx(60.0)
    # positive class: tp=2, fp=1, fn=1 -> precision 2/3, recall 2/3, F1 2/3
    assert compute_metric("f1", predictions, references) == pytest.approx(200 / 3)


def test_matthews_correlation():
    predictions, references = [1, 0, 1, 1, 0], [1, 0, 0, 1, 1]
    tp, tn, fp, fn = 2, 1, 1, 1
    expected = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert compute_metric("mcc", predictions, references) == pytest.approx(100 * expected)


def test_macro_f1_averages_per_class_f1():
    predictions, references = [0, 1, 2, 2], [0, 1, 1, 2]
    # class 0: F1 1; class 1: p=1, r=1/2 -> 2/3; class 2: p=1/2, r=1 -> 2/3
    assert compute_metric("macro_f1", predictions, references) == pytest.approx(100 * (1 + 2 / 3 + 2 / 3) / 3)


def test_pearson_and_spearman():
    predictions, references = [1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]
    mean = 2.5
    cov = sum((p - mean) * (r - mean) for p, r in zip(predictions, references))
    var = sum((p - mean) ** 2 for p in predictions)
    assert compute_metric("pearson", predictions, references) == pytest.approx(100 * cov / var)
    # ranks equal the values here, so Spearman equals Pearson
    assert compute_metric("spearman", predictions, references) == pytest.approx(100 * cov / var)
    assert compute_metric("pearson", [1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0
    # a constant whose float std is not exactly 0 (a collapsed regressor predicting the mean) still scores 0
    mean_score = sum([0.1, 0.7, 2.9]) / 3
    assert compute_metric("spearman", [mean_score] * 1500, [float(i % 5) for i in range(1500)]) == 0.0


def test_task_score():
    mrpc = compute_metrics(("accuracy", "f1"), [1, 0, 1, 1, 0], [1, 0, 0, 1, 1])
    assert task_score(mrpc, ("accuracy", "f1"), ("dev",)) == pytest.approx((60 + 200 / 3) / 2)
    mnli = {"dev_matched/accuracy": 80.0, "dev_mismatched/accuracy": 70.0}
    assert task_score(mnli, ("accuracy",), ("dev_matched", "dev_mismatched")) == 75.0


def test_agreement_is_the_share_of_same_classes_or_the_correlation_of_scores():
    from kdbert.core.evaluate import agreement
    from kdbert.data.tasks import GLUE_TASKS

    student = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]])
    teacher = np.array([[0.1, 0.9], [0.4, 0.6], [0.7, 0.3], [0.0, 1.0]])
    assert agreement(GLUE_TASKS["sst2"], student, teacher) == 75.0  # rows 2-4 agree
    # STS-B: Pearson of (1, 2, 4) with (2, 3, 3): deviations (-4, -1, 5)/3 and (-2, 1, 1)/3, so
    # r = 12 / sqrt(42 * 6) = 0.755929
    scores = agreement(GLUE_TASKS["stsb"], np.array([[1.0], [2.0], [4.0]]), np.array([[2.0], [3.0], [3.0]]))
    assert scores == pytest.approx(100 * 0.755929, abs=1e-4)
