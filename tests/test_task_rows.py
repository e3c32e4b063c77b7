"""Latency at a task's real lengths: rows become unpadded batches of one, timed row by row."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from conftest import save_tiny_classifier, write_glue_task

from kdbert.data.load import TaskOptions, load_task
from kdbert.deploy import task_rows
from kdbert.deploy.bench import bench_model, compare
from kdbert.deploy.export import export_model
from kdbert.errors import KdbertError
from kdbert.families.registry import InputSpec


def test_rows_become_batch_one_feeds_with_masks_and_segments_filled():
    token = task_rows._feed({"input_ids": [101, 7, 102], "attention_mask": [1, 1, 1], "labels": 1},
                            ("input_ids", "attention_mask", "token_type_ids"))
    assert {k: v.tolist() for k, v in token.items()} == {
        "input_ids": [[101, 7, 102]], "attention_mask": [[1, 1, 1]], "token_type_ids": [[0, 0, 0]]}
    words = task_rows._feed({"student": {"input_ids": [3, 4], "input_ids_b": [5]}},
                            ("input_ids", "attention_mask", "input_ids_b", "attention_mask_b"))
    assert {k: v.tolist() for k, v in words.items()} == {
        "input_ids": [[3, 4]], "attention_mask": [[1, 1]], "input_ids_b": [[5]], "attention_mask_b": [[1]]}
    assert all(v.dtype == np.int64 for v in words.values())


def test_time_feeds_reports_the_distribution_over_rows(monkeypatch):
    """A fake clock advances by the row's length (ms) on each call: each row's time is its length."""
    clock = [0.0]
    monkeypatch.setattr(task_rows.time, "perf_counter", lambda: clock[0])

    def call(feed):
        clock[0] += feed["input_ids"].shape[1] / 1000.0

    lengths = [5, 1, 9, 3, 7, 2, 8, 4, 6, 10]
    feeds = [{"input_ids": np.zeros((1, n), dtype=np.int64)} for n in lengths]
    result = task_rows.time_feeds(call, feeds, repeats=3, warmup=2)
    assert result["latency_real_p50_ms"] == pytest.approx(5.5)  # median of 1..10
    assert result["latency_real_p90_ms"] == pytest.approx(9.0)  # nearest rank: the 9th of 10
    assert result["latency_real_mean_ms"] == pytest.approx(5.5)
    assert (result["real_rows"], result["real_length_p50"], result["real_length_p90"]) == (10, 5.5, 9)
    with pytest.raises(KdbertError, match="no rows to time"):
        task_rows.time_feeds(call, [])


def test_models_timed_in_turns_of_a_few_rows_share_a_slow_spell_of_the_machine(monkeypatch):
    """A fake clock: the teacher costs 3 ms a call, the student 1 ms, and the machine runs twice as
    slow for calls 5 to 12 of 16 (4 rows, turns of 2 rows, one call a row: the second turn of the
    first pass and the first of the second). Both models run slow on the rows the spell covers, and
    each pass reads 3x; timed a pass apart (the teacher's 4 rows, then the student's), the spell
    would fall on the first pass's student and the second's teacher: 3 / 2 and 6 / 1."""
    clock = {"now": 0.0, "calls": 0}
    order = []

    def model(name, cost):
        def call(feed):
            clock["calls"] += 1
            order.append((name, int(feed["input_ids"][0, 0])))
            clock["now"] += cost * (2.0 if 5 <= clock["calls"] <= 12 else 1.0) / 1000.0
        return call

    monkeypatch.setattr(task_rows.time, "perf_counter", lambda: clock["now"])
    feeds = [{"input_ids": np.full((1, 4), row, dtype=np.int64)} for row in range(4)]
    result = task_rows.time_in_turns({"teacher": (model("teacher", 3.0), feeds),
                                      "student": (model("student", 1.0), feeds)},
                                     rounds=2, rows_per_turn=2, repeats=1, warmup=0)
    # a turn of rows 0-1, the teacher first; the next of rows 2-3, the student first
    assert order[:8] == [("teacher", 0), ("teacher", 1), ("student", 0), ("student", 1),
                         ("student", 2), ("student", 3), ("teacher", 2), ("teacher", 3)]
    assert order[8:] == order[:8]
    # each pass: two rows at speed (3, 1), two slow (6, 2)
    assert result["rounds"] == [{"teacher": pytest.approx(4.5), "student": pytest.approx(1.5)}] * 2
    assert result["speedup"] == {"teacher": pytest.approx(1.0), "student": pytest.approx(3.0)}
    assert result["latency_real_p50_ms"] == {"teacher": pytest.approx(4.5), "student": pytest.approx(1.5)}
    with pytest.raises(KdbertError, match="rounds 0 must be positive"):
        task_rows.time_in_turns({"teacher": (model("teacher", 3.0), feeds)}, rounds=0)
    with pytest.raises(KdbertError, match="no rows to time"):
        task_rows.time_in_turns({"teacher": (model("teacher", 3.0), [])})


def test_task_feeds_take_evenly_spaced_dev_rows_at_their_token_lengths(tmp_path, tiny_tokenizer):
    from kdbert.families.hf import HFFamily

    write_glue_task(tmp_path / "glue", "MRPC", n_train=8, n_dev=12)
    data = load_task(TaskOptions("mrpc", data_dir=str(tmp_path / "glue")))
    spec = InputSpec(("input_ids", "attention_mask", "token_type_ids"), 64, len(tiny_tokenizer))
    feeds = task_rows.task_feeds(HFFamily(), tiny_tokenizer, spec, data, 128, rows=4)
    rows = data.dev[next(iter(data.dev))]
    expected = [len(tiny_tokenizer(*rows[i].texts)["input_ids"]) for i in (0, 3, 6, 9)]
    assert [f["input_ids"].shape for f in feeds] == [(1, n) for n in expected]
    assert feeds[1]["token_type_ids"].tolist() == [tiny_tokenizer(*rows[3].texts)["token_type_ids"]]
    with pytest.raises(KdbertError, match="--length-rows 0 must be positive"):
        task_rows.task_feeds(HFFamily(), tiny_tokenizer, spec, data, 128, rows=0)


def test_bench_times_a_task_rows_in_pytorch_and_onnx_runtime(tmp_path, tiny_tokenizer):
    write_glue_task(tmp_path / "glue", "SST-2", n_train=8, n_dev=10)
    folder = save_tiny_classifier(tmp_path / "model", tiny_tokenizer)
    export_model(folder, quantize="int8")
    task = TaskOptions("sst2", data_dir=str(tmp_path / "glue"))
    data = load_task(task)
    lengths = sorted(len(tiny_tokenizer(*ex.texts)["input_ids"]) for ex in data.dev[next(iter(data.dev))])
    rows = [bench_model(path, seq_len=16, runs=2, task=task, length_rows=50)
            for path in (folder, folder / "onnx" / "model.int8.onnx")]
    for row in rows:
        assert (row["real_rows"], row["real_task"]) == (10, "sst2")
        assert row["real_length_p50"] == statistics.median(lengths)
        assert row["latency_real_p50_ms"] <= row["latency_real_p90_ms"]
    compared = compare(rows)
    assert compared[1]["speedup_real"] == rows[0]["latency_real_p50_ms"] / rows[1]["latency_real_p50_ms"]
