"""Word-level inputs for word-level students (the distilled BiLSTM): words, vocabulary, word vectors.

Tokenisation rule (:func:`word_spans`): a text is split into

- the mask token ``[MASK]`` (written by :mod:`kdbert.augment.bilstm`), kept whole;
- Penn-Treebank-style negations: ``"don't"`` -> ``do`` + ``n't``, ``"can't"`` -> ``ca`` + ``n't``;
- runs of word characters (``\\w+``: Unicode letters, digits, underscore);
- clitics ``'s``, ``'re``, ``'ll``, ... (an apostrophe followed by word characters);
- every other non-space character on its own (punctuation).

So ``"It's a don't-miss film!"`` -> ``It 's a do n't - miss film !``, which matches the GloVe
6B vocabulary's (Stanford) tokenisation closely. The vocabulary is lowercased
(:func:`tokenize`); the mask token is not lowercased and has an id of its own, apart from
unknown words: the student sees a masked word where the teacher sees its mask token (Tang et
al. 2019, section 3.1), and an unknown word stays an unknown word.

The vocabulary (:class:`Vocab`) holds ``[PAD]`` (id 0), ``[UNK]`` (id 1), ``[MASK]`` (id 2),
then every word of the training texts that occurs at least ``min_count`` times, most frequent
first (ties alphabetical), so a vocabulary built from the same texts is the same on every
machine; :meth:`Vocab.extended` appends other words (the BiLSTM adds the word vectors' most
frequent words, :func:`kdbert.families.bilstm.model.init_bilstm`). A ``vocab.txt`` written before
``[MASK]`` had its own id (``[PAD]``, ``[UNK]``, then words) still loads: its students were
trained with ``[MASK]`` read as ``[UNK]``, so there it still is.

Word vectors (:func:`read_word_vectors`) come from GloVe text files (``word v1 ... vD`` per line)
or word2vec text files (the same after a ``COUNT DIM`` header line), plain or ``.gz``; both list
the most frequent words first, which :func:`frequent_file_words` reads off;
:func:`embedding_matrix` turns them into the student's initial embedding matrix.
"""

from __future__ import annotations

import gzip
import re
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from kdbert.data.masking import MASK_TOKEN
from kdbert.errors import KdbertError

PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"

_WORD = re.compile(r"\[MASK\]|(?i:n't)\b|\w+?(?=(?i:n't)\b)|\w+|'\w+|[^\w\s]")


def word_spans(text: str) -> list[tuple[str, int, int]]:
    """``(word, start, end)`` for each word of ``text`` as written (case kept); see the module doc."""
    return [(m.group(), m.start(), m.end()) for m in _WORD.finditer(text)]


def tokenize(text: str) -> list[str]:
    """The lowercased words of ``text`` (the mask token stays ``[MASK]``)."""
    return [w if w == MASK_TOKEN else w.lower() for w in _WORD.findall(text)]


def ranked_words(texts: Iterable[str]) -> dict[str, int]:
    """Counts of the words of ``texts`` (``[MASK]`` left out), most frequent first, ties alphabetical."""
    counts = Counter(word for text in texts for word in tokenize(text))
    counts.pop(MASK_TOKEN, None)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


