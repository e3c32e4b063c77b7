"""The distilled BiLSTM's augmentation rules, pinned on hand-made sentences, and its resumable writer."""

from collections import Counter
from pathlib import Path

import nltk
import numpy as np
import pytest

from kdbert.augment.bilstm import BiLSTMAugmenter, PosCandidates, TaggedText, augment_rows, synthesize
from kdbert.augment.tinybert import text_seed
from kdbert.augment.pos_tagging import NltkTagger
from kdbert.core.teacher_logits import teacher_view
from kdbert.families.bilstm.words import MASK_TOKEN, Vocab, word_spans
from kdbert.errors import KdbertError

NLTK_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "nltk_data"
TAGS = {"the": "DT", "a": "DT", "cat": "NN", "dog": "NN", "mat": "NN", "sat": "VBD", "ran": "VBD", "on": "IN",
        "under": "IN", ".": ".", "did": "VBD", "n't": "RB", "move": "VB", "not": "RB"}


class DictTagger:
    """A tagger by table lookup (lowercased), counting its calls."""

    name = "dict-tagger"

    def __init__(self):
        self.sentences = 0

    def __call__(self, sentences):
        self.sentences += len(sentences)
        return [[TAGS.get(w.lower(), "NN") for w in words] for words in sentences]


# NN: cat 3, dog 2, mat 1 -> cumulative [3, 5, 6]; DT: the 5, a 1
CANDIDATES = PosCandidates({"NN": Counter(cat=3, dog=2, mat=1), "DT": Counter(the=5, a=1),
                            "VBD": Counter(sat=1), ".": Counter({".": 4})})


def tagged(text):
    spans = word_spans(text)
    words = tuple(w for w, _, _ in spans)
    return TaggedText(text, words, tuple((a, b) for _, a, b in spans), tuple(DictTagger()([list(words)])[0]))


SENTENCE = tagged("The cat sat on the mat.")  # 7 words: The cat sat on the mat .
KEEP = np.full(7, 0.5)  # X_i = 0.5: no rule applies


@pytest.mark.parametrize("word, tag, u, expected", [
    ("dog", "NN", 0.0, "cat"),     # without dog: cat 3, mat 1 -> u * 4 = 0 -> cat
    ("dog", "NN", 0.74, "cat"),    # 2.96 < 3
    ("dog", "NN", 0.75, "mat"),    # 3.0 -> past dog's own interval -> mat
    ("cat", "NN", 0.0, "dog"),     # without cat: dog 2, mat 1
    ("cat", "NN", 0.99, "mat"),
    ("bird", "NN", 0.5, "dog"),    # an unseen word: all of NN, 0.5 * 6 = 3 -> dog
    ("sat", "VBD", 0.3, None),     # the tag has no other word
    ("x", "JJ", 0.3, None),        # unseen tag
])
def test_pos_candidates_draw_by_frequency_without_the_word_itself(word, tag, u, expected):
    assert CANDIDATES.draw(word, tag, u) == expected


def test_masking_and_pos_replacement_exclude_each_other_and_keep_the_rest_of_the_text():
    x = np.array([0.05, 0.15, 0.5, 0.5, 0.19, 0.5, 0.5])  # mask The, replace cat, replace the
    u = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert synthesize(SENTENCE, x, u, None, CANDIDATES, 0.1, 0.1) == "[MASK] dog sat on a mat."
    x[1] = 0.2  # exactly p_mask + p_pos: no rule
    assert synthesize(SENTENCE, x, u, None, CANDIDATES, 0.1, 0.1) == "[MASK] cat sat on a mat."
    title = synthesize(SENTENCE, np.array([0.15, *KEEP[1:]]), u, None, CANDIDATES, 0.1, 0.1)
    assert title == "A cat sat on the mat."  # a Title-case word gets a Title-case replacement
    assert synthesize(SENTENCE, KEEP, u, None, CANDIDATES, 0.1, 0.1) == SENTENCE.text


def test_ngram_sampling_keeps_only_the_ngram_or_masks_it():
    x = np.array([0.5, 0.15, 0.5, 0.5, 0.5, 0.5, 0.5])  # cat -> dog first
    u = np.zeros(7)
    assert synthesize(SENTENCE, x, u, (1, 3), CANDIDATES, 0.1, 0.1, "keep") == "dog sat on"
    assert synthesize(SENTENCE, x, u, (5, 2), CANDIDATES, 0.1, 0.1, "keep") == "mat."
    assert synthesize(SENTENCE, x, u, (1, 3), CANDIDATES, 0.1, 0.1, "mask") == "The [MASK] [MASK] [MASK] the mat."


