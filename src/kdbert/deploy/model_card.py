"""The model card kdbert writes beside a model it ships: ``README.md`` in Hugging Face's format.

``kdbert export`` writes :func:`export_card` into the export folder (inside the folder written
atomically); ``kdbert compress`` then replaces the winner's with :func:`compress_card`, which adds
the search's facts. The card is built with ``huggingface_hub``: its metadata is a
``ModelCardData`` (``language`` and ``license`` where known, ``library_name``, ``tags``,
``base_model`` where the model it comes from is a Hub id, ``datasets``, ``metrics``,
``pipeline_tag``) whose ``model-index`` holds ``EvalResult``\\ s, in percent as kdbert reports
them: the dev metrics of each ONNX file and, for compress, the teacher's dev score and the
student's and the teacher's scores on the held-out rows that decide. The body is the Jinja
template ``model_card_template.md`` beside this module (``ModelCard.from_template``): the model,
its teacher or source, the data, how it was selected, its dev score, its speed, its int8 graph,
known limits and the command that made it.

Every figure comes from the reports (``export_report.json``, ``compress_report.json``), the
task's rows and the source folder's ``run_config.json``; a paragraph whose facts are missing is
left out. The license (and, without a Hub data set, the language) is the one the model's
lineage states: the card of the folder it came from, else of the teacher or model that folder's
kdbert run started from. Nothing here reaches the network.
"""

from __future__ import annotations

import json
import os
import shlex
from importlib import resources
from pathlib import Path
from typing import Sequence

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData, try_to_load_from_cache
from huggingface_hub.utils import HFValidationError

CARD_FILE = "README.md"
TEMPLATE = "model_card_template.md"  # shipped in the wheel: pyproject.toml's package-data
RUNTIME_LABELS = {"pytorch": "PyTorch", "onnx_fp32": "ONNX fp32", "onnx_int8": "ONNX int8"}
# kdbert's metric names -> Hugging Face metric ids
METRIC_IDS = {"accuracy": "accuracy", "f1": "f1", "macro_f1": "f1", "mcc": "matthews_correlation",
              "pearson": "pearsonr", "spearman": "spearmanr", "exact_match": "exact_match"}
# tasks read from a Hugging Face data set: name -> (data set id, its pretty name); GLUE's, IMDb and
# SQuAD are English
HUB_DATASETS = {"imdb": ("stanfordnlp/imdb", "IMDb"), "squad": ("rajpurkar/squad", "SQuAD v1.1"),
                "squad2": ("rajpurkar/squad_v2", "SQuAD v2.0")}
GLUE_DATASET = "nyu-mll/glue"
LICENSE_KEYS = ("license", "license_name", "license_link")

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


# --------------------------------------------------------------------------- lineage


def _cached(model: str, filename: str) -> str | None:
    """``filename`` of the Hub model ``model`` in the local Hub cache, if there."""
    try:
        found = try_to_load_from_cache(model, filename)
    except HFValidationError:  # not a Hub id at all (an absolute path, ../x)
        return None
    return found if isinstance(found, str) else None


def _hub_id(model: str | None) -> str | None:
    """``model`` as a Hub id where it is one: a name whose files are in the local Hub cache (as a
    model loaded from the Hub is), or a folder of that cache (``models--org--name/snapshots/rev``);
    None for any other folder or name."""
    if not model:
        return None
    path = Path(model).expanduser()
    if path.exists():
        parts = path.resolve().parts
        cached = len(parts) > 2 and parts[-2] == "snapshots" and parts[-3].startswith("models--")
        return parts[-3].removeprefix("models--").replace("--", "/") if cached else None
    return model if _cached(model, "config.json") else None


def _source_run(source: str | None) -> dict | None:
    """The ``run_config.json`` of a folder (a kdbert run), if any."""
    path = Path(source).expanduser() / "run_config.json" if source else None
    return json.loads(path.read_text()) if path and path.is_file() else None


