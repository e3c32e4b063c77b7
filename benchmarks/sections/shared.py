"""What every section of the benchmark pages shares: the pages, the task order, the results folders,
the notes beside the data, and the GLUE table of distilled students (``distill_section``) with its verdicts."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from common import load_results
from paths import GLUE_DIR, REPO

from kdbert.deploy.report import build_table, format_mean_std, mean_std
from kdbert.errors import KdbertError

ROOT = REPO
NOTES = REPO / "benchmarks" / "notes"
GPU_RESULTS = REPO / "benchmarks" / "results" / "gpu-h100"
GPU_H200_RESULTS = REPO / "benchmarks" / "results" / "gpu-h200"
GPU_H200_BASE_RESULTS = REPO / "benchmarks" / "results" / "gpu-h200-base"
RENAMED_SCRIPTS = {f"benchmarks/{old}.py": f"benchmarks/bench_{old}.py"
                   for old in ("deploy", "quickstart", "teacher_cache", "mlm_head")}
"""Benchmark scripts renamed after results recorded commands naming them (their names repeated
modules of kdbert); the page shows those commands under today's names, so that they run."""
# the key suffixes of the 4x searches under the current rules and recipe (``bench_compress.py --key-suffix``):
# against the tuned teachers, the speed checked as shipped, held-out rows by source and by collection, the
# whole-width candidates, those first in the start order, the teacher's head, CoLA's rows drawn nearness-matched,
# the starts ranked by importance, a pair-pooled classifier's head fitted on the cosine, its graph running the two
# sentences as two rows, STS-B's second draw of held-out rows (a teacher holding out 20%), and a pair-pooled cut's
# layers ranked by their cosine, and SST-2's with IMDb sentences as --unlabelled rows (the teacher beside, or its
# export labelling every row; "late": joining the batches from the second epoch, --unlabelled-from-epoch 1), and
# MRPC's with Wikipedia pairs mined by word overlap as --unlabelled rows ("mined": 24,584, "mined60k": 60,000),
# and with --max-epochs 24 ("epochs24"), the teacher's units ranked in a tenth of the window, where its pair
# cosine elimination of layers fits ("ranked"), both ("ranked24")
CURRENT_TRUST_SUFFIXES = ("tuned", "shipped", "source", "ffn", "collection", "order", "head", "near", "importance",
                          "fitted", "rows", "draw2", "layers", "imdb", "export", "late", "mined", "mined60k",
                          "epochs24", "ranked", "ranked24")
TASK_ORDER = ["cola", "sst2", "mrpc", "stsb", "rte", "qnli", "mnli", "qqp", "wnli"]

HEADLINE = ["intro", "scoreboard", "kept", "agreement", "paired-margin", "winner-rule", "recipe-parts", "teachers", "base-teachers",
            "base-teachers-gpu"]
"""The sections of BENCHMARKS.md (and of docs/benchmarks/index.md), before a short section per page."""
PAGES: dict[str, tuple[str, list[str]]] = {
    "compress": ("`kdbert compress`", ["quickstart", "quickstart-seeds", "checkpoint-rule", "compress", "kept-history", "compress-budget", "spare-time", "compress-engines",
                                       "recipe-ablation", "plateau", "epoch-cap", "near-duplicates", "kept-by-source", "decide-draw", "timing-turns",
                                       "timing-together", "timing-process", "timing-threads"]),
    "students": ("General students", ["general-students", "pretrained-cuts"]),
    "speed": ("Speed and deployment", ["deploy", "export-graphs", "breakdown", "int8-targets", "serve-load",
                                       "efficiency", "bench", "throughput", "teacher-cache",
                                       "labelling"]),
    "distill": ("Distillation on GLUE: the teachers, TinyBERT, KD, BERT-PKD and DistilBERT",
                ["teacher", "precision", "tinybert", "pkd", "general", "mlm-head"]),
    "augmentation": ("Augmentation", ["augmentation-gpu", "augmented-files", "augment-throughput"]),
    "mobilebert": ("MobileBERT", ["mobilebert-ops", "mobilebert-ablation", "mobilebert-task"]),
    "bilstm": ("Distilled BiLSTM", ["bilstm-vectors", "bilstm-augment", "bilstm-distill"]),
    "long-text": ("Long text: IMDb and SQuAD v1.1", ["imdb", "squad"]),
    "reproduction": ("Reproduction", ["rerun", "reruns"]),
    "archive": ("Archive: runs superseded by a later protocol", ["quickstart-before-bf16", "compress-superseded", "kept-superseded"]),
}
"""The full records: ``docs/benchmarks/<page>.md``, its title and its sections in page order."""
PAGES_DIR = Path("docs", "benchmarks")
"""Where the pages go, under the repository root."""
LINK_BASE = f"{PAGES_DIR.as_posix()}/"
"""The pages' folder as BENCHMARKS.md links to it; the copy of the headline in that folder links with ``""``."""


