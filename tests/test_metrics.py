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


def _resampling_cases():
    """(metric, predictions, references) with ties, three classes and degenerate resamples."""
    rng = np.random.default_rng(7)
    binary_ref = rng.integers(0, 2, 60)
    binary_pred = np.where(rng.random(60) < 0.7, binary_ref, 1 - binary_ref)
    three_ref = rng.integers(0, 3, 60)
    three_pred = np.where(rng.random(60) < 0.6, three_ref, rng.integers(0, 3, 60))
    scores = np.round(rng.random(60) * 5, 1)  # many ties
    predicted_scores = np.round(scores + rng.normal(0, 1, 60), 1)
    cases = {"accuracy": ("accuracy", binary_pred, binary_ref), "accuracy-3": ("accuracy", three_pred, three_ref),
             "f1": ("f1", binary_pred, binary_ref), "macro_f1-3": ("macro_f1", three_pred, three_ref),
             "macro_f1-2": ("macro_f1", binary_pred, binary_ref), "mcc": ("mcc", binary_pred, binary_ref),
             "mcc-3": ("mcc", three_pred, three_ref), "pearson": ("pearson", predicted_scores, scores),
             "spearman": ("spearman", predicted_scores, scores)}
    return [pytest.param(*case, id=name) for name, case in cases.items()]


@pytest.mark.filterwarnings("ignore:A single label was found")  # scikit-learn on one-class resamples
@pytest.mark.parametrize("name, predictions, references", _resampling_cases())
def test_each_resampled_metric_equals_compute_metric_on_the_resampled_rows(name, predictions, references):
    from kdbert.core.metrics import bootstrap_indices, resampled_metric

    random_rows = bootstrap_indices(len(predictions), 6, seed=3)
    negatives, positives = np.flatnonzero(references == 0), np.flatnonzero(references == references.max())
    constant_prediction = np.flatnonzero(predictions == predictions[0])
    degenerate = [np.zeros(60, dtype=int),  # one row repeated: one class, both sides constant
                  np.resize(negatives, 60),  # references all of one class
                  np.resize(positives, 60),
                  np.resize(constant_prediction, 60),  # constant predictions, references varying
                  np.resize(np.flatnonzero(predictions != references), 60),  # every row wrong
                  np.resize(np.arange(2), 60)]  # two distinct rows
    indices = np.vstack([random_rows, *degenerate])
    values = resampled_metric(name, predictions, references, indices)
    for rows, value in zip(indices, values):
        assert value == pytest.approx(compute_metric(name, predictions[rows], references[rows]), rel=1e-9, abs=1e-12)


def test_resampled_ranks_are_scipys_average_tie_ranks():
    from scipy.stats import rankdata

    from kdbert.core.metrics import _resampled_ranks, bootstrap_indices

    values = np.array([3.0, 1.0, 2.0, 2.0, 5.0, 1.0, 4.0, 2.0])
    indices = bootstrap_indices(len(values), 50, seed=1)
    assert np.array_equal(_resampled_ranks(values, indices), rankdata(values[indices], axis=1))


def test_bootstrap_standard_error_of_accuracy_approaches_the_binomial():
    from kdbert.core.metrics import bootstrap_standard_error

    # 320 of 400 right: the bootstrap distribution of accuracy is Binomial(400, 0.8) / 400, whose
    # standard deviation is 100 * sqrt(0.8 * 0.2 / 400) = 2.0 points
    references = np.ones(400, dtype=int)
    predictions = np.r_[np.ones(320, dtype=int), np.zeros(80, dtype=int)]
    resamples, exact = 4000, 2.0
    tolerance = 4 * exact * math.sqrt(1 / (2 * (resamples - 1)))  # 4 Monte-Carlo SDs of an SD estimate: 0.089
    se = bootstrap_standard_error(("accuracy",), predictions, references, resamples=resamples)
    assert se == pytest.approx(exact, abs=tolerance)


