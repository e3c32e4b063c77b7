"""GLUE readers for all nine tasks, users' own files, and bad-input messages."""

from __future__ import annotations

import json

import pytest
from conftest import GLUE_FOLDERS, SHARED_GLUE, write_glue_task

from kdbert.data.batching import PaddingCollator, encode_examples, epoch_order, labelled_first_order
from kdbert.data.glue import hf_label_to_id
from kdbert.data.load import TaskOptions, load_task
from kdbert.data.tasks import GLUE_TASKS, canonical_task_name
from kdbert.errors import KdbertError


def rows_header(glue_dir, folder) -> list[str]:
    return (glue_dir / folder / "train.tsv").read_text().splitlines()[0].split("\t")


@pytest.mark.parametrize("folder", GLUE_FOLDERS)
def test_every_glue_task_reads_from_generated_files(glue_dir, folder):
    name = canonical_task_name(folder)
    data = load_task(TaskOptions(name, data_dir=str(glue_dir)))
    spec = GLUE_TASKS[name]
    assert len(data.train) == 40
    assert set(data.dev) == set(spec.dev_splits)
    rows = (glue_dir / folder / "train.tsv").read_text().splitlines()[(0 if folder == "CoLA" else 1):]
    for example, row in zip(data.train, rows):
        fields = row.split("\t")
        assert list(example.texts) == [fields[spec.file_columns[f]] if folder == "CoLA" else
                                       fields[rows_header(glue_dir, folder).index(spec.file_columns[f])]
                                       for f in spec.text_fields]
        label = fields[1] if folder == "CoLA" else fields[rows_header(glue_dir, folder).index(spec.file_columns["label"])]
        assert example.label == (float(label) if spec.is_regression else spec.labels.index(label))


def test_gzipped_files_read_the_same(tmp_path):
    plain = write_glue_task(tmp_path / "plain", "MRPC")
    zipped = write_glue_task(tmp_path / "zipped", "MRPC", gz=True)
    a = load_task(TaskOptions("mrpc", data_dir=str(plain.parent)))
    b = load_task(TaskOptions("mrpc", data_dir=str(zipped.parent)))
    assert a.train == b.train and a.dev == b.dev


def test_mnli_labels_map_by_name_whatever_the_source(glue_dir):
    spec = GLUE_TASKS["mnli"]
    assert spec.labels == ("entailment", "neutral", "contradiction")
    rows = (glue_dir / "MNLI" / "train.tsv").read_text().splitlines()[1:]
    data = load_task(TaskOptions("mnli", data_dir=str(glue_dir)))
    for line, example in zip(rows, data.train):
        assert spec.labels[example.label] == line.split("\t")[-1]
    # HF datasets orders MNLI's names the same way; a reordered source still maps by name
    assert hf_label_to_id(spec, ["contradiction", "entailment", "neutral"], 0) == 2
    assert hf_label_to_id(spec, ["entailment", "neutral", "contradiction"], 1) == 1


@pytest.mark.skipif(not SHARED_GLUE.is_dir(), reason="../shared/data/glue_data not present")
@pytest.mark.parametrize("task,n_train,n_dev", [("cola", 8551, 1043), ("mrpc", 3668, 408), ("rte", 2490, 277),
                                                ("stsb", 5749, 1500), ("wnli", 635, 71)])
def test_real_glue_row_counts(task, n_train, n_dev):
    data = load_task(TaskOptions(task, data_dir=str(SHARED_GLUE)))
    assert (len(data.train), len(data.dev["dev"])) == (n_train, n_dev)


def test_row_with_wrong_field_count_names_file_and_line(glue_dir):
    path = glue_dir / "RTE" / "train.tsv"
    lines = path.read_text().splitlines()
    lines[3] = lines[3] + "\textra"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(KdbertError, match=r"RTE/train.tsv:4: expected 4 tab-separated fields, found 5"):
        load_task(TaskOptions("rte", data_dir=str(glue_dir)))


def test_label_outside_label_set_names_file_and_line(glue_dir):
    path = glue_dir / "SST-2" / "dev.tsv"
    lines = path.read_text().splitlines()
    lines[2] = "a sentence\t7"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(KdbertError, match=r"SST-2/dev.tsv:3: label '7' is not one of \['0', '1'\]"):
        load_task(TaskOptions("sst2", data_dir=str(glue_dir)))