def _inherited(model: str | None, steps: int = 4) -> dict:
    """The license keys of the first card along ``model``'s lineage that states a license, and the
    ``language`` of the first that states one. The lineage: the card (``README.md``) of the folder
    or of the Hub id in the cache, then the teacher or model its kdbert run started from
    (``run_config.json``), and so on."""
    found = {}
    for _ in range(steps):
        if not model:
            break
        folder = Path(model).expanduser()
        card = folder / CARD_FILE if folder.is_dir() else _cached(model, CARD_FILE)
        try:
            data = ModelCard.load(card, ignore_metadata_errors=True).data if card and Path(card).is_file() else None
        except (ValueError, yaml.YAMLError):  # a README whose front matter is not a card's
            data = None
        if data and data.language and "language" not in found:
            found["language"] = data.language
        if data and data.license:
            return {**found, **{key: data.get(key) for key in LICENSE_KEYS}}
        run = _source_run(model) or {}
        model = run.get("teacher") or run.get("model")
    return found


# --------------------------------------------------------------------------- metadata


def _dataset(task: dict, split: str) -> dict:
    """The ``EvalResult`` data set fields of ``task``'s ``split`` (a dev split, ``train``)."""
    if task["glue_config"]:
        return {"dataset_type": GLUE_DATASET, "dataset_name": f"GLUE {task['name'].upper()}",
                "dataset_config": task["glue_config"], "dataset_split": split.replace("dev", "validation")}
    if task["name"] in HUB_DATASETS:
        dataset_id, name = HUB_DATASETS[task["name"]]
        return {"dataset_type": dataset_id, "dataset_name": name,
                "dataset_split": "validation" if split == "dev" else split}
    return {"dataset_type": task["name"], "dataset_name": task["name"], "dataset_split": split}


def _hub_dataset(task: dict | None) -> str | None:
    if not task:
        return None
    return GLUE_DATASET if task["glue_config"] else HUB_DATASETS.get(task["name"], (None,))[0]


def _kind(task: dict) -> str:
    return "question-answering" if task["question_answering"] else "text-classification"


def _metric_key(metric: str, split: str, task: dict) -> str:
    return metric if len(task["dev_rows"]) == 1 else f"{split}/{metric}"


def _dev_results(report: dict, task: dict) -> list[EvalResult]:
    """Per dev split of ``task``, each metric of each exported ONNX file of ``report``."""
    return [EvalResult(task_type=_kind(task), **_dataset(task, split), metric_type=METRIC_IDS.get(metric, metric),
                       metric_value=scores[key], metric_name=f"{metric} ({RUNTIME_LABELS[runtime]}, percent)")
            for split in task["dev_rows"]
            for runtime, scores in report.get("dev_metrics", {}).items() if runtime != "pytorch"
            for metric in task["metrics"] if (key := _metric_key(metric, split, task)) in scores]


def _compress_results(report: dict, task: dict) -> list[EvalResult]:
    """The scores a compress card states, kdbert's task score (the mean of the task's metrics):
    on dev, the teacher's (and the student's as shipped where the score is not one of the metrics
    above); on the held-out rows that decide, the student's in PyTorch and as shipped and the
    teacher's (without such rows, both on the held-out rows that pick)."""
    metrics, splits = task["metrics"], list(task["dev_rows"])
    metric_type = METRIC_IDS.get(metrics[0], metrics[0]) if len(metrics) == 1 else "score"
    label = metrics[0] if len(metrics) == 1 else "mean of " + " and ".join(metrics)
    shipped, teacher = report.get("shipped") or {}, report.get("teacher_scores") or {}
    winner = report.get("winner") or {}
    runtime = RUNTIME_LABELS.get(str(report.get("runtime")).replace("-", "_"), "as shipped")
    dev = _dataset(task, "+".join(splits))
    dev_label = label + (", mean of the dev splits" if len(splits) > 1 else "")
    rows = []
    if "dev_score" in shipped and (len(metrics) > 1 or len(splits) > 1):
        rows.append((dev, shipped["dev_score"], f"{dev_label} (student, {runtime}, percent)"))
    if teacher.get("dev") is not None:
        rows.append((dev, teacher["dev"], f"{dev_label} (teacher, PyTorch, percent)"))
    held = _dataset(task, "train")
    if "decide_score" in shipped:
        where = f"{label} on the {report['decide_rows']} held-out training rows that decide"
        rows += [(held, winner["decide_score"], f"{where} (student, PyTorch, percent)"),
                 (held, shipped["decide_score"], f"{where} (student, {runtime}, percent)"),
                 (held, teacher["decide"], f"{where} (teacher, PyTorch, percent)")]
    elif "score" in winner and teacher.get("held_out") is not None:
        where = f"{label} on the held-out training rows that pick"
        rows += [(held, winner["score"], f"{where} (student, PyTorch, percent)"),
                 (held, teacher["held_out"], f"{where} (teacher, PyTorch, percent)")]
    return [EvalResult(task_type=_kind(task), **dataset, metric_type=metric_type, metric_value=value,
                       metric_name=name) for dataset, value, name in rows if value is not None]