@dataclass
class Vocab:
    """Word <-> id map of a word-level student. ``words[i]`` is the word with id ``i``;
    ``counts`` (training-data frequencies) is known only for a freshly built vocabulary.
    :attr:`mask_id` is 2, or :attr:`unk_id` in a vocabulary without ``[MASK]`` (see the module doc)."""

    words: list[str]
    counts: dict[str, int] | None = field(default=None, compare=False)

    pad_id = 0
    unk_id = 1

    def __post_init__(self):
        if self.words[:2] != [PAD_TOKEN, UNK_TOKEN]:
            raise KdbertError(f"a vocabulary starts with {PAD_TOKEN} and {UNK_TOKEN}, not {self.words[:2]}")
        self.index = {word: i for i, word in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise KdbertError("the vocabulary lists a word twice; rebuild it")
        self.mask_id = self.index.get(MASK_TOKEN, self.unk_id)
        if self.mask_id not in (2, self.unk_id):
            raise KdbertError(f"{MASK_TOKEN} is entry {self.mask_id} of the vocabulary, not entry 2 (after "
                              f"{PAD_TOKEN} and {UNK_TOKEN}); rebuild it")

    def __len__(self) -> int:
        return len(self.words)

    @property
    def num_reserved(self) -> int:
        """How many ids the reserved entries take (``[PAD]``, ``[UNK]`` and ``[MASK]`` if present)."""
        return 2 if self.mask_id == self.unk_id else 3

    @classmethod
    def build(cls, texts: Iterable[str], min_count: int = 1, max_size: int | None = None,
              source: str = "the training data") -> Vocab:
        """Vocabulary of the words in ``texts`` seen at least ``min_count`` times (at most
        ``max_size`` words, the most frequent). ``source`` names the data in the error raised
        when no word qualifies."""
        if min_count < 1:
            raise KdbertError(f"--min-count must be at least 1 (got {min_count})")
        counts = ranked_words(texts)
        kept = [w for w, c in counts.items() if c >= min_count][:max_size]
        if not kept:
            raise KdbertError(f"empty vocabulary: no word of {source} occurs at least {min_count} time(s); "
                              "check --text-columns or lower --min-count")
        return cls([PAD_TOKEN, UNK_TOKEN, MASK_TOKEN, *kept], {w: counts[w] for w in kept})

    def extended(self, words: Iterable[str]) -> Vocab:
        """This vocabulary with ``words`` it lacks appended, in their order (ids already given stay;
        ``counts`` stays that of the training data, so the new words have none)."""
        new = [w for w in dict.fromkeys(words) if w not in self.index]
        return Vocab([*self.words, *new], self.counts)

    def encode(self, text: str) -> list[int]:
        """Word ids of ``text``: unknown words give :attr:`unk_id`, ``[MASK]`` gives
        :attr:`mask_id`. An empty text gives ``[unk_id]``, so every row has at least one position."""
        ids = [self.index.get(word, self.unk_id) for word in tokenize(text)]
        return ids or [self.unk_id]

    def save(self, path: str | Path) -> None:
        """One word per line, in id order (``vocab.txt``)."""
        Path(path).write_text("".join(word + "\n" for word in self.words), encoding="utf-8")

    def save_pretrained(self, folder: str | Path) -> None:
        """``folder/vocab.txt`` (the tokenizer's method name, so the trainer saves a vocabulary
        beside a word-level student as it saves a tokenizer beside an HF one)."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        self.save(Path(folder) / "vocab.txt")

    @classmethod
    def load(cls, path: str | Path) -> Vocab:
        path = Path(path)
        if not path.is_file():
            raise KdbertError(f"vocabulary file {path} does not exist; is this a word-level student folder?")
        words = path.read_text(encoding="utf-8").split("\n")
        if words and words[-1] == "":
            words.pop()
        try:
            return cls(words)
        except KdbertError as exc:
            raise KdbertError(f"{path}: {exc}") from None


def oov_rate(vocab: Vocab, counts: dict[str, int]) -> float:
    """The share of the word occurrences ``counts`` (e.g. :func:`ranked_words` of dev texts) that
    ``vocab`` reads as ``[UNK]``, rounded to 4 places."""
    unknown = sum(count for word, count in counts.items() if word not in vocab.index)
    return round(unknown / sum(counts.values()), 4)


@dataclass
class WordVectors:
    """Vectors read from a file: ``vectors[i]`` (float32, D values) belongs to ``words[i]``."""

    words: list[str]
    vectors: np.ndarray
    path: str

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]


def _open_binary(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _header_dim(parts: list[str]) -> int | None:
    """The dimension a word2vec text header (``COUNT DIM``, the first line's fields) gives, else None."""
    return int(parts[1]) if len(parts) == 2 and all(p.isdigit() for p in parts) else None


def _missing_file(path: Path) -> KdbertError:
    return KdbertError(f"word-vector file {path} does not exist; pass a GloVe (.txt/.txt.gz) or "
                       "word2vec text file with --word-vectors")


def _vector_lines(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """``(line number, word, its D number fields)`` of each line of a GloVe or word2vec text file,
    in file order (a word2vec header and blank lines skipped; D from the header, else the first line).
    Raises :class:`KdbertError` naming the file (and line) for a missing or binary file and a line
    with too few fields."""
    if not path.is_file():
        raise _missing_file(path)
    dim = None
    line_no = 0
    try:
        with _open_binary(path) as handle:
            for line_no, raw in enumerate(handle, 1):
                line = raw.decode("utf-8")
                parts = line.rstrip().split(" ")
                if line_no == 1 and _header_dim(parts) is not None:
                    dim = _header_dim(parts)
                    continue
                if not line.strip():
                    continue
                if dim is None:
                    dim = len(parts) - 1
                if dim < 1 or len(parts) < dim + 1:
                    raise KdbertError(
                        f"{path}:{line_no}: expected a word and {dim} numbers, found {len(parts)} field(s); "
                        "--word-vectors takes GloVe text ('word v1 ... vD') or word2vec text (a 'COUNT DIM' "
                        "header, then the same)")
                yield line_no, " ".join(parts[:-dim]), parts[-dim:]
    except UnicodeDecodeError:
        raise KdbertError(f"{path}:{line_no}: not UTF-8 text (a binary word2vec file?); convert it to "
                          "word2vec text format (e.g. gensim's save_word2vec_format(binary=False))") from None
    except (OSError, EOFError) as exc:
        raise KdbertError(f"{path}: cannot read it ({exc}); is it a complete text or .gz file?") from None


def read_word_vectors(path: str | Path, wanted: Iterable[str] | None = None,
                      expected_dim: int | None = None) -> WordVectors:
    """Read a GloVe or word2vec text file (``.gz`` ok), keeping the vectors of ``wanted`` words.

    Without ``wanted`` every vector is kept. A file word matches a wanted word exactly, or
    else lowercased (so cased word2vec files serve a lowercased vocabulary; an exact match wins).
    Every line is checked for the field count; the numbers of kept lines are parsed. Words with
    spaces (a few lines of glove.840B) are read as the fields before the last D.
    Raises :class:`KdbertError` naming the file (and line) for a missing or binary file, a
    malformed line, a dimension other than ``expected_dim``, and a file with no vectors.
    """
    path = Path(path)
    wanted = None if wanted is None else set(wanted)
    found: dict[str, np.ndarray] = {}
    exact: set[str] = set()
    dim = None
    for line_no, word, numbers in _vector_lines(path):
        dim = len(numbers)
        key = word if wanted is None or word in wanted else word.lower()
        if (wanted is not None and key not in wanted) or key in exact or (key != word and key in found):
            continue
        try:
            found[key] = np.array(numbers, dtype=np.float32)
        except ValueError:
            raise KdbertError(f"{path}:{line_no}: the last {dim} fields are not all numbers; "
                              "fix the line or the file's format") from None
        if key == word:
            exact.add(key)
    if dim is None:
        raise KdbertError(f"{path} contains no word vectors; pass a GloVe or word2vec text file")
    if expected_dim is not None and dim != expected_dim:
        raise KdbertError(f"{path}: the vectors have {dim} dimensions but the student's embeddings have "
                          f"{expected_dim}; set --embedding-dim {dim} or use a {expected_dim}-d file")
    words = list(found)
    matrix = np.stack([found[w] for w in words]) if words else np.zeros((0, dim), np.float32)
    return WordVectors(words, matrix, str(path))


def is_vocab_word(word: str) -> bool:
    """Whether :func:`tokenize` reads ``word`` (lowercased) as that one word, so a vocabulary entry
    for it can match text ("e-mail", "[CLS]" or a word with a space never would)."""
    return tokenize(word) == [word.lower()]


def frequent_file_words(path: str | Path, count: int, known: Iterable[str] = ()) -> list[str]:
    """The first ``count`` words of a GloVe or word2vec text file (both list the most frequent first),
    lowercased, that are not in ``known`` and that a vocabulary can hold (:func:`is_vocab_word`), in
    file order; only as many lines as that takes are read."""
    if count < 1:
        return []
    known = set(known)
    words: dict[str, None] = {}
    with closing(_vector_lines(Path(path))) as lines:
        for _, word, _ in lines:
            word = word.lower()
            if word not in known and is_vocab_word(word):
                words[word] = None
                if len(words) == count:
                    break
    return list(words)


def word_vector_dim(path: str | Path) -> int:
    """The dimension of a GloVe or word2vec text file, from its first line (word2vec's ``COUNT DIM``
    header, else the fields after the word); refuses a missing or empty file like
    :func:`read_word_vectors`."""
    path = Path(path)
    if not path.is_file():
        raise _missing_file(path)
    try:
        with _open_binary(path) as handle:
            parts = handle.readline().decode("utf-8").rstrip().split(" ")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise KdbertError(f"{path}: cannot read its first line ({exc}); pass a GloVe or word2vec text file") from None
    if _header_dim(parts) is not None:
        return _header_dim(parts)
    if len(parts) < 2:
        raise KdbertError(f"{path}:1: expected a word and its numbers; pass a GloVe or word2vec text file")
    return len(parts) - 1


def embedding_matrix(vocab: Vocab, dim: int, vectors: WordVectors | None = None,
                     seed: int = 42) -> tuple[np.ndarray, dict]:
    """The student's initial embeddings (len(vocab), dim) and a coverage report.

    Rows of words with a vector are that vector. The other rows (``[UNK]`` and ``[MASK]``
    included) are drawn from N(0, s^2) with a generator seeded by ``seed``, where s is the
    standard deviation of the vectors found (1.0 without vectors, as ``nn.Embedding``'s default),
    so they have the scale of the rest. ``[PAD]``'s row is zero. The report gives the vocabulary
    words (reserved entries left out) with a vector (``type_coverage``) and, when the vocabulary
    has counts, the share of the words' occurrences in the training data that they cover
    (``token_coverage``).
    """
    if vectors is not None and vectors.dim != dim:
        raise KdbertError(f"{vectors.path}: the vectors have {vectors.dim} dimensions but the student's "
                          f"embeddings have {dim}; set --embedding-dim {vectors.dim}")
    lookup = {} if vectors is None else dict(zip(vectors.words, vectors.vectors))
    first = vocab.num_reserved
    rows = [i for i, w in enumerate(vocab.words[first:], start=first) if w in lookup]
    scale = float(np.stack([lookup[vocab.words[i]] for i in rows]).std()) if rows else 1.0
    matrix = np.random.default_rng(seed).normal(0.0, scale, size=(len(vocab), dim)).astype(np.float32)
    for i in rows:
        matrix[i] = lookup[vocab.words[i]]
    matrix[vocab.pad_id] = 0.0
    n_words = len(vocab) - first
    report = {"vocab_words": n_words, "with_vector": len(rows),
              "type_coverage": round(len(rows) / n_words, 4), "random_init_scale": round(scale, 4)}
    if vocab.counts:
        covered = sum(vocab.counts.get(vocab.words[i], 0) for i in rows)
        report["token_coverage"] = round(covered / sum(vocab.counts.values()), 4)
    return matrix, report
