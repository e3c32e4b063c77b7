"""MobileBERT strategies as data: the stage lists for a 3-layer student, validation, lr groups."""

import fnmatch

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from kdbert.data.batching import EncodedDataset
from kdbert.errors import KdbertError
from kdbert.methods.mobilebert_transfer import (
    auxiliary_stages,
    joint_stages,
    resolve_transfer,
    plan,
    progressive_stages,
    require_mlm_head,
    stage_table,
)
from kdbert.core.matching import MatchLoss
from kdbert.families.mobilebert import build_mobilebert, feature_widths, mobilebert_config
from kdbert.methods.mobilebert import MobileBertGeneralConfig
from kdbert.core.stages import Stage, StageConfig

PAIRS = [(1, 1), (2, 2), (3, 3)]
EMB = "student.mobilebert.embeddings.*"


def make_stage(name, matches, train, steps, schedule):
    return Stage(StageConfig(name, max_steps=steps, schedule=schedule, train=train), MatchLoss(matches),
                 EncodedDataset([]))


def settings(**values):
    return MobileBertGeneralConfig(**values)


def layers(*indices):
    return [f"student.mobilebert.encoder.layer.{i - 1}.*" for i in indices]


def summary(stages):
    """(name, steps, schedule, [(term, feature, s, t, loss, weight)], [(pattern, lr scale)]) per stage."""
    return [(s.config.name, s.config.max_steps, s.config.schedule,
             [(m.term, m.feature, m.student_layer, m.teacher_layer, m.loss, round(m.weight, 6))
              for m in s.loss_fn.matches],
             [(g.pattern, g.lr_scale) for g in s.config.train]) for s in stages]


def layer_terms(layer):
    return [("feature_map", "hidden", layer, layer, "feature_map_mse", round(100 / 3, 6)),
            ("mean", "hidden", layer, layer, "mean_transfer", round(5000 / 3, 6)),
            ("variance", "hidden", layer, layer, "variance_transfer", round(5 / 3, 6)),
            ("attention", "attention_scores", layer, layer, "attention_kl", round(1 / 3, 6))]


def groups(patterns, scale):
    return [(p, scale) for p in patterns]


MLM = [("mlm", "mlm_logits", None, None, "mlm_distillation", 1.0)]
CONFIG = settings(layer_steps=10, pretrain_steps=100)
PRETRAIN = ("pretrain-distill", 100, "linear", MLM, [("student.*", 1.0)])


def test_progressive_official_lr_multipliers():
    assert summary(progressive_stages(PAIRS, CONFIG, make_stage)) == [
        ("layer-1", 10, "constant_warmup", layer_terms(1), groups(layers(1), 3.0) + [(EMB, 3.0)]),
        ("layer-2", 10, "constant_warmup", layer_terms(2),
         groups(layers(2), 3.0) + [(EMB, 0.3)] + groups(layers(1), 0.3)),
        ("layer-3", 10, "constant_warmup", layer_terms(3),
         groups(layers(3), 3.0) + [(EMB, 0.3)] + groups(layers(1, 2), 0.3)),
        PRETRAIN,
    ]


def test_progressive_frozen_with_embeddings_from_teacher():
    config = settings(layer_steps=10, pretrain_steps=0, previous_layers="frozen")
    assert summary(progressive_stages(PAIRS, config, make_stage, embeddings_from_teacher=True)) == [
        ("layer-1", 10, "constant_warmup", layer_terms(1), groups(layers(1), 3.0)),
        ("layer-2", 10, "constant_warmup", layer_terms(2), groups(layers(2), 3.0)),
        ("layer-3", 10, "constant_warmup", layer_terms(3), groups(layers(3), 3.0)),
    ]


def test_joint_and_auxiliary_take_the_same_total_steps():
    assert summary(joint_stages(PAIRS, CONFIG, make_stage)) == [
        ("joint", 30, "constant_warmup", layer_terms(1) + layer_terms(2) + layer_terms(3),
         [(EMB, 1.0)] + groups(layers(1, 2, 3), 1.0)),
        PRETRAIN,
    ]
    assert summary(auxiliary_stages(PAIRS, CONFIG, make_stage)) == [
        ("auxiliary", 130, "linear", MLM + layer_terms(1) + layer_terms(2) + layer_terms(3), [("student.*", 1.0)]),
    ]
    assert sum(s.config.max_steps for s in progressive_stages(PAIRS, CONFIG, make_stage)) == 130


