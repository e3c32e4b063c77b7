"""The logic of the benchmark scripts: rerunning a recorded figure and the GPU driver's scheduler.

No training here: the training functions are replaced by stand-ins that return fixed scores.
"""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import augmentation_gpu  # noqa: E402
import common  # noqa: E402
import distill_glue  # noqa: E402
import teacher_glue  # noqa: E402


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    folder = tmp_path / "results"
    monkeypatch.setattr(common, "RESULTS_DIR", folder)
    return folder


def test_compare_rerun_uses_the_std_of_the_recorded_seeds():
    seeds = [70.0, 72.0, 74.0]  # sample std 2.0
    inside = common.compare_rerun(72.0, seeds, 73.9, tolerance=0.1)
    assert inside["noise"] == pytest.approx(2.0) and inside["reproduced"]
    assert inside["delta"] == pytest.approx(1.9)
    assert inside["summary"] == "recorded 72.00, rerun 73.90 (+1.90): within std of the 3 recorded seeds 2.00"
    outside = common.compare_rerun(72.0, seeds, 69.9, tolerance=5.0)  # the tolerance is not used with seeds
    assert not outside["reproduced"] and "NOT within" in outside["summary"]


def test_compare_rerun_of_one_seed_uses_the_tolerance():
    assert common.compare_rerun(57.0, [57.0], 57.5, tolerance=0.5)["reproduced"]
    failed = common.compare_rerun(57.0, [], 57.6, tolerance=0.5)
    assert not failed["reproduced"] and failed["noise_source"] == "--tolerance (one recorded seed)"
    same = common.compare_rerun(57.0, [], 57.0, tolerance=0.0)
    assert same["reproduced"] and same["summary"] == "recorded 57.00, rerun 57.00 (+0.00): identical"


def test_augmented_runs_get_the_steps_of_the_runs_on_the_original_rows():
    # 2 epochs of ceil(rows / 32) batches: RTE 2 x 78, MRPC 2 x 115, STS-B 3 x 180, CoLA 2 x 268
    assert [distill_glue.equal_steps(2, 2490), distill_glue.equal_steps(2, 3668),
            distill_glue.equal_steps(3, 5749), distill_glue.equal_steps(2, 8551)] == [156, 230, 540, 536]
    assert distill_glue.equal_steps(2, 2490, factor=4) == 624


def _record(variant: str, student: str | None = None, task: str = "cola", seed: int = 42, score: float = 20.0):
    options = {"method": "tinybert", "teacher": f"runs/teacher-{task}", "seed": seed}
    if student:
        options["student"] = student
    return {"task": task, "variant": variant, "seed": seed, "budget": "cpu", "metrics": {"score": score},
            "options": options, "output_dir": f"runs/distill-{task}-{variant}-s{seed}"}


def test_dependencies_of_recorded_runs():
    aug = _record("tinybert-ws-general-task-aug", "runs/general-tinybert4-ws")
    assert distill_glue.dependencies(aug) == [("teacher", "runs/teacher-cola"),
                                              ("general", "runs/general-tinybert4-ws"),
                                              ("mlm", "runs/mlm-k2"), ("aug", "runs/aug-cola/train_aug.tsv")]
    assert distill_glue.dependencies({**aug, "train_file": "elsewhere.tsv"})[-1] == ("aug", "elsewhere.tsv")
    assert distill_glue.dependencies(_record("tinybert-ws-task", "tinybert4")) == [("teacher", "runs/teacher-cola")]
    assert distill_glue.dependencies(_record("kd")) == [("teacher", "runs/teacher-cola")]
    assert distill_glue.dependencies(_record("distilbert-d", "runs/distilbert-init"))[-1] == \
        ("unbuildable", "runs/distilbert-init")


