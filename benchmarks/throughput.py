"""Distillation-step throughput: kdbert against TextBrewer on identical work, in one run.

    python benchmarks/throughput.py --threads 2 --steps 30 --warmup 5 --rounds 3

The work is TinyBERT's intermediate stage (the issue's user measurement): the packaged
all-MiniLM-L6-v2 teacher (6 x 384, 12 heads; a 2-label head seeded by ``--seed``, or
``--teacher FOLDER``) -> a ``tinybert4`` student (4 x 312, 12 heads) built by kdbert's recipe with
the same seed for both frameworks; matches from kdbert's own ``intermediate_matches`` (rounded
uniform layer map 1->2, 2->3, 3->5, 4->6): embedding MSE and 4 hidden-state MSEs through one
linear projection 312 -> 384 each, and 4 pre-softmax attention-score MSEs; AdamW at the same
learning rate, gradient clipping at 1.0, batch ``--batch-size`` (32). Inputs are RTE training
pairs whose encoding is at least ``L`` tokens, truncated to exactly ``L`` (64 and 128), so every
batch of both frameworks has the same shape and the same FLOPs; rows are repeated so that no
epoch ends (kdbert checkpoints at epoch ends) inside the timed steps.

- **kdbert** runs through its public pieces, as ``kdbert.methods.front.distill_task`` builds them:
  ``Method.task_inputs`` (student, encoded rows, collator), ``Method.build_task_plan`` (its
  intermediate stage only, no evaluation) and the shared ``Trainer`` with
  ``--mixed-precision no|bf16``.
- **TextBrewer** (0.2.1, installed for this benchmark only: ``pip install textbrewer==0.2.1.post1``)
  runs ``GeneralDistiller.train(num_steps=...)`` with the same matches as ``intermediate_matches``
  (``hidden_mse`` with ``proj=["linear", 312, 384]``, ``attention_mse``), no ``inputs_mask`` (the
  TinyBERT reference's unmasked MSE), a ``torch.utils.data.DataLoader`` over the same rows. HF
  BERT returns post-softmax probabilities as ``attentions``, while TinyBERT (and TextBrewer's own
  TinyBERT examples, on a modified BERT) match pre-softmax scores: both models run an attention
  function registered here (:func:`scores_attention`, HF's eager attention returning the
  masked pre-softmax scores as the attention weights), the same matrix products as kdbert's
  ``kdbert_trace`` attention. TextBrewer has no bf16 option: its bf16 rows run its training loop
  inside ``torch.autocast("cpu", dtype=torch.bfloat16)``.

Timing: a global optimiser step hook records the time of every optimiser step; a run's examples/s
is ``batch * steps / (t[warmup + steps] - t[warmup])``, so model building, the first
(projection-creating) batch, warm-up steps and the final checkpoint/export are outside the
window, while everything a training step does each time (collation, both forwards, losses,
backward, clipping, AdamW, scheduler, kdbert's every-20-steps log line) is inside. Settings
(framework x precision x length) run interleaved, ``--rounds`` times in alternating framework
order; each row reports the median round and the 1-minute load average at each measurement.

FLOPs of one step per example, from ``kdbert.deploy.bench.count_flops`` (matrix products only):
``teacher_forward + 3 * (student_forward + projections)`` (:func:`step_flops`), the usual "backward
= 2x forward" estimate. Achieved GFLOP/s = examples/s x that; the peak is measured in the same
run at the same thread count: the best of square ``torch.mm`` products n = 1024, 1536, 2048, fp32
and bf16 (:func:`matmul_peak`).

Results go to ``benchmarks/results/throughput.json`` under ``t<threads>`` (``--key``), rendered
by ``benchmarks/report.py``. ``--profile`` instead profiles kdbert steps with ``torch.profiler``
(seq 64, fp32 and bf16) and writes the time shares of the step's parts and the top operators
(``--profile-out``, default ``throughput_profile.json`` in the results folder).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from common import RESULTS_DIR, machine_info, save_result
from distill_step import (FRAMEWORKS, PRECISIONS, RUNNERS, Setup, examples_per_second, flops_per_example,
                          gflops_and_share, kdbert_trainer, load_avg, matmul_peak, step_clock)
from paths import GLUE_DIR


# ----------------------------------------------------------------------------- the benchmark

def benchmark(args) -> dict:
    torch.set_num_threads(args.threads)
    importlib.import_module("torch.utils.tensorboard")  # imported once, outside every timed window

    setup = Setup(args)
    peaks_before = {p: matmul_peak(torch.float32 if p == "fp32" else torch.bfloat16) for p in args.precisions}
    flops = {str(L): flops_per_example(setup, L) for L in args.seq_lens}
    measurements: dict[str, list[dict]] = {}
    for round_index in range(args.rounds):
        order = list(args.frameworks) if round_index % 2 == 0 else list(reversed(args.frameworks))
        for seq_len in args.seq_lens:
            for precision in args.precisions:
                for framework in order:
                    load_before = load_avg()
                    times = RUNNERS[framework](setup, seq_len, precision)
                    rate = examples_per_second(times, args.warmup, args.steps, args.batch_size)
                    key = f"{framework}/{precision}/{seq_len}"
                    measurements.setdefault(key, []).append(
                        {"round": round_index, "examples_per_s": rate, "load_before": load_before,
                         "load_after": load_avg()})
                    print(f"round {round_index} {key}: {rate:.1f} examples/s (load {load_before:.2f})", flush=True)
    peaks_after = {p: matmul_peak(torch.float32 if p == "fp32" else torch.bfloat16) for p in args.precisions}
    peaks = {p: max(peaks_before[p]["peak"], peaks_after[p]["peak"]) for p in args.precisions}
    rows = []
    for key, runs in measurements.items():
        framework, precision, seq_len = key.split("/")
        rate = statistics.median(r["examples_per_s"] for r in runs)
        achieved, share = gflops_and_share(rate, flops[seq_len]["step"], peaks[precision])
        rows.append({"framework": framework, "precision": precision, "seq_len": int(seq_len),
                     "examples_per_s": rate, "gflops": achieved, "percent_of_peak": share, "runs": runs})
    for row in rows:
        base = next((r for r in rows if r["framework"] == "textbrewer" and r["seq_len"] == row["seq_len"]
                     and r["precision"] == row["precision"]), None)
        base_fp32 = next((r for r in rows if r["framework"] == "textbrewer" and r["seq_len"] == row["seq_len"]
                          and r["precision"] == "fp32"), None)
        row["vs_textbrewer_same_precision"] = row["examples_per_s"] / base["examples_per_s"] if base else None
        row["vs_textbrewer_fp32"] = row["examples_per_s"] / base_fp32["examples_per_s"] if base_fp32 else None
    loads = [r[k] for rs in measurements.values() for r in rs for k in ("load_before", "load_after")]
    import textbrewer

    return {**machine_info(), "threads": args.threads, "batch_size": args.batch_size, "steps": args.steps,
            "warmup": args.warmup, "rounds": args.rounds, "learning_rate": args.lr,
            "teacher": "all-MiniLM-L6-v2 (packaged)" if not args.teacher else args.teacher,
            "student": "tinybert4", "textbrewer": textbrewer.__version__,
            "rows_per_length": {str(L): setup.rows[f"distinct_{L}"] for L in args.seq_lens},
            "matmul_gflops": {p: {"before": peaks_before[p], "after": peaks_after[p], "peak": peaks[p]}
                              for p in args.precisions},
            "flops_per_example": flops, "rows": rows, "load_average_max": max(loads), "load_average_min": min(loads),
            "command": "python benchmarks/throughput.py " + shlex.join(sys.argv[1:])}


# ----------------------------------------------------------------------------- profile
PARTS = {  # label -> what it covers
    "collate": "data collation (rows -> padded tensors)",
    "teacher_forward": "teacher forward, no grad (with score capture)",
    "student_forward": "student forward (with score capture)",
    "attention_capture": "inside kdbert_trace attention (both models): matmul, softmax, matmul, score record",
    "loss_terms": "match terms: projections + feature selection + loss functions",
    "backward": "backward",
    "clip_grad_norm": "gradient clipping",
    "optimizer_step": "AdamW step + scheduler + zero_grad (clipping included)",
}
TOP_LEVEL = ("collate", "teacher_forward", "student_forward", "loss_terms", "backward", "optimizer_step")


@contextlib.contextmanager
def labelled_step():
    """record_function ranges around the parts of kdbert's training step (this process only)."""
    from accelerate import Accelerator
    from torch.autograd.profiler import record_function
    from transformers import AttentionInterface

    from kdbert.core import matching
    from kdbert.core import trace as trace_module
    from kdbert.core.trainer import Trainer

    def wrap(fn, label):
        def wrapped(*a, **k):
            with record_function(f"part::{label}"):
                return fn(*a, **k)
        return wrapped

    original_trace = matching.trace
    original_term, original_backward = matching.MatchLoss.term_value, Accelerator.backward
    original_clip, original_optimizer_step = Accelerator.clip_grad_norm_, Trainer._optimizer_step

    def traced(model, batch, with_attention=True, role="student"):
        with record_function(f"part::{role}_forward"):
            return original_trace(model, batch, with_attention, role)

    matching.trace = traced
    matching.MatchLoss.term_value = wrap(original_term, "loss_terms")
    Accelerator.backward = wrap(original_backward, "backward")
    Accelerator.clip_grad_norm_ = wrap(original_clip, "clip_grad_norm")
    Trainer._optimizer_step = wrap(original_optimizer_step, "optimizer_step")
    AttentionInterface.register(trace_module.TRACE_IMPLEMENTATION,
                                wrap(trace_module._traced_attention, "attention_capture"))
    try:
        yield
    finally:
        matching.trace = original_trace
        matching.MatchLoss.term_value, Accelerator.backward = original_term, original_backward
        Accelerator.clip_grad_norm_, Trainer._optimizer_step = original_clip, original_optimizer_step
        AttentionInterface.register(trace_module.TRACE_IMPLEMENTATION, trace_module._traced_attention)


