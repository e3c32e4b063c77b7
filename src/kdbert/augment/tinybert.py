"""TinyBERT data augmentation (Jiao et al. 2020, Alg. 1), batched, seeded and resumable.

For each sentence:

1. Split it into words with the tokenizer's own normaliser + pre-tokeniser (for BERT: clean
   text, lower-case and strip accents when uncased, split on whitespace and punctuation), and
   word pieces, through one fast-tokenizer call with offsets.
2. A word is *replaceable* when its normalised form is alphabetic (``[a-z]+`` after lower-casing)
   and not in :data:`STOP_WORDS`: the reference's list, which is NLTK's English list without
   what/which/who/whom/when/where/why/how, plus ``'s`` and ``'re``.
3. Candidates of a replaceable word:
   - one word piece: the MLM's ``top_k`` predictions at that piece, masked, in the input
     ``[CLS] masked_sentence [SEP] sentence [SEP]`` (token types 0 then 1). Pieces starting with
     ``##`` and bracketed tokens (``[CLS]``, ``[unused0]``, ...) are excluded *before* taking the
     top k, so there are always k (the reference takes the top k, then drops ``##`` pieces).
     Inputs longer than the model's position limit are cut there, as in the reference; a piece
     beyond the cut gets no candidates.
   - several word pieces: its ``top_k`` nearest neighbours by cosine in the word vectors (the
     first ``max_words`` of the GloVe file), the word itself excluded; none if it is not there.
   Candidates are kept sorted by vocabulary index, so tiny float differences between batch shapes
   cannot reorder them; a word whose original text is Title-case gets Title-case candidates.
4. Up to ``n_aug`` attempts: every replaceable word with candidates is replaced, with probability
   ``p``, by a uniformly drawn candidate. The draws come from a numpy Generator seeded with
   ``(seed, hash(sentence))``, so a sentence's output does not depend on its position, the batch
   size, the worker count or a resumed run. Replacement happens in the original string (the
   other characters stay as written); new distinct strings are kept, the original comes first.
   The output therefore has 1 to ``n_aug + 1`` strings. (The reference joins lower-cased tokens
   with spaces, so its "unchanged" attempts usually differ from the original and are kept.)

Speed: the reference runs one MLM forward per masked word. Here all mask queries of all
distinct input sentences are sorted by length and run in batches of at most ``batch_size``
queries and ``batch_tokens`` padded tokens (large batches of long inputs are slower per query on
CPU: they fall out of cache), and the vocabulary projection runs only at the mask position.
``augment_one_at_a_time`` runs the identical computation with batch size 1, for benchmarks. ``num_workers > 1`` spreads sentences
over spawned processes (one torch thread each). On CPU the encoder's matrix products dominate,
so batching mainly saves per-call overhead (large for short sentences and multi-threaded
torch, small for long sentences); a bfloat16 copy of the model is about 2x faster again on CPUs
with AMX, with slightly different candidates that also depend on how queries fall into batches
(``benchmarks/augment_throughput.py`` measures all of this). The model may sit on a GPU (inputs
follow it; one process then). Worker processes are spawned, so a script using ``num_workers > 1``
must call it under ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from kdbert.augment.worker_pool import OwnsWorkerPool
from kdbert.errors import KdbertError

STOP_WORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves
he him his himself she she's her hers herself it it's its itself they them their theirs themselves
this that that'll these those am is are was were be been being have has had having do does did
doing a an the and but if or because as until while of at by for with about against between into
through during before after above below to from up down in out on off over under again further
then once here there all any both each few more most other some such no nor not only own same so
than too very s t can will just don don't should should've
now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn
shouldn't wasn wasn't weren weren't won won't wouldn wouldn't 's 're
""".split())

_ALPHA = re.compile(r"[a-z]+")
BATCH_TOKENS = 2048  # default padded tokens per MLM batch; see benchmarks/augment_throughput.py
CHUNK_ROWS = 256  # input rows augmented between two checkpoints of the output (write_augmented_rows)


