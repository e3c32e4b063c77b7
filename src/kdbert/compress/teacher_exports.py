"""The teacher's ONNX exports kept for later searches of the same teacher on the same machine.

Exporting the teacher (the graph, the int8 method chosen by score and timing, the parity check) is
step 1 of every search: for all-mpnet-base-v2 it took 5 of a 30-minute search's minutes on one core.
And the int8 method is chosen by timing, so a search that exported again could choose another
graph, whose labels of the rows (keyed by the graph's bytes, :mod:`kdbert.compress.labelling`)
the store does not hold: it would label them all again.

So each export is kept once under ``--teacher-exports`` (default
``$XDG_CACHE_HOME/kdbert/teacher-exports``), in a folder named by the hash of everything that
decides it (:func:`export_key`): the teacher's class, config and weights
(:func:`~kdbert.core.teacher_store.teacher_fingerprint`), its tokenizer, the rows that score it (dev
and held-out), the runtime settings and machine (:meth:`~kdbert.compress.speed.SpeedSettings.key`),
this CPU's instruction-set flags and the library versions. A later search links its files into its
own ``teacher-onnx/`` (hard links: no second copy on one file system; a copy elsewhere) and times
them; a search that exports keeps its export there, written whole or not at all, with what making
it took (``export_seconds.json``: the finishing's estimate scales it, :func:`kdbert.compress.budget.export_estimate`;
one kept without it is made again).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import onnxruntime
import torch
import transformers

import kdbert
from kdbert.core.atomic_io import write_json
from kdbert.core.hardware import cpu_flags
from kdbert.core.teacher_store import teacher_fingerprint

NONE = "none"  # --teacher-exports none: nothing kept, nothing read
DONE_FILE = "export_report.json"  # written last by the export: a folder without it is not an export
SECONDS_FILE = "export_seconds.json"  # what the export took where it was made: the finishing's estimate scales it


def shared_exports_folder() -> Path:
    """``$XDG_CACHE_HOME/kdbert/teacher-exports`` (``~/.cache/...``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdbert" / "teacher-exports"


def export_key(model, tokenizer, max_seq_len: int, rows: list, settings: dict) -> str:
    """Hex digest of what decides the teacher's export and its scores: the model
    (:func:`teacher_fingerprint`), the tokenizer's vocabulary, the scoring ``rows``
    (:class:`~kdbert.data.glue.Example`: texts and labels), the runtime ``settings``, this CPU's
    flags and the versions of the libraries that export, quantise and run it."""
    digest = hashlib.blake2b(digest_size=16)
    versions = {"kdbert": kdbert.__version__, "torch": torch.__version__, "onnx": version("onnx"),
                "onnxruntime": onnxruntime.__version__, "transformers": transformers.__version__}
    digest.update(json.dumps({"teacher": teacher_fingerprint(model, max_seq_len), "settings": settings,
                              "versions": versions, "cpu": sorted(cpu_flags())}, sort_keys=True).encode())
    digest.update(json.dumps(sorted(tokenizer.get_vocab().items())).encode())
    for row in rows:
        digest.update(json.dumps([list(row.texts), row.label]).encode())
    return digest.hexdigest()


def _place(source: Path, target: Path) -> None:
    """``source``'s files at ``target`` (a new folder): hard links where the file system allows, else
    copies; written beside it and renamed, so ``target`` is whole or absent."""
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        for file in sorted(source.iterdir()):
            if file.is_file():
                try:
                    os.link(file, partial / file.name)
                except OSError:
                    shutil.copy2(file, partial / file.name)
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


@dataclass(frozen=True)
class TeacherExports:
    """Where the teacher's exports are kept (``folder``) and this search's (``key``, :func:`export_key`)."""

    folder: Path
    key: str

    @property
    def kept(self) -> Path:
        return self.folder / self.key

    def restore(self, out: Path) -> float | None:
        """The kept export placed at ``out`` (its ``teacher-onnx/``, absent or replaced) and the seconds
        it took to make; None when none is kept (or one kept without its seconds: exported again)."""
        if not self._whole():
            return None
        shutil.rmtree(out, ignore_errors=True)
        _place(self.kept, out)
        return float(json.loads((out / SECONDS_FILE).read_text())["export_seconds"])

    def keep(self, out: Path, seconds: float) -> str | None:
        """The export at ``out``, which took ``seconds`` to make, kept for later searches; what stopped it
        (a full disk, a read-only folder), in one line, or None."""
        if self._whole():
            return None
        try:
            write_json(out / SECONDS_FILE, {"export_seconds": round(seconds, 2)})
            self.folder.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(self.kept, ignore_errors=True)
            _place(out, self.kept)
        except OSError as err:
            return f"the teacher's export was not kept in {self.folder} for later searches ({err.strerror or err})"
        return None

    def _whole(self) -> bool:
        return (self.kept / DONE_FILE).is_file() and (self.kept / SECONDS_FILE).is_file()


def teacher_exports(option: str | None, model, tokenizer, max_seq_len: int, rows: list,
                    settings: dict) -> TeacherExports | None:
    """The exports of ``--teacher-exports`` (None: the shared folder; ``none``: not kept, None)."""
    if option == NONE:
        return None
    folder = Path(option).expanduser() if option else shared_exports_folder()
    return TeacherExports(folder, export_key(model, tokenizer, max_seq_len, rows, settings))
