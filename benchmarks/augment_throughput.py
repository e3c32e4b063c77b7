"""Throughput of TinyBERT augmentation: batched (1 and 2 worker processes) vs one MLM call per word.

    python benchmarks/augment_throughput.py MLM_DIR [--task RTE] [--n 50] [--threads 2] [--bf16]

MLM_DIR is a BertForMaskedLM folder, e.g. written by ``kdbert.methods.mlm_head.fit_mlm_head`` for the
default teacher. Sentences are the first N texts of the task's train.tsv (for pair tasks both
columns, row by row). Modes run interleaved, slice by slice (``--slice`` sentences), so that
background load on a shared machine hits all of them alike; each mode gets a warm-up first and
worker start-up is timed apart. Prints sentences/s per mode, the speedup over one-at-a-time and
how many sentences' outputs equal one-at-a-time's, and records it all in ``--out`` (default
benchmarks/results/augment_throughput.json) under the key ``TASK_N_tTHREADS``, replacing an
earlier result with that key.
This process uses ``--threads`` torch threads (default 1, so 1 worker = 1 core); its CPU seconds
are recorded too, a measure of work that background load barely changes.

Modes:
- ``one_at_a_time``: kdbert's algorithm, one MLM forward per masked word (batch size 1).
- ``batched_1_worker`` / ``batched_2_workers``: all mask queries batched, in this process or in
  2 spawned processes (1 torch thread each).
- ``batched_1_worker_bf16`` / ``batched_2_workers_bf16`` (``--bf16``): the same with a bfloat16
  copy of the model (fast on CPUs with AMX); its candidates differ slightly from float32, so
  outputs are compared only.
- ``reference_style``: the reference script's whole loop, one sentence and one word at a time
  (see :func:`reference_style`); the speedups are against it.
- ``reference_style_mlm``: only the MLM calls of that loop, one full ``BertForMaskedLM`` forward
  with vocabulary logits at every position per masked word (a lower bound on the reference's time).
"""

from __future__ import annotations

import argparse
import copy
import csv
import datetime
import json
import os
import platform
import random
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, BertForMaskedLM

from paths import GLUE_DIR, WORD_VECTORS

from kdbert.augment.tinybert import STOP_WORDS, TinyBertAugmenter, load_word_vectors

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


