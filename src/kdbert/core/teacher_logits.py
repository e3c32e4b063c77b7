"""The teacher's logits on a transfer set, computed once and kept in the teacher-output store.

A student fitted to logits alone (the distilled BiLSTM) needs the teacher's outputs on every
training row, including hundreds of thousands of augmented rows; they do not change between
epochs, seeds or student settings, so :func:`label_with_teacher` computes them once and keeps them
in a :class:`~kdbert.core.teacher_store.TeacherStore` (the ``--teacher-cache`` format; field
``logits``, (C,) float32 per row). :func:`stored_teacher_logits`, which the distillation front
serves, keeps them in ``<training file>.teacher-logits/`` beside the data, or in
``--logits-cache DIR`` (``$XDG_CACHE_HOME/kdbert/teacher-logits`` when the data's folder is
read-only or the rows come from HF datasets).

A row's key is ``blake2b(namespace, the row's texts)``; the namespace (:func:`labelling_namespace`)
is the teacher's fingerprint (class, config, weights, maximum sequence length), its tokenizer and
the labelling precision. A changed data file therefore only computes its new rows, and a changed
teacher (or tokenizer, length or precision) never reads another's numbers: several teachers'
shards live side by side in one folder.

``dtype="bfloat16"`` runs the teacher under ``torch.autocast`` in bfloat16 (about twice as fast
on CPUs with AVX-512 BF16 or AMX, and on GPUs); its logits are still stored in float32, but they
are not the float32 ones, so the precision is part of the namespace.

The texts the teacher reads are :func:`teacher_view` of the stored ones: the augmentation's
``[MASK]`` becomes the teacher tokenizer's own mask token.

A student trained on them (the BiLSTM, a student of its own tokenizer under ``--method kd``) meets
the teacher as :class:`StoredTeacherLogits`, which returns the logits the batch carries.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from safetensors import safe_open
from torch import nn

from kdbert.core.pooling import masked_mean
from kdbert.core.teacher_store import SHARD_GLOB, TeacherStore, teacher_fingerprint
from kdbert.core.trace import HookAdapter, register_adapter
from kdbert.data.batching import PaddingCollator, encode_examples, pool_windows
from kdbert.data.glue import Example, resolve_glue_dir, split_file
from kdbert.data.load import TaskOptions, is_data_file
from kdbert.data.masking import MASK_TOKEN
from kdbert.data.tasks import DOC_STRIDE, TaskSpec
from kdbert.errors import KdbertError

DTYPES = ("float32", "bfloat16")
OUTPUTS = ("logits", "sentence")
"""What the teacher labels a row with: its logits (C,), or its sentence vector (d,), the masked mean
of its last hidden layer (which a mean-pooling head reads), for the sentence term of
:mod:`kdbert.methods.kd`."""
SHARD_ROWS = 1 << 16  # logits are a few numbers per row: large shards, few files


class StoredTeacherLogits(nn.Module):
    """The teacher of a student trained on its stored outputs: ``forward(teacher_logits,
    teacher_sentence)`` returns the logits (B, C) stored for the batch's rows and records their
    stored sentence vectors (B, d), where the batch carries them, as the feature ``mean``; so
    tracing it costs nothing and the real teacher never runs while the student trains."""

    def __init__(self):
        super().__init__()
        self.sentence = nn.Identity()  # what the hook adapter records as the feature "mean"

    def forward(self, teacher_logits: torch.Tensor | None = None,
                teacher_sentence: torch.Tensor | None = None) -> torch.Tensor:
        if teacher_logits is None:
            raise KdbertError("the batch carries no teacher_logits; encode the rows with the teacher's stored logits "
                              "(TaskSource.teacher_logits)")
        if teacher_sentence is not None:
            self.sentence(teacher_sentence)
        return teacher_logits


register_adapter(StoredTeacherLogits, HookAdapter({"mean": "sentence"}))  # the output is the logits


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise KdbertError(f"teacher labelling precision {dtype!r} is unknown; use {' or '.join(DTYPES)}")


def _vocabulary_and_kept(tokenizer, truncation: str, doc_stride: int) -> tuple[str, str]:
    """What of the tokenizer and the truncation decides a labeller's inputs: its vocabulary and
    rules (without the truncation / padding state each call sets), and which tokens a long text keeps."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        described = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
        vocab = json.dumps(described, sort_keys=True)
    else:
        vocab = repr(sorted(tokenizer.get_vocab().items()))
    kept = {"head": "", "windows": f"windows:{doc_stride}|"}.get(truncation, f"{truncation}|")  # head: earlier stores
    return vocab, kept


