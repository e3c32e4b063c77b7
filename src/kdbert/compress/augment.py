"""Augmented candidates of ``kdbert compress``: the same shape trained on more rows.

``--augment bilstm`` (kinds, comma-separated, or ``all``) adds, beside each kept candidate of those
kinds, a variant named ``<candidate>-aug`` whose runs also train on new versions of the training
rows made by the distilled BiLSTM's rules (:class:`~kdbert.augment.bilstm.BiLSTMAugmenter`:
masking, same-POS swaps, n-gram fragments), labelled by the teacher (``--unlabelled``). Whether
augmentation helps depends on the task (in BENCHMARKS.md it gave the BiLSTM +7 points on STS-B and
cost it 4 on RTE), so the variant competes with its plain twin and the held-out rows decide.

The versions are made from the training rows left after the hold-out (the held-out rows and
their copies never train). The teacher labels each once, and that cost counts in the variant's
first run, so their number is capped by what it can label in ``labelling_share`` of the search's
budget (at the labeller's speed measured on this machine, :mod:`kdbert.compress.labelling`) and by ``max_rows``:
at most ``copies`` versions per row, fewer on large tasks, and when not even one each fits,
versions of the first rows only. They are written once per search to ``augmented.jsonl``
(resumably, with the texts only; ``augmented.json`` keeps the plan, so a rerun makes the same
rows, and reuses a finished file without tagging again), whose teacher logits are stored beside it.

``--transfer-text FILES`` adds unlabelled text to what the variants distil on
(:mod:`kdbert.compress.transfer`): the labelling cap is then shared, half for the augmented versions
and half for rows of that text, written after them to ``transfer.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

from kdbert.compress.recipes import kind
from kdbert.core.atomic_io import write_json
from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate
from kdbert.families.selection import KINDS as SELECTED_KINDS

SUFFIX = "-aug"
ROWS_FILE = "augmented.jsonl"
TRANSFER_FILE = "transfer.jsonl"  # the augmented rows, then the --transfer-text rows
PLAN_FILE = "augmented.json"
KINDS = (*SELECTED_KINDS, "mobilebert", "bilstm")


@dataclass(frozen=True)
class AugmentSettings:
    """Which candidate kinds get an augmented variant, how many versions per training row at most,
    the cap on all versions, and where NLTK's POS tagger is (None: NLTK's data path)."""

    kinds: tuple[str, ...] = ()
    copies: int = 20
    max_rows: int = 50_000
    nltk_data: str | None = None
    labelling_share: float = 0.1
    transfer_text: tuple[str, ...] = ()

    @classmethod
    def parse(cls, augment: str | None, transfer_text: list | None = None, **settings) -> AugmentSettings:
        """From ``--augment`` (kinds, comma-separated; ``all``; None or ``none``: no variants) and
        ``--transfer-text`` (files whose text the variants also distil on)."""
        words = [w.strip() for w in (augment or "").split(",") if w.strip() and w.strip() != "none"]
        kinds = KINDS if words == ["all"] else tuple(words)
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise KdbertError(f"--augment {augment}: unknown kind {unknown[0]!r}; use kinds among {', '.join(KINDS)}, "
                              "comma-separated, or all")
        if transfer_text and not kinds:
            raise KdbertError("--transfer-text is what the -aug variants distil on: pass --augment KINDS too "
                              "(e.g. --augment bert, or all)")
        return cls(kinds=kinds, transfer_text=tuple(str(t) for t in transfer_text or ()), **settings)

    def kinds_for(self, train_rows: int) -> tuple[str, ...]:
        """The kinds that get a variant on a task of ``train_rows`` rows: none once the rows pass
        ``max_rows``, the most new rows augmentation writes, where a variant's data would be mostly
        the plain candidate's and the variant would only share its budget (SST-2's 60k rows: the
        winner trained 1,363 steps with the variants against 7,132 without, BENCHMARKS.md)."""
        return self.kinds if train_rows <= self.max_rows else ()


def is_augmented(name: str) -> bool:
    return name.endswith(SUFFIX)


def base_name(name: str) -> str:
    """The plain candidate a variant was made from (its shape, hence its speed)."""
    return name[: -len(SUFFIX)] if is_augmented(name) else name


def with_variants(candidates: list[Candidate], kinds: tuple[str, ...]) -> list[Candidate]:
    """``candidates`` and, after them, an augmented variant of each whose kind is in ``kinds``."""
    return list(candidates) + [replace(c, name=c.name + SUFFIX) for c in candidates if kind(c) in kinds]


def with_variant_rows(table: dict, candidates: list[Candidate]) -> dict:
    """The speed table (:func:`kdbert.compress.speed.measure_speed`) with a row for each variant
    among ``candidates``: its plain twin's, marked ``augmented``."""
    rows = dict(table["candidates"])
    rows.update({c.name: {**rows[base_name(c.name)], "augmented": True} for c in candidates if is_augmented(c.name)})
    return {**table, "candidates": rows}


def augment_for_search(train_rows: list, text_fields: list[str], out: Path, settings: AugmentSettings,
                       budget_seconds: float, seed: int, row_seconds: float) -> dict:
    """The search's augmented rows (:func:`write_augmented_rows`), as many as the teacher labels in
    ``labelling_share`` of ``budget_seconds`` at ``row_seconds`` a row (the labeller's measured time,
    :class:`~kdbert.compress.labelling.Labelling`; the plan is made only the first time)."""
    affordable = 0 if (out / PLAN_FILE).is_file() else int(settings.labelling_share * budget_seconds
                                                           / max(row_seconds, 1e-9))
    return write_augmented_rows(train_rows, text_fields, out, settings, seed, affordable)


