"""Teacher-output cache (kdbert.core.teacher_cache): a cached run equals an uncached one, stored rows
are served only to the same teacher, tokens and precision, whatever the batch, and shards are
written atomically with their disk use reported."""

from __future__ import annotations

import os

import pytest
import torch
from conftest import save_tiny_classifier, write_glue_task
from safetensors.torch import load_file
from transformers import BertForSequenceClassification

import kdbert.core.teacher_store as teacher_store
from kdbert.core import losses
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.glue import load_glue_dir
from kdbert.data.load import TaskOptions
from kdbert.data.tasks import GLUE_TASKS
from kdbert.methods.front import distill_task
from kdbert.errors import KdbertError
from kdbert.core.matching import Match
from kdbert.core.trace import trace
from kdbert.methods.tinybert import intermediate_matches
from kdbert.core.teacher_cache import TeacherCache, teacher_fields

LOGITS = ["logits"]


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("teacher-cache")
    for task in ("SST-2", "MRPC"):
        write_glue_task(root / "glue", task, n_train=40, n_dev=8)
    teacher = save_tiny_classifier(root / "teacher", tiny_tokenizer, num_hidden_layers=4, seed=3)
    rows = encode_examples(tiny_tokenizer, load_glue_dir(GLUE_TASKS["mrpc"], root / "glue").train, 64)
    return {"root": root, "teacher": teacher, "rows": rows, "collate": PaddingCollator(tiny_tokenizer.pad_token_id)}


def load_teacher(env) -> BertForSequenceClassification:
    return BertForSequenceClassification.from_pretrained(env["teacher"]).eval()


def batches(env, order, size):
    return [env["collate"]([env["rows"][i] for i in order[b:b + size]]) for b in range(0, len(order), size)]


def counted(model):
    """``model`` with a counter of its forward passes (``model.calls``)."""
    model.calls = 0

    def count(*_):
        model.calls += 1

    model.register_forward_hook(count)
    return model


def distill(env, out, method="kd", cache=None, **options):
    options = {"method": method, "teacher": str(env["teacher"]), "epochs": 2, "batch_size": 8, "no_progress": True,
               "student_layers": "2", "teacher_cache": str(cache) if cache else None, **options}
    report = distill_task(TaskOptions("sst2", data_dir=str(env["root"] / "glue")), options, str(out))
    return report, load_file(str(out / "model.safetensors"))


def folder_bytes(folder) -> int:
    return sum(os.path.getsize(folder / name) for name in os.listdir(folder))


def checkpoint(out, step: int) -> dict:
    return load_file(str(out / "checkpoints" / f"checkpoint-s0-{step:07d}" / "modules.safetensors"))


def assert_same_weights(got: dict, expected: dict, exact: bool) -> None:
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if exact:
            assert torch.equal(got[name], value), name
        else:
            torch.testing.assert_close(got[name], value, rtol=1e-5, atol=1e-6, msg=name)


