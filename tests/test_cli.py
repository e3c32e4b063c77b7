"""The command line: end-to-end runs on tiny models and one-line errors for bad input."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SHARED_GLUE, save_tiny_classifier
from transformers import AutoModelForSequenceClassification, BertModel

from kdbert.cli import main


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_command_line_loads_no_scoring_or_onnx_library_before_a_command_needs_one():
    # scipy.stats, scikit-learn and onnx took 3-4 of the 16 s that `import kdbert.cli` took on an AVX2-only
    # EPYC, paid by every command, `kdbert predict` and `serve` included; they load where they are used
    import subprocess
    import sys

    heavy = ("scipy.stats", "sklearn", "onnx", "pandas")
    code = f"import sys, kdbert.cli; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_finetune_evaluate_and_bench_end_to_end(tmp_path, capsys, tiny_classifier_dir, glue_dir):
    out = tmp_path / "ft"
    code, stdout, _ = run_cli(capsys, "finetune", "--model", tiny_classifier_dir, "--task", "mrpc", "--data-dir",
                              glue_dir, "--output-dir", out, "--max-steps", 6, "--batch-size", 8, "--no-progress")
    assert code == 0 and "accuracy=" in stdout and "f1=" in stdout
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.num_labels == 2
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == {"accuracy", "f1", "score"}

    code, stdout, _ = run_cli(capsys, "evaluate", "--model", out, "--task", "mrpc", "--data-dir", glue_dir)
    assert code == 0
    assert json.loads((out / "eval_mrpc.json").read_text()) == pytest.approx(metrics)

    code, stdout, _ = run_cli(capsys, "bench", "--model", out, "--compare", tiny_classifier_dir, "--seq-len", 16,
                              "--runs", 3, "--output", tmp_path / "bench.json")
    assert code == 0 and "Speedup" in stdout
    rows = json.loads((tmp_path / "bench.json").read_text())
    assert len(rows) == 2 and rows[0]["speedup"] == pytest.approx(1.0)


def test_finetune_regression_and_own_csv(tmp_path, capsys, tiny_tokenizer, glue_dir):
    model = save_tiny_classifier(tmp_path / "reg", tiny_tokenizer, num_labels=1)
    code, stdout, _ = run_cli(capsys, "finetune", "--model", model, "--task", "stsb", "--data-dir", glue_dir,
                              "--output-dir", tmp_path / "stsb", "--max-steps", 3, "--no-progress")
    assert code == 0 and "pearson=" in stdout and "spearman=" in stdout
    csv = tmp_path / "mine.csv"
    csv.write_text("review,stars\n" + "\n".join(f"the cat sat {i},{'abc'[i % 3]}" for i in range(30)) + "\n")
    code, stdout, _ = run_cli(capsys, "finetune", "--model", model, "--task", csv, "--text-columns", "review",
                              "--label-column", "stars", "--output-dir", tmp_path / "own", "--max-steps", 2,
                              "--no-progress")
    assert code == 0 and "macro_f1=" in stdout
    assert AutoModelForSequenceClassification.from_pretrained(tmp_path / "own").config.num_labels == 3
    # `kdbert predict` reads a file's rows by the column it was trained on, with no --text-columns
    code, stdout, err = run_cli(capsys, "predict", "--model", tmp_path / "own", "--input", csv)
    assert code == 0 and len(stdout.splitlines()) == 30, err  # one JSON line per row


def test_config_file_sets_options_and_command_line_wins(tmp_path, capsys, tiny_classifier_dir, glue_dir):
    config = tmp_path / "run.yaml"
    config.write_text(f"task: rte\ndata-dir: {glue_dir}\nmax_steps: 2\nbatch_size: 4\nlearning_rate: 0.5\n")
    out = tmp_path / "cfg"
    code, _, err = run_cli(capsys, "finetune", "--config", config, "--model", tiny_classifier_dir,
                           "--output-dir", out, "--learning-rate", "0.001", "--no-progress")
    assert code == 0, err
    saved = json.loads((out / "run_config.json").read_text())
    assert saved["max_steps"] == 2 and saved["learning_rate"] == 0.001 and saved["batch_size"] == 4
    config.write_text("tsak: rte\n")
    code, _, err = run_cli(capsys, "finetune", "--config", config, "--output-dir", out)
    assert code == 2 and "unknown option 'tsak'" in err


def _assert_one_line_error(code, err, *fragments):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kdbert: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_bad_input_gives_one_line_errors(tmp_path, capsys, tiny_classifier_dir, tiny_tokenizer, glue_dir):
    common = ["--model", tiny_classifier_dir, "--output-dir", tmp_path / "o", "--max-steps", 1, "--no-progress"]
    _assert_one_line_error(*run_cli(capsys, "finetune", "--task", "rte", "--data-dir", tmp_path / "none",
                                    *common)[::2], "does not exist", "--data-dir")
    _assert_one_line_error(*run_cli(capsys, "finetune", "--task", "rtee", "--data-dir", glue_dir, *common)[::2],
                           "unknown task 'rtee'")
    bad = glue_dir / "RTE" / "dev.tsv"
    bad.write_text(bad.read_text().replace("entailment", "entails", 1))
    _assert_one_line_error(*run_cli(capsys, "finetune", "--task", "rte", "--data-dir", glue_dir, *common)[::2],
                           "RTE/dev.tsv:2", "label 'entails'")
    _assert_one_line_error(*run_cli(capsys, "evaluate", "--model", tmp_path / "missing", "--task", "mrpc",
                                    "--data-dir", glue_dir)[::2], "does not exist")
    bare = tmp_path / "bare"
    BertModel(AutoModelForSequenceClassification.from_pretrained(tiny_classifier_dir).config).save_pretrained(bare)
    _assert_one_line_error(*run_cli(capsys, "evaluate", "--model", bare, "--task", "mrpc", "--data-dir",
                                    glue_dir)[::2], "not a fine-tuned sequence-classification model")
    three = save_tiny_classifier(tmp_path / "three", tiny_tokenizer, num_labels=3)
    _assert_one_line_error(*run_cli(capsys, "evaluate", "--model", three, "--task", "mrpc", "--data-dir",
                                    glue_dir)[::2], "3 output(s) but the task needs 2")
    out = tmp_path / "taken"
    args = ["finetune", "--model", tiny_classifier_dir, "--task", "mrpc", "--data-dir", glue_dir, "--output-dir",
            out, "--max-steps", 1, "--no-progress"]
    assert run_cli(capsys, *args)[0] == 0
    _assert_one_line_error(*run_cli(capsys, *args[:-3], "--max-steps", 2, "--no-progress")[::2],
                           "already holds a run", "--overwrite")
    assert run_cli(capsys, *args[:-3], "--max-steps", 2, "--no-progress", "--overwrite")[0] == 0


@pytest.mark.teacher
@pytest.mark.skipif(not SHARED_GLUE.is_dir(), reason="../shared/data/glue_data not present")
@pytest.mark.parametrize("args, message", [
    (["distill", "task", "--alpha", "0.5"],
     "--alpha is a kd/pkd/distilbert/mobilebert/bilstm/minilm option and --method tinybert does not use it; drop it or use "
     "--method kd"),
    (["distill", "task", "--kd-loss", "mse"], "--kd-loss is a kd/pkd/distilbert/mobilebert/minilm option and --method tinybert"),
    (["distill", "task", "--method", "kd", "--intermediate-lr", "1e-4"], "--intermediate-lr is a tinybert option"),
    (["distill", "task", "--batch-size", "-3"], "--batch-size must be a positive integer (got -3)"),
    (["distill", "task", "--epochs", "0"], "--epochs must be a positive number of epochs (at most 100000) (got 0.0)"),
    (["distill", "task", "--learning-rate", "nan"], "--learning-rate must be a learning rate in (0, 1] (got nan)"),
    (["distill", "task", "--method", "kd", "--temperature", "1e9"], "--temperature must be a positive temperature"),
    (["finetune", "--batch-size", "-3"], "--batch-size must be a positive integer (got -3)"),
    (["finetune", "--warmup-ratio", "1"], "--warmup-ratio must be a fraction in [0, 1) (got 1.0)"),
    (["distill", "general", "--method", "distilbert", "--alpha-ce", "-1", "--corpus", "c.txt"],
     "--alpha-ce must be a finite number >= 0 (got -1.0)"),
    (["mlm-head", "--steps", "0", "--corpus", "c.txt"], "--steps must be a positive integer (got 0)"),
])
def test_options_are_checked_before_anything_runs(tmp_path, capsys, args, message):
    """One typed config per method: foreign and out-of-range options are refused in one line,
    before any data or model is read (the teacher 'missing' is never looked at)."""
    extra = [] if args[0] in ("mlm-head",) or args[:2] == ["distill", "general"] else ["--task", "rte"]
    teacher = ["--teacher", "missing"] if args[:2] == ["distill", "task"] else []
    code = main([*args, *extra, *teacher, "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"kdbert: error: {message}"), err
    assert not (tmp_path / "out").exists()


def test_real_teacher_finetunes_and_evaluates_on_real_rte(tmp_path, capsys):
    out = tmp_path / "teacher"
    code, stdout, err = run_cli(capsys, "finetune", "--task", "rte", "--data-dir", SHARED_GLUE, "--output-dir", out,
                                "--max-steps", 2, "--batch-size", 8, "--max-train-examples", 16, "--max-seq-len", 64,
                                "--no-progress")
    assert code == 0, err
    metrics = json.loads((out / "metrics.json").read_text())
    assert 30.0 < metrics["accuracy"] < 70.0  # two steps: near chance, but a real evaluation of 277 rows
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.hidden_size == 384 and model.config.num_hidden_layers == 6
    assert model.config.id2label == {0: "entailment", 1: "not_entailment"}


def test_quickstart_fine_tunes_compresses_benches_and_resumes(tmp_path, capsys, tiny_tokenizer, glue_dir,
                                                              monkeypatch):
    from kdbert.cli import quickstart
    from kdbert.compress import search

    # called in a running process, the job counts from the call, not from the process's start
    monkeypatch.setattr(quickstart, "seconds_since_start", lambda: 240.0)  # a ceiling then short of compress's 8 min
    teacher = save_tiny_classifier(tmp_path / "base", tiny_tokenizer, num_hidden_layers=4, hidden_dropout_prob=0.0,
                                   hidden_size=128, intermediate_size=256)
    args = ["quickstart", "--task", "sst2", "--data-dir", glue_dir, "--model", teacher, "--output-dir",
            tmp_path / "qs", "--target-speedup", "0.01", "--candidates", "bert-1x128,bert-2x128", "--first-steps", 2,
            "--max-train-examples", 16, "--timing-threads", 1, "--no-progress"]
    code, stdout, err = run_cli(capsys, *args)
    assert code == 0, err
    out = tmp_path / "qs"
    summary = json.loads((out / "summary.json").read_text())
    report = json.loads((out / "compress" / "compress_report.json").read_text())
    teacher_row, student_row, teacher_int8, student_int8 = summary["rows"]
    assert summary["winner"] == report["winner"]["candidate"] and student_row["name"] == f"student ({summary['winner']})"
    assert teacher_row["speedup"] == pytest.approx(1.0)
    assert student_row["params_non_embedding"] < teacher_row["params_non_embedding"]
    assert [r["runtime"] for r in summary["rows"]] == ["pytorch fp32"] * 2 + ["onnxruntime int8"] * 2
    for folder, row in (("teacher-onnx", teacher_int8), ("winner", student_int8)):  # the int8 export's score
        export = json.loads((out / "compress" / folder / "export_report.json").read_text())
        assert row["dev_score"] == export["dev_metrics"]["onnx_int8"]["score"]
        assert summary["int8_methods"]["teacher" if folder == "teacher-onnx" else "student"] == \
            export["quantization"]["method"]
    # the teacher never trained on the rows the search picks on: both held out the same fifth (the 16 rows it
    # trains on leave 24 of the 40 unread)
    teacher_config = json.loads((out / "teacher" / "run_config.json").read_text())
    assert teacher_config["held_out_fraction"] == 0.2 == json.loads(
        (Path(report["winner"]["run"]) / "run_config.json").read_text())["held_out_fraction"]
    assert report["teacher_saw_held_out_rows"] is False and "note: the teacher was fine-tuned on" not in stdout
    # the search distilled on the 16 rows the teacher was fine-tuned on (less the held-out fifth)
    run = json.loads((Path(report["winner"]["run"]) / "distill_report.json").read_text())
    assert run["options"]["max_train_examples"] == 16
    assert run["options"]["method"] in ("kd", "bilstm")  # the quickstart's short rounds: logits only, no TinyBERT stage
    assert summary["int8_speedup_vs_int8_teacher"] == report["shipped"]["speedup"]
    fastest = report["shipped"]["each_at_its_fastest"]  # timed at 1 thread; the other count on a 2-core machine
    assert summary["int8_speedup_each_at_its_fastest"] == (fastest and fastest["speedup"])
    if fastest and (fastest["teacher_threads"], fastest["winner_threads"]) != (1, 1):
        assert f"it runs at {fastest['speedup']:.2f}x" in stdout  # the summary says it, as the report does
    assert "faster than the int8 teacher at batch 1 on 1 thread(s)" in stdout and "winner of the search" in stdout
    assert "Dev score" in stdout and report["speed"]["settings"]["threads"] == 1  # --timing-threads reached compress
    assert f"held-out training rows that decide (never trained on, never picking a checkpoint), the shipped student " \
           f"keeps {100 * report['shipped']['kept_decide']:.1f}% of the teacher's score" in stdout
    # how long it takes here, said before it starts, from the teacher's measured steps
    assert stdout.index(" min on this machine (") < stdout.index("[1/3] fine-tuning the teacher")
    assert "fine-tuning the teacher" in stdout and "steps of" in stdout and "s, measured), compress 8 min" in stdout
    # conftest sets $KDBERT_MIXED_PRECISION=no: `auto` trains in float32 here
    assert summary["training_precision"] == {"teacher": "float32"} and "trained in float32 (teacher)" in stdout
    assert (out / "compress" / "pareto.png").is_file()

    def no_run(*args, **kwargs):
        raise AssertionError("a finished run was distilled again")

    monkeypatch.setattr(search, "distil_segment", no_run)
    code, stdout, _ = run_cli(capsys, *args)  # finished steps are skipped, not redone
    assert code == 0 and "fine-tuning the teacher" not in stdout
    assert json.loads((out / "summary.json").read_text())["winner"] == summary["winner"]


def test_the_main_job_holds_out_a_fifth_where_its_training_subset_leaves_rows_unread(tmp_path, glue_dir):
    from kdbert.cli.quickstart import held_out_fraction
    from kdbert.data.load import TaskOptions

    task = TaskOptions(task="sst2", data_dir=str(glue_dir))  # 40 training rows
    assert held_out_fraction(task, 16) == 0.2 and held_out_fraction(task, 32) == 0.2  # 32 left of 40
    assert held_out_fraction(task, 33) == 0.1  # a fifth would cut the rows it trains on
    assert held_out_fraction(task, None) == 0.1  # the whole training set: compress's tenth
    assert held_out_fraction(replace(task, held_out_fraction=0.3), 16) == 0.3  # asked for
    begun = tmp_path / "teacher"  # a teacher begun earlier keeps the rows it held out
    begun.mkdir()
    (begun / "run_config.json").write_text(json.dumps({"held_out_fraction": 0.1}))
    assert held_out_fraction(task, 16, begun) == 0.1 and held_out_fraction(task, 16, tmp_path / "new") == 0.2


def test_the_bench_is_counted_at_the_length_it_pads_to():
    """The teacher's evaluated row, timed at 13 tokens, scaled to the bench's 64: BENCH_ROWS = 4 x (5 + 20
    + 8 x 32) = 1,124 rows x 0.005 s x 64 / 13 = 27.66 s; rows timed longer than 64 are not scaled down."""
    from kdbert.cli.quickstart import BENCH_ROWS, bench_seconds, bench_seq_len
    from kdbert.data.load import TaskOptions

    assert BENCH_ROWS == 1124 and bench_seq_len(TaskOptions("sst2")) == 64 and bench_seq_len(TaskOptions("mrpc")) == 128
    assert bench_seconds({"row_seconds": 0.005, "row_length": 13}, 64) == pytest.approx(1124 * 0.005 * 64 / 13)
    assert bench_seconds({"row_seconds": 0.005, "row_length": 100}, 64) == pytest.approx(1124 * 0.005)


def test_the_main_job_fits_its_ceiling_by_shrinking_the_teachers_steps_and_compress_alike():
    """fit_to_ceiling: 600 steps of 0.5 s and 10 s of loading and evaluation, compress 8 min, the
    bench 5 s, against 12 min: scale = (720 - 5 - 10) / (300 + 480) = 0.904 -> compress 7.2 min,
    the teacher (720 - 5 - 10 - 432) / 0.5 = 546 steps, and the whole 283 + 432 + 5 = 720 s."""
    from kdbert.cli.quickstart import fit_to_ceiling

    cost = {"steps": 600, "step_seconds": 0.5, "seconds": 310.0, "row_seconds": 0.01}
    fitted, minutes = fit_to_ceiling(cost, 8.0, 1.0, 5.0, 12.0)
    assert minutes == pytest.approx(7.2) and fitted["steps"] == fitted["fitted_steps"] == 546
    assert fitted["seconds"] == pytest.approx(283.0) and fitted["seconds"] + 60 * minutes + 5.0 <= 720.0
    # what compress needs whatever it searches binds first: 7.5 min, (720 - 5 - 10 - 450) / 0.5 = 510 steps
    fitted, minutes = fit_to_ceiling(cost, 8.0, 7.5, 5.0, 12.0)
    assert (minutes, fitted["steps"]) == (7.5, 510)
    # a job that fits, no ceiling, or one that would cut the teacher below half its epoch: unchanged
    assert fit_to_ceiling(cost, 6.0, 1.0, 5.0, 12.0) == (cost, 6.0)
    assert fit_to_ceiling(cost, 8.0, 1.0, 5.0, 0.0) == (cost, 8.0)
    slow = {**cost, "step_seconds": 2.0, "seconds": 1210.0}
    assert fit_to_ceiling(slow, 8.0, 4.0, 5.0, 12.0) == (slow, 8.0)
    # never more steps than the epoch: a tenth of a minute freed is no extra epoch
    fast = {**cost, "step_seconds": 0.001, "seconds": 10.6}
    assert fit_to_ceiling(fast, 11.99, 1.0, 5.0, 12.0)[0]["steps"] == 600


def test_the_main_jobs_ceiling_counts_the_seconds_since_the_process_started():
    """The start-up and the probe count against --max-minutes: a process that slept 1 s before asking
    reads an age of at least that, and no more than the wall time its parent saw it run. Both /proc
    readings (the start in clock ticks, the uptime to 10 ms) are floored, so the age is within 0.01 s of
    the truth either way; psutil is no reference, its boot time being whole seconds."""
    import subprocess
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("read off Linux's /proc")
    ask = "import time; time.sleep(1.0); from kdbert.cli.quickstart import seconds_since_start as s; print(s())"
    started = time.monotonic()
    age = float(subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, check=True).stdout)
    elapsed = time.monotonic() - started
    assert 1.0 - 0.01 <= age <= elapsed + 0.02


@pytest.mark.parametrize("argv", [["predict", "--model", "m", "--input", "x.csv", "--text-column", "t"],
                                  ["distill", "task", "--method", "kd", "--learning-rat", "1e-4"]])
def test_a_shortened_option_is_refused_not_guessed(argv, capsys):
    """A renamed option must fail where it is still typed, not match the new name's prefix."""
    from kdbert.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_the_fine_tuning_time_probe_times_the_trainers_own_steps(tiny_classifier_dir, glue_dir, monkeypatch):
    """estimate_finetune's step time is the median of the trainer's own steps after an untimed one
    (its optimiser, precision and clipping), not a loop of its own."""
    from kdbert.core.trainer import Trainer
    from kdbert.data.load import TaskOptions
    from kdbert.methods.finetune import PROBE_STEPS, estimate_finetune

    asked = []

    def timed(trainer, rows, steps):
        asked.append((len(rows), steps, trainer.stages[0].config.batch_size))
        return [9.0, 0.5, 0.25, 0.75][:steps]

    monkeypatch.setattr(Trainer, "step_seconds", timed)
    cost = estimate_finetune(TaskOptions(task="sst2", data_dir=str(glue_dir)),
                             {"model": str(tiny_classifier_dir), "batch_size": 4, "max_train_examples": 16,
                              "epochs": 1})
    assert asked == [(4, PROBE_STEPS + 1, 4)] * 2 and cost["step_seconds"] == 0.5 and cost["steps"] == 4
    assert cost["seconds"] == pytest.approx(cost["load_seconds"] + 4 * 0.5
                                            + cost["eval_rows"] * cost["evaluations"] * cost["row_seconds"])
    assert 1 <= cost["row_length"] <= 128  # the evaluated batch's padded length


