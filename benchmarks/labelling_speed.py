"""Who labels the rows the BiLSTM and students of another tokenizer learn from: the PyTorch teacher
(float32, bfloat16) against its ONNX export (fp32, int8), rows per second and agreement.

    OMP_NUM_THREADS=1 python benchmarks/labelling_speed.py --teacher default --task sst2 --rows 2000
    OMP_NUM_THREADS=1 python benchmarks/labelling_speed.py --teacher runs/base/all-mpnet-base-v2 --task sst2

Each labeller labels the same first ``--rows`` training rows of the task into a fresh store
(:func:`kdbert.core.teacher_logits.label_with_teacher`: shortest first, batches of 64), timed end to
end (tokenising included); agreement is against the PyTorch float32 teacher's logits (the share of
rows with the same argmax, and the largest difference of a logit). A teacher not fine-tuned on the
task gets a random task head (seeded): its speed is the teacher's, its agreement that of a random
head's small logits. ``estimate`` is what ``kdbert compress`` counts per row before labelling
(:func:`kdbert.compress.labelling.measured_row_seconds`: the int8 export timed on 256 random rows,
scaled by the tokens it runs on); ``estimate_from_timing`` what it counted before (and still counts
for a first round's teacher passes, :func:`kdbert.compress.search.teacher_row_seconds`: the int8
export's throughput batch at ``seq_len`` 64, scaled to the task's median row length). Results go to ``results/labelling_speed.json``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from common import machine_info, save_result
from paths import GLUE_DIR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", default="default")
    parser.add_argument("--task", default="sst2")
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--key", help="results key (default: <teacher folder name>/<task>)")
    args = parser.parse_args()

    from kdbert.compress.labelling import measured_row_seconds
    from kdbert.compress.search import teacher_row_seconds
    from kdbert.compress.speed import SpeedSettings, time_export
    from kdbert.core.loading import load_task_model, load_tokenizer, resolve_model_path
    from kdbert.core.teacher_logits import Labeller, label_with_teacher
    from kdbert.data.load import TaskOptions, load_task
    from kdbert.deploy.export import export_model

    task = TaskOptions(args.task, data_dir=args.data_dir)
    data = load_task(task)
    path = resolve_model_path(args.teacher)
    torch.manual_seed(0)
    model = load_task_model(path, data.spec, new_head_ok=True).eval()
    tokenizer = load_tokenizer(path)
    rows = [row.texts for row in data.train[: args.rows]]
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "teacher"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        export_model(folder, Path(scratch) / "onnx", quantize="int8")
        graphs = {"onnx-fp32": Path(scratch) / "onnx" / "model.onnx", "onnx-int8": Path(scratch) / "onnx" / "model.int8.onnx"}
        reference = None
        for name, options in (("pytorch-float32", {}), ("pytorch-bfloat16", {"dtype": "bfloat16"}),
                              ("onnx-fp32", {"onnx": str(graphs["onnx-fp32"])}),
                              ("onnx-int8", {"onnx": str(graphs["onnx-int8"])})):
            if name == "pytorch-bfloat16" and not torch.backends.mkldnn.is_available():
                continue
            label_with_teacher(model, tokenizer, rows[:64], Path(scratch) / f"warm-{name}", data.spec.max_seq_len,
                               **options)
            started = time.perf_counter()
            logits = label_with_teacher(model, tokenizer, rows, Path(scratch) / name, data.spec.max_seq_len,
                                        **options)
            seconds = time.perf_counter() - started
            reference = logits if reference is None else reference
            results[name] = {"seconds": round(seconds, 2), "rows_per_second": round(len(rows) / seconds, 1),
                             "argmax_agreement": float(np.mean(logits.argmax(-1) == reference.argmax(-1))),
                             "max_abs_diff": float(np.abs(logits - reference).max())}
            print(name, results[name], flush=True)
        timed = time_export(graphs["onnx-int8"], task, SpeedSettings("onnx-int8", 200, torch.get_num_threads()))
        estimates = {
            "estimate_from_timing": teacher_row_seconds({"teacher": timed, "settings": {"seq_len": SpeedSettings.seq_len}}),
            "estimate": measured_row_seconds(Labeller(model, tokenizer, data.spec.max_seq_len,
                                                      onnx=str(graphs["onnx-int8"]), truncation=data.spec.truncation),
                                             rows, rows, None)}
    for name, estimate in estimates.items():
        results[name] = {"row_seconds": estimate, "rows_per_second": round(1 / estimate, 1),
                         "over_measured": round(results["onnx-int8"]["seconds"] / len(rows) / estimate, 2)}
        print(name, results[name])
    name = "all-MiniLM-L6-v2" if args.teacher == "default" else Path(args.teacher).name  # the packaged default
    key = args.key or f"{name}/{args.task}"
    save_result("labelling_speed", key, {**machine_info(), "command": f"OMP_NUM_THREADS={torch.get_num_threads()} "
                                         f"python benchmarks/labelling_speed.py --teacher {args.teacher} --task "
                                         f"{args.task} --rows {args.rows}", "rows": len(rows),
                                         "params": sum(p.numel() for p in model.parameters()),
                                         "threads": torch.get_num_threads(), "labellers": results})


if __name__ == "__main__":
    main()
