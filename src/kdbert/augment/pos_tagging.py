"""Part-of-speech tags for augmentation: NLTK's English averaged perceptron tagger, offline.

This module imports nothing heavy, so worker processes that tag start fast.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Protocol

from kdbert.augment.worker_pool import OwnsWorkerPool
from kdbert.errors import KdbertError

TAGGER_PACKAGE = "averaged_perceptron_tagger_eng"


class PosTagger(Protocol):
    """Tags sentences of words: ``tagger([["The", "cat"]]) -> [["DT", "NN"]]``. ``name``
    identifies the tagger in the resume fingerprint."""

    name: str

    def __call__(self, sentences: list[list[str]]) -> list[list[str]]: ...


class NltkTagger(OwnsWorkerPool):
    """NLTK's English averaged perceptron tagger (Penn Treebank tags), loaded without downloading.

    Tagging is pure Python (about 15k words/s per core); ``num_workers > 1`` tags large batches
    in that many spawned processes (same tags). Use it as a context manager, or call
    :meth:`close`, to stop them; a script using workers must run under
    ``if __name__ == "__main__":``.
    """

    def __init__(self, nltk_data: str | os.PathLike | None = None, num_workers: int = 1):
        import nltk

        if num_workers < 1:
            raise KdbertError(f"--num-workers must be at least 1 (got {num_workers})")
        if nltk_data is not None and not Path(nltk_data).is_dir():
            raise KdbertError(f"--nltk-data {nltk_data} is not a folder")
        self.nltk_data, self.num_workers = nltk_data, num_workers
        self._tagger = _load_perceptron(nltk_data)
        self._pool: ProcessPoolExecutor | None = None
        self.name = f"nltk-{nltk.__version__}-{TAGGER_PACKAGE}"

    def __call__(self, sentences: list[list[str]]) -> list[list[str]]:
        if self.num_workers == 1 or len(sentences) < 1000:
            return _tag(self._tagger, sentences)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.num_workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_init_worker, initargs=(self.nltk_data,))
        size = -(-len(sentences) // (4 * self.num_workers))
        chunks = [sentences[i:i + size] for i in range(0, len(sentences), size)]
        return [tags for part in self._pool.map(_worker_tag, chunks) for tags in part]


def _load_perceptron(nltk_data):
    import nltk
    from nltk.tag.perceptron import PerceptronTagger

    if nltk_data is not None and str(nltk_data) not in nltk.data.path:
        nltk.data.path.insert(0, str(nltk_data))
    try:
        return PerceptronTagger(lang="eng")
    except (LookupError, OSError):
        raise KdbertError(
            f"NLTK's POS tagger ({TAGGER_PACKAGE}) was not found in {nltk_data or 'the NLTK data path'}; pass "
            f"--nltk-data DIR (a folder with taggers/{TAGGER_PACKAGE}/) or install it with "
            f"`python -m nltk.downloader {TAGGER_PACKAGE}`") from None


def _tag(tagger, sentences: list[list[str]]) -> list[list[str]]:
    return [[tag for _, tag in tagged] for tagged in tagger.tag_sents(sentences)]


_WORKER_TAGGER = None


def _init_worker(nltk_data) -> None:
    global _WORKER_TAGGER
    _WORKER_TAGGER = _load_perceptron(nltk_data)


def _worker_tag(sentences: list[list[str]]) -> list[list[str]]:
    return _tag(_WORKER_TAGGER, sentences)
