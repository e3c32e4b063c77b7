"""General distillation runs that the task-distillation benchmarks start from.

    python benchmarks/general_distill.py --method tinybert distilbert

``tinybert``: a ``tinybert4`` student from the default teacher on 3,200 packed sequences of 128
tokens of the shared Wikipedia corpus, one epoch at batch 32 (``runs/general-tinybert4``).
``tinybert-ws``: the same from a student initialised by weight selection from the teacher
(``--student-init teacher-weights``) on 4,800 sequences (``runs/general-tinybert4-ws``).
``distilbert``: the DistilBERT student from ``kdbert init-student`` (``runs/distilbert-init``)
with the teacher plus its fitted MLM head (``runs/mlm-k0``) on 1,600 sequences of 64 tokens,
batch 16 (``runs/general-distilbert``). These are CPU budgets, far below the papers' (TinyBERT:
3 epochs of English Wikipedia at batch 256). ``--record-only`` records finished runs.
Results: ``benchmarks/results/general.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import machine_info, save_result
from glue_inputs import GENERAL_METHODS, general_argv
from paths import CORPUS, run_folder

from kdbert.cli import main as kdbert_main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", nargs="+", choices=GENERAL_METHODS, default=list(GENERAL_METHODS))
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--runs-dir", default=run_folder())
    parser.add_argument("--teacher", default="default", help="teacher of the TinyBERT runs (default: the packaged one)")
    parser.add_argument("--record-only", action="store_true")
    args = parser.parse_args()
    for method in args.method:
        argv = general_argv(method, args.corpus, args.runs_dir, args.teacher)
        out = Path(argv[argv.index("--output-dir") + 1])
        if not args.record_only:
            resume = ["--resume"] if (out / "run_config.json").exists() else []
            if kdbert_main(argv + resume) != 0:
                sys.exit(f"general distillation ({method}) failed")
        report = json.loads((out / "general_report.json").read_text())
        losses = report["stage_losses"]["general"]
        result = {"method": method, "output_dir": str(out), "wall_seconds": report["wall_seconds"],
                  "steps": losses[-1]["step"], "first_loss": losses[0], "last_loss": losses[-1],
                  "command": "kdbert " + " ".join(argv), **machine_info()}
        save_result("general", method, result)
        print(method, f"{result['steps']} steps, loss {losses[0]['loss']:.3f} -> {losses[-1]['loss']:.3f}, "
                      f"{result['wall_seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
