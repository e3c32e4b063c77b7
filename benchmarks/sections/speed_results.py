"""Sections of speed: `kdbert bench`, the distillation step against TextBrewer, the
README's main job, deployment to ONNX Runtime and the teacher-output cache."""

from __future__ import annotations

from pathlib import Path

from common import load_results
from sections.shared import NOTES, ROOT, TASK_ORDER, bench_rows, current_command, note

from kdbert.deploy.bench import format_table
from kdbert.deploy.report import build_table, format_markdown, plot_pareto


def bench_section() -> list[str]:
    rows = bench_rows("bench")
    if not rows:
        return []
    first = rows[0]
    return ["## Size and speed (`kdbert bench`)", "",
            f"Sequence length {first['seq_len']}, {first['threads']} threads, {first['machine']}, {first['date']}. "
            "Latency is batch 1 (median and p90 of timed runs after warm-up); throughput is batch 32. "
            "Speedup is against the first row.", "",
            format_table(rows), "", f"Command: `{first['command']}`", ""]


def match_summary(described: list[str]) -> str:
    """``embedding x1 (projected), attention x4, hidden x4 (projected)`` from ``Match.describe()`` lines."""
    terms: dict[str, list[str]] = {}
    for line in described:
        terms.setdefault(line.split(":", 1)[0], []).append(line)
    return ", ".join(f"{term} x{len(lines)}" + (" (projected)" if all(" via " in x for x in lines) else "")
                     for term, lines in terms.items())


def throughput_section(results_dir: Path | None = None) -> list[str]:
    """kdbert against TextBrewer on the same distillation step (``benchmarks/throughput.py``)."""
    results = load_results("throughput", results_dir)
    if not results:
        return []
    lines = ["## Distillation-step throughput: kdbert against TextBrewer", ""]
    for key, r in sorted(results.items()):
        peaks = r["matmul_gflops"]
        flops = r["flops_per_example"]
        first = flops[next(iter(flops))]
        peak_text = ", ".join(f"{p} {v['peak']:.0f} GFLOP/s" for p, v in peaks.items())
        lines += [f"### {r['threads']} thread(s) (`{key}`)", "",
                  f"TinyBERT's intermediate stage, the same work in both frameworks in one run: teacher {r['teacher']} "
                  f"-> {r['student']}, batch {r['batch_size']}, every input exactly the stated length (RTE training "
                  f"pairs truncated to it), MSE terms {match_summary(first['matches'])} (pre-softmax attention "
                  f"scores; layer map 1->2, 2->3, 3->5, 4->6), AdamW (lr {r['learning_rate']:g}), clipping at 1.0. "
                  f"TextBrewer {r['textbrewer']} `GeneralDistiller`; its bf16 rows run its loop under `torch.autocast` "
                  "(it has no bf16 option). Examples/s over "
                  f"{r['steps']} optimiser steps after {r['warmup']} warm-up ones, median of {r['rounds']} interleaved "
                  "round(s) (each round and its 1-minute load average in the last column). GFLOP/s = examples/s x "
                  "the FLOPs of one step per example (teacher forward + 3 x (student + projections) forward, "
                  "`kdbert.deploy.bench.count_flops`); % of peak against the best square `torch.mm` rate measured in the "
                  f"same run at the same thread count ({peak_text}).", "",
                  "FLOPs per example and step: " + "; ".join(
                      f"{length} tokens {f['step'] / 1e9:.2f} G (teacher {f['teacher_forward'] / 1e9:.2f}, student "
                      f"{f['student_forward'] / 1e9:.2f}, projections {f['projections_forward'] / 1e9:.3f})"
                      for length, f in flops.items()) + ".", ""]
        if r["load_average_max"] > r["threads"]:
            lines += [f"**Measured while the machine was shared** (1-minute load average {r['load_average_min']:.1f}"
                      f"-{r['load_average_max']:.1f} on {r['threads']} thread(s)): rerun the command on an idle "
                      "machine before reading these values.", ""]
        lines += ["| framework | precision | tokens | examples/s | vs TextBrewer, same precision | vs TextBrewer fp32 "
                  "| GFLOP/s | % of peak | rounds (examples/s, load) |", "|---|---|---|---|---|---|---|---|---|"]
        order = {"textbrewer": 0, "kdbert": 1}
        rows = sorted(r["rows"], key=lambda x: (x["seq_len"], x["precision"] != "fp32", order.get(x["framework"], 2)))

        def ratio(value):
            return f"{value:.2f}x" if value is not None else "-"

        for row in rows:
            runs = ", ".join(f"{x['examples_per_s']:.1f} ({x['load_before']:.1f})" for x in row["runs"])
            lines.append(f"| {row['framework']} | {row['precision']} | {row['seq_len']} | "
                         f"{row['examples_per_s']:.1f} | {ratio(row['vs_textbrewer_same_precision'])} | {ratio(row['vs_textbrewer_fp32'])} | "
                         f"{row['gflops']:.0f} | {row['percent_of_peak']:.0f}% | {runs} |")
        kdbert = [x for x in rows if x["framework"] == "kdbert"]
        goals = []
        fastest = {}
        for x in kdbert:
            if x["seq_len"] not in fastest or x["examples_per_s"] > fastest[x["seq_len"]]["examples_per_s"]:
                fastest[x["seq_len"]] = x
        against_fp32 = [x["vs_textbrewer_fp32"] for x in fastest.values() if x["vs_textbrewer_fp32"] is not None]
        same = [x["vs_textbrewer_same_precision"] for x in kdbert if x["vs_textbrewer_same_precision"] is not None]
        if against_fp32:
            listed = ", ".join(f"{v:.2f}x" for v in against_fp32)
            goals.append(f">= 3x TextBrewer's examples/s: {'met' if min(against_fp32) >= 3 else 'not met'} by kdbert's "
                         f"fastest setting against TextBrewer in fp32 ({listed}); "
                         f"at the same precision {', '.join(f'{v:.2f}x' for v in same)}")
        bf16 = [x["percent_of_peak"] for x in kdbert if x["precision"] == "bf16"]
        if bf16:
            goals.append(f">= 50% of the bf16 matmul peak for kdbert's bf16 step: "
                         f"{'met' if min(bf16) >= 50 else 'not met'} ({', '.join(f'{v:.0f}%' for v in bf16)})")
        if goals:
            lines += ["", "The issue's targets: " + "; ".join(goals) + "."]
        lines += ["", f"Machine: {r['machine']}, torch {r['torch']}; date {r['date']}. Command: `{r['command']}`.", ""]
    return lines + profile_lines(results_dir)


