"""Teacher logits on a transfer set, kept in the teacher-output store: computed once, keyed by
teacher and text; and `kdbert augment --method bilstm` end to end on generated GLUE files."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import count_teacher_runs, save_tiny_classifier, store_namespaces
from safetensors.numpy import load_file
from transformers import BertForSequenceClassification

from kdbert.cli import main
from kdbert.core.teacher_store import TeacherStore
from kdbert.data.load import TaskOptions, load_task
from kdbert.core.teacher_logits import (
    label_with_teacher,
    labelling_namespace,
    newest_stored_logits,
    row_keys,
    store_folder,
)
from kdbert.errors import KdbertError

NLTK_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "nltk_data"
EXAMPLES = [("the cat sat", "a dog"), ("[MASK] cat is happy", "the dog ran fast"), ("the cat sat", "a dog"),
            ("red car", "blue")]


@pytest.fixture
def teacher(tmp_path, tiny_tokenizer):
    folder = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer, num_labels=3)
    return BertForSequenceClassification.from_pretrained(folder).eval()


def direct(model, tokenizer, examples):
    with torch.no_grad():
        return np.stack([model(**tokenizer(*texts, return_tensors="pt")).logits[0].numpy() for texts in examples])


def test_logits_are_the_teachers_with_its_mask_token_and_computed_once(tmp_path, teacher, tiny_tokenizer, monkeypatch):
    seen = count_teacher_runs(monkeypatch)
    store = tmp_path / "store"
    got = label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, store, max_seq_len=32, batch_size=2)
    np.testing.assert_allclose(got, direct(teacher, tiny_tokenizer, EXAMPLES), rtol=0, atol=1e-5)
    assert len(seen) == 3  # the repeated example runs once
    again = label_with_teacher(teacher, tiny_tokenizer, EXAMPLES[::-1], store, max_seq_len=32, batch_size=2)
    assert np.array_equal(again, got[::-1]) and len(seen) == 3  # reused, in the new order
    more = EXAMPLES + [("blue house", "a tree")]
    label_with_teacher(teacher, tiny_tokenizer, more, store, max_seq_len=32)
    assert seen[3:] == [("blue house", "a tree")]  # a changed file computes only its new rows
    namespace = labelling_namespace(teacher, tiny_tokenizer, 32)
    stored = TeacherStore(store, namespace, "--logits-cache")
    assert stored.entries_at_start == 4 and not stored.skipped_shards
    key = row_keys(namespace, [("red car", "blue")])[0]
    assert stored.get(key, "logits").dtype == torch.float32 and stored.get(key, "logits").shape == (3,)


def test_another_teacher_or_length_never_reads_these_logits(tmp_path, teacher, tiny_tokenizer, monkeypatch):
    store = tmp_path / "store"
    first = label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, store, max_seq_len=32)
    other = BertForSequenceClassification.from_pretrained(
        save_tiny_classifier(tmp_path / "other", tiny_tokenizer, num_labels=3, seed=1)).eval()
    seen = count_teacher_runs(monkeypatch)
    second = label_with_teacher(other, tiny_tokenizer, EXAMPLES, store, max_seq_len=32)
    np.testing.assert_allclose(second, direct(other, tiny_tokenizer, EXAMPLES), rtol=0, atol=1e-5)
    assert not np.allclose(first, second) and len(seen) == 3
    label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, store, max_seq_len=16)
    assert len(seen) == 6
    assert len(store_namespaces(store)) == 3  # three namespaces side by side in one folder


def test_the_newest_teachers_logits_beside_a_file(tmp_path, teacher, tiny_tokenizer):
    data = tmp_path / "train_aug.tsv"
    assert newest_stored_logits(data) is None
    first = label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, store_folder(data), max_seq_len=32)
    other = BertForSequenceClassification.from_pretrained(
        save_tiny_classifier(tmp_path / "other", tiny_tokenizer, num_labels=3, seed=1)).eval()
    stored = newest_stored_logits(data)
    assert stored.shape == (3, 3) and {tuple(r) for r in stored} == {tuple(r) for r in first}
    second = label_with_teacher(other, tiny_tokenizer, EXAMPLES, store_folder(data), max_seq_len=32)
    assert {tuple(r) for r in newest_stored_logits(data)} == {tuple(r) for r in second}


def test_bfloat16_labelling_is_close_stored_in_float32_and_apart_from_float32(tmp_path, teacher, tiny_tokenizer,
                                                                              monkeypatch):
    store = tmp_path / "store"
    full = label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, store, max_seq_len=32)
    seen = count_teacher_runs(monkeypatch)
    half = label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, store, max_seq_len=32, dtype="bfloat16")
    assert len(seen) == 3  # the float32 logits are not reused
    assert half.dtype == np.float32 and not np.array_equal(half, full)
    np.testing.assert_allclose(half, full, rtol=0, atol=0.05 * np.abs(full).max())
    float32_namespace = labelling_namespace(teacher, tiny_tokenizer, 32)
    bf16_namespace = labelling_namespace(teacher, tiny_tokenizer, 32, "bfloat16")
    assert float32_namespace != bf16_namespace and store_namespaces(store) == {float32_namespace, bf16_namespace}
    key = row_keys(bf16_namespace, EXAMPLES[:1])[0]
    assert TeacherStore(store, bf16_namespace, "--logits-cache").get(key, "logits").dtype == torch.float32
    label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, store, max_seq_len=32, dtype="bfloat16")
    assert len(seen) == 3  # reused
    with pytest.raises(KdbertError, match="precision 'float16' is unknown"):
        label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, store, max_seq_len=32, dtype="float16")


def test_wrong_label_count_refused_and_a_damaged_shard_never_trusted(tmp_path, teacher, tiny_tokenizer, monkeypatch):
    with pytest.raises(KdbertError, match="the teacher has 3 output"):
        label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, tmp_path / "store", 32, num_labels=2)
    assert not (tmp_path / "store").exists()  # refused before anything is written
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "shard-broken.safetensors").write_bytes(b"broken")
    seen = count_teacher_runs(monkeypatch)
    got = label_with_teacher(teacher, tiny_tokenizer, EXAMPLES, tmp_path / "store", 32)
    np.testing.assert_allclose(got, direct(teacher, tiny_tokenizer, EXAMPLES), rtol=0, atol=1e-5)
    assert len(seen) == 3  # computed, not read from the damaged shard
    reopened = TeacherStore(tmp_path / "store", labelling_namespace(teacher, tiny_tokenizer, 32), "--logits-cache")
    assert reopened.entries_at_start == 3 and reopened.skipped_shards[0].startswith("shard-broken.safetensors")


@pytest.mark.skipif(not NLTK_DATA.is_dir(), reason="needs the offline nltk_data folder")
def test_augment_method_bilstm_writes_the_task_format_and_stores_teacher_logits(tmp_path, glue_dir, tiny_tokenizer,
                                                                                 capsys):
    teacher_dir = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer, num_labels=2)
    for task in ("cola", "rte"):
        out = tmp_path / f"{task}_aug.tsv"
        code = main(["augment", "--method", "bilstm", "--task", task, "--data-dir", str(glue_dir), "--nltk-data",
                     str(NLTK_DATA), "--n-iter", "4", "--max-rows", "6", "--output", str(out),
                     "--teacher", str(teacher_dir)])
        assert code == 0, capsys.readouterr().err
        data = load_task(TaskOptions(task, data_dir=str(glue_dir), train_file=str(out)))
        originals = load_task(TaskOptions(task, data_dir=str(glue_dir))).train[:6]
        assert len(data.train) > len(originals) and all(ex in data.train for ex in originals)
        store = tmp_path / f"{task}_aug.tsv.teacher-logits"
        assert len(store_namespaces(store)) == 1
        assert {value.shape for shard in store.glob("shard-*.safetensors") for value in load_file(str(shard)).values()} \
            == {(2,)}
    assert "examples/s); teacher logits in" in capsys.readouterr().out


def test_augment_refuses_options_of_the_other_method(glue_dir, capsys):
    code = main(["augment", "--method", "bilstm", "--task", "rte", "--data-dir", str(glue_dir), "--mlm", "x"])
    assert code == 2 and "--mlm is not an option of --method bilstm" in capsys.readouterr().err
    code = main(["augment", "--task", "rte", "--data-dir", str(glue_dir), "--p-mask", "0.2"])
    assert code == 2 and "--p-mask is not an option of --method tinybert" in capsys.readouterr().err
    code = main(["augment", "--task", "rte", "--data-dir", str(glue_dir), "--word-vectors", "g.txt"])
    assert code == 2 and "--method tinybert needs --mlm" in capsys.readouterr().err


@pytest.mark.skipif(not NLTK_DATA.is_dir(), reason="needs the offline nltk_data folder")
def test_augment_method_bilstm_on_own_jsonl_data_writes_beside_it(tmp_path, capsys):
    rows = [{"review": "The film was good.", "stars": "5"}, {"review": "A bad, slow film!", "stars": "1"}]
    source = tmp_path / "reviews.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["augment", "--method", "bilstm", "--task", str(source), "--text-columns", "review", "--nltk-data",
                 str(NLTK_DATA), "--n-iter", "5", "--ngram-mode", "mask", "--seed", "7"])
    assert code == 0, capsys.readouterr().err
    written = [json.loads(line) for line in (tmp_path / "train_aug.jsonl").read_text().splitlines()]
    assert written[0] == rows[0] and rows[1] in written and 2 < len(written) <= 12
    assert {r["stars"] for r in written} == {"5", "1"} and all(set(r) == {"review", "stars"} for r in written)


def test_unlabelled_rows_keep_their_logits_beside_their_file(tmp_path, glue_dir):
    from dataclasses import replace

    from kdbert.core.teacher_logits import task_store_folder, unlabelled_store_folder
    from kdbert.data.tasks import GLUE_TASKS

    spec = GLUE_TASKS["sst2"]
    texts = tmp_path / "more.jsonl"
    texts.write_text('{"sentence": "a fine film"}\n')
    task = TaskOptions("sst2", data_dir=str(glue_dir), unlabelled=str(texts))
    assert unlabelled_store_folder(task, spec, None) == tmp_path / "more.jsonl.teacher-logits"
    assert unlabelled_store_folder(task, spec, str(tmp_path / "given")) == tmp_path / "given"
    # IMDb's unlabelled reviews are no file of the user's: stored as the training rows are
    assert unlabelled_store_folder(replace(task, unlabelled="imdb-unsup"), spec, None) == \
        task_store_folder(task, spec, None)


def test_an_onnx_export_labels_close_to_pytorch_under_its_own_namespace_and_is_counted(tmp_path, tiny_classifier_dir,
                                                                                        tiny_tokenizer, monkeypatch):
    """The teacher's export labels (ONNX Runtime: the fp32 graph matches PyTorch to float32 rounding
    over a few layers; int8 within its quantisation error), keyed by the graph's bytes apart from
    the PyTorch teacher's labels, and ``unstored_rows`` lists what a later search still labels."""
    from kdbert.core.teacher_logits import onnx_labelling_namespace, unstored_rows
    from kdbert.deploy.export import export_model

    export_model(tiny_classifier_dir, tmp_path / "onnx", quantize="int8")
    teacher = BertForSequenceClassification.from_pretrained(tiny_classifier_dir).eval()
    store, rows = tmp_path / "store", [texts[:1] for texts in EXAMPLES]
    reference = label_with_teacher(teacher, tiny_tokenizer, rows, store, max_seq_len=32)
    fp32, int8 = tmp_path / "onnx" / "model.onnx", tmp_path / "onnx" / "model.int8.onnx"
    seen = count_teacher_runs(monkeypatch)
    got = label_with_teacher(teacher, tiny_tokenizer, rows, store, max_seq_len=32, onnx=str(fp32))
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-4)
    assert len(seen) == 3  # not the PyTorch teacher's stored rows: its own
    quantised = label_with_teacher(teacher, tiny_tokenizer, rows, store, max_seq_len=32, onnx=str(int8))
    assert not np.array_equal(quantised, got) and np.abs(quantised - got).max() < 0.1 * np.abs(got).max() + 0.05
    namespaces = {onnx_labelling_namespace(f, tiny_tokenizer, 32) for f in (fp32, int8)}
    assert len(namespaces) == 2 and labelling_namespace(teacher, tiny_tokenizer, 32) not in namespaces
    namespace = onnx_labelling_namespace(int8, tiny_tokenizer, 32)
    assert unstored_rows(store, namespace, rows + [("new row",), ("new row",)]) == [("new row",)]
    assert unstored_rows(tmp_path / "nowhere", namespace, rows) == list(dict.fromkeys(rows))
    label_with_teacher(teacher, tiny_tokenizer, rows, store, max_seq_len=32, onnx=str(int8))
    assert len(seen) == 6  # stored: not labelled again


