"""Transfer sets cut from the Wikipedia corpus for the recipe study (``recipe_ablation.py``): rows the
teacher labels, drawn to resemble a task's own.

    python benchmarks/wiki_transfer.py --task mrpc --rows 30000 --out runs/mined/mrpc-pairs.jsonl
    python benchmarks/wiki_transfer.py --task cola --rows 30000 --out runs/mined/cola-sentences.jsonl
    python benchmarks/wiki_transfer.py --task cola --rows 30000 --perturb 0.5 --out runs/mined/cola-perturbed.jsonl

*Sentences like a single-text task's* (:func:`sentences_like`): the corpus's sentences of 4-64 words
(:func:`kdbert.compress.transfer.sentences`) drawn so that their word counts follow the training rows'
(each count's share of the training rows times ``rows``, as far as the corpus holds them).

*Sentences like a single-text task's, some broken* (:func:`perturbed_sentences_like`): the same
sentences, ``share`` of them each broken by one edit drawn uniformly from :data:`EDITS` (two
neighbouring words swapped, a word dropped, a word said twice, a word moved elsewhere), as the
unacceptable rows of an acceptability task are: Wikipedia's sentences are nearly all well formed,
where 30% of CoLA's training rows are labelled unacceptable.

*Pairs mined by word overlap* (:func:`mined_pairs`): ``kdbert mine-pairs``'s pairs
(:mod:`kdbert.compress.mined_pairs`, seed 0), written as JSONL rows with the task's text fields. The
summary compares their cosines with the task's own training pairs' under the same vectoriser.

Both files are written once, atomically; a rerun reuses them.
"""

from __future__ import annotations

import argparse
import json
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


def swap_neighbours(words: list[str], draw: random.Random) -> list[str]:
    i = draw.randrange(len(words) - 1)
    return words[:i] + [words[i + 1], words[i]] + words[i + 2:]


def drop_word(words: list[str], draw: random.Random) -> list[str]:
    i = draw.randrange(len(words))
    return words[:i] + words[i + 1:]


def repeat_word(words: list[str], draw: random.Random) -> list[str]:
    i = draw.randrange(len(words))
    return words[:i + 1] + words[i:]


def move_word(words: list[str], draw: random.Random) -> list[str]:
    i = draw.randrange(len(words))
    rest = words[:i] + words[i + 1:]
    j = draw.choice([k for k in range(len(rest) + 1) if k not in (i, i + 1)] or [i])
    return rest[:j] + [words[i]] + rest[j:]


EDITS = (swap_neighbours, drop_word, repeat_word, move_word)  # one of them breaks a sentence


def perturbed(texts: list[str], share: float, seed: int = 0) -> list[str]:
    """``texts`` with ``round(share * len(texts))`` of them (a seeded draw) each broken by one of
    :data:`EDITS` (words split on spaces); texts of fewer than three words are left whole."""
    draw = random.Random(seed)
    broken = set(draw.sample(range(len(texts)), round(share * len(texts))))
    return [" ".join(draw.choice(EDITS)(text.split(), draw)) if i in broken and len(text.split()) >= 3 else text
            for i, text in enumerate(texts)]


def perturbed_sentences_like(out: Path, task: TaskOptions, rows: int, share: float, whole: Path | None = None,
                             corpus: str = CORPUS) -> Path:
    """``out`` (JSONL; written once, atomically): :func:`sentences_like`'s sentences (made at ``whole``,
    default ``<out>.whole.jsonl``, or read there), ``share`` of them broken by :func:`perturbed`
    (module doc)."""
    if out.is_file():
        return out
    whole = sentences_like(whole or out.with_suffix(".whole.jsonl"), task, rows, corpus)
    (field,) = load_task(task).spec.text_fields
    texts = [json.loads(line)[field] for line in whole.read_text().splitlines()]
    print(f"perturbed: {round(share * len(texts)):,} of {len(texts):,} sentences broken by one edit", flush=True)
    return write_rows(out, [field], [(text,) for text in perturbed(texts, share)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="mrpc", help="a GLUE task: a pair task's pairs are mined, a single "
                        "text task's sentences drawn like its rows")
    parser.add_argument("--rows", type=int, default=30000)
    parser.add_argument("--low", type=float, default=0.5, help="pairs: the least cosine a kept pair has")
    parser.add_argument("--perturb", type=float, default=0.0, help="sentences: the share broken by one edit")
    parser.add_argument("--out", required=True)
    parser.add_argument("--data-dir", default=GLUE_DIR)
    args = parser.parse_args()
    task = TaskOptions(task=args.task, data_dir=args.data_dir)
    if len(load_task(task).spec.text_fields) == 2:
        mined_pairs(Path(args.out), task, args.rows, low=args.low)
    elif args.perturb:
        perturbed_sentences_like(Path(args.out), task, args.rows, args.perturb)
    else:
        sentences_like(Path(args.out), task, args.rows)


if __name__ == "__main__":
    main()