def load_word_vectors(path: str | os.PathLike, max_words: int = 100000) -> tuple[list[str], np.ndarray]:
    """Read the first ``max_words`` vectors of a GloVe text file (``.gz`` ok), as the reference does.

    Returns the words and a float32 matrix with L2-normalised rows (all-zero rows stay zero).
    """
    path = Path(path)
    if not path.is_file():
        raise KdbertError(f"word-vector file {path} does not exist; pass a GloVe .txt or .txt.gz file")
    opener = gzip.open if path.suffix == ".gz" else open
    words: list[str] = []
    rows: list[np.ndarray] = []
    with opener(path, "rt", encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if len(words) >= max_words:
                break
            parts = line.rstrip().split(" ")
            dim = rows[0].size if rows else len(parts) - 1  # words may contain spaces (glove.840B)
            word = " ".join(parts[:-dim]) if 0 < dim < len(parts) else ""
            try:
                rows.append(np.array(parts[-dim:], dtype=np.float32))
            except ValueError:
                word = ""
            if not word:
                raise KdbertError(f"{path} line {line_no}: expected 'word v1 ... vD' with the same D on every line")
            words.append(word)
    if not words:
        raise KdbertError(f"{path} contains no word vectors")
    matrix = np.stack(rows)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return words, matrix / np.where(norms == 0, 1, norms)


@dataclass
class _Word:
    start: int  # character span in the original text
    end: int
    pieces: list[int]  # word-piece positions in the sentence
    candidates: list[str] | None = None


def _length_batches(seqs: list, batch_size: int, batch_tokens: int):
    """Split ``seqs`` (sorted by ``len(seq[0])``, ascending) into runs of at most ``batch_size``
    items whose padded size, items x longest length, stays within ``batch_tokens`` (a single
    longer item still gets a batch of its own)."""
    batch: list = []
    for item in seqs:
        if batch and (len(batch) == batch_size or (len(batch) + 1) * len(item[0]) > batch_tokens):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


def text_seed(seed: int, text: str) -> list[int]:
    """Seed words for ``np.random.default_rng``: ``seed`` and a hash of ``text``, so a text's draws do
    not depend on where or when it is processed."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
    return [seed, *np.frombuffer(digest, dtype=np.uint32).tolist()]


class TinyBertAugmenter(OwnsWorkerPool):
    """TinyBERT augmentation with a ``BertForMaskedLM`` and word vectors; see the module docstring.

    ``word_vectors`` is the ``(words, matrix)`` pair from :func:`load_word_vectors`.
    """

    def __init__(self, mlm_model, tokenizer, word_vectors, p: float = 0.4, n_aug: int = 20, top_k: int = 15,
                 seed: int = 42, batch_size: int = 64, batch_tokens: int = BATCH_TOKENS, num_workers: int = 1):
        if not getattr(tokenizer, "is_fast", False):
            raise KdbertError("TinyBertAugmenter needs a fast tokenizer; load it with AutoTokenizer.from_pretrained")
        if not 0 <= p <= 1 or min(n_aug, top_k, batch_size, batch_tokens, num_workers) < 1:
            raise KdbertError(f"need 0<=p<=1 and n_aug, top_k, batch_size, batch_tokens, num_workers >= 1 "
                              f"(got p={p}, n_aug={n_aug}, top_k={top_k}, batch_size={batch_size}, "
                              f"batch_tokens={batch_tokens}, num_workers={num_workers})")
        self.model = mlm_model.eval()
        self.tokenizer = tokenizer
        self.words, self.vectors = word_vectors
        self.word_index = {w: i for i, w in enumerate(self.words)}
        self.p, self.n_aug, self.top_k, self.seed = p, n_aug, top_k, seed
        self.batch_size, self.batch_tokens, self.num_workers = batch_size, batch_tokens, num_workers
        vocab = tokenizer.convert_ids_to_tokens(list(range(mlm_model.config.vocab_size)))
        self.excluded = torch.tensor([t is None or t.startswith("##") or (t.startswith("[") and t.endswith("]"))
                                      for t in vocab])
        self.vocab = vocab
        self.max_len = mlm_model.config.max_position_embeddings
        self._neighbours: dict[str, list[str]] = {}
        self._pool: ProcessPoolExecutor | None = None

    # -- public API -------------------------------------------------------------------------
    def augment(self, texts: list[str]) -> list[list[str]]:
        """Original first, then up to ``n_aug`` distinct augmented versions, for each text."""
        if self.num_workers > 1 and len(texts) > 1:
            return self._augment_in_workers(list(texts))
        return self._augment(list(texts), self.batch_size)

    def augment_one_at_a_time(self, texts: list[str]) -> list[list[str]]:
        """Same algorithm and outputs as :meth:`augment`, one MLM forward per masked word."""
        return self._augment(list(texts), 1)

    def candidates(self, text: str) -> list[tuple[str, list[str]]]:
        """``(word, candidates)`` for each replaceable word of ``text`` that has candidates."""
        words = self._candidate_words([text], self.batch_size)[0]
        return [(text[w.start:w.end], w.candidates) for w in words]

    def __getstate__(self):
        return {**self.__dict__, "_pool": None}

    # -- algorithm --------------------------------------------------------------------------
    def _augment(self, texts: list[str], batch_size: int) -> list[list[str]]:
        unique = list(dict.fromkeys(texts))  # repeated texts (e.g. MNLI premises) are analysed once
        words = dict(zip(unique, self._candidate_words(unique, batch_size)))
        return [self._sample(text, words[text]) for text in texts]

    def _candidate_words(self, texts: list[str], batch_size: int) -> list[list[_Word]]:
        """Steps 1-3: the replaceable words of each text with their candidates (empty ones dropped)."""
        normalizer = self.tokenizer.backend_tokenizer.normalizer
        enc = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        all_words, queries = [], []
        for i, text in enumerate(texts):
            words: dict[int, _Word] = {}
            for pos, (word_id, (start, end)) in enumerate(zip(enc.word_ids(i), enc["offset_mapping"][i])):
                if word_id not in words:
                    words[word_id] = _Word(start, end, [])
                words[word_id].end = end
                words[word_id].pieces.append(pos)
            kept = []
            for word in words.values():
                norm = text[word.start:word.end]
                norm = (normalizer.normalize_str(norm) if normalizer else norm).lower()
                if not _ALPHA.fullmatch(norm) or norm in STOP_WORDS:
                    continue
                if len(word.pieces) > 1:
                    word.candidates = self._glove_neighbours(norm)
                else:
                    queries.append((i, word.pieces[0], word))
                kept.append(word)
            all_words.append(kept)
        self._fill_mlm_candidates(enc["input_ids"], queries, batch_size)
        for text, words in zip(texts, all_words):
            for word in words:
                if word.candidates and text[word.start:word.end].istitle():
                    word.candidates = [c.title() for c in word.candidates]
        return [[w for w in words if w.candidates] for words in all_words]

    def _glove_neighbours(self, word: str) -> list[str]:
        if word not in self._neighbours:
            index = self.word_index.get(word)
            found: list[str] = []
            if index is not None:
                sims = self.vectors @ self.vectors[index]
                sims[index] = -np.inf
                k = min(self.top_k, len(sims) - 1)
                found = [self.words[j] for j in np.sort(np.argpartition(-sims, k - 1)[:k])] if k > 0 else []
            self._neighbours[word] = found
        return self._neighbours[word]

    @torch.inference_mode()
    def _fill_mlm_candidates(self, input_ids: list[list[int]], queries: list, batch_size: int) -> None:
        """Run every ``[CLS] masked [SEP] sentence [SEP]`` query, shortest first, in batches (see module doc)."""
        tok = self.tokenizer
        seqs = []
        for i, pos, word in queries:
            ids = input_ids[i]
            masked = [*ids[:pos], tok.mask_token_id, *ids[pos + 1:]]
            seq = [tok.cls_token_id, *masked, tok.sep_token_id, *ids, tok.sep_token_id][:self.max_len]
            if pos + 1 < self.max_len:
                seqs.append((seq, len(ids) + 2, pos + 1, word))
            else:
                word.candidates = []
        seqs.sort(key=lambda q: len(q[0]))
        base = getattr(self.model, self.model.base_model_prefix)
        device = next(self.model.parameters()).device
        for chunk in _length_batches(seqs, batch_size, self.batch_tokens):
            width = len(chunk[-1][0])
            ids = torch.full((len(chunk), width), tok.pad_token_id)
            types = torch.zeros_like(ids)
            mask = torch.zeros_like(ids)
            for row, (seq, first_len, _, _) in enumerate(chunk):
                ids[row, :len(seq)] = torch.tensor(seq)
                types[row, first_len:len(seq)] = 1
                mask[row, :len(seq)] = 1
            hidden = base(input_ids=ids.to(device), attention_mask=mask.to(device),
                          token_type_ids=types.to(device)).last_hidden_state
            at_mask = hidden[torch.arange(len(chunk), device=device), torch.tensor([q[2] for q in chunk], device=device)]
            logits = self.model.cls(at_mask).float().masked_fill(self.excluded.to(device), float("-inf"))
            top = logits.topk(self.top_k, dim=-1).indices.sort(dim=-1).values.cpu()
            for (_, _, _, word), row in zip(chunk, top.tolist()):
                word.candidates = [self.vocab[j] for j in row]

    def _sample(self, text: str, words: list[_Word]) -> list[str]:
        """Step 4: up to ``n_aug`` seeded replacement attempts, deduplicated, original first."""
        out, seen = [text], {text}
        if not words:
            return out
        rng = np.random.default_rng(text_seed(self.seed, text))
        sizes = np.array([len(w.candidates) for w in words])
        for _ in range(self.n_aug):
            picks = rng.integers(0, sizes)
            replace = rng.random(len(words)) < self.p
            parts, last = [], 0
            for word, pick, rep in zip(words, picks, replace):
                if rep:
                    parts += [text[last:word.start], word.candidates[pick]]
                    last = word.end
            new = "".join(parts) + text[last:]
            if new not in seen:
                seen.add(new)
                out.append(new)
        return out

    # -- multi-process ----------------------------------------------------------------------
    def _augment_in_workers(self, texts: list[str]) -> list[list[str]]:
        if next(self.model.parameters()).device.type != "cpu":
            raise KdbertError("num_workers > 1 runs CPU worker processes; with a GPU model use num_workers=1 "
                              "and a larger batch_size")
        if self._pool is None:
            state = {**self.__getstate__(), "num_workers": 1, "_neighbours": {}}
            self._pool = ProcessPoolExecutor(self.num_workers, mp_context=torch.multiprocessing.get_context("spawn"),
                                             initializer=_init_worker, initargs=(state,))
        n_chunks = min(len(texts), 2 * self.num_workers)
        bounds = np.linspace(0, len(texts), n_chunks + 1).astype(int)
        chunks = [texts[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        return [out for part in self._pool.map(_worker_augment, chunks) for out in part]


_WORKER: TinyBertAugmenter | None = None


def _init_worker(state: dict) -> None:
    global _WORKER
    torch.set_num_threads(1)
    _WORKER = TinyBertAugmenter.__new__(TinyBertAugmenter)
    _WORKER.__dict__.update(state)


def _worker_augment(texts: list[str]) -> list[list[str]]:
    return _WORKER.augment(texts)


def _fingerprint(rows: list[dict], columns: list[str], augmenter: TinyBertAugmenter) -> str:
    digest = hashlib.blake2b(json.dumps(rows, sort_keys=True).encode("utf-8"), digest_size=16).hexdigest()
    settings = [augmenter.p, augmenter.n_aug, augmenter.top_k, augmenter.seed]
    dtype = next(augmenter.model.parameters()).dtype
    if dtype != torch.float32:  # other precisions pick slightly different candidates
        settings.append(str(dtype))
    return json.dumps({"rows": digest, "columns": columns, "settings": settings})


def _format_rows(rows: list[dict], header: list[str], jsonl: bool) -> str:
    if jsonl:
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return "".join("\t".join(str(row.get(name, "")) for name in header) + "\n" for row in rows)


def augment_file_rows(rows: list[dict], columns_to_augment: list[str], out_path: str | os.PathLike,
                      augmenter: TinyBertAugmenter, chunk_size: int | None = None, write_header: bool = True) -> int:
    """Augment ``rows`` and write them to ``out_path`` (``.jsonl``, else TSV with a header); resumable.

    Each input row is written once unchanged, then once per augmented version of each column in
    ``columns_to_augment`` with the other columns unchanged (the reference writes the original
    once per column). See :func:`write_augmented_rows` for resume and the file protocol.
    Returns the number of rows written.
    """
    def expand(chunk: list[dict]) -> list[dict]:
        versions = {c: augmenter.augment([str(r[c]) for r in chunk]) for c in columns_to_augment}
        out_rows = []
        for i, row in enumerate(chunk):
            out_rows.append(row)
            out_rows += [{**row, c: text} for c in columns_to_augment for text in versions[c][i][1:]]
        return out_rows

    fingerprint = _fingerprint(rows, list(columns_to_augment), augmenter)
    return write_augmented_rows(rows, columns_to_augment, out_path, expand, fingerprint, chunk_size, write_header)


def write_augmented_rows(rows: list[dict], columns: list[str], out_path: str | os.PathLike,
                         expand: Callable[[list[dict]], list[dict]], fingerprint: str, chunk_size: int | None = None,
                         write_header: bool = True) -> int:
    """Write ``expand(chunk)`` for consecutive chunks of ``rows`` to ``out_path``; resumable.

    ``columns`` must exist in every row (TSV output also refuses values with tabs or newlines).
    Rows are processed ``chunk_size`` (default :data:`CHUNK_ROWS`) at a time; each chunk's output rows are appended to
    ``out_path + '.partial'`` and fsync'ed, then ``out_path + '.progress.json'`` records the rows
    and bytes done (written atomically). A rerun with the same ``fingerprint`` (which must
    identify the rows and every setting that changes the output) truncates the partial file to
    the recorded size and continues; at the end the partial file is renamed to ``out_path`` and
    the progress file removed. Returns the number of rows written. The output is ``.jsonl`` when
    ``out_path`` ends so, else TSV with the first row's keys as header (``write_header=False``
    writes none: GLUE's CoLA files have none).
    """
    out_path = Path(out_path)
    partial, progress_path = Path(f"{out_path}.partial"), Path(f"{out_path}.progress.json")
    jsonl = out_path.suffix == ".jsonl"
    for index, row in enumerate(rows):
        missing = [c for c in columns if c not in row]
        if missing:
            raise KdbertError(f"row {index} has no column {missing[0]!r}; columns are {sorted(row)}")
        if not jsonl and any("\t" in str(v) or "\n" in str(v) for v in row.values()):
            raise KdbertError(f"row {index}: a value contains a tab or newline; write to a .jsonl path instead")
    header = list(rows[0]) if rows else []
    state = {"fingerprint": fingerprint, "rows_done": 0, "rows_written": 0, "bytes": 0}
    if progress_path.is_file() and partial.is_file():
        saved = json.loads(progress_path.read_text())
        if saved.get("fingerprint") != fingerprint:
            raise KdbertError(f"{progress_path} belongs to a run with other rows or settings; delete it and "
                              f"{partial} to start over")
        state = saved
    else:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text("\t".join(header) + "\n" if write_header and not jsonl else "")
        state["bytes"] = partial.stat().st_size
    with open(partial, "r+b") as handle:
        handle.truncate(state["bytes"])
    chunk_size = chunk_size or CHUNK_ROWS
    for begin in range(state["rows_done"], len(rows), chunk_size):
        chunk = rows[begin:begin + chunk_size]
        out_rows = expand(chunk)
        with open(partial, "ab") as handle:
            handle.write(_format_rows(out_rows, header, jsonl).encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        state.update(rows_done=begin + len(chunk), rows_written=state["rows_written"] + len(out_rows),
                     bytes=partial.stat().st_size)
        tmp = progress_path.with_name(progress_path.name + ".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, progress_path)
    os.replace(partial, out_path)
    progress_path.unlink(missing_ok=True)
    return state["rows_written"]
