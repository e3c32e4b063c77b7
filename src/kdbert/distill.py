"""Task distillation front: one function for every method (``tinybert``, ``kd``, ``pkd``,
``distilbert``), each a recipe module that returns a :class:`~kdbert.recipes.base.Plan`.

The front does what all methods share: load the task and the fine-tuned teacher (refused when
it has no classifier for the task's label count), check the student shares the teacher's
vocabulary, build the initial student, run the recipe's stages with the shared trainer, and
write ``distill_report.json`` (config, layer map, per-stage losses, dev metrics, wall time).
"""

from __future__ import annotations

import importlib
import json
import time
from pathlib import Path

from transformers import set_seed

from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.load import TaskOptions, load_task
from kdbert.errors import KdbertError
from kdbert.io import write_json
from kdbert.evaluate import TaskEvaluator
from kdbert.models.loading import load_sequence_classifier, load_tokenizer, resolve_model_path
from kdbert.recipes.base import DistillContext
from kdbert.trainer import RunConfig, Trainer, prepare_output_dir

GENERAL_METHODS = {"tinybert": "kdbert.recipes.tinybert", "distilbert": "kdbert.recipes.distilbert"}

TASK_METHODS = {
    "tinybert": "kdbert.recipes.tinybert",
    "kd": "kdbert.recipes.kd",
    "pkd": "kdbert.recipes.pkd",
    "distilbert": "kdbert.recipes.distilbert",
}


def recipe_module(method: str):
    if method not in TASK_METHODS:
        raise KdbertError(f"unknown --method '{method}'; use one of {sorted(TASK_METHODS)}")
    return importlib.import_module(TASK_METHODS[method])


def distill_general(options: dict, output_dir: str, resume: bool = False, overwrite: bool = False) -> dict:
    """General distillation on raw text; ``recipes.<method>.run_general`` does the method's work."""
    method = options.get("method", "tinybert")
    if method not in GENERAL_METHODS:
        raise KdbertError(f"unknown general --method '{method}'; use one of {sorted(GENERAL_METHODS)}")
    module = importlib.import_module(GENERAL_METHODS[method])
    return module.run_general(options, output_dir, resume=resume, overwrite=overwrite)


def check_same_vocabulary(teacher_tokenizer, student_tokenizer, student_path: str) -> None:
    """Refuse a student whose tokenizer vocabulary differs from the teacher's."""
    if teacher_tokenizer.get_vocab() != student_tokenizer.get_vocab():
        raise KdbertError(
            f"student {student_path} uses a different vocabulary from the teacher's; distil into a student "
            "built with the teacher's tokenizer (a preset, or --student-layers)"
        )


def distill_task(task: TaskOptions, options: dict, output_dir: str, resume: bool = False,
                 overwrite: bool = False) -> dict:
    """Distil ``options['teacher']`` into a student on ``task`` with ``options['method']``.

    ``options`` holds the CLI's distill options (see ``kdbert distill task --help``); the
    recipe reads its own. Returns the report also written to ``distill_report.json``.
    """
    started = time.time()
    method = options.get("method", "tinybert")
    recipe = recipe_module(method)
    seed = options.get("seed", 42)
    data = load_task(task, seed=seed)
    spec = data.spec
    if not options.get("teacher"):
        raise KdbertError("--teacher is required: a model fine-tuned on the task (see `kdbert finetune`)")
    teacher_path = resolve_model_path(options["teacher"])
    teacher = load_sequence_classifier(teacher_path, spec.num_labels, new_head_ok=False, labels=spec.labels)
    tokenizer = load_tokenizer(teacher_path)
    identity = {"command": "distill task", "method": method, "task": task.task, "train_file": task.train_file,
                **{k: v for k, v in options.items() if k not in ("resume", "overwrite", "func", "no_progress")}}
    set_seed(seed)
    student = recipe.initial_student(teacher, spec, options)
    student_path = options.get("student")
    if student_path and Path(str(student_path)).is_dir():
        check_same_vocabulary(tokenizer, load_tokenizer(student_path), student_path)
    # after the student is accepted: a refused input must not leave a run marker behind
    out = prepare_output_dir(output_dir, identity, resume, overwrite)
    max_seq_len = options.get("max_seq_len") or spec.max_seq_len
    rows = data.train[: options["max_train_examples"]] if options.get("max_train_examples") else data.train
    train_set = encode_examples(tokenizer, rows, max_seq_len)
    context = DistillContext(teacher, student, tokenizer, spec, train_set, options, seed)
    plan = recipe.build_task_plan(context)
    run = RunConfig(str(out), seed=seed, mixed_precision=options.get("mixed_precision", "no"),
                    keep_checkpoints=options.get("keep_checkpoints", 2),
                    progress=not options.get("no_progress", False))
    trainer = Trainer(plan.modules, plan.stages, run, PaddingCollator(tokenizer.pad_token_id, spec.is_regression),
                      frozen=plan.frozen, evaluator=TaskEvaluator(data, tokenizer, max_seq_len), tokenizer=tokenizer)
    train_report = trainer.train(resume=resume)
    report = {
        "method": method, "task": spec.name, "teacher": teacher_path, "options": identity,
        "student_init": getattr(student, "kdbert_init", options.get("student")),
        **plan.report,
        "stages": train_report["stages"],
        "stage_losses": stage_losses(out / "log.jsonl"),
        "dev_metrics": train_report["best_metrics"], "best_stage": train_report["best_stage"],
        "best_step": train_report["best_step"], "eval_history": train_report["history"],
        "wall_seconds": round(time.time() - started, 1),
    }
    write_json(out / "distill_report.json", report)
    return report


def stage_losses(log_path: Path) -> dict[str, list[dict]]:
    """Per-stage training-loss records from the JSONL log (``{stage: [{step, loss, terms...}]}``)."""
    result: dict[str, list[dict]] = {}
    if not log_path.exists():
        return result
    for line in log_path.read_text().splitlines():
        record = json.loads(line)
        if "loss" in record:
            result.setdefault(record["stage"], []).append(
                {k: v for k, v in record.items() if k not in ("stage", "time")})
    return result
