"""`kdbert report`: numbers against hand-made run folders, the Pareto front, the outputs; and the
sections of benchmarks/report.py rendered from small synthetic results files."""

import csv
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import AutoModelForSequenceClassification

from conftest import save_tiny_classifier
from kdbert.cli import main
from kdbert.errors import KdbertError
from kdbert.deploy.report import build_table, collect_runs, format_mean_std, load_records, mean_std, pareto_front, write_report


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


# --------------------------------------------------------------------------- benchmarks/report.py

def load_benchmark_report(folder, monkeypatch, files: dict):
    """The sections of ``benchmarks/report.py`` reading ``files`` ({name: {key: record}}) from ``folder``;
    the majority class scores fixed (no GLUE files here)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import common
    from sections import bilstm_results, mobilebert_results

    folder.mkdir()
    for name, records in files.items():
        (folder / f"{name}.json").write_text(json.dumps(records))
    monkeypatch.setattr(common, "RESULTS_DIR", folder)
    monkeypatch.setattr(mobilebert_results, "majority_class_score", {"mrpc": 74.8, "rte": 52.7}.get)
    return SimpleNamespace(mobilebert_task_section=mobilebert_results.mobilebert_task_section,
                           mobilebert_ablation_section=mobilebert_results.mobilebert_ablation_section,
                           bilstm_v2_lines=bilstm_results.bilstm_v2_lines)


def distill_record(task, variant, seed, score, precision="no"):
    return {"task": task, "variant": variant, "seed": seed, "metrics": {"score": score}, "budget": "cpu",
            "options": {"epochs": 3.0, "max_train_examples": 4000, "mixed_precision": precision},
            "machine": "2 cores", "date": "2026-11-24"}


def test_mobilebert_glue_table_puts_the_fitted_student_below_the_random_one(tmp_path, monkeypatch):
    records = [distill_record("mrpc", "mobilebert-long-finetune+bf16", 42, 74.8, "bf16"),
               distill_record("mrpc", "mobilebert-long-finetune+bf16", 43, 74.8, "bf16"),
               distill_record("rte", "mobilebert-long-finetune+bf16", 42, 52.7, "bf16"),
               distill_record("mrpc", "mobilebert-fitted-finetune", 42, 78.0),
               distill_record("mrpc", "mobilebert-fitted-finetune", 43, 80.0),
               distill_record("mrpc", "mobilebert-fitted-task", 42, 75.0)]  # rte and a seed not recorded yet
    teachers = {t: {"task": t, "metrics": {"score": s}} for t, s in (("mrpc", 85.0), ("rte", 57.0))}
    report = load_benchmark_report(tmp_path / "results", monkeypatch, {
        "distill": {f"{r['task']}/{r['variant']}/cpu/seed{r['seed']}": r for r in records},
        "teacher_glue": teachers})
    lines = report.mobilebert_task_section()
    table = lines[lines.index("| model | mrpc | rte | average (kept) |"):]
    assert table[4:7] == [
        "| 1,200-step student, random word table at the start (`cpu-long`, bf16), fine-tuned only | "
        "74.8 ± 0.0 (n=2) (88%) | 52.7 (92%) | 63.8 (90%) |",
        "| 1,200-step student, embeddings fitted to the teacher (`cpu-long-fitted`, fp32), fine-tuned only | "
        "79.0 ± 1.4 (n=2) (93%) | - | - |",
        "| 1,200-step student, embeddings fitted to the teacher (`cpu-long-fitted`, fp32), distilled from the "
        "fine-tuned teacher (logit KD) | 75.0 (88%) | - | - |"]
    assert "| majority class of train (constant prediction) | 74.8 | 52.7 | - |" in table
    assert ("- The 1,200-step student with embeddings fitted to the teacher, fine-tuned only: more than 1 point "
            "above the majority class on mrpc 79.0 against 74.8 (2 of 2 seeds above it); at it or within 1 point "
            "on no task.") in lines
    assert ("- The 1,200-step student from a random word table, fine-tuned only: more than 1 point above the "
            "majority class on no task; at it or within 1 point on mrpc (2 of 2 seeds), rte (1 of 1 seeds).") in lines
    assert any("cosine 1.0000 between two unrelated ones), and it started with indistinguishable word embeddings "
               "(cosine 0.9995 between the embedding outputs of different words; fixed since" in line for line in lines)


def ablation_record(budget, precision, top1, score, distinctness=None):
    record = {"budget": budget, "strategy": "progressive", "seed": 42, "task": "sst2", "precision": precision,
              "settings": {"layer_steps": 150, "pretrain_steps": 300, "sequences": 48000, "learning_rate": 3e-4,
                           "batch_size": 32, "finetune_steps": 500, "finetune_batch_size": 32},
              "general_steps": 1200, "general_seconds": 1260.0, "general_command": f"kdbert distill general {budget}",
              "finetune_command": "kdbert finetune", "date": "2026-11-24", "machine": "2 cores",
              "held_out": {"top1": top1, "cross_entropy": 7.0, "last_layer_feature_map_mse": 1.5},
              "teacher_held_out": {"top1": 0.05}, "dev_metrics": {"accuracy": score, "score": score}}
    return {**record, "embedding_distinctness": distinctness} if distinctness else record


def test_mobilebert_ablation_fitted_budget_states_its_precision_and_embedding_distinctness(tmp_path, monkeypatch):
    distinct = {"tokens": 256, "student_mean_cosine": 0.4123, "teacher_mean_cosine": 0.2011}
    report = load_benchmark_report(tmp_path / "results", monkeypatch, {"mobilebert_ablation": {
        "cpu-long-fitted/progressive/s42/sst2": ablation_record("cpu-long-fitted", "no", 0.2, 80.0, distinct),
        "cpu-long/progressive/s42/sst2": ablation_record("cpu-long", "bf16", 0.147, 75.6)}})
    lines = report.mobilebert_ablation_section()
    old = lines.index("### Budget `cpu-long`: 1200 steps of 32 x 64 tokens")
    new = lines.index("### Budget `cpu-long-fitted`: 1200 steps of 32 x 64 tokens, embedding layer fitted to the "
                      "teacher's")
    assert old < new
    assert "AdamW at 0.0003, bf16; then plain" in lines[old + 2] and lines[old + 4].startswith(
        "Embedding layer at initialisation: a random 128-d word table, whose embedding outputs of different words "
        "had mean cosine 0.9995")
    assert "AdamW at 0.0003, float32; then plain" in lines[new + 2] and "bf16" not in lines[new + 2]
    assert lines[new + 4].endswith(
        "Mean cosine between the embedding outputs of different tokens among the 256 most frequent corpus tokens "
        "(1.0 = indistinguishable): student 0.412, teacher 0.201 (printed at the start of general distillation).")
    row = lines.index("| progressive | sst2 | 42 | 20.0% | 7.00 | 1.500 | accuracy 80.0 | 21 min |")
    assert lines[row + 2:row + 4] == [
        "Against `cpu-long` (the same budget, its student started from a random word table): precision bf16 -> "
        "float32.",
        "- progressive, sst2, seed 42: held-out MLM top-1 14.7% -> 20.0%, CE 7.00 -> 7.00, last-layer MSE 1.500 -> "
        "1.500; dev score 75.6 -> 80.0."]


def bilstm_run(task, variant, seed, score, setting="", hidden=150, p_ng=0.25, oov=None, frequent=False):
    """A key and record as benchmarks/bilstm_distill.py writes them; ``setting`` is the kd_aug tag;
    ``oov``: (train-only rate, vocabulary rate, words added) under the old rule (dev words with a
    vector join), or with ``frequent`` the present one (the word vectors' frequent words join)."""
    tag = setting if variant == "kd_aug" else setting.split("-png")[0]  # only kd_aug names its p_ng
    run = {"task": task, "variant": variant, "seed": seed, "score": score, "optimizer": "adadelta",
           "setting": tag, "machine": "2 cores", "date": "2026-11-24",
           "student": {"config": {"hidden_size": hidden}}}
    if oov:
        rule, source = (("with frequent vector words", "frequent vector words") if frequent
                        else ("with dev words", "dev with a vector"))
        run["student"].update(dev_oov_rate={"train words only": oov[0], rule: oov[1]},
                              vocab_sources={"train": 5000, source: oov[2]})
    if variant == "kd_aug":
        run["augment"] = {"p_ng": p_ng}
    return f"{task}/{variant}{tag}/s{seed}", run


def test_bilstm_v2_rows_sit_beside_the_old_ones(tmp_path, monkeypatch):
    old = dict(bilstm_run("stsb", v, s, score) for v, base in (("labels", 66.0), ("kd", 67.0), ("kd_aug", 59.0))
               for s, score in ((42, base), (43, base + 1)))
    old.update({"stsb/teacher": {"score": 83.0}, "rte/teacher": {"score": 57.0}})
    for run in old.values():
        run.pop("setting", None)  # the first records have their setting in the key only
    new = dict([bilstm_run("stsb", v, 42, score, oov=(0.065, 0.003, 812))
                for v, score in (("labels", 70.0), ("kd", 71.0), ("kd_aug", 72.0))]
               + [bilstm_run("rte", "labels", 42, 55.0), bilstm_run("rte", "kd", 42, 56.0),
                  bilstm_run("rte", "kd_aug", 42, 57.5, "-h300-png0", 300, 0.0),  # its labels and kd not yet run
                  bilstm_run("rte", "kd_aug", 42, 54.0)])
    new["stsb/teacher"] = {"score": 83.0}
    report = load_benchmark_report(tmp_path / "results", monkeypatch, {"bilstm_distill_v2": new})
    lines = report.bilstm_v2_lines(old)
    assert lines[1] == "### Distilled BiLSTM with the new vocabulary ([MASK] apart, dev words with a vector)"
    table = lines[lines.index("|---|---|---|---|---|---|---|---|---|---|") + 1:]
    assert table[:5] == [
        "| stsb | recorded: hidden 150, p_ng 0.25 | new | 83.0 | 70.0 | 71.0 | 72.0 | 86.7% | 6.5% -> 0.3% "
        "with dev words (old rule) (+812 words) | 42 |",
        "| stsb | recorded: hidden 150, p_ng 0.25 | before | 83.0 | 66.5 ± 0.7 (n=2) | 67.5 ± 0.7 (n=2) | "
        "59.5 ± 0.7 (n=2) | 71.7% | - | 42, 43 |",
        "| rte | recorded: hidden 150, p_ng 0.25 | new | 57.0 | 55.0 | 56.0 | 54.0 | 94.7% | - | 42 |",
        "| rte | `-h300-png0`: hidden 300, p_ng 0 | new | 57.0 | - | - | 57.5 | 100.9% | - | 42 |",
        ""]
    assert table[5:9] == [
        "- stsb (recorded: hidden 150, p_ng 0.25): distilled + aug >= distilled: yes (72.0 against 71.0, +1.0); "
        "before the change: no (59.5 against 67.5, -8.0).",
        "- rte (recorded: hidden 150, p_ng 0.25): distilled + aug >= distilled: no (54.0 against 56.0, -2.0).",
        "- rte (`-h300-png0`: hidden 300, p_ng 0) against the recorded setting: distilled + aug 57.5 against "
        "54.0 (+3.5).",
        ""]


def test_bilstm_v2_dev_oov_names_the_rule_that_built_each_vocabulary(tmp_path, monkeypatch):
    """Records made before the frequent-words vocabulary report "with dev words"; newer ones "with
    frequent vector words": both render, each labelled with its own rule."""
    old = {"stsb/teacher": {"score": 83.0}, "rte/teacher": {"score": 57.0}}
    new = dict([bilstm_run("stsb", v, 42, score, oov=(0.065, 0.003, 812))  # recorded under the old rule
                for v, score in (("labels", 70.0), ("kd", 71.0), ("kd_aug", 72.0))]
               + [bilstm_run("rte", v, 42, score, oov=(0.071, 0.024, 20000), frequent=True)
                  for v, score in (("labels", 55.0), ("kd", 56.0), ("kd_aug", 57.5))])
    report = load_benchmark_report(tmp_path / "results", monkeypatch, {"bilstm_distill_v2": new})
    lines = report.bilstm_v2_lines(old)
    assert lines[1] == ("### Distilled BiLSTM with the new vocabulary ([MASK] apart, dev words with a vector in the "
                        "older runs, the word vectors' frequent words in the newer)")
    table = lines[lines.index("|---|---|---|---|---|---|---|---|---|---|") + 1:]
    assert [row.split(" | ")[-2] for row in table[:2]] == [
        "6.5% -> 0.3% with dev words (old rule) (+812 words)",
        "7.1% -> 2.4% with frequent vector words (+20,000 words)"]
    # only new-rule runs: the heading says so
    only_new = {k: r for k, r in new.items() if k.startswith("rte/")}
    report = load_benchmark_report(tmp_path / "only_new", monkeypatch, {"bilstm_distill_v2": only_new})
    assert report.bilstm_v2_lines(old)[1] == ("### Distilled BiLSTM with the new vocabulary ([MASK] apart, the word "
                                              "vectors' frequent words)")


def test_compress_searches_superseded_by_a_later_protocol_go_to_the_archive(monkeypatch):
    """A search against a teacher fine-tuned on the rows it picks on is superseded once its task and
    target were searched against a teacher fine-tuned without them, unless the scoreboard cites it."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from sections import compress_results

    def search(task, target, held_out_teacher=False):
        return {"task": task, "target": {"speedup": target}, "teacher_held_out_fraction": 0.1 if held_out_teacher
                else None}

    monkeypatch.setattr(compress_results, "CITED_SEARCHES", {"sst2/x4"})
    assert compress_results.superseded({
        "cola/x4": search("cola", 4), "cola/x4-aug": search("cola", 4),
        "cola/x4-held-out-teacher": search("cola", 4, held_out_teacher=True),
        "cola/x8": search("cola", 8),  # no later 8x search
        "rte/x4": search("rte", 4),  # RTE not searched again
        "sst2/x4": search("sst2", 4), "sst2/x4-tie": search("sst2", 4, held_out_teacher=True)}) == {
        "cola/x4", "cola/x4-aug"}


def test_teachers_table_states_the_chosen_runs_pooling_and_the_unpicked_half(tmp_path, monkeypatch):
    def run(pooling=None, decide=None):
        return {"held_out": 38.26, "held_out_se": 5.0, "dev": 27.84, "learning_rate": 1e-4, "epochs": 10,
                "train_seconds": 660.0, **({"pooling": pooling} if pooling else {}),
                **({"decide": decide, "decide_se": 5.22} if decide is not None else {})}

    record = {"chosen": "a", "published_minilm_l6_dev": 47.5, "date": "2026-11-29", "machine": "2 cores"}
    load_benchmark_report(tmp_path / "results", monkeypatch, {"teacher_best": {
        "cola": {**record, "runs": {"a": run("mean", 23.91)}}, "rte": {**record, "runs": {"a": run()}}}})
    from sections import trust_results

    rows = [line for line in trust_results.teachers_section() if line.startswith("| cola") or line.startswith("| rte")]
    assert rows[0].startswith("| cola | lr 0.0001, 10 epochs, mean pooling | 38.26 ± 5.00 | 23.91 ± 5.22 | 27.84 | 47.5 |")
    assert rows[1].startswith("| rte | lr 0.0001, 10 epochs | 38.26 ± 5.00 | - (picked on all) | 27.84 |")  # recorded before


def test_gpu_base_teachers_table_reads_finished_and_stopped_runs_beside_the_cpu_ones(tmp_path, monkeypatch):
    teacher = {"held_out_rows": 688, "epochs": 2, "steps": 3704, "train_minutes": 3.6, "dev": 90.0,
               "dev_metrics": {"decide_score": 80.0}, "date": "2026-11-30", "machine": "H200"}
    student = {"date": "2026-11-30", "machine": "H200"}
    gpu = tmp_path / "gpu"
    load_benchmark_report(tmp_path / "results", monkeypatch, {
        "base_teacher": {"sst2": {**teacher, "dev": 80.0, "max_train_examples": 16000,
                                  "dev_metrics": {"decide_score": 50.0}}},
        "recipe_ablation": {f"sst2-mpnet/cand/{steps}/search/seed{seed}": {"dev": dev, "decide": 40.0, "seed": seed}
                            for steps, seed, dev in ((600, 42, 60.0), (600, 43, 64.0), (1200, 42, 99.0))}})
    (gpu / "stopped").mkdir(parents=True)
    (gpu / "base_teacher.json").write_text(json.dumps({"sst2": teacher, "mrpc": teacher}))
    (gpu / "recipe_ablation.json").write_text(json.dumps({
        f"mrpc-mpnet-gpu/cand/1800/search/seed{seed}": {**student, "dev": dev, "decide": 72.0, "seed": seed}
        for seed, dev in ((42, 81.0), (43, 83.0))}))
    for seed, dev in ((42, 72.0), (43, 90.0)):  # stopped after its step-2000 evaluation, at step 2500
        rows = [{"step": 2000, "eval": {"selection_score": 1.0, "decide_score": 60.0, "score": dev}},
                {"step": 2500, "loss": 0.1}]
        (gpu / "stopped" / f"sst2-cand-seed{seed}.log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from sections import trust_results

    monkeypatch.setattr(trust_results, "GPU_H200_BASE_RESULTS", gpu)
    rows = [line for line in trust_results.base_teachers_gpu_section() if line.startswith("| ")][1:]
    # sst2: the stopped runs' last evaluations (mean 81 of the teacher's 90, 60 of 80), against the CPU
    # runs of most seeds (600 steps: 62 of 80, 40 of 50)
    assert rows[0] == ("| sst2 | all less 688 held out, 2, 3,704, 3.6 | 90.00 (80.00 from the first 16,000) | 80.00 | "
                       "cand | 2,000 (stopped at 2,500-2,500 of the planned runs by the deadline) | 2 | "
                       "81.00 ± 12.73, 90.0% | 60.00, 75.0% | 600 (2 seeds): 77.5%, 80.0% |")
    assert rows[1] == ("| mrpc | all less 688 held out, 2, 3,704, 3.6 | 90.00 | 80.00 | cand | 1,800 | 2 | "
                       "82.00 ± 1.41, 91.1% | 72.00, 90.0% | - |")
