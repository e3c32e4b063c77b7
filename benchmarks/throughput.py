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

- **kdbert** runs through its public pieces, as ``kdbert.core.distill.distill_task`` builds them:
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
import copy
import importlib
import io
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from common import RESULTS_DIR, machine_info, save_result
from paths import GLUE_DIR

SCORES_IMPLEMENTATION = "bench_scores"
MASKED_SCORE = -10000.0
FRAMEWORKS = ("kdbert", "textbrewer")
PRECISIONS = ("fp32", "bf16")


# ----------------------------------------------------------------------------- pure arithmetic
def step_flops(teacher_forward: float, student_forward: float, projection_forward: float = 0.0) -> float:
    """FLOPs of one distillation step per example: the teacher's forward (no gradient) plus the
    student's and the projections' forward and backward, backward counted as twice the forward
    (input and weight gradients)."""
    return teacher_forward + 3.0 * (student_forward + projection_forward)


def projection_flops(seq_len: int, widths: list[tuple[int, int]]) -> int:
    """Forward FLOPs per example of linear projections applied at every position:
    ``sum 2 * d_in * d_out * seq_len`` (bias adds not counted, as FlopCounterMode)."""
    return sum(2 * d_in * d_out * seq_len for d_in, d_out in widths)


def examples_per_second(step_times: list[float], warmup: int, steps: int, batch_size: int) -> float:
    """Examples/s over the steps after ``warmup``: ``step_times[i]`` is when optimiser step i + 1
    finished, so the window runs from the end of step ``warmup`` to the end of step
    ``warmup + steps``."""
    if len(step_times) < warmup + steps or steps < 1 or warmup < 1:
        raise ValueError(f"need warmup >= 1, steps >= 1 and {warmup + steps} step times, got {len(step_times)}")
    return batch_size * steps / (step_times[warmup + steps - 1] - step_times[warmup - 1])


def gflops_and_share(examples_per_s: float, flops_per_example: float, peak_gflops: float) -> tuple[float, float]:
    """Achieved GFLOP/s and its percentage of the measured matrix-multiply peak."""
    achieved = examples_per_s * flops_per_example / 1e9
    return achieved, 100.0 * achieved / peak_gflops


# ----------------------------------------------------------------------------- measurements
def matmul_peak(dtype: torch.dtype, sizes=(1024, 1536, 2048), runs: int = 5) -> dict:
    """GFLOP/s of square ``torch.mm`` products at the current thread count (median of ``runs``
    after 2 warm-up calls) per size, and the best of them (``peak``)."""
    from kdbert.deploy.bench import time_calls

    generator = torch.Generator().manual_seed(0)
    rates = {}
    for n in sizes:
        a = torch.randn(n, n, generator=generator).to(dtype)
        b = torch.randn(n, n, generator=generator).to(dtype)
        timing = time_calls(lambda: torch.mm(a, b), warmup=2, runs=runs)
        rates[str(n)] = 2 * n**3 / (timing["median_ms"] / 1000.0) / 1e9
    return {"by_size": rates, "peak": max(rates.values())}


@contextlib.contextmanager
def step_clock():
    """Times (perf_counter) at which any torch optimiser finished a ``step()``."""
    times: list[float] = []
    handle = register_optimizer_step_post_hook(lambda *_: times.append(time.perf_counter()))
    try:
        yield times
    finally:
        handle.remove()


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


# ----------------------------------------------------------------------------- shared setup
def scores_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """HF's eager attention, returning the pre-softmax scores (masked keys at -10000, the TinyBERT
    convention) as the attention weights, so ``outputs.attentions`` holds what TinyBERT matches."""
    from kdbert.core.trace import eager_attention

    output, _, raw = eager_attention(module, query, key, value, attention_mask, scaling, dropout)
    recorded = raw if attention_mask is None else raw + attention_mask.clamp(min=MASKED_SCORE)
    return output, recorded