def test_a_steps_time_is_read_at_the_mean_length_between_a_short_and_a_long_batch():
    from kdbert.methods.finetune import mean_step_seconds

    # 0.5 s at 10 tokens, 1.3 s at 50: 0.02 s a token, so 0.7 s at a mean of 20
    assert mean_step_seconds((10, 0.5), (50, 1.3), 20.0) == pytest.approx(0.7)
    assert mean_step_seconds((10, 0.5), (50, 1.3), 2.0) == 0.5  # never below the faster batch
    assert mean_step_seconds((12, 0.4), (12, 0.6), 12.0) == pytest.approx(0.5)  # one length: the mean


def test_the_fine_tuning_probe_reads_a_skewed_length_distribution_at_its_mean(tiny_classifier_dir, tmp_path,
                                                                               monkeypatch):
    """Steps timed at 0.01 s a padded token: the estimate is the sample's mean length in hundredths of
    a second, above what its median-length batch takes (most rows short, a few long, as SST-2's)."""
    import statistics

    from conftest import write_glue_task
    from kdbert.core.trainer import Trainer
    from kdbert.data.load import TaskOptions
    from kdbert.methods.finetune import estimate_finetune

    folder = write_glue_task(tmp_path, "SST-2", n_train=60)
    rows = (folder / "train.tsv").read_text().splitlines()
    words = [line.split("\t")[0].split()[0] for line in rows[1:]]
    long_rows = [" ".join(words * 2) + "\t1"] * 6  # a tenth of the rows, several times the others' length
    (folder / "train.tsv").write_text("\n".join([rows[0]] + [f"{w}\t0" for w in words[:54]] + long_rows) + "\n")
    seen = {}

    def timed(trainer, chosen, steps):
        lengths = trainer.stages[0].dataset.lengths
        seen["lengths"] = lengths
        return [0.01 * max(lengths[i] for i in chosen)] * steps

    monkeypatch.setattr(Trainer, "step_seconds", timed)
    cost = estimate_finetune(TaskOptions(task="sst2", data_dir=str(tmp_path)),
                             {"model": str(tiny_classifier_dir), "batch_size": 4, "epochs": 1})
    lengths = seen["lengths"]
    assert statistics.median(lengths) < statistics.fmean(lengths)
    assert cost["step_seconds"] == pytest.approx(0.01 * statistics.fmean(lengths))


