"""IMDb: the aclImdb layout read from a folder or from tarballs, long texts cut by head, tail or
head+tail or read in windows with pooled logits, and a run through the CLI on a tiny generated copy."""

from __future__ import annotations

import io
import json
import random
import tarfile

import numpy as np
import pytest
import torch
from conftest import save_tiny_classifier, sentence
from test_cli import run_cli

from transformers import AutoModelForSequenceClassification

from kdbert.core.evaluate import TaskEvaluator, predict
from kdbert.core.trainer import Trainer
from kdbert.core.teacher_logits import label_with_teacher, labelling_namespace
from kdbert.data.batching import EncodedDataset, PaddingCollator, encode_examples, kept_positions, pool_windows
from kdbert.data.glue import Example
from kdbert.data.imdb import clean_review, load_imdb, load_imdb_unlabelled, shuffled
from kdbert.data.load import TaskOptions, load_task
from kdbert.errors import KdbertError
from kdbert.methods.finetune import FinetuneConfig, finetune


def imdb_files(n: int = 6, seed: int = 0) -> dict[str, str]:
    """``aclImdb/...`` path -> review text: n reviews per labelled folder, 2n unlabelled; the
    first word says the folder, the second the id (ratings 1-4 neg, 7-10 pos, 0 unsup)."""
    rng = random.Random(seed)
    files = {}
    for split in ("train", "test"):
        for folder, ratings in (("neg", (1, 4)), ("pos", (7, 10))):
            for i in range(n):
                files[f"aclImdb/{split}/{folder}/{i}_{rng.randint(*ratings)}.txt"] = \
                    f"{folder} id{i} {sentence(rng, 20, 40)}<br /><br />{sentence(rng)}"
    for i in range(2 * n):
        files[f"aclImdb/train/unsup/{i}_0.txt"] = f"unsup id{i} {sentence(rng)}"
    return files


