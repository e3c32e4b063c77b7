"""The `kdbert compress` section: each recorded search's winner and candidate table."""

from __future__ import annotations

import statistics

from common import load_results
from sections.scoreboard import CITED_SEARCHES
from sections.shared import GPU_H200_RESULTS, GPU_RESULTS, current_command, note

from kdbert.compress.report import format_report


def compress_section() -> list[str]:
    results = load_results("compress")
    if not results:
        return []
    old = superseded(results)
    lines = ["## `kdbert compress`: the fastest student that keeps the score, found on this machine", "",
             note("compress-intro"), "", *summary_table(results), ""]
    if old:
        lines += [f"Each search's report follows, but for {len(old)} superseded by a later protocol (a teacher "
                  "fine-tuned without the rows the search picks on) that the scoreboard does not cite: those are on "
                  "the [archive](archive.md).", ""]
    lines += search_lines({key: r for key, r in results.items() if key not in old})
    return lines + [note("compress-reading"), "", *learning_rate_lines(), *gpu_lines()]


def compress_archive_section() -> list[str]:
    """The searches ``superseded`` by a later protocol, each with its report."""
    results = load_results("compress")
    old = superseded(results)
    if not old:
        return []
    return ["## `kdbert compress` searches against a teacher fine-tuned on the rows they pick on", "",
            "Searched again since against a teacher fine-tuned without them (the summary table of the "
            "[compress page](compress.md) has a row for every search).", "",
            *search_lines({key: results[key] for key in old})]


def superseded(results: dict) -> set[str]:
    """The searches whose teacher was fine-tuned on the rows they pick on, of a task and target searched
    again later against a teacher fine-tuned without them, but those the scoreboard cites."""
    def against_held_out_teacher(r: dict) -> bool:
        return bool(r.get("teacher_held_out_fraction"))

    later = {(r["task"], r["target"]["speedup"]) for r in results.values() if against_held_out_teacher(r)}
    return {key for key, r in results.items()
            if not against_held_out_teacher(r) and (r["task"], r["target"]["speedup"]) in later
            and key not in CITED_SEARCHES}


def search_lines(results: dict) -> list[str]:
    """Each search's report, with the winner's run distilled again with other seeds where recorded."""
    seeds = load_results("compress_seeds")
    lines = []
    for key in sorted(results):
        result = results[key]
        body = format_report(result).splitlines()[2:]  # without its title
        speedup = result["target"]["speedup"]
        twins = ", with augmented twins" if result.get("augmentation") else ""
        lines += [f"### {result['task']}, target {speedup:g}x against the int8 teacher{twins}" if speedup else
                  f"### {result['task']}{twins}", "", f"Measured on {result['machine']} ({result['date']}), "
                  f"{result['speed']['settings']['threads']} runtime thread(s), {result['held_out_rows']} training "
                  "rows held out to pick on" + (" (the teacher was fine-tuned without them)."
                                                 if result.get("teacher_held_out_fraction") else
                                                 "; the teacher was fine-tuned on them too."), "", *body, "",
                  f"Command: `{result['command']}`.", ""]
        if key in seeds and seeds[key]["run"] == result["winner"]["run"]:
            lines += [seeds_line(seeds[key]), ""]
    return lines


def seeds_line(record: dict) -> str:
    """The winner's final run distilled again with other seeds (``benchmarks/compress_seeds.py``)."""
    runs = ", ".join(f"seed {seed}: {row['dev']:.2f} (held-out {row['held_out']:.2f}"
                     + (f", deciding rows {row['decide']:.2f}" if "decide" in row else "") + ")"
                     for seed, row in record["seeds"].items())
    return (f"The winner's final run ({record['candidate']}, {record['steps']} steps) with {len(record['seeds'])} "
            f"seeds, dev (PyTorch): {record['dev_mean']:.2f} +- {record['dev_std']:.2f} ({runs}); {record['machine']}, "
            f"{record['date']}, `{record['command']}`.")


