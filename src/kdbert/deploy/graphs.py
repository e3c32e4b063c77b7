"""The ONNX graph of an export: which exporter traces the model, and ORT's transformer fusion.

Three kinds of graph (``kdbert export --graph``), each with dynamic batch and sequence axes:

``dynamo``       ``torch.onnx.export(..., dynamo=True)``: the exporter torch recommends.
``torchscript``  ``torch.onnx.export(..., dynamo=False)``, the model traced with its family's
                 export form (HF encoders: eager attention). ORT's own graph optimiser, run
                 when a session opens, fuses more of this graph than of the dynamo one.
``fused``        the TorchScript graph rewritten by ONNX Runtime's transformer optimiser
                 (``onnxruntime.transformers.optimizer.optimize_model``): ``Attention``,
                 ``EmbedLayerNormalization``, ``SkipLayerNormalization`` and ``BiasGelu``
                 nodes, which int8 quantisation turns into ``QAttention`` and
                 ``QEmbedLayerNormalization``. Kept only if it passes parity with the
                 unfused graph on padded synthetic rows::

                     max_{n,c} |logits_fused[n, c] - logits_unfused[n, c]| <= 1e-4

                 else the export keeps the TorchScript graph and says why.

A family names the kinds its models export to (:attr:`~kdbert.families.registry.InputSpec.graphs`,
its default first) and, for ``fused``, the optimiser's settings
(:meth:`~kdbert.families.registry.Family.fusion_settings`). The graph an export got, with the
count of each fused operator, is recorded in ``export_report.json["graph"]``.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from kdbert.deploy.onnx_runtime import ort_session
from kdbert.errors import KdbertError
from kdbert.families.registry import InputSpec, Logits, example_inputs, family_of_model

GRAPHS = ("dynamo", "torchscript", "fused")
FUSION_TOLERANCE = 1e-4
FUSION_CHECK_ROWS = ((1, 7), (3, 19))  # (batch, length) of the rows fusion is checked on, padded

__all__ = ["GRAPHS", "export_graph", "export_onnx"]


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


def export_onnx(model: nn.Module, path: str | os.PathLike, spec: InputSpec | None = None,
                exporter: str = "torchscript") -> InputSpec:
    """Write ``model`` (eval mode, in its family's export form) to ``path`` as ONNX with dynamic
    batch and sequence axes, traced by ``exporter`` (``dynamo`` or ``torchscript``); inputs are
    the family's :class:`InputSpec` names, the output is ``logits`` (B, C), or for a QA model its
    start and end logits (B, 2, L). An operator the exporter
    cannot translate is named in the error."""
    family = family_of_model(model)
    spec = spec or family.input_spec(model)
    if exporter == "torchscript":
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
        with warnings.catch_warnings(), family.export_form(model, exporter) as traced:
            warnings.simplefilter("ignore")  # exporter deprecation and axis-naming notes
            program = torch.onnx.export(Logits(traced, spec.names).eval(), _example_inputs(spec),
                                        str(path) if exporter == "torchscript" else None,
                                        input_names=list(spec.names), output_names=["logits"], verbose=False,
                                        **options)
    except Exception as err:  # the exporter raises many types; all mean "cannot export this model"
        message = str(err)
        operators = _unsupported_operators(message)
        cause = (f"unsupported operator(s) {', '.join(operators)}" if operators else _summary(message, err))
        raise KdbertError(f"cannot export {type(model).__name__} to ONNX ({exporter} exporter): {cause}") from None
    finally:
        model.train(was_training)
        onnx_logger.setLevel(level)
    if program is not None:  # the dynamo exporter returns the program; the TorchScript one wrote the file
        program.save(str(path))
    return spec


def _fusion_check_feeds(spec: InputSpec) -> list[dict[str, np.ndarray]]:
    """Padded synthetic batches (:data:`FUSION_CHECK_ROWS`): the last row of each keeps only its
    first half of tokens unmasked."""
    feeds = []
    for batch, length in FUSION_CHECK_ROWS:
        length = min(length, spec.max_positions or length)
        inputs = {name: tensor.numpy() for name, tensor in example_inputs(spec, length, batch).items()}
        for name in inputs:
            if name.startswith("attention_mask"):
                inputs[name][-1, max(2, length // 2):] = 0
        feeds.append(inputs)
    return feeds


def _max_difference(file_a: Path, file_b: Path, spec: InputSpec) -> float:
    """max |logits_a - logits_b| of two graphs over :func:`_fusion_check_feeds`, in ONNX Runtime."""
    sessions = [ort_session(file) for file in (file_a, file_b)]
    return max(float(np.abs(sessions[0].run(None, feed)[0] - sessions[1].run(None, feed)[0]).max())
               for feed in _fusion_check_feeds(spec))


def _fuse(source: Path, target: Path, settings: dict) -> dict[str, int]:
    """ORT's transformer optimiser (its Python fusions only: ``opt_level=0``) on ``source``,
    written to ``target``; the count of each fused operator it made (zeros left out)."""
    from onnxruntime.transformers.optimizer import optimize_model

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the optimiser logs every fusion at INFO/WARNING
    try:
        optimized = optimize_model(str(source), opt_level=0, **settings)
    finally:
        root.setLevel(level)
    optimized.save_model_to_file(str(target))
    return {name: count for name, count in optimized.get_fused_operator_statistics().items() if count}


def export_graph(model: nn.Module, path: Path, spec: InputSpec, graph: str | None = None) -> dict:
    """Write ``model``'s graph of kind ``graph`` (default: the family's first) to ``path``; returns
    what was written: ``{"graph": kind, "requested": graph}`` plus, for ``fused``, ``fused_operators``
    (name -> count) and ``fusion_max_abs_diff``, or ``fusion_rejected`` (why the TorchScript graph
    was kept instead)."""
    requested = graph or spec.graphs[0]
    if requested not in spec.graphs:
        raise KdbertError(f"--graph {requested} is not offered for {type(model).__name__}; "
                          f"use one of {', '.join(spec.graphs)}")
    if requested != "fused":
        export_onnx(model, path, spec, requested)
        return {"graph": requested, "requested": requested}
    settings = family_of_model(model).fusion_settings(model)
    export_onnx(model, path, spec, "torchscript")
    if settings is None:
        return {"graph": "torchscript", "requested": requested, "fusion_rejected": "no fusion settings for this model"}
    fused = path.with_name(path.stem + ".fused.onnx")
    try:
        try:
            operators = _fuse(path, fused, settings)
            difference = _max_difference(path, fused, spec) if operators else None
        except Exception as err:  # ORT raises plain exceptions for patterns it cannot rewrite
            cause = (str(err).strip().splitlines() or [type(err).__name__])[0]
            return {"graph": "torchscript", "requested": requested, "fusion_rejected": f"optimiser failed: {cause}"}
        if not operators:
            return {"graph": "torchscript", "requested": requested, "fusion_rejected": "nothing fused"}
        if not difference <= FUSION_TOLERANCE:
            return {"graph": "torchscript", "requested": requested, "fusion_max_abs_diff": difference,
                    "fusion_rejected": f"fused logits differ by {difference:.2e} > {FUSION_TOLERANCE:g}"}
        fused.replace(path)
    finally:
        fused.unlink(missing_ok=True)
    return {"graph": "fused", "requested": requested, "fused_operators": operators, "fusion_max_abs_diff": difference}
