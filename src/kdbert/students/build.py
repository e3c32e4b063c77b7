"""``kdbert students build``: general students of several shapes distilled at once from one base
model on raw text, paid for once and reused by every task's ``kdbert compress``.

Each shape (``bert-<layers>x<width>``, as compress names its BERT-style candidates) starts from the
base's weights by selection (:func:`kdbert.families.selection.select_teacher_weights`, the start compress
gives it today) and learns MiniLMv2's self-attention relations of one base layer on its last
layer (:class:`kdbert.methods.minilm.RelationLoss`'s terms)::

    L = sum over shapes s of  KL(A_QQ^t || A_QQ^s) + KL(A_KK^t || A_KK^s) + KL(A_VV^t || A_VV^s)

One base pass feeds every shape: each batch runs the base once, its queries, keys and values shared
by all the students' losses. The students share no parameter, and each one's gradient norm is
clipped alone (:class:`kdbert.core.optim.IndependentModels`), so each trains as it would on its
own. The corpus is packed into single-segment sequences (:func:`kdbert.data.corpus.pack_sequences`);
the last ``held_out`` of them are never trained on and score every shape's relation loss after
each session (and before the first, the selection start). The learning rate warms up over the first
``WARMUP_STEPS`` steps and then stays constant, so a build can always be continued.

``--budget-minutes`` is the build's training time in all: a rerun with a larger budget continues
the run from its last checkpoint for the difference (one with the same budget does nothing).
Everything lands in the store folder of the base (:mod:`kdbert.students.store`).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from safetensors.torch import save_file

from kdbert.core.atomic_io import save_hf_folder, write_json
from kdbert.core.loading import load_encoder, load_tokenizer
from kdbert.core.relation_losses import minilm_relation_loss
from kdbert.core.run_folder import prepare_output_dir
from kdbert.core.trace import model_batch
from kdbert.core.optim import IndependentModels
from kdbert.core.stages import Stage, StageConfig
from kdbert.core.trainer import RunConfig, Trainer, to_device
from kdbert.data.batching import EncodedDataset, PaddingCollator
from kdbert.data.corpus import corpus_files, pack_sequences
from kdbert.errors import KdbertError
from kdbert.families.bert import build_student, student_config
from kdbert.families.selection import select_teacher_weights, speed_shapes
from kdbert.methods.minilm import captured_qkv, qkv_width, resolve_relation_heads, resolve_relation_layer
from kdbert.options import LEARNING_RATE, POSITIVE, POSITIVE_INT, RunOptions, in_range, option
from kdbert.students.store import BUILD_FILE, FINGERPRINT_FILE, default_store, fingerprint, weights_key

WARMUP_STEPS = 100
DEFAULT_COMPUTE_SHARE = 0.25  # default shapes: at most this share of the base's per-token compute
EPOCHS = 3  # the run's length in corpus passes (the budget usually ends it first)


@dataclass
class BuildConfig(RunOptions):
    """What ``kdbert students build`` builds, from what, and for how long (module doc)."""

    base: str = option("default", "the pre-trained (not fine-tuned) model your teachers are fine-tuned from: a "
                                  "folder or hub id (default: the packaged all-MiniLM-L6-v2)", group="students")
    corpus: list | None = option(None, "raw-text files or folders to distil on (.txt, .gz, WikiExtractor dumps)",
                                 type=list, group="students")
    shapes: str | None = option(None, "comma-separated BERT-style shapes, e.g. bert-1x128,bert-2x256 (default: "
                                      "compress's BERT-style candidates with at most a quarter of the base's "
                                      "compute per token)", group="students")
    budget_minutes: float = option(30.0, "training time of the build in all; rerun with more to continue it",
                                   POSITIVE, float, "students")
    store: str | None = option(None, "the store folder (default: $KDBERT_STUDENTS or ~/.cache/kdbert/students)",
                               group="students")
    batch_size: int = option(32, "sequences per step", POSITIVE_INT, int, "students")
    learning_rate: float = option(1e-4, "learning rate (after a warm-up of 100 steps, constant)", LEARNING_RATE,
                                  float, "students")
    max_seq_len: int = option(128, "tokens per packed sequence", in_range(8, 4096, int), int, "students")
    max_sequences: int | None = option(None, "use at most N packed sequences of the corpus", POSITIVE_INT, int,
                                       "students")
    held_out: int = option(256, "packed sequences kept out of training, on which each shape's relation loss "
                                "is scored", in_range(1, 10**6, int), int, "students")
    relation_layer: str = option("paper", "the base layer whose relations the students' last layers learn: paper, "
                                          "last or a number (see distill general --method minilm)", group="students")
    save_every: int = option(100, "checkpoint every N steps (a killed build resumes from the last)", POSITIVE_INT,
                             int, "students")
    overwrite: bool = option(False, "start the base's build again from the selection start", type=bool,
                             group="students")
    keep_checkpoints: int = option(1, "how many recent checkpoints to keep", POSITIVE_INT, int, "run")


def default_shapes(base_config, share: float = DEFAULT_COMPUTE_SHARE) -> list[str]:
    """compress's BERT-style shapes whose per-token compute, layers x width^2, is at most ``share``
    of the base's."""
    limit = share * base_config.num_hidden_layers * base_config.hidden_size ** 2
    return [name for name, shape in speed_shapes(base_config, narrow_ffn=False).items()
            if shape["num_hidden_layers"] * shape["hidden_size"] ** 2 <= limit]