def learning_rate_lines() -> list[str]:
    """The narrow BERT-style candidates at higher learning rates (``benchmarks/compress_lr.py``): one
    row per task and candidate, one column per rate, held-out / dev score."""
    results = load_results("compress_lr")
    if not results:
        return []
    rates = sorted({record["learning_rate"] for record in results.values()})
    rows: dict[tuple[str, str], dict] = {}
    for key, record in results.items():
        task, candidate, _ = key.split("/")
        rows.setdefault((task, candidate), {})[record["learning_rate"]] = record
    first = next(iter(results.values()))
    lines = ["### Learning rate of the narrow BERT-style candidates", "", note("compress-lr-intro", steps=first["steps"],
             machine=first["machine"], date=first["date"]), "",
             "| task | candidate | " + " | ".join(f"lr {rate:g}: held-out / dev" for rate in rates) + " |",
             "|---|---|" + "---:|" * len(rates)]
    for (task, candidate), by_rate in sorted(rows.items()):
        cells = [f"{by_rate[rate]['held_out']:.2f} / {by_rate[rate]['dev']:.2f}" if rate in by_rate else "-"
                 for rate in rates]
        lines.append(f"| {task} | {candidate} | " + " | ".join(cells) + " |")
    commands = sorted({record["command"] for record in results.values()})
    return lines + ["", "Commands: " + "; ".join(f"`{command}`" for command in commands) + ".", "",
                    note("compress-lr-reading"), ""]


def gpu_lines() -> list[str]:
    """The searches run on GPU machines, each machine's with its summary and reading: the H100's
    (``benchmarks/gpu_session.sh``, notes ``compress-gpu-*``) and the H200's
    (``benchmarks/gpu_compress.sh``, notes ``compress-gpu-h200-*``)."""
    lines = []
    for folder, notes in ((GPU_H200_RESULTS, "compress-gpu-h200"), (GPU_RESULTS, "compress-gpu")):
        results = load_results("compress", folder)
        if results:
            first = next(iter(results.values()))
            lines += [f"### At a GPU budget ({first['machine']}, {first['date']})", "", note(f"{notes}-intro"), "",
                      *summary_table(results), "", note(f"{notes}-reading"), ""]
    return lines


