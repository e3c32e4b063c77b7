"""int8 quantisation of an exported ONNX graph with ONNX Runtime: dynamic, or static (QDQ)
calibrated on training rows.

Methods (:data:`INT8_METHODS`)::

    dynamic            int8 per-channel weights; each activation x quantised per call:
                       scale = (max(x) - min(x)) / 255 over the whole tensor (uint8)
    static-minmax      int8 per-channel weights; each weight matrix's input quantised with a fixed
                       scale from calibration: (max - min) / 255 over the calibration rows
    static-percentile  the same, range cut to the 0.001 and 99.999 percentiles of the calibration values
    static-entropy     the same, range chosen to minimise the KL divergence between the calibration
                       histogram and its quantised copy (TensorRT's method)

Static graphs quantise only matrix products with a weight operand (the attention products stay
fp32) and leave their outputs fp32 (ORT fuses them into ``MatMulIntegerToFloat``). Calibration reads
one batch at a time (ORT's ``CalibStridedMinMax``, which every calibrator honours): the histogram
calibrators otherwise hold every batch's activations at once, and on a base-size teacher (MPNet
12x768, 256 STS-B rows of 128 tokens) that took 20 GB and was killed.

Weights have 7 bits (``|w| <= 64``, ORT's ``reduce_range``) for ``target="any"``, the default, so
that the graph is exact on x86 CPUs without VNNI, and 8 bits for ``target="vnni"``
(:mod:`kdbert.deploy.int8_kernels`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from pathlib import Path

import numpy as np

from kdbert.deploy.int8_kernels import INT8_TARGETS
from kdbert.errors import KdbertError

INT8_METHODS = ("dynamic", "static-minmax", "static-percentile", "static-entropy")
CALIBRATION_BATCH = 16  # calibration rows per batch (histogram calibrators need equal shapes)

__all__ = ["INT8_METHODS", "calibration_batches", "quantize_int8"]


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


def calibration_batches(feeds: list[dict[str, np.ndarray]], pad_id: int = 0,
                        batch_size: int = CALIBRATION_BATCH) -> list[dict[str, np.ndarray]]:
    """Batch-1 feeds (each input (1, L_r)) regrouped into ``batch_size`` rows, each input padded to
    its longest row of all (a pair BiLSTM's second text has its own length; ids with ``pad_id``,
    masks and segments with 0); a last incomplete batch is dropped unless it is the only one."""
    if not feeds:
        raise KdbertError("no calibration rows; pass a task with training rows")
    longest = {name: max(feed[name].shape[1] for feed in feeds) for name in feeds[0]}
    batches = []
    for start in range(0, len(feeds), batch_size):
        group = feeds[start:start + batch_size]
        if len(group) < batch_size and batches:
            break
        batches.append({name: np.concatenate([
            np.pad(feed[name], ((0, 0), (0, longest[name] - feed[name].shape[1])),
                   constant_values=pad_id if name.startswith("input_ids") else 0) for feed in group])
            for name in group[0]})
    return batches


def _weight_products(graph) -> list[str]:
    """Names of the MatMul/Gemm nodes whose second operand is a weight (an initializer)."""
    weights = {tensor.name for tensor in graph.initializer}
    return [node.name for node in graph.node if node.op_type in ("MatMul", "Gemm") and node.input[1] in weights]


def _quantize_static(fp32_path: Path, int8_path: Path, method: str, calibration: list[dict[str, np.ndarray]],
                     products: list[str], reduce_range: bool) -> None:
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Reader(CalibrationDataReader):
        """The calibration batches, read a range at a time (``set_range``: ORT's strided calibration)."""

        def __init__(self):
            self.next, self.end = 0, len(calibration)

        def __len__(self):
            return len(calibration)

        def set_range(self, start_index: int, end_index: int):
            self.next, self.end = start_index, end_index

        def get_next(self):
            if self.next >= self.end:
                return None
            self.next += 1
            return calibration[self.next - 1]

    if not products:
        raise KdbertError(f"{fp32_path} has no MatMul/Gemm with a weight operand to quantise statically; "
                          "use --int8-method dynamic")
    calibrate = {"static-minmax": CalibrationMethod.MinMax, "static-percentile": CalibrationMethod.Percentile,
                 "static-entropy": CalibrationMethod.Entropy}[method]
    with contextlib.redirect_stdout(io.StringIO()):  # histogram calibrators print their progress
        quantize_static(str(fp32_path), str(int8_path), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"],
                        nodes_to_quantize=products, calibrate_method=calibrate, reduce_range=reduce_range,
                        extra_options={"OpTypesToExcludeOutputQuantization": ["MatMul", "Gemm"],
                                       "CalibStridedMinMax": 1})  # one batch at a time (module doc)


def quantize_int8(fp32_path: str | os.PathLike, int8_path: str | os.PathLike, method: str = "dynamic",
                  calibration: list[dict[str, np.ndarray]] | None = None, target: str = "any") -> Path:
    """int8 quantisation with ORT (``method``: one of :data:`INT8_METHODS`): ``quantize_dynamic``,
    or ``quantize_static`` in QDQ form on ``calibration`` (:func:`calibration_batches` of training
    rows). Weights are int8 with one scale per output channel, 7-bit for ``target="any"`` and 8-bit
    for ``"vnni"`` (:data:`~kdbert.deploy.int8_kernels.INT8_TARGETS`), activations uint8. Refuses a
    graph in which ORT finds no weight matrix to quantise.

    Per-channel scales: on the SST-2 3-layer KD student, dynamic int8 dev accuracy 83.14 against
    82.45 with one scale per matrix (fp32: 83.37).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if method not in INT8_METHODS:
        raise KdbertError(f"--int8-method {method} is unknown; choose one of {', '.join(INT8_METHODS)}")
    if target not in INT8_TARGETS:
        raise KdbertError(f"--int8-target {target} is unknown; choose one of {', '.join(INT8_TARGETS)}")
    if method != "dynamic" and not calibration:
        raise KdbertError(f"--int8-method {method} calibrates on the task's training rows; pass --task")
    source = onnx.load(str(fp32_path))
    fp32_path = Path(fp32_path)
    if _unshare_lstm_weights(source.graph):  # quantise a copy in which every LSTM has its own weights
        fp32_path = Path(int8_path).with_name(Path(int8_path).name + ".unshared.onnx")
        onnx.save(source, str(fp32_path))
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a pre-processing hint at WARNING
    try:
        if method == "dynamic":
            quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True,
                             reduce_range=target == "any", extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})  # fused ops: no type rules
        else:
            _quantize_static(fp32_path, Path(int8_path), method, calibration, _weight_products(source.graph),
                             reduce_range=target == "any")
    except KdbertError:
        raise
    except Exception as err:  # ORT raises plain exceptions for graphs it cannot handle
        cause = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise KdbertError(f"ONNX Runtime cannot quantise {fp32_path} to int8: {cause}; deploy the fp32 model") from None
    finally:
        root.setLevel(level)
        if fp32_path.name.endswith(".unshared.onnx"):
            fp32_path.unlink(missing_ok=True)
    graph = onnx.load(str(int8_path), load_external_data=False).graph
    quantized = ("MatMulInteger", "DynamicQuantizeMatMul", "QLinearMatMul", "ConvInteger", "QAttention")
    if method == "dynamic" and not any(node.op_type in quantized for node in graph.node):  # static: checked above
        Path(int8_path).unlink()
        operators = sorted({node.op_type for node in graph.node})
        raise KdbertError(f"ONNX Runtime found no MatMul/Gemm weights to quantise to int8 in {fp32_path} "
                          f"(operators: {', '.join(operators)}); deploy the fp32 model.onnx instead")
    return Path(int8_path)
