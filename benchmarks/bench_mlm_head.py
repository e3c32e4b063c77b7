"""Held-out masked-token accuracy of an MLM head fitted on the default teacher (`kdbert mlm-head`).

    python benchmarks/bench_mlm_head.py --unfreeze 0 2 --steps 300

For each number of unfrozen top layers, fits the head on the shared Wikipedia corpus into
``runs/mlm-k<N>`` and records top-1 / top-15 accuracy on held-out masked tokens in
``benchmarks/results/mlm_head.json``. ``--record-only`` records the reports of runs already in
``runs/mlm-k<N>`` (same settings) without training again.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import machine_info, save_result
from paths import CORPUS, run_folder

from kdbert.methods.mlm_head import REPORT_NAME, fit_mlm_head
from kdbert.core.loading import resolve_model_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--unfreeze", nargs="+", type=int, default=[0, 2])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--runs-dir", default=run_folder())
    parser.add_argument("--encoder", default="default",
                        help="encoder to fit the head on (default: the packaged teacher)")
    parser.add_argument("--record-only", action="store_true")
    args = parser.parse_args()
    for layers in args.unfreeze:
        out = Path(args.runs_dir) / f"mlm-k{layers}"
        if args.record_only:
            report = json.loads((out / REPORT_NAME).read_text())
        else:
            options = {"encoder": resolve_model_path(args.encoder), "corpus": args.corpus, "no_progress": True,
                       "unfreeze_top_layers": layers, "steps": args.steps, "learning_rate": args.learning_rate}
            report = fit_mlm_head(options, out, resume=(out / "run_config.json").exists())
        result = {k: report[k] for k in ("unfreeze_top_layers", "steps", "batch_size", "lr", "top1", "top15",
                                         "wall_time_s", "trainable_parameters")}
        encoder = "" if args.encoder == "default" else f"--encoder {args.encoder} "
        result.update(machine_info(), output_dir=str(out),
                      command=f"kdbert mlm-head {encoder}--corpus {args.corpus} --output-dir {out} "
                              f"--unfreeze-top-layers {layers} --steps {report['steps']} "
                              f"--learning-rate {report['lr']}")
        save_result("mlm_head", f"unfreeze{layers}", result)
        print(f"unfreeze {layers}: top-1 {100 * report['top1']:.1f}%, top-15 {100 * report['top15']:.1f}%")


if __name__ == "__main__":
    main()
