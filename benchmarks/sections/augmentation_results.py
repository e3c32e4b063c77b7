"""BENCHMARKS.md sections of TinyBERT's augmentation: the comparison on the same rows (one GPU), the
augmented files and the augmenter's throughput."""

from __future__ import annotations

from common import load_results
from sections.shared import GPU_RESULTS, TASK_ORDER, distill_section, note, verdict_lines


GPU_VARIANTS = [("tinybert-ws-general-task", "general + task distillation (from teacher weights)"),
                ("tinybert-ws-general-task-aug", "the same + augmentation, equal steps"),
                ("tinybert-ws-general-task-aug-x4", "the same + augmentation, 4x the steps")]


def augmentation_gpu_section() -> list[str]:
    """The augmentation comparison rebuilt on the same rows, every step on one GPU."""
    results = load_results("distill", GPU_RESULTS)
    if not results:
        return []
    files = load_results("augment_glue", GPU_RESULTS)
    teachers = load_results("teacher_glue", GPU_RESULTS)
    mlm = load_results("mlm_head", GPU_RESULTS).get("unfreeze2")
    first = next(iter(results.values()))
    lines = distill_section(
        "TinyBERT augmentation on the same rows (one GPU)",
        note("augmentation-gpu-intro", machine=first["machine"], torch=first["torch"], date=first["date"],
             mlm_accuracy=f", top-1 {100 * mlm['top1']:.1f}% / top-15 {100 * mlm['top15']:.1f}% as on the 2-core "
                          "machine" if mlm else ""),
        GPU_VARIANTS, GPU_RESULTS,
        command="Command: `python benchmarks/augmentation_gpu.py --results-dir benchmarks/results/gpu-h100` "
                "(options for the data paths; resumable; results in `benchmarks/results/gpu-h100/`).")
    lines += verdict_lines("tinybert-ws-general-task",
                           ["tinybert-ws-general-task-aug", "tinybert-ws-general-task-aug-x4"], results_dir=GPU_RESULTS)
    cpu_teachers = load_results("teacher_glue")
    lines += ["Teachers fine-tuned on that machine (`teacher_glue.py --budget cpu`): " + "; ".join(
        f"{r['task']} {r['metrics']['score']:.1f} (lr {r['hyperparameters']['learning_rate']:g}"
        + ("" if r["hyperparameters"] == cpu_teachers[key]["hyperparameters"] else
           f"; the CPU teacher: lr {cpu_teachers[key]['hyperparameters']['learning_rate']:g}, "
           f"{cpu_teachers[key]['metrics']['score']:.1f}, when that was kdbert's default")
        + ")" for key, r in sorted(teachers.items(), key=lambda kv: TASK_ORDER.index(kv[1]["task"])))
        + ". Augmented files (whole training sets, batch 512 queries / 65,536 tokens per MLM call): " + "; ".join(
        f"{r['task']} {r['input_rows']} rows -> {r['output_rows']} in {r['seconds']:.0f} s"
        for r in sorted(files.values(), key=lambda r: TASK_ORDER.index(r["task"]))) + ".", ""]
    invariance = load_results("augment_batch_invariance", GPU_RESULTS)
    if invariance:
        lines += ["Does the augmented file depend on the batch size (float32, this MLM head)? Against one mask "
                  "query per MLM call, sentences with a different output: " + "; ".join(
                      f"{r['task']} ({r['sentences']} sentences, {r['device']}): " + ", ".join(
                          f"batch {k.replace(':', ' / ')} tokens {v['sentences_with_other_output']}"
                          for k, v in r["settings"].items())
                      for r in invariance.values()) + " (`benchmarks/augment_batch_invariance.py`).", ""]
    lines += [_augmentation_conclusion(), ""]
    return lines


def _augmentation_conclusion() -> str:
    """What the rows on the same rows show; the figures are read from the results."""
    results = load_results("distill", GPU_RESULTS)
    cpu = load_results("distill")

    def mean(variant: str, task: str, source: dict = results) -> tuple[float, int]:
        scores = [r["metrics"]["score"] for r in source.values() if r["variant"] == variant and r["task"] == task]
        return sum(scores) / len(scores), len(scores)

    base, aug, x4 = (v for v, _ in GPU_VARIANTS)

    def delta(variant: str, task: str) -> str:
        (m, n), (b, _) = mean(variant, task), mean(base, task)
        return f"{m - b:+.1f}" + ("" if n == 3 else f" (n={n})")

    tasks = ("cola", "mrpc", "stsb", "rte")
    average = {v: sum(mean(v, t)[0] for t in tasks) / len(tasks) for v in (base, aug)}
    cpu_cola = mean("tinybert-ws-general-task-aug", "cola", cpu)[0] - mean(base, "cola", cpu)[0]
    teacher_cola = {name: load_results("teacher_glue", where)["cola/cpu"]["metrics"]["score"]
                    for name, where in (("cpu", None), ("gpu", GPU_RESULTS))}
    return note("augmentation-gpu-conclusion", cpu_cola=f"{cpu_cola:+.1f}",
                **{f"aug_{task}": delta(aug, task) for task in tasks},
                **{f"x4_{task}": delta(x4, task) for task in tasks},
                average_base=f"{average[base]:.1f}", average_aug=f"{average[aug]:.1f}",
                cpu_base_cola=f"{mean(base, 'cola', cpu)[0]:.1f}", gpu_base_cola=f"{mean(base, 'cola')[0]:.1f}",
                teacher_cola_cpu=f"{teacher_cola['cpu']:.1f}", teacher_cola_gpu=f"{teacher_cola['gpu']:.1f}")