def reference_style(model, tokenizer, word_vectors, top_k: int, n_aug: int, p: float, texts: list[str],
                    seed: int = 0) -> list[list[str]]:
    """The reference script's per-sentence loop, re-created on our tokenizer and model.

    For each word of the normalised, pre-tokenised sentence that is alphabetic and not a stop word:
    re-tokenise the sentence to find the word's pieces; one piece -> tokenise again, one full
    forward of ``[CLS] masked [SEP] sentence [SEP]`` with vocabulary logits at every position, a
    full sort of the vocabulary at the mask, the top k without ``##`` pieces; several pieces -> a
    fresh cosine search and full sort over the word vectors (no cache). Then ``n_aug`` attempts
    with Python's ``random``, joined with spaces, deduplicated by list lookup. Its outputs are
    lower-cased and space-joined, so they are not compared with kdbert's.
    """
    words, matrix = word_vectors
    word_index = {w: i for i, w in enumerate(words)}
    normalizer, pre_tokenizer = tokenizer.backend_tokenizer.normalizer, tokenizer.backend_tokenizer.pre_tokenizer
    rng = random.Random(seed)
    outputs = []
    for text in texts:
        tokens = [w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]
        candidates = {}
        for idx, word in enumerate(tokens):
            if not word.isalpha() or word in STOP_WORDS:
                continue
            enc = tokenizer(text, add_special_tokens=False)
            pieces = [i for i, w in enumerate(enc.word_ids()) if w == idx]
            if len(pieces) == 1:
                ids = tokenizer(text, add_special_tokens=False)["input_ids"]
                masked = [*ids[:pieces[0]], tokenizer.mask_token_id, *ids[pieces[0] + 1:]]
                seq = [tokenizer.cls_token_id, *masked, tokenizer.sep_token_id, *ids, tokenizer.sep_token_id]
                seq = torch.tensor([seq[:model.config.max_position_embeddings]])
                types = torch.zeros_like(seq)
                types[0, len(ids) + 2:] = 1
                with torch.inference_mode():
                    logits = model(input_ids=seq, token_type_ids=types).logits
                best = torch.argsort(logits[0, pieces[0] + 1], descending=True)[:top_k].tolist()
                found = [t for t in tokenizer.convert_ids_to_tokens(best) if not t.startswith("##")]
            elif word in word_index:
                sims = matrix @ matrix[word_index[word]]
                sims[word_index[word]] = -np.inf
                found = [words[j] for j in np.argsort(-sims)[:top_k]]
            else:
                found = []
            candidates[idx] = found or [word]
        sentences = [text]
        for _ in range(n_aug):
            new = list(tokens)
            for idx, found in candidates.items():
                choice = rng.choice(found)
                if rng.random() < p:
                    new[idx] = choice
            if " ".join(new) not in sentences:
                sentences.append(" ".join(new))
        outputs.append(sentences)
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mlm_dir")
    parser.add_argument("--task", default="RTE", choices=sorted(TEXT_COLUMNS))
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--slice", type=int, default=10, help="sentences per interleaved slice")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads in this process")
    parser.add_argument("--bf16", action="store_true", help="also time a bfloat16 copy of the model, batched")
    parser.add_argument("--glove", default=WORD_VECTORS)
    parser.add_argument("--glue-dir", default=GLUE_DIR)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "augment_throughput.json"),
                        help="JSON file of results; this run replaces the entry with its key")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    texts = read_sentences(Path(args.glue_dir), args.task, args.n)
    model = BertForMaskedLM.from_pretrained(args.mlm_dir)
    tokenizer = AutoTokenizer.from_pretrained(args.mlm_dir)
    start = time.perf_counter()
    vectors = load_word_vectors(args.glove)
    glove_s = time.perf_counter() - start

    single = TinyBertAugmenter(model, tokenizer, vectors, batch_size=args.batch_size)
    pooled = TinyBertAugmenter(model, tokenizer, vectors, batch_size=args.batch_size, num_workers=2)
    modes = {
        "one_at_a_time": single.augment_one_at_a_time,
        "batched_1_worker": single.augment,
        "batched_2_workers": pooled.augment,
        "reference_style": lambda t: reference_style(model, tokenizer, vectors, single.top_k, single.n_aug,
                                                     single.p, t),
        "reference_style_mlm": lambda t: reference_style_mlm(model, tokenizer, single.top_k, t),
    }
    if args.bf16:
        bf16_model = copy.deepcopy(model).to(torch.bfloat16)
        fast = TinyBertAugmenter(bf16_model, tokenizer, vectors, batch_size=args.batch_size)
        fast_pooled = TinyBertAugmenter(bf16_model, tokenizer, vectors, batch_size=args.batch_size, num_workers=2)
        modes["batched_1_worker_bf16"] = fast.augment
        modes["batched_2_workers_bf16"] = fast_pooled.augment
    warmups = {}
    for name, fn in modes.items():
        start = time.perf_counter()
        fn(texts[:2])
        warmups[name] = time.perf_counter() - start
    seconds, cpu_seconds = dict.fromkeys(modes, 0.0), dict.fromkeys(modes, 0.0)
    outputs = {name: [] for name in modes}
    for begin in range(0, len(texts), args.slice):
        for name, fn in modes.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            out = fn(texts[begin:begin + args.slice])
            seconds[name] += time.perf_counter() - start
            cpu_seconds[name] += time.process_time() - cpu_start
            outputs[name] += out or []
    pooled.close()
    if args.bf16:
        fast_pooled.close()

    results = {}
    for name in modes:
        row = {"seconds": round(seconds[name], 2), "sentences_per_s": round(len(texts) / seconds[name], 2),
               "cpu_seconds_this_process": round(cpu_seconds[name], 2),
               "speedup_vs_one_at_a_time": round(seconds["one_at_a_time"] / seconds[name], 2),
               "speedup_vs_reference_style": round(seconds["reference_style"] / seconds[name], 2),
               "speedup_vs_reference_style_mlm": round(seconds["reference_style_mlm"] / seconds[name], 2)}
        if not name.startswith("reference_style"):
            same = sum(a == b for a, b in zip(outputs[name], outputs["one_at_a_time"], strict=True))
            row["sentences_identical_to_one_at_a_time"] = f"{same}/{len(texts)}"
        results[name] = row
        print(f"{name:24s} {row['sentences_per_s']:7.2f} sentences/s  x{row['speedup_vs_one_at_a_time']:.2f} vs "
              f"one-at-a-time  x{row['speedup_vs_reference_style']:.2f} vs reference-style  "
              f"identical {row.get('sentences_identical_to_one_at_a_time', '-')}")
    for name in modes:
        if "2_workers" in name:
            results[name]["startup_and_warmup_s"] = round(warmups[name], 2)

    report = {
        "task": args.task, "sentences": len(texts), "slice": args.slice, "batch_size": args.batch_size,
        "replaceable_words_with_candidates": sum(len(single.candidates(t)) for t in texts),
        "augmented_versions": sum(len(o) - 1 for o in outputs["one_at_a_time"]),
        "n_aug": single.n_aug, "top_k": single.top_k, "p": single.p, "glove_load_s": round(glove_s, 2),
        "results": results, "mlm_dir": args.mlm_dir,
        "load_average_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "machine": {"cpus": os.cpu_count(), "torch_threads": args.threads, "torch": torch.__version__,
                    "platform": platform.platform()},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    out = Path(args.out)
    recorded = json.loads(out.read_text()) if out.is_file() else {}
    key = f"{args.task.lower().replace('-', '')}_{len(texts)}_t{args.threads}"
    recorded[key] = report
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out)
    print(f"recorded {key} in {out}")


if __name__ == "__main__":
    main()
