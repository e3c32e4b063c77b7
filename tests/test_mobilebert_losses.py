"""MobileBERT transfer losses, each pinned to a value computed by hand in the comments."""

import math

import pytest
import torch

from kdbert.errors import KdbertError
from kdbert.core.transfer_losses import (
    attention_kl,
    average_head_groups,
    feature_map_mse,
    mean_transfer_loss,
    mlm_distillation_loss,
    variance_transfer_loss,
)

LN3 = math.log(3.0)


def test_feature_map_mse_compares_normalised_shapes():
    # Parameter-free LayerNorm maps any [a, b] with a < b to [-1, 1] and a > b to [1, -1].
    # token 1: teacher [1, 3] -> [-1, 1], student [2, 0] -> [1, -1]: squared errors 4, 4
    # token 2: teacher [0, 2] -> [-1, 1], student [5, 7] -> [-1, 1]: 0, 0 (scale and shift ignored)
    teacher = torch.tensor([[[1.0, 3.0], [0.0, 2.0]]])
    student = torch.tensor([[[2.0, 0.0], [5.0, 7.0]]], requires_grad=True)
    loss = feature_map_mse(student, teacher)
    assert loss.item() == pytest.approx(8 / 4)  # mean over B*L*d = 4 entries
    masked = feature_map_mse(student, teacher, torch.tensor([[1, 0]]), reduction="masked-mean")
    assert masked.item() == pytest.approx(8 / 2)  # token 1 only
    loss.backward()
    assert student.grad is not None


def test_feature_map_mse_projection_and_width_error():
    teacher = torch.tensor([[[1.0, 3.0]]])
    with pytest.raises(KdbertError, match="projection"):
        feature_map_mse(torch.ones(1, 1, 3), teacher)
    projection = torch.nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        projection.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]))
    # projected student [4, 9] -> [-1, 1] equals the teacher's normalised [-1, 1]
    assert feature_map_mse(torch.tensor([[[4.0, 0.0, 9.0]]]), teacher, projection=projection).item() == pytest.approx(0.0)


def test_mean_and_variance_transfer():
    # token 1: student [1, 3] mean 2 var 1; teacher [0, 4] mean 2 var 4 -> mean term 0, var term |1-4| = 3
    # token 2: student [2, 2] mean 2 var 0; teacher [5, 5] mean 5 var 0 -> mean term 9, var term 0
    student = torch.tensor([[[1.0, 3.0], [2.0, 2.0]]])
    teacher = torch.tensor([[[0.0, 4.0], [5.0, 5.0]]])
    assert mean_transfer_loss(student, teacher).item() == pytest.approx(4.5)
    assert variance_transfer_loss(student, teacher).item() == pytest.approx(1.5)
    mask = torch.tensor([[1, 0]])
    assert mean_transfer_loss(student, teacher, mask, "masked-mean").item() == pytest.approx(0.0)
    assert variance_transfer_loss(student, teacher, mask, "masked-mean").item() == pytest.approx(3.0)


def test_mean_and_variance_allow_different_widths_but_not_different_tokens():
    # student [1, 3] (mean 2, var 1) vs teacher [2, 2, 2, 2] (mean 2, var 0): 0 and 1
    student, teacher = torch.tensor([[[1.0, 3.0]]]), torch.full((1, 1, 4), 2.0)
    assert mean_transfer_loss(student, teacher).item() == pytest.approx(0.0)
    assert variance_transfer_loss(student, teacher).item() == pytest.approx(1.0)
    with pytest.raises(KdbertError, match="same batch"):
        mean_transfer_loss(torch.ones(1, 2, 2), teacher)


def attention_example():
    """One head, 3 tokens, the third a pad (its scores are arbitrary and must not matter)."""
    teacher = torch.tensor([[[[0.0, 0.0, 9.0], [LN3, 0.0, 7.0], [0.0, 0.0, 1.0]]]])
    student = torch.tensor([[[[0.0, LN3, -2.0], [LN3, 0.0, 4.0], [LN3, 0.0, 0.0]]]])
    return student, teacher, torch.tensor([[1, 1, 0]])


def test_attention_kl_by_hand():
    student, teacher, mask = attention_example()
    # over the 2 valid keys:
    # row 1: teacher [.5, .5], student [.25, .75]: .5 ln(.5/.25) + .5 ln(.5/.75) = .5 ln(4/3)
    # row 2: teacher [.75, .25] = student: 0
    # row 3 (padded query): teacher [.5, .5], student [.75, .25]: .5 ln(4/3)
    half = 0.5 * math.log(4 / 3)
    assert attention_kl(student, teacher, mask).item() == pytest.approx(2 * half / 3)
    assert attention_kl(student, teacher, mask, reduction="masked-mean").item() == pytest.approx(half / 2)


