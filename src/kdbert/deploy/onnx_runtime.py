"""Run an exported classifier (``kdbert export``) with ONNX Runtime: predict, evaluate, bench.

An export folder holds ``model.onnx`` (fp32), optionally ``model.int8.onnx`` (dynamic int8),
the encoder its family reads (a tokenizer; a word-level student's ``vocab.txt``) and ``config.json`` beside them,
and ``export_report.json``. ``--model`` of
``kdbert evaluate`` / ``kdbert bench`` may name the folder (the fp32 model) or one ``.onnx``
file in it.

Efficiency (the ``efficiency`` column of ``kdbert bench``)::

    achieved = flops_per_example * batch / latency            (FLOP/s at batch 1)
    efficiency = achieved / matmul_rate

where ``matmul_rate`` is this machine's rate on one 1024 x 1024 x 1024 matrix product in the
same runtime, precision and thread count, measured at bench time (:func:`matmul_rate`;
PyTorch rows use :func:`kdbert.deploy.bench.torch_matmul_rate`).
"""

from __future__ import annotations

import json
import os
import platform
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from kdbert.deploy.openvino_runtime import OpenVinoSession, check_runtime
from kdbert.deploy.quantize import quantize_int8
from kdbert.deploy.task_rows import model_feeds, time_task_rows
from kdbert.deploy.timing import time_calls
from kdbert.errors import KdbertError
from kdbert.families.registry import InputSpec, example_inputs, family_of_folder

FP32_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
REPORT_FILE = "export_report.json"
ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
PAIR_INPUTS = ("input_ids_b", "attention_mask_b")  # a siamese word-level student's second sentence

__all__ = ["OnnxClassifier", "is_onnx_model", "onnx_file", "ort_session", "matmul_rate", "bench_onnx", "runtime_parity"]


def is_onnx_model(path: str | os.PathLike) -> bool:
    """True for a ``.onnx`` file or a folder holding ``model.onnx``."""
    path = Path(path).expanduser()
    return path.suffix == ".onnx" or (path.is_dir() and (path / FP32_FILE).is_file())


def onnx_file(path: str | os.PathLike) -> Path:
    """The ``.onnx`` file ``path`` names: itself, or ``model.onnx`` in a folder."""
    path = Path(path).expanduser()
    file = path / FP32_FILE if path.is_dir() else path
    if not file.is_file():
        raise KdbertError(f"ONNX model {file} does not exist; export one with `kdbert export --model DIR`")
    return file


