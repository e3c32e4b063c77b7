"""Where general students live: one folder per base model, found again for any teacher fine-tuned
from that base.

``<store>/<key>/`` holds one build (:mod:`kdbert.students.build`): ``build.json`` (what was built,
how long, the held-out relation loss after each session), ``fingerprint.safetensors``, one HF
``BertModel`` folder per shape (``bert-2x256/``, with the base's tokenizer) and ``run/`` (the
resumable training run). ``key`` is the first 16 hex digits of the SHA-256 of the base's weight
files, so the same base gets the same folder on any machine.

A fine-tuned teacher's weights differ from its base's, so it is matched by a *fingerprint*: the
word-embedding rows of ``FINGERPRINT_ROWS`` evenly spaced token ids. Fine-tuning moves them little
(all-MiniLM-L6-v2 fine-tuned on MRPC for 3 epochs: 1.2% of their norm), another model entirely (a
random permutation of the same rows: 141%), so a teacher is taken to come from a base when::

    ||E_teacher[ids] - E_base[ids]|| / ||E_base[ids]|| <= MAX_DRIFT
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from kdbert.errors import KdbertError

FINGERPRINT_ROWS = 512
MAX_DRIFT = 0.2
BUILD_FILE, FINGERPRINT_FILE = "build.json", "fingerprint.safetensors"
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def default_store() -> Path:
    """``$KDBERT_STUDENTS``, else ``~/.cache/kdbert/students``."""
    return Path(os.environ.get("KDBERT_STUDENTS") or Path.home() / ".cache" / "kdbert" / "students")


def weights_key(model_dir: str | os.PathLike) -> str:
    """The first 16 hex digits of the SHA-256 of ``model_dir``'s weight files (sorted by name)."""
    files = sorted(p for p in Path(model_dir).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        raise KdbertError(f"--base {model_dir} has no weight file (*.safetensors or *.bin); pass a model folder")
    digest = hashlib.sha256()
    for file in files:
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:16]


def word_embeddings(model) -> torch.Tensor:
    """The model's input word-embedding matrix (vocabulary, hidden)."""
    return model.get_input_embeddings().weight.detach().float().cpu()


def fingerprint(model) -> torch.Tensor:
    """The word-embedding rows of ``FINGERPRINT_ROWS`` evenly spaced token ids (module doc)."""
    embeddings = word_embeddings(model)
    ids = torch.linspace(0, embeddings.shape[0] - 1, min(FINGERPRINT_ROWS, embeddings.shape[0])).round().long()
    return embeddings[ids].clone()


def drift(teacher_print: torch.Tensor, base_print: torch.Tensor) -> float | None:
    """``||t - b|| / ||b||`` of two fingerprints, None when their shapes differ."""
    if teacher_print.shape != base_print.shape:
        return None
    return float((teacher_print - base_print).norm() / base_print.norm().clamp_min(1e-12))


@dataclass(frozen=True)
class Build:
    """One store folder: its ``build.json`` as ``facts`` and where it is."""

    folder: Path
    facts: dict

    @property
    def shapes(self) -> list[str]:
        """The shapes whose student folder is written."""
        return [name for name in self.facts.get("shapes", []) if (self.folder / name / "config.json").is_file()]

    def student(self, shape: str) -> Path:
        return self.folder / shape

    def describe(self) -> str:
        minutes = self.facts.get("trained_seconds", 0) / 60
        return (f"general student built from {self.facts.get('base')} for {minutes:.0f} min "
                f"({self.facts.get('steps', 0)} steps, store {self.folder})")


def read_build(folder: Path) -> Build | None:
    """The build in ``folder``, None when it has no ``build.json`` or no fingerprint (not finished once)."""
    if not (folder / BUILD_FILE).is_file() or not (folder / FINGERPRINT_FILE).is_file():
        return None
    return Build(folder, json.loads((folder / BUILD_FILE).read_text()))


def builds(store: str | os.PathLike | None = None) -> list[Build]:
    """Every build in ``store`` (default :func:`default_store`), by folder name."""
    root = Path(store) if store is not None else default_store()
    if not root.is_dir():
        return []
    return [b for b in (read_build(folder) for folder in sorted(root.iterdir()) if folder.is_dir()) if b is not None]


def find_build(teacher, store: str | os.PathLike | None = None) -> tuple[Build, float] | None:
    """The build whose base ``teacher`` was fine-tuned from (the least fingerprint drift, at most
    ``MAX_DRIFT``) and that drift; None when no build matches."""
    mine = fingerprint(teacher)
    best = None
    for build in builds(store):
        distance = drift(mine, load_file(str(build.folder / FINGERPRINT_FILE))["rows"])
        if distance is not None and distance <= MAX_DRIFT and (best is None or distance < best[1]):
            best = (build, distance)
    return best
