"""Export a fine-tuned classifier (teacher or student) to ONNX, optionally int8, and check it.

``kdbert export --model DIR --format onnx [--quantize int8]`` writes, into ``DIR/onnx`` by default::

    model.onnx            fp32 graph, inputs (batch, sequence) int64, output logits (batch, C);
                          --graph picks how it is made (dynamo, torchscript, fused:
                          :mod:`kdbert.deploy.graphs`; default: the family's)
    model.int8.onnx       with --quantize int8: int8 per-channel weights, uint8 activations,
                          quantised dynamically or statically (--int8-method; default auto: the
                          fastest within 0.5 points of fp32 on the held-out rows, else dev,
                          :mod:`kdbert.deploy.int8_choice`); 7-bit weights, exact on every x86
                          CPU, unless --int8-target vnni (:mod:`kdbert.deploy.int8_kernels`)
    config.json, tokenizer files
    export_report.json    parity and size (below)
    README.md             the model card (:mod:`kdbert.deploy.model_card`)

With ``--prune-vocab`` the graph's embedding keeps only the rows of the task's tokens, read through
an id map (:mod:`kdbert.deploy.vocabulary`; ``export_report.json["vocabulary"]``).

Parity (``export_report.json["parity"]``) on the task's dev rows (``--task``) or, without one,
on 64 synthetic rows of random ids and lengths with padding::

    max_abs_logit_diff_fp32 = max_{n,c} |logits_ort_fp32[n, c] - logits_pytorch[n, c]|

(checked against ``tolerance`` = 1e-4), the same for int8, and with ``--task`` the dev metrics of
PyTorch, ORT fp32 and ORT int8.

Families: the model's student family (:mod:`kdbert.families.registry`) says how it is called
(:class:`~kdbert.families.registry.InputSpec`: input names, position limit, vocabulary, graphs),
which rows parity is checked on and how the exported model is scored; a word-level student's
vocabulary is saved where a tokenizer would be. A model of a family of your own is exported with
:func:`export_classifier` once its family is registered.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from kdbert.core.atomic_io import replace_dir, write_json
from kdbert.core.evaluate import Scored, scored_with_logits
from kdbert.deploy.bench import count_flops, count_parameters
from kdbert.deploy.graphs import export_graph
from kdbert.deploy.int8_choice import INT8_CHOICES, choose_int8
from kdbert.deploy.model_card import write_export_card
from kdbert.deploy.onnx_runtime import FP32_FILE, INT8_FILE, REPORT_FILE, OnnxClassifier, is_onnx_model
from kdbert.deploy.vocabulary import prune_vocabulary
from kdbert.errors import KdbertError
from kdbert.families.registry import Family, InputSpec, family_of_folder, family_of_model

PARITY_TOLERANCE = 1e-4
FLOP_LENGTHS = (16, 32, 64, 128, 256, 512)  # sequence lengths whose FLOPs the report records

__all__ = ["export_classifier", "export_model"]


# --------------------------------------------------------------------------- parity


def _parity_rows(family: Family, encoder, spec: InputSpec, evaluator, task_name: str | None, seq_len: int,
                 batch_size: int):
    """The rows parity is checked on and ``predict(runner) -> logits`` over them: the first dev
    split of the task's ``evaluator`` (which also scores every runner), else the family's
    synthetic rows; with the split's name (None for synthetic rows)."""
    if evaluator is None:
        dataset, predict = family.synthetic_rows(spec, seq_len, encoder, batch_size)
        return predict, len(dataset), "synthetic (random ids and lengths)", None
    split = next(iter(evaluator.splits))
    dataset = evaluator.splits[split]
    return (lambda runner: evaluator.predict(runner, dataset)), len(dataset), f"dev ({task_name}, split {split})", split


