"""The one distillation front: task and general distillation for every registered method.

The front does what all methods share and all the I/O: read the options into the method's typed
config (:func:`kdbert.methods.registry.method_config`), load the task or corpus, the teacher and its
tokenizer, check the student's vocabulary, prepare the output folder (after every input has been
accepted, so a refused input leaves no run marker behind), ask the method for its
:class:`~kdbert.core.method.Plan`, run it with the shared trainer and write the report
(``distill_report.json`` / ``general_report.json``: config, layer map, per-stage losses, dev
metrics, projections, wall time). Methods only build students and plans, through the hooks of
:class:`~kdbert.core.method.Method`; a student that reads inputs of its own (the word-level
BiLSTM) gets its encoded rows, collator and evaluator from its
:meth:`~kdbert.core.method.Method.task_inputs`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path

from transformers import set_seed

from kdbert.data.batching import labelled_first_order
from kdbert.data.corpus import corpus_files, pack_sequences
from kdbert.data.load import TaskData, TaskOptions, load_task, task_identity
from kdbert.data.subsets import training_rows
from kdbert.data.tasks import record_text_columns
from kdbert.errors import KdbertError
from kdbert.core.atomic_io import write_json
from kdbert.methods.registry import get_method, method_config
from kdbert.core.loading import load_task_model, load_tokenizer, resolve_model_path
from kdbert.core.method import DistillContext, Plan, TaskSource
from kdbert.core.teacher_cache import TeacherCache
from kdbert.core.teacher_logits import teacher_labelled
from kdbert.core.run_folder import is_main_process, prepare_output_dir
from kdbert.core.trainer import RunConfig, Trainer


def _config(options, general: bool):
    if is_dataclass(options):
        return options
    return method_config(options.get("method") or "tinybert", options, general=general)


def _identity(command: str, config, **extra) -> dict:
    """What a resumed run must share with the original (the marker ``run_config.json``)."""
    # the cache folder changes where the teacher's outputs come from, not what they are; the
    # thread count changes only the speed
    values = {k: v for k, v in asdict(config).items() if k not in ("no_progress", "teacher_cache", "threads")}
    if not values.get("max_train_examples") or values.get("train_subset") == "first":
        values.pop("train_subset", None)  # every row read, or the first ones, as runs from before the option
    return {"command": command, "method": config.method, **extra, **values}


def projection_report(plan: Plan, trainer: Trainer) -> dict | None:
    """Projections the stages created (names, parameters) and those loaded from the student folder."""
    projections = trainer.modules["projections"] if "projections" in trainer.modules else None
    if projections is None:
        return None
    loaded = [n for s in plan.stages for n in getattr(s.loss_fn, "loaded_projections", [])]
    return {"count": len(projections), "names": list(projections.keys()),
            "parameters": sum(p.numel() for p in projections.parameters()), "loaded_from_student": loaded}


def open_teacher_cache(config, plan: Plan, max_seq_len: int, spec) -> TeacherCache | None:
    """The ``--teacher-cache`` of a task distillation, attached to the plan's stages that run the
    teacher (``None`` without the option or when no stage runs it); announced on stdout."""
    folder = getattr(config, "teacher_cache", None)
    if not folder:
        if getattr(config, "teacher_cache_features", False):
            raise KdbertError("--teacher-cache-features needs --teacher-cache DIR (where the outputs are kept)")
        return None
    if "teacher" not in plan.frozen:
        print("teacher cache: no stage runs the teacher; nothing to cache")
        return None
    cache = TeacherCache(folder, plan.frozen["teacher"], max_seq_len, features=config.teacher_cache_features,
                         question_answering=spec.question_answering)
    cache.attach(plan.stages)
    if is_main_process():
        print(cache.describe_start())
    return cache


def _train(plan: Plan, run: RunConfig, collator, tokenizer, resume: bool, evaluator=None,
           cache: TeacherCache | None = None) -> tuple[dict, dict]:
    trainer = Trainer(plan.modules, plan.stages, run, collator, frozen=plan.frozen, evaluator=evaluator,
                      tokenizer=tokenizer)
    try:
        train_report = trainer.train(resume=resume)
    finally:  # an interrupted run keeps what it computed
        if cache is not None:
            cache.close()
    report = dict(plan.report)
    if cache is not None:
        report["teacher_cache"] = cache.report()
        if is_main_process():
            print(cache.describe_end())
    projections = projection_report(plan, trainer)
    if projections is not None or "projections" in report:
        report["projections"] = {**(report.get("projections") or {}), **(projections or {"count": 0})}
    report["matches"] = {name: [m.describe() for m in matches] for name, matches in plan.matches.items()}
    return train_report, report


def join_unlabelled_late(plan: Plan, train_set, rows: int, unlabelled: int, from_epoch: int, seed: int) -> None:
    """Give each stage that trains on ``train_set`` (one entry per training row, ``rows`` of them, the
    last ``unlabelled`` the ``--unlabelled`` rows) an order whose epochs before ``from_epoch`` read
    the labelled rows alone (:func:`kdbert.data.batching.labelled_first_order`)."""
    stages = [stage for stage in plan.stages if stage.dataset is train_set and stage.order is None]
    if not stages or len(train_set) != rows:
        raise KdbertError("--unlabelled-from-epoch needs a method that trains on the rows one to one (no windows, "
                          "no batch order of its own); leave it at 0")
    for stage in stages:
        stage.order = labelled_first_order(train_set.lengths, stage.config.batch_size, seed, rows - unlabelled,
                                           from_epoch)


def distill_task(task: TaskOptions, options, output_dir: str, resume: bool = False, overwrite: bool = False,
                 deadline: float | None = None, pause_at_step: int | None = None, data: TaskData | None = None,
                 teacher: tuple | None = None) -> dict:
    """Distil ``teacher`` into a student on ``task`` with the options' ``method`` (default tinybert).

    ``options``: a method config (:mod:`kdbert.methods.registry`) or a dict of its option names (the CLI's
    ``distill task`` options); ``deadline``: the ``time.time()`` by which training stops
    (:attr:`kdbert.core.trainer.RunConfig.deadline`); ``pause_at_step``: the optimiser step (over all
    stages) after which it pauses, evaluated, saved and reported (``paused_at_step``), the run folder
    holding the best student so far; ``resume=True`` with the same options continues it
    (:attr:`kdbert.core.trainer.RunConfig.pause_at_step`). ``data`` (``load_task(task, seed)``) and
    ``teacher`` (the options' teacher as (model, tokenizer)): as a caller running several runs has
    them loaded, else loaded here. Returns the report also written to ``distill_report.json``.
    """
    started = time.time()
    given = _config(options, general=False)
    data = data or load_task(task, seed=given.seed)
    spec = data.spec
    config = given.resolved(spec.name)
    if not config.teacher:
        raise KdbertError("--teacher is required: a model fine-tuned on the task (see `kdbert finetune`)")
    teacher_path = resolve_model_path(config.teacher)
    teacher, tokenizer = teacher or (load_task_model(teacher_path, spec, new_head_ok=False),
                                     load_tokenizer(teacher_path))
    method = get_method(config.method)
    set_seed(config.seed)
    max_seq_len = config.max_seq_len or spec.max_seq_len
    rows = training_rows(data, config.max_train_examples, config.train_subset)
    unlabelled, labelled = None, []
    if data.unlabelled:
        # a method that stores the teacher's logits itself (the BiLSTM) reads these back from their store
        labelled, unlabelled = teacher_labelled(teacher, tokenizer, data.unlabelled, task, spec, max_seq_len,
                                                getattr(config, "teacher_dtype", "float32"),
                                                config.unlabelled_cache or getattr(config, "logits_cache", None),
                                                config.unlabelled_onnx or getattr(config, "teacher_onnx", None))
        rows = rows + labelled
        if is_main_process():
            print(f"unlabelled: {len(labelled)} rows labelled by the teacher ({unlabelled['seconds']} s)")
    inputs = method.task_inputs(TaskSource(teacher, tokenizer, data, rows, max_seq_len, task, len(labelled)), config)
    record_text_columns(inputs.student.model, spec)
    context = DistillContext(teacher if inputs.teacher is None else inputs.teacher, inputs.student, tokenizer, spec,
                             inputs.train_set, config, config.seed)
    plan = method.build_task_plan(context)
    if task.unlabelled_from_epoch and labelled:
        join_unlabelled_late(plan, inputs.train_set, len(rows), len(labelled), task.unlabelled_from_epoch, config.seed)
    identity = _identity("distill task", given, task=task.task, train_file=task.train_file,
                         **({"held_out_fraction": task.held_out_fraction} if task.held_out_fraction else {}),
                         **task_identity(task))
    cache = open_teacher_cache(config, plan, max_seq_len, spec)
    out = prepare_output_dir(output_dir, identity, resume, overwrite)
    run = RunConfig.from_options(out, config, deadline=deadline, pause_at_step=pause_at_step)
    train_report, plan_report = _train(plan, run, inputs.collator, inputs.saved_with_student,
                                       resume, inputs.evaluator, cache)
    if not is_main_process():
        return {}
    report = {
        "method": config.method, "task": spec.name, "teacher": teacher_path, "options": identity,
        "student_init": inputs.student.origin, "train_rows": len(rows),
        **({"train_windows": len(inputs.train_set)} if len(inputs.train_set) != len(rows) else {}), **inputs.report, **plan_report,
        **({"unlabelled": unlabelled} if unlabelled else {}),
        "stages": train_report["stages"], "stage_losses": stage_losses(out / "log.jsonl"),
        "dev_metrics": train_report["best_metrics"], "best_stage": train_report["best_stage"],
        "selected_on": f"held-out training rows ({len(data.held_out)})" if data.held_out else "dev",
        "best_step": train_report["best_step"], "eval_history": train_report["history"],
        "runtime": train_report["runtime"], "train_seconds": train_report["train_seconds"],
        "stopped_early": train_report["stopped_early"], "paused_at_step": train_report["paused_at_step"],
        "wall_seconds": round(time.time() - started, 1),
    }
    write_json(out / "distill_report.json", report)
    return report


def distill_general(options, output_dir: str, resume: bool = False, overwrite: bool = False) -> dict:
    """General (pre-training) distillation on raw text with the options' ``method`` (tinybert or
    distilbert); writes the student folder and ``general_report.json`` and returns the report."""
    started = time.time()
    config = _config(options, general=True)
    method = get_method(config.method, general=True)
    if not config.corpus:
        raise KdbertError("--corpus is required: text files or folders to distil on")
    corpus = corpus_files([config.corpus] if isinstance(config.corpus, (str, Path)) else config.corpus)
    teacher, teacher_path = method.general_teacher(config)
    tokenizer = load_tokenizer(teacher_path)
    set_seed(config.seed)
    student = method.general_student(teacher, tokenizer, config)
    max_seq_len = method.general_max_seq_len(config, teacher, student)
    identity = _identity("distill general", config)
    out = prepare_output_dir(output_dir, identity, resume, overwrite)
    sequences = pack_sequences(tokenizer, corpus, max_seq_len, config.max_sequences, config.seed,
                               cache_path=out / "packed_corpus.safetensors" if is_main_process() else None)
    dataset, collator, data_report = method.general_data(sequences, tokenizer, teacher, config)
    plan = method.build_general_plan(DistillContext(teacher, student, tokenizer, None, dataset, config, config.seed))
    run = RunConfig.from_options(out, config, save_every=config.save_every)
    train_report, plan_report = _train(plan, run, collator, tokenizer, resume)
    if not is_main_process():
        return {}
    report = {
        "method": config.method, "teacher": teacher_path, "options": identity, "student_init": student.origin,
        "corpus": [str(c) for c in corpus], "sequences": len(sequences), "max_seq_len": max_seq_len,
        **plan_report, **data_report,
        "stages": train_report.get("stages"), "stage_losses": stage_losses(out / "log.jsonl"),
        "train_seconds": train_report.get("train_seconds"), "runtime": train_report.get("runtime"),
        "wall_seconds": round(time.time() - started, 1),
    }
    write_json(out / "general_report.json", report)
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
