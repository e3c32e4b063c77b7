"""Pausing a run at an optimiser step and continuing it later: a run paused at step k and continued
to step n ends with the weights of one run straight to n, for the trainer and for every kind of
compress candidate (TinyBERT's prediction stage, logit-KD MobileBERT, the distilled BiLSTM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import save_tiny_classifier, write_glue_task
from safetensors.torch import load_file
from transformers import BertConfig, BertForSequenceClassification

from kdbert.compress import speed
from kdbert.compress.build import build_from_teacher
from kdbert.compress.recipes import SearchSettings, run_options, starts_from_teacher
from kdbert.core.checkpoints import latest_checkpoint
from kdbert.core.stages import Stage, StageConfig
from kdbert.core.trainer import RunConfig, Trainer
from kdbert.data.batching import EncodedDataset, PaddingCollator
from kdbert.data.load import TaskOptions, load_task
from kdbert.errors import KdbertError
from kdbert.families.registry import family_of_folder
from kdbert.methods.front import distill_task


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


def _toy_run(out: Path, resume: bool = False, schedule_free: bool = False, ema_decay: float | None = None,
             optimizer: str = "adamw", **run) -> tuple[Trainer, dict]:
    """Two stages (4 then 6 steps, evaluated every 3; dropout draws on the random state), one
    optimiser step a batch of 4 of 10 rows, so the epochs end mid-stage."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=8, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    optimiser = {"schedule_free": schedule_free, "ema_decay": ema_decay, "optimizer": optimizer}
    stages = [_toy_stage("first", 4, schedule="constant", evaluate=False, **optimiser),
              _toy_stage("second", 6, eval_every=3, **optimiser)]
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


@pytest.mark.parametrize("optimiser", [{}, {"schedule_free": True}, {"ema_decay": 0.9},
                                       {"ema_decay": 0.9, "optimizer": "adadelta"}],
                         ids=["adamw", "schedule-free", "ema", "adadelta-ema"])
def test_a_run_paused_twice_and_continued_ends_as_one_run_straight_through(tmp_path, optimiser):
    straight, _ = _toy_run(tmp_path / "straight", **optimiser)
    # mid-stage off the evaluation steps, then at the first stage's end: step 4 over all stages
    _, first = _toy_run(tmp_path / "paused", pause_at_step=2, **optimiser)
    _, second = _toy_run(tmp_path / "paused", resume=True, pause_at_step=4, **optimiser)
    continued, last = _toy_run(tmp_path / "paused", resume=True, **optimiser)
    assert (first["paused_at_step"], second["paused_at_step"], last["paused_at_step"]) == (2, 4, None)
    assert first["stopped_early"] is None and last["stopped_early"] is None
    assert_same_weights(straight.student.state_dict(), continued.student.state_dict())
    # the same learning rates (each stage's schedule kept its length), batches and dropout, step by step
    assert _steps_logged(tmp_path / "paused") == _steps_logged(tmp_path / "straight")
    # each pause was evaluated, the later evaluations are those of the straight run
    assert [(r["stage"], r["step"]) for r in last["history"]] == [("first", 2), ("first", 4), ("second", 3),
                                                                  ("second", 6)]
    # the same evaluations: a score sums the classifier's 16 weights, each equal to within 1e-6 (above)
    for got, expected in zip(last["history"][2:], straight.state["history"], strict=True):
        assert (got["stage"], got["step"]) == (expected["stage"], expected["step"])
        assert got["eval"]["score"] == pytest.approx(expected["eval"]["score"], rel=0, abs=16e-6)


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


def test_a_run_without_evaluation_continued_after_a_pause_saves_its_last_weights(tmp_path):
    """Nothing is evaluated (e.g. general distillation), so the root holds the final student, also
    after a resumed session, not the one the first session stopped with."""
    def run(out, resume=False, **settings):
        torch.manual_seed(0)
        config = BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=8)
        trainer = Trainer({"student": BertForSequenceClassification(config)},
                          [_toy_stage("only", 6, schedule="constant", evaluate=False)],
                          RunConfig(str(out), progress=False, **settings), PaddingCollator(0))
        trainer.train(resume=resume)
        return trainer

    run(tmp_path, pause_at_step=3)
    continued = run(tmp_path, resume=True)
    saved = BertForSequenceClassification.from_pretrained(tmp_path)
    assert_same_weights(saved.state_dict(), continued.student.state_dict())


