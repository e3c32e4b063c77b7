"""kdbert compress, the finishing's spare time: a winner short of the search's last rung trains on in a
copy of its run for the seconds left once its graph passed its checks, and ships only a later student whose own
graph passes them too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _setting(tmp_path, monkeypatch, best_step: int = 420, spare_score: float = 88.0, speedup: float = 5.0):
    """A search of three rungs (200, 400 and 800 steps) that trained ``w`` 400 steps at 0.1 s a step
    with 10 s outside training (so the first rung's 200 steps need 0.1 * 200 + 10 = 30 s), and
    shipped it keeping the share; distillation, export and scoring faked. Returns what train_on needs and the
    calls made."""
    from kdbert.compress import ship, spare
    from kdbert.compress.recipes import SearchSettings
    from kdbert.compress.schedule import Goal
    from kdbert.compress.search import Plan, Window

    run = tmp_path / "runs" / "w"
    run.mkdir(parents=True)
    (run / "distill_report.json").write_text(json.dumps({"best_step": 400}))
    (run / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "winner").mkdir()
    (tmp_path / "winner" / "export_report.json").write_text(json.dumps({"source": str(run)}))
    segment = {"candidate": "w", "rung": 1, "steps": 400, "trained": 400, "train_seconds": 40.0, "seconds": 50.0,
               "labelling_seconds": 0.0, "score": 87.0, "decide_score": 88.0, "decide_se": 0.5, "stopped": True,
               "run": str(run)}
    goal = Goal(90.0, 0.97, {"w": 0.2}, teacher_decide=90.0, teacher_decide_se=0.0)  # line 87.3
    winner = {**segment, "kept": 88.0 / 90.0, "keeps": True, "rule": "fastest keeping 0.97"}
    first = {"candidate": "w", "run": str(run), "decide_score": 88.0, "kept": 88.0 / 90.0, "keeps": True,
             "fast_enough": True}
    plan = Plan([], "teacher", None, str(tmp_path), SearchSettings(first_steps=200, rounds=3), goal, Window(0.0, 0.0))
    calls = {"distil": [], "export": []}

    def fake_distil(plan, job, done_steps, loaded=None, folder=None):
        calls["distil"].append((plan.window, job, done_steps, folder))
        assert (folder / "model.safetensors").read_bytes() == b"weights"  # it trains on the search's run, copied
        return {"candidate": job.candidate, "rung": job.rung, "steps": 900, "trained": 500, "score": 87.5,
                "decide_score": spare_score, "decide_se": 0.5, "seconds": 60.0, "best_step": best_step,
                "stopped": True, "run": str(folder)}

    def fake_export(model_dir, folder, quantize=None, task=None, batch_size=64, int8_method="auto"):
        calls["export"].append((model_dir, quantize, int8_method))
        folder.mkdir(parents=True)
        (folder / "export_report.json").write_text(json.dumps({"source": str(model_dir)}))
        return {"source": str(model_dir)}

    monkeypatch.setattr(spare, "distil_segment", fake_distil)
    monkeypatch.setattr(spare, "export_model", fake_export)
    monkeypatch.setattr(ship, "decide_score", lambda folder, file, data, goal: (
        {"decide_score": spare_score, "decide_se": 0.5}, None))

    def speed_check(row, export_file):
        return {"speedup": speedup, "fast_enough": speedup >= 4.0}

    def train_on(seconds, first_check=None, **changes):
        return spare.train_on(plan, {**winner, **changes}, first_check or first, [segment], seconds, tmp_path, None,
                              "onnx-int8", goal, None, "dynamic", speed_check, clock=lambda: 1000.0)
    return train_on, calls


def shipped_source(tmp_path) -> str:
    return json.loads((tmp_path / "winner" / "export_report.json").read_text())["source"]


def test_a_winner_short_of_the_last_rung_trains_on_in_a_copy_and_ships_a_later_student_that_passes(
        tmp_path, monkeypatch):
    from kdbert.compress.schedule import Job

    train_on, calls = _setting(tmp_path, monkeypatch)
    result = train_on(90.0)
    # 90 s left, the last 10 for loading and the last evaluation: the run's deadline is 1000 + 80
    [(window, job, done, folder)] = calls["distil"]
    assert window.end == 1080.0 and done == 400 and folder == tmp_path / "runs" / "w.spare"
    assert job == Job("w", 2, 800)  # the last rung's steps, or the deadline
    assert calls["export"] == [(str(folder), "int8", "dynamic")]  # the shipped graph's int8 method
    assert result.summary["shipped"] and result.summary["seconds_needed"] == pytest.approx(30.0)
    assert result.row["run"] == str(folder) and result.row["steps"] == 900 and result.row["keeps"]
    assert result.check["run"] == str(folder) and result.check["keeps"]
    assert shipped_source(tmp_path) == str(folder) and not (tmp_path / "exports").exists()
    assert (tmp_path / "runs" / "w" / "model.safetensors").is_file()  # the search's run is as it was
    again = train_on(90.0)  # a rerun of the finished compress: the kept row, no training on
    assert len(calls["distil"]) == 1 and again.row == result.row and shipped_source(tmp_path) == str(folder)


@pytest.mark.parametrize("seconds, changes, why", [
    (90.0, {"steps": 800}, "last rung"),  # the search's schedule ended it: nothing to train on
    (29.0, {}, "needed"),  # 29 s left, 30 needed for the first rung's 200 steps
    (90.0, {"first_check": {"keeps": True, "fast_enough": False}}, "too slow"),  # steps do not make it faster
])
def test_nothing_trains_where_the_schedule_ended_the_winner_or_too_little_time_is_left(
        tmp_path, monkeypatch, seconds, changes, why):
    train_on, calls = _setting(tmp_path, monkeypatch)
    result = train_on(seconds, **changes)
    assert not result.summary["trained"] and why in result.summary["why"] and result.row is None
    assert calls["distil"] == [] and not (tmp_path / "runs" / "w.spare").exists()
    assert shipped_source(tmp_path) == str(tmp_path / "runs" / "w")
    again = train_on(900.0)  # a rerun, with the seconds the search no longer takes: what the first decided
    assert calls["distil"] == [] and again.summary == result.summary


@pytest.mark.parametrize("setting, why", [
    ({"best_step": 400}, "no later student"),  # the trainer kept the search's student: nothing new to ship
    ({"spare_score": 86.0}, "keep the share"),  # its graph scores 86.0 where the line is 87.3 - 0.5
    ({"speedup": 3.9}, "speed"),
])
def test_the_first_graph_stays_shipped_unless_a_later_student_passes_both_checks(tmp_path, monkeypatch, setting, why):
    train_on, calls = _setting(tmp_path, monkeypatch, **setting)
    result = train_on(90.0)
    assert result.summary["trained"] and not result.summary["shipped"] and why in result.summary["why"]
    assert result.row is None and shipped_source(tmp_path) == str(tmp_path / "runs" / "w")
    assert not (tmp_path / "exports").exists()
    assert len(calls["export"]) == (0 if "best_step" in setting else 1)


def test_a_first_graph_short_of_the_share_is_replaced_by_a_trained_on_one_that_keeps_it(tmp_path, monkeypatch):
    train_on, calls = _setting(tmp_path, monkeypatch)  # the trained-on graph scores 88.0, above the line
    short = {"candidate": "w", "run": str(tmp_path / "runs" / "w"), "decide_score": 86.0, "kept": 86.0 / 90.0,
             "keeps": False, "fast_enough": True}
    result = train_on(90.0, first_check=short)
    assert result.summary["shipped"] and result.summary["kept_before"] == pytest.approx(86.0 / 90.0)
    assert result.check["keeps"] and shipped_source(tmp_path) == str(tmp_path / "runs" / "w.spare")


def test_compress_ships_the_trained_on_winner_and_reports_it(tmp_path, tiny_tokenizer, capsys, monkeypatch):
    """The whole path on a tiny task: the winner, which trained the 4 steps of its last rung, trains on
    to 8 (the last rung's steps faked, as if the search had a rung more that the budget left no time
    for; its search's student counted as an earlier one), is exported, checked and shipped, and the
    report, the shipped checks and the kept runs say so."""
    from conftest import compress_env

    from kdbert.cli import main
    from kdbert.compress import ship, spare
    from kdbert.data.load import TaskOptions, load_task

    env = compress_env(tmp_path / "env", tiny_tokenizer)
    out = tmp_path / "compress"
    monkeypatch.setattr(spare, "rung_steps", lambda *args: 8)
    monkeypatch.setattr(spare, "best_step", lambda run: 0)
    assert main(["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir",
                 str(env["root"] / "glue"), "--candidates", "bert-1x128", "--rounds", "2", "--first-steps", "2",
                 "--batch-size", "4", "--length-rows", "4", "--threads", "1", "--target-speedup", "0.01",
                 "--min-kept", "0", "--output-dir", str(out)]) == 0
    report = json.loads((out / "compress_report.json").read_text())
    folder = out / "runs" / "bert-1x128.spare"
    summary = report["spare_training"]
    assert summary["shipped"] and (summary["from_steps"], summary["steps"]) == (4, 8)
    assert "spare time: bert-1x128 trained on from step 4 to 8 in" in capsys.readouterr().out
    assert report["winner"]["run"] == str(folder) and report["winner"]["steps"] == 8
    assert json.loads((folder / "distill_report.json").read_text())["paused_at_step"] == 8
    assert json.loads((out / "winner" / "export_report.json").read_text())["source"] == str(folder)
    first, trained_on = report["shipped"]["checks"]
    assert first["run"] == str(out / "runs" / "bert-1x128") and trained_on["run"] == str(folder)
    decide_data = load_task(TaskOptions("sst2", data_dir=str(env["root"] / "glue"), held_out_rows=str(env["teacher"]),
                                        decide_share=0.5))
    scored, _ = ship.decide_score(out / "winner", "model.int8.onnx", decide_data)
    assert report["shipped"]["decide_score"] == trained_on["decide_score"] == scored["decide_score"]
    # --keep shipped keeps both checked runs, without their checkpoints
    assert (folder / "config.json").is_file() and not (folder / "checkpoints").exists()
    assert (out / "runs" / "bert-1x128" / "config.json").is_file()
    markdown = (out / "compress_report.md").read_text()
    assert "bert-1x128 (trained on)" in markdown and "Spare time: bert-1x128 trained on from step 4 to 8" in markdown


@pytest.mark.parametrize("winner_decide, shipped", [
    (85.0, True),  # pooled 86.0 (87.0 and 85.0) against the trained-on 86.75 (87.5 and 86.0)
    (86.6, False),  # pooled 86.8 against 86.75: no higher
])
def test_where_neither_graph_keeps_the_share_the_trained_on_one_ships_when_it_scores_higher_on_all_held_out_rows(
        tmp_path, monkeypatch, winner_decide, shipped):
    train_on, calls = _setting(tmp_path, monkeypatch, spare_score=86.0)  # below the line 87.3 - 0.5
    short = {"candidate": "w", "run": str(tmp_path / "runs" / "w"), "decide_score": 85.0, "kept": 85.0 / 90.0,
             "keeps": False, "fast_enough": True}
    result = train_on(90.0, first_check=short, decide_score=winner_decide)
    assert not result.check["keeps"] and result.summary["shipped"] == shipped
    assert ("scores higher on all held-out rows" if shipped else "86.75 against 86.80") in result.summary["why"]
    expected = tmp_path / "runs" / ("w.spare" if shipped else "w")
    assert shipped_source(tmp_path) == str(expected) and not (tmp_path / "exports").exists()