def _parity(model: nn.Module, spec: InputSpec, encoder, files: dict[str, Path], evaluator, task_name: str | None,
            seq_len: int, batch_size: int, scored: dict[str, Scored]) -> tuple[dict, dict]:
    """Logit differences and (with a task) dev metrics of PyTorch and every exported file
    (``scored``: the metrics and dev logits of those already scored, by runner name). With a task,
    each runner predicts the dev rows once, for its metrics and the parity check alike."""
    family = family_of_model(model)
    runners = {"pytorch": family.runner(model, spec)}
    runners.update({f"onnx_{precision}": OnnxClassifier(file, load_encoder=False) for precision, file in files.items()})
    predict, examples, source, split = _parity_rows(family, encoder, spec, evaluator, task_name, seq_len, batch_size)
    if evaluator:
        scored = {name: scored.get(name) or scored_with_logits(evaluator, runner) for name, runner in runners.items()}

    def logits_of(name: str) -> np.ndarray:
        known = scored.get(name)
        return known.logits[split] if known is not None and split in known.logits else predict(runners[name])

    reference = logits_of("pytorch")
    parity: dict[str, Any] = {"examples": examples, "source": source, "max_seq_len": seq_len,
                              "tolerance": PARITY_TOLERANCE}
    for precision in files:
        logits = logits_of(f"onnx_{precision}")
        parity[f"max_abs_logit_diff_{precision}"] = float(np.abs(logits - reference).max())
        if reference.shape[-1] > 1:
            agree = (logits.argmax(-1) == reference.argmax(-1)).mean()
            parity[f"prediction_agreement_{precision}"] = float(agree)
    parity["fp32_within_tolerance"] = parity["max_abs_logit_diff_fp32"] <= PARITY_TOLERANCE
    return parity, {name: known.metrics for name, known in scored.items()} if evaluator else {}


# --------------------------------------------------------------------------- export


