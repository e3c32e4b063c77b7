"""What ``kdbert compress`` writes at the end: ``compress_report.json``, its Markdown and the Pareto
plot of every candidate distilled."""

from __future__ import annotations

from pathlib import Path

from kdbert.compress.breakdown import format_breakdown
from kdbert.compress.schedule import latest
from kdbert.core.atomic_io import write_json
from kdbert.deploy.report import build_table, plot_pareto

REPORT = "compress_report.json"
PLOT = "pareto.png"


def write_report(report: dict, out: Path, runtime: str) -> None:
    write_json(out / REPORT, report)
    plotted = plot_pareto(build_table(plot_records(report)), out / PLOT, latency="onnx_int8",
                          title=f"kdbert compress, {report['task']}: dev score against ms per dev row "
                                f"({runtime}, batch 1)")
    (out / "compress_report.md").write_text(format_report(report, PLOT if plotted else None))


def seconds_per_candidate(searched: dict) -> dict[str, float]:
    """Wall seconds each candidate's distillation took, over all its segments."""
    seconds: dict[str, float] = {}
    for row in searched["segments"]:
        seconds[row["candidate"]] = round(seconds.get(row["candidate"], 0.0) + row["seconds"], 1)
    return seconds


def last_runs(report: dict) -> dict[str, dict]:
    """Each distilled candidate's segment with the most steps (in a report of the engine before the
    study, recorded in BENCHMARKS.md: its run in the last round it reached)."""
    searched = report["search"]
    if "segments" not in searched:
        return {row["candidate"]: {**row, "score": row["selection_score"]} for rows in searched["rounds"] for row in rows}
    return latest([{**row, "state": "done"} for row in searched["segments"]])


def recipe_line(run_report: dict) -> str:
    """What a run trained with, from its ``distill_report.json``: each stage's loss terms (weight *
    loss(student's output, teacher's)), the temperature where a term softens by it (soft
    cross-entropy, KL; not a regression's MSE), its optimiser, rate, batch and schedule, and the
    decay of its weights' moving average where that is what was scored, whether its word embeddings
    were kept as they started (``frozen``); and what the head reads
    where the student records a pooling (``student_pooling``)."""
    loss = run_report.get("loss") or {}
    temperature = run_report.get("temperature", loss.get("temperature"))
    stages = []
    for stage in run_report["stages"]:
        terms = " + ".join(term.split(": ", 1)[1] for term in run_report["matches"].get(stage["name"], ()))
        softened = temperature and any(loss in terms for loss in ("soft_cross_entropy(", "kl_div("))
        stages.append(f"{stage['name']}: {terms}" + (f" at T={temperature:g}" if softened else "")
                      + f"; {stage['optimizer']} at {stage['learning_rate']:g}, batch {stage['batch_size']}, "
                      f"{stage['schedule']} schedule" + (f" over {stage['max_steps']:,} steps"
                                                         if stage.get("max_steps") and stage["schedule"] != "constant"
                                                         else "")
                      + (f", weights averaged (EMA {stage['ema_decay']:g})" if stage.get("ema_decay") else "")
                      + (", word embeddings kept as they start" if any("word_embeddings" in pattern
                                                                     for pattern in stage.get("frozen", ())) else ""))
    pooling = run_report.get("student_pooling")
    return "; then ".join(stages) + (f"; {pooling} pooling" if pooling else "")


def recipe_lines(report: dict) -> list[str]:
    """One line per recipe the search's candidates trained with (:func:`recipe_line`), naming them, and
    the most passes over their rows they could train (``--max-epochs``) where the search had one;
    reports written before segments recorded it: none."""
    by_recipe: dict[str, list[str]] = {}
    for name, run in sorted(last_runs(report).items()):
        if run.get("recipe"):
            by_recipe.setdefault(run["recipe"], []).append(name)
    if not by_recipe:
        return []
    epochs = report.get("max_epochs")
    limit = [f"- at most {epochs:g} passes over its rows for each candidate cut from the teacher or brought "
             "(--max-epochs)"] if epochs else []
    return ["", "Recipes (from each run's distill_report.json):", "",
            *(f"- {', '.join(names)}: {recipe}" for recipe, names in by_recipe.items()), *limit]


