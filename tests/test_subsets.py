"""``--train-subset``: which rows ``--max-train-examples`` keeps (kdbert.data.subsets)."""

from __future__ import annotations

import pytest

from kdbert.cli import main
from kdbert.compress.recipes import SearchSettings, run_options
from kdbert.data.glue import Example, TaskData
from kdbert.data.subsets import training_rows
from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate

import kdbert.data.subsets as subsets_module


def text(words: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(words))


def phrases_and_sentences() -> TaskData:
    """SST-2's shape in small: 60 phrases of 1-2 words and 20 sentences of 10-13 words (five of each
    length), one sentence after every three phrases; dev 40 sentences of 10-13 words (ten of each)."""
    train = []
    for i in range(20):
        train += [Example((text(1 + (i + k) % 2, f"p{i}-{k}-"),), k % 2) for k in range(3)]
        train.append(Example((text(10 + i % 4, f"s{i}-"),), i % 2))
    dev = [Example((text(10 + i % 4, f"d{i}-"),), i % 2) for i in range(40)]
    return TaskData(spec=GLUE_TASKS["sst2"], train=train, dev={"dev": dev})


def test_like_dev_reads_rows_of_devs_lengths_first_in_file_order():
    data = phrases_and_sentences()
    sentences = [row for row in data.train if len(row.texts[0].split()) >= 10]
    assert training_rows(data, 20, "like-dev") == sentences  # all 20, as the file orders them
    # five more than there are rows of dev's lengths: the file's first five others follow, in file order
    picked = training_rows(data, 25, "like-dev")
    others = [row for row in data.train if row not in sentences][:5]
    assert picked == [row for row in data.train if row in sentences or row in others]
    assert training_rows(data, 20, "first") == data.train[:20]  # 15 phrases, 5 sentences
    assert training_rows(data, None, "like-dev") is data.train and training_rows(data, 80, "like-dev") is data.train


def test_like_dev_is_first_where_lengths_agree_and_unknown_subset_is_refused():
    data = phrases_and_sentences()
    alike = TaskData(spec=data.spec, train=data.train, dev={"dev": data.train[::2]})  # dev drawn from training
    assert training_rows(alike, 20, "like-dev") == data.train[:20]
    with pytest.raises(KdbertError, match="--train-subset longest is unknown; choose one of first, like-dev"):
        training_rows(data, 20, "longest")


def test_the_search_passes_the_subset_to_its_runs():
    cut = Candidate("bert-2x256", "x", (), build=None, from_teacher=lambda teacher, context: teacher)
    options = run_options(cut, 400, SearchSettings(max_train_examples=5000, train_subset="first"), "cache")
    assert (options["max_train_examples"], options["train_subset"]) == (5000, "first")
    assert "train_subset" not in run_options(cut, 400, SearchSettings(), "cache")  # every row: no subset to name


def spy(monkeypatch, module: str) -> list:
    """Record ``(count, subset)`` of every ``training_rows`` call that ``module`` makes."""
    calls = []

    def recorded(data, count, subset="first"):
        calls.append((count, subset))
        return subsets_module.training_rows(data, count, subset)

    monkeypatch.setattr(f"{module}.training_rows", recorded)
    return calls


def test_finetune_and_distill_read_the_subset(monkeypatch, tmp_path, glue_dir, tiny_classifier_dir):
    finetuned, distilled = spy(monkeypatch, "kdbert.methods.finetune"), spy(monkeypatch, "kdbert.methods.front")
    common = ["--task", "sst2", "--data-dir", str(glue_dir), "--max-steps", "1", "--max-train-examples", "8",
              "--batch-size", "4", "--no-progress"]
    assert main(["finetune", "--model", str(tiny_classifier_dir), "--output-dir", str(tmp_path / "t"),
                 "--train-subset", "like-dev", *common]) == 0
    assert main(["distill", "task", "--method", "kd", "--teacher", str(tmp_path / "t"), "--student",
                 str(tiny_classifier_dir), "--output-dir", str(tmp_path / "s"), *common]) == 0
    assert (8, "like-dev") in finetuned and distilled == [(8, "first")]  # the default
