"""TinyBERT augmentation on a tiny random BertForMaskedLM, a tiny vocab and a tiny GloVe file."""

import copy
import gzip
import json

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

from kdbert.augment.tinybert import (
    STOP_WORDS, TinyBertAugmenter, _length_batches, augment_file_rows, load_word_vectors,
)
from kdbert.errors import KdbertError

WORDS = ("the a is of and on to in it very cat dog sat mat movie film good bad great happy sad house car "
         "runs walks quick brown fox over lazy day night red blue green un wonder").split()
PIECES = ["##believ", "##able", "##ful", "##s"]
# 4-d vectors: "unbelievable" is closest to incredible, then amazing, then wonderful.
GLOVE = {
    "the": [1, 0, 0, 0], "unbelievable": [0, 1, 0, 0], "incredible": [0, 0.95, 0.05, 0],
    "amazing": [0, 0.9, 0.2, 0], "wonderful": [0, 0.5, 0.5, 0], "cat": [0, 0, 0, 1],
}
SENTENCES = [
    "The quick brown fox sat on the lazy dog.",
    "it is an unbelievable movie , 42 good days !",
    "The cat is very happy and the dog is sad.",
    "wonderful film",
    "",
    "the of and",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]", ".", ",", "!", "4", "2", *WORDS, *PIECES]
    folder = tmp_path_factory.mktemp("tok")
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return BertTokenizerFast.from_pretrained(folder)  # transformers 5 ignores BertTokenizerFast(vocab_file=...)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=64)
    return BertForMaskedLM(config).eval()


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    path = tmp_path_factory.mktemp("glove") / "glove.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for word, vec in GLOVE.items():
            f.write(word + " " + " ".join(map(str, vec)) + "\n")
    return load_word_vectors(path)


def make(model, tokenizer, vectors, **kw):
    return TinyBertAugmenter(model, tokenizer, vectors, **{"top_k": 3, "n_aug": 8, **kw})


def test_load_word_vectors_normalises_and_limits(vectors, tmp_path):
    words, matrix = vectors
    assert words == list(GLOVE) and matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, rtol=1e-6)
    bad = tmp_path / "bad.txt"
    bad.write_text("a 1 2\nb 1 2\nc 1 x\n")
    assert load_word_vectors(bad, max_words=2)[0] == ["a", "b"]
    with pytest.raises(KdbertError, match=r"bad.txt line 3"):
        load_word_vectors(bad)
    with pytest.raises(KdbertError, match="does not exist"):
        load_word_vectors(tmp_path / "missing.txt")


def test_output_count_and_original_first(model, tokenizer, vectors):
    out = make(model, tokenizer, vectors).augment(SENTENCES)
    assert len(out) == len(SENTENCES)
    for text, versions in zip(SENTENCES, out):
        assert versions[0] == text
        assert 1 <= len(versions) <= 9 and len(set(versions)) == len(versions)
    assert out[0][1:] and out[4] == [""] and out[5] == ["the of and"]
    assert make(model, tokenizer, vectors).augment([SENTENCES[0]] * 2) == [out[0]] * 2


def test_stop_words_and_non_alphabetic_tokens_unchanged(model, tokenizer, vectors):
    text = "it is an unbelievable movie , 42 good days !"
    for version in make(model, tokenizer, vectors, p=1.0).augment([text])[0]:
        for old, new in zip(text.split(), version.split(), strict=True):
            if old.lower() in STOP_WORDS or not old.isalpha():
                assert new == old


def test_single_piece_words_get_the_mlm_top_k(model, tokenizer, vectors):
    text = "The cat is very happy and the dog is sad"
    found = dict(make(model, tokenizer, vectors).candidates(text))
    assert set(found) == {"cat", "happy", "dog", "sad"}
    # Independent check for "happy": [CLS] masked [SEP] sentence [SEP], token types 0 then 1.
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pos = ids.index(tokenizer.convert_tokens_to_ids("happy"))
    masked = ids.copy()
    masked[pos] = tokenizer.mask_token_id
    enc = tokenizer(tokenizer.decode(masked), text, return_tensors="pt")
    assert enc["input_ids"][0, pos + 1] == tokenizer.mask_token_id
    with torch.no_grad():
        logits = model(**enc).logits[0, pos + 1]
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    allowed = [i for i, t in enumerate(vocab) if not t.startswith("##") and not t.startswith("[")]
    best = sorted(allowed, key=lambda i: -logits[i].item())[:3]
    assert found["happy"] == [vocab[i] for i in sorted(best)]  # kept in vocabulary order
    for version in make(model, tokenizer, vectors, p=1.0).augment([text])[0][1:]:
        for old, new in zip(text.split(), version.split(), strict=True):
            assert new in found.get(old, []) + [old]


def test_multi_piece_words_get_glove_neighbours(model, tokenizer, vectors):
    assert tokenizer.tokenize("unbelievable wonderful") == ["un", "##believ", "##able", "wonder", "##ful"]
    found = dict(make(model, tokenizer, vectors).candidates("The unbelievable wonderful days"))
    assert found["unbelievable"] == ["incredible", "amazing", "wonderful"]  # sorted by GloVe row
    assert found["wonderful"] == ["unbelievable", "incredible", "amazing"]
    assert "days" not in found  # multi-piece ("day ##s") and not in GloVe: no candidates
    title = dict(make(model, tokenizer, vectors).candidates("Unbelievable"))
    assert title["Unbelievable"] == ["Incredible", "Amazing", "Wonderful"]