def plot_records(report: dict) -> list[dict]:
    """:func:`kdbert.deploy.report.build_table` records of the teacher and every distilled candidate:
    dev score (PyTorch) against the deployed latency per dev row; the latency axis says ORT int8
    for either runtime's figure."""
    speed = report["speed"]
    records = [{"name": "teacher", "task": report["task"], "score": report["teacher_scores"]["dev"],
                "teacher": True, "params": speed["teacher"]["params_total"],
                "latency_onnx_int8_ms": speed["teacher"]["latency_real_p50_ms"]}]
    for name, run in last_runs(report).items():
        row = speed["candidates"][name]
        records.append({"name": name, "task": report["task"], "score": run["dev_score"], "teacher": False,
                        "params": row["params_total"], "latency_onnx_int8_ms": row["latency_real_p50_ms"]})
    return records


def unseen_sources_line(unseen: dict[str, int], dev_rows: int) -> str:
    """What a task's held-out rows cannot stand in for: dev's rows from sources no training row comes
    from (:func:`kdbert.data.held_out.unseen_sources`)."""
    rows = sum(unseen.values())
    return (f"{rows} of dev's {dev_rows} rows come from sources the training file lacks ("
            + ", ".join(f"{name}: {count}" for name, count in sorted(unseen.items())) + "); no held-out row can "
            "stand in for them, so the kept share on the rows that decide speaks for the others, and dev's can "
            "differ from it by what the student keeps on those")


def phrases_line(facts: dict) -> str | None:
    """What a search whose training rows are mostly phrases of its sentences (held out as whole rows,
    :func:`kdbert.data.held_out.whole_rows`) lacks when it was given no ``--unlabelled`` rows: text
    like the rows it is scored on; None otherwise, and for a report written before the count was kept."""
    if facts.get("rule") != "whole rows" or facts.get("unlabelled_rows") != 0:
        return None
    return ("most training rows are phrases of its other rows, where the rows that decide (and dev's) are whole "
            "sentences: unlabelled sentences of the task's kind, given as --unlabelled, are what lifted SST-2's "
            "students there most in 30- and 45-minute searches, while in 8-minute ones their labelling cost more "
            "steps than they gave (docs/compress.md, \"Text like the rows that decide\")")


FEW_PAIRS = 10_000  # a pair task with fewer training rows is told about mined pairs


def few_pairs_line(facts: dict) -> str | None:
    """What a pair task with few training rows and no ``--unlabelled`` rows can add: pairs mined from
    any text (``kdbert mine-pairs``); None otherwise, and for a report written before the counts were kept."""
    if facts.get("texts") != 2 or facts.get("unlabelled_rows") != 0 or facts.get("train_rows", FEW_PAIRS) >= FEW_PAIRS:
        return None
    return (f"only {facts['train_rows']:,} training pairs and no --unlabelled rows: sentence pairs mined from any "
            "text (`kdbert mine-pairs`), labelled by the teacher, lifted MRPC's students by 1-2 points of kept "
            "(docs/compress.md, \"Text like the rows that decide\")")


def advice_lines(facts: dict) -> list[str]:
    """What text the search could add, where its rows say so (:func:`phrases_line`, :func:`few_pairs_line`)."""
    return [line for line in (phrases_line(facts), few_pairs_line(facts)) if line]


def unlabelled_line(facts: dict) -> str | None:
    """What every candidate read besides the training rows: the ``--unlabelled`` rows the teacher
    labelled, and from which epoch (``--unlabelled-from-epoch``); None without them."""
    if not facts.get("unlabelled_rows"):
        return None
    epoch = facts.get("unlabelled_from_epoch", 0)
    return (f"every candidate also trained on {facts['unlabelled_rows']:,} rows without labels (--unlabelled), "
            "labelled by the teacher" + (f", from its epoch {epoch + 1} on (the earlier epochs read the labelled "
                                         "rows alone)" if epoch else ""))


