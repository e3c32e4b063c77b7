"""Bad input on the command line: every case ends in one error line and exit 2 (``kdbert: error:``
from kdbert's checks, ``kdbert COMMAND: error:`` after the usage line from argparse's own type
checks), no traceback, before anything is trained or written."""

from __future__ import annotations

import os

import pytest

from kdbert.cli import main


def run_cli(capsys, *args) -> str:
    capsys.readouterr()  # drop what the fixtures printed
    try:
        code = main([str(a) for a in args])
    except SystemExit as exit_:  # argparse refuses a value of the wrong type itself
        code = exit_.code
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("kdbert") and ": error: " in line]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def finetune(model, glue_dir, out, *extra):
    return ["finetune", "--model", model, "--task", "rte", "--data-dir", glue_dir, "--output-dir", out,
            "--no-progress", *extra]


@pytest.mark.parametrize("option,value,says", [
    ("--batch-size", "-3", "--batch-size"), ("--batch-size", "0", "--batch-size"),
    ("--epochs", "0", "--epochs"), ("--epochs", "nan", "--epochs"), ("--epochs", "-1", "--epochs"),
    ("--learning-rate", "nan", "--learning-rate"), ("--learning-rate=-1e-5", None, "--learning-rate"),
    ("--learning-rate", "1e9", "--learning-rate"), ("--max-steps", "0", "--max-steps"),
    ("--grad-accum", "0", "--grad-accum"), ("--warmup-ratio", "1.5", "--warmup-ratio"),
    ("--max-seq-len", "0", "--max-seq-len"), ("--eval-every", "-2", "--eval-every"),
    ("--seed", "-1", "--seed"), ("--batch-size", "1e99", "--batch-size"),
])
def test_numeric_options_out_of_range(capsys, tmp_path, tiny_classifier_dir, glue_dir, option, value, says):
    out = tmp_path / "out"
    line = run_cli(capsys, *finetune(tiny_classifier_dir, glue_dir, out, option, *([value] if value else [])))
    assert says in line
    assert not out.exists()


def test_output_dir_that_is_a_file(capsys, tmp_path, tiny_classifier_dir, glue_dir):
    target = tmp_path / "taken"
    target.write_text("not a folder")
    assert "is a file" in run_cli(capsys, *finetune(tiny_classifier_dir, glue_dir, target, "--max-steps", "1"))
    line = run_cli(capsys, *finetune(tiny_classifier_dir, glue_dir, target / "run", "--max-steps", "1"))
    assert f"{target}" in line and "Not a directory" in line
    assert target.read_text() == "not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_unwritable_output_dir(capsys, tmp_path, tiny_classifier_dir, glue_dir):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        line = run_cli(capsys, *finetune(tiny_classifier_dir, glue_dir, locked / "run", "--max-steps", "1"))
    finally:
        locked.chmod(0o700)
    assert "Permission denied" in line


def test_missing_paths(capsys, tmp_path, tiny_classifier_dir, glue_dir):
    assert "does not exist" in run_cli(capsys, *finetune(tmp_path / "nomodel", glue_dir, tmp_path / "o"))
    assert "does not exist" in run_cli(capsys, *finetune(tiny_classifier_dir, tmp_path / "noglue", tmp_path / "o"))
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    assert "config.json" in run_cli(capsys, *finetune(not_a_model, glue_dir, tmp_path / "o"))


def test_data_file_that_is_not_utf8(capsys, tmp_path, tiny_classifier_dir):
    data = tmp_path / "train.csv"
    data.write_bytes(b"text,label\ncaf\xe9,pos\n")
    line = run_cli(capsys, "finetune", "--model", tiny_classifier_dir, "--task", data, "--output-dir", tmp_path / "o")
    assert f"{data}:2: not UTF-8 text" in line
