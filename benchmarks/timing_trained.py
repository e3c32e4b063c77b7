"""A shipped student against its shape as compress times it at admission, in the same turns with the teacher.

    python benchmarks/timing_trained.py --search runs/quickstart-final/compress --passes 6

Why: over the main job's ship checks on an AVX-512 machine the speedup as shipped was 0.85-0.88 of
the one admitted (0.956 on an AVX2 one). Admission times each candidate's export as built before
training (``speed.all_candidates``); shipping times the trained export, minutes later. This
times both graphs of the search's winner in turns with the search's int8 teacher
(:func:`kdbert.compress.speed.time_in_turns_with_teacher`), the two students' order swapped every
pass (a model's place in a turn moves its reading), and records each pass's speedups, the teacher's
latency and the medians. The copy as admitted reads a sentence pair as the winner does (its
``config.json``'s pooling); where that is pair pooling, the copy reading the pair as one sequence, as
compress timed such shapes until 2026-12-04, is timed too (``unpooled``): a pair-pooled graph exported
before 2026-12-04 carried a per-sentence (B, 1, L, L) attention mask, and one exported since runs the
two sentences as two rows (``kdbert.core.pooling.PairRows``), so a winner shipped before then against
its copy exported now times the one against the other. Results:
``benchmarks/results/timing_trained.json`` under ``--key``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR

from kdbert.compress.speed import (SpeedSettings, all_candidates, shape_context, time_in_turns_with_teacher)
from kdbert.core.pooling import POOLING_KEY, pool_pairs
from kdbert.data.load import TaskOptions
from kdbert.deploy.export import export_classifier
from kdbert.deploy.onnx_runtime import INT8_FILE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--search", required=True, help="a finished compress folder (winner/, teacher-onnx/)")
    parser.add_argument("--teacher-folder", help="the teacher's model folder (default: the report's)")
    parser.add_argument("--passes", type=int, default=6)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--key", default="sst2-main-job")
    args = parser.parse_args()
    search = Path(args.search)
    report = json.loads((search / "compress_report.json").read_text())
    winner = report["winner"]["candidate"]
    task = TaskOptions(report["task"], data_dir=args.data_dir)
    settings = SpeedSettings("onnx-int8", args.rows, args.threads)
    context = shape_context(args.teacher_folder or report["teacher"], task)
    candidate = next(c for c in all_candidates(context) if c.name == winner)
    passes = []
    shipped_pooling = json.loads((search / "winner" / "config.json").read_text()).get(POOLING_KEY)
    with tempfile.TemporaryDirectory() as tmp:
        paired = shipped_pooling == "pair"
        copies = {"admitted": paired, **({"unpooled": False} if paired else {})}  # name -> pair-pooled
        files = {}
        for name, pair_pooled in copies.items():
            model, encoder = candidate.build(context)
            if pair_pooled:
                pool_pairs(model)
            export_classifier(model, encoder, Path(tmp) / name, quantize="int8", source=f"{winner} ({name})")
            files[name] = Path(tmp) / name / INT8_FILE
        files["trained"] = search / "winner" / INT8_FILE
        for index in range(args.passes):
            order = list(files) if index % 2 == 0 else list(files)[::-1]
            timed = time_in_turns_with_teacher(search / "teacher-onnx" / INT8_FILE, {n: files[n] for n in order},
                                               task, settings)
            passes.append({"order": order, "speedup": {n: timed["speedup"][n] for n in files},
                           "teacher_ms": timed["latency_real_p50_ms"]["teacher"]})
            print(passes[-1], flush=True)
    medians = {name: statistics.median(p["speedup"][name] for p in passes) for name in files}
    ratio = statistics.median(p["speedup"]["trained"] / p["speedup"]["admitted"] for p in passes)
    result = {**machine_info(), "search": str(search), "winner": winner, "rows": args.rows, "threads": args.threads,
              "pooling": shipped_pooling or "cls",
              "passes": passes, "median_speedup": medians, "median_trained_over_admitted": ratio,
              "teacher_ms_range": [min(p["teacher_ms"] for p in passes), max(p["teacher_ms"] for p in passes)],
              "command": f"python benchmarks/timing_trained.py --search {args.search} --passes {args.passes} "
                         f"--threads {args.threads} --key {args.key}"}
    print(f"{winner}: " + ", ".join(f"{name} {speedup:.2f}x" for name, speedup in medians.items())
          + f", trained / admitted (median over passes) {ratio:.3f}")
    save_result("timing_trained", args.key, result)


if __name__ == "__main__":
    main()