def profile_kdbert(setup: Setup, seq_len: int, precision: str, warmup: int, active: int) -> dict:
    from torch.autograd.profiler import record_function
    from torch.profiler import ProfilerActivity, profile, schedule

    with tempfile.TemporaryDirectory() as workdir, labelled_step():
        trainer, stage = kdbert_trainer(setup, seq_len, precision, workdir)
        stage.config.max_steps = warmup + active + 1
        collator = trainer.collator

        def collate(rows):
            with record_function("part::collate"):
                return collator(rows)

        trainer.collator = collate
        cycle = schedule(wait=0, warmup=warmup, active=active, repeat=1)
        prof = profile(activities=[ProfilerActivity.CPU], schedule=cycle, record_shapes=False)
        with step_clock() as times, prof:
            handle = register_optimizer_step_post_hook(lambda *_: prof.step())
            try:
                trainer.train()
            finally:
                handle.remove()
    wall_us = (times[warmup + active - 1] - times[warmup - 1]) * 1e6
    averages = prof.key_averages()
    parts = {e.key.removeprefix("part::"): e.cpu_time_total for e in averages if e.key.startswith("part::")}
    shares = {name: 100.0 * parts.get(name, 0.0) / wall_us for name in PARTS}
    shares["other"] = 100.0 - sum(shares[name] for name in TOP_LEVEL)
    ops = sorted((e for e in averages if not e.key.startswith(("part::", "ProfilerStep", "Optimizer."))),
                 key=lambda e: -e.self_cpu_time_total)[:20]
    return {"seq_len": seq_len, "precision": precision, "batch_size": setup.args.batch_size,
            "active_steps": active, "step_ms": wall_us / active / 1000.0,
            "examples_per_s": setup.args.batch_size * active / (wall_us / 1e6),
            "shares_percent": shares, "parts": PARTS,
            "top_ops_self_cpu": [{"op": e.key, "self_ms_per_step": e.self_cpu_time_total / active / 1000.0,
                                  "self_percent": 100.0 * e.self_cpu_time_total / wall_us, "calls_per_step":
                                  e.count / active} for e in ops]}


