"""Word-level inputs: the tokenisation rule, the vocabulary, word-vector files and the embedding matrix."""

import gzip

import numpy as np
import pytest

from kdbert.families.bilstm.words import (
    MASK_TOKEN, Vocab, embedding_matrix, frequent_file_words, oov_rate, ranked_words, read_word_vectors, tokenize,
    word_spans,
)
from kdbert.errors import KdbertError


def test_tokenize_lowercases_splits_punctuation_clitics_and_negations_and_keeps_the_mask():
    assert tokenize("It's a don't-miss film!") == ["it", "'s", "a", "do", "n't", "-", "miss", "film", "!"]
    assert tokenize("Can't [MASK] CAN'T") == ["ca", "n't", MASK_TOKEN, "ca", "n't"]
    assert tokenize("  ") == []
    assert word_spans("a [MASK]n't") == [("a", 0, 1), (MASK_TOKEN, 2, 8), ("n't", 8, 11)]


def test_vocab_orders_by_count_then_word_and_applies_min_count():
    vocab = Vocab.build(["the cat", "The dog", "the cat sat", "[MASK] zebra"], min_count=2)
    assert vocab.words == ["[PAD]", "[UNK]", "[MASK]", "the", "cat"]
    assert vocab.counts == {"the": 3, "cat": 2}
    assert (vocab.mask_id, vocab.num_reserved) == (2, 3)
    assert vocab.encode("The cat [MASK] dog") == [3, 4, 2, 1]  # [MASK] has its own id; unknown words -> UNK
    assert vocab.encode("") == [Vocab.unk_id]


def test_vocab_max_size_and_roundtrip(tmp_path):
    vocab = Vocab.build(["b a c a b a"], max_size=2)
    assert vocab.words == ["[PAD]", "[UNK]", "[MASK]", "a", "b"]
    vocab.save(tmp_path / "vocab.txt")
    assert Vocab.load(tmp_path / "vocab.txt") == vocab


def test_extended_appends_new_words_only_and_keeps_the_training_counts():
    vocab = Vocab.build(["b a a"]).extended(["c", "a", "[MASK]", "d", "c"])
    assert vocab.words == ["[PAD]", "[UNK]", "[MASK]", "a", "b", "c", "d"]
    assert vocab.counts == {"a": 2, "b": 1} and vocab.encode("d c a x") == [6, 5, 3, 1]


def test_ranked_words_and_oov_rate_count_occurrences_without_the_mask():
    counts = ranked_words(["b a [MASK]", "c a b a"])
    assert list(counts.items()) == [("a", 3), ("b", 2), ("c", 1)]
    assert oov_rate(Vocab.build(["a"]), counts) == 0.5  # b x2 and c of 6 occurrences
    assert oov_rate(Vocab.build(["a b c"]), counts) == 0.0