def write_augmented_rows(train_rows: list, text_fields: list[str], out: Path, settings: AugmentSettings,
                         seed: int, affordable: int) -> dict:
    """New versions of ``train_rows`` (:class:`~kdbert.data.glue.Example`) in ``out/augmented.jsonl``,
    keyed by ``text_fields`` (the names ``--unlabelled`` reads), at most ``min(max_rows,
    affordable)`` tries in all (module doc; duplicates dropped). A rerun keeps the plan recorded
    in ``out/augmented.json`` and continues or reuses the file. Returns the facts for the report
    (rows in, rows augmented, tries per row, rows out)."""
    from kdbert.augment.bilstm import BiLSTMAugmenter
    from kdbert.augment.pos_tagging import NltkTagger
    from kdbert.augment.tinybert import write_augmented_rows as write_rows

    plan_path, path = out / PLAN_FILE, out / ROWS_FILE
    if plan_path.is_file():
        plan = json.loads(plan_path.read_text())
    elif path.is_file() or Path(f"{path}.partial").is_file():
        raise KdbertError(f"{path} has no plan ({plan_path}): written by an earlier kdbert; use a new --output-dir")
    else:
        cap = max(1, min(settings.max_rows, affordable))
        transfer = cap // 2 if settings.transfer_text else 0  # the labelling shared between both kinds of row
        sources = min(len(train_rows), max(1, cap - transfer))
        plan = {"file": str(path), "input_rows": len(train_rows), "augmented_rows": sources,
                "tries_per_row": max(1, min(settings.copies, max(1, cap - transfer) // sources)),
                "affordable_rows": affordable, "transfer_rows": transfer, "transfer_text": list(settings.transfer_text)}
    rows = [dict(zip(text_fields, row.texts)) for row in train_rows[: plan["augmented_rows"]]]
    given = [rows, text_fields, seed] + ([list(settings.transfer_text)] if settings.transfer_text else [])
    source = hashlib.blake2b(json.dumps(given).encode(), digest_size=16).hexdigest()
    if plan.setdefault("source", source) != source:
        raise KdbertError(f"{path} holds rows augmented from other rows or settings; use a new --output-dir")
    if not path.is_file():  # tagging is the slow part: only when rows are still to be written
        texts = [text for row in rows for text in row.values()]
        augmenter = BiLSTMAugmenter.from_texts(texts, NltkTagger(settings.nltk_data), n_iter=plan["tries_per_row"],
                                               seed=seed)
        out.mkdir(parents=True, exist_ok=True)
        write_json(plan_path, plan)  # before the rows: a killed run resumes its .partial file with the same plan

        def new_versions(chunk: list[dict]) -> list[dict]:
            versions = augmenter.augment([tuple(row[c] for c in text_fields) for row in chunk])
            return [dict(zip(text_fields, texts)) for row_versions in versions for texts in row_versions[1:]]

        # the .partial file's progress keeps the augmenter's settings: a resume under others is refused
        write_rows(rows, text_fields, path, new_versions, json.dumps([source, augmenter.settings()]))
    with path.open() as lines:
        facts = {**{k: v for k, v in plan.items() if k != "source"}, "rows": sum(1 for _ in lines)}
    if plan.get("transfer_rows"):
        facts["transfer_rows"] = write_transfer_rows(path, out / TRANSFER_FILE, plan, text_fields, seed)
    return facts


def write_transfer_rows(versions: Path, combined: Path, plan: dict, text_fields: list[str], seed: int) -> int:
    """``combined``: the augmented versions in ``versions`` then up to ``plan["transfer_rows"]`` rows of
    the plan's ``--transfer-text`` (:func:`~kdbert.compress.transfer.read_transfer_text`), written once,
    atomically; returns how many transfer rows it holds."""
    from kdbert.compress.transfer import read_transfer_text

    if not combined.is_file():
        extra = read_transfer_text(plan["transfer_text"], len(text_fields), plan["transfer_rows"], seed)
        tmp = combined.with_name(combined.name + ".tmp")
        with tmp.open("w") as handle:
            handle.write(versions.read_text())
            handle.writelines(json.dumps(dict(zip(text_fields, texts))) + "\n" for texts in extra)
        tmp.replace(combined)
    with versions.open() as first, combined.open() as both:
        return sum(1 for _ in both) - sum(1 for _ in first)


def variant_rows(facts: dict | None) -> int:
    """How many rows the ``-aug`` variants distil on besides the training rows
    (:func:`variant_rows_file`), by :func:`augment_for_search`'s ``facts`` (None: no variants, 0)."""
    return 0 if facts is None else facts["rows"] + facts.get("transfer_rows", 0)


def variant_rows_file(out: Path) -> Path:
    """The rows the ``-aug`` variants distil on besides the training rows: the augmented versions,
    with the transfer text after them when the plan has some."""
    plan = json.loads((out / PLAN_FILE).read_text()) if (out / PLAN_FILE).is_file() else {}
    return out / (TRANSFER_FILE if plan.get("transfer_rows") else ROWS_FILE)
