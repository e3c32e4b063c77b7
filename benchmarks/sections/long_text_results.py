"""IMDb (long reviews): which truncation the teacher reads best, and the students distilled from it."""

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
             f"| step | truncation | accuracy, first {budget['test_rows_scored']:,} test rows | "
             "accuracy, all 25,000 test rows | training rows | wall time | machine, date |",
             "|---|---|---|---|---|---|---|"]
    for step, r in results.items():
        full = r.get("full_test", {}).get("accuracy")
        seconds = r.get("train_seconds") or r.get("wall_seconds")
        lines.append(f"| {step} | {r['truncation']} | {r['metrics']['accuracy']:.2f} | "
                     f"{'not scored yet' if full is None else f'{full:.2f}'} | {r.get('train_rows', budget['train_rows']):,} | "
                     f"{seconds / 60:.1f} min | {r['machine']}, {r['torch_threads']} thread(s), {r['date']} |")
    return lines + ["", "Command: `python benchmarks/imdb.py` (then `--full-test`). " + note("imdb-reading"), ""]