# ----------------------------------------------------------------------------- a run with the cache
def test_cached_kd_run_equals_the_uncached_run_and_reports_its_disk_use(env, tmp_path):
    _, plain = distill(env, tmp_path / "plain")
    cold_report, cold = distill(env, tmp_path / "cold", cache=tmp_path / "cache")
    warm_report, warm = distill(env, tmp_path / "warm", cache=tmp_path / "cache")
    # epoch 1 (steps 1-5): the cold run's teacher ran on the plain run's very batches and the warm
    # run was served those numbers, so all three agree bit for bit
    for name in ("cold", "warm"):
        assert_same_weights(checkpoint(tmp_path / name, 5), checkpoint(tmp_path / "plain", 5), exact=True)
    # epoch 2: length-grouped batches are drawn afresh each epoch, so the logits served for a row
    # were computed in another batch (other rows and padding) than the plain run's teacher sees it
    # in; CPU kernels are picked by shape, so they may differ in the last bits (AMX/AVX-512 Xeons)
    # and the student is only close to the plain run's. Cold and warm read the same stored numbers.
    last = {name: checkpoint(tmp_path / name, 10) for name in ("plain", "cold", "warm")}
    for weights in (last, {"plain": plain, "cold": cold, "warm": warm}):  # last checkpoint, saved student
        assert_same_weights(weights["warm"], weights["cold"], exact=True)
        assert_same_weights(weights["cold"], weights["plain"], exact=False)
    cold_cache, warm_cache = cold_report["teacher_cache"], warm_report["teacher_cache"]
    # cold: epoch 1 ran the teacher on its 5 batches and stored 40 rows, epoch 2 was served
    assert (cold_cache["teacher_batches_run"], cold_cache["teacher_batches_skipped"]) == (5, 5)
    assert (cold_cache["rows_looked_up"], cold_cache["rows_served"], cold_cache["rows_stored"]) == (80, 40, 40)
    # warm (another run on the same teacher): the teacher never ran
    assert (warm_cache["teacher_batches_run"], warm_cache["rows_served"], warm_cache["hit_rate"]) == (0, 80, 1.0)
    assert cold_cache["stages"]["kd"]["fields"] == LOGITS
    on_disk = folder_bytes(tmp_path / "cache")
    assert cold_cache["disk_bytes"] == cold_cache["bytes_written"] == warm_cache["disk_bytes"] == on_disk > 0
    assert warm_cache["bytes_written"] == 0


def test_the_sentence_term_reads_the_teachers_last_layer_live_or_from_the_cache(env, tmp_path):
    from kdbert.core.matching import Match

    sentence = Match("sentence", "mean", "cosine_distance", student_layer=-1, teacher_layer=-1, projection="sentence")
    assert teacher_fields([sentence], depth=4) == ["hidden.4"]  # the mean is taken of the stored layer
    plain_report, _ = distill(env, tmp_path / "plain", sentence_weight=1.0)
    cold_report, _ = distill(env, tmp_path / "cold", cache=tmp_path / "cache", sentence_weight=1.0,
                             teacher_cache_features=True)
    assert "sentence: 1 * cosine_distance(mean[-1] via sentence, mean[-1])" in plain_report["matches"]["kd"]
    assert cold_report["teacher_cache"]["stages"]["kd"]["fields"] == ["hidden.4", "logits"]
    # epoch 1: the cache served what the teacher computed on the very same batches
    plain, cold = checkpoint(tmp_path / "plain", 5), checkpoint(tmp_path / "cold", 5)
    assert_same_weights(cold, plain, exact=True)
    # the projection (student width 32 -> the teacher's 32) trained beside the student, and moved
    start = distill(env, tmp_path / "none", sentence_weight=1.0, max_steps=1, learning_rate=1e-12)[0]
    assert start["matches"]["kd"][-1].startswith("sentence:")
    assert not torch.equal(plain["projections.sentence.weight"],
                           checkpoint(tmp_path / "none", 1)["projections.sentence.weight"])


def test_an_interrupted_run_keeps_the_rows_it_computed(env, tmp_path, monkeypatch):
    from kdbert.core.trainer import Trainer

    def interrupted(self, stage_name):
        raise RuntimeError("killed after the first epoch")

    with monkeypatch.context() as patch:
        patch.setattr(Trainer, "_evaluate", interrupted)
        with pytest.raises(RuntimeError, match="killed"):
            distill(env, tmp_path / "first", cache=tmp_path / "cache")
    assert TeacherCache(tmp_path / "cache", load_teacher(env), 64).entries_at_start == 40
    report, _ = distill(env, tmp_path / "again", cache=tmp_path / "cache")
    assert report["teacher_cache"]["hit_rate"] == 1.0


