"""MobileBERT presets, feature widths, init from a teacher, IB-BERT, and the trace on MobileBERT."""

import pytest
import torch
from conftest import tiny_bert_config
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    MobileBertModel,
)
from transformers.models.mobilebert.modeling_mobilebert import NoNorm

from kdbert.bench import count_parameters
from kdbert.errors import KdbertError
from kdbert.models.mobilebert import (
    PAPER_PARAMETERS,
    build_mobilebert,
    describe,
    feature_widths,
    ib_bert_from_teacher,
    init_from_teacher,
    mobilebert_config,
)
from kdbert.models.trace import MASKED_SCORE, trace

# all-MiniLM-L6-v2's shape, without loading it.
MINILM = BertConfig(num_hidden_layers=6, hidden_size=384, num_attention_heads=12, intermediate_size=1536,
                    architectures=["BertModel"])


def encoder_parameters(config) -> int:
    with torch.device("meta"):
        return count_parameters(MobileBertModel(config, add_pooling_layer=False))["total"]


def test_paper_presets_and_their_parameter_counts():
    # Encoder parameters (no pooler, no heads); the paper's Table 1 counts 25.3M and 15.1M.
    assert encoder_parameters(mobilebert_config("mobilebert")) == 24_581_888
    assert encoder_parameters(mobilebert_config("mobilebert-tiny")) == 15_485_696
    # IB-BERT reads attention inputs from its 1024-wide bottleneck (HF cannot read them from the
    # 512-wide stream): 24 layers x 3 x (1024 - 512) x 1024 more weights than the paper's 293M.
    ib = encoder_parameters(mobilebert_config("ib-bert-large"))
    assert ib == 331_953_920
    assert abs(ib - 24 * 3 * 512 * 1024 - PAPER_PARAMETERS["ib-bert-large"]) / PAPER_PARAMETERS["ib-bert-large"] < 0.01
    config = mobilebert_config("mobilebert")
    assert (config.num_hidden_layers, config.hidden_size, config.true_hidden_size, config.num_attention_heads,
            config.num_feedforward_networks, config.embedding_size, config.normalization_type,
            config.hidden_act) == (24, 512, 128, 4, 4, 128, "no_norm", "relu")


def test_matched_preset_follows_the_teacher():
    config = mobilebert_config("mobilebert-matched", MINILM, num_labels=3)
    assert describe(config) == ("6 layers, inter-block 384, intra-block 96, 12 heads, FFN 384 x 4, "
                                "embedding 128 trigram, no_norm, relu")
    assert config.vocab_size == MINILM.vocab_size and config.num_labels == 3
    ib = mobilebert_config("ib-bert-matched", MINILM)
    assert describe(ib) == "6 layers, inter-block 512, intra-block 384, 12 heads, FFN 1536 x 1, embedding 384, layer_norm, gelu"


def test_overrides_and_bad_options():
    config = mobilebert_config("mobilebert-matched", MINILM, normalization_type="layer_norm", hidden_act="gelu")
    assert (config.normalization_type, config.hidden_act) == ("layer_norm", "gelu")
    with pytest.raises(KdbertError, match="teacher_config"):
        mobilebert_config("mobilebert-matched")
    with pytest.raises(KdbertError, match="unknown MobileBERT preset"):
        mobilebert_config("mobilebert-huge")
    with pytest.raises(KdbertError, match="hidden_sise"):
        mobilebert_config("mobilebert", hidden_sise=3)
    with pytest.raises(KdbertError, match="not divisible by num_attention_heads 5"):
        mobilebert_config("mobilebert", num_attention_heads=5)


def tiny_mobilebert(vocab_size: int, **overrides):
    shape = dict(num_hidden_layers=2, hidden_size=16, intra_bottleneck_size=8, num_attention_heads=2,
                 intermediate_size=16, embedding_size=8, max_position_embeddings=64, vocab_size=vocab_size)
    shape.update(overrides)
    return mobilebert_config("mobilebert", **shape)


def test_saved_student_loads_with_auto_classes(tmp_path):
    config = tiny_mobilebert(30)
    build_mobilebert(config).save_pretrained(tmp_path / "cls")
    build_mobilebert(config, head="masked-lm").save_pretrained(tmp_path / "mlm")
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "cls")
    assert type(loaded).__name__ == "MobileBertForSequenceClassification"
    assert any(isinstance(m, NoNorm) for m in loaded.modules())
    assert type(AutoModelForMaskedLM.from_pretrained(tmp_path / "mlm")).__name__ == "MobileBertForMaskedLM"
    with pytest.raises(KdbertError, match="unknown head"):
        build_mobilebert(config, head="token-classification")


