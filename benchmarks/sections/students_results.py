"""The general students' section: what `kdbert students build` costs here, and what its students
give a task's distillation (benchmarks/general_students.py)."""

from __future__ import annotations

from common import load_results
from sections.shared import note


def general_students_section() -> list[str]:
    results = load_results("general_students")
    builds = {float(key.split("/", 1)[1]): r for key, r in results.items() if key.startswith("build/")}
    if not builds:
        return []
    last = builds[max(builds)]
    shapes = last["shapes"]
    start = last["history"][0]["held_out_loss"]
    lines = ["## General students built once per base model (`benchmarks/general_students.py`)", "",
             note("general-students-intro"), "",
             "| build (min) | steps | sequences seen | s / step | "
             + " | ".join(f"{s} held-out relation loss" for s in shapes) + " |",
             "|---:|---:|---:|---:|" + "---:|" * len(shapes),
             "| 0 (selection start) | 0 | 0 | - | " + " | ".join(f"{start[s]:.3f}" for s in shapes) + " |"]
    for minutes, r in sorted(builds.items()):
        loss = r["history"][-1]["held_out_loss"]
        lines.append(f"| {minutes:g} | {r['steps']} | {r['sequences_seen']:,} | {r['trained_seconds'] / r['steps']:.1f} | "
                     + " | ".join(f"{loss[s]:.3f}" for s in shapes) + " |")
    cpu = f", {last['cpu']['cpu']} ({', '.join(last['cpu']['int8_flags'])})" if "cpu" in last else ""
    lines += ["", f"Measured {last['date']}, {last['machine']}{cpu}, {last['torch_threads']} thread. "
                  f"Command: `{last['command']}`.", ""]
    lines += tinybert_lines(results)
    downstream = {key: r for key, r in results.items() if not key.startswith(("build/", "search/", "tinybert/"))}
    for task, steps in sorted({(key.split("/", 1)[0], r["steps"]) for key, r in downstream.items()}):
        rows = {_without_steps(key.split("/", 1)[1], steps): r for key, r in downstream.items()
                if key.startswith(f"{task}/") and r["steps"] == steps}
        starts = sorted({key.split("/")[1] for key in rows}, key=_start_order)
        task_shapes = sorted({key.split("/")[0] for key in rows})
        example = next(iter(rows.values()))
        lines += [f"{task.upper()}, {steps} steps of compress's recipe for BERT-style candidates from each "
                  "start, held-out / dev (PyTorch):", "",
                  "| shape | " + " | ".join(starts) + " |", "|---|" + "---:|" * len(starts)]
        for shape in task_shapes:
            cells = [rows.get(f"{shape}/{s}") for s in starts]
            lines.append(f"| {shape} | " + " | ".join(f"{c['held_out']:.2f} / {c['dev']:.2f}" if c else "-"
                                                       for c in cells) + " |")
        scores = (f" (held-out {example['teacher_held_out']:.2f}, dev {example['teacher_dev']:.2f}; the majority "
                  f"class on dev: {example['majority_dev']:.2f})" if "teacher_dev" in example else "")
        commands = "; ".join(f"`{command}`" for command in sorted({r["command"] for r in rows.values()}))
        lines += ["", f"Teacher: `{example['teacher']}`{scores}. Commands: {commands}.", ""]
    return lines + search_lines(results) + [note("general-students-reading"), ""]


