"""Classic KD recipe: loss assembly against losses.*, student construction, refusals, and a tiny
end-to-end `distill task --method kd` run."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import evaluate_saved, method_config, save_tiny_classifier, stage_terms, write_glue_task
from transformers import AutoModelForSequenceClassification, BertForSequenceClassification

from kdbert.cli import commands as cli
from kdbert.core import losses
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.glue import load_glue_dir
from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError
from kdbert.methods.finetune import TASK_DEFAULTS
from kdbert.methods import kd
from kdbert.core.method import DistillContext


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("kd")
    glue = root / "glue_data"
    for task in ("SST-2", "STS-B"):
        write_glue_task(glue, task, n_train=24, n_dev=8)
    teacher = save_tiny_classifier(root / "teacher", tiny_tokenizer, num_hidden_layers=4, seed=3)
    regression_teacher = save_tiny_classifier(root / "teacher-stsb", tiny_tokenizer, num_labels=1,
                                              num_hidden_layers=4, seed=4)
    return {"root": root, "glue": glue, "teacher": teacher, "regression_teacher": regression_teacher,
            "tokenizer": tiny_tokenizer}


def load_teacher(path, num_labels=2):
    return BertForSequenceClassification.from_pretrained(path, num_labels=num_labels).eval()


def plan_and_batch(env, options, task="sst2"):
    spec = GLUE_TASKS[task]
    teacher = load_teacher(env["regression_teacher" if spec.is_regression else "teacher"], spec.num_labels)
    config = method_config("kd", options, task)
    student = kd.METHOD.initial_student(teacher, spec, config)
    data = load_glue_dir(spec, env["glue"])
    train = encode_examples(env["tokenizer"], data.train, 32)
    plan = kd.METHOD.build_task_plan(DistillContext(teacher, student, env["tokenizer"], spec, train, config))
    student = student.model
    batch = PaddingCollator(env["tokenizer"].pad_token_id, spec.is_regression)([train[i] for i in range(6)])
    student.eval()
    return plan, batch, teacher, student


def run_loss(plan, batch):
    return stage_terms(plan, batch)


def logits(model, batch):
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 token_type_ids=batch["token_type_ids"]).logits


def test_kl_terms_equal_hand_assembly(env):
    plan, batch, teacher, student = plan_and_batch(env, {"student_layers": "2", "alpha": 0.3, "temperature": 3.0})
    terms = run_loss(plan, batch)
    assert set(terms) == {"soft", "hard"}
    s, t = logits(student, batch), logits(teacher, batch)
    torch.testing.assert_close(terms["soft"], 0.3 * losses.kl_div_loss(s, t, 3.0))
    torch.testing.assert_close(terms["hard"], 0.7 * F.cross_entropy(s, batch["labels"]))
    torch.testing.assert_close(sum(terms.values()), 0.3 * losses.kl_div_loss(s, t, 3.0)
                               + 0.7 * F.cross_entropy(s, batch["labels"]))
    # the teacher is frozen, the student gets gradients
    sum(terms.values()).backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert student.classifier.weight.grad is not None


def test_mse_and_regression_terms(env):
    plan, batch, teacher, student = plan_and_batch(env, {"student_layers": "2", "alpha": 0.4, "kd_loss": "mse"})
    terms = run_loss(plan, batch)
    s, t = logits(student, batch), logits(teacher, batch)
    torch.testing.assert_close(terms["soft"], 0.4 * losses.logit_mse(s, t))
    torch.testing.assert_close(terms["hard"], 0.6 * F.cross_entropy(s, batch["labels"]))

    plan, batch, teacher, student = plan_and_batch(env, {"student_layers": "0,2", "alpha": 0.25}, task="stsb")
    terms = run_loss(plan, batch)
    s, t = logits(student, batch), logits(teacher, batch)
    assert s.shape == (6, 1) and batch["labels"].dtype == torch.float32
    torch.testing.assert_close(terms["soft"], 0.25 * losses.logit_mse(s, t))
    torch.testing.assert_close(terms["hard"], 0.75 * losses.regression_mse(s, batch["labels"]))


def test_defaults_and_zero_weights(env):
    plan, batch, *_ = plan_and_batch(env, {})
    assert plan.report["loss"]["alpha"] == kd.KDConfig.alpha == 0.7
    assert plan.report["loss"]["temperature"] == kd.KDConfig.temperature == 20.0
    config = plan.stages[0].config
    assert (config.epochs, config.learning_rate, config.batch_size) == TASK_DEFAULTS["sst2"]
    assert plan.report["student_layers"] == 2  # half of the 4-layer teacher
    plan, batch, *_ = plan_and_batch(env, {"alpha": 0.0, "epochs": 1, "learning_rate": 1e-3})
    assert plan.frozen == {} and set(run_loss(plan, batch)) == {"hard"}
    assert (plan.stages[0].config.epochs, plan.stages[0].config.learning_rate) == (1, 1e-3)
    plan, batch, *_ = plan_and_batch(env, {"alpha": 1.0})
    assert set(run_loss(plan, batch)) == {"soft"}


def test_student_from_teacher_layers(env):
    spec = GLUE_TASKS["sst2"]
    teacher = load_teacher(env["teacher"])
    for option, layers in (("3", [0, 1, 2]), ("1,3", [1, 3])):
        student = kd.METHOD.initial_student(teacher, spec, method_config("kd", {"student_layers": option})).model
        assert student.config.num_hidden_layers == len(layers)
        for i, layer in enumerate(layers):
            torch.testing.assert_close(student.bert.encoder.layer[i].output.dense.weight,
                                       teacher.bert.encoder.layer[layer].output.dense.weight)
    # an HF folder (here a smaller BERT of the same vocabulary) is loaded as the student
    folder = save_tiny_classifier(env["root"] / "small", env["tokenizer"], num_hidden_layers=1, hidden_size=8,
                                  num_attention_heads=2, intermediate_size=8)
    student = kd.METHOD.initial_student(teacher, spec, method_config("kd", {"student": str(folder)})).model
    assert student.config.hidden_size == 8 and student.config.num_labels == 2
    # a preset: random init with the teacher's vocabulary
    student = kd.METHOD.initial_student(teacher, spec, method_config("kd", {"student": "tinybert4"})).model
    assert (student.config.hidden_size, student.config.num_hidden_layers) == (312, 4)
    assert student.config.vocab_size == teacher.config.vocab_size


@pytest.mark.parametrize("options, message", [
    ({"student_layers": "5"}, "1 <= K <= 4"),
    ({"student_layers": "0,4"}, "out of range"),
    ({"student_layers": "2,1"}, "strictly increasing"),
    ({"student_layers": "0,1,2,3,3"}, "only 4"),
    ({"student_layers": "a"}, "not an integer K"),
    ({"student_layers": "2", "student": "tinybert4"}, "not both"),
    ({"alpha": 1.5}, r"--alpha must be a number in \[0, 1\] \(got 1.5\)"),
    ({"alpha": float("nan")}, r"--alpha must be a number in \[0, 1\] \(got nan\)"),
    ({"temperature": 0}, "--temperature"),
    ({"kd_loss": "l1"}, "--kd-loss 'l1' is unknown"),
    ({"beta": 100.0}, "--beta is a pkd option"),
    ({"head_average": True}, "--head-average is a tinybert option"),
    ({"batch_size": 0}, r"--batch-size must be a positive integer \(got 0\)"),
    ({"epochs": 0}, r"--epochs must be a positive number of epochs"),
    ({"learning_rate": 3.0}, r"--learning-rate must be a learning rate in \(0, 1\] \(got 3.0\)"),
])
def test_bad_inputs_refused(env, options, message):
    with pytest.raises(KdbertError, match=message):
        kd.METHOD.initial_student(load_teacher(env["teacher"]), GLUE_TASKS["sst2"], method_config("kd", options))


def test_kd_loss_kl_refused_for_regression(env):
    with pytest.raises(KdbertError, match="regression"):
        kd.METHOD.initial_student(load_teacher(env["regression_teacher"], 1), GLUE_TASKS["stsb"],
                           method_config("kd", {"kd_loss": "kl"}, "stsb"))


def test_end_to_end_cli(env, tmp_path, capsys):
    out = tmp_path / "kd-out"
    code = cli.main(["distill", "task", "--recipe", "kd/default", "--task", "sst2", "--data-dir", str(env["glue"]),
                     "--teacher", str(env["teacher"]), "--student-layers", "2", "--output-dir", str(out),
                     "--max-steps", "3", "--batch-size", "8", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "PKD" not in captured.out
    report = json.loads((out / "distill_report.json").read_text())
    assert report["method"] == "kd" and report["loss"]["alpha"] == 0.7 and report["loss"]["temperature"] == 20
    assert report["loss"]["kd_reduction"] == "mean"  # the preset is the reference's, reduction included
    assert report["student_init"] == "teacher layers [0, 1]"
    assert {"soft", "hard"} <= set(report["stage_losses"]["kd"][-1])
    assert report["dev_metrics"] == evaluate_saved(out, "sst2", env["glue"])
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.num_hidden_layers == 2 and model.config.num_labels == 2
    assert not hasattr(model.config, "kdbert_init")
    # a bad input is one error line and exit status 2
    code = cli.main(["distill", "task", "--method", "kd", "--task", "sst2", "--data-dir", str(env["glue"]),
                     "--teacher", str(env["teacher"]), "--student-layers", "0,7", "--output-dir",
                     str(tmp_path / "bad"), "--no-progress"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("kdbert: error:")]
    assert code == 2 and len(errors) == 1 and "--student-layers 0,7" in errors[0]
    assert not (tmp_path / "bad").exists()  # refused before the output dir is marked


def test_python_api_takes_the_typed_config(env, tmp_path):
    """The Python API reads the same dataclass as the command line and YAML recipes."""
    from kdbert.data.load import TaskOptions
    from kdbert.methods.front import distill_task

    config = kd.KDConfig(teacher=str(env["teacher"]), student_layers="2", alpha=0.5, max_steps=2, batch_size=8,
                         no_progress=True)
    report = distill_task(TaskOptions("sst2", data_dir=str(env["glue"])), config, str(tmp_path / "out"))
    assert report["method"] == "kd" and report["loss"]["alpha"] == 0.5
    assert report["student_init"] == "teacher layers [0, 1]"
    assert report["matches"]["kd"] == ["soft: 0.5 * kl_div(logits, logits)", "hard: 0.5 * hard_label(logits, labels)"]
    with pytest.raises(KdbertError, match=r"--alpha must be a number in \[0, 1\] \(got 2\)"):
        distill_task(TaskOptions("sst2", data_dir=str(env["glue"])), kd.KDConfig(alpha=2), str(tmp_path / "bad"))


def test_word_embeddings_kept_as_they_start(env, tmp_path):
    """--freeze-word-embeddings: the student's word-embedding matrix (the teacher's, copied with its
    layers) is what it was after training; its position embeddings and layers moved."""
    from safetensors.torch import load_file

    from kdbert.data.load import TaskOptions
    from kdbert.methods.front import distill_task

    teacher = load_teacher(env["teacher"])
    runs = {}
    for frozen in (True, False):
        config = kd.KDConfig(teacher=str(env["teacher"]), student_layers="2", max_steps=3, batch_size=8,
                             learning_rate=1e-2, no_progress=True, freeze_word_embeddings=frozen)
        report = distill_task(TaskOptions("sst2", data_dir=str(env["glue"])), config, str(tmp_path / str(frozen)))
        runs[frozen] = load_file(tmp_path / str(frozen) / "model.safetensors")
        assert list(report["stages"][0]["frozen"]) == (["student.bert.embeddings.word_embeddings.weight"] if frozen else [])
    words = teacher.bert.embeddings.word_embeddings.weight
    assert torch.equal(runs[True]["bert.embeddings.word_embeddings.weight"], words)
    assert not torch.equal(runs[False]["bert.embeddings.word_embeddings.weight"], words)
    positions = teacher.bert.embeddings.position_embeddings.weight
    assert not torch.equal(runs[True]["bert.embeddings.position_embeddings.weight"], positions)
