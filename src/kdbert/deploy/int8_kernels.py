"""Which x86 CPUs run an int8 graph exactly: ONNX Runtime's u8s8 kernels and their 16-bit saturation.

ONNX Runtime multiplies uint8 activations ``x`` by int8 weights ``w`` (u8s8). On a CPU with VNNI
(``avx512_vnni``, ``avx_vnni``) or AMX (``amx_int8``) every product is summed in 32 bits. On x86
CPUs without them (AVX2 only, or AVX-512 without VNNI) its kernel uses ``VPMADDUBSW``, which first
adds two neighbouring products along the reduced axis in a *saturating* int16::

    pair_k = clamp(x[2k] * w[2k] + x[2k+1] * w[2k+1], -32768, 32767),   x in [0, 255]

so a pair overflows once ``255 * (|w[2k]| + |w[2k+1]|) > 32767``, i.e. a weight pair above
:data:`SAFE_PAIR` = 128 in magnitude. 8-bit weights (``|w| <= 127``) can overflow; 7-bit weights
(``|w| <= 64``, ONNX Runtime's ``reduce_range``) cannot: ``255 * 128 = 32640``.

``--int8-target`` (:data:`INT8_TARGETS`) says which CPUs the graph must be exact on::

    any    7-bit weights: exact on every x86 CPU (the default)
    vnni   8-bit weights: exact only on CPUs with VNNI or AMX (and on ARM), a finer weight grid

:func:`saturation_note` is the one line ``kdbert evaluate`` / ``bench`` print when they run an
8-bit-weight graph on a CPU without VNNI or AMX.
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np

from kdbert.core.hardware import cpu_flags

INT8_TARGETS = ("any", "vnni")
EXACT_INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")  # 32-bit sums of u8 x s8 products
INT8_FLAGS = ("avx2", "avx512bw") + EXACT_INT8_FLAGS  # what decides ONNX Runtime's int8 kernel on x86
SAFE_PAIR = 32767 // 255  # 128: the largest |w_a| + |w_b| whose pair sum cannot overflow int16
REDUCED_WEIGHT_MAX = SAFE_PAIR // 2  # 64: ONNX Runtime's reduce_range weights, [-64, 64]

# operators whose int8 initializer inputs are weights multiplied by uint8 activations
_INTEGER_PRODUCTS = {"MatMulInteger", "DynamicQuantizeMatMul", "DynamicQuantizeLSTM", "QAttention",
                     "QLinearMatMul", "MatMulIntegerToFloat", "QGemm", "ConvInteger"}

__all__ = ["INT8_TARGETS", "cpu_int8_facts", "largest_weight", "saturates_here", "saturation_note",
           "target_for_weights"]


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def saturates_here(flags: set[str] | None = None, x86: bool | None = None) -> bool:
    """Whether this CPU's u8s8 kernel sums product pairs in a saturating int16: an x86 CPU without
    any of :data:`EXACT_INT8_FLAGS`."""
    flags = cpu_flags() if flags is None else flags
    return (_is_x86() if x86 is None else x86) and not flags & set(EXACT_INT8_FLAGS)


def _cpu_name(cpuinfo: str = "/proc/cpuinfo") -> str:
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_int8_facts(flags: set[str] | None = None) -> dict:
    """What ``export_report.json`` records of the machine that quantised and checked a graph:
    its CPU's name, the flags among :data:`INT8_FLAGS` it has, and whether its u8s8 kernel saturates."""
    flags = cpu_flags() if flags is None else flags
    return {"cpu": _cpu_name(), "machine": platform.machine(), "int8_flags": sorted(flags & set(INT8_FLAGS)),
            "u8s8_saturates": saturates_here(flags)}


def largest_weight(onnx_file: str | Path) -> int | None:
    """The largest ``|w|`` over the int8 weights that multiply activations in ``onnx_file`` (the
    initializers read by integer products, directly or through a ``DequantizeLinear``); ``None``
    when the graph has none (fp32, or uint8 weights, whose u8u8 kernel does not saturate)."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(onnx_file)).graph
    int8 = {t.name: t for t in graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) >= 2}
    consumers: dict[str, set[str]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, set()).add(node.op_type)
    dequantized = {node.input[0] for node in graph.node if node.op_type == "DequantizeLinear"
                   and consumers.get(node.output[0], set()) & {"MatMul", "Gemm"}}
    weights = [name for name in int8 if name in dequantized or consumers.get(name, set()) & _INTEGER_PRODUCTS]
    if not weights:
        return None
    return max(int(np.abs(numpy_helper.to_array(int8[name]).astype(np.int32)).max()) for name in weights)


def target_for_weights(largest: int | None) -> str:
    """The widest target a graph whose largest int8 weight is ``largest`` is exact on."""
    return "any" if largest is None or largest <= REDUCED_WEIGHT_MAX else "vnni"


def saturation_note(onnx_file: str | Path, flags: set[str] | None = None, x86: bool | None = None) -> str | None:
    """One line when ``onnx_file`` has 8-bit int8 weights and this CPU's u8s8 kernel saturates
    (:func:`saturates_here`); else ``None``."""
    if not saturates_here(flags, x86):
        return None
    largest = largest_weight(onnx_file)
    if target_for_weights(largest) == "any":
        return None
    return (f"note: {Path(onnx_file).name} has 8-bit int8 weights (up to {largest}), which ONNX Runtime's int8 "
            f"kernel on this CPU (no {', '.join(EXACT_INT8_FLAGS)}) sums in saturating 16-bit pairs, so its "
            "outputs can be wrong here; re-export with `kdbert export --int8-target any` (7-bit weights)")
