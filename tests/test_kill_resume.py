"""``kill -9`` at several points of every stage kind, then ``--resume``: the run ends with the
same weights and metrics as an uninterrupted one, and no half-written file is ever visible.

Each run is killed five times, each time a seeded random delay after it wrote its next
checkpoint (or, for augmentation, its next chunk), so the kills land before, during and between
saves; the outcome is what is asserted, wherever the kill landed. Runs are forked from the test
process (torch already imported) so that 28 runs take seconds, not minutes of interpreter start.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
import tqdm.auto
import tqdm.std
from conftest import WORDS, record_held_out, save_tiny_classifier, tiny_bert_config, write_glue_task
from safetensors.torch import load_file
from transformers import BertForMaskedLM

from kdbert.cli import main
from kdbert.data.load import TaskOptions
from kdbert.compress.schedule import Goal, pick_winner

KILLS = 5


def cli(*args) -> list[str]:
    return [str(a) for a in args]


def _quiet_main(argv: list[str]) -> None:
    # A fresh progress-bar lock: tqdm's inherited one is a semaphore shared with the earlier children,
    # and a child killed while holding it leaves it held for good (the next child would hang).
    for cls in (tqdm.std.tqdm, tqdm.auto.tqdm):
        cls.set_lock(threading.RLock())
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os._exit(main(argv))


def start(argv: list[str]) -> multiprocessing.Process:
    """``kdbert ARGV`` in a child process: forked (torch already imported), or spawned where runs
    use CUDA, which a forked child cannot initialise."""
    method = "spawn" if torch.cuda.is_available() else "fork"
    process = multiprocessing.get_context(method).Process(target=_quiet_main, args=(argv,))
    process.start()
    return process


def run(argv: list[str]) -> None:
    if torch.cuda.is_available():  # keep CUDA out of this process, so that later children may use it
        process = start(argv)
        process.join()
        assert process.exitcode == 0
        return
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        assert main(argv) == 0


def progress_marks(out: Path) -> int:
    """How far a run has got, as seen on disk: checkpoints written, or augmented chunks."""
    checkpoints = out / "checkpoints"
    saved = len(list(checkpoints.glob("checkpoint-*[0-9]"))) if checkpoints.is_dir() else 0
    log = out / "log.jsonl"
    records = len(log.read_text().splitlines()) if log.is_file() else 0
    partial = [p for p in out.parent.glob(out.name + "*") if p != out]
    return saved + records + sum(size_if_present(p) for p in partial)


def size_if_present(path: Path) -> int:
    """A file's size, or 0 when the running child renamed or removed it after the glob listed it."""
    try:
        return path.stat().st_size if path.is_file() else 0
    except FileNotFoundError:
        return 0


def assert_nothing_half_written(out: Path) -> None:
    """Every file a reader would open is whole: JSON parses, safetensors load."""
    if not out.exists():
        return
    for path in out.rglob("*"):
        if ".tmp" in path.name or path.name.endswith(".old") or any(".tmp" in p.name for p in path.parents):
            continue
        if path.suffix == ".json" and path.is_file():
            json.loads(path.read_text())
        if path.suffix == ".safetensors" and path.is_file():
            load_file(path)


def files_written(out: Path) -> int:
    """How far a command that writes many folders (compress) has got: the files under ``out`` (counted
    by ``os.walk``, which passes over a folder the command replaces while it is counted)."""
    return sum(len(files) for _, _, files in os.walk(out))


def kill_repeatedly_then_finish(command: list[str], out: Path, resume_flag: str | None = "--resume",
                                marks=progress_marks) -> None:
    """Start, kill -9 once the run has moved on (``marks(out)`` changed), resume, ... ``KILLS``
    times; then finish it."""
    rng = random.Random(str(out))
    kills = 0
    for kill in range(KILLS):
        process = start(command + ([resume_flag] if kill and resume_flag else []))
        before = marks(out)
        deadline = time.time() + 120
        while time.time() < deadline and process.is_alive() and marks(out) == before:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.02))
        if not process.is_alive():
            break
        os.kill(process.pid, signal.SIGKILL)
        process.join()
        kills += 1
        assert_nothing_half_written(out)
    assert kills == KILLS, f"the run finished after {kills} kills: give it more steps"
    process = start(command + ([resume_flag] if resume_flag else []))
    process.join()
    assert process.exitcode == 0
    assert_nothing_half_written(out)


