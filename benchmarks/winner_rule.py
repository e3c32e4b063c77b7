"""The winner rule when no candidate keeps the share, read again on every recorded search.

    python benchmarks/winner_rule.py

When none keeps ``--min-kept``, ``kdbert compress`` ships the best estimate of quality. Until the
evening of 2026-11-30 that was the best score on the held-out rows that decide, which also state
the kept share; since, it is the best score on all held-out rows, both halves weighted by their
rows (:meth:`kdbert.compress.schedule.Goal.pooled`). Dev, which no rule reads, judges three
readings: the rows that decide, the rows that pick (every promotion's), and both. For every search
in ``results/compress.json`` whose winner was chosen by that rule and whose candidates were scored
on both halves and on dev, each candidate's latest run is taken, the one each rule chooses is found,
and the teacher's share it keeps on the rows that decide and on dev is recorded (PyTorch scores of
the runs, before int8), with the means over the searches. The majority-class filter of the rule is
left out (its threshold is not recorded). Writes ``results/winner_rule.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from common import machine_info, save_result

from kdbert.compress.schedule import Goal, latest

RESULTS = Path(__file__).parent / "results"
NONE_KEEPS = "none keeps"
RULES = ("deciding_rows", "picking_rows", "all_held_out_rows")


def best(runs: dict[str, dict], score) -> dict:
    """The run scoring highest by ``score(run)`` (then the lower held-out loss, then name), as the rule sorts."""
    return min(runs.values(), key=lambda run: (-score(run), run.get("loss", float("inf")), run["candidate"]))


def reread(record: dict) -> dict | None:
    """Each rule's choice on one recorded search (None where it cannot be read again)."""
    segments = (record.get("search") or {}).get("segments") or []
    teacher = record.get("teacher_scores") or {}
    if not segments or not teacher.get("decide") or not teacher.get("dev"):
        return None
    if not (record.get("winner") or {}).get("rule", "").startswith(NONE_KEEPS):
        return None
    if not all("decide_score" in s and "dev_score" in s for s in segments):
        return None
    runs = latest([{**segment, "state": "done"} for segment in segments])  # recorded segments all ran
    both = Goal(teacher["held_out"], 0.97, {}, decide_weight=record["decide_rows"] / (
        record["decide_rows"] + record["held_out_rows"]))
    scores = {"deciding_rows": lambda run: run["decide_score"], "picking_rows": lambda run: run["score"],
              "all_held_out_rows": both.pooled}

    def kept(run: dict) -> dict:
        return {"candidate": run["candidate"], "steps": run["steps"], "pick": run["score"],
                "decide_kept": run["decide_score"] / teacher["decide"], "dev_kept": run["dev_score"] / teacher["dev"]}

    return {"candidates": len(runs), "shipped": record["winner"]["candidate"],
            **{rule: kept(best(runs, scores[rule])) for rule in RULES}}


def main() -> None:
    records = json.loads((RESULTS / "compress.json").read_text())
    searches = {key: row for key, record in sorted(records.items()) if (row := reread(record))}

    def mean(rule: str, field: str) -> float:
        return sum(row[rule][field] for row in searches.values()) / len(searches)

    summary = {"searches": len(searches),
               "differ": sum(len({row[rule]["candidate"] for rule in RULES}) > 1 for row in searches.values()),
               **{f"{rule}_{field}": mean(rule, field) for rule in RULES for field in ("decide_kept", "dev_kept")}}
    save_result("winner_rule", "recorded", {**machine_info(), "command": "python benchmarks/winner_rule.py",
                                            "summary": summary, "searches": searches})
    for key, row in searches.items():
        print(f"{key}: " + ", ".join(f"{rule} -> {row[rule]['candidate']} (dev {100 * row[rule]['dev_kept']:.1f}%)"
                                     for rule in RULES))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
