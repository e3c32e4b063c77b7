"""The BiLSTM student: it is a real BiLSTM, padding never matters, siamese pairs, folder roundtrip, ONNX,
building from data, FLOPs, word-level evaluation, and its distillation loss pinned to hand-computed values."""

import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from kdbert.data.glue import Example, TaskData
from kdbert.data.tasks import GLUE_TASKS
from kdbert.families.bilstm.words import Vocab
from kdbert.errors import KdbertError
from kdbert.families.bilstm.evaluate import WordTaskEvaluator, predict_words
from kdbert.core.losses import bilstm_distill_loss
from kdbert.families.bilstm.model import (
    FREQUENT_WORDS, BiLSTMConfig, bilstm_flops, build_bilstm, init_bilstm, is_bilstm_folder, load_bilstm, save_bilstm,
)

V, E, H, F = 12, 4, 3, 5


def tiny(pair=False, num_labels=2, **kw):
    return build_bilstm(BiLSTMConfig(vocab_size=V, num_labels=num_labels, pair=pair, embedding_dim=E, hidden_size=H,
                                     fc_size=F, **kw), seed=0).eval()


def padded(rows, width=None, junk=0):
    """Right-padded (ids, mask) of id lists; ``junk`` fills the padding with non-pad ids."""
    width = width or max(map(len, rows))
    ids = torch.full((len(rows), width), junk)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return ids, mask


ROWS = [[2, 3, 4, 5, 6], [7, 8], [9]]


def test_parameter_count_is_one_shared_encoder():
    lstm = 4 * H * (E + H) + 2 * 4 * H  # weights and both bias vectors of one direction
    single = V * E + 2 * lstm + (2 * H * F + F) + (F * 2 + 2)
    assert sum(p.numel() for p in tiny().parameters()) == single == 311
    assert sum(p.numel() for p in tiny(pair=True).parameters()) == single + 6 * H * F == 401


def test_encoder_equals_torch_bidirectional_lstm_on_packed_sequences():
    model = tiny()
    reference = nn.LSTM(E, H, batch_first=True, bidirectional=True)
    with torch.no_grad():
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(reference, name).copy_(getattr(model.forward_lstm, name))
            getattr(reference, name + "_reverse").copy_(getattr(model.backward_lstm, name))
        ids, mask = padded(ROWS)
        packed = nn.utils.rnn.pack_padded_sequence(model.embeddings(ids), mask.sum(1), batch_first=True,
                                                   enforce_sorted=False)
        _, (h_n, _) = reference(packed)
        torch.testing.assert_close(model.encode(ids, mask), torch.cat([h_n[0], h_n[1]], dim=-1), rtol=0, atol=1e-6)


@pytest.mark.parametrize("pair", [False, True])
def test_padding_never_changes_the_outputs(pair):
    model = tiny(pair=pair)
    with torch.no_grad():
        alone = []
        for i, row in enumerate(ROWS):
            inputs = padded([row]) + (padded([ROWS[-1 - i]]) if pair else ())
            alone.append(model(*inputs).logits)
        inputs = padded(ROWS, width=9, junk=11) + (padded(ROWS[::-1], width=7, junk=5) if pair else ())
        batched = model(*inputs).logits
    torch.testing.assert_close(batched, torch.cat(alone), rtol=0, atol=1e-6)


def test_siamese_features_and_head():
    model = tiny(pair=True, num_labels=3)
    a, b = padded(ROWS), padded([[4, 4], [2, 3, 5], [6]])
    with torch.no_grad():
        h1, h2 = model.encode(*a), model.encode(*b)
        features = model.features(*a, *b)
        torch.testing.assert_close(features, torch.cat([h1, h2, h1 * h2, (h1 - h2).abs()], dim=-1), rtol=0, atol=0)
        expected = model.classifier(torch.relu(model.fc(features)))
        torch.testing.assert_close(model(*a, *b).logits, expected, rtol=0, atol=0)
    assert features.shape == (3, 8 * H)
    with pytest.raises(KdbertError, match="reads sentence pairs; pass input_ids_b"):
        model(*a)
    with pytest.raises(KdbertError, match="reads one sentence"):
        tiny()(*a, *b)


def test_regression_has_one_output_and_frozen_embeddings_get_no_gradient():
    model = tiny(num_labels=1, freeze_embeddings=True).train()
    logits = model(*padded(ROWS)).logits
    assert logits.shape == (3, 1)
    logits.sum().backward()
    assert model.embeddings.weight.grad is None and model.fc.weight.grad is not None