# ----------------------------------------------------------------------------- keys
def test_shuffled_rebatched_and_per_model_batches_hit_with_the_computed_logits(env, tmp_path):
    teacher = counted(load_teacher(env))
    cache = TeacherCache(tmp_path, teacher, 64)
    stored = torch.cat([cache.trace(teacher, batch, LOGITS, with_attention=False).logits
                        for batch in batches(env, list(range(40)), 8)])
    assert teacher.calls == 5
    shuffled = torch.randperm(40, generator=torch.Generator().manual_seed(1)).tolist()
    for begin, batch in zip(range(0, 40, 6), batches(env, shuffled, 6)):
        served = cache.trace(teacher, batch, LOGITS, with_attention=False)
        nested = cache.trace(teacher, {"teacher": batch, "student": {"words": batch["input_ids"] * 0},
                                       "labels": batch["labels"]}, LOGITS, with_attention=False)
        rows = shuffled[begin:begin + 6]
        assert torch.equal(served.logits, stored[rows]) and torch.equal(nested.logits, stored[rows])
        # the teacher's own attention kernel (SDPA) is not batch-invariant: run in this batch it
        # may differ from the stored logits in the last bits
        with torch.no_grad():
            computed = teacher(**{k: v for k, v in batch.items() if k != "labels"}).logits
        torch.testing.assert_close(served.logits, computed, rtol=0, atol=1e-5)
    assert teacher.calls == 5 + 7  # the 7 reference passes above; the cache ran none
    counts = cache.counts[""]
    assert (counts.rows_looked_up, counts.rows_served, counts.teacher_batches_skipped) == (120, 80, 14)