def augmented_files_section() -> list[str]:
    results = load_results("augment_glue")
    if not results:
        return []
    lines = ["## Augmented training files (`kdbert augment`)", "",
             note("augmented-files-intro"), "",
             "| task | columns augmented | input rows | output rows | wall time | sentences/s | threads | machine | date |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(results.values(), key=lambda r: TASK_ORDER.index(r["task"])):
        lines.append(f"| {r['task']} | {', '.join(r['columns'])} | {r['input_rows']} | {r['output_rows']} | "
                     f"{r['seconds'] / 60:.1f} min | {r['sentences_per_second']:.1f} | {r['torch_threads']} | "
                     f"{r['machine']} | {r['date']} |")
    lines += ["", "Command: `python benchmarks/augment_glue.py` (one task: `--tasks rte`).", ""]
    return lines


def augment_section() -> list[str]:
    runs = load_results("augment_throughput")
    if not runs:
        return []
    modes = [("reference_style", "reference-style loop"), ("reference_style_mlm", "its MLM calls only"),
             ("one_at_a_time", "one MLM call per word"),
             ("batched_1_worker", "batched"), ("batched_2_workers", "batched, 2 workers"),
             ("batched_1_worker_bf16", "batched, bf16"), ("batched_2_workers_bf16", "batched, bf16, 2 workers")]
    lines = ["## Augmentation throughput (`kdbert augment`)", "",
             note("augment-throughput-intro"), "",
             "| setting | " + " | ".join(label for _, label in modes) + " | bf16 same | load | machine | date |",
             "|---|" + "---|" * (len(modes) + 4)]
    best = []
    for r in runs.values():
        cells = []
        for key, _ in modes:
            m = r["results"].get(key)
            cells.append(f"{m['sentences_per_s']:.1f}/s ({m['speedup_vs_reference_style']:.1f}x)" if m else "-")
        bf16 = r["results"].get("batched_1_worker_bf16", {}).get("sentences_identical_to_one_at_a_time", "-")
        fp32_best = max(r["results"][k]["speedup_vs_reference_style"]
                        for k in ("batched_1_worker", "batched_2_workers"))
        best.append((fp32_best, max(m["speedup_vs_reference_style"] for m in r["results"].values())))
        machine = r["machine"]
        load = "/".join(f"{x:.1f}" for x in r["load_average_1min_before_after"])
        setting = f"{r['task']}, {r['sentences']} sentences, {machine['torch_threads']} thread(s)"
        lines.append(f"| {setting} | " + " | ".join(cells) + f" | {bf16} | {load} | x86_64 {machine['cpus']} "
                     f"CPU cores, no GPU | {r['date'][:10]} |")
    fp32_lo, fp32_hi = min(b[0] for b in best), max(b[0] for b in best)
    any_lo, any_hi = min(b[1] for b in best), max(b[1] for b in best)
    if fp32_lo >= 8:
        verdict = "met in float32"
    elif any_lo >= 8:
        verdict = "met only with the bfloat16 MLM, in every setting; not in float32"
    else:
        verdict = "met in some settings" if any_hi >= 8 else "not met"
    lines += ["", f"The issue's target, 8x the reference's throughput: {verdict}. Best float32 mode (output identical "
              f"to one-at-a-time): {fp32_lo:.1f}-{fp32_hi:.1f}x; best of all modes: {any_lo:.1f}-{any_hi:.1f}x. "
              + note("augment-throughput-reading"), "",
              "Command: `python benchmarks/augment_throughput.py runs/mlm-k2 --task SST-2 --n 200 --slice 100 "
              "--threads 2 --bf16` (and `--task RTE --n 60 --slice 30`, and `--threads 1`); each run replaces its entry in "
              "`benchmarks/results/augment_throughput.json`.", ""]
    return lines
