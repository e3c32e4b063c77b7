"""benchmarks/bilstm_distill.py without training: the pair settings reach the commands, and the
rows and folders of a setting other than the recorded rows' are named after it."""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bilstm_distill  # noqa: E402


def arguments(tmp_path, **changes) -> Namespace:
    values = dict(optimizer="adadelta", pair_hidden_size=150, p_ng=None, results_name="bilstm_distill",
                  runs_dir=str(tmp_path / "runs"), aug_rows=8000, n_iter=20, data_dir="glue", word_vectors="g.txt",
                  epochs=10, aug_epochs=3, teacher_dtype="float32")
    return Namespace(**{**values, **changes})


def test_the_recorded_settings_keep_their_keys_and_folders(tmp_path):
    args = arguments(tmp_path)
    for task in ("sst2", "mrpc"):
        assert [bilstm_distill.setting_tag(task, v, args) for v in ("labels", "kd", "kd_aug")] == ["", "", ""]
    assert bilstm_distill.run_folder("mrpc", "kd_aug", 42, args) == tmp_path / "runs" / "mrpc" / "kd_aug-s42"
    assert bilstm_distill.augment_key("mrpc", args) == "mrpc/augment-8000-n20"


def test_the_authors_pair_settings_are_named_in_keys_and_folders(tmp_path):
    args = arguments(tmp_path, pair_hidden_size=300, p_ng=0.0)
    assert [bilstm_distill.setting_tag("mrpc", v, args) for v in ("labels", "kd", "kd_aug")] == [
        "-h300", "-h300", "-h300-png0"]
    assert [bilstm_distill.setting_tag("sst2", v, args) for v in ("kd", "kd_aug")] == ["", "-png0"]  # not a pair
    assert bilstm_distill.augment_key("mrpc", args) == "mrpc/augment-8000-n20-png0"
    other = arguments(tmp_path, pair_hidden_size=300, optimizer="adamw", results_name="pairs")
    folder = bilstm_distill.run_folder("stsb", "kd", 43, other)
    assert folder == tmp_path / "runs" / "stsb" / "pairs" / "kd-adamw-h300-s43"


def test_a_run_passes_the_hidden_size_and_records_the_setting(tmp_path, monkeypatch):
    commands = []

    def stand_in(*options):  # what `kdbert distill task` leaves in its folder
        commands.append(options)
        out = Path(options[options.index("--output-dir") + 1])
        out.mkdir(parents=True)
        stage = {"learning_rate": 1.0, "schedule": "constant", "weight_decay": 0.0, "max_grad_norm": None,
                 "batch_size": 50}
        (out / "distill_report.json").write_text(json.dumps({
            "dev_metrics": {"score": 80.0}, "best_step": 5, "stages": [stage], "options": {"epochs": 3.0},
            "stage_losses": {"bilstm": [{"loss": 2.0}, {"loss": 1.0}]}, "student": {}}))

    monkeypatch.setattr(bilstm_distill, "kdbert", stand_in)
    train = tmp_path / "train.tsv"
    train.write_text("header\nrow\n")
    args = arguments(tmp_path, pair_hidden_size=300, p_ng=0.0)
    row = bilstm_distill.run_variant("mrpc", "kd_aug", 42, train, args, tmp_path / "teacher")
    single = bilstm_distill.run_variant("sst2", "kd", 42, train, args, tmp_path / "teacher")
    hidden = [c[c.index("--hidden-size") + 1] for c in commands]
    assert hidden == ["300", "150"]
    out = commands[0][commands[0].index("--output-dir") + 1]
    assert out == str(tmp_path / "runs" / "mrpc" / "kd_aug-h300-png0-s42")
    assert (row["setting"], row["augment"]["p_ng"], single["setting"]) == ("-h300-png0", 0.0, "")


def test_five_task_share_kept_compares_tasks_both_tables_have_against_their_own_teachers():
    from sections import bilstm_results

    def run(task, variant, score, setting=""):
        return {"task": task, "variant": variant, "score": score, "setting": setting}

    def table(scores, teachers):
        records = {f"{task}/{variant}/s42": run(task, variant, score) for (task, variant), score in scores.items()}
        return {**records, **{f"{task}/teacher": {"score": score} for task, score in teachers.items()}}

    old = table({("sst2", "kd_aug"): 40.0, ("rte", "kd_aug"): 30.0, ("cola", "kd_aug"): 5.0},
                {"sst2": 80.0, "rte": 60.0, "cola": 20.0})
    # the new table re-fine-tuned the SST-2 teacher (its record wins) and has no CoLA row yet
    new = table({("sst2", "kd_aug"): 90.0, ("rte", "kd_aug"): 45.0, ("rte", "kd"): 50.0}, {"sst2": 100.0})
    new["rte/kd_aug-h300-png0/s42"] = run("rte", "kd_aug", 60.0, "-h300-png0")  # another setting: not counted
    lines = bilstm_results._five_task_share(new, bilstm_results._bilstm_groups(new), old,
                                            bilstm_results._bilstm_groups(old))
    # new: sst2 90/100, rte 45/60 -> (0.9 + 0.75) / 2; before: 40/80, 30/60 -> 0.5
    assert lines == ["- Mean share of the teacher kept by distilled + aug over sst2, rte (recorded setting): "
                     "82.5% with the new vocabulary against 50.0% before."]


def test_a_teacher_fine_tuned_again_differently_is_named_beside_the_old_one():
    from sections import bilstm_results

    def teacher(score, rows, epochs, precision):
        return {"score": score, "finetune": {"max_train_examples": rows, "epochs": epochs, "precision": precision}}

    old = {"sst2/teacher": teacher(82.8, 4000, 2.0, None), "rte/teacher": teacher(57.0, None, 3, "no"),
           "cola/teacher": {"score": 26.2}}
    new = {"sst2/teacher": teacher(87.6, 20000, 1, "bf16"), "rte/teacher": teacher(57.0, None, 3, "no"),
           "cola/teacher": {"score": 26.2}}
    assert bilstm_results._teacher_changes(new, old) == [
        "- sst2: the new rows' teacher scores 87.60 (20,000 rows, 1 epoch, bf16), the old rows' 82.80 (4,000 rows, "
        "2 epochs, precision not recorded); the labels-only column does not use a teacher."]