def _card_data(name: str, report: dict, task: dict | None, origin: str | None, tags: list[str],
               results: list[EvalResult]) -> ModelCardData:
    """The card's metadata: ``report`` is the export report, ``origin`` the model it comes from."""
    inherited, hub = _inherited(origin), _hub_dataset(task)
    return ModelCardData(
        language="en" if hub else inherited.get("language"), **{key: inherited.get(key) for key in LICENSE_KEYS},
        library_name="onnx", tags=tags, base_model=_hub_id(origin), datasets=[hub] if hub else None,
        metrics=sorted({METRIC_IDS.get(metric, metric) for metric in task["metrics"]}) if task else None,
        pipeline_tag=_kind(task) if task else None, model_name=name if results else None,
        eval_results=results or None)


def _tags(report: dict, compressed: bool) -> list[str]:
    return ["kdbert", "onnx"] + ["int8"] * bool(report.get("quantization")) + ["knowledge-distillation"] * compressed


def _render(data: ModelCardData, **facts) -> str:
    """The card: ``data`` as its YAML front matter, then the template's body filled from ``facts``."""
    template = resources.files(__package__).joinpath(TEMPLATE).read_text(encoding="utf-8")
    command = facts.pop("command", None)
    text = command if command is None or isinstance(command, str) else shlex.join(command)
    defaults = {"run": {}, "compress": {}, "task": None, "shape": None, "trained": 0}
    return str(ModelCard.from_template(data, template_str=template, labels=RUNTIME_LABELS, command=text,
                                       **{**defaults, **facts}))


# --------------------------------------------------------------------------- cards


def export_card(report: dict, task: dict | None = None, command: str | Sequence[str] | None = None,
                source_run: dict | None = None) -> str:
    """The card of an export from its ``export_report.json`` ``report``, the ``task`` it was
    checked on (:func:`task_facts`), the ``command`` that made it and its source folder's
    ``run_config.json`` (``source_run``)."""
    run = source_run or {}
    origin = (run.get("teacher") or (run.get("model") if run.get("command") == "finetune" else None)
              or report.get("source"))
    data = _card_data(Path(report.get("source") or "model").name, report, task, origin,
                      _tags(report, compressed=False), _dev_results(report, task) if task else [])
    return _render(data, title=f"{report.get('family', 'Model')} (ONNX)", report=report, run=run, task=task,
                   command=command)


def compress_card(report: dict, export_report: dict, task: dict | None = None,
                  command: str | Sequence[str] | None = None) -> str:
    """The card of ``kdbert compress``'s winner from ``compress_report.json`` (``report``), the
    winner's ``export_report.json`` (``export_report``), the searched ``task``
    (:func:`task_facts`) and the ``command`` that made it."""
    winner, teacher = report.get("winner") or {}, report.get("teacher")
    shape = ((report.get("speed") or {}).get("candidates") or {}).get(winner.get("candidate"), {}).get("shape")
    name = winner.get("candidate") or "student"
    results = _dev_results(export_report, task) + _compress_results(report, task) if task else []
    data = _card_data(name, export_report, task, teacher, _tags(export_report, compressed=True), results)
    trained = len({row["candidate"] for rung in (report.get("search") or {}).get("rounds") or [] for row in rung})
    return _render(data, title=f"{name}: a student of {Path(teacher).name if teacher else 'its teacher'}",
                   report=export_report, compress=report, task=task, shape=shape, trained=trained, command=command)


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
