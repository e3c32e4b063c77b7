"""Corpus reading and sequence packing with a tiny word-level vocab."""

import gzip

import pytest
from transformers import BertTokenizerFast

from kdbert.data import corpus
from kdbert.data.corpus import iter_documents, pack_sequences
from kdbert.errors import KdbertError

WORDS = "alpha beta gamma delta one two three four five six seven eight nine ten title".split()


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]) + "\n")
    return BertTokenizerFast.from_pretrained(folder)


WIKI = """<doc id="1" url="u" title="Alpha">
Alpha

One two three. Four five six. Seven eight nine ten.
One two. Three four.
</doc>
<doc id="2" url="u" title="Beta">
Beta

Five six seven.
</doc>
"""


def test_iter_documents_formats(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("one two.\nthree.\n\n\nfour.\n")
    with gzip.open(tmp_path / "d" / "b.gz", "wt") as f:
        f.write(WIKI)
    (tmp_path / "d" / ".hidden").write_text("ignored\n")
    (tmp_path / "d" / "README.md").write_text("# About this corpus.\n")  # a data folder's notes: not corpus
    (tmp_path / "d" / "sizes.json").write_text('{"lines": 9}\n')
    (tmp_path / "d" / "wiki_00").write_text("Gamma delta.\n")  # WikiExtractor's files have no suffix
    docs = list(iter_documents([tmp_path / "d"]))
    assert docs == [
        ["one two.", "three."], ["four."],
        ["Alpha", "One two three. Four five six. Seven eight nine ten.", "One two. Three four."],
        ["Beta", "Five six seven."], ["Gamma delta."],
    ]
    assert list(iter_documents([tmp_path / "d" / "README.md"])) == [["# About this corpus."]]  # named: read
    with pytest.raises(KdbertError, match="nope.txt does not exist"):
        list(iter_documents([tmp_path / "nope.txt"]))


def test_pack_lengths_specials_and_document_boundaries(tokenizer, tmp_path):
    path = tmp_path / "wiki.txt"
    path.write_text(WIKI + "alpha " * 30 + "\n")
    seqs = pack_sequences(tokenizer, path, max_seq_len=8, seed=None)
    assert all(len(s) <= 8 and s[0] == tokenizer.cls_token_id and s[-1] == tokenizer.sep_token_id for s in seqs)
    text = [tokenizer.decode(s[1:-1]) for s in seqs]
    assert text[:4] == ["alpha one two three.", "four five six.", "seven eight nine ten.", "one two. three four."]
    assert text[4] == "beta five six seven."  # documents never share a sequence
    assert text[5:] == ["alpha " * 5 + "alpha"] * 5  # a 30-token sentence cut into 6-token slices
    assert sum(len(s) - 2 for s in seqs) == 20 + 5 + 30  # every token kept exactly once


def test_pack_is_deterministic_limited_and_shuffled(tokenizer, tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n\n".join(f"{w} one two." for w in WORDS) + "\n")
    ordered = pack_sequences(tokenizer, path, max_seq_len=16, seed=None)
    assert len(ordered) == len(WORDS)
    shuffled = pack_sequences(tokenizer, path, max_seq_len=16, seed=3)
    assert shuffled == pack_sequences(tokenizer, path, max_seq_len=16, seed=3)
    assert sorted(shuffled) == sorted(ordered) and shuffled != ordered
    assert pack_sequences(tokenizer, path, max_seq_len=16, max_sequences=4, seed=None) == ordered[:4]


def test_cache_roundtrip(tokenizer, tmp_path, monkeypatch):
    path = tmp_path / "c.txt"
    path.write_text("one two three.\n\nfour five.\n")
    cache = tmp_path / "cache" / "packed.safetensors"
    first = pack_sequences(tokenizer, path, max_seq_len=16, cache_path=cache)
    assert cache.is_file() and not list(cache.parent.glob(".*tmp*"))

    def fail(*args):
        raise AssertionError("cache not used")

    monkeypatch.setattr(corpus, "_pack_documents", fail)
    assert pack_sequences(tokenizer, path, max_seq_len=16, cache_path=cache) == first
    with pytest.raises(AssertionError, match="cache not used"):  # other arguments: cache is stale
        pack_sequences(tokenizer, path, max_seq_len=8, cache_path=cache)
    with pytest.raises(KdbertError, match="must end in .safetensors"):
        pack_sequences(tokenizer, path, cache_path=tmp_path / "x.pt")
