"""Weight selection (`--student-init teacher-weights`): which teacher entries a narrower,
shallower student receives, the identity case, and the refusals."""

from __future__ import annotations

import pytest
import torch
from conftest import initial_student, method_config, tiny_bert_config
from transformers import BertForSequenceClassification, BertModel

from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError
from kdbert.families import bert as students
from kdbert.families.selection import evenly_spaced
from kdbert.methods.front import distill_general
from kdbert.methods import kd
from kdbert.methods import tinybert


def _teacher(tokenizer):
    torch.manual_seed(0)
    # hidden 48 = 12 heads x 4 dims, FFN 64, 4 layers
    config = tiny_bert_config(tokenizer, hidden_size=48, num_attention_heads=12, intermediate_size=64,
                              num_hidden_layers=4)
    return BertForSequenceClassification(config).eval()


def _narrow_student(tokenizer, **kw):
    torch.manual_seed(1)
    values = dict(hidden_size=24, num_attention_heads=12, intermediate_size=32, num_hidden_layers=2)
    values.update(kw)
    return BertForSequenceClassification(tiny_bert_config(tokenizer, **values)).eval()


def test_evenly_spaced_indices():
    assert evenly_spaced(3, 12).tolist() == [0, 4, 8]
    assert evenly_spaced(4, 4).tolist() == [0, 1, 2, 3]
    picked = evenly_spaced(312, 384)
    assert len(set(picked.tolist())) == 312 and picked[0] == 0 and picked[-1] < 384
    assert bool((picked[1:] > picked[:-1]).all())


def test_a_pretrained_cut_keeps_its_first_and_last_layers_and_spreads_the_rest():
    from kdbert.families.selection import ends_and_between

    assert ends_and_between(3, 6) == [0, 2, 5]  # round(2.5) = 2
    assert ends_and_between(4, 6) == [0, 2, 3, 5]
    assert ends_and_between(2, 6) == [0, 5]
    assert ends_and_between(1, 6) == [5]
    assert ends_and_between(6, 6) == list(range(6))


def test_a_cut_of_the_bottom_layers_keeps_a_prefix_of_the_teacher(tiny_tokenizer):
    from kdbert.families.selection import first_layers

    assert first_layers(2, 6) == [0, 1] and first_layers(1, 6) == [0] and first_layers(6, 6) == list(range(6))
    teacher, student = _teacher(tiny_tokenizer), _narrow_student(tiny_tokenizer)
    picked = students.select_teacher_weights(student, teacher, layers=first_layers(2, 4))
    assert picked["teacher_layers"] == [1, 2]  # 1-based: the teacher's first two of four


def test_narrow_student_receives_hand_picked_teacher_entries(tiny_tokenizer):
    teacher, student = _teacher(tiny_tokenizer), _narrow_student(tiny_tokenizer)
    fresh_classifier = student.classifier.weight.clone()
    picked = students.select_teacher_weights(student, teacher)
    # 2 of 4 layers: g(m) = ceil(m * 4 / 2) -> teacher layers 2 and 4 (1-based)
    assert picked["teacher_layers"] == [2, 4]
    s, t = student.bert, teacher.bert
    # hidden units 0,2,4,...; per head dims 0 and 2 of 4; FFN units 0,2,4,...
    # attention row 1 = head 0 dim 2 -> teacher row 2; row 2 = head 1 dim 0 -> teacher row 4
    sq, tq = s.encoder.layer[0].attention.self.query, t.encoder.layer[1].attention.self.query
    assert sq.weight[1, 3] == tq.weight[2, 6] and sq.weight[2, 0] == tq.weight[4, 0]
    assert sq.bias[3] == tq.bias[6]  # row 3 = head 1 dim 2 -> 4 + 2
    so, to = s.encoder.layer[1].output.dense, t.encoder.layer[3].output.dense
    assert so.weight[5, 7] == to.weight[10, 14] and so.bias[5] == to.bias[10]
    sa, ta = s.encoder.layer[1].attention.output.dense, t.encoder.layer[3].attention.output.dense
    assert sa.weight[4, 3] == ta.weight[8, 6]
    assert s.encoder.layer[0].output.LayerNorm.weight[11] == t.encoder.layer[1].output.LayerNorm.weight[22]
    torch.testing.assert_close(s.embeddings.word_embeddings.weight[:, 5], t.embeddings.word_embeddings.weight[:, 10])
    assert s.pooler.dense.weight[2, 3] == t.pooler.dense.weight[4, 6]
    torch.testing.assert_close(student.classifier.weight, fresh_classifier)  # the classifier stays fresh


