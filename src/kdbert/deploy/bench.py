"""Size, FLOPs and speed of BERT-family models, for comparing a student with its teacher.

Counting conventions (H = hidden size, I = intermediate size, L = sequence length,
V / P / T = vocabulary / max positions / token types, N = layers, C = labels):

* **Parameters.** ``total`` counts every distinct parameter tensor once (tied weights once).
  ``non_embedding = total - (V + P + T) * H``: the word, position and token-type embedding
  matrices are left out, everything else (embedding LayerNorm included) stays in. For a
  BertForSequenceClassification::

      total = (V + P + T) * H + 2H                                # embeddings + LayerNorm
            + N * (4 * (H*H + H) + 2H + (H*I + I) + (I*H + H) + 2H) # Q,K,V,O, LN, FFN, LN
            + (H*H + H) + (H*C + C)                               # pooler, classifier

* **FLOPs** of one forward pass per example, as counted by
  :class:`torch.utils.flop_counter.FlopCounterMode` (a multiply-add is 2 FLOPs; only matrix
  products are counted, not softmax, GELU or LayerNorm). For a BERT encoder::

      per Linear      2 * in * out   per token
      per layer       L * (4 * 2*H*H + 2 * 2*H*I)   (Q,K,V,O and the two FFN matrices)
                    + 2 * 2*L*L*H                    (Q @ K^T and scores @ V, all heads)
      whole model     N * per_layer + 2*H*H + 2*H*C  (pooler and classifier see [CLS] only)

* **BiLSTM students** (:mod:`kdbert.families.bilstm.model`): FlopCounterMode does not count LSTMs, so
  their FLOPs are :func:`~kdbert.families.bilstm.model.bilstm_flops` (the same 2-per-multiply-add
  convention: gate projections per word and direction, ReLU and output layers); ``seq_len`` is
  then words per sentence (each sentence of a pair model), and the synthetic input is random
  word ids (two sentences for a pair model).

* **Latency** is the wall-clock time (``time.perf_counter``) of one forward pass of a batch,
  under ``torch.inference_mode`` in eval mode, with a fixed thread count; we report the median
  and the 90th percentile (nearest rank) over ``runs`` timed passes after ``warmup`` untimed
  ones. **Throughput** is ``batch_size / median latency`` in examples per second.

* **Size** is the model's weight files on disk (``*.safetensors`` / ``*.bin``; an exported model:
  its ``.onnx`` file), in MB (1e6 bytes).

* **Efficiency** is the share of this machine's matrix-multiply rate the model reaches at batch 1::

      efficiency = (flops_per_example / latency_median) / matmul_rate

  ``matmul_rate`` is measured at bench time in the same runtime, precision and thread count, on
  one 1024 x 1024 x 1024 product (:func:`torch_matmul_rate`; ONNX Runtime:
  :func:`kdbert.deploy.onnx_runtime.matmul_rate`).

Paths to an exported model (``kdbert export``: a folder with ``model.onnx`` or an ``.onnx``
file) are timed in ONNX Runtime (:func:`kdbert.deploy.onnx_runtime.bench_onnx`) and give the same keys.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kdbert.deploy.task_rows import time_task_rows
from kdbert.deploy.timing import time_calls, torch_matmul_rate
from kdbert.errors import KdbertError
from kdbert.families.registry import example_inputs, family_of_folder, family_of_model

__all__ = [
    "count_parameters",
    "count_flops",
    "measure_latency",
    "measure_throughput",
    "bench_model",
    "compare",
    "format_table",
]


# --------------------------------------------------------------------------- parameters


def _embedding_matrices(model: nn.Module) -> list[nn.Parameter]:
    """The word, position and token-type embedding parameters of ``model``."""
    modules: list[nn.Module] = []
    get_input_embeddings = getattr(model, "get_input_embeddings", None)
    if get_input_embeddings is not None:
        try:
            word = get_input_embeddings()
        except NotImplementedError:
            word = None
        if word is not None:
            modules.append(word)
    for name, module in model.named_modules():
        if name.endswith(("position_embeddings", "token_type_embeddings")):
            modules.append(module)
    params: dict[int, nn.Parameter] = {}
    for module in modules:
        for p in module.parameters():
            params[id(p)] = p
    return list(params.values())


def count_parameters(model: nn.Module) -> dict[str, int]:
    """Count parameters: ``{"total": ..., "non_embedding": ...}``.

    ``total`` counts each distinct tensor once (``model.parameters()`` already skips tied
    duplicates). ``non_embedding = total - numel(word, position and token-type embeddings)``;
    the word embeddings are ``model.get_input_embeddings()``, the others are submodules whose
    name ends in ``position_embeddings`` or ``token_type_embeddings``.
    """
    total = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for p in _embedding_matrices(model))
    return {"total": total, "non_embedding": total - embedding}


# --------------------------------------------------------------------------- inputs


def _model_device(model: nn.Module) -> torch.device:
    first = next(model.parameters(), None)
    return first.device if first is not None else torch.device("cpu")


class _EvalMode:
    """Put a model in eval mode for a block, then restore its previous mode."""

    def __init__(self, model: nn.Module):
        self.model = model

    def __enter__(self) -> nn.Module:
        self.was_training = self.model.training
        return self.model.eval()

    def __exit__(self, *exc: object) -> None:
        self.model.train(self.was_training)


# --------------------------------------------------------------------------- FLOPs


def count_flops(model: nn.Module, seq_len: int) -> int:
    """FLOPs of one forward pass of one example of ``seq_len`` tokens, as the model's family counts
    them: ``FlopCounterMode`` on the synthetic batch (for BERT ``N * (L * (8*H*H + 4*H*I) + 4*L*L*H)
    + 2*H*H + 2*H*C``, see module doc), or the family's own formula (the BiLSTM's)."""
    return family_of_model(model).flops(model, seq_len)


def synthetic_batch(model: nn.Module, seq_len: int, batch_size: int) -> dict[str, torch.Tensor]:
    """The bench's batch for ``model`` (:func:`kdbert.families.registry.example_inputs`), on its device."""
    device = _model_device(model)
    inputs = example_inputs(family_of_model(model).input_spec(model), seq_len, batch_size)
    return {name: value.to(device) for name, value in inputs.items()}