def test_options_reach_the_matches():
    config = settings(head_average=True, projection=True, attention_weight=3.0, mean_weight=0.0,
                      ground_truth_ratio=0.25, attention_reduction="masked-mean")
    stage, pretrain = progressive_stages([(1, 2)], config, make_stage)
    feature_map, variance, attention = stage.loss_fn.matches  # a zero weight drops the mean term
    assert feature_map.projection == "linear" and (feature_map.student_layer, feature_map.teacher_layer) == (1, 2)
    assert variance.loss == "variance_transfer" and attention.weight == 3.0
    assert attention.options == {"head_average": True, "reduction": "masked-mean"}
    assert pretrain.loss_fn.matches[0].options == {"ground_truth_ratio": 0.25}
    assert ("projections.layer_1.*", 1.0) in [(g.pattern, g.lr_scale) for g in stage.config.train]


def test_layer_globs_select_parameters_by_name():
    student = build_mobilebert(mobilebert_config(
        "mobilebert", num_hidden_layers=12, hidden_size=16, intra_bottleneck_size=8, num_attention_heads=2,
        intermediate_size=16, embedding_size=8, vocab_size=30, max_position_embeddings=32), head="masked-lm")
    names = ["student." + n for n, _ in student.named_parameters()]
    stage = progressive_stages([(i, i) for i in range(1, 13)], CONFIG, make_stage)[1]  # layer 2 at 3x

    def scale(name):  # the trainer's rule: the first matching pattern decides
        return next((g.lr_scale for g in stage.config.train if fnmatch.fnmatchcase(name, g.pattern)), 0.0)

    assert scale("student.mobilebert.encoder.layer.1.attention.self.query.weight") == 3.0
    assert scale("student.mobilebert.encoder.layer.0.ffn.0.output.dense.bias") == 0.3
    assert scale("student.mobilebert.embeddings.word_embeddings.weight") == 0.3
    assert scale("student.mobilebert.encoder.layer.10.attention.self.query.weight") == 0.0  # not layer 1
    assert scale("student.mobilebert.encoder.layer.2.output.bottleneck.dense.weight") == 0.0
    assert scale("student.cls.predictions.transform.dense.weight") == 0.0
    assert {scale(n) for n in names} == {0.0, 0.3, 3.0}


def test_stage_table():
    table = stage_table(progressive_stages(PAIRS[:2], settings(layer_steps=5, pretrain_steps=7), make_stage))
    assert table.splitlines() == [
        "stage             steps  terms        trains (lr x); rest frozen                 schedule",
        "layer-1           5      layers 1<-1  layer 1 x3; embeddings x3                  constant_warmup",
        "layer-2           5      layers 2<-2  layer 2 x3; embeddings x0.3; layer 1 x0.3  constant_warmup",
        "pretrain-distill  7      MLM          all x1                                     linear",
    ]


# all-MiniLM-L6-v2's shape
TEACHER = feature_widths(BertConfig(num_hidden_layers=6, hidden_size=384, num_attention_heads=12,
                                    intermediate_size=1536))


def widths(preset="mobilebert-matched", **overrides):
    return feature_widths(mobilebert_config(preset, BertConfig(num_hidden_layers=6, hidden_size=384,
                                            num_attention_heads=12, intermediate_size=1536), **overrides))


def layer_pairs(student, teacher, config):
    return resolve_transfer(student, teacher, config).layer_pairs


def test_layer_pairs_uniform_and_explicit():
    assert layer_pairs(widths(), TEACHER, settings()) == [(i, i) for i in range(1, 7)]
    assert layer_pairs(widths(num_hidden_layers=3), TEACHER, settings()) == [(1, 2), (2, 4), (3, 6)]
    assert "MobileBERT layer map (uniform, student 3 layers, teacher 6)" in resolve_transfer(
        widths(num_hidden_layers=3), TEACHER, settings()).describe()
    explicit = settings(teacher_layers="1,5,6")
    assert layer_pairs(widths(num_hidden_layers=3), TEACHER, explicit) == [(1, 1), (2, 5), (3, 6)]


@pytest.mark.parametrize("student, config, message", [
    (dict(preset="mobilebert"), settings(), "student has 24 layers but the teacher has 6"),
    (dict(num_hidden_layers=4), settings(), "pass --teacher-layers with 4"),
    (dict(num_hidden_layers=3), settings(teacher_layers="1,2"), "lists 2 layers but the student has 3"),
    (dict(hidden_size=512), settings(), "512 wide but teacher layer 1 is 384.*--projection"),
    (dict(num_attention_heads=4), settings(), "pass --head-average"),
    (dict(num_attention_heads=8), settings(head_average=True), "do not split into 8 equal groups"),
])
def test_unmatchable_students_are_refused(student, config, message):
    preset = student.pop("preset", "mobilebert-matched")
    with pytest.raises(KdbertError, match=message):
        plan(widths(preset, **student), TEACHER, config, make_stage)


def test_head_average_and_projection_make_it_possible():
    stages = plan(widths(num_attention_heads=4), TEACHER, settings(head_average=True), make_stage)
    assert len(stages) == 7
    joint = plan(widths(hidden_size=512), TEACHER, settings(projection=True, strategy="joint"), make_stage)[0]
    assert joint.loss_fn.matches[0].projection == "linear"


