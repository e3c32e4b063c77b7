"""OpenVINO as a second CPU runtime for an export of ``kdbert export`` (optional: ``pip install openvino``).

OpenVINO reads the ``.onnx`` files themselves: ``model.onnx`` runs in fp32 (``openvino``) or with
its matrix products in bf16 where the CPU has bf16 instructions (``openvino-bf16``; OpenVINO's own
default there), and a static (QDQ) ``model.int8.onnx`` runs on its int8 kernels. A dynamically
quantised int8 graph runs too, through slow reference kernels: use ``--int8-method static-*``
for OpenVINO.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kdbert.errors import KdbertError

RUNTIMES = ("onnxruntime", "openvino", "openvino-bf16")  # what an export can run in

__all__ = ["RUNTIMES", "OpenVinoSession", "check_runtime"]


def check_runtime(runtime: str) -> None:
    """Refuse an unknown runtime, or OpenVINO when it is not installed."""
    if runtime not in RUNTIMES:
        raise KdbertError(f"--runtime {runtime} is unknown; choose one of {', '.join(RUNTIMES)}")
    if runtime.startswith("openvino"):
        try:
            import openvino  # noqa: F401
        except ImportError:
            raise KdbertError(f"--runtime {runtime} needs OpenVINO: pip install openvino") from None


class OpenVinoSession:
    """``file`` compiled by OpenVINO for the CPU, called like an ONNX Runtime session:
    ``run(None, feed) -> [logits]``; ``input_names`` and ``num_labels`` (None when dynamic) read
    from the graph. ``bf16``: let OpenVINO compute in bf16 (else fp32 is enforced)."""

    def __init__(self, file: Path, threads: int | None = None, bf16: bool = False):
        import openvino

        check_runtime("openvino")
        config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "bf16" if bf16 else "f32"}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        core = openvino.Core()
        try:
            self.compiled = core.compile_model(core.read_model(str(file)), "CPU", config)
        except Exception as err:  # OpenVINO raises RuntimeError with a multi-line trace
            cause = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise KdbertError(f"OpenVINO cannot load {file}: {cause}; use --runtime onnxruntime") from None
        self.request = self.compiled.create_infer_request()
        self.input_names = [port.get_any_name() for port in self.compiled.inputs]
        labels = self.compiled.outputs[0].get_partial_shape()[-1]
        self.num_labels = labels.get_length() if labels.is_static else None

    def run(self, _output_names, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The first output for ``feed`` (a copy: the request reuses its buffers)."""
        result = self.request.infer(feed)
        return [np.array(result[self.compiled.outputs[0]], copy=True)]
