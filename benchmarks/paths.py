"""Where the benchmark scripts find their data and put their runs, one definition for all of them.

The data root is ``$KDBERT_DATA_ROOT``, else ``<repo>/../shared/data``; the runs root is
``$KDBERT_RUNS_DIR``, else ``<repo>/runs``. Run from the repository root (as documented), both read
as before: ``../shared/data/...`` and ``runs/...``. Importing this module has no side effects.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _as_documented(path: Path) -> Path:
    """``path`` relative to the working directory when that is the repository root, so that defaults
    and recorded commands read as documented (``runs/...``, ``../shared/data/...``); else absolute."""
    return Path(os.path.relpath(path, REPO)) if Path.cwd().resolve() == REPO else path


DATA_ROOT = Path(os.environ.get("KDBERT_DATA_ROOT") or _as_documented(REPO.parent / "shared" / "data"))
"""Where the data sets are: ``$KDBERT_DATA_ROOT``, else ``<repo>/../shared/data``."""
RUNS_DIR = Path(os.environ.get("KDBERT_RUNS_DIR") or _as_documented(REPO / "runs"))
"""Where teachers, students and other run folders go: ``$KDBERT_RUNS_DIR``, else ``<repo>/runs``."""
GLUE_DIR = str(DATA_ROOT / "glue_data")
CORPUS = str(DATA_ROOT / "corpus" / "enwiki_wikiextractor_sample.txt.gz")
WORD_VECTORS = str(DATA_ROOT / "glove" / "glove.6B.50d.txt.gz")
NLTK_DATA = str(DATA_ROOT / "nltk_data")
IMDB_DIR = str(DATA_ROOT / "imdb")


def run_folder(name: str = "") -> str:
    """``<runs root>/<name>`` (the runs root itself without a name), as argparse defaults take it."""
    return str(RUNS_DIR / name) if name else str(RUNS_DIR)