def page_of(section: str) -> str:
    """The page (``docs/benchmarks/<page>.md``) holding ``section``."""
    return next(page for page, (_, names) in PAGES.items() if section in names)


def note(name: str, **fields) -> str:
    """The hand-written text ``benchmarks/notes/<name>.md`` (without its final newline); ``fields``
    fill its ``{placeholders}`` with figures computed from the results."""
    text = (NOTES / f"{name}.md").read_text().rstrip("\n")
    return text.format(**fields) if fields else text


def current_command(command: str) -> str:
    """A recorded ``command`` with every renamed benchmark script under its current name."""
    for old, new in RENAMED_SCRIPTS.items():
        command = command.replace(old, new)
    return command


def metrics_text(metrics: dict) -> str:
    """``accuracy 80.1, f1 85.0``: every metric but the score."""
    return ", ".join(f"{k} {v:.1f}" for k, v in metrics.items() if k != "score")


def bench_rows(name: str) -> list[dict]:
    """The rows of ``benchmarks/bench_models.py --results name``, the baseline (speedup 1) first."""
    return sorted(load_results(name).values(), key=lambda r: (r["speedup"] != 1.0, -r["latency_median_ms"]))


BUDGET_KEYS = ("max_train_examples", "epochs", "intermediate_epochs", "max_steps", "intermediate_max_steps",
               "learning_rate")
"""The options a distill record names as its budget (those that differ from the method defaults)."""


