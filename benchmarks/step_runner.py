"""Resumable benchmark drivers: steps (one script run each) started once the steps they need are
done, several side by side, skipped when their result is recorded, stopped at a deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

# distill_glue.py options of the CPU rows per task, which the GPU drivers pass to their distillation
# steps (CoLA and STS-B use every row; STS-B 3 epochs)
TASK_BUDGETS = {"cola": ["--max-train-examples", "8551"], "mrpc": [], "rte": [],
                "stsb": ["--max-train-examples", "5749", "--epochs", "3"]}


@dataclass
class Step:
    """One script run (``argv``), started once the steps named in ``needs`` are done; skipped when
    its ``result`` key is already recorded."""

    name: str
    argv: list[str]
    needs: list[str] = field(default_factory=list)
    result: tuple[str, str] | None = None  # (results file, key) that records it
    threads: int = 1  # torch threads (OMP_NUM_THREADS)


def is_recorded(step: Step, results_dir: Path) -> bool:
    """Whether ``step``'s result key is already in its results file under ``results_dir``."""
    if step.result is None:
        return False
    path = results_dir / f"{step.result[0]}.json"
    return path.exists() and step.result[1] in json.loads(path.read_text())


def run(steps: list[Step], results_dir: Path, log_dir: Path, jobs: int, deadline: float, env: dict,
        poll: float = 2.0) -> dict:
    """Run ``steps`` respecting ``needs``, at most ``jobs`` at a time, until done or ``deadline``
    seconds; returns each step's state (done, skipped, failed, stopped, not started)."""
    started = time.time()
    state = {s.name: "done (recorded)" for s in steps if is_recorded(s, results_dir)}
    running: dict[str, tuple[subprocess.Popen, float]] = {}
    log_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for name, (proc, t0) in list(running.items()):
            if proc.poll() is not None:
                state[name] = "done" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
                elapsed = time.time() - started
                print(f"[{elapsed:6.0f}s] {name}: {state[name]} after {time.time() - t0:.0f}s", flush=True)
                del running[name]
        out_of_time = time.time() - started > deadline
        if not out_of_time:
            for step in steps:
                if len(running) >= jobs:
                    break
                if step.name in state or step.name in running:
                    continue
                if any(state.get(n, "").startswith(("failed", "blocked")) for n in step.needs):
                    state[step.name] = "blocked (a step it needs failed)"
                    continue
                if all(state.get(n, "").startswith("done") for n in step.needs):
                    log = open(log_dir / f"{step.name}.log", "a")
                    proc = subprocess.Popen(step.argv, stdout=log, stderr=subprocess.STDOUT,
                                            env={**env, "OMP_NUM_THREADS": str(step.threads)}, start_new_session=True)
                    running[step.name] = (proc, time.time())
                    print(f"[{time.time() - started:6.0f}s] {step.name}: started", flush=True)
        if out_of_time and running:
            for name, (proc, _) in running.items():
                os.killpg(proc.pid, signal.SIGTERM)
            time.sleep(min(10.0, 5 * poll))
            for name, (proc, _) in running.items():
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                state[name] = "stopped at the deadline (resumes next time)"
            running.clear()
        if not running and (out_of_time or all(s.name in state for s in steps)
                            or not any(all(state.get(n, "").startswith("done") for n in s.needs)
                                       for s in steps if s.name not in state)):
            break
        time.sleep(poll)
    return {s.name: state.get(s.name, "not started") for s in steps}