def test_same_shape_student_computes_the_teacher(tiny_tokenizer):
    teacher = _teacher(tiny_tokenizer)
    student = _narrow_student(tiny_tokenizer, hidden_size=48, intermediate_size=64, num_hidden_layers=4)
    students.select_teacher_weights(student, teacher)
    ids = torch.tensor([[2, 7, 8, 9, 3, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        ours = student.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        theirs = teacher.bert(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(ours, theirs)


def test_refusals(tiny_tokenizer):
    teacher = _teacher(tiny_tokenizer)
    with pytest.raises(KdbertError, match="hidden_size is 96 > the teacher's 48"):
        students.select_teacher_weights(_narrow_student(tiny_tokenizer, hidden_size=96), teacher)
    with pytest.raises(KdbertError, match="num_hidden_layers is 5 > the teacher's 4"):
        students.select_teacher_weights(_narrow_student(tiny_tokenizer, num_hidden_layers=5), teacher)
    with pytest.raises(KdbertError, match="--student-init 'copy' is unknown"):
        students.apply_student_init(_narrow_student(tiny_tokenizer), teacher, "copy")
    spec = GLUE_TASKS["rte"]
    for method in ("tinybert", "kd"):
        with pytest.raises(KdbertError, match="--student-init applies to a preset student"):
            initial_student(method, teacher, spec, {"student_layers": "2", "student_init": "teacher-weights"})
    with pytest.raises(KdbertError, match="hidden_size is 312 > the teacher.s 48"):
        initial_student("tinybert", teacher, spec, {"student": "tinybert4", "student_init": "teacher-weights"})
    with pytest.raises(KdbertError, match="--student-init is a tinybert/minilm option"):
        distill_general({"method": "distilbert", "student_init": "teacher-weights", "corpus": ["x"]}, "unused")


def test_general_student_from_teacher_weights(tiny_tokenizer, tmp_path):
    teacher = BertModel(tiny_bert_config(tiny_tokenizer, hidden_size=48, num_attention_heads=12,
                                         intermediate_size=64, num_hidden_layers=4))
    tiny_bert_config(tiny_tokenizer, hidden_size=24, num_attention_heads=12, intermediate_size=32,
                     num_hidden_layers=2).save_pretrained(tmp_path / "cfg")
    config = method_config("tinybert", {"student": str(tmp_path / "cfg"), "student_init": "teacher-weights",
                                        "seed": 0}, general=True)
    built = tinybert.METHOD.general_student(teacher, tiny_tokenizer, config)
    student = built.model
    assert built.origin.startswith("teacher-weights (layers 2,4")
    torch.testing.assert_close(student.embeddings.position_embeddings.weight,
                               teacher.embeddings.position_embeddings.weight[:, ::2])
    config = method_config("tinybert", {"student": str(tmp_path / "cfg"), "seed": 0}, general=True)
    assert tinybert.METHOD.general_student(teacher, tiny_tokenizer, config).origin == "random"


def test_tinybert4_from_the_real_teacher(teacher_path):
    teacher = BertForSequenceClassification.from_pretrained(teacher_path, num_labels=2).eval()
    spec = GLUE_TASKS["sst2"]
    for method in (tinybert.METHOD, kd.METHOD):
        config = method_config(method.name, {"student": "tinybert4", "student_init": "teacher-weights", "seed": 3})
        built = method.initial_student(teacher, spec, config)
        student = built.model
        assert student.config.hidden_size == 312 and student.config.num_hidden_layers == 4
        assert built.origin == "tinybert4, teacher-weights (layers 2,3,5,6, 312 of 384 units)"
        hidden = evenly_spaced(312, 384)
        torch.testing.assert_close(student.bert.embeddings.word_embeddings.weight,
                                   teacher.bert.embeddings.word_embeddings.weight[:, hidden])


def test_cpu_recipe_sets_weight_selection():
    from kdbert.cli import commands as cli

    argv = ["distill", "task", "--recipe", "tinybert/cpu", "--task", "sst2", "--teacher", "t", "--output-dir", "o"]
    args = cli.parse_command_line(argv)
    assert (args.method, args.student, args.student_init, args.max_train_examples, args.intermediate_epochs,
            args.epochs, args.learning_rate) == ("tinybert", "tinybert4", "teacher-weights", 4000, 2, 2, 1e-4)


@pytest.mark.parametrize("layer_map,copied", [("uniform", [1, 3]), ("ends", [0, 3])])
def test_a_candidates_layer_map_names_the_teacher_layers_it_copies(layer_map, copied, tiny_tokenizer):
    from dataclasses import replace

    from kdbert.families.hf import HFFamily
    from kdbert.families.registry import ShapeContext

    torch.manual_seed(0)  # 4 layers, wide enough for compress's candidates (>= 128 units)
    teacher = BertForSequenceClassification(tiny_bert_config(
        tiny_tokenizer, hidden_size=256, num_attention_heads=8, intermediate_size=512, num_hidden_layers=4)).eval()
    context = replace(ShapeContext(teacher.config, tiny_tokenizer, 2, False), layer_map=layer_map)
    candidate = next(c for c in HFFamily().candidates(context) if c.name == "bert-2x128")
    student = candidate.from_teacher(teacher, context)
    # 2 of 4 layers: uniform ceil(m * 4 / 2) -> 2, 4 (1-based); ends -> the first and the last
    expected = BertForSequenceClassification(student.config).eval()
    students.select_teacher_weights(expected, teacher, layers=copied)
    for mine, theirs in zip(student.bert.encoder.layer, expected.bert.encoder.layer):
        torch.testing.assert_close(mine.attention.self.query.weight, theirs.attention.self.query.weight, rtol=0, atol=0)
        torch.testing.assert_close(mine.output.dense.weight, theirs.output.dense.weight, rtol=0, atol=0)
    other = BertForSequenceClassification(student.config).eval()  # the other map's first layer differs
    students.select_teacher_weights(other, teacher, layers=[1, 3] if layer_map == "ends" else [0, 3])
    assert not torch.equal(student.bert.encoder.layer[0].output.dense.weight, other.bert.encoder.layer[0].output.dense.weight)
