"""The one training loop. Every method (fine-tuning, TinyBERT, KD, PKD, DistilBERT) is a list of
:class:`Stage` objects run by :class:`Trainer`; a method never has its own loop.

A stage names its training data, a loss function returning *named, already weighted* loss
terms (the total is their sum; :class:`kdbert.core.matching.MatchLoss` builds one from a list of
matches), which parameters train (name patterns, each with a learning-rate multiplier), and its
optimiser schedule (:mod:`kdbert.core.optim`). The trainer runs the stages in order with
``accelerate`` (CPU, one GPU or DDP; bf16/fp16 autocast), gradient accumulation, gradient
clipping, periodic evaluation keeping the best student (the latest within the noise of the highest
score, :func:`kdbert.core.evaluate.replaces_checkpoint`), logs and a progress bar, and checkpoints
that resume exactly (:mod:`kdbert.core.checkpoints`) in the run folder (:mod:`kdbert.core.run_folder`).

A run may have a deadline (:attr:`RunConfig.deadline`, wall-clock ``time.time()`` seconds): after
each optimiser step, when that step's time plus the last evaluation's would end past it, the
run stops there, as if that step were its last: it evaluates (where an evaluator is given, also
in a stage that does not evaluate otherwise, so that the run has a score), saves a checkpoint,
skips its later stages, and its report says where it stopped (``stopped_early``).

A run may also pause (:attr:`RunConfig.pause_at_step`): once its optimiser steps, counted over all
its stages, reach that number before its last step, it stops the same way, and its report says so
(``paused_at_step``). Resumed with a later pause or none, the run continues from there as if it had
never paused (each stage's schedule keeps its length; the data order and random state go on);
resumed with the pause it stopped at, it trains nothing more. The best student so far is at the
output root after every stop, as after a finished run.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedDataParallelKwargs
from torch import nn
from tqdm.auto import tqdm

from kdbert.data.batching import epoch_order
from kdbert.errors import KdbertError
from kdbert.core.atomic_io import copy_files_atomically, restore_interrupted, write_json
from kdbert.core.checkpoints import latest_checkpoint, load_checkpoint, save_checkpoint
from kdbert.core.evaluate import replaces_checkpoint, selection_key
from kdbert.core.hardware import ThreadShare, resolve_precision
from kdbert.core.optim import averaged_weights, clip_groups, make_optimizer, make_scheduler, optimizer_groups
from kdbert.core.stages import LossFn, RunConfig, Stage, StageConfig
from kdbert.core.run_folder import RunLog, save_student

def to_device(batch: dict, device) -> dict:
    """Move a batch's tensors (nested per-model dicts included) to ``device``."""
    return {k: to_device(v, device) if isinstance(v, dict) else v.to(device) for k, v in batch.items()}


class _StageModule(nn.Module):
    """Trainable modules + a stage's loss as one module, so DDP sees a single forward."""

    def __init__(self, parts: nn.ModuleDict, frozen: dict, loss_fn: LossFn):
        super().__init__()
        self.parts = parts
        self._frozen = frozen  # a plain dict: teachers are not registered parameters
        self._loss_fn = loss_fn

    def forward(self, batch: dict) -> dict:
        return self._loss_fn(self.parts, self._frozen, batch)