PROFILE_PARTS = (("teacher_forward", "teacher forward (no grad, scores captured)"),
                 ("student_forward", "student forward (scores captured)"),
                 ("attention_capture", "of which inside the score-capturing attention (both models)"),
                 ("loss_terms", "match terms (projections + losses)"), ("backward", "backward"),
                 ("clip_grad_norm", "gradient clipping"),
                 ("optimizer_step", "optimiser step (fused AdamW, schedule, zero_grad)"),
                 ("collate", "data collation"), ("other", "other"))


def profile_lines(results_dir: Path | None = None) -> list[str]:
    """Where a kdbert distillation step spends its time (``throughput.py --profile``)."""
    r = load_results("throughput_profile", results_dir)
    if not r:
        return []
    profiles = r["profiles"]
    lines = ["### Where the step's time goes (torch.profiler)", "",
             "| part | " + " | ".join(f"{p['precision']} ({p['step_ms']:.0f} ms/step, {p['examples_per_s']:.1f} ex/s)"
                                      for p in profiles) + " |", "|---|" + "---|" * len(profiles)]
    for key, label in PROFILE_PARTS:
        lines.append(f"| {label} | " + " | ".join(f"{p['shares_percent'][key]:.1f}%" for p in profiles) + " |")
    lines += ["", "Top operators by own time: " + "; ".join(
        f"{p['precision']}: " + ", ".join(f"{op['op']} {op['self_percent']:.0f}%" for op in p["top_ops_self_cpu"][:6])
        for p in profiles) + "."]
    adamw = r.get("adamw_ms_per_step") or {}
    if adamw:
        lines += ["", "AdamW step on the student's parameters (ms): " + ", ".join(
            f"{name} {value:.0f}" if isinstance(value, (int, float)) else f"{name} {value}"
            for name, value in adamw.items()) + " (kdbert now uses the fused one)."]
    lines += ["", f"Sequence length 64, batch {profiles[0]['batch_size']}, {r['threads']} thread(s), 1-minute load "
              f"{r['load_before']:.1f} before; {r['machine']}, {r['date']}. Command: `{r['command']}`.", ""]
    return lines


def quickstart_section(superseded: bool = False) -> list[str]:
    """The main job's records (``superseded``: those before bf16 became the default, the archive's)."""
    results = load_results("quickstart")
    lines = []
    for key, r in results.items():
        if key.endswith("-float32") != superseded:
            continue
        trained = r.get("training_precision") or {"teacher": "float32", "student": "float32"}
        if "winner" in r:  # quickstart as a short compress
            lines += [f"## The main job: `{r['command']}`", "",
                      f"Fine-tunes the teacher ({trained['teacher']}), then a short `kdbert compress` picks "
                      f"{r['winner']} on held-out rows; deployed as ONNX int8, it is "
                      f"{r['int8_speedup_vs_int8_teacher']:.2f}x faster than the int8 teacher over the dev rows at "
                      f"their own lengths and keeps {r['int8_retained_percent']:.1f}% of its dev score "
                      f"({r['retained_percent']:.1f}% in PyTorch). Wall time {r['wall_seconds'] / 60:.1f} min on "
                      f"{r['machine']} ({r['date']}), nothing else running. The table below times both at a fixed "
                      "64 tokens. " + note(f"quickstart-{key}" if (NOTES / f"quickstart-{key}.md").is_file()
                                           else "quickstart-compress"), "",
                      format_table(r["rows"]), "", "Command: `python benchmarks/bench_quickstart.py"
                      + ("`." if key == r["command"].split("--task ")[1].split()[0] else f" --key {key}`."), ""]
            continue
        title = "The main job before bf16 became the default" if superseded else "The main job"
        lines += [f"## {title}: `{r['command']}`", "",
                  f"Trained in {trained['teacher']} (teacher) and {trained['student']} (student). "
                  f"Wall time {r['wall_seconds'] / 60:.1f} min on {r['machine']} ({r['date']}), "
                  f"{r['rows'][0]['threads']} torch thread(s), nothing else running. The student keeps "
                  f"{r['retained_percent']:.1f}% of the teacher's dev score. " + note("dev-selection"), "",
                  format_table(r["rows"]), "", "Command: `python benchmarks/bench_quickstart.py`.", ""]
    return lines