def distill_section(title: str, intro: str, variants: list[tuple[str, str]], results_dir: Path | None = None,
                    command: str | None = None) -> list[str]:
    """A GLUE table of distilled students: the teacher row, one row per variant (``variants``: (name,
    label) in row order) with the mean ± std over seeds and the share of the teacher kept per task, then
    the budgets used and the command; ``[]`` when no variant has a record."""
    results = load_results("distill", results_dir)
    teachers = {r["task"]: r for r in load_results("teacher_glue", results_dir).values() if not r.get("tuning")}
    names = {name for name, _ in variants}
    rows = [r for r in results.values() if r["variant"] in names]
    if not rows:
        return []
    tasks = [t for t in TASK_ORDER if any(r["task"] == t for r in rows)]
    lines = [f"## {title}", "", intro, "", "| model | " + " | ".join(tasks) + " | average (kept) |",
             "|---|" + "---|" * (len(tasks) + 1)]
    teacher_scores = [teachers[t]["metrics"]["score"] for t in tasks if t in teachers]
    teacher_average = sum(teacher_scores) / len(teacher_scores) if len(teacher_scores) == len(tasks) else None
    lines.append("| teacher (all-MiniLM-L6-v2) | " + " | ".join(
        f"{teachers[t]['metrics']['score']:.1f}" if t in teachers else "-" for t in tasks) + " | "
        + (f"{teacher_average:.1f}" if teacher_average is not None else "-") + " |")
    # the numbers are `kdbert report`'s (mean, sample std, kept, average); the layout is this page's
    records = [{"name": "teacher", "teacher": True, "task": t, "score": teachers[t]["metrics"]["score"]}
               for t in tasks if t in teachers]
    records += [{"name": r["variant"], "task": r["task"], "score": r["metrics"]["score"]} for r in rows]
    table = {row["name"]: row for row in build_table(records)["rows"]}
    for name, label in variants:
        if name not in table:
            continue
        row, cells = table[name], []
        for task in tasks:
            cell = row["tasks"].get(task)
            if cell is None:
                cells.append("-")
            elif cell["kept"] is not None:
                cells.append(f"{format_mean_std(cell['scores'])} ({cell['kept']:.0f}%)")
            else:
                cells.append(format_mean_std(cell["scores"]))
        if teacher_average is not None and row["average"] is not None:
            cells.append(f"{row['average']:.1f} ({row['average_kept']:.0f}%)")
        else:
            cells.append("-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    budgets: dict[str, list[str]] = {}
    for r in rows:
        budget = json.dumps({k: v for k, v in r["options"].items() if k in BUDGET_KEYS}, sort_keys=True)
        if r["task"] not in budgets.setdefault(budget, []):
            budgets[budget].append(r["task"])
    example = rows[0]
    lines += ["", "Dev score (the task's metric, mean of its metrics), and in brackets the share of the teacher's "
              "score kept; the average column only where a row covers every task. " + note("dev-selection")
              + " Budgets (options that differ from the method defaults) and the tasks that used them:", ""]
    lines += [f"- `{b}`: {', '.join(sorted(t, key=TASK_ORDER.index))}" for b, t in sorted(budgets.items())]
    command = command or (f"Command per cell: `python benchmarks/distill_glue.py --task TASK --budget "
                          f"{example['budget']} --variants VARIANT --seeds SEED` (a recorded cell again: add "
                          "`--rerun`); wall time per run is in `benchmarks/results/distill.json`.")
    lines += ["", f"Machine: {example['machine']}; date {example['date']}. {command}", ""]
    return lines


def verdict_lines(baseline: str, variants: list[str], target_percent: float | None = None,
             results_dir: Path | None = None) -> list[str]:
    """Per task: each variant's difference from ``baseline``, marked as within noise when it is
    smaller than the larger of the two stds (3 seeds), and whether the best reaches the target."""
    results = load_results("distill", results_dir)
    teachers = {r["task"]: r for r in load_results("teacher_glue", results_dir).values() if not r.get("tuning")}
    lines = []
    for task in TASK_ORDER:
        def stats(variant):
            scores = [r["metrics"]["score"] for r in results.values() if r["task"] == task and r["variant"] == variant]
            return mean_std(scores) if scores else None
        base = stats(baseline)
        if base is None:
            continue
        parts, means = [], []
        for variant in variants:
            other = stats(variant)
            if other is None:
                continue
            means.append(other[0])
            delta = other[0] - base[0]
            stds = [sd for sd in (base[1], other[1]) if sd is not None]
            if not stds:
                note = "one seed"
            elif abs(delta) <= max(stds):
                note = "within 1 std"
            else:
                note = "beyond 1 std"
            parts.append(f"{variant} {delta:+.1f} ({note})")
        if not parts:
            continue
        text = f"- {task}, against `{baseline}` ({base[0]:.1f}): " + "; ".join(parts) + "."
        if target_percent and task in teachers:
            kept = 100 * max(means) / teachers[task]["metrics"]["score"]
            text += f" Best kept {kept:.0f}% of the teacher (target {target_percent:.0f}%: " + \
                    ("met)." if kept >= target_percent else "NOT met).")
        lines.append(text)
    return lines + [""] if lines else []


def runs_of(results: dict, task: str, variant: str) -> list[dict]:
    """The records of ``variant`` on ``task``."""
    return [r for r in results.values() if r["task"] == task and r["variant"] == variant]


@functools.lru_cache(maxsize=None)  # the report asks for each task's score several times
def majority_class_score(task: str, data_dir: str = GLUE_DIR) -> float | None:
    """Dev score of predicting the most frequent training label for every row (regression: the mean
    training score, which correlates with nothing: 0); ``None`` when the task's files are not there."""
    from kdbert.data.glue import load_glue_dir
    from kdbert.data.tasks import GLUE_TASKS
    from kdbert.core.metrics import compute_metrics, split_prefix, task_score

    spec = GLUE_TASKS[task]
    try:
        data = load_glue_dir(spec, data_dir)
    except KdbertError:  # no GLUE files beside the checkout: no baseline row
        return None
    labels = [e.label for e in data.train]
    constant = sum(labels) / len(labels) if spec.is_regression else max(set(labels), key=labels.count)
    metrics = {}
    for split, rows in data.dev.items():
        references = [e.label for e in rows]
        metrics.update(compute_metrics(spec.metrics, [constant] * len(references), references,
                                       split_prefix(split, spec.dev_splits)))
    return task_score(metrics, spec.metrics, spec.dev_splits)
