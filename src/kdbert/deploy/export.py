"""Export a fine-tuned classifier (teacher or student) to ONNX, optionally int8, and check it.

``kdbert export --model DIR --format onnx [--quantize int8]`` writes, into ``DIR/onnx`` by default::

    model.onnx            fp32 graph, inputs (batch, sequence) int64, output logits (batch, C)
    model.int8.onnx       with --quantize int8: dynamic quantisation (ORT ``quantize_dynamic``):
                          int8 per-channel weights of every MatMul/Gemm and of the embeddings,
                          activations quantised per call
    config.json, tokenizer files
    export_report.json    parity and size (below)

Parity (``export_report.json["parity"]``) on the task's dev rows (``--task``) or, without one,
on 64 synthetic rows of random ids and lengths with padding::

    max_abs_logit_diff_fp32 = max_{n,c} |logits_ort_fp32[n, c] - logits_pytorch[n, c]|

(checked against ``tolerance`` = 1e-4), the same for int8, and with ``--task`` the dev metrics of
PyTorch, ORT fp32 and ORT int8.

Families: how a model class is called. :func:`input_spec` looks the model's class (or a base
class) up in :data:`FAMILIES`; each entry returns an :class:`InputSpec` (input names, position
limit, vocabulary). HF BERT, DistilBERT and MobileBERT classifiers are registered, and the
distilled BiLSTM (:mod:`kdbert.families.bilstm.model`): its export takes word ids from ``vocab.txt``
(saved beside the graph instead of a tokenizer) and, for pairs, a second sentence
(``input_ids_b``, ``attention_mask_b``) with its own length axis. Another ``nn.Module``
registers its own with :func:`register_family` and is exported with :func:`export_classifier`.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from kdbert.errors import KdbertError
from kdbert.core.atomic_io import replace_dir, write_json
from kdbert.deploy.onnx_runtime import FP32_FILE, INT8_FILE, ONNX_INPUTS, REPORT_FILE, OnnxClassifier, is_onnx_model

PARITY_TOLERANCE = 1e-4
FLOP_LENGTHS = (16, 32, 64, 128, 256, 512)  # sequence lengths whose FLOPs the report records
SYNTHETIC_ROWS = 64

__all__ = ["InputSpec", "FAMILIES", "register_family", "input_spec", "export_onnx", "quantize_int8",
           "export_classifier", "export_model"]


@dataclass(frozen=True)
class InputSpec:
    """What a classifier takes: int64 tensors of shape (batch, sequence) named ``names``.

    ``names`` is a subset of ``input_ids``, ``attention_mask``, ``token_type_ids`` (in that
    order), or a word-level student's inputs (:data:`kdbert.families.bilstm.model.PAIR_INPUTS`), where
    names ending in ``_b`` (the second sentence) have a length axis of their own;
    ``max_positions`` is the longest sequence the model accepts (``None``: no limit);
    ``vocab_size`` bounds the example ids. ``legacy_exporter``: export with the TorchScript
    exporter (``dynamo=False``): torch 2.13's dynamo exporter fixes the lengths of a siamese
    BiLSTM's two inputs to the example's.
    """

    names: tuple[str, ...]
    max_positions: int | None
    vocab_size: int
    legacy_exporter: bool = False

    def length_axis(self, name: str) -> str:
        """The name of input ``name``'s sequence axis: ``sequence``, or ``sequence_b`` for a pair's second text."""
        return "sequence_b" if name.endswith("_b") else "sequence"


def hf_input_spec(model: nn.Module) -> InputSpec:
    """HF ``*ForSequenceClassification``: the inputs its ``forward`` names, its position limit."""
    accepted = inspect.signature(model.forward).parameters
    config = model.config
    return InputSpec(tuple(n for n in ONNX_INPUTS if n in accepted),
                     getattr(config, "max_position_embeddings", None), config.vocab_size)


def bilstm_input_spec(model: nn.Module) -> InputSpec:
    """:class:`~kdbert.families.bilstm.model.BiLSTMStudent`: word ids and masks (two of each for pairs), any length."""
    return InputSpec(model.config.input_names, None, model.config.vocab_size, legacy_exporter=True)


FAMILIES: dict[str, Callable[[nn.Module], InputSpec]] = {
    "BertForSequenceClassification": hf_input_spec,
    "DistilBertForSequenceClassification": hf_input_spec,
    "MobileBertForSequenceClassification": hf_input_spec,
    "BiLSTMStudent": bilstm_input_spec,
}


def register_family(class_name: str, spec: Callable[[nn.Module], InputSpec]) -> None:
    """Make models of ``class_name`` (or its subclasses) exportable; ``spec(model)`` describes
    their inputs. The model's ``forward`` takes those inputs as keywords and returns logits
    (B, C) or an object with ``.logits``."""
    FAMILIES[class_name] = spec


def input_spec(model: nn.Module) -> InputSpec:
    """The :class:`InputSpec` of ``model``'s family (its class or nearest registered base class)."""
    for cls in type(model).__mro__:
        if cls.__name__ in FAMILIES:
            return FAMILIES[cls.__name__](model)
    raise KdbertError(f"kdbert cannot export a {type(model).__name__}: no input spec for that class; "
                      f"exportable: {', '.join(sorted(FAMILIES))} (kdbert.deploy.export.register_family adds one)")


