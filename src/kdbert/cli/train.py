"""The training commands: ``finetune``, ``distill task|general``, ``mlm-head`` and ``init-student``.

Their options are the typed configs' fields (:mod:`kdbert.options`): the flags are generated
from them (:class:`~kdbert.cli.common.OptionFlags`), and what the command line and its
``--config`` file set goes, as a dict of option names, through the same
:func:`~kdbert.options.build_config` as a Python caller's dict.
"""

from __future__ import annotations

import json
from pathlib import Path

from kdbert.cli.common import (
    OptionFlags, add_command, add_task_arguments, format_metrics, given_options, require, task_options,
)
from kdbert.options import OutputOptions

TASK_PRESET = {"optimisation": "optimisation (default: the task's preset)"}


def cmd_finetune(args) -> int:
    from kdbert.methods.finetune import FinetuneConfig, finetune

    report = finetune(task_options(args), given_options(args, FinetuneConfig), resume=bool(args.resume),
                      overwrite=bool(args.overwrite))
    if not report:  # a second process of a multi-process run: the main one reports
        return 0
    print(format_metrics(f"finetune {args.task} -> {args.output_dir}", report["best_metrics"]))
    print(f"train time: {report['train_seconds']:.0f}s")
    return 0


def distill_options(args, general: bool) -> dict:
    """The method's options of a parsed ``distill`` command line (``method`` included)."""
    from kdbert.methods.registry import option_owners

    names = set(option_owners(general)) | {"method"}
    return {k: v for k, v in given_options(args).items() if k in names}


def cmd_distill_task(args) -> int:
    from kdbert.methods.front import distill_task

    report = distill_task(task_options(args), distill_options(args, general=False), args.output_dir,
                          resume=bool(args.resume), overwrite=bool(args.overwrite))
    if not report:  # a second process of a multi-process run: the main one reports
        return 0
    print(format_metrics(f"distill {report['method']} {args.task} -> {args.output_dir}", report["dev_metrics"]))
    print(f"wall time: {report['wall_seconds']:.0f}s; report: {Path(args.output_dir) / 'distill_report.json'}")
    return 0


def cmd_distill_general(args) -> int:
    from kdbert.methods.front import distill_general

    report = distill_general(distill_options(args, general=True), args.output_dir, resume=bool(args.resume),
                             overwrite=bool(args.overwrite))
    if not report:
        return 0
    print(f"general student -> {args.output_dir} ({report['wall_seconds']:.0f}s)")
    return 0


def cmd_mlm_head(args) -> int:
    from kdbert.methods.mlm_head import MlmHeadConfig, fit_mlm_head

    report = fit_mlm_head(given_options(args, MlmHeadConfig), Path(args.output_dir), resume=bool(args.resume),
                          overwrite=bool(args.overwrite))
    print(json.dumps({k: v for k, v in report.items() if not isinstance(v, (list, dict))}, indent=2))
    return 0


def cmd_init_student(args) -> int:
    from kdbert.methods.distilbert import init_student

    report = init_student(args.teacher, args.output_dir, layers=args.layers, layer_choice=args.layer_choice,
                          overwrite=args.overwrite)
    print(f"DistilBERT student from teacher layers {report['layers']} ({report['parameters']:,} parameters) "
          f"-> {report['output_dir']}")
    return 0


def add_method_flags(p, general: bool) -> OptionFlags:
    """``--method`` and the options of every registered method (:mod:`kdbert.methods.registry`)."""
    from kdbert.methods.registry import METHODS, config_class, general_methods

    names = general_methods() if general else list(METHODS)
    p.add_argument("--method", choices=names, help="(default: tinybert) " + "; ".join(
        f"{n}: {METHODS[n].help}" for n in names))
    flags = OptionFlags(p, None if general else TASK_PRESET)
    flags.add({name: config_class(name, general) for name in names})
    return flags


def add_commands(sub, table: dict) -> None:
    from kdbert.methods.finetune import FinetuneConfig
    from kdbert.methods.mlm_head import MlmHeadConfig

    p = add_command(sub, table, "finetune", cmd_finetune,
                    help="fine-tune a model (teacher, or student without distillation) on a task",
                    description="Fine-tune a model on a GLUE task or your own data and save an HF folder "
                                "with metrics.json.")
    add_task_arguments(p)
    flags = OptionFlags(p, TASK_PRESET)
    flags.add(OutputOptions, required=("output_dir",))  # before the config's output_dir, which has a default
    flags.add(FinetuneConfig)

    p = add_command(sub, table, "distill", None,
                    help="distil a teacher into a student (task or general distillation)",
                    description="Knowledge distillation: `distill task` on a task, `distill general` on raw text.")
    stages = p.add_subparsers(dest="stage", required=True, metavar="STAGE")
    q = add_command(stages, table, "task", cmd_distill_task, key="distill task",
                    help="task-specific distillation from a fine-tuned teacher",
                    description="Distil a fine-tuned teacher into a student on a task and save the best "
                                "student with distill_report.json.")
    add_method_flags(q, general=False).add(OutputOptions, required=("output_dir",))
    add_task_arguments(q)
    q = add_command(stages, table, "general", cmd_distill_general, key="distill general",
                    help="general distillation on raw text from a pre-trained teacher",
                    description="General (pre-training stage) distillation on a text corpus; the result "
                                "is the starting student of task distillation.")
    add_method_flags(q, general=True).add(OutputOptions, required=("output_dir",))

    p = add_command(sub, table, "init-student", cmd_init_student,
                    help="initialise a DistilBERT student from a BERT teacher's layers",
                    description="Build a DistilBertForMaskedLM from a BERT teacher's embeddings, chosen layers "
                                "and MLM head (when it has one) and save it with the tokenizer.")
    p.add_argument("--from", dest="teacher", help="BERT teacher folder (with an MLM head ideally) (required)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--layers", help="0-based teacher layers to copy, e.g. 0,2,4")
    g.add_argument("--layer-choice", choices=["every-other", "hf-bert-base"],
                   help="every-other (default, the paper) or hf-bert-base ([0,2,4,7,9,11], HF's release)")
    p.add_argument("--output-dir", help="where the student folder goes (required)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --output-dir")
    require(p, "teacher", "output_dir", spelled={"teacher": "--from"})

    p = add_command(sub, table, "mlm-head", cmd_mlm_head,
                    help="fit a masked-LM head on an encoder without one (for augmentation, DistilBERT's KL term)",
                    description="Fit a BERT MLM head (transform + LayerNorm + decoder tied to the word embeddings) "
                                "on a frozen encoder over a corpus; save an HF BertForMaskedLM folder and its "
                                "held-out masked-token accuracy.")
    flags = OptionFlags(p)
    flags.add(MlmHeadConfig, required=("corpus",))
    flags.add(OutputOptions, required=("output_dir",))
