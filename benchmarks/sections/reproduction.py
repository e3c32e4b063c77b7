"""BENCHMARKS.md sections on reproducing: the page's introduction, the reruns after the core was
rewritten, and recorded figures run again with ``--rerun``."""

from __future__ import annotations

from common import load_results
from sections.shared import note


def rerun_section() -> list[str]:
    """Recorded vs rerun scores after a change of the training core (benchmarks/rerun_check.py)."""
    results = load_results("rerun")
    if not results:
        return []
    lines = ["## Reruns after the core was rewritten around matches and stages", "",
             note("rerun-intro"), "",
             "| run | recorded | rerun | difference | commit | machine | date |", "|---|---|---|---|---|---|---|"]
    for key, r in results.items():
        if "recorded" in r:
            recorded, rerun = r["recorded"], r["rerun"]
            if "score" in recorded:
                recorded, rerun = {"score": recorded["score"]}, {"score": rerun["score"]}
            for name in recorded:
                lines.append(f"| {key} {'' if name == 'score' else name} | {recorded[name]:.4f} | {rerun[name]:.4f} | "
                             f"{rerun[name] - recorded[name]:+.4f} | {r['commit']} | {r['machine']} | {r['date']} |")
        else:
            steps = r["steps_compared"]
            lines.append(f"| {key}: training losses at {len(steps)} logged steps ({steps[0][0]} {steps[0][1]} to "
                         f"{steps[-1][0]} {steps[-1][1]}) of `{r['runs'][0]}` vs `{r['runs'][1]}` | | | largest "
                         f"{r['max_abs_difference']:g}{'; ' + r['note'] if r.get('note') else ''} | {r['commit']} | "
                         f"{r['machine']} | {r['date']} |")
    lines += ["", "Command: `python benchmarks/rerun_check.py` (see its docstring).", ""]
    return lines


def reruns_section() -> list[str]:
    """Recorded figures run again with ``--rerun`` and how they compared."""
    results = load_results("reruns")
    if not results:
        return []
    lines = ["## Reruns of recorded figures (`--rerun`)", "",
             note("reruns-intro"), "",
             "| figure | recorded | rerun | difference | noise allowed | reproduced | machine | date |",
             "|---|---|---|---|---|---|---|---|"]
    for key, r in sorted(results.items()):
        lines.append(f"| {key} | {r['recorded']:.2f} | {r['rerun']:.2f} | {r['delta']:+.2f} | {r['noise']:.2f} "
                     f"({r['noise_source']}) | {'yes' if r['reproduced'] else 'no'} | {r['machine']}, "
                     f"{r['torch_threads']} thread(s) | {r['date']} |")
    return lines + [""]


def intro_section() -> list[str]:
    """The page's title and what its figures are."""
    return [note("intro"), ""]