def assert_same_run(straight: Path, resumed: Path, weights: str = "model.safetensors", metrics: str | None = None):
    a, b = load_file(straight / weights), load_file(resumed / weights)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)
    if metrics:
        assert json.loads((straight / metrics).read_text())["dev_metrics"] == \
            json.loads((resumed / metrics).read_text())["dev_metrics"]


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("kill")
    torch.manual_seed(0)
    BertForMaskedLM(tiny_bert_config(tiny_tokenizer)).save_pretrained(root / "mlm")
    tiny_tokenizer.save_pretrained(root / "mlm")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(" ".join(WORDS[i:i + 12]) + " ." for i in range(0, 20)) * 6)
    glove = root / "glove.txt"
    glove.write_text("\n".join(f"{w} " + " ".join(f"{((i * 7 + j) % 11) / 10:.2f}" for j in range(4))
                               for i, w in enumerate(WORDS)) + "\n")
    tiny_bert_config(tiny_tokenizer, hidden_size=8, num_attention_heads=4, intermediate_size=16).save_pretrained(
        root / "student-config")
    write_glue_task(root / "glue", "RTE", n_train=400)  # augmentation writes 64 rows per chunk here: 7 chunks, 5 kills
    return {"teacher": save_tiny_classifier(root / "teacher", tiny_tokenizer, hidden_size=32, num_hidden_layers=4),
            "mlm": root / "mlm", "corpus": corpus, "glove": glove, "student": root / "student-config",
            "glue": root / "glue"}


def run_both(tmp_path, command_for, **kw):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(command_for(straight))
    kill_repeatedly_then_finish(command_for(resumed), resumed, **kw)
    return straight, resumed


@pytest.mark.parametrize("precision", ["no", "bf16", pytest.param("fp16", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="fp16 training needs a GPU"))])
def test_finetuning_killed_five_times(tmp_path, models, glue_dir, precision):
    def command(out):
        return cli("finetune", "--model", models["teacher"], "--task", "rte", "--data-dir", glue_dir, "--output-dir",
                   out, "--max-steps", "150", "--batch-size", "4", "--eval-every", "6", "--learning-rate", "1e-3",
                   "--mixed-precision", precision, "--no-progress")
    straight, resumed = run_both(tmp_path, command)
    assert_same_run(straight, resumed)
    assert json.loads((straight / "metrics.json").read_text()) == json.loads((resumed / "metrics.json").read_text())
    # the log holds each step's record once: what a killed run logged past its checkpoint is dropped on resume
    assert logged_steps(resumed) == logged_steps(straight) and logged_steps(straight)[-1][0] == 150


def logged_steps(run: Path) -> list[tuple[int, bool]]:
    """(step, is an evaluation) of each record of a run's ``log.jsonl``, in order."""
    return [(record["step"], "eval" in record) for record in map(json.loads, (run / "log.jsonl").read_text().splitlines())]


def test_tinybert_two_stages_killed_five_times(tmp_path, models, glue_dir):
    def command(out):
        return cli("distill", "task", "--method", "tinybert", "--teacher", models["teacher"], "--student-layers", "0,2",
                   "--task", "rte", "--data-dir", glue_dir, "--output-dir", out, "--intermediate-max-steps", "60",
                   "--max-steps", "60", "--batch-size", "4", "--eval-every", "6", "--no-progress")
    straight, resumed = run_both(tmp_path, command)
    assert_same_run(straight, resumed, metrics="distill_report.json")
    assert_same_run(straight, resumed, weights="projections.safetensors")


def test_general_distillation_killed_five_times(tmp_path, models):
    def command(out):
        return cli("distill", "general", "--teacher", models["mlm"], "--student", models["student"], "--corpus",
                   models["corpus"], "--max-seq-len", "16", "--batch-size", "4", "--max-steps", "150",
                   "--eval-every", "5", "--output-dir", out, "--no-progress")
    straight, resumed = run_both(tmp_path, command)
    assert_same_run(straight, resumed)


