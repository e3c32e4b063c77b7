"""`kdbert report`: numbers against hand-made run folders, the Pareto front, the outputs."""

import csv
import io
import json

import pytest
from transformers import AutoModelForSequenceClassification

from conftest import save_tiny_classifier
from kdbert.cli import main
from kdbert.errors import KdbertError
from kdbert.report import build_table, collect_runs, format_mean_std, load_records, mean_std, pareto_front, write_report


def write_teacher(folder, task, score, seed=42):
    folder.mkdir(parents=True)
    (folder / "run_config.json").write_text(json.dumps({"command": "finetune", "task": task, "model": "/m/base",
                                                        "seed": seed}))
    (folder / "metrics.json").write_text(json.dumps({"accuracy": score, "score": score}))
    return folder


def write_student(folder, task, score, seed, teacher, method="kd", layers="0,1,2"):
    folder.mkdir(parents=True)
    report = {"method": method, "task": task, "teacher": str(teacher), "dev_metrics": {"score": score},
              "options": {"seed": seed, "student_layers": layers}}
    (folder / "distill_report.json").write_text(json.dumps(report))
    return folder


@pytest.fixture
def runs(tmp_path):
    """Teacher 80 (sst2) / 50 (rte); kd seeds 78, 79, 83 on sst2 and 40, 44 on rte; pkd 70 on sst2 only."""
    sst2 = write_teacher(tmp_path / "teacher-sst2", "SST-2", 80.0)
    rte = write_teacher(tmp_path / "teacher-rte", "rte", 50.0)
    folders = [write_student(tmp_path / f"kd-sst2-{s}", "sst2", v, s, sst2)
               for s, v in ((1, 78.0), (2, 79.0), (3, 83.0))]
    folders += [write_student(tmp_path / f"kd-rte-{s}", "rte", v, s, rte) for s, v in ((1, 40.0), (2, 44.0))]
    folders.append(write_student(tmp_path / "pkd-sst2", "sst2", 70.0, 1, sst2, method="pkd"))
    return folders


def test_mean_std_is_the_sample_std():
    assert mean_std([78.0, 79.0, 83.0]) == (80.0, pytest.approx(7.0 ** 0.5))  # ((4 + 1 + 9) / 2) ** 0.5
    assert mean_std([5.0]) == (5.0, None)
    assert format_mean_std([78.0, 79.0, 83.0]) == "80.0 ± 2.6 (n=3)" and format_mean_std([5.0]) == "5.0"


def test_table_numbers_from_run_folders(runs):
    records = collect_runs(runs)  # the teachers come in through the students' reports
    assert sorted(r["name"] for r in records) == ["kd (3 layers)"] * 5 + ["pkd (3 layers)"] + ["teacher"] * 2
    table = build_table(records)
    assert table["teacher"] == "teacher" and set(table["tasks"]) == {"sst2", "rte"}
    teacher, kd, pkd = table["rows"]
    assert teacher["name"] == "teacher" and teacher["average"] == 65.0
    sst2, rte = kd["tasks"]["sst2"], kd["tasks"]["rte"]
    assert (sst2["mean"], sst2["n"], sst2["kept"]) == (80.0, 3, 100.0)
    assert sst2["std"] == pytest.approx(7.0 ** 0.5)
    assert (rte["mean"], rte["std"], rte["kept"]) == (42.0, pytest.approx(8.0 ** 0.5), 84.0)
    assert kd["average"] == 61.0 and kd["average_kept"] == pytest.approx(100 * 61 / 65)
    assert pkd["tasks"]["sst2"]["kept"] == 87.5 and pkd["average"] is None  # covers one task of two


def test_speedups_are_against_the_teacher_in_the_same_runtime(tmp_path):
    records = [
        {"name": "teacher", "task": "sst2", "score": 90.0, "teacher": True, "latency_pytorch_ms": 12.0,
         "latency_onnx_int8_ms": 2.4, "score_onnx_int8": 89.0},
        {"name": "small", "task": "sst2", "score": 88.2, "latency_pytorch_ms": 3.0, "latency_onnx_int8_ms": 0.3,
         "score_onnx_int8": 86.33},
    ]
    table = build_table(records)
    small = table["rows"][1]
    assert small["speedup_pytorch"] == 4.0 and small["speedup_onnx_int8"] == pytest.approx(8.0)
    assert small["tasks"]["sst2"]["kept"] == pytest.approx(98.0) and small["tasks"]["sst2"]["kept_onnx_int8"] == 97.0
    path = tmp_path / "records.json"
    path.write_text(json.dumps({"a": records[0], "b": records[1]}))
    paths = write_report(load_records(path), tmp_path / "out")
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| small | 88.2 (98%) | 88.2 (98.0%) | - | - | 3.00 (4.00x) | 0.30 (8.00x) | 86.3 (97.0%) |" in markdown
    rows = list(csv.DictReader(io.StringIO((tmp_path / "out" / "report.csv").read_text())))
    assert rows[1]["method"] == "small" and float(rows[1]["speedup_onnx_int8"]) == pytest.approx(8.0)
    assert json.loads((tmp_path / "out" / "report.json").read_text())["table"]["rows"][1]["name"] == "small"
    assert (tmp_path / "out" / "pareto.png").read_bytes()[:4] == b"\x89PNG" and "plot" in paths


def test_pareto_front_on_hand_made_points():
    points = [(10.0, 90.0), (5.0, 85.0), (6.0, 84.0), (2.0, 80.0), (2.0, 79.0), (12.0, 89.0), (5.0, 85.0)]
    # (6, 84) is beaten by (5, 85); (2, 79) by (2, 80); (12, 89) by (10, 90); the two (5, 85) tie
    assert pareto_front(points) == [3, 1, 6, 0]
    assert pareto_front([(1.0, 1.0)]) == [0]


def test_report_cli_and_its_errors(runs, tmp_path, capsys, tiny_tokenizer):
    assert main(["report", *map(str, runs[:3]), "--output-dir", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "| kd (3 layers) | 80.0 ± 2.6 (n=3) (100%) |" in out
    assert not (tmp_path / "rep" / "pareto.png").exists()  # no latencies without --bench
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "x", "task": "sst2"}]))
    for argv, message in ((["report", str(tmp_path / "empty")], "is not a kdbert run folder"),
                          (["report"], "pass run folders"),
                          (["report", "--results", str(bad)], "record 0 has no score")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("kdbert: error: ") and message in err and err.count("\n") == 1, err
    with pytest.raises(KdbertError, match="no run records"):
        build_table([])


def test_report_bench_times_pytorch_and_int8_exports(tmp_path, tiny_tokenizer):
    teacher = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer)
    (teacher / "run_config.json").write_text(json.dumps({"command": "finetune", "task": "sst2", "seed": 1}))
    (teacher / "metrics.json").write_text(json.dumps({"score": 60.0}))
    records = collect_runs([teacher], bench=True, seq_len=16)
    assert records[0]["teacher"] and records[0]["latency_pytorch_ms"] > 0
    assert "latency_onnx_int8_ms" not in records[0]  # not exported
    model = AutoModelForSequenceClassification.from_pretrained(teacher)
    assert records[0]["params"] == sum(p.numel() for p in model.parameters())
