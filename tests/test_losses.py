"""Each loss pinned to a value worked out by hand with plain Python arithmetic."""

import math

import pytest
import torch
from torch import nn

from kdbert.core import losses
from kdbert.core.matching import LOSSES, hard_label_loss
from kdbert.errors import KdbertError

LN2, LN3 = math.log(2.0), math.log(3.0)
M = -10000.0  # additive key mask of our trace


def t(x):
    return torch.tensor(x, dtype=torch.float64)


def kl(p, q):
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q) if pi > 0)


# --- hidden_mse -------------------------------------------------------------------------

def test_hidden_mse_mean_and_masked_mean():
    s = t([[[1, 2], [3, 4]]])  # (B=1, L=2, d=2)
    h = t([[[0, 2], [3, 6]]])  # squared errors: 1, 0 | 0, 4
    assert losses.hidden_mse(s, h).item() == pytest.approx((1 + 0 + 0 + 4) / 4)
    mask = torch.tensor([[1, 0]])  # second token is padding
    got = losses.hidden_mse(s, h, attention_mask=mask, reduction="masked-mean")
    assert got.item() == pytest.approx((1 + 0) / 2)


def test_hidden_mse_with_projection():
    proj = nn.Linear(1, 2, bias=False).double()
    with torch.no_grad():
        proj.weight.copy_(t([[2], [1]]))
    s = t([[[1], [2]]])  # projected: [2, 1], [4, 2]
    h = t([[[2, 0], [0, 2]]])  # squared errors: 0, 1 | 16, 0
    assert losses.hidden_mse(s, h, projection=proj).item() == pytest.approx(17 / 4)


def test_hidden_mse_refuses_size_mismatch_and_bad_reduction():
    with pytest.raises(KdbertError, match=r"nn.Linear\(3, 4\)"):
        losses.hidden_mse(torch.zeros(1, 2, 3), torch.zeros(1, 2, 4))
    with pytest.raises(KdbertError, match="attention_mask"):
        losses.hidden_mse(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), reduction="masked-mean")
    with pytest.raises(KdbertError, match="unknown reduction"):
        losses.hidden_mse(torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), reduction="sum")


# --- attention_mse ----------------------------------------------------------------------

# B=2, H=1, L=2. Example 0 has a padded second token (key column 1 carries the -10000
# mask, query row 1 is a padded query with real values); example 1 has no padding.
ATT_MASK = torch.tensor([[1, 0], [1, 1]])
ATT_S = t([[[[1, 2 + M], [3, 4 + M]]], [[[1, 1], [1, 1]]]])
ATT_T = t([[[[0, 5 + M], [1, 1 + M]]], [[[1, 1], [-1, 3]]]])


def test_attention_mse_tinybert_reference_quirk():
    # Entries <= -100 become 0 in both tensors; the real negative score -1 stays.
    # Example 0 squared errors: (1-0)^2, 0, (3-1)^2, 0 -> the padded query row adds 4.
    # Example 1 squared errors: 0, 0, (1+1)^2, (1-3)^2.
    # Denominator B*H*L*L = 8, padded entries included.
    expected = ((1 + 0 + 4 + 0) + (0 + 0 + 4 + 4)) / 8
    got = losses.attention_mse(ATT_S, ATT_T, ATT_MASK)
    assert got.item() == pytest.approx(expected)  # 1.625


def test_attention_mse_masked_mean_differs_from_reference():
    # Only valid query x valid key pairs: example 0 keeps (0, 0) alone, example 1 all four.
    expected = (1 + (0 + 0 + 4 + 4)) / (1 + 4)
    got = losses.attention_mse(ATT_S, ATT_T, ATT_MASK, reduction="masked-mean")
    assert got.item() == pytest.approx(expected)  # 1.8
    assert got.item() != pytest.approx(losses.attention_mse(ATT_S, ATT_T, ATT_MASK).item())