class _Logits(nn.Module):
    """``forward(*inputs) -> logits``: the exported graph's signature, in ``names`` order."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        output = self.model(**dict(zip(self.names, inputs)))
        return output.logits if hasattr(output, "logits") else output


def _example_inputs(spec: InputSpec, batch_size: int = 2, seq_len: int = 11) -> tuple[torch.Tensor, ...]:
    """Example (batch_size, seq_len) inputs (a pair's second text: seq_len - 1 long); batch >= 2
    so the exporter keeps the batch axis dynamic (a size-1 dimension is specialised)."""
    seq_len = min(seq_len, spec.max_positions or seq_len)
    generator = torch.Generator().manual_seed(0)
    values = {}
    for length, suffix in ((seq_len, ""), (max(2, seq_len - 1), "_b")):
        values[f"input_ids{suffix}"] = torch.randint(0, spec.vocab_size, (batch_size, length), generator=generator)
        values[f"attention_mask{suffix}"] = torch.ones(batch_size, length, dtype=torch.long)
        values[f"token_type_ids{suffix}"] = torch.zeros(batch_size, length, dtype=torch.long)
    return tuple(values[name] for name in spec.names)


def _unsupported_operators(message: str) -> list[str]:
    """ATen operators (``aten.foo``, from ``aten.foo.default`` or ``aten::foo``) named in an exporter error."""
    return sorted({f"aten.{name}" for name in re.findall(r"aten(?:\.|::)([A-Za-z_0-9]+)", message)})


def _summary(message: str, err: Exception) -> str:
    """The one line of an exporter error that says what failed (its 'Exception summary')."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in message.splitlines()]
    lines = [line for line in lines if line]
    if "## Exception summary" in lines:
        following = lines[lines.index("## Exception summary") + 1:]
        if following:
            return following[0]
    return lines[0] if lines else type(err).__name__


def export_onnx(model: nn.Module, path: str | os.PathLike, spec: InputSpec | None = None) -> InputSpec:
    """Write ``model`` (eval mode) to ``path`` as ONNX with dynamic batch and sequence axes.

    Uses the dynamo exporter (``torch.onnx.export(..., dynamo=True)``), or the TorchScript one
    for a family that asks (:attr:`InputSpec.legacy_exporter`); inputs are the family's
    :class:`InputSpec` names, the output is ``logits``. An operator the exporter cannot
    translate is named in the error.
    """
    spec = spec or input_spec(model)
    if spec.legacy_exporter:
        options = {"dynamo": False, "dynamic_axes": {name: {0: "batch", 1: spec.length_axis(name)}
                                                     for name in spec.names}}
    else:
        batch = torch.export.Dim("batch", min=1, max=4096)
        lengths = {axis: torch.export.Dim(axis, min=2, max=spec.max_positions or 100_000)
                   for axis in {spec.length_axis(name) for name in spec.names}}
        shapes = (tuple({0: batch, 1: lengths[spec.length_axis(name)]} for name in spec.names),)  # the *inputs
        options = {"dynamo": True, "dynamic_shapes": shapes, "optimize": True}
    was_training = model.training
    model.eval()
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)  # the exporter logs skipped torchvision operators at WARNING
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # exporter deprecation and axis-naming notes
            program = torch.onnx.export(_Logits(model, spec.names).eval(), _example_inputs(spec),
                                        str(path) if spec.legacy_exporter else None,
                                        input_names=list(spec.names), output_names=["logits"], verbose=False,
                                        **options)
    except Exception as err:  # the exporter raises many types; all mean "cannot export this model"
        message = str(err)
        operators = _unsupported_operators(message)
        cause = (f"unsupported operator(s) {', '.join(operators)}" if operators else _summary(message, err))
        raise KdbertError(f"cannot export {type(model).__name__} to ONNX: {cause}") from None
    finally:
        model.train(was_training)
        onnx_logger.setLevel(level)
    if program is not None:  # the dynamo exporter returns the program; the TorchScript one wrote the file
        program.save(str(path))
    return spec


