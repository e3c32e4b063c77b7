"""kdbert compress, the finishing: the winner's int8 graph checked as it ships, on the rows that
decide and timed in turns with the teacher, and the next candidate where it falls short."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest


def test_a_winner_whose_shipped_graph_falls_short_is_replaced_by_the_next_that_keeps_it(tmp_path, monkeypatch):
    from kdbert.compress import ship
    from kdbert.compress.schedule import Goal, ranked_candidates

    latency = {"bert-1x128": 0.2, "bilstm-h150": 0.3, "bert-2x128": 0.4}
    goal = Goal(90.0, 0.97, latency, teacher_decide=90.0, teacher_decide_se=0.0)  # line 87.3
    segments = [{"candidate": name, "rung": 0, "state": "done", "steps": 10, "trained": 10, "score": score,
                 "decide_score": score, "decide_se": 0.5, "run": str(tmp_path / "runs" / name)}
                for name, score in (("bert-1x128", 88.0), ("bilstm-h150", 89.0), ("bert-2x128", 80.0))]
    ranking = ranked_candidates(segments, goal)
    assert [row["candidate"] for row in ranking] == ["bert-1x128", "bilstm-h150", "bert-2x128"]

    def fake_export(row, folder, task, runtime, int8_time_left):
        folder.mkdir(parents=True)
        report = {"source": row["run"]}
        (folder / "export_report.json").write_text(json.dumps(report))
        return report

    shipped_scores = {"bert-1x128": 85.0, "bilstm-h150": 88.5}  # int8 costs the first 3 points: 85.0 < 87.3 - 0.5
    monkeypatch.setattr(ship, "ship", fake_export)
    monkeypatch.setattr(ship, "decide_score", lambda folder, file, data, goal: (
        {"decide_score": shipped_scores[folder.name], "decide_se": 0.5}, None))
    winner, exported, checks = ship.ship_checked(ranking, tmp_path, None, "onnx-int8", goal, None,
                                                 int8_time_left=lambda: 600.0, check_seconds=lambda name: 20.0)
    assert [(c["candidate"], c["keeps"]) for c in checks] == [("bert-1x128", False), ("bilstm-h150", True)]
    assert checks[0]["kept"] == pytest.approx(85.0 / 90.0)
    assert winner["candidate"] == "bilstm-h150" and exported == {"source": str(tmp_path / "runs" / "bilstm-h150")}
    assert json.loads((tmp_path / "winner" / "export_report.json").read_text())["source"].endswith("bilstm-h150")
    assert not (tmp_path / "exports").exists()
    # none keeps on the graph: the best of those checked ships; no time for a second export: the first alone
    shipped_scores.update({"bilstm-h150": 84.0})
    winner, _, checks = ship.ship_checked(ranking, tmp_path / "b", None, "onnx-int8", goal, None,
                                          int8_time_left=lambda: 600.0, check_seconds=lambda name: 20.0)
    assert winner["candidate"] == "bert-1x128" and [c["candidate"] for c in checks] == ["bert-1x128", "bilstm-h150"]
    winner, _, checks = ship.ship_checked(ranking, tmp_path / "c", None, "onnx-int8", goal, None,
                                          int8_time_left=lambda: 15.0, check_seconds=lambda name: 20.0)
    assert winner["candidate"] == "bert-1x128" and len(checks) == 1


def test_the_shipped_graph_is_checked_against_the_teacher_on_the_same_rows(tmp_path, monkeypatch):
    from kdbert.compress import ship
    from kdbert.compress.schedule import Goal, ranked_candidates
    from kdbert.core.metrics import paired_bootstrap_standard_error

    # 100 deciding rows: the teacher right on 90 (line 0.97 * 90 = 87.3), the first candidate's graph
    # on 84 of those same rows, short by 3.3. Apart, the two standard errors (3.67 and 0.97 * 3.0)
    # give a margin of 4.68, within which it would "keep"; paired on the same rows the shortfall's
    # standard error is 2.37 (tests/test_metrics.py, by hand), so it falls short and the next ships.
    references = np.ones(100, dtype=int)
    teacher = np.r_[np.ones(90, dtype=int), np.zeros(10, dtype=int)]
    graphs = {"bert-1x128": np.r_[np.ones(84, dtype=int), np.zeros(16, dtype=int)],
              "bilstm-h150": np.r_[np.ones(89, dtype=int), np.zeros(11, dtype=int)]}
    latency = {"bert-1x128": 0.2, "bilstm-h150": 0.3}
    goal = Goal(90.0, 0.97, latency, teacher_decide=90.0, teacher_decide_se=3.0,
                teacher_decide_predictions=tuple(teacher.tolist()))
    segments = [{"candidate": name, "rung": 0, "state": "done", "steps": 10, "trained": 10, "score": 88.0,
                 "decide_score": 88.0, "decide_se": 3.3, "run": str(tmp_path / "runs" / name)} for name in graphs]
    ranking = ranked_candidates(segments, goal)

    def fake_export(row, folder, task, runtime, int8_time_left):
        folder.mkdir(parents=True)
        (folder / "export_report.json").write_text(json.dumps({"source": row["run"]}))
        return {"source": row["run"]}

    def graph_score(folder, file, data, goal):
        predictions = graphs[folder.name]
        scored = {"decide_score": 100.0 * predictions.mean(),
                  "decide_se": 100 * math.sqrt(predictions.mean() * (1 - predictions.mean()) / 100)}
        if goal.teacher_decide_predictions is not None:  # as the evaluator scores it against the teacher
            scored["decide_paired_se"] = paired_bootstrap_standard_error(("accuracy",), predictions, teacher, references)
        return scored, predictions

    monkeypatch.setattr(ship, "ship", fake_export)
    monkeypatch.setattr(ship, "decide_score", graph_score)
    winner, _, checks = ship.ship_checked(ranking, tmp_path / "a", None, "onnx-int8", goal, None,
                                          int8_time_left=lambda: 600.0, check_seconds=lambda name: 20.0)
    assert [(c["candidate"], c["margin_kind"], c["keeps"]) for c in checks] == [
        ("bert-1x128", "paired", False), ("bilstm-h150", "paired", True)]
    assert checks[0]["margin"] == pytest.approx(2.369, rel=0.1)  # 1,000 resamples: a 2% Monte-Carlo error
    assert winner["candidate"] == "bilstm-h150"
    # without the teacher's predictions (question answering) the independent margin reads it as keeping
    goal = Goal(90.0, 0.97, latency, teacher_decide=90.0, teacher_decide_se=3.0)
    winner, _, checks = ship.ship_checked(ranking, tmp_path / "b", None, "onnx-int8", goal, None,
                                          int8_time_left=lambda: 600.0, check_seconds=lambda name: 20.0)
    assert [(c["candidate"], c["margin_kind"], c["keeps"]) for c in checks] == [("bert-1x128", "independent", True)]
    assert checks[0]["margin"] == pytest.approx(math.hypot(3.667, 0.97 * 3.0), rel=1e-3)
    assert winner["candidate"] == "bert-1x128"


def _fake_ship(ship, monkeypatch, shipped_scores: dict, speedups: dict, target: float = 4.0):
    """ship_checked's export, scoring and timing faked: each graph's score on the rows that decide and
    its speedup as shipped, per candidate; returns the speed check ship_checked is given."""
    def fake_export(row, folder, task, runtime, int8_time_left):
        folder.mkdir(parents=True)
        (folder / "export_report.json").write_text(json.dumps({"source": row["run"]}))
        return {"source": row["run"]}

    monkeypatch.setattr(ship, "ship", fake_export)
    monkeypatch.setattr(ship, "decide_score", lambda folder, file, data, goal: (
        {"decide_score": shipped_scores[folder.name], "decide_se": 0.5}, None))
    return lambda row, export_file: {"speedup": speedups[export_file.parent.name],
                                     "fast_enough": speedups[export_file.parent.name] >= target}


def test_a_winner_too_slow_as_shipped_gives_way_to_the_next_that_runs_at_the_speed_asked(tmp_path, monkeypatch):
    from kdbert.compress import ship
    from kdbert.compress.schedule import Goal, ranked_candidates

    latency = {"bert-2x384": 0.2, "bert-2x256": 0.3, "bilstm-h300": 0.4}
    goal = Goal(90.0, 0.97, latency, teacher_decide=90.0, teacher_decide_se=0.0)  # line 87.3

    def ranking(scores):
        return ranked_candidates([{"candidate": name, "rung": 0, "state": "done", "steps": 10, "trained": 10,
                                   "score": score, "decide_score": score, "decide_se": 0.5,
                                   "run": str(tmp_path / "runs" / name)} for name, score in scores.items()], goal)

    def run(out, ranked, shipped_scores, speedups):
        check = _fake_ship(ship, monkeypatch, shipped_scores, speedups)
        winner, _, checks = ship.ship_checked(ranked, tmp_path / out, None, "onnx-int8", goal, None,
                                              int8_time_left=lambda: 600.0, check_seconds=lambda name: 20.0,
                                              speed_check=check)
        return winner["candidate"], [(c["candidate"], c["keeps"], c["fast_enough"]) for c in checks]

    # all three keep; the fastest in the search's table runs at 3.9x as shipped: the next keeper ships
    keeping = ranking({"bert-2x384": 88.0, "bert-2x256": 89.0, "bilstm-h300": 88.5})
    speedups = {"bert-2x384": 3.9, "bert-2x256": 4.6, "bilstm-h300": 5.0}
    assert run("a", keeping, {name: 88.0 for name in latency}, speedups) == (
        "bert-2x256", [("bert-2x384", True, False), ("bert-2x256", True, True)])
    # none keeps: after a graph too slow, the next best-scoring is tried although it does not keep,
    # and once one runs fast enough no worse one is
    short = ranking({"bert-2x384": 80.0, "bert-2x256": 82.0, "bilstm-h300": 81.0})
    assert [row["candidate"] for row in short] == ["bert-2x256", "bilstm-h300", "bert-2x384"]
    slow_first = {"bert-2x256": 3.5, "bilstm-h300": 4.2, "bert-2x384": 4.1}
    assert run("b", short, {"bert-2x256": 82.0, "bilstm-h300": 81.0, "bert-2x384": 80.0}, slow_first) == (
        "bilstm-h300", [("bert-2x256", False, False), ("bilstm-h300", False, True)])
    # none runs fast enough: the best on the rows that decide ships, and the report can say so
    too_slow = dict.fromkeys(latency, 3.0)
    winner, checks = run("c", short, {"bert-2x256": 80.5, "bilstm-h300": 81.5, "bert-2x384": 79.0}, too_slow)
    assert winner == "bilstm-h300" and len(checks) == ship.MAX_SHIP_TRIES
    # no speed check (as before it existed): a graph that keeps ships at once
    _fake_ship(ship, monkeypatch, {name: 88.0 for name in latency}, speedups)
    winner, _, checks = ship.ship_checked(keeping, tmp_path / "d", None, "onnx-int8", goal, None,
                                          int8_time_left=lambda: 600.0, check_seconds=lambda name: 20.0)
    assert winner["candidate"] == "bert-2x384" and len(checks) == 1


def test_a_shipped_graph_is_timed_once_per_run_and_settings(tmp_path, monkeypatch):
    from kdbert.compress import ship
    from kdbert.compress.speed import SpeedSettings

    timed = []

    def fake_time(teacher_file, student_file, task, settings):
        timed.append(student_file)
        return {"speedup": {"student": 4.0 + len(timed)}, "latency_real_p50_ms": {"student": 1.0, "teacher": 5.0}}

    monkeypatch.setattr(ship, "time_against_teacher", fake_time)
    one, two = SpeedSettings("onnx-int8", 8, threads=1), SpeedSettings("onnx-int8", 8, threads=2)
    first = ship.shipped_speed("runs/a", tmp_path / "exports/a/model.int8.onnx", tmp_path, None, one)
    assert ship.shipped_speed("runs/a", tmp_path / "winner/model.int8.onnx", tmp_path, None, one) == first
    assert len(timed) == 1 and first["speedup"]["student"] == 5.0 and first["timings"] == 1  # the check's is the report's
    ship.shipped_speed("runs/b", tmp_path / "exports/b/model.int8.onnx", tmp_path, None, one)
    ship.shipped_speed("runs/a", tmp_path / "winner/model.int8.onnx", tmp_path, None, two)
    assert len(timed) == 3
    # a file of an earlier version (one timing per run, not a list) is read as that one timing
    stored = json.loads((tmp_path / ship.SHIPPED_SPEED).read_text())
    stored["timings"]["runs/a"] = stored["timings"]["runs/a"][0]
    (tmp_path / ship.SHIPPED_SPEED).write_text(json.dumps(stored))
    assert ship.shipped_speed("runs/a", tmp_path / "winner/model.int8.onnx", tmp_path, None, two)["timings"] == 1
    assert len(timed) == 3


def test_a_narrow_miss_as_shipped_is_timed_again_and_the_mean_of_the_two_decides(tmp_path, monkeypatch):
    from kdbert.compress import ship
    from kdbert.compress.budget import NARROW_MISS, narrowly_missed
    from kdbert.compress.speed import SpeedSettings

    # within NARROW_MISS (7.2%) under the speedup asked, or over the latency asked
    assert narrowly_missed(3.9, 1.0, 4.0, None) and narrowly_missed(4.0 * (1 - NARROW_MISS), 1.0, 4.0, None)
    assert not narrowly_missed(3.6, 1.0, 4.0, None) and not narrowly_missed(4.0, 1.0, 4.0, None)
    assert narrowly_missed(4.0, 2.1, None, 2.0) and not narrowly_missed(4.0, 2.2, None, 2.0)
    readings = []

    def fake_time(teacher_file, student_file, task, settings):
        speedup = readings.pop(0)
        return {"rounds": [{"teacher": 4.0, "student": 4.0 / speedup}] * 3,
                "speedup": {"student": speedup}, "latency_real_p50_ms": {"student": 4.0 / speedup, "teacher": 4.0}}

    monkeypatch.setattr(ship, "time_against_teacher", fake_time)
    settings = SpeedSettings("onnx-int8", 8, threads=1)

    def check(run, first, second=None, may=True):
        readings[:] = [first] + ([second] if second else [])
        return ship.timed_as_shipped(run, tmp_path / "a.onnx", tmp_path, None, settings, 4.0, None, lambda: may)

    # 3.9x misses by 2.5%: timed again at 4.3x, the mean 4.1x runs at the speed asked
    assert check("runs/a", 3.9, 4.3) == {"speedup": pytest.approx(4.1), "timings": 2, "fast_enough": True}
    # the report reads both timings: their mean and all six rounds
    again = ship.shipped_speed("runs/a", tmp_path / "a.onnx", tmp_path, None, settings)
    assert again["timings"] == 2 and len(again["rounds"]) == 6
    assert again["latency_real_p50_ms"]["student"] == pytest.approx((4.0 / 3.9 + 4.0 / 4.3) / 2)
    assert check("runs/b", 3.9, 3.95)["fast_enough"] is False  # timed again, still under: too slow
    assert check("runs/c", 3.9, 4.3, may=False) == {"speedup": 3.9, "timings": 1, "fast_enough": False}  # no time
    assert check("runs/d", 3.6, 4.3) == {"speedup": 3.6, "timings": 1, "fast_enough": False}  # beyond the narrow band
    assert check("runs/e", 4.2) == {"speedup": 4.2, "timings": 1, "fast_enough": True}  # fast enough the first time


def test_the_teachers_dev_outputs_are_the_logits_its_scoring_computed_and_their_time_its_share(tmp_path, tiny_tokenizer):
    """The agreement compares the winner with the teacher's dev logits: read off the teacher's one
    scoring pass (not predicted again), equal to predicting dev alone, timed as the dev rows' share
    of that pass by characters."""
    from dataclasses import replace

    from conftest import compress_env

    from kdbert.compress.options import CompressConfig
    from kdbert.compress.teacher import checked_teacher, loaded_teacher, text_characters
    from kdbert.data.load import load_task
    from kdbert.families.registry import family_of_folder

    env = compress_env(tmp_path, tiny_tokenizer)
    data = load_task(replace(env["task"], held_out_fraction=0.2, decide_share=0.5))
    assert data.held_out and data.decide
    loaded = loaded_teacher(CompressConfig(teacher=str(env["teacher"])), data.spec)
    teacher = checked_teacher(loaded, data)

    evaluator = family_of_folder(loaded[0]).evaluator(data, loaded[2], None, 64)
    alone = np.concatenate([evaluator.predict(loaded[1], split) for split in evaluator.splits.values()])
    assert teacher.outputs.shape == (8, 2)
    np.testing.assert_allclose(teacher.outputs, alone, rtol=0, atol=1e-5)  # same rows, batches of one length order
    dev = [row for rows in data.dev.values() for row in rows]
    share = text_characters(dev) / text_characters(dev + data.held_out + data.decide)
    assert 0 < share < 1
    assert teacher.dev_seconds == pytest.approx(teacher.pass_seconds * share)


def test_dev_and_the_deciding_rows_are_compared_against_the_noise_of_their_gap():
    from types import SimpleNamespace

    from kdbert.compress import ship
    from kdbert.compress.report import gap_line
    from kdbert.core.metrics import kept_standard_error
    from kdbert.data.tasks import GLUE_TASKS

    spec = GLUE_TASKS["sst2"]
    row = SimpleNamespace(label=1)
    # dev: 100 rows, the teacher right on 90, the student on 84 of them (logits: class 1 where right);
    # the rows that decide: 50 rows, the teacher right on all, the student on 45
    dev_teacher = np.r_[np.ones(90), np.zeros(10)]
    dev_student = np.r_[np.ones(84), np.zeros(16)]
    data = SimpleNamespace(spec=spec, dev={"dev": [row] * 100}, decide=[row] * 50)
    logits = lambda right: np.stack([1 - right, right], axis=1)  # noqa: E731
    decide_teacher, decide_student = np.ones(50, dtype=int), np.r_[np.ones(45, dtype=int), np.zeros(5, dtype=int)]
    noise = ship.kept_noise(data, logits(dev_teacher), logits(dev_student), tuple(decide_teacher), decide_student)
    dev_se = kept_standard_error(("accuracy",), dev_student.astype(int), dev_teacher.astype(int), np.ones(100))
    decide_se = kept_standard_error(("accuracy",), decide_student, decide_teacher, np.ones(50))
    assert noise == {"kept_dev_se": dev_se, "kept_decide_se": decide_se, "gap_se": math.hypot(dev_se, decide_se)}
    assert 0.02 < dev_se < 0.035 and 0.03 < decide_se < 0.055  # about 0.026 and sqrt(0.9 * 0.1 / 50) = 0.042
    assert ship.kept_noise(data, logits(dev_teacher), logits(dev_student), None, decide_student) == {}
    # kept 84/90 = 93.3% on dev against 87.0% on the rows that decide: +6.3 points, beyond one standard
    # error of the gap (5.1) and within two
    shipped = {"kept_dev": 84 / 90, "kept_decide": 0.87, **noise}
    assert "a gap of +6.3 points within twice its standard error (5.1" in gap_line(shipped)
    assert "beyond twice" in gap_line({**shipped, "kept_decide": 0.82})  # +11.3 points
