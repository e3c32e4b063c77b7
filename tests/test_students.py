import pytest
import torch
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    DistilBertForMaskedLM,
)

from kdbert.errors import KdbertError
from kdbert.families import bert as students

TINY = dict(
    vocab_size=99, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
    intermediate_size=37, max_position_embeddings=64, type_vocab_size=2,
)


def tiny_teacher(cls=BertForMaskedLM, seed=0, **kw):
    torch.manual_seed(seed)
    model = cls(BertConfig(**{**TINY, **kw}))
    # Random non-zero token-type 0 embedding and biases, so folding/copying is exercised.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return model.eval()


def batch():
    g = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, 99, (2, 7), generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    input_ids[1, 5:] = 0
    return input_ids, mask


def n_params(model):
    return sum(p.numel() for p in model.parameters())


# --- configs and random students ---------------------------------------------------------

def test_tinybert4_has_about_14_5m_params():
    teacher = BertConfig()  # bert-base-uncased shape: vocab 30522, 512 positions
    cfg = students.student_config("tinybert4", teacher, num_labels=2)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads) == (4, 312, 1200, 12)
    assert (cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size) == (30522, 512, 2)
    with torch.device("meta"):
        n = n_params(BertModel(cfg))  # incl. pooler
    assert n == 14_350_248
    assert abs(n - 14.5e6) < 0.2e6


def test_student_config_overrides_and_errors():
    teacher = BertConfig(**TINY)
    cfg = students.student_config(None, teacher, 3, num_hidden_layers=2, hidden_size=16, num_attention_heads=2)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (2, 16, 2)
    assert cfg.intermediate_size == 37 and cfg.vocab_size == 99 and cfg.num_labels == 3
    assert students.student_config("tinybert6", teacher, 2).hidden_size == 768
    with pytest.raises(KdbertError, match="unknown student preset 'tinybert5'"):
        students.student_config("tinybert5", teacher, 2)
    with pytest.raises(KdbertError, match="not divisible"):
        students.student_config(None, teacher, 2, hidden_size=30)


def test_build_student_seeded_and_regression():
    cfg = students.student_config(None, BertConfig(**TINY), 3, num_hidden_layers=2)
    a, b = students.build_student(cfg, seed=7), students.build_student(cfg, seed=7)
    c = students.build_student(cfg, seed=8)
    assert isinstance(a, BertForSequenceClassification) and a.config.num_labels == 3
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.classifier.weight, c.classifier.weight)
    reg = students.build_student(cfg, task_kind="regression")
    assert reg.config.num_labels == 1 and reg.config.problem_type == "regression"
    assert cfg.num_labels == 3  # input config untouched
    with pytest.raises(KdbertError, match="unknown task kind"):
        students.build_student(cfg, task_kind="ner")


# --- init from teacher layers (BERT-PKD) ------------------------------------------------

def test_init_from_all_teacher_layers_reproduces_teacher(tmp_path):
    teacher = tiny_teacher(BertForSequenceClassification, num_labels=2)
    student = students.init_from_teacher_layers(teacher, [0, 1, 2, 3], num_labels=2).eval()
    ids, mask = batch()
    types = torch.zeros_like(ids)
    types[0, 3:] = 1
    want = teacher.bert(ids, attention_mask=mask, token_type_ids=types)
    got = student.bert(ids, attention_mask=mask, token_type_ids=types)
    torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state)
    torch.testing.assert_close(got.pooler_output, want.pooler_output)

    student.save_pretrained(tmp_path)
    reloaded = BertForSequenceClassification.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(reloaded(ids, attention_mask=mask).logits, student(ids, attention_mask=mask).logits)


def test_init_from_teacher_subset_copies_chosen_layers():
    teacher = tiny_teacher(BertModel)
    student = students.init_from_teacher_layers(teacher, [1, 3], num_labels=1)
    assert student.config.num_hidden_layers == 2 and student.config.problem_type == "regression"
    for i, layer in enumerate([1, 3]):
        s, t = student.bert.encoder.layer[i].state_dict(), teacher.encoder.layer[layer].state_dict()
        assert all(torch.equal(s[k], t[k]) for k in t)


@pytest.mark.parametrize(
    "layers,message",
    [
        ([0, 1, 2, 3, 4], "k = 5 student layers is larger than the teacher's depth 4"),
        ([0, 4], "teacher layer index 4 \\(position 1\\) is out of range.*0..3"),
        ([2, 1], "teacher layer index 1 \\(position 1\\) does not come after 2"),
        ([], "no teacher layers"),
    ],
)
def test_init_from_teacher_layers_refuses_bad_indices(layers, message):
    with pytest.raises(KdbertError, match=message):
        students.init_from_teacher_layers(tiny_teacher(BertModel), layers, num_labels=2)


def test_non_bert_teacher_refused():
    with pytest.raises(KdbertError, match="expected a BERT teacher"):
        students.init_from_teacher_layers(torch.nn.Linear(2, 2), [0], num_labels=2)


# --- DistilBERT init ---------------------------------------------------------------------

def test_distilbert_from_all_layers_matches_teacher(tmp_path):
    teacher = tiny_teacher(BertForMaskedLM)
    student = students.init_distilbert_student(teacher, [0, 1, 2, 3]).eval()
    assert isinstance(student, DistilBertForMaskedLM)
    assert not hasattr(student.distilbert.embeddings, "token_type_embeddings")
    ids, mask = batch()
    want = teacher(ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids), output_hidden_states=True)
    got = student(ids, attention_mask=mask, output_hidden_states=True)
    torch.testing.assert_close(got.hidden_states[-1], want.hidden_states[-1])
    torch.testing.assert_close(got.logits, want.logits)

    student.save_pretrained(tmp_path)
    reloaded = DistilBertForMaskedLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(reloaded(ids, attention_mask=mask).logits, got.logits)


def test_distilbert_default_every_other_layer_from_bert_model():
    teacher = tiny_teacher(BertModel)
    student = students.init_distilbert_student(teacher)
    assert student.config.n_layers == 2
    for i, layer in enumerate([0, 2]):
        torch.testing.assert_close(
            student.distilbert.transformer.layer[i].ffn.lin1.weight,
            teacher.encoder.layer[layer].intermediate.dense.weight,
        )
    assert students.DISTILBERT_LAYER_CHOICES["every-other"](12) == [0, 2, 4, 6, 8, 10]


def test_distilbert_untied_decoder_is_copied():
    teacher = tiny_teacher(BertForMaskedLM, tie_word_embeddings=False)
    assert not torch.equal(teacher.cls.predictions.decoder.weight, teacher.bert.embeddings.word_embeddings.weight)
    student = students.init_distilbert_student(teacher, [1, 3])
    assert not student.config.tie_word_embeddings
    torch.testing.assert_close(student.vocab_projector.weight, teacher.cls.predictions.decoder.weight)
    torch.testing.assert_close(
        student.distilbert.embeddings.word_embeddings.weight, teacher.bert.embeddings.word_embeddings.weight
    )


def test_distilbert_layer_choice_errors():
    teacher = tiny_teacher(BertModel)
    with pytest.raises(KdbertError, match="k = 6 student layers is larger than the teacher's depth 4"):
        students.init_distilbert_student(teacher, "hf-bert-base")
    with pytest.raises(KdbertError, match="index 4 \\(position 1\\) is out of range"):
        students.init_distilbert_student(teacher, [1, 4])
    with pytest.raises(KdbertError, match="unknown DistilBERT layer choice 'odd'"):
        students.init_distilbert_student(teacher, "odd")