def _unshare_lstm_weights(graph) -> int:
    """Give every LSTM node its own copy of each weight initializer it shares with another LSTM
    node (the siamese BiLSTM runs one encoder on both sentences: the TorchScript exporter feeds
    the second call the first's initializers through Identity nodes); returns the copies made.

    ORT's ``quantize_dynamic`` replaces an LSTM's weights by a quantised, reshaped initializer;
    a second LSTM reading the same one then gets the wrong shape (ORT fails at run time:
    "Input W must have shape {1, 4H, E}")."""
    from onnx import numpy_helper

    initializers = {tensor.name: tensor for tensor in graph.initializer}
    aliases = {node.output[0]: node.input[0] for node in graph.node
               if node.op_type == "Identity" and node.input[0] in initializers}
    seen: set[str] = set()
    copies = 0
    for node in graph.node:
        if node.op_type != "LSTM":
            continue
        for position, name in enumerate(node.input):
            source = aliases.get(name, name)
            if source not in initializers:
                continue
            if source in seen:
                copy = numpy_helper.from_array(numpy_helper.to_array(initializers[source]), f"{source}__{node.name}")
                graph.initializer.append(copy)
                node.input[position] = copy.name
                copies += 1
            seen.add(source)
    consumed = {name for node in graph.node for name in node.input} | {output.name for output in graph.output}
    unused = [node for node in graph.node if node.op_type == "Identity" and node.output[0] in aliases
              and node.output[0] not in consumed]
    for node in unused:
        graph.node.remove(node)
    return copies


