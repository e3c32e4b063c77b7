"""The teacher's exports kept across searches (kdbert.compress.teacher_exports)."""

from __future__ import annotations

import os

import torch
from transformers import BertForSequenceClassification

from conftest import save_tiny_classifier

from kdbert.compress.teacher_exports import (DONE_FILE, NONE, SECONDS_FILE, TeacherExports, export_key,
                                             teacher_exports)
from kdbert.data.glue import Example

SETTINGS = {"runtime": "onnx-int8", "threads": 1, "length_rows": 4, "seq_len": 64, "machine": "x86_64 (2 CPUs)"}
ROWS = [Example(("a cat sat",), 1), Example(("the dog ran",), 0)]


def test_the_key_changes_with_the_weights_the_rows_and_the_settings_and_nothing_else(tmp_path, tiny_tokenizer):
    model = BertForSequenceClassification.from_pretrained(save_tiny_classifier(tmp_path / "t", tiny_tokenizer)).eval()
    key = export_key(model, tiny_tokenizer, 64, ROWS, SETTINGS)
    assert export_key(model, tiny_tokenizer, 64, list(ROWS), dict(SETTINGS)) == key  # same inputs, same key
    assert export_key(model, tiny_tokenizer, 64, ROWS[:1], SETTINGS) != key  # other scoring rows
    assert export_key(model, tiny_tokenizer, 64, [ROWS[0], Example(("the dog ran",), 1)], SETTINGS) != key  # a label
    assert export_key(model, tiny_tokenizer, 64, ROWS, {**SETTINGS, "threads": 2}) != key  # timed otherwise
    assert export_key(model, tiny_tokenizer, 32, ROWS, SETTINGS) != key  # another length limit
    with torch.no_grad():
        model.classifier.bias.add_(1e-3)
    assert export_key(model, tiny_tokenizer, 64, ROWS, SETTINGS) != key  # other weights


def _export(folder):
    folder.mkdir(parents=True)
    (folder / "model.int8.onnx").write_bytes(b"graph")
    (folder / DONE_FILE).write_text("{}")
    return folder


def test_a_kept_export_is_linked_into_the_next_search_and_an_unfinished_one_is_not_read(tmp_path):
    exports = TeacherExports(tmp_path / "cache", "k" * 32)
    out = tmp_path / "first" / "teacher-onnx"
    assert exports.restore(out) is None and not out.exists()  # nothing kept yet
    assert exports.keep(_export(out), 41.5) is None
    kept = exports.kept / "model.int8.onnx"
    assert kept.read_bytes() == b"graph" and os.stat(kept).st_ino == os.stat(out / "model.int8.onnx").st_ino
    assert [p.name for p in exports.folder.iterdir()] == [exports.key]  # no partial folder left beside it
    second = tmp_path / "second" / "teacher-onnx"
    second.mkdir(parents=True)
    (second / "stale.onnx").write_bytes(b"old")
    assert exports.restore(second) == 41.5  # what making it took, for the finishing's estimate
    assert sorted(p.name for p in second.iterdir()) == [DONE_FILE, SECONDS_FILE, "model.int8.onnx"]  # replaced
    assert os.stat(second / "model.int8.onnx").st_ino == os.stat(kept).st_ino  # a link, not a second copy
    (exports.kept / SECONDS_FILE).unlink()  # kept before its seconds were: made again, and kept anew
    assert exports.restore(tmp_path / "third" / "teacher-onnx") is None
    assert exports.keep(_export(tmp_path / "fourth"), 7.0) is None and exports.restore(second) == 7.0
    (exports.kept / DONE_FILE).unlink()  # an export cut short before its report: not an export
    assert exports.restore(tmp_path / "fifth" / "teacher-onnx") is None


def test_an_export_that_cannot_be_kept_says_so_in_one_line_and_none_keeps_nothing(tmp_path, tiny_tokenizer):
    (tmp_path / "file").write_text("not a folder")
    exports = TeacherExports(tmp_path / "file" / "cache", "k" * 32)
    line = exports.keep(_export(tmp_path / "out"), 1.0)
    assert line.startswith(f"the teacher's export was not kept in {tmp_path / 'file' / 'cache'} for later searches")
    assert "\n" not in line
    assert teacher_exports(NONE, None, tiny_tokenizer, 64, ROWS, SETTINGS) is None