def write_folder(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def write_tarballs(root, files):
    """A labelled and an unlabelled archive, as ../shared/data/imdb ships them."""
    root.mkdir(parents=True, exist_ok=True)
    for archive, keep in (("labelled.tar.gz", lambda n: "/unsup/" not in n), ("unsup.tar.gz", lambda n: "/unsup/" in n)):
        with tarfile.open(root / archive, "w:gz") as tar:
            for name, text in files.items():
                if keep(name):
                    data = text.encode()
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return root


def test_folder_and_tarballs_read_the_same_rows_in_a_fixed_shuffled_order(tmp_path):
    files = imdb_files()
    folder = load_imdb(write_folder(tmp_path / "unpacked", files))
    for data_dir in (tmp_path / "unpacked" / "aclImdb", write_tarballs(tmp_path / "packed", files)):
        other = load_imdb(data_dir)
        assert other.train == folder.train and other.dev == folder.dev
    assert list(folder.dev) == ["test"] and len(folder.train) == len(folder.dev["test"]) == 12
    # labels follow the folder; texts are cleaned; the order is the seeded shuffle of neg 0..5, pos 0..5
    expected = shuffled("train", [(f, i) for f in ("neg", "pos") for i in range(6)])
    assert [tuple(ex.texts[0].split()[:2]) for ex in folder.train] == [(f, f"id{i}") for f, i in expected]
    assert [ex.label for ex in folder.train] == [0 if f == "neg" else 1 for f, _ in expected]
    assert all("<br" not in ex.texts[0] for ex in folder.train)
    assert expected != sorted(expected)  # not the file order: a prefix samples both classes
    unlabelled = load_imdb_unlabelled(tmp_path / "packed")
    assert len(unlabelled) == 12 and {ex.label for ex in unlabelled} == {None}
    assert sorted(ex.texts[0].split()[1] for ex in unlabelled) == sorted(f"id{i}" for i in range(12))


def test_clean_review_replaces_html_line_breaks():
    assert clean_review(" Great.<br /><br />Really.<BR/>Yes<br> ") == "Great.  Really. Yes"


def test_bad_imdb_folders_give_one_line_errors(tmp_path):
    with pytest.raises(KdbertError, match="--task imdb needs --data-dir"):
        load_imdb(None)
    with pytest.raises(KdbertError, match="neither an aclImdb folder"):
        load_imdb(tmp_path)
    files = {k: v for k, v in imdb_files().items() if "/test/pos/" not in k}
    with pytest.raises(KdbertError, match=r"no reviews in aclImdb/test/pos/"):
        load_imdb(write_folder(tmp_path / "partial", files))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "a.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(KdbertError, match=r"a\.tar\.gz: cannot read the archive"):
        load_imdb(tmp_path / "broken")


@pytest.mark.parametrize("truncation,kept", [
    ("head", [0, 1, 2, 3, 4, 5, 6, 11]),      # [CLS], the first 6, [SEP]
    ("tail", [0, 5, 6, 7, 8, 9, 10, 11]),     # [CLS], the last 6, [SEP]
    ("head+tail", [0, 1, 2, 7, 8, 9, 10, 11]),  # round(6 / 4) = 2 from the head, 4 from the tail
])
def test_kept_positions_by_hand(truncation, kept):
    mask = [1] + [0] * 10 + [1]
    assert kept_positions(mask, 8, truncation) == kept
    assert kept_positions(mask, 12, truncation) == list(range(12))


def test_head_and_tail_shares_at_512_tokens():
    kept = kept_positions([1] + [0] * 1000 + [1], 512, "head+tail")
    assert len(kept) == 512 and kept[:129] == list(range(129))  # [CLS] + 128 head tokens
    assert kept[129:] == list(range(1002 - 383, 1002))  # 382 tail tokens + [SEP]


def test_encode_examples_cuts_long_texts_by_the_strategy(tiny_tokenizer):
    words = "the a cat dog sat on mat ran fast slow".split()
    rows = [Example((" ".join(words),), 1), Example(("cat dog",), 0)]
    decoded = {t: [tiny_tokenizer.decode(r["input_ids"], skip_special_tokens=True)
                   for r in encode_examples(tiny_tokenizer, rows, 8, t).features] for t in ("head", "tail", "head+tail")}
    assert decoded == {"head": ["the a cat dog sat on", "cat dog"], "tail": ["sat on mat ran fast slow", "cat dog"],
                       "head+tail": ["the a mat ran fast slow", "cat dog"]}
    tail = encode_examples(tiny_tokenizer, rows, 8, "tail").features[0]
    assert tail["attention_mask"] == [1] * 8 and tail["token_type_ids"] == [0] * 8 and tail["labels"] == 1
    # a row within the limit is kept whole, the same as the tokenizer's own truncation makes it
    assert encode_examples(tiny_tokenizer, rows, 8, "tail").features[1] == \
        encode_examples(tiny_tokenizer, rows, 8, "head").features[1]
    with pytest.raises(KdbertError, match="applies to single-text tasks"):
        encode_examples(tiny_tokenizer, [Example(("a b", "c d"), 0)], 8, "tail")


def test_windows_cover_a_long_text_sharing_the_stride_by_hand(tiny_tokenizer):
    words = "the a cat dog sat on mat ran fast slow".split()
    rows = [Example((" ".join(words),), 1), Example(("cat dog",), 0)]
    windows = encode_examples(tiny_tokenizer, rows, 8, "windows", doc_stride=2).features
    decoded = [tiny_tokenizer.decode(r["input_ids"], skip_special_tokens=True) for r in windows]
    # 6 text tokens per window; each next window starts 2 tokens before the last one ended
    assert decoded == ["the a cat dog sat on", "sat on mat ran fast slow", "cat dog"]
    assert [r["example"] for r in windows] == [0, 0, 1] and [r["labels"] for r in windows] == [1, 1, 0]
    assert [len(r["input_ids"]) for r in windows] == [8, 8, 4]
    three = encode_examples(tiny_tokenizer, rows, 8, "windows", doc_stride=4).features
    assert [tiny_tokenizer.decode(r["input_ids"], skip_special_tokens=True) for r in three] == \
        ["the a cat dog sat on", "cat dog sat on mat ran", "sat on mat ran fast slow", "cat dog"]
    with pytest.raises(KdbertError, match="--doc-stride 6 does not fit windows of --max-seq-len 8: they hold 6 "
                                          "text tokens, so share at most 5; lower --doc-stride"):
        encode_examples(tiny_tokenizer, rows, 8, "windows", doc_stride=6)
    with pytest.raises(KdbertError, match="applies to single-text tasks"):
        encode_examples(tiny_tokenizer, [Example(("a b", "c d"), 0)], 8, "windows")


def test_pool_windows_averages_each_texts_logits_by_hand():
    logits = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, -1.0]], dtype=np.float32)
    windows = EncodedDataset([{"input_ids": [1], "example": 0}, {"input_ids": [2], "example": 0},
                              {"input_ids": [3], "example": 1}])
    assert pool_windows(logits, windows).tolist() == [[2.0, 4.0], [5.0, -1.0]]
    plain = EncodedDataset([{"input_ids": [1]}, {"input_ids": [2]}, {"input_ids": [3]}])
    assert pool_windows(logits, plain) is logits


