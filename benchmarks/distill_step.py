"""The distillation step that benchmarks/throughput.py times, in kdbert and in TextBrewer on the same
work: its setup (teacher, student, rows of exactly the stated length), one runner per framework
that returns the time of every optimiser step, the attention both models run to expose pre-softmax
scores, the matmul peak, and the arithmetic of FLOPs and rates (see throughput.py's docstring)."""

from __future__ import annotations

import contextlib
import copy
import io
import os
import tempfile
import time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

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