def optimizer_variants(setup: Setup, runs: int = 10) -> dict:
    """ms per AdamW step on the student's and projections' parameters: for-loop (torch's CPU
    default), foreach, fused."""
    from kdbert.deploy.bench import time_calls

    _, _, inputs = setup.student_inputs(64, "fp32")
    params = [p for p in inputs.student.model.parameters()]
    params += [torch.nn.Parameter(torch.randn(384, 312)) for _ in range(5)]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    result = {}
    for name, options in (("default", {}), ("foreach", {"foreach": True}), ("fused", {"fused": True})):
        try:
            optimizer = torch.optim.AdamW(params, lr=1e-5, **options)
            result[name] = time_calls(optimizer.step, warmup=2, runs=runs)["median_ms"]
        except (RuntimeError, TypeError) as err:
            result[name] = f"unavailable: {err}"
    return result


def attention_paths(setup: Setup, seq_len: int, precision: str, runs: int = 5) -> dict:
    """ms per forward of teacher (no grad) and student (forward + backward of a sum) with kdbert's
    score-capturing attention and with the models' default attention (SDPA)."""
    from kdbert.deploy.bench import time_calls
    from kdbert.core.trace import trace

    _, _, inputs = setup.student_inputs(seq_len, precision)
    student = inputs.student.model.train()
    batch = inputs.collator([inputs.train_set[i] for i in range(setup.args.batch_size)])
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    result = {}
    for capture in (True, False):
        def teacher_call():
            with torch.no_grad(), autocast:
                trace(setup.teacher, batch, with_attention=capture, role="teacher")

        def student_call():
            with autocast:
                out = trace(student, batch, with_attention=capture, role="student")
                loss = sum(h.float().mean() for h in out.hidden_states)
            loss.backward()

        name = "kdbert_trace" if capture else "default (sdpa)"
        result[name] = {"teacher_forward_ms": time_calls(teacher_call, warmup=1, runs=runs)["median_ms"],
                        "student_forward_backward_ms": time_calls(student_call, warmup=1, runs=runs)["median_ms"]}
    return result