def search_lines(results: dict) -> list[str]:
    """Whole compress searches with and without general students and transfer sets (``search/``)."""
    searches = {key.removeprefix("search/"): r for key, r in results.items() if key.startswith("search/")}
    if not searches:
        return []
    lines = ["Whole `kdbert compress` searches (30 minutes, target 4x) with and without the parts:", "",
             "| task | search | general students | transfer set | candidates trained (start: held-out at steps) "
             "| winner (start) "
             "| winner's steps | shipped dev (teacher) | kept | of the gain over majority |",
             "|---|---|---|---|---|---|---:|---:|---:|---:|"]
    for key, r in searches.items():
        task, label = key.split("/", 1)
        general = f"{r['general_students']['minutes']:g} min build" if r["general_students"] else "off"
        transfer = ("augmented rows" + (f" + {r['transfer_rows']:,} text rows" if r["transfer_rows"] else "")
                    if r["augmented"] else "off")
        trained = ", ".join(f"{name} ({row['start']}: {row['held_out']:.1f} at {row['steps']})"
                            for name, row in r["trained"].items())
        gain = ("-" if r["majority_dev"] is None else
                f"{100 * (r['shipped_dev'] - r['majority_dev']) / (r['teacher_dev'] - r['majority_dev']):.1f}%")
        lines.append(f"| {task} | {label} | {general} | {transfer} | {trained} | {r['winner']} ({r['winner_start']}) "
                     f"| {r['winner_steps']} | {r['shipped_dev']:.2f} ({r['teacher_dev']:.2f}) "
                     f"| {100 * r['kept_dev']:.1f}% | {gain} |")
    machines = sorted({f"{r['date']}, {r['machine']}, {r['cpu']['cpu']}" for r in searches.values()})
    return lines + ["", f"Measured {'; '.join(machines)}; each search beside one other on the 2 cores.", ""]


def tinybert_lines(results: dict) -> list[str]:
    """TinyBERT's general distillation of the same shapes, the build's rival (``tinybert/``)."""
    runs = {key.removeprefix("tinybert/"): r for key, r in results.items() if key.startswith("tinybert/")}
    if not runs:
        return []
    lines = ["The rival: TinyBERT's general distillation (`kdbert distill general --method tinybert`, attention "
             "averaged over heads, fitted projections) of each shape alone, from the same start:", "",
             "| shape | steps | s / step | training loss, first logged -> last |", "|---|---:|---:|---|"]
    for key, r in sorted(runs.items()):
        lines.append(f"| {key.split('/')[1]} | {r['steps']} | {r['train_seconds'] / r['steps']:.1f} "
                     f"| {r['first_loss']:.3f} -> {r['last_loss']:.3f} |")
    example = next(iter(runs.values()))
    return lines + ["", f"Measured {example['date']}, {example['machine']}. Command: `{example['command']}`.", ""]


def _without_steps(key: str, steps: int) -> str:
    """A downstream key without the ``-<steps>steps`` its label carries when the run was not 600 steps long."""
    return key.removesuffix(f"-{steps}steps")


def _start_order(label: str) -> tuple[int, float]:
    """selection first, then the general starts by build minutes, then TinyBERT's by steps."""
    if label == "selection":
        return 0, 0.0
    if label.startswith("tinybert-"):
        return 2, float(label.removeprefix("tinybert-").removesuffix("steps"))
    return 1, float(label.removeprefix("general-").removesuffix("min"))


def pretrained_cuts_section() -> list[str]:
    """The packaged all-MiniLM-L6-v2 cut to fewer layers, before training (benchmarks/pretrained_cuts.py)."""
    results = load_results("pretrained_cuts")
    if not results:
        return []
    rows = sorted(results.values(), key=lambda r: (-len(r["layers"]), -r.get("ffn", 0), -r["pearson"]))
    lines = ["## The pre-trained student cut to fewer layers (`benchmarks/pretrained_cuts.py`)", "",
             note("pretrained-cuts-intro"), "",
             "| layers kept (1-based) | depth | FFN units | encoder parameters | STS-B dev Pearson | Spearman | "
             "kdbert's cut |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        size = f"{r['encoder_parameters'] / 1e6:.2f}M" if "encoder_parameters" in r else "-"
        lines.append(f"| {', '.join(str(i + 1) for i in r['layers'])} | {len(r['layers'])} | {r.get('ffn', '-')} | "
                     f"{size} | {r['pearson']:.2f} | {r['spearman']:.2f} | {'yes' if r['kdbert_cut'] else ''} |")
    machines = sorted({f"{r['date']}, {r['machine']}, {r['cpu']}" for r in rows})
    commands = sorted({f"`{r['command']}`" for r in rows})
    return lines + ["", f"Measured {'; '.join(machines)}. Commands: {'; '.join(commands)}.", "",
                    note("pretrained-cuts-reading"), ""]
