"""Raw-text corpora packed into fixed-length token sequences for MLM / general distillation.

Reading (:func:`iter_documents`)
    Inputs are ``.txt`` files, ``.gz`` files (gzip text) or directories, walked recursively in
    sorted order for their ``.txt``, ``.tsv``, ``.gz`` and suffix-less files (hidden files, a README and other
    files skipped). Each non-blank line is a paragraph. Documents end at a
    blank line, except in WikiExtractor output: there ``<doc ...>`` and ``</doc>`` lines delimit
    documents and are dropped, and blank lines inside a ``<doc>`` block (the one after the title)
    do not split it.

Packing (:func:`pack_sequences`), the BERT pre-training recipe without NSP
    1. Split each paragraph into sentences (a regex: ``.``/``!``/``?`` followed by whitespace and
       an upper-case letter, digit or opening quote/bracket).
    2. Tokenise all sentences with the fast tokenizer in batches, without special tokens.
    3. Within one document, greedily append consecutive sentences to the current chunk while it
       stays within ``max_seq_len - 2`` tokens; otherwise start a new chunk. A sentence longer
       than the budget is cut into budget-sized slices. Chunks never cross documents.
    4. Each chunk becomes ``[CLS] chunk [SEP]``.
    5. Stop after ``max_sequences`` chunks (in corpus order), then shuffle the list with
       ``numpy.random.default_rng(seed)`` (``seed=None`` keeps corpus order).

The result is a deterministic function of the files, the tokenizer and the arguments, and can be
cached as a safetensors file (flat ``int32`` ids + ``int64`` offsets) that is reused while its
recorded arguments, tokenizer and input file sizes/mtimes match.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from kdbert.errors import KdbertError

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")
_TOKENIZE_BATCH = 2048


TEXT_SUFFIXES = (".txt", ".tsv", ".gz", "")  # a folder's files read as text (WikiExtractor's wiki_00 has no suffix;
# --transfer-text reads tab-separated rows)


def corpus_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Expand files and directories into the sorted list of files to read: a file named is read
    whatever its name; in a directory, its text files (:data:`TEXT_SUFFIXES`, not hidden), so that
    a data folder's README or metadata is not read as corpus."""
    files: list[Path] = []
    for raw in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*")
                if p.is_file() and p.suffix in TEXT_SUFFIXES
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                raise KdbertError(f"corpus directory {path} contains no text files; point to a folder of .txt/.gz files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise KdbertError(f"corpus path {path} does not exist; pass an existing .txt/.gz file or directory")
    return files


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


def iter_documents(paths: Iterable[str | os.PathLike]) -> Iterator[list[str]]:
    """Yield each document as its list of paragraphs (stripped, non-empty lines)."""
    for path in corpus_files(paths):
        doc: list[str] = []
        in_doc = False
        with _open_text(path) as handle:
            for line in handle:
                line = line.strip()
                if line.startswith("<doc ") or line.startswith("</doc>") or (not line and not in_doc):
                    if doc:
                        yield doc
                    doc = []
                    in_doc = line.startswith("<doc ")
                elif line:
                    doc.append(line)
        if doc:
            yield doc


def split_sentences(paragraph: str) -> list[str]:
    """Split a paragraph into sentences with a punctuation + capital-letter heuristic."""
    return [s for s in _SENTENCE_END.split(paragraph) if s]


def _pack_documents(tokenizer, documents: Iterator[list[str]], budget: int, limit: int | None) -> list[list[int]]:
    """Greedy packing (steps 1-4 of the module docstring), tokenising many documents per call."""
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    packed: list[list[int]] = []
    pending: list[list[str]] = []

    def flush() -> None:
        doc_sentences = [[s for p in doc for s in split_sentences(p)] for doc in pending]
        sentences = [s for doc in doc_sentences for s in doc]
        ids = iter(tokenizer(sentences, add_special_tokens=False, verbose=False)["input_ids"] if sentences else [])
        for doc in doc_sentences:
            chunk: list[int] = []
            for _ in doc:
                sent = next(ids)
                if chunk and len(chunk) + len(sent) > budget:
                    packed.append([cls_id, *chunk, sep_id])
                    chunk = []
                while len(sent) > budget:
                    packed.append([cls_id, *sent[:budget], sep_id])
                    sent = sent[budget:]
                chunk.extend(sent)
            if chunk:
                packed.append([cls_id, *chunk, sep_id])
        pending.clear()

    n_sentences = 0
    for doc in documents:
        pending.append(doc)
        n_sentences += len(doc)
        if n_sentences >= _TOKENIZE_BATCH:
            flush()
            n_sentences = 0
            if limit is not None and len(packed) >= limit:
                break
    flush()
    return packed if limit is None else packed[:limit]


def _fingerprint(tokenizer, files: list[Path], max_seq_len: int, max_sequences: int | None, seed: int | None) -> str:
    stats = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return json.dumps({
        "tokenizer": str(getattr(tokenizer, "name_or_path", "")), "vocab_size": len(tokenizer),
        "max_seq_len": max_seq_len, "max_sequences": max_sequences, "seed": seed, "files": stats,
    }, sort_keys=True)


def _load_cache(cache_path: Path, fingerprint: str) -> list[list[int]] | None:
    from safetensors import safe_open

    if not cache_path.is_file():
        return None
    with safe_open(str(cache_path), framework="numpy") as f:
        if (f.metadata() or {}).get("fingerprint") != fingerprint:
            return None
        ids, offsets = f.get_tensor("input_ids"), f.get_tensor("offsets")
    return [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]


def _save_cache(cache_path: Path, packed: list[list[int]], fingerprint: str) -> None:
    from safetensors.numpy import save_file

    offsets = np.zeros(len(packed) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(s) for s in packed])
    flat = np.fromiter((t for s in packed for t in s), dtype=np.int32, count=int(offsets[-1]))
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache_path.with_name(f".{cache_path.name}.tmp-{os.getpid()}")
    save_file({"input_ids": flat, "offsets": offsets}, str(tmp), metadata={"fingerprint": fingerprint})
    os.replace(tmp, cache_path)