def labelling_namespace(model: torch.nn.Module, tokenizer, max_seq_len: int, dtype: str = "float32",
                        truncation: str = "head", doc_stride: int = DOC_STRIDE) -> str:
    """A hex digest of everything that decides the teacher's logits on a text: its fingerprint
    (:func:`~kdbert.core.teacher_store.teacher_fingerprint`), its tokenizer, the precision and
    which tokens a long text keeps (``truncation``; for ``windows``, their ``doc_stride`` too)."""
    check_dtype(dtype)
    vocab, kept = _vocabulary_and_kept(tokenizer, truncation, doc_stride)
    digest = hashlib.blake2b(f"texts|{teacher_fingerprint(model, max_seq_len)}|{dtype}|{kept}".encode(),
                             digest_size=16)
    digest.update(vocab.encode("utf-8"))
    return digest.hexdigest()


def onnx_labelling_namespace(graph: str | os.PathLike, tokenizer, max_seq_len: int, truncation: str = "head",
                             doc_stride: int = DOC_STRIDE) -> str:
    """:func:`labelling_namespace` of an exported teacher: the bytes of its ``.onnx`` file (an int8
    graph's logits are its own, not the PyTorch teacher's) in place of the fingerprint and precision."""
    from kdbert.deploy.onnx_runtime import onnx_file  # here: the runtime loads only where an export labels

    graph_digest = hashlib.blake2b(digest_size=16)
    with open(onnx_file(graph), "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            graph_digest.update(block)
    vocab, kept = _vocabulary_and_kept(tokenizer, truncation, doc_stride)
    digest = hashlib.blake2b(f"texts|onnx:{graph_digest.hexdigest()}|{max_seq_len}|{kept}".encode(), digest_size=16)
    digest.update(vocab.encode("utf-8"))
    return digest.hexdigest()


@dataclass
class Labeller:
    """Who computes the stored outputs: the PyTorch teacher (``model``, in ``dtype``) or, where
    ``onnx`` names one, its exported graph in ONNX Runtime (e.g. ``model.int8.onnx`` of `kdbert
    export`, several times faster on a CPU). ``namespace`` keys its rows in the store
    (:func:`labelling_namespace`, :func:`onnx_labelling_namespace`); ``output`` is the field it
    stores (:data:`OUTPUTS`: the logits, or the PyTorch teacher's sentence vectors)."""

    model: torch.nn.Module
    tokenizer: object
    max_seq_len: int
    dtype: str = "float32"
    onnx: str | None = None
    truncation: str = "head"
    doc_stride: int = DOC_STRIDE
    output: str = "logits"
    _session: object = field(default=None, init=False, repr=False)

    def __post_init__(self):
        if self.output not in OUTPUTS:
            raise KdbertError(f"teacher output {self.output!r} is unknown; use {' or '.join(OUTPUTS)}")
        if self.onnx and self.output != "logits":
            raise KdbertError(f"the teacher's export {self.onnx} gives its logits only; its {self.output} vectors are "
                              "labelled by the PyTorch teacher")

    @cached_property
    def namespace(self) -> str:
        if self.onnx:
            return onnx_labelling_namespace(self.onnx, self.tokenizer, self.max_seq_len, self.truncation,
                                            self.doc_stride)
        return labelling_namespace(self.model, self.tokenizer, self.max_seq_len, self.dtype, self.truncation,
                                   self.doc_stride)

    def describe(self) -> str:
        return f"ONNX Runtime, {Path(self.onnx).name}" if self.onnx else f"PyTorch, {self.dtype}"

    def num_labels(self) -> int | None:
        return self._graph().num_labels if self.onnx else self.model.config.num_labels

    def _graph(self):
        if self._session is None:
            from kdbert.deploy.onnx_runtime import OnnxClassifier

            self._session = OnnxClassifier(self.onnx, threads=torch.get_num_threads(), load_encoder=False)
        return self._session

    def forward(self) -> tuple[Callable[[dict], np.ndarray], frozenset]:
        """A batch's outputs as float32 numbers from its padded inputs (logits (B, C), or sentence
        vectors (B, d): the masked mean of the last hidden layer), and the input names taken."""
        if self.onnx:
            graph = self._graph()
            return (lambda inputs: graph({k: v.numpy() for k, v in inputs.items()}).astype(np.float32),
                    frozenset(graph.input_names))
        device = next(self.model.parameters()).device
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=self.dtype == "bfloat16")
        self.model.eval()

        def run(inputs):
            inputs = {k: v.to(device) for k, v in inputs.items()}
            with autocast:
                if self.output == "logits":
                    return self.model(**inputs).logits.float().cpu().numpy()
                last = self.model(**inputs, output_hidden_states=True).hidden_states[-1]
                return masked_mean(last.float(), inputs["attention_mask"]).cpu().numpy()

        return run, frozenset(inspect.signature(self.model.forward).parameters)  # DistilBERT: no token_type_ids