def test_deterministic_across_batch_sizes_and_one_at_a_time(model, tokenizer, vectors):
    # exact although batch shapes differ: the outputs are discrete (the MLM's top-3 words), whose
    # logits move by ~1e-7 between batch shapes while the 3rd and 4th best are >1e-4 apart here
    reference = make(model, tokenizer, vectors, batch_size=64).augment(SENTENCES)
    assert make(model, tokenizer, vectors, batch_size=1).augment(SENTENCES) == reference
    assert make(model, tokenizer, vectors, batch_size=3).augment(SENTENCES) == reference
    assert make(model, tokenizer, vectors, batch_tokens=40).augment(SENTENCES) == reference
    assert make(model, tokenizer, vectors).augment_one_at_a_time(SENTENCES) == reference
    assert make(model, tokenizer, vectors).augment(SENTENCES[::-1]) == reference[::-1]
    assert make(model, tokenizer, vectors, seed=7).augment(SENTENCES) != reference


def test_length_batches_cap_queries_and_padded_tokens():
    seqs = [([0] * n,) for n in (2, 3, 3, 5, 9, 30)]
    sizes = [[len(q[0]) for q in b] for b in _length_batches(seqs, batch_size=3, batch_tokens=10)]
    # 2,3,3 -> 3 items at width 3 = 9 tokens; 5 alone (2 x 9 > 10 with the next); 30 > 10 gets its own batch
    assert sizes == [[2, 3, 3], [5], [9], [30]]
    sizes = [[len(q[0]) for q in b] for b in _length_batches(seqs, batch_size=2, batch_tokens=1000)]
    assert sizes == [[2, 3], [3, 5], [9, 30]]


def test_invalid_settings_are_refused(model, tokenizer, vectors):
    with pytest.raises(KdbertError, match="batch_tokens=0"):
        make(model, tokenizer, vectors, batch_tokens=0)


def test_workers_match_single_process(model, tokenizer, vectors):
    reference = make(model, tokenizer, vectors).augment(SENTENCES)
    with make(model, tokenizer, vectors, num_workers=2) as augmenter:
        assert augmenter.augment(SENTENCES) == reference


def _killed_after(augment, calls: int):
    """``augment`` that raises KeyboardInterrupt on its call number ``calls + 1`` (a killed run)."""
    done = {"n": 0}

    def dying(texts):
        done["n"] += 1
        if done["n"] > calls:
            raise KeyboardInterrupt
        return augment(texts)

    return dying


def test_augment_file_rows_pairs_and_resume(model, tokenizer, vectors, tmp_path):
    rows = [{"index": str(i), "sentence1": a, "sentence2": b, "label": "x"}
            for i, (a, b) in enumerate(zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1]))]
    augmenter = make(model, tokenizer, vectors)
    out = tmp_path / "clean" / "train_aug.tsv"
    n = augment_file_rows(rows, ["sentence1", "sentence2"], out, augmenter, chunk_size=2)
    lines = out.read_text().splitlines()
    assert lines[0] == "index\tsentence1\tsentence2\tlabel" and len(lines) == n + 1
    v1 = augmenter.augment([r["sentence1"] for r in rows])
    v2 = augmenter.augment([r["sentence2"] for r in rows])
    assert n == sum(1 + len(a) - 1 + len(b) - 1 for a, b in zip(v1, v2))
    parsed = [dict(zip(lines[0].split("\t"), line.split("\t"))) for line in lines[1:]]
    assert parsed[0] == rows[0]
    assert [p["sentence1"] for p in parsed[1:len(v1[0])]] == v1[0][1:]
    assert all(p["sentence2"] == rows[0]["sentence2"] for p in parsed[1:len(v1[0])])

    # A run killed after its first chunk (plus a torn write) resumes to the same file.
    resumed = tmp_path / "resumed" / "train_aug.tsv"
    real = augmenter.augment
    augmenter.augment = _killed_after(real, calls=2)
    with pytest.raises(KeyboardInterrupt):
        augment_file_rows(rows, ["sentence1", "sentence2"], resumed, augmenter, chunk_size=2)
    partial = resumed.with_name("train_aug.tsv.partial")
    assert json.loads(resumed.with_name("train_aug.tsv.progress.json").read_text())["rows_done"] == 2
    with open(partial, "a") as f:
        f.write("torn\tline")
    augmenter.augment = real
    assert augment_file_rows(rows, ["sentence1", "sentence2"], resumed, augmenter, chunk_size=2) == n
    assert resumed.read_text() == out.read_text() and not partial.exists()

    with pytest.raises(KdbertError, match="row 1 has no column 'sentence2'"):
        augment_file_rows([rows[0], {"sentence1": "x"}], ["sentence1", "sentence2"], out, augmenter)


def test_resume_refuses_a_run_of_another_precision(model, tokenizer, vectors, tmp_path):
    rows = [{"sentence": text, "label": "1"} for text in SENTENCES]
    out = tmp_path / "train_aug.tsv"
    fast = make(copy.deepcopy(model).to(torch.bfloat16), tokenizer, vectors)
    real = fast.augment
    fast.augment = _killed_after(real, calls=1)
    with pytest.raises(KeyboardInterrupt):
        augment_file_rows(rows, ["sentence"], out, fast, chunk_size=2)
    with pytest.raises(KdbertError, match="belongs to a run with other rows or settings"):
        augment_file_rows(rows, ["sentence"], out, make(model, tokenizer, vectors), chunk_size=2)
    fast.augment = real
    assert augment_file_rows(rows, ["sentence"], out, fast, chunk_size=2) > len(rows)
