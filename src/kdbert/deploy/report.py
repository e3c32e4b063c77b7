"""`kdbert report`: the paper-style table of distillation runs and a Pareto plot of score vs latency.

Input: run *records*, one per run folder (:func:`collect_runs`) or from a results file
(:func:`load_records`)::

    {"name": "kd (3 layers)", "task": "sst2", "seed": 42, "score": 83.4, "teacher": false,
     "params": 17390594, "flops": 698648064,                      # per example at seq_len
     "latency_pytorch_ms": 5.1, "latency_onnx_int8_ms": 1.1,     # batch 1, optional
     "score_onnx_int8": 83.5}                                     # optional

Table (:func:`build_table`), one row per ``name``:

* per task, over the runs (seeds) of that name: ``mean``, sample ``std`` (n - 1; none for one
  run), ``n``, and ``kept = 100 * mean / teacher mean`` (the teacher's mean on that task);
* ``average`` = mean over tasks of the task means, and its ``kept`` against the teacher's
  average, only where the row covers every task of the table;
* ``params``, ``flops``; latency per runtime and ``speedup = teacher latency / row latency``
  in the same runtime (PyTorch fp32, ONNX Runtime int8): an int8 student against the int8
  teacher, so the speedup is distillation's own.

Pareto front (:func:`pareto_front`): the points no other point beats on both axes, i.e. no
other point is at most as slow and at least as accurate with one of the two strictly better.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from kdbert.errors import KdbertError
from kdbert.core.atomic_io import write_json

RUNTIMES = (("pytorch", "PyTorch fp32"), ("onnx_int8", "ORT int8"))
REQUIRED_KEYS = ("name", "task", "score")

__all__ = ["mean_std", "format_mean_std", "collect_runs", "load_records", "build_table", "pareto_front",
           "format_markdown", "format_csv", "plot_pareto", "write_report"]


# --------------------------------------------------------------------------- statistics


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (``n - 1`` in the denominator; ``None`` for one value)."""
    if not values:
        raise KdbertError("mean_std got no values")
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5


def format_mean_std(values: list[float]) -> str:
    """``"83.7"`` for one run, ``"83.7 ± 0.4 (n=3)"`` for several."""
    mean, std = mean_std(values)
    return f"{mean:.1f}" if std is None else f"{mean:.1f} ± {std:.1f} (n={len(values)})"


# --------------------------------------------------------------------------- records


def _task_name(task: str) -> str:
    from kdbert.data.tasks import canonical_task_name

    return canonical_task_name(task) or Path(task).stem


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise KdbertError(f"cannot read {path}: {err}; rerun the command that wrote it") from None


def _student_name(report: dict) -> str:
    """``method (student)``: the preset or folder name, else the teacher layers it started from."""
    options = report.get("options", {})
    student = options.get("student")
    if student:
        detail = Path(str(student)).name
    elif options.get("student_layers"):
        layers = str(options["student_layers"])
        count = len(layers.split(",")) if "," in layers else int(layers)
        detail = f"{count} layers"
    else:
        detail = "default student"
    init = options.get("student_init")
    return f"{report['method']} ({detail}{', ' + init if init and init != 'random' else ''})"


def _size(folder: Path, seq_len: int, cache: dict) -> tuple[int | None, int | None]:
    """Parameters and FLOPs per example of the model in ``folder`` (rebuilt by its family from config.json)."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        return None, None
    key = (config_path.read_text(), seq_len)
    if key not in cache:
        from kdbert.deploy.bench import count_flops, count_parameters
        from kdbert.families.registry import family_of_folder

        model = family_of_folder(folder).from_config(folder)
        cache[key] = (count_parameters(model)["total"], count_flops(model, seq_len))
    return cache[key]


def _run_record(folder: Path) -> tuple[dict, str | None]:
    """The record of one run folder (without sizes) and, for a distilled student, its teacher's path."""
    if (folder / "distill_report.json").is_file():
        report = _read(folder / "distill_report.json")
        record = {"name": _student_name(report), "task": _task_name(report["task"]),
                  "seed": report.get("options", {}).get("seed"), "score": report["dev_metrics"]["score"],
                  "teacher": False}
        return record, report.get("teacher")
    if (folder / "metrics.json").is_file() and (folder / "run_config.json").is_file():
        config = _read(folder / "run_config.json")
        record = {"name": f"finetune ({Path(str(config.get('model', folder))).name})",
                  "task": _task_name(config["task"]), "seed": config.get("seed"),
                  "score": _read(folder / "metrics.json")["score"], "teacher": False}
        return record, None
    raise KdbertError(f"{folder} is not a kdbert run folder (no distill_report.json, or metrics.json with "
                      "run_config.json); pass folders written by kdbert finetune, distill task or quickstart")