# --------------------------------------------------------------------------- speed


def measure_latency(model: nn.Module, seq_len: int, batch_size: int = 1, warmup: int = 5, runs: int = 30,
                    threads: int | None = None) -> dict[str, float]:
    """Time ``runs`` forward passes of one batch after ``warmup`` untimed ones.

    Returns ``median_ms``, ``p90_ms`` (nearest rank), ``mean_ms``, ``min_ms`` for the whole
    batch, plus ``batch_size``, ``runs`` and ``threads``. ``threads`` (default: the current
    ``torch.get_num_threads()``) is fixed with ``torch.set_num_threads`` and restored after.
    """
    if runs < 1 or warmup < 0:
        raise KdbertError(f"runs={runs}, warmup={warmup} are invalid; pass runs >= 1 and warmup >= 0")
    if threads is not None and threads < 1:
        raise KdbertError(f"threads {threads} must be positive; pass threads >= 1 or None")
    batch = synthetic_batch(model, seq_len, batch_size)
    cuda = _model_device(model).type == "cuda"
    previous_threads = torch.get_num_threads()
    threads = threads or previous_threads

    def forward() -> None:
        model(**batch)
        if cuda:
            torch.cuda.synchronize()

    try:
        torch.set_num_threads(threads)
        with _EvalMode(model), torch.inference_mode():
            timing = time_calls(forward, warmup=warmup, runs=runs)
    finally:
        torch.set_num_threads(previous_threads)
    return {**timing, "batch_size": batch_size, "threads": threads}


def measure_throughput(model: nn.Module, seq_len: int, batch_size: int = 32, warmup: int = 3, runs: int = 10,
                       threads: int | None = None) -> float:
    """Examples per second at ``batch_size``: ``batch_size / (median batch latency in s)``."""
    latency = measure_latency(model, seq_len, batch_size, warmup=warmup, runs=runs, threads=threads)
    return batch_size / (latency["median_ms"] / 1000.0)


# --------------------------------------------------------------------------- one model


