"""A pre-trained student with a tokenizer of its own under `distill task --method kd`: the teacher's
logits stored once per row with the teacher's tokenizer, the student reading its own tokens; what
cannot pair per row (question answering, intermediate-layer methods) refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import (count_teacher_runs, method_config, save_char_student, save_tiny_classifier, stage_terms,
                      write_glue_task)
from transformers import AutoTokenizer, BertForSequenceClassification

from kdbert.cli import commands as cli
from kdbert.core import losses
from kdbert.core.method import DistillContext, TaskSource
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.load import TaskOptions, load_task
from kdbert.methods import kd


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("own-tokenizer")
    write_glue_task(root / "glue", "SST-2", n_train=24, n_dev=8)
    teacher = save_tiny_classifier(root / "teacher", tiny_tokenizer, seed=3)
    return {"root": root, "glue": root / "glue", "teacher": teacher, "student": save_char_student(root / "student"),
            "tokenizer": tiny_tokenizer}


def distill(env, out, *extra) -> int:
    return cli.main([str(a) for a in ["distill", "task", "--task", "sst2", "--data-dir", env["glue"], "--teacher",
                                      env["teacher"], "--student", env["student"], "--output-dir", out,
                                      "--batch-size", 8, "--no-progress", *extra]])


def test_the_student_reads_its_own_tokens_beside_the_teachers_stored_logits_of_the_same_rows(env, tmp_path):
    task = TaskOptions("sst2", data_dir=str(env["glue"]))
    data = load_task(task)
    teacher = BertForSequenceClassification.from_pretrained(env["teacher"]).eval()
    config = method_config("kd", {"teacher": str(env["teacher"]), "student": str(env["student"]), "alpha": 0.5,
                                  "temperature": 2.0, "logits_cache": str(tmp_path / "logits")})
    inputs = kd.METHOD.task_inputs(TaskSource(teacher, env["tokenizer"], data, data.train, 64, task), config)
    rows = data.train[:6]
    batch = inputs.collator([inputs.train_set[i] for i in range(6)])
    # the teacher's logits on the same rows through its own tokenizer (another batch shape than the
    # stored rows': equal to float32 kernel noise)
    read = PaddingCollator(env["tokenizer"].pad_token_id)(encode_examples(env["tokenizer"], rows, 64).features)
    with torch.no_grad():
        expected = teacher(**{k: v for k, v in read.items() if k != "labels"}).logits
    torch.testing.assert_close(batch["teacher_logits"], expected, rtol=1e-5, atol=1e-6)
    # the student's ids are its own tokenizer's (characters), never the teacher's
    own = AutoTokenizer.from_pretrained(env["student"])
    mine = PaddingCollator(own.pad_token_id)(encode_examples(own, rows, 64).features)
    assert torch.equal(batch["student"]["input_ids"], mine["input_ids"]) and "teacher" not in batch
    assert batch["student"]["input_ids"].shape[1] > read["input_ids"].shape[1]
    assert inputs.report["teacher_logits"]["rows"] == 24 and inputs.saved_with_student is not env["tokenizer"]
    # the soft term is the student's output on its tokens against the teacher's stored logits
    plan = kd.METHOD.build_task_plan(DistillContext(inputs.teacher, inputs.student, env["tokenizer"], data.spec,
                                                    inputs.train_set, config))
    student = inputs.student.model.eval()
    terms = stage_terms(plan, batch)
    with torch.no_grad():
        s = student(**{k: v for k, v in mine.items() if k != "labels"}).logits
    torch.testing.assert_close(terms["soft"].detach(), 0.5 * losses.kl_div_loss(s, expected, 2.0), rtol=1e-5,
                               atol=1e-6)


def test_distill_kd_ships_the_student_with_its_tokenizer_labelling_each_row_once(env, tmp_path, capsys, monkeypatch):
    import kdbert

    unlabelled = tmp_path / "more.tsv"
    unlabelled.write_text("sentence\nthe cat sat on the mat\na dog ran very fast\n")
    seen = count_teacher_runs(monkeypatch)
    out = tmp_path / "kd"
    assert distill(env, out, "--method", "kd", "--max-steps", 3, "--unlabelled", unlabelled) == 0
    assert len(seen) == 24 + 2  # every training row and every unlabelled row, once
    report = json.loads((out / "distill_report.json").read_text())
    assert report["student_tokenizer"] == {"vocab_size": 58, "max_seq_len": 64, "rows_cut": 0}
    assert report["teacher_logits"]["rows"] == report["train_rows"] == 26
    assert report["matches"]["kd"] == ["soft: 0.7 * kl_div(logits, logits)", "hard: 0.3 * hard_label(logits, labels)"]
    assert AutoTokenizer.from_pretrained(out).get_vocab() == AutoTokenizer.from_pretrained(env["student"]).get_vocab()
    predicted = kdbert.load(str(out)).predict(["the cat sat", "a dog ran"])
    assert len(predicted) == 2 and {row["label"] for row in predicted} <= {"0", "1"}
    # another run reads the stored logits; the student cut where the teacher read whole says so
    capsys.readouterr()
    assert distill(env, tmp_path / "kd-16", "--method", "kd", "--max-steps", 1, "--max-seq-len", 16,
                   "--unlabelled", unlabelled) == 0
    assert len(seen) == 26 + 26  # the teacher's logits under another length limit are other logits
    own = AutoTokenizer.from_pretrained(env["student"])
    cut = sum(len(ids) > 16 for ids in own([row.texts[0] for row in load_task(
        TaskOptions("sst2", data_dir=str(env["glue"]))).train] + ["the cat sat on the mat", "a dog ran very fast"])[
        "input_ids"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("student tokenizer:")]
    assert lines == [f"student tokenizer: {cut} of 26 training rows are cut to the student's 16 tokens where the "
                     "teacher read them whole; raise --max-seq-len (the student takes up to 128 tokens)"]
    assert distill(env, tmp_path / "kd-again", "--method", "kd", "--max-steps", 1, "--seed", 7,
                   "--unlabelled", unlabelled) == 0
    assert len(seen) == 52  # stored once: a later run computes nothing


@pytest.mark.parametrize("method", ["tinybert", "pkd", "minilm", "distilbert", "mobilebert"])
def test_intermediate_layer_methods_refuse_a_student_of_another_tokenizer_naming_kd(env, tmp_path, capsys, method):
    assert distill(env, tmp_path / "out", "--method", method) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"kdbert: error: --method {method} needs a student of the teacher's tokenizer (it matches what "
                   f"they compute per token), but --student {env['student']} uses a different vocabulary (58 tokens, "
                   f"the teacher {len(env['tokenizer'])}); --method kd distils a student of its own tokenizer from the teacher's logits per "
                   "row")
    assert not (tmp_path / "out").exists()


def test_question_answering_and_the_teacher_cache_refuse_a_student_of_its_own_tokenizer(env, tmp_path, capsys):
    from transformers import BertForQuestionAnswering

    from conftest import tiny_bert_config

    context = "the cat sat on the mat"
    squad = tmp_path / "dev.json"
    squad.write_text(json.dumps({"version": "1.1", "data": [
        {"title": f"a{a}", "paragraphs": [{"context": context, "qas": [
            {"id": f"{a}", "question": "who sat", "answers": [{"text": "the cat", "answer_start": 0}]}]}]}
        for a in range(3)]}))
    torch.manual_seed(0)
    BertForQuestionAnswering(tiny_bert_config(env["tokenizer"])).save_pretrained(tmp_path / "qa-teacher")
    env["tokenizer"].save_pretrained(tmp_path / "qa-teacher")
    code = cli.main([str(a) for a in ["distill", "task", "--method", "kd", "--task", "squad", "--dev-file", squad,
                                      "--train-articles", 2, "--teacher", tmp_path / "qa-teacher", "--student",
                                      env["student"], "--output-dir", tmp_path / "qa", "--no-progress"]])
    assert (code, capsys.readouterr().err.strip()) == (2, (
        f"kdbert: error: --student {env['student']} has a tokenizer of its own: squad's soft targets are the "
        "teacher's logits per token of its tokenizer, which another tokenizer's tokens do not line up with; distil a "
        "student of the teacher's tokenizer"))
    assert distill(env, tmp_path / "cached", "--method", "kd", "--teacher-cache", tmp_path / "cache") == 2
    assert capsys.readouterr().err.strip() == (
        f"kdbert: error: --student {env['student']} has a tokenizer of its own: it never reads the teacher's tokens "
        "that --teacher-cache keeps outputs of; drop --teacher-cache (the teacher's logits are stored per row, "
        "--logits-cache DIR)")


# ----------------------------------------------------------------------------- the teacher's tokens, its export's labels
def test_a_student_of_the_teachers_tokens_reads_the_exports_labels_stored_once(env, tmp_path, capsys, monkeypatch):
    """``--teacher-onnx`` with a student of the teacher's tokens: the export labels each training row
    once into the store, the student's batch carries those logits and the teacher's own tokens, and
    the plan's teacher is the stored logits (the PyTorch teacher never runs beside the student)."""
    from kdbert.core.teacher_logits import StoredTeacherLogits, label_with_teacher
    from kdbert.deploy.export import export_model

    export_model(env["teacher"], tmp_path / "onnx", quantize="int8")
    graph = str(tmp_path / "onnx" / "model.int8.onnx")
    task = TaskOptions("sst2", data_dir=str(env["glue"]))
    data = load_task(task)
    teacher = BertForSequenceClassification.from_pretrained(env["teacher"]).eval()
    config = method_config("kd", {"teacher": str(env["teacher"]), "student_layers": "1", "teacher_onnx": graph,
                                  "logits_cache": str(tmp_path / "store")})
    inputs = kd.METHOD.task_inputs(TaskSource(teacher, env["tokenizer"], data, data.train, 64, task), config)
    assert isinstance(inputs.teacher, StoredTeacherLogits) and inputs.report["teacher_logits"]["onnx"] == graph
    rows = data.train[:6]
    batch = inputs.collator([inputs.train_set[i] for i in range(6)])
    read = PaddingCollator(env["tokenizer"].pad_token_id)(encode_examples(env["tokenizer"], rows, 64).features)
    assert torch.equal(batch["student"]["input_ids"], read["input_ids"])  # the teacher's tokens
    # the export's logits, labelled again into a fresh store in the same batches (dynamic int8 scales
    # depend on the batch, so only the same batches give the same numbers); not the PyTorch teacher's
    exported = label_with_teacher(teacher, env["tokenizer"], [row.texts for row in data.train], tmp_path / "again",
                                  64, onnx=graph)
    with torch.no_grad():
        pytorch = teacher(**{k: v for k, v in read.items() if k != "labels"}).logits
    torch.testing.assert_close(batch["teacher_logits"], torch.as_tensor(exported[:6]), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(batch["teacher_logits"], pytorch, rtol=0, atol=1e-6)
    # from the CLI: labelled once, a second run reads them back; beside --teacher-cache it is refused
    seen = count_teacher_runs(monkeypatch)
    for run in ("kd", "kd-again"):
        assert cli.main([str(a) for a in ["distill", "task", "--method", "kd", "--task", "sst2", "--data-dir",
                                          env["glue"], "--teacher", env["teacher"], "--student-layers", 1,
                                          "--teacher-onnx", graph, "--logits-cache", tmp_path / "cli-store",
                                          "--max-steps", 2, "--output-dir", tmp_path / run, "--no-progress"]]) == 0
    assert len(seen) == 24
    report = json.loads((tmp_path / "kd" / "distill_report.json").read_text())
    assert report["teacher_logits"]["onnx"] == graph and "student_tokenizer" not in report
    capsys.readouterr()
    assert cli.main([str(a) for a in ["distill", "task", "--method", "kd", "--task", "sst2", "--data-dir", env["glue"],
                                      "--teacher", env["teacher"], "--teacher-onnx", graph, "--teacher-cache",
                                      tmp_path / "cache", "--output-dir", tmp_path / "cached"]]) == 2
    assert capsys.readouterr().err.strip() == (
        f"kdbert: error: --teacher-onnx {graph} labels each training row once: the teacher never runs beside the "
        "student, so --teacher-cache keeps nothing; drop --teacher-cache")
    assert not (tmp_path / "cached").exists()


# ----------------------------------------------------------------------------- the sentence term
def test_cosine_distance_against_a_hand_computation():
    student = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    teacher = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    # cos = 1 and 1/sqrt(2): mean(1 - 1, 1 - 0.70710678) = 0.14644661
    assert losses.cosine_distance(student, teacher).item() == pytest.approx(0.14644661, abs=1e-7)


def test_similarity_relation_against_a_hand_computation():
    student = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    teacher = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2.0]])
    # student cosines: (1,2) 0, (1,3) and (2,3) 1/sqrt(2); teacher: (1,2) 1, (1,3) and (2,3) 0.
    # Each pair counted twice over six entries: (1 + 0.5 + 0.5) / 3 = 0.66666667
    assert losses.similarity_relation_mse(student, teacher).item() == pytest.approx(2 / 3, abs=1e-6)
    assert losses.similarity_relation_mse(student[:1], teacher[:1]).item() == 0.0


