"""Pausing a run at an optimiser step and continuing it later: a run paused at step k and continued
to step n ends with the weights of one run straight to n."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from kdbert.core.checkpoints import latest_checkpoint
from kdbert.core.trainer import RunConfig, Stage, StageConfig, Trainer
from kdbert.data.batching import EncodedDataset, PaddingCollator
from kdbert.errors import KdbertError


# ----------------------------------------------------------------------------- the trainer
def _toy_stage(name: str, max_steps: int, **config) -> Stage:
    features = [{"input_ids": [2, 5 + i % 7, 3 + i % 3], "labels": i % 2} for i in range(10)]
    return Stage(StageConfig(name, batch_size=4, max_steps=max_steps, learning_rate=1e-2, **config), _loss,
                 EncodedDataset(features))


def _loss(parts, frozen, batch):
    logits = parts["student"](input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return {"ce": torch.nn.functional.cross_entropy(logits, batch["labels"])}


def _evaluator(student):
    return {"score": float(student.classifier.weight.sum())}


def _toy_run(out: Path, resume: bool = False, **run) -> tuple[Trainer, dict]:
    """Two stages (4 then 6 steps, evaluated every 3; dropout draws on the random state), one
    optimiser step a batch of 4 of 10 rows, so the epochs end mid-stage."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=8, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    stages = [_toy_stage("first", 4, schedule="constant", evaluate=False), _toy_stage("second", 6, eval_every=3)]
    trainer = Trainer({"student": BertForSequenceClassification(config)}, stages,
                      RunConfig(str(out), progress=False, log_every=1, **run), PaddingCollator(0),
                      evaluator=_evaluator)
    return trainer, trainer.train(resume=resume)


def _steps_logged(out: Path) -> list[tuple]:
    """(stage, step, lr, loss) of every training step in the run's log."""
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [(r["stage"], r["step"], r["lr"], r["loss"]) for r in records if "loss" in r]


def assert_same_weights(a: dict, b: dict) -> None:
    """Resumed runs replay the same float32 operations on CPU (tests/test_kill_resume.py)."""
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)


def test_a_run_paused_twice_and_continued_ends_as_one_run_straight_through(tmp_path):
    straight, _ = _toy_run(tmp_path / "straight")
    # mid-stage off the evaluation steps, then at the first stage's end: step 4 over all stages
    _, first = _toy_run(tmp_path / "paused", pause_at_step=2)
    _, second = _toy_run(tmp_path / "paused", resume=True, pause_at_step=4)
    continued, last = _toy_run(tmp_path / "paused", resume=True)
    assert (first["paused_at_step"], second["paused_at_step"], last["paused_at_step"]) == (2, 4, None)
    assert first["stopped_early"] is None and last["stopped_early"] is None
    assert_same_weights(straight.student.state_dict(), continued.student.state_dict())
    # the same learning rates (each stage's schedule kept its length), batches and dropout, step by step
    assert _steps_logged(tmp_path / "paused") == _steps_logged(tmp_path / "straight")
    # each pause was evaluated, the later evaluations are those of the straight run
    assert [(r["stage"], r["step"]) for r in last["history"]] == [("first", 2), ("first", 4), ("second", 3),
                                                                  ("second", 6)]
    assert last["history"][2:] == straight.state["history"]


def test_a_paused_run_is_scored_saved_and_loadable_where_it_paused(tmp_path):
    trainer, report = _toy_run(tmp_path, pause_at_step=6)
    assert report["paused_at_step"] == 6 and (report["best_stage"], report["best_step"]) == ("second", 2)
    assert [(r["stage"], r["step"]) for r in report["history"]] == [("second", 2)]
    assert json.loads((tmp_path / "train_report.json").read_text())["paused_at_step"] == 6
    checkpoint, state = latest_checkpoint(tmp_path / "checkpoints")
    assert (checkpoint.name, state["history"]) == ("checkpoint-s1-0000002", report["history"])
    saved = BertForSequenceClassification.from_pretrained(tmp_path)
    assert_same_weights(saved.state_dict(), trainer.student.state_dict())


def test_resumed_at_its_pause_a_run_trains_nothing_more_and_a_pause_behind_it_is_refused(tmp_path):
    _, report = _toy_run(tmp_path, pause_at_step=5)
    log = (tmp_path / "log.jsonl").read_text()
    _, again = _toy_run(tmp_path, resume=True, pause_at_step=5)
    assert again["paused_at_step"] == 5 and again["history"] == report["history"]
    assert (tmp_path / "log.jsonl").read_text() == log
    with pytest.raises(KdbertError, match=r"has trained 5 steps, past the pause at step 3; continue it with a "
                                          r"later pause or none"):
        _toy_run(tmp_path, resume=True, pause_at_step=3)
    with pytest.raises(KdbertError, match="pause_at_step 0: pause after a positive number of optimiser steps"):
        _toy_run(tmp_path / "zero", pause_at_step=0)


def test_a_deadline_or_a_pause_whichever_comes_first_stops_the_run(tmp_path):
    _, deadline_first = _toy_run(tmp_path / "deadline", deadline=0.0, pause_at_step=3)
    assert (deadline_first["stopped_early"]["steps_run"], deadline_first["paused_at_step"]) == (1, None)
    _, pause_first = _toy_run(tmp_path / "pause", deadline=1e12, pause_at_step=3)
    assert (pause_first["stopped_early"], pause_first["paused_at_step"]) == (None, 3)
    _, at_the_end = _toy_run(tmp_path / "end", pause_at_step=10)  # the last step: the run finishes
    assert at_the_end["paused_at_step"] is None
    assert [(r["stage"], r["step"]) for r in at_the_end["history"]] == [("second", 3), ("second", 6)]
