"""The deployment commands: evaluate, bench, export and report a trained model or its export."""

from __future__ import annotations

from pathlib import Path

from kdbert.cli.common import format_metrics, task_options
from kdbert.core.atomic_io import write_json
from kdbert.errors import KdbertError


def cmd_evaluate(args) -> int:
    from kdbert.core.loading import resolve_model_path
    from kdbert.data.load import load_task
    from kdbert.deploy.onnx_runtime import OnnxClassifier, is_onnx_model
    from kdbert.families.registry import family_of_folder

    data = load_task(task_options(args))
    if is_onnx_model(args.model):  # an export of `kdbert export`, run in ONNX Runtime
        model = OnnxClassifier(args.model)
        if args.max_seq_len:
            model.check_seq_len(args.max_seq_len)
        else:  # the task's length, within the model's limit
            args.max_seq_len = min(data.spec.max_seq_len, model.max_seq_len or data.spec.max_seq_len)
        family, encoder, path = model.family, model.encoder, str(model.folder)
        family.check_fits(str(model.file), model.num_labels, model.pair, data.spec)
        default_output = model.folder / f"eval_{data.spec.name}_{model.file.stem}.json"
    else:
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


def cmd_bench(args) -> int:
    from kdbert.deploy.bench import bench_model, compare, format_table

    options = {"seq_len": args.seq_len, "threads": args.threads, "runs": args.runs,
               "task": task_options(args) if args.task else None, "length_rows": args.length_rows}
    rows = [bench_model(args.model, **options)]
    if args.compare:
        rows.insert(0, bench_model(args.compare, **options))
        rows = compare(rows, baseline_index=0)
    print(format_table(rows))
    if args.output:
        write_json(Path(args.output), rows)
        print(f"saved {args.output}")
    return 0


def cmd_export(args) -> int:
    from kdbert.deploy.export import export_model

    task = task_options(args) if args.task else None
    report = export_model(args.model, args.output_dir, quantize=args.quantize, task=task,
                          max_seq_len=args.max_seq_len, batch_size=args.batch_size, overwrite=args.overwrite)
    out = Path(args.output_dir or Path(args.model) / "onnx")
    parity = report["parity"]
    print(f"exported {args.model} -> {out} ({', '.join(f['file'] for f in report['files'].values())})")
    print(f"parity on {parity['examples']} {parity['source']} rows: max |logit diff| fp32 "
          f"{parity['max_abs_logit_diff_fp32']:.2e} (tolerance {parity['tolerance']:g})"
          + (f", int8 {parity['max_abs_logit_diff_int8']:.2e}" if "max_abs_logit_diff_int8" in parity else ""))
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