def test_embeddings_come_from_the_given_matrix_with_a_zero_pad_row():
    matrix = torch.arange(V * E, dtype=torch.float32).reshape(V, E)
    model = build_bilstm(BiLSTMConfig(vocab_size=V, num_labels=2, embedding_dim=E, hidden_size=H), matrix)
    assert torch.equal(model.embeddings.weight.detach(), matrix)
    with pytest.raises(KdbertError, match=r"embedding matrix \(3, 4\) does not fit the student's \(12, 4\)"):
        model.set_embeddings(torch.zeros(3, E))


def test_save_load_roundtrip_is_exact_and_checked(tmp_path):
    model = tiny(pair=True, num_labels=3)
    vocab = Vocab(["[PAD]", "[UNK]", *[f"w{i}" for i in range(V - 2)]])
    save_bilstm(model, vocab, tmp_path / "student", reports={"report.json": {"score": 1}})
    assert sorted(p.name for p in (tmp_path / "student").iterdir()) == [
        "config.json", "model.safetensors", "report.json", "vocab.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["student"]  # no temporary folder left
    loaded, loaded_vocab = load_bilstm(tmp_path / "student")
    assert loaded.config == model.config and loaded_vocab == vocab and is_bilstm_folder(tmp_path / "student")
    inputs = padded(ROWS) + padded(ROWS[::-1])
    with torch.no_grad():
        assert torch.equal(loaded(*inputs).logits, model(*inputs).logits)
    config = json.loads((tmp_path / "student" / "config.json").read_text())
    (tmp_path / "student" / "config.json").write_text(json.dumps({**config, "hidden_size": 4}))
    with pytest.raises(KdbertError, match="model.safetensors: the weights do not fit config.json"):
        load_bilstm(tmp_path / "student")
    (tmp_path / "student" / "config.json").write_text(json.dumps({**config, "model_type": "bert"}))
    with pytest.raises(KdbertError, match="model_type is 'bert', not 'kdbert-bilstm'"):
        load_bilstm(tmp_path / "student")
    with pytest.raises(KdbertError, match="the vocabulary has 3 words but the student 12"):
        save_bilstm(model, Vocab(["[PAD]", "[UNK]", "a"]), tmp_path / "other")


@pytest.mark.parametrize("pair", [False, True])
def test_onnx_export_matches_torch_on_other_shapes(tmp_path, pair):
    ort = pytest.importorskip("onnxruntime")
    model = tiny(pair=pair)

    class Logits(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, input_ids_b=None, attention_mask_b=None):
            return self.inner(input_ids, attention_mask, input_ids_b, attention_mask_b).logits

    names = ["input_ids", "attention_mask"] + (["input_ids_b", "attention_mask_b"] if pair else [])
    example = padded(ROWS) + (padded(ROWS[::-1]) if pair else ())
    axes = {name: {0: "batch", 1: "length_b" if name.endswith("_b") else "length"} for name in names}
    path = tmp_path / "bilstm.onnx"
    torch.onnx.export(Logits(model), example, str(path), input_names=names, output_names=["logits"],
                      dynamic_axes=axes, dynamo=False)
    session = ort.InferenceSession(str(path))
    other = padded([[3, 1, 4, 1, 5, 9, 2, 6], [5], [3, 5], [8, 9, 7]], junk=2)
    inputs = other + (padded([[2], [7, 1, 8, 2, 8, 1, 8, 2, 8, 4], [5, 9], [10]]) if pair else ())
    got = session.run(None, {name: t.numpy() for name, t in zip(names, inputs)})[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, model(*inputs).logits.numpy(), rtol=0, atol=1e-4)


# --------------------------------------------------------------------------- loss
def test_distill_loss_is_the_squared_l2_distance_per_example():
    student = torch.tensor([[1.0, 2.0], [0.0, 0.0]], requires_grad=True)
    teacher = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    loss = bilstm_distill_loss(student, teacher)  # ((1 + 4) + (1 + 1)) / 2
    assert loss.item() == pytest.approx(3.5, abs=1e-7)
    loss.backward()  # d/dz_s = 2 (z_s - z_t) / N
    assert student.grad.tolist() == [[1.0, 2.0], [-1.0, -1.0]]


def test_distill_loss_mixes_hard_labels_with_alpha():
    student = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    teacher = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    ce = (math.log(1 + math.exp(-1)) + math.log(2)) / 2  # CE([1, 2], 1) and CE([0, 0], 0)
    got = bilstm_distill_loss(student, teacher, torch.tensor([1, 0]), alpha=0.5)
    assert got.item() == pytest.approx(0.5 * 3.5 + 0.5 * ce, abs=1e-6)  # 2.0016022
    with pytest.raises(KdbertError, match="batch has none"):
        bilstm_distill_loss(student, teacher, alpha=0.5)
    with pytest.raises(KdbertError, match="--alpha must be between 0 and 1"):
        bilstm_distill_loss(student, teacher, torch.tensor([1, 0]), alpha=1.5)
    with pytest.raises(KdbertError, match="same number of labels"):
        bilstm_distill_loss(student, teacher[:, :1])


def test_regression_distills_the_teacher_score_and_mixes_the_gold_score():
    student, teacher = torch.tensor([[1.0], [3.0]]), torch.tensor([[2.0], [2.0]])
    assert bilstm_distill_loss(student, teacher).item() == pytest.approx(1.0)  # (1 + 1) / 2
    gold = torch.tensor([1.5, 2.5])  # gold MSE: (0.25 + 0.25) / 2
    assert bilstm_distill_loss(student, teacher, gold, alpha=0.2).item() == pytest.approx(0.8 * 1.0 + 0.2 * 0.25)


# --------------------------------------------------------------------------- building and evaluating
def test_init_bilstm_builds_vocab_and_embeddings_from_the_data_and_vectors(tmp_path):
    glove = tmp_path / "g.txt"
    glove.write_text("cat 1 2\nthe 3 4\nunused 5 6\n")
    model, vocab, report = init_bilstm(["the cat sat", "the dog"], num_labels=2, pair=False, word_vectors=glove,
                                       hidden_size=H, fc_size=F)
    assert vocab.words == ["[PAD]", "[UNK]", "[MASK]", "the", "cat", "dog", "sat", "unused"]  # a frequent vector word
    assert model.config.embedding_dim == 2 and model.config.vocab_size == 8
    assert model.embeddings.weight[3:5].tolist() == [[3.0, 4.0], [1.0, 2.0]]
    assert report["vocab_sources"] == {"train": 4, "frequent vector words": 1} and "dev_oov_rate" not in report
    embeddings = report["embeddings"]
    assert embeddings["with_vector"] == 3 and embeddings["token_coverage"] == 0.6  # the x2, cat x1 of 5 words


def test_dev_words_stay_unk_unless_among_the_frequent_vector_words(tmp_path):
    glove = tmp_path / "g.txt"  # most frequent first; the and cat are training words
    glove.write_text("the 3 4\nzebra 5 6\ncat 1 2\nfish 7 8\nqwxz 9 9\n")
    dev = ["the zebra sat", "a fish zebra"]  # fish has a vector but is not among the 1 frequent word; a has none
    model, vocab, report = init_bilstm(["the cat sat", "the dog"], num_labels=2, pair=False, word_vectors=glove,
                                       dev_texts=dev, frequent_words=1, hidden_size=H, fc_size=F)
    assert vocab.words == ["[PAD]", "[UNK]", "[MASK]", "the", "cat", "dog", "sat", "zebra"]
    assert vocab.encode("a zebra fish [MASK]") == [vocab.unk_id, 7, vocab.unk_id, vocab.mask_id]
    assert model.embeddings.weight[7].tolist() == [5.0, 6.0]
    assert report["vocab_sources"] == {"train": 4, "frequent vector words": 1}
    # dev: the zebra sat a fish zebra; unknown with the training words: zebra x2, a, fish
    assert report["dev_oov_rate"] == {"train words only": round(4 / 6, 4),
                                      "with frequent vector words": round(2 / 6, 4)}


def test_frequent_words_bounds_how_many_vector_words_join(tmp_path):
    glove = tmp_path / "g.txt"
    glove.write_text("the 3 4\nzebra 5 6\ne-mail 0 0\nZebra 1 1\ncat 1 2\nfish 7 8\nqwxz 9 9\n")

    def added(count, **kw):
        vocab = init_bilstm(["the cat sat", "the dog"], 2, False, word_vectors=glove, frequent_words=count,
                            hidden_size=H, fc_size=F, **kw)[1]
        return vocab.words[7:]

    # in file order, training words, a duplicate by case and a word the tokenizer splits left out
    assert [added(n) for n in (0, 1, 2, 10)] == [[], ["zebra"], ["zebra", "fish"], ["zebra", "fish", "qwxz"]]
    assert init_bilstm(["the cat sat", "the dog"], 2, False, frequent_words=10, embedding_dim=2)[1].words[7:] == []
    with pytest.raises(KdbertError, match=r"--frequent-words must be 0 or more \(got -1\)"):
        added(-1)


def test_compress_size_estimate_builds_the_shipped_vocabulary_frequent_words_included(tmp_path):
    """`kdbert compress` times and sizes a BiLSTM candidate built from the task's texts before any
    training: its vocabulary (so its embedding rows, parameters and size_mb) must be init_bilstm's,
    the word vectors' frequent words included, read off only the file's first lines."""
    from kdbert.families.bilstm.family import BiLSTMFamily, student_vocab
    from kdbert.families.registry import ShapeContext

    texts = ("the cat sat", "the dog")
    glove = tmp_path / "g.txt"
    glove.write_text("the 3 4\nzebra 5 6\ncat 1 2\nfish 7 8\nqwxz 9 9\n")
    context = ShapeContext(None, None, 2, False, texts, word_vector_dim=2, word_vectors=str(glove))
    shipped = init_bilstm(list(texts), 2, False, word_vectors=glove, hidden_size=H, fc_size=F)[1]
    assert shipped.words[7:] == ["zebra", "fish", "qwxz"]
    candidates = BiLSTMFamily().candidates(context)
    for candidate in candidates:
        model, vocab = candidate.build(context)
        assert vocab.words == shipped.words and model.config.vocab_size == len(shipped) == 10
        assert model.embeddings.weight.shape == (10, 2)
    # only the lines needed are read: a broken line past them is never reached
    glove.write_text("the 3 4\nzebra 5 6\ncat 1 2\nfish 7 8\nbroken\n")
    assert student_vocab(context, frequent_words=2).words[7:] == ["zebra", "fish"]
    # vectors known by their size alone still count frequent_words rows, with entries no text matches
    sized = ShapeContext(None, None, 2, False, texts, word_vector_dim=2)
    vocab = student_vocab(sized)
    assert len(vocab) == 7 + FREQUENT_WORDS and vocab.encode("the zebra") == [3, vocab.unk_id]
    assert candidates[0].build(sized)[0].config.vocab_size == 7 + FREQUENT_WORDS
    # without word vectors: the training words alone, as init_bilstm
    bare = ShapeContext(None, None, 2, False, texts)
    assert candidates[0].build(bare)[1].words == init_bilstm(list(texts), 2, False, hidden_size=H)[1].words
    assert len(student_vocab(bare)) == 7


def test_a_folder_saved_with_dev_words_in_its_vocabulary_still_loads(tmp_path):
    """Students saved before --frequent-words hold dev words after the training words: loading reads
    vocab.txt as it is, every word keeping its id."""
    from safetensors.torch import save_file

    words = ["[PAD]", "[UNK]", "[MASK]", "the", "cat", "zebra", "qwxz"]  # zebra and qwxz: dev words
    config = BiLSTMConfig(vocab_size=len(words), num_labels=2, embedding_dim=E, hidden_size=H, fc_size=F)
    model = build_bilstm(config, seed=3)
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({field: getattr(config, field) for field in config.__dict__}))
    (folder / "vocab.txt").write_text("".join(w + "\n" for w in words))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    loaded, vocab = load_bilstm(folder)
    assert vocab.words == words and vocab.encode("the zebra qwxz new") == [3, 5, 6, vocab.unk_id]
    ids, mask = padded([vocab.encode("the zebra qwxz")])
    torch.testing.assert_close(loaded(ids, mask).logits, model.eval()(ids, mask).logits, rtol=0, atol=0)


