"""The model card kdbert writes beside a model it ships: ``README.md`` in Hugging Face's format.

``kdbert export`` writes :func:`export_card` into the export folder (inside the folder written
atomically); ``kdbert compress`` then replaces the winner's with :func:`compress_card`, which adds
the search's facts. A card is YAML front matter (``library_name``, ``tags``, ``base_model``,
``datasets``, ``metrics`` and ``model-index``: the dev metrics of each ONNX file, in percent as
kdbert reports them) then Markdown sections: the model, its teacher or source, the data, how it was
selected, its dev score, its speed, its int8 graph, known limits and the command that made it.

Every figure comes from the reports (``export_report.json``, ``compress_report.json``), the
task's rows and the source folder's ``run_config.json``; a section whose facts are missing is left
out.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Sequence

import yaml

CARD_FILE = "README.md"
RUNTIME_LABELS = {"pytorch": "PyTorch", "onnx_fp32": "ONNX fp32", "onnx_int8": "ONNX int8"}
# kdbert's metric names -> Hugging Face metric ids
METRIC_IDS = {"accuracy": "accuracy", "f1": "f1", "macro_f1": "f1", "mcc": "matthews_correlation",
              "pearson": "pearsonr", "spearman": "spearmanr", "exact_match": "exact_match"}
# tasks read from a Hugging Face data set: name -> (data set id, its pretty name)
HUB_DATASETS = {"imdb": ("stanfordnlp/imdb", "IMDb"), "squad": ("rajpurkar/squad", "SQuAD v1.1"),
                "squad2": ("rajpurkar/squad_v2", "SQuAD v2.0")}
GLUE_DATASET = "nyu-mll/glue"

__all__ = ["CARD_FILE", "compress_card", "export_card", "task_facts", "write_card", "write_compress_card",
           "write_export_card"]


def task_facts(data, held_out_fraction: float = 0.0, train_rows: int | None = None) -> dict:
    """What a card says of a task's data (a :class:`~kdbert.data.glue.TaskData`): its name,
    metrics, dev rows per split, training rows (``train_rows`` when a run used fewer) and the
    rows held out of them to pick on."""
    spec = data.spec
    return {"name": spec.name, "metrics": list(spec.metrics),
            "dev_rows": {split: len(rows) for split, rows in data.dev.items()},
            "train_rows": len(data.train) if train_rows is None else train_rows,
            "held_out_rows": len(data.held_out), "held_out_fraction": held_out_fraction,
            "glue_config": spec.hf_config if spec.glue_folder else None,
            "question_answering": spec.question_answering}


# --------------------------------------------------------------------------- front matter


def _dataset(task: dict, split: str) -> dict:
    """The ``model-index`` data set entry of ``task``'s dev ``split``."""
    if task["glue_config"]:
        return {"type": GLUE_DATASET, "name": f"GLUE {task['name'].upper()}", "config": task["glue_config"],
                "split": split.replace("dev", "validation")}
    if task["name"] in HUB_DATASETS:
        dataset_id, name = HUB_DATASETS[task["name"]]
        return {"type": dataset_id, "name": name, "split": "validation" if split == "dev" else split}
    return {"type": task["name"], "name": task["name"], "split": split}


def _hub_dataset(task: dict) -> str | None:
    if task["glue_config"]:
        return GLUE_DATASET
    return HUB_DATASETS.get(task["name"], (None,))[0]


def _metric_key(metric: str, split: str, task: dict) -> str:
    return metric if len(task["dev_rows"]) == 1 else f"{split}/{metric}"


def _model_index(name: str, report: dict, task: dict | None) -> list[dict]:
    """The ``model-index`` entry of ``report``: per dev split of ``task``, each metric of each
    exported ONNX file (none without a task)."""
    results = []
    if task:
        kind = "question-answering" if task["question_answering"] else "text-classification"
        for split in task["dev_rows"]:
            metrics = [{"type": METRIC_IDS.get(metric, metric), "value": scores[_metric_key(metric, split, task)],
                        "name": f"{metric} ({RUNTIME_LABELS[runtime]}, percent)"}
                       for runtime, scores in report.get("dev_metrics", {}).items() if runtime != "pytorch"
                       for metric in task["metrics"] if _metric_key(metric, split, task) in scores]
            if metrics:
                results.append({"task": {"type": kind}, "dataset": _dataset(task, split), "metrics": metrics})
    return [{"name": name, "results": results}] if results else []


