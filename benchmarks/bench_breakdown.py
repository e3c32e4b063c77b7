"""The speedup breakdown of deployment (the FastFormers paper's form) and the int8 methods, for the
teacher and two students in one run: each step's factor and dev score, on this machine.

    OMP_NUM_THREADS=1 python benchmarks/bench_breakdown.py --task sst2 --threads 1

Steps, each timed at batch 1 over the same ``--length-rows`` dev rows:

1. PyTorch fp32, every row padded to ``--fixed-len`` tokens (128);
2. PyTorch fp32, each row at its own length;
3. ONNX Runtime fp32, the family's default graph (``kdbert export``);
4. ONNX Runtime fp32, the fused graph (``--graph fused``; where the family offers it);
5. ONNX Runtime int8, the method ``--int8-method auto`` keeps by this run's figures (the fastest
   within 0.5 dev points of fp32; :mod:`kdbert.deploy.int8_choice`), on the default graph;
6. OpenVINO (when installed): the fastest of fp32, bf16 and int8 on the static graphs that stays
   within 0.5 dev points of ONNX Runtime fp32.

``factor`` = previous step's latency / this one, ``total`` = step 1's / this one. Beside the steps,
every int8 method (dynamic; static QDQ calibrated on 256 training rows with MinMax, percentile or
entropy ranges) with its latency and dev score, every OpenVINO variant, and the dynamic int8
export with its vocabulary pruned to the task's tokens (``--prune-vocab``): size and latency
before and after. Every export is made once under
``runs/breakdown/<task>/<model>/<variant>`` (reused on a rerun); the timing is ``--passes``
interleaved passes (each pass times every variant of every model once), a variant's figure the
median over passes of its p50 over rows.

Models (``--model NAME=DIR``): by default the task's teacher of ``benchmarks/teacher_glue.py`` and
the winners of its compress searches under ``runs/`` (see ``bench_export_graphs.py``).
Results: ``benchmarks/results/breakdown.json`` under ``<task>/threads<N>``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import onnxruntime
import torch

from bench_export_graphs import add_model_arguments, chosen_models
from common import cpu_model, machine_info, save_result

from kdbert.data.load import TaskOptions, load_task
from kdbert.deploy.export import export_model
from kdbert.deploy.int8_choice import MAX_SCORE_DROP, pick_int8
from kdbert.deploy.onnx_runtime import FP32_FILE, INT8_FILE, OnnxClassifier
from kdbert.deploy.openvino_runtime import check_runtime
from kdbert.deploy.quantize import INT8_METHODS
from kdbert.deploy.task_rows import task_feeds, time_feeds
from kdbert.errors import KdbertError
from kdbert.families.registry import Logits, example_inputs, family_of_folder


def export_variants(name: str, folder: Path, task: TaskOptions, out: Path) -> dict[str, dict]:
    """The model exported once per int8 method (default graph) and once fused (fp32): variant ->
    export report (reused when the folder holds the same request)."""
    requests = {f"int8-{method}": {"quantize": "int8", "int8_method": method} for method in INT8_METHODS}
    requests["pruned"] = {"quantize": "int8", "int8_method": "dynamic", "prune_vocab": True}
    family = family_of_folder(folder)
    if "fused" in family.input_spec(family.from_config(folder)).graphs:
        requests["fused"] = {"graph": "fused"}
    reports = {}
    for variant, request in requests.items():
        target = out / name.split(" ")[0] / variant
        report_path = target / "export_report.json"
        if report_path.is_file() and json.loads(report_path.read_text()).get("source") == str(folder):
            reports[variant] = json.loads(report_path.read_text())
            continue
        reports[variant] = export_model(folder, target, task=task, **request)
    print(f"exported {name}: {', '.join(reports)}", flush=True)
    return reports


def callers(folder: Path, out: Path, name: str, variants: dict, threads: int, fixed_len: int):
    """variant -> ``call(feed)`` for the PyTorch model (padded and own length) and every export."""
    model, _ = family_of_folder(folder).load(folder)
    spec = family_of_folder(folder).input_spec(model)
    logits = Logits(model, spec.names)
    fixed = tuple(example_inputs(spec, fixed_len, 1).values())

    def pytorch(feed):
        with torch.no_grad():
            return logits(*(torch.from_numpy(feed[n]) for n in spec.names))

    def padded(_feed):
        with torch.no_grad():
            return logits(*fixed)

    calls = {"pytorch-padded": padded, "pytorch": pytorch}
    base = out / name.split(" ")[0]
    sessions = {"onnx-fp32": OnnxClassifier(base / "int8-dynamic" / FP32_FILE, threads)}
    if "fused" in variants:
        sessions["fused-fp32"] = OnnxClassifier(base / "fused" / FP32_FILE, threads)
    for method in INT8_METHODS:
        sessions[f"int8-{method}"] = OnnxClassifier(base / f"int8-{method}" / INT8_FILE, threads)
    sessions["pruned-int8-dynamic"] = OnnxClassifier(base / "pruned" / INT8_FILE, threads)
    if openvino_installed():
        sessions["openvino-fp32"] = OnnxClassifier(base / "int8-dynamic" / FP32_FILE, threads, runtime="openvino")
        sessions["openvino-bf16"] = OnnxClassifier(base / "int8-dynamic" / FP32_FILE, threads, runtime="openvino-bf16")
        for method in INT8_METHODS[1:]:  # OpenVINO's int8 kernels take the static (QDQ) graphs
            sessions[f"openvino-int8-{method}"] = OnnxClassifier(base / f"int8-{method}" / INT8_FILE, threads,
                                                                 runtime="openvino")
    calls.update({key: (lambda feed, s=session: s.session.run(None, feed)) for key, session in sessions.items()})
    return calls, sessions


def openvino_installed() -> bool:
    try:
        check_runtime("openvino")
    except KdbertError:
        return False
    return True


def steps(reports: dict, timing: dict, fixed_len: int, openvino: dict) -> tuple[list[dict], dict]:
    """The rows of the module doc, and the int8 methods with the one auto keeps; ``openvino``:
    variant -> dev score in OpenVINO (empty without it)."""
    dynamic = reports["int8-dynamic"]
    scores = {"pytorch": dynamic["dev_metrics"]["pytorch"]["score"], "fp32": dynamic["dev_metrics"]["onnx_fp32"]["score"]}
    methods = {method: {"dev_score": reports[f"int8-{method}"]["dev_metrics"]["onnx_int8"]["score"],
                        "latency_real_p50_ms": timing[f"int8-{method}"]["latency_real_p50_ms"]}
               for method in INT8_METHODS}
    chosen, rule = pick_int8(methods, scores["fp32"])
    chain = [(f"PyTorch fp32, padded to {fixed_len} tokens", "pytorch-padded", scores["pytorch"]),
             ("each row at its own length", "pytorch", scores["pytorch"]),
             (f"ONNX Runtime fp32 ({dynamic['graph']['graph']} graph)", "onnx-fp32", scores["fp32"])]
    if "fused" in reports:
        chain.append(("fused graph (ORT transformer fusion)", "fused-fp32",
                      reports["fused"]["dev_metrics"]["onnx_fp32"]["score"]))
    chain.append((f"int8 {chosen} ({dynamic['graph']['graph']} graph)", f"int8-{chosen}", methods[chosen]["dev_score"]))
    passing = [key for key, score in openvino.items() if scores["fp32"] - score <= MAX_SCORE_DROP]
    if passing:  # the other runtime: its fastest variant within the drop
        fastest = min(passing, key=lambda key: timing[key]["latency_real_p50_ms"])
        chain.append((f"OpenVINO ({fastest.removeprefix('openvino-')})", fastest, openvino[fastest]))
    rows, first, previous = [], None, None
    for change, key, score in chain:
        latency = timing[key]["latency_real_p50_ms"]
        first, previous = first or latency, previous or latency
        rows.append({"change": change, "variant": key, "latency_ms": latency, "factor": previous / latency,
                     "total": first / latency, "dev_score": score})
        previous = latency
    runtimes = {key: {"dev_score": score, "latency_real_p50_ms": timing[key]["latency_real_p50_ms"]}
                for key, score in openvino.items()}
    pruned = reports["pruned"]
    vocabulary = {**pruned["vocabulary"], "dev_score": pruned["dev_metrics"]["onnx_int8"]["score"],
                  "max_abs_logit_diff_fp32": pruned["parity"]["max_abs_logit_diff_fp32"],
                  "latency_real_p50_ms": timing["pruned-int8-dynamic"]["latency_real_p50_ms"],
                  "latency_before_ms": timing["int8-dynamic"]["latency_real_p50_ms"],
                  "int8_mb": pruned["files"]["int8"]["size_mb"], "int8_mb_before": dynamic["files"]["int8"]["size_mb"],
                  "fp32_mb": pruned["files"]["fp32"]["size_mb"], "fp32_mb_before": dynamic["files"]["fp32"]["size_mb"]}
    return rows, {"chosen": chosen, "rule": rule, "fp32_dev_score": scores["fp32"], "methods": methods,
                  "openvino": runtimes, "vocabulary": vocabulary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(parser, passes=3, output="breakdown")
    parser.add_argument("--fixed-len", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models = chosen_models(args)
    task = TaskOptions(args.task, data_dir=args.data_dir)
    data = load_task(task)
    out = Path(args.output_dir) / args.task
    load_before = os.getloadavg()[0]
    reports = {name: export_variants(name, folder, task, out) for name, folder in models}
    calls, feeds, openvino = {}, {}, {}
    for name, folder in models:
        model_calls, sessions = callers(folder, out, name, reports[name], args.threads, args.fixed_len)
        calls.update({(name, key): call for key, call in model_calls.items()})
        reference = sessions["onnx-fp32"]
        evaluator = reference.family.evaluator(data, reference.encoder, None, 64)
        openvino[name] = {key: evaluator(session)["score"] for key, session in sessions.items()
                          if key.startswith("openvino")}
        spec = reference.input_spec()
        max_seq_len = min(data.spec.max_seq_len, spec.max_positions or data.spec.max_seq_len)
        feeds[name] = task_feeds(reference.family, reference.encoder, spec, data, max_seq_len, args.length_rows)
    per_pass: dict[tuple, list[dict]] = {key: [] for key in calls}
    for index in range(args.passes):
        for key, call in calls.items():
            per_pass[key].append(time_feeds(call, feeds[key[0]]))
        print(f"pass {index + 1}/{args.passes} timed", flush=True)
    result_models = {}
    for name, _ in models:
        timing = {key: {"latency_real_p50_ms": statistics.median(f["latency_real_p50_ms"] for f in figures),
                        "pass_p50s_ms": [f["latency_real_p50_ms"] for f in figures]}
                  for (model, key), figures in per_pass.items() if model == name}
        rows, int8 = steps(reports[name], timing, args.fixed_len, openvino[name])
        result_models[name] = {"steps": rows, "int8": int8, "timing": timing,
                               "real_length_p50": per_pass[name, "pytorch"][0]["real_length_p50"]}
    result = {
        **machine_info(), "cpu": cpu_model(), "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
        "command": "OMP_NUM_THREADS=1 python benchmarks/bench_breakdown.py " + " ".join(sys.argv[1:]),
        "threads": args.threads, "length_rows": args.length_rows, "passes": args.passes, "fixed_len": args.fixed_len,
        "load_average_before": load_before, "load_average_after": os.getloadavg()[0], "models": result_models,
    }
    save_result("breakdown", f"{args.task}/threads{args.threads}", result)
    for name, row in result_models.items():
        for step in row["steps"]:
            print(f"{name:28s} {step['change']:45s} {step['latency_ms']:7.3f} ms {step['factor']:5.2f}x "
                  f"{step['total']:5.2f}x dev {step['dev_score']:.2f}")
        for method, figures in row["int8"]["methods"].items():
            print(f"{name:28s} int8 {method:18s} {figures['latency_real_p50_ms']:7.3f} ms dev {figures['dev_score']:.2f}")
        for key, figures in row["int8"]["openvino"].items():
            print(f"{name:28s} {key:23s} {figures['latency_real_p50_ms']:7.3f} ms dev {figures['dev_score']:.2f}")


if __name__ == "__main__":
    main()
