"""Where the distilled BiLSTM's word vectors come from: GloVe 6B 50d against vectors read off an
encoder (``--word-vectors encoder:MODEL``), the same run otherwise.

    OMP_NUM_THREADS=1 python benchmarks/bilstm_vectors.py --search runs/issue44/stsb-x4-all-on-3 --steps 2000 \
        --vectors glove encoder:default encoder:teacher

Takes the BiLSTM run of a recorded ``kdbert compress`` search (``<search>/runs/bilstm-h150``: its
``run_config.json`` holds every option, the task and its held-out fraction, and the search's stored
teacher logits are read back) and distils it again for ``--steps`` steps (seed 42, evaluated every
quarter) with each ``--vectors``: ``glove`` (the shared GloVe 6B 50d, as the search), an
``encoder:MODEL`` (``encoder:default``: the packaged all-MiniLM-L6-v2, the default teacher's base), or
``encoder:teacher`` (the search's fine-tuned teacher itself). Records every evaluation's held-out
and dev (PyTorch) scores, and the seconds of training, in ``results/bilstm_vectors.json`` under
``<task>/<vectors>``. Finished runs are reused.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import fields
from pathlib import Path

from common import machine_info, save_result
from paths import GLUE_DIR, WORD_VECTORS

from kdbert.data.load import TaskOptions
from kdbert.deploy.int8_kernels import cpu_int8_facts
from kdbert.methods.front import distill_task

TASK_FIELDS = {field.name for field in fields(TaskOptions)}
CANDIDATE = "bilstm-h150"
EVALUATIONS = 4


def source(vectors: str, options: dict) -> str:
    """The ``--word-vectors`` value ``vectors`` stands for."""
    if vectors == "glove":
        return WORD_VECTORS
    return f"encoder:{options['teacher']}" if vectors == "encoder:teacher" else vectors


def evaluations(run: Path) -> list[dict]:
    """Each evaluation of a finished run: step, held-out and dev score."""
    rows = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    return [{"step": row["step"], "held_out": row["eval"]["selection_score"], "dev": row["eval"]["score"]}
            for row in rows if "eval" in row]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--search", required=True, help="a compress output folder with runs/bilstm-h150")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--vectors", nargs="+", default=["glove", "encoder:default"])
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    search = Path(args.search)
    recorded = json.loads((search / "runs" / CANDIDATE / "run_config.json").read_text())
    task = TaskOptions(**{**{k: v for k, v in recorded.items() if k in TASK_FIELDS and v is not None},
                          "data_dir": args.data_dir})
    base = {k: v for k, v in recorded.items() if k not in TASK_FIELDS and k != "command" and v is not None}
    for vectors in args.vectors:
        out = search / "vectors" / str(args.steps) / vectors.replace(":", "-")
        options = {**base, "word_vectors": source(vectors, base), "max_steps": args.steps,
                   "eval_every": args.steps // EVALUATIONS, "seed": 42, "no_progress": True}
        if (out / "distill_report.json").is_file():
            report = json.loads((out / "distill_report.json").read_text())
        else:
            report = distill_task(task, options, str(out), overwrite=True)
        student = report["student"]
        row = {"evaluations": evaluations(out), "train_seconds": report["train_seconds"],
               "embedding_dim": student["config"]["embedding_dim"], "vocab_size": student["vocab_size"],
               "type_coverage": student["embeddings"]["type_coverage"], "word_vectors": options["word_vectors"]}
        save_result("bilstm_vectors", f"{task.task}/{vectors}", {
            **machine_info(), "cpu": cpu_int8_facts(), "search": str(search), "steps": args.steps, **row,
            "command": f"OMP_NUM_THREADS=1 python benchmarks/bilstm_vectors.py --search {args.search} "
                       f"--steps {args.steps} --vectors {' '.join(args.vectors)}"})
        print(f"{task.task} {vectors}: {row['evaluations'][-1]} in {row['train_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
