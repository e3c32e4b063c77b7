"""The scoreboard at the top of BENCHMARKS.md: one row per headline result, its value computed from
``benchmarks/results/*.json`` with the machine and date of the records it comes from, beside the
figure the papers publish for the nearest setting, with the command that reproduces it and the
page of its full record.

Only the published figures are typed in here (``PAPERS``), each with its paper and table; the
shares of a teacher they keep are computed from them. A row whose records are missing is left out,
and the section is empty when every row is."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import NamedTuple

from common import load_results
from sections.shared import CURRENT_TRUST_SUFFIXES, GPU_RESULTS, LINK_BASE, current_command, note, page_of

from kdbert.deploy.report import build_table, mean_std

FIVE_TASKS = ["cola", "sst2", "mrpc", "stsb", "rte"]
TASK_NAMES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE"}

PAPERS = {
    # Jiao et al. 2020 (TinyBERT), Table 1: GLUE test, BERT-base teacher; speedup on a K80 GPU.
    "tinybert": {"teacher": {"cola": 52.8, "sst2": 93.4, "mrpc": 87.5, "stsb": 85.2, "rte": 67.0},
                 "student": {"cola": 44.1, "sst2": 92.6, "mrpc": 86.4, "stsb": 80.4, "rte": 66.6},
                 "speedup": 9.4},
    # Sanh et al. 2019 (DistilBERT), Table 1: GLUE dev, medians of 5 runs.
    "distilbert": {"teacher": {"cola": 56.3, "sst2": 92.7, "mrpc": 88.6, "stsb": 89.0, "rte": 69.3},
                   "student": {"cola": 51.3, "sst2": 91.3, "mrpc": 87.5, "stsb": 86.9, "rte": 59.9}},
    # Sanh et al. 2019, Table 2: IMDb test accuracy; SQuAD v1.1 dev EM / F1 (DistilBERT (D)).
    "distilbert_imdb": {"teacher": 93.46, "student": 92.82},
    "distilbert_squad": {"teacher": (81.2, 88.5), "student": (79.1, 86.9)},
    # Sun et al. 2020 (MobileBERT), Table 4: GLUE test; BERT-base and MobileBERT (with the OPT
    # operations), and BERT-base-3L-PKD from Sun et al. 2019 (BERT-PKD).
    "mobilebert": {"teacher": {"cola": 52.1, "sst2": 93.5, "mrpc": 88.9, "stsb": 85.8, "rte": 66.4},
                   "student": {"cola": 50.5, "sst2": 92.8, "mrpc": 88.8, "stsb": 84.4, "rte": 66.2}},
    "pkd3": {"teacher": 93.5, "student": 87.5},  # SST-2
    # Tang et al. 2019 (distilled BiLSTM), Table 1: SST-2 test, BiLSTM on labels and distilled + augmented.
    "bilstm": {"labels": 86.7, "distilled": 90.7},
}

COMPRESS_4X = {"cola": "cola/x4-aug-held-out-teacher", "sst2": "sst2/x4", "mrpc": "mrpc/x4-aug-held-out-teacher",
               "stsb": "stsb/x4-aug-held-out-teacher", "rte": "rte/x4-aug-held-out-teacher"}
"""The `kdbert compress` search per task whose winner the five-task mean at 4x counts (the
reading of the compress section: the searches against teachers without the held-out rows, and
SST-2's only 4x search)."""
COMPRESS_4X_ALL_ON = {task: f"{task}/x4-all-on" for task in COMPRESS_4X}
"""The same searches with general students, augmented twins and Wikipedia transfer text (issue 44)."""
COMPRESS_8X_ALL_ON = {task: f"{task}/x8-all-on" for task in COMPRESS_4X}
"""The same at 8x."""
COMPRESS_GOAL = "sst2/x8"
"""The search that meets the deployment goal (>= 8x the int8 teacher, >= 97% of its dev score)."""
CITED_SEARCHES = {*COMPRESS_4X.values(), *COMPRESS_4X_ALL_ON.values(), *COMPRESS_8X_ALL_ON.values(), COMPRESS_GOAL}
"""The searches the scoreboard cites: their reports stay on the compress page."""


def paper_kept(paper: str, tasks: list[str] = FIVE_TASKS) -> float:
    """The mean over ``tasks`` of a paper's student score over its teacher's, in %."""
    figures = PAPERS[paper]
    return sum(100 * figures["student"][t] / figures["teacher"][t] for t in tasks) / len(tasks)


def where(records: list[dict]) -> str:
    """``machine, date`` (or ``date to date``) of the records a figure comes from."""
    machines = sorted({r["machine"] + (f" ({r['cpu']})" if isinstance(r.get("cpu"), str) else "") for r in records})
    dates = sorted({r["date"] for r in records})
    return f"{'; '.join(machines)}, {dates[0]}" + (f" to {dates[-1]}" if len(dates) > 1 else "")


def glue_rows(variants: list[str], results_dir=None) -> tuple[dict, list[dict]]:
    """The `kdbert report` rows (mean per task, average, share kept) of the teacher and ``variants``
    in ``distill.json`` (of ``results_dir``), as the GLUE tables of the pages compute them, and the
    variants' records."""
    results = load_results("distill", results_dir)
    teachers = {r["task"]: r for r in load_results("teacher_glue", results_dir).values() if not r.get("tuning")}
    runs = [r for r in results.values() if r["variant"] in variants]
    if not runs or not teachers:
        return {}, []
    records = [{"name": "teacher", "teacher": True, "task": t, "score": r["metrics"]["score"]}
               for t, r in teachers.items()]
    records += [{"name": r["variant"], "task": r["task"], "score": r["metrics"]["score"]} for r in runs]
    return {row["name"]: row for row in build_table(records)["rows"]}, runs


class Row(NamedTuple):
    result: str
    ours: str
    published: str  # the paper's figure for the nearest setting, "-" where none
    where: str  # machine, date
    label: str  # what the row's part of its page is called
    section: str  # that part's name in sections.SECTIONS, which puts it on a page
    command: str  # what reproduces the row

    @property
    def page(self) -> str:
        return page_of(self.section)


def run(experiment: str) -> str:
    """The command that runs ``experiment`` of benchmarks/experiments.yaml."""
    return f"python benchmarks/run.py run {experiment}"


def task_command(records: dict[str, dict]) -> str:
    """The command of the first of ``records`` (by task); when they cover several tasks, its task written
    T and without its output folder."""
    task, record = next(iter(records.items()))
    command = current_command(record["command"])
    if len(records) > 1:
        command = re.sub(r" --output-dir \S+", "", re.sub(rf"\b{task}\b", "T", command))
    return command


def teacher_row() -> Row | None:
    teachers = [r for r in load_results("teacher_glue").values() if not r.get("tuning")]
    scores = {r["task"]: r["metrics"]["score"] for r in teachers}
    if set(scores) != set(FIVE_TASKS):
        return None
    mean = sum(scores.values()) / len(scores)
    teacher = PAPERS["distilbert"]["teacher"]
    return Row("Teacher all-MiniLM-L6-v2 fine-tuned on 5 GLUE tasks, CPU budget",
               f"dev mean {mean:.1f} (CoLA {scores['cola']:.1f}, SST-2 {scores['sst2']:.1f})",
               f"BERT-base {sum(teacher.values()) / 5:.1f} (CoLA {teacher['cola']}, SST-2 {teacher['sst2']}) "
               "(Sanh et al. 2019, Table 1; dev)", where(teachers), "Teacher", "teacher", run("teachers"))


def quickstart_row() -> Row | None:
    r = next((r for r in load_results("quickstart").values() if "winner" in r), None)
    if r is None:
        return None
    decide = (f" (on the held-out rows that decide: {100 * r['compress']['kept_decide']:.1f}% of the PyTorch teacher)"
              if r.get("compress", {}).get("kept_decide") is not None else "")
    return Row("`kdbert quickstart` SST-2: int8 student vs int8 teacher",
               f"{r['winner']}: {r['int8_retained_percent']:.1f}% kept{decide}, {r['int8_speedup_vs_int8_teacher']:.2f}x, "
               f"{r['wall_seconds'] / 60:.1f} min end to end", "-", where([r]), "The main job", "quickstart",
               run("quickstart"))


def compress_trust_row() -> Row | None:
    """The 4x searches under the rules of the issue on trustworthy figures: the shipped graph's kept share
    on the rows that decide beside dev's, for the tasks searched so far; each task's search under the
    current code against its teacher as ``teacher_best.py`` chose and rebuilt it (``--key-suffix=-trust-imdb-epyc-export``:
    SST-2 with 60,000 IMDb sentences as ``--unlabelled`` rows on an AVX-512 EPYC, 2026-12-07; ``-trust-epyc-mined``:
    MRPC with 24,584 Wikipedia sentence pairs mined by word overlap as ``--unlabelled`` rows (``wiki_transfer.py``)
    there, 2026-12-07; ``-trust-pair-layers``:
    STS-B's second draw with a pair-pooled cut's layers ranked by their cosine, 2026-12-04; ``-trust-pair-rows``:
    a pair-pooled graph running the two sentences as two rows, 2026-12-04; ``-trust-draw2``: STS-B against a teacher
    holding out 20% of its rows, a second draw of the rows that decide, 2026-12-04; ``-trust-pair-fitted``:
    a pair task's candidates pair-pooled, a classifier's head fitted on the cosine, 2026-12-04; ``-trust-epyc-fitted``:
    the same on an AMD EPYC, 2026-12-07; ``-trust-epyc-importance``: CoLA's search on an AMD EPYC under the rules of
    2026-12-07; ``-trust-importance``:
    the candidates' starts ranked by importance, 2026-12-03 to 2026-12-04, ``-trust-near-importance`` on CoLA's
    nearness-matched rows on an AMD EPYC; ``-trust-near``:
    CoLA's held-out rows drawn nearness-matched to dev's, its teacher rebuilt on the rest, 2026-12-02; ``-trust-head``:
    cut candidates starting with the teacher's task head, near-line candidates timed together, 2026-12-02; ``-trust-order``:
    whole-width candidates first; ``-trust-collection``: STS-B's held-out rows drawn by collection, its teacher
    rebuilt on the rest; ``-trust-ffn``: with the whole-width, narrow-FFN candidates; ``-trust-source``:
    STS-B's held-out rows drawn to dev's mix of genres, its teacher rebuilt on the rest; ``-trust-shipped``: the
    speed checked as shipped, 2026-12-01; ``-trust-tuned``, 2026-11-30 to 2026-12-01), else its latest under an
    earlier recipe (``-trust-pair``: the two sentences
    of a pair encoded apart; ``-trust-teacher3e5``: SST-2 against its teacher tuned over two learning rates;
    ``-trust-ema``: logit KD and the weights' moving average; ``-trust``), which the row says. A search whose
    shipped graph timed below the 4x asked is passed over: the row is the share kept at 4x."""
    results = {key: r for key, r in load_results("compress").items()
               if ((r.get("shipped") or {}).get("speedup") or math.inf) >= ((r.get("target") or {}).get("speedup") or 0)}
    records, current = {}, []
    for task in FIVE_TASKS:
        key = next((k for k in (f"{task}/x4-trust-imdb-epyc-export", f"{task}/x4-trust-epyc-mined",
                                f"{task}/x4-trust-epyc-fitted",
                                f"{task}/x4-trust-epyc-importance", f"{task}/x4-trust-pair-layers", f"{task}/x4-trust-pair-rows", f"{task}/x4-trust-draw2",
                                f"{task}/x4-trust-pair-fitted", f"{task}/x4-trust-importance",
                                f"{task}/x4-trust-near-importance",
                                f"{task}/x4-trust-near", f"{task}/x4-trust-head",
                                f"{task}/x4-trust-order",
                                f"{task}/x4-trust-collection", f"{task}/x4-trust-ffn",
                                f"{task}/x4-trust-source", f"{task}/x4-trust-shipped",
                                f"{task}/x4-trust-tuned",
                                f"{task}/x4-trust-pair", f"{task}/x4-trust-teacher3e5",
                                f"{task}/x4-trust-ema", f"{task}/x4-trust") if k in results), None)
        if key:
            records[task] = results[key]
            current += [task] if key.rsplit("-", 1)[-1] in CURRENT_TRUST_SUFFIXES else []
    if not records:
        return None
    shares = ", ".join(f"{TASK_NAMES[t]} {100 * r['shipped']['kept_decide']:.1f} (dev {100 * r['shipped']['kept_dev']:.1f}"
                       + unlabelled_words(r.get("command", ""))
                       + ")" + ("" if t in current else " (earlier recipe)") for t, r in records.items())
    ranked = [task for task in current if ranked_by_importance(records[task])]
    return Row(f"`kdbert compress` at 4x, tuned teachers, kept on the held-out rows that decide as shipped "
               f"({len(records)} of 5 tasks so far, {len(current)} under the current rules, {len(ranked)} from "
               "starts ranked by importance, the default since 2026-12-03)", shares,
               f"TinyBERT4 {paper_kept('tinybert'):.1f}% on these 5, {PAPERS['tinybert']['speedup']}x vs BERT-base on GPU "
               "(Jiao et al. 2020, Table 1)", where(list(records.values())), "`kdbert compress`", "compress",
               task_command({t: records[t] for t in current} or records))


def unlabelled_words(command: str) -> str:
    """``; with <what> as --unlabelled rows`` where a search's ``command`` gave them, else nothing."""
    if "--unlabelled " not in command:
        return ""
    given = command.split("--unlabelled ", 1)[1].split()[0]
    what = "IMDb sentences" if "imdb" in given else "mined Wikipedia pairs" if "mined" in given else given
    return f"; with {what} as --unlabelled rows"


def ranked_by_importance(record: dict) -> bool:
    """Whether a search's starts were ranked by importance: asked for, or compress's default when it ran
    (``--selection importance`` since 2026-12-03)."""
    command = record.get("command", "")
    return "--selection importance" in command or ("--selection" not in command and record.get("date", "") >= "2026-12-03")


BASE_TEACHER_SEARCHES = {"cola": {"4x": ("cola/x4-mpnet-trust",), "8x": ("cola/x8-mpnet-trust-first", "cola/x8-mpnet-trust-turns",
                                                                             "cola/x8-mpnet-trust")},
                         "sst2": {"4x": ("sst2/x4-mpnet-trust-imdb-fastest", "sst2/x4-mpnet-trust"),
                                  "8x": ("sst2/x8-mpnet-trust-imdb-fastest", "sst2/x8-mpnet-trust-export-fastest", "sst2/x8-mpnet-trust-ffn-fastest", "sst2/x8-mpnet-trust-fastest", "sst2/x8-mpnet-trust-first", "sst2/x8-mpnet-trust-kl32", "sst2/x8-mpnet-trust-all", "sst2/x8-mpnet-trust")},
                         "mrpc": {"4x": ("mrpc/x4-mpnet-trust-fitted", "mrpc/x4-mpnet-trust"),
                                  "8x": ("mrpc/x8-mpnet-trust-rows", "mrpc/x8-mpnet-trust-fitted", "mrpc/x8-mpnet-trust-first2", "mrpc/x8-mpnet-trust-first", "mrpc/x8-mpnet-trust-best", "mrpc/x8-mpnet-trust-pair", "mrpc/x8-mpnet-trust-cuts", "mrpc/x8-mpnet-trust")},
                         "stsb": {"4x": ("stsb/x4-mpnet-trust",), "8x": ("stsb/x8-mpnet-trust-first", "stsb/x8-mpnet-trust")}}
"""Per task and target, the searches against the MPNet-base teacher, the latest first (``-fastest``: timed on both
cores, where the teacher runs fastest, the runs training on one; ``-trust-ffn-fastest``: so timed, with the 4-layer
MiniLM cut of a third of its FFN on offer; ``-trust-imdb-fastest``: so timed and offered, with 60,000 sentences of
IMDb's unlabelled reviews as ``--unlabelled`` rows, every candidate reading the int8 export's stored logits;
``-trust-export-fastest``: the same without the sentences, on the timings of ``-trust-imdb-fastest``; ``-best``: promotions by
score while none keeps the share; ``-pair``:
the MPNet cuts pair-pooled by their separators; ``-cuts``: the pre-trained MiniLM's cuts offered; ``-all``: on
every training row, not the first 16,000, candidates near the line timed in turns; ``-turns``, ``-kl32``: near-line
candidates timed in turns, the KL in float32, and for ``-kl32`` round 0 after the labelling; ``-first``: pre-trained
students first in round 0, the deepest first; ``-fitted``: a pair-pooled classifier's head started as a
threshold on its cosine, fitted on the training rows, the teacher fine-tuned again on an Intel Xeon with AMX;
``-rows``: a pair-pooled graph running its two sentences as two rows)."""


def base_teacher_row() -> Row | None:
    """The searches against a base-size teacher (all-mpnet-base-v2 fine-tuned on the task, its int8
    export the reference): each task and target's winner and its kept share on the rows that decide and dev."""
    results = load_results("compress")
    records = {}
    for task, targets in BASE_TEACHER_SEARCHES.items():
        for target, keys in targets.items():
            key = next((k for k in keys if k in results), None)
            if key:
                records[(task, target)] = results[key]
    if not records:
        return None
    shares = "; ".join(f"{TASK_NAMES[task]} {target}: {r['winner']['candidate']} {100 * r['shipped']['kept_decide']:.1f}% "
                       f"kept on the rows that decide (dev {100 * r['shipped']['kept_dev']:.1f}%), "
                       f"{r['shipped']['speedup']:.1f}x at {r['speed']['settings']['threads']} thread(s)"
                       for (task, target), r in records.items())
    tasks = sorted({task for task, _ in records}, key=list(BASE_TEACHER_SEARCHES).index)
    return Row(f"`kdbert compress` against an MPNet-base teacher (12x768) on {', '.join(TASK_NAMES[t] for t in tasks)}, "
               "the shipped int8 graph's score over the PyTorch teacher's, its speed over the int8 teacher's, both "
               "timed at the threads named (goal: >= 97% at >= 8x; CoLA >= 85%; MPNet-base runs 1.5x faster on two "
               "threads than on one: the compress page's timing-threads section)", shares,
               f"TinyBERT4 {paper_kept('tinybert', tasks):.1f}% of BERT-base on these, {PAPERS['tinybert']['speedup']}x "
               "on GPU (Jiao et al. 2020, Table 1; test)", where(list(records.values())), "`kdbert compress`",
               "compress", current_command(next(iter(records.values()))["command"]))


def compress_goal_row() -> Row | None:
    r = load_results("compress").get(COMPRESS_GOAL)
    if r is None:
        return None
    shipped = r["shipped"]
    kept, speedup = 100 * shipped["kept_dev"], shipped["speedup"]
    met = "met" if kept >= 97 and speedup >= r["target"]["speedup"] else "not met"
    bilstm = PAPERS["bilstm"]
    return Row(f"`kdbert compress` SST-2, goal >= {r['target']['speedup']:g}x and >= 97% kept ({met})",
               f"{r['winner']['candidate']}: {kept:.1f}% kept, {speedup:.2f}x vs int8 teacher",
               f"distilled BiLSTM {bilstm['distilled']} (Tang et al. 2019, Table 1; test), ~15x less inference time than "
               "BERT-large",
               where([r]), "`kdbert compress`", "compress", run("compress-sst2-x8"))


def compress_4x_row() -> Row | None:
    return compress_mean_row(COMPRESS_4X, "`kdbert compress` at 4x, winner per task (30-min CPU search each)",
                             "`kdbert compress`", "compress",
                             f"{run('compress-sst2')} && {run('compress-glue-x4-aug-held-out-teacher')}")


def compress_mean_row(searches: dict[str, str], title: str, label: str, section: str,
                      command: str | None = None) -> Row | None:
    """The mean kept share of ``searches`` (task: key) and their speedups; ``command`` by default the
    searches' own, per task."""
    results = load_results("compress")
    records = {task: results.get(key) for task, key in searches.items()}
    if not all(records.values()):
        return None
    kept = {task: 100 * r["shipped"]["kept_dev"] for task, r in records.items()}
    speedups = [r["shipped"]["speedup"] for r in records.values()]
    shares = ", ".join(f"{TASK_NAMES[t]} {kept[t]:.1f}" for t in FIVE_TASKS)
    return Row(title, f"mean {sum(kept.values()) / len(kept):.1f}% kept ({shares}), "
                   f"{min(speedups):.1f}-{max(speedups):.1f}x",
               f"TinyBERT4 {paper_kept('tinybert'):.1f}% on these 5, {PAPERS['tinybert']['speedup']}x vs BERT-base on GPU "
               "(Jiao et al. 2020, Table 1)", where(list(records.values())), label, section,
               command or task_command(records))


def compress_all_on_row() -> Row | None:
    return compress_mean_row(COMPRESS_4X_ALL_ON, "`kdbert compress` at 4x with general students and transfer sets "
                                                 "(goal: 97% kept on each task)", "General students", "general-students")


def compress_all_on_8x_row() -> Row | None:
    return compress_mean_row(COMPRESS_8X_ALL_ON, "`kdbert compress` at 8x with general students and transfer sets",
                             "General students", "general-students")


def int8_row() -> Row | None:
    r = next(iter(load_results("breakdown").values()), None)
    if r is None or "teacher" not in r["models"]:
        return None
    steps = {step["variant"]: step for step in r["models"]["teacher"]["steps"]}
    if not {"pytorch", "onnx-fp32", "int8-dynamic"} <= set(steps):
        return None
    int8 = steps["int8-dynamic"]
    return Row("int8 export of the teacher (ONNX Runtime dynamic, batch 1, SST-2 dev rows)",
               f"{steps['onnx-fp32']['latency_ms'] / int8['latency_ms']:.2f}x over ORT fp32, "
               f"{steps['pytorch']['latency_ms'] / int8['latency_ms']:.2f}x over PyTorch fp32; dev "
               f"{steps['onnx-fp32']['dev_score']:.2f} -> {int8['dev_score']:.2f}", "-", where([r]), "Speedup breakdown",
               "breakdown", current_command(r["command"]))


def tinybert_row() -> Row | None:
    table, runs = glue_rows(["tinybert-ws-general-task", "tinybert-ws-general-task-aug"])
    row, aug = table.get("tinybert-ws-general-task"), table.get("tinybert-ws-general-task-aug")
    if not row or row["average_kept"] is None:
        return None
    sst2 = row["tasks"].get("sst2")
    ours = f"5-task mean {row['average']:.1f}, {row['average_kept']:.1f}% kept"
    ours += f" (with DA {aug['average_kept']:.1f}%)" if aug and aug["average_kept"] is not None else ""
    ours += f"; SST-2 {sst2['mean']:.1f} ({sst2['kept']:.0f}%)" if sst2 else ""
    paper = PAPERS["tinybert"]
    return Row("TinyBERT4 general + task distillation, from teacher weights, CPU budget", ours,
               f"TinyBERT4 {paper_kept('tinybert'):.1f}% kept; SST-2 {paper['student']['sst2']} of "
               f"{paper['teacher']['sst2']} (Jiao et al. 2020, Table 1; test)",
               where([r for r in runs if r["variant"] == "tinybert-ws-general-task"]), "TinyBERT", "tinybert",
               run("tinybert"))


def pkd_row() -> Row | None:
    table, runs = glue_rows(["pkd-skip", "kd"])
    pkd, kd = table.get("pkd-skip"), table.get("kd")
    if not pkd or pkd["average_kept"] is None or "sst2" not in pkd["tasks"]:
        return None
    sst2 = pkd["tasks"]["sst2"]
    ours = f"PKD-Skip SST-2 {sst2['mean']:.1f} ({sst2['kept']:.0f}%), 5-task {pkd['average_kept']:.1f}% kept"
    ours += f"; KD {kd['average_kept']:.1f}%" if kd and kd["average_kept"] is not None else ""
    paper = PAPERS["pkd3"]
    return Row("BERT-PKD vs KD, 3 layers x 384 from the teacher's", ours,
               f"BERT3-PKD SST-2 {paper['student']} = {100 * paper['student'] / paper['teacher']:.1f}% of BERT-base "
               "(Sun et al. 2019, via MobileBERT Table 4; test)", where(runs), "KD, BERT-PKD and DistilBERT", "pkd",
               run("kd-pkd-distilbert"))


def distilbert_row() -> Row | None:
    table, runs = glue_rows(["distilbert-d", "distilbert-general-d"])
    row, general = table.get("distilbert-d"), table.get("distilbert-general-d")
    if not row or row["average_kept"] is None:
        return None
    ours = f"5-task mean {row['average']:.1f}, {row['average_kept']:.1f}% kept"
    ours += f" (after 100 general steps {general['average_kept']:.1f}%)" if general and general["average_kept"] else ""
    return Row("DistilBERT (D), 3 layers (theirs: 6 layers, full pre-training distillation)", ours,
               f"DistilBERT {paper_kept('distilbert'):.1f}% kept on these 5 (Sanh et al. 2019, Table 1; dev)",
               where([r for r in runs if r["variant"] == "distilbert-d"]), "KD, BERT-PKD and DistilBERT", "pkd",
               run("kd-pkd-distilbert"))


def mobilebert_row() -> Row | None:
    table, runs = glue_rows(["mobilebert-fitted-task"])
    row = table.get("mobilebert-fitted-task")
    if not row or row["average_kept"] is None:
        return None
    return Row("MobileBERT matched to the teacher, progressive transfer at a CPU budget (theirs: 740k steps), logit KD",
               f"5-task mean {row['average']:.1f}, {row['average_kept']:.1f}% kept",
               f"MobileBERT {paper_kept('mobilebert'):.1f}% of BERT-base on these 5 (Sun et al. 2020, Table 4; test)",
               where(runs), "MobileBERT against the teacher", "mobilebert-task",
               run("mobilebert-task"))


def bilstm_row() -> Row | None:
    results = load_results("bilstm_distill_v2")
    runs = {v: [r for k, r in results.items() if k.startswith(f"sst2/{v}/")] for v in ("labels", "kd_aug")}
    teacher = results.get("sst2/teacher")
    if not all(runs.values()) or teacher is None:
        return None
    labels, aug = (mean_std([r["score"] for r in runs[v]])[0] for v in ("labels", "kd_aug"))
    paper = PAPERS["bilstm"]
    rows = runs["labels"][0].get("train_rows")
    return Row("Distilled BiLSTM + augmentation over labels only, SST-2 (GloVe 50d"
               + (f", {rows:,} rows)" if rows else ")"),
               f"{labels:.1f} -> {aug:.1f} ({aug - labels:+.1f}), {100 * aug / teacher['score']:.1f}% kept",
               f"{paper['labels']} -> {paper['distilled']} ({paper['distilled'] - paper['labels']:+.1f}), "
               "BERT-large teacher (Tang et al. 2019, Table 1; test)", where(runs["labels"] + runs["kd_aug"]),
               "Distilled BiLSTM", "bilstm-distill", run("bilstm-distill-v2"))


def imdb_row() -> Row | None:
    results = load_results("imdb")
    r = results.get("kd-3L-windows")
    teacher = next((t for t in results.values() if t["output_dir"] == (r or {}).get("teacher")), None)
    if not r or not teacher or "full_test" not in r or "full_test" not in teacher:
        return None
    ours, base = r["full_test"]["accuracy"], teacher["full_test"]["accuracy"]
    paper = PAPERS["distilbert_imdb"]
    rows = r.get("train_rows", r["budget"]["train_rows"])
    return Row(f"IMDb test, 3-layer KD student reading whole reviews ({rows:,} training reviews)",
               f"{ours:.2f}, {100 * ours / base:.1f}% of the teacher's {base:.2f}",
               f"DistilBERT {paper['student']}, {100 * paper['student'] / paper['teacher']:.1f}% of BERT-base "
               "(Sanh et al. 2019, Table 2)", where([r]), "IMDb", "imdb",
               current_command(r["command"]))


def squad_row() -> Row | None:
    results = load_results("squad")
    r, teacher = results.get("kd-3L-D"), results.get("teacher")
    if not r or not teacher:
        return None
    em, f1 = r["metrics"]["exact_match"], r["metrics"]["f1"]
    paper = PAPERS["distilbert_squad"]
    kept = [100 * s / t for s, t in zip(paper["student"], paper["teacher"])]
    questions = teacher["budget"]["train_questions"]
    return Row(f"SQuAD v1.1, 3-layer DistilBERT (D) (article split of dev, {questions:,} questions: not comparable)",
               f"EM/F1 {em:.1f}/{f1:.1f}, {100 * em / teacher['metrics']['exact_match']:.1f}%/"
               f"{100 * f1 / teacher['metrics']['f1']:.1f}% kept",
               f"DistilBERT (D) {paper['student'][0]}/{paper['student'][1]}, {kept[0]:.1f}%/{kept[1]:.1f}% of BERT-base "
               "(Sanh et al. 2019, Table 2)", where([r]), "SQuAD v1.1", "squad",
               current_command(r["command"]))


def throughput_row() -> Row | None:
    r = next(iter(load_results("throughput").values()), None)
    if r is None:
        return None
    kdbert = [x for x in r["rows"] if x["framework"] == "kdbert" and x["vs_textbrewer_fp32"] is not None]
    if not kdbert:
        return None
    best = max(kdbert, key=lambda x: x["vs_textbrewer_fp32"])
    same = [x["vs_textbrewer_same_precision"] for x in kdbert if x["vs_textbrewer_same_precision"] is not None]
    return Row("TinyBERT distillation step, examples/s against TextBrewer",
               f"{best['vs_textbrewer_fp32']:.2f}x ({best['precision']}, {best['seq_len']} tokens, vs TextBrewer fp32); "
               f"{min(same):.2f}-{max(same):.2f}x at equal precision", "-", where([r]), "Distillation-step throughput",
               "throughput", current_command(r["command"]))


def teacher_cache_row() -> Row | None:
    results = load_results("teacher_cache")
    if not results:
        return None
    speedups = []
    for r in results.values():
        none, warm = (sum(r["runs"][run]["seconds_per_epoch"].values()) for run in ("no_cache", "warm_cache"))
        speedups.append(f"{r['method']} {none / warm:.2f}x")
    settings = sorted({f"{TASK_NAMES.get(r['task'], r['task'])}, {r['rows']:,} rows" for r in results.values()})
    return Row(f"Teacher-output cache, warm: training time per epoch ({'; '.join(settings)})",
               ", ".join(speedups) + " faster",
               "-", where(list(results.values())), "Teacher-output cache", "teacher-cache",
               run("teacher-cache"))


def serve_row() -> Row | None:
    r = load_results("serve_load").get("winner")
    if r is None:
        return None
    rows = {mode: {row["clients"]: row for row in rows} for mode, rows in r["rows"].items()}
    if not ({"on", "off"} <= set(rows) and 1 in rows["on"] and 32 in rows["on"] and 32 in rows["off"]):
        return None
    one = rows["on"][1]
    batching = rows["on"][32]["throughput_per_s"] / rows["off"][32]["throughput_per_s"]
    return Row("`kdbert serve`, compress winner (goals: <= 1 ms added at 1 client, >= 2x by batching at 32)",
               f"1 client: p50 {one['p50_ms']:.1f} ms, server {one['server_mean_ms']:.1f} ms (model "
               f"{r['model_batch1_ms']:.2f}); batching {batching:.2f}x", "-", where([r]), "Serving under load",
               "serve-load", current_command(r["command"]))


def augmentation_row() -> Row | None:
    variants = ["tinybert-ws-general-task", "tinybert-ws-general-task-aug", "tinybert-ws-general-task-aug-x4"]
    table, runs = glue_rows(variants, GPU_RESULTS)
    base, aug, x4 = (table.get(v) for v in variants)
    if not base or not aug or base["average"] is None or aug["average"] is None:
        return None
    ours = f"{len(base['tasks'])}-task mean {base['average']:.1f} -> {aug['average']:.1f} with augmentation"
    ours += f", {x4['average']:.1f} with 4x the steps" if x4 and x4["average"] is not None else ""
    return Row("TinyBERT data augmentation on the same rows, every step on one GPU (general + task, from teacher "
               "weights)", ours, "-", where(runs), "TinyBERT augmentation on the same rows", "augmentation-gpu",
               run("augmentation-gpu"))


def reruns_row() -> Row | None:
    results = load_results("reruns")
    if not results:
        return None
    reproduced = sum(r["reproduced"] for r in results.values())
    return Row("Recorded figures run again from their recorded settings (`--rerun`)",
               f"{reproduced} of {len(results)} reproduced within noise", "-", where(list(results.values())),
               "Reruns of recorded figures", "reruns", "python benchmarks/run.py rerun NAME")


ROWS: list[Callable[[], Row | None]] = [
    teacher_row, quickstart_row, compress_trust_row, base_teacher_row, compress_goal_row, compress_4x_row,
    compress_all_on_row, compress_all_on_8x_row, int8_row, tinybert_row, pkd_row, distilbert_row, augmentation_row,
    mobilebert_row, bilstm_row, imdb_row, squad_row, throughput_row, teacher_cache_row, serve_row, reruns_row]


def headline_rows() -> list[Row]:
    """The rows whose records are there."""
    return [row for row in (make() for make in ROWS) if row is not None]


def scoreboard_section(base: str = LINK_BASE, rows: list[Row] | None = None) -> list[str]:
    """The headline results, one row each, beside the published figure for the nearest setting, with
    the command and a link to the page of the full record (``base``: the pages' folder)."""
    rows = headline_rows() if rows is None else rows
    if not rows:
        return []
    return ["## Scoreboard", "", note("scoreboard-intro"), "",
            "| result | ours | published (paper) | machine, date | command | full record |", "|---|---|---|---|---|---|",
            *(f"| {row.result} | {row.ours} | {row.published} | {row.where} | `{row.command}` "
              f"| [{row.label}]({base}{row.page}.md) |" for row in rows), ""]