def _front_matter(name: str, report: dict, task: dict | None, base_model: str | None, tags: list[str]) -> str:
    meta: dict = {"library_name": "onnx", "tags": tags}
    if base_model:
        meta["base_model"] = base_model
    if task:
        hub = _hub_dataset(task)
        if hub:
            meta["datasets"] = [hub]
        meta["metrics"] = sorted({METRIC_IDS.get(metric, metric) for metric in task["metrics"]})
        meta["pipeline_tag"] = "question-answering" if task["question_answering"] else "text-classification"
    model_index = _model_index(name, report, task)
    if model_index:
        meta["model-index"] = model_index
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---"


def _tags(report: dict, compressed: bool) -> list[str]:
    tags = ["kdbert", "onnx"]
    if report.get("quantization"):
        tags.append("int8")
    if compressed:
        tags.append("knowledge-distillation")
    return tags


# --------------------------------------------------------------------------- sections


def _source_run(source: str | None) -> dict | None:
    """The ``run_config.json`` of the folder an export came from (a kdbert run), if any."""
    path = Path(source) / "run_config.json" if source else None
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text())


def _origin(report: dict, run: dict | None) -> tuple[str | None, list[str]]:
    """The model an export came from (its teacher, else the model it was fine-tuned from, else its
    source folder) and the lines saying so."""
    source = report.get("source")
    lines = [f"Exported from `{source}` by `kdbert export`."] if source else []
    if run and run.get("teacher"):
        method = f" with {run['method']}" if run.get("method") else ""
        lines.append(f"Distilled{method} from the teacher `{run['teacher']}`.")
        return run["teacher"], lines
    if run and run.get("command") == "finetune" and run.get("model"):
        lines.append(f"Fine-tuned from `{run['model']}`.")
        return run["model"], lines
    return source, lines


def _model_lines(report: dict, shape: dict | None = None) -> list[str]:
    family = report.get("family")
    if not family:
        return []
    shaped = f" ({', '.join(f'{key} {value}' for key, value in shape.items())})" if shape else ""
    lines = [f"{family}{shaped}"
             + (f": {report['params_total']:,} parameters" if "params_total" in report else "")
             + (f", {report['params_non_embedding']:,} outside the embeddings"
                if "params_non_embedding" in report else "") + "."]
    files = report.get("files", {})
    if files:
        lines.append("Files: " + ", ".join(f"`{f['file']}` ({precision}, {f['size_mb']:.2f} MB)"
                                          for precision, f in files.items()) + ".")
    if report.get("inputs"):
        limit = f", at most {report['max_positions']} tokens" if report.get("max_positions") else ""
        lines.append(f"Inputs: {', '.join(report['inputs'])}{limit}.")
    return lines


def _data_lines(task: dict | None) -> list[str]:
    if not task:
        return []
    dev = ", ".join(f"{rows} rows ({split})" for split, rows in task["dev_rows"].items())
    lines = [f"Task: {task['name']}; dev: {dev}."]
    if task.get("train_rows") is not None:
        held = (f", of which {task['held_out_rows']} ({task['held_out_fraction']:.0%}) held out to pick on"
                if task.get("held_out_rows") else ", none held out")
        lines.append(f"Training rows: {task['train_rows']}{held}.")
    return lines