def test_the_trainers_step_seconds_run_real_optimiser_steps(tiny_classifier_dir, tiny_tokenizer):
    import tempfile

    import torch
    from transformers import BertForSequenceClassification

    from kdbert.core.matching import Match, MatchLoss
    from kdbert.core.stages import RunConfig, Stage, StageConfig
    from kdbert.core.trainer import Trainer
    from kdbert.data.batching import EncodedDataset, PaddingCollator

    model = BertForSequenceClassification.from_pretrained(tiny_classifier_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rows = EncodedDataset([{"input_ids": [2, 5 + i, 3], "attention_mask": [1, 1, 1], "labels": i % 2} for i in range(4)])
    stage = Stage(StageConfig("probe", batch_size=4, max_steps=10, learning_rate=1e-2),
                  MatchLoss([Match("task", "logits", "hard_label", target="labels")]), rows)
    with tempfile.TemporaryDirectory() as scratch:
        seconds = Trainer({"student": model}, [stage], RunConfig(scratch, progress=False),
                          PaddingCollator(0)).step_seconds([0, 1, 2, 3], 3)
    assert len(seconds) == 3 and all(s > 0 for s in seconds)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())  # it trained


def test_every_commands_help_renders():
    """argparse formats help with %: a help text's "30%" crashed `kdbert compress --help`."""
    from kdbert.cli.commands import build_parser

    table: dict = {}
    build_parser(table)
    commands = [command for command in table.values() if command.get_default("func") is not None]
    assert len(commands) > 10
    for command in commands:
        assert command.format_help().startswith("usage: kdbert")
    assert "30% less time a step" in table["compress"].format_help()
