"""Figures under the rules that keep them honest: teachers tuned on their held-out rows, the kept
share stated on the held-out rows that decide, as shipped, beside dev."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from common import load_results

from sections.shared import CURRENT_TRUST_SUFFIXES, GPU_H200_BASE_RESULTS, TASK_ORDER, note




# rows in each GLUE task's dev file (../shared/data/glue_data), for the gap's noise of searches recorded before
# compress measured it (2026-12-06)
GLUE_DEV_ROWS = {"cola": 1043, "sst2": 872, "mrpc": 408, "stsb": 1500, "rte": 277}
PRECISIONS = {"bf16": "bf16 autocast", "no": "float32"}  # a run's recorded mixed precision, as the pages say it


def teachers_section() -> list[str]:
    """Each task's benchmark teacher, the best of its tuning runs on its held-out rows (``teacher_best.py``)."""
    chosen = load_results("teacher_best")
    if not chosen:
        return []
    lines = ["## Teachers tuned on their held-out rows (`benchmarks/teacher_best.py`)", "", note("teachers-intro"), "",
             "| task | chosen run | held-out that picks (± se) | held-out that decides (± se) | dev | published MiniLM-L6 "
             "dev | every run: held-out / dev | training |", "|---|---|---:|---:|---:|---:|---|---:|"]
    for task in sorted(chosen, key=TASK_ORDER.index):
        record = chosen[task]
        best = record["runs"][record["chosen"]]
        runs = "; ".join(f"lr {r['learning_rate']:g}, {r['epochs']:g} ep: {r['held_out']:.2f} / {r['dev']:.2f}"
                         for r in record["runs"].values())
        published = record["published_minilm_l6_dev"]
        pooling = f", {best['pooling']} pooling" if "pooling" in best else ""
        lines.append(f"| {task} | lr {best['learning_rate']:g}, {best['epochs']:g} epochs{pooling} | {best['held_out']:.2f}"
                     + (f" ± {best['held_out_se']:.2f}" if best.get("held_out_se") is not None else "")
                     + (f" | {best['decide']:.2f} ± {best['decide_se']:.2f}" if "decide" in best
                        else " | - (picked on all)")
                     + f" | {best['dev']:.2f} | {published if published is not None else '-'} | {runs} | "
                     f"{best['train_seconds'] / 60:.0f} min |")
    builds = load_results("teacher_glue")
    built = {task: builds.get(record["chosen"], record) for task, record in chosen.items()}  # where each was trained
    machines = sorted({f"{r['date']}, {r['machine']}" for r in built.values()})
    precision = {task: PRECISIONS.get(build.get("precision"), "precision not recorded") for task, build in built.items()}
    by_precision = {name: [t for t in sorted(precision, key=TASK_ORDER.index) if precision[t] == name]
                    for name in sorted(set(precision.values()))}
    trained = "; ".join(f"{', '.join(tasks)} in {name}" for name, tasks in by_precision.items())
    return lines + ["", f"Measured {'; '.join(machines)}: {trained}, one thread, the whole training set less "
                        "the held-out rows. Command: `python benchmarks/teacher_best.py` after the "
                        "`teacher_glue.py --budget full --held-out-fraction 0.1` runs it names.", "",
                    note("teachers-reading"), ""]


