"""What the GLUE distillation benchmarks start from, built the recorded way: the teacher fine-tuned
per task (``teacher_glue.py``), the augmented training files (``augment_glue.py``) and the general
students (``general_distill.py``). ``distill_glue.py --rerun`` builds them again from here."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoConfig

from common import machine_info, save_result
from paths import CORPUS, GLUE_DIR, WORD_VECTORS, run_folder

from kdbert.augment.tinybert import BATCH_TOKENS
from kdbert.cli.augment import augment_task
from kdbert.core.pooling import pooling_of
from kdbert.data.held_out import read_record
from kdbert.data.load import TaskOptions
from kdbert.methods.finetune import FinetuneConfig, finetune

BUDGETS = {  # teacher_glue.py --budget: fine-tuning options per task
    "cpu": {"cola": {"epochs": 3}, "sst2": {"epochs": 1, "max_train_examples": 20000}, "mrpc": {"epochs": 3},
            "stsb": {"epochs": 3}, "rte": {"epochs": 3}},
    "full": {task: {} for task in ("cola", "sst2", "mrpc", "stsb", "rte", "qnli", "mnli", "qqp")},
}


def teacher_key(task: str, budget: str, tuning: dict) -> str:
    """The key of a teacher's record in ``teacher_glue.json``: ``<task>/<budget>[-<option><value>...]``."""
    return f"{task}/{budget}" + "".join(f"-{k}{v:g}" for k, v in sorted(tuning.items()))


def recorded_settings(record: dict) -> dict:
    """The fine-tuning options a recorded result ran with: its budget's overrides and the
    hyper-parameters it reports, so that a rerun does not pick up a default changed since."""
    return {**record["overrides"], **record["hyperparameters"]}


def teacher_dir(task: str, tuning: dict, runs_dir: str = run_folder()) -> Path:
    """``<runs_dir>/teacher-<task>[-tuning]``: where a task's teacher is fine-tuned."""
    return Path(runs_dir) / ("teacher-" + task + "".join(f"-{k}{v:g}" for k, v in sorted(tuning.items())))


TEACHER_FLAGS = ("epochs", "held_out_fraction", "learning_rate")  # the settings teacher_glue.py takes as options


def teacher_command(task: str, budget: str, tuning: dict) -> str:
    """The ``teacher_glue.py`` command that builds this teacher again: its options for the settings it
    takes, and ``--build-missing`` where recorded settings beyond them (batch size, sequence length) were
    used, which that option reads back from the record."""
    return (f"python benchmarks/teacher_glue.py --budget {budget} --tasks {task}"
            + "".join(f" --{k.replace('_', '-')} {v:g}" for k, v in sorted(tuning.items()) if k in TEACHER_FLAGS)
            + (" --build-missing" if set(tuning) - set(TEACHER_FLAGS) else ""))


def fine_tune(task: str, budget: str = "cpu", tuning: dict | None = None, data_dir: str = GLUE_DIR,
              out: str | Path | None = None, runs_dir: str = run_folder(), model: str = "default") -> dict:
    """Fine-tune the teacher on ``task`` at ``budget`` (plus ``tuning`` overrides) into ``out``
    (default ``<runs_dir>/teacher-<task>[-tuning]``), resuming a run left there; returns the result.
    A ``held_out_fraction`` override keeps those training rows out (the rows ``kdbert compress``
    picks on), so that the search compares students with a teacher that has not seen them."""
    tuning = tuning or {}
    overrides = {**BUDGETS[budget][task], **tuning}
    out = Path(out or teacher_dir(task, tuning, runs_dir))
    held_out_fraction = overrides.pop("held_out_fraction", 0.0)
    config = FinetuneConfig(output_dir=str(out), model=model, no_progress=True, **overrides)
    resume = (out / "run_config.json").exists()
    report = finetune(TaskOptions(task, data_dir=data_dir, held_out_fraction=held_out_fraction), config,
                      resume=resume)
    overrides.update({"held_out_fraction": held_out_fraction} if held_out_fraction else {})
    recorded = read_record(out)  # the rule that drew its held-out rows (teacher_best.py compares within one)
    return {"task": task, "budget": budget, "overrides": overrides, "tuning": bool(tuning),
            "metrics": report["best_metrics"], "train_seconds": report["train_seconds"], "output_dir": str(out),
            "command": teacher_command(task, budget, tuning),
            "hyperparameters": {k: report["config"][k] for k in ("epochs", "learning_rate", "batch_size", "max_seq_len")},
            "precision": report["runtime"]["mixed_precision"], "resumed": resume,
            "pooling": pooling_of(AutoConfig.from_pretrained(out)),
            **({"held_out_rule": recorded["rule"]} if recorded else {}), **machine_info()}


