"""What a search keeps on disk once it has shipped, and what a full disk does to it.

A 30-minute search writes 1-2 GB, nearly all of it candidate runs (``runs/<candidate>``: the model,
its best checkpoint and the resumable checkpoints with their optimiser state). Once the winner has
shipped, ``--keep shipped`` (the default) keeps what the report, the winner and a rerun need: the
study, the timings, the stored teacher outputs, the exports checked, and the runs and starts of the
candidates checked for shipping (the runs without their checkpoints); the other candidates' runs are
removed, and of their starts only the record of how each was built stays. ``--keep
runs`` keeps every run and checkpoint (to continue a candidate by hand). The report says how much
the search wrote and how much it keeps.

A disk that fills mid-search stops compress with one line naming the folder, the space left and
about what one more segment needs; the study records only finished segments, so rerunning the same
command once space is freed continues the search.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from kdbert.errors import KdbertError

KEEPS = ("shipped", "runs")
START_RECORD = "student_init.json"  # how a candidate's start was built (teacher weights, general, user...)


def folder_bytes(folder: Path) -> int:
    """The bytes of every file below ``folder`` (0 when it does not exist)."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0


def keep_shipped(out: Path, keep: str, checked: list[str]) -> dict:
    """Remove what ``--keep`` does not keep from the search folder ``out`` (module doc; ``checked``:
    the candidates exported and checked for shipping); the bytes written and kept."""
    written = folder_bytes(out)
    if keep == "shipped":
        for run in sorted((out / "runs").glob("*")):
            if run.is_dir() and run.name not in checked:
                shutil.rmtree(run)
            elif run.is_dir():
                shutil.rmtree(run / "checkpoints", ignore_errors=True)
        for start in sorted((out / "starts").glob("*")):
            if start.is_dir() and start.name not in checked:  # its record of how it started stays
                for path in start.iterdir():
                    if path.name != START_RECORD:
                        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return {"keep": keep, "written_mb": round(written / 1e6, 1), "kept_mb": round(folder_bytes(out) / 1e6, 1)}


def disk_full(err: OSError, out: Path) -> KdbertError | None:
    """The one-line error for ``err`` when it is a full disk under the search folder ``out`` (else
    None): the space left, about what one more segment writes (the largest candidate run so far),
    and that the rerun continues."""
    if err.errno != errno.ENOSPC:
        return None
    runs = [folder_bytes(run) for run in (out / "runs").glob("*") if run.is_dir()]
    free = shutil.disk_usage(out if out.exists() else out.parent).free
    return KdbertError(f"the disk holding --output-dir {out} is full ({free / 1e6:.0f} MB free; one more "
                       f"candidate segment writes about {max(runs, default=0) / 1e6:.0f} MB): free space and rerun "
                       "the same command, which continues the search from its last finished segment")
