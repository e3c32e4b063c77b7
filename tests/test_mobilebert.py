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

from kdbert.deploy.bench import count_parameters
from kdbert.errors import KdbertError
from kdbert.families.mobilebert import (
    PAPER_PARAMETERS,
    build_mobilebert,
    describe,
    feature_widths,
    ib_bert_from_teacher,
    init_from_teacher,
    mobilebert_config,
)
from kdbert.core.trace import MASKED_SCORE, trace

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
    embeddings = {n for n, _ in student.named_parameters() if n.startswith("mobilebert.embeddings.")}
    assert set(report["copied"]) == embeddings | {
        "mobilebert.pooler.dense.weight", "mobilebert.pooler.dense.bias", "classifier.weight", "classifier.bias",
    }
    assert report["embeddings"]["rank"] == 8 and report["embeddings"]["normalization"] == "no_norm"
    assert torch.equal(student.classifier.weight, teacher.classifier.weight)
    # NoNorm cannot centre: the copied position table is the teacher's, row-centred.
    position = teacher.bert.embeddings.position_embeddings.weight
    torch.testing.assert_close(student.mobilebert.embeddings.position_embeddings.weight,
                               position - position.mean(dim=-1, keepdim=True), rtol=0, atol=1e-7)
    unpooled = build_mobilebert(tiny_mobilebert(len(tiny_tokenizer)))  # classifier_activation=False
    skipped = init_from_teacher(unpooled, teacher)["skipped"]
    assert "classifier.weight: the student's pooler differs from the teacher's" in skipped
    with pytest.raises(KdbertError, match="unknown init part"):
        init_from_teacher(student, teacher, parts=("decoder",))


def embedding_outputs(model, ids):
    base = getattr(model, model.base_model_prefix)
    return base.embeddings(input_ids=ids, token_type_ids=torch.zeros_like(ids))


@torch.no_grad()
def test_full_rank_layer_norm_student_reproduces_the_teachers_embedding_layer(tiny_tokenizer):
    """Rank k = d (trigram input, one slot used) and a LayerNorm: the factorisation is exact."""
    torch.manual_seed(0)
    teacher = BertForMaskedLM(tiny_bert_config(tiny_tokenizer)).eval()  # hidden 16
    for table in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        # unit-scale rows, as trained ones are: HF's MobileBERT LayerNorm has eps 1e-5, BERT's 1e-12
        teacher.bert.embeddings.get_submodule(table).weight.mul_(50)
    student = build_mobilebert(tiny_mobilebert(len(tiny_tokenizer), embedding_size=16,
                                               normalization_type="layer_norm")).eval()
    report = init_from_teacher(student, teacher)["embeddings"]
    assert report == {"rank": 16, "normalization": "layer_norm", "energy_kept": 1.0}
    ids = torch.randint(0, len(tiny_tokenizer), (3, 7))
    torch.testing.assert_close(embedding_outputs(student, ids), embedding_outputs(teacher, ids), rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_no_norm_student_folds_the_layer_norm_scale_and_keeps_the_top_singular_directions(tiny_tokenizer):
    torch.manual_seed(0)
    teacher = BertForMaskedLM(tiny_bert_config(tiny_tokenizer)).eval()
    student = build_mobilebert(tiny_mobilebert(len(tiny_tokenizer))).eval()  # embedding 8 < hidden 16, NoNorm
    report = init_from_teacher(student, teacher)["embeddings"]
    tables = teacher.bert.embeddings
    word, position = tables.word_embeddings.weight, tables.position_embeddings.weight
    centred = word - word.mean(dim=-1, keepdim=True)
    singular = torch.linalg.svdvals(centred)
    assert report["energy_kept"] == round(float((singular[:8] ** 2).sum() / (singular ** 2).sum()), 4)
    # By hand: the best rank-8 approximation of the centred word rows, plus centred position and type rows,
    # scaled by the teacher's LayerNorm weight over sigma, plus its bias.
    u, s, vh = torch.linalg.svd(centred, full_matrices=False)
    low_rank = (u[:, :8] * s[:8]) @ vh[:8]
    position = position - position.mean(-1, keepdim=True)
    type_row = tables.token_type_embeddings.weight[0]
    type_row = type_row - type_row.mean()
    # sigma: mean std of those sums; the tiny vocabulary (< 4096 words) is used whole, positions 0, 4, ... 60
    sums = low_rank[:, None, :] + position[::4][None, :, :] + type_row
    sigma = float(sums.std(dim=-1, unbiased=False).mean())
    assert report["layer_norm_scale"] == round(sigma, 4)
    ids = torch.randint(0, len(tiny_tokenizer), (2, 5))
    x = low_rank[ids] + position[:5] + type_row
    # singular vectors' signs are fixed (largest entry of each word-table column positive), not left to LAPACK
    table = student.mobilebert.embeddings.word_embeddings.weight
    assert bool((table.gather(0, table.abs().argmax(dim=0, keepdim=True)) > 0).all())
    expected = x * tables.LayerNorm.weight / sigma + tables.LayerNorm.bias
    torch.testing.assert_close(embedding_outputs(student, ids), expected, rtol=1e-4, atol=1e-5)


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


# Frequent words, and a few contrasting ones, of the bert-base-uncased vocabulary.
WORDS = ("the of and to in was he is for on as with by at his an from it that which "
         "good terrible movie film stock market house river king queen red blue run walk").split()


@pytest.mark.teacher
def test_default_student_starts_with_distinct_word_embeddings(teacher_path):
    """The recipe's default student on the packaged teacher: its embedding outputs of different words
    are about as far apart as the teacher's (mean cosine 0.852 against 0.758), where copying the
    same-named tensors alone left them indistinguishable (0.9995: a random 128-d table under the
    copied position rows and the LayerNorm shift)."""
    from transformers import AutoModel, AutoTokenizer

    from kdbert.families.mobilebert_embeddings import embedding_output_cosine

    teacher = AutoModel.from_pretrained(teacher_path).eval()
    ids = AutoTokenizer.from_pretrained(teacher_path).convert_tokens_to_ids(WORDS)
    student = build_mobilebert(mobilebert_config("mobilebert-matched", teacher.config), head="masked-lm", seed=0)
    report = init_from_teacher(student, teacher)["embeddings"]
    assert report["energy_kept"] == pytest.approx(0.6613, abs=1e-3)
    assert embedding_output_cosine(teacher, ids) == pytest.approx(0.7577, abs=1e-3)
    assert embedding_output_cosine(student, ids) == pytest.approx(0.8518, abs=2e-3)