def chosen_shapes(config: BuildConfig, base_config) -> dict[str, dict]:
    """Name -> shape of ``--shapes`` (checked against the shapes compress times), or the defaults."""
    known = speed_shapes(base_config, narrow_ffn=False)
    names = [n.strip() for n in config.shapes.split(",") if n.strip()] if config.shapes else default_shapes(base_config)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KdbertError(f"--shapes {','.join(unknown)}: not a BERT-style shape compress times for this base; "
                          f"choose from {', '.join(known)}")
    if not names:
        raise KdbertError(f"--shapes: none of {', '.join(known)} has at most {DEFAULT_COMPUTE_SHARE:.0%} of the base's "
                          "compute per token; name the shapes to build" if not config.shapes else
                          "--shapes is empty; name at least one shape, e.g. bert-2x256")
    return {name: known[name] for name in dict.fromkeys(names)}


def start_students(base, shapes: dict[str, dict], seed: int) -> IndependentModels:
    """A bare ``BertModel`` per shape, its weights selected from the base's."""
    students = IndependentModels()
    for name, shape in shapes.items():
        student = build_student(student_config(None, base.config, 2, **shape), seed=seed).bert
        select_teacher_weights(student, base)
        students[name] = student
    return students


class SharedBaseRelations:
    """The loss of every shape at once: the base's Q/K/V of ``layer`` captured once per batch,
    ``{"relation/<shape>": KL_QQ + KL_KK + KL_VV}`` with each shape's relation heads."""

    uses_teacher = True

    def __init__(self, layer: int, heads: dict[str, int]):
        self.layer, self.heads = layer, heads

    def __call__(self, parts, frozen, batch) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            base = captured_qkv(frozen["teacher"], self.layer, batch, "teacher")
        mask = model_batch(batch, "student")["attention_mask"]
        return {f"relation/{name}": minilm_relation_loss(captured_qkv(student, -1, batch, "student"), base, mask,
                                                         self.heads[name])
                for name, student in parts["student"].items()}


@torch.no_grad()
def held_out_losses(loss: SharedBaseRelations, students: IndependentModels, base, rows: EncodedDataset, collator,
                    batch_size: int) -> dict[str, float]:
    """Each shape's relation loss on ``rows``: its mean over every real token of them (a batch's loss,
    itself a mean over its real tokens, weighted by their count)."""
    device = next(base.parameters()).device
    was_training = students.training
    students.eval()
    sums: dict[str, float] = {}
    tokens = 0
    for start in range(0, len(rows), batch_size):
        batch = to_device(collator([rows[i] for i in range(start, min(start + batch_size, len(rows)))]), device)
        count = int(batch["attention_mask"].sum())
        tokens += count
        for name, value in loss({"student": students}, {"teacher": base}, batch).items():
            shape = name.removeprefix("relation/")
            sums[shape] = sums.get(shape, 0.0) + float(value) * count
    students.train(was_training)
    return {name: round(total / tokens, 5) for name, total in sums.items()}


def _identity(config: BuildConfig, key: str, shapes: dict, corpus: list[Path]) -> dict:
    """What a continued build must share with the run it continues."""
    keep = ("batch_size", "learning_rate", "max_seq_len", "max_sequences", "held_out", "relation_layer", "seed")
    return {"command": "students build", "base_key": key, "shapes": list(shapes), "corpus": [str(c) for c in corpus],
            **{name: getattr(config, name) for name in keep}}


