"""The one store of teacher outputs: per-row tensors in safetensors shards, one folder per store.

Both ways kdbert keeps a teacher's outputs write this format: ``--teacher-cache`` (the trace of
each training row, :mod:`kdbert.core.teacher_cache`) and the logits a word-level student is
fitted to (:mod:`kdbert.core.teacher_logits`). They differ only in how a row's key is made.

An entry is a row key (hex, 16 bytes) with named fields; each field is one tensor named
``<key>/<field>`` in a shard ``shard-<random>.safetensors`` (never pickles). A shard's metadata
names its format and the *namespace* of its keys (the teacher's :func:`teacher_fingerprint`, and
whatever else decides the outputs), so the shards of several teachers, and runs side by side,
can share one folder (shard names are random). Opening a store indexes the shards of its
namespace from their headers; a shard that cannot be read is skipped and reported, never trusted.

Writes collect pending entries and write them as one shard once ``shard_rows`` rows or
``shard_bytes`` bytes are pending (and on :meth:`TeacherStore.flush`), under a temporary name
moved into place with ``os.replace``: an interrupted run leaves complete shards only (``.tmp``
files are never read), and the next run serves them.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from kdbert.errors import KdbertError

FORMAT = "kdbert-teacher-cache-1"
SHARD_GLOB = "shard-*.safetensors"
# Config entries that name where a teacher came from or its labels, not what its forward computes
# (``problem_type`` only picks the loss HF computes when given labels, which the teacher never is).
UNKEYED_CONFIG = ("_name_or_path", "transformers_version", "architectures", "_attn_implementation",
                  "_attn_implementation_autoset", "_commit_hash", "id2label", "label2id", "problem_type")


def teacher_fingerprint(model: torch.nn.Module, max_seq_len: int) -> str:
    """Hex digest of everything that decides the teacher's outputs on a row: its class, config,
    weights (names, dtypes, shapes, bytes) and the length limit rows were truncated to."""
    config = getattr(model, "config", None)
    described = {k: v for k, v in config.to_dict().items() if k not in UNKEYED_CONFIG} if config is not None else {}
    digest = hashlib.blake2b(digest_size=16)
    digest.update(json.dumps({"class": type(model).__name__, "max_seq_len": max_seq_len, "config": described},
                             sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"|{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def stored_length(field: str, shape) -> int:
    """``S`` of a stored field: hidden (S, d), scores (H, S, n), span_logits (2, S); 0 for fields
    without a length."""
    if field.startswith("hidden."):
        return int(shape[0])
    return int(shape[1]) if field.startswith(("scores.", "span_logits")) else 0


def by_length(field: str) -> bool:
    """Whether a field is stored at a padded length (and serves batches up to it)."""
    return field.startswith(("hidden.", "scores.", "span_logits"))


class TeacherStore:
    """The entries of one ``namespace`` in ``folder`` (module docstring).

    Args:
        folder: shard folder, created when missing; shareable between namespaces and runs.
        namespace: what the keys of this store are relative to (a teacher fingerprint...).
        option: the option that named the folder, for messages (``--teacher-cache``).
        shard_rows, shard_bytes: write a shard once this many rows or bytes are pending.
    """

    def __init__(self, folder, namespace: str, option: str, shard_rows: int = 512, shard_bytes: int = 64 << 20):
        self.folder, self.namespace, self.option = Path(folder).expanduser(), namespace, option
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise KdbertError(f"{option} {self.folder}: cannot create it ({exc.strerror}); pass a writable "
                              "folder") from None
        self.shard_rows, self.shard_bytes = shard_rows, shard_bytes
        self.index: dict[str, dict[str, tuple[str | None, int]]] = {}  # key -> field -> (shard or None, S)
        self.pending: dict[str, torch.Tensor] = {}  # "<key>/<field>" -> tensor not yet in a shard
        self.pending_rows = self.pending_bytes = 0
        self.handles: dict[str, object] = {}
        self.bytes_written = self.shards_written = 0
        self.skipped_shards: list[str] = []
        self._load_index()
        self.entries_at_start = len(self.index)

    def _load_index(self) -> None:
        for path in sorted(self.folder.glob(SHARD_GLOB)):
            try:
                handle = safe_open(str(path), "pt")
                if (handle.metadata() or {}).get("teacher") != self.namespace:
                    continue
                for name in handle.keys():
                    key, field = name.split("/", 1)
                    self._record(key, field, path.name, stored_length(field, handle.get_slice(name).get_shape()))
            except Exception as exc:  # written atomically, so only an outside change gets here: never trusted
                self.skipped_shards.append(f"{path.name} ({type(exc).__name__}: {exc})")
                continue
            self.handles[path.name] = handle

    def _record(self, key: str, field: str, shard: str | None, length: int) -> None:
        """Index ``key/field`` in ``shard`` (``None``: pending); the longest stored length wins."""
        fields = self.index.setdefault(key, {})
        if field not in fields or length >= fields[field][1]:
            fields[field] = (shard, length)

    def has(self, key: str, fields: list[str], length: int = 0) -> bool:
        """Whether ``key`` holds every field, those with a length stored at ``length`` or longer."""
        entry = self.index.get(key, {})
        return all(f in entry and (not by_length(f) or entry[f][1] >= length) for f in fields)

    def get(self, key: str, field: str) -> torch.Tensor:
        shard = self.index[key][field][0]
        name = f"{key}/{field}"
        return self.pending[name] if shard is None else self.handles[shard].get_tensor(name)

    def put(self, key: str, values: dict[str, torch.Tensor]) -> None:
        """Keep one row's ``values`` (field -> CPU tensor) under ``key``; a shard is written when
        enough is pending."""
        for field, value in values.items():
            self.pending[f"{key}/{field}"] = value
            self.pending_bytes += value.numel() * value.element_size()
            self._record(key, field, None, stored_length(field, value.shape))
        self.pending_rows += 1
        if self.pending_rows >= self.shard_rows or self.pending_bytes >= self.shard_bytes:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows as one shard (temporary name, then ``os.replace``)."""
        if not self.pending:
            return
        name = f"shard-{uuid.uuid4().hex[:16]}.safetensors"
        final, tmp = self.folder / name, self.folder / f".{name}.tmp"
        try:
            save_file(self.pending, str(tmp), metadata={"teacher": self.namespace, "format": FORMAT})
            os.replace(tmp, final)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise KdbertError(f"{self.option} {self.folder}: cannot write a shard ({exc.strerror or exc}); free "
                              f"some space or pass another {self.option}") from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.handles[name] = safe_open(str(final), "pt")
        for tensor_name in self.pending:
            key, field = tensor_name.split("/", 1)
            shard, length = self.index[key][field]
            if shard is None:
                self.index[key][field] = (name, length)
        self.bytes_written += final.stat().st_size
        self.shards_written += 1
        self.pending, self.pending_rows, self.pending_bytes = {}, 0, 0

    def close(self) -> None:
        """Write what is pending (call at the end of a run; an interrupted run loses only that)."""
        self.flush()

    def disk_bytes(self) -> int:
        """Bytes of every shard in the folder (all namespaces)."""
        return sum(p.stat().st_size for p in self.folder.glob(SHARD_GLOB))