def test_a_vocabulary_written_before_mask_had_its_own_id_reads_it_as_unk(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\nthe\ncat\n")
    vocab = Vocab.load(tmp_path / "vocab.txt")  # as its students were trained
    assert (vocab.mask_id, vocab.num_reserved) == (Vocab.unk_id, 2)
    assert vocab.encode("the [MASK] cat") == [2, 1, 3]


def test_empty_vocabulary_and_bad_vocab_files_are_refused(tmp_path):
    with pytest.raises(KdbertError, match="empty vocabulary: no word of train.tsv occurs at least 3 time"):
        Vocab.build(["a b", "c"], min_count=3, source="train.tsv")
    (tmp_path / "v.txt").write_text("a\nb\n")
    with pytest.raises(KdbertError, match=r"v.txt: a vocabulary starts with \[PAD\] and \[UNK\]"):
        Vocab.load(tmp_path / "v.txt")
    (tmp_path / "v.txt").write_text("[PAD]\n[UNK]\nthe\n[MASK]\n")
    with pytest.raises(KdbertError, match=r"v.txt: \[MASK\] is entry 3 of the vocabulary, not entry 2"):
        Vocab.load(tmp_path / "v.txt")


def _write(path, lines, gz=False):
    text = "".join(line + "\n" for line in lines)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_glove_gz_and_word2vec_text_read_the_same_vectors(tmp_path):
    lines = ["cat 1 2 3", "dog 0.5 0 -1", "the 0 0 1"]
    glove = read_word_vectors(_write(tmp_path / "g.txt.gz", lines, gz=True), wanted={"cat", "the"})
    w2v = read_word_vectors(_write(tmp_path / "w.txt", ["3 3", *lines]), wanted={"cat", "the"})
    for vectors in (glove, w2v):
        assert vectors.words == ["cat", "the"] and vectors.dim == 3
        np.testing.assert_array_equal(vectors.vectors, [[1, 2, 3], [0, 0, 1]])


def test_cased_vectors_serve_a_lowercased_vocabulary_exact_match_first(tmp_path):
    path = _write(tmp_path / "w.txt", ["Paris 1 1", "paris 2 2", "Rome 3 3", "ROME 4 4"])
    vectors = read_word_vectors(path, wanted={"paris", "rome"})
    assert dict(zip(vectors.words, vectors.vectors[:, 0].tolist())) == {"paris": 2.0, "rome": 3.0}


def test_frequent_file_words_are_the_first_new_vocabulary_words_read_no_further(tmp_path):
    lines = ["3 2", "The 1 1", "cat 1 1", "e-mail 1 1", "Paris 1 1", "paris 2 2", "dog 1 1", "broken"]
    for path in (_write(tmp_path / "w.txt", lines), _write(tmp_path / "w.txt.gz", lines, gz=True)):
        # lowercased, in file order; a known word, a word the tokenizer splits and a case duplicate left out
        assert frequent_file_words(path, 2, known={"cat"}) == ["the", "paris"]
        assert frequent_file_words(path, 3, known={"cat"}) == ["the", "paris", "dog"]  # the broken line is never read
        assert frequent_file_words(path, 0) == []
    with pytest.raises(KdbertError, match=r"w.txt:8: expected a word and 2 numbers"):
        frequent_file_words(tmp_path / "w.txt", 4, known={"cat"})
    with pytest.raises(KdbertError, match="does not exist"):
        frequent_file_words(tmp_path / "nope.txt", 1)


@pytest.mark.parametrize("lines, message", [
    (["cat 1 2 3", "dog 1 2"], r"w.txt:2: expected a word and 3 numbers, found 3 field\(s\)"),
    (["2 3", "cat 1 2 3", "dog 1 2"], r"w.txt:3: expected a word and 3 numbers"),
    (["cat 1 2 x"], r"w.txt:1: the last 3 fields are not all numbers"),
    ([], r"w.txt contains no word vectors"),
])
def test_malformed_vector_files_name_file_and_line(tmp_path, lines, message):
    with pytest.raises(KdbertError, match=message):
        read_word_vectors(_write(tmp_path / "w.txt", lines))


def test_dimension_mismatch_binary_and_missing_files_are_refused(tmp_path):
    path = _write(tmp_path / "w.txt", ["cat 1 2 3"])
    with pytest.raises(KdbertError, match="w.txt: the vectors have 3 dimensions but the student's embeddings have "
                                          "50; set --embedding-dim 3"):
        read_word_vectors(path, expected_dim=50)
    binary = tmp_path / "w.bin"
    binary.write_bytes(b"2 3\ncat \xff\xfe\x00\x01")
    with pytest.raises(KdbertError, match=r"w.bin:2: not UTF-8 text \(a binary word2vec file\?\)"):
        read_word_vectors(binary)
    with pytest.raises(KdbertError, match="does not exist"):
        read_word_vectors(tmp_path / "nope.txt")


def test_embedding_matrix_copies_vectors_seeds_the_rest_and_reports_coverage(tmp_path):
    vocab = Vocab.build(["cat cat cat dog the bird"]).extended(["fish"])  # [PAD] [UNK] [MASK] cat bird dog the fish
    path = _write(tmp_path / "g.txt", ["cat 1 3", "the -1 -3", "fish 9 9", "[MASK] 5 5"])
    vectors = read_word_vectors(path, wanted=vocab.words)
    matrix, report = embedding_matrix(vocab, 2, vectors, seed=7)
    np.testing.assert_array_equal(matrix[[0, 3, 6, 7]], [[0, 0], [1, 3], [-1, -3], [9, 9]])
    scale = np.std([1, 3, -1, -3, 9, 9])  # the found vectors' spread ([MASK] is reserved: not a word)
    expected = np.random.default_rng(7).normal(0.0, scale, size=(8, 2)).astype(np.float32)
    np.testing.assert_allclose(matrix[[1, 2, 4, 5]], expected[[1, 2, 4, 5]], rtol=1e-6)
    # fish has no training count: it adds to the type coverage, not to the token coverage
    assert report == {"vocab_words": 5, "with_vector": 3, "type_coverage": 0.6, "token_coverage": round(4 / 6, 4),
                      "random_init_scale": round(float(scale), 4)}
    assert not np.array_equal(embedding_matrix(vocab, 2, vectors, seed=8)[0][1], matrix[1])
    with pytest.raises(KdbertError, match="g.txt: the vectors have 2 dimensions but the student's embeddings have 3"):
        embedding_matrix(vocab, 3, vectors)
