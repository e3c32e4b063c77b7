"""MobileBERT strategies as data: the stage lists for a 3-layer student, validation, lr groups."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from kdbert.errors import KdbertError
from kdbert.knowledge_transfer import (
    TransferConfig,
    TransferWeights,
    auxiliary_stages,
    joint_stages,
    layer_pairs,
    lr_multipliers,
    plan,
    progressive_stages,
    require_mlm_head,
    stage_table,
)
from kdbert.models.mobilebert import build_mobilebert, feature_widths, mobilebert_config

PAIRS = [(1, 1), (2, 2), (3, 3)]
EMB = r"mobilebert\.embeddings\."


def layers(*indices):
    return r"mobilebert\.encoder\.layer\.(" + "|".join(str(i - 1) for i in indices) + r")\."


def summary(stages):
    """(name, steps, [(feature, s, t, loss, weight)], [(pattern, lr multiplier)]) per stage."""
    return [(s.name, s.steps, [(m.feature, m.student_layer, m.teacher_layer, m.loss, round(m.weight, 6))
                               for m in s.matches],
             [(g.pattern, g.lr_multiplier) for g in s.param_groups]) for s in stages]


def layer_terms(layer):
    return [("hidden", layer, layer, "feature_map_mse", round(100 / 3, 6)),
            ("hidden", layer, layer, "mean_transfer_loss", round(5000 / 3, 6)),
            ("hidden", layer, layer, "variance_transfer_loss", round(5 / 3, 6)),
            ("attention_scores", layer, layer, "attention_kl", round(1 / 3, 6))]


MLM = [("mlm_logits", None, None, "mlm_distillation_loss", 1.0)]
CONFIG = TransferConfig(layer_steps=10, pretrain_steps=100)


def test_progressive_official_lr_multipliers():
    assert summary(progressive_stages(PAIRS, CONFIG)) == [
        ("layer-1", 10, layer_terms(1), [(layers(1), 3.0), (EMB, 3.0)]),
        ("layer-2", 10, layer_terms(2), [(layers(2), 3.0), (EMB, 0.3), (layers(1), 0.3)]),
        ("layer-3", 10, layer_terms(3), [(layers(3), 3.0), (EMB, 0.3), (layers(1, 2), 0.3)]),
        ("pretrain-distill", 100, MLM, [(".*", 1.0)]),
    ]


def test_progressive_frozen_with_embeddings_from_teacher():
    config = TransferConfig(layer_steps=10, pretrain_steps=0, previous_layers="frozen", embeddings_from_teacher=True)
    assert summary(progressive_stages(PAIRS, config)) == [
        ("layer-1", 10, layer_terms(1), [(layers(1), 3.0)]),
        ("layer-2", 10, layer_terms(2), [(layers(2), 3.0)]),
        ("layer-3", 10, layer_terms(3), [(layers(3), 3.0)]),
    ]


def test_joint_and_auxiliary_take_the_same_total_steps():
    joint = summary(joint_stages(PAIRS, CONFIG))
    assert joint == [
        ("joint", 30, layer_terms(1) + layer_terms(2) + layer_terms(3), [(EMB, 1.0), (layers(1, 2, 3), 1.0)]),
        ("pretrain-distill", 100, MLM, [(".*", 1.0)]),
    ]
    assert summary(auxiliary_stages(PAIRS, CONFIG)) == [
        ("auxiliary", 130, MLM + layer_terms(1) + layer_terms(2) + layer_terms(3), [(".*", 1.0)]),
    ]
    assert sum(s.steps for s in progressive_stages(PAIRS, CONFIG)) == 130


def test_options_reach_the_matches():
    config = TransferConfig(head_average=True, projection=True, weights=TransferWeights(attention=3.0),
                            ground_truth_ratio=0.25, attention_reduction="masked-mean")
    stage, pretrain = progressive_stages([(1, 2)], config)
    feature_map, _, _, attention = stage.matches
    assert feature_map.projection and (feature_map.student_layer, feature_map.teacher_layer) == (1, 2)
    assert attention.weight == 3.0
    assert dict(attention.options) == {"head_average": True, "reduction": "masked-mean"}
    assert dict(pretrain.matches[0].options) == {"ground_truth_ratio": 0.25}


def test_lr_multipliers_select_parameters_by_name():
    student = build_mobilebert(mobilebert_config(
        "mobilebert", num_hidden_layers=3, hidden_size=16, intra_bottleneck_size=8, num_attention_heads=2,
        intermediate_size=16, embedding_size=8, vocab_size=30, max_position_embeddings=32), head="masked-lm")
    names = [n for n, _ in student.named_parameters()]
    stage = progressive_stages(PAIRS, CONFIG)[1]  # layer 2 at 3x, embeddings and layer 1 at 0.3x
    multipliers = lr_multipliers(names, stage)
    assert multipliers["mobilebert.encoder.layer.1.attention.self.query.weight"] == 3.0
    assert multipliers["mobilebert.encoder.layer.0.ffn.0.output.dense.bias"] == 0.3
    assert multipliers["mobilebert.embeddings.word_embeddings.weight"] == 0.3
    assert multipliers["mobilebert.encoder.layer.2.output.bottleneck.dense.weight"] == 0.0
    assert multipliers["cls.predictions.transform.dense.weight"] == 0.0
    assert set(multipliers.values()) == {0.0, 0.3, 3.0}


def test_stage_table():
    table = stage_table(progressive_stages(PAIRS[:2], TransferConfig(layer_steps=5, pretrain_steps=7)))
    assert table.splitlines() == [
        "stage             steps  terms        trains (lr x); rest frozen",
        "layer-1           5      layers 1<-1  layer 1 x3; embeddings x3",
        "layer-2           5      layers 2<-2  layer 2 x3; embeddings x0.3; layer 1 x0.3",
        "pretrain-distill  7      MLM          all x1",
    ]


# all-MiniLM-L6-v2's shape
TEACHER = feature_widths(BertConfig(num_hidden_layers=6, hidden_size=384, num_attention_heads=12,
                                    intermediate_size=1536))


def widths(preset="mobilebert-matched", **overrides):
    return feature_widths(mobilebert_config(preset, BertConfig(num_hidden_layers=6, hidden_size=384,
                                            num_attention_heads=12, intermediate_size=1536), **overrides))


def test_layer_pairs_uniform_and_explicit():
    assert layer_pairs(widths(), TEACHER, TransferConfig()) == [(i, i) for i in range(1, 7)]
    assert layer_pairs(widths(num_hidden_layers=3), TEACHER, TransferConfig()) == [(1, 2), (2, 4), (3, 6)]
    explicit = TransferConfig(teacher_layers=(1, 5, 6))
    assert layer_pairs(widths(num_hidden_layers=3), TEACHER, explicit) == [(1, 1), (2, 5), (3, 6)]


@pytest.mark.parametrize("student, config, message", [
    (dict(preset="mobilebert"), TransferConfig(), "student has 24 layers but the teacher has 6"),
    (dict(num_hidden_layers=4), TransferConfig(), "pass --teacher-layers with 4"),
    (dict(num_hidden_layers=3), TransferConfig(teacher_layers=(1, 2)), "lists 2 layers but the student has 3"),
    (dict(hidden_size=512), TransferConfig(), "512 wide but teacher layer 1 is 384.*--projection"),
    (dict(num_attention_heads=4), TransferConfig(), "pass --head-average"),
    (dict(num_attention_heads=8), TransferConfig(head_average=True), "do not split into 8 equal groups"),
])
def test_unmatchable_students_are_refused(student, config, message):
    preset = student.pop("preset", "mobilebert-matched")
    with pytest.raises(KdbertError, match=message):
        plan(widths(preset, **student), TEACHER, config)


def test_head_average_and_projection_make_it_possible():
    stages = plan(widths(num_attention_heads=4), TEACHER, TransferConfig(head_average=True))
    assert len(stages) == 7
    assert plan(widths(hidden_size=512), TEACHER, TransferConfig(projection=True, strategy="joint"))[0].matches[0].projection


def test_bad_options():
    with pytest.raises(KdbertError, match="--strategy 'greedy'"):
        TransferConfig(strategy="greedy")
    with pytest.raises(KdbertError, match="--previous-layers"):
        TransferConfig(previous_layers="soft")
    with pytest.raises(KdbertError, match="layer_steps >= 1"):
        TransferConfig(layer_steps=0)


def test_teacher_needs_an_mlm_head():
    encoder = BertConfig(architectures=["BertModel"])
    with pytest.raises(KdbertError, match="kdbert mlm-head --encoder default"):
        require_mlm_head(encoder, "default")
    require_mlm_head(BertConfig(architectures=["BertForMaskedLM"]), "x")
    require_mlm_head(BertForMaskedLM(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                                                num_attention_heads=2, intermediate_size=8)), "x")


def stage_loss(stage, student_trace, teacher_trace, mlm_labels):
    """The weighted sum of a stage's terms, calling each match as its docstring says."""
    from kdbert import losses

    total = 0.0
    for match in stage.matches:
        loss = getattr(losses, match.loss)
        if match.feature == "mlm_logits":
            args = (student_trace.logits, teacher_trace.logits, mlm_labels)
        elif match.feature == "hidden":
            args = (student_trace.hidden_states[match.student_layer], teacher_trace.hidden_states[match.teacher_layer],
                    student_trace.attention_mask)
        else:
            args = (student_trace.attention_scores[match.student_layer - 1],
                    teacher_trace.attention_scores[match.teacher_layer - 1], student_trace.attention_mask)
        value = loss(*args, **dict(match.options))
        assert torch.isfinite(value), match
        total = total + match.weight * value
    return total