def _export_score_lines(report: dict) -> list[str]:
    metrics = report.get("dev_metrics") or {}
    scores = [f"{values['score']:.2f} ({RUNTIME_LABELS.get(runtime, runtime)})"
              for runtime, values in metrics.items() if "score" in values]
    lines = [f"Dev score: {', '.join(scores)}."] if scores else []
    parity = report.get("parity") or {}
    if "max_abs_logit_diff_fp32" in parity:
        diffs = ", ".join(f"{key.rsplit('_', 1)[1]} {value:.2g}" for key, value in parity.items()
                          if key.startswith("max_abs_logit_diff_"))
        lines.append(f"Largest logit difference from PyTorch on {parity['examples']} {parity['source']} rows: "
                     f"{diffs}.")
    return lines


def _int8_lines(int8: dict | None) -> list[str]:
    if not int8:
        return []
    bits = int8.get("weight_bits")
    why = {7: "7-bit weights (the default, --int8-target any): ONNX Runtime's int8 kernel on x86 CPUs without "
              "VNNI sums weight pairs in saturating 16-bit integers, which 7-bit weights cannot overflow, so the "
              "graph is exact on every x86 CPU",
           8: "8-bit weights (--int8-target vnni): a finer weight grid, exact only on CPUs with VNNI or AMX "
              "(and on ARM)"}.get(bits, f"{bits}-bit weights" if bits else None)
    lines = [f"Method: {int8['method']} ({int8['rule']})." if "rule" in int8 else f"Method: {int8['method']}."]
    if why:
        lines.append(f"Weights: {why}.")
    machine = int8.get("quantised_and_checked_on") or {}
    if machine.get("cpu"):
        flags = ", ".join(machine.get("int8_flags", [])) or "none"
        lines.append(f"Quantised and checked on {machine['cpu']} (int8 flags: {flags}).")
    return lines


def _threads(count: int | None) -> str:
    return "" if count is None else f", {count} thread" + ("s" if count != 1 else "")


def _export_speed_lines(report: dict) -> list[str]:
    int8 = report.get("quantization") or {}
    chosen = (int8.get("variants") or {}).get(int8.get("method"), {})
    if "latency_real_p50_ms" not in chosen:
        return []
    cpu = (int8.get("quantised_and_checked_on") or {}).get("cpu")
    where = "".join([f" on {cpu}" if cpu else "", _threads(report.get("threads")),
                     f", ONNX Runtime {report['versions']['onnxruntime']}" if "versions" in report else ""])
    return [f"int8 ({int8['method']}): {chosen['latency_real_p50_ms']:.2f} ms per row (median, batch 1, "
            f"{int8['timed_rows']} {int8['chosen_on']} rows at their own lengths){where}."]


def _limit_lines(int8: dict | None, task: dict | None) -> list[str]:
    lines = []
    if task:
        lines.append(f"Scores are measured on one task's dev rows ({task['name']}); other text may score lower.")
    else:
        lines.append("Exported without a task: parity was checked on synthetic rows and there is no score.")
    if int8 and int8.get("weight_bits") == 8:
        lines.append("The int8 graph has 8-bit weights: on x86 CPUs without VNNI or AMX, ONNX Runtime's int8 "
                     "kernel saturates and its outputs can be wrong; re-export with `--int8-target any`.")
    return lines


def _command_lines(command: str | Sequence[str] | None, report: dict) -> list[str]:
    lines = []
    if command:
        text = command if isinstance(command, str) else shlex.join(command)
        lines.append(f"```\n{text}\n```")
    versions = report.get("versions")
    if versions:
        lines.append("Versions: " + ", ".join(f"{name} {version}" for name, version in versions.items()) + ".")
    return lines


def _card(front: str, title: str, sections: list[tuple[str, list[str]]]) -> str:
    parts = [front, f"# {title}"]
    for heading, lines in sections:
        if lines:
            parts += [f"## {heading}", "\n\n".join(lines)]
    return "\n\n".join(parts) + "\n"


# --------------------------------------------------------------------------- cards


