"""Does ``kdbert augment`` write the same file at every batch size? Measured on a real MLM head.

    python benchmarks/augment_batch_invariance.py runs/mlm-k2 --task rte --rows 200

Augments the first ``--rows`` training rows of a GLUE task (every text column) in float32 with
one mask query per MLM call (``augment_one_at_a_time``) and with each ``--settings``
``BATCH_SIZE:BATCH_TOKENS``, and counts the sentences whose augmented versions differ from the
one-at-a-time run. Padding a query to a longer batch changes the order
of floating-point sums, so two candidates whose logits nearly tie at the K-th place can swap in
or out of the top K; this measures how often that happens. Result key ``<task>/<device>`` in
``benchmarks/results/augment_batch_invariance.json`` (or ``$KDBERT_RESULTS_DIR``).
"""

from __future__ import annotations

import argparse
import time

import torch

from common import machine_info, save_result
from paths import GLUE_DIR, WORD_VECTORS

from kdbert.cli.augment import task_rows
from kdbert.augment.tinybert import TinyBertAugmenter, load_word_vectors
from kdbert.data.load import TaskOptions
from kdbert.methods.mlm_head import load_mlm_model


def differing(reference: list, other: list) -> int:
    """How many positions differ between two equally long lists."""
    return sum(a != b for a, b in zip(reference, other, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mlm", help="BertForMaskedLM folder (benchmarks/bench_mlm_head.py --unfreeze 2: runs/mlm-k2)")
    parser.add_argument("--task", default="rte")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    parser.add_argument("--word-vectors", default=WORD_VECTORS)
    parser.add_argument("--settings", nargs="+", default=["64:2048", "512:65536"],
                        help="BATCH_SIZE:BATCH_TOKENS pairs compared with one query per call")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    rows, columns, _, _ = task_rows(TaskOptions(args.task, data_dir=args.data_dir))
    texts = [str(row[c]) for row in rows[:args.rows] for c in columns]
    model, tokenizer = load_mlm_model(args.mlm)
    model = model.to(args.device)
    vectors = load_word_vectors(args.word_vectors)

    def run(batch_size: int, batch_tokens: int, one_at_a_time: bool = False) -> tuple[list, float]:
        augmenter = TinyBertAugmenter(model, tokenizer, vectors, batch_size=batch_size, batch_tokens=batch_tokens)
        started = time.time()
        outputs = augmenter.augment_one_at_a_time(texts) if one_at_a_time else augmenter.augment(texts)
        return outputs, time.time() - started

    reference, ref_seconds = run(1, 1 << 30, one_at_a_time=True)
    results = {}
    for setting in args.settings:
        batch_size, batch_tokens = (int(x) for x in setting.split(":"))
        outputs, seconds = run(batch_size, batch_tokens)
        results[setting] = {"sentences_with_other_output": differing(reference, outputs), "seconds": round(seconds, 1)}
        print(f"batch {batch_size} / {batch_tokens} tokens: {results[setting]}")
    result = {"task": args.task, "rows": args.rows, "sentences": len(texts), "mlm": args.mlm, "device": args.device,
              "dtype": "float32", "one_at_a_time_seconds": round(ref_seconds, 1), "settings": results,
              "command": f"python benchmarks/augment_batch_invariance.py {args.mlm} --task {args.task} "
                         f"--rows {args.rows} --settings {' '.join(args.settings)}", **machine_info()}
    save_result("augment_batch_invariance", f"{args.task}/{args.device}", result)


if __name__ == "__main__":
    main()
