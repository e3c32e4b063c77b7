"""Read a data file's text once, with errors that name the file and line.

Every reader of users' files (GLUE TSV, CSV/TSV/JSONL, files to augment) opens them here, so a
file that is not UTF-8, a truncated ``.gz`` or a folder passed as a file ends in one
:class:`~kdbert.errors.KdbertError` instead of a traceback half-way through a run.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from kdbert.errors import KdbertError


def read_text(path: Path) -> str:
    """The whole text of ``path`` (gunzipped when it ends in ``.gz``; a UTF-8 BOM dropped)."""
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise KdbertError(f"{path}: cannot read the file ({reason}); check the path and that it is a "
                          "complete file (a .gz must be a whole gzip archive)") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise KdbertError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); re-save the file "
                          "as UTF-8") from None


def open_text(path: Path) -> io.StringIO:
    """``read_text`` as a file object for :mod:`csv` (newlines kept as written)."""
    return io.StringIO(read_text(path), newline="")
