"""A training run's folder: who may write it, the run marker that ``--resume`` compares, the
saved student and the training log.

Layout::

    out/run_config.json           what a resumed run must share with the original (its identity)
    out/                          best (or final) student: HF folder + tokenizer + metrics.json
    out/projections.safetensors   extra trained modules (e.g. TinyBERT's W_h), kept apart
    out/checkpoints/              resumable checkpoints (:mod:`kdbert.core.checkpoints`)
    out/log.jsonl, out/tb/        training logs
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from torch import nn

from kdbert.core.atomic_io import replace_dir, write_json
from kdbert.core.checkpoints import save_modules
from kdbert.errors import KdbertError


def is_main_process() -> bool:
    """False in the second and later processes of a multi-process run (torchrun sets ``RANK``):
    only the main process writes run folders, logs, checkpoints and reports."""
    return int(os.environ.get("RANK", "0")) == 0


def prepare_output_dir(output_dir: str | Path, identity: dict, resume: bool, overwrite: bool) -> Path:
    """Refuse an output dir that holds another run unless ``resume`` (with the same ``identity``)
    or ``overwrite`` (checked, and the run marker written, by the main process only)."""
    out = Path(output_dir)
    if not is_main_process():
        return out
    if out.exists() and not out.is_dir():
        raise KdbertError(f"--output-dir {out} is a file; give a folder path (new, or a run to --resume)")
    marker = out / "run_config.json"
    if marker.exists():
        if overwrite:
            shutil.rmtree(out)
        elif resume:
            saved = json.loads(marker.read_text())
            # an option added since the run began, left off (None or False), is no change
            changed = sorted(k for k in set(saved) | set(identity) if saved.get(k) != identity.get(k)
                             and (k in saved or identity[k] not in (None, False)))
            if changed:
                raise KdbertError(
                    f"--resume: {out} holds a run with different settings ({', '.join(changed)}); "
                    "use the original settings or another --output-dir"
                )
            return out
        else:
            raise KdbertError(
                f"output dir {out} already holds a run; pass --resume to continue it, --overwrite to "
                "replace it, or choose another --output-dir"
            )
    elif out.exists() and any(out.iterdir()) and not overwrite:
        raise KdbertError(f"output dir {out} is not empty; choose another --output-dir or pass --overwrite")
    elif out.exists() and overwrite:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(marker, identity)
    return out


def save_student(final: Path, student: nn.Module, extras: dict[str, nn.Module], tokenizer,
                 metrics: dict | None) -> None:
    """Write the student (its ``save_pretrained``, else ``model.safetensors``), the tokenizer,
    ``extras`` with parameters (``projections.safetensors``) and ``metrics.json`` to ``final``,
    atomically."""
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if hasattr(student, "save_pretrained"):
        student.save_pretrained(tmp)
    else:  # a student that is not an HF model: its weights only
        tmp.mkdir(parents=True)
        save_modules(student, tmp / "model.safetensors")
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    extras = {k: v for k, v in extras.items() if any(True for _ in v.parameters())}
    if extras:
        save_modules(nn.ModuleDict(extras), tmp / "projections.safetensors")
    if metrics is not None:
        write_json(tmp / "metrics.json", metrics)
    replace_dir(tmp, final)


class RunLog:
    """``log.jsonl`` (one JSON record per line, with its time) and TensorBoard scalars (``tb/``)."""

    def __init__(self, out: Path):
        self.path = out / "log.jsonl"
        self.out = out
        self._writer = None

    def write(self, record: dict) -> None:
        record = {"time": round(time.time(), 3), **record}
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.out / "tb"))
        prefix = record.get("stage", "")
        for key, value in record.items():
            if isinstance(value, float):
                self._writer.add_scalar(f"{prefix}/{key}", value, record.get("step", 0))
        for key, value in (record.get("eval") or {}).items():
            self._writer.add_scalar(f"{prefix}/eval_{key}", value, record["step"])

    def truncate(self, stage_order: dict[str, int], position: tuple[int, int]) -> None:
        """Drop records after ``position`` = (stage index, step): a resumed run redoes them."""
        if not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines()
                if (stage_order.get(json.loads(line).get("stage"), -1), json.loads(line).get("step", 0)) <= position]
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, self.path)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
