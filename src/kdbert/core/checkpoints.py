"""Resumable checkpoints of a training run, ``out/checkpoints/checkpoint-s<stage>-<step>/``:

- ``modules.safetensors``: the trainable modules (student, projections);
- ``optimizer.pt``: optimiser, scheduler, every process's CPU/CUDA random state, the process
  count and the fp16 loss scaler (loaded with ``weights_only=True``);
- ``trainer_state.json``: the position (stage, step, epoch, batch in epoch), the best score and
  the evaluation history.

Each is written under a temporary name and moved into place (:func:`kdbert.core.atomic_io.replace_dir`);
the last ``keep`` are kept.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from safetensors.torch import load_model, save_model
from torch import nn

from kdbert.core.atomic_io import replace_dir, write_json
from kdbert.errors import KdbertError


def _finished(root: Path) -> list[Path]:
    if not root.exists():
        return []
    return sorted(p for p in root.glob("checkpoint-*") if not p.name.endswith((".tmp", ".old")))


def save_modules(modules: nn.Module, path: str | Path) -> None:
    """safetensors' ``save_model`` of ``modules``, each RNN's weights given storage of their own first.

    On CUDA, cuDNN packs an ``nn.LSTM``'s weights into one buffer (views that cover it only
    together), which safetensors refuses to save; the RNNs are packed again afterwards (the
    parameters stay the same objects, so the optimiser keeps its state)."""
    rnns = [m for m in modules.modules() if isinstance(m, nn.RNNBase)]
    for rnn in rnns:
        for weight in rnn.parameters(recurse=False):
            weight.data = weight.data.clone()
    save_model(modules, str(path))
    for rnn in rnns:
        rnn.flatten_parameters()


def save_checkpoint(root: Path, accelerator: Accelerator, modules: nn.Module, state: dict, optimizer, scheduler,
                    keep: int) -> None:
    """Checkpoint the run at ``state``'s position (every process takes part; the main one writes)."""
    accelerator.wait_for_everyone()
    # every process's random state (dropout differs per process), in process order
    cpu_rng = gather_object([torch.get_rng_state()])
    cuda_rng = gather_object([torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []])
    if not accelerator.is_main_process:
        return
    root.mkdir(exist_ok=True)
    name = f"checkpoint-s{state['stage']}-{state['step']:07d}"
    tmp = root / (name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_modules(accelerator.unwrap_model(modules), tmp / "modules.safetensors")
    scaler = accelerator.scaler  # fp16 only: its loss scale and growth tracker
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "cpu_rng": cpu_rng, "cuda_rng": cuda_rng, "processes": accelerator.num_processes,
                "grad_scaler": scaler.state_dict() if scaler is not None else None},
               tmp / "optimizer.pt")
    write_json(tmp / "trainer_state.json", state)
    replace_dir(tmp, root / name)
    for old in _finished(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(root: Path) -> tuple[Path, dict] | None:
    """The newest finished checkpoint under ``root`` and its trainer state, or ``None``."""
    found = _finished(root)
    if not found:
        return None
    return found[-1], json.loads((found[-1] / "trainer_state.json").read_text())


def load_checkpoint(path: Path, accelerator: Accelerator, modules: nn.Module, optimizer, scheduler) -> None:
    """Restore weights, optimiser, scheduler, this process's random state and the loss scaler."""
    load_model(accelerator.unwrap_model(modules), str(path / "modules.safetensors"), device=str(accelerator.device))
    saved = torch.load(path / "optimizer.pt", weights_only=True)  # our own file; tensors only
    world, rank = accelerator.num_processes, accelerator.process_index
    if saved.get("processes", 1) != world:
        raise KdbertError(f"{path} was saved by a run of {saved.get('processes', 1)} process(es); resume it with "
                          f"the same number (this run has {world})")
    optimizer.load_state_dict(saved["optimizer"])
    scheduler.load_state_dict(saved["scheduler"])
    if isinstance(saved["cpu_rng"], torch.Tensor):  # saved before random states were kept per process
        saved["cpu_rng"], saved["cuda_rng"] = [saved["cpu_rng"]], [saved["cuda_rng"]]
    torch.set_rng_state(saved["cpu_rng"][rank])
    if saved["cuda_rng"][rank] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda_rng"][rank])
    if accelerator.scaler is not None and saved.get("grad_scaler"):
        accelerator.scaler.load_state_dict(saved["grad_scaler"])