def window_logits_one_by_one(model, tokenizer, texts: list[str], max_seq_len: int, doc_stride: int) -> np.ndarray:
    """Each text's windows run alone through ``model`` (no padding), their logits averaged."""
    pooled = []
    for text in texts:
        encoded = tokenizer(text, truncation=True, max_length=max_seq_len, stride=doc_stride,
                            return_overflowing_tokens=True)
        with torch.no_grad():
            window = [model(input_ids=torch.tensor([ids])).logits[0].numpy() for ids in encoded["input_ids"]]
        pooled.append(np.mean(window, axis=0))
    return np.stack(pooled)


def test_windows_evaluator_and_teacher_labels_average_each_reviews_windows(tmp_path, tiny_tokenizer):
    root = write_folder(tmp_path / "imdb", imdb_files())
    data = load_task(TaskOptions("imdb", data_dir=str(root), truncation="windows", doc_stride=4))
    assert data.spec.truncation == "windows" and data.spec.doc_stride == 4
    model = AutoModelForSequenceClassification.from_pretrained(save_tiny_classifier(tmp_path / "m", tiny_tokenizer))
    reviews = data.dev["test"]
    expected = window_logits_one_by_one(model, tiny_tokenizer, [ex.texts[0] for ex in reviews], 16, 4)
    evaluator = TaskEvaluator(data, tiny_tokenizer, 16, batch_size=5)
    assert len(evaluator.splits["test"]) > len(reviews)  # several windows per review
    np.testing.assert_allclose(evaluator.predict(model, evaluator.splits["test"]), expected, atol=1e-5)
    labels = np.array([ex.label for ex in reviews])
    assert evaluator(model)["accuracy"] == pytest.approx(100 * np.mean(expected.argmax(-1) == labels))
    texts = [ex.texts for ex in reviews]
    stored = label_with_teacher(model, tiny_tokenizer, texts, tmp_path / "store", 16, batch_size=3,
                                truncation="windows", doc_stride=4)
    np.testing.assert_allclose(stored, expected, atol=1e-5)
    assert len({labelling_namespace(model, tiny_tokenizer, 16, truncation=t, doc_stride=d)
                for t, d in (("head", 4), ("windows", 4), ("windows", 8), ("tail", 4))}) == 4


def test_task_options_set_truncation_and_cut_dev(tmp_path, glue_dir):
    root = write_folder(tmp_path, imdb_files())
    data = load_task(TaskOptions("imdb", data_dir=str(root), truncation="head+tail", max_dev_examples=5))
    assert data.spec.truncation == "head+tail" and len(data.dev["test"]) == 5
    assert data.dev["test"] == load_imdb(root).dev["test"][:5]
    with pytest.raises(KdbertError, match="mrpc has pairs; leave --truncation at head"):
        load_task(TaskOptions("mrpc", data_dir=str(glue_dir), truncation="tail"))
    with pytest.raises(KdbertError, match="imdb-unsup is IMDb's transfer set and the task is sst2"):
        load_task(TaskOptions("sst2", data_dir=str(glue_dir), unlabelled="imdb-unsup"))
    texts = tmp_path / "more.csv"
    texts.write_text("review\nthe cat sat\n")
    with pytest.raises(KdbertError, match=r"more.csv:2: column\(s\) \['sentence'\] not found"):
        load_task(TaskOptions("sst2", data_dir=str(glue_dir), unlabelled=str(texts)))
    texts.write_text("sentence\nthe cat sat\na dog ran\n")
    data = load_task(TaskOptions("sst2", data_dir=str(glue_dir), unlabelled=str(texts), max_unlabelled=1))
    assert data.unlabelled == [Example(("the cat sat",), None)]


@pytest.mark.parametrize("truncation", ["tail", "windows"])
def test_finetune_and_distil_imdb_from_tarballs_with_long_text_truncation(tmp_path, capsys, tiny_tokenizer,
                                                                          truncation):
    root = write_tarballs(tmp_path / "imdb", imdb_files())
    model = save_tiny_classifier(tmp_path / "tiny", tiny_tokenizer)
    window = ["--doc-stride", 8] if truncation == "windows" else []
    common = ["--task", "imdb", "--data-dir", root, "--truncation", truncation, "--max-seq-len", 24, *window,
              "--no-progress"]
    code, stdout, _ = run_cli(capsys, "finetune", "--model", model, "--output-dir", tmp_path / "teacher",
                              "--max-steps", 2, "--batch-size", 4, *common)
    assert code == 0 and "test/accuracy=" not in stdout and "accuracy=" in stdout
    code, _, _ = run_cli(capsys, "distill", "task", "--method", "kd", "--teacher", tmp_path / "teacher",
                         "--student-layers", 1, "--output-dir", tmp_path / "kd", "--max-steps", 2, *common)
    assert code == 0
    report = json.loads((tmp_path / "kd" / "distill_report.json").read_text())
    assert report["task"] == "imdb" and report["options"]["task"] == "imdb"
    windows = None if truncation == "tail" else len(
        encode_examples(tiny_tokenizer, load_imdb(root).train, 24, "windows", doc_stride=8).features)
    assert report["train_rows"] == 12 and report.get("train_windows") == windows
    finetuned = finetune(TaskOptions("imdb", data_dir=str(root), truncation=truncation, doc_stride=8),
                         FinetuneConfig(model=str(model), output_dir=str(tmp_path / "api"), max_steps=1, batch_size=4,
                                        max_seq_len=24, no_progress=True))
    assert finetuned.get("train_windows") == windows  # fine-tuning reports its windows too
    code, _, _ = run_cli(capsys, "evaluate", "--model", tmp_path / "kd", "--task", "imdb", "--data-dir", root,
                         "--truncation", truncation, "--max-seq-len", 24, *window)
    assert code == 0
    evaluated = json.loads((tmp_path / "kd" / "eval_imdb.json").read_text())
    assert evaluated["accuracy"] == pytest.approx(report["dev_metrics"]["accuracy"])