def test_feature_widths():
    student = feature_widths(mobilebert_config("mobilebert-matched", MINILM))
    assert student.hidden == (384,) * 7 and student.heads == (12,) * 6
    assert (student.intra, student.head_size, student.num_layers) == (96, 8, 6)
    teacher = feature_widths(MINILM)
    assert (teacher.hidden[0], teacher.intra, teacher.head_size) == (384, 384, 32)
    with pytest.raises(KdbertError, match="'gpt2'"):
        feature_widths(type("C", (), {"model_type": "gpt2"})())


def test_trace_records_mobilebert_hidden_states_and_scores(tiny_tokenizer):
    """MobileBERT goes through transformers' attention interface, so the trace sees its scores."""
    torch.manual_seed(0)
    model = build_mobilebert(tiny_mobilebert(len(tiny_tokenizer), num_labels=3)).eval()
    batch = {"input_ids": torch.randint(5, len(tiny_tokenizer), (2, 6)),
             "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]),
             "token_type_ids": torch.zeros(2, 6, dtype=torch.long)}
    result = trace(model, batch)
    assert [tuple(h.shape) for h in result.hidden_states] == [(2, 6, 16)] * 3  # inter-block width
    assert [tuple(s.shape) for s in result.attention_scores] == [(2, 2, 6, 6)] * 2
    assert torch.all(result.attention_scores[1][1, :, :, 4:] < MASKED_SCORE / 2)
    model.config._attn_implementation = "eager"
    reference = model(**batch, output_attentions=True, output_hidden_states=True)
    for scores, probabilities in zip(result.attention_scores, reference.attentions):
        torch.testing.assert_close(torch.softmax(scores, dim=-1), probabilities)
    torch.testing.assert_close(result.logits, reference.logits)


def test_init_from_teacher_copies_what_fits(tiny_tokenizer):
    torch.manual_seed(0)
    teacher = BertForSequenceClassification(tiny_bert_config(tiny_tokenizer, num_labels=2))  # hidden 16
    student = build_mobilebert(tiny_mobilebert(len(tiny_tokenizer), classifier_activation=True))
    report = init_from_teacher(student, teacher)
    copied = set(report["copied"])
    assert copied == {
        "mobilebert.embeddings.position_embeddings.weight", "mobilebert.embeddings.token_type_embeddings.weight",
        "mobilebert.embeddings.LayerNorm.weight", "mobilebert.embeddings.LayerNorm.bias",
        "mobilebert.pooler.dense.weight", "mobilebert.pooler.dense.bias", "classifier.weight", "classifier.bias",
    }
    assert torch.equal(student.classifier.weight, teacher.classifier.weight)
    assert torch.equal(student.mobilebert.embeddings.position_embeddings.weight,
                       teacher.bert.embeddings.position_embeddings.weight)
    vocab = len(tiny_tokenizer)
    assert f"mobilebert.embeddings.word_embeddings.weight: shape ({vocab}, 8) != teacher ({vocab}, 16)" in report["skipped"]
    unpooled = build_mobilebert(tiny_mobilebert(len(tiny_tokenizer)))  # classifier_activation=False
    skipped = init_from_teacher(unpooled, teacher)["skipped"]
    assert "classifier.weight: the student's pooler differs from the teacher's" in skipped
    with pytest.raises(KdbertError, match="unknown init part"):
        init_from_teacher(student, teacher, parts=("decoder",))


def test_ib_bert_from_teacher_holds_every_teacher_layer(tiny_tokenizer):
    torch.manual_seed(0)
    teacher = BertForMaskedLM(tiny_bert_config(tiny_tokenizer))  # 2 layers, hidden 16, 4 heads
    ib, report = ib_bert_from_teacher(teacher, inter_block_size=24)
    assert (ib.config.hidden_size, ib.config.true_hidden_size, ib.config.num_attention_heads) == (24, 16, 4)
    for i in range(2):
        mine, theirs = ib.mobilebert.encoder.layer[i], teacher.bert.encoder.layer[i]
        for name in ("attention.self.query", "attention.self.value", "attention.output.dense",
                     "intermediate.dense", "output.dense", "output.LayerNorm"):
            assert torch.equal(mine.get_submodule(name).weight, theirs.get_submodule(name).weight), name
    assert "mobilebert.embeddings.word_embeddings.weight" in report["copied"]
    assert any(s.startswith("mobilebert.encoder.layer.0.bottleneck.input.dense.weight") for s in report["skipped"])
    batch = {"input_ids": torch.randint(5, len(tiny_tokenizer), (1, 5))}
    assert ib(**batch).logits.shape == (1, 5, len(tiny_tokenizer))
    # an inter-block width below the teacher's caps the embeddings (an MLM head needs it)
    narrow, narrow_report = ib_bert_from_teacher(teacher, inter_block_size=8)
    assert narrow.config.embedding_size == 8
    assert "mobilebert.embeddings.word_embeddings.weight" not in narrow_report["copied"]
