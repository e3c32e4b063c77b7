"""MiniLM (MiniLMv2 relation distillation): the relation loss against the paper's formula on hand-made
tensors, the Q/K/V it reads, its choices of layer and relation heads, and a tiny `distill task` run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import save_tiny_classifier, write_glue_task
from transformers import AutoModelForSequenceClassification

from kdbert.cli import commands as cli
from kdbert.core.relation_losses import minilm_relation_loss, relation_kl
from kdbert.core.trace import trace
from kdbert.errors import KdbertError
from kdbert.methods.minilm import RelationLoss, captured_qkv, resolve_relation_heads, resolve_relation_layer


# ----------------------------------------------------------------------------- the formula, written out
def reference_relation_kl(student: np.ndarray, teacher: np.ndarray, mask: np.ndarray, heads: int) -> float:
    """KL(A_t || A_s) from the paper, one row at a time: A = softmax(X_r X_r^T / sqrt(d_r)) over real keys,
    averaged over relation heads and real query tokens."""
    total, count = 0.0, 0
    for b in range(mask.shape[0]):
        real = np.flatnonzero(mask[b])
        for r in range(heads):
            def relation(x):
                width = x.shape[-1] // heads
                part = x[b, real, r * width:(r + 1) * width].astype(np.float64)
                scores = part @ part.T / np.sqrt(width)
                scores = np.exp(scores - scores.max(axis=1, keepdims=True))
                return scores / scores.sum(axis=1, keepdims=True)

            a_s, a_t = relation(student), relation(teacher)
            for i in range(len(real)):
                total += float(np.sum(a_t[i] * (np.log(a_t[i]) - np.log(a_s[i]))))
                count += 1
    return total / count


def hand_made(width: int, seed: int, batch: int = 2, length: int = 4) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(batch, length, width, generator=generator) for name in ("query", "key", "value")}


MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])


def test_relation_kl_of_two_tokens_by_hand():
    # one head, width 1, two tokens: student x = (1, 0), teacher x = (1, 1).
    # student rows: softmax(1, 0) and softmax(0, 0); teacher rows: softmax(1, 1) twice (uniform).
    student, teacher = torch.tensor([[[1.0], [0.0]]]), torch.tensor([[[1.0], [1.0]]])
    e = np.e
    row1 = 0.5 * np.log(0.5 / (e / (1 + e))) + 0.5 * np.log(0.5 / (1 / (1 + e)))
    row2 = 0.0  # both uniform
    expected = (row1 + row2) / 2
    assert expected == pytest.approx(0.0600, abs=1e-4)
    assert relation_kl(student, teacher, torch.ones(1, 2), heads=1).item() == pytest.approx(expected, rel=1e-5)


def test_loss_equals_the_written_out_formula_summed_over_q_k_v():
    student, teacher = hand_made(8, seed=1), hand_made(8, seed=2)
    expected = sum(reference_relation_kl(student[n].numpy(), teacher[n].numpy(), MASK.numpy(), 2)
                   for n in ("query", "key", "value"))
    assert expected > 0.1
    assert minilm_relation_loss(student, teacher, MASK, heads=2).item() == pytest.approx(expected, rel=1e-5)


def test_zero_when_the_student_equals_the_teacher():
    teacher = hand_made(8, seed=3)
    same = {name: value.clone() for name, value in teacher.items()}
    assert minilm_relation_loss(same, teacher, MASK, heads=4).item() == pytest.approx(0.0, abs=1e-6)


def test_padding_rows_and_keys_do_not_count():
    student, teacher = hand_made(8, seed=4), hand_made(8, seed=5)
    loss = minilm_relation_loss(student, teacher, MASK, heads=2)
    for tensors in (student, teacher):
        for value in tensors.values():
            value[~MASK.bool()] = 100.0  # whatever sits at padded positions
    assert minilm_relation_loss(student, teacher, MASK, heads=2).item() == pytest.approx(loss.item(), rel=1e-6)
    # the second row alone, cut to its two real tokens, gives that row's share
    second_row = {n: v[1:, :2] for n, v in student.items()}, {n: v[1:, :2] for n, v in teacher.items()}
    expected = sum(reference_relation_kl(second_row[0][n].numpy(), second_row[1][n].numpy(), np.ones((1, 2)), 2)
                   for n in ("query", "key", "value"))
    assert minilm_relation_loss(*second_row, torch.ones(1, 2), heads=2).item() == pytest.approx(expected, rel=1e-5)


def test_different_widths_need_no_projection():
    student, teacher = hand_made(6, seed=6), hand_made(8, seed=7)
    for value in student.values():
        value.requires_grad_(True)
    loss = minilm_relation_loss(student, teacher, MASK, heads=2)
    expected = sum(reference_relation_kl(student[n].detach().numpy(), teacher[n].numpy(), MASK.numpy(), 2)
                   for n in ("query", "key", "value"))
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert all(v.grad is not None and v.grad[~MASK.bool()].abs().sum() == 0 for v in student.values())
    with pytest.raises(KdbertError, match="4 relation heads do not divide the width 6"):
        minilm_relation_loss(student, teacher, MASK, heads=4)


# ----------------------------------------------------------------------------- choices and Q/K/V
def test_teacher_layer_paper_rule_last_and_a_number():
    assert resolve_relation_layer("paper", 6) == 6 and resolve_relation_layer("paper", 12) == 12
    assert resolve_relation_layer("paper", 24) == 21  # BERT-large: the paper's 21st layer
    assert resolve_relation_layer("last", 24) == 24 and resolve_relation_layer("3", 6) == 3
    with pytest.raises(KdbertError, match="use paper, last or a layer number 1..6"):
        resolve_relation_layer("7", 6)


def test_relation_heads_default_and_checked():
    assert resolve_relation_heads(None, 384, 384) == 12
    assert resolve_relation_heads(None, 128, 384) == 8
    assert resolve_relation_heads(None, 6, 8) == 2
    assert resolve_relation_heads(4, 128, 384) == 4
    with pytest.raises(KdbertError, match="--relation-heads 12 must divide"):
        resolve_relation_heads(12, 128, 384)


def test_captured_qkv_are_the_layer_projections_of_its_input(tmp_path, tiny_tokenizer):
    model = AutoModelForSequenceClassification.from_pretrained(
        save_tiny_classifier(tmp_path / "m", tiny_tokenizer, num_hidden_layers=3)).eval()
    batch = {"input_ids": torch.tensor([[2, 5, 6, 7, 3]]), "attention_mask": torch.ones(1, 5, dtype=torch.long)}
    with torch.no_grad():
        qkv = captured_qkv(model, 2, batch, "student")
        hidden = trace(model, batch, with_attention=False).hidden_states[1]  # the input of layer 2
        attention = model.bert.encoder.layer[1].attention.self
        for name in ("query", "key", "value"):
            assert torch.allclose(qkv[name], getattr(attention, name)(hidden), atol=1e-6)


# ----------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("minilm")
    write_glue_task(root / "glue", "SST-2", n_train=24, n_dev=8)
    teacher = save_tiny_classifier(root / "teacher", tiny_tokenizer, hidden_size=32, num_hidden_layers=3,
                                   num_attention_heads=4, intermediate_size=64,
                                   initializer_range=0.1)  # relations far from uniform
    student = save_tiny_classifier(root / "student", tiny_tokenizer, seed=1, hidden_size=24, num_hidden_layers=1,
                                   num_attention_heads=2, intermediate_size=48)
    return {"root": root, "teacher": teacher, "student": student}


def relation_loss_on(student_dir, env, tokenizer, layer: int, heads: int) -> float:
    teacher = AutoModelForSequenceClassification.from_pretrained(env["teacher"]).eval()
    student = AutoModelForSequenceClassification.from_pretrained(student_dir).eval()
    batch = dict(tokenizer(["the cat sat on the mat", "a big dog ran fast in the park", "red car"],
                           padding=True, return_tensors="pt"))
    with torch.no_grad():
        return RelationLoss(layer, heads)({"student": student}, {"teacher": teacher}, batch)["relation"].item()


def test_distill_task_minilm_lowers_the_relation_loss(env, tmp_path, tiny_tokenizer, capsys):
    out = tmp_path / "out"
    args = ["distill", "task", "--method", "minilm", "--teacher", env["teacher"], "--student", env["student"],
            "--task", "sst2", "--data-dir", env["root"] / "glue", "--output-dir", out, "--batch-size", 8,
            "--relation-max-steps", 40, "--relation-lr", 3e-3, "--max-steps", 1, "--learning-rate", 1e-5,
            "--no-progress"]
    assert cli.main([str(a) for a in args]) == 0
    assert "relations of teacher layer 3 -> the student's last layer, 8 relation heads (widths 32 -> 24)" \
        in capsys.readouterr().out
    report = json.loads((out / "distill_report.json").read_text())
    assert report["relation"]["teacher_layer"] == 3 and report["relation"]["heads"] == 8
    relation = [record["relation"] for record in report["stage_losses"]["relation"]]
    assert len(relation) == 2 and relation[-1] < relation[0]
    assert set(report["stage_losses"]) == {"relation", "prediction"}
    before = relation_loss_on(env["student"], env, tiny_tokenizer, 3, 8)
    after = relation_loss_on(out, env, tiny_tokenizer, 3, 8)
    assert after < 0.6 * before


def test_distill_general_minilm_then_task(env, tmp_path, tiny_tokenizer):
    teacher = AutoModelForSequenceClassification.from_pretrained(env["teacher"]).bert
    teacher.save_pretrained(tmp_path / "bare")
    tiny_tokenizer.save_pretrained(tmp_path / "bare")
    AutoModelForSequenceClassification.from_pretrained(env["student"]).config.save_pretrained(tmp_path / "shape")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["the cat sat on the mat .", "a big dog ran fast in the park .",
                                 "the small child reads a red book ."] * 20) + "\n")
    general = tmp_path / "general"
    args = ["distill", "general", "--method", "minilm", "--teacher", tmp_path / "bare", "--student",
            tmp_path / "shape", "--corpus", corpus, "--output-dir", general, "--max-seq-len", 16, "--batch-size", 4,
            "--max-steps", 20, "--learning-rate", 3e-3, "--relation-layer", "2", "--no-progress"]
    assert cli.main([str(a) for a in args]) == 0
    report = json.loads((general / "general_report.json").read_text())
    assert (report["relation"]["teacher_layer"], report["relation"]["heads"]) == (2, 8)
    relation = [record["relation"] for record in report["stage_losses"]["general"]]
    assert len(relation) == 1 and relation[0] > 0
    assert json.loads((general / "config.json").read_text())["architectures"] == ["BertModel"]
    out = tmp_path / "task"
    args = ["distill", "task", "--method", "minilm", "--teacher", env["teacher"], "--student", general,
            "--task", "sst2", "--data-dir", env["root"] / "glue", "--output-dir", out, "--batch-size", 8,
            "--relation-max-steps", 2, "--max-steps", 2, "--no-progress"]
    assert cli.main([str(a) for a in args]) == 0
    student = AutoModelForSequenceClassification.from_pretrained(out)
    assert (student.config.hidden_size, student.config.num_hidden_layers) == (24, 1)