def test_the_sentence_term_reads_the_students_mean_through_a_projection_against_the_teachers_stored_mean(
        env, tmp_path):
    task = TaskOptions("sst2", data_dir=str(env["glue"]))
    data = load_task(task)
    teacher = BertForSequenceClassification.from_pretrained(env["teacher"]).eval()
    config = method_config("kd", {"teacher": str(env["teacher"]), "student": str(env["student"]), "alpha": 0.5,
                                  "temperature": 2.0, "sentence_weight": 2.0, "logits_cache": str(tmp_path / "s")})
    inputs = kd.METHOD.task_inputs(TaskSource(teacher, env["tokenizer"], data, data.train, 64, task), config)
    rows = data.train[:6]
    batch = inputs.collator([inputs.train_set[i] for i in range(6)])
    # the teacher's vector: the mean of its last layer over each row's real tokens (a padded batch
    # read here, rows of other lengths there: equal to float32 kernel noise)
    read = PaddingCollator(env["tokenizer"].pad_token_id)(encode_examples(env["tokenizer"], rows, 64).features)
    assert int(read["attention_mask"].sum(1).min()) < read["attention_mask"].shape[1]  # some rows padded
    with torch.no_grad():
        last = teacher(**{k: v for k, v in read.items() if k != "labels"}, output_hidden_states=True).hidden_states[-1]
    mask = read["attention_mask"].unsqueeze(-1).float()
    expected = (last * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(batch["teacher_sentence"], expected, rtol=1e-5, atol=1e-6)
    assert inputs.report["teacher_sentences"]["rows"] == 24
    plan = kd.METHOD.build_task_plan(DistillContext(inputs.teacher, inputs.student, env["tokenizer"], data.spec,
                                                    inputs.train_set, config))
    terms = stage_terms(plan, batch)
    projection = plan.modules["projections"]["sentence"]
    assert tuple(projection.weight.shape) == (teacher.config.hidden_size, 8)  # student width 8 -> teacher's
    student = inputs.student.model.eval()
    with torch.no_grad():
        states = student(**batch["student"], output_hidden_states=True).hidden_states[-1]
        own = batch["student"]["attention_mask"].unsqueeze(-1).float()
        projected = projection((states * own).sum(1) / own.sum(1))
    cos = torch.nn.functional.cosine_similarity(projected, expected, dim=-1)
    torch.testing.assert_close(terms["sentence"].detach(), 2.0 * (1 - cos).mean(), rtol=1e-5, atol=1e-6)
    assert plan.report["loss"]["sentence_weight"] == 2.0
    # without the weight there is no term and no vector is stored in the batch
    off = method_config("kd", {"teacher": str(env["teacher"]), "student": str(env["student"]),
                               "logits_cache": str(tmp_path / "s")})
    plain = kd.METHOD.task_inputs(TaskSource(teacher, env["tokenizer"], data, data.train, 64, task), off)
    assert "teacher_sentence" not in plain.collator([plain.train_set[0]])
    assert kd.sentence_matches(off) == []
    # the relation: each pair of rows' cosine against the teacher's, with no projection to learn
    config.sentence_loss = "relation"
    plan = kd.METHOD.build_task_plan(DistillContext(inputs.teacher, inputs.student, env["tokenizer"], data.spec,
                                                    inputs.train_set, config))
    terms = stage_terms(plan, batch)
    assert "projections" not in plan.modules
    unprojected = (states * own).sum(1) / own.sum(1)
    torch.testing.assert_close(terms["sentence"].detach(),
                               2.0 * losses.similarity_relation_mse(unprojected, expected), rtol=1e-5, atol=1e-6)


def test_distill_kd_with_the_sentence_term_labels_each_row_once_and_ships_no_projection(env, tmp_path, monkeypatch):
    seen = count_teacher_runs(monkeypatch)
    out = tmp_path / "kd"
    assert distill(env, out, "--method", "kd", "--max-steps", 2, "--sentence-weight", 1, "--logits-cache",
                   tmp_path / "cache") == 0
    assert len(seen) == 24 + 24  # logits and vectors, once each
    report = json.loads((out / "distill_report.json").read_text())
    assert "sentence: 1 * cosine_distance(mean[-1] via sentence, mean[-1])" in report["matches"]["kd"]
    assert report["teacher_sentences"]["rows"] == 24
    assert distill(env, tmp_path / "again", "--method", "kd", "--max-steps", 1, "--sentence-weight", 1,
                   "--logits-cache", tmp_path / "cache") == 0
    assert len(seen) == 48  # both stored


def test_the_teachers_export_labels_logits_only(tmp_path, tiny_tokenizer):
    from kdbert.core.teacher_logits import Labeller
    from kdbert.errors import KdbertError

    with pytest.raises(KdbertError, match="gives its logits only; its sentence vectors are labelled by the PyTorch"):
        Labeller(None, tiny_tokenizer, 64, onnx=str(tmp_path / "model.int8.onnx"), output="sentence")