def export_card(report: dict, task: dict | None = None, command: str | Sequence[str] | None = None,
                source_run: dict | None = None) -> str:
    """The card of an export from its ``export_report.json`` ``report``, the ``task`` it was
    checked on (:func:`task_facts`), the ``command`` that made it and its source folder's
    ``run_config.json`` (``source_run``)."""
    base_model, origin = _origin(report, source_run)
    name = Path(report.get("source") or "model").name
    return _card(_front_matter(name, report, task, base_model, _tags(report, compressed=False)),
                 f"{report.get('family', 'Model')} (ONNX)", [
                     ("Model", _model_lines(report)), ("Origin", origin), ("Data", _data_lines(task)),
                     ("Evaluation", _export_score_lines(report)), ("Speed", _export_speed_lines(report)),
                     ("int8", _int8_lines(report.get("quantization"))),
                     ("Known limits", _limit_lines(report.get("quantization"), task)),
                     ("How it was made", _command_lines(command, report))])


def _selection_lines(report: dict) -> list[str]:
    winner, target = report.get("winner") or {}, report.get("target") or {}
    if not winner:
        return []
    wanted = (f"at least {target['speedup']:g}x the teacher's speed" if target.get("speedup") is not None
              else f"at most {target['latency_ms']:g} ms per row" if target.get("latency_ms") is not None else None)
    if wanted and report.get("runtime"):
        wanted += f" in {report['runtime']}"
    rounds = (report.get("search") or {}).get("rounds") or []
    trained = len({row["candidate"] for rung in rounds for row in rung})
    lines = [f"Picked by `kdbert compress`"
             + (f" among the {trained} candidate{'s' if trained != 1 else ''} the search trained" if trained else "") + (f" (target: {wanted})" if wanted else "")
             + f": **{winner['candidate']}**, rule `{winner['rule']}`."]
    teachers, shipped = report.get("teacher_scores") or {}, report.get("shipped") or {}
    if "decide_score" in shipped:
        lines.append(f"On the {report['decide_rows']} held-out training rows that decide (never used to pick a "
                     f"checkpoint or promote): {winner['decide_score']:.2f} in PyTorch and {shipped['decide_score']:.2f}"
                     f" ± {shipped['decide_se']:.2f} as shipped, against the teacher's {teachers['decide']:.2f} "
                     f"({100 * shipped['kept_decide']:.1f}% kept as shipped).")
    elif "score" in winner and teachers.get("held_out") is not None:
        kept = f" ({100 * winner['kept']:.1f}% kept)" if "kept" in winner else ""
        lines.append(f"Held-out score: {winner['score']:.2f} against the teacher's "
                     f"{teachers['held_out']:.2f}{kept}.")
    start = (report.get("starts") or {}).get(winner["candidate"])
    general = report.get("general_students") or {}
    if start == "general" and general:
        lines.append(f"Its distillation started from a general student built from {general['base']} for "
                     f"{general['minutes']:.0f} min (`kdbert students build`).")
    elif start == "user":
        shape = report["speed"]["candidates"][winner["candidate"]]["shape"]
        lines.append(f"Its distillation started from the weights of {shape['path']} (`--student`).")
    if report.get("teacher_saw_held_out_rows"):
        lines.append("The teacher was fine-tuned on the held-out rows too (--teacher-trained-on-all-rows), so its "
                     "held-out score and every kept share read high.")
    return lines


def _compress_score_lines(report: dict) -> list[str]:
    shipped, teacher = report.get("shipped") or {}, report.get("teacher_scores") or {}
    if "dev_score" not in shipped:
        return []
    against = f" against the teacher's {teacher['dev']:.2f}" if "dev" in teacher else ""
    kept = f": {100 * shipped['kept_dev']:.1f}% of it kept" if shipped.get("kept_dev") is not None else ""
    gain = (f", {100 * shipped['gain_kept_dev']:.1f}% of its gain over the majority class "
            f"({shipped['majority_dev']:.2f})" if shipped.get("gain_kept_dev") is not None else "")
    lines = [f"Dev score ({report.get('runtime', 'shipped')}): {shipped['dev_score']:.2f}{against}{kept}{gain}."]
    if shipped.get("agreement_dev") is not None:
        lines.append(f"Agreement with the teacher on dev: {shipped['agreement_dev']:.1f} "
                     f"({shipped.get('agreement_measure', '')}).")
    return lines