def register_scores_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(SCORES_IMPLEMENTATION, scores_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(SCORES_IMPLEMENTATION, eager_mask)


class Setup:
    """What every run shares: teacher, tokenizer, task data, the kdbert config and matches."""

    def __init__(self, args):
        from transformers.utils import logging as hf_logging

        from kdbert.data.batching import TokenizerInputs, encode_task
        from kdbert.data.load import TaskOptions, load_task
        from kdbert.core.loading import default_model_path, load_sequence_classifier, load_tokenizer

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        self.args = args
        self.task = TaskOptions("rte", data_dir=str(args.data_dir))
        self.data = load_task(self.task, seed=args.seed)
        teacher_path = args.teacher or default_model_path()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(args.seed)
            self.teacher = load_sequence_classifier(teacher_path, self.data.spec.num_labels, new_head_ok=True)
        self.teacher.eval().requires_grad_(False)
        self.tokenizer = load_tokenizer(teacher_path)
        self.teacher_path = teacher_path
        needed = (args.warmup + args.steps + 2) * args.batch_size
        self.rows = {}
        for seq_len in args.seq_lens:
            encoded = encode_task(self.data.train, TokenizerInputs(self.tokenizer, seq_len))
            long_enough = [ex for ex, n in zip(self.data.train, encoded.lengths) if n == seq_len]
            if not long_enough:
                raise SystemExit(f"no RTE training pair has {seq_len} tokens")
            self.rows[seq_len] = [long_enough[i % len(long_enough)] for i in range(max(needed, len(long_enough)))]
            self.rows[f"distinct_{seq_len}"] = len(long_enough)

    def config(self, seq_len: int, precision: str):
        from kdbert.methods.registry import method_config

        steps = self.args.warmup + self.args.steps
        return method_config("tinybert", {
            "teacher": self.teacher_path, "batch_size": self.args.batch_size, "intermediate_lr": self.args.lr,
            "intermediate_max_steps": steps, "max_seq_len": seq_len, "seed": self.args.seed, "no_progress": True,
            "mixed_precision": "bf16" if precision == "bf16" else "no"}).resolved("rte")

    def student_inputs(self, seq_len: int, precision: str):
        """kdbert's default task inputs (student, encoded rows, collator), as distill_task builds them."""
        from kdbert.core.method import TaskSource
        from kdbert.methods.registry import get_method

        config = self.config(seq_len, precision)
        method = get_method("tinybert")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.args.seed)
            source = TaskSource(self.teacher, self.tokenizer, self.data, self.rows[seq_len], seq_len, self.task)
            inputs = method.task_inputs(source, config)
        return config, method, inputs

    def matches(self, config, student) -> list:
        from kdbert.methods.tinybert import intermediate_matches, resolve_layers

        layer_map, _ = resolve_layers(config, student, self.teacher, log=lambda *_: None)
        return intermediate_matches(layer_map, config.terms_on, config.hidden_projection, config.attention_reduction,
                                    config.head_average)


# ----------------------------------------------------------------------------- the two frameworks
def kdbert_trainer(setup: Setup, seq_len: int, precision: str, workdir: str):
    """kdbert's trainer for the intermediate stage, built as ``distill_task`` builds it."""
    from kdbert.core.method import DistillContext
    from kdbert.core.trainer import RunConfig, Trainer

    config, method, inputs = setup.student_inputs(seq_len, precision)
    context = DistillContext(setup.teacher, inputs.student, setup.tokenizer, setup.data.spec, inputs.train_set, config,
                             config.seed)
    with contextlib.redirect_stdout(io.StringIO()):  # the layer-map table
        plan = method.build_task_plan(context)
    stage = plan.stages[0]
    assert stage.config.name == "intermediate" and not stage.config.evaluate
    run = RunConfig(workdir, seed=config.seed, mixed_precision=config.mixed_precision, progress=False)
    trainer = Trainer(plan.modules, [stage], run, inputs.collator, frozen=plan.frozen, tokenizer=setup.tokenizer)
    return trainer, stage


def run_kdbert(setup: Setup, seq_len: int, precision: str) -> list[float]:
    with tempfile.TemporaryDirectory() as workdir:
        trainer, _ = kdbert_trainer(setup, seq_len, precision, workdir)
        with step_clock() as times:
            trainer.train()
    return times


