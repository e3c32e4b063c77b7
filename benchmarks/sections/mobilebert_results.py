"""BENCHMARKS.md sections of MobileBERT: its presets and operations, the knowledge-transfer ablation
(progressive, joint, auxiliary) and its students on GLUE against the majority class."""

from __future__ import annotations

from common import load_results
from sections.shared import (TASK_ORDER, bench_rows, distill_section, majority_class_score, metrics_text, note)

from kdbert.deploy.bench import format_table
from kdbert.deploy.report import mean_std


def mobilebert_ops_section() -> list[str]:
    results = load_results("mobilebert_ops")
    if not results:
        return []
    sizes = [r for k, r in results.items() if k.startswith("size/")]
    latencies = [r for k, r in results.items() if k.startswith("latency/")]
    lines = ["## MobileBERT presets and operational optimisations", ""]
    if sizes:
        first = sizes[0]
        lines += [f"Sequence classifiers (2 labels), FLOPs per example at sequence length 128 ({first['machine']}, "
                  f"{first['date']}). `*-matched` presets are derived from the packaged teacher; ib-bert presets read "
                  "attention inputs from their bottleneck (HF cannot express the paper's), hence more parameters.", "",
                  "| model | shape | params | non-embedding | FLOPs/example | paper params | paper FLOPs |",
                  "|---|---|---|---|---|---|---|"]
        for r in sorted(sizes, key=lambda r: (not r["name"].startswith("teacher"), r["name"])):
            paper = f"{r['paper_params'] / 1e6:.1f}M" if r.get("paper_params") else "-"
            paper_flops = f"{r['paper_flops'] / 1e9:.1f}G" if r.get("paper_flops") else "-"
            lines.append(f"| {r['name']} | {r['shape']} | {r['total'] / 1e6:.2f}M | {r['non_embedding'] / 1e6:.2f}M | "
                         f"{r['flops_per_example'] / 1e9:.2f}G | {paper} | {paper_flops} |")
        lines += ["", f"Command: `{first['command']}`.", ""]
    if latencies:
        first = latencies[0]
        busiest = max(max(r["load_before"], r["load_after"]) for r in latencies)
        lines += [f"Latency of `mobilebert-matched` with each normalisation and activation against the teacher, "
                  f"random weights, sequence length {first['seq_len']}, {first['threads']} threads, {first['machine']}, "
                  f"{first['date']}; median of {first['rounds']} interleaved rounds. The paper's column is a Pixel 4 "
                  "phone running its 24-layer MobileBERT at batch 1.", ""]
        if busiest > first["threads"]:
            lines += [f"**Measured while the machine was shared** (1-minute load average up to {busiest:.1f} on "
                      f"{first['threads']} threads): these values say little; rerun the command on an idle machine.", ""]
        lines += ["| model | batch | median (ms) | fastest round (ms) | vs LayerNorm & gelu | paper (ms) |",
                  "|---|---|---|---|---|---|"]
        for r in sorted(latencies, key=lambda r: (r["batch_size"], r["name"] != "teacher", r["name"])):
            lines.append(f"| {r['name']} | {r['batch_size']} | {r['median_ms']:.1f} | {r['min_round_ms']:.1f} | "
                         f"{r['speedup_vs_layernorm_gelu']:.2f}x | {(r['batch_size'] == 1 and r['paper_ms']) or '-'} |")
        lines += [""] + _nonorm_verdict(latencies) + ["", f"Command: `{first['command']}`.", ""]
    return lines


def _nonorm_verdict(latencies: list[dict]) -> list[str]:
    """NoNorm + relu against LayerNorm + gelu per batch size, beside the paper's phone figure."""
    out = []
    for batch in sorted({r["batch_size"] for r in latencies}):
        rows = {r["name"]: r for r in latencies if r["batch_size"] == batch}
        if "nonorm-relu" not in rows or "layernorm-gelu" not in rows:
            continue
        fast, slow = rows["nonorm-relu"], rows["layernorm-gelu"]
        spread = max((r["median_ms"] - r["min_round_ms"]) / r["median_ms"] for r in (fast, slow))
        paper = (f"; the paper's phone: {slow['paper_ms'] / fast['paper_ms']:.1f}x" if batch == 1
                 and fast.get("paper_ms") and slow.get("paper_ms") else "")
        out.append(f"- Batch {batch}: NoNorm + relu is {fast['speedup_vs_layernorm_gelu']:.2f}x LayerNorm + gelu "
                   f"(median to fastest round differs by up to {100 * spread:.0f}%){paper}.")
    if out:
        out.append(note("mobilebert-ops-reading"))
    return out


