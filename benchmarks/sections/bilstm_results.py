"""BENCHMARKS.md sections of the distilled BiLSTM: its augmenter's throughput, labels only against
distilled against distilled + augmentation (with the vocabulary change beside), the targets it was
fitted to, and its speed against the teacher."""

from __future__ import annotations

from common import load_results
from sections.shared import TASK_ORDER, note

from kdbert.deploy.report import format_mean_std, mean_std


def bilstm_augment_section() -> list[str]:
    results = load_results("bilstm_augment")
    if not results:
        return []
    lines = ["## Distilled BiLSTM augmentation throughput (`kdbert augment --method bilstm`)", "",
             note("bilstm-augment-intro"), "",
             "| setting | input rows | output rows (per example) | tagging | sampling + writing | examples/s | "
             "examples per CPU-s | load | machine | date |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for key, r in sorted(results.items()):
        load = "/".join(f"{x:.1f}" for x in r["load_average_1min_before_after"])
        setting = f"{key.split('_')[0]}, {r['settings']['workers']} tagging process(es)"
        lines.append(f"| {setting} | {r['input_rows']} | {r['output_rows']} ({r['rows_per_example']}) | "
                     f"{r['tagging_seconds']:.0f} s | {r['sampling_and_writing_seconds']:.0f} s | "
                     f"{r['examples_per_second']:.0f} | {r['examples_per_cpu_second']:.0f} | {load} | "
                     f"{r['machine']} | {r['date']} |")
    if any(max(r["load_average_1min_before_after"]) > 2 for r in results.values()):
        lines += ["", "Rows with a load above 2 ran while other jobs shared the 2 cores: their wall-clock figures "
                  "(and the worth of a second tagging process) understate an idle machine."]
    lines += ["", "Command: `python benchmarks/bilstm_augment.py` (and `--workers 2`); results in "
              "`benchmarks/results/bilstm_augment.json`.", ""]
    return lines


def bilstm_distill_section() -> list[str]:
    results = load_results("bilstm_distill")
    runs = [{"optimizer": "adadelta", **r} for k, r in results.items() if k.count("/") == 2]
    if not runs:
        return []
    lines = ["## Distilled BiLSTM: labels only vs distilled vs distilled + augmentation (dev)", "",
             note("bilstm-distill-intro"), "",
             "| task | optimizer | teacher | labels only | distilled | distilled + aug | "
             "share kept (distilled + aug) | "
             "rows (aug rows, n_iter) | epochs (aug) | seeds | date |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    groups = sorted({(r["task"], r["optimizer"]) for r in runs}, key=lambda g: (TASK_ORDER.index(g[0]), g[1]))
    verdicts = []
    for task, optimizer in groups:
        mine = [r for r in runs if r["task"] == task and r["optimizer"] == optimizer]
        teacher = results[f"{task}/teacher"]["score"]
        scores = {v: [r["score"] for r in mine if r["variant"] == v] for v in ("labels", "kd", "kd_aug")}
        by_variant = {r["variant"]: r for r in mine}
        # the kd_aug runs name their augmented file's record; older runs used {task}/augment
        aug = results.get(by_variant.get("kd_aug", {}).get("augment", {}).get("record", f"{task}/augment"), {})
        share = f"{100 * mean_std(scores['kd_aug'])[0] / teacher:.1f}%" if scores["kd_aug"] else "-"
        seeds = sorted({r["seed"] for r in mine})
        lines.append(
            f"| {task} | {optimizer} | {teacher:.1f} | " + " | ".join(format_mean_std(scores[v]) if scores[v] else "-"
                                                                  for v in ("labels", "kd", "kd_aug"))
            + f" | {share} | {by_variant['labels']['train_rows'] if 'labels' in by_variant else '-'} "
            f"({aug.get('output_rows', '-')}, {aug.get('n_iter', '-')}) | "
            f"{by_variant['labels']['epochs'] if 'labels' in by_variant else '-'} "
            f"({by_variant['kd_aug']['epochs'] if 'kd_aug' in by_variant else '-'}) | "
            f"{', '.join(map(str, seeds))} | {mine[0]['date']} |")
        means = {v: mean_std(scores[v])[0] for v in scores if scores[v]}
        if "labels" in means and len(means) > 1:
            gains = "; ".join(f"{name} {means[v] - means['labels']:+.1f} points" for v, name in
                              (("kd", "distilled"), ("kd_aug", "distilled + augmentation")) if v in means)
            verdicts.append(f"- {task}, {optimizer}: over the labels-only BiLSTM: {gains}.")
    lines += [""] + verdicts + [
        note("bilstm-distill-budget")]
    for key in sorted(k for k in results if k.endswith("/teacher")):
        teacher = results[key]
        if teacher.get("finetune"):
            lines.append(f"- {teacher['task']} teacher: all-MiniLM-L6-v2, `kdbert finetune` with "
                         + ", ".join(f"{k} {v}" for k, v in teacher["finetune"].items() if v is not None)
                         + f" (`{teacher['teacher']}`).")
    losses = [r for r in runs if r.get("train_loss")]
    if losses:
        lines += ["", "Training loss, first logged (step 20) -> mean of the last five logged (every 20 steps), seed "
                  f"{losses[0]['seed']}: " + "; ".join(
                      f"{r['task']} {r['optimizer']} {r['variant']} {r['train_loss']['first']:.2f} -> "
                      f"{r['train_loss']['last5']:.2f}" for r in losses if r["seed"] == losses[0]["seed"]) + "."]
    lines += bilstm_paper_lines(results, runs)
    lines += bilstm_targets_lines(results)
    lines += ["", note("bilstm-adadelta")]
    lines += ["", f"Machine: {runs[0]['machine']}, one thread per run. Command: `OMP_NUM_THREADS=1 python "
              "benchmarks/bilstm_distill.py --tasks T --seeds S [--optimizer adamw]`; every run's full command is "
              "in `benchmarks/results/bilstm_distill.json`.", ""]
    lines += bilstm_v2_lines(results)
    lines += bilstm_speed_lines(results)
    return lines


BILSTM_VARIANTS = (("labels", "labels only"), ("kd", "distilled"), ("kd_aug", "distilled + aug"))


def _bilstm_groups(results: dict) -> dict[tuple[str, str], dict[str, list[dict]]]:
    """The runs of a bilstm_distill results file by (task, setting), then variant. A setting is named by
    its ``kd_aug`` tag (e.g. ``-h300-png0``; empty: the recorded settings); its ``labels`` and ``kd`` runs
    carry the tag without the ``-png`` part, which only the augmentation has. Records made before the
    ``setting`` field have their tag in the key only."""
    runs = [{"setting": key.split("/")[1].removeprefix(r["variant"]), **r}
            for key, r in results.items() if key.count("/") == 2]
    augmented = {(r["task"], r["setting"]) for r in runs if r["variant"] == "kd_aug"}
    covered = {(task, tag.split("-png")[0]) for task, tag in augmented}
    settings = augmented | {(r["task"], r["setting"]) for r in runs if r["variant"] != "kd_aug"} - covered
    groups = {}
    for task, tag in sorted(settings, key=lambda g: (TASK_ORDER.index(g[0]), g[1])):
        groups[(task, tag)] = {v: [r for r in runs if r["task"] == task and r["variant"] == v
                                   and r["setting"] == (tag if v == "kd_aug" else tag.split("-png")[0])]
                               for v, _ in BILSTM_VARIANTS}
    return groups


def _setting_text(tag: str, group: dict[str, list[dict]]) -> str:
    """``recorded: hidden 150, p_ng 0.25`` or ``-h300-png0: hidden 300, p_ng 0``, from the runs themselves."""
    runs = [r for variant_runs in group.values() for r in variant_runs]
    aug = group["kd_aug"]
    p_ng = f"{aug[0]['augment']['p_ng']:g}" if aug else "-"
    optimizer = "" if runs[0]["optimizer"] == "adadelta" else f", {runs[0]['optimizer']}"
    return (f"{f'`{tag}`' if tag else 'recorded'}: hidden {runs[0]['student']['config']['hidden_size']}, "
            f"p_ng {p_ng}{optimizer}")


# The vocabulary rules a student's report names: (its dev_oov_rate key, its vocab_sources key, what the
# table calls it). Until 0305e56 the dev words with a vector joined; since, the word vectors' most frequent
# words (--frequent-words) join and a dev-only word stays [UNK].
OOV_RULES = (("with dev words", "dev with a vector", "with dev words (old rule)"),
             ("with frequent vector words", "frequent vector words", "with frequent vector words"))


def _oov_rule(student: dict) -> tuple[str, str, str] | None:
    """The entry of :data:`OOV_RULES` whose rate the student's report holds (None: no dev OOV rate,
    or a rule this table does not know)."""
    rate = student.get("dev_oov_rate", {})
    return next((rule for rule in OOV_RULES if rule[0] in rate), None)


def _oov_text(group: dict[str, list[dict]]) -> str:
    """The dev OOV rate with the training words only -> with the student's whole vocabulary, named by
    the rule that built it (:data:`OOV_RULES`: the dev words that have a vector, in records made before
    the change, or the word vectors' frequent words), and how many words that rule added; the augmented
    runs' apart when their vocabulary (built from the augmented file) differs from the others'."""
    def text(runs: list[dict]) -> str | None:
        students = [r["student"] for r in runs if "dev_oov_rate" in r["student"]]
        if not students:
            return None
        rate = students[0]["dev_oov_rate"]
        train = f"{100 * rate['train words only']:.1f}%"
        rule = _oov_rule(students[0])
        if rule is None:
            return f"{train} with the training words only"
        key, source, label = rule
        added = students[0].get("vocab_sources", {}).get(source)
        return f"{train} -> {100 * rate[key]:.1f}% {label}" + ("" if added is None else f" (+{added:,} words)")

    plain = text(group["labels"] + group["kd"])
    augmented = text(group["kd_aug"])
    if plain and augmented and augmented != plain:
        return f"{plain}; augmented file: {augmented}"
    return plain or augmented or "-"


def _bilstm_cells(group: dict[str, list[dict]], teacher: float) -> list[str]:
    """labels only, distilled, distilled + aug (mean ± std, n) and the share of the teacher kept by the last."""
    scores = {v: [r["score"] for r in group[v]] for v, _ in BILSTM_VARIANTS}
    cells = [format_mean_std(scores[v]) if scores[v] else "-" for v, _ in BILSTM_VARIANTS]
    return cells + [f"{100 * mean_std(scores['kd_aug'])[0] / teacher:.1f}%" if scores["kd_aug"] else "-"]


def _mean(runs: list[dict]) -> float | None:
    """The runs' mean score; ``None`` without runs."""
    return mean_std([r["score"] for r in runs])[0] if runs else None


def bilstm_v2_lines(old_results: dict) -> list[str]:
    """The BiLSTM after the vocabulary changes (``bilstm_distill_v2.json``): per task and setting the
    three variants, with the same keys' rows of ``old_results`` beside them, then whether augmentation
    helps on STS-B and RTE and each other setting against the recorded one."""
    results = load_results("bilstm_distill_v2")
    groups = _bilstm_groups(results)
    if not groups:
        return []
    old_groups = _bilstm_groups(old_results)
    lines = ["", f"### Distilled BiLSTM with the new vocabulary ([MASK] apart, {_vocab_rules_text(groups)})", "",
             note("bilstm-v2-intro"), "",
             "| task | setting | vocabulary | teacher | labels only | distilled | distilled + aug | "
             "share kept (distilled + aug) | dev OOV: training words -> vocabulary | seeds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (task, tag), group in groups.items():
        teacher = (results.get(f"{task}/teacher") or old_results[f"{task}/teacher"])["score"]
        setting = _setting_text(tag, group)
        seeds = ", ".join(map(str, sorted({r["seed"] for runs in group.values() for r in runs})))
        lines.append(f"| {task} | {setting} | new | {teacher:.1f} | " + " | ".join(_bilstm_cells(group, teacher))
                     + f" | {_oov_text(group)} | {seeds} |")
        old = old_groups.get((task, tag))
        if old:
            old_seeds = ", ".join(map(str, sorted({r["seed"] for runs in old.values() for r in runs})))
            lines.append(f"| {task} | {setting} | before | {old_results[f'{task}/teacher']['score']:.1f} | "
                         + " | ".join(_bilstm_cells(old, old_results[f"{task}/teacher"]["score"]))
                         + f" | - | {old_seeds} |")
    lines += ([""] + _augmentation_verdicts(groups, old_groups) + _setting_comparisons(groups)
              + _five_task_share(results, groups, old_results, old_groups) + _teacher_changes(results, old_results)
              + ["", note("bilstm-v2-reading")])
    runs = [r for k, r in results.items() if k.count("/") == 2]
    dates = sorted({r["date"] for r in runs})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
    return lines + ["", f"Machine: {runs[0]['machine']}, {when}, one thread per run. Command: "
                    "`OMP_NUM_THREADS=1 python benchmarks/bilstm_distill.py --results-name bilstm_distill_v2 "
                    "--tasks T --seeds S [--pair-hidden-size 300 --p-ng 0]`; every run's full command is in "
                    "`benchmarks/results/bilstm_distill_v2.json`.", ""]


def _vocab_rules_text(groups: dict) -> str:
    """What joined the training words in these runs' vocabularies: the dev words with a vector (the
    recorded runs' rule, also when no run reports it), the word vectors' frequent words, or both."""
    rules = {_oov_rule(r.get("student", {})) for group in groups.values() for runs in group.values() for r in runs}
    if OOV_RULES[1] not in rules:
        return "dev words with a vector"
    if OOV_RULES[0] not in rules:
        return "the word vectors' frequent words"
    return "dev words with a vector in the older runs, the word vectors' frequent words in the newer"


def _augmentation_verdicts(groups: dict, old_groups: dict) -> list[str]:
    """STS-B and RTE, where augmentation cost points before: is distilled + aug >= distilled now, and before."""
    lines = []
    for (task, tag), group in groups.items():
        if task not in ("stsb", "rte") or not (group["kd"] and group["kd_aug"]):
            continue
        kd, aug = _mean(group["kd"]), _mean(group["kd_aug"])
        text = (f"- {task} ({_setting_text(tag, group)}): distilled + aug >= distilled: "
                f"{'yes' if aug >= kd else 'no'} ({aug:.1f} against {kd:.1f}, {aug - kd:+.1f})")
        old = old_groups.get((task, tag))
        if old and old["kd"] and old["kd_aug"]:
            was_kd, was_aug = _mean(old["kd"]), _mean(old["kd_aug"])
            text += (f"; before the change: {'yes' if was_aug >= was_kd else 'no'} ({was_aug:.1f} against "
                     f"{was_kd:.1f}, {was_aug - was_kd:+.1f})")
        lines.append(text + ".")
    return lines


def _share_kept(groups: dict, teachers: dict) -> dict[str, float]:
    """Per task, distilled + aug over the teacher's score (recorded setting), where both are known."""
    return {task: _mean(group["kd_aug"]) / teachers[task] for (task, tag), group in groups.items()
            if not tag and group["kd_aug"] and task in teachers}


def _five_task_share(results: dict, groups: dict, old_results: dict, old_groups: dict) -> list[str]:
    """The mean share of the teacher kept by distilled + aug over the tasks both tables have, new
    against before (each table against its own teachers)."""
    def teachers(records: dict) -> dict[str, float]:
        return {key.split("/")[0]: r["score"] for key, r in records.items() if key.endswith("/teacher")}

    new = _share_kept(groups, {**teachers(old_results), **teachers(results)})
    old = _share_kept(old_groups, teachers(old_results))
    tasks = [task for task in TASK_ORDER if task in new and task in old]
    if len(tasks) < 2:
        return []
    def mean(shares: dict[str, float]) -> float:
        return 100 * sum(shares[task] for task in tasks) / len(tasks)

    return [f"- Mean share of the teacher kept by distilled + aug over {', '.join(tasks)} (recorded setting): "
            f"{mean(new):.1f}% with the new vocabulary against {mean(old):.1f}% before."]


def _teacher_changes(results: dict, old_results: dict) -> list[str]:
    """Where the new rows' teacher was fine-tuned again with other settings or scores differently:
    both teachers, so that a gain in the distilled columns is not read as the vocabulary's alone."""
    def described(record: dict) -> str:
        settings = record.get("finetune")
        if not settings:  # a record without its fine-tuning settings
            return f"{record['score']:.2f}"
        rows = f"{settings['max_train_examples']:,} rows" if settings.get("max_train_examples") else "every row"
        precision = {"bf16": "bf16", "no": "float32", None: "precision not recorded"}[settings.get("precision")]
        epochs = f"{settings['epochs']:g} epoch{'' if settings['epochs'] == 1 else 's'}"
        return f"{record['score']:.2f} ({rows}, {epochs}, {precision})"

    lines = []
    for task in TASK_ORDER:
        new, old = results.get(f"{task}/teacher"), old_results.get(f"{task}/teacher")
        if new and old and described(new) != described(old):
            lines.append(f"- {task}: the new rows' teacher scores {described(new)}, the old rows' {described(old)}; "
                         "the labels-only column does not use a teacher.")
    return lines


def _setting_comparisons(groups: dict) -> list[str]:
    """Per task with the recorded setting and another (e.g. the authors' pair configs): each variant's
    mean in the other setting against the recorded one."""
    lines = []
    for (task, tag), group in groups.items():
        recorded = groups.get((task, ""))
        if not tag or not recorded:
            continue
        parts = [f"{name} {_mean(group[v]):.1f} against {_mean(recorded[v]):.1f} "
                 f"({_mean(group[v]) - _mean(recorded[v]):+.1f})"
                 for v, name in (BILSTM_VARIANTS[2], *BILSTM_VARIANTS[:2])
                 if group[v] and recorded[v] and group[v] != recorded[v]]  # not the same runs of both
        if parts:
            lines.append(f"- {task} ({_setting_text(tag, group)}) against the recorded setting: "
                         + "; ".join(parts) + ".")
    return lines


def bilstm_paper_lines(results: dict, runs: list[dict]) -> list[str]:
    """Against the paper (Tang et al. 2019: distillation + augmentation gains several points over
    the BiLSTM trained on labels): per task with all three variants under Adadelta, the gain of
    each over labels only, called a gain or a loss only when larger than the larger std."""
    lines = ["", note("bilstm-paper"), ""]
    found = False
    for task in TASK_ORDER:
        scores = {v: [r["score"] for r in runs if r["task"] == task and r["optimizer"] == "adadelta"
                      and r["variant"] == v] for v in ("labels", "kd", "kd_aug")}
        if not all(len(scores[v]) >= 2 for v in scores):
            continue
        found = True
        stats = {v: mean_std(scores[v]) for v in scores}
        noise = max(std for _, std in stats.values())

        def verdict(variant: str) -> str:
            gain = stats[variant][0] - stats["labels"][0]
            word = "gain" if gain > noise else "loss" if gain < -noise else "within noise"
            return f"{gain:+.1f} ({word})"

        teacher = results[f"{task}/teacher"]["score"]
        lines.append(f"- {task} (teacher {teacher:.1f}, labels only {stats['labels'][0]:.1f}): distilled "
                     f"{verdict('kd')}, distilled + augmentation {verdict('kd_aug')}; noise = the largest std, "
                     f"{noise:.1f}.")
    return lines + ["", note("bilstm-why")] if found else []


def bilstm_targets_lines(results: dict) -> list[str]:
    """What each student was fitted to: the teacher's targets on the original and the augmented
    rows beside the dev set's gold labels (``{task}/targets``)."""
    records = [results[f"{t}/targets"] for t in TASK_ORDER if f"{t}/targets" in results]
    if not records:
        return []

    def cell(summary: dict | None) -> str:
        if not summary:
            return "-"
        if "mean" in summary:
            return f"score {summary['mean']:.2f} ± {summary['std']:.2f} ({summary['rows']} rows)"
        shares = " / ".join(f"{label} {100 * share:.0f}%" for label, share in summary["share"].items())
        return f"{shares} ({summary['rows']} rows)"

    lines = ["", "What the students were fitted to: the teacher's targets (its predicted class, or its score for "
             "STS-B) on the distinct original and augmented training rows, beside the dev set's gold labels:", "",
             "| task | teacher on original rows | teacher on augmented rows | dev gold labels |", "|---|---|---|---|"]
    for record in records:
        lines.append(f"| {record['task']} | {cell(record.get('original rows'))} | "
                     f"{cell(record.get('augmented rows'))} | {cell(record.get('dev (gold)'))} |")
    return lines


def bilstm_speed_lines(results: dict) -> list[str]:
    """One row per task: the ``kd_aug`` student (seed 42) against its teacher in PyTorch fp32 and,
    both exported, in ONNX Runtime int8 (``{task}/bench``, ``{task}/bench-int8``)."""
    tasks = [t for t in TASK_ORDER if f"{t}/bench" in results or f"{t}/bench-int8" in results]
    if not tasks:
        return []
    lines = ["### BiLSTM vs teacher speed (`kdbert bench`)", "",
             "| task | params student / teacher | FLOPs ratio | PyTorch fp32 batch 1: student / teacher (speedup) "
             "| ONNX int8 batch 1: student / teacher (speedup) | int8 batch-32 throughput speedup "
             "| student dev: PyTorch -> int8 | seq len | load | date |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def latency(record: dict | None) -> str:
        if not record:
            return "-"
        teacher, student = record["rows"]
        return (f"{student['latency_median_ms']:.2f} / {teacher['latency_median_ms']:.1f} ms "
                f"({teacher['latency_median_ms'] / student['latency_median_ms']:.1f}x)")

    for task in tasks:
        fp32, int8 = results.get(f"{task}/bench"), results.get(f"{task}/bench-int8")
        teacher, student = (fp32 or int8)["rows"]
        throughput = (f"{int8['rows'][1]['throughput'] / int8['rows'][0]['throughput']:.1f}x" if int8 else "-")
        dev = (f"{int8['student_dev']['pytorch']['score']:.1f} -> {int8['student_dev']['onnx_int8']['score']:.1f}"
               if int8 else "-")
        loads = "/".join(f"{r['load_average']:.1f}" for r in (fp32, int8) if r)
        lines.append(f"| {task} | {student['params_total'] / 1e3:.0f}K / {teacher['params_total'] / 1e6:.1f}M | "
                     f"{student['flops_per_example'] / teacher['flops_per_example']:.3f} | {latency(fp32)} | "
                     f"{latency(int8)} | {throughput} | {dev} | {student['seq_len']} | {loads} | "
                     f"{(int8 or fp32)['date']} |")
    example = results.get(f"{tasks[0]}/bench-int8") or results[f"{tasks[0]}/bench"]
    lines += ["", note("bilstm-speed-reading"),
              f"Commands (first task): `{example['command']}`"
              + (f", after `{example['exports'][0]}` and `{example['exports'][1]}`" if "exports" in example else "")
              + "; all from `benchmarks/bilstm_distill.py`.", ""]
    return lines


def bilstm_vectors_section() -> list[str]:
    """GloVe against vectors read off an encoder, the same BiLSTM run otherwise (``bilstm_vectors.py``)."""
    results = load_results("bilstm_vectors")
    if not results:
        return []
    lines = ["## Distilled BiLSTM: GloVe against word vectors read off an encoder (`benchmarks/bilstm_vectors.py`)", "",
             note("bilstm-vectors-intro"), "",
             "| task | vectors | size | words (with a vector) | held-out / dev at each evaluation | training |",
             "|---|---|---:|---:|---|---:|"]
    for key, r in sorted(results.items(), key=lambda item: (TASK_ORDER.index(item[0].split("/")[0]), item[0])):
        task, vectors = key.split("/", 1)
        scores = ", ".join(f"{e['held_out']:.2f} / {e['dev']:.2f} ({e['step']:,})" for e in r["evaluations"])
        lines.append(f"| {task} | {vectors} | {r['embedding_dim']} | {r['vocab_size']:,} "
                     f"({100 * r['type_coverage']:.1f}%) | {scores} | {r['train_seconds']:.0f} s |")
    machines = sorted({f"{r['date']}, {r['machine']}, {r['cpu']['cpu']}, 1 thread" for r in results.values()})
    commands = sorted({r["command"] for r in results.values()})
    return lines + ["", f"Measured {'; '.join(machines)}. Commands: " + "; ".join(f"`{c}`" for c in commands) + ".",
                    "", note("bilstm-vectors-reading"), ""]