def quantize_int8(fp32_path: str | os.PathLike, int8_path: str | os.PathLike) -> Path:
    """Dynamic int8 quantisation with ORT's ``quantize_dynamic``: int8 weights with one scale per
    output channel, uint8 activations quantised per call. Refuses a graph in which ORT finds no
    weight matrix to quantise.

    Per-channel scales: on the SST-2 3-layer KD student, int8 dev accuracy 83.14 against 82.45
    with one scale per matrix (fp32: 83.37).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = onnx.load(str(fp32_path))
    fp32_path = Path(fp32_path)
    if _unshare_lstm_weights(source.graph):  # quantise a copy in which every LSTM has its own weights
        fp32_path = Path(int8_path).with_name(Path(int8_path).name + ".unshared.onnx")
        onnx.save(source, str(fp32_path))
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a pre-processing hint at WARNING
    try:
        quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True)
    except Exception as err:  # ORT raises plain exceptions for graphs it cannot handle
        cause = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise KdbertError(f"ONNX Runtime cannot quantise {fp32_path} to int8: {cause}; deploy the fp32 model") from None
    finally:
        root.setLevel(level)
        if fp32_path.name.endswith(".unshared.onnx"):
            fp32_path.unlink(missing_ok=True)
    graph = onnx.load(str(int8_path), load_external_data=False).graph
    if not any(node.op_type in ("MatMulInteger", "DynamicQuantizeMatMul", "QLinearMatMul", "ConvInteger")
               for node in graph.node):
        Path(int8_path).unlink()
        operators = sorted({node.op_type for node in graph.node})
        raise KdbertError(f"ONNX Runtime found no MatMul/Gemm weights to quantise to int8 in {fp32_path} "
                          f"(operators: {', '.join(operators)}); deploy the fp32 model.onnx instead")
    return Path(int8_path)


# --------------------------------------------------------------------------- parity


def _synthetic_dataset(spec: InputSpec, seq_len: int, rows: int = SYNTHETIC_ROWS, pad_id: int = 0):
    """Rows of random ids (vocabulary ids >= 1) with random lengths 2..seq_len, for parity
    without a task; returns an EncodedDataset and its PaddingCollator."""
    from kdbert.data.batching import EncodedDataset, PaddingCollator

    generator = torch.Generator().manual_seed(0)
    features = []
    for _ in range(rows):
        length = int(torch.randint(2, seq_len + 1, (1,), generator=generator))
        ids = torch.randint(1, spec.vocab_size, (length,), generator=generator).tolist()
        features.append({"input_ids": ids, "attention_mask": [1] * length, "token_type_ids": [0] * length})
    return EncodedDataset(features), PaddingCollator(pad_id)


class _TorchClassifier:
    """The PyTorch model behind the same ``predict(dataset, collator, batch_size)`` as
    :class:`~kdbert.deploy.onnx_runtime.OnnxClassifier`, feeding the family's inputs: the reference of
    the parity check, for any registered family."""

    def __init__(self, model: nn.Module, spec: InputSpec):
        self.logits = _Logits(model, spec.names).eval()
        self.names = spec.names

    @torch.no_grad()
    def predict(self, dataset, collator, batch_size: int = 64) -> np.ndarray:
        from kdbert.data.batching import sequential_batches

        outputs = [None] * len(dataset)
        for indices in sequential_batches(dataset, batch_size):
            batch = collator([dataset[i] for i in indices])
            inputs = [batch[name] if name in batch else torch.zeros_like(batch["input_ids"]) for name in self.names]
            logits = self.logits(*inputs).float().numpy()
            for row, index in enumerate(indices):
                outputs[index] = logits[row]
        return np.stack(outputs)


def _synthetic_word_dataset(spec: InputSpec, seq_len: int, rows: int = SYNTHETIC_ROWS):
    """Word-level rows (a pair's two texts drawn apart) of random word ids >= 2 (neither padding
    nor UNK) and lengths 1..seq_len, for :func:`kdbert.families.bilstm.evaluate.predict_words`."""
    from kdbert.families.bilstm.batching import DistillationDataset

    generator = torch.Generator().manual_seed(0)
    features = []
    for _ in range(rows):
        texts = {}
        for name in spec.names:
            if name.startswith("input_ids"):
                length = int(torch.randint(1, seq_len + 1, (1,), generator=generator))
                texts[name] = torch.randint(2, max(3, spec.vocab_size), (length,), generator=generator).tolist()
        features.append({"student": texts})
    return DistillationDataset(features)


def _token_rows(runners: dict, tokenizer, spec: InputSpec, task, seq_len: int, batch_size: int):
    """Dev metrics of every runner and a ``predict(runner) -> logits`` over the parity rows:
    the task's first dev split encoded with the tokenizer, else synthetic token rows."""
    from kdbert.core.evaluate import TaskEvaluator

    metrics: dict[str, dict] = {}
    if task is not None:
        from kdbert.data.load import load_task

        data = load_task(task)
        evaluator = TaskEvaluator(data, tokenizer, seq_len, batch_size)
        metrics = {name: evaluator(runner) for name, runner in runners.items()}
        split = next(iter(evaluator.splits))
        dataset, collator = evaluator.splits[split], evaluator.collator
        source = f"dev ({data.spec.name}, split {split})"
    else:
        dataset, collator = _synthetic_dataset(spec, seq_len, pad_id=getattr(tokenizer, "pad_token_id", 0) or 0)
        source = "synthetic (random ids and lengths)"
    return metrics, (lambda runner: runner.predict(dataset, collator, batch_size)), len(dataset), source


