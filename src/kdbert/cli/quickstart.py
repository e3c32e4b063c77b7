"""The main job: fine-tune the teacher, then ``kdbert compress`` it, and print a teacher-vs-student table.

``kdbert quickstart`` runs the whole path on the packaged teacher and a local GLUE task:

1. fine-tune the default teacher (all-MiniLM-L6-v2) on the task, without the training rows the
   search holds out (``--held-out-fraction``; by default :func:`held_out_fraction`: a fifth where the
   short budget's subset leaves rows unread, else a tenth), so that the search's picks and its
   "kept" compare students with a teacher on rows neither has trained on;
2. a short ``kdbert compress`` (:mod:`kdbert.compress.pipeline`): time the int8 teacher and every
   candidate shape on this machine, distil those at least ``--target-speedup`` times faster by
   asynchronous successive halving within ``--budget-minutes``, pick the winner on held-out training rows and
   export it as int8, parity and dev score checked; its report and Pareto plot go to
   ``compress/``;
3. ``bench`` the teacher and the winner in PyTorch and ONNX Runtime int8 (parameters, FLOPs, CPU
   latency, speedup) and print and save the table (``summary.md``, ``summary.json``), with the
   winner's speedup over the teacher deployed the same way (both int8) on the task's dev rows.

Budget ``short`` (default): 16,000 training rows, one epoch for the teacher, an 8-minute
``kdbert compress`` (its whole wall time: timing, search, shipping), the whole job within
``--max-minutes`` (12). ``full`` fine-tunes on the whole training set with the per-task defaults
(compress keeps its own budget, and there is no ceiling). Each step is skipped when its output
exists, and an interrupted step resumes, so rerunning the command continues where it stopped.

How long it takes is said before it starts, for this machine: the fine-tuning measured on the
teacher (:func:`kdbert.methods.finetune.estimate_finetune`: a few of its training steps, an
evaluation batch, the loading of its rows), compress's budget, and the bench (``BENCH_ROWS`` rows
of the teacher's measured evaluation speed at the length the bench pads to, :func:`bench_seconds`,
an upper bound for the four models). Compress gets
``--budget-minutes``, or, where this machine is slower, twice what it needs here whatever it
searches (:func:`kdbert.compress.budget.fixed_seconds` and one first round, at the teacher's
measured time per row), so that its search gets at least as long as that fixed work. Where the
whole would pass ``--max-minutes``, the teacher's steps and compress's minutes shrink alike to fit
(:func:`fit_to_ceiling`; the teacher's learning rate then anneals over its fewer steps). It is
met: the fine-tuning is given its time as its deadline (a slower spell of the machine ends its
run early, evaluated and saved, and says so), and compress ends within its budget.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

from kdbert.cli.common import OptionFlags, add_command, add_task_arguments, given_options, task_options
from kdbert.compress.options import CompressConfig
from kdbert.core.atomic_io import write_json
from kdbert.data.load import TaskOptions
from kdbert.options import NON_NEGATIVE, POSITIVE_INT, CheckedOptions, build_config, option, override

SHORT_BUDGET = {"max_train_examples": 16000, "epochs": 1}
BENCH_ROWS = 4 * (5 + 20 + (2 + 6) * 32)  # 4 models: bench_model's warm-up and 20 runs, its throughput batches
# The short budget's teacher keeps at least this share of its epoch's steps when the job is fitted to
# --max-minutes: below it, the job says it takes longer instead.
MIN_TEACHER_SHARE = 0.5
SPARE_HELD_OUT_FRACTION = 0.2  # held out where the training subset leaves rows unread (held_out_fraction)


@dataclass
class QuickstartConfig(CheckedOptions):
    """The main job's options, each defined here once (its flags are generated from them): its own,
    then ``kdbert compress``'s with the quickstart's defaults (a short search; the BiLSTM candidates'
    vectors read off the teacher's embeddings, ``encoder:default``)."""

    output_dir: str = option("runs/quickstart", "where the teacher, the search and summary go", group="quickstart")
    budget: str = option("short", "short: a 16000-row subset, one epoch for the teacher; full: per-task defaults",
                         group="quickstart", choices=("short", "full"))
    model: str = option("default", "teacher to fine-tune (default: the packaged all-MiniLM-L6-v2)", group="quickstart")
    max_train_examples: int | None = option(None, "training rows (overrides the budget's subset)", POSITIVE_INT,
                                            int, "quickstart")
    max_minutes: float = option(12.0, "the short budget's whole time at most: where this machine needs more, the "
                                "teacher's steps and compress's minutes shrink alike to fit (0: no ceiling)",
                                NON_NEGATIVE, float, "quickstart")
    target_speedup: float = override(CompressConfig, "target_speedup", 4.0)
    budget_minutes: float = override(CompressConfig, "budget_minutes", 8.0)
    first_steps: int = override(CompressConfig, "first_steps", 100)
    intermediate_share: float = override(CompressConfig, "intermediate_share", CompressConfig.intermediate_share)
    candidates: str | None = override(CompressConfig, "candidates", None)
    word_vectors: str | None = override(CompressConfig, "word_vectors", "encoder:default")
    kd_labels: str = override(CompressConfig, "kd_labels", CompressConfig.kd_labels)
    logits_cache: str | None = override(CompressConfig, "logits_cache", None)
    seed: int = override(CompressConfig, "seed", CompressConfig.seed)
    timing_threads: int | None = override(CompressConfig, "timing_threads", None)
    no_progress: bool = override(CompressConfig, "no_progress", False)


def compress_options() -> list[str]:
    """The names of the quickstart's options that are ``kdbert compress``'s (its other group), which
    it hands to compress as they are."""
    return [f.name for f in fields(QuickstartConfig) if f.metadata["group"] != "quickstart"]


def _cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``) and its cores, for the time the quickstart announces."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.is_file() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return f"{names[0] if names else platform.machine()}, {os.cpu_count()} cores"