def _ordering(rows: list[dict]) -> list[str]:
    """Sentences ranking the strategies (means ± sample std over seeds) by held-out MLM cross-entropy and
    last-layer distance (lower is better; general distillation, one per student) and by dev score."""
    paper = ["progressive", "joint", "auxiliary"]
    first_task = min(r["task"] for r in rows)
    criteria = [("held-out MLM cross-entropy", first_task, lambda r: r["held_out"]["cross_entropy"], -1, 2),
                ("last-layer feature-map MSE", first_task, lambda r: r["held_out"]["last_layer_feature_map_mse"],
                 -1, 3)]
    criteria += [(f"{task} dev score", task, lambda r: r["dev_metrics"]["score"], 1, 1)
                 for task in sorted({r["task"] for r in rows})]
    lines = []
    for what, task, value, sign, digits in criteria:
        means, spreads = {}, {}
        for strategy in paper:
            values = [value(r) for r in rows if r["strategy"] == strategy and r["task"] == task]
            if values:
                mean, std = mean_std(values)
                means[strategy] = round(mean, digits)
                spreads[strategy] = f" ± {std:.{digits}f}" if len(values) > 1 else ""
        if len(means) < 3:
            continue
        ranked = sorted(means, key=lambda k: -sign * means[k])
        text = "".join(("" if i == 0 else (" = " if means[k] == means[ranked[i - 1]] else ", then ")) +
                       f"{k} {means[k]:.{digits}f}{spreads[k]}" for i, k in enumerate(ranked))
        holds = all(sign * (means[a] - means[b]) > 0 for a, b in zip(paper, paper[1:]))
        lines.append(f"- By {what} ({'lower' if sign < 0 else 'higher'} is better), best first: {text}. "
                     f"The paper's order progressive > joint > auxiliary "
                     f"{'holds' if holds else 'does not hold'} here.")
    return lines + [""]


def mobilebert_ablation_section() -> list[str]:
    results = load_results("mobilebert_ablation")
    budgets: dict[str, list[dict]] = {}
    for key, r in results.items():
        if not key.endswith("teacher_mlm_head"):  # <name>/teacher_mlm_head: the head a named budget used
            budgets.setdefault(r.get("budget", "cpu"), []).append(r)
    if not budgets:
        return []
    head = results.get("teacher_mlm_head", {})
    teacher_top1 = next(iter(budgets.values()))[0]["teacher_held_out"]["top1"]
    lines = ["## MobileBERT knowledge transfer: progressive vs joint vs auxiliary", "",
             "`mobilebert-matched` (6 layers, inter-block 384 = the teacher's width, 12 heads; 7.25M parameters) "
             "distilled from the packaged teacher with an MLM head fitted by `kdbert mlm-head` "
             f"({head.get('steps')} steps x {head.get('batch_size')} sequences, head only: top-1 "
             f"{100 * head.get('top1', 0):.1f}%, top-15 {100 * head.get('top15', 0):.1f}% on held-out masked tokens). "
             "`none` is the same preset initialised from the teacher (`init_from_teacher`) with no general "
             "distillation. Held-out: "
             "the first 256 SST-2 dev sentences, 15% of tokens masked once (seeded); the teacher's own top-1 there "
             f"is {100 * teacher_top1:.1f}%. Each budget below is one `python benchmarks/mobilebert_ablation.py` "
             "command; every strategy of a budget takes the same optimiser steps.", ""]
    for name in sorted(budgets, key=lambda n: (max(r.get("general_steps") or 0 for r in budgets[n]), n)):
        base = name.removesuffix("-fitted")
        lines += _ablation_budget(name, budgets[name], budgets.get(base) if base != name else None)
    lines += [note("mobilebert-ablation-shortfall"), ""]
    return lines


