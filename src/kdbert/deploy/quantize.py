"""int8 quantisation of an exported ONNX graph with ONNX Runtime."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kdbert.errors import KdbertError

__all__ = ["quantize_int8"]


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
        quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})  # fused ops have no type rules
    except Exception as err:  # ORT raises plain exceptions for graphs it cannot handle
        cause = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise KdbertError(f"ONNX Runtime cannot quantise {fp32_path} to int8: {cause}; deploy the fp32 model") from None
    finally:
        root.setLevel(level)
        if fp32_path.name.endswith(".unshared.onnx"):
            fp32_path.unlink(missing_ok=True)
    graph = onnx.load(str(int8_path), load_external_data=False).graph
    if not any(node.op_type in ("MatMulInteger", "DynamicQuantizeMatMul", "QLinearMatMul", "ConvInteger", "QAttention")
               for node in graph.node):
        Path(int8_path).unlink()
        operators = sorted({node.op_type for node in graph.node})
        raise KdbertError(f"ONNX Runtime found no MatMul/Gemm weights to quantise to int8 in {fp32_path} "
                          f"(operators: {', '.join(operators)}); deploy the fp32 model.onnx instead")
    return Path(int8_path)