def quickstart_archive_section() -> list[str]:
    return quickstart_section(superseded=True)


def _headline(student: dict, teacher: dict) -> tuple[float, float, bool]:
    """The deployment target: int8 student against the int8 teacher, >= 8x faster at batch 1 and
    >= 97% of its dev score."""
    speedup = teacher["latency_onnx_int8_ms"] / student["latency_onnx_int8_ms"]
    kept = 100 * student["score_onnx_int8"] / teacher["score_onnx_int8"]
    return speedup, kept, speedup >= 8 and kept >= 97


def _best_distilled(task: str, preset: str, teacher: dict) -> str:
    """The best fp32 dev score of a distilled student of ``preset`` in the distillation tables."""
    runs = [r for r in load_results("distill").values() if r["task"] == task and r["budget"] == "cpu"
            and preset in Path(str(r["options"].get("student"))).name]
    if not runs:
        return f"No {preset} student of {task} distilled yet."
    best = max(runs, key=lambda r: r["metrics"]["score"])
    kept = 100 * best["metrics"]["score"] / teacher["score"]
    return (f"The best distilled {preset} on {task} in the [distillation tables](distill.md), `{best['variant']}` "
            f"(seed {best['seed']}), scores {best['metrics']['score']:.2f} in fp32, {kept:.1f}% of this teacher's "
            f"{teacher['score']:.2f}: "
            + ("within" if kept >= 97 else "short of") + " the 97% target before int8.")


DEPLOY_RUNTIMES = (("pytorch", "PyTorch fp32"), ("onnx_fp32", "ORT fp32"), ("onnx_int8", "ORT int8"))


def _deploy_task(task: str, records: list[dict]) -> list[str]:
    """One task's deployment table (the runtimes its records timed), the headline per student,
    and the `kdbert report` table and Pareto plot of the models distilled from the benchmark teacher."""
    by_name = {r["name"]: r for r in records}
    first = records[0]
    runtimes = [(rt, label) for rt, label in DEPLOY_RUNTIMES if rt in first["bench"]]
    lines = [f"### {task}, sequence length {first['seq_len']}, {first['threads']} thread(s): {first['machine']}", "",
             "| model | params | " + " | ".join(f"{label} ms p50 / p90" for _, label in runtimes)
             + " | MB int8 | dev PyTorch / ORT fp32 / ORT int8 | max abs logit diff fp32 | "
             + " | ".join(f"efficiency {label}" for _, label in runtimes)
             + " | int8 vs int8 teacher | load before / after |",
             "|---|---|" + "---|" * (2 * len(runtimes) + 5)]
    verdicts = []
    for r in records:
        b = r["bench"]
        teacher = by_name.get(r["teacher_name"])
        versus = "-"
        if r.get("speed_only") and teacher:
            speedup = teacher["latency_onnx_int8_ms"] / r["latency_onnx_int8_ms"]
            versus = f"{speedup:.2f}x"
            verdicts.append(f"- {r['name']}: {speedup:.2f}x faster than the int8 {r['teacher_name']} (random "
                            f"weights: speed only). {_best_distilled(task, r['name'].split()[0], teacher)}")
        elif r["name"] != r["teacher_name"] and teacher:
            speedup, kept, met = _headline(r, teacher)
            versus = f"{speedup:.2f}x, {kept:.1f}% kept"
            verdicts.append(f"- {r['name']}: {speedup:.2f}x faster than the int8 {r['teacher_name']}, keeps "
                            f"{kept:.1f}% of its int8 dev score ({r['score_onnx_int8']:.2f} vs "
                            f"{teacher['score_onnx_int8']:.2f}): " + ("target met." if met else "target NOT met."))
        lines.append(
            f"| {r['name']} | {r['params'] / 1e6:.1f}M | "
            + " | ".join(f"{b[rt]['latency_median_ms']:.2f} / {b[rt]['latency_p90_ms']:.2f}" for rt, _ in runtimes)
            + f" | {b['onnx_int8']['size_mb']:.1f} | "
            + (" - | " if r.get("speed_only") else
               f"{r['score']:.2f} / {r['score_onnx_fp32']:.2f} / {r['score_onnx_int8']:.2f} | ")
            + f"{r['parity']['max_abs_logit_diff_fp32']:.1e} | "
            + " | ".join(f"{100 * b[rt]['efficiency']:.1f}% of {b[rt]['matmul_gflops']:.0f} GFLOP/s"
                         for rt, _ in runtimes)
            + f" | {versus} | " + " / ".join(f"{x:.1f}" for x in r["load_average_1min_before_after"]) + " |")
    lines += ["", "Target (deployment issue): a student that, deployed as int8, is >= 8x faster at batch 1 than the "
              "teacher deployed the same way and keeps >= 97% of its dev score.", "", *verdicts, ""]
    table = build_table([r for r in records if r["teacher_name"] == "teacher" and not r.get("speed_only")])
    lines += ["`kdbert report --results benchmarks/results/deploy.json` (the models distilled from the benchmark "
              "teacher):", "", format_markdown(table).rstrip(), ""]
    png = ROOT / "docs" / f"deploy_pareto_{task}.png"
    if plot_pareto(table, png, title=f"{task}: dev accuracy against batch-1 latency, ONNX Runtime int8, "
                                     f"{first['threads']} thread(s)"):
        lines += [f"![Pareto plot: {task} dev score against ORT int8 latency](../{png.name})", ""]
    over = any(r["bench"][rt]["efficiency"] > 1 for r in records for rt, _ in runtimes)
    lines += [f"{first['date']}, onnxruntime {first['onnxruntime']}, torch {first['torch']}. A 1-minute load "
              "average above the thread count means other jobs shared the cores while these were timed: the "
              "latencies are then inflated and noisy"
              + (", and so is the matrix-multiply rate (an efficiency above 100% means the rate was measured at a "
                 "busier moment than the model)" if over else "")
              + f". Command: `{current_command(first['command'])}`.", ""]
    return lines


