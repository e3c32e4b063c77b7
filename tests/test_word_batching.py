"""Per-model inputs: student word ids beside teacher token ids, stored teacher logits and labels."""

import numpy as np
import pytest
import torch

from kdbert.data.glue import Example
from kdbert.families.bilstm.batching import DistillationCollator, encode_for_distillation
from kdbert.families.bilstm.words import Vocab
from kdbert.errors import KdbertError
from kdbert.families.bilstm.model import BiLSTMConfig, build_bilstm

VOCAB = Vocab.build(["the cat sat on the mat", "a dog"])  # [PAD] [UNK] [MASK] the a cat dog mat on sat
PAIRS = [Example(("the cat sat", "a dog"), 1), Example(("[MASK] mat", "the zebra ran fast"), 0)]


def test_a_pair_batch_has_word_ids_for_the_student_and_token_ids_for_the_teacher(tiny_tokenizer):
    logits = np.array([[0.5, -0.5], [1.0, 2.0]], dtype=np.float32)
    data = encode_for_distillation(PAIRS, VOCAB, pair=True, tokenizer=tiny_tokenizer, max_seq_len=16,
                                   teacher_logits=logits)
    assert data.lengths == [5, 6]
    batch = DistillationCollator(tiny_tokenizer.pad_token_id)([data[0], data[1]])
    ids = {w: i for i, w in enumerate(VOCAB.words)}
    assert batch["student"]["input_ids"].tolist() == [[ids["the"], ids["cat"], ids["sat"]],
                                                      [ids["[MASK]"], ids["mat"], Vocab.pad_id]]
    assert batch["student"]["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["student"]["input_ids_b"].tolist() == [[ids["a"], ids["dog"], 0, 0], [ids["the"], 1, 1, 1]]  # UNK
    assert batch["student"]["attention_mask_b"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    teacher_ids = batch["teacher"]["input_ids"][1].tolist()
    assert teacher_ids[:2] == [tiny_tokenizer.cls_token_id, tiny_tokenizer.mask_token_id]  # the teacher's [MASK]
    assert batch["teacher"]["input_ids"].shape == batch["teacher"]["attention_mask"].shape
    assert torch.equal(batch["teacher_logits"], torch.from_numpy(logits))
    assert batch["labels"].tolist() == [1, 0] and batch["labels"].dtype == torch.long
    model = build_bilstm(BiLSTMConfig(vocab_size=len(VOCAB), num_labels=2, pair=True, embedding_dim=4, hidden_size=3))
    assert model(**batch["student"]).logits.shape == (2, 2)  # the student's inputs are its forward's arguments


def test_single_sentences_with_stored_logits_need_no_teacher_inputs():
    examples = [Example(("the cat sat on the mat",), 2.5), Example(("",), None)]
    data = encode_for_distillation(examples, VOCAB, pair=False, teacher_logits=np.ones((2, 1)), max_words=4)
    batch = DistillationCollator(regression=True)([data[0]])
    assert set(batch) == {"student", "teacher_logits", "labels"} and set(batch["student"]) == {
        "input_ids", "attention_mask"}
    assert batch["student"]["input_ids"].shape == (1, 4) and batch["labels"].dtype == torch.float32
    assert data[1]["student"]["input_ids"] == [Vocab.unk_id] and "labels" not in data[1]


def test_a_pair_student_given_one_text_column_and_mismatched_logits_are_refused():
    with pytest.raises(KdbertError, match=r"row 0 has 1 text\(s\) but the student reads sentence pairs; set "
                                          r"--text-columns to two columns"):
        encode_for_distillation([Example(("the cat",), 1)], VOCAB, pair=True)
    with pytest.raises(KdbertError, match="1 rows of teacher logits for 2 examples"):
        encode_for_distillation(PAIRS, VOCAB, pair=True, teacher_logits=np.zeros((1, 2)))