def test_bootstrap_standard_error_of_two_rows_by_hand():
    from kdbert.core.metrics import bootstrap_standard_error

    # one row right and one wrong: a resample's accuracy is 0, 50 or 100 with probabilities
    # 1/4, 1/2, 1/4, mean 50, so the bootstrap SD is sqrt(2 * 50^2 / 4) = sqrt(1250) = 35.36
    resamples, exact = 20000, math.sqrt(1250)
    tolerance = 4 * exact * math.sqrt(1 / (2 * (resamples - 1)))  # 1.0
    se = bootstrap_standard_error(("accuracy",), [1, 0], [1, 1], resamples=resamples)
    assert se == pytest.approx(exact, abs=tolerance)
    # every row right: every resample scores 100, no spread (with a negative row in the data, a
    # resample of negatives only would have F1 0 and accuracy 100)
    assert bootstrap_standard_error(("accuracy", "f1"), [1, 1, 1], [1, 1, 1]) == 0.0
    assert bootstrap_standard_error(("accuracy",), [1, 0, 1], [1, 0, 1]) == 0.0


def test_bootstrap_standard_error_is_deterministic_per_seed():
    from kdbert.core.metrics import bootstrap_standard_error

    rng = np.random.default_rng(0)
    references = rng.integers(0, 2, 300)
    predictions = np.where(rng.random(300) < 0.75, references, 1 - references)
    first = bootstrap_standard_error(("mcc",), predictions, references, resamples=200, seed=5)
    assert bootstrap_standard_error(("mcc",), predictions, references, resamples=200, seed=5) == first
    assert bootstrap_standard_error(("mcc",), predictions, references, resamples=200, seed=6) != first


def test_bootstrap_standard_error_of_two_metrics_is_that_of_their_mean():
    from kdbert.core.metrics import bootstrap_indices, bootstrap_standard_error, resampled_metric

    rng = np.random.default_rng(0)
    references = rng.integers(0, 2, 300)
    predictions = np.where(rng.random(300) < 0.75, references, 1 - references)
    indices = bootstrap_indices(300, 500, seed=2)
    accuracy = resampled_metric("accuracy", predictions, references, indices)
    f1 = resampled_metric("f1", predictions, references, indices)
    se = bootstrap_standard_error(("accuracy", "f1"), predictions, references, resamples=500, seed=2)
    assert se == pytest.approx(np.std((accuracy + f1) / 2, ddof=1), rel=1e-12)
    # accuracy and F1 move together, so the mean's SE is near, yet not, the mean of their SEs
    assert se != pytest.approx((np.std(accuracy, ddof=1) + np.std(f1, ddof=1)) / 2, rel=1e-6)
    assert se != pytest.approx(np.std(accuracy, ddof=1), rel=1e-6)
    # one metric alone is its own SE
    assert bootstrap_standard_error(("f1",), predictions, references, resamples=500, seed=2) == pytest.approx(
        np.std(f1, ddof=1), rel=1e-12)


def test_paired_bootstrap_standard_error_of_a_shortfall_by_hand():
    from kdbert.core.metrics import bootstrap_standard_error, paired_bootstrap_standard_error

    # 100 rows; the teacher right on 90, the student on 84 of those same 90. Per row the difference
    # d = s - 0.97 t is 0.03 (84 rows both right), -0.97 (6 rows only the teacher) or 0 (10 rows
    # both wrong): mean -0.033, E[d^2] = (84 * 0.0009 + 6 * 0.9409) / 100 = 0.05721, variance
    # 0.05721 - 0.033^2 = 0.056121, so the paired SE of the mean is 100 * sqrt(0.056121 / 100) = 2.369
    references = np.ones(100, dtype=int)
    teacher = np.r_[np.ones(90, dtype=int), np.zeros(10, dtype=int)]
    student = np.r_[np.ones(84, dtype=int), np.zeros(16, dtype=int)]
    resamples, exact = 4000, 100 * math.sqrt(0.056121 / 100)
    tolerance = 4 * exact * math.sqrt(1 / (2 * (resamples - 1)))  # 4 Monte-Carlo SDs of an SD estimate
    paired = paired_bootstrap_standard_error(("accuracy",), student, teacher, references, weight=0.97,
                                             resamples=resamples)
    assert paired == pytest.approx(exact, abs=tolerance)
    # scored apart, the two errors add: sqrt(3.67^2 + (0.97 * 3.0)^2) = 4.68, twice the paired one
    apart = math.hypot(bootstrap_standard_error(("accuracy",), student, references, resamples=resamples),
                       0.97 * bootstrap_standard_error(("accuracy",), teacher, references, resamples=resamples))
    assert apart == pytest.approx(math.hypot(100 * math.sqrt(0.84 * 0.16 / 100), 0.97 * 3.0), rel=0.05)
    assert paired < 0.6 * apart