def _word_rows(runners: dict, vocab, spec: InputSpec, task, seq_len: int, batch_size: int):
    """:func:`_token_rows` for a word-level student: rows encoded with its vocabulary (whole
    texts: it has no length limit), else synthetic word rows of at most ``seq_len`` words."""
    from kdbert.families.bilstm.evaluate import WordTaskEvaluator, predict_words

    metrics: dict[str, dict] = {}
    if task is not None:
        from kdbert.data.load import load_task

        data = load_task(task)
        evaluator = WordTaskEvaluator(data, vocab, batch_size)
        metrics = {name: evaluator(runner) for name, runner in runners.items()}
        split = next(iter(evaluator.splits))
        dataset = evaluator.splits[split]
        source = f"dev ({data.spec.name}, split {split})"
    else:
        dataset = _synthetic_word_dataset(spec, seq_len)
        source = "synthetic (random word ids and lengths)"
    return metrics, (lambda runner: predict_words(runner, dataset, batch_size)), len(dataset), source


def _parity(model: nn.Module, spec: InputSpec, tokenizer, files: dict[str, Path], task, seq_len: int,
            batch_size: int) -> tuple[dict, dict]:
    """Logit differences and (with a task) dev metrics of PyTorch and every exported file.
    ``tokenizer`` is an HF tokenizer, or a :class:`~kdbert.families.bilstm.words.Vocab` for a word-level student."""
    from kdbert.families.bilstm.words import Vocab

    word_level = isinstance(tokenizer, Vocab)
    runners = {"pytorch": model if word_level else _TorchClassifier(model, spec)}
    runners.update({f"onnx_{precision}": OnnxClassifier(file, load_tokenizer=False) for precision, file in files.items()})
    rows = _word_rows if word_level else _token_rows
    metrics, predict, examples, source = rows(runners, tokenizer, spec, task, seq_len, batch_size)
    reference = predict(runners["pytorch"])
    parity: dict[str, Any] = {"examples": examples, "source": source, "max_seq_len": seq_len,
                              "tolerance": PARITY_TOLERANCE}
    for precision in files:
        logits = predict(runners[f"onnx_{precision}"])
        parity[f"max_abs_logit_diff_{precision}"] = float(np.abs(logits - reference).max())
        if reference.shape[-1] > 1:
            agree = (logits.argmax(-1) == reference.argmax(-1)).mean()
            parity[f"prediction_agreement_{precision}"] = float(agree)
    parity["fp32_within_tolerance"] = parity["max_abs_logit_diff_fp32"] <= PARITY_TOLERANCE
    return parity, metrics


# --------------------------------------------------------------------------- export


