"""IMDb movie reviews (Maas et al., 2011), as the DistilBERT paper evaluates them: the official
25,000 / 25,000 train/test split of ``aclImdb``, and its 50,000 unlabelled reviews as a transfer set.

``--data-dir`` (or ``$KDBERT_IMDB_DIR``) is the ``aclImdb`` folder itself, a folder holding it, or
a folder holding tarballs of it (``*.tar.gz`` whose members start with ``aclImdb/``: the official
``aclImdb_v1.tar.gz``, or a labelled and an unlabelled one), read without unpacking. A review is
``<split>/<pos|neg|unsup>/<id>_<rating>.txt``. Each split's rows come in one fixed shuffled order
(seeded by the split's name, the same from folders and tarballs), so its first N rows
(``--max-train-examples``, ``--max-dev-examples``) are a sample of both classes. The HTML line
breaks in the reviews (``<br />``) become spaces.
"""

from __future__ import annotations

import os
import random
import re
import tarfile
from pathlib import Path

from kdbert.data.glue import Example, TaskData
from kdbert.data.tasks import IMDB_TASK
from kdbert.errors import KdbertError

IMDB_DIR_ENV = "KDBERT_IMDB_DIR"
FOLDERS = {"neg": 0, "pos": 1, "unsup": None}
_REVIEW = re.compile(r"(?:^|/)aclImdb/(train|test)/(pos|neg|unsup)/(\d+)_\d+\.txt$")
_FILE_NAME = re.compile(r"^(\d+)_\d+\.txt$")
_LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)


def resolve_imdb_dir(data_dir: str | os.PathLike | None) -> Path:
    """The folder given by ``data_dir``, else ``$KDBERT_IMDB_DIR``; refused when missing."""
    chosen = data_dir or os.environ.get(IMDB_DIR_ENV)
    if not chosen:
        raise KdbertError(f"--task imdb needs --data-dir DIR (the aclImdb folder, its parent, or a folder with "
                          f"its .tar.gz files) or ${IMDB_DIR_ENV}")
    path = Path(chosen)
    if not path.is_dir():
        raise KdbertError(f"IMDb data dir '{path}' does not exist; pass the aclImdb folder, its parent, or a folder "
                          "with its .tar.gz files")
    return path


def clean_review(text: str) -> str:
    """A review's text with its HTML line breaks as spaces, surrounding whitespace stripped."""
    return _LINE_BREAK.sub(" ", text).strip()


def _folder_reviews(root: Path, wanted: set[tuple[str, str]]):
    """``(split, folder, id, text)`` of the review files under an unpacked ``aclImdb`` ``root``."""
    for split, folder in sorted(wanted):
        for path in (root / split / folder).glob("*.txt"):
            match = _FILE_NAME.match(path.name)
            if match:
                yield split, folder, int(match.group(1)), path.read_bytes(), path


def _tar_reviews(archives: list[Path], wanted: set[tuple[str, str]]):
    """The same from ``.tar.gz`` archives, streamed member by member."""
    for archive in archives:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                for member in tar:
                    match = _REVIEW.search(member.name)
                    if member.isfile() and match and (match.group(1), match.group(2)) in wanted:
                        yield match.group(1), match.group(2), int(match.group(3)), \
                            tar.extractfile(member).read(), f"{archive}:{member.name}"
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise KdbertError(f"{archive}: cannot read the archive ({exc}); check that it is a whole .tar.gz "
                              "of aclImdb") from None


def _decode(raw: bytes, where) -> str:
    try:
        return clean_review(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise KdbertError(f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); re-save the review as "
                          "UTF-8") from None


def read_reviews(data_dir: str | os.PathLike | None, wanted: set[tuple[str, str]]) -> dict:
    """``{(split, folder): [text, ...]}`` in id order for each wanted ``(split, folder)``
    (``("train", "pos")``, ``("train", "unsup")``...); a wanted folder with no review is refused."""
    path = resolve_imdb_dir(data_dir)
    root = next((p for p in (path, path / "aclImdb") if (p / "train").is_dir() or (p / "test").is_dir()), None)
    if root is not None:
        found = _folder_reviews(root, wanted)
    else:
        archives = sorted(path.glob("*.tar.gz"))
        if not archives:
            raise KdbertError(f"{path}: neither an aclImdb folder (train/, test/) nor .tar.gz archives of one; "
                              "pass the folder that holds them")
        found = _tar_reviews(archives, wanted)
    reviews: dict[tuple[str, str], list[tuple[int, str]]] = {key: [] for key in wanted}
    for split, folder, review_id, raw, where in found:
        reviews[(split, folder)].append((review_id, _decode(raw, where)))
    for (split, folder), rows in sorted(reviews.items()):
        if not rows:
            raise KdbertError(f"{path}: no reviews in aclImdb/{split}/{folder}/; the IMDb data there is "
                              "incomplete (download or unpack the whole aclImdb)")
    return {key: [text for _, text in sorted(rows)] for key, rows in reviews.items()}


def load_imdb(data_dir: str | os.PathLike | None, splits: tuple[str, ...] = ("train", "test")) -> TaskData:
    """Labelled IMDb: ``train`` and ``test`` (the evaluation split), each in :func:`shuffled` order."""
    reviews = read_reviews(data_dir, {(split, folder) for split in splits for folder in ("neg", "pos")})
    loaded = {split: shuffled(split, [Example((text,), FOLDERS[folder]) for folder in ("neg", "pos")
                                      for text in reviews[(split, folder)]]) for split in splits}
    train = loaded.pop("train", [])
    return TaskData(IMDB_TASK, train, loaded)


def shuffled(split: str, rows: list) -> list:
    """``rows`` (negatives then positives, each by id) in the split's fixed order."""
    order = list(range(len(rows)))
    random.Random(f"kdbert-imdb-{split}").shuffle(order)
    return [rows[i] for i in order]


def load_imdb_unlabelled(data_dir: str | os.PathLike | None) -> list[Example]:
    """The 50,000 unlabelled reviews of ``train/unsup`` (label ``None``) in a fixed shuffled order:
    IMDb's transfer set."""
    texts = read_reviews(data_dir, {("train", "unsup")})[("train", "unsup")]
    return shuffled("unsup", [Example((text,), None) for text in texts])


def load_imdb_hf(splits: tuple[str, ...] = ("train", "test")) -> TaskData:  # pragma: no cover - needs network
    """Labelled IMDb from HF ``datasets`` ("stanfordnlp/imdb"; label 0 neg, 1 pos as ours)."""
    import datasets

    loaded = {split: shuffled(split, [Example((clean_review(row["text"]),), int(row["label"]))
                                      for row in datasets.load_dataset("stanfordnlp/imdb", split=split)])
              for split in splits}
    train = loaded.pop("train", [])
    return TaskData(IMDB_TASK, train, loaded)