def _compress_speed_lines(report: dict) -> list[str]:
    shipped = report.get("shipped") or {}
    if "latency_real_p50_ms" not in shipped:
        return []
    settings = (report.get("speed") or {}).get("settings") or {}
    cpu = ((shipped.get("int8") or {}).get("quantised_and_checked_on") or {}).get("cpu") or settings.get("machine")
    teacher = (f" against the teacher's {shipped['teacher_latency_real_p50_ms']:.2f} ms"
               if "teacher_latency_real_p50_ms" in shipped else "")
    speedup = f": {shipped['speedup']:.2f}x its speed" if "speedup" in shipped else ""
    turns = (f", timed in turns with it {len(shipped['timed_in_turns'])} times"
             if shipped.get("timed_in_turns") else "")
    where = "".join([f" on {cpu}" if cpu else "", _threads(settings.get("threads")),
                     f", {report['runtime']}" if report.get("runtime") else ""])
    return [f"{shipped['latency_real_p50_ms']:.2f} ms per dev row (median, batch 1, rows at their own lengths)"
            f"{teacher}{speedup}{turns}{where}."]


def _compress_limit_lines(report: dict, export_report: dict, task: dict | None) -> list[str]:
    lines = _limit_lines(export_report.get("quantization"), task)
    shipped = report.get("shipped") or {}
    if shipped.get("kept_dev") is not None and shipped["kept_dev"] < 1:
        lines.append(f"The student scores below its teacher ({100 * shipped['kept_dev']:.1f}% of its dev score); "
                     "on text unlike the task's rows the gap may be larger.")
    return lines


def compress_card(report: dict, export_report: dict, task: dict | None = None,
                  command: str | Sequence[str] | None = None) -> str:
    """The card of ``kdbert compress``'s winner from ``compress_report.json`` (``report``), the
    winner's ``export_report.json`` (``export_report``), the searched ``task``
    (:func:`task_facts`) and the ``command`` that made it."""
    winner = report.get("winner") or {}
    shape = ((report.get("speed") or {}).get("candidates") or {}).get(winner.get("candidate"), {}).get("shape")
    teacher = report.get("teacher")
    origin = [f"Distilled from the teacher `{teacher}` by `kdbert compress`."] if teacher else []
    name = winner.get("candidate") or "student"
    return _card(_front_matter(name, export_report, task, teacher, _tags(export_report, compressed=True)),
                 f"{name}: a student of {Path(teacher).name if teacher else 'its teacher'}", [
                     ("Model", _model_lines(export_report, shape)), ("Origin", origin), ("Data", _data_lines(task)),
                     ("Selection", _selection_lines(report)), ("Evaluation", _compress_score_lines(report)),
                     ("Speed", _compress_speed_lines(report)), ("int8", _int8_lines(export_report.get("quantization"))),
                     ("Known limits", _compress_limit_lines(report, export_report, task)),
                     ("How it was made", _command_lines(command, export_report))])


# --------------------------------------------------------------------------- writing


def write_card(folder: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``folder/README.md`` atomically (a temporary file moved into place)."""
    path = Path(folder) / CARD_FILE
    tmp = path.with_name(f".{CARD_FILE}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_export_card(folder: str | os.PathLike, report: dict, data=None, held_out_fraction: float = 0.0,
                      command: str | Sequence[str] | None = None) -> Path:
    """:func:`export_card` of ``report``, checked on ``data`` (a TaskData, or None), into ``folder``."""
    task = task_facts(data, held_out_fraction) if data is not None else None
    return write_card(folder, export_card(report, task, command, _source_run(report.get("source"))))


def write_compress_card(folder: str | os.PathLike, report: dict, data, held_out_fraction: float,
                        train_rows: int, command: str | Sequence[str] | None = None) -> Path:
    """:func:`compress_card` of ``report`` and the winner's export report in ``folder``, into ``folder``."""
    export_report = json.loads((Path(folder) / "export_report.json").read_text())
    task = task_facts(data, held_out_fraction, train_rows)
    return write_card(folder, compress_card(report, export_report, task, command))