def test_a_changed_teacher_row_length_limit_or_precision_misses(env, tmp_path):
    teacher = load_teacher(env)
    batch = batches(env, list(range(8)), 8)[0]
    cache = TeacherCache(tmp_path, teacher, 64)
    cache.trace(teacher, batch, LOGITS, with_attention=False)
    cache.close()
    keys = cache.row_keys(batch)
    assert all(cache.has(k, LOGITS, 0) for k in keys)

    changed = load_teacher(env)
    with torch.no_grad():
        changed.bert.encoder.layer[1].output.dense.bias[0] += 1e-3  # one weight
    other = TeacherCache(tmp_path, changed, 64)
    assert other.entries_at_start == 0 and not any(other.has(k, LOGITS, 0) for k in other.row_keys(batch))
    served = other.trace(changed, batch, LOGITS, with_attention=False)
    with torch.no_grad():
        assert torch.equal(served.logits, changed(**{k: v for k, v in batch.items() if k != "labels"}).logits)

    assert TeacherCache(tmp_path, teacher, 32).entries_at_start == 0  # another length limit
    edited = {k: v.clone() for k, v in batch.items()}
    edited["input_ids"][3, 1] += 1  # one token of row 3
    assert [cache.has(k, LOGITS, 0) for k in cache.row_keys(edited)] == [i != 3 for i in range(8)]
    lengths = batch["attention_mask"].sum(dim=1)
    longest, shorter = int(lengths.argmax()), int(lengths.argmin())
    assert lengths[shorter] < batch["input_ids"].shape[1]
    edited = {k: v.clone() for k, v in batch.items()}
    edited["token_type_ids"][longest, -1] = 1 - edited["token_type_ids"][longest, -1]  # a real token's segment
    edited["input_ids"][shorter, -1] = 7  # a pad position: not part of the row
    assert [cache.has(k, LOGITS, 0) for k in cache.row_keys(edited)] == [i != longest for i in range(8)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not any(cache.has(k, LOGITS, 0) for k in cache.row_keys(batch))


# ----------------------------------------------------------------------------- features
def test_features_are_served_rounded_to_bf16_on_every_position_a_loss_reads(env, tmp_path):
    teacher = counted(load_teacher(env))
    lengths = env["rows"].lengths
    by_length = sorted(range(40), key=lambda i: lengths[i])
    short, medium, long = by_length[0], by_length[20], by_length[-1]
    assert lengths[short] < lengths[medium] < lengths[long]
    matches = intermediate_matches(_pairs(), dict.fromkeys(("embedding", "attention", "hidden"), True),
                                   "per-layer", "tinybert-reference", False)
    fields = teacher_fields(matches, 4)
    assert fields == ["hidden.0", "hidden.2", "hidden.4", "scores.2", "scores.4"]
    cache = TeacherCache(tmp_path, teacher, 64, features=True)
    cache.trace(teacher, env["collate"]([env["rows"][i] for i in (short, long)]), fields, with_attention=True)
    # `short` was stored padded to `long`'s length, which covers a batch with `medium`;
    # `medium` is not stored yet: the teacher runs on it alone, then the batch is assembled
    batch = env["collate"]([env["rows"][i] for i in (short, medium)])
    calls = teacher.calls
    served = cache.trace(teacher, batch, fields, with_attention=True)
    assert teacher.calls == calls + 1 and cache.counts[""].rows_served == 1
    with torch.no_grad():
        computed = trace(teacher, batch, with_attention=True, role="teacher")
    # served = bf16(x') where x' is the float32 value computed in another batch (medium alone, short
    # with long): |served - x| <= 2^-8 |x| (bf16 keeps 8 significant bits) + |x' - x|, the float32
    # difference between batches, a few ulp on CPUs whose kernels depend on the shape: budgeted as
    # 2^9 ulp of the largest value (2^-14 max|x|), far below the bf16 rounding of typical values
    def assert_bf16_of(served_value, computed_value):
        torch.testing.assert_close(served_value, computed_value, rtol=2 ** -8,
                                   atol=2 ** -14 * float(computed_value.abs().max()))

    for layer in (0, 2, 4):  # every position, padded ones included (the reference reductions read them)
        assert_bf16_of(served.hidden_states[layer], computed.hidden_states[layer])
    keys = batch["attention_mask"].bool()[:, None, None, :]  # (B, 1, 1, L): real keys
    for layer in (2, 4):
        scores = [t.attention_scores[layer - 1] for t in (served, computed)]
        assert scores[0].shape == scores[1].shape
        # real keys (padded query rows included) as computed, rounded; padded keys at the mask value
        assert_bf16_of(scores[0] * keys, scores[1] * keys)
        assert (~keys).any() and torch.equal(scores[0].masked_select(~keys).unique(), torch.tensor([-10000.0]))
        student = torch.randn_like(scores[1]) + (~keys) * -10000.0
        for reduction in ("tinybert-reference", "masked-mean"):
            values = [losses.attention_mse(student, t, batch["attention_mask"], reduction) for t in scores]
            torch.testing.assert_close(values[0], values[1], rtol=2 ** -7, atol=0)
        torch.testing.assert_close(scores[0].softmax(-1), scores[1].softmax(-1), rtol=0, atol=2e-3)
    assert served.hidden_states[1] is None  # layers no match reads are not stored
    # a longer batch than `short` was stored for is a miss
    assert not cache.has(cache.row_keys(batch)[0], fields, lengths[long] + 1)


def test_pkd_cls_states_and_logits_are_served_exactly(env, tmp_path):
    teacher = load_teacher(env)
    matches = [Match("soft", "logits", "kl_div"), Match("patience", "cls", "patience", student_layer=(1,),
                                                        teacher_layer=(2, -2))]
    fields = teacher_fields(matches, 4)
    assert fields == ["cls.2", "cls.3", "logits"]
    cache = TeacherCache(tmp_path, teacher, 64, features=True)
    logits, cls = [], {2: [], 3: []}  # the teacher's outputs in the two batches of 8 that fill the cache
    with torch.no_grad():
        for batch in batches(env, list(range(16)), 8):
            filled = trace(teacher, batch, with_attention=False, role="teacher")
            logits.append(filled.logits)
            for layer in cls:
                cls[layer].append(filled.hidden_states[layer][:, :1])
            cache.trace(teacher, batch, fields, with_attention=False)
        order = list(range(15, -1, -1))
        batch = batches(env, order, 16)[0]
        served = cache.trace(teacher, batch, fields, with_attention=False)
        assert cache.counts[""].teacher_batches_skipped == 1
        computed = trace(teacher, batch, with_attention=False, role="teacher")
    # exact: the cache serves, bit for bit, what the teacher computed for these rows in the batches
    # that filled it (same batch shape, padding and thread count as the reference above)
    assert torch.equal(served.logits, torch.cat(logits)[order])
    for layer in cls:
        assert torch.equal(served.hidden_states[layer], torch.cat(cls[layer])[order])
    # close, not equal: the teacher run afresh on one batch of 16 in another order and padding. CPU
    # matmul/attention kernels are picked by shape and CPU (AVX2, AVX-512, AMX), so the same row may
    # differ in its last bits between batches: a few float32 ulp, inside rtol 1e-5 (~80 ulp); atol
    # 1e-6 covers these small logits (~1e-2). Any two rows' [CLS] states here are >1e-3 apart (L2).
    torch.testing.assert_close(served.logits, computed.logits, rtol=1e-5, atol=1e-6)
    for layer in cls:
        torch.testing.assert_close(served.hidden_states[layer][:, 0], computed.hidden_states[layer][:, 0],
                                   rtol=1e-5, atol=1e-6)


def test_stages_reading_features_are_cached_only_with_the_option(env, tmp_path):
    options = {"student_layers": "0,2", "intermediate_epochs": 1, "epochs": 1}
    report, _ = distill(env, tmp_path / "logits", "tinybert", tmp_path / "cache", **options)
    cached = report["teacher_cache"]
    assert list(cached["stages"]) == ["prediction"] and "intermediate" in cached["not_cached"]
    report, _ = distill(env, tmp_path / "features", "tinybert", tmp_path / "cache", teacher_cache_features=True,
                        **options)
    assert list(report["teacher_cache"]["stages"]) == ["intermediate", "prediction"]
    assert report["teacher_cache"]["stages"]["prediction"]["teacher_batches_run"] == 0  # logits of the first run
    with pytest.raises(KdbertError, match="--teacher-cache-features needs --teacher-cache"):
        distill(env, tmp_path / "refused", teacher_cache_features=True)
    assert teacher_fields([Match("mlm", "mlm_logits", "token_kl_div")], 4) is None


# ----------------------------------------------------------------------------- shards
def test_an_interrupted_shard_write_leaves_complete_shards_only(env, tmp_path, monkeypatch):
    teacher = load_teacher(env)
    first, second = batches(env, list(range(16)), 8)
    cache = TeacherCache(tmp_path, teacher, 64)
    cache.trace(teacher, first, LOGITS, with_attention=False)
    cache.flush()
    written = teacher_store.save_file

    def half_written(tensors, path, metadata=None):
        written(tensors, path, metadata=metadata)
        with open(path, "r+b") as handle:
            handle.truncate(os.path.getsize(path) // 2)
        raise OSError(28, "No space left on device")

    cache.trace(teacher, second, LOGITS, with_attention=False)
    with monkeypatch.context() as patch:
        patch.setattr(teacher_store, "save_file", half_written)
        with pytest.raises(KdbertError, match="cannot write a shard"):
            cache.flush()
    assert [p.suffix for p in tmp_path.iterdir()] == [".safetensors"]  # the first shard, no temporary file
    (tmp_path / ".shard-killed.safetensors.tmp").write_bytes(b"half a shard")  # a process killed mid-write
    reopened = TeacherCache(tmp_path, teacher, 64)
    assert reopened.entries_at_start == 8 and not reopened.skipped_shards
    assert set(reopened.index) == set(cache.row_keys(first))
    assert reopened.disk_bytes() == folder_bytes(tmp_path) - len(b"half a shard")
    cache.flush()  # the rows are still pending: a later write keeps them
    assert TeacherCache(tmp_path, teacher, 64).entries_at_start == 16


def _pairs():
    from kdbert.core.layer_maps import LayerMap

    return LayerMap(((0, 0), (1, 2), (2, 4)))
