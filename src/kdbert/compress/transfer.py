"""Unlabelled text for ``kdbert compress``'s transfer set (``--transfer-text``): rows the teacher
labels once, which the ``-aug`` variants distil on beside the training rows and their augmented
versions (:mod:`kdbert.compress.augment`).

Files are read line by line (``.gz`` too, folders expanded); WikiExtractor's ``<doc ...>`` and
``</doc>`` lines and blank lines are skipped. A line with a tab is a row of tab-separated texts (a
pair task takes the first two). Any other line is cut into sentences (after ``.``, ``!`` or ``?``
and a space before a capital letter, a digit or a quote) of ``MIN_WORDS``..``MAX_WORDS`` words:
each sentence is a row of a single-text task, and consecutive sentences of one line, two at a time,
are the rows of a pair task. The rows are shuffled with the search's seed and the first ``limit``
kept.
"""

from __future__ import annotations

import gzip
import random
import re
from pathlib import Path

from kdbert.data.corpus import corpus_files
from kdbert.errors import KdbertError

MIN_WORDS, MAX_WORDS = 4, 64
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def sentences(line: str) -> list[str]:
    """The sentences of ``line`` of ``MIN_WORDS``..``MAX_WORDS`` words (module doc)."""
    return [s for s in (part.strip() for part in SENTENCE_END.split(line))
            if MIN_WORDS <= len(s.split()) <= MAX_WORDS]


def rows_of_line(line: str, texts: int) -> list[tuple[str, ...]]:
    """The rows of ``texts`` texts one line gives (module doc)."""
    if "\t" in line:
        parts = tuple(part.strip() for part in line.split("\t"))
        return [parts[:texts]] if len(parts) >= texts and all(parts[:texts]) else []
    found = sentences(line)
    if texts == 1:
        return [(s,) for s in found]
    return [tuple(found[i:i + texts]) for i in range(0, len(found) - texts + 1, texts)]


def text_lines(path: Path):
    """The non-blank lines of a text file (``.gz`` too), stripped, WikiExtractor's ``<doc>`` lines skipped."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            line = line.strip()
            if line and not line.startswith(("<doc", "</doc>")):
                yield line


def read_transfer_text(paths: list, texts: int, limit: int, seed: int) -> list[tuple[str, ...]]:
    """At most ``limit`` rows of ``texts`` texts from ``paths`` (module doc), shuffled with ``seed``."""
    rows = [row for path in corpus_files(paths) for line in text_lines(path) for row in rows_of_line(line, texts)]
    if not rows:
        need = "sentences of 4-64 words" if texts == 1 else "lines of two tab-separated texts, or of two sentences"
        raise KdbertError(f"--transfer-text {' '.join(map(str, paths))}: no rows found; give text files with {need}")
    random.Random(seed).shuffle(rows)
    return rows[:limit]