def test_unlabelled_reviews_are_labelled_by_the_teacher_and_trained_on(tmp_path, capsys, tiny_tokenizer,
                                                                       monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # where a read-only data folder's logits go
    root = write_folder(tmp_path / "imdb", imdb_files())
    teacher = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer, seed=3)
    common = ["--task", "imdb", "--data-dir", root, "--max-seq-len", 24, "--no-progress"]
    code, stdout, _ = run_cli(capsys, "distill", "task", "--method", "kd", "--teacher", teacher, "--student-layers", 1,
                              "--output-dir", tmp_path / "kd", "--max-steps", 1, "--unlabelled", "imdb-unsup",
                              "--max-unlabelled", 10, *common)
    assert code == 0 and "unlabelled: 10 rows labelled by the teacher" in stdout
    report = json.loads((tmp_path / "kd" / "distill_report.json").read_text())
    # the teacher's own argmax on the first 10 unlabelled reviews, computed here directly
    rows = load_imdb_unlabelled(root)[:10]
    logits = predict(AutoModelForSequenceClassification.from_pretrained(teacher),
                     encode_examples(tiny_tokenizer, rows, 24), PaddingCollator(tiny_tokenizer.pad_token_id))
    positive = float((logits.argmax(-1) == 1).mean())
    assert report["unlabelled"]["rows"] == 10
    assert report["unlabelled"]["store"] == str(tmp_path / "cache" / "kdbert" / "teacher-logits")
    assert report["unlabelled"]["label_shares"] == {"neg": pytest.approx(1 - positive), "pos": pytest.approx(positive)}
    assert report["options"]["unlabelled"] == "imdb-unsup" and report["options"]["max_unlabelled"] == 10
    assert report["train_rows"] == 12 + 10


def test_unlabelled_rows_wait_for_the_epoch_asked(tmp_path, capsys, tiny_tokenizer, monkeypatch):
    """--unlabelled-from-epoch 1: the run's first epoch reads the 12 labelled reviews alone, its second
    the 10 unlabelled ones too (the row order each stage trains with, read as training starts)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = write_folder(tmp_path / "imdb", imdb_files())
    teacher = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer, seed=3)
    seen = []
    original = Trainer.train

    def train(self, resume=False):
        seen.extend([sorted(i for batch in stage.order(epoch) for i in batch) for epoch in (0, 1)]
                    for stage in self.stages)
        return original(self, resume=resume)

    monkeypatch.setattr(Trainer, "train", train)
    code, _, _ = run_cli(capsys, "distill", "task", "--method", "kd", "--teacher", teacher, "--student-layers", 1,
                         "--output-dir", tmp_path / "kd", "--max-steps", 1, "--unlabelled", "imdb-unsup",
                         "--max-unlabelled", 10, "--unlabelled-from-epoch", 1, "--task", "imdb", "--data-dir", root,
                         "--max-seq-len", 24, "--no-progress")
    assert code == 0 and seen == [[list(range(12)), list(range(22))]]
    report = json.loads((tmp_path / "kd" / "distill_report.json").read_text())
    assert report["options"]["unlabelled_from_epoch"] == 1  # a resumed run must share it
    code, _, stderr = run_cli(capsys, "distill", "task", "--method", "kd", "--teacher", teacher, "--student-layers", 1,
                              "--output-dir", tmp_path / "windows", "--max-steps", 1, "--unlabelled", "imdb-unsup",
                              "--unlabelled-from-epoch", 1, "--truncation", "windows", "--doc-stride", 8, "--task", "imdb",
                              "--data-dir", root, "--max-seq-len", 24, "--no-progress")
    assert code == 2 and "--unlabelled-from-epoch needs a method that trains on the rows one to one" in stderr