def test_generated_matches_run_on_traces_of_a_student_and_its_teacher(tiny_tokenizer):
    from conftest import tiny_bert_config

    from kdbert.models.mobilebert import init_from_teacher
    from kdbert.models.trace import trace

    torch.manual_seed(0)
    teacher = BertForMaskedLM(tiny_bert_config(tiny_tokenizer)).eval()  # 2 layers, hidden 16, 4 heads
    student = build_mobilebert(mobilebert_config("mobilebert-matched", teacher.config), head="masked-lm")
    report = init_from_teacher(student, teacher)
    assert "mobilebert.embeddings.position_embeddings.weight" in report["copied"]
    stages = plan(feature_widths(student), feature_widths(teacher), TransferConfig(strategy="auxiliary"))
    batch = {"input_ids": torch.randint(5, len(tiny_tokenizer), (2, 6)),
             "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])}
    labels = torch.full((2, 6), -100)
    labels[0, 2], labels[1, 1] = 7, 9
    with torch.no_grad():
        teacher_trace = trace(teacher, batch)
    total = stage_loss(stages[0], trace(student, batch), teacher_trace, labels)
    total.backward()
    grads = {n: p.grad for n, p in student.named_parameters()}
    assert grads["mobilebert.encoder.layer.0.attention.self.query.weight"].abs().sum() > 0
    assert grads["cls.predictions.transform.dense.weight"].abs().sum() > 0


@pytest.mark.teacher
def test_matched_student_against_the_packaged_teacher(teacher_path):
    from transformers import AutoConfig, BertModel

    from kdbert.models.trace import trace

    teacher = BertModel.from_pretrained(teacher_path).eval()
    with pytest.raises(KdbertError, match="kdbert mlm-head"):
        require_mlm_head(AutoConfig.from_pretrained(teacher_path), teacher_path)
    student = build_mobilebert(mobilebert_config("mobilebert-matched", teacher.config))
    stages = plan(feature_widths(student), feature_widths(teacher), TransferConfig())
    assert [s.name for s in stages] == [f"layer-{i}" for i in range(1, 7)] + ["pretrain-distill"]
    batch = {"input_ids": torch.tensor([[101, 7592, 2088, 2003, 102, 0]]), "attention_mask": torch.tensor([[1] * 5 + [0]])}
    with torch.no_grad():
        teacher_trace = trace(teacher, batch)
    student_trace = trace(student, batch)
    assert student_trace.hidden_states[6].shape == teacher_trace.hidden_states[6].shape == (1, 6, 384)
    assert student_trace.attention_scores[5].shape == teacher_trace.attention_scores[5].shape == (1, 12, 6, 6)
    stage_loss(stages[5], student_trace, teacher_trace, None).backward()
    assert student.mobilebert.encoder.layer[5].attention.self.query.weight.grad.abs().sum() > 0


def test_width_bridge_says_direct_or_projection():
    from kdbert.knowledge_transfer import width_bridge

    assert width_bridge(widths(), TEACHER, [(1, 1)]) == (
        "direct transfer: student inter-block width 384 = the teacher's; the teacher (a bert) plays IB-BERT's role")
    assert width_bridge(widths(hidden_size=512), TEACHER, [(1, 1), (2, 2)]).startswith(
        "learned projection 512->384 on the feature maps (a deviation from the paper")
    ib = widths("ib-bert-matched")
    assert "(an IB-BERT)" in width_bridge(widths(hidden_size=512), ib, [(1, 1)])
