"""The deployment commands: evaluate, bench, export and report a trained model or its export."""

from __future__ import annotations

from pathlib import Path

from kdbert.cli.common import add_command, add_task_arguments, format_metrics, require, task_options
from kdbert.core.atomic_io import write_json
from kdbert.deploy.graphs import GRAPHS
from kdbert.deploy.int8_choice import INT8_CHOICES
from kdbert.deploy.int8_kernels import INT8_TARGETS, saturation_note
from kdbert.deploy.openvino_runtime import RUNTIMES, check_runtime
from kdbert.errors import KdbertError


def _note_saturation(file: Path) -> None:
    """Print :func:`~kdbert.deploy.int8_kernels.saturation_note`'s line for ``file``, if any."""
    note = saturation_note(file)
    if note:
        print(note)


def cmd_evaluate(args) -> int:
    from kdbert.core.loading import resolve_model_path
    from kdbert.data.load import load_task
    from kdbert.deploy.onnx_runtime import OnnxClassifier, is_onnx_model
    from kdbert.families.registry import family_of_folder

    data = load_task(task_options(args))
    if is_onnx_model(args.model):  # an export of `kdbert export`, run in ONNX Runtime or OpenVINO
        model = OnnxClassifier(args.model, runtime=args.runtime)
        if args.max_seq_len:
            model.check_seq_len(args.max_seq_len)
        else:  # the task's length, within the model's limit
            args.max_seq_len = min(data.spec.max_seq_len, model.max_seq_len or data.spec.max_seq_len)
        if args.runtime == "onnxruntime":
            _note_saturation(model.file)
        family, encoder, path = model.family, model.encoder, str(model.folder)
        family.check_fits(str(model.file), model.num_labels, model.pair, data.spec)
        runtime = "" if args.runtime == "onnxruntime" else f"_{args.runtime}"
        default_output = model.folder / f"eval_{data.spec.name}_{model.file.stem}{runtime}.json"
    else:
        if args.runtime != "onnxruntime":
            raise KdbertError(f"--runtime {args.runtime} runs an ONNX export; pass the folder or .onnx file of "
                              "`kdbert export`, or leave --runtime out for a PyTorch model")
        path = resolve_model_path(args.model)
        family = family_of_folder(path)
        model, encoder = family.load(Path(path), data.spec)
        default_output = Path(path) / f"eval_{data.spec.name}.json"
    metrics = family.evaluator(data, encoder, args.max_seq_len, args.batch_size)(model)
    print(format_metrics(f"evaluate {args.task}: {args.model}", metrics))
    output = Path(args.output) if args.output else default_output
    if Path(path).is_dir() or args.output:
        write_json(output, metrics)
        print(f"saved {output}")
    return 0


def fastest_runtime(rows: list[dict]) -> str:
    """One line: which runtime row is fastest at batch 1 (real rows when timed, else the fixed
    length), and by how much over the slowest and over the first."""
    key = "latency_real_p50_ms" if all(row.get("latency_real_p50_ms") for row in rows) else "latency_median_ms"
    fastest = min(rows, key=lambda row: row[key])
    slowest = max(rows, key=lambda row: row[key])
    return (f"fastest here: {fastest['runtime']} ({fastest[key]:.3f} ms, {key}), {rows[0][key] / fastest[key]:.2f}x "
            f"{rows[0]['runtime']}, {slowest[key] / fastest[key]:.2f}x the slowest ({slowest['runtime']})")


def cmd_bench(args) -> int:
    from kdbert.deploy.bench import bench_model, compare, format_table
    from kdbert.deploy.onnx_runtime import is_onnx_model, onnx_file, runtime_parity

    options = {"seq_len": args.seq_len, "threads": args.threads, "runs": args.runs,
               "task": task_options(args) if args.task else None, "length_rows": args.length_rows}
    runtimes = [name.strip() for name in args.runtime.split(",") if name.strip()]
    for runtime in runtimes:
        check_runtime(runtime)
    if "onnxruntime" in runtimes:
        for model in (args.model, args.compare):
            if model and is_onnx_model(model):
                _note_saturation(onnx_file(model))
    rows = [bench_model(args.model, runtime=runtime, **options) for runtime in runtimes]
    if len(runtimes) > 1:
        parity = runtime_parity(args.model, runtimes, args.threads, options["task"], args.seq_len, args.length_rows)
        for row, runtime in zip(rows[1:], runtimes[1:]):
            row["max_abs_logit_diff"] = parity[runtime]
    if args.compare or len(rows) > 1:
        if args.compare:
            rows.insert(0, bench_model(args.compare, runtime=runtimes[0], **options))
        rows = compare(rows, baseline_index=0)
    print(format_table(rows))
    if len(runtimes) > 1:
        print(fastest_runtime(rows[-len(runtimes):]))
    if args.output:
        write_json(Path(args.output), rows)
        print(f"saved {args.output}")
    return 0