def weights_size_mb(path: str) -> float | None:
    """MB (1e6 bytes) of the weight files (``*.safetensors``, ``*.bin``) in a model folder."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return None
    files = [f for pattern in ("*.safetensors", "*.bin") for f in folder.glob(pattern)]
    return sum(f.stat().st_size for f in files) / 1e6 if files else None


def _machine() -> str:
    return f"{platform.processor() or platform.machine() or 'unknown'} ({os.cpu_count()} CPUs)"


def bench_model(
    model_or_path: nn.Module | str | os.PathLike,
    seq_len: int = 128,
    threads: int | None = None,
    runs: int = 30,
    warmup: int = 5,
    name: str | None = None,
    throughput_batch_size: int = 32,
    task=None,
    length_rows: int = 200,
    runtime: str = "onnxruntime",
) -> dict[str, Any]:
    """Benchmark one model (an ``nn.Module`` or a path / hub id) and return a flat row.

    Keys: ``name``, ``runtime``, ``params_total``, ``params_non_embedding``, ``flops_per_example``,
    ``latency_median_ms`` and ``latency_p90_ms`` (batch 1), ``throughput`` (examples/s at
    ``throughput_batch_size``), ``throughput_batch_size``, ``size_mb`` (a path only),
    ``matmul_gflops`` and ``efficiency`` (see module doc), ``seq_len``, ``threads``, ``torch``,
    ``machine`` and ``cpu_count``. With ``task`` (a :class:`~kdbert.data.load.TaskOptions`; a
    path only) also batch-1 latency over ``length_rows`` of the task's dev rows at their own
    lengths (:mod:`kdbert.deploy.task_rows`: ``latency_real_p50_ms`` ...). An exported model's path
    is timed in ``runtime`` (ONNX Runtime, or OpenVINO: :mod:`kdbert.deploy.openvino_runtime`).
    """
    if not isinstance(model_or_path, nn.Module):
        from kdbert.deploy.onnx_runtime import bench_onnx, is_onnx_model

        if is_onnx_model(model_or_path):
            return bench_onnx(model_or_path, seq_len=seq_len, threads=threads, runs=runs, warmup=warmup,
                              name=name, throughput_batch_size=throughput_batch_size, task=task,
                              length_rows=length_rows, runtime=runtime)
    if runtime != "onnxruntime":
        raise KdbertError(f"--runtime {runtime} runs an ONNX export; pass the folder or .onnx file of "
                          "`kdbert export`, or leave --runtime out for a PyTorch model")
    if task is not None and isinstance(model_or_path, nn.Module):
        raise KdbertError("bench_model times a task's rows for a saved model only; pass its folder, not the module")
    size_mb = None
    if isinstance(model_or_path, nn.Module):
        model = model_or_path
        config = getattr(model, "config", None)
        default_name = getattr(config, "name_or_path", "") or type(model).__name__
    else:
        path = os.fspath(model_or_path)
        model = family_of_folder(path).load_for_bench(path)
        default_name = Path(path).name or path
        size_mb = weights_size_mb(path)
    threads = threads or torch.get_num_threads()
    params = count_parameters(model)
    latency = measure_latency(model, seq_len, 1, warmup=warmup, runs=runs, threads=threads)
    throughput = measure_throughput(
        model, seq_len, throughput_batch_size,
        warmup=min(warmup, 2), runs=max(1, runs // 3), threads=threads,
    )
    flops = count_flops(model, seq_len)
    rate = torch_matmul_rate(threads)
    real = {} if task is None else time_torch_task_rows(model, path, task, length_rows, threads)
    return {
        "name": name or default_name,
        "runtime": "pytorch fp32",
        "params_total": params["total"],
        "params_non_embedding": params["non_embedding"],
        "flops_per_example": flops,
        "latency_median_ms": latency["median_ms"],
        "latency_p90_ms": latency["p90_ms"],
        "throughput": throughput,
        "throughput_batch_size": throughput_batch_size,
        "size_mb": size_mb,
        "matmul_gflops": rate / 1e9,
        "efficiency": flops / (latency["median_ms"] / 1000.0) / rate,
        "seq_len": seq_len,
        "threads": threads,
        "torch": torch.__version__,
        "machine": _machine(),
        "cpu_count": os.cpu_count(),
        **real,
    }


def time_torch_task_rows(model: nn.Module, path: str, task, rows: int, threads: int, repeats: int = 3) -> dict:
    """Batch-1 latency of ``model`` (loaded from ``path``) over the task's rows, each at its own
    length and run ``repeats`` times (:func:`~kdbert.deploy.task_rows.time_task_rows`)."""
    family = family_of_folder(path)
    device = _model_device(model)

    def forward(feed: dict) -> None:
        model(**{name: torch.from_numpy(values).to(device) for name, values in feed.items()})

    previous_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        with _EvalMode(model), torch.inference_mode():
            return time_task_rows(forward, family, family.load_encoder(Path(path).expanduser()),
                                  family.input_spec(model), task, rows, repeats)
    finally:
        torch.set_num_threads(previous_threads)


# --------------------------------------------------------------------------- several models


def compare(rows: list[dict[str, Any]], baseline_index: int = 0) -> list[dict[str, Any]]:
    """Return copies of ``rows`` with ratios against ``rows[baseline_index]`` (the teacher).

    * ``speedup    = baseline latency_median_ms / row latency_median_ms`` (>1: faster)
    * ``size_ratio = row params_total / baseline params_total``         (<1: smaller)
    * ``flops_ratio = row flops_per_example / baseline flops_per_example`` (<1: cheaper)
    * ``speedup_real`` the same as ``speedup`` on the task's rows (``latency_real_p50_ms``), when both have it
    """
    if not rows:
        raise KdbertError("compare got no rows; pass the output of bench_model for each model")
    if not -len(rows) <= baseline_index < len(rows):
        raise KdbertError(
            f"baseline_index {baseline_index} is out of range for {len(rows)} rows; "
            f"pass an index between 0 and {len(rows) - 1}"
        )
    keys = ("latency_median_ms", "params_total", "flops_per_example")
    for i, row in enumerate(rows):
        for key in keys:
            if not isinstance(row.get(key), (int, float)) or row[key] <= 0:
                raise KdbertError(
                    f"row {i} has no positive {key!r}; pass rows produced by bench_model"
                )
    base = rows[baseline_index]
    return [
        {
            **row,
            "speedup": base["latency_median_ms"] / row["latency_median_ms"],
            "size_ratio": row["params_total"] / base["params_total"],
            "flops_ratio": row["flops_per_example"] / base["flops_per_example"],
            **({"speedup_real": base["latency_real_p50_ms"] / row["latency_real_p50_ms"]}
               if "latency_real_p50_ms" in base and "latency_real_p50_ms" in row else {}),
        }
        for row in rows
    ]


def human(n: float) -> str:
    """123456789 -> '123.5M'."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


