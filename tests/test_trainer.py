"""The shared trainer: NaN stop, checkpoints, output-dir safety (resume after a kill: test_kill_resume)."""

from __future__ import annotations

import json
import time

import pytest
import torch
from safetensors.torch import load_file
from transformers import BertConfig, BertForSequenceClassification

from kdbert.data.batching import EncodedDataset, PaddingCollator
from kdbert.errors import KdbertError
from kdbert.core.run_folder import prepare_output_dir
from kdbert.core.stages import Stage, StageConfig
from kdbert.core.trainer import RunConfig, Trainer


def _toy_stage(loss_fn, n=12, **config):
    features = [{"input_ids": [2, 5 + i % 7, 3], "labels": i % 2} for i in range(n)]
    return Stage(StageConfig("toy", **config), loss_fn, EncodedDataset(features))


def _linear_modules():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=8, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return {"student": BertForSequenceClassification(config)}


def _loss_on_inputs(parts, frozen, batch):
    logits = parts["student"](input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return {"ce": torch.nn.functional.cross_entropy(logits, batch["labels"])}


def test_non_finite_loss_names_step_and_term(tmp_path):
    def exploding(parts, frozen, batch):
        good = _loss_on_inputs(parts, frozen, batch)["ce"]
        return {"ce": good, "attention": good * float("nan")}

    trainer = Trainer(_linear_modules(), [_toy_stage(exploding, batch_size=4, evaluate=False)],
                      RunConfig(str(tmp_path), progress=False), PaddingCollator(0))
    with pytest.raises(KdbertError, match=r"stage 'toy', step 1: the loss became nan \(non-finite term\(s\): attention\)"):
        trainer.train()


def test_constant_schedule_and_checkpoint_rotation(tmp_path):
    lrs = []

    def recording(parts, frozen, batch):
        return _loss_on_inputs(parts, frozen, batch)

    stage = _toy_stage(recording, batch_size=4, epochs=3, schedule="constant", learning_rate=0.01, evaluate=False)
    trainer = Trainer(_linear_modules(), [stage], RunConfig(str(tmp_path), progress=False, log_every=1,
                                                            keep_checkpoints=2), PaddingCollator(0))
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    lrs = {r["lr"] for r in records if "lr" in r}
    assert lrs == {0.01} and len(records) == 9  # 12 rows / 4 per batch * 3 epochs
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert checkpoints == ["checkpoint-s0-0000006", "checkpoint-s0-0000009"]
    assert not list(tmp_path.rglob("*.tmp"))
    saved = load_file(tmp_path / "model.safetensors")  # nothing evaluated: the final student is saved
    for name, value in trainer.student.state_dict().items():
        torch.testing.assert_close(saved[name], value, rtol=0, atol=0)


def test_gradient_accumulation_equals_a_big_batch(tmp_path):
    def run(folder, batch_size, grad_accum):
        stage = _toy_stage(_loss_on_inputs, n=8, batch_size=batch_size, grad_accum=grad_accum, max_steps=1,
                           evaluate=False, schedule="constant", learning_rate=0.1, max_grad_norm=0.0)
        trainer = Trainer(_linear_modules(), [stage], RunConfig(str(folder), progress=False,
                                                                group_by_length=False), PaddingCollator(0))
        trainer.train()
        return trainer.student.classifier.weight.detach().clone()

    torch.testing.assert_close(run(tmp_path / "a", 8, 1), run(tmp_path / "b", 4, 2))


def test_last_partial_accumulation_group_is_a_mean_over_its_own_batches(tmp_path, monkeypatch):
    """10 rows in batches of 2 with grad_accum 3: groups of 3 and 2 batches. Each batch's loss is
    the classifier's bias sum (gradient 1 per batch), so every step's gradient must be 1."""
    grads = []
    original = Trainer._optimizer_step

    def recording(self, module, optimizer, scheduler, config):
        grads.append(self.accelerator.unwrap_model(module).parts["student"].classifier.bias.grad.tolist())
        return original(self, module, optimizer, scheduler, config)

    monkeypatch.setattr(Trainer, "_optimizer_step", recording)
    stage = _toy_stage(lambda parts, frozen, batch: {"bias": parts["student"].classifier.bias.sum()}, n=10,
                       batch_size=2, grad_accum=3, epochs=2, evaluate=False, max_grad_norm=0.0)
    Trainer(_linear_modules(), [stage], RunConfig(str(tmp_path), progress=False), PaddingCollator(0)).train()
    assert grads == [[1.0, 1.0]] * 4


def test_output_dir_holding_another_run_is_refused(tmp_path):
    out = tmp_path / "run"
    prepare_output_dir(out, {"task": "rte", "lr": 1}, resume=False, overwrite=False)
    with pytest.raises(KdbertError, match="already holds a run; pass --resume .* --overwrite"):
        prepare_output_dir(out, {"task": "rte", "lr": 1}, resume=False, overwrite=False)
    with pytest.raises(KdbertError, match=r"different settings \(lr\)"):
        prepare_output_dir(out, {"task": "rte", "lr": 2}, resume=True, overwrite=False)
    prepare_output_dir(out, {"task": "rte", "lr": 2}, resume=False, overwrite=True)
    assert json.loads((out / "run_config.json").read_text())["lr"] == 2
    # an option added since the run began resumes it when left off, and is a change when set
    prepare_output_dir(out, {"task": "rte", "lr": 2, "schedule_free": False}, resume=True, overwrite=False)
    with pytest.raises(KdbertError, match=r"different settings \(schedule_free\)"):
        prepare_output_dir(out, {"task": "rte", "lr": 2, "schedule_free": True}, resume=True, overwrite=False)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(KdbertError, match="is not empty"):
        prepare_output_dir(other, {}, resume=False, overwrite=False)


def test_resume_before_the_first_checkpoint_restarts_the_log(tmp_path):
    """A run killed before its first checkpoint restarts from step 0: its old records are dropped."""
    (tmp_path / "log.jsonl").write_text(json.dumps({"stage": "toy", "step": 1, "loss": 9.0}) + "\n")
    stage = _toy_stage(_loss_on_inputs, batch_size=4, max_steps=2, evaluate=False)
    Trainer(_linear_modules(), [stage], RunConfig(str(tmp_path), progress=False, log_every=1),
            PaddingCollator(0)).train(resume=True)
    steps = [json.loads(line)["step"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_the_precision_and_thread_choice_are_printed_and_reported(tmp_path, capsys):
    stage = _toy_stage(_loss_on_inputs, batch_size=4, epochs=1, evaluate=False)
    report = Trainer(_linear_modules(), [stage], RunConfig(str(tmp_path), progress=False, mixed_precision="auto"),
                     PaddingCollator(0)).train()
    # conftest: $KDBERT_MIXED_PRECISION=no and $OMP_NUM_THREADS=1
    assert report["runtime"] == {"mixed_precision": "no", "mixed_precision_reason": "auto, from $KDBERT_MIXED_PRECISION",
                                 "threads": 1, "threads_reason": "$OMP_NUM_THREADS", "thread_changes": []}
    out = capsys.readouterr().out
    assert "precision: float32 (auto, from $KDBERT_MIXED_PRECISION)" in out and "threads: 1 ($OMP_NUM_THREADS)" in out
    assert json.loads((tmp_path / "train_report.json").read_text())["runtime"]["threads"] == 1


def _scoring_evaluator(student):
    return {"score": float(student.classifier.weight.sum())}


def test_a_deadline_already_past_stops_after_one_step_evaluates_saves_and_skips_later_stages(tmp_path):
    stages = [_toy_stage(_loss_on_inputs, batch_size=4, max_steps=5, evaluate=False),
              Stage(StageConfig("later", batch_size=4, max_steps=5), _loss_on_inputs,
                    _toy_stage(_loss_on_inputs).dataset)]
    trainer = Trainer(_linear_modules(), stages, RunConfig(str(tmp_path), progress=False, deadline=0.0),
                      PaddingCollator(0), evaluator=_scoring_evaluator)
    report = trainer.train()
    # the first stage does not evaluate, yet the stopped run is scored where it stopped
    assert report["stopped_early"] == {"stage": "toy", "step": 1, "of": 5, "steps_run": 1}
    assert [(r["stage"], r["step"]) for r in report["history"]] == [("toy", 1)]
    assert (report["best_stage"], report["best_step"]) == ("toy", 1)
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["checkpoint-s0-0000001"]
    assert (tmp_path / "model.safetensors").is_file()
    assert json.loads((tmp_path / "train_report.json").read_text())["stopped_early"]["steps_run"] == 1


def test_a_deadline_in_a_later_stage_counts_the_steps_of_the_earlier_ones(tmp_path, monkeypatch):
    from kdbert.core import trainer as trainer_module

    now = [100.0]
    monkeypatch.setattr(trainer_module.time, "time", lambda: now[0])
    steps = []

    def ticking(parts, frozen, batch):  # every batch takes a second on the fake clock
        now[0] += 1.0
        steps.append(now[0])
        return _loss_on_inputs(parts, frozen, batch)

    stages = [_toy_stage(ticking, batch_size=4, max_steps=3, evaluate=False),
              Stage(StageConfig("later", batch_size=4, max_steps=10, evaluate=False), ticking,
                    _toy_stage(ticking).dataset)]
    # 3 s in the first stage; in the second, after step 2 (at 105 s) another 1 s step would end at 106 s
    trainer = Trainer(_linear_modules(), stages, RunConfig(str(tmp_path), progress=False, deadline=105.5),
                      PaddingCollator(0), evaluator=_scoring_evaluator)
    report = trainer.train()
    assert report["stopped_early"] == {"stage": "later", "step": 2, "of": 10, "steps_run": 5}
    assert len(steps) == 5


def test_a_deadline_that_leaves_time_changes_nothing(tmp_path):
    stage = _toy_stage(_loss_on_inputs, batch_size=4, max_steps=3)
    far = time.time() + 3600
    report = Trainer(_linear_modules(), [stage], RunConfig(str(tmp_path), progress=False, deadline=far),
                     PaddingCollator(0), evaluator=_scoring_evaluator).train()
    assert report["stopped_early"] is None and report["history"][-1]["step"] == 3


def _three_steps_evaluated_at_2_and_3(tmp_path, learning_rate=0.01, **optimiser):
    """A 3-step run on 8 rows (one batch a step, no clipping) with ``optimiser``'s options,
    evaluated at steps 2 and 3: (the weights each evaluation saw, the trainer, the stage)."""
    seen = []

    def evaluator(student):
        seen.append({k: v.clone() for k, v in student.state_dict().items()})
        return {"score": 0.0}

    stage = _toy_stage(_loss_on_inputs, n=8, batch_size=8, max_steps=3, eval_every=2, learning_rate=learning_rate,
                       max_grad_norm=0.0, **optimiser)
    trainer = Trainer(_linear_modules(), [stage], RunConfig(str(tmp_path), progress=False, log_every=1),
                      PaddingCollator(0), evaluator=evaluator)
    trainer.train()
    return seen, trainer, stage


def _decay_groups(model) -> list[dict]:
    """The trainer's optimiser groups for ``model``: weight decay 0.01 on matrices, none on the rest."""
    return [{"params": [p for p in model.parameters() if p.ndim >= 2], "weight_decay": 0.01},
            {"params": [p for p in model.parameters() if p.ndim < 2], "weight_decay": 0.0}]


@pytest.mark.parametrize("name, plain, lr", [
    ("adamw", lambda groups, lr: torch.optim.AdamW(groups, lr=lr), 0.01),
    ("adadelta", lambda groups, lr: torch.optim.Adadelta(groups, lr=lr, rho=0.95, eps=1e-6), 1.0)])
def test_an_ema_stage_evaluates_and_keeps_the_moving_average_of_the_trained_weights(tmp_path, name, plain, lr):
    """With ``ema_decay`` 0.5 the average of steps 1-3 is a_1 = p_1, a_2 = 0.25 a_1 + 0.75 p_2
    (d_2 = min(0.5, 3/12)), a_3 = (4/13) a_2 + (9/13) p_3; the p_t are the plain optimiser's, which
    the averaging never feeds back into. Steps 2 and 3 are evaluated on a_2 and a_3; a_3 stays in the model."""
    seen, trainer, stage = _three_steps_evaluated_at_2_and_3(tmp_path, learning_rate=lr, schedule="constant",
                                                             optimizer=name, ema_decay=0.5)
    model = _linear_modules()["student"]
    optimizer = plain(_decay_groups(model), lr)
    batch = PaddingCollator(0)([stage.dataset[i] for i in range(8)])  # every step sees all 8 rows
    trained = []
    for _ in range(3):
        _loss_on_inputs({"student": model}, {}, batch)["ce"].backward()
        optimizer.step()
        optimizer.zero_grad()
        trained.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    p1, p2, p3 = trained
    a2 = {k: 0.25 * p1[k] + 0.75 * p2[k] for k in p1}
    a3 = {k: 4 / 13 * a2[k] + 9 / 13 * p3[k] for k in p1}
    assert len(seen) == 2  # steps 2 and 3
    for got, want in zip(seen, (a2, a3)):
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)
    final = trainer.student.state_dict()
    for name in a3:
        torch.testing.assert_close(final[name], a3[name], rtol=1e-5, atol=1e-6, msg=name)
    assert any(not torch.allclose(a3[k], p3[k]) for k in p3)  # the average is not the trained point


def test_a_stage_that_asks_for_two_averages_is_refused_and_each_optimiser_gets_its_own():
    from kdbert.core.optim import EmaAdadelta, EmaAdamW, make_optimizer

    model = _linear_modules()["student"]
    both = StageConfig("toy", ema_decay=0.9, schedule_free=True)
    with pytest.raises(KdbertError, match="stage 'toy': ema_decay and schedule_free each average the weights; keep one"):
        make_optimizer(both, _decay_groups(model), total=10)
    for name, kind in (("adamw", EmaAdamW), ("adadelta", EmaAdadelta)):
        optimizer = make_optimizer(StageConfig("toy", optimizer=name, ema_decay=0.9), _decay_groups(model), total=10)
        assert type(optimizer) is kind and optimizer.decay == 0.9


def test_a_schedule_free_stage_evaluates_and_keeps_the_averaged_weights(tmp_path):
    """Schedule-free AdamW keeps the trained point y and the fast iterate z; what is evaluated
    mid-run and left in the model at the end is their average x = y + (1 - 1/beta1)(z - y), the
    same as the library's own ``eval()`` gives when driven by hand over the same batches."""
    import schedulefree

    seen, trainer, stage = _three_steps_evaluated_at_2_and_3(tmp_path, warmup_ratio=0.34, schedule_free=True)
    model = _linear_modules()["student"]
    optimizer = schedulefree.AdamWScheduleFree(_decay_groups(model), lr=0.01, warmup_steps=1)
    optimizer.train()
    batch = PaddingCollator(0)([stage.dataset[i] for i in range(8)])  # every step sees all 8 rows
    expected = []
    for step in (1, 2, 3):
        _loss_on_inputs({"student": model}, {}, batch)["ce"].backward()
        optimizer.step()
        optimizer.zero_grad()
        if step in (2, 3):
            optimizer.eval()
            expected.append({k: v.clone() for k, v in model.state_dict().items()})
            optimizer.train()
    assert len(seen) == 2  # steps 2 and 3
    for got, want in zip(seen, expected):
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)
    final = trainer.student.state_dict()
    for name in expected[-1]:
        torch.testing.assert_close(final[name], expected[-1][name], rtol=1e-5, atol=1e-6, msg=name)
    lrs = [json.loads(line)["lr"] for line in (tmp_path / "log.jsonl").read_text().splitlines()
           if '"lr"' in line]
    assert lrs == pytest.approx([0.01, 0.01, 0.01])  # warm-up of int(0.34 * 3) = 1 step, then flat