def pack_sequences(
    tokenizer,
    paths: Iterable[str | os.PathLike] | str | os.PathLike,
    max_seq_len: int = 128,
    max_sequences: int | None = None,
    seed: int | None = 0,
    cache_path: str | os.PathLike | None = None,
) -> list[list[int]]:
    """Pack a raw-text corpus into ``[CLS] ... [SEP]`` id lists of at most ``max_seq_len`` tokens.

    See the module docstring for the algorithm. ``cache_path`` (``.safetensors``) is loaded when
    it was written for the same arguments and files, and (re)written atomically otherwise.
    """
    if max_seq_len < 3:
        raise KdbertError(f"max_seq_len={max_seq_len} is too small; use at least 3 (room for [CLS] x [SEP])")
    if max_sequences is not None and max_sequences < 1:
        raise KdbertError(f"max_sequences={max_sequences} must be positive or None (no limit)")
    if cache_path is not None and Path(cache_path).suffix != ".safetensors":
        raise KdbertError(f"cache_path {cache_path} must end in .safetensors")
    files = corpus_files(paths)
    fingerprint = _fingerprint(tokenizer, files, max_seq_len, max_sequences, seed)
    if cache_path is not None and (cached := _load_cache(Path(cache_path), fingerprint)) is not None:
        return cached
    packed = _pack_documents(tokenizer, iter_documents(files), max_seq_len - 2, max_sequences)
    if not packed:
        raise KdbertError(f"corpus {', '.join(map(str, files))} contains no text to pack")
    if seed is not None:
        order = np.random.default_rng(seed).permutation(len(packed))
        packed = [packed[i] for i in order]
    if cache_path is not None:
        _save_cache(Path(cache_path), packed, fingerprint)
    return packed