# (header, row key, formatter); a column is shown when at least one row has a value for its key.
_COLUMNS: list[tuple[str, str, Callable[[Any], str]]] = [
    ("Model", "name", str),
    ("Runtime", "runtime", str),
    ("Dev score", "dev_score", lambda v: f"{v:.2f}"),
    ("Params", "params_total", human),
    ("Non-emb params", "params_non_embedding", human),
    ("FLOPs/example", "flops_per_example", human),
    ("Latency p50 (ms)", "latency_median_ms", lambda v: f"{v:.2f}"),
    ("Latency p90 (ms)", "latency_p90_ms", lambda v: f"{v:.2f}"),
    ("Real rows p50 (ms)", "latency_real_p50_ms", lambda v: f"{v:.2f}"),
    ("Real rows p90 (ms)", "latency_real_p90_ms", lambda v: f"{v:.2f}"),
    ("Row length p50", "real_length_p50", lambda v: f"{v:g}"),
    ("Throughput (ex/s)", "throughput", lambda v: f"{v:.1f}"),
    ("Disk (MB)", "size_mb", lambda v: f"{v:.1f}"),
    ("Efficiency", "efficiency", lambda v: f"{100 * v:.1f}%"),
    ("Matmul GFLOP/s", "matmul_gflops", lambda v: f"{v:.0f}"),
    ("Max |logit diff|", "max_abs_logit_diff", lambda v: f"{v:.1e}"),
    ("Speedup", "speedup", lambda v: f"{v:.2f}x"),
    ("Speedup real rows", "speedup_real", lambda v: f"{v:.2f}x"),
    ("Size", "size_ratio", lambda v: f"{v:.2f}x"),
    ("FLOPs", "flops_ratio", lambda v: f"{v:.2f}x"),
    ("Seq len", "seq_len", str),
    ("Threads", "threads", str),
]


def format_table(rows: list[dict[str, Any]]) -> str:
    """A markdown table of ``bench_model`` / ``compare`` rows, padded to line up as plain text.

    Columns no row has a value for are left out; a value a row lacks shows as ``-``.
    """
    if not rows:
        raise KdbertError("format_table got no rows; pass the output of bench_model or compare")
    columns = [c for c in _COLUMNS if any(row.get(c[1]) is not None for row in rows)]
    cells = [[fmt(row[key]) if row.get(key) is not None else "-" for _, key, fmt in columns] for row in rows]
    headers = [header for header, _, _ in columns]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: list[str], align_left: bool = False) -> str:
        padded = [
            v.ljust(w) if (i == 0 or align_left) else v.rjust(w)
            for i, (v, w) in enumerate(zip(values, widths))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "| " + " | ".join(
        ":" + "-" * (w - 1) if i == 0 else "-" * (w - 1) + ":" for i, w in enumerate(widths)
    ) + " |"
    return "\n".join([line(headers, align_left=True), rule, *(line(r) for r in cells)])
