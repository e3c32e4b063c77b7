"""``kdbert mine-pairs``: sentence pairs mined from plain text by TF-IDF nearest neighbour, written as
``--unlabelled`` rows of a pair task."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from conftest import write_glue_task

from kdbert.cli import main
from kdbert.compress import mined_pairs
from kdbert.data.load import TaskOptions, load_task


def test_each_sentence_is_paired_with_its_nearest_other_and_copies_are_left_out():
    texts = ["the river flows past the old mill town", "the river flows past the old mill village",
             "the river flows past the old mill town",  # a copy of the first: never its pair
             "chess players study openings every evening",  # the same words as the next once words seen
             "chess players study openings each morning",  # once are dropped: copies too
             "volcanic ash covered the northern valleys"]
    vectoriser, pairs = mined_pairs.mine(texts, low=0.3)
    assert {(i, j) for i, j, _ in pairs} == {(0, 1), (1, 2)}  # 0 and 2 pair with 1, not each other
    cosines = mined_pairs.pair_cosines(vectoriser, [(texts[i], texts[j]) for i, j, _ in pairs])
    assert [c for _, _, c in pairs] == pytest.approx(list(cosines), abs=1e-6)
    # by hand (smoothed idf = 1 + ln(7 / (1 + df)) over 6 rows; "the" and "mill" are stop words, "village"
    # is seen once): the village row holds river, flows, past, old (df 3) and its pair those and town (df 2)
    shared, town = 1 + np.log(7 / 4), 1 + np.log(7 / 3)
    assert pairs[0][2] == pytest.approx(np.sqrt(4 * shared**2 / (4 * shared**2 + town**2)), rel=1e-5)
    assert mined_pairs.mine(texts, low=0.99)[1] == []


def topic_corpus(path, topics: int = 6):
    """A gzip corpus: per topic a line of three sentences of 12 words that share the topic's six (cosine
    0.84 within a topic, 0.19 across); and a line of short sentences (under 10 words) that are never mined."""
    lines = []
    for t in range(topics):
        core = " ".join(f"topic{t}word{k}" for k in range(6))
        lines.append(" ".join(f"The {core} sits beside shared{s} and common{s}." for s in range(3)))
    lines.append("Short one. Another short sentence here. Tiny.")
    with gzip.open(path, "wt") as handle:
        handle.write("<doc id=1>\n" + "\n".join(lines) + "\n</doc>\n")
    return path


def test_mined_pairs_keep_at_most_rows_from_each_topic_in_a_seeded_order(tmp_path):
    corpus = topic_corpus(tmp_path / "corpus.txt.gz")
    mined = mined_pairs.mine_pairs([corpus], low=0.4, rows=100, seed=0)
    assert mined.sentences == 18  # the short line gives none
    topic = lambda text: text.split()[1]
    assert mined.pairs and all(topic(a) == topic(b) and a != b for a, b in mined.pairs)
    assert len({frozenset(pair) for pair in mined.pairs}) == len(mined.pairs)  # each unordered pair once
    assert all(0.4 <= c < mined_pairs.COPY for c in mined.cosines)
    order = mined_pairs.corpus_sentences([corpus])
    assert {order.index(a) < order.index(b) for a, b in mined.pairs} == {True, False}  # each pair's order drawn
    assert len({topic(a) for a, _ in mined.pairs[:4]}) > 2  # shuffled: not the corpus's first topics
    capped = mined_pairs.mine_pairs([corpus], low=0.4, rows=3, seed=0)
    assert capped.pairs == mined.pairs[:3]  # the cap keeps the first of the same seeded order
    assert mined_pairs.mine_pairs([corpus], low=0.4, rows=100, seed=1).pairs != mined.pairs


def test_the_command_writes_pairs_that_compress_reads_as_unlabelled_rows(tmp_path, capsys):
    glue = tmp_path / "glue"
    write_glue_task(glue, "MRPC", n_train=12, n_dev=4)
    corpus = topic_corpus(tmp_path / "corpus.txt.gz")
    out = tmp_path / "pairs" / "mrpc.jsonl"
    assert main(["mine-pairs", "--task", "mrpc", "--data-dir", str(glue), "--corpus", str(corpus),
                 "--output", str(out), "--low", "0.4", "--rows", "4"]) == 0
    printed = capsys.readouterr().out
    assert "mined 4 pairs of 18 sentences (cosine >= 0.4" in printed and "--unlabelled" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(set(row) == {"sentence1", "sentence2"} for row in rows)
    assert not list(out.parent.glob("*.partial"))
    data = load_task(TaskOptions("mrpc", data_dir=str(glue), unlabelled=str(out)))
    assert [e.texts for e in data.unlabelled] == [(row["sentence1"], row["sentence2"]) for row in rows]


@pytest.mark.parametrize("extra,says", [
    (["--task", "sst2"], "mined pairs are rows of a pair task"),
    (["--low", "0.97"], "--low 0.97: give a cosine between 0 and 0.95"),
    (["--low", "0.94"], "--low 0.94: no two of the corpus's 18 sentences are that alike"),
])
def test_bad_input_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys, extra, says):
    glue = tmp_path / "glue"
    for task in ("MRPC", "SST-2"):
        write_glue_task(glue, task, n_train=12, n_dev=4)
    out = tmp_path / "pairs.jsonl"
    argv = ["mine-pairs", "--task", "mrpc", "--data-dir", str(glue), "--corpus",
            str(topic_corpus(tmp_path / "corpus.txt.gz")), "--output", str(out), *extra]
    assert main(argv) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()


def test_a_corpus_without_sentences_of_the_mined_lengths_is_named(tmp_path, capsys):
    glue = tmp_path / "glue"
    write_glue_task(glue, "MRPC", n_train=12, n_dev=4)
    corpus = tmp_path / "short.txt"
    corpus.write_text("Short one. Another short sentence here.\n")
    assert main(["mine-pairs", "--task", "mrpc", "--data-dir", str(glue), "--corpus", str(corpus),
                 "--output", str(tmp_path / "p.jsonl")]) == 2
    assert f"--corpus {corpus}: 0 sentence(s) of 10-40 words found" in capsys.readouterr().err
