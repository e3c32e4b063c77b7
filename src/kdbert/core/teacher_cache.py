"""Teacher-output cache for task distillation: the teacher runs once per distinct training row.

The teacher of task distillation is frozen and deterministic (eval mode, no dropout), so its
outputs on a row are the same in every epoch, in every stage that reads them, and in every run
(seed, student, method) on the same teacher. ``--teacher-cache DIR`` keeps them in ``DIR`` and
serves them instead of running the teacher; ``--teacher-cache-features`` also keeps the hidden
states and attention scores a stage matches (TinyBERT's intermediate stage, PKD's [CLS] states).

Key of a row (hex blake2b, 16 bytes)::

    key = blake2b(namespace | precision | input_ids[:n] | token_type_ids[:n])
    namespace = blake2b(teacher class, config, weights (names, dtypes, shapes, bytes), max_seq_len)
    precision = device type and autocast dtype ("cpu|autocast=off", "cuda|autocast=bfloat16")

``n`` is the row's real length (its attention mask; rows must be right-padded), so the key does
not depend on the batch a row is in: shuffled orders, other batch sizes and augmented files
(rows are keyed by their tokens, not their position) hit, while a changed teacher, tokenizer
output, length limit or precision never reads another's numbers.

Fields of an entry, each a tensor named ``<key>/<field>`` in a shard::

    logits       (C,)        as computed (float32 in a float32 run)
    span_logits  (2, S)      a QA teacher's start and end logits, as computed
    cls.<l>      (1, d)      [CLS] state of hidden layer l (PKD's patient loss), as computed
    hidden.<l>   (S, d)      output of hidden layer l, 0 = embeddings               bfloat16
    scores.<l>   (H, S, n)   pre-softmax attention scores of layer l >= 1 on the   bfloat16
                             row's n real keys

Hidden states and attention scores are stored in bfloat16, which rounds them (8 bits of
mantissa: a relative error up to 2^-9; the -10000 masked score becomes -9984), and are served as
float32. Logits and [CLS] states (a few numbers per row) keep their computed dtype, so they are
served bit for bit as computed. ``S`` is the padded length of
the batch the row was computed in (at least its real length): padded positions are kept because
TinyBERT's reference reductions read them (padded query rows, hidden states of pad tokens) and
QA's logit losses cover every position of the batch. A pad
token attends to real tokens only and no real token attends to a pad, so those values do not
depend on how far the batch is padded: a row stored at length ``S`` serves any batch of length
``L <= S`` (trimmed to ``L``), and is a miss in a longer batch. Scores on padded keys are not
stored: they are served as ``MASKED_SCORE`` (-10000), the trace's mask convention, which every
loss reads as "masked" (the reference reduction zeroes scores <= -100, masked-mean leaves them
out, a softmax gives them 0), while the teacher's own values there are -10000 plus a raw score.

Per batch: rows whose entry holds every field the stage reads (long enough) are hits. All hits:
the teacher does not run, the :class:`~kdbert.core.trace.Trace` is assembled from the cache.
All misses (a cold cache): the teacher runs on the batch exactly as without a cache, its trace is
used as is and its rows are stored. Some misses: the teacher runs on the missing rows only (at
the batch's length), they are stored and the whole batch is assembled from the cache.

Storage: the shards of :mod:`kdbert.core.teacher_store` (the format the word-level student's
stored logits use too), whose namespace is the teacher's fingerprint; an interrupted run leaves
complete shards only and the next run serves them: the cache resumes.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

import torch

from kdbert.core.teacher_store import TeacherStore, teacher_fingerprint
from kdbert.core.trace import MASKED_SCORE, Trace, model_batch, trace

FEATURE_DTYPE = torch.bfloat16
# What a row's key covers; a batch carrying any other tensor for the teacher is not cached.
KEYED_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def precision(device: torch.device) -> str:
    """The device type and autocast dtype the teacher runs under (part of every key)."""
    kind = device.type
    dtype = str(torch.get_autocast_dtype(kind)).removeprefix("torch.") if torch.is_autocast_enabled(kind) else "off"
    return f"{kind}|autocast={dtype}"


def teacher_fields(matches, depth: int) -> list[str] | None:
    """The fields (module docstring) that the teacher side of ``matches`` reads from a teacher of
    ``depth`` layers, negative layers resolved; ``None`` when one reads what the cache does not
    keep (``mlm_logits``, a hook adapter's custom feature) or a layer the teacher lacks."""
    wanted: set[str] = set()
    for match in matches:
        if match.target != "teacher":
            continue
        layers = match.teacher_layer if isinstance(match.teacher_layer, tuple) else (match.teacher_layer,)
        for layer in layers:
            if match.feature == "logits":
                wanted.add("logits")
            elif match.feature in ("embeddings", "hidden", "cls", "mean"):  # the mean: of the stored layer
                index = 0 if match.feature == "embeddings" else (layer + depth + 1 if layer < 0 else layer)
                if not 0 <= index <= depth:
                    return None
                wanted.add(f"{'cls' if match.feature == 'cls' else 'hidden'}.{index}")
            elif match.feature in ("attention_scores", "attention_probs"):
                index = layer + depth + 1 if layer < 0 else layer
                if not 1 <= index <= depth:
                    return None
                wanted.add(f"scores.{index}")
            else:
                return None
    # a stored hidden layer serves its [CLS] state too
    return sorted(f for f in wanted if not (f.startswith("cls.") and f"hidden.{f[4:]}" in wanted))


def _row_value(computed: Trace, field: str, row: int) -> torch.Tensor:
    """Field ``field`` of row ``row`` of a computed trace, as stored (a CPU copy)."""
    kind, _, layer = field.partition(".")
    if kind in ("logits", "span_logits"):
        value, dtype = computed.require("logits", "teacher")[row], None
    elif kind == "scores":
        real = int(computed.attention_mask[row].sum())  # keys past it are padding
        value, dtype = computed.require("attention_scores", "teacher")[int(layer) - 1][row, :, :, :real], FEATURE_DTYPE
    else:
        states = computed.require("hidden_states", "teacher")[int(layer)][row]
        value, dtype = (states[:1], None) if kind == "cls" else (states, FEATURE_DTYPE)
    return value.detach().to(device="cpu", dtype=dtype or value.dtype, copy=True).contiguous()


@dataclass
class Counts:
    """Lookups of one stage: rows looked up and served, teacher forward passes run and skipped,
    batches passed through uncached (not right-padded, extra inputs, teacher in training mode)."""

    rows_looked_up: int = 0
    rows_served: int = 0
    teacher_batches_run: int = 0
    teacher_batches_skipped: int = 0
    batches_uncached: int = 0


class TeacherCache(TeacherStore):
    """The cache of one teacher (module docstring) in ``folder``.

    Args:
        folder: shard folder, created when missing; shareable between teachers and runs.
        teacher: the frozen teacher (fingerprinted once here).
        max_seq_len: the length rows were truncated to.
        features: also keep hidden states / attention scores (bf16) for stages that match them.
        question_answering: the teacher's logits are per position (B, 2, L): kept as ``span_logits``.
        shard_rows, shard_bytes: write a shard once this many rows or bytes are pending.
    """

    def __init__(self, folder, teacher: torch.nn.Module, max_seq_len: int, features: bool = False,
                 question_answering: bool = False, shard_rows: int = 512, shard_bytes: int = 64 << 20):
        super().__init__(folder, teacher_fingerprint(teacher, max_seq_len), "--teacher-cache", shard_rows,
                         shard_bytes)
        self.depth = int(getattr(getattr(teacher, "config", None), "num_hidden_layers", 0) or 0)
        self.features = features
        self.logits_field = "span_logits" if question_answering else "logits"
        self.counts: dict[str, Counts] = {}
        self.stages: dict[str, list[str]] = {}  # stage -> fields cached
        self.not_cached: dict[str, str] = {}  # stage -> why its teacher outputs are not cached

    # ----------------------------------------------------------------- lookups
    def row_keys(self, inputs: dict) -> list[str] | None:
        """One key per row of the teacher's ``inputs`` (module docstring), or ``None`` when the
        batch cannot be keyed: other inputs than :data:`KEYED_INPUTS`, or not right-padded."""
        if any(torch.is_tensor(v) and k not in KEYED_INPUTS + ("labels",) for k, v in inputs.items()):
            return None
        ids = inputs["input_ids"]
        mask = inputs.get("attention_mask")
        mask = torch.ones_like(ids) if mask is None else mask
        lengths = mask.sum(dim=1)
        if not torch.equal(mask.bool(), torch.arange(ids.shape[1], device=ids.device)[None] < lengths[:, None]):
            return None
        types = inputs.get("token_type_ids")
        ids, types = ids.cpu().to(torch.int64), None if types is None else types.cpu().to(torch.int64)
        prefix = f"{self.namespace}|{precision(inputs['input_ids'].device)}|".encode()
        keys = []
        for row, n in enumerate(lengths.tolist()):
            digest = hashlib.blake2b(prefix, digest_size=16)
            digest.update(ids[row, :n].numpy().tobytes())
            digest.update(b"|" + (b"" if types is None else types[row, :n].numpy().tobytes()))
            keys.append(digest.hexdigest())
        return keys

    def store(self, keys: list[str], computed: Trace, fields: list[str]) -> None:
        """Keep ``fields`` of each row of ``computed`` under its key."""
        for row, key in enumerate(keys):
            self.put(key, {field: _row_value(computed, field, row) for field in fields})

    def assemble(self, keys: list[str], fields: list[str], inputs: dict, model_class: str) -> Trace:
        """The teacher's trace of a batch whose rows are all stored: ``logits`` (B, C) as
        computed (QA: (B, 2, L)); ``hidden_states[l]`` (B, L, d) float32, or (B, 1, d) as computed when only its
        [CLS] is read; ``attention_scores[l - 1]`` (B, H, L, L) float32, ``MASKED_SCORE`` on padded
        keys; layers not read are ``None``."""
        length, device = inputs["input_ids"].shape[1], inputs["input_ids"].device
        hidden: list = [None] * (self.depth + 1)
        scores: list = [None] * self.depth
        logits = None
        for field in fields:
            kind, _, layer = field.partition(".")
            rows = [self.get(key, field) for key in keys]
            if kind == "logits":
                logits = torch.stack(rows).to(device)
            elif kind == "span_logits":
                logits = torch.stack([r[:, :length] for r in rows]).to(device)
            elif kind == "cls":
                hidden[int(layer)] = torch.stack(rows).to(device)
            elif kind == "scores":
                batch = torch.full((len(rows), rows[0].shape[0], length, length), MASKED_SCORE)
                for i, r in enumerate(rows):
                    batch[i, :, :, :r.shape[-1]] = r[:, :length]
                scores[int(layer) - 1] = batch.to(device)
            else:
                hidden[int(layer)] = torch.stack([r[:length] for r in rows]).to(device, torch.float32)
        mask = inputs.get("attention_mask")
        return Trace(hidden_states=tuple(hidden) if any(f.startswith(("hidden.", "cls.")) for f in fields) else None,
                     attention_scores=tuple(scores) if any(f.startswith("scores.") for f in fields) else None,
                     logits=logits, attention_mask=torch.ones_like(inputs["input_ids"]) if mask is None else mask,
                     model_class=model_class)

    def trace(self, teacher: torch.nn.Module, batch: dict, fields: list[str], with_attention: bool,
              stage: str = "") -> Trace:
        """The teacher's trace of ``batch`` (shared or per-model), served from the cache where
        every row is stored (module docstring: all hits, all misses, some misses)."""
        inputs = model_batch(batch, "teacher")
        counts = self.counts.setdefault(stage, Counts())
        keys = None if teacher.training else self.row_keys(inputs)
        if keys is None:
            counts.batches_uncached += 1
            return trace(teacher, inputs, with_attention=with_attention, role="teacher")
        length = inputs["input_ids"].shape[1]
        missing = [i for i, key in enumerate(keys) if not self.has(key, fields, length)]
        counts.rows_looked_up += len(keys)
        counts.rows_served += len(keys) - len(missing)
        if len(missing) == len(keys):
            counts.teacher_batches_run += 1
            computed = trace(teacher, inputs, with_attention=with_attention, role="teacher")
            self.store(keys, computed, fields)
            return computed
        if missing:
            counts.teacher_batches_run += 1
            rows = torch.tensor(missing, device=inputs["input_ids"].device)
            subset = {k: v.index_select(0, rows) for k, v in inputs.items() if k in KEYED_INPUTS}
            self.store([keys[i] for i in missing], trace(teacher, subset, with_attention=with_attention,
                                                         role="teacher"), fields)
        else:
            counts.teacher_batches_skipped += 1
        return self.assemble(keys, fields, inputs, type(teacher).__name__)

    # ----------------------------------------------------------------- stages and reports
    def attach(self, stages) -> None:
        """Serve the teacher of every stage whose loss (a :class:`~kdbert.core.matching.MatchLoss`) runs
        it and reads only what the cache keeps: logits always, features with ``features``."""
        for stage in stages:
            loss, name = stage.loss_fn, stage.config.name
            if not getattr(loss, "uses_teacher", False) or not hasattr(loss, "use_teacher_cache"):
                continue
            fields = teacher_fields(loss.matches, self.depth)
            if fields is not None:
                fields = sorted(self.logits_field if f == "logits" else f for f in fields)
            if fields is None:
                self.not_cached[name] = "it reads a teacher feature the cache does not keep"
            elif not fields:
                continue
            elif fields != [self.logits_field] and not self.features:
                features = ", ".join(f for f in fields if f != self.logits_field)
                self.not_cached[name] = f"it reads teacher {features}; --teacher-cache-features keeps them"
            else:
                self.stages[name] = fields
                loss.use_teacher_cache(self, name, fields)

    def describe_start(self) -> str:
        lines = [f"teacher cache {self.folder}: {self.entries_at_start} rows of this teacher stored, "
                 f"{self.disk_bytes() / 1e6:.1f} MB on disk (all teachers)"]
        lines += [f"  stage {name}: cached ({', '.join(fields)})" for name, fields in self.stages.items()]
        lines += [f"  stage {name}: not cached, {why}" for name, why in self.not_cached.items()]
        lines += [f"  unreadable shard skipped: {s}" for s in self.skipped_shards]
        return "\n".join(lines)

    def report(self) -> dict:
        """Facts for ``distill_report.json``: per stage and overall lookups, hit rate, disk use."""
        total = Counts()
        for counts in self.counts.values():
            for k, v in asdict(counts).items():
                setattr(total, k, getattr(total, k) + v)
        return {
            "folder": str(self.folder), "teacher": self.namespace, "features": self.features,
            "rows_at_start": self.entries_at_start, "rows_stored": len(self.index), **asdict(total),
            "hit_rate": round(total.rows_served / total.rows_looked_up, 4) if total.rows_looked_up else None,
            "stages": {name: {"fields": fields, **asdict(self.counts.get(name, Counts()))}
                       for name, fields in self.stages.items()},
            "not_cached": self.not_cached, "shards_written": self.shards_written,
            "bytes_written": self.bytes_written, "disk_bytes": self.disk_bytes(),
        }

    def describe_end(self) -> str:
        r = self.report()
        rate = "no lookups" if r["hit_rate"] is None else f"{100 * r['hit_rate']:.1f}% hit rate"
        return (f"teacher cache: served {r['rows_served']} of {r['rows_looked_up']} rows ({rate}), teacher skipped on "
                f"{r['teacher_batches_skipped']} batches and run on {r['teacher_batches_run']}; "
                f"{r['bytes_written'] / 1e6:.1f} MB written, {r['disk_bytes'] / 1e6:.1f} MB on disk")