def collect_runs(run_dirs: list[str | os.PathLike], bench: bool = False, seq_len: int = 128,
                 threads: int | None = None) -> list[dict]:
    """One record per run folder, plus the teacher of every distilled student (from its report).

    A ``finetune`` run is the teacher when a student in the set names it as its teacher (or when
    no student names any). ``bench=True`` times the first run of each name in PyTorch and, when
    ``RUN_DIR/onnx/model.int8.onnx`` exists, in ONNX Runtime int8 (batch 1, ``seq_len``).
    """
    folders = [Path(d).expanduser() for d in run_dirs]
    for folder in folders:
        if not folder.is_dir():
            raise KdbertError(f"run folder {folder} does not exist; pass folders written by kdbert")
    found: dict[Path, dict] = {}
    teachers: set[Path] = set()
    queue = list(folders)
    while queue:
        folder = queue.pop(0).resolve()
        if folder in found:
            continue
        record, teacher = _run_record(folder)
        found[folder] = record
        if teacher:
            teachers.add(Path(teacher).resolve())
            if Path(teacher).is_dir():
                queue.append(Path(teacher))
    finetuned = [f for f, r in found.items() if r["name"].startswith("finetune")]
    for folder in finetuned:
        if folder in teachers or not teachers:
            found[folder]["name"], found[folder]["teacher"] = "teacher", True
    cache: dict = {}
    timed: set[str] = set()
    records = []
    for folder, record in found.items():
        record["params"], record["flops"] = _size(folder, seq_len, cache)
        record["seq_len"], record["run_dir"] = seq_len, str(folder)
        export = folder / "onnx" / "export_report.json"
        if export.is_file():
            record["score_onnx_int8"] = _read(export).get("dev_metrics", {}).get("onnx_int8", {}).get("score")
        if bench and record["name"] not in timed:
            timed.add(record["name"])
            record.update(_bench(folder, seq_len, threads))
        records.append(record)
    return records


def _bench(folder: Path, seq_len: int, threads: int | None) -> dict:
    from kdbert.deploy.bench import bench_model

    result = {"latency_pytorch_ms": bench_model(str(folder), seq_len=seq_len, threads=threads)["latency_median_ms"]}
    int8 = folder / "onnx" / "model.int8.onnx"
    if int8.is_file():
        result["latency_onnx_int8_ms"] = bench_model(int8, seq_len=seq_len, threads=threads)["latency_median_ms"]
    return result


def load_records(path: str | os.PathLike) -> list[dict]:
    """Records from a JSON file: a list of records, or an object whose values are records."""
    path = Path(path)
    if not path.is_file():
        raise KdbertError(f"results file {path} does not exist; pass a JSON file of run records")
    data = _read(path)
    records = list(data.values()) if isinstance(data, dict) else data
    if not isinstance(records, list) or not records:
        raise KdbertError(f"{path} holds no run records; expected a JSON list or object of records")
    for i, record in enumerate(records):
        missing = [k for k in REQUIRED_KEYS if not isinstance(record, dict) or k not in record]
        if missing:
            raise KdbertError(f"{path}: record {i} has no {', '.join(missing)}; every record needs "
                              f"{', '.join(REQUIRED_KEYS)}")
    return records


