"""BERT-PKD recipe: layer maps, loss assembly against losses.*, beta rescaling, refusals, and a tiny
end-to-end `distill task --method pkd` run."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import method_config, save_tiny_classifier, stage_terms, write_glue_task
from transformers import AutoModelForSequenceClassification, BertForSequenceClassification

from kdbert.cli import commands as cli
from kdbert.core import losses
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.glue import load_glue_dir
from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError
from kdbert.methods import pkd
from kdbert.core.method import DistillContext


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("pkd")
    glue = root / "glue_data"
    write_glue_task(glue, "SST-2", n_train=24, n_dev=8)
    teacher = save_tiny_classifier(root / "teacher", tiny_tokenizer, num_hidden_layers=6, seed=5)
    narrow = save_tiny_classifier(root / "narrow", tiny_tokenizer, num_hidden_layers=3, hidden_size=8,
                                  num_attention_heads=2, intermediate_size=8)
    return {"root": root, "glue": glue, "teacher": teacher, "narrow": narrow, "tokenizer": tiny_tokenizer}


SPEC = GLUE_TASKS["sst2"]


def load_teacher(env):
    return BertForSequenceClassification.from_pretrained(env["teacher"]).eval()


def plan_and_batch(env, options):
    teacher = load_teacher(env)
    config = method_config("pkd", options)
    student = pkd.METHOD.initial_student(teacher, SPEC, config)
    train = encode_examples(env["tokenizer"], load_glue_dir(SPEC, env["glue"]).train, 32)
    plan = pkd.METHOD.build_task_plan(DistillContext(teacher, student, env["tokenizer"], SPEC, train, config))
    student = student.model
    batch = PaddingCollator(env["tokenizer"].pad_token_id)([train[i] for i in range(6)])
    student.eval()
    return plan, batch, teacher, student


def outputs(model, batch):
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 token_type_ids=batch["token_type_ids"], output_hidden_states=True)


def cls(out, layers):
    return torch.stack([out.hidden_states[i][:, 0] for i in layers])


def test_default_student_is_first_half_of_teacher(env):
    teacher = load_teacher(env)
    student = pkd.METHOD.initial_student(teacher, SPEC, method_config("pkd")).model
    assert student.config.num_hidden_layers == 3 and student.config.hidden_size == 16
    for i in range(3):
        torch.testing.assert_close(student.bert.encoder.layer[i].attention.self.query.weight,
                                   teacher.bert.encoder.layer[i].attention.self.query.weight)


@pytest.mark.parametrize("options, pairs", [
    ({}, [[1, 2], [2, 4]]),                                            # PKD-Skip, 6 -> 3
    ({"layer_map": "last"}, [[1, 4], [2, 5]]),                          # PKD-Last
    ({"layer_map": "explicit", "teacher_layers": "3,5"}, [[1, 3], [2, 5]]),
    ({"teacher_layers": "1,6"}, [[1, 1], [2, 6]]),                       # a list alone means explicit
    ({"student_layers": "2"}, [[1, 3]]),                                 # skip 6 -> 2
    ({"student_layers": "4", "layer_map": "last"}, [[1, 3], [2, 4], [3, 5]]),
])
def test_layer_maps(env, options, pairs):
    plan, *_ = plan_and_batch(env, options)
    assert plan.report["layer_map"] == pairs


def test_terms_equal_hand_assembly_with_mapped_layers(env):
    options = {"alpha": 0.6, "temperature": 5.0, "beta": 100.0}
    plan, batch, teacher, student = plan_and_batch(env, options)
    terms = stage_terms(plan, batch)
    assert set(terms) == {"soft", "hard", "patience"}
    s, t = outputs(student, batch), outputs(teacher, batch)
    # --method pkd's default is the reference's nn.KLDivLoss(reduction="mean"): over batch x classes
    reference_kl = F.kl_div(F.log_softmax(s.logits / 5.0, -1), F.softmax(t.logits / 5.0, -1), reduction="mean")
    torch.testing.assert_close(terms["soft"], 0.6 * 25.0 * reference_kl)
    assert plan.report["loss"]["kd_reduction"] == "mean"
    torch.testing.assert_close(terms["hard"], 0.4 * F.cross_entropy(s.logits, batch["labels"]))
    expected = 100.0 * losses.patience_loss(cls(s, [1, 2]), cls(t, [2, 4]), "mean")
    torch.testing.assert_close(terms["patience"], expected)
    # the map matters: other teacher layers give another value
    assert not torch.allclose(expected, 100.0 * losses.patience_loss(cls(s, [1, 2]), cls(t, [4, 5]), "mean"))
    sum(terms.values()).backward()
    assert student.bert.encoder.layer[0].output.dense.weight.grad is not None


def test_reference_defaults_and_beta_rescaling(env):
    plan, batch, *_ = plan_and_batch(env, {})
    loss = plan.report["loss"]
    assert (loss["alpha"], loss["temperature"], loss["beta"], loss["patience_reduction"]) == (0.7, 10.0, 500.0, "mean")
    mean_terms = stage_terms(plan, batch)
    plan, batch, *_ = plan_and_batch(env, {"patience_reduction": "sum"})
    # sum = mean * d * n_layers, so the default beta is 500 / (16 * 2) and the loss is unchanged
    assert plan.report["loss"]["beta"] == pytest.approx(500 / 32)
    assert plan.report["loss"]["beta_mean_form"] == pytest.approx(500)
    sum_terms = stage_terms(plan, batch)
    torch.testing.assert_close(sum_terms["patience"], mean_terms["patience"])


@pytest.mark.parametrize("options, message", [
    ({"student_layers": "7"}, "1 <= K <= 6"),
    ({"student_layers": "0,6"}, "out of range"),
    ({"student_layers": "3,1"}, "strictly increasing"),
    ({"student_layers": "1"}, "at least 2 layers"),
    ({"student_layers": "4"}, "multiple of the student depth"),
    ({"layer_map": "uniform"}, "--layer-map 'uniform' is unknown; use one of skip, last, explicit"),
    ({"layer_map": "explicit"}, "needs --teacher-layers"),
    ({"layer_map": "explicit", "teacher_layers": "2,4,6"}, "give 2 teacher layers"),
    ({"layer_map": "explicit", "teacher_layers": "4,2"}, "strictly increasing"),
    ({"layer_map": "explicit", "teacher_layers": "0,2"}, "1-based"),
    ({"layer_map": "skip", "teacher_layers": "2,4"}, "needs --layer-map explicit"),
    ({"patience_reduction": "max"}, "--patience-reduction 'max' is unknown"),
    ({"beta": -1}, r"--beta must be a finite number >= 0 \(got -1\)"),
    ({"head_average": True}, "tinybert option"),
])
def test_bad_inputs_refused(env, options, message):
    with pytest.raises(KdbertError, match=message):
        pkd.METHOD.initial_student(load_teacher(env), SPEC, method_config("pkd", options))


def test_student_of_another_width_refused(env):
    with pytest.raises(KdbertError, match="teacher's hidden size 16.*has 8"):
        pkd.METHOD.initial_student(load_teacher(env), SPEC, method_config("pkd", {"student": str(env["narrow"])}))
    with pytest.raises(KdbertError, match="hidden size"):
        pkd.METHOD.initial_student(load_teacher(env), SPEC, method_config("pkd", {"student": "tinybert4"}))


def test_end_to_end_cli(env, tmp_path, capsys):
    out = tmp_path / "pkd-out"
    code = cli.main(["distill", "task", "--recipe", "pkd/last", "--task", "sst2", "--data-dir", str(env["glue"]),
                     "--teacher", str(env["teacher"]), "--student-layers", "3", "--output-dir", str(out),
                     "--max-steps", "3", "--batch-size", "8", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "PKD layer map (last, student 3 layers, teacher 6)" in captured.out
    report = json.loads((out / "distill_report.json").read_text())
    assert report["method"] == "pkd" and report["layer_map_method"] == "last"
    assert report["layer_map"] == [[1, 4], [2, 5]]
    assert {"soft", "hard", "patience"} <= set(report["stage_losses"]["pkd"][-1])
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.num_hidden_layers == 3
    code = cli.main(["distill", "task", "--method", "pkd", "--task", "sst2", "--data-dir", str(env["glue"]),
                     "--teacher", str(env["teacher"]), "--student", str(env["narrow"]), "--output-dir",
                     str(tmp_path / "bad"), "--no-progress"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kdbert: error:")]
    assert code == 2 and len(errors) == 1 and "hidden size" in errors[0]