class Trainer:
    """Runs :class:`Stage` objects over ``modules`` (``modules["student"]`` is the HF student).

    Args:
        modules: trainable modules; the student plus e.g. projections.
        stages: the recipe, run in order.
        run: run-wide settings.
        collator: turns a list of features into a batch of tensors.
        frozen: teachers and other fixed models: moved to the device, eval mode, no grad.
        evaluator: ``evaluator(student) -> metrics`` with a ``"score"`` entry (higher is better); the
            latest evaluation within the noise of the best is kept
            (:func:`kdbert.core.evaluate.replaces_checkpoint`).
        tokenizer: saved next to the student.
    """

    def __init__(self, modules: dict, stages: list[Stage], run: RunConfig, collator, frozen: dict | None = None,
                 evaluator: Callable | None = None, tokenizer=None):
        self.run = run
        self.stages = stages
        self.collator = collator
        self.evaluator = evaluator
        self.tokenizer = tokenizer
        self.out = Path(run.output_dir)
        # accelerate keeps one precision per process: a second run in the same process (the
        # Python API, tests) with another --mixed-precision would be refused without this reset
        AcceleratorState._reset_state()
        self.precision, self.precision_reason = resolve_precision(run.mixed_precision)
        self.threads = ThreadShare(run.threads)
        # cpu=True without a GPU: under torchrun the processes then train together over gloo
        # instead of each training the whole run alone
        self.accelerator = Accelerator(
            mixed_precision=self.precision,
            cpu=not torch.cuda.is_available(),
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
        )
        if self.accelerator.is_main_process:
            self.out.mkdir(parents=True, exist_ok=True)
        self.device = self.accelerator.device
        self.modules = nn.ModuleDict(modules).to(self.device)
        self.frozen = {}
        for name, model in (frozen or {}).items():
            model.to(self.device).eval()
            model.requires_grad_(False)
            self.frozen[name] = model
        self.state = {"stage": 0, "step": 0, "epoch": 0, "batch_in_epoch": 0,
                      "best_score": None, "best_metrics": None, "best_stage": None, "best_step": None,
                      "top_metrics": None, "history": []}
        self.log = RunLog(self.out)
        self.eval_seconds = 0.0  # the last evaluation's, for the deadline
        self.stopped_early: dict | None = None  # where a deadline stopped the run
        self.paused_at_step: int | None = None
        # (stage, step) of this run's last evaluation and checkpoint, alike in every process
        self.evaluated_at: tuple[int, int] | None = None
        self.saved_at: tuple[int, int] | None = None

    # ----------------------------------------------------------------- public API
    @property
    def student(self) -> nn.Module:
        return self.modules["student"]

    def train(self, resume: bool = False) -> dict:
        """Run all stages (from the latest checkpoint with ``resume``); returns the final report."""
        if self.run.reseed:
            torch.manual_seed(self.run.seed)
        found = latest_checkpoint(self.out / "checkpoints") if resume else None
        checkpoint = None
        if found is not None:
            checkpoint, self.state = found
        self._check_pause()
        if resume and self.accelerator.is_main_process:  # records past the checkpoint (all without one) are redone
            self.log.truncate({stage.config.name: i for i, stage in enumerate(self.stages)},
                              (self.state["stage"], self.state["step"]))
        start = time.time()
        self._announce_runtime()
        try:
            for index, stage in enumerate(self.stages):
                if checkpoint is not None and index < self.state["stage"]:
                    self._setup(stage)  # its projections are in the checkpoint
                    continue
                self._run_stage(index, stage, checkpoint if checkpoint and index == self.state["stage"] else None)
                checkpoint = None
                if self._halted:
                    break
        finally:
            self.threads.stop()
        report = self._finish(time.time() - start)
        self.log.close()
        return report

    @property
    def _halted(self) -> bool:
        """Whether a deadline or a pause stopped the run."""
        return self.stopped_early is not None or self.paused_at_step is not None

    def _steps_run(self, index: int) -> int:
        """Optimiser steps taken so far over all stages, ``index`` being the current one."""
        return sum(self._total_steps(stage) for stage in self.stages[:index]) + self.state["step"]

    def _check_pause(self) -> None:
        """Refuse a pause that is not a positive step, or that lies before the checkpoint resumed from."""
        pause = self.run.pause_at_step
        if pause is None:
            return
        if pause < 1:
            raise KdbertError(f"pause_at_step {pause}: pause after a positive number of optimiser steps")
        done = self._steps_run(self.state["stage"])
        if done > pause:
            raise KdbertError(f"{self.out} has trained {done} steps, past the pause at step {pause}; "
                              "continue it with a later pause or none")

    def _resumed_at(self, index: int, config: StageConfig) -> None:
        """The checkpoint just loaded saved this position; it was evaluated there if its history says so."""
        self.saved_at = (index, self.state["step"])
        history = self.state["history"]
        if history and (history[-1]["stage"], history[-1]["step"]) == (config.name, self.state["step"]):
            self.evaluated_at = self.saved_at

    def _pause_due(self, index: int, total: int) -> bool:
        """Whether the run has reached its pause before its last step."""
        last = self.state["step"] == total and index == len(self.stages) - 1
        return self.run.pause_at_step is not None and not last and self._steps_run(index) >= self.run.pause_at_step

    def _announce_runtime(self) -> None:
        """Choose the thread count, then print and log it with the precision (and why)."""
        choice = self.threads.start()
        if self.device.type != "cpu":
            choice.reason += f"; training on {self.device}"
        self.runtime = {"mixed_precision": self.precision, "mixed_precision_reason": self.precision_reason,
                        "threads": choice.threads, "threads_reason": choice.reason}
        if self.accelerator.is_main_process:
            off = "; --mixed-precision no for float32" if self.precision == "bf16" else ""
            print(f"precision: {'float32' if self.precision == 'no' else self.precision} ({self.precision_reason}{off})")
            print(f"threads: {choice.threads} ({choice.reason}{'' if choice.pinned else '; --threads N to pin'})")

    # ----------------------------------------------------------------- one stage
    def _setup(self, stage: Stage) -> None:
        """Give a loss with a ``setup`` method the stage's first batch (RNG untouched)."""
        setup = getattr(stage.loss_fn, "setup", None)
        if setup is None or len(stage.dataset) == 0:
            return
        with torch.random.fork_rng(devices=[]):
            rows = range(min(len(stage.dataset), stage.config.batch_size))
            batch = to_device(self.collator([stage.dataset[i] for i in rows]), self.device)
            setup(self.modules, self.frozen, batch)

    def _batches_per_epoch(self, stage: Stage) -> list[list[int]]:
        """This process's batches of the epoch, as row indices.

        With several processes a global batch holds ``batch_size`` rows per process, in the
        order one process would take ``batch_size x processes`` rows, and each process takes its
        slice: the averaged gradient is that of the single-process batch. The last, partial
        global batch is dropped so that every process steps together. A stage with its own batch
        order (``stage.order``) hands its batches to the processes in turn."""
        config = stage.config
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        if stage.order is not None:
            batches = stage.order(self.state["epoch"])
            return batches if world == 1 else batches[rank::world][:len(batches) // world]
        size = config.batch_size * world
        order = epoch_order(stage.dataset.lengths, size, self.run.seed, self.state["epoch"], self.run.group_by_length)
        batches = [order[i:i + size] for i in range(0, len(order), size)]
        if world == 1:
            return batches
        return [b[rank * config.batch_size:(rank + 1) * config.batch_size] for b in batches if len(b) == size]

    def _total_steps(self, stage: Stage) -> int:
        config = stage.config
        if config.max_steps:
            return config.max_steps
        world = self.accelerator.num_processes
        batches = len(stage.dataset) // (config.batch_size * world) if world > 1 else math.ceil(
            len(stage.dataset) / config.batch_size)
        per_epoch = max(1, math.ceil(batches / config.grad_accum))
        return max(1, math.ceil(config.epochs * per_epoch))

    def _run_stage(self, index: int, stage: Stage, checkpoint: Path | None) -> None:
        config = stage.config
        if len(stage.dataset) == 0:
            raise KdbertError(f"stage '{config.name}' has no training rows")
        total = self._total_steps(stage)
        module, optimizer, scheduler = self._prepare(stage, total)
        if checkpoint is not None:
            load_checkpoint(checkpoint, self.accelerator, self.modules, optimizer, scheduler)
            self._resumed_at(index, config)
            if self._pause_due(index, total):  # resumed where it paused: evaluated there unless killed before
                self._stop(index, config, total, optimizer, scheduler, paused=True)
        else:
            self.state.update(stage=index, step=0, epoch=0, batch_in_epoch=0)
        bar = tqdm(total=total, initial=self.state["step"], desc=config.name, disable=not (
            self.run.progress and self.accelerator.is_main_process), dynamic_ncols=True)
        module.train()
        while self.state["step"] < total and not self._halted:
            batches = self._batches_per_epoch(stage)
            position = self.state["batch_in_epoch"]
            terms_sum, micro = {}, 0
            while position < len(batches) and self.state["step"] < total and not self._halted:
                if micro == 0:  # the epoch's last group may hold fewer than grad_accum batches
                    group_size = min(config.grad_accum, len(batches) - position)
                    step_started = time.time()
                batch = to_device(self.collator([stage.dataset[i] for i in batches[position]]), self.device)
                position += 1
                micro += 1
                boundary = micro == group_size
                sync = contextlib.nullcontext() if boundary else self.accelerator.no_sync(module)
                with sync:
                    terms = self._backward(module, batch, config.name, group_size)
                for name, value in terms.items():
                    terms_sum[name] = terms_sum.get(name, 0.0) + float(value.detach())
                if boundary:
                    self._optimizer_step(module, optimizer, scheduler, config)
                    averaged = {k: v / micro for k, v in terms_sum.items()}
                    terms_sum, micro = {}, 0
                    step_seconds = time.time() - step_started
                    self._after_step(config, total, averaged, position, len(batches), optimizer, scheduler, bar)
                    last = self.state["step"] == total and index == len(self.stages) - 1
                    if self._pause_due(index, total):
                        self._stop(index, config, total, optimizer, scheduler, paused=True)
                    elif not last and self._out_of_time(step_seconds):
                        self._stop(index, config, total, optimizer, scheduler, paused=False)
        bar.close()
        optimizer.eval()  # a schedule-free optimiser leaves its averaged weights in the model; others: nothing
        self.modules = self.accelerator.unwrap_model(module).parts

    def step_seconds(self, rows: list[int], steps: int) -> list[float]:
        """Wall seconds of each of ``steps`` optimiser steps of the first stage on the batch of its
        dataset's ``rows``, taken as a run takes them (its optimiser, schedule, precision and clipping):
        what a time probe measures before a run. The steps train the modules: give it a copy to keep."""
        stage = self.stages[0]
        config = stage.config
        module, optimizer, scheduler = self._prepare(stage, self._total_steps(stage))
        module.train()
        seconds = []
        for _ in range(steps):
            began = time.time()
            batch = to_device(self.collator([stage.dataset[i] for i in rows]), self.device)
            self._backward(module, batch, config.name, 1)
            self._optimizer_step(module, optimizer, scheduler, config)
            seconds.append(time.time() - began)
        return seconds

    # ----------------------------------------------------------------- pieces
    def _prepare(self, stage: Stage, total: int):
        """The stage's module (its loss over the trainable and frozen modules), optimiser and schedule
        over ``total`` steps, prepared by accelerate; the loss set up on the first batch first."""
        self._setup(stage)
        optimizer = make_optimizer(stage.config, optimizer_groups(self.modules, stage.config), total)
        scheduler = make_scheduler(stage.config, optimizer, total)
        module, optimizer = self.accelerator.prepare(_StageModule(self.modules, self.frozen, stage.loss_fn), optimizer)
        return module, optimizer, scheduler

    def _backward(self, module, batch: dict, stage_name: str, group_size: int) -> dict:
        """The stage's loss terms on ``batch`` (checked finite), their sum over ``group_size``
        back-propagated under the run's autocast."""
        with self.accelerator.autocast():
            terms = module(batch)
            loss = sum(terms.values())
            if not torch.isfinite(loss):
                bad = ", ".join(name for name, value in terms.items() if not torch.isfinite(value))
                raise KdbertError(f"stage '{stage_name}', step {self.state['step'] + 1}: the loss became "
                                  f"{float(loss.detach())} (non-finite term(s): {bad}); lower the learning rate, "
                                  "check the inputs, or train in fp32")
            self.accelerator.backward(loss / group_size)
        return terms

    def _optimizer_step(self, module, optimizer, scheduler, config: StageConfig) -> None:
        if config.max_grad_norm:
            groups = clip_groups(module)
            if len(groups) == 1:
                self.accelerator.clip_grad_norm_(groups[0], config.max_grad_norm)
            else:  # unscale (fp16) once, then each group on its own
                self.accelerator.unscale_gradients()
                for group in groups:
                    torch.nn.utils.clip_grad_norm_(group, config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    def _after_step(self, config, total, averaged, position, n_batches, optimizer, scheduler, bar) -> None:
        """Record the new position (step, epoch, batch in epoch), then log, evaluate and
        checkpoint as scheduled."""
        self.state["step"] += 1
        step = self.state["step"]
        changed = self.threads.rebalance(step)
        if changed is not None and self.accelerator.is_main_process:
            print(f"threads: now {changed} (kdbert runs on this machine changed)")
        end_of_epoch = position == n_batches
        if end_of_epoch:
            self.state["epoch"] += 1
        self.state["batch_in_epoch"] = 0 if end_of_epoch else position
        bar.update(1)
        bar.set_postfix(loss=f"{sum(averaged.values()):.4f}")
        if step % self.run.log_every == 0 or step == total:
            self._log({"stage": config.name, "step": step, "epoch": self.state["epoch"],
                       "lr": optimizer.param_groups[0].get("scheduled_lr", scheduler.get_last_lr()[0]),
                       "loss": sum(averaged.values()), **averaged})
        if config.evaluate and ((config.eval_every and step % config.eval_every == 0) or step == total
                                or (not config.eval_every and end_of_epoch)):
            with averaged_weights(optimizer):
                self._evaluate(config.name)
        save_every = self.run.save_every or config.eval_every
        if (save_every and step % save_every == 0) or end_of_epoch or step == total:
            self._save_checkpoint(optimizer, scheduler)

    def _out_of_time(self, step_seconds: float) -> bool:
        """Whether another step (as long as the last) and an evaluation (as long as the last) would
        end past the run's deadline; every process takes the main process's answer."""
        if self.run.deadline is None:
            return False
        late = time.time() + step_seconds + self.eval_seconds > self.run.deadline
        if self.accelerator.num_processes == 1:
            return late
        flag = torch.tensor([float(late and self.accelerator.is_main_process)], device=self.device)
        return bool(self.accelerator.reduce(flag, reduction="sum").item())

    def _stop(self, index: int, config: StageConfig, total: int, optimizer, scheduler, paused: bool) -> None:
        """End the run at this step, at its pause or its deadline (module doc): evaluate it unless
        that was just done, save a checkpoint, and record where it stopped."""
        step = self.state["step"]
        evaluated = self.evaluated_at == (index, step)
        if not evaluated:
            with averaged_weights(optimizer):
                self._evaluate(config.name)
        if not evaluated or self.saved_at != (index, step):
            self._save_checkpoint(optimizer, scheduler)
        if paused:
            self.paused_at_step = self._steps_run(index)
        else:
            self.stopped_early = {"stage": config.name, "step": step, "of": total,
                                  "steps_run": self._steps_run(index)}

    def _evaluate(self, stage_name: str) -> None:
        self.evaluated_at = (self.state["stage"], self.state["step"])
        if self.evaluator is None or not self.accelerator.is_main_process:
            return
        started = time.time()
        student = self.accelerator.unwrap_model(self.student)
        student.eval()
        with torch.no_grad():
            metrics = self.evaluator(student)
        student.train()
        self.eval_seconds = time.time() - started
        record = {"stage": stage_name, "step": self.state["step"], "eval": metrics}
        self.state["history"].append(record)
        self._log(record)
        top = self.state.get("top_metrics") or self.state["best_metrics"]  # (a run resumed from before top was kept)
        if top is None or selection_key(metrics) > selection_key(top):
            top = metrics
        self.state["top_metrics"] = top
        if replaces_checkpoint(metrics, self.state["best_metrics"], top):
            self.state.update(best_score=selection_key(metrics)[0], best_metrics=metrics, best_stage=stage_name,
                              best_step=self.state["step"])
            self._export(self.out / "best", metrics)

    def _export(self, final: Path, metrics: dict | None) -> None:
        """Save the student, tokenizer, projections and metrics to ``final`` (atomically)."""
        extras = {k: v for k, v in self.modules.items() if k != "student"}
        save_student(final, self.accelerator.unwrap_model(self.student), extras, self.tokenizer, metrics)

    def _log(self, record: dict) -> None:
        if self.accelerator.is_main_process:
            self.log.write(record)

    def _save_checkpoint(self, optimizer, scheduler) -> None:
        save_checkpoint(self.out / "checkpoints", self.accelerator, self.modules, self.state, optimizer, scheduler,
                        self.run.keep_checkpoints)
        self.saved_at = (self.state["stage"], self.state["step"])

    # ----------------------------------------------------------------- end
    def _finish(self, seconds: float) -> dict:
        """Put the best student (or the final one, when nothing is evaluated) at the output root."""
        if not self.accelerator.is_main_process:
            return {}
        best = self.out / "best"
        restore_interrupted(best)
        if self.evaluator is None or not best.exists():  # (a resumed run's earlier final is not its last)
            self._export(best, None)
        copy_files_atomically(best, self.out)
        report = {"best_metrics": self.state["best_metrics"], "best_stage": self.state["best_stage"],
                  "best_step": self.state["best_step"], "history": self.state["history"],
                  "train_seconds": round(seconds, 1), "stopped_early": self.stopped_early,
                  "paused_at_step": self.paused_at_step,
                  "runtime": {**self.runtime, "thread_changes": self.threads.changes},
                  "stages": [asdict(s.config) for s in self.stages]}
        write_json(self.out / "train_report.json", report)
        return report
