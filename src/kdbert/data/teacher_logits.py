"""The teacher's logits on a transfer set, computed once and stored beside the data file.

A student distilled from logits alone (the distilled BiLSTM) needs the teacher's outputs on
every training row, including hundreds of thousands of augmented rows; they do not change
between epochs, seeds or student settings, so :func:`label_with_teacher` computes them once and
keeps them in ``<data file>.teacher-<id>.safetensors``.

Every stored row is keyed by ``blake2b(teacher identity, the row's texts)``, where the identity
(:func:`teacher_identity`) hashes the teacher's weights, its tokenizer and the maximum sequence
length. A changed data file therefore only computes its new rows, and a changed teacher (or
tokenizer, or length) never reads another teacher's numbers: its keys differ, and so does the
file name, so the stores of several teachers live side by side.

``dtype="bfloat16"`` runs the teacher under ``torch.autocast`` in bfloat16 (about twice as fast
on CPUs with AVX-512 BF16 or AMX, and on GPUs); its logits are still stored in float32, but
they are not the float32 ones, so the precision is part of the identity and they get a store of
their own (the float32 store keeps its name).

The texts the teacher reads are :func:`teacher_view` of the stored ones: the augmentation's
``[MASK]`` becomes the teacher tokenizer's own mask token.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.glue import Example
from kdbert.families.bilstm.words import MASK_TOKEN
from kdbert.errors import KdbertError


DTYPES = ("float32", "bfloat16")


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise KdbertError(f"teacher labelling precision {dtype!r} is unknown; use {' or '.join(DTYPES)}")


def teacher_identity(model: torch.nn.Module, tokenizer, max_seq_len: int, dtype: str = "float32") -> str:
    """A hex digest of the teacher's class, weights (names, dtypes, shapes, values), tokenizer,
    ``max_seq_len`` and the labelling precision ``dtype`` (float32 adds nothing, so float32
    stores keep their names): everything that decides its logits on a text."""
    check_dtype(dtype)
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{type(model).__name__}|{max_seq_len}|".encode())
    if dtype != "float32":
        digest.update(f"autocast-{dtype}|".encode())
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # without the truncation / padding state that each call sets
        described = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
        vocab = json.dumps(described, sort_keys=True)
    else:
        vocab = repr(sorted(tokenizer.get_vocab().items()))
    digest.update(vocab.encode("utf-8"))
    return digest.hexdigest()


def teacher_view(text: str, mask_token: str | None) -> str:
    """``text`` as the teacher reads it: ``[MASK]`` becomes ``mask_token``."""
    if MASK_TOKEN not in text:
        return text
    if mask_token is None:
        raise KdbertError("the data holds [MASK] (masking augmentation) but the teacher's tokenizer has no mask "
                          "token; augment with --p-mask 0 or use a teacher with a mask token")
    return text.replace(MASK_TOKEN, mask_token)


def example_keys(identity: str, examples: list[tuple[str, ...]]) -> np.ndarray:
    """(N, 16) uint8: ``blake2b(identity, texts)`` per example."""
    keys = np.empty((len(examples), 16), dtype=np.uint8)
    for i, texts in enumerate(examples):
        digest = hashlib.blake2b("\x1f".join((identity, *texts)).encode("utf-8"), digest_size=16).digest()
        keys[i] = np.frombuffer(digest, dtype=np.uint8)
    return keys


def store_path(data_path: str | os.PathLike, identity: str) -> Path:
    """Where the logits of the teacher ``identity`` on ``data_path`` are kept."""
    return Path(f"{data_path}.teacher-{identity[:16]}.safetensors")


@torch.inference_mode()
def _run_teacher(model, tokenizer, examples: list[tuple[str, ...]], max_seq_len: int, batch_size: int,
                 dtype: str = "float32") -> np.ndarray:
    mask_token = getattr(tokenizer, "mask_token", None)
    rows = [Example(tuple(teacher_view(t, mask_token) for t in texts), None) for texts in examples]
    order = sorted(range(len(rows)), key=lambda i: sum(len(t) for t in rows[i].texts))
    collator = PaddingCollator(tokenizer.pad_token_id)
    device = next(model.parameters()).device
    accepted = inspect.signature(model.forward).parameters  # DistilBERT takes no token_type_ids
    model.eval()
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    out = [None] * len(rows)
    for begin in range(0, len(order), batch_size):
        indices = order[begin:begin + batch_size]
        dataset = encode_examples(tokenizer, [rows[i] for i in indices], max_seq_len)
        batch = collator([dataset[j] for j in range(len(indices))])
        inputs = {k: v.to(device) for k, v in batch.items() if k in accepted}
        with autocast:
            logits = model(**inputs).logits.float().cpu().numpy()
        for row, index in zip(logits, indices):
            out[index] = row
    return np.stack(out)


def label_with_teacher(model, tokenizer, examples: list[tuple[str, ...]], data_path: str | os.PathLike,
                       max_seq_len: int, batch_size: int = 64, num_labels: int | None = None,
                       dtype: str = "float32") -> np.ndarray:
    """The teacher's logits (N, C) on ``examples`` (one or two texts each), from the store beside
    ``data_path`` where present; rows not stored yet are computed (shortest first, in batches
    of ``batch_size``) and added to the store (rewritten atomically). ``num_labels``: the task's
    output count, checked against the teacher's. ``dtype``: "float32", or "bfloat16" to run the
    teacher under autocast (logits stored in float32, in a store of their own)."""
    if num_labels is not None and model.config.num_labels != num_labels:
        raise KdbertError(f"the teacher has {model.config.num_labels} output(s) but the task needs {num_labels}; "
                          "use a teacher fine-tuned on this task")
    identity = teacher_identity(model, tokenizer, max_seq_len, dtype)
    path = store_path(data_path, identity)
    keys = example_keys(identity, examples)
    stored_keys, stored = np.zeros((0, 16), np.uint8), np.zeros((0, model.config.num_labels), np.float32)
    if path.is_file():
        try:
            saved = load_file(str(path))
            stored_keys, stored = saved["keys"], saved["logits"]
        except Exception as exc:  # a damaged store is reported, never trusted
            raise KdbertError(f"{path}: cannot read the stored teacher logits ({exc}); delete the file to "
                              "recompute them") from None
    known = {k.tobytes(): i for i, k in enumerate(stored_keys)}
    new_rows: dict[bytes, int] = {}  # key -> first example with it
    for i, key in enumerate(keys):
        if key.tobytes() not in known:
            new_rows.setdefault(key.tobytes(), i)
    if new_rows:
        rows = list(new_rows.values())
        new = _run_teacher(model, tokenizer, [examples[i] for i in rows], max_seq_len, batch_size, dtype)
        for offset, key in enumerate(new_rows):
            known[key] = len(stored_keys) + offset
        stored_keys = np.concatenate([stored_keys, keys[rows]])
        stored = np.concatenate([stored, new.astype(np.float32)])
        tmp = path.with_name(path.name + ".tmp")
        save_file({"keys": np.ascontiguousarray(stored_keys), "logits": np.ascontiguousarray(stored)}, str(tmp),
                  metadata={"teacher": identity})
        os.replace(tmp, path)
    return stored[[known[k.tobytes()] for k in keys]]
