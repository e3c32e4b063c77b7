"""Property-based tests of the data readers: whatever bytes a user's file holds, loading it
either returns exactly the rows written or raises one ``KdbertError`` naming the file (and the
row where there is one) - never another exception."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdbert.data.glue import read_glue_tsv
from kdbert.data.load import TaskOptions, load_task
from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

# Text a user may put in a cell: quotes, both separators, non-ASCII, but no line breaks
# (GLUE TSV rows are one line each).
CELL = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
               min_size=1, max_size=30).filter(lambda s: s.strip() == s and s)
LABEL = st.sampled_from(["neg", "pos", "mixed"])


def assert_one_line_error(error: KdbertError, path: Path) -> None:
    message = str(error)
    assert "\n" not in message
    assert message.startswith(str(path)), message


def load_or_error(path: Path, **options):
    try:
        return load_task(TaskOptions(str(path), **options))
    except KdbertError as error:
        assert_one_line_error(error, path)
        return error


@FUZZ
@given(rows=st.lists(st.tuples(CELL, LABEL), min_size=2, max_size=12), kind=st.sampled_from(["csv", "tsv"]),
       gz=st.booleans())
def test_written_csv_and_tsv_rows_read_back_exactly(tmp_path_factory, rows, kind, gz):
    path = tmp_path_factory.mktemp("csv") / f"train.{kind}{'.gz' if gz else ''}"
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, delimiter="\t" if kind == "tsv" else ",", lineterminator="\n")
    writer.writerow(["text", "label"])
    writer.writerows(rows)
    data = buffer.getvalue().encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    loaded = load_task(TaskOptions(str(path), dev_file=str(path)))
    labels = loaded.spec.labels
    assert [(ex.texts[0], labels[ex.label]) for ex in loaded.train] == rows


@FUZZ
@given(rows=st.lists(st.tuples(CELL, LABEL), min_size=1, max_size=8))
def test_written_jsonl_rows_read_back_exactly(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("jsonl") / "train.jsonl"
    path.write_text("\n".join(json.dumps({"text": t, "label": y}) for t, y in rows) + "\n", encoding="utf-8")
    loaded = load_task(TaskOptions(str(path), dev_file=str(path)))
    assert [(ex.texts[0], loaded.spec.labels[ex.label]) for ex in loaded.train] == rows


@FUZZ
@given(payload=st.binary(max_size=400), kind=st.sampled_from(["csv", "tsv", "jsonl", "tsv.gz"]))
def test_random_bytes_load_or_fail_with_one_line_error(tmp_path_factory, payload, kind):
    path = tmp_path_factory.mktemp("bytes") / f"train.{kind}"
    path.write_bytes(payload)
    result = load_or_error(path, dev_file=str(path))
    if not isinstance(result, KdbertError):
        assert len(result.train) >= 1


@FUZZ
@given(header=st.lists(st.sampled_from(["text", "label", "extra", "other"]), min_size=0, max_size=4),
       widths=st.lists(st.integers(min_value=0, max_value=5), min_size=0, max_size=6),
       quote=st.sampled_from(["", '"', "'"]))
def test_missing_and_extra_columns_and_stray_quotes(tmp_path_factory, header, widths, quote):
    path = tmp_path_factory.mktemp("cols") / "train.tsv"
    lines = ["\t".join(header)] + ["\t".join(f"{quote}cell{i}" if i == 0 else "pos" for i in range(w))
                                   for w in widths]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = load_or_error(path, dev_file=str(path))
    if not isinstance(result, KdbertError):
        assert len(header) == len(set(header)) and {"text", "label"} <= set(header)


@FUZZ
@given(payload=st.binary(max_size=300), task=st.sampled_from(["RTE", "CoLA", "STS-B", "MNLI"]))
def test_random_bytes_in_a_glue_file(tmp_path_factory, payload, task):
    spec = next(s for s in GLUE_TASKS.values() if s.glue_folder == task)
    path = tmp_path_factory.mktemp("glue") / "train.tsv"
    path.write_bytes(payload)
    try:
        read_glue_tsv(spec, path)
    except KdbertError as error:
        assert_one_line_error(error, path)


def test_non_utf8_file_names_the_line(tmp_path):
    path = tmp_path / "train.csv"
    path.write_bytes("text,label\ncaf\u00e9,pos\n".encode("utf-8") + b"na\xefve,neg\n")
    with pytest.raises(KdbertError, match=re.escape(f"{path}:3: not UTF-8 text (byte 0xef); re-save the file as UTF-8")):
        load_task(TaskOptions(str(path)))


def test_truncated_gzip_and_folder_are_one_line_errors(tmp_path):
    path = tmp_path / "train.tsv.gz"
    path.write_bytes(gzip.compress(b"text\tlabel\nhello\tpos\n")[:-6])
    with pytest.raises(KdbertError, match=re.escape(f"{path}: cannot read the file")):
        load_task(TaskOptions(str(path)))
    folder = tmp_path / "dev.csv"
    folder.mkdir()
    with pytest.raises(KdbertError, match="dev.csv does not exist"):
        load_task(TaskOptions(str(folder)))


def test_huge_row_reads_back(tmp_path):
    text = "word " * 200_000
    path = tmp_path / "train.tsv"
    path.write_text(f"text\tlabel\n{text.strip()}\tpos\nshort\tneg\n", encoding="utf-8")
    loaded = load_task(TaskOptions(str(path), dev_file=str(path)))
    assert len(loaded.train[0].texts[0]) == len(text.strip())