def fit_to_ceiling(cost: dict, minutes: float, least_minutes: float, bench: float, ceiling: float) -> tuple[dict, float]:
    """The fine-tuning ``cost`` (:func:`~kdbert.methods.finetune.estimate_finetune`'s) and compress's
    ``minutes`` shrunk alike to fit ``ceiling`` minutes with the ``bench``'s seconds, where they do not:
    with ``T`` the fine-tuning's steps' seconds and ``F`` its fixed ones (loading, evaluations),
    ``scale = (60 * ceiling - bench - F) / (T + 60 * minutes)``; compress gets ``minutes * scale``
    (at least ``least_minutes``, what it needs on this machine whatever it searches, to a tenth) and
    the fine-tuning the steps the rest affords, at least ``MIN_TEACHER_SHARE`` of them (so that the
    schedule anneals within them instead of being cut short). Where even that does not fit, both stay
    as they were and the caller says the job takes longer."""
    steps_seconds = cost["steps"] * cost["step_seconds"]
    fixed = cost["seconds"] - steps_seconds
    if not ceiling or cost["seconds"] + 60 * minutes + bench <= 60 * ceiling:
        return cost, minutes
    scale = (60 * ceiling - bench - fixed) / (steps_seconds + 60 * minutes)
    fitted = max(least_minutes, math.floor(10 * minutes * scale) / 10)
    steps = min(cost["steps"], math.floor((60 * ceiling - bench - fixed - 60 * fitted) / cost["step_seconds"]))
    if steps < MIN_TEACHER_SHARE * cost["steps"]:
        return cost, minutes
    return {**cost, "steps": steps, "fitted_steps": steps, "seconds": fixed + steps * cost["step_seconds"]}, fitted


def held_out_fraction(task: TaskOptions, max_train_examples: int | None, teacher_dir: Path | None = None) -> float:
    """The share of the training rows the main job holds out: ``task``'s where it gives one; else the
    one a teacher begun in ``teacher_dir`` was fine-tuned with (its ``run_config.json``: a resumed
    or finished teacher keeps the rows it never trained on); else
    :data:`SPARE_HELD_OUT_FRACTION` where the rows left after it still outnumber the
    ``max_train_examples`` the job trains on (``(1 - f) * rows >= max_train_examples``), else
    compress's default, a tenth. Rows the subset would not read cost the job nothing held out, and
    the rows that decide the shipped student's kept share are the held-out rows' half: SST-2's short
    budget reads 16,000 of its 67,349 rows, so a fifth of its sentences doubles them from 344 to
    688, the standard error of a kept share there falling by a factor of about 1.4 (on an AVX2 EPYC,
    2026-12-06: the 344 of a tenth read all nine seeds' kept share 0.8-4.0 points under dev, one draw of
    rows that every seed shared; on 688 the two agreed on every seed, ``benchmarks/decide_draw.py``)."""
    from kdbert.compress.options import HELD_OUT_FRACTION
    from kdbert.data.load import load_task

    if task.held_out_fraction:
        return task.held_out_fraction
    if teacher_dir is not None and (teacher_dir / "run_config.json").is_file():
        return json.loads((teacher_dir / "run_config.json").read_text()).get("held_out_fraction") or HELD_OUT_FRACTION
    if not max_train_examples:
        return HELD_OUT_FRACTION
    rows = len(load_task(replace(task, held_out_fraction=0.0)).train)
    return SPARE_HELD_OUT_FRACTION if (1 - SPARE_HELD_OUT_FRACTION) * rows >= max_train_examples else HELD_OUT_FRACTION