def teacher_view(text: str, mask_token: str | None) -> str:
    """``text`` as the teacher reads it: ``[MASK]`` becomes ``mask_token``."""
    if MASK_TOKEN not in text:
        return text
    if mask_token is None:
        raise KdbertError("the data holds [MASK] (masking augmentation) but the teacher's tokenizer has no mask "
                          "token; augment with --p-mask 0 or use a teacher with a mask token")
    return text.replace(MASK_TOKEN, mask_token)


def row_keys(namespace: str, examples: list[tuple[str, ...]]) -> list[str]:
    """``blake2b(namespace, texts)`` per example (hex)."""
    return [hashlib.blake2b("\x1f".join((namespace, *texts)).encode("utf-8"), digest_size=16).hexdigest()
            for texts in examples]


def _batches(labeller: Labeller, examples: list[tuple[str, ...]], batch_size: int):
    """The labeller's batches of ``examples``, shortest first (the throughput mode: little padding):
    each as (the examples' indices, their encoded rows; a text read in windows has one per window)."""
    mask_token = getattr(labeller.tokenizer, "mask_token", None)
    rows = [Example(tuple(teacher_view(t, mask_token) for t in texts), None) for texts in examples]
    order = sorted(range(len(rows)), key=lambda i: sum(len(t) for t in rows[i].texts))
    for begin in range(0, len(order), batch_size):
        indices = order[begin:begin + batch_size]
        yield indices, encode_examples(labeller.tokenizer, [rows[i] for i in indices], labeller.max_seq_len,
                                       labeller.truncation, labeller.doc_stride)


def padded_tokens(labeller: Labeller, examples: list[tuple[str, ...]], batch_size: int = 64) -> int:
    """The tokens the labeller runs on to label ``examples``: each batch's rows (windows) times its
    longest one, as it pads them (what its time grows with)."""
    return sum(len(dataset) * max(len(row["input_ids"]) for row in dataset.features)
               for _, dataset in _batches(labeller, examples, batch_size))


@torch.inference_mode()
def _run_teacher(labeller: Labeller, examples: list[tuple[str, ...]], batch_size: int) -> np.ndarray:
    """The labeller's logits (N, C) on ``examples``, in :func:`_batches`; a text read in windows gets
    the mean of its windows' logits (:func:`~kdbert.data.batching.pool_windows`)."""
    collator = PaddingCollator(labeller.tokenizer.pad_token_id)
    forward, accepted = labeller.forward()
    out = [None] * len(examples)
    for indices, dataset in _batches(labeller, examples, batch_size):
        batch = collator(dataset.features)
        logits = forward({k: v for k, v in batch.items() if k in accepted})
        for row, index in zip(pool_windows(logits, dataset), indices):
            out[index] = row
    return np.stack(out)