def summary_table(results: dict) -> list[str]:
    """One row per recorded search: the winner shipped, its speedup over the deployed teacher and
    the shares of the teacher's dev score (and of its gain over the majority class) it keeps."""
    lines = ["| task | target | winner | speedup (int8 vs int8 teacher) | dev: teacher / winner | kept | gain kept "
             "| agreement | search |", "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for key in sorted(results):
        result = results[key]
        shipped, teacher = result["shipped"], result["teacher_scores"]
        gain = "-" if shipped["gain_kept_dev"] is None else f"{100 * shipped['gain_kept_dev']:.1f}%"
        agreement = f"{shipped['agreement_dev']:.1f}" if "agreement_dev" in shipped else "-"
        budget = result["command"].split("--budget-minutes ")[1].split()[0] if "--budget-minutes" in result["command"] \
            else "-"
        augmented = f", {result['command'].split('--augment ')[1].split()[0]} augmented too" \
            if result.get("augmentation") else ""
        augmented += ", teacher without the held-out rows" if result.get("teacher_held_out_fraction") else ""
        augmented += ", candidates trained in bf16" if result.get("precision") == "bf16" else ""
        augmented += ", BiLSTM vectors from the encoder" if "--word-vectors encoder:" in result["command"] else ""
        lines.append(f"| {result['task']} | {result['target']['speedup']:g}x | {result['winner']['candidate']} | "
                     f"{shipped['speedup']:.2f}x | {teacher['dev']:.2f} / {shipped['dev_score']:.2f} | "
                     f"{100 * shipped['kept_dev']:.1f}% | {gain} | {agreement} | {budget} min{augmented} |")
    return lines


def compress_budget_section() -> list[str]:
    """`kdbert compress --budget-minutes M` timed from outside, one row per budget (compress_budget.py)."""
    results = load_results("compress_budget")
    if not results:
        return []
    lines = ["## Does compress keep its budget? (`benchmarks/compress_budget.py`)", "", note("compress-budget-intro"), "",
             "| task | budget | wall time | within M + 10% | exit | phases (s) | winner | dev | last line |",
             "|---|---:|---:|---|---:|---|---|---:|---|"]
    for key, r in results.items():
        phases = ", ".join(f"{name} {seconds:.0f}" for name, seconds in (r["phase_seconds"] or {}).items()) or "-"
        dev = "-" if r["dev_score"] is None else f"{r['dev_score']:.2f}"
        lines.append(f"| {key.split('/')[0]} | {r['budget_minutes']:g} min | {r['wall_seconds']:.0f} s "
                     f"| {'yes' if r['within_budget'] else '**no**'} | {r['exit_code']} | {phases} "
                     f"| {r['winner'] or '-'} | {dev} | {r['last_line'][:200].replace('|', '/')} |")
    machines = sorted({f"{r['date']}, {r['machine']}, {r['cpu']['cpu']} ({', '.join(r['cpu']['int8_flags'])})"
                       for r in results.values()})
    lines += ["", f"Measured {'; '.join(machines)}. Command: `{current_command(next(iter(results.values()))['command'])}` "
              "(via `python benchmarks/compress_budget.py`).", "", note("compress-budget-reading"), ""]
    return lines


def spare_time_section() -> list[str]:
    """A search's winner against the same winner trained on in the finishing's spare time, seed by
    seed (spare_time.py): steps, kept shares on dev and on the rows that decide, what shipped and why."""
    results = load_results("spare_time")
    if not results:
        return []
    lines = ["## The finishing's spare time (`benchmarks/spare_time.py`)", "", note("spare-time-intro"), "",
             "| setting | seed | compress s (of) | search's winner: steps, kept dev / decide | spare s left "
             "(needed) | trained on: steps, kept dev / decide | shipped | why |",
             "|---|---:|---:|---|---:|---|---|---|"]

    def kept(row: dict) -> str:
        dev = f"{100 * row['kept_dev']:.1f}%" if "kept_dev" in row else "-"
        return f"{dev} / {100 * row['kept_decide']:.1f}%"

    for key, r in sorted(results.items()):
        setting, seed = key.rsplit("/seed", 1)
        spare, first, later = r["spare"], r["search_winner"], r.get("trained_on")
        trained = f"{later['steps']:,}, {kept(later)}" if later else (
            f"{spare['steps']:,}, not exported" if spare.get("trained") else "-")
        minutes = float(setting.rsplit("/", 1)[1].removesuffix("min"))
        lines.append(f"| {setting} | {seed} | {r['budget_seconds']:.0f} ({60 * minutes:.0f}) "
                     f"| {first['steps']:,}, {kept(first)} | {spare['seconds_left']:.0f} ({spare['seconds_needed']:.0f}) "
                     f"| {trained} | {'yes' if spare['shipped'] else 'no'} | {spare['why']} |")
    return lines + ["", measured_line(results.values()), "", note("spare-time-reading"), ""]


def compress_engines_section() -> list[str]:
    """The search engine before and after Optuna at one budget (compress_engines.py)."""
    results = load_results("compress_engines")
    if not results:
        return []
    lines = ["## The search before and after Optuna (`benchmarks/compress_engines.py`)", "",
             note("compress-engines-intro"), "",
             "| task | engine | candidates trained (of those meeting 4x) | families in the first rung (of) | runs "
             "| steps trained | winner | winner's steps | held-out (teacher) | dev PyTorch | shipped dev int8 (teacher) "
             "| speedup |", "|---|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for key, r in results.items():
        task, label = key.split("/", 1)
        lines.append(f"| {task} | {label} | {len(r['candidates_trained'])} ({r['candidates_meeting_target']}) "
                     f"| {', '.join(r['families_reached_first_rung'])} ({', '.join(r['families_meeting_target'])}) "
                     f"| {r['runs']} | {r['steps_trained']} | {r['winner']} | {r['winner_steps']} "
                     f"| {r['winner_held_out']:.2f} ({r['teacher_held_out']:.2f}) | {r['winner_dev_pytorch']:.2f} "
                     f"| {r['shipped_dev']:.2f} ({r['teacher_dev']:.2f}) | {r['speedup']:.2f}x |")
    machines = sorted({f"{r['date']}, {r['machine']}, {r['cpu']['cpu']}" for r in results.values()})
    return lines + ["", f"Measured {'; '.join(machines)}.", "", note("compress-engines-reading"), ""]


def steps_order(steps: str) -> tuple[int, str]:
    """A record's steps (``2400``, or ``2400-first300`` for a run with the searches' 300-step warm-up
    and horizon) as a key that sorts by the step count first."""
    return int(steps.split("-")[0]), steps


def recipe_ablation_section() -> list[str]:
    """The compress recipe one part at a time, at equal steps and several seeds
    (``recipe_ablation.py``): the mean and every seed's score on the rows that pick, that decide,
    and on dev."""
    records = load_results("recipe_ablation")
    if not records:
        return []
    runs: dict[tuple, list[dict]] = {}
    for key, record in records.items():
        task, candidate, steps, variant, _ = key.split("/")
        runs.setdefault((task, candidate, steps_order(steps), variant), []).append(record)
    lines = ["## The recipe at equal steps (`benchmarks/recipe_ablation.py`)", "", note("recipe-intro"), "",
             "| task | candidate | steps | variant | seeds | picks (mean) | decides (mean) | dev (mean) | dev per seed |",
             "|---|---|---:|---|---:|---:|---:|---:|---|"]
    for (task, candidate, (_, steps), variant), rows in sorted(runs.items()):
        rows = sorted(rows, key=lambda r: r["seed"])
        mean = {name: sum(r[name] for r in rows) / len(rows) for name in ("held_out", "decide", "dev")}
        lines.append(f"| {task} | {candidate} | {steps} | {variant} | {len(rows)} | {mean['held_out']:.2f} | "
                     f"{mean['decide']:.2f} | {mean['dev']:.2f} | "
                     + ", ".join(f"{r['seed']}: {r['dev']:.2f}" for r in rows) + " |")
    return lines + ["", measured_line(records.values()), "", note("recipe-reading"), ""]


def plateau_section() -> list[str]:
    """A search's run continued from its best step, one part of its recipe changed at a time
    (``plateau.py``): each variant's kept share on dev and on the rows that decide, mean and sd over
    its seeds, beside the run's own at its start."""
    records = load_results("plateau")
    if not records:
        return []
    groups: dict[tuple, list[dict]] = {}
    for key, record in records.items():
        task, run, steps, variant, _ = key.split("/")
        groups.setdefault((task, run, int(steps), variant), []).append(record)

    lines = ["## A plateau, continued one part at a time (`benchmarks/plateau.py`)", "", note("plateau-intro"), "",
             "| task: run, from step | teacher dev / decide | kept at the start: dev / decide | steps more | variant "
             "| seeds | kept on dev | kept on the rows that decide | dev per seed |",
             "|---|---:|---:|---:|---|---:|---:|---:|---|"]
    for (task, run, steps, variant), rows in sorted(groups.items(), key=lambda g: (g[0][:3], g[0][3] != "stable")):
        rows = sorted(rows, key=lambda r: r["seed"])
        first = rows[0]
        lines.append(f"| {task}: {run.rsplit('-from', 1)[0]}, {first['start_step']:,} | {first['teacher_dev']:.2f} / "
                     f"{first['teacher_decide']:.2f} | {kept_share(first, 'start_dev'):.1f}% / "
                     f"{kept_share(first, 'start_decide'):.1f}% | {steps:,} | {variant} | {len(rows)} "
                     f"| {mean_and_sd([kept_share(r, 'dev') for r in rows], '%')} | {mean_and_sd([kept_share(r, 'decide') for r in rows], '%')} | "
                     + ", ".join(f"{r['seed']}: {r['dev']:.2f}" for r in rows) + " |")
    return lines + ["", measured_line(records.values()), "", note("plateau-reading"), ""]


def mean_and_sd(values: list[float], unit: str = "", sign: bool = False) -> str:
    """``mean<unit> ± sd`` of ``values`` (the sample sd; the mean alone for one value), signed with
    ``sign``: ``95.7% ± 0.3``, ``+0.4 ± 1.1``."""
    mean = f"{statistics.mean(values):{'+' if sign else ''}.1f}{unit}"
    return f"{mean} ± {statistics.stdev(values):.1f}" if len(values) > 1 else mean


def measured_line(records) -> str:
    """``Measured <date, machine; ...>. Commands: `...`; `...`.`` of ``records`` (any iterable), each once, sorted."""
    records = list(records)
    machines = sorted({f"{r['date']}, {r['machine']}" for r in records})
    commands = sorted({r["command"] for r in records})
    return f"Measured {'; '.join(machines)}. Commands: " + "; ".join(f"`{c}`" for c in commands) + "."


def kept_share(record: dict, rows: str) -> float:
    """A recipe run's score on ``rows`` ("dev" or "decide", or "start_dev" / "start_decide": a continued
    run's start) over its teacher's there, in percent."""
    return 100 * record[rows] / record[f"teacher_{rows.removeprefix('start_')}"]


RECIPE_PARTS = [("recipe-constant-rate", "1: rate annealed by EMA off"), ("recipe-cls-pooling", "2: mean or pair pooling off"),
                ("recipe-gold-regression", "3: the teacher's score in regression off"),
                ("recipe-even-start", "4: start ranked by importance off"), ("recipe-tinybert-loss", "5: one loss per signal off"),
                ("recipe-half-heads", "half the heads pruned"), ("recipe-augmented", "augmented rows added"),
                ("recipe-gradual-ffn", "FFN pruned gradually")]
"""The ``recipe_ablation.py`` variants that change one thing in the search's recipe, and the column each
fills: the five parts turned off, then three changes tried on top of it (the last by ``gradual_pruning.py``)."""


def recipe_parts_section() -> list[str]:
    """The search's recipe with each part off in turn (``recipe_ablation.py`` variants ``recipe*``, at
    equal steps, several seeds): today's recipe's kept share on dev and on the rows that decide, and
    what turning each part off changes in it, seed by seed (mean ± sd of the paired differences)."""
    runs: dict[tuple, dict[str, dict[int, dict]]] = {}
    for key, record in load_results("recipe_ablation").items():
        if record["variant"].startswith("recipe") and "teacher_dev" in record and not is_long_run(record):
            task, candidate, steps, variant, _ = key.split("/")
            runs.setdefault((task, candidate, steps), {}).setdefault(variant, {})[record["seed"]] = record
    runs = {group: variants for group, variants in runs.items() if "recipe" in variants}
    if not runs:
        return []

    lines = ["## The recipe, each part off in turn (`benchmarks/recipe_ablation.py`)", "", note("recipe-parts-intro"), "",
             "| task: shape, steps | teacher dev / decide | today's recipe: kept on dev / decide | "
             + " | ".join(header for _, header in RECIPE_PARTS) + " |",
             "|---|---:|---:|" + "---:|" * len(RECIPE_PARTS)]
    for (task, candidate, steps), variants in sorted(runs.items()):
        today = variants["recipe"]
        any_record = next(iter(today.values()))
        means = [sum(kept_share(r, rows) for r in today.values()) / len(today) for rows in ("dev", "decide")]
        cells = []
        for variant, _ in RECIPE_PARTS:
            seeds = sorted(set(variants.get(variant, {})) & set(today))
            cells.append(" / ".join(mean_and_sd([kept_share(variants[variant][s], rows) - kept_share(today[s], rows) for s in seeds], sign=True)
                                    for rows in ("dev", "decide")) if seeds else "-")
        lines.append(f"| {task}: {candidate}, {steps.split('-')[0]} | {any_record['teacher_dev']:.2f} / "
                     f"{any_record['teacher_decide']:.2f} | {means[0]:.1f}% / {means[1]:.1f}% ({len(today)} seed{'s' if len(today) > 1 else ''}) | "
                     + " | ".join(cells) + " |")
    records = [r for variants in runs.values() for seeds in variants.values() for r in seeds.values()]
    return lines + ["", measured_line(records), "", *recipe_curve_lines(), note("recipe-parts-reading"), ""]


def is_long_run(record: dict) -> bool:
    """Whether a ``recipe_ablation.py`` run was evaluated more than twice (``--eval-every``): a step curve."""
    return len(record.get("curve", ())) > 2


def recipe_curve_lines() -> list[str]:
    """Today's recipe run long on a winning shape, evaluated every so many steps: the kept share on dev
    and on the rows that decide at each evaluation, the mean over the seeds run (the run keeps the best
    on the rows that pick)."""
    groups: dict[tuple, list[dict]] = {}
    for key, record in sorted(load_results("recipe_ablation").items()):
        if record["variant"] == "recipe" and "teacher_dev" in record and is_long_run(record):
            task, candidate, steps = key.split("/")[:3]
            groups.setdefault((task, candidate, steps), []).append(record)
    if not groups:
        return []
    lines = [note("recipe-curve-intro"), "", "| task: shape, seeds | teacher dev / decide | kept on dev / decide at each "
             "evaluation, mean over the seeds (step: dev / decide) |", "|---|---:|---|"]
    for (task, candidate, _), records in groups.items():
        steps = [p["step"] for p in records[0]["curve"]]

        def mean_kept(step: int, rows: str) -> float:
            return sum(kept_share({**r, **next(p for p in r["curve"] if p["step"] == step)}, rows)
                       for r in records) / len(records)

        points = "; ".join(f"{step:,}: {mean_kept(step, 'dev'):.1f}% / {mean_kept(step, 'decide'):.1f}%" for step in steps)
        seeds = ", ".join(str(r["seed"]) for r in records)
        lines.append(f"| {task}: {candidate}, {seeds} | {records[0]['teacher_dev']:.2f} / "
                     f"{records[0]['teacher_decide']:.2f} | {points} |")
    return lines + ["", measured_line(r for group in groups.values() for r in group), ""]


def epoch_cap_section() -> list[str]:
    """What ``--max-epochs E`` would have changed in the runs of recorded searches (``epoch_cap.py``):
    per task, the mean change of the dev share from training on past ``E`` passes, and for the shipped runs."""
    records = load_results("epoch_cap")
    if not records:
        return []
    tasks = sorted({task for record in records.values() for task in record["by_task"]})
    lines = ["## Training past a limit of passes, read again on recorded searches (`benchmarks/epoch_cap.py`)", "",
             "| limit | " + " | ".join([*tasks, "shipped runs", "all"]) + " |", "|---|" + "---:|" * (len(tasks) + 2)]
    for record in sorted(records.values(), key=lambda record: record["epochs"]):
        parts = [record["by_task"].get(task, {"runs": 0}) for task in tasks]
        cells = [f"{part['mean_change']:+.1f}" + (f" ± {part['se']:.1f}" if part.get("se") is not None else "")
                 + f" ({part['runs']})" if part["runs"] else "-" for part in [*parts, record["shipped"], record["all"]]]
        lines.append(f"| {record['epochs']:g} epochs | " + " | ".join(cells) + " |")
    return lines + ["", "Cells: the change of the teacher's dev share kept (points) from the run's latest segment "
                    "within the limit to its latest overall, mean ± standard error (runs).", "",
                    measured_line(records.values()), "", note("epoch-cap-reading"), ""]