def test_missing_dirs_and_unknown_task(tmp_path, glue_dir):
    with pytest.raises(KdbertError, match="GLUE data dir .* does not exist; pass --data-dir"):
        load_task(TaskOptions("rte", data_dir=str(tmp_path / "nowhere")))
    empty = tmp_path / "empty_glue"
    empty.mkdir()
    with pytest.raises(KdbertError, match="task folder .*RTE does not exist"):
        load_task(TaskOptions("rte", data_dir=str(empty)))
    with pytest.raises(KdbertError, match="unknown task 'glu'"):
        load_task(TaskOptions("glu", data_dir=str(glue_dir)))
    (glue_dir / "QNLI" / "train.tsv").unlink()
    with pytest.raises(KdbertError, match="missing .*QNLI/train.tsv"):
        load_task(TaskOptions("qnli", data_dir=str(glue_dir)))


def test_user_csv_classification_with_held_out_fraction(tmp_path):
    path = tmp_path / "reviews.csv"
    rows = ["text,label"] + [f"\"review {i}, good\",{['neg', 'pos', 'mixed'][i % 3]}" for i in range(30)]
    path.write_text("\n".join(rows) + "\n")
    data = load_task(TaskOptions(str(path), text_columns=("text",), dev_fraction=0.2))
    assert data.spec.labels == ("mixed", "neg", "pos")
    assert data.spec.metrics == ("accuracy", "macro_f1")
    assert (len(data.train), len(data.dev["dev"])) == (24, 6)
    assert data.train[0].texts[0].startswith("review ")


def test_user_jsonl_pair_regression_with_dev_file(tmp_path):
    for name, n in (("train.jsonl", 10), ("dev.jsonl", 4)):
        (tmp_path / name).write_text("\n".join(json.dumps({"a": f"x {i}", "b": "y", "y": i / 2}) for i in range(n)))
    data = load_task(TaskOptions(str(tmp_path / "train.jsonl"), text_columns=("a", "b"), label_column="y",
                                 dev_file=str(tmp_path / "dev.jsonl"), regression=True))
    assert data.spec.is_regression and data.spec.is_pair
    assert data.spec.metrics == ("pearson", "spearman")
    assert data.train[3].label == 1.5 and len(data.dev["dev"]) == 4


def test_user_file_errors_name_file_line_and_column(tmp_path):
    path = tmp_path / "d.tsv"
    path.write_text("sentence\tlabel\nhello\t1\n")
    with pytest.raises(KdbertError, match=r"d.tsv:2: column\(s\) \['text'\] not found"):
        load_task(TaskOptions(str(path)))
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\nhello\t5\n")
    with pytest.raises(KdbertError, match=r"dev.tsv:2: label '5' is not one of \['1'\]"):
        load_task(TaskOptions(str(path), text_columns=("sentence",), dev_file=str(dev)))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "label": 1}\n{oops\n')
    with pytest.raises(KdbertError, match=r"bad.jsonl:2: not valid JSON"):
        load_task(TaskOptions(str(bad)))


def test_dynamic_padding_and_length_grouping(tiny_tokenizer, glue_dir):
    data = load_task(TaskOptions("rte", data_dir=str(glue_dir)))
    dataset = encode_examples(tiny_tokenizer, data.train, max_seq_len=12)
    assert max(dataset.lengths) <= 12
    batch = PaddingCollator(tiny_tokenizer.pad_token_id)([dataset[i] for i in range(4)])
    assert batch["input_ids"].shape[1] == max(dataset.lengths[:4])
    assert batch["attention_mask"].sum(1).tolist() == dataset.lengths[:4]
    order = epoch_order(dataset.lengths, 4, seed=1, epoch=0)
    assert sorted(order) == list(range(len(dataset)))
    assert order == epoch_order(dataset.lengths, 4, seed=1, epoch=0)
    assert order != epoch_order(dataset.lengths, 4, seed=1, epoch=1)


def test_unlabelled_rows_join_the_batches_from_the_epoch_asked():
    lengths = [3, 9, 4, 7, 5, 8, 2, 6, 10, 1]  # the first 6 rows labelled, the last 4 --unlabelled rows
    order = labelled_first_order(lengths, 4, seed=1, labelled=6, from_epoch=2)
    for epoch in (0, 1):  # the labelled rows alone, each once, in batches of at most 4
        batches = order(epoch)
        assert sorted(i for b in batches for i in b) == list(range(6)) and [len(b) for b in batches] == [4, 2]
    assert sorted(i for b in order(2) for i in b) == list(range(10))  # every row from the epoch asked
    assert order(2) == order(2) and order(0) != order(1)  # a pure function of (seed, epoch)
