"""Shared helpers of the benchmark scripts: machine facts and a JSON results store."""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import platform
from pathlib import Path

import torch

RESULTS_DIR = Path(os.environ.get("KDBERT_RESULTS_DIR") or Path(__file__).parent / "results")
"""Where results are read and written: ``benchmarks/results``, or ``$KDBERT_RESULTS_DIR`` (e.g. a
separate folder for figures measured on another kind of machine, so they never replace these)."""


def machine_info() -> dict:
    """Where and when a figure was measured."""
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()} {os.cpu_count()} CPU cores"
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