@pytest.mark.parametrize("values, message", [
    ({"strategy": "greedy"}, "--strategy 'greedy' is unknown; use one of progressive, joint, auxiliary"),
    ({"previous_layers": "soft"}, "--previous-layers 'soft' is unknown; use one of official, frozen"),
    ({"layer_steps": 0}, "--layer-steps must be a positive integer"),
    ({"ground_truth_ratio": 1.5}, "--ground-truth-ratio must be"),
])
def test_bad_options(values, message):
    from kdbert.methods.registry import method_config

    with pytest.raises(KdbertError, match=message):
        method_config("mobilebert", values, general=True)


def test_teacher_needs_an_mlm_head():
    encoder = BertConfig(architectures=["BertModel"])
    with pytest.raises(KdbertError, match="kdbert mlm-head --encoder default"):
        require_mlm_head(encoder, "default")
    require_mlm_head(BertConfig(architectures=["BertForMaskedLM"]), "x")
    require_mlm_head(BertForMaskedLM(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1,
                                                num_attention_heads=2, intermediate_size=8)), "x")


def stage_loss(stage, student, teacher, batch):
    """The sum of a stage's weighted terms, each finite, as the trainer computes it."""
    from torch import nn

    terms = stage.loss_fn(nn.ModuleDict({"student": student}), {"teacher": teacher}, batch)
    assert all(torch.isfinite(v) for v in terms.values()), terms
    return sum(terms.values())


def test_generated_matches_run_on_traces_of_a_student_and_its_teacher(tiny_tokenizer):
    from conftest import tiny_bert_config

    from kdbert.families.mobilebert import init_from_teacher

    torch.manual_seed(0)
    teacher = BertForMaskedLM(tiny_bert_config(tiny_tokenizer)).eval()  # 2 layers, hidden 16, 4 heads
    student = build_mobilebert(mobilebert_config("mobilebert-matched", teacher.config), head="masked-lm")
    report = init_from_teacher(student, teacher)
    assert "mobilebert.embeddings.position_embeddings.weight" in report["copied"]
    stages = plan(feature_widths(student), feature_widths(teacher), settings(strategy="auxiliary"), make_stage)
    labels = torch.full((2, 6), -100)
    labels[0, 2], labels[1, 1] = 7, 9
    batch = {"input_ids": torch.randint(5, len(tiny_tokenizer), (2, 6)),
             "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]), "labels": labels}
    stage_loss(stages[0], student, teacher, batch).backward()
    grads = {n: p.grad for n, p in student.named_parameters()}
    assert grads["mobilebert.encoder.layer.0.attention.self.query.weight"].abs().sum() > 0
    assert grads["cls.predictions.transform.dense.weight"].abs().sum() > 0


@pytest.mark.teacher
def test_matched_student_against_the_packaged_teacher(teacher_path):
    from transformers import AutoConfig, BertModel

    from kdbert.core.trace import trace

    teacher = BertModel.from_pretrained(teacher_path).eval()
    with pytest.raises(KdbertError, match="kdbert mlm-head"):
        require_mlm_head(AutoConfig.from_pretrained(teacher_path), teacher_path)
    student = build_mobilebert(mobilebert_config("mobilebert-matched", teacher.config))
    stages = plan(feature_widths(student), feature_widths(teacher), settings(), make_stage)
    assert [s.config.name for s in stages] == [f"layer-{i}" for i in range(1, 7)] + ["pretrain-distill"]
    batch = {"input_ids": torch.tensor([[101, 7592, 2088, 2003, 102, 0]]), "attention_mask": torch.tensor([[1] * 5 + [0]])}
    with torch.no_grad():
        teacher_trace = trace(teacher, batch)
    student_trace = trace(student, batch)
    assert student_trace.hidden_states[6].shape == teacher_trace.hidden_states[6].shape == (1, 6, 384)
    assert student_trace.attention_scores[5].shape == teacher_trace.attention_scores[5].shape == (1, 12, 6, 6)
    stage_loss(stages[5], student, teacher, batch).backward()
    assert student.mobilebert.encoder.layer[5].attention.self.query.weight.grad.abs().sum() > 0


def test_width_bridge_says_direct_or_projection():
    from kdbert.methods.mobilebert_transfer import width_bridge

    assert width_bridge(widths(), TEACHER, [(1, 1)]) == (
        "direct transfer: student inter-block width 384 = the teacher's; the teacher (a bert) plays IB-BERT's role")
    assert width_bridge(widths(hidden_size=512), TEACHER, [(1, 1), (2, 2)]).startswith(
        "learned projection 512->384 on the feature maps (a deviation from the paper")
    ib = widths("ib-bert-matched")
    assert "(an IB-BERT)" in width_bridge(widths(hidden_size=512), ib, [(1, 1)])
