"""Augmented candidates of ``kdbert compress``: the same shape trained on more rows.

``--augment bilstm`` (kinds, comma-separated, or ``all``) adds, beside each kept candidate of those
kinds, a variant named ``<candidate>-aug`` whose runs also train on new versions of the training
rows made by the distilled BiLSTM's rules (:class:`~kdbert.augment.bilstm.BiLSTMAugmenter`:
masking, same-POS swaps, n-gram fragments), labelled by the teacher (``--unlabelled``). Whether
augmentation helps depends on the task (in BENCHMARKS.md it gave the BiLSTM +7 points on STS-B and
cost it 4 on RTE), so the variant competes with its plain twin and the held-out rows decide.

The versions are made from the training rows left after the hold-out (the held-out rows and
their copies never train), at most ``copies`` per row and, for large tasks, fewer so that they
number at most ``max_rows``: the teacher labels each once, and that cost counts in the variant's
first run. They are written once per search to ``augmented.jsonl`` (resumably, with the texts
only), whose teacher logits are stored beside it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

from kdbert.compress.recipes import kind
from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate

SUFFIX = "-aug"
ROWS_FILE = "augmented.jsonl"
KINDS = ("bert", "mobilebert", "bilstm")


@dataclass(frozen=True)
class AugmentSettings:
    """Which candidate kinds get an augmented variant, how many versions per training row at most,
    the cap on all versions, and where NLTK's POS tagger is (None: NLTK's data path)."""

    kinds: tuple[str, ...] = ()
    copies: int = 20
    max_rows: int = 50_000
    nltk_data: str | None = None

    @classmethod
    def parse(cls, augment: str | None, **settings) -> AugmentSettings:
        """From ``--augment`` (kinds, comma-separated; ``all``; None or ``none``: no variants)."""
        words = [w.strip() for w in (augment or "").split(",") if w.strip() and w.strip() != "none"]
        kinds = KINDS if words == ["all"] else tuple(words)
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise KdbertError(f"--augment {augment}: unknown kind {unknown[0]!r}; use kinds among {', '.join(KINDS)}, "
                              "comma-separated, or all")
        return cls(kinds=kinds, **settings)


def is_augmented(name: str) -> bool:
    return name.endswith(SUFFIX)


def base_name(name: str) -> str:
    """The plain candidate a variant was made from (its shape, hence its speed)."""
    return name[: -len(SUFFIX)] if is_augmented(name) else name


def with_variants(candidates: list[Candidate], kinds: tuple[str, ...]) -> list[Candidate]:
    """``candidates`` and, after them, an augmented variant of each whose kind is in ``kinds``."""
    return list(candidates) + [replace(c, name=c.name + SUFFIX) for c in candidates if kind(c) in kinds]


def write_augmented_rows(train_rows: list, text_fields: list[str], out: Path, settings: AugmentSettings,
                         seed: int) -> dict:
    """New versions of ``train_rows`` (:class:`~kdbert.data.glue.Example`) in ``out/augmented.jsonl``,
    keyed by ``text_fields`` (the names ``--unlabelled`` reads); each row gets
    ``min(copies, max_rows // len(train_rows))`` tries (at least one), duplicates dropped.
    Rerun with the same rows and settings, it continues or reuses the file. Returns the facts for
    the report (rows in and out, tries per row)."""
    from kdbert.augment.bilstm import BiLSTMAugmenter
    from kdbert.augment.pos_tagging import NltkTagger
    from kdbert.augment.tinybert import write_augmented_rows as write_rows

    tries = max(1, min(settings.copies, settings.max_rows // max(1, len(train_rows))))
    path = out / ROWS_FILE
    rows = [dict(zip(text_fields, row.texts)) for row in train_rows]
    facts = {"file": str(path), "input_rows": len(rows), "tries_per_row": tries}
    tagger = NltkTagger(settings.nltk_data)
    texts = [text for row in rows for text in row.values()]
    augmenter = BiLSTMAugmenter.from_texts(texts, tagger, n_iter=tries, seed=seed)
    fingerprint = json.dumps({"rows": hashlib.blake2b(json.dumps(rows).encode(), digest_size=16).hexdigest(),
                              "columns": text_fields, "settings": augmenter.settings()})
    stamp = Path(f"{path}.fingerprint")
    if path.is_file() and stamp.is_file() and stamp.read_text() == fingerprint:
        with path.open() as lines:
            return {**facts, "rows": sum(1 for _ in lines)}
    if path.is_file() or (stamp.is_file() and stamp.read_text() != fingerprint):
        raise KdbertError(f"{path} holds rows augmented from other rows or settings; use a new --output-dir")

    def new_versions(chunk: list[dict]) -> list[dict]:
        versions = augmenter.augment([tuple(row[c] for c in text_fields) for row in chunk])
        return [dict(zip(text_fields, texts)) for row_versions in versions for texts in row_versions[1:]]

    out.mkdir(parents=True, exist_ok=True)
    stamp.write_text(fingerprint)  # first: a killed run resumes its .partial file under the same stamp
    written = write_rows(rows, text_fields, path, new_versions, fingerprint)
    return {**facts, "rows": written}
