"""`--word-vectors encoder:MODEL`: each word alone through an encoder, mean-pooled and scaled once
(against a hand computation on a tiny random BERT), stored once and read back, every word covered,
the tokenizer's whole words as the frequent words, and the BiLSTM distilled with them from the one front."""

import numpy as np
import pytest
import torch
from conftest import save_tiny_classifier, tiny_bert_config, write_glue_task
from transformers import BertModel

import kdbert.families.bilstm.encoder_vectors as encoder_vectors
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError
from kdbert.families.bilstm.encoder_vectors import TARGET_STD, encoder_word_vectors, tokenizer_words
from kdbert.families.bilstm.model import init_bilstm, load_bilstm, word_vectors_dim
from kdbert.methods.front import distill_task

WORDS = ["the", "cats", "dog", "walked"]  # "cats" is two sub-words in the tiny vocabulary, "walked" one


@pytest.fixture
def encoder_dir(tmp_path, tiny_tokenizer):
    torch.manual_seed(3)
    folder = tmp_path / "encoder"
    BertModel(tiny_bert_config(tiny_tokenizer)).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def hand_vectors(folder, tokenizer, words):
    """One word at a time (no padding): the mean of its last hidden states over [CLS], its pieces and
    [SEP], then one factor for all so that the entries' standard deviation is TARGET_STD."""
    model = BertModel.from_pretrained(folder).eval()
    with torch.no_grad():
        raw = torch.stack([model(**tokenizer(word, return_tensors="pt")).last_hidden_state[0].mean(dim=0)
                           for word in words])
    return (raw * (TARGET_STD / raw.std(unbiased=False))).numpy()


def test_a_words_vector_is_its_mean_pooled_last_layer_scaled_once(encoder_dir, tiny_tokenizer):
    assert [len(tiny_tokenizer.tokenize(w)) for w in WORDS] == [1, 2, 1, 1]  # padding happens in the batch
    vectors = encoder_word_vectors(f"encoder:{encoder_dir}", WORDS, None)
    assert vectors.words == WORDS and vectors.dim == 16 and vectors.vectors.dtype == np.float32
    # float32 sums over 16 hidden units in two layers, batched (padded) against one word at a time
    np.testing.assert_allclose(vectors.vectors, hand_vectors(encoder_dir, tiny_tokenizer, WORDS), rtol=1e-5, atol=1e-5)
    assert float(vectors.vectors.std()) == pytest.approx(TARGET_STD, rel=1e-5)
    assert word_vectors_dim(f"encoder:{encoder_dir}") == 16


def test_vectors_are_stored_once_and_read_back_without_running_the_encoder(encoder_dir, tmp_path, monkeypatch):
    first = encoder_word_vectors(f"encoder:{encoder_dir}", WORDS, tmp_path / "store")
    stored = list((tmp_path / "store" / "word-vectors").glob("*.safetensors"))
    assert len(stored) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("the encoder ran again for stored words")

    monkeypatch.setattr(encoder_vectors, "pooled_word_vectors", refuse)
    again = encoder_word_vectors(f"encoder:{encoder_dir}", WORDS, tmp_path / "store")
    np.testing.assert_array_equal(again.vectors, first.vectors)
    monkeypatch.undo()
    encoder_word_vectors(f"encoder:{encoder_dir}", WORDS[:3], tmp_path / "store")  # other words: another entry
    assert len(list((tmp_path / "store" / "word-vectors").glob("*.safetensors"))) == 2


def test_every_word_gets_a_vector_and_the_tokenizers_first_whole_words_join(encoder_dir, tiny_tokenizer):
    # the tiny vocabulary: specials, the, a, cat, dog, sat, on, mat, ran, ...; a is one character
    dev = ["a cat ran", "mat"]  # cat joins; a and ran (past the 2 frequent words) stay [UNK]
    model, vocab, report = init_bilstm(["the cats walked", "the dog"], num_labels=2, pair=False, frequent_words=2,
                                       word_vectors=f"encoder:{encoder_dir}", dev_texts=dev)
    assert vocab.words[3:] == ["the", "cats", "dog", "walked", "cat", "sat"]
    assert vocab.encode("a cat ran") == [vocab.unk_id, 7, vocab.unk_id]
    assert report["vocab_sources"] == {"train": 4, "frequent vector words": 2}
    assert report["dev_oov_rate"] == {"train words only": 1.0, "with frequent vector words": 0.75}
    assert report["embeddings"]["type_coverage"] == 1.0 and model.config.embedding_dim == 16
    wide = init_bilstm(["the dog"], 2, False, word_vectors=f"encoder:{encoder_dir}", frequent_words=1000)[1]
    assert len(wide) == 3 + len(tokenizer_words(tiny_tokenizer.get_vocab()))  # the vocabulary caps the count
    with pytest.raises(KdbertError, match="set --embedding-dim 16"):
        init_bilstm(["the dog"], 2, False, word_vectors=f"encoder:{encoder_dir}", embedding_dim=8)


def test_tokenizer_words_are_whole_words_in_id_order():
    wordpiece = ["[PAD]", "[CLS]", "!", "a", "b", "the", "##s", "Of", "e-mail", "of", "cat"]
    assert tokenizer_words({piece: i for i, piece in enumerate(wordpiece)}) == ["the", "of", "cat"]
    bpe = ["<s>", "the", "\u0120the", "\u0120a", "ing", "\u0120cat", "\u2581dog"]  # marked word starts only
    assert tokenizer_words({piece: i for i, piece in enumerate(reversed(bpe))}) == ["dog", "cat", "the"]


def test_a_missing_encoder_is_one_line(tmp_path):
    with pytest.raises(KdbertError) as error:
        encoder_word_vectors(f"encoder:{tmp_path / 'nowhere'}", WORDS, None)
    assert "does not exist" in str(error.value) and "\n" not in str(error.value)


def test_distil_a_bilstm_from_encoder_vectors_stored_beside_the_teachers_logits(encoder_dir, tmp_path, tiny_tokenizer):
    root = tmp_path / "glue_data"
    write_glue_task(root, "SST-2")
    teacher = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer)
    options = {"method": "bilstm", "teacher": str(teacher), "word_vectors": f"encoder:{encoder_dir}",
               "hidden_size": 6, "fc_size": 5, "batch_size": 4, "max_steps": 3, "no_progress": True,
               "logits_cache": str(tmp_path / "cache")}
    report = distill_task(TaskOptions("sst2", data_dir=str(root)), options, str(tmp_path / "out"))
    assert report["student"]["embeddings"]["type_coverage"] == 1.0
    assert len(list((tmp_path / "cache" / "word-vectors").glob("*.safetensors"))) == 1
    model, vocab = load_bilstm(tmp_path / "out")
    assert model.config.embedding_dim == 16