def cmd_export(args) -> int:
    from kdbert.deploy.export import export_model

    task = task_options(args) if args.task else None
    report = export_model(args.model, args.output_dir, quantize=args.quantize, task=task,
                          max_seq_len=args.max_seq_len, batch_size=args.batch_size, overwrite=args.overwrite,
                          graph=args.graph, int8_method=args.int8_method, int8_target=args.int8_target,
                          prune_vocab=args.prune_vocab,
                          prune_vocab_corpus=args.prune_vocab_corpus, command=args.command_line)
    out = Path(args.output_dir or Path(args.model) / "onnx")
    parity, graph = report["parity"], report["graph"]
    print(f"exported {args.model} -> {out} ({', '.join(f['file'] for f in report['files'].values())})")
    fused = ", ".join(f"{count} {name}" for name, count in graph.get("fused_operators", {}).items())
    print(f"graph: {graph['graph']}" + (f" ({fused})" if fused else "")
          + (f"; fusion not kept: {graph['fusion_rejected']}" if "fusion_rejected" in graph else ""))
    print(f"parity on {parity['examples']} {parity['source']} rows: max |logit diff| fp32 "
          f"{parity['max_abs_logit_diff_fp32']:.2e} (tolerance {parity['tolerance']:g})"
          + (f", int8 {parity['max_abs_logit_diff_int8']:.2e}" if "max_abs_logit_diff_int8" in parity else ""))
    vocabulary = report["vocabulary"]
    if vocabulary:
        print(f"vocabulary: {vocabulary['kept_tokens']} of {vocabulary['vocab_size']} tokens kept "
              f"({', '.join(vocabulary['sources'])}): embedding {vocabulary['embedding_params_before']:,} -> "
              f"{vocabulary['embedding_params_after']:,} parameters")
    int8 = report["quantization"]
    if int8:
        print(f"int8: {int8['method']} ({int8['rule']}); {int8['weight_bits']}-bit weights, exact on "
              + ("every x86 CPU" if int8["target"] == "any" else "CPUs with VNNI or AMX"))
        for method, variant in int8.get("variants", {}).items():
            held_out = f"held-out {variant['held_out_score']:.2f}, " if "held_out_score" in variant else ""
            print(f"  {method}: " + (variant["error"] if "error" in variant else
                                     f"skipped: {variant['skipped']}" if "skipped" in variant else
                                     f"{held_out}dev {variant['dev_score']:.2f}, "
                                     f"batch-1 p50 {variant['latency_real_p50_ms']:.3f} ms"))
    for runtime, metrics in report["dev_metrics"].items():
        print(format_metrics(f"  dev {runtime}", metrics))
    return 0