# --------------------------------------------------------------------------- table


def _first(records: list[dict], key: str):
    return next((r[key] for r in records if r.get(key) is not None), None)


def build_table(records: list[dict]) -> dict[str, Any]:
    """Aggregate records into ``{"tasks": [...], "teacher": name, "rows": [...]}`` (see module doc).

    Rows keep the order in which names first appear, the teacher first.
    """
    if not records:
        raise KdbertError("no run records to report; pass run folders or a results file")
    tasks = list(dict.fromkeys(r["task"] for r in records))
    names = list(dict.fromkeys(r["name"] for r in records))
    teacher_names = list(dict.fromkeys(r["name"] for r in records if r.get("teacher")))
    teacher = teacher_names[0] if teacher_names else None
    if teacher:
        names.remove(teacher)
        names.insert(0, teacher)
    groups = {name: [r for r in records if r["name"] == name] for name in names}

    def task_means(group: list[dict], key: str) -> dict[str, list[float]]:
        by_task: dict[str, list[float]] = {}
        for r in group:
            if r.get(key) is not None:
                by_task.setdefault(r["task"], []).append(r[key])
        return by_task

    teacher_scores = {t: mean_std(v)[0] for t, v in task_means(groups[teacher], "score").items()} if teacher else {}
    teacher_int8 = ({t: mean_std(v)[0] for t, v in task_means(groups[teacher], "score_onnx_int8").items()}
                    if teacher else {})
    teacher_average = (sum(teacher_scores.values()) / len(tasks)) if len(teacher_scores) == len(tasks) else None
    teacher_latency = {rt: _first(groups[teacher], f"latency_{rt}_ms") if teacher else None for rt, _ in RUNTIMES}
    rows = []
    for name, group in groups.items():
        cells = {}
        for task, scores in task_means(group, "score").items():
            mean, std = mean_std(scores)
            kept = 100 * mean / teacher_scores[task] if teacher_scores.get(task) else None
            cell = {"mean": mean, "std": std, "n": len(scores), "scores": scores,
                    "kept": 100.0 if name == teacher else kept}
            int8 = task_means(group, "score_onnx_int8").get(task)
            if int8:
                cell["mean_onnx_int8"] = mean_std(int8)[0]
                cell["kept_onnx_int8"] = (100 * cell["mean_onnx_int8"] / teacher_int8[task]
                                          if teacher_int8.get(task) else None)
            cells[task] = cell
        average = sum(c["mean"] for c in cells.values()) / len(tasks) if len(cells) == len(tasks) else None
        row = {"name": name, "teacher": name == teacher, "tasks": cells, "average": average,
               "average_kept": 100 * average / teacher_average if average is not None and teacher_average else None,
               "params": _first(group, "params"), "flops": _first(group, "flops"), "seq_len": _first(group, "seq_len")}
        for runtime, _ in RUNTIMES:
            latency = _first(group, f"latency_{runtime}_ms")
            row[f"latency_{runtime}_ms"] = latency
            base = teacher_latency[runtime]
            row[f"speedup_{runtime}"] = base / latency if latency and base else None
        rows.append(row)
    return {"tasks": tasks, "teacher": teacher, "rows": rows}


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the (latency, score) points on the Pareto front, fastest first.

    Point i is on the front when no point j has ``latency_j <= latency_i`` and
    ``score_j >= score_i`` with at least one of the two strict. Equal points are all kept.
    """
    front = []
    for i, (latency, score) in enumerate(points):
        dominated = any(other_latency <= latency and other_score >= score
                        and (other_latency < latency or other_score > score)
                        for j, (other_latency, other_score) in enumerate(points) if j != i)
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))


def _human(n: float | None) -> str:
    from kdbert.deploy.bench import human

    return "-" if n is None else human(n)


def _latency_cell(row: dict, runtime: str) -> str:
    latency, speedup = row[f"latency_{runtime}_ms"], row[f"speedup_{runtime}"]
    if latency is None:
        return "-"
    return f"{latency:.2f} ({speedup:.2f}x)" if speedup is not None else f"{latency:.2f}"


def format_markdown(table: dict) -> str:
    """The table as Markdown: dev score per task (mean ± std, kept %), average, size, speed."""
    tasks, rows = table["tasks"], table["rows"]
    with_int8 = any("mean_onnx_int8" in c for r in rows for c in r["tasks"].values())
    timed = [(runtime, label) for runtime, label in RUNTIMES if any(r[f"latency_{runtime}_ms"] for r in rows)]
    headers = ["Method", *tasks, "Average (kept)", "Params", "FLOPs/example"]
    headers += [f"{label} ms (speedup)" for _, label in timed]
    if with_int8:
        headers.append("ORT int8 dev (kept)")
    lines = ["| " + " | ".join(headers) + " |", "|---|" + "---|" * (len(headers) - 1)]
    for row in rows:
        cells = [row["name"] + (" (teacher)" if row["teacher"] and row["name"] != "teacher" else "")]
        for task in tasks:
            cell = row["tasks"].get(task)
            if cell is None:
                cells.append("-")
                continue
            text = format_mean_std(cell["scores"])
            cells.append(text if row["teacher"] or cell["kept"] is None else f"{text} ({cell['kept']:.0f}%)")
        if row["average"] is None:
            cells.append("-")
        else:
            kept = "" if row["teacher"] or row["average_kept"] is None else f" ({row['average_kept']:.1f}%)"
            cells.append(f"{row['average']:.1f}{kept}")
        cells += [_human(row["params"]), _human(row["flops"])]
        cells += [_latency_cell(row, runtime) for runtime, _ in timed]
        if with_int8:
            int8 = [c for c in row["tasks"].values() if "mean_onnx_int8" in c]
            if len(int8) == len(tasks):
                score = sum(c["mean_onnx_int8"] for c in int8) / len(int8)
                kept = [c["kept_onnx_int8"] for c in int8]
                suffix = (f" ({sum(kept) / len(kept):.1f}%)" if not row["teacher"] and None not in kept else "")
                cells.append(f"{score:.1f}{suffix}")
            else:
                cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
    seq_len = next((r["seq_len"] for r in rows if r.get("seq_len")), None)
    notes = ["", "Dev score: mean ± sample std over seeds (n runs), in brackets the share of the teacher's score "
             "kept; average over tasks only where a row covers every task."
             + (" Latency: batch 1, median" + (f", sequence length {seq_len}" if seq_len else "")
                + "; speedup against the teacher in the same runtime." if timed else
                " No latencies: pass --bench to time each method.")]
    if with_int8:
        notes.append("ORT int8 dev: the int8 export's dev score (average over tasks) and its share of the int8 "
                     "teacher's, per task then averaged.")
    return "\n".join(lines + notes) + "\n"


def format_csv(table: dict) -> str:
    """One line per (method, task): scores, kept share, size and speed."""
    buffer = io.StringIO()
    fields = ["method", "teacher", "task", "n", "mean", "std", "kept_percent", "mean_onnx_int8",
              "kept_onnx_int8_percent", "params", "flops", "seq_len"]
    for runtime, _ in RUNTIMES:
        fields += [f"latency_{runtime}_ms", f"speedup_{runtime}"]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in table["rows"]:
        for task, cell in row["tasks"].items():
            line = {"method": row["name"], "teacher": row["teacher"], "task": task, "n": cell["n"],
                    "mean": cell["mean"], "std": cell["std"], "kept_percent": cell["kept"],
                    "mean_onnx_int8": cell.get("mean_onnx_int8"), "kept_onnx_int8_percent": cell.get("kept_onnx_int8"),
                    "params": row["params"], "flops": row["flops"], "seq_len": row["seq_len"]}
            for runtime, _ in RUNTIMES:
                line[f"latency_{runtime}_ms"] = row[f"latency_{runtime}_ms"]
                line[f"speedup_{runtime}"] = row[f"speedup_{runtime}"]
            writer.writerow(line)
    return buffer.getvalue()


# --------------------------------------------------------------------------- plot


def _plot_runtime(table: dict, latency: str | None) -> str | None:
    """The latency axis: the one asked for, else ORT int8 when every scored row has it, else PyTorch."""
    scored = [r for r in table["rows"] if r["average"] is not None]
    if latency:
        return latency
    for runtime, _ in reversed(RUNTIMES):
        if scored and all(r[f"latency_{runtime}_ms"] for r in scored):
            return runtime
    return None


def _int8_average(row: dict, tasks: list[str]) -> float | None:
    """Mean over ``tasks`` of the row's int8 dev scores, or None when a task has none."""
    scores = [row["tasks"].get(t, {}).get("mean_onnx_int8") for t in tasks]
    return None if None in scores else sum(scores) / len(scores)