def held_out_lines(report: dict) -> list[str]:
    """Where the held-out rows came from and how they split, and the kept share the shipped graph
    shows on the rows that decide (with the checks that led to it); reports written before the
    rows were split say what they knew."""
    saw, shipped = report.get("teacher_saw_held_out_rows"), report["shipped"]
    if "decide_rows" not in report:
        return [] if saw is None else [
            f"{report['held_out_rows']} training rows held out to pick on; the teacher was fine-tuned "
            + ("on them too, so its held-out score is optimistic." if saw else "without them."), ""]
    facts, teacher = report["held_out"], report["teacher_scores"]
    lines = [f"{report['held_out_rows'] + report['decide_rows']} training rows held out ({facts['source']}"
             + (f"; drawn {facts['rule']}" if facts.get("rule") else "") + "), which the teacher "
             + ("trained on too (--teacher-trained-on-all-rows), so every kept share reads high" if saw
                else "never trained on")
             + f": {report['held_out_rows']} pick checkpoints and promote candidates, {report['decide_rows']} decide "
             "the winner and its kept share."
             + (" The teacher's own checkpoint was picked on all of them (its held_out.json predates the record of "
                "the rows that decide), so its score on the deciding rows reads high and the kept share there low."
                if facts.get("teacher_picked_on_deciding_rows") else "")
             + (f" {unseen_sources_line(facts['dev_sources_unseen'], facts['dev_rows'])}."
                if facts.get("dev_sources_unseen") else "")
             + "".join(f" {line[0].upper()}{line[1:]}." for line in advice_lines(facts))
             + (f" {unlabelled_line(facts)[0].upper()}{unlabelled_line(facts)[1:]}." if unlabelled_line(facts) else ""),
             ""]
    checks = shipped["checks"]
    lines += [f"As shipped ({report['runtime']}), on the rows that decide: {shipped['decide_score']:.2f} ± "
              f"{shipped['decide_se']:.2f} against the teacher's {teacher['decide']:.2f} ± {teacher['decide_se']:.2f}"
              f" (PyTorch): **{100 * shipped['kept_decide']:.1f}% kept**, "
              + ("keeping" if shipped["keeps"] else "short of") + f" {report['target']['min_kept']:g}"
              + (" (a shortfall within" if shipped["keeps"] else " beyond") + " the "
              + ("paired " if shipped.get("margin_kind") == "paired" else "") + f"noise margin "
              f"{shipped['margin']:.2f}" + (" counts as keeping)" if shipped["keeps"] else "")
              + "; standard errors are bootstrap estimates over those rows"
              + (", the paired margin the standard error of the student's score less the line, both scored on"
                 " the same resamples." if shipped.get("margin_kind") == "paired" else ".")]
    spare = report.get("spare_training") or {}
    if len(checks) > 1:
        lines[-1] += (" Each shipped graph checked there, best-ranked first: "
                      + "; ".join(f"{_checked_name(c, spare)} {c['decide_score']:.2f} ({100 * c['kept']:.1f}% kept, "
                                  + ("keeps" if c["keeps"] else "short") + _check_speed(c) + ")" for c in checks)
                      + f"; shipped: {_checked_name(report['winner'], spare)}.")
    if spare.get("trained"):
        lines[-1] += " " + spare_line(spare)[0].upper() + spare_line(spare)[1:] + "."
    if "gap_se" in shipped:
        lines += ["", gap_line(shipped)]
    return lines + [""]


def gap_line(shipped: dict) -> str:
    """Whether the shipped graph's kept share on dev and on the rows that decide differ by more than
    their draws: the gap against twice its standard error (``gap_se``, the two sets drawn apart), a
    two-sided test at about 5%."""
    gap = 100 * (shipped["kept_dev"] - shipped["kept_decide"])
    noise = 100 * shipped["gap_se"]
    line = (f"Dev against the rows that decide: {100 * shipped['kept_dev']:.1f}% ± {100 * shipped['kept_dev_se']:.1f} "
            f"against {100 * shipped['kept_decide']:.1f}% ± {100 * shipped['kept_decide_se']:.1f} kept (bootstrap "
            f"standard errors of each share), a gap of {gap:+.1f} points ")
    if abs(gap) <= 2 * noise:
        return line + (f"within twice its standard error ({noise:.1f}, the two sets drawn apart): they agree, and "
                       "dev's figure is one to expect on new rows like the ones that decide.")
    return line + (f"beyond twice its standard error ({noise:.1f}, the two sets drawn apart): they differ by more "
                   "than their draws, and the lower one is the figure to expect on new text.")


def _checked_name(row: dict, spare: dict) -> str:
    """A check's or the winner's candidate, "(trained on)" where it is the run of the finishing's spare
    time (``spare``: the report's ``spare_training``)."""
    return row["candidate"] + (" (trained on)" if spare.get("run") and row.get("run") == spare["run"] else "")


def spare_line(summary: dict) -> str:
    """The one line the progress prints of the spare time."""
    name = summary["candidate"]
    if not summary["trained"]:
        return f"spare time: {name} not trained on: {summary['why']}"
    line = (f"spare time: {name} trained on from step {summary['from_steps']:,} to {summary['steps']:,} in "
            f"{summary['seconds']:.0f} s (held-out score {summary['score_before']:.2f} -> {summary['score']:.2f})")
    if "kept" in summary:
        line += f"; kept on the rows that decide {summary['kept_before']:.1%} -> {summary['kept']:.1%}"
    return f"{line}: {'shipped' if summary['shipped'] else 'not shipped'} ({summary['why']})"