def test_augmentation_killed_five_times(tmp_path, models, monkeypatch):
    from kdbert.augment import tinybert

    monkeypatch.setattr(tinybert, "CHUNK_ROWS", 64)  # the forked children read it too

    def command(out):
        return cli("augment", "--task", "rte", "--data-dir", models["glue"], "--mlm", models["mlm"], "--word-vectors",
                   models["glove"], "--output", out, "--n-aug", "3", "--batch-size", "2")
    straight, resumed = tmp_path / "straight.tsv", tmp_path / "resumed.tsv"
    run(command(straight))
    kill_repeatedly_then_finish(command(resumed), resumed, resume_flag=None)
    assert resumed.read_text() == straight.read_text()


def test_compress_killed_five_times(tmp_path, tiny_tokenizer, glue_dir):
    """A search killed anywhere (timing, building starts, mid-run, exporting the winner) and run
    again ends with the runs and the winner of an uninterrupted one."""
    teacher = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer, hidden_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=256)
    record_held_out(teacher, TaskOptions("rte", data_dir=str(glue_dir)), 0.1)

    def command(out):
        return cli("compress", "--teacher", teacher, "--task", "rte", "--data-dir", glue_dir,
                   "--candidates", "bert-1x128,bert-2x128,bilstm-h150", "--target-speedup", "0.01", "--rounds", "2",
                   "--round-share", "steps", "--first-steps", "6", "--batch-size", "4", "--length-rows", "4", "--threads", "1",
                   "--keep", "runs", "--output-dir", out)  # every run kept: the resumed winner's is exported below
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(command(straight))
    kill_repeatedly_then_finish(command(resumed), resumed, resume_flag=None, marks=files_written)
    a, b = (json.loads((folder / "compress_report.json").read_text()) for folder in (straight, resumed))
    keys = ("candidate", "method", "steps", "score", "dev_score")
    # Each folder times its candidates anew, and the schedule follows the timings (the running order;
    # only candidates as fast as the fastest that keeps the share go on), so the candidates promoted
    # may differ; every candidate reaches rung 0 in both, and a candidate trained to the same steps
    # in both has the same scores: the kills changed nothing it learnt.
    def by_steps(report):
        return {(row["candidate"], row["steps"]): tuple(row[k] for k in keys) for row in report["search"]["segments"]}

    straight_runs, resumed_runs = by_steps(a), by_steps(b)
    assert sorted(row["candidate"] for row in a["search"]["rounds"][0]) == \
        sorted(row["candidate"] for row in b["search"]["rounds"][0]) == ["bert-1x128", "bert-2x128", "bilstm-h150"]
    # how many go on in round 1 follows the timings too (one in about five runs promoted two on one side)
    assert len(a["search"]["rounds"]) == len(b["search"]["rounds"]) == 2
    assert all(rows for report in (a, b) for rows in report["search"]["rounds"])
    common = straight_runs.keys() & resumed_runs.keys()
    assert len(common) >= 3 and all(straight_runs[key] == resumed_runs[key] for key in common)
    # Latencies are measured anew in each folder, so the winner is checked against the rule on the
    # resumed folder's own timings, and its shipped export against exporting the uninterrupted run
    # with the int8 method the resumed one chose (the choice among methods is by measured latency).
    latency = {name: row["latency_real_p50_ms"] for name, row in b["speed"]["candidates"].items()}
    teacher = b["teacher_scores"]
    expected = pick_winner([{**row, "state": "done"} for row in b["search"]["segments"]],
                           Goal(teacher["held_out"], 0.97, latency, teacher["decide"], teacher["decide_se"]))
    checks = b["shipped"]["checks"]  # the first exported is the rule's winner; a later one only if it fell short
    assert checks[0]["candidate"] == expected["candidate"]
    assert b["winner"]["candidate"] == next((c["candidate"] for c in checks if c["keeps"]),
                                            max(checks, key=lambda c: c["decide_score"])["candidate"])
    straight_run = next(row["run"] for row in a["search"]["segments"] if row["candidate"] == b["winner"]["candidate"])
    run(cli("export", "--model", straight_run, "--quantize", "int8", "--int8-method", b["shipped"]["int8"]["method"],
            "--task", "rte", "--data-dir", glue_dir, "--output-dir", tmp_path / "straight-export"))
    exported = json.loads((tmp_path / "straight-export" / "export_report.json").read_text())
    assert b["shipped"]["dev_score"] == exported["dev_metrics"]["onnx_int8"]["score"]