def test_independent_models_are_clipped_each_alone(tmp_path):
    """Two copies of one model side by side, one of them fed inputs whose gradient is 100x larger:
    each steps as it would alone (global clipping would shrink the small one's step too)."""
    from kdbert.core.optim import IndependentModels

    def model():
        torch.manual_seed(0)
        return torch.nn.Linear(3, 1, bias=False)

    def loss(parts, frozen, batch):
        x = batch["x"].float()
        return {name: (part(x * scale).sum()) for (name, part), scale in zip(parts["student"].items(), (1.0, 100.0))}

    features = [{"x": [1.0, 2.0, 2.0]}]
    stage = Stage(StageConfig("only", max_steps=1, learning_rate=0.1, optimizer="adadelta", weight_decay=0.0,
                              schedule="constant", evaluate=False, batch_size=1, max_grad_norm=1.0), loss,
                  EncodedDataset(features))
    pair = IndependentModels({"small": model(), "large": model()})
    start = pair["small"].weight.detach().clone()
    Trainer({"student": pair}, [stage], RunConfig(str(tmp_path), progress=False, mixed_precision="no"),
            lambda rows: {"x": torch.tensor([r["x"] for r in rows])})._run_stage(0, stage, None)
    # gradient (1, 2, 2) (x 100), norm 3 (300), each clipped to norm 1: g = (1, 2, 2) / 3 for both
    # models; Adadelta's first step (rho 0.95, eps 1e-6) is lr * sqrt(eps) / sqrt(0.05 g^2 + eps) * g
    g = torch.tensor([[1.0, 2.0, 2.0]]) / 3
    step = 0.1 * (1e-6 ** 0.5) / torch.sqrt(0.05 * g ** 2 + 1e-6) * g
    torch.testing.assert_close(pair["small"].weight.detach(), start - step)
    torch.testing.assert_close(pair["large"].weight.detach(), start - step)


# ----------------------------------------------------------------------------- compress candidates
STEPS, PAUSE = 10, 3  # evaluated at 5 and 10 (run_options: half-way and at the end); paused in between
SETTINGS = SearchSettings(batch_size=4)


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("continue")
    write_glue_task(root / "glue", "SST-2", n_train=120, n_dev=8)
    teacher = save_tiny_classifier(root / "teacher", tiny_tokenizer, hidden_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=256)
    task = TaskOptions("sst2", data_dir=str(root / "glue"), held_out_fraction=0.25)
    context = speed.shape_context(teacher, task)
    return {"root": root, "teacher": teacher, "task": task, "context": context,
            "candidates": {c.name: c for c in speed.all_candidates(context)}}


def candidate_options(env, name: str, steps: int) -> dict:
    """The options compress gives ``name``'s run (as ``search.distil_segment`` does), set up for ``steps`` steps."""
    candidate = env["candidates"][name]
    caches = env["root"] / "caches"
    options = {**run_options(candidate, steps, SETTINGS, str(caches / "teacher-cache")), "teacher": str(env["teacher"])}
    if starts_from_teacher(candidate):
        start = env["root"] / "starts" / name
        if not (start / "config.json").is_file():
            build_from_teacher(candidate, env["teacher"], env["task"], start, env["context"])
        options["student"] = str(start)
    else:
        options["logits_cache"] = str(caches / "teacher-logits")
    return options


@pytest.mark.parametrize("name", ["bert-1x128", "mobilebert-2x128", "bilstm-h150"])
def test_a_compress_candidate_paused_and_continued_ends_as_one_run_straight_through(env, tmp_path, name):
    options = candidate_options(env, name, STEPS)
    straight = distill_task(env["task"], options, str(tmp_path / "straight"))
    out = tmp_path / "paused"
    paused = distill_task(env["task"], options, str(out), pause_at_step=PAUSE)
    assert (paused["paused_at_step"], paused["stopped_early"]) == (PAUSE, None)
    assert paused["eval_history"][-1]["step"] == PAUSE and paused["dev_metrics"] == paused["eval_history"][-1]["eval"]
    # the run folder holds a student that loads and scores as at the pause (what compress ships)
    data = load_task(env["task"])
    family = family_of_folder(out)
    model, encoder = family.load(out, data.spec)
    assert family.evaluator(data, encoder, None, 8)(model) == pytest.approx(paused["dev_metrics"])

    with pytest.raises(KdbertError, match=r"--resume: .* holds a run with different settings \(.*max_steps"):
        distill_task(env["task"], candidate_options(env, name, STEPS + 2), str(out), resume=True)
    continued = distill_task(env["task"], options, str(out), resume=True)
    assert continued["paused_at_step"] is None
    assert_same_weights(*(load_file(latest_checkpoint(run / "checkpoints")[0] / "modules.safetensors")
                          for run in (tmp_path / "straight", out)))
    # the straight run's evaluations, and the pause's between them
    assert [r for r in continued["eval_history"] if r["step"] != PAUSE] == straight["eval_history"]