def test_a_changed_word_is_set_apart_from_a_neighbour_it_touched():
    item = tagged("He didn't move")  # He did n't move: did and n't touch
    x = np.array([0.5, 0.5, 0.05, 0.5])
    assert synthesize(item, x, np.zeros(4), None, CANDIDATES, 0.1, 0.1) == "He did [MASK] move"


def test_the_teacher_sees_its_mask_token_where_the_student_sees_its_own_mask_id(tiny_tokenizer):
    augmented = "[MASK] dog sat on a mat."
    vocab = Vocab.build(["the dog sat on a mat ."])
    assert vocab.encode(augmented) == [vocab.mask_id] + vocab.encode("dog sat on a mat.")
    assert vocab.mask_id not in (Vocab.unk_id, *vocab.encode("the dog sat on a mat ."))
    teacher_text = teacher_view(augmented, tiny_tokenizer.mask_token)
    ids = tiny_tokenizer(teacher_text)["input_ids"]
    assert ids[1] == tiny_tokenizer.mask_token_id and tiny_tokenizer.unk_token_id not in ids
    assert teacher_view(augmented, "<mask>") == "<mask> dog sat on a mat."
    with pytest.raises(KdbertError, match="no mask token"):
        teacher_view(augmented, None)


def make(texts=("The cat sat on the mat.", "a dog ran under the mat ."), **settings):
    return BiLSTMAugmenter.from_texts(list(texts), DictTagger(), **settings)


def test_the_augmenter_follows_its_documented_draws():
    augmenter = make(seed=3, n_iter=6)
    text = "The cat sat on the mat."
    rng = np.random.default_rng(text_seed(3, text))
    item = augmenter.tag([text])[0]
    expected = [text]
    for _ in range(6):
        x, u = rng.random(7), rng.random(7)
        coin, n, start = rng.random(), int(rng.integers(1, 6)), rng.random()
        ngram = (int(start * (7 - n + 1)), n) if coin < 0.25 else None
        version = synthesize(item, x, u, ngram, augmenter.candidates, 0.1, 0.1)
        if version not in expected:
            expected.append(version)
    assert [v[0] for v in augmenter.augment([(text,)])[0]] == expected
    assert len(expected) > 2  # the seed does change the sentence


def test_candidates_come_from_the_training_texts():
    augmenter = make()
    assert augmenter.candidates.words["NN"] == ["mat", "cat", "dog"]  # mat 2, then cat 1 and dog 1
    assert augmenter.candidates.words["DT"] == ["the", "a"]


def test_versions_are_distinct_original_first_and_deterministic():
    texts = [("The cat sat on the mat.",), ("a dog ran under the mat .",), ("",)]
    out = make(n_iter=20, seed=1).augment(texts)
    for example, versions in zip(texts, out):
        assert versions[0] == example and len(set(versions)) == len(versions) <= 21
    assert out[2] == [("",)]  # nothing to augment
    assert make(n_iter=20, seed=1).augment(texts[::-1]) == out[::-1]  # independent of position
    assert make(n_iter=20, seed=2).augment(texts) != out
    assert make(p_mask=0, p_pos=0, p_ng=0).augment(texts[:1]) == [texts[:1]]  # duplicates of the original dropped


def test_masking_everything_gives_one_version_and_mask_mode_ngrams_only_mask():
    everything = make(p_mask=1.0, p_pos=0.0, p_ng=0.0).augment([("The cat sat.",)])
    assert everything == [[("The cat sat.",), ("[MASK] [MASK] [MASK] [MASK]",)]]
    masked = make(p_mask=0.0, p_pos=0.0, p_ng=1.0, ngram_mode="mask", seed=5).augment([("a b c d e f g h",)])[0]
    for (version,) in masked[1:]:
        words = version.split()
        assert len(words) == 8 and 1 <= words.count(MASK_TOKEN) <= 5
        first = words.index(MASK_TOKEN)
        assert words[first:first + words.count(MASK_TOKEN)] == [MASK_TOKEN] * words.count(MASK_TOKEN)
    kept = make(p_mask=0.0, p_pos=0.0, p_ng=1.0, seed=5).augment([("a b c d e f g h",)])[0]
    assert all(v[0] in "a b c d e f g h" and 1 <= len(v[0].split()) <= 5 for v in kept[1:])


