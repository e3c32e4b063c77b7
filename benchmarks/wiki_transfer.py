"""Transfer sets cut from the Wikipedia corpus for the recipe study (``recipe_ablation.py``): rows the
teacher labels, drawn to resemble a task's own.

    python benchmarks/wiki_transfer.py --task mrpc --rows 30000 --out runs/mined/mrpc-pairs.jsonl
    python benchmarks/wiki_transfer.py --task cola --rows 30000 --out runs/mined/cola-sentences.jsonl

*Sentences like a single-text task's* (:func:`sentences_like`): the corpus's sentences of 4-64 words
(:func:`kdbert.compress.transfer.sentences`) drawn so that their word counts follow the training rows'
(each count's share of the training rows times ``rows``, as far as the corpus holds them).

*Pairs mined by word overlap* (:func:`mined_pairs`): ``kdbert mine-pairs``'s pairs
(:mod:`kdbert.compress.mined_pairs`, seed 0), written as JSONL rows with the task's text fields. The
summary compares their cosines with the task's own training pairs' under the same vectoriser.

Both files are written once, atomically; a rerun reuses them.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path

import numpy as np

from paths import CORPUS, GLUE_DIR

from kdbert.compress.mined_pairs import mine_pairs, write_rows
from kdbert.compress.transfer import sentences, text_lines
from kdbert.data.load import TaskOptions, load_task


def mined_pairs(out: Path, task: TaskOptions, rows: int, corpus: str = CORPUS, low: float = 0.5) -> Path:
    """``out`` (JSONL, the task's two text fields a row; written once, atomically): at most ``rows``
    mined pairs (module doc)."""
    if out.is_file():
        return out
    data = load_task(task)
    mined = mine_pairs([corpus], low, rows, seed=0)
    own = mined.cosines_of([example.texts for example in data.train])
    quartiles = lambda values: " ".join(f"{q:.2f}" for q in np.percentile(values, [5, 25, 50, 75, 95]))
    print(f"mined: {len(mined.pairs):,} pairs of {mined.sentences:,} sentences (cosine >= {low}); cosine "
          f"5/25/50/75/95%: mined {quartiles(mined.cosines)}, {data.spec.name}'s training pairs {quartiles(own)}",
          flush=True)
    return write_rows(out, list(data.spec.text_fields), mined.pairs)


def sentences_like(out: Path, task: TaskOptions, rows: int, corpus: str = CORPUS) -> Path:
    """``out`` (JSONL, the task's text field a row; written once, atomically): about ``rows`` corpus
    sentences whose word counts follow the task's training rows' (module doc), shuffled with seed 0."""
    if out.is_file():
        return out
    data = load_task(task)
    (field,) = data.spec.text_fields
    lengths = Counter(len(example.texts[0].split()) for example in data.train)
    by_length: dict[int, list[str]] = {}
    for sentence in dict.fromkeys(s for line in text_lines(Path(corpus)) for s in sentences(line)):
        by_length.setdefault(len(sentence.split()), []).append(sentence)
    draw = random.Random(0)
    chosen = []
    for length, count in sorted(lengths.items()):
        found = by_length.get(length, [])
        chosen += draw.sample(found, min(len(found), round(rows * count / len(data.train))))
    draw.shuffle(chosen)
    words = lambda texts: sum(len(t.split()) for t in texts) / len(texts)
    print(f"sentences: {len(chosen):,} of the corpus, {words(chosen):.1f} words on average; {data.spec.name}'s "
          f"training rows {words([e.texts[0] for e in data.train]):.1f}", flush=True)
    return write_rows(out, [field], [(sentence,) for sentence in chosen])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="mrpc", help="a GLUE task: a pair task's pairs are mined, a single "
                        "text task's sentences drawn like its rows")
    parser.add_argument("--rows", type=int, default=30000)
    parser.add_argument("--low", type=float, default=0.5, help="pairs: the least cosine a kept pair has")
    parser.add_argument("--out", required=True)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    task = TaskOptions(task=args.task, data_dir=args.data_dir)
    if len(load_task(task).spec.text_fields) == 2:
        mined_pairs(Path(args.out), task, args.rows, low=args.low)
    else:
        sentences_like(Path(args.out), task, args.rows)


if __name__ == "__main__":
    main()
