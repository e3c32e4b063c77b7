"""The ``kdbert`` command line: one entry point, one subcommand per operation.

Every subcommand takes ``--config FILE.yaml``: keys are option names (``learning_rate`` or
``learning-rate``), and options given on the command line override the file. A user error
prints one line, ``kdbert: error: ...``, and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kdbert.errors import KdbertError
from kdbert.cli.common import add_task_arguments, format_metrics, task_options
from kdbert.cli.deploy import cmd_bench, cmd_evaluate, cmd_export, cmd_report


# ----------------------------------------------------------------------------- shared options
def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("run")
    group.add_argument("--output-dir", required=True, help="where the model, metrics, logs and checkpoints go")
    group.add_argument("--seed", type=int, default=42, help="random seed (data order, initialisation, dropout)")
    group.add_argument("--mixed-precision", choices=["auto", "no", "bf16", "fp16"], default="auto",
                       help="autocast precision: auto = bf16 where the hardware runs it natively (CPUs with "
                            "avx512_bf16/amx_bf16, GPUs with bf16), else float32; fp16 needs a GPU")
    group.add_argument("--threads", type=int, help="CPU threads (default: the cores shared fairly among the kdbert "
                                                   "runs on this machine; $OMP_NUM_THREADS also pins it)")
    group.add_argument("--keep-checkpoints", type=int, default=2, help="how many recent checkpoints to keep")
    group.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its last checkpoint")
    group.add_argument("--overwrite", action="store_true", help="replace a run already in --output-dir")
    group.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def add_optim_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("optimisation (default: the task's preset)")
    group.add_argument("--epochs", type=float, help="training epochs (may be fractional)")
    group.add_argument("--max-steps", type=int, help="optimiser steps; overrides --epochs")
    group.add_argument("--learning-rate", type=float, help="peak learning rate")
    group.add_argument("--batch-size", type=int, help="examples per optimiser step per process (before accumulation)")
    group.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps")
    group.add_argument("--max-seq-len", type=int, help="token limit (default 64 single sentence, 128 pairs)")
    group.add_argument("--warmup-ratio", type=float, default=0.1, help="fraction of steps with linear warmup")
    group.add_argument("--weight-decay", type=float,
                       help="weight decay, not on bias/LayerNorm (default: the method's; 0.01, the BiLSTM's 0)")
    group.add_argument("--eval-every", type=int, help="evaluate every N steps (default: each epoch)")
    group.add_argument("--max-train-examples", type=int, help="use only the first N training rows (quick runs)")


# ----------------------------------------------------------------------------- commands
def cmd_finetune(args) -> int:
    from kdbert.methods.finetune import FinetuneConfig, finetune

    config = FinetuneConfig(
        output_dir=args.output_dir, model=args.model, epochs=args.epochs, max_steps=args.max_steps,
        learning_rate=args.learning_rate, batch_size=args.batch_size, max_seq_len=args.max_seq_len,
        warmup_ratio=args.warmup_ratio, grad_accum=args.grad_accum,
        eval_every=args.eval_every, max_train_examples=args.max_train_examples, seed=args.seed,
        mixed_precision=args.mixed_precision, threads=args.threads, keep_checkpoints=args.keep_checkpoints,
        progress=not args.no_progress, **({} if args.weight_decay is None else {"weight_decay": args.weight_decay}),
    )
    report = finetune(task_options(args), config, resume=args.resume, overwrite=args.overwrite)
    if not report:  # a second process of a multi-process run: the main one reports
        return 0
    print(format_metrics(f"finetune {args.task} -> {args.output_dir}", report["best_metrics"]))
    print(f"train time: {report['train_seconds']:.0f}s")
    return 0


def cmd_distill_task(args) -> int:
    from kdbert.core.distill import distill_task

    report = distill_task(task_options(args), distill_options(args), args.output_dir, resume=args.resume,
                          overwrite=args.overwrite)
    if not report:  # a second process of a multi-process run: the main one reports
        return 0
    print(format_metrics(f"distill {args.method} {args.task} -> {args.output_dir}", report["dev_metrics"]))
    print(f"wall time: {report['wall_seconds']:.0f}s; report: {Path(args.output_dir) / 'distill_report.json'}")
    return 0


def cmd_distill_general(args) -> int:
    from kdbert.core.distill import distill_general

    report = distill_general(distill_options(args), args.output_dir, resume=args.resume, overwrite=args.overwrite)
    if not report:
        return 0
    print(f"general student -> {args.output_dir} ({report['wall_seconds']:.0f}s)")
    return 0


def cmd_init_student(args) -> int:
    from kdbert.methods.distilbert import init_student

    report = init_student(args.teacher, args.output_dir, layers=args.layers, layer_choice=args.layer_choice,
                          overwrite=args.overwrite)
    print(f"DistilBERT student from teacher layers {report['layers']} ({report['parameters']:,} parameters) "
          f"-> {report['output_dir']}")
    return 0


TASK_DESTS = ("task", "data_dir", "data_source", "train_file", "text_columns", "label_column", "dev_file",
              "dev_fraction", "regression")
PLUMBING = ("func", "command", "distill_command", "output_dir", "resume", "overwrite")


def distill_options(args) -> dict:
    """The ``distill`` options of a parsed command line: everything but the task and plumbing."""
    return {k: v for k, v in vars(args).items() if k not in TASK_DESTS + PLUMBING}


def add_method_arguments(p: argparse.ArgumentParser, general: bool) -> None:
    """``--method`` and every registered method's own options, generated from the config dataclasses
    (:mod:`kdbert.methods.registry`): help, group and type from each field's metadata, choices the union over
    the methods that share the option. Options every command has (``--epochs``...) are added by
    :func:`add_optim_arguments` / :func:`add_run_arguments`."""
    from dataclasses import fields

    from kdbert.core.options import TrainOptions
    from kdbert.methods.registry import METHODS, config_class, general_methods, option_owners

    names = general_methods() if general else list(METHODS)
    p.add_argument("--method", choices=names, default="tinybert",
                   help="; ".join(f"{n}: {METHODS[n].help}" for n in names))
    owners = option_owners(general)
    common = {f.name for f in fields(TrainOptions)}
    groups: dict[str, argparse._ArgumentGroup] = {}
    done: set[str] = set()
    for name in names:
        for f in fields(config_class(name, general)):
            meta = f.metadata
            if f.name in common or f.name in done or not meta:
                continue
            done.add(f.name)
            if meta["type"] is list and f.name != "corpus":
                p.set_defaults(**{f.name: None})  # set by YAML recipes only (e.g. stages)
                continue
            users = owners[f.name]
            help_text = meta["help"] + ("" if len(users) == len(names) else f" [{'/'.join(users)}]")
            group = groups.setdefault(meta["group"], p.add_argument_group(meta["group"]))
            kwargs: dict = {"help": help_text, "default": None}
            if meta["type"] is bool:
                kwargs["action"] = "store_true"
            elif meta["type"] is list:
                kwargs["nargs"] = "+"
            else:
                kwargs["type"] = meta["type"]
                choices = [c for u in users for c in (config_class(u, general).__dataclass_fields__[f.name]
                                                      .metadata.get("choices") or ())]
                if choices:
                    kwargs["choices"] = list(dict.fromkeys(choices))
            group.add_argument("--" + f.name.replace("_", "-"), **kwargs)


def cmd_quickstart(args) -> int:
    from kdbert.cli.quickstart import run_quickstart

    run_quickstart(task_options(args), args.output_dir, budget=args.budget, method=args.method,
                   student_layers=args.student_layers, seed=args.seed, progress=not args.no_progress,
                   model=args.model, max_train_examples=args.max_train_examples)
    return 0


def cmd_mlm_head(args) -> int:
    from kdbert.methods.mlm_head import fit_mlm_head
    from kdbert.core.loading import resolve_model_path

    report = fit_mlm_head(resolve_model_path(args.encoder), args.corpus, Path(args.output_dir),
                          unfreeze_top_layers=args.unfreeze_top_layers, steps=args.steps, batch_size=args.batch_size,
                          lr=args.learning_rate, max_seq_len=args.max_seq_len, seed=args.seed,
                          eval_sequences=args.eval_sequences, resume=args.resume, overwrite=args.overwrite,
                          progress=not args.no_progress)
    print(json.dumps({k: v for k, v in report.items() if not isinstance(v, (list, dict))}, indent=2))
    return 0


BILSTM_AUGMENT_OPTIONS = ("p_mask", "p_pos", "p_ng", "n_iter", "ngram_mode", "max_n", "nltk_data", "teacher")
TINYBERT_AUGMENT_OPTIONS = ("mlm", "word_vectors")
TINYBERT_AUGMENT_SETTINGS = ("p", "n_aug", "top_k", "max_words", "batch_tokens", "dtype")  # defaults: augment_task's


def cmd_augment(args) -> int:
    from kdbert.cli.augment import augment_task, augment_task_bilstm

    own, foreign = ((BILSTM_AUGMENT_OPTIONS, TINYBERT_AUGMENT_OPTIONS) if args.method == "bilstm"
                    else (TINYBERT_AUGMENT_OPTIONS, BILSTM_AUGMENT_OPTIONS))
    if args.method == "bilstm":  # --dtype: the teacher's labelling precision there
        foreign += tuple(name for name in TINYBERT_AUGMENT_SETTINGS if name != "dtype")
    given = [name for name in foreign if getattr(args, name) is not None]
    if given:
        raise KdbertError(f"--{given[0].replace('_', '-')} is not an option of --method {args.method}; remove it")
    if args.method == "bilstm":
        options = {name: getattr(args, name) for name in own if getattr(args, name) is not None}
        result = augment_task_bilstm(task_options(args), args.output, seed=args.seed, max_rows=args.max_rows,
                                     batch_size=args.batch_size, device=args.device, num_workers=args.num_workers,
                                     teacher_dtype=args.dtype or "float32", **options)
        print(f"augmented {result['input_rows']} rows ({', '.join(map(str, result['columns']))}) -> "
              f"{result['output_rows']} rows in {result['output']} ({result['seconds']:.0f}s, "
              f"{result['examples_per_second']:.1f} examples/s)"
              + (f"; teacher logits in {result['teacher_logits']}" if "teacher_logits" in result else ""))
        return 0
    missing = [name for name in own if getattr(args, name) is None]
    if missing:
        raise KdbertError(f"--method tinybert needs --{missing[0].replace('_', '-')}")
    settings = {name: getattr(args, name) for name in TINYBERT_AUGMENT_SETTINGS if getattr(args, name) is not None}
    result = augment_task(task_options(args), args.mlm, args.word_vectors, args.output, seed=args.seed,
                          batch_size=args.batch_size, num_workers=args.num_workers, max_rows=args.max_rows,
                          device=args.device, **settings)
    print(f"augmented {result['input_rows']} rows ({', '.join(map(str, result['columns']))}) -> "
          f"{result['output_rows']} rows in {result['output']} ({result['seconds']:.0f}s, "
          f"{result['sentences_per_second']:.1f} sentences/s)")
    return 0


# ----------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    from kdbert.augment.bilstm import P_NG, PAIR_P_NG

    parser = argparse.ArgumentParser(prog="kdbert", description="Knowledge distillation for BERT-family models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("finetune", help="fine-tune a model (teacher, or student without distillation) on a task",
                       description="Fine-tune a model on a GLUE task or your own data and save an HF folder "
                                   "with metrics.json.")
    p.add_argument("--model", default="default",
                   help="HF hub id or local folder (default: the packaged all-MiniLM-L6-v2)")
    add_task_arguments(p)
    add_optim_arguments(p)
    add_run_arguments(p)
    p.set_defaults(func=cmd_finetune)

    p = sub.add_parser("evaluate", help="evaluate a fine-tuned classifier on a task's dev split(s)",
                       description="Print and save a fine-tuned model's GLUE metrics on dev.")
    p.add_argument("--model", required=True, help="fine-tuned HF folder or hub id, or an export of `kdbert export` "
                                                  "(its folder or .onnx file, run in ONNX Runtime)")
    add_task_arguments(p)
    p.add_argument("--max-seq-len", type=int, help="token limit (default: the task's)")
    p.add_argument("--batch-size", type=int, default=64, help="evaluation batch size")
    p.add_argument("--output", help="metrics JSON path (default: MODEL/eval_TASK.json)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("bench", help="size, FLOPs, CPU latency and throughput, optionally against another model",
                       description="Parameters, FLOPs per example, batch-1 latency, batch-32 throughput, size on "
                                   "disk and efficiency (share of the measured matrix-multiply rate), in PyTorch "
                                   "or, for an exported model, ONNX Runtime.")
    p.add_argument("--model", required=True, help="HF folder or hub id ('default' = the packaged teacher), or an "
                                                  "export of `kdbert export` (folder or .onnx file: ONNX Runtime)")
    p.add_argument("--compare", help="baseline model (e.g. the teacher, PyTorch or ONNX) for speedup and size ratios")
    p.add_argument("--seq-len", type=int, default=128, help="sequence length of the synthetic input")
    p.add_argument("--threads", type=int, help="CPU threads of torch / ONNX Runtime (default: torch's)")
    p.add_argument("--runs", type=int, default=30, help="timed runs for latency")
    p.add_argument("--output", help="write the rows as JSON here")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("export", help="export a fine-tuned model to ONNX (optionally int8) with a parity check",
                       description="Export a fine-tuned classifier to ONNX with dynamic batch and sequence axes, "
                                   "tokenizer and config beside it, optionally a dynamic int8 copy, and "
                                   "export_report.json: max |logit difference| against PyTorch and, with --task, "
                                   "the dev metric of PyTorch, ONNX fp32 and ONNX int8.")
    p.add_argument("--model", required=True, help="fine-tuned model folder (teacher or student)")
    p.add_argument("--format", choices=["onnx"], default="onnx", help="export format")
    p.add_argument("--quantize", choices=["int8"], help="also write model.int8.onnx (ONNX Runtime dynamic int8)")
    p.add_argument("--output-dir", help="export folder (default: MODEL/onnx)")
    p.add_argument("--max-seq-len", type=int, help="token limit of the parity rows (default: the task's, else 128)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size of the parity check")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --output-dir")
    add_task_arguments(p)
    for action in p._actions:
        if action.dest == "task":
            action.required = False
            action.help = "check parity and metrics on this task's dev rows (default: synthetic rows, no metric)"
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("report", help="paper-style table (methods x tasks) and Pareto plot of run folders",
                       description="Mean +/- std over seeds of each method's dev score per task, the share of the "
                                   "teacher's score kept, parameters, FLOPs, and batch-1 latency and speedup in "
                                   "PyTorch and ONNX Runtime int8; written as Markdown, CSV and JSON with a "
                                   "Pareto plot (PNG) of dev score against latency.")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="finetune / distill run folders (a distilled student's teacher is added automatically)")
    p.add_argument("--results", help="instead of RUN_DIRs: a JSON file of run records "
                                     "(e.g. benchmarks/results/deploy.json)")
    p.add_argument("--output-dir", default="report", help="where report.md/.csv/.json and pareto.png go")
    p.add_argument("--bench", action="store_true",
                   help="time each method's first run: PyTorch, and ONNX int8 where RUN_DIR/onnx/model.int8.onnx "
                        "exists (see `kdbert export`)")
    p.add_argument("--seq-len", type=int, default=128, help="sequence length of FLOPs and timings")
    p.add_argument("--threads", type=int, help="CPU threads for timings (default: torch's)")
    p.add_argument("--plot-latency", choices=["onnx_int8", "pytorch"], default=None,
                   help="latency axis of the Pareto plot (default: ONNX int8 when every point has it)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("quickstart", help="the main job: fine-tune the default teacher, distil a student, "
                                          "compare them (about 6 min on 2 CPU cores)",
                       description="Fine-tune the packaged teacher on a task, distil a student, evaluate and bench "
                                   "both, and print a teacher-vs-student table. Rerun to continue an interrupted run.")
    add_task_arguments(p)
    p.set_defaults(task="sst2")
    for action in p._actions:
        if action.dest == "task":
            action.required = False
    p.add_argument("--output-dir", default="runs/quickstart", help="where the teacher, student and summary go")
    p.add_argument("--budget", choices=["short", "full"], default="short",
                   help="short: a 16000-row subset, one epoch per stage (~7 min on 2 idle cores); full: per-task defaults")
    p.add_argument("--method", choices=["tinybert", "kd", "pkd"], default="tinybert", help="distillation method")
    p.add_argument("--model", default="default", help="teacher to fine-tune (default: the packaged all-MiniLM-L6-v2)")
    p.add_argument("--max-train-examples", type=int, help="training rows per stage (overrides the budget's subset)")
    p.add_argument("--student-layers", default="0,2,4", help="teacher layers (0-based) the student starts from")
    p.add_argument("--seed", type=int, default=42, help="random seed")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=cmd_quickstart)

    p = sub.add_parser("mlm-head", help="fit a masked-LM head on an encoder without one (for augmentation, "
                                        "DistilBERT's KL term)",
                       description="Fit a BERT MLM head (transform + LayerNorm + decoder tied to the word embeddings) "
                                   "on a frozen encoder over a corpus; save an HF BertForMaskedLM folder and its "
                                   "held-out masked-token accuracy.")
    p.add_argument("--encoder", default="default", help="encoder folder or hub id (default: the packaged teacher)")
    p.add_argument("--corpus", nargs="+", required=True, help="text files or folders (.txt/.gz, WikiExtractor ok)")
    p.add_argument("--output-dir", required=True, help="where the BertForMaskedLM folder goes")
    p.add_argument("--unfreeze-top-layers", type=int, default=0,
                   help="also train the top N encoder layers (better predictions for augmentation)")
    p.add_argument("--steps", type=int, default=300, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=32, help="sequences per step")
    p.add_argument("--learning-rate", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--max-seq-len", type=int, default=128, help="tokens per packed sequence")
    p.add_argument("--eval-sequences", type=int, default=256, help="held-out sequences for the accuracy report")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace a run already in --output-dir")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=cmd_mlm_head)

    p = sub.add_parser("augment", help="data augmentation of a task's training file (TinyBERT or BiLSTM rules)",
                       description="Write train_aug.tsv in the task's format. tinybert: MLM candidates for "
                                   "single-piece words, word-vector neighbours for multi-piece words (TinyBERT, "
                                   "Alg. 1). bilstm: masking, POS-guided replacement and n-gram sampling "
                                   "(Tang et al. 2019).")
    add_task_arguments(p)
    p.add_argument("--method", choices=["tinybert", "bilstm"], default="tinybert", help="augmentation rules")
    p.add_argument("--mlm", help="tinybert: BertForMaskedLM folder (e.g. from `kdbert mlm-head`) or hub id")
    p.add_argument("--word-vectors", help="tinybert: GloVe-format text file (.txt or .gz)")
    p.add_argument("--p-mask", type=float, help="bilstm: probability of masking a word (default 0.1)")
    p.add_argument("--p-pos", type=float, help="bilstm: probability of a same-POS replacement (default 0.1)")
    p.add_argument("--p-ng", type=float, help=f"bilstm: probability of n-gram sampling (default {P_NG}, the paper's; "
                                              f"sentence pairs: {PAIR_P_NG}; the authors' pair augmenter uses 0)")
    p.add_argument("--n-iter", type=int, help="bilstm: versions drawn per example (default 20)")
    p.add_argument("--ngram-mode", choices=["keep", "mask"],
                   help="bilstm: keep only the sampled n-gram (default, the paper) or mask its words")
    p.add_argument("--max-n", type=int, help="bilstm: longest n-gram (default 5)")
    p.add_argument("--nltk-data", help="bilstm: folder with NLTK's taggers/averaged_perceptron_tagger_eng "
                                       "(default: NLTK's search path, e.g. $NLTK_DATA)")
    p.add_argument("--teacher", help="bilstm: fine-tuned teacher whose logits on the output are stored beside it")
    p.add_argument("--output", help="output file (default: train_aug.tsv, or .jsonl for JSONL input)")
    p.add_argument("--p", type=float, help="tinybert: probability of replacing each candidate word (p_t, default 0.4)")
    p.add_argument("--n-aug", type=int, help="tinybert: augmented versions tried per sentence (N_a, default 20)")
    p.add_argument("--top-k", type=int, help="tinybert: candidates per word (K, default 15)")
    p.add_argument("--max-words", type=int, help="tinybert: word vectors loaded (first N of the file, default 100000)")
    p.add_argument("--max-rows", type=int, help="augment only the first N training rows")
    p.add_argument("--batch-size", type=int, default=64, help="most MLM queries (bilstm: teacher rows) per forward pass")
    p.add_argument("--batch-tokens", type=int,
                   help="tinybert: most padded tokens per forward pass (default 2048; long inputs get smaller "
                        "batches; faster on CPU)")
    p.add_argument("--num-workers", type=int, default=1, help="worker processes (bilstm: for POS tagging)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"],
                   help="tinybert: MLM precision (default float32): bfloat16 is ~2-3x faster on CPUs with AMX "
                        "and on GPUs; some candidates differ, also between batch sizes / worker counts. bilstm: "
                        "the --teacher's labelling precision (bfloat16 under autocast; logits stored in float32, "
                        "in a store of their own: distil with --teacher-dtype bfloat16 to use them)")
    p.add_argument("--device", help="where the MLM runs (default: cuda when available, else cpu)")
    p.add_argument("--seed", type=int, default=42, help="random seed (in float32 the output is identical for any "
                                                         "batch size or worker count)")
    p.set_defaults(func=cmd_augment)

    p = sub.add_parser("distill", help="distil a teacher into a student (task or general distillation)",
                       description="Knowledge distillation: `distill task` on a task, `distill general` on raw text.")
    dsub = p.add_subparsers(dest="distill_command", required=True, metavar="STAGE")
    q = dsub.add_parser("task", help="task-specific distillation from a fine-tuned teacher",
                        description="Distil a fine-tuned teacher into a student on a task and save the best "
                                    "student with distill_report.json.")
    add_method_arguments(q, general=False)
    add_task_arguments(q)
    add_optim_arguments(q)
    add_run_arguments(q)
    q.set_defaults(func=cmd_distill_task)
    q = dsub.add_parser("general", help="general distillation on raw text from a pre-trained teacher",
                        description="General (pre-training stage) distillation on a text corpus; the result "
                                    "is the starting student of task distillation.")
    add_method_arguments(q, general=True)
    add_optim_arguments(q)
    add_run_arguments(q)
    q.set_defaults(func=cmd_distill_general)

    p = sub.add_parser("init-student", help="initialise a DistilBERT student from a BERT teacher's layers",
                       description="Build a DistilBertForMaskedLM from a BERT teacher's embeddings, chosen layers "
                                   "and MLM head (when it has one) and save it with the tokenizer.")
    p.add_argument("--from", dest="teacher", required=True, help="BERT teacher folder (with an MLM head ideally)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--layers", help="0-based teacher layers to copy, e.g. 0,2,4")
    g.add_argument("--layer-choice", choices=["every-other", "hf-bert-base"],
                   help="every-other (default, the paper) or hf-bert-base ([0,2,4,7,9,11], HF's release)")
    p.add_argument("--output-dir", required=True, help="where the student folder goes")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --output-dir")
    p.set_defaults(func=cmd_init_student)

    return parser


RECIPE_DIR = Path(__file__).parents[1] / "methods" / "presets"


def _find_config_flag(argv: list[str]) -> tuple[int, Path] | None:
    """Locate ``--config FILE`` or ``--recipe NAME`` (a packaged preset, e.g. tinybert/rte)."""
    for flag in ("--config", "--recipe"):
        if flag in argv:
            index = argv.index(flag)
            if index + 1 >= len(argv):
                raise KdbertError(f"{flag} needs a value")
            value = argv[index + 1]
            path = Path(value)
            if flag == "--recipe" and not path.is_file():
                path = RECIPE_DIR / f"{value.removesuffix('.yaml')}.yaml"
                if not path.is_file():
                    known = sorted(str(p.relative_to(RECIPE_DIR).with_suffix("")) for p in RECIPE_DIR.rglob("*.yaml"))
                    raise KdbertError(f"--recipe {value}: no such preset; known presets: {', '.join(known)}")
            if not path.is_file():
                raise KdbertError(f"{flag} {path} does not exist")
            return index, path
    return None


def _apply_config_file(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Load ``--config FILE`` / ``--recipe NAME`` (YAML) as defaults of the chosen command's
    options; options given on the command line override the file."""
    found = _find_config_flag(argv)
    if found is None:
        return
    import yaml

    index, path = found
    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict):
        raise KdbertError(f"{path}: expected a mapping of option names to values")
    del argv[index:index + 2]
    target, words = parser, [a for a in argv if not a.startswith("-")]
    while True:
        subparsers = [a for a in target._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers:
            break
        if not words or words[0] not in subparsers[0].choices:
            raise KdbertError("--config/--recipe come after the command, e.g. `kdbert finetune --config FILE`")
        target = subparsers[0].choices[words.pop(0)]
    known = {action.dest for action in target._actions} | set(target._defaults)
    defaults = {}
    for key, value in values.items():
        dest = str(key).replace("-", "_")
        if dest not in known:
            raise KdbertError(f"{path}: unknown option '{key}'; see `kdbert ... --help` for the command's options")
        defaults[dest] = value
    target.set_defaults(**defaults)
    for action in target._actions:
        if action.dest in defaults:
            action.required = False


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # keep HF load reports and save progress bars out of the output
    hf_logging.disable_progress_bar()
    parser = build_parser()
    try:
        _apply_config_file(parser, argv)
        args = parser.parse_args(argv)
        return args.func(args)
    except KdbertError as exc:
        print(f"kdbert: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path option naming a file for a folder, no permission, a full disk...
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"kdbert: error: {where}{exc.strerror or exc}; check the path, its permissions and free space",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