def test_pairs_cycle_through_first_second_and_both_sentences():
    out = make(p_mask=1.0, p_pos=0.0, p_ng=0.0, n_iter=3).augment([("the cat", "a dog")])[0]
    assert out == [("the cat", "a dog"), ("[MASK] [MASK]", "a dog"), ("the cat", "[MASK] [MASK]"),
                   ("[MASK] [MASK]", "[MASK] [MASK]")]


def test_each_distinct_text_is_tagged_once():
    augmenter = make(texts=["the cat", "the cat", "a dog"])
    assert augmenter.tagger.sentences == 2
    assert augmenter.candidates.words["DT"] == ["the", "a"] and augmenter.candidates.cumulative["DT"].tolist() == [2, 3]
    augmenter.augment([("the cat",), ("a new one",)])
    assert augmenter.tagger.sentences == 3


def test_invalid_settings_are_refused():
    with pytest.raises(KdbertError, match="p_mask \\+ p_pos <= 1"):
        make(p_mask=0.6, p_pos=0.6)
    with pytest.raises(KdbertError, match="--ngram-mode 'drop'"):
        make(ngram_mode="drop")


ROWS = [{"sentence1": f"the cat sat on mat {i} .", "sentence2": "a dog ran", "label": "1"} for i in range(7)]


class Interrupted(Exception):
    pass


def test_file_pairs_resume_equals_an_uninterrupted_run(tmp_path):
    whole = tmp_path / "whole.tsv"
    n = augment_rows(ROWS, ["sentence1", "sentence2"], whole, make(n_iter=4), chunk_size=2)
    lines = whole.read_text().splitlines()
    assert lines[0] == "sentence1\tsentence2\tlabel" and len(lines) == n + 1
    assert lines[1] == "the cat sat on mat 0 .\ta dog ran\t1" and all(line.endswith("\t1") for line in lines[1:])

    broken = make(n_iter=4)
    calls = {"n": 0}
    original = broken.augment

    def fail_on_third_chunk(examples):
        calls["n"] += 1
        if calls["n"] == 3:
            raise Interrupted
        return original(examples)

    broken.augment = fail_on_third_chunk
    resumed = tmp_path / "resumed.tsv"
    with pytest.raises(Interrupted):
        augment_rows(ROWS, ["sentence1", "sentence2"], resumed, broken, chunk_size=2)
    assert not resumed.exists() and Path(f"{resumed}.partial").exists()
    with pytest.raises(KdbertError, match="belongs to a run with other rows or settings"):
        augment_rows(ROWS, ["sentence1", "sentence2"], resumed, make(n_iter=5), chunk_size=2)
    other_candidates = make(texts=["The cat sat on the mat.", "a dog ran under the mat .", "a cat"], n_iter=4)
    with pytest.raises(KdbertError, match="belongs to a run with other rows or settings"):
        augment_rows(ROWS, ["sentence1", "sentence2"], resumed, other_candidates, chunk_size=2)
    assert augment_rows(ROWS, ["sentence1", "sentence2"], resumed, make(n_iter=4), chunk_size=2) == n
    assert resumed.read_bytes() == whole.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resumed.tsv", "whole.tsv"]


def test_jsonl_and_headerless_outputs(tmp_path):
    rows = [{"text": "The cat sat.", "label": 0}]
    augment_rows(rows, ["text"], tmp_path / "a.jsonl", make(p_mask=1.0, p_pos=0.0, p_ng=0.0))
    assert (tmp_path / "a.jsonl").read_text().splitlines() == [
        '{"text": "The cat sat.", "label": 0}', '{"text": "[MASK] [MASK] [MASK] [MASK]", "label": 0}']
    cola = [{"column0": "src", "column1": "1", "column2": "", "column3": "The cat sat."}]
    augment_rows(cola, ["column3"], tmp_path / "cola.tsv", make(p_mask=1.0, p_pos=0.0, p_ng=0.0), write_header=False)
    assert (tmp_path / "cola.tsv").read_text() == "src\t1\t\tThe cat sat.\nsrc\t1\t\t[MASK] [MASK] [MASK] [MASK]\n"
    with pytest.raises(KdbertError, match="one text column or a pair"):
        augment_rows(rows, ["a", "b", "c"], tmp_path / "x.tsv", make())