def ort_session(file: Path, threads: int | None = None):
    """An ONNX Runtime CPU session of ``file`` (``threads``: None for ORT's default), errors only logged."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or 0  # 0: ORT's default (one per physical core)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only
    try:
        return ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # ORT raises its own exception types for unreadable graphs
        raise KdbertError(f"ONNX Runtime cannot load {file}: {str(err).strip().splitlines()[0]}") from None


def _precision(file: Path) -> str:
    return "int8" if ".int8." in file.name else "fp32"


class OnnxClassifier:
    """An exported sequence classifier in an ONNX Runtime session (``runtime``: or in OpenVINO,
    :mod:`kdbert.deploy.openvino_runtime`).

    ``classifier.predict(dataset, collator, batch_size)`` returns logits (N, C) like
    :func:`kdbert.core.evaluate.predict`, so :class:`kdbert.core.evaluate.TaskEvaluator` scores it as it
    scores a PyTorch model. ``classifier(batch)`` runs one batch of int64 arrays (B, L).
    ``family`` is the student family of the export (from its ``config.json``), ``encoder`` what
    turns text into its inputs (a tokenizer, or a word-level student's vocabulary), loaded from
    the folder unless ``load_encoder`` is False; score it with ``family.evaluator``.
    """

    def __init__(self, path: str | os.PathLike, threads: int | None = None, load_encoder: bool = True,
                 runtime: str = "onnxruntime"):
        self.file = onnx_file(path)
        self.folder = self.file.parent
        self.precision = _precision(self.file)
        self.runtime = runtime
        check_runtime(runtime)
        if runtime == "onnxruntime":
            self.session = ort_session(self.file, threads)
            self.input_names = [i.name for i in self.session.get_inputs()]
            labels = self.session.get_outputs()[0].shape[-1]
            self.num_labels = labels if isinstance(labels, int) else None
        else:
            self.session = OpenVinoSession(self.file, threads, bf16=runtime == "openvino-bf16")
            self.input_names, self.num_labels = self.session.input_names, self.session.num_labels
        unknown = [n for n in self.input_names if n not in ONNX_INPUTS + PAIR_INPUTS]
        if unknown:
            raise KdbertError(f"{self.file} takes inputs {unknown} kdbert does not make; "
                              f"export it with `kdbert export` (inputs {', '.join(ONNX_INPUTS)})")
        self.family = family_of_folder(self.folder)
        self.pair = "input_ids_b" in self.input_names
        report_path = self.folder / REPORT_FILE
        self.report = json.loads(report_path.read_text()) if report_path.is_file() else {}
        self.max_seq_len = self.report.get("max_positions") or _config_value(self.folder, "max_position_embeddings")
        self.encoder = self.family.load_encoder(self.folder) if load_encoder else None

    def input_spec(self) -> InputSpec:
        """The graph's inputs, position limit and vocabulary size (recorded at export, else config.json)."""
        vocab = self.report.get("vocab_size") or _config_value(self.folder, "vocab_size") or 30522
        return InputSpec(tuple(self.input_names), self.max_seq_len, vocab)

    def check_seq_len(self, seq_len: int, option: str = "--max-seq-len") -> None:
        """Refuse a sequence length above the model's position limit."""
        if self.max_seq_len is not None and seq_len > self.max_seq_len:
            raise KdbertError(f"{option} {seq_len} is above the limit of {self.file} ({self.max_seq_len} "
                              f"positions); pass {option} <= {self.max_seq_len}")

    def __call__(self, batch: dict[str, Any]) -> np.ndarray:
        """Logits (B, C) of one batch; ``batch`` maps input names to (B, L) integer arrays/tensors."""
        feed = {}
        for name in self.input_names:
            value = batch.get(name)
            if value is None and name == "token_type_ids":
                value = np.zeros_like(np.asarray(batch["input_ids"]))
            feed[name] = np.asarray(value, dtype=np.int64)
        return self.session.run(None, feed)[0]

    def predict(self, dataset, collator, batch_size: int = 64) -> np.ndarray:
        """Logits (N, C) on an :class:`~kdbert.data.batching.EncodedDataset`, in its order (a QA
        export: (N, 2, n_max), :func:`~kdbert.data.batching.predict_rows`)."""
        from kdbert.data.batching import predict_rows

        return predict_rows(dataset, collator, batch_size,
                            lambda batch: self({k: v.numpy() for k, v in batch.items() if k in ONNX_INPUTS}))


def _config_value(folder: Path, key: str):
    config = folder / "config.json"
    return json.loads(config.read_text()).get(key) if config.is_file() else None


# --------------------------------------------------------------------------- matmul rate


def _matmul_graph(n: int):
    """An ONNX graph ``Y = X @ W`` with X (n, n) an input and W (n, n) a constant."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"])], "matmul",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(weight, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


@lru_cache(maxsize=None)
def matmul_rate(precision: str = "fp32", threads: int | None = None, n: int = 1024,
                runtime: str = "onnxruntime") -> float:
    """FLOP/s of ``runtime`` on one ``n x n @ n x n`` product (``2 n^3`` FLOPs): median of 10 runs.

    ``precision="int8"`` times the graph as an int8 export runs each weight matrix: in ONNX Runtime
    after ``quantize_dynamic`` (DynamicQuantizeLinear + MatMulInteger), in OpenVINO after static
    QDQ quantisation (its int8 kernels); ``openvino-bf16`` computes in bf16 where the CPU can.
    """
    import tempfile

    import onnx

    x = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "matmul.onnx"
        onnx.save(_matmul_graph(n), file)
        if precision == "int8":
            method, calibration = ("dynamic", None) if runtime == "onnxruntime" else ("static-minmax", [{"X": x}])
            file = quantize_int8(file, Path(tmp) / "matmul.int8.onnx", method, calibration)
        if runtime == "onnxruntime":
            session = ort_session(file, threads)
        else:
            session = OpenVinoSession(file, threads, bf16=runtime == "openvino-bf16")
        timing = time_calls(lambda: session.run(None, {"X": x}), warmup=2, runs=10)
    return 2 * n**3 / (timing["median_ms"] / 1000.0)


# --------------------------------------------------------------------------- bench


def _flops(classifier: OnnxClassifier, seq_len: int) -> int | None:
    """FLOPs per example: recorded at export for common lengths, else counted by the family on a
    model rebuilt from ``config.json`` (random weights; FLOPs do not depend on them)."""
    recorded = classifier.report.get("flops_per_example", {}).get(str(seq_len))
    if recorded:
        return int(recorded)
    if not (classifier.folder / "config.json").is_file():
        return None
    return classifier.family.flops(classifier.family.from_config(classifier.folder), seq_len)


def _default_name(file: Path) -> str:
    """``folder/model.onnx``, or ``model_folder/onnx/model.onnx`` for an export in its default
    place (``kdbert export``'s ``DIR/onnx``), so that two exports' rows stay apart."""
    return "/".join(file.parts[-3:] if file.parent.name == "onnx" else file.parts[-2:])


def bench_onnx(path: str | os.PathLike, seq_len: int = 128, threads: int | None = None, runs: int = 30,
               warmup: int = 5, name: str | None = None, throughput_batch_size: int = 32, task=None,
               length_rows: int = 200, runtime: str = "onnxruntime") -> dict[str, Any]:
    """:func:`kdbert.deploy.bench.bench_model` for an exported model: the same keys, timed in ONNX Runtime.

    ``params_*`` come from ``export_report.json`` (the PyTorch model's counts), ``size_mb`` is
    the ``.onnx`` file, ``efficiency`` is against :func:`matmul_rate` at the model's precision;
    with ``task``, the latency over the task's rows at their own lengths. ``runtime``: ONNX Runtime,
    or OpenVINO (:data:`~kdbert.deploy.openvino_runtime.RUNTIMES`).
    """
    import onnxruntime
    import torch

    if seq_len < 2:
        raise KdbertError(f"seq_len {seq_len} is too short; pass seq_len >= 2 ([CLS] and [SEP])")
    threads = threads or torch.get_num_threads()
    classifier = OnnxClassifier(path, threads=threads, load_encoder=False, runtime=runtime)
    classifier.check_seq_len(seq_len, "--seq-len")
    spec = classifier.input_spec()
    one, many = ({name: value.numpy() for name, value in example_inputs(spec, seq_len, size).items()}
                 for size in (1, throughput_batch_size))
    latency = time_calls(lambda: classifier(one), warmup=warmup, runs=runs)
    batch = time_calls(lambda: classifier(many), warmup=min(warmup, 2), runs=max(1, runs // 3))
    flops = _flops(classifier, seq_len)
    rate = matmul_rate(classifier.precision, threads, runtime=runtime)
    real = {} if task is None else time_task_rows(classifier, classifier.family,
                                                  classifier.family.load_encoder(classifier.folder), spec, task,
                                                  length_rows)
    return {
        "name": name or _default_name(classifier.file),
        "runtime": f"{runtime} {classifier.precision}",
        "params_total": classifier.report.get("params_total"),
        "params_non_embedding": classifier.report.get("params_non_embedding"),
        "flops_per_example": flops,
        "latency_median_ms": latency["median_ms"],
        "latency_p90_ms": latency["p90_ms"],
        "throughput": throughput_batch_size / (batch["median_ms"] / 1000.0),
        "throughput_batch_size": throughput_batch_size,
        "size_mb": classifier.file.stat().st_size / 1e6,
        "matmul_gflops": rate / 1e9,
        "efficiency": flops / (latency["median_ms"] / 1000.0) / rate if flops else None,
        "seq_len": seq_len,
        "threads": threads,
        "onnxruntime": onnxruntime.__version__,
        "machine": f"{platform.processor() or platform.machine() or 'unknown'} ({os.cpu_count()} CPUs)",
        "cpu_count": os.cpu_count(),
        **real,
    }


def runtime_parity(path: str | os.PathLike, runtimes: list[str], threads: int | None = None, task=None,
                   seq_len: int = 128, rows: int = 200) -> dict[str, float]:
    """max |logits_r - logits_{runtimes[0]}| of the export at ``path`` in every other runtime r, over
    the task's dev rows at their own lengths (``task``), else one padded batch of synthetic ids."""
    classifiers = [OnnxClassifier(path, threads, load_encoder=task is not None, runtime=r) for r in runtimes]
    first = classifiers[0]
    spec = first.input_spec()
    if task is not None:
        from kdbert.data.load import load_task

        data = load_task(task)
        feeds = model_feeds(first.family, first.encoder, spec, data, rows)
    else:
        feeds = [{name: value.numpy() for name, value in example_inputs(spec, seq_len, 8).items()}]
    reference = [first(feed) for feed in feeds]
    return {other.runtime: max(float(np.abs(other(feed) - ref).max()) for feed, ref in zip(feeds, reference))
            for other in classifiers[1:]}