def unstored_rows(folder: str | os.PathLike, namespace: str, examples: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The distinct ``examples`` (texts) with no logits under ``namespace`` in ``folder`` yet, in order."""
    distinct = list(dict.fromkeys(examples))
    if not Path(folder).is_dir():
        return distinct
    store = TeacherStore(folder, namespace, "--logits-cache")
    return [texts for texts, key in zip(distinct, row_keys(namespace, distinct)) if not store.has(key, ["logits"])]


def label_with_teacher(model, tokenizer, examples: list[tuple[str, ...]], folder: str | os.PathLike,
                       max_seq_len: int, batch_size: int = 64, num_labels: int | None = None,
                       dtype: str = "float32", option: str = "--logits-cache", truncation: str = "head",
                       doc_stride: int = DOC_STRIDE, onnx: str | None = None, output: str = "logits") -> np.ndarray:
    """The teacher's logits (N, C) on ``examples`` (one or two texts each), from the store in
    ``folder`` where present; rows not stored yet are computed (shortest first, in batches of
    ``batch_size``) and stored. ``num_labels``: the task's output count, checked against the
    teacher's. ``dtype``: "float32", or "bfloat16" to run the teacher under autocast (logits
    stored in float32, under a namespace of their own); ``onnx``: an export of the teacher that
    labels instead (:class:`Labeller`). ``option`` names the folder in errors;
    ``truncation`` and ``doc_stride`` are the task's (:data:`kdbert.data.tasks.TRUNCATIONS`);
    ``output`` "sentence" stores and returns the sentence vectors (N, d) instead (:data:`OUTPUTS`)."""
    check_dtype(dtype)
    labeller = Labeller(model, tokenizer, max_seq_len, dtype, onnx, truncation, doc_stride, output)
    if output == "logits" and num_labels is not None and labeller.num_labels() not in (None, num_labels):
        raise KdbertError(f"the teacher{f' export {onnx}' if onnx else ''} has {labeller.num_labels()} output(s) but "
                          f"the task needs {num_labels}; use a teacher fine-tuned on this task")
    return label_rows(labeller, examples, folder, batch_size, option)


def label_rows(labeller: Labeller, examples: list[tuple[str, ...]], folder: str | os.PathLike, batch_size: int = 64,
               option: str = "--logits-cache") -> np.ndarray:
    """:func:`label_with_teacher` by ``labeller``: the rows of ``examples`` not in the store in
    ``folder`` yet are labelled and stored; the outputs (N, C) or (N, d) of all of them."""
    field = labeller.output
    store = TeacherStore(folder, labeller.namespace, option, shard_rows=SHARD_ROWS)
    keys = row_keys(store.namespace, examples)
    new_rows: dict[str, int] = {}  # key -> first example with it
    for i, key in enumerate(keys):
        if not store.has(key, [field]):
            new_rows.setdefault(key, i)
    if new_rows:
        computed = _run_teacher(labeller, [examples[i] for i in new_rows.values()], batch_size)
        for key, values in zip(new_rows, computed):
            store.put(key, {field: torch.tensor(values, dtype=torch.float32)})
        store.close()
    return np.stack([store.get(key, field).numpy() for key in keys])


# ----------------------------------------------------------------------------- where a task's logits live
def store_folder(data_path: str | os.PathLike) -> Path:
    """The store beside a transfer-set file: ``<file>.teacher-logits/``."""
    return Path(f"{data_path}.teacher-logits")


def newest_stored_logits(data_path: str | os.PathLike) -> np.ndarray | None:
    """Every row's logits (N, C) in the store beside ``data_path``, of the namespace (teacher) whose
    shard was written last; ``None`` when nothing is stored."""
    folder = store_folder(data_path)
    shards = sorted(folder.glob(SHARD_GLOB), key=lambda path: path.stat().st_mtime)
    if not shards:
        return None
    with safe_open(str(shards[-1]), "pt") as newest:
        store = TeacherStore(folder, newest.metadata()["teacher"], "--logits-cache")
    return np.stack([store.get(key, "logits").numpy() for key in store.index])


def training_file(task: TaskOptions, spec: TaskSpec) -> Path | None:
    """The file the training rows come from (``None`` for HF datasets)."""
    if is_data_file(task.task):
        return Path(task.task)
    if task.train_file:
        return Path(task.train_file)
    if task.data_source == "dir" and spec.glue_folder:
        return split_file(resolve_glue_dir(task.data_dir) / spec.glue_folder, "train")
    return None


def task_store_folder(task: TaskOptions, spec: TaskSpec, folder: str | None) -> Path:
    """``folder`` (``--logits-cache``) when given; else :func:`store_folder` of the training file
    when its folder is writable, else ``$XDG_CACHE_HOME/kdbert/teacher-logits``."""
    if folder:
        return Path(folder)
    source = training_file(task, spec)
    if source is not None and os.access(source.resolve().parent, os.W_OK):
        return store_folder(source)
    return shared_store_folder()


def shared_store_folder() -> Path:
    """The store every teacher shares unless told otherwise (each under its own namespace):
    ``$XDG_CACHE_HOME/kdbert/teacher-logits`` (``~/.cache/...``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kdbert" / "teacher-logits"


def stored_teacher_logits(teacher, tokenizer, rows: list[Example], task: TaskOptions, spec: TaskSpec,
                          max_seq_len: int, dtype: str = "float32", folder: str | None = None, onnx: str | None = None,
                          output: str = "logits"):
    """The teacher's logits (N, C) on ``rows`` (:func:`label_with_teacher`, on a GPU when there is
    one, or by its export ``onnx``), or its sentence vectors (``output`` "sentence"), from the
    store of ``task`` (:func:`task_store_folder`), and the facts for the report."""
    store = task_store_folder(task, spec, folder)
    started = time.time()
    if not onnx:
        teacher.to("cuda" if torch.cuda.is_available() else "cpu")
    logits = label_with_teacher(teacher, tokenizer, [row.texts for row in rows], store, max_seq_len,
                                num_labels=spec.num_labels, dtype=dtype, truncation=spec.truncation,
                                doc_stride=spec.doc_stride, onnx=onnx, output=output)
    return logits, {"store": str(store), "rows": len(rows), "dtype": dtype, "seconds": round(time.time() - started, 1),
                    **({"onnx": str(onnx)} if onnx else {})}


def unlabelled_store_folder(task: TaskOptions, spec: TaskSpec, folder: str | None) -> Path:
    """Where the teacher's logits on ``--unlabelled`` rows are kept: ``folder`` when given, else
    beside the unlabelled file when it is one in a writable folder, else as the training rows'
    (:func:`task_store_folder`)."""
    if folder:
        return Path(folder)
    source = Path(task.unlabelled) if task.unlabelled and is_data_file(task.unlabelled) else None
    if source is not None and os.access(source.resolve().parent, os.W_OK):
        return store_folder(source)
    return task_store_folder(task, spec, None)


def teacher_labelled(teacher, tokenizer, rows: list[Example], task: TaskOptions, spec: TaskSpec, max_seq_len: int,
                     dtype: str = "float32", folder: str | None = None,
                     onnx: str | None = None) -> tuple[list[Example], dict]:
    """``rows`` (unlabelled, ``--unlabelled``) with the teacher's label: the argmax of its stored
    logits (:func:`stored_teacher_logits`, in :func:`unlabelled_store_folder`), or its score for
    regression; and the facts for the report (rows, store, and the share of rows per label)."""
    store = unlabelled_store_folder(task, spec, folder)
    logits, facts = stored_teacher_logits(teacher, tokenizer, rows, task, spec, max_seq_len, dtype, str(store), onnx)
    labels = logits[:, 0].tolist() if spec.is_regression else logits.argmax(axis=-1).tolist()
    if not spec.is_regression:
        facts["label_shares"] = {name: round(labels.count(i) / len(labels), 4) for i, name in enumerate(spec.labels)}
    return [Example(row.texts, label) for row, label in zip(rows, labels)], facts
