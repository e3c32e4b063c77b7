"""Shared helpers of the benchmark scripts: machine facts and a JSON results store."""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import platform
import re
from pathlib import Path

import torch

from kdbert.core.hardware import cpu_flags

# Every figure recorded before bf16 became kdbert's default (`--mixed-precision auto`) trained in
# float32; benchmark scripts keep float32 for `auto` so reruns reproduce them, unless the caller
# sets $KDBERT_MIXED_PRECISION or a script asks for a precision explicitly.
FLOAT32_PINNED = "KDBERT_MIXED_PRECISION" not in os.environ
os.environ.setdefault("KDBERT_MIXED_PRECISION", "no")

RESULTS_DIR = Path(os.environ.get("KDBERT_RESULTS_DIR") or Path(__file__).parent / "results")
"""Where results are read and written: ``benchmarks/results``, or ``$KDBERT_RESULTS_DIR`` (e.g. a
separate folder for figures measured on another kind of machine, so they never replace these)."""


def cpu_model() -> str:
    """The processor's model name (Linux ``/proc/cpuinfo``), else the platform's machine type."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.machine()


def cpu_kind(flags: set[str]) -> str:
    """The instructions that move a CPU's figures (bf16 training, int8 sums), from its ``flags``:
    ``"AMX"``, ``"AVX-512, VNNI, bf16"`` (each part where present), ``"AVX2"``, or ``""``."""
    if "amx_int8" in flags:
        return "AMX"
    if "avx512f" in flags:
        return ", ".join(["AVX-512"] + ["VNNI"] * ("avx512_vnni" in flags) + ["bf16"] * ("avx512_bf16" in flags))
    return "AVX2" if "avx2" in flags else ""


def machine_info() -> dict:
    """Where and when a figure was measured."""
    kind = cpu_kind(cpu_flags())
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()} {os.cpu_count()} CPU cores" + (f" ({kind})" if kind else "")
        + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no GPU"),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def load_results(name: str, results_dir: str | os.PathLike | None = None) -> dict:
    path = Path(results_dir or RESULTS_DIR) / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def save_result(name: str, key: str, result: dict) -> None:
    """Add ``result`` under ``key`` to ``results/<name>.json`` (atomic rewrite).

    A lock file serialises the read-modify-write, so benchmark jobs running side by side
    never drop each other's rows.
    """
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    with open(RESULTS_DIR / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = load_results(name)
        results[key] = result
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=2, sort_keys=True))
        os.replace(tmp, path)


def compare_rerun(recorded: float, seed_scores: list[float], rerun: float, tolerance: float) -> dict:
    """Does a rerun reproduce a recorded score, within the noise the benchmarks state?

    ``seed_scores`` are the recorded scores of every seed of the same figure: with two or more,
    the noise allowed is their sample standard deviation (BENCHMARKS.md calls a difference
    "within 1 std" by the same rule); with fewer, it is ``tolerance`` (points), since one seed
    states no noise. Returns the figures, the noise and its source, and ``reproduced``.
    """
    delta = rerun - recorded
    if len(seed_scores) >= 2:
        mean = sum(seed_scores) / len(seed_scores)
        noise = (sum((s - mean) ** 2 for s in seed_scores) / (len(seed_scores) - 1)) ** 0.5
        source = f"std of the {len(seed_scores)} recorded seeds"
    else:
        noise, source = tolerance, "--tolerance (one recorded seed)"
    reproduced = abs(delta) <= noise
    summary = (f"recorded {recorded:.2f}, rerun {rerun:.2f} ({delta:+.2f}): "
               + ("identical" if delta == 0 else "within" if reproduced else "NOT within")
               + (f" {source} {noise:.2f}" if delta != 0 else ""))
    return {"recorded": recorded, "rerun": rerun, "delta": delta, "noise": noise, "noise_source": source,
            "reproduced": reproduced, "summary": summary}


def finished_run(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a finished ``kdbert finetune`` / distillation run (its final report)."""
    folder = Path(folder)
    return (folder / "metrics.json").is_file() or (folder / "distill_report.json").is_file()