def export_classifier(model: nn.Module, encoder, output_dir: str | os.PathLike, quantize: str | None = None,
                      task=None, max_seq_len: int | None = None, batch_size: int = 64,
                      source: str | None = None, overwrite: bool = True, graph: str | None = None,
                      int8_method: str = "auto", prune_vocab: bool = False, prune_vocab_corpus: str | None = None,
                      int8_target: str = "any", int8_time_left: Callable[[], float] | None = None,
                      command: str | list[str] | None = None, known: dict[str, Scored] | None = None) -> dict:
    """Export ``model`` with ``encoder`` (what its family encodes text with: an HF tokenizer, a
    word-level student's vocabulary) and its config into ``output_dir``.

    ``quantize="int8"`` adds ``model.int8.onnx``; ``task`` (a :class:`~kdbert.data.load.TaskOptions`)
    checks parity and metrics on its dev rows; ``max_seq_len`` is the length rows are cut to
    (default: the task's, else 128, at most the model's limit); ``graph`` is the kind of graph
    (:data:`~kdbert.deploy.graphs.GRAPHS`; default: the family's); ``int8_method`` how the int8
    graph is made (:data:`~kdbert.deploy.int8_choice.INT8_CHOICES`; ``auto``: the fastest within
    0.5 points of fp32 on the task's held-out rows, else dev, :mod:`kdbert.deploy.int8_choice`);
    ``int8_target`` the CPUs it must be exact on (:data:`~kdbert.deploy.int8_kernels.INT8_TARGETS`);
    ``int8_time_left()`` the seconds ``auto`` may spend before it makes no more static methods;
    ``prune_vocab`` exports the model
    with its embedding cut to the tokens of the task (and ``prune_vocab_corpus``), read through an
    id remap (:mod:`kdbert.deploy.vocabulary`), checked against the unpruned model. The folder is
    written atomically, with its model card (``README.md``, :mod:`kdbert.deploy.model_card`;
    ``command``: the command line that made it, for the card). ``known``: runners already scored on
    the task's rows elsewhere (name -> :class:`~kdbert.core.evaluate.Scored`; ``pytorch``: ``model``
    itself, as ``kdbert compress`` scored its teacher), read instead of scored again.
    Returns the report.
    """
    if quantize not in (None, "int8"):
        raise KdbertError(f"--quantize {quantize} is not supported; use --quantize int8 or leave it out")
    if int8_method not in INT8_CHOICES:
        raise KdbertError(f"--int8-method {int8_method} is unknown; choose one of {', '.join(INT8_CHOICES)}")
    family = family_of_model(model)
    spec = family.input_spec(model)
    data = None
    if task is not None:
        from kdbert.data.load import load_task

        data = load_task(task)
    exported, vocabulary = model, None
    if prune_vocab:
        if data is None:
            raise KdbertError("--prune-vocab keeps the tokens of a task's texts; pass --task")
        exported, vocabulary = prune_vocabulary(model, encoder, data, prune_vocab_corpus)
    if max_seq_len is None:  # the task's length (else 128), within the model's limit
        max_seq_len = data.spec.max_seq_len if data is not None else 128
        max_seq_len = min(max_seq_len, spec.max_positions or max_seq_len)
    if max_seq_len < 2:
        raise KdbertError(f"--max-seq-len {max_seq_len} is too short; pass at least 2 ([CLS] and [SEP])")
    if spec.max_positions is not None and max_seq_len > spec.max_positions:
        raise KdbertError(f"--max-seq-len {max_seq_len} is above the model's limit of {spec.max_positions} "
                          f"positions (max_position_embeddings); pass --max-seq-len <= {spec.max_positions}")
    out = Path(output_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise KdbertError(f"output dir {out} is not empty; choose another --output-dir or pass --overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        graph_report = export_graph(exported, tmp / FP32_FILE, spec, graph)
        files = {"fp32": tmp / FP32_FILE}
        evaluator = None if data is None else family.evaluator(data, encoder, max_seq_len, batch_size)
        int8_report, scored = None, dict(known or {})
        if quantize == "int8":
            int8_report, chosen = choose_int8(tmp / FP32_FILE, tmp / INT8_FILE, int8_method, family, encoder, spec, data,
                                              evaluator, max_seq_len, threads=torch.get_num_threads(),
                                              target=int8_target, time_left=int8_time_left)
            scored.update(chosen)
            files["int8"] = tmp / INT8_FILE
        encoder.save_pretrained(tmp)
        if getattr(model, "config", None) is not None and hasattr(model.config, "save_pretrained"):
            model.config.save_pretrained(tmp)
        parity, metrics = _parity(model, spec, encoder, files, evaluator, data and data.spec.name, max_seq_len,
                                  batch_size, scored)
        params = count_parameters(exported)
        limit = spec.max_positions or max(FLOP_LENGTHS)
        flops = {str(length): count_flops(exported, length) for length in FLOP_LENGTHS if length <= limit}
        import onnxruntime

        report = {
            "source": source, "family": type(model).__name__, "inputs": list(spec.names), "graph": graph_report,
            "max_positions": spec.max_positions, "vocab_size": spec.vocab_size,
            "files": {p: {"file": f.name, "size_mb": f.stat().st_size / 1e6} for p, f in files.items()},
            "quantization": int8_report, "vocabulary": vocabulary,
            "parity": parity, "dev_metrics": metrics,
            "params_total": params["total"], "params_non_embedding": params["non_embedding"],
            "flops_per_example": flops, "threads": torch.get_num_threads(),
            "versions": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__},
        }
        write_json(tmp / REPORT_FILE, report)
        write_export_card(tmp, report, data, task.held_out_fraction if task is not None else 0.0, command)
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def export_model(model_dir: str | os.PathLike, output_dir: str | os.PathLike | None = None,
                 quantize: str | None = None, task=None, max_seq_len: int | None = None,
                 batch_size: int = 64, overwrite: bool = True, graph: str | None = None,
                 int8_method: str = "auto", prune_vocab: bool = False, prune_vocab_corpus: str | None = None,
                 int8_target: str = "any", int8_time_left: Callable[[], float] | None = None,
                 command: str | list[str] | None = None, known: dict[str, Scored] | None = None) -> dict:
    """Export the trained classifier saved in ``model_dir``, loaded by its family (default output:
    ``model_dir/onnx``; options as :func:`export_classifier`'s)."""
    folder = Path(model_dir).expanduser()
    if is_onnx_model(folder):
        raise KdbertError(f"{folder} is already an ONNX export; pass the PyTorch model folder it came from")
    if not folder.is_dir():
        raise KdbertError(f"model folder {folder} does not exist; pass a folder saved by kdbert "
                          "(finetune, distill, quickstart)")
    if not (folder / "config.json").is_file():
        raise KdbertError(f"{folder} is not a model folder (no config.json); pass a folder saved by kdbert "
                          "(finetune, distill, quickstart), e.g. runs/quickstart/teacher")
    model, encoder = family_of_folder(folder).load(folder)
    return export_classifier(model, encoder, output_dir or folder / "onnx", quantize=quantize, task=task,
                             max_seq_len=max_seq_len, batch_size=batch_size, source=str(folder), overwrite=overwrite,
                             graph=graph, int8_method=int8_method, prune_vocab=prune_vocab,
                             prune_vocab_corpus=prune_vocab_corpus, int8_target=int8_target,
                             int8_time_left=int8_time_left, command=command, known=known)
