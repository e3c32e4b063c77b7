"""Throughput of TinyBERT augmentation: batched (1 and 2 worker processes) vs one MLM call per word.

    python benchmarks/augment_throughput.py MLM_DIR [--task RTE] [--n 50] [--out results.json]

MLM_DIR is a BertForMaskedLM folder, e.g. written by ``kdbert.mlm_head.fit_mlm_head`` for the
default teacher. Sentences are the first N texts of the task's train.tsv (for pair tasks both
columns, row by row). Each mode gets a short warm-up first; worker start-up is timed apart.
Prints sentences/s per mode and the speedup over one-at-a-time, checks the outputs agree, and
writes everything to a JSON file.

``reference_style_mlm`` times only the MLM calls the reference script makes for the same words:
one full ``BertForMaskedLM`` forward per masked word, with vocabulary logits at every position
(kdbert's one-at-a-time mode projects only the masked position).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertForMaskedLM

from kdbert.data.augment_tinybert import STOP_WORDS, TinyBertAugmenter, load_word_vectors

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TEXT_COLUMNS = {"RTE": ["sentence1", "sentence2"], "SST-2": ["sentence"]}


def read_sentences(glue_dir: Path, task: str, n: int) -> list[str]:
    with open(glue_dir / task / "train.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    columns = [rows[0].index(c) for c in TEXT_COLUMNS[task]]
    return [row[c] for row in rows[1:] for c in columns][:n]


def reference_style_mlm(model, tokenizer, top_k: int, texts: list[str]) -> None:
    """One full forward (logits at every position) per single-piece replaceable word, as the reference does."""
    for text in texts:
        enc = tokenizer(text, add_special_tokens=False)
        ids, word_ids = enc["input_ids"], enc.word_ids()
        for pos, (token, word_id) in enumerate(zip(tokenizer.convert_ids_to_tokens(ids), word_ids)):
            if word_ids.count(word_id) > 1 or not token.isalpha() or token in STOP_WORDS:
                continue
            masked = [*ids[:pos], tokenizer.mask_token_id, *ids[pos + 1:]]
            seq = torch.tensor([[tokenizer.cls_token_id, *masked, tokenizer.sep_token_id, *ids, tokenizer.sep_token_id]])
            types = torch.zeros_like(seq)
            types[0, len(ids) + 2:] = 1
            with torch.inference_mode():
                model(input_ids=seq, token_type_ids=types).logits[0, pos + 1].topk(top_k)


def timed(fn, texts):
    start = time.perf_counter()
    out = fn(texts)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mlm_dir")
    parser.add_argument("--task", default="RTE", choices=sorted(TEXT_COLUMNS))
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--glove", default=str(DATA / "glove" / "glove.6B.50d.txt.gz"))
    parser.add_argument("--glue-dir", default=str(DATA / "glue_data"))
    parser.add_argument("--out", default="augment_throughput.json")
    args = parser.parse_args()

    texts = read_sentences(Path(args.glue_dir), args.task, args.n)
    warmup = texts[:2]
    model = BertForMaskedLM.from_pretrained(args.mlm_dir)
    tokenizer = AutoTokenizer.from_pretrained(args.mlm_dir)
    start = time.perf_counter()
    vectors = load_word_vectors(args.glove)
    glove_s = time.perf_counter() - start

    def augmenter(**kw):
        return TinyBertAugmenter(model, tokenizer, vectors, batch_size=args.batch_size, **kw)

    results, outputs = {}, {}
    single = augmenter()
    n_words = sum(len(single.candidates(t)) for t in texts)
    for name, fn in [("one_at_a_time", single.augment_one_at_a_time), ("batched_1_worker", single.augment)]:
        fn(warmup)
        outputs[name], seconds = timed(fn, texts)
        results[name] = {"seconds": round(seconds, 2), "sentences_per_s": round(len(texts) / seconds, 2)}
    with augmenter(num_workers=2) as pooled:
        _, startup = timed(pooled.augment, warmup)
        outputs["batched_2_workers"], seconds = timed(pooled.augment, texts)
    results["batched_2_workers"] = {"seconds": round(seconds, 2), "sentences_per_s": round(len(texts) / seconds, 2),
                                    "startup_and_warmup_s": round(startup, 2)}
    reference_style_mlm(model, tokenizer, single.top_k, warmup)
    _, reference_s = timed(lambda t: reference_style_mlm(model, tokenizer, single.top_k, t), texts)
    vs_reference = round(reference_s / results["batched_1_worker"]["seconds"], 2)
    print(f"reference-style MLM calls alone: {reference_s:.2f} s; batched (1 worker) is x{vs_reference:.2f} faster")
    base = results["one_at_a_time"]["seconds"]
    for name, row in results.items():
        row["speedup"] = round(base / row["seconds"], 2)
        row["outputs_identical_to_one_at_a_time"] = outputs[name] == outputs["one_at_a_time"]
        print(f"{name:18s} {row['sentences_per_s']:8.2f} sentences/s  speedup x{row['speedup']:.2f}  "
              f"identical={row['outputs_identical_to_one_at_a_time']}")

    report = {
        "task": args.task, "sentences": len(texts), "replaceable_words_with_candidates": n_words,
        "augmented_versions": sum(len(o) - 1 for o in outputs["one_at_a_time"]),
        "batch_size": args.batch_size, "n_aug": single.n_aug, "top_k": single.top_k, "p": single.p,
        "glove_load_s": round(glove_s, 2), "results": results, "mlm_dir": args.mlm_dir,
        "reference_style_mlm_s": round(reference_s, 2), "batched_1_worker_speedup_vs_reference_style": vs_reference,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
                    "platform": platform.platform(), "processor": platform.processor()},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