def textbrewer_matches(matches, student_width: int, teacher_width: int, lr: float) -> list[dict]:
    """kdbert's intermediate matches as TextBrewer ``intermediate_matches`` (HF layer numbering:
    hidden_states[0] is the embedding output, attentions[l - 1] belongs to layer l)."""
    result = []
    for m in matches:
        if m.feature in ("embeddings", "hidden"):
            entry = {"layer_T": m.teacher_layer, "layer_S": m.student_layer, "feature": "hidden",
                     "loss": "hidden_mse", "weight": m.weight}
            if m.projection:
                entry["proj"] = ["linear", student_width, teacher_width, {"lr": lr}]
        elif m.feature == "attention_scores":
            entry = {"layer_T": m.teacher_layer - 1, "layer_S": m.student_layer - 1, "feature": "attention",
                     "loss": "attention_mse", "weight": m.weight}
        else:
            raise ValueError(f"no TextBrewer equivalent for {m.describe()}")
        result.append(entry)
    return result


def adamw_groups(model, lr: float, weight_decay: float) -> list[dict]:
    """kdbert's AdamW groups: no weight decay on biases and LayerNorm weights."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    return [{"params": decay, "lr": lr, "weight_decay": weight_decay},
            {"params": no_decay, "lr": lr, "weight_decay": 0.0}]


def run_textbrewer(setup: Setup, seq_len: int, precision: str) -> list[float]:
    from textbrewer import DistillationConfig, GeneralDistiller, TrainingConfig
    from torch.utils.data import DataLoader

    register_scores_attention()
    config, _, inputs = setup.student_inputs(seq_len, precision)
    student = inputs.student.model
    teacher = copy.deepcopy(setup.teacher)
    matches = setup.matches(config, student)
    for model in (teacher, student):
        model.set_attn_implementation(SCORES_IMPLEMENTATION)

    def adaptor(batch, outputs):
        return {"hidden": outputs.hidden_states, "attention": outputs.attentions}

    def collate(rows):
        batch = inputs.collator(rows)
        batch.pop("labels", None)  # intermediate stage: no hard-label loss
        return batch

    steps = setup.args.warmup + setup.args.steps
    with tempfile.TemporaryDirectory() as workdir:
        torch.manual_seed(config.seed)
        distiller = GeneralDistiller(
            TrainingConfig(device="cpu", log_dir=None, output_dir=workdir, ckpt_steps=steps),
            DistillationConfig(intermediate_matches=textbrewer_matches(
                matches, student.config.hidden_size, teacher.config.hidden_size, config.intermediate_lr)),
            teacher, student, adaptor, adaptor)
        optimizer = torch.optim.AdamW(adamw_groups(student, config.intermediate_lr, config.weight_decay),
                                      lr=config.intermediate_lr)
        loader = DataLoader(inputs.train_set, batch_size=config.batch_size, shuffle=True, collate_fn=collate,
                            drop_last=True)
        autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16"
                    else contextlib.nullcontext())
        with step_clock() as times, distiller, autocast:
            distiller.train(optimizer, loader, num_steps=steps, max_grad_norm=1.0, output_hidden_states=True,
                            output_attentions=True)
    return times


RUNNERS = {"kdbert": run_kdbert, "textbrewer": run_textbrewer}


# ----------------------------------------------------------------------------- FLOPs
def flops_per_example(setup: Setup, seq_len: int) -> dict:
    from kdbert.deploy.bench import count_flops

    config, _, inputs = setup.student_inputs(seq_len, "fp32")
    student = inputs.student.model
    matches = setup.matches(config, student)
    widths = [(student.config.hidden_size, setup.teacher.config.hidden_size) for m in matches if m.projection]
    teacher_fwd = count_flops(setup.teacher, seq_len)
    student_fwd = count_flops(student, seq_len)
    projections = projection_flops(seq_len, widths)
    return {"teacher_forward": teacher_fwd, "student_forward": student_fwd, "projections_forward": projections,
            "step": step_flops(teacher_fwd, student_fwd, projections),
            "matches": [m.describe() for m in matches]}


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