def export_classifier(model: nn.Module, tokenizer, output_dir: str | os.PathLike, quantize: str | None = None,
                      task=None, max_seq_len: int | None = None, batch_size: int = 64,
                      source: str | None = None, overwrite: bool = True) -> dict:
    """Export ``model`` with ``tokenizer`` (an HF tokenizer, or a word-level student's
    :class:`~kdbert.families.bilstm.words.Vocab`) and its config into ``output_dir``.

    ``quantize="int8"`` adds ``model.int8.onnx``; ``task`` (a :class:`~kdbert.data.load.TaskOptions`)
    checks parity and metrics on its dev rows; ``max_seq_len`` is the length rows are cut to
    (default: the task's, else 128, at most the model's limit). The folder is written atomically.
    Returns the report.
    """
    from kdbert.deploy.bench import count_flops, count_parameters

    if quantize not in (None, "int8"):
        raise KdbertError(f"--quantize {quantize} is not supported; use --quantize int8 or leave it out")
    spec = input_spec(model)
    if max_seq_len is None:  # the task's length (else 128), within the model's limit
        max_seq_len = 128
        if task is not None:
            from kdbert.data.load import load_task

            max_seq_len = load_task(task).spec.max_seq_len
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
        export_onnx(model, tmp / FP32_FILE, spec)
        files = {"fp32": tmp / FP32_FILE}
        if quantize == "int8":
            files["int8"] = quantize_int8(tmp / FP32_FILE, tmp / INT8_FILE)
        tokenizer.save_pretrained(tmp)
        if getattr(model, "config", None) is not None and hasattr(model.config, "save_pretrained"):
            model.config.save_pretrained(tmp)
        parity, metrics = _parity(model, spec, tokenizer, files, task, max_seq_len, batch_size)
        params = count_parameters(model)
        limit = spec.max_positions or max(FLOP_LENGTHS)
        flops = {str(length): count_flops(model, length, inputs=dict(zip(spec.names, _example_inputs(spec, 1, length))))
                 for length in FLOP_LENGTHS if length <= limit}
        import onnxruntime

        report = {
            "source": source, "family": type(model).__name__, "inputs": list(spec.names),
            "max_positions": spec.max_positions, "vocab_size": spec.vocab_size,
            "files": {p: {"file": f.name, "size_mb": f.stat().st_size / 1e6} for p, f in files.items()},
            "quantization": "onnxruntime quantize_dynamic, QInt8 per-channel weights" if quantize else None,
            "parity": parity, "dev_metrics": metrics,
            "params_total": params["total"], "params_non_embedding": params["non_embedding"],
            "flops_per_example": flops,
            "versions": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__},
        }
        write_json(tmp / REPORT_FILE, report)
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def export_model(model_dir: str | os.PathLike, output_dir: str | os.PathLike | None = None,
                 quantize: str | None = None, task=None, max_seq_len: int | None = None,
                 batch_size: int = 64, overwrite: bool = True) -> dict:
    """Export the fine-tuned HF classifier, or the BiLSTM student, saved in ``model_dir``
    (default output: ``model_dir/onnx``)."""
    from transformers import AutoConfig

    from kdbert.families.bilstm.model import is_bilstm_folder, load_bilstm
    from kdbert.core.loading import check_classifier_head, load_sequence_classifier, load_tokenizer

    folder = Path(model_dir).expanduser()
    if is_onnx_model(folder):
        raise KdbertError(f"{folder} is already an ONNX export; pass the PyTorch model folder it came from")
    if not folder.is_dir():
        raise KdbertError(f"model folder {folder} does not exist; pass a folder saved by kdbert "
                          "(finetune, distill, quickstart)")
    if not (folder / "config.json").is_file():
        raise KdbertError(f"{folder} is not a model folder (no config.json); pass a folder saved by kdbert "
                          "(finetune, distill, quickstart), e.g. runs/quickstart/teacher")
    options = {"quantize": quantize, "task": task, "max_seq_len": max_seq_len, "batch_size": batch_size,
               "source": str(folder), "overwrite": overwrite}
    if is_bilstm_folder(folder):  # a word-level student: its vocabulary goes where a tokenizer would
        model, vocab = load_bilstm(folder)
        return export_classifier(model, vocab, output_dir or folder / "onnx", **options)
    try:
        config = AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError) as err:
        raise KdbertError(f"{folder}/config.json is not a model config: {str(err).splitlines()[0]}") from None
    check_classifier_head(str(folder), config, config.num_labels)
    model = load_sequence_classifier(str(folder), config.num_labels, new_head_ok=False)
    tokenizer = load_tokenizer(str(folder))
    return export_classifier(model, tokenizer, output_dir or folder / "onnx", **options)