def test_distill_rerun_builds_then_compares_with_the_recorded_seeds(results_dir, monkeypatch, tmp_path):
    done = {f"cola/tinybert-ws-general-task/cpu/seed{s}": _record("tinybert-ws-general-task",
                                                                  "runs/general-tinybert4-ws", seed=s, score=score)
            for s, score in ((42, 16.0), (43, 17.0), (44, 18.0))}  # std 1.0
    built, calls = [], []
    monkeypatch.setattr(distill_glue, "build", lambda kind, path, record, args: built.append((kind, path)))

    def fake_distill(task, options, out, resume):
        calls.append((task.task, task.train_file, options, out, resume))
        return {"dev_metrics": {"score": 16.5}}

    monkeypatch.setattr(distill_glue, "distill_task", fake_distill)
    args = Namespace(runs_dir=str(tmp_path / "runs"), data_dir="glue", tolerance=0.1)
    verdict = distill_glue.rerun("cola/tinybert-ws-general-task/cpu/seed42", done, args)
    assert built == [("teacher", "runs/teacher-cola"), ("general", "runs/general-tinybert4-ws")]
    (task, train_file, options, out, resume), = calls
    assert (task, train_file, resume) == ("cola", None, False)
    # recorded before mixed_precision was recorded: those runs were float32
    assert options == {"mixed_precision": "no", **done["cola/tinybert-ws-general-task/cpu/seed42"]["options"],
                       "no_progress": True}
    assert out == str(tmp_path / "runs" / "rerun" / "distill-cola-tinybert-ws-general-task-s42")
    assert verdict["reproduced"] and verdict["noise"] == pytest.approx(1.0) and verdict["delta"] == pytest.approx(0.5)
    saved = json.loads((results_dir / "reruns.json").read_text())["distill/cola/tinybert-ws-general-task/cpu/seed42"]
    assert saved["rerun"] == 16.5 and saved["reproduced"]


def test_teacher_glue_skips_a_recorded_task_and_reruns_it_on_request(results_dir, monkeypatch, capsys, tmp_path):
    common.save_result("teacher_glue", "rte/cpu", {
        "task": "rte", "metrics": {"score": 57.0}, "output_dir": "runs/teacher-rte", "overrides": {"epochs": 3},
        "hyperparameters": {"epochs": 3, "learning_rate": 1e-4, "batch_size": 32, "max_seq_len": 128}})
    trained = []

    def fake_fine_tune(task, budget, tuning, data_dir, out=None, runs_dir="runs", model="default"):
        trained.append((task, budget, tuning, str(out)))
        return {"metrics": {"score": 58.5}}

    monkeypatch.setattr(teacher_glue, "fine_tune", fake_fine_tune)
    monkeypatch.setattr(sys, "argv", ["teacher_glue.py", "--tasks", "rte"])
    teacher_glue.main()
    assert trained == [] and "rte/cpu: recorded" in capsys.readouterr().out
    runs = str(tmp_path / "runs")
    monkeypatch.setattr(sys, "argv", ["teacher_glue.py", "--tasks", "rte", "--rerun", "--runs-dir", runs,
                                      "--tolerance", "1"])
    teacher_glue.main()
    # the recorded hyper-parameters, not today's defaults (which may have changed since)
    assert trained == [("rte", "cpu", {"epochs": 3, "learning_rate": 1e-4, "batch_size": 32, "max_seq_len": 128},
                        str(Path(runs) / "rerun" / "teacher-rte"))]
    assert "NOT within --tolerance (one recorded seed) 1.00" in capsys.readouterr().out
    assert json.loads((results_dir / "reruns.json").read_text())["teacher_glue/rte/cpu"]["delta"] == pytest.approx(1.5)
    # the recorded figure itself is left as it was
    assert json.loads((results_dir / "teacher_glue.json").read_text())["rte/cpu"]["metrics"]["score"] == 57.0


def _step(name, code, needs=()):
    return augmentation_gpu.Step(name, [sys.executable, "-c", code], list(needs))


def test_driver_runs_steps_after_what_they_need_and_blocks_after_a_failure(tmp_path):
    order = tmp_path / "order.txt"
    write = f"open({str(order)!r}, 'a').write('{{}}\\n')"
    steps = [_step("a", write.format("a")), _step("b", write.format("b"), ["a"]),
             _step("bad", "import sys; sys.exit(3)"), _step("after-bad", write.format("x"), ["bad"]),
             _step("c", write.format("c"), ["a", "b"])]
    states = augmentation_gpu.run(steps, tmp_path / "results", tmp_path / "logs", jobs=2, deadline=60, env={},
                                  poll=0.05)
    assert states == {"a": "done", "b": "done", "bad": "failed (exit 3)",
                      "after-bad": "blocked (a step it needs failed)", "c": "done"}
    assert order.read_text().split() == ["a", "b", "c"]


def test_driver_skips_recorded_steps_and_stops_running_ones_at_the_deadline(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "distill.json").write_text(json.dumps({"rte/x/cpu/seed42": {}}))
    recorded = _step("recorded", "import sys; sys.exit(1)")
    recorded.result = ("distill", "rte/x/cpu/seed42")
    steps = [recorded, _step("slow", "import time; time.sleep(60)"), _step("later", "pass", ["slow"])]
    states = augmentation_gpu.run(steps, results, tmp_path / "logs", jobs=4, deadline=0.5, env={}, poll=0.05)
    assert states == {"recorded": "done (recorded)", "slow": "stopped at the deadline (resumes next time)",
                      "later": "not started"}
