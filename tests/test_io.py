"""Atomic writes: a replace killed half-way is undone; copies never show a half-written file."""

from __future__ import annotations

import os

from kdbert.core.atomic_io import copy_files_atomically, replace_dir, restore_interrupted


def test_replace_killed_between_its_two_moves_is_restored(tmp_path):
    final, new = tmp_path / "best", tmp_path / "best.tmp"
    final.mkdir()
    (final / "w").write_text("old")
    new.mkdir()
    (new / "w").write_text("new")
    os.replace(final, final.with_name("best.old"))  # replace_dir's first move, then the kill
    assert not final.exists()
    restore_interrupted(final)
    assert (final / "w").read_text() == "old" and not (tmp_path / "best.old").exists()
    replace_dir(new, final)
    restore_interrupted(final)  # nothing to undo
    assert (final / "w").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["best"]


def test_copy_files_atomically_leaves_no_temporary_names(tmp_path):
    source, destination = tmp_path / "src", tmp_path / "dst"
    source.mkdir()
    destination.mkdir()
    for name, text in (("config.json", "{}"), ("model.safetensors", "x" * 1000)):
        (source / name).write_text(text)
    (destination / "model.safetensors").write_text("stale")
    copy_files_atomically(source, destination)
    assert sorted(p.name for p in destination.iterdir()) == ["config.json", "model.safetensors"]
    assert (destination / "model.safetensors").read_text() == "x" * 1000
