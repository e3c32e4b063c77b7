"""Honest selection: ``--held-out-fraction`` holds out the same training rows for every run, the
evaluator scores them apart, and the trainer keeps the checkpoint they pick, not dev's."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import save_tiny_classifier, write_glue_task
from transformers import BertForSequenceClassification

from kdbert.cli import main
from kdbert.core.evaluate import TaskEvaluator, held_out_loss, predict, selection_key, to_predictions
from kdbert.core.matching import Match, MatchLoss
from kdbert.core.trainer import RunConfig, Stage, StageConfig, Trainer
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.glue import TaskData
from kdbert.data.load import TaskOptions, hold_out, load_task
from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError
from kdbert.options import build_config


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    root = tmp_path_factory.mktemp("held-out")
    write_glue_task(root, "RTE", n_train=40, n_dev=12)
    return root


def test_the_same_rows_are_held_out_whatever_the_seed(glue):
    full = load_task(TaskOptions("rte", data_dir=str(glue)))
    runs = [load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.25), seed=seed) for seed in (1, 2)]
    assert [ex.texts for ex in runs[0].held_out] == [ex.texts for ex in runs[1].held_out]
    data = runs[0]
    assert (len(data.held_out), len(data.train)) == (10, 30)  # round(0.25 * 40)
    assert sorted(ex.texts for ex in data.train + data.held_out) == sorted(ex.texts for ex in full.train)
    assert data.dev == full.dev


def test_bad_held_out_settings_are_one_line_errors(glue):
    with pytest.raises(KdbertError, match=r"--held-out-fraction must be a share of the training rows in \[0, 0.5\]"):
        build_config(TaskOptions, {"task": "rte", "held_out_fraction": 0.7}).check()
    one_row = load_task(TaskOptions("rte", data_dir=str(glue)))
    with pytest.raises(KdbertError, match="--held-out-fraction 0.1 leaves no training rows of 1; lower it"):
        hold_out(TaskData(one_row.spec, one_row.train[:1], one_row.dev), 0.1)
    with pytest.raises(KdbertError, match="--held-out-fraction with --train-file would train on augmented copies"):
        load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.2, train_file="aug.tsv"))


def test_evaluator_scores_held_out_rows_apart_from_dev(glue, tiny_tokenizer, tmp_path):
    data = load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.25))
    model = BertForSequenceClassification.from_pretrained(save_tiny_classifier(tmp_path / "m", tiny_tokenizer))
    metrics = TaskEvaluator(data, tiny_tokenizer, 64)(model)
    rows = encode_examples(tiny_tokenizer, data.held_out, 64)
    logits = predict(model, rows, PaddingCollator(tiny_tokenizer.pad_token_id))
    labels = np.array([ex.label for ex in data.held_out])
    accuracy = 100.0 * float(np.mean(to_predictions(data.spec, logits) == labels))
    assert metrics["held-out/accuracy"] == pytest.approx(accuracy) == pytest.approx(metrics["selection_score"])
    cross_entropy = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels)).item()
    assert metrics["held-out/loss"] == metrics["selection_loss"] == pytest.approx(cross_entropy, rel=1e-5)
    assert set(metrics) == {"accuracy", "score", "held-out/accuracy", "held-out/loss", "selection_score",
                            "selection_loss"}


def test_held_out_loss_is_the_mean_cross_entropy_or_squared_error():
    # row 1: log(e^0 + e^0) - 0 = ln 2; row 2: log(e^ln3 + e^0) - ln 3 = ln 4 - ln 3 = ln(4/3)
    logits = np.array([[0.0, 0.0], [math.log(3.0), 0.0]], dtype=np.float32)
    assert held_out_loss(GLUE_TASKS["cola"], logits, np.array([0, 0])) == \
        pytest.approx((math.log(2.0) + math.log(4.0 / 3.0)) / 2)
    # label 1 of [1000, 0]: log(e^1000 + 1) - 0 = 1000 + log(1 + e^-1000) = 1000, without overflow
    assert held_out_loss(GLUE_TASKS["cola"], np.array([[1000.0, 0.0]]), np.array([1])) == pytest.approx(1000.0)
    # regression: ((1 - 1.5)^2 + (2.5 - 2.5)^2 + (4 - 3)^2) / 3 = (0.25 + 0 + 1) / 3
    assert held_out_loss(GLUE_TASKS["stsb"], np.array([[1.0], [2.5], [4.0]]), np.array([1.5, 2.5, 3.0])) == \
        pytest.approx(1.25 / 3)


def train_with_scripted_evaluations(glue, tiny_tokenizer, tmp_path, scripted, steps: int) -> dict:
    """A tiny classifier trained ``steps`` steps on RTE, evaluated after each step by the next of
    ``scripted``'s metrics; the trainer's report."""
    data = load_task(TaskOptions("rte", data_dir=str(glue)))
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(save_tiny_classifier(tmp_path / "m", tiny_tokenizer))
    stage = Stage(StageConfig("labels", max_steps=steps, batch_size=4, eval_every=1),
                  MatchLoss([Match("hard", "logits", "hard_label", target="labels")]),
                  encode_examples(tiny_tokenizer, data.train, 64))
    return Trainer({"student": model}, [stage], RunConfig(str(tmp_path / "run"), progress=False, log_every=1),
                   PaddingCollator(tiny_tokenizer.pad_token_id), evaluator=lambda student: next(scripted)).train()


def test_trainer_keeps_the_checkpoint_the_held_out_rows_pick(glue, tiny_tokenizer, tmp_path):
    scripted = iter([{"score": 90.0, "selection_score": 50.0}, {"score": 60.0, "selection_score": 70.0},
                     {"score": 80.0, "selection_score": 60.0}])
    report = train_with_scripted_evaluations(glue, tiny_tokenizer, tmp_path, scripted, steps=3)
    assert (report["best_metrics"], report["best_step"]) == ({"score": 60.0, "selection_score": 70.0}, 2)


def test_trainer_breaks_a_tied_held_out_score_by_the_lower_held_out_loss(glue, tiny_tokenizer, tmp_path):
    # every held-out score 0 (MCC of the majority class): the lower loss wins, an evaluation without one (a run
    # resumed from before losses were kept) loses to any with one, and an equal loss keeps the first
    scripted = iter([{"score": 90.0, "selection_score": 0.0},
                     {"score": 60.0, "selection_score": 0.0, "selection_loss": 0.6},
                     {"score": 50.0, "selection_score": 0.0, "selection_loss": 0.5},
                     {"score": 80.0, "selection_score": 0.0, "selection_loss": 0.5}])
    report = train_with_scripted_evaluations(glue, tiny_tokenizer, tmp_path, scripted, steps=4)
    assert (report["best_metrics"]["score"], report["best_step"]) == (50.0, 3)


def test_finetune_cli_selects_on_held_out_rows_and_resume_checks_the_fraction(glue, tiny_tokenizer, tmp_path,
                                                                              capsys):
    model = save_tiny_classifier(tmp_path / "m", tiny_tokenizer)
    args = ["finetune", "--model", str(model), "--task", "rte", "--data-dir", str(glue), "--max-steps", "4",
            "--batch-size", "8", "--eval-every", "2", "--no-progress", "--output-dir", str(tmp_path / "run")]
    assert main([*args, "--held-out-fraction", "0.25"]) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    history = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    evals = [record["eval"] for record in history if "eval" in record]
    assert len(evals) == 2 and metrics == max(evals, key=selection_key)
    capsys.readouterr()
    assert main([*args, "--held-out-fraction", "0.1", "--resume"]) == 2
    assert "held_out_fraction" in capsys.readouterr().err
