"""How many of the word vectors' most frequent words the distilled BiLSTM's vocabulary should hold
(``--frequent-words N``): the coverage of new text against the student's size and speed.

    OMP_NUM_THREADS=1 python benchmarks/bilstm_vocab_size.py
    OMP_NUM_THREADS=1 python benchmarks/bilstm_vocab_size.py --tasks sst2 --vectors glove --counts 0 20000

For each task, ``--vectors`` (``glove``: the shared GloVe 6B 50d; ``encoder:default``: the packaged
all-MiniLM-L6-v2, whose frequent words are its tokenizer's whole words) and N, the vocabulary is
the one :func:`kdbert.families.bilstm.model.init_bilstm` builds (the training words, then the N
frequent vector words they lack; no embeddings are computed). The dev split plays new text:

- ``types`` / ``tokens``: the share of its distinct words and of its word occurrences that are not
  ``[UNK]``;
- ``fp32 MB`` / ``int8 MB``: the embedding matrix, vocabulary x width x 4 (or 1) bytes;
- ``ms/row``: a forward of the BiLSTM (hidden 150, ReLU 200, the vectors' width; siamese for
  pairs) on the dev split's first row alone, batch 1, on CPU, one thread: the median of ``--reps``,
  the students of one task and vectors timed in turns.

Row ``old`` is the vocabulary before ``--frequent-words``: the training words plus every dev word
with a vector (for an encoder every word has one), what dev scores were read against.
Records each row in ``results/bilstm_vocab_size.json`` and writes the table, with the date and
the machine, to ``results/bilstm_vocab_size.md``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from common import RESULTS_DIR, cpu_model, machine_info, save_result
from paths import GLUE_DIR, WORD_VECTORS

from kdbert.data.load import TaskOptions, load_task
from kdbert.families.bilstm.model import (FREQUENT_WORDS, BiLSTMConfig, build_bilstm, frequent_vector_words,
                                          word_vectors_dim)
from kdbert.families.bilstm.words import Vocab, frequent_file_words, ranked_words

COUNTS = (0, 10_000, 20_000, 50_000, 100_000)
TASKS = ("sst2", "mrpc", "cola")
WARMUP = 20


def source(vectors: str) -> str:
    """The ``--word-vectors`` value ``vectors`` stands for."""
    return WORD_VECTORS if vectors == "glove" else vectors


def dev_words_with_vector(vectors: str, dev_counts: dict[str, int], known: set[str]) -> list[str]:
    """The dev words that the old vocabulary added: those with a vector (every word for an encoder)."""
    new = [w for w in dev_counts if w not in known]
    if vectors != "glove":
        return new
    in_file = set(frequent_file_words(source(vectors), 10**9))
    return [w for w in new if w in in_file]


def coverage(vocab: Vocab, dev_counts: dict[str, int]) -> tuple[float, float]:
    """The percentages of the dev word types and tokens that ``vocab`` has."""
    known = [w for w in dev_counts if w in vocab.index]
    tokens = sum(dev_counts[w] for w in known) / sum(dev_counts.values())
    return round(100 * len(known) / len(dev_counts), 2), round(100 * tokens, 2)


def student_and_row(vocab: Vocab, dim: int, pair: bool, texts: tuple[str, ...]) -> tuple[torch.nn.Module, list]:
    """A fresh BiLSTM for ``vocab`` and the inputs of one row of ``texts`` (batch 1)."""
    model = build_bilstm(BiLSTMConfig(vocab_size=len(vocab), num_labels=2, pair=pair, embedding_dim=dim)).eval()
    inputs = []
    for text in texts:
        ids = torch.tensor([vocab.encode(text)])
        inputs += [ids, torch.ones_like(ids)]
    return model, inputs


def latencies_ms(runs: list[tuple[torch.nn.Module, list]], reps: int) -> list[float]:
    """Median milliseconds of one forward of each (model, inputs), timed in turns so that a change
    in the machine's load falls on all of them alike."""
    times = [[] for _ in runs]
    with torch.inference_mode():
        for _ in range(WARMUP + reps):
            for (model, inputs), timed in zip(runs, times):
                start = time.perf_counter()
                model(*inputs)
                timed.append(time.perf_counter() - start)
    return [round(1000 * statistics.median(timed[WARMUP:]), 3) for timed in times]


def measure(task: str, vectors: str, counts, reps: int, data_dir: str) -> list[dict]:
    """One row per N (and the ``old`` row) of ``task`` with ``vectors``."""
    data = load_task(TaskOptions(task, data_dir=data_dir))
    dev = [example for split in data.dev.values() for example in split]
    dev_counts = ranked_words(text for example in dev for text in example.texts)
    train = Vocab.build(text for example in data.train for text in example.texts)
    dim = word_vectors_dim(source(vectors))
    vocabularies = {"old": train.extended(dev_words_with_vector(vectors, dev_counts, set(train.index)))}
    for count in counts:
        vocabularies[count] = train.extended(frequent_vector_words(source(vectors), count, train.index))
    runs = [student_and_row(vocab, dim, data.spec.is_pair, dev[0].texts) for vocab in vocabularies.values()]
    rows = []
    for (count, vocab), ms in zip(vocabularies.items(), latencies_ms(runs, reps)):
        types, tokens = coverage(vocab, dev_counts)
        rows.append({"task": task, "vectors": vectors, "N": count, "vocab": len(vocab),
                     "added": len(vocab) - len(train), "types": types, "tokens": tokens,
                     "fp32_mb": round(len(vocab) * dim * 4 / 1e6, 2), "int8_mb": round(len(vocab) * dim / 1e6, 2),
                     "ms_per_row": ms})
        print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    return rows


def table(rows: list[dict]) -> list[str]:
    """The rows as a Markdown table."""
    lines = ["| task | vectors | N | vocab | added | dev types % | dev tokens % | fp32 MB | int8 MB | ms/row |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['task']} | {r['vectors']} | {r['N']} | {r['vocab']} | {r['added']} | {r['types']} | "
                     f"{r['tokens']} | {r['fp32_mb']} | {r['int8_mb']} | {r['ms_per_row']} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--vectors", nargs="+", default=["glove", "encoder:default"])
    parser.add_argument("--counts", nargs="+", type=int, default=list(COUNTS))
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [row for vectors in args.vectors for task in args.tasks
            for row in measure(task, vectors, args.counts, args.reps, args.data_dir)]
    info = {**machine_info(), "cpu": cpu_model(), "reps": args.reps}
    for row in rows:
        save_result("bilstm_vocab_size", f"{row['task']}/{row['vectors']}/{row['N']}", {**row, **info})
    header = ["# BiLSTM vocabulary size (`--frequent-words`)", "",
              f"Measured {info['date']} on {info['cpu']} ({info['machine']}, torch {info['torch']}, 1 thread) by "
              f"`OMP_NUM_THREADS=1 python benchmarks/bilstm_vocab_size.py` (its docstring says what each column "
              f"is). The dev split plays new text. N `old`: the vocabulary before `--frequent-words` (the "
              f"training words and every dev word with a vector). The default N is {FREQUENT_WORDS} "
              f"(`kdbert.families.bilstm.model.FREQUENT_WORDS`; why: docs/bilstm.md).", ""]
    text = "\n".join([*header, *table(rows)]) + "\n"
    Path(RESULTS_DIR, "bilstm_vocab_size.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