def build_students(config: BuildConfig) -> dict:
    """Build (or continue) the general students of ``config`` (module doc); returns ``build.json``."""
    config.check()
    if not config.corpus:
        raise KdbertError("--corpus is required: raw-text files or folders to distil on")
    corpus = corpus_files(config.corpus)
    base, base_path = load_encoder(config.base, option="--base")
    tokenizer = load_tokenizer(base_path)
    key = weights_key(base_path)
    folder = Path(config.store or default_store()) / key
    shapes = chosen_shapes(config, base.config)
    previous = json.loads((folder / BUILD_FILE).read_text()) if (folder / BUILD_FILE).is_file() else None
    if previous is not None and config.overwrite:
        previous = None
    trained = previous["trained_seconds"] if previous else 0.0
    left = config.budget_minutes * 60 - trained
    if left <= 0:
        print(f"students: {folder} is built for {trained / 60:.1f} min already; pass a larger --budget-minutes "
              "to continue it")
        return previous
    run_dir = folder / "run"
    identity = _identity(config, key, shapes, corpus)
    if (run_dir / "run_config.json").is_file() and not config.overwrite:
        saved = json.loads((run_dir / "run_config.json").read_text())
        changed = sorted(k for k in set(saved) | set(identity) if saved.get(k) != identity.get(k))
        if changed:
            raise KdbertError(f"{folder} holds a build of this base with other {', '.join(changed)}; pass the same "
                              "options to continue it, --overwrite to build again, or another --store")
    folder.mkdir(parents=True, exist_ok=True)
    sequences = pack_sequences(tokenizer, corpus, config.max_seq_len, config.max_sequences, config.seed,
                               cache_path=folder / "packed_corpus.safetensors")  # checked against its arguments
    if len(sequences) <= config.held_out:
        raise KdbertError(f"--corpus gives {len(sequences)} sequences of {config.max_seq_len} tokens, not more than "
                          f"--held-out {config.held_out}; give more text or a smaller --held-out")
    prepare_output_dir(run_dir, identity, resume=True, overwrite=config.overwrite)
    rows = [{"input_ids": ids, "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)}
            for ids in sequences]
    train_rows, held_rows = EncodedDataset(rows[:-config.held_out]), EncodedDataset(rows[-config.held_out:])
    collator = PaddingCollator(tokenizer.pad_token_id)

    students = start_students(base, shapes, config.seed)
    layer = resolve_relation_layer(config.relation_layer, int(base.config.num_hidden_layers))
    heads = {name: resolve_relation_heads(None, qkv_width(student), qkv_width(base))
             for name, student in students.items()}
    loss = SharedBaseRelations(layer, heads)
    history = previous["history"] if previous else [
        {"minutes": 0.0, "steps": 0, "held_out_loss": held_out_losses(loss, students, base, held_rows, collator,
                                                                      config.batch_size)}]
    steps_per_epoch = -(-len(train_rows) // config.batch_size)
    total = EPOCHS * steps_per_epoch
    stage = Stage(StageConfig("general", max_steps=total, learning_rate=config.learning_rate,
                              schedule="constant_warmup", warmup_ratio=min(1.0, WARMUP_STEPS / total),
                              batch_size=config.batch_size, evaluate=False), loss, train_rows)
    print(f"students: {len(shapes)} shapes from {base_path} (store {folder}), relations of base layer {layer}; "
          f"{len(train_rows)} sequences of {config.max_seq_len} tokens, {trained / 60:.1f} of "
          f"{config.budget_minutes:g} min built")
    run = RunConfig.from_options(run_dir, config, save_every=config.save_every, deadline=time.time() + left)
    trainer = Trainer({"student": students}, [stage], run, collator, frozen={"teacher": base}, tokenizer=tokenizer)
    started = time.time()
    report = trainer.train(resume=(run_dir / "checkpoints").is_dir())
    students = trainer.modules["student"]
    trained += time.time() - started
    steps = trainer.state["step"]
    history.append({"minutes": round(trained / 60, 2), "steps": steps,
                    "held_out_loss": held_out_losses(loss, students, base, held_rows, collator, config.batch_size)})
    facts = {"base": str(base_path), "key": key, "method": "minilm", "shapes": list(shapes),
             "relation_layer": layer, "relation_heads": heads, "trained_seconds": round(trained, 3), "steps": steps,
             "sequences_seen": steps * config.batch_size, "train_sequences": len(train_rows),
             "options": {f.name: getattr(config, f.name) for f in fields(config)}, "runtime": report.get("runtime"),
             "history": history}
    for name, student in students.items():
        save_hf_folder(student, tokenizer, folder / name,
                       {"student_init.json": {"candidate": name, "shape": shapes[name], "start": "general",
                                              "base": str(base_path), "key": key, "steps": steps,
                                              "minutes": round(trained / 60, 2)}})
    for copy in (run_dir / "best", run_dir / "model.safetensors"):  # the trainer's copy, now split by shape
        shutil.rmtree(copy, ignore_errors=True) if copy.is_dir() else copy.unlink(missing_ok=True)
    save_file({"rows": fingerprint(base.cpu())}, str(folder / FINGERPRINT_FILE))
    write_json(folder / BUILD_FILE, facts)
    return facts


def describe(facts: dict) -> str:
    """The lines ``students build`` ends with: each shape's held-out relation loss, start and now."""
    first, last = facts["history"][0]["held_out_loss"], facts["history"][-1]["held_out_loss"]
    lines = [f"built {len(facts['shapes'])} shapes for {facts['trained_seconds'] / 60:.1f} min ({facts['steps']} "
             f"steps, {facts['sequences_seen']} sequences); held-out relation loss, selection start -> now:"]
    lines += [f"  {name}: {first[name]:.4f} -> {last[name]:.4f}" for name in facts["shapes"]]
    return "\n".join(lines)