def add_build_missing_option(parser, before: str) -> None:
    """The ``--build-missing`` option of a script whose steps are recorded run folders."""
    parser.add_argument("--build-missing", action="store_true",
                        help="train recorded steps whose run folder is missing again (the record is kept), "
                             f"e.g. before {before} on a fresh machine")


def rebuild_missing_steps(name: str, steps, run_step) -> None:
    """:func:`rebuild_missing` for each recorded step of ``steps``, ``run_step(step)`` training it."""
    for step in steps:
        if step in load_results(name):
            rebuild_missing(name, step, lambda: run_step(step))


def rebuild_missing(name: str, key: str, rebuild) -> dict | None:
    """A recorded step whose run folder is gone (a fresh machine's checkout has no ``runs/``) run
    again into it by ``rebuild()`` (which returns the step's result, with ``metrics``), so that a
    later step reading the folder (a full test, a bench) has its model. The record keeps its
    figures and gains ``rebuilt``: the new run's metrics, date and whether they equal the recorded
    ones, so that what the later step measured is said. Returns the new record, or None when the
    folder was there."""
    record = load_results(name)[key]
    if finished_run(record["output_dir"]):
        return None
    metrics = rebuild()["metrics"]
    same = all(abs(metrics.get(k, float("nan")) - v) < 1e-9 for k, v in record["metrics"].items()
               if isinstance(v, (int, float)))
    rebuilt = {**record, "rebuilt": {"metrics": metrics, "same_as_recorded": same, **machine_info()}}
    save_result(name, key, rebuilt)
    print(f"{key}: its folder was missing, built again: {metrics} "
          f"({'the same as' if same else 'differs from'} the record {record['metrics']}; the record is kept)")
    return rebuilt


def random_weight_exports(teacher_folder: str | os.PathLike, task, names: list[str],
                          folder: str | os.PathLike) -> dict[str, Path]:
    """The candidate shapes ``names`` of the teacher in ``teacher_folder`` for ``task`` (a TaskOptions),
    the packaged pre-trained students (``pretrained-minilm-l6`` ...) among them, and any other cut of
    all-MiniLM-L6-v2 by name (``pretrained-minilm-l<layers>-ffn<units>``), built with random weights
    (their speed does not depend on them) and exported as compress times them (ONNX int8) under
    ``folder``: name -> its ``model.int8.onnx``."""
    from kdbert.compress.pipeline import PRETRAINED_STUDENTS, PretrainedStudent
    from kdbert.compress.speed import all_candidates, shape_context
    from kdbert.core.loading import default_model_path, own_tokenizer
    from kdbert.deploy.export import export_classifier
    from kdbert.deploy.onnx_runtime import INT8_FILE
    from kdbert.families.registry import family_of_folder

    teacher = family_of_folder(teacher_folder).load(Path(teacher_folder))
    context = shape_context(teacher_folder, task, teacher=teacher)
    chosen = {c.name: c for c in all_candidates(context) if c.name in names}
    cuts = {name: PretrainedStudent(default_model_path, int(found[1]), int(found[2]) if found[2] else None)
            for name in names if (found := re.fullmatch(r"pretrained-minilm-l(\d+)(?:-ffn(\d+))?", name))}
    students = {**cuts, **PRETRAINED_STUDENTS}
    for name in set(names) & set(students):
        student = students[name]
        own = own_tokenizer(student.folder(), *teacher, option=name) is not None
        chosen[name] = student.candidate(name, own)
    missing = sorted(set(names) - set(chosen))
    if missing:
        raise SystemExit(f"not candidates of the teacher {teacher_folder}: {', '.join(missing)}")
    files = {}
    for name in names:
        model, encoder = chosen[name].build(context)
        export_classifier(model, encoder, Path(folder) / name, quantize="int8", source=f"{name} (random weights)")
        files[name] = Path(folder) / name / INT8_FILE
    return files