def _check_speed(check: dict) -> str:
    """A check's speed as shipped (reports written before the check timed it say nothing)."""
    if check.get("speedup") is None:
        return ""
    again = " (the mean of two timings: the first missed by little)" if check.get("timings", 1) > 1 else ""
    return f", {check['speedup']:.2f}x{again}" + ("" if check["fast_enough"] else ", too slow as shipped")


def short_of_target(report: dict) -> str:
    """A sentence where the shipped graph, timed again, runs below the ``--target-speedup`` asked
    (the search admitted it on its export's timing with untrained weights, against a teacher timed
    then, and no graph checked as shipped ran at it); empty otherwise."""
    shipped, target = report["shipped"], (report.get("target") or {}).get("speedup")
    if not target or "speedup_random_weights" not in shipped or shipped["speedup"] >= target:
        return ""
    timed = [check for check in shipped.get("checks", []) if check.get("speedup") is not None]
    return (f" Timed again as shipped it runs at {shipped['speedup']:.2f}x, short of the {target:g}x asked: the "
            f"search admitted it at {shipped['speedup_random_weights']:.2f}x (its export with untrained weights, "
            f"the teacher at {report['speed']['teacher']['latency_real_p50_ms']:.2f} ms then, "
            f"{shipped['teacher_latency_real_p50_ms']:.2f} ms now)"
            + (f", and none of the {len(timed)} graphs checked ran at it as shipped" if timed else "")
            + "; on a busy machine a candidate timed near the target can ship below it, and `--target-speedup` a "
            "little higher leaves it room.")


def at_fastest_threads(report: dict) -> str:
    """A sentence with the winner's speedup when each model runs at its own fastest thread count
    (:func:`kdbert.compress.breakdown.each_at_its_fastest`), where that is not the count the search
    timed; with a ``--target-speedup`` it misses there, how to hold the search to that teacher."""
    fastest = report["shipped"].get("each_at_its_fastest")
    if not fastest or fastest["teacher_threads"] == fastest["winner_threads"] == fastest["timed_threads"]:
        return ""
    target = (report.get("target") or {}).get("speedup")
    short = bool(target) and fastest["speedup"] < target
    return (f" Each at its fastest thread count here (the teacher at {fastest['teacher_threads']}, the winner at "
            f"{fastest['winner_threads']}: {fastest['teacher_ms']:.2f} against {fastest['winner_ms']:.2f} ms), "
            f"it runs at {fastest['speedup']:.2f}x"
            + (f", short of the {target:g}x asked" if short else "")
            + (f"; `--timing-threads {fastest['teacher_threads']}` holds the search to the teacher at its fastest"
               if short and fastest["teacher_threads"] != fastest["timed_threads"] else "") + ".")