def test_attention_mse_head_mismatch_refused_unless_averaged():
    s = t([[[[1.0]]]])  # (B=1, H=1, L=1, L=1)
    h = t([[[[2.0]], [[4.0]]]])  # two teacher heads, mean 3
    mask = torch.tensor([[1]])
    with pytest.raises(KdbertError, match="1 attention heads, teacher has 2.*head_average=True"):
        losses.attention_mse(s, h, mask)
    for reduction in ("tinybert-reference", "masked-mean"):
        got = losses.attention_mse(s, h, mask, reduction=reduction, head_average=True)
        assert got.item() == pytest.approx((1 - 3) ** 2)


# --- logits -----------------------------------------------------------------------------

def test_soft_cross_entropy_reference_form():
    # T=1: teacher softmax [3/4, 1/4], student log_softmax [-ln2, -ln2]; mean over 2 classes.
    got = losses.soft_cross_entropy(t([[0, 0]]), t([[LN3, 0]]))
    assert got.item() == pytest.approx((0.75 * LN2 + 0.25 * LN2) / 2)
    # T=2, no T^2: student/T = [ln3, 0] -> log_softmax [ln(3/4), ln(1/4)]; teacher uniform.
    got = losses.soft_cross_entropy(t([[2 * LN3, 0]]), t([[0, 0]]), temperature=2.0)
    assert got.item() == pytest.approx(-(0.5 * math.log(0.75) + 0.5 * math.log(0.25)) / 2)


def test_soft_cross_entropy_of_qa_spans_is_per_distribution_not_per_position():
    # (B=1, start/end, L=3): start: teacher [ln3, 0, 0] -> [3/5, 1/5, 1/5] against a uniform student
    # (-ln3 each): CE ln3; end: teacher uniform against student [ln2, 0, 0] -> [1/2, 1/4, 1/4]:
    # CE -(ln(1/2) + 2 ln(1/4)) / 3 = 5 ln2 / 3. Mean of the two, not divided by the 3 positions.
    student = t([[[0, 0, 0], [LN2, 0, 0]]])
    teacher = t([[[LN3, 0, 0], [0, 0, 0]]])
    got = losses.soft_cross_entropy(student, teacher)
    assert got.item() == pytest.approx((LN3 + 5 * LN2 / 3) / 2)


