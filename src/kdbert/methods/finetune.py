"""Fine-tuning a model (the teacher, or a student without distillation) on a task.

Fine-tuning is a one-stage recipe whose one match is the hard-label task loss (cross-entropy, or
MSE for regression), run by the shared :class:`~kdbert.core.trainer.Trainer`.

Per-task defaults suit the packaged all-MiniLM-L6-v2 (a small model that under-trains at
BERT-base's 2e-5..3e-5: RTE 55%, MRPC 77% at 3e-5 for 3 epochs), measured in BENCHMARKS.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from transformers import set_seed

from kdbert.core.options import TrainOptions, option
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.load import TaskOptions, load_task
from kdbert.core.evaluate import TaskEvaluator
from kdbert.core.matching import Match, MatchLoss
from kdbert.core.loading import load_sequence_classifier, load_tokenizer, resolve_model_path
from kdbert.core.trainer import RunConfig, Stage, StageConfig, Trainer, prepare_output_dir

# epochs, learning rate, batch size per task (for small (~20M-parameter) BERT-family models).
# 1e-4 beat 3e-5 on MRPC and RTE for all-MiniLM-L6-v2; CoLA did best at 3e-5 for 5 epochs
# (MCC 27.3 vs 26.2 at 1e-4 for 3 epochs): see BENCHMARKS.md.
TASK_DEFAULTS = {
    "cola": (5, 3e-5, 32), "sst2": (2, 1e-4, 32), "mrpc": (5, 1e-4, 32), "stsb": (5, 1e-4, 32),
    "rte": (5, 1e-4, 32), "wnli": (3, 1e-4, 32), "qnli": (3, 1e-4, 32), "mnli": (3, 1e-4, 32),
    "qqp": (3, 1e-4, 32),
}
FALLBACK_DEFAULTS = (3, 1e-4, 32)


@dataclass
class FinetuneConfig(TrainOptions):
    """Options of :func:`finetune` (``None`` = the task's default); checked like every command's."""

    output_dir: str = option(".", "where the model, metrics, logs and checkpoints go", group="models")
    model: str | None = option(None, "HF hub id or local folder (default: the packaged all-MiniLM-L6-v2)",
                               group="models")
    progress: bool = True


def resolved_hyperparameters(task_name: str, config: FinetuneConfig) -> tuple[float, float, int]:
    epochs, lr, batch = TASK_DEFAULTS.get(task_name, FALLBACK_DEFAULTS)
    return (config.epochs if config.epochs is not None else epochs,
            config.learning_rate if config.learning_rate is not None else lr,
            config.batch_size if config.batch_size is not None else batch)


def finetune(task: TaskOptions, config: FinetuneConfig, resume: bool = False, overwrite: bool = False) -> dict:
    """Fine-tune ``config.model`` on ``task``; writes an HF folder with ``metrics.json`` to
    ``config.output_dir`` and returns the training report (best dev metrics included)."""
    config.check()
    data = load_task(task, seed=config.seed)
    spec = data.spec
    epochs, lr, batch_size = resolved_hyperparameters(spec.name, config)
    max_seq_len = config.max_seq_len or spec.max_seq_len
    model_path = resolve_model_path(config.model)
    identity = {"command": "finetune", "task": task.task, "model": model_path, "epochs": epochs,
                "max_steps": config.max_steps, "learning_rate": lr, "batch_size": batch_size,
                "max_seq_len": max_seq_len, "seed": config.seed, "max_train_examples": config.max_train_examples,
                "train_file": task.train_file}
    out = prepare_output_dir(config.output_dir, identity, resume, overwrite)
    tokenizer = load_tokenizer(model_path)
    set_seed(config.seed)
    model = load_sequence_classifier(model_path, spec.num_labels, new_head_ok=True)
    if spec.labels is not None:
        model.config.id2label = dict(enumerate(spec.labels))
        model.config.label2id = {label: i for i, label in enumerate(spec.labels)}
    train_rows = data.train[: config.max_train_examples] if config.max_train_examples else data.train
    train_set = encode_examples(tokenizer, train_rows, max_seq_len)
    stage = Stage(
        StageConfig("finetune", epochs=epochs, max_steps=config.max_steps, learning_rate=lr,
                    warmup_ratio=config.warmup_ratio, weight_decay=config.weight_decay, batch_size=batch_size,
                    grad_accum=config.grad_accum, eval_every=config.eval_every),
        MatchLoss([Match("task", "logits", "hard_label", target="labels")]),
        train_set,
    )
    run = RunConfig(str(out), seed=config.seed, mixed_precision=config.mixed_precision, threads=config.threads,
                    keep_checkpoints=config.keep_checkpoints, progress=config.progress)
    trainer = Trainer({"student": model}, [stage], run, PaddingCollator(tokenizer.pad_token_id, spec.is_regression),
                      evaluator=TaskEvaluator(data, tokenizer, max_seq_len), tokenizer=tokenizer)
    report = trainer.train(resume=resume)
    if not report:  # not the main process of a multi-process run
        return {}
    report["config"] = {**asdict(config), **identity}
    return report
