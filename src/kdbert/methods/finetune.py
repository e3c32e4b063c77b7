"""Fine-tuning a model (the teacher, or a student without distillation) on a task.

Fine-tuning is a one-stage recipe whose one match is the hard-label task loss (cross-entropy, or
MSE for regression), run by the shared :class:`~kdbert.core.trainer.Trainer`.

Per-task defaults suit the packaged all-MiniLM-L6-v2 (a small model that under-trains at
BERT-base's 2e-5..3e-5: RTE 55%, MRPC 77% at 3e-5 for 3 epochs), measured in BENCHMARKS.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from transformers import set_seed

from kdbert.core.evaluate import task_evaluator
from kdbert.core.loading import load_task_model, load_tokenizer, resolve_model_path
from kdbert.core.matching import Match, MatchLoss
from kdbert.options import TrainOptions, build_config, option
from kdbert.core.run_folder import prepare_output_dir
from kdbert.core.trainer import RunConfig, Stage, StageConfig, Trainer
from kdbert.data.batching import PaddingCollator, TokenizerInputs
from kdbert.data.load import TaskOptions, load_task, task_identity
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

    def task_defaults(self, task: str) -> dict:
        epochs, lr, batch = TASK_DEFAULTS.get(task, FALLBACK_DEFAULTS)
        return {"epochs": epochs, "learning_rate": lr, "batch_size": batch}


def finetune(task: TaskOptions, options: FinetuneConfig | dict, resume: bool = False, overwrite: bool = False) -> dict:
    """Fine-tune ``model`` on ``task`` with ``options`` (a :class:`FinetuneConfig` or a dict of its
    option names); writes an HF folder with ``metrics.json`` to ``output_dir`` and returns the
    training report (best dev metrics included)."""
    given = options if isinstance(options, FinetuneConfig) else build_config(FinetuneConfig, options)
    given.check()
    if task.unlabelled:
        raise KdbertError("--unlabelled rows are labelled by a teacher; fine-tuning has none (use `kdbert distill "
                          "task --teacher T --unlabelled ...`)")
    data = load_task(task, seed=given.seed)
    spec = data.spec
    config = given.resolved(spec.name)
    max_seq_len = config.max_seq_len or spec.max_seq_len
    model_path = resolve_model_path(config.model)
    identity = {"command": "finetune", "task": task.task, "model": model_path, "max_seq_len": max_seq_len,
                "train_file": task.train_file, **{name: getattr(config, name) for name in IDENTITY_OPTIONS},
                **task_identity(task),
                **({"held_out_fraction": task.held_out_fraction} if task.held_out_fraction else {})}
    out = prepare_output_dir(config.output_dir, identity, resume, overwrite)
    tokenizer = load_tokenizer(model_path)
    set_seed(config.seed)
    model = load_task_model(model_path, spec, new_head_ok=True)
    if spec.labels is not None:
        model.config.id2label = dict(enumerate(spec.labels))
        model.config.label2id = {label: i for i, label in enumerate(spec.labels)}
    train_rows = data.train[: config.max_train_examples] if config.max_train_examples else data.train
    train_set = TokenizerInputs.for_task(tokenizer, max_seq_len, spec).rows(train_rows)
    stage = Stage(StageConfig.from_options("finetune", config),
                  MatchLoss([Match("task", "logits", "hard_label", target="labels")]), train_set)
    trainer = Trainer({"student": model}, [stage], RunConfig.from_options(out, config),
                      PaddingCollator(tokenizer.pad_token_id, spec.is_regression),
                      evaluator=task_evaluator(data, tokenizer, max_seq_len), tokenizer=tokenizer)
    report = trainer.train(resume=resume)
    if not report:  # not the main process of a multi-process run
        return {}
    report["config"] = {**asdict(given), **identity}
    if len(train_set) != len(train_rows):  # QA and --truncation windows: several windows a row
        report["train_windows"] = len(train_set)
    return report