def _precision(record: dict) -> str:
    """A record's training precision: ``bf16``, or ``float32`` (``no``, or not recorded)."""
    return {"no": "float32", None: "float32"}.get(record.get("precision"), record.get("precision"))


def _ablation_budget(name: str, rows: list[dict], before: list[dict] | None = None) -> list[str]:
    """One budget of the MobileBERT ablation: its settings, how its students started, a row per run,
    the strategy ordering; a ``-fitted`` budget also against ``before``, its runs from a random word table."""
    general = next((r for r in rows if r.get("general_command")), rows[0])
    settings = general["settings"]
    batch = settings.get("batch_size", 8)  # the first rows (budget cpu) did not record it: 8
    steps = general.get("general_steps")
    seeds = sorted({r["seed"] for r in rows})
    precision = _precision(general)
    threads = ("1 torch thread, machine shared with other jobs" if name == "cpu"
               else "wall times depend on what ran beside them")
    fitted = any(r.get("embedding_distinctness") for r in rows)
    lines = [f"### Budget `{name}`: {steps} steps of {batch} x 64 tokens"
             + (", embedding layer fitted to the teacher's" if fitted else ""), "",
             f"{steps} optimiser steps of {batch} sequences of 64 tokens (6 x {settings['layer_steps']} layer-wise "
             f"steps + {settings['pretrain_steps']} of pre-training distillation; auxiliary: one stage of {steps}) "
             f"from {settings['sequences']} packed sequences, AdamW at {settings['learning_rate']:g}, {precision}; "
             f"then plain fine-tuning on the task ({settings['finetune_steps']} steps of "
             f"{settings.get('finetune_batch_size', 16)}, lr 1e-4). {len(seeds)} seed(s): "
             f"{', '.join(map(str, seeds))} ({general['date']}, {general['machine']}, {threads}).", "",
             _embedding_init(rows), "",
             "| strategy | task | seed | held-out MLM top-1 | held-out MLM CE | last-layer feature-map MSE | dev metrics "
             "| general wall time |", "|---|---|---|---|---|---|---|---|"]
    order = ["progressive", "joint", "auxiliary", "none"]
    for r in sorted(rows, key=lambda r: (r["task"], order.index(r["strategy"]), r["seed"])):
        h = r["held_out"]
        wall = f"{r['general_seconds'] / 60:.0f} min" if r.get("general_seconds") else "-"
        lines.append(f"| {r['strategy']} | {r['task']} | {r['seed']} | {100 * h['top1']:.1f}% | {h['cross_entropy']:.2f} "
                     f"| {h['last_layer_feature_map_mse']:.3f} | {metrics_text(r['dev_metrics'])} | {wall} |")
    lines.append("")
    ordering = _ordering(rows)
    if len(ordering) > 1:
        lines += ordering
    if before:
        lines += _against_random_init(name.removesuffix("-fitted"), rows, before)
    tokens = steps * batch * 64
    paper_tokens = (24 * 10_000 + 500_000) * 2048 * 512
    compared = len({r["strategy"] for r in rows} - {"none"}) > 1
    lines.append(f"At this budget ({tokens / 1e3:.0f}K tokens per strategy) "
                 + ("the comparison says little about the paper's: its ordering comes from" if compared else
                    "the student is far from the paper's, which takes")
                 + " 24 x 10K layer-wise steps plus 500K pre-training steps at batch 2048 x 512 tokens from an IB-BERT "
                 f"teacher (about {paper_tokens / tokens:.0e} times as many tokens)."
                 + (f" Here auxiliary trains every layer and the MLM term for all {steps} steps, while progressive "
                    f"gives each layer {settings['layer_steps']} steps of its own and joint and progressive leave "
                    f"{settings['pretrain_steps']} for the MLM term." if compared else ""))
    for task in sorted({r["task"] for r in rows}):
        scores = {round(r["dev_metrics"]["score"], 2) for r in rows if r["task"] == task}
        if len(scores) == 1 and len([r for r in rows if r["task"] == task]) > 1:
            lines.append(f"Every student ends at the same {task} dev score ({scores.pop():.1f}): "
                         f"{settings['finetune_steps']} fine-tuning steps leave them all predicting one class, so "
                         "the task stage cannot separate the strategies here.")
    lines += ["", f"Commands: e.g. `{general['general_command']}` and `{general['finetune_command']}`.", ""]
    return lines