def test_soft_cross_entropy_is_float32_under_bf16_autocast():
    generator = torch.Generator().manual_seed(0)
    student, teacher = (torch.randn(4, 2, 384, generator=generator) * 4 for _ in range(2))
    expected = losses.soft_cross_entropy(student.bfloat16().float(), teacher.bfloat16().float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = losses.soft_cross_entropy(student.bfloat16(), teacher.bfloat16())
    assert got.dtype == torch.float32 and got.item() == pytest.approx(expected.item(), rel=1e-6)


def test_kl_div_loss_batchmean_with_t_squared():
    # Row 0: teacher/T = [ln3, 0] -> [3/4, 1/4] vs uniform student; row 1: identical.
    s = t([[0, 0], [0, 0]])
    h = t([[2 * LN3, 0], [0, 0]])
    expected = 2.0**2 * (kl([0.75, 0.25], [0.5, 0.5]) + 0.0) / 2
    assert losses.kl_div_loss(s, h, temperature=2.0).item() == pytest.approx(expected)


def test_kl_div_loss_at_t20_is_float32_under_bf16_autocast():
    # A student near its teacher, logits exact in bf16: z_s = [0.5, 0], z_t = [0.75, 0], T = 20.
    # p = sigmoid(0.75/20), q = sigmoid(0.5/20); loss = T^2 KL(p || q) = 0.0078 (hand, float64);
    # d loss / d z_s = T^2 * (q - p) / T = 20 (q - p) for class 0, its negative for class 1.
    # In bf16 log_softmax(z/20) is rounded by ~0.002, far above the KL (~2e-5): the loss read -1.5.
    p, q = 1 / (1 + math.exp(-0.0375)), 1 / (1 + math.exp(-0.025))
    expected = 400 * (p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q)))
    student = torch.tensor([[0.5, 0.0]], dtype=torch.bfloat16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = losses.kl_div_loss(student, torch.tensor([[0.75, 0.0]], dtype=torch.bfloat16), 20.0)
    got.backward()
    # float32: log-softmax terms near ln 2 carry ~6e-8 of rounding each; times T^2 = 400, ~1e-4 in all
    assert got.dtype == torch.float32 and got.item() == pytest.approx(expected, abs=1e-4)
    assert expected == pytest.approx(0.00781, abs=1e-5)
    # the gradient lands in bf16 (the student's dtype): 8 bits of mantissa, ~0.4% of it
    assert student.grad[0, 0].item() == pytest.approx(20 * (q - p), rel=1e-2)
    assert student.grad[0, 1].item() == pytest.approx(-20 * (q - p), rel=1e-2)


def test_kl_div_loss_reference_mean_divides_by_classes_too():
    # BERT-PKD's KLDivLoss(reduction="mean"): the same sum over (rows x classes) entries.
    s = t([[0, 0, 0], [0, 0, 0]])
    h = t([[2 * LN3, 0, 0], [0, 0, 0]])
    p = [3 / 5, 1 / 5, 1 / 5]  # softmax([ln3, 0, 0])
    expected = 2.0**2 * kl(p, [1 / 3] * 3) / (2 * 3)
    assert losses.kl_div_loss(s, h, 2.0, reduction="mean").item() == pytest.approx(expected)
    assert losses.kl_div_loss(s, h, 2.0).item() == pytest.approx(expected * 3)
    with pytest.raises(KdbertError, match="unknown reduction 'sum'"):
        losses.kl_div_loss(s, h, 2.0, reduction="sum")


def test_kl_div_loss_token_mask_divides_by_selected_tokens():
    # (B=1, L=3, V=2); the third token is padding with a large disagreement.
    s = t([[[0, 0], [0, 0], [0, 10]]])
    h = t([[[2 * LN3, 0], [0, 0], [10, 0]]])
    mask = torch.tensor([[1, 1, 0]])
    expected = 2.0**2 * (kl([0.75, 0.25], [0.5, 0.5]) + 0.0) / 2
    assert losses.kl_div_loss(s, h, 2.0, mask=mask).item() == pytest.approx(expected)
    with pytest.raises(KdbertError, match="selects no tokens"):
        losses.kl_div_loss(s, h, 2.0, mask=torch.zeros(1, 3))


def test_classic_kd_from_the_loss_table():
    # T=2: teacher/T = [ln3/2, 0] -> [sqrt3, 1]/(sqrt3+1); student uniform; label 0.
    r3 = math.sqrt(3.0)
    p = [r3 / (r3 + 1), 1 / (r3 + 1)]
    alpha, temp = 0.25, 2.0
    expected = alpha * temp**2 * kl(p, [0.5, 0.5]) + (1 - alpha) * LN2
    s, batch = t([[0, 0]]), {"attention_mask": torch.ones(1, 1)}
    got = (alpha * LOSSES["kl_div"](s, t([[LN3, 0]]), batch, temperature=temp)
           + (1 - alpha) * LOSSES["hard_label"](s, torch.tensor([0]), batch))
    assert got.item() == pytest.approx(expected)
    # float labels mean a regression target: MSE of the single output
    assert hard_label_loss(t([[1.0], [3.0]]), t([2.0, 2.0])).item() == pytest.approx(1.0)


def test_logit_mse():
    got = losses.logit_mse(t([[1, 2], [3, 4]]), t([[1, 0], [0, 4]]))
    assert got.item() == pytest.approx((0 + 4 + 9 + 0) / 4)


def test_logit_shape_mismatch_names_labels():
    with pytest.raises(KdbertError, match="number of labels"):
        losses.logit_mse(torch.zeros(2, 3), torch.zeros(2, 2))


# --- PKD / DistilBERT / MLM / regression -------------------------------------------------

def test_patience_loss_mean_and_sum_differ_by_d_times_layers():
    # (n_layers=2, B=2, d=2). Layer 1, example 0: [3,4]/5 = [0.6, 0.8] vs [1, 0]
    # -> 0.16 + 0.64 = 0.8; every other pair is identical after normalisation.
    s = t([[[3, 4], [1, 1]], [[0, 2], [2, 0]]])
    h = t([[[1, 0], [2, 2]], [[0, 5], [7, 0]]])
    mean = losses.patience_loss(s, h)
    total = losses.patience_loss(s, h, reduction="sum")
    assert mean.item() == pytest.approx(0.8 / (2 * 2 * 2))
    assert total.item() == pytest.approx(0.8 / 2)
    assert total.item() == pytest.approx(mean.item() * 2 * 2)  # d * n_layers


def test_cosine_hidden_loss_over_non_pad_tokens():
    s = t([[[1, 0], [1, 1], [1, 0]]])
    h = t([[[0, 1], [2, 2], [-1, 0]]])  # cos = 0, 1, (-1 on the padded token)
    mask = torch.tensor([[1, 1, 0]])
    assert losses.cosine_hidden_loss(s, h, mask).item() == pytest.approx(((1 - 0) + (1 - 1)) / 2)


def test_masked_lm_cross_entropy_ignores_minus_100():
    logits = t([[[5, -5], [0, 0], [LN3, 0]]])
    labels = torch.tensor([[-100, 1, 0]])
    expected = (LN2 - math.log(0.75)) / 2
    assert losses.masked_lm_cross_entropy(logits, labels).item() == pytest.approx(expected)
    none = losses.masked_lm_cross_entropy(logits, torch.full((1, 3), -100))
    assert none.item() == 0.0


def test_regression_mse_accepts_b_and_b1():
    gold = t([0, 4])
    assert losses.regression_mse(t([[1], [2]]), gold).item() == pytest.approx((1 + 4) / 2)
    assert losses.regression_mse(t([1, 2]), gold).item() == pytest.approx((1 + 4) / 2)
    with pytest.raises(KdbertError, match="num_labels=1"):
        losses.regression_mse(torch.zeros(2, 3), torch.zeros(2))


# --- gradients --------------------------------------------------------------------------

def _grad_cases():
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return torch.randn(*shape, generator=g)

    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    ext = (1 - mask)[:, None, None, :] * M
    proj = nn.Linear(4, 6)
    h6, h4, att, c3, v5, cls = r(2, 3, 6), r(2, 3, 4), r(2, 2, 3, 3) + ext, r(2, 3), r(2, 3, 5), r(2, 2, 4)
    mlm_labels = torch.tensor([[1, -100, -100], [4, 0, -100]])
    return [
        ("hidden_mse", (2, 3, 4), lambda s: losses.hidden_mse(s, h6, proj)),
        ("hidden_mse_masked", (2, 3, 4),
         lambda s: losses.hidden_mse(s, h4, attention_mask=mask, reduction="masked-mean")),
        ("attention_mse", (2, 2, 3, 3), lambda s: losses.attention_mse(s + ext, att, mask)),
        ("attention_mse_masked", (2, 2, 3, 3),
         lambda s: losses.attention_mse(s + ext, att, mask, reduction="masked-mean")),
        ("soft_cross_entropy", (2, 3), lambda s: losses.soft_cross_entropy(s, c3)),
        ("kl_div_loss", (2, 3, 5), lambda s: losses.kl_div_loss(s, v5, 2.0, mask)),
        ("hard_label_loss", (2, 3), lambda s: hard_label_loss(s, torch.tensor([0, 2]))),
        ("logit_mse", (2, 3), lambda s: losses.logit_mse(s, c3)),
        ("patience_loss", (2, 2, 4), lambda s: losses.patience_loss(s, cls, "sum")),
        ("cosine_hidden_loss", (2, 3, 4), lambda s: losses.cosine_hidden_loss(s, h4, mask)),
        ("masked_lm_cross_entropy", (2, 3, 5), lambda s: losses.masked_lm_cross_entropy(s, mlm_labels)),
        ("regression_mse", (2, 1), lambda s: losses.regression_mse(s, c3[:, 0])),
    ]


GRAD_CASES = _grad_cases()


@pytest.mark.parametrize("name,shape,loss_fn", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients_flow(name, shape, loss_fn):
    student = torch.randn(*shape, generator=torch.Generator().manual_seed(1), requires_grad=True)
    loss = loss_fn(student)
    assert loss.dim() == 0
    loss.backward()
    assert student.grad is not None and torch.isfinite(student.grad).all()
    assert student.grad.abs().sum() > 0, name