def plot_pareto(table: dict, path: str | os.PathLike, latency: str | None = None, title: str | None = None) -> bool:
    """Dev score (average over the table's tasks; against an ORT int8 latency, the int8 export's
    score when every row has one) against batch-1 latency, bubble area ∝ params, the teacher as a
    star, the Pareto front as a dashed line. Returns False (no file) when no row has both a score
    over every task and a latency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runtime = _plot_runtime(table, latency)
    rows = [r for r in table["rows"] if runtime and r["average"] is not None and r[f"latency_{runtime}_ms"]]
    if not rows:
        return False
    # an int8 latency goes with the int8 export's score when every plotted row has one
    int8_scores = [_int8_average(r, table["tasks"]) for r in rows]
    use_int8 = runtime == "onnx_int8" and None not in int8_scores
    points = [(r[f"latency_{runtime}_ms"], s if use_int8 else r["average"]) for r, s in zip(rows, int8_scores)]
    largest = max(r["params"] or 1 for r in rows)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for row, (x, y) in zip(rows, points):
        area = 60 + 1400 * (row["params"] or 0) / largest
        if row["teacher"]:
            ax.scatter([x], [y], s=area, marker="*", color="tab:red", alpha=0.8, edgecolors="black", zorder=3)
        else:
            ax.scatter([x], [y], s=area, color="tab:blue", alpha=0.45, edgecolors="black", zorder=2)
        params = f", {row['params'] / 1e6:.1f}M params" if row["params"] else ""
        ax.annotate(f"{row['name']}{params}", (x, y), textcoords="offset points", xytext=(8, 6), fontsize=8)
    front = pareto_front(points)
    ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "--", color="gray", zorder=1,
            label="Pareto front")
    label = dict(RUNTIMES)[runtime]
    ax.set_xlabel(f"batch-1 latency, {label} (ms" + (f", sequence {rows[0]['seq_len']})" if rows[0]["seq_len"]
                                                     else ")"))
    ax.set_ylabel(("int8 " if use_int8 else "") + "dev score"
                  + (f" ({table['tasks'][0]})" if len(table["tasks"]) == 1
                     else f" (average of {len(table['tasks'])} tasks)"))
    ax.margins(y=0.15)
    ax.set_title(title or "Dev score against latency (bubble area: parameters; star: teacher)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    xs = [p[0] for p in points]
    ax.set_xlim(0, max(xs) * 1.35)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_name(Path(path).name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return True


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(records: list[dict], output_dir: str | os.PathLike, latency: str | None = None) -> dict[str, str]:
    """Write ``report.md``, ``report.csv``, ``report.json`` and (with latencies) ``pareto.png``."""
    table = build_table(records)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "report.md", "csv": out / "report.csv", "json": out / "report.json"}
    _write_text(paths["markdown"], format_markdown(table))
    _write_text(paths["csv"], format_csv(table))
    write_json(paths["json"], {"table": table, "records": records})
    if plot_pareto(table, out / "pareto.png", latency):
        paths["plot"] = out / "pareto.png"
    return {k: str(v) for k, v in paths.items()}