RANDOM_WORD_TABLE = ("a random 128-d word table, whose embedding outputs of different words had mean cosine "
                     "0.9995: indistinguishable")
FITTED_INIT = ("`init_from_teacher`: a truncated SVD of the teacher's centred word embeddings into the 128-d table "
               "and the trigram transform, the teacher's LayerNorm centring and mean scale folded into NoNorm")


def _embedding_init(rows: list[dict]) -> str:
    """How a budget's students started: fitted to the teacher, with the embedding distinctness its
    records carry, or (records without it, made before the fitted init) from a random word table."""
    distinct = [r["embedding_distinctness"] for r in rows if r.get("embedding_distinctness")]
    if not distinct:
        return (f"Embedding layer at initialisation: {RANDOM_WORD_TABLE} (recorded before the embedding layer was "
                "fitted to the teacher's).")
    student = sorted({d["student_mean_cosine"] for d in distinct})
    spread = f"{student[0]:.3f}" + (f"-{student[-1]:.3f}" if len(student) > 1 else "")
    return (f"Embedding layer at initialisation: fitted to the teacher's ({FITTED_INIT}). Mean cosine between the "
            f"embedding outputs of different tokens among the {distinct[0]['tokens']} most frequent corpus tokens "
            f"(1.0 = indistinguishable): student {spread}, teacher {distinct[0]['teacher_mean_cosine']:.3f} "
            "(printed at the start of general distillation).")


def _against_random_init(base: str, rows: list[dict], before: list[dict]) -> list[str]:
    """A fitted budget against ``base``, the same budget from a random word table: the settings that
    differ, then per run recorded in both the held-out figures and dev score, before -> now."""
    new, old = rows[0], before[0]
    changed = [f"{key} {old['settings'].get(key)} -> {value}" for key, value in new["settings"].items()
               if old["settings"].get(key) != value]
    if _precision(old) != _precision(new):
        changed.append(f"precision {_precision(old)} -> {_precision(new)}")
    lines = [f"Against `{base}` (the same budget, its student started from a random word table): "
             + (", ".join(changed) if changed else "no other setting differs") + "."]
    earlier = {(r["strategy"], r["task"], r["seed"]): r for r in before}
    for r in rows:
        old_run = earlier.get((r["strategy"], r["task"], r["seed"]))
        if old_run is None:
            continue
        now, was = r["held_out"], old_run["held_out"]
        lines.append(f"- {r['strategy']}, {r['task']}, seed {r['seed']}: held-out MLM top-1 {100 * was['top1']:.1f}% "
                     f"-> {100 * now['top1']:.1f}%, CE {was['cross_entropy']:.2f} -> {now['cross_entropy']:.2f}, "
                     f"last-layer MSE {was['last_layer_feature_map_mse']:.3f} -> "
                     f"{now['last_layer_feature_map_mse']:.3f}; dev score {old_run['dev_metrics']['score']:.1f} -> "
                     f"{r['dev_metrics']['score']:.1f}.")
    return lines + [""]


MOBILEBERT_TASK_VARIANTS = [
    ("mobilebert-finetune", "100-step student (`cpu`), fine-tuned only"),
    ("mobilebert-task", "100-step student (`cpu`), distilled from the fine-tuned teacher (logit KD)"),
    ("mobilebert-long-finetune+bf16", "1,200-step student, random word table at the start (`cpu-long`, bf16), "
                                      "fine-tuned only"),
    ("mobilebert-long-task+bf16", "1,200-step student, random word table at the start (`cpu-long`, bf16), "
                                  "distilled from the fine-tuned teacher (logit KD)"),
    ("mobilebert-fitted-finetune", "1,200-step student, embeddings fitted to the teacher (`cpu-long-fitted`, fp32), "
                                   "fine-tuned only"),
    ("mobilebert-fitted-task", "1,200-step student, embeddings fitted to the teacher (`cpu-long-fitted`, fp32), "
                               "distilled from the fine-tuned teacher (logit KD)")]