def test_an_export_of_another_task_is_refused(tmp_path, tiny_classifier_dir, tiny_tokenizer):
    from kdbert.deploy.export import export_model

    export_model(tiny_classifier_dir, tmp_path / "onnx")
    teacher = BertForSequenceClassification.from_pretrained(tiny_classifier_dir)
    with pytest.raises(KdbertError, match="export .*model.onnx has 2 output"):
        label_with_teacher(teacher, tiny_tokenizer, [("a",)], tmp_path / "s", 32, num_labels=3,
                           onnx=str(tmp_path / "onnx" / "model.onnx"))


def test_padded_tokens_counts_each_batch_of_the_shortest_first_order_at_its_longest_row(tiny_tokenizer):
    """What labelling's time grows with: rows sorted by length, each batch padded to its longest."""
    from conftest import WORDS

    from kdbert.core.teacher_logits import Labeller, padded_tokens

    word = WORDS[0]
    rows = [(" ".join([word] * n),) for n in (1, 3, 2, 5)]  # 3, 5, 4 and 7 tokens with [CLS] and [SEP]
    # shortest first: (3, 4) padded to 4, (5, 7) padded to 7
    assert padded_tokens(Labeller(None, tiny_tokenizer, 16), rows, batch_size=2) == 2 * 4 + 2 * 7
    assert padded_tokens(Labeller(None, tiny_tokenizer, 16), rows, batch_size=64) == 4 * 7
    assert padded_tokens(Labeller(None, tiny_tokenizer, 6), rows, batch_size=2) == 2 * 4 + 2 * 6  # cut to 6


def test_a_missing_export_is_refused_in_one_line_naming_it(tmp_path, tiny_tokenizer):
    from kdbert.core.teacher_logits import onnx_labelling_namespace

    missing = tmp_path / "model.int8.onnx"
    with pytest.raises(KdbertError, match=f"ONNX model {missing} does not exist; export one with `kdbert export"):
        onnx_labelling_namespace(missing, tiny_tokenizer, 32)