def test_flops_formula_counts_both_directions_and_both_sentences():
    single = BiLSTMConfig(vocab_size=V, num_labels=2, embedding_dim=E, hidden_size=H, fc_size=F)
    assert bilstm_flops(single, 10) == 2 * 10 * 2 * 4 * H * (E + H) + 2 * 2 * H * F + 2 * F * 2 == 3440
    pair = BiLSTMConfig(vocab_size=V, num_labels=2, embedding_dim=E, hidden_size=H, fc_size=F, pair=True)
    assert bilstm_flops(pair, 10) == 2 * 3360 + 2 * 8 * H * F + 2 * F * 2 == 6980


def test_word_task_evaluator_scores_predictions_in_the_original_order():
    vocab = Vocab(["[PAD]", "[UNK]", *[f"w{i}" for i in range(V - 2)]])
    dev = [Example(("w1 w2 w3",), 1), Example(("w4",), 1), Example(("w5 w6",), 0), Example(("w1 w1 w1 w1",), 1)]
    data = TaskData(GLUE_TASKS["sst2"], [], {"dev": dev})
    model = tiny()
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 1.0]))  # always class 1
    assert WordTaskEvaluator(data, vocab, batch_size=3)(model) == {"accuracy": 75.0, "score": 75.0}
    trained = tiny()
    dataset = WordTaskEvaluator(data, vocab).splits["dev"]
    with torch.no_grad():
        one_by_one = torch.cat([trained(*padded([vocab.encode(ex.texts[0])])).logits for ex in dev]).numpy()
    np.testing.assert_allclose(predict_words(trained, dataset, batch_size=3), one_by_one, rtol=0, atol=1e-6)