# the 1,200-step rows whose seeds are checked against the majority class, and how the check names them
LONG_STUDENTS = [("mobilebert-long-finetune+bf16", "from a random word table, fine-tuned only"),
                 ("mobilebert-long-task+bf16", "from a random word table, with logit KD"),
                 ("mobilebert-fitted-finetune", "with embeddings fitted to the teacher, fine-tuned only"),
                 ("mobilebert-fitted-task", "with embeddings fitted to the teacher, with logit KD")]


def mobilebert_task_section() -> list[str]:
    lines = distill_section(
        "MobileBERT (mobilebert-matched) against the teacher on GLUE",
        note("mobilebert-task-intro", random_word_table=RANDOM_WORD_TABLE, fitted_init=FITTED_INIT),
        MOBILEBERT_TASK_VARIANTS,
        command="Command per cell: `python benchmarks/distill_glue.py --task TASK --budget cpu --variants VARIANT "
                "--seeds SEED` (`--mobilebert-general runs/mb-progressive-s42` for the `cpu` student; "
                "`--mixed-precision bf16` for the `cpu-long` rows, whose student is `--mobilebert-long-general`'s "
                "default; the `cpu-long-fitted` rows take `--mobilebert-fitted-general`'s default, in float32).")
    if lines:
        _insert_majority_row(lines)
        lines += [note("mobilebert-task-collapsed"), ""]
        lines += _long_student_lines()
    lines += _mobilebert_bench_lines()
    return lines


def _long_student_lines() -> list[str]:
    """Per task, whether each 1,200-step student's seeds left the majority class (by more than 1 point)."""
    results = load_results("distill")
    lines = []
    for variant, label in LONG_STUDENTS:
        scores: dict[str, list[float]] = {}
        for r in results.values():
            if r["variant"] == variant:
                scores.setdefault(r["task"], []).append(r["metrics"]["score"])
        stuck, above = [], []
        for task in [t for t in TASK_ORDER if t in scores]:
            majority = majority_class_score(task)
            if majority is None:
                return []
            beaten = [x for x in scores[task] if x > majority + 1.0]
            if not beaten:
                stuck.append(f"{task} ({len(scores[task])} of {len(scores[task])} seeds)")
            else:
                mean, _ = mean_std(scores[task])
                above.append(f"{task} {mean:.1f} against {majority:.1f} ({len(beaten)} of {len(scores[task])} "
                             "seeds above it)")
        if scores:
            lines.append(f"- The 1,200-step student {label}: more than 1 point above the majority class on "
                         + ("; ".join(above) or "no task") + "; at it or within 1 point on "
                         + (", ".join(stuck) or "no task") + ".")
    return lines + [""] if lines else []


def _insert_majority_row(lines: list[str]) -> None:
    """Put a 'majority class' row under the teacher row of a distill_section table, so a
    collapsed student reads as one."""
    header = next(i for i, line in enumerate(lines) if line.startswith("| model |"))
    tasks = [cell.strip() for cell in lines[header].strip("|").split("|")][1:-1]
    scores = [majority_class_score(task) for task in tasks]
    if any(score is None for score in scores):
        return
    lines.insert(header + 3, "| majority class of train (constant prediction) | "
                 + " | ".join(f"{score:.1f}" for score in scores) + " | - |")


def _mobilebert_bench_lines() -> list[str]:
    rows = bench_rows("bench_mobilebert")
    if not rows:
        return []
    first = rows[0]
    return [f"Size and speed (`kdbert bench`): sequence length {first['seq_len']}, {first['threads']} thread(s), "
            f"{first['machine']}, {first['date']}; latency at batch 1 (median and p90 after warm-up), throughput "
            "at batch 32, speedup against the teacher. The MobileBERT row is a `cpu-long` SST-2 student with "
            "its paper operations (NoNorm, relu).", "", format_table(rows), "", f"Command: `{first['command']}`", ""]