def base_teachers_section() -> list[str]:
    """The base-size teacher, all-mpnet-base-v2 fine-tuned per task (``base_teacher.py``), beside the
    task's tuned all-MiniLM-L6-v2 teacher (``teacher_best.py``)."""
    records = load_results("base_teacher")
    if not records:
        return []
    minilm = load_results("teacher_best")
    lines = ["## A base-size teacher: all-mpnet-base-v2 (`benchmarks/base_teacher.py`)", "", note("base-teachers-intro"),
             "", "| task | training rows, epochs, rate | steps | training | held-out that picks (± se) | held-out that "
             "decides (± se) | dev | dev, int8 export | MiniLM-L6 teacher's dev |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for task in sorted(records, key=TASK_ORDER.index):
        r = records[task]
        metrics = r["dev_metrics"]
        decide = (f"{metrics['decide_score']:.2f} ± {metrics['decide_se']:.2f}" if "decide_score" in metrics
                  else "- (picked on all)")
        rows = f"first {r['max_train_examples']:,}" if r.get("max_train_examples") else "all"
        small = minilm.get(task)
        small_dev = f"{small['runs'][small['chosen']]['dev']:.2f}" if small else "-"
        int8 = r["export_dev"].get("onnx_int8")
        lines.append(f"| {task} | {rows} less {r['held_out_rows']} held out, {r['epochs']:g}, {r['learning_rate']:g} | "
                     f"{r['steps']} | {r['train_minutes']:.0f} min, {r['torch_threads']} thread"
                     f"{'s' if r['torch_threads'] != 1 else ''} | {r['held_out']:.2f} ± {r['held_out_se']:.2f} | "
                     f"{decide} | {r['dev']:.2f} | {f'{int8:.2f}' if int8 is not None else '-'} | {small_dev} |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values()})
    return lines + ["", f"Measured {'; '.join(machines)}: bf16 autocast. Commands: "
                        + "; ".join(f"`{c}`" for c in commands) + ".", "", note("base-teachers-reading"), ""]


def stopped_runs(folder: Path) -> dict[tuple[str, str], list[dict]]:
    """Runs the GPU session's deadline stopped (``stopped/<task>-<candidate>-seed<seed>.log.jsonl``):
    (task, candidate) -> each seed's last evaluation, as ``{"seed", "step", "last_step", "held_out",
    "decide", "dev"}``."""
    found: dict[tuple[str, str], list[dict]] = {}
    for path in sorted(folder.glob("stopped/*.log.jsonl")):
        task, rest = path.name.removesuffix(".log.jsonl").split("-", 1)
        candidate, seed = rest.rsplit("-seed", 1)
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        evaluated = [row for row in rows if "eval" in row]
        if evaluated:
            last = evaluated[-1]["eval"]
            found.setdefault((task, candidate), []).append(
                {"seed": int(seed), "step": evaluated[-1]["step"], "last_step": rows[-1]["step"],
                 "held_out": last["selection_score"], "decide": last["decide_score"], "dev": last["score"]})
    return found


def base_teachers_gpu_section() -> list[str]:
    """The base-size teacher fine-tuned on one H200 on each whole training set, and the CPU 8x searches'
    winner distilled from it for more steps (``gpu_base_session.sh``), beside the CPU figures."""
    teachers = load_results("base_teacher", GPU_H200_BASE_RESULTS)
    if not teachers:
        return []
    students: dict[tuple[str, str], list[dict]] = {}
    steps_of: dict[tuple[str, str], str] = {}
    for key, record in load_results("recipe_ablation", GPU_H200_BASE_RESULTS).items():
        task, candidate, steps, _, _ = key.split("/")
        students.setdefault((task.removesuffix("-mpnet-gpu"), candidate), []).append(record)
        steps_of[(task.removesuffix("-mpnet-gpu"), candidate)] = f"{int(steps):,}"
    for (task, candidate), rows in stopped_runs(GPU_H200_BASE_RESULTS).items():
        students[(task, candidate)] = rows
        steps_of[(task, candidate)] = (f"{rows[0]['step']:,} (stopped at {min(r['last_step'] for r in rows):,}-"
                                       f"{max(r['last_step'] for r in rows):,} of the planned runs by the deadline)")
    cpu_teachers, cpu_runs = load_results("base_teacher"), load_results("recipe_ablation")
    lines = ["### The same teacher fine-tuned on an H200 (`benchmarks/gpu_base_session.sh`)", "",
             note("base-teachers-gpu-intro"), "",
             "| task | teacher: rows, epochs, steps, minutes | teacher dev (CPU's) | teacher decides | 8x student "
             "| steps | seeds | dev, kept | decides, kept | CPU run: steps, dev kept, decides kept |",
             "|---|---|---:|---:|---|---|---:|---:|---:|---|"]
    for task in sorted(teachers, key=TASK_ORDER.index):
        t = teachers[task]
        decide_teacher = t["dev_metrics"]["decide_score"]
        cpu = cpu_teachers.get(task)
        cpu_dev = ""
        if cpu:
            rows_read = f"the first {cpu['max_train_examples']:,}" if cpu.get("max_train_examples") else "all"
            cpu_dev = f" ({cpu['dev']:.2f} from {rows_read})"
        for (student_task, candidate), rows in sorted(students.items()):
            if student_task != task:
                continue
            dev = statistics.mean(r["dev"] for r in rows)
            decide = statistics.mean(r["decide"] for r in rows)
            spread = statistics.stdev(r["dev"] for r in rows) if len(rows) > 1 else 0.0
            lines.append(
                f"| {task} | all less {t['held_out_rows']} held out, {t['epochs']:g}, {t['steps']:,}, "
                f"{t['train_minutes']:.1f} | {t['dev']:.2f}{cpu_dev} | {decide_teacher:.2f} | {candidate} | "
                f"{steps_of[(task, candidate)]} | {len(rows)} | "
                f"{dev:.2f} ± {spread:.2f}, {100 * dev / t['dev']:.1f}% | {decide:.2f}, "
                f"{100 * decide / decide_teacher:.1f}% | {cpu_cell(task, candidate, cpu, cpu_runs)} |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in teachers.values()})
    return lines + ["", f"Measured {'; '.join(machines)}: bf16 autocast; the teacher's labels computed there by "
                        "the PyTorch teacher (float32), where the CPU searches label with its int8 export. Commands: "
                        "`python benchmarks/gpu_base_bundle.py --wheels DIR --tasks sst2 mrpc stsb cola` here, then "
                        "there `TASKS=\"sst2 mrpc stsb cola\" bash benchmarks/gpu_base_session.sh 555 RESULTS_DIR` "
                        "(the script's header says how the pieces travel).", "", note("base-teachers-gpu-reading"), ""]


def cpu_cell(task: str, candidate: str, teacher: dict | None, runs: dict) -> str:
    """The same candidate's CPU runs under the search's recipe against the CPU teacher (``recipe_ablation.py``,
    keys ``<task>-mpnet/<candidate>/<steps>/search/seed<n>``): the one of most seeds, then steps, as ``steps
    (seeds): dev kept, decides kept``."""
    found: dict[int, list[dict]] = {}
    for key, record in runs.items():
        run_task, run_candidate, steps, variant, _ = key.split("/")
        if (run_task, run_candidate, variant) == (f"{task}-mpnet", candidate, "search"):
            found.setdefault(int(steps), []).append(record)
    if not found or teacher is None:
        return "-"
    steps = max(found, key=lambda n: (len(found[n]), n))
    rows = found[steps]
    dev = statistics.mean(r["dev"] for r in rows)
    decide = statistics.mean(r["decide"] for r in rows)
    return (f"{steps:,} ({len(rows)} seed{'s' if len(rows) > 1 else ''}): {100 * dev / teacher['dev']:.1f}%, "
            f"{100 * decide / teacher['dev_metrics']['decide_score']:.1f}%")


def seeds_cell(seeds: dict | None, record: dict, teacher: dict) -> str:
    """The winner's run distilled again with other seeds (``compress_seeds.py``), as kept shares of the
    PyTorch teacher on dev and on the rows that decide: ``n seeds: dev mean ± sd / decide mean ± sd``
    ("-" where none were run for this search's winner)."""
    winner = record.get("winner") or {}
    if not seeds or seeds.get("run") != winner.get("run") or "decide" not in next(iter(seeds["seeds"].values())):
        return "-"
    kept = {where: [100 * row[where] / teacher[where] for row in seeds["seeds"].values()] for where in ("dev", "decide")}
    return f"{len(seeds['seeds'])} seeds: " + " / ".join(
        f"{statistics.mean(values):.1f}% ± {statistics.stdev(values):.1f}" for values in kept.values())


def current_search(key: str) -> bool:
    """Whether a recorded search (``compress.json`` key) ran under the current recipe (its ``-trust-<suffix>``
    one of :data:`CURRENT_TRUST_SUFFIXES`) or against a base-size teacher (``-mpnet-``)."""
    return "-mpnet-" in key or key.rsplit("-", 1)[-1] in CURRENT_TRUST_SUFFIXES


def kept_section() -> list[str]:
    """The searches under the current recipe and the main job run under the rules (``bench_compress.py
    --key-suffix -trust-...``, ``bench_quickstart.py``): kept on dev and on the rows that decide, both as shipped;
    those under earlier recipes on the archive page (:func:`kept_superseded_section`)."""
    recorded = load_results("compress")
    searches = {key: r for key, r in recorded.items() if "-trust" in key and current_search(key)}
    quickstart = {task: r for task, r in load_results("quickstart").items() if "compress" in r}
    if not searches and not quickstart:
        return []
    earlier = sum("-trust" in key and not current_search(key) for key in recorded)
    return (["## The kept share on the rows that decide, as shipped", "", note("kept-intro"), ""]
            + kept_table(searches, quickstart)
            + ([f"{earlier} searches under earlier recipes are on the archive page (`docs/benchmarks/archive.md`).", ""]
               if earlier else [])
            + [note("kept-reading"), ""])


def kept_history_section() -> list[str]:
    """The reading of each search in the headline's kept table, in the order they ran."""
    if not any("-trust" in key for key in load_results("compress")):
        return []
    return ["## The kept share as shipped, search by search", "",
            "The readings of the searches in the headline's kept table (BENCHMARKS.md), in the order they ran; each "
            "search's report is in the section above.", "", note("kept-history"), ""]


def kept_superseded_section() -> list[str]:
    """The searches run under the rules with a recipe since changed: the kept table of :func:`kept_section`."""
    searches = {key: r for key, r in load_results("compress").items() if "-trust" in key and not current_search(key)}
    if not searches:
        return []
    return ["## The kept share as shipped, searches under earlier recipes", "",
            "Searches run under the rules on the trustworthiness of figures whose recipe has changed since "
            "(the headline's table holds the current ones): their columns as there.", "", *kept_table(searches, {})]


def gap_noise_cell(name: str, shipped: dict, margin: float, decide_rows: int | None, gap: float) -> str:
    """Whether ``gap`` (kept on dev less kept on the rows that decide, points) lies within twice its
    standard error: the one compress measured (``gap_se``, since 2026-12-06), else "≈" one estimated
    from the deciding rows' ``margin`` (points of kept) as margin * sqrt(1 + decide rows / dev rows),
    dev's share of the noise taken as the deciding rows' scaled by their sizes; "-" where neither is known."""
    if shipped.get("gap_se") is not None:
        noise, mark = 100 * shipped["gap_se"], ""
    else:
        task = name.split(" ", 1)[1].split("/")[0].split("-")[0]
        if not decide_rows or task not in GLUE_DEV_ROWS:
            return "-"
        noise, mark = margin * (1 + decide_rows / GLUE_DEV_ROWS[task]) ** 0.5, "≈ "
    return f"{'yes' if abs(gap) <= 2 * noise else 'no'} ({mark}± {noise:.1f})"


def kept_table(searches: dict, quickstart: dict) -> list[str]:
    """The kept table of ``searches`` (``compress.json`` records) and ``quickstart`` runs, with the machines
    and commands."""
    lines = ["| run | winner | speedup | kept on dev (int8; of the gain over the majority class) | kept on the rows that decide (int8) | dev - decide: within the margin? | within twice the gap's standard error? (≈: estimated) | "
             "rows that pick / decide | teacher's checkpoint picked on them too | checks | the winner's run with "
             "other seeds: kept on dev / on the rows that decide (PyTorch, mean ± sd) |",
             "|---|---|---:|---:|---:|---|---|---:|---|---|---|"]
    seeds = load_results("compress_seeds")
    rows = [(f"compress {key}", r, r["shipped"], r["winner"]["candidate"], r["shipped"]["speedup"], r.get("held_out_rows"),
             r.get("decide_rows")) for key, r in sorted(searches.items())]
    rows += [(f"quickstart {task}", r, r["compress"], r["compress"]["winner"], r.get("int8_speedup_vs_int8_teacher"),
              r["compress"]["held_out_rows"], r["compress"]["decide_rows"]) for task, r in sorted(quickstart.items())]
    for name, record, shipped, winner, speedup, pick, decide in rows:
        teacher = record.get("teacher_scores") or shipped["teacher_scores"]
        dev_kept, decide_kept = 100 * shipped["kept_dev"], 100 * shipped["kept_decide"]
        margin = 100 * shipped["margin"] / teacher["decide"] if teacher["decide"] else 0.0
        agree = f"{dev_kept - decide_kept:+.1f}: " + ("yes" if abs(dev_kept - decide_kept) <= margin else "no")
        noise = gap_noise_cell(name, shipped, margin, decide, dev_kept - decide_kept)
        checks = ", ".join(f"{c['candidate']} {100 * c['kept']:.1f}%" for c in shipped["checks"])
        # searches recorded before finetune kept the rows that decide apart had teachers picked on all of them
        picked = (record.get("held_out") or shipped.get("held_out") or {}).get("teacher_picked_on_deciding_rows", True)
        lines.append(f"| {name} | {winner} | " + (f"{speedup:.2f}x" if speedup else "-")
                     + f" | {dev_kept:.1f}%{gain_text(shipped)} | {decide_kept:.1f}% ± {margin:.1f} | {agree} | {noise} | {pick} / {decide} | "
                     + ("yes" if picked else "no") + f" | {checks} | {seeds_cell(seeds.get(name.split(' ', 1)[1]), record, teacher)} |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in [*searches.values(), *quickstart.values()]})
    commands = sorted({r["command"] for r in [*searches.values(), *quickstart.values()]})
    return lines + ["", f"Measured {'; '.join(machines)}. Commands: " + "; ".join(f"`{c}`" for c in commands) + ".", ""]


def gain_text(shipped: dict) -> str:
    """`` (G% of the gain)``: the share of the teacher's gain over the majority class on dev that the shipped
    graph keeps, where the majority class scores above zero (on CoLA's MCC and STS-B's correlation it
    scores zero, so the gain is the score); empty where the record has none."""
    if not shipped.get("majority_dev") or shipped.get("gain_kept_dev") is None:
        return ""
    return f" ({100 * shipped['gain_kept_dev']:.0f}% of the gain)"


def candidate_agreements(record: dict) -> list[dict]:
    """Each candidate of a recorded search at its last evaluation (PyTorch): its kept share on dev and on
    the rows that decide, and the noise margin of the latter in points of kept (the bootstrap standard
    error of its score less the teacher's on the same resamples, ``decide_paired_se``, over the teacher's
    score there)."""
    teacher = record["teacher_scores"]
    last = {}
    for row in (row for rung in record["search"]["rounds"] for row in rung):
        if "decide_score" in row and "decide_paired_se" in row and row.get("dev_score") is not None:
            if row["candidate"] not in last or row["steps"] >= last[row["candidate"]]["steps"]:
                last[row["candidate"]] = row
    return [{"candidate": name, "family": name.split("-", 1)[0], "dev_kept": 100 * row["dev_score"] / teacher["dev"],
             "decide_kept": 100 * row["decide_score"] / teacher["decide"],
             "margin": 100 * row["decide_paired_se"] / teacher["decide"]}
            for name, row in sorted(last.items()) if teacher["dev"] > 0 and teacher["decide"] > 0]


def agreement_section() -> list[str]:
    """Dev against the rows that decide for every candidate of the 4x searches under the current rules
    (``-trust-<suffix>`` for each of :data:`CURRENT_TRUST_SUFFIXES`), per task, held-out rule and family,
    the searches of each pooled."""
    keys = sorted(key for key in load_results("compress")
                  if "/x4-trust-" in key and key.rsplit("-", 1)[-1] in CURRENT_TRUST_SUFFIXES)
    if not keys:
        return []
    records = load_results("compress")
    lines = ["## Dev against the rows that decide, every candidate", "", note("agreement-intro"), "",
             "| searches | held-out rule | family | candidates | dev - decide, points of kept: mean (each) | "
             "within the margin |", "|---|---|---|---:|---|---:|"]
    groups: dict[tuple[str, str], list[str]] = {}
    for key in keys:  # one group per task and held-out rule
        rule = (records[key].get("held_out") or {}).get("source", "-").rsplit(", ", 1)[-1].rstrip(")")
        groups.setdefault((key.split("/", 1)[0], rule), []).append(key)
    for (task, rule), members_keys in groups.items():
        rows = [row for key in members_keys for row in candidate_agreements(records[key])]
        names = ", ".join(key.split("/", 1)[1] for key in members_keys)
        for family in sorted({row["family"] for row in rows}):
            members = [row for row in rows if row["family"] == family]
            gaps = [row["dev_kept"] - row["decide_kept"] for row in members]
            within = sum(abs(gap) <= row["margin"] for gap, row in zip(gaps, members))
            lines.append(f"| {task}: {names} | {rule} | {family} | {len(members)} | {statistics.mean(gaps):+.1f} ("
                         + ", ".join(f"{gap:+.1f}" for gap in gaps) + f") | {within} of {len(members)} |")
    machines = sorted({f"{records[key]['date']}, {records[key]['machine']}" for key in keys})
    return lines + ["", f"Read from `results/compress.json` (searches measured {'; '.join(machines)}; their "
                        "commands in the kept table above).", "", note("agreement-reading"), ""]


def kept_by_source_section() -> list[str]:
    """Winners' kept shares per source (a task's genre column) on dev and on the rows that decide, and on
    those rows resampled to dev's mix of sources (``kept_by_source.py``)."""
    records = load_results("kept_by_source")
    if not records:
        return []
    lines = ["## The kept share per source (`benchmarks/kept_by_source.py`)", "",
             "| search | winner | kept on dev | kept on the rows that decide | on the sources both share: dev | ... the "
             "rows that decide at dev's mix (mean ± sd of 1,000 draws) | per source: dev / decide (rows) |",
             "|---|---|---:|---:|---:|---:|---|"]
    for key, r in sorted(records.items()):
        dev, decide = r["splits"]["dev"], r["splits"]["decide"]
        per_source = "; ".join(
            f"{name}: " + " / ".join(f"{100 * split['sources'][name]['kept']:.1f}%" if name in split["sources"] else "-"
                                     for split in (dev, decide))
            + " (" + " / ".join(str(split["sources"].get(name, {}).get("rows", 0)) for split in (dev, decide)) + ")"
            for name in sorted(set(dev["sources"]) | set(decide["sources"])))
        mix, shared = r["decide_at_dev_mix"], r["dev_on_shared_sources"]
        lines.append(f"| {key} | {r['winner']} | {100 * dev['kept']:.1f}% | {100 * decide['kept']:.1f}% | "
                     f"{100 * shared['kept']:.1f}% ({shared['rows']} rows) | {100 * mix['kept']:.1f}% ± "
                     f"{100 * mix['kept_sd']:.1f} | {per_source} |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values()})
    return lines + ["", f"Measured {'; '.join(machines)}: the shipped graph against the PyTorch teacher. Commands: "
                    + "; ".join(f"`{c}`" for c in commands) + ".", ""]


def decide_draw_section() -> list[str]:
    """Winners' kept shares on the rows that pick, on those that decide and on dev; the gap between dev and
    the deciding rows against re-drawn splits of both, and the older draw among random subsets of all
    held-out rows (``decide_draw.py``)."""
    records = load_results("decide_draw")
    if not records:
        return []
    lines = ["## How lucky the rows that decide are (`benchmarks/decide_draw.py`)", "",
             "Every search from one teacher decides on the same rows, so a deciding half that favours the teacher "
             "or the student moves every search, seed and family of that task alike. The shipped graph and the "
             "PyTorch teacher are scored on every held-out and dev row, one row at a time (kept here is over the "
             "PyTorch teacher on dev too). **Dev against the rows that decide**: neither model was chosen on either "
             "set, so their rows are pooled and split 2,000 times at random into a dev-sized and a decide-sized part; "
             "the observed gap kept(dev) - kept(decide) is set against the re-drawn gaps (their sd, and the two-sided "
             "p: the share at least as far from zero). **Random subsets of all held-out rows** (the first version of "
             "this measurement): the kept share on 2,000 subsets of the deciding half's size drawn from both halves. "
             "It is not a fair null: the student's checkpoints and promotions, and the teacher's checkpoint, were "
             "chosen on the rows that pick, so subsets holding them carry that choice, and the deciding half's "
             "quantile reads low by it as much as by its draw. Error: mean |prediction - gold| (regression) or the "
             "error rate, teacher / student.", "",
             "| search | winner | rows that pick: teacher, student, kept | rows that decide: teacher, student, kept "
             "| dev: kept | error on those that pick / decide | dev - decide: gap, re-drawn sd, p "
             "| subsets of all held-out rows (pick included): kept (mean ± sd), the deciding half's quantile |",
             "|---|---|---|---|---:|---|---|---|"]
    for key, r in sorted(records.items()):
        pick, decide, draws = r["halves"]["pick"], r["halves"]["decide"], r["random_halves"]
        cells = [f"{h['teacher']:.2f}, {h['student']:.2f}, {100 * h['kept']:.1f}% ({h['rows']} rows)" for h in (pick, decide)]
        errors = " / ".join(f"{h['error']['teacher']:.3f}, {h['error']['student']:.3f}" for h in (pick, decide))
        dev = r["halves"].get("dev")
        dev_cell = f"{100 * dev['kept']:.1f}% ({dev['rows']} rows)" if dev else "-"
        gap = r.get("dev_against_decide")
        gap_cell = (f"{100 * gap['gap']:+.1f}, ± {100 * gap['null_sd']:.1f}, p {gap['p_two_sided']:.2f}"
                    if gap else "- (recorded before this comparison)")
        lines.append(f"| {key} | {r['winner']} | {cells[0]} | {cells[1]} | {dev_cell} | {errors} | {gap_cell} | "
                     f"{100 * draws['kept_mean']:.1f}% ± {100 * draws['kept_sd']:.1f}, {draws['decide_quantile']:.3f} |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values()})
    return lines + ["", f"Measured {'; '.join(machines)}. Commands: " + "; ".join(f"`{c}`" for c in commands) + ".", "",
                    note("decide-draw-reading"), ""]


def near_duplicates_section() -> list[str]:
    """How near the held-out and dev rows come to training, per source (``near_duplicates.py``)."""
    records = load_results("near_duplicates")
    if not records:
        return []
    lines = ["## Held-out and dev rows against training: near-duplicates (`benchmarks/near_duplicates.py`)", "",
             "Each row's nearness: the largest word-set Jaccard similarity of each of its texts to a training text, "
             "averaged over its texts; per source, the mean and the share of rows at 0.5 or more.", "",
             "| task | held-out rule | source | rows that pick | rows that decide | dev |",
             "|---|---|---|---:|---:|---:|"]
    for task, r in sorted(records.items()):
        splits = ("pick", "decide", "dev")
        sources = sorted({s for split in splits for s in r[split]["by_source"]} - {"-"})  # "-": rows with none
        for source in ["all", *sources]:
            cells = []
            for split in splits:
                row = r[split]["all"] if source == "all" else r[split]["by_source"].get(source)
                cells.append(f"{row['mean']:.3f} ({100 * row['share_at_0.5']:.0f}%, {row['rows']})" if row else "-")
            lines.append(f"| {task} | {r.get('held_out_rule', '-')} | {source} | " + " | ".join(cells) + " |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values()})
    return lines + ["", f"Measured {'; '.join(machines)}. Commands: " + "; ".join(f"`{c}`" for c in commands)
                    + ". Cells: mean (share at 0.5 or more, rows).", "", note("near-duplicates-reading"), ""]


def winner_rule_section() -> list[str]:
    """The winner rule when none keeps the share, read again on recorded searches (``winner_rule.py``):
    the candidate each reading of the held-out rows ships and the share it keeps on dev."""
    record = load_results("winner_rule").get("recorded")
    if not record:
        return []
    rules = (("deciding_rows", "the rows that decide"), ("picking_rows", "the rows that pick"),
             ("all_held_out_rows", "all held-out rows (since 2026-11-30)"))
    lines = ["## The winner when none keeps the share (`benchmarks/winner_rule.py`)", "",
             "| search | " + " | ".join(f"best on {title}: candidate, dev kept" for _, title in rules) + " |",
             "|---|" + "---|" * len(rules)]
    for key, row in record["searches"].items():
        lines.append(f"| {key} | " + " | ".join(f"{row[rule]['candidate']}, {100 * row[rule]['dev_kept']:.1f}%"
                                                for rule, _ in rules) + " |")
    summary = record["summary"]
    lines.append("| mean (dev kept; kept on the rows that decide) | " + " | ".join(
        f"{100 * summary[f'{rule}_dev_kept']:.1f}%; {100 * summary[f'{rule}_decide_kept']:.1f}%" for rule, _ in rules)
        + " |")
    return lines + ["", f"Read {record['date']}, {record['machine']}, from `results/compress.json`. "
                    f"Command: `{record['command']}`.", "", note("winner-rule-reading"), ""]


def paired_margin_section() -> list[str]:
    """Recorded winners' shipped graphs read against the margin their search used and the paired one
    (``paired_margin.py``): the shortfall from the line and whether each margin lets it keep the share."""
    records = load_results("paired_margin")
    if not records:
        return []
    lines = ["## The shipped graph against the paired margin (`benchmarks/paired_margin.py`)", "",
             note("paired-margin-intro"), "",
             "| search | winner | rows that decide | agreement with the teacher there | kept | shortfall from the line | "
             "margin apart (keeps?) | paired margin (keeps?) |", "|---|---|---:|---:|---:|---:|---|---|"]
    for key, r in sorted(records.items()):
        agreement = f"{100 * r['agreement']:.1f}%" if r.get("agreement") is not None else "- (regression)"
        lines.append(f"| {key} | {r['winner']} | {r['decide_rows']} | {agreement} | {100 * r['kept']:.1f}% | "
                     f"{r['shortfall']:.2f} | {r['margin_independent']:.2f} ("
                     + ("yes" if r["keeps_independent"] else "no") + f") | {r['margin_paired']:.2f} ("
                     + ("yes" if r["keeps_paired"] else "no") + ") |")
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records.values()})
    commands = sorted({r["command"] for r in records.values()})
    return lines + ["", f"Measured {'; '.join(machines)}. Commands: " + "; ".join(f"`{c}`" for c in commands) + ".",
                    "", note("paired-margin-reading"), ""]