def format_report(report: dict, plot: str | None = None) -> str:
    """The report as Markdown: the winner, then every candidate timed (and distilled). Reports
    written before a figure existed (the trained export's timing, agreement, time per candidate,
    the method per run: logit KD then) render without it."""
    shipped, speed = report["shipped"], report["speed"]
    finals = last_runs(report)
    seconds = report.get("seconds_per_candidate", {})
    teacher_ms = shipped.get("teacher_latency_real_p50_ms", speed["teacher"]["latency_real_p50_ms"])
    threads = f" at {speed['settings']['threads']} thread(s)" if "threads" in speed.get("settings", {}) else ""
    turns = f", timed in turns with the teacher {len(shipped['timed_in_turns'])} times" if "timed_in_turns" in shipped else ""
    timed = (f" (trained export, {shipped['latency_real_p50_ms']:.2f} against {teacher_ms:.2f} ms{turns})"
             if "latency_real_p50_ms" in shipped else "")
    gain = (f", {100 * shipped['gain_kept_dev']:.1f}% of the gain over the majority class {shipped['majority_dev']:.2f}"
            if shipped["gain_kept_dev"] is not None else "")
    agreement_text = (f"; agreement with the teacher on dev: {shipped['agreement_dev']:.1f} "
                      f"({shipped['agreement_measure']})" if "agreement_dev" in shipped else "")
    deployed = (f" (the teacher in {report['runtime']}: {report['teacher_scores']['dev_deployed']:.2f})"
                if report["teacher_scores"].get("dev_deployed") is not None else "")
    lines = [f"# kdbert compress: {report['task']}, {report['runtime']}", "",
             *held_out_lines(report),
             f"Winner: **{report['winner']['candidate']}** ({report['winner']['rule']}): "
             f"{shipped['speedup']:.2f}x the teacher's speed on dev rows{threads}{timed}, "
             f"dev score {shipped['dev_score']:.2f} "
             f"against {report['teacher_scores']['dev']:.2f}{deployed} ({100 * shipped['kept_dev']:.1f}% kept{gain})"
             f"{agreement_text}.{short_of_target(report)}{at_fastest_threads(report)}", "",
             "| model | ms / dev row (p50) | speedup | held-out score | dev score (PyTorch) | method | steps "
             "| distillation time |",
             "|---|---:|---:|---:|---:|---|---:|---:|",
             f"| teacher | {speed['teacher']['latency_real_p50_ms']:.2f} | 1.00x | "
             f"{report['teacher_scores']['held_out']:.2f} | {report['teacher_scores']['dev']:.2f} | - | - | - |"]
    starts = report.get("starts", {})
    risks = report.get("ship_risk") or {}
    deciding = "decide_rows" in report
    if deciding:  # the rows that decide: a column of their own
        lines[-3:] = [lines[-3].replace("| held-out score |", "| held-out score (picks) | decides |"),
                      lines[-2].replace("---:|---:|---|", "---:|---:|---:|---|", 1),
                      lines[-1].replace(f"{report['teacher_scores']['held_out']:.2f} |",
                                        f"{report['teacher_scores']['held_out']:.2f} | "
                                        f"{report['teacher_scores']['decide']:.2f} |", 1)]
    for name, row in sorted(speed["candidates"].items(), key=lambda item: item[1]["latency_real_p50_ms"]):
        run = finals.get(name)
        start = starts.get(name, "teacher-weights")
        method = run.get("method", "kd") + ("" if start in ("teacher-weights", "own") else f", {start} start") \
            if run else ""
        notes = ([f"in turns; {row['speedup_alone']:.2f}x alone"] if "speedup_alone" in row else []) + (
            [f"ship risk: {risks[name]:.0%} to ship at the target"] if name in risks else [])
        retimed = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"| {name} | {row['latency_real_p50_ms']:.2f} | {row['speedup']:.2f}x{retimed} | "
                     + (f"{run['score']:.2f} | " + (f"{run['decide_score']:.2f} | " if deciding else "")
                        + f"{run['dev_score']:.2f} | {method} | "
                        f"{run['steps']} | " + (f"{seconds[name] / 60:.1f} min |" if name in seconds else "- |")
                        if run else "- | " * (6 if deciding else 5)).rstrip())
    lines += recipe_lines(report)
    lines += [line for note in report.get("candidate_notes") or () for line in ("", f"{note[0].upper()}{note[1:]}.")]
    general = report.get("general_students")
    if general:
        started = sorted(name for name, start in starts.items() if start == "general")
        lines += ["", f"{', '.join(started) or 'No candidate'} started from the general students built from "
                      f"{general['base']} for {general['minutes']:.0f} min ({general['steps']} steps; "
                      f"`kdbert students build`); the other BERT-style candidates from the teacher's weights."]
    if report.get("augmentation"):
        facts = report["augmentation"]
        sources = facts.get("augmented_rows", facts["input_rows"])
        lines += ["", f"Candidates named -aug also trained on {facts['rows']} new versions of "
                      + (f"the first {sources} of the " if sources < facts["input_rows"] else "the ")
                      + f"{facts['input_rows']} training rows (the BiLSTM paper's rules, up to "
                      f"{facts['tries_per_row']} tries a row; the held-out rows not among them)"
                      + (f" and {facts['transfer_rows']} rows of unlabelled text (--transfer-text)"
                         if facts.get("transfer_rows") else "") + ", labelled by the teacher."]
    if report.get("disk"):
        disk = report["disk"]
        lines += ["", f"Disk: the search wrote {disk['written_mb']:.0f} MB and keeps {disk['kept_mb']:.0f} MB "
                      f"(--keep {disk['keep']})."]
    if report.get("speedup_breakdown"):
        lines += ["", "Where the speedup comes from, one change at a time (batch 1, dev rows):", "",
                  *format_breakdown(report["speedup_breakdown"])]
    if plot:
        lines += ["", f"![dev score against latency]({plot})"]
    return "\n".join(lines) + "\n"
