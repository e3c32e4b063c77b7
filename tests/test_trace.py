"""Trace: pre-softmax attention scores from unmodified HF BERT models."""

import math

import pytest
import torch
from conftest import tiny_bert_config
from transformers import BertForSequenceClassification, BertModel

from kdbert.errors import KdbertError
from kdbert.core.trace import MASKED_SCORE, trace


@pytest.fixture
def model_and_batch(tiny_tokenizer):
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_bert_config(tiny_tokenizer, num_labels=3)).eval()
    batch = {"input_ids": torch.randint(5, len(tiny_tokenizer), (2, 6)),
             "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]),
             "token_type_ids": torch.zeros(2, 6, dtype=torch.long)}
    return model, batch


def test_scores_equal_hand_computation(model_and_batch):
    model, batch = model_and_batch
    result = trace(model, batch)
    heads, d_head = 4, 4
    for layer in range(2):
        hidden = result.hidden_states[layer]  # input of layer `layer`
        attention = model.bert.encoder.layer[layer].attention.self
        def split(x):
            return x.view(2, 6, heads, d_head).transpose(1, 2)
        q, k = split(attention.query(hidden)), split(attention.key(hidden))
        mask = (1.0 - batch["attention_mask"].float())[:, None, None, :] * MASKED_SCORE
        expected = q @ k.transpose(-1, -2) / math.sqrt(d_head) + mask
        torch.testing.assert_close(result.attention_scores[layer], expected)


def test_softmax_of_scores_equals_hf_eager_probabilities(model_and_batch):
    model, batch = model_and_batch
    result = trace(model, batch)
    model.config._attn_implementation = "eager"
    reference = model(**batch, output_attentions=True, output_hidden_states=True)
    assert len(result.attention_scores) == 2 and len(result.hidden_states) == 3
    for scores, probabilities in zip(result.attention_scores, reference.attentions):
        assert scores.shape == (2, 4, 6, 6)
        torch.testing.assert_close(torch.softmax(scores, dim=-1), probabilities)
    torch.testing.assert_close(result.logits, reference.logits)
    for mine, theirs in zip(result.hidden_states, reference.hidden_states):
        torch.testing.assert_close(mine, theirs)


def test_trace_restores_attention_implementation_and_passes_gradients(model_and_batch):
    model, batch = model_and_batch
    before = model.config._attn_implementation
    result = trace(model, batch)
    assert model.config._attn_implementation == before
    result.attention_scores[0].sum().backward()
    assert model.bert.encoder.layer[0].attention.self.query.weight.grad is not None


def test_bare_encoder_and_no_attention_mode(tiny_tokenizer):
    model = BertModel(tiny_bert_config(tiny_tokenizer)).eval()
    batch = {"input_ids": torch.randint(5, len(tiny_tokenizer), (1, 5))}
    result = trace(model, batch, with_attention=False)
    assert result.logits is None and result.attention_scores is None
    with pytest.raises(KdbertError, match=r"the student \(BertModel\) recorded no logits"):
        result.require("logits", "student")
    assert result.attention_mask.tolist() == [[1] * 5]


@pytest.mark.teacher
def test_real_teacher_trace(teacher_path):
    model = BertModel.from_pretrained(teacher_path).eval()
    batch = {"input_ids": torch.tensor([[101, 7592, 2088, 102, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 0]])}
    with torch.no_grad():
        result = trace(model, batch)
    assert len(result.hidden_states) == 7 and len(result.attention_scores) == 6
    assert result.attention_scores[0].shape == (1, 12, 5, 5)
    assert torch.all(result.attention_scores[3][..., 4] < -9000)
