"""BENCHMARKS.md sections of the GLUE runs: the teachers, TinyBERT, KD / PKD / DistilBERT, bf16 against
float32, the general students and the MLM head."""

from __future__ import annotations

from common import load_results
from sections.shared import (TASK_ORDER, distill_section, metrics_text, note, runs_of, verdict_lines)

from kdbert.deploy.report import format_mean_std, mean_std


def teacher_section() -> list[str]:
    results = load_results("teacher_glue")
    if not results:
        return []
    lines = ["## Teacher: all-MiniLM-L6-v2 fine-tuned on GLUE (dev)", "",
             "The reference every student is measured against. Per-task hyper-parameters are kdbert's "
             "defaults (`kdbert finetune --task T`) except where the budget column says otherwise.", "",
             "| task | dev metrics | score | epochs | lr | batch | budget | train time | machine | date |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    rows = sorted(results.values(), key=lambda r: (TASK_ORDER.index(r["task"]), r["budget"]))
    for r in rows:
        h = r["hyperparameters"]
        budget = ", ".join(f"{k}={v}" for k, v in r["overrides"].items()) or "defaults"
        dev = {k: v for k, v in r["metrics"].items() if not k.startswith("held-out/") and k != "selection_score"}
        picked = (f"; picked on held-out train rows ({r['metrics']['selection_score']:.1f} there), trained in "
                  f"{r.get('precision', 'float32')}" if "selection_score" in r["metrics"] else "")
        lines.append(f"| {r['task']} | {metrics_text(dev)}{picked} | {r['metrics']['score']:.1f} | {h['epochs']} | "
                     f"{h['learning_rate']:g} | {h['batch_size']} | {r['budget']}: {budget} | "
                     f"{r['train_seconds'] / 60:.1f} min | {r['machine']} | {r['date']} |")
    reference = [r for r in rows if not r.get("tuning")]
    average = sum(r["metrics"]["score"] for r in reference) / len(reference)
    lines += ["", f"Average score over the {len(reference)} reference runs (tuning runs left out): **{average:.1f}**. "
              "One seed each. " + note("dev-selection"), "",
              "The rows with `held_out_fraction=0.1` are the teachers `kdbert compress` searches against since "
              "2026-11-25: fine-tuned without the tenth of training rows the search holds out to pick students on "
              "(the same seeded rows), their best checkpoint picked on those rows, so dev only scores them.", "",
              "Command: `python benchmarks/teacher_glue.py --budget cpu` (one task: `--tasks rte`; a recorded "
              "task again, compared with its figure: `--rerun`).", ""]
    return lines


TINYBERT_VARIANTS = [("tinybert4-finetune", "tinybert4 fine-tuned, no distillation"),
                     ("tinybert-task-lr3e-5", "TinyBERT task distillation, paper's prediction lr 3e-5"),
                     ("tinybert-task", "TinyBERT task distillation only"),
                     ("tinybert-general-task", "general + task distillation"),
                     ("tinybert-general-task-aug", "general + task + augmentation"),
                     ("tinybert4-ws-finetune", "tinybert4 from teacher weights, fine-tuned, no distillation"),
                     ("tinybert-ws-task", "tinybert4 from teacher weights + TinyBERT task distillation"),
                     ("tinybert-ws-general-task", "tinybert4 from teacher weights + general + task"),
                     ("tinybert-ws-general-task-aug", "tinybert4 from teacher weights + general + task + augmentation"),
                     ("tinybert-ws-general-task-aug-gold",
                      "the same, STS-B prediction stage on gold scores (the paper's target)"),
                     ("tinybert-ws-general-task-aug-x4", "the same as the augmentation row, 4x the steps")]
PKD_VARIANTS = [("l3-finetune", "3 layers x 384, fine-tuned only"), ("kd", "KD (Hinton)"),
                ("pkd-skip", "PKD-Skip"), ("pkd-last", "PKD-Last"), ("tinybert-l3", "TinyBERT task distillation"), ("distilbert-d", "DistilBERT (D)"),
                ("distilbert-general-d", "DistilBERT (D) after general distillation")]


def _average_target(variants: list[str], target_percent: float) -> list[str]:
    """The issue's target on the average: each variant's mean over the tasks it covers, against the
    teacher's average over the same tasks, when it covers every task the teacher was run on."""
    results = load_results("distill")
    teachers = {r["task"]: r["metrics"]["score"] for r in load_results("teacher_glue").values() if not r.get("tuning")}
    parts = []
    for variant in variants:
        by_task: dict[str, list[float]] = {}
        for r in results.values():
            if r["variant"] == variant:
                by_task.setdefault(r["task"], []).append(r["metrics"]["score"])
        if not by_task or set(by_task) != set(teachers):
            continue
        average = sum(sum(v) / len(v) for v in by_task.values()) / len(by_task)
        kept = 100 * average / (sum(teachers.values()) / len(teachers))
        parts.append(f"`{variant}` {average:.1f} = {kept:.1f}% ({'met' if kept >= target_percent else 'NOT met'})")
    if not parts:
        return []
    return [f"- Average over {len(teachers)} tasks against the teacher's {sum(teachers.values()) / len(teachers):.1f} "
            f"(target {target_percent:.0f}%): " + "; ".join(parts) + ".", ""]


def _augmentation_steps(variants: list[str]) -> list[str]:
    """Per task where the longer augmented run exists: the mean (n) of each variant, in order."""
    results = load_results("distill")
    lines = []
    for task in TASK_ORDER:
        by_variant = {v: [r["metrics"]["score"] for r in results.values() if r["variant"] == v and r["task"] == task]
                      for v in variants}
        if not by_variant[variants[-1]]:
            continue
        lines.append(f"- {task}: " + "; ".join(f"`{v}` {format_mean_std(s)}" for v, s in by_variant.items() if s)
                     + ".")
    if not lines:
        return []
    return ["Augmentation with more steps (`-x4`: 4x the steps of each stage on the augmented file, everything "
            "else as the augmentation row):", "", *lines, ""]


def tinybert_section() -> list[str]:
    lines = distill_section(
        "TinyBERT (issue: TinyBERT, complete)",
        note("tinybert-intro"),
        TINYBERT_VARIANTS)
    if not lines:
        return []
    return lines + verdict_lines("tinybert4-finetune", ["tinybert-task", "tinybert-general-task",
                                                   "tinybert-general-task-aug"], target_percent=96) + \
        verdict_lines("tinybert4-ws-finetune", ["tinybert-ws-task", "tinybert-ws-general-task",
                                           "tinybert-ws-general-task-aug"], target_percent=96) + \
        _average_target(["tinybert-ws-task", "tinybert-ws-general-task", "tinybert-ws-general-task-aug"], 96) + \
        _augmentation_steps(["tinybert4-ws-finetune", "tinybert-ws-general-task", "tinybert-ws-general-task-aug",
                             "tinybert-ws-general-task-aug-x4"]) + [
            note("tinybert-reading"),
            ""]


def pkd_section() -> list[str]:
    lines = distill_section(
        "KD, BERT-PKD and DistilBERT (issue: DistilBERT, BERT-PKD and classic KD)",
        note("pkd-intro"),
        PKD_VARIANTS)
    return lines + verdict_lines("l3-finetune", ["kd", "pkd-skip", "pkd-last", "tinybert-l3"]) + \
        verdict_lines("kd", ["pkd-skip", "pkd-last"])


def mlm_head_section() -> list[str]:
    results = load_results("mlm_head")
    if not results:
        return []
    lines = ["## MLM head on the default teacher (`kdbert mlm-head`)", "",
             "all-MiniLM-L6-v2 ships without an MLM head; augmentation and DistilBERT's KL term need one. "
             "Held-out masked-token accuracy (15% masking, 256 held-out sequences of 128 tokens):", "",
             "| unfrozen top layers | trainable params | steps x batch | top-1 | top-15 | wall time | machine | date |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(results.values(), key=lambda r: r["unfreeze_top_layers"]):
        lines.append(f"| {r['unfreeze_top_layers']} | {r['trainable_parameters']:,} | {r['steps']} x {r['batch_size']} "
                     f"| {100 * r['top1']:.1f}% | {100 * r['top15']:.1f}% | {r['wall_time_s'] / 60:.0f} min "
                     f"| {r['machine']} | {r['date']} |")
    lines += ["", note("mlm-head-reading"), ""]
    return lines


def general_section() -> list[str]:
    results = load_results("general")
    if not results:
        return []
    lines = ["## General distillation runs (CPU budgets)", "",
             note("general-intro"), "",
             "| method | steps | first loss | last loss | wall time | machine | date | command |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results.values():
        lines.append(f"| {r['method']} | {r['steps']} | {r['first_loss']['loss']:.2f} | {r['last_loss']['loss']:.2f} | "
                     f"{r['wall_seconds'] / 60:.0f} min | {r['machine']} | {r['date']} | `{r['command']}` |")
    lines += ["", "Command: `python benchmarks/general_distill.py`.", ""]
    return lines


PRECISION_VARIANTS = [("kd", "KD (Hinton), 3 layers x 384"), ("tinybert-ws-task", "TinyBERT task distillation, "
                                                                   "tinybert4 from teacher weights")]


def precision_section() -> list[str]:
    """bf16 autocast against float32 on the same runs (the evidence for the default precision)."""
    results = load_results("distill")
    pairs = [(task, variant, label) for task in TASK_ORDER for variant, label in PRECISION_VARIANTS
             if runs_of(results, task, variant + "+bf16") and runs_of(results, task, variant)]
    if not pairs:
        return []
    lines = ["## bfloat16 autocast against float32 (dev)", "",
             note("precision-intro"), "",
             "| task | method | float32 | bf16 | difference | verdict | mean wall time fp32 / bf16 |",
             "|---|---|---|---|---|---|---|"]
    verdicts = []
    for task, variant, label in pairs:
        fp32, bf16 = runs_of(results, task, variant), runs_of(results, task, variant + "+bf16")
        (m32, s32), (m16, _) = (mean_std([r["metrics"]["score"] for r in runs]) for runs in (fp32, bf16))
        delta = m16 - m32
        within = s32 is not None and abs(delta) <= s32
        verdicts.append(within)
        wall = [sum(r["wall_seconds"] for r in runs) / len(runs) for runs in (fp32, bf16)]
        lines.append(f"| {task} | {label} | {format_mean_std([r['metrics']['score'] for r in fp32])} | "
                     f"{format_mean_std([r['metrics']['score'] for r in bf16])} | {delta:+.1f} | "
                     f"{'within 1 std' if within else 'beyond 1 std' if s32 is not None else 'one seed'} | "
                     f"{wall[0]:.0f} s / {wall[1]:.0f} s |")
    first = next(iter(r for r in results.values() if r["variant"].endswith("+bf16")))
    lines += ["", note("precision-reading", within=sum(verdicts), compared=len(verdicts), machine=first["machine"],
                       date=first["date"]), ""]
    return lines + _double_steps_lines(results)


def _double_steps_lines(results: dict) -> list[str]:
    """TinyBERT general + task at twice the epochs under bf16, against the float32 row's wall time."""
    base, doubled = "tinybert-ws-general-task", "tinybert-ws-general-task-x2+bf16"
    teachers = {r["task"]: r for r in load_results("teacher_glue").values() if not r.get("tuning")}
    tasks = [t for t in TASK_ORDER if runs_of(results, t, doubled) and runs_of(results, t, base)]
    if not tasks:
        return []
    lines = ["### TinyBERT from teacher weights + general + task, twice the steps in bf16", "",
             "| task | float32, recorded row | bf16, 2x the epochs of every stage | kept (fp32 / 2x bf16) | "
             "mean wall time per run (fp32 / 2x bf16) |", "|---|---|---|---|---|"]
    ratios = {}

    def mean_wall(runs):
        return sum(r["wall_seconds"] for r in runs) / len(runs)

    for task in tasks:
        old, new = runs_of(results, task, base), runs_of(results, task, doubled)
        scores = [[r["metrics"]["score"] for r in runs] for runs in (old, new)]
        teacher = teachers[task]["metrics"]["score"]
        kept = " / ".join(f"{100 * mean_std(s)[0] / teacher:.0f}%" for s in scores)
        wall = " / ".join(f"{sum(r['wall_seconds'] for r in runs) / len(runs):.0f} s" for runs in (old, new))
        lines.append(f"| {task} | {format_mean_std(scores[0])} | {format_mean_std(scores[1])} | {kept} | {wall} |")
        ratios[task] = mean_wall(new) / mean_wall(old)
    lines += ["", "Wall time per run against the float32 row (target: at most 1x): "
              + ", ".join(f"{task} {ratio:.2f}x" for task, ratio in ratios.items())
              + (" (met)" if max(ratios.values()) <= 1 else " (NOT met)") + ". " + note("precision-double-steps")]
    return lines + [""]