ROWS = {"cola": 4000, "sst2": 4000, "mrpc": 1000, "stsb": 2000, "rte": 1000}


def aug_file(runs_dir: str, task: str, rows: str) -> Path:
    """Where ``--rows cpu|all`` writes the augmented file of ``task``."""
    return Path(runs_dir) / (f"aug-{task}" if rows == "cpu" else f"aug-{task}-all") / "train_aug.tsv"


def augment_key(task: str, rows: str) -> str:
    """The key of an augmented file's record in ``augment_glue.json``."""
    return task if rows == "cpu" else f"{task}/all"


def build_augmented(task: str, rows: str = "cpu", data_dir: str = GLUE_DIR, mlm: str = run_folder("mlm-k2"),
                    runs_dir: str = run_folder(), word_vectors: str = WORD_VECTORS, num_workers: int = 1, batch_size: int = 64,
          batch_tokens: int = BATCH_TOKENS, device: str | None = None, record: bool = True) -> dict:
    """Augment ``task`` (resuming an interrupted file); returns the result, recorded unless
    ``record`` is false (a file rebuilt as the input of a rerun)."""
    output = aug_file(runs_dir, task, rows)
    output.parent.mkdir(parents=True, exist_ok=True)
    report = augment_task(TaskOptions(task, data_dir=data_dir), mlm, word_vectors, str(output),
                          max_rows=ROWS[task] if rows == "cpu" else None, num_workers=num_workers, seed=42,
                          batch_size=batch_size, batch_tokens=batch_tokens, device=device)
    command = f"python benchmarks/augment_glue.py --tasks {task}" + ("" if rows == "cpu" else " --rows all")
    if batch_size != 64 or batch_tokens != BATCH_TOKENS:
        command += f" --batch-size {batch_size} --batch-tokens {batch_tokens}"
    result = {"task": task, "rows": rows, **report, "mlm": mlm, "word_vectors": word_vectors,
              "batch_size": batch_size, "batch_tokens": batch_tokens, "command": command, **machine_info()}
    if record:
        save_result("augment_glue", augment_key(task, rows), result)
    return result


def general_argv(method: str, corpus: str = CORPUS, runs_dir: str = run_folder(), teacher: str = "default") -> list[str]:
    """The ``kdbert`` arguments of one general distillation run (output ``<runs_dir>/general-...``);
    ``teacher`` replaces the packaged teacher of the TinyBERT runs."""
    common = ["--corpus", corpus, "--epochs", "1", "--no-progress"]
    if teacher != "default" and method != "distilbert":
        common += ["--teacher", teacher]
    if method == "tinybert":
        return ["distill", "general", "--method", "tinybert", "--max-sequences", "3200", "--batch-size", "32",
                "--output-dir", f"{runs_dir}/general-tinybert4", *common]
    if method == "tinybert-ws":
        return ["distill", "general", "--method", "tinybert", "--student-init", "teacher-weights",
                "--max-sequences", "4800", "--batch-size", "32", "--output-dir", f"{runs_dir}/general-tinybert4-ws",
                *common]
    if method == "distilbert":
        return ["distill", "general", "--method", "distilbert", "--teacher", f"{runs_dir}/mlm-k0", "--student",
                f"{runs_dir}/distilbert-init", "--max-sequences", "1600", "--batch-size", "16", "--max-seq-len", "64",
                "--output-dir", f"{runs_dir}/general-distilbert", *common]
    raise ValueError(f"unknown general distillation run {method!r}")


GENERAL_METHODS = ("distilbert", "tinybert", "tinybert-ws")