def cmd_report(args) -> int:
    from kdbert.deploy.report import collect_runs, load_records, write_report

    if bool(args.run_dirs) == bool(args.results):
        raise KdbertError("pass run folders (kdbert report runs/teacher runs/student ...) or --results FILE, "
                          "not both and not neither")
    records = load_records(args.results) if args.results else collect_runs(
        args.run_dirs, bench=args.bench, seq_len=args.seq_len, threads=args.threads)
    paths = write_report(records, args.output_dir, latency=args.plot_latency)
    print(Path(paths["markdown"]).read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def add_deploy_commands(sub, table: dict) -> None:
    p = add_command(sub, table, "evaluate", cmd_evaluate,
                    help="evaluate a fine-tuned classifier on a task's dev split(s)",
                    description="Print and save a fine-tuned model's GLUE metrics on dev.")
    p.add_argument("--model", help="fine-tuned HF folder or hub id, or an export of `kdbert export` (its folder or "
                                   ".onnx file, run in ONNX Runtime) (required)")
    require(p, "model")
    add_task_arguments(p)
    p.add_argument("--max-seq-len", type=int, help="token limit (default: the task's)")
    p.add_argument("--batch-size", type=int, default=64, help="evaluation batch size")
    p.add_argument("--output", help="metrics JSON path (default: MODEL/eval_TASK.json)")
    p.add_argument("--runtime", choices=RUNTIMES, default="onnxruntime",
                   help="what runs an ONNX export: ONNX Runtime, OpenVINO fp32, or OpenVINO with bf16 matrix "
                        "products (optional: pip install openvino)")

    p = add_command(sub, table, "bench", cmd_bench,
                    help="size, FLOPs, CPU latency and throughput, optionally against another model",
                    description="Parameters, FLOPs per example, batch-1 latency, batch-32 throughput, size on "
                                "disk and efficiency (share of the measured matrix-multiply rate), in PyTorch "
                                "or, for an exported model, ONNX Runtime.")
    p.add_argument("--model", help="HF folder or hub id ('default' = the packaged teacher), or an export of "
                                   "`kdbert export` (folder or .onnx file: ONNX Runtime) (required)")
    require(p, "model")
    p.add_argument("--compare", help="baseline model (e.g. the teacher, PyTorch or ONNX) for speedup and size ratios")
    p.add_argument("--seq-len", type=int, default=128, help="sequence length of the synthetic input")
    p.add_argument("--threads", type=int, help="CPU threads of torch / ONNX Runtime (default: torch's)")
    p.add_argument("--runs", type=int, default=30, help="timed runs for latency")
    p.add_argument("--output", help="write the rows as JSON here")
    p.add_argument("--runtime", default="onnxruntime",
                   help=f"what runs an ONNX export, or several comma-separated to compare them (one row each, "
                        f"max |logit diff| against the first, the fastest named): {', '.join(RUNTIMES)}")
    p.add_argument("--length-rows", type=int, default=200,
                   help="with --task: how many dev rows are timed, each at its own length, batch 1")
    add_task_arguments(p, required=False, task_help="also time batch-1 latency over this task's dev rows at their "
                                                    "own lengths (p50/p90 over rows)")

    p = add_command(sub, table, "export", cmd_export,
                    help="export a fine-tuned model to ONNX (optionally int8) with a parity check",
                    description="Export a fine-tuned classifier to ONNX with dynamic batch and sequence axes, "
                                "tokenizer and config beside it, optionally an int8 copy, and "
                                "export_report.json: max |logit difference| against PyTorch and, with --task, "
                                "the dev metric of PyTorch, ONNX fp32 and ONNX int8.")
    p.add_argument("--model", help="fine-tuned model folder (teacher or student) (required)")
    require(p, "model")
    p.add_argument("--format", choices=["onnx"], default="onnx", help="export format")
    p.add_argument("--quantize", choices=["int8"], help="also write model.int8.onnx (ONNX Runtime int8)")
    p.add_argument("--int8-method", choices=INT8_CHOICES, default="auto",
                   help="dynamic, or static calibrated on 256 training rows (minmax, percentile, entropy); auto: "
                        "with --task the fastest at batch 1 within 0.5 points of fp32 on the held-out rows "
                        "(--held-out-fraction), else on dev; without --task: dynamic")
    p.add_argument("--int8-target", choices=INT8_TARGETS, default="any",
                   help="the CPUs the int8 graph must be exact on: any x86 CPU (7-bit weights), or only CPUs with "
                        "VNNI or AMX (8-bit weights; ONNX Runtime's int8 kernel saturates on AVX2-only CPUs)")
    p.add_argument("--graph", choices=GRAPHS, help="how the graph is made: dynamo or torchscript exporter, or "
                                                   "fused (TorchScript + ONNX Runtime's transformer fusion, kept "
                                                   "only within 1e-4 of the unfused logits) (default: the "
                                                   "model family's)")
    p.add_argument("--prune-vocab", action="store_true",
                   help="keep only the embedding rows of tokens in the task's texts (train, held-out, dev; with "
                        "--task) and the special tokens, read through an id map so the tokenizer is unchanged")
    p.add_argument("--prune-vocab-corpus", help="with --prune-vocab: also keep the tokens of this text file")
    p.add_argument("--output-dir", help="export folder (default: MODEL/onnx)")
    p.add_argument("--max-seq-len", type=int, help="token limit of the parity rows (default: the task's, else 128)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size of the parity check")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --output-dir")
    add_task_arguments(p, required=False, task_help="check parity and metrics on this task's dev rows "
                                                    "(default: synthetic rows, no metric)")

    p = add_command(sub, table, "report", cmd_report,
                    help="paper-style table (methods x tasks) and Pareto plot of run folders",
                    description="Mean +/- std over seeds of each method's dev score per task, the share of the "
                                "teacher's score kept, parameters, FLOPs, and batch-1 latency and speedup in "
                                "PyTorch and ONNX Runtime int8; written as Markdown, CSV and JSON with a "
                                "Pareto plot (PNG) of dev score against latency.")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR",
                   help="finetune / distill run folders (a distilled student's teacher is added automatically)")
    p.add_argument("--results", help="instead of RUN_DIRs: a JSON file of run records "
                                     "(e.g. benchmarks/results/deploy.json)")
    p.add_argument("--output-dir", default="report", help="where report.md/.csv/.json and pareto.png go")
    p.add_argument("--bench", action="store_true",
                   help="time each method's first run: PyTorch, and ONNX int8 where RUN_DIR/onnx/model.int8.onnx "
                        "exists (see `kdbert export`)")
    p.add_argument("--seq-len", type=int, default=128, help="sequence length of FLOPs and timings")
    p.add_argument("--threads", type=int, help="CPU threads for timings (default: torch's)")
    p.add_argument("--plot-latency", choices=["onnx_int8", "pytorch"], default=None,
                   help="latency axis of the Pareto plot (default: ONNX int8 when every point has it)")