def test_missing_nltk_data_is_a_one_line_error(tmp_path):
    with pytest.raises(KdbertError, match="is not a folder"):
        NltkTagger(tmp_path / "nope")
    if not any(Path(p, "taggers", "averaged_perceptron_tagger_eng").is_dir() for p in nltk.data.path):
        with pytest.raises(KdbertError, match="POS tagger .averaged_perceptron_tagger_eng. was not found in .*; "
                                              "pass --nltk-data DIR"):
            NltkTagger(tmp_path)


@pytest.fixture(scope="module")
def nltk_tagger():
    if not NLTK_DATA.is_dir():
        pytest.skip("needs the offline nltk_data folder")
    with NltkTagger(NLTK_DATA, num_workers=2) as tagger:
        yield tagger


def test_nltk_tagger_tags_penn_treebank_offline(nltk_tagger):
    assert nltk_tagger([["The", "cat", "sat", "on", "the", "mat", "."]]) == [["DT", "NN", "VBD", "IN", "DT", "NN", "."]]
    assert nltk_tagger.name.endswith("averaged_perceptron_tagger_eng")


def test_tagging_in_worker_processes_gives_the_same_tags(nltk_tagger):
    sentences = [["The", "cat", "sat", "on", "the", "mat", str(i), "."] for i in range(500)]
    sentences += [["Dogs", "run", "fast", "in", "parks", "."]] * 500
    in_workers = nltk_tagger(sentences)  # 1000 sentences: the smallest batch sent to workers
    nltk_tagger.num_workers = 1
    try:
        assert in_workers == nltk_tagger(sentences)
    finally:
        nltk_tagger.num_workers = 2


# ----------------------------------------------------------------------------- n-gram probability of pairs
def shortened_sentences(output: Path, source: Path) -> int:
    """Augmented sentences of an MRPC-format file with fewer words than the sentence they came
    from (only n-gram sampling drops words: masking keeps the count)."""
    def pairs(path):
        return [tuple(line.split("\t")[3:5]) for line in path.read_text().splitlines()[1:]]

    originals = iter(pairs(source))
    upcoming, current, count = next(originals), None, 0
    for row in pairs(output):
        if row == upcoming:
            current, upcoming = row, next(originals, None)
            continue
        count += sum(len(word_spans(new)) < len(word_spans(old)) for new, old in zip(row, current))
    return count


def test_p_ng_reaches_the_augmenter_and_pairs_have_their_own_default(tmp_path, monkeypatch, capsys):
    import kdbert.augment.bilstm as augment_bilstm
    from conftest import write_glue_task

    from kdbert.cli.augment import augment_task_bilstm
    from kdbert.cli import main
    from kdbert.data.load import TaskOptions

    if not NLTK_DATA.is_dir():
        pytest.skip("needs the offline nltk_data folder")
    assert (augment_bilstm.P_NG, augment_bilstm.PAIR_P_NG) == (0.25, 0.25)  # the paper's: the authors' pair 0 measured lower
    root = tmp_path / "glue_data"
    source = write_glue_task(root, "MRPC") / "train.tsv"
    write_glue_task(root, "SST-2")
    common = ["augment", "--method", "bilstm", "--task", "mrpc", "--data-dir", str(root), "--nltk-data",
              str(NLTK_DATA), "--n-iter", "6", "--p-mask", "0.3", "--p-pos", "0"]
    for p_ng, name in (("0", "none.tsv"), ("1", "all.tsv")):
        assert main([*common, "--p-ng", p_ng, "--output", str(tmp_path / name)]) == 0, capsys.readouterr().err
    assert shortened_sentences(tmp_path / "none.tsv", source) == 0
    assert shortened_sentences(tmp_path / "all.tsv", source) > 0  # the count above can see n-grams

    monkeypatch.setattr(augment_bilstm, "PAIR_P_NG", 0.0)  # the one place the pair default is set
    result = augment_task_bilstm(TaskOptions("mrpc", data_dir=str(root)), tmp_path / "default.tsv", p_mask=0.3,
                                 p_pos=0.0, n_iter=6, nltk_data=str(NLTK_DATA))
    assert result["p_ng"] == 0.0 and shortened_sentences(tmp_path / "default.tsv", source) == 0
    assert (tmp_path / "default.tsv").read_bytes() == (tmp_path / "none.tsv").read_bytes()
    single = augment_task_bilstm(TaskOptions("sst2", data_dir=str(root)), tmp_path / "sst2.tsv", n_iter=2,
                                 nltk_data=str(NLTK_DATA))
    assert single["p_ng"] == 0.25  # single sentences keep P_NG