def deploy_section() -> list[str]:
    results = load_results("deploy")
    if not results:
        return []
    lines = ["## Deployment: PyTorch fp32, ONNX Runtime fp32 and int8 (`kdbert export`, `kdbert bench`)", "",
             note("deploy-intro"), ""]
    for task in TASK_ORDER:
        records = sorted((r for r in results.values() if r["task"] == task),  # each teacher before its students
                         key=lambda r: (r["teacher_name"] != "teacher", r["teacher_name"],
                                        r["name"] != r["teacher_name"]))
        if records:
            lines += _deploy_task(task, records)
    return lines


def teacher_cache_section() -> list[str]:
    results = load_results("teacher_cache")
    if not results:
        return []
    lines = ["## Teacher-output cache (`--teacher-cache`)", "",
             "Training seconds per epoch of each stage (evaluations left out) without a cache, with a cold cache "
             "(the first epoch runs the teacher and stores its outputs; seed 42, as the run without) and with that "
             "cache warm (another run, seed 43); hit rate of the run's teacher lookups; the cache's size on disk. "
             "Forward: seconds in the student's and teacher's traces over the whole run.", "",
             "| task | method | cached | stage: s/epoch none / cold / warm | forward s none / cold / warm "
             "| hit rate cold / warm | disk | load before (1 min) | machine | date |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results.values():
        runs = [r["runs"][k] for k in ("no_cache", "cold_cache", "warm_cache")]
        stages = "; ".join(f"{stage}: " + " / ".join(f"{run['seconds_per_epoch'][stage]:.1f}" for run in runs)
                           for stage in runs[0]["seconds_per_epoch"])
        fields = sorted({f for stage in runs[1]["teacher_cache"]["stages"].values() for f in stage["fields"]})
        lines.append(
            f"| {r['task']} ({r['rows']} rows, {r['epochs']:g} epochs) | {r['method']} | {', '.join(fields)} "
            f"| {stages} "
            f"| {' / '.join(str(run.get('forward_seconds', '-')) for run in runs)} "
            f"| {runs[1]['teacher_cache']['hit_rate']:.2f} / {runs[2]['teacher_cache']['hit_rate']:.2f} "
            f"| {r['cache_disk_bytes'] / 1e6:.1f} MB "
            f"| {' / '.join(str(run['load_average']['before'][0]) for run in runs)} | {r['machine']} | {r['date']} |")
    lines += ["", note("teacher-cache-reading"), ""]
    return lines


def labelling_section() -> list[str]:
    """Who labels the stored logits (``benchmarks/labelling_speed.py``)."""
    results = load_results("labelling_speed")
    if not results:
        return []
    lines = ["## Labelling the rows: the PyTorch teacher against its ONNX export", "",
             "Rows per second labelling the same first training rows into a fresh store (tokenising included, "
             "shortest first in batches of 64), and agreement with the PyTorch float32 teacher's logits (same "
             "argmax, largest logit difference). `kdbert compress` labels with the int8 export; its estimate per "
             "row before labelling (the export timed on 256 random rows, scaled by the tokens it runs on; before "
             "2026-11-29, the export's throughput timed at 64 tokens) is set beside the measured rate, as is "
             "\"over\": the measured time per row over the estimate (above 1: the estimate was short).", "",
             "| teacher | params | task, rows | labeller | rows/s | vs PyTorch fp32 | same argmax | max logit diff "
             "| threads | machine | date |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in results.items():
        base = r["labellers"]["pytorch-float32"]["rows_per_second"]
        order = ["pytorch-float32", "pytorch-bfloat16", "onnx-fp32", "onnx-int8", "estimate_from_timing", "estimate"]
        for name, row in sorted(r["labellers"].items(), key=lambda item: order.index(item[0])):
            if name.startswith("estimate"):
                by_timing = name == "estimate_from_timing" or "estimate_from_timing" not in r["labellers"]
                label = "compress's estimate: " + ("throughput batch at 64 tokens" if by_timing else "timed sample")
                lines.append(f"| {key.split('/')[0]} | | | {label}, over {row['over_measured']:.2f} | "
                             f"{row['rows_per_second']:.0f} | {row['rows_per_second'] / base:.2f}x | | | | | |")
                continue
            lines.append(f"| {key.split('/')[0]} | {r['params'] / 1e6:.1f}M | {key.split('/')[1]}, {r['rows']:,} | "
                         f"{name} | {row['rows_per_second']:.0f} | {row['rows_per_second'] / base:.2f}x | "
                         f"{row['argmax_agreement']:.1%} | {row['max_abs_diff']:.3g} | {r['threads']} | {r['machine']} "
                         f"| {r['date']} |")
    commands = sorted({r["command"] for r in results.values()})
    lines += ["", "Commands: " + "; ".join(f"`{c}`" for c in commands), "", note("labelling-reading"), ""]
    return lines


GRAPH_ORDER = ["dynamo", "torchscript", "fused"]


def _interleaved_run(r: dict) -> str:
    """The command and conditions of a run timed in interleaved passes (export graphs, breakdown)."""
    return (f"`{r['command']}` ({r['date']}, {r['machine']}, {r['cpu']}, ONNX Runtime {r['onnxruntime']}, "
            f"{r['threads']} thread(s), batch 1, {r['length_rows']} dev rows at their own length, median of "
            f"{r['passes']} interleaved passes; load average {r['load_average_before']:.2f} before, "
            f"{r['load_average_after']:.2f} after)")


def _teacher_first(models: dict) -> list:
    """``models.items()`` with the teacher's first."""
    return sorted(models.items(), key=lambda item: item[0] != "teacher")


def export_graphs_section() -> list[str]:
    results = load_results("export_graphs")
    if not results:
        return []
    lines = ["## Export graphs: dynamo, TorchScript, fused (`kdbert export --graph`)", "", note("export-graphs-intro"), ""]
    for key, r in results.items():
        lines += [_interleaved_run(r), "",
                  "| model | graph | fused operators | fp32 ms / row (p50) | int8 ms / row (p50) | int8 speedup vs dynamo "
                  "| dev PyTorch / ORT fp32 / ORT int8 | max \\|logit diff\\| fp32 / int8 |",
                  "|---|---|---|---:|---:|---:|---|---|"]
        for name, graphs in _teacher_first(r["models"]):
            base = graphs["dynamo"]["timing"]["int8"]["latency_real_p50_ms"]
            for graph, row in sorted(graphs.items(), key=lambda item: GRAPH_ORDER.index(item[0])):
                fused = ", ".join(f"{count} {op}" for op, count in row["graph"].get("fused_operators", {}).items())
                if "fusion_rejected" in row["graph"]:
                    fused = f"not kept: {row['graph']['fusion_rejected']}"
                int8 = row["timing"]["int8"]["latency_real_p50_ms"]
                dev = " / ".join(f"{row['dev_metrics'][k]['score']:.2f}" for k in ("pytorch", "onnx_fp32", "onnx_int8"))
                parity = row["parity"]
                lines.append(f"| {name} | {row['graph']['graph']} | {fused or '-'} "
                             f"| {row['timing']['fp32']['latency_real_p50_ms']:.3f} | {int8:.3f} "
                             f"| {base / int8:.2f}x | {dev} | {parity['max_abs_logit_diff_fp32']:.1e} / "
                             f"{parity['max_abs_logit_diff_int8']:.2f} |")
        lines.append("")
    lines += [note("export-graphs-reading"), ""]
    return lines


def breakdown_section() -> list[str]:
    """Deployment step by step (bench_breakdown.py): PyTorch padded -> own length -> ORT fp32 ->
    fused -> int8 -> OpenVINO, and every int8 method and OpenVINO variant beside it."""
    results = load_results("breakdown")
    if not results:
        return []
    lines = ["## Speedup breakdown of deployment, and the int8 methods (`benchmarks/bench_breakdown.py`)", "",
             note("breakdown-intro"), ""]
    for key, r in results.items():
        lines += [_interleaved_run(r), "",
                  "| model | step | ms / row (p50) | factor | total | dev score |", "|---|---|---:|---:|---:|---:|"]
        for name, model in _teacher_first(r["models"]):
            for step in model["steps"]:
                lines.append(f"| {name} | {step['change']} | {step['latency_ms']:.3f} | {step['factor']:.2f}x "
                             f"| {step['total']:.2f}x | {step['dev_score']:.2f} |")
        lines += ["", "| model | variant | ms / row (p50) | vs ORT int8 dynamic | dev score | vs ORT fp32 dev | "
                      "kept by `--int8-method auto` |", "|---|---|---:|---:|---:|---:|---|"]
        for name, model in _teacher_first(r["models"]):
            int8 = model["int8"]
            base = int8["methods"]["dynamic"]["latency_real_p50_ms"]
            variants = {f"ORT int8 {method}": figures for method, figures in int8["methods"].items()}
            variants.update({key.replace("openvino-", "OpenVINO "): figures
                             for key, figures in int8.get("openvino", {}).items()})
            for variant, figures in variants.items():
                chosen = "yes" if variant == f"ORT int8 {int8['chosen']}" else ""
                lines.append(f"| {name} | {variant} | {figures['latency_real_p50_ms']:.3f} "
                             f"| {base / figures['latency_real_p50_ms']:.2f}x | {figures['dev_score']:.2f} "
                             f"| {figures['dev_score'] - int8['fp32_dev_score']:+.2f} | {chosen} |")
        lines += ["", "| model (ORT int8 dynamic) | tokens kept | embedding params | fp32 file MB | int8 file MB "
                      "| ms / row (p50) | dev score | max \\|logit diff\\| fp32 vs unpruned |",
                  "|---|---:|---|---|---|---|---|---:|"]
        for name, model in _teacher_first(r["models"]):
            v = model["int8"].get("vocabulary")
            if v:
                lines.append(f"| {name} | {v['kept_tokens']:,} of {v['vocab_size']:,} "
                             f"| {v['embedding_params_before'] / 1e6:.2f}M -> {v['embedding_params_after'] / 1e6:.2f}M "
                             f"| {v['fp32_mb_before']:.1f} -> {v['fp32_mb']:.1f} | {v['int8_mb_before']:.1f} -> "
                             f"{v['int8_mb']:.1f} | {v['latency_before_ms']:.3f} -> {v['latency_real_p50_ms']:.3f} "
                             f"| {model['int8']['methods']['dynamic']['dev_score']:.2f} -> {v['dev_score']:.2f} "
                             f"| {v['max_abs_logit_diff_fp32']:.1e} |")
        lines.append("")
    lines += [note("breakdown-reading"), ""]
    return lines


def efficiency_section() -> list[str]:
    """The int8 teacher's share of the measured int8 matrix-multiply rate, by length and threads
    (bench_efficiency.py)."""
    results = load_results("efficiency")
    if not results:
        return []
    lines = ["## Efficiency of the deployed teacher (`benchmarks/bench_efficiency.py`)", "",
             note("efficiency-intro"), ""]
    for key, r in results.items():
        lines += [f"`{r['command']}` ({key}; {r['date']}, {r['machine']}, {r['cpu']}, ONNX Runtime {r['onnxruntime']}, "
                  f"median of {r['runs']} runs; load average {r['load_average_before']:.2f} before, "
                  f"{r['load_average_after']:.2f} after)", "",
                  "| threads | tokens | FLOPs / example | batch-1 ms | batch-1 efficiency | batch-32 rows/s "
                  "| batch-32 efficiency | int8 matmul GFLOP/s |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in r["rows"]:
            lines.append(f"| {row['threads']} | {row['seq_len']} | {row['flops_per_example'] / 1e6:.0f}M "
                         f"| {row['latency_median_ms']:.3f} | {100 * row['efficiency_batch1']:.1f}% "
                         f"| {row['throughput']:.0f} | {100 * row['efficiency_batch32']:.1f}% "
                         f"| {row['matmul_gflops']:.0f} |")
        lines.append("")
    lines += [note("efficiency-reading"), ""]
    return lines


def int8_targets_section() -> list[str]:
    """Every int8 method with 8-bit, 7-bit and uint8 weights: dev score and batch-1 latency on a CPU
    with VNNI and on one without, each scoring its own models (int8_targets.py)."""
    results = load_results("int8_targets")
    if not results:
        return []
    lines = ["## int8 on CPUs with and without VNNI (`benchmarks/int8_targets.py`)", "", note("int8-targets-intro"), ""]
    for key, r in results.items():
        cpu = r["cpu"]
        kernel = "u8s8 sums pairs in saturating 16 bits" if cpu["u8s8_saturates"] else "u8s8 sums in 32 bits"
        lines += [f"`{current_command(r['command'])}` ({key}; {r['date']}, {r['machine']}, {cpu['cpu']}, "
                  f"int8 flags: {', '.join(cpu['int8_flags'])}: {kernel})", "",
                  "| graph | weights | largest \\|w\\| | dev | batch-1 ms |", "|---|---|---:|---:|---:|"]
        order = ["fp32"] + [f"{method}.{weights}" for method in ("dynamic", "static-minmax", "static-entropy")
                            for weights in ("s8", "s7", "u8")]
        for name, row in sorted(r["rows"].items(), key=lambda item: order.index(item[0]) if item[0] in order else 99):
            method, _, weights = name.partition(".")
            lines.append(f"| {method} | {weights or 'fp32'} | {row['largest_weight'] or '-'} "
                         f"| {row['dev_score']:.2f} | {row['latency_real_p50_ms']:.3f} |")
        lines += [f"- {name}: not made ({error})" for name, error in r["errors"].items()]
        lines.append("")
    lines += [note("int8-targets-reading"), ""]
    return lines


def serve_load_section() -> list[str]:
    """`kdbert serve` under load: p50 / p99 and throughput by concurrent clients, batching on and off,
    against the model's own batch-1 latency (serve_load.py)."""
    results = load_results("serve_load")
    if not results:
        return []
    # wrk before the first (httpx) measurement; the stub model, the server alone, after the models
    results = dict(sorted(results.items(), key=lambda item: (item[1].get("client") != "wrk",
                                                            item[1]["model"] == "stub", item[0] != "winner")))
    lines = ["## Serving under load (`benchmarks/serve_load.py`)", "", note("serve-load-intro"), "",
             "| model | client | batching | clients | p50 ms | p99 ms | requests/s | server's own mean ms |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        for mode, rows in r["rows"].items():
            lines += [f"| {name.removesuffix('-httpx')} | {r.get('client', 'httpx')} | {mode} | {row['clients']} "
                      f"| {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['throughput_per_s']:.0f} "
                      f"| {row['server_mean_ms']:.2f} |" for row in rows]
    lines.append("")
    for name, r in results.items():
        per_text = r.get("model_ms_per_text")
        batches = "" if not per_text else ("; per text at batch 1 / 8 / 32: "
                                           + " / ".join(f"{per_text[str(b)]:.2f}" for b in (1, 8, 32)) + " ms")
        paced = f" ({r['model_batch1_paced_ms']:.2f} paced, 1 ms idle before each call)" \
            if "model_batch1_paced_ms" in r else ""
        alone = "a stub model that answers at once: the server's own cost" if r["model"] == "stub" else \
            f"the model alone: {r['model_batch1_ms']:.2f} ms at batch 1{paced}{batches}"
        lines.append(f"- {name}: `{current_command(r['command'])}` ({r['date']}, {r['machine']}, {r['cpu']}); "
                     f"{alone}.")
    lines += ["", note("serve-load-reading"), ""]
    return lines


def timing_together_section() -> list[str]:
    """Candidates near the line timed in turns with the teacher one at a time or all together
    (``timing_together.py``): each way's speedups and seconds, medians over passes."""
    records = load_results("timing_together")
    if not records:
        return []
    lines = ["## Timing in turns: one candidate at a time or together (`benchmarks/timing_together.py`)", "",
             "| teacher | candidate | speedup: one at a time | together |", "|---|---|---:|---:|"]
    for key, r in sorted(records.items()):
        lines += [f"| {key} | {name} | {row['apart']:.2f}x | {row['together']:.2f}x |"
                  for name, row in r["speedups"].items()]
        lines.append(f"| {key} | seconds, all of them | {r['seconds']['apart']:.1f} | {r['seconds']['together']:.1f} |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values()})
    return lines + ["", f"Measured {'; '.join(machines)}, medians of {next(iter(records.values()))['passes']} passes, "
                    "200 SST-2 dev rows at batch 1, ONNX Runtime int8 on 2 threads, random weights. Commands: "
                    + "; ".join(f"`{c}`" for c in commands) + ".", "", note("timing-together-reading"), ""]


def timing_process_section() -> list[str]:
    """Timings in turns in compress's own process against a fresh one (``timing_process.py``): each
    graph's mean speedup and milliseconds on both sides, at the ship check and, where recorded, at
    the admission before the search."""
    records = load_results("timing_process")
    if not records:
        return []
    lines = ["## Timing in the process that searched or in a fresh one (`benchmarks/timing_process.py`)", "",
             "| key | when | graph | process | speedup | teacher ms | student ms |", "|---|---|---|---|---:|---:|---:|"]
    for key, r in sorted(records.items()):
        for when, graphs in (("admission", r.get("admission", [])), ("ship check", r["graphs"])):
            for graph in graphs:
                lines += [f"| {key} | {when} | {Path(graph['graph']).parent.name or graph['graph']} "
                          f"| {side.replace('_', ' ')} | {m['speedup']:.2f}x | {m['teacher_ms']:.2f} "
                          f"| {m['student_ms']:.3f} |" for side, m in graph["mean"].items()]
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values()})
    pairs = {len(graph["fresh_process"]) for r in records.values() for graph in r["graphs"]}
    return lines + ["", f"Measured {'; '.join(machines)}, means of {'/'.join(map(str, sorted(pairs)))} timings on "
                    "each side, alternating, at the main job's ship check and (`--at-admission`) where the "
                    "candidates near the line are timed in turns before the search: SST-2 dev rows at batch 1, "
                    "ONNX Runtime int8. Commands: " + "; ".join(f"`{c}`" for c in commands) + ".", ""]


def timing_threads_section() -> list[str]:
    """The teacher and candidate shapes timed at each thread count (``timing_threads.py``): each
    model's latency and each candidate's speedup per count, and each at its own fastest count."""
    records = load_results("timing_threads")
    if not records:
        return []
    lines = ["## Timing at one thread or every core (`benchmarks/timing_threads.py`)", "",
             "| key | model | " + " | ".join(f"{t} thread(s): ms (speedup)" for t in _thread_counts(records))
             + " | each at its fastest |", "|---|---|" + "---:|" * (len(_thread_counts(records)) + 1)]
    for key, r in sorted(records.items()):
        for model in r["fastest_threads"]:
            cells = []
            for t in _thread_counts(records):
                ms = r["latency_real_p50_ms"].get(str(t), {}).get(model)
                speedup = r["speedup"].get(str(t), {}).get(model)
                cells.append("-" if ms is None else f"{ms:.3f}" + (f" ({speedup:.2f}x)" if speedup else ""))
            own = r["speedup_each_at_its_fastest"].get(model)
            lines.append(f"| {key} | {model} | " + " | ".join(cells) + " | "
                         + (f"{own:.2f}x ({r['fastest_threads'][model]} thread(s))" if own else
                            f"({r['fastest_threads'][model]} thread(s))") + " |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values()})
    passes = sorted({len(r["passes"]) for r in records.values()})
    return lines + ["", f"Measured {'; '.join(machines)}, medians of {'/'.join(map(str, passes))} passes, each timing "
                    "every model in turns with the teacher at one thread count (the counts' order alternating), "
                    "200 dev rows of the task (SST-2 unless the key names another) at batch 1, ONNX Runtime "
                    "int8, the candidates with random weights. Commands: "
                    + "; ".join(f"`{c}`" for c in commands) + ".", "", note("timing-threads-reading"), ""]


def _thread_counts(records: dict) -> list[int]:
    return sorted({int(t) for r in records.values() for t in r["latency_real_p50_ms"]})


def timing_turns_section() -> list[str]:
    """A student's speedup over its teacher by the rows each model is timed on in one turn
    (``timing_turns.py``): its median and spread over passes."""
    records = load_results("timing_turns")
    if not records:
        return []
    lines = ["## Timing in turns: how many rows a turn (`benchmarks/timing_turns.py`)", "",
             "| pair | rows a turn | teacher ms | student ms | speedup: median | range | sd |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for key, r in sorted(records.items()):
        for rows, row in sorted(r["turns"].items(), key=lambda item: -int(item[0])):
            lines.append(f"| {key} | {rows} | {row['teacher_ms']:.2f} | {row['student_ms']:.2f} | {row['median']:.2f}x "
                         f"| {row['min']:.2f}-{row['max']:.2f}x | {row['stdev']:.2f} |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values() if "command" in r})
    return lines + ["", f"Measured {'; '.join(machines)}, {next(iter(records.values()))['passes']} passes of each, "
                    "alternating, 200 SST-2 dev rows at batch 1, ONNX Runtime int8 on 2 threads. Commands: "
                    + "; ".join(f"`{c}`" for c in commands) + ".", "", note("timing-turns-reading"), ""]


def gap_cell(row: dict) -> str:
    """A seed's dev - decide gap and its standard error, and whether the gap lies within twice it ("-"
    for seeds recorded before compress measured it)."""
    if "gap_se" not in row:
        return "-"
    return f"{row['gap']:+.1f} ± {row['gap_se']:.1f}: " + ("within 2 se" if abs(row["gap"]) <= 2 * row["gap_se"] else "beyond 2 se")


def quickstart_seeds_section() -> list[str]:
    """The main job's compress step over three seeds on one recorded teacher (``quickstart_seeds.py``):
    each seed's winner, steps, speedup and int8 kept shares, their mean."""
    records = load_results("quickstart_seeds")
    if not records:
        return []
    lines = ["## The main job over seeds (`benchmarks/quickstart_seeds.py`)", "",
             "| key | seed | winner | steps | speedup (int8 vs int8) | kept on dev | kept on the rows that decide "
             "| dev - decide (over the PyTorch teacher): gap ± its standard error | seconds: compress / search |",
             "|---|---:|---|---:|---:|---:|---:|---|---|"]
    for key, r in sorted(records.items()):
        lines += [f"| {key} | {seed} | {row['winner']} | {row['steps']:,} | {row['speedup']:.2f}x | {row['kept_dev']:.1f}% "
                  f"| {row['kept_decide']:.1f}% | {gap_cell(row)} | {row['seconds']:.0f} / {row['search_seconds']:.0f} |"
                  for seed, row in r["seeds"].items()]
        if len(r["seeds"]) > 1:  # one seed: its row says it all
            lines.append(f"| {key} | mean | | | {r['mean']['speedup']:.2f}x | **{r['mean']['kept_dev']:.1f}%** "
                         f"(sd {r['sd']['kept_dev']:.1f}) | **{r['mean']['kept_decide']:.1f}%** "
                         f"(sd {r['sd']['kept_decide']:.1f}) | | |")
    machines = sorted({f"{key}: {r['date']}, {r['machine']}" for key, r in records.items()})
    commands = sorted({r["command"] for r in records.values()})
    return lines + ["", f"Measured {'; '.join(machines)}; compress only, alone on 2 threads, every seed on its "
                    "key's recorded teacher. Commands: " + "; ".join(f"`{c}`" for c in commands) + ".", "",
                    note("quickstart-seeds-reading"), ""]


def checkpoint_rule_section() -> list[str]:
    """Which checkpoint a run keeps, the highest on the rows that pick or the latest within a standard
    error of it, replayed on recorded searches (``checkpoint_rule.py``)."""
    records = load_results("checkpoint_rule")
    if not records:
        return []
    lines = ["## The checkpoint a run keeps (`benchmarks/checkpoint_rule.py`)", "",
             "| key | candidate runs | where the rules differ | run | steps: highest -> latest | dev | rows that decide |",
             "|---|---:|---:|---|---|---|---|"]
    for key, r in sorted(records.items()):
        differ = [run for run in r["per_run"] if run["highest_step"] != run["latest_step"]]
        lines.append(f"| {key} | {r['runs']} | {r['runs_that_differ']} | | | | |")
        lines += [f"| | | | {'/'.join(Path(run['search']).parts[-3:-1])} {run['candidate']} | {run['highest_step']:,} -> "
                  f"{run['latest_step']:,} | {run['highest_dev']:.2f} -> {run['latest_dev']:.2f} | "
                  f"{run['highest_decide']:.2f} -> {run['latest_decide']:.2f} |" for run in differ]
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values()})
    read = records.get("sst2/main-job-bf16")  # the reading's figures
    fields = {name: read[name] for name in read if name.endswith(("_gain", "_gain_se"))} if read else None
    return lines + ["", f"Measured {'; '.join(machines)}. Commands: " + "; ".join(f"`{c}`" for c in commands) + ".",
                    "", note("checkpoint-rule-reading", **fields) if fields else "", ""]
