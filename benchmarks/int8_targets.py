"""int8 on x86 CPUs with and without VNNI: every int8 method with the three weight encodings a user
could ship, scored on dev and timed on this CPU. Run it on one machine of each kind (a CPU with VNNI
or AMX, and one without: AVX2 only, such as AMD EPYC Zen 3); each keeps its own rows.

    OMP_NUM_THREADS=1 python benchmarks/int8_targets.py --model runs/quickstart/teacher --task sst2

Weights: ``s8`` (8-bit int8, ``--int8-target vnni``; what every export shipped before the target
existed), ``s7`` (7-bit int8, ONNX Runtime's ``reduce_range``; ``--int8-target any``, the default),
``u8`` (uint8 weights: ONNX Runtime's u8u8 kernel, which widens to 16 bits before multiplying and
does not saturate either). Latency: batch 1, dev rows at their own lengths, the smaller of two
alternating rounds.

Results: ``benchmarks/results/int8_targets.json`` under ``<task>/<model folder name>/<vnni|no-vnni>``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR, run_folder

from kdbert.data.load import TaskOptions, load_task
from kdbert.deploy.int8_choice import CALIBRATION_ROWS, TIMED_ROWS
from kdbert.deploy.int8_kernels import cpu_int8_facts, largest_weight
from kdbert.deploy.onnx_runtime import OnnxClassifier
from kdbert.deploy.quantize import calibration_batches, quantize_int8
from kdbert.deploy.task_rows import task_feeds, time_feeds
from kdbert.families.registry import family_of_folder

METHODS = ("dynamic", "static-minmax", "static-entropy")
WEIGHTS = ("s8", "s7", "u8")


def quantize_u8(fp32: Path, out: Path, method: str, calibration) -> None:
    """uint8 weights (per channel, asymmetric) and uint8 activations: ONNX Runtime's u8u8 kernel."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_dynamic, quantize_static)

    if method == "dynamic":
        quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QUInt8, per_channel=True)
        return

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(calibration)

        def get_next(self):
            return next(self.batches, None)

    calibrate = {"static-minmax": CalibrationMethod.MinMax, "static-entropy": CalibrationMethod.Entropy}[method]
    quantize_static(str(fp32), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8,
                    op_types_to_quantize=["MatMul", "Gemm"], calibrate_method=calibrate,
                    extra_options={"OpTypesToExcludeOutputQuantization": ["MatMul", "Gemm"]})


def make_variants(model: str, task: TaskOptions, out: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """model.onnx and every method x weights graph in ``out``; the files, and the errors of those
    ONNX Runtime could not make."""
    from kdbert.deploy.export import export_model

    if not (out / "model.onnx").is_file():
        export_model(model, out, task=task)
    family = family_of_folder(model)
    classifier = OnnxClassifier(out / "model.onnx")
    data = load_task(task)
    feeds = task_feeds(family, classifier.encoder, classifier.input_spec(), data, data.spec.max_seq_len,
                       CALIBRATION_ROWS, split="train")
    calibration = calibration_batches(feeds, pad_id=getattr(classifier.encoder, "pad_token_id", 0) or 0)
    files, errors = {"fp32": out / "model.onnx"}, {}
    for method in METHODS:
        for weights in WEIGHTS:
            name = f"{method}.{weights}"
            file = out / f"{name}.int8.onnx"
            try:
                if not file.is_file():
                    if weights == "u8":
                        quantize_u8(out / "model.onnx", file, method, calibration)
                    else:
                        quantize_int8(out / "model.onnx", file, method, calibration,
                                      target="vnni" if weights == "s8" else "any")
                files[name] = file
            except Exception as err:  # kdbert and ORT (plain exceptions) refuse some graphs: recorded
                errors[name] = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return files, errors


def dev_scores(files: dict[str, str], task: TaskOptions) -> dict[str, float]:
    """Each graph's dev score on whatever CPU runs this process."""
    data = load_task(task)
    scores = {}
    for name, file in files.items():
        classifier = OnnxClassifier(file)
        scores[name] = classifier.family.evaluator(data, classifier.encoder, None, 64)(classifier)["score"]
    return scores


def latencies(files: dict[str, Path], task: TaskOptions) -> dict[str, float]:
    data = load_task(task)
    runners = {name: OnnxClassifier(file) for name, file in files.items()}
    first = next(iter(runners.values()))
    feeds = task_feeds(first.family, first.encoder, first.input_spec(), data, data.spec.max_seq_len, TIMED_ROWS)
    best = {name: float("inf") for name in runners}
    for _ in range(2):
        for name, runner in runners.items():
            best[name] = min(best[name], time_feeds(runner, feeds)["latency_real_p50_ms"])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a fine-tuned model folder (teacher or student)")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--output-dir", help="where the graphs go (default: runs/int8_targets/<task>/<model name>)")
    args = parser.parse_args()
    task = TaskOptions(task=args.task, data_dir=args.data_dir)
    name = Path(args.model).name
    out = Path(args.output_dir or run_folder(f"int8_targets/{args.task}/{name}"))
    files, errors = make_variants(args.model, task, out)
    here = dev_scores(files, task)
    timing = latencies(files, task)
    rows = {variant: {"dev_score": here[variant], "latency_real_p50_ms": timing[variant],
                      "largest_weight": largest_weight(file)}
            for variant, file in files.items()}
    cpu = cpu_int8_facts()
    command = f"OMP_NUM_THREADS=1 python benchmarks/int8_targets.py --model {args.model} --task {args.task}"
    result = {**machine_info(), "command": command, "cpu": cpu, "model": args.model, "rows": rows, "errors": errors}
    save_result("int8_targets", f"{args.task}/{name}/{'no-vnni' if cpu['u8s8_saturates'] else 'vnni'}", result)
    print(f"{'graph':<22} {'dev':>7} {'ms p50':>8} {'max |w|':>8}")
    for variant, row in rows.items():
        print(f"{variant:<22} {row['dev_score']:>7.2f} {row['latency_real_p50_ms']:>8.3f} {str(row['largest_weight']):>8}")
    for variant, error in errors.items():
        print(f"{variant}: {error}")


if __name__ == "__main__":
    main()