def run_profile(args) -> dict:
    torch.set_num_threads(args.threads)
    importlib.import_module("torch.utils.tensorboard")  # imported once, outside every timed window

    setup = Setup(args)
    result = {**machine_info(), "threads": args.threads, "load_before": load_avg(),
              "command": "python benchmarks/throughput.py " + shlex.join(sys.argv[1:]), "profiles": []}
    for precision in args.precisions:
        summary = profile_kdbert(setup, 64, precision, warmup=args.warmup, active=args.steps)
        summary["attention_paths"] = attention_paths(setup, 64, precision)
        result["profiles"].append(summary)
        shares = ", ".join(f"{k} {v:.1f}%" for k, v in summary["shares_percent"].items())
        print(f"{precision}: {summary['step_ms']:.0f} ms/step ({summary['examples_per_s']:.1f} examples/s); {shares}")
        for op in summary["top_ops_self_cpu"][:12]:
            print(f"    {op['op']:<40} {op['self_ms_per_step']:8.1f} ms/step {op['self_percent']:5.1f}%")
        print(f"    attention paths: {summary['attention_paths']}")
    result["adamw_ms_per_step"] = optimizer_variants(setup)
    print(f"AdamW ms/step: {result['adamw_ms_per_step']}")
    result["load_after"] = load_avg()
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30, help="timed optimiser steps per run")
    parser.add_argument("--warmup", type=int, default=5, help="untimed optimiser steps before them")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions of every setting")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=FRAMEWORKS)
    parser.add_argument("--lr", type=float, default=5e-5, help="both frameworks' AdamW learning rate")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--teacher", default=None, help="teacher folder (default: the packaged all-MiniLM-L6-v2 "
                                                        "with a seeded 2-label head)")
    parser.add_argument("--data-dir", type=Path, default=Path(GLUE_DIR), help="GLUE folder holding RTE/train.tsv")
    parser.add_argument("--key", default=None, help="results key (default t<threads>)")
    parser.add_argument("--profile", action="store_true", help="profile kdbert steps instead (seq 64)")
    parser.add_argument("--profile-out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.profile:
        result = run_profile(args)
        out = args.profile_out or RESULTS_DIR / "throughput_profile.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        import json

        out.write_text(json.dumps(result, indent=2))
        print(f"wrote {out}")
        return
    result = benchmark(args)
    key = args.key or f"t{args.threads}"
    save_result("throughput", key, result)
    print(f"saved under {key} in {RESULTS_DIR / 'throughput.json'}")


if __name__ == "__main__":
    main()
