"""Would `compress --max-epochs E` have changed what recorded searches trained? Read again on every one.

    python benchmarks/epoch_cap.py --epochs 24

A search that continues its leaders may train a student many passes over a small task's rows, where
on MRPC and CoLA single curves fell after 11-23 epochs (the recipe reading). ``--max-epochs`` stops
each candidate cut from the teacher at ``E`` passes; off by default. For every 4x GLUE search in
``results/compress.json`` that ran without a limit, without augmented twins, and whose runs were all
scored on dev, each candidate cut from the teacher (no BiLSTM, no pre-trained student) whose run went
past ``E`` passes is read twice: its latest segment within ``E`` passes (what the limit would have
kept; each segment's student is the checkpoint its rule kept by then) and its latest segment overall
(what ran). The difference of the teacher's dev share each keeps, per task and for the shipped
candidates alone, is recorded in ``results/epoch_cap.json`` under ``epochs<E>``. An epoch is the rows
the candidate trained on (``labelling.rows``: training rows, plus ``--unlabelled`` rows where the
record counts them; a search whose unlabelled rows it does not count is left out) over the batch its
recipe names. What the limit does to the rest of a search (the slot it frees goes to the next
candidate) is not in this reading: only a search run with it shows that.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics

from common import load_results, machine_info, save_result

GLUE_TASKS = ("cola", "mrpc", "rte", "stsb", "sst2")  # SST-2 is read too: its runs never pass 12 passes
TOLERANCE = 1.05  # a segment ending within 5% past the limit counts as within it (rungs end on whole steps)


def epoch_steps(record: dict, segment: dict) -> float | None:
    """Optimiser steps of one pass over the rows ``segment``'s candidate trained on (None: not known)."""
    rows = (record.get("labelling") or {}).get("rows")
    if not rows or ("--unlabelled" in record["command"] and not record["labelling"].get("unlabelled")):
        return None
    batch = re.search(r"batch (\d+)", segment.get("recipe", ""))
    return rows / int(batch.group(1) if batch else 32)


def readable(key: str, record: dict) -> bool:
    """Whether ``record`` is a 4x GLUE search run without a limit or augmented twins, every run scored on dev."""
    segments = (record.get("search") or {}).get("segments") or []
    return (key.split("/")[0] in GLUE_TASKS and "/x4" in key and "--max-epochs" not in record["command"]
            and "--augment" not in record["command"] and bool(segments)
            and all("dev_score" in s for s in segments) and bool((record.get("teacher_scores") or {}).get("dev")))


def cut_from_teacher(name: str) -> bool:
    return not name.startswith(("bilstm", "pretrained")) and not name.endswith("-aug")


def reread(key: str, record: dict, epochs: float) -> list[dict]:
    """Each candidate of one search that trained past ``epochs`` passes: its dev share at the limit and at the end."""
    teacher = record["teacher_scores"]["dev"]
    runs: dict[str, list[dict]] = {}
    for segment in record["search"]["segments"]:
        if cut_from_teacher(segment["candidate"]):
            runs.setdefault(segment["candidate"], []).append(segment)
    rows = []
    for name, segments in sorted(runs.items()):
        segments.sort(key=lambda s: s["steps"])
        epoch = epoch_steps(record, segments[-1])
        if epoch is None:
            continue
        limit = math.ceil(epochs * epoch) * TOLERANCE
        within = [s for s in segments if s["steps"] <= limit]
        if segments[-1]["steps"] <= limit or not within:
            continue
        rows.append({"search": key, "candidate": name, "shipped": name == record["winner"]["candidate"],
                     "epoch_steps": round(epoch, 1), "steps_at_limit": within[-1]["steps"],
                     "steps": segments[-1]["steps"], "dev_kept_at_limit": within[-1]["dev_score"] / teacher,
                     "dev_kept": segments[-1]["dev_score"] / teacher})
    return rows


def summary(rows: list[dict]) -> dict:
    """Mean change of the dev share from training on past the limit, its standard error, the count."""
    changes = [100 * (row["dev_kept"] - row["dev_kept_at_limit"]) for row in rows]
    if not changes:
        return {"runs": 0}
    se = statistics.stdev(changes) / math.sqrt(len(changes)) if len(changes) > 1 else None
    return {"runs": len(changes), "mean_change": statistics.mean(changes), "se": se,
            "better_at_limit": sum(change < 0 for change in changes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=float, default=24, help="the limit read (compress --max-epochs)")
    args = parser.parse_args()
    records = load_results("compress")
    rows = [row for key, record in sorted(records.items()) if readable(key, record)
            for row in reread(key, record, args.epochs)]
    tasks = sorted({row["search"].split("/")[0] for row in rows})
    result = {**machine_info(), "command": f"python benchmarks/epoch_cap.py --epochs {args.epochs:g}",
              "epochs": args.epochs, "runs": rows,
              "by_task": {task: summary([row for row in rows if row["search"].startswith(task + "/")]) for task in tasks},
              "shipped": summary([row for row in rows if row["shipped"]]), "all": summary(rows)}
    save_result("epoch_cap", f"epochs{args.epochs:g}", result)
    for row in rows:
        print(f"{row['search']} {row['candidate']}{' (shipped)' if row['shipped'] else ''}: "
              f"{row['steps_at_limit']} steps {100 * row['dev_kept_at_limit']:.1f}% -> "
              f"{row['steps']} steps {100 * row['dev_kept']:.1f}%")
    for name, part in [*result["by_task"].items(), ("shipped", result["shipped"]), ("all", result["all"])]:
        print(name, part)


if __name__ == "__main__":
    main()
