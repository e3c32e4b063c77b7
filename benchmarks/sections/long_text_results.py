"""IMDb (long reviews): which truncation the teacher reads best, and the students distilled from it;
SQuAD v1.1 on an article split: the teacher, students with and without the "(D)" step, their deployed
speed at 384 tokens."""

from __future__ import annotations

from common import load_results
from sections.shared import note


def imdb_section() -> list[str]:
    """``benchmarks/imdb.py``'s records: one row per step, with the full test split when scored."""
    results = load_results("imdb")
    if not results:
        return []
    first = next(iter(results.values()))
    budget = first["budget"]
    lines = ["## IMDb: truncation and distillation on a CPU budget", "",
             note("imdb-intro", train_rows=budget["train_rows"], test_rows=budget["test_rows_scored"],
                  max_seq_len=budget["max_seq_len"]), "",
             f"| step | truncation | accuracy, first {budget['test_rows_scored']:,} test rows | kept | "
             "accuracy, all 25,000 test rows | kept | training rows (windows) | wall time | machine, date |",
             "|---|---|---|---|---|---|---|---|---|"]
    teachers = {r["output_dir"]: r for step, r in results.items() if step.startswith("teacher-")}
    for step, r in sorted(results.items(), key=lambda item: not item[0].startswith("teacher-")):
        full = r.get("full_test", {}).get("accuracy")
        seconds = r.get("train_seconds") or r.get("wall_seconds")
        teacher = teachers.get(r.get("teacher"))
        teacher_full = teacher.get("full_test", {}).get("accuracy") if teacher else None
        kept = f"{100 * r['metrics']['accuracy'] / teacher['metrics']['accuracy']:.1f}%" if teacher else "-"
        kept_full = f"{100 * full / teacher_full:.1f}%" if teacher_full and full is not None else "-"
        rows = f"{r.get('train_rows', budget['train_rows']):,}" + (f" ({r['train_windows']:,})" if r.get("train_windows")
                                                                    else "")
        lines.append(f"| {step} | {r['truncation']} | {r['metrics']['accuracy']:.2f} | {kept} | "
                     f"{'not scored yet' if full is None else f'{full:.2f}'} | {kept_full} | {rows} | "
                     f"{seconds / 60:.1f} min | {r['machine']}, {r['torch_threads']} thread(s), {r['date']} |")
    cut = [r for r in teachers.values() if r["truncation"] != "windows"]
    if cut:
        best = max(cut, key=lambda r: r["metrics"]["accuracy"])
        lines += ["", f"Best truncation for the teacher: **{best['truncation']}** ({best['metrics']['accuracy']:.2f}); "
                      "the students but `kd-3L-windows` distil that teacher, and 'kept' is a student's accuracy over "
                      "its own teacher's."]
    return lines + ["", "Command: `python benchmarks/imdb.py` (then `--full-test`). " + note("imdb-reading"), ""]


def squad_section() -> list[str]:
    """``benchmarks/squad.py``'s records: EM / F1 and the share of the teacher's kept, then the
    exported models' scores per runtime and latency at 384 tokens."""
    results = load_results("squad")
    if "teacher" not in results:
        return []
    budget, teacher = results["teacher"]["budget"], results["teacher"]
    lines = ["## SQuAD v1.1 on an article split (not comparable with the papers)", "",
             note("squad-intro", train_articles=budget["train_articles"], train_questions=budget["train_questions"],
                  max_seq_len=budget["max_seq_len"], doc_stride=budget["doc_stride"]), "",
             "| model | EM | F1 | EM kept | F1 kept | training questions | wall time | machine, date |",
             "|---|---|---|---|---|---|---|---|"]
    for step, r in results.items():
        em, f1 = r["metrics"]["exact_match"], r["metrics"]["f1"]
        seconds = r.get("train_seconds") or r.get("wall_seconds")
        lines.append(f"| {step} | {em:.2f} | {f1:.2f} | {100 * em / teacher['metrics']['exact_match']:.1f}% | "
                     f"{100 * f1 / teacher['metrics']['f1']:.1f}% | {r.get('train_rows', budget['train_questions']):,} | "
                     f"{seconds / 60:.1f} min | {r['machine']}, {r['torch_threads']} thread(s), {r['date']} |")
    deployed = {step: r for step, r in results.items() if "deployed" in r}
    if "teacher" in deployed:
        base = deployed["teacher"]["deployed"]
        lines += ["", f"Deployed at {budget['max_seq_len']} tokens, batch 1 (`--steps bench`): ONNX fp32 and dynamic "
                      "int8 exports, EM / F1 of each runtime on the same questions, max |logit difference| of fp32 "
                      "against PyTorch.", "",
                  "| model | params | PyTorch ms | speedup | ORT int8 ms | speedup | EM / F1 PyTorch | EM / F1 ORT fp32 "
                  "| EM / F1 ORT int8 | fp32 parity | machine, date |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for step, r in deployed.items():
            d = r["deployed"]
            scores = [f"{d['dev_metrics'][k]['exact_match']:.2f} / {d['dev_metrics'][k]['f1']:.2f}"
                      for k in ("pytorch", "onnx_fp32", "onnx_int8")]
            lines.append(f"| {step} | {d['params_total'] / 1e6:.1f}M | {d['pytorch_ms']:.1f} | "
                         f"{base['pytorch_ms'] / d['pytorch_ms']:.2f}x | {d['int8_ms']:.1f} | "
                         f"{base['int8_ms'] / d['int8_ms']:.2f}x | {' | '.join(scores)} | "
                         f"{d['parity']['max_abs_logit_diff_fp32']:.1e} | {r['deployed_on']['machine']}, "
                         f"{d['threads']} thread(s), {r['deployed_on']['date']} |")
    return lines + ["", "Command: `python benchmarks/squad.py` (then `--steps bench`). " + note("squad-reading"), ""]
