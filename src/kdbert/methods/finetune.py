"""Fine-tuning a model (the teacher, or a student without distillation) on a task.

Fine-tuning is a one-stage recipe whose one match is the hard-label task loss (cross-entropy, or
MSE for regression), run by the shared :class:`~kdbert.core.trainer.Trainer`.

Per-task defaults suit the packaged all-MiniLM-L6-v2 (a small model that under-trains at
BERT-base's 2e-5..3e-5: RTE 55%, MRPC 77% at 3e-5 for 3 epochs), measured in BENCHMARKS.md.

How long a fine-tuning takes on this machine is measured before it starts
(:func:`estimate_finetune`): a few training steps of the model at the run's batch size, precision
and threads, one evaluation batch, and the loading and tokenising of a sample of its rows.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace

from transformers import set_seed

from kdbert.core.atomic_io import write_json
from kdbert.core.evaluators import task_evaluator
from kdbert.core.hardware import ThreadShare
from kdbert.core.loading import load_task_model, load_tokenizer, resolve_model_path
from kdbert.core.matching import Match, MatchLoss
from kdbert.core.pooling import POOLINGS, choose_pooling, set_pooling
from kdbert.options import TrainOptions, build_config, option
from kdbert.core.run_folder import prepare_output_dir
from kdbert.core.trace import model_inputs
from kdbert.core.stages import RunConfig, Stage, StageConfig
from kdbert.core.trainer import Trainer, to_device
from kdbert.data.batching import PaddingCollator, TokenizerInputs
from kdbert.data.held_out import DECIDE_SHARE, RECORD_FILE, record
from kdbert.data.load import TaskOptions, load_task, task_identity
from kdbert.data.subsets import training_rows
from kdbert.data.tasks import record_text_columns
from kdbert.errors import KdbertError

# epochs, learning rate, batch size per task (for small (~20M-parameter) BERT-family models).
# 1e-4 beat 3e-5 on MRPC and RTE for all-MiniLM-L6-v2; CoLA did best at 3e-5 for 5 epochs
# (MCC 27.3 vs 26.2 at 1e-4 for 3 epochs): see BENCHMARKS.md.
TASK_DEFAULTS = {
    "cola": (5, 3e-5, 32), "sst2": (2, 1e-4, 32), "mrpc": (5, 1e-4, 32), "stsb": (5, 1e-4, 32),
    "rte": (5, 1e-4, 32), "wnli": (3, 1e-4, 32), "qnli": (3, 1e-4, 32), "mnli": (3, 1e-4, 32),
    "qqp": (3, 1e-4, 32),
}
FALLBACK_DEFAULTS = (3, 1e-4, 32)
# what a resumed run must share with the original, besides the task, model and length
IDENTITY_OPTIONS = ("epochs", "max_steps", "learning_rate", "batch_size", "seed", "max_train_examples")


@dataclass
class FinetuneConfig(TrainOptions):
    """Options of :func:`finetune` (``None`` = the task's default); checked like every command's."""

    output_dir: str = option(".", "where the model, metrics, logs and checkpoints go", group="run")
    model: str | None = option(None, "HF hub id or local folder (default: the packaged all-MiniLM-L6-v2)",
                               group="models")
    pooling: str = option("auto", "what the classifier reads: mean (the masked mean of the last hidden states), "
                                  "cls (the [CLS] pooler), pair (a pair task's two sentences' normalised means "
                                  "multiplied: a learned cosine) or auto (what a model kdbert fine-tuned records, else "
                                  "mean where the folder's sentence-transformers pooling is mean tokens, as the "
                                  "default model's is, else cls)", group="models", choices=("auto", *POOLINGS))

    def task_defaults(self, task: str) -> dict:
        epochs, lr, batch = TASK_DEFAULTS.get(task, FALLBACK_DEFAULTS)
        return {"epochs": epochs, "learning_rate": lr, "batch_size": batch}


def finetune(task: TaskOptions, options: FinetuneConfig | dict, resume: bool = False, overwrite: bool = False,
             deadline: float | None = None) -> dict:
    """Fine-tune ``model`` on ``task`` with ``options`` (a :class:`FinetuneConfig` or a dict of its
    option names), training stopping at ``deadline`` (``time.time()``,
    :attr:`kdbert.core.trainer.RunConfig.deadline`) if given; writes an HF folder with
    ``metrics.json`` to ``output_dir`` and returns the training report (best dev metrics included)."""
    given = options if isinstance(options, FinetuneConfig) else build_config(FinetuneConfig, options)
    given.check()
    if task.unlabelled:
        raise KdbertError("--unlabelled rows are labelled by a teacher; fine-tuning has none (use `kdbert distill "
                          "task --teacher T --unlabelled ...`)")
    if task.held_out_fraction and not task.decide_share:  # the checkpoint is picked on half the held-out rows
        task = replace(task, decide_share=DECIDE_SHARE)
    data = load_task(task, seed=given.seed)
    spec = data.spec
    config = given.resolved(spec.name)
    if spec.question_answering and config.pooling != "auto":
        raise KdbertError(f"--pooling {config.pooling} applies to classification and regression; {spec.name} is "
                          "question answering, whose head reads every token")
    if config.pooling == "pair" and not spec.is_pair:
        raise KdbertError(f"--pooling pair compares a sentence pair's two sentences; {spec.name} has one text per "
                          "row: use --pooling mean or cls")
    max_seq_len = config.max_seq_len or spec.max_seq_len
    model_path = resolve_model_path(config.model)
    identity = {"command": "finetune", "task": task.task, "model": model_path, "max_seq_len": max_seq_len,
                "train_file": task.train_file, **{name: getattr(config, name) for name in IDENTITY_OPTIONS},
                **task_identity(task),
                **({"held_out_fraction": task.held_out_fraction} if task.held_out_fraction else {}),
                **({"pooling": config.pooling} if config.pooling != "auto" else {}),
                **({"train_subset": config.train_subset}  # folders from before it read the first rows
                   if config.max_train_examples and config.train_subset != "first" else {})}
    out = prepare_output_dir(config.output_dir, identity, resume, overwrite)
    if data.held_out:  # which rows this teacher never trained on, for the students distilled from it
        write_json(out / RECORD_FILE, record(data, task.held_out_fraction, data.held_out_rule))
    tokenizer = load_tokenizer(model_path)
    set_seed(config.seed)
    model = load_task_model(model_path, spec, new_head_ok=True)
    if not spec.question_answering:
        _pool(model, model_path, config.pooling)
    if spec.labels is not None:
        model.config.id2label = dict(enumerate(spec.labels))
        model.config.label2id = {label: i for i, label in enumerate(spec.labels)}
    record_text_columns(model, spec)
    train_rows = training_rows(data, config.max_train_examples, config.train_subset)
    train_set = TokenizerInputs.for_task(tokenizer, max_seq_len, spec).rows(train_rows)
    stage = Stage(StageConfig.from_options("finetune", config), _task_loss(), train_set)
    trainer = Trainer({"student": model}, [stage], RunConfig.from_options(out, config, deadline=deadline),
                      PaddingCollator(tokenizer.pad_token_id, spec.is_regression),
                      evaluator=task_evaluator(data, tokenizer, max_seq_len), tokenizer=tokenizer)
    report = trainer.train(resume=resume)
    if not report:  # not the main process of a multi-process run
        return {}
    report["config"] = {**asdict(given), **identity}
    if len(train_set) != len(train_rows):  # QA and --truncation windows: several windows a row
        report["train_windows"] = len(train_set)
    return report


def _task_loss() -> MatchLoss:
    """Fine-tuning's loss: the task's, on the gold labels (cross-entropy, or MSE for a regression)."""
    return MatchLoss([Match("task", "logits", "hard_label", target="labels")])


def _pool(model, path: str, requested: str) -> None:
    """Make the classifier loaded from ``path`` pool as ``--pooling`` asks
    (:func:`kdbert.core.pooling.choose_pooling`) and say which pooling and why in one line."""
    from transformers import AutoConfig

    pooling, why = choose_pooling(requested, path, AutoConfig.from_pretrained(path))
    set_pooling(model, pooling)
    print(f"pooling: {pooling} ({why})")


PROBE_STEPS = 3  # training steps timed, after an untimed one
EVAL_BATCH = 64  # the evaluators' batch size
PROBE_SAMPLE = 256  # rows loaded and tokenised to time, the timed batches taken from them
PROBE_QUANTILES = (0.25, 0.9)  # the length quantiles of the probe's two timed batches


def estimate_finetune(task: TaskOptions, options: FinetuneConfig | dict) -> dict:
    """How long :func:`finetune` with ``options`` should take on this machine, measured on its model
    before it starts: training steps on two batches of its first rows, short and long, read at
    their mean length (:func:`_probe`), at its batch size, precision and thread share, an evaluation
    batch of them, and the loading and
    tokenising of a sample, scaled to all its rows. Returns ``{"steps", "step_seconds",
    "eval_rows", "evaluations", "row_seconds", "row_length", "load_seconds", "seconds"}`` (``row_length``:
    the tokens an evaluated row was timed at, padded): the whole run is
    ``load_seconds + steps * step_seconds + evaluations * eval_rows * row_seconds`` (an evaluation
    scores the dev and held-out rows, once an epoch)."""
    config = options if isinstance(options, FinetuneConfig) else build_config(FinetuneConfig, options)
    started = time.time()
    data = load_task(task, seed=config.seed)
    config = config.resolved(data.spec.name)
    path = resolve_model_path(config.model)
    tokenizer, model = load_tokenizer(path), load_task_model(path, data.spec, new_head_ok=True)
    rows = training_rows(data, config.max_train_examples, config.train_subset)
    eval_rows = sum(len(split) for split in data.dev.values()) + len(data.held_out)
    sample = rows[: max(PROBE_SAMPLE, config.batch_size, EVAL_BATCH)]
    encoding = time.time()
    dataset = TokenizerInputs.for_task(tokenizer, config.max_seq_len or data.spec.max_seq_len, data.spec).rows(sample)
    load = encoding - started + (time.time() - encoding) / len(sample) * (len(rows) + eval_rows)
    share = ThreadShare(config.threads)
    share.start()
    try:
        step, row, row_length = _probe(model, dataset, PaddingCollator(tokenizer.pad_token_id, data.spec.is_regression),
                                       config)
    finally:
        share.stop()
    steps = math.ceil(config.epochs * math.ceil(len(rows) / config.batch_size)) if not config.max_steps \
        else config.max_steps
    evaluations = max(1, math.ceil(config.epochs))
    return {"steps": steps, "step_seconds": step, "eval_rows": eval_rows, "evaluations": evaluations,
            "row_seconds": row, "row_length": row_length, "load_seconds": load,
            "seconds": load + steps * step + eval_rows * evaluations * row}


def _around_quantile(dataset, size: int, quantile: float) -> list[int]:
    """``size`` row indices of ``dataset`` around the ``quantile`` of its lengths (read round again
    when it has fewer)."""
    lengths = dataset.lengths
    order = sorted(range(len(dataset)), key=lambda i: lengths[i])
    start = min(max(0, round(quantile * len(order)) - size // 2), max(0, len(order) - size))
    return [order[(start + i) % len(order)] for i in range(size)]


def mean_step_seconds(short: tuple[int, float], long: tuple[int, float], mean_length: float) -> float:
    """A length-grouped run's mean step time from two timed batches, ``(padded length, seconds)``
    each. A step's time grows about linearly with its batch's padded length L::

        t(L) = t_short + (t_long - t_short) * (L - L_short) / (L_long - L_short)

    read at the rows' mean length, since a run's time is its steps' sum (SST-2's first 16,000 rows: 13.4
    tokens on average, 10 at the median; the quickstart teacher's step read 5% above the median
    batch's on an AMD EPYC); no less than the faster batch's time (batches of one length: their mean)."""
    (short_length, short_seconds), (long_length, long_seconds) = short, long
    if long_length <= short_length:
        return (short_seconds + long_seconds) / 2
    slope = (long_seconds - short_seconds) / (long_length - short_length)
    return max(min(short_seconds, long_seconds), short_seconds + slope * (mean_length - short_length))


def _probe(model, dataset, collator, config: FinetuneConfig) -> tuple[float, float, int]:
    """Seconds a training step takes on average (:func:`mean_step_seconds` of two batches, around the
    ``PROBE_QUANTILES`` of the rows' lengths, each the median of ``PROBE_STEPS`` of the trainer's own
    steps after an untimed one: the first call at a shape pays one-off kernel set-up, which a run pays
    once per shape) and an evaluated row (a batch of ``EVAL_BATCH`` around the median length, timed on
    its second pass, and the length it was padded to) of ``model`` on ``dataset``."""
    import torch

    stage = Stage(StageConfig.from_options("probe", config), _task_loss(), dataset)
    lengths = dataset.lengths
    timed = []
    with tempfile.TemporaryDirectory() as scratch:
        trainer = Trainer({"student": model}, [stage], RunConfig.from_options(scratch, config, progress=False),
                          collator)
        for quantile in PROBE_QUANTILES:
            rows = _around_quantile(dataset, config.batch_size, quantile)
            times = trainer.step_seconds(rows, PROBE_STEPS + 1)
            timed.append((max(lengths[i] for i in rows), statistics.median(times[1:])))
    step = mean_step_seconds(*timed, statistics.fmean(lengths))
    model.eval()
    evaluated = _around_quantile(dataset, EVAL_BATCH, 0.5)
    batch = to_device(collator([dataset[i] for i in evaluated]), trainer.device)
    with torch.no_grad():
        for _ in range(2):
            began = time.time()
            model(**model_inputs(model, batch))
    return step, (time.time() - began) / EVAL_BATCH, max(lengths[i] for i in evaluated)