def test_kept_standard_error_of_a_ratio_by_hand():
    from kdbert.core.metrics import bootstrap_standard_error, kept_standard_error

    references = np.ones(100, dtype=int)
    student = np.r_[np.ones(84, dtype=int), np.zeros(16, dtype=int)]
    always = np.ones(100, dtype=int)
    # a teacher right on every row scores 100 on every resample: kept is the student's score / 100
    assert kept_standard_error(("accuracy",), student, always, references, resamples=500, seed=4) == pytest.approx(
        bootstrap_standard_error(("accuracy",), student, references, resamples=500, seed=4) / 100, rel=1e-9)
    # the teacher right on 90 rows, the student on 84 of them: kept k = 84/90; per row d = s - k t is
    # 1 - k (84 rows), -k (6 rows) or 0 (10), mean 0, E[d^2] = (84 (1/15)^2 + 6 (14/15)^2) / 100 = 0.056;
    # by the delta method the ratio's SE is sqrt(0.056 / 100) / 0.9 = 0.02629
    teacher = np.r_[np.ones(90, dtype=int), np.zeros(10, dtype=int)]
    assert kept_standard_error(("accuracy",), student, teacher, references, resamples=4000) == pytest.approx(
        math.sqrt(0.056 / 100) / 0.9, rel=0.08)
    assert kept_standard_error(("accuracy",), teacher, teacher, references) == 0.0  # the same model keeps 100%
    assert kept_standard_error(("accuracy",), student, 0 * teacher, references) is None  # a share of 0: none
    with pytest.raises(ValueError, match="baseline"):
        kept_standard_error(("accuracy",), student, teacher[:-1], references)


def test_paired_bootstrap_standard_error_resamples_both_on_the_same_rows():
    from kdbert.core.metrics import bootstrap_standard_error, paired_bootstrap_standard_error

    rng = np.random.default_rng(0)
    references = rng.integers(0, 2, 300)
    predictions = np.where(rng.random(300) < 0.75, references, 1 - references)
    for metric in ("accuracy", "f1", "mcc"):
        # the same predictions on the same resamples: the difference is exactly 0, or (1 - w) times one SE
        assert paired_bootstrap_standard_error((metric,), predictions, predictions, references) == 0.0
        alone = bootstrap_standard_error((metric,), predictions, references, resamples=500, seed=3)
        assert paired_bootstrap_standard_error((metric,), predictions, predictions, references, weight=0.97,
                                               resamples=500, seed=3) == pytest.approx(0.03 * alone, rel=1e-9)
    scores = references + rng.normal(0, 0.5, 300)  # a correlation: the same holds
    assert paired_bootstrap_standard_error(("pearson",), scores, scores, references) == 0.0
    with pytest.raises(ValueError, match="baseline"):
        paired_bootstrap_standard_error(("accuracy",), predictions, predictions[:-1], references)


def test_bootstrap_standard_error_refuses_what_it_cannot_estimate():
    from kdbert.core.metrics import bootstrap_standard_error

    with pytest.raises(ValueError):
        bootstrap_standard_error(("accuracy",), [1, 0], [1, 1], resamples=1)
    with pytest.raises(ValueError):
        bootstrap_standard_error(("accuracy",), [], [])
    with pytest.raises(ValueError):
        bootstrap_standard_error(("f1",), [0, 1, 2], [0, 1, 2])  # binary F1 of three classes, as scikit-learn
    with pytest.raises(ValueError):
        bootstrap_standard_error(("bleu",), [0, 1], [0, 1])