def test_attention_kl_is_float32_under_bf16_autocast():
    # A student's scores within 0.05 of its teacher's (inputs exact in bf16): the KL per row is
    # ~5e-4, below bf16's rounding of a log-probability (~0.004 near -2): in bf16 it read -7.6e-5.
    generator = torch.Generator().manual_seed(0)
    teacher = (torch.randn(2, 4, 8, 8, generator=generator) * 3).bfloat16()
    student = (teacher.float() + 0.05 * torch.randn(2, 4, 8, 8, generator=generator)).bfloat16()
    mask = torch.ones(2, 8, dtype=torch.long)
    expected = attention_kl(student.double(), teacher.double(), mask).item()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = attention_kl(student, teacher, mask)
    # float32 terms of size ~1 carry ~1e-7 each; the KL is their difference: well within 1e-3 of it
    assert got.dtype == torch.float32 and got.item() == pytest.approx(expected, rel=1e-3)
    assert expected == pytest.approx(5.25e-4, rel=1e-2)


def test_attention_kl_ignores_padded_key_scores_and_is_zero_on_itself():
    student, teacher, mask = attention_example()
    moved = teacher.clone()
    moved[..., 2] = -50.0
    assert attention_kl(student, moved, mask).item() == pytest.approx(attention_kl(student, teacher, mask).item())
    assert attention_kl(teacher, teacher, mask).item() == pytest.approx(0.0, abs=1e-7)


def test_attention_kl_gradients_are_finite_with_padding():
    student, teacher, mask = attention_example()
    student.requires_grad_(True)
    attention_kl(student, teacher, mask).backward()
    assert torch.isfinite(student.grad).all()
    assert torch.all(student.grad[..., 2] == 0)  # padded keys get no gradient


def test_average_head_groups():
    probabilities = torch.arange(4.0).reshape(1, 4, 1, 1)  # heads 0, 1, 2, 3
    assert average_head_groups(probabilities, 2).flatten().tolist() == [0.5, 2.5]
    with pytest.raises(KdbertError, match="do not divide 4"):
        average_head_groups(probabilities, 3)


def test_attention_kl_head_average():
    # query 1: teacher heads [0, ln3] -> [.25, .75] and [ln3, 0] -> [.75, .25] average to [.5, .5];
    #          student [0, ln3] -> [.25, .75]: KL = .5 ln(4/3)
    # query 2: both teacher heads and the student uniform: 0
    teacher = torch.tensor([[[[0.0, LN3], [0.0, 0.0]], [[LN3, 0.0], [0.0, 0.0]]]])  # (1, 2, 2, 2)
    student = torch.tensor([[[[0.0, LN3], [0.0, 0.0]]]])  # (1, 1, 2, 2)
    mask = torch.ones(1, 2)
    with pytest.raises(KdbertError, match="head_average"):
        attention_kl(student, teacher, mask)
    assert attention_kl(student, teacher, mask, head_average=True).item() == pytest.approx(0.25 * math.log(4 / 3))


def test_mlm_distillation_mixes_one_hot_and_teacher():
    # masked position: label 0, student logits [ln3, 0] -> q = [.75, .25], teacher [ln3, 0] -> p = [.75, .25]
    # target y = .5 * [1, 0] + .5 * [.75, .25] = [.875, .125]; loss = -(.875 ln .75 + .125 ln .25)
    student = torch.tensor([[[LN3, 0.0], [5.0, -5.0]]])
    teacher = torch.tensor([[[LN3, 0.0], [-5.0, 5.0]]])
    labels = torch.tensor([[0, -100]])  # the second position is not predicted
    expected = -(0.875 * math.log(0.75) + 0.125 * math.log(0.25))
    assert mlm_distillation_loss(student, teacher, labels).item() == pytest.approx(expected)
    assert mlm_distillation_loss(student, teacher, labels, 1.0).item() == pytest.approx(-math.log(0.75))
    soft = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert mlm_distillation_loss(student, teacher, labels, 0.0).item() == pytest.approx(soft)
    nothing = mlm_distillation_loss(student, teacher, torch.full((1, 2), -100))
    assert nothing.item() == 0.0
    with pytest.raises(KdbertError, match=r"\[0, 1\]"):
        mlm_distillation_loss(student, teacher, labels, 1.5)
