"""Atomic writes: nothing half-written is ever left where a reader looks.

Files and folders are written under a temporary name beside their destination, then moved
into place with ``os.replace`` (atomic on one file system).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


def write_json(path: Path, data) -> None:
    """Write ``data`` as JSON to ``path`` atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, default=str)
    os.replace(tmp, path)


def replace_dir(tmp: Path, final: Path) -> None:
    """Put the finished directory ``tmp`` at ``final``, replacing an older ``final``.

    A folder cannot be swapped in one step: the old one moves to ``final.old`` first. A process
    killed between the two moves leaves no ``final``; :func:`restore_interrupted` puts the old
    one back."""
    if final.exists():
        old = final.with_name(final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


def restore_interrupted(final: Path) -> None:
    """Undo a :func:`replace_dir` killed half-way: ``final`` missing but ``final.old`` whole."""
    final = Path(final)
    old = final.with_name(final.name + ".old")
    if not final.exists() and old.is_dir():
        os.replace(old, final)


def copy_files_atomically(source: Path, destination: Path) -> None:
    """Copy every file of folder ``source`` into ``destination``, each under a temporary name
    first, so a reader never sees a half-copied file (a kill may leave some files copied)."""
    for item in sorted(Path(source).iterdir()):
        if item.is_file():
            tmp = Path(destination) / f".{item.name}.tmp"
            shutil.copy2(item, tmp)
            os.replace(tmp, Path(destination) / item.name)


def save_hf_folder(model, tokenizer, out: Path, reports: dict[str, dict] | None = None) -> None:
    """``save_pretrained`` the model and tokenizer, plus JSON reports, into ``out`` atomically."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    for name, report in (reports or {}).items():
        write_json(tmp / name, report)
    replace_dir(tmp, out)
