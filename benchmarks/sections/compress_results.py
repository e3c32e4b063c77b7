"""The `kdbert compress` section: each recorded search's winner and candidate table."""

from __future__ import annotations

from common import load_results
from sections.shared import note

from kdbert.compress.pipeline import format_report


def compress_section() -> list[str]:
    results = load_results("compress")
    if not results:
        return []
    lines = ["## `kdbert compress`: the fastest student that keeps the score, found on this machine", "",
             note("compress-intro"), ""]
    for key in sorted(results):
        result = results[key]
        body = format_report(result).splitlines()[2:]  # without its title
        speedup = result["target"]["speedup"]
        lines += [f"### {result['task']}, target {speedup:g}x against the int8 teacher" if speedup else
                  f"### {result['task']}", "", f"Measured on {result['machine']} ({result['date']}), "
                  f"{result['speed']['settings']['threads']} runtime thread(s), {result['held_out_rows']} training "
                  "rows held out to pick on.", "", *body, "", f"Command: `{result['command']}`.", ""]
    return lines + [note("compress-reading"), ""]