def seconds_since_start() -> float:
    """Seconds since this process started (Linux: ``/proc``, its start in clock ticks after boot
    against the uptime; elsewhere 0): where the process is the ``kdbert`` command, its own start-up
    counts against ``--max-minutes`` too (:func:`cmd_quickstart`)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


def bench_seq_len(task: TaskOptions) -> int:
    """The length the bench pads every row to: 64 tokens for SST-2's and CoLA's single sentences, else 128."""
    return 64 if task.task.lower() in ("sst2", "sst-2", "cola") else 128


def bench_seconds(cost: dict, seq_len: int) -> float:
    """Seconds the bench should take at most: ``BENCH_ROWS`` rows at the teacher's measured evaluation
    time a row (``cost``, :func:`~kdbert.methods.finetune.estimate_finetune`), scaled from the length it
    was timed at (``row_length``) to the ``seq_len`` the bench pads to:
    ``BENCH_ROWS * row_seconds * max(1, seq_len / row_length)``. Unscaled, SST-2's 13-token rows said
    0.1 min where the bench took 0.3 (2026-12-05, AVX2)."""
    return BENCH_ROWS * cost["row_seconds"] * max(1.0, seq_len / cost["row_length"])


def _plan(task: TaskOptions, options: dict, config, max_minutes: float, started: float, log) -> tuple[dict, float]:
    """What fine-tuning costs here (:func:`~kdbert.methods.finetune.estimate_finetune`) and the minutes
    compress gets (module doc; ``config``: its :class:`~kdbert.compress.pipeline.CompressConfig`),
    both fitted to what is left of ``max_minutes`` since the job ``started`` (``time.time()``;
    :func:`fit_to_ceiling`), said with the whole time before anything runs."""
    from kdbert.compress.budget import fixed_seconds
    from kdbert.methods.finetune import estimate_finetune

    cost = estimate_finetune(task, options)
    spent = time.time() - started
    row = cost["row_seconds"]
    fixed = fixed_seconds(row * cost["eval_rows"], config.runtime, 1.0 / config.target_speedup)
    least = math.ceil(2 * (fixed + config.first_steps * config.batch_size * row) / 60)
    minutes = max(config.budget_minutes, least)
    raised = f", not {config.budget_minutes:g}: this machine needs that long" if minutes > config.budget_minutes else ""
    bench = bench_seconds(cost, bench_seq_len(task))
    finished = _finished(Path(options["output_dir"])) is not None
    if not finished:
        epoch_steps = cost["steps"]
        cost, minutes = fit_to_ceiling(cost, minutes, least, bench, max_minutes and max_minutes - spent / 60)
        if cost["steps"] < epoch_steps:
            raised = (f" and the teacher {cost['steps']} of its {epoch_steps} steps, to end within --max-minutes "
                      f"{max_minutes:g} on this machine")
    fine_tune = 0.0 if finished else cost["seconds"]
    total = (spent + fine_tune + 60 * minutes + bench) / 60
    over = (f" (more than --max-minutes {max_minutes:g}: this machine is too slow to fit it)"
            if max_minutes and total > max_minutes else "")
    log(f"about {math.ceil(total)} min on this machine{over} ({_cpu_name()}): {spent:.0f} s starting and measuring, "
        + (f"fine-tuning the teacher {fine_tune / 60:.1f} min ({cost['steps']} steps of {cost['step_seconds']:.2f} s, "
           "measured), " if fine_tune else "")
        + f"compress {minutes:g} min{raised}, bench {bench / 60:.1f} min")
    return cost, minutes


def _teacher(task: TaskOptions, options: dict, cost: dict, log) -> dict:
    """Step 1: the teacher's dev metrics, fine-tuned now within the time ``cost`` says (its
    evaluation after), unless its folder holds a finished one."""
    from kdbert.methods.finetune import finetune

    teacher_dir = Path(options["output_dir"])
    metrics = _finished(teacher_dir)
    if metrics is not None:
        return metrics
    log(f"[1/3] fine-tuning the teacher on {task.task} -> {teacher_dir}")
    deadline = time.time() + cost["seconds"] - cost["eval_rows"] * cost["row_seconds"]
    marker = teacher_dir / "run_config.json"
    # the steps fitted to --max-minutes (an interrupted run keeps those it started with)
    steps = json.loads(marker.read_text()).get("max_steps") if marker.exists() else cost.get("fitted_steps")
    report = finetune(task, {**options, "max_steps": steps}, resume=marker.exists(), deadline=deadline)
    if report["stopped_early"]:
        log(f"the teacher's fine-tuning stopped at step {report['stopped_early']['step']} of "
            f"{report['stopped_early']['of']}, when the time said for it ran out: this machine ran slower than "
            "measured")
    return report["best_metrics"]


def _finished(folder: Path) -> dict | None:
    report = folder / "metrics.json"
    return json.loads(report.read_text()) if report.exists() and (folder / "train_report.json").exists() else None


def run_quickstart(task: TaskOptions, quickstart: QuickstartConfig | None = None, log=print,
                   started: float | None = None) -> dict:
    """Run the main job with ``quickstart``'s options (default: :class:`QuickstartConfig`'s); returns
    the summary (also written to its ``output_dir``). ``max_train_examples`` overrides the budget's
    training subset (the search distils on it too). ``started``: when the job began
    (``time.time()``; default: now), what ``--max-minutes`` counts from."""
    started = time.time() if started is None else started
    from kdbert.compress.pipeline import compress
    from kdbert.compress.report import at_fastest_threads
    from kdbert.deploy.bench import bench_model, compare, format_table

    quickstart = quickstart or QuickstartConfig()
    quickstart.check()
    out = Path(quickstart.output_dir)
    limits = dict(SHORT_BUDGET) if quickstart.budget == "short" else {}
    if quickstart.max_train_examples:
        limits["max_train_examples"] = quickstart.max_train_examples
    teacher_dir, search_dir = out / "teacher", out / "compress"
    task = replace(task, held_out_fraction=held_out_fraction(task, limits.get("max_train_examples"), teacher_dir))
    target_speedup = quickstart.target_speedup

    options = {"output_dir": str(teacher_dir), "model": quickstart.model, "seed": quickstart.seed,
               "no_progress": quickstart.no_progress, **limits}
    config = CompressConfig(teacher=str(teacher_dir), max_train_examples=limits.get("max_train_examples"),
                            **{name: getattr(quickstart, name) for name in compress_options()})
    cost, minutes = _plan(task, options, config, quickstart.max_minutes if quickstart.budget == "short" else 0.0,
                          started, log)
    teacher_metrics = _teacher(task, options, cost, log)

    log(f"[2/3] compress: students >= {target_speedup:g}x faster than the int8 teacher, timed, distilled and "
        f"shipped in {minutes:g} min -> {search_dir}")
    report = compress(task, replace(config, budget_minutes=minutes), search_dir)
    winner = report["winner"]

    log("[3/3] measuring size and CPU speed (PyTorch and ONNX Runtime int8)")
    seq_len = bench_seq_len(task)
    name = f"student ({winner['candidate']})"
    rows = compare([bench_model(str(teacher_dir), seq_len=seq_len, name="teacher", runs=20),
                    bench_model(winner["run"], seq_len=seq_len, name=name, runs=20),
                    bench_model(search_dir / "teacher-onnx" / "model.int8.onnx", seq_len=seq_len,
                                name="teacher int8", runs=20),
                    bench_model(search_dir / "winner" / "model.int8.onnx", seq_len=seq_len, name=f"{name} int8",
                                runs=20)])
    shipped, teacher_int8 = report["shipped"], report["teacher_scores"]["dev_deployed"]
    scores = (teacher_metrics["score"], winner["dev_score"], teacher_int8, shipped["dev_score"])
    for row, score in zip(rows, scores):
        row["dev_score"] = score
    retained = 100.0 * winner["dev_score"] / teacher_metrics["score"] if teacher_metrics["score"] else 0.0
    deployed_retained = 100.0 * shipped["dev_score"] / teacher_int8 if teacher_int8 else 0.0
    int8_methods = {"teacher": json.loads((search_dir / "teacher-onnx" / "export_report.json").read_text())
                    ["quantization"]["method"], "student": shipped["int8"]["method"]}
    lines = [f"# kdbert quickstart: {task.task}, budget {quickstart.budget}", "",
             f"teacher dev: {_describe(teacher_metrics)}",
             f"winner of the search: {winner['candidate']} ({winner['method']}, {winner['steps']} steps, "
             f"{winner['rule']}), dev {winner['dev_score']:.2f}: {retained:.1f}% of the teacher's score",
             f"trained in {_training_precision(teacher_dir)} (teacher)", "",
             f"deployed as ONNX int8 (teacher {int8_methods['teacher']}, student {int8_methods['student']}: "
             f"the fastest method within 0.5 dev points of fp32), on the task's dev rows at their own lengths: "
             f"the student is "
             f"{shipped['speedup']:.2f}x faster than the int8 teacher at batch 1 on "
             f"{report['speed']['settings']['threads']} thread(s) and keeps {deployed_retained:.1f}% "
             f"of its score; every candidate in {search_dir / 'compress_report.md'} and "
             f"{search_dir / 'pareto.png'}",
             *([f"on the {report['decide_rows']} held-out training rows that decide (never trained on, never "
                f"picking a checkpoint), the shipped student keeps {100 * shipped['kept_decide']:.1f}% of the "
                f"teacher's score (noise margin ± {shipped['margin']:.2f} points): what to expect on new text "
                "like them"] if "kept_decide" in shipped else []),
             *([fastest] if (fastest := at_fastest_threads(report).strip()) else []),
             "", format_table(rows), ""]
    (out / "summary.md").write_text("\n".join(lines))
    summary = {"rows": rows, "winner": winner["candidate"], "retained_percent": retained,
               "int8_speedup_vs_int8_teacher": shipped["speedup"], "int8_retained_percent": deployed_retained,
               "int8_methods": int8_methods,
               "int8_speedup_each_at_its_fastest": (shipped.get("each_at_its_fastest") or {}).get("speedup"),
               **({"int8_kept_decide_percent": 100 * shipped["kept_decide"]} if "kept_decide" in shipped else {}),
               "training_precision": {"teacher": _training_precision(teacher_dir)},
               "compress_report": str(search_dir / "compress_report.json")}
    write_json(out / "summary.json", summary)
    log("\n".join(lines))
    return summary


def _training_precision(folder: Path) -> str:
    """The autocast precision a finished step trained in (from its train report)."""
    runtime = json.loads((folder / "train_report.json").read_text()).get("runtime")
    if runtime is None:  # trained before kdbert recorded it: float32 was the only default then
        return "float32"
    return {"no": "float32"}.get(runtime["mixed_precision"], runtime["mixed_precision"])


def _describe(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in metrics.items())


def cmd_quickstart(args) -> int:
    """The ``kdbert quickstart`` command: run as this process's own command line, the job began when
    the process did (its imports count); called in a running process (``main([...])``), when called."""
    started = time.time() - (seconds_since_start() if args.own_process else 0.0)
    run_quickstart(task_options(args), build_config(QuickstartConfig, given_options(args, QuickstartConfig)),
                   started=started)
    return 0


def add_commands(sub, table: dict) -> None:
    p = add_command(sub, table, "quickstart", cmd_quickstart,
                    help="the main job: fine-tune the default teacher, compress it, compare them "
                         "(it says how long it takes on this machine before it starts)",
                    description="Fine-tune the packaged teacher on a task, run a short `kdbert compress` (the fastest "
                                "student that keeps its score, found on this machine), bench both, and print a "
                                "teacher-vs-student table. Rerun to continue an interrupted run.")
    add_task_arguments(p, required=False)
    p.set_defaults(task="sst2")
    OptionFlags(p).add(QuickstartConfig, help={
        "word_vectors": "GloVe or word2vec text file the BiLSTM candidates' embeddings start from, or encoder:MODEL "
                        "(each word through that encoder) (default: encoder:default, the packaged teacher's base)"})
