"""MobileBERT's knowledge-transfer losses (Sun et al., 2020, section 3.5) and its pre-training
distillation, as pure functions of tensors (conventions of :mod:`kdbert.core.losses`).

The official code (TF1 google-research/mobilebert, TF2 tensorflow/models
official/projects/mobilebert) multiplies each term by a factor and divides by the number of
transferred layers L; :mod:`kdbert.methods.mobilebert_transfer` holds those factors.

Shape letters: B batch, L sequence length, H attention heads, d hidden size, V vocabulary size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kdbert.core.losses import (at_least_float32, check_attention_mask, check_same_shape, masked_lm_cross_entropy,
                                select_tokens)
from kdbert.errors import KdbertError


def _reduce_tokens(per_token: torch.Tensor, attention_mask: torch.Tensor | None, reduction: str,
                   what: str) -> torch.Tensor:
    """Mean of a (B, L) per-token loss over all tokens ("mean") or non-pad ones ("masked-mean")."""
    if reduction == "mean":
        return per_token.mean()
    if reduction == "masked-mean":
        if attention_mask is None:
            raise KdbertError(f"{what}: reduction='masked-mean' needs attention_mask (B, L)")
        return select_tokens(per_token, attention_mask, what).mean()
    raise KdbertError(f"{what}: unknown reduction {reduction!r}; use 'mean' or 'masked-mean'")


def feature_map_mse(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    reduction: str = "mean",
    projection: nn.Module | None = None,
    eps: float = 1e-12,
) -> torch.Tensor:
    """MobileBERT feature-map transfer: ``MSE(LN(H_s), LN(H_t))`` with a parameter-free LayerNorm.

    ``LN(x) = (x - mean_d(x)) / sqrt(var_d(x) + eps)`` per token, no scale or shift, so only the
    shape of each token's feature vector is compared, not its scale (the mean and variance
    terms below transfer those).

    Shapes: hidden (B, L, d) for one matched layer; attention_mask (B, L). A ``projection``
    (d_s -> d_t) is applied to the student first; without one the widths must agree.

    Reductions: ``"mean"`` over all B*L*d entries, padded tokens included (the official code:
    TF1 ``tf.losses.mean_squared_error``, TF2 Keras MSE averaged); ``"masked-mean"`` over the
    non-pad tokens only. ``eps`` is TF1's ``contrib.layers.layer_norm`` value; TF2's Keras
    LayerNormalization uses 1e-3, which matters only for near-constant tokens.
    """
    if projection is not None:
        student_hidden = projection(student_hidden)
    check_same_shape(
        "feature_map_mse", student_hidden, teacher_hidden,
        "compare layers of the same width (the student's inter-block width must equal the "
        "teacher's hidden size) or pass a projection",
    )
    width = student_hidden.shape[-1:]
    diff = F.layer_norm(student_hidden, width, eps=eps) - F.layer_norm(teacher_hidden, width, eps=eps)
    return _reduce_tokens(diff.pow(2).mean(dim=-1), attention_mask, reduction, "feature_map_mse")


def _token_statistics(what: str, student: torch.Tensor, teacher: torch.Tensor, moment: str):
    if student.shape[:-1] != teacher.shape[:-1]:
        raise KdbertError(
            f"{what}: student tokens {tuple(student.shape[:-1])} != teacher tokens "
            f"{tuple(teacher.shape[:-1])}; student and teacher must see the same batch"
        )
    if moment == "mean":
        return student.mean(dim=-1), teacher.mean(dim=-1)
    return student.var(dim=-1, unbiased=False), teacher.var(dim=-1, unbiased=False)


def mean_transfer_loss(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """MobileBERT mean transfer: ``mean_tokens (mu_s - mu_t)^2``, mu the per-token feature mean.

    Shapes: hidden (B, L, d_s) and (B, L, d_t) of one matched layer; the widths may differ
    (only per-token statistics are compared). Reductions as :func:`feature_map_mse`.

    This is the official TF2 form (``_get_distribution_losses``: each layer's own teacher
    tensor). The TF1 code computes the teacher's mean and variance over the whole list of
    teacher layers instead of the matched one, a bug we do not copy.
    """
    mu_s, mu_t = _token_statistics("mean_transfer_loss", student_hidden, teacher_hidden, "mean")
    return _reduce_tokens((mu_s - mu_t).pow(2), attention_mask, reduction, "mean_transfer_loss")


def variance_transfer_loss(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """MobileBERT variance transfer: ``mean_tokens |var_s - var_t|`` (an L1 distance).

    ``var`` is the per-token population variance over the feature dimension (divides by d,
    as ``tf.math.reduce_variance``). Shapes, reductions and the TF1 difference as
    :func:`mean_transfer_loss`.
    """
    var_s, var_t = _token_statistics("variance_transfer_loss", student_hidden, teacher_hidden, "var")
    return _reduce_tokens((var_s - var_t).abs(), attention_mask, reduction, "variance_transfer_loss")


def average_head_groups(probabilities: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Average attention distributions over consecutive groups of heads.

    (B, H, L, L) -> (B, num_groups, L, L): group g is the mean of heads g*k .. g*k + k - 1 with
    k = H / num_groups. A mean of distributions is a distribution, so the result is a valid
    attention target for a student with ``num_groups`` heads.
    """
    heads = probabilities.shape[1]
    if num_groups < 1 or heads % num_groups:
        raise KdbertError(
            f"head averaging splits {heads} teacher heads into groups, one per student head; "
            f"{num_groups} student heads do not divide {heads}: use a student head count that does"
        )
    b, _, lq, lk = probabilities.shape
    return probabilities.reshape(b, num_groups, heads // num_groups, lq, lk).mean(dim=2)


def attention_kl(student_scores: torch.Tensor, teacher_scores: torch.Tensor, attention_mask: torch.Tensor,
                 reduction: str = "reference", head_average: bool = False) -> torch.Tensor:
    """MobileBERT attention transfer: ``KL(a_t || a_s)`` per head and query, over the keys.

    ``a = softmax(scores)`` over keys, from PRE-softmax scores (B, H, L, L) with queries on
    dim 2 and keys on dim 3; attention_mask (B, L). Padded keys are excluded from both
    distributions by the mask itself (their scores are replaced by -inf), not by a score value::

        KL_{b,h,i} = sum_{valid keys j} a_t[b,h,i,j] * (log a_t[b,h,i,j] - log a_s[b,h,i,j])

    Reductions: ``"reference"`` averages over all B*H*L query rows, padded query rows included
    (their distributions over the valid keys are compared too), as the official code does;
    ``"masked-mean"`` averages over the rows of non-pad queries only.

    The paper writes KL; the official code computes the cross-entropy
    ``-sum_j a_t log a_s``, which is this KL plus the teacher's entropy: the same gradients,
    a value that does not reach 0. ``head_average=True`` lets a student with H_s heads learn
    from a teacher with H_t = k * H_s heads: the teacher's distributions are averaged over
    consecutive groups of k heads (:func:`average_head_groups`). Without it head counts
    must be equal. Computed in float32 whatever the scores' dtype (in bf16 a student near its
    teacher read a negative KL).
    """
    h_s, h_t = student_scores.shape[1], teacher_scores.shape[1]
    if h_s != h_t and not head_average:
        raise KdbertError(
            f"attention_kl: student has {h_s} attention heads, teacher has {h_t}; use a student "
            f"with {h_t} heads or pass head_average=True (averages groups of teacher heads)"
        )
    check_attention_mask("attention_kl", attention_mask, student_scores)
    valid = attention_mask.bool()
    if not valid.any(dim=1).all():
        raise KdbertError("attention_kl: an example has no valid token; check the batch's attention mask")
    keys = valid[:, None, None, :]
    teacher_p = F.softmax(at_least_float32(teacher_scores).masked_fill(~keys, float("-inf")), dim=-1)
    if head_average:
        teacher_p = average_head_groups(teacher_p, h_s)
    check_same_shape("attention_kl", student_scores, teacher_p, "student and teacher must see the same batch")
    student_log_p = F.log_softmax(at_least_float32(student_scores).masked_fill(~keys, float("-inf")), dim=-1)
    terms = torch.xlogy(teacher_p, teacher_p) - teacher_p * student_log_p.masked_fill(~keys, 0.0)
    per_row = terms.sum(dim=-1)  # (B, H, L)
    if reduction == "reference":
        return per_row.mean()
    if reduction == "masked-mean":
        return per_row.transpose(1, 2)[valid].mean()
    raise KdbertError(f"attention_kl: unknown reduction {reduction!r}; use 'reference' or 'masked-mean'")


def mlm_distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    ground_truth_ratio: float = 0.5,
) -> torch.Tensor:
    """MobileBERT pre-training distillation: masked-LM cross-entropy against a mixed target.

    ``y = r * onehot(label) + (1 - r) * softmax(z_t)`` and
    ``loss = mean_{masked positions} -sum_v y_v log softmax(z_s)_v``
    ``     = r * CE(z_s, label) + (1 - r) * mean_{masked} -sum_v softmax(z_t)_v log softmax(z_s)_v``

    Shapes: logits (B, L, V), labels (B, L) with -100 at positions that are not predicted (HF's
    collator convention). r is the official ``distill_ground_truth_ratio`` (0.5). No
    temperature (the official runs use 1). The official pre-training also adds next-sentence
    prediction; kdbert's corpus stage has no sentence pairs, so there is none here. A batch
    with no masked position gives 0 (still attached to the graph). The softmaxes run in float32
    whatever the logits' dtype.
    """
    if not 0.0 <= ground_truth_ratio <= 1.0:
        raise KdbertError(f"ground_truth_ratio {ground_truth_ratio} must lie in [0, 1]")
    check_same_shape("mlm_distillation_loss", student_logits, teacher_logits,
                      "student and teacher need the same vocabulary and the same batch")
    selected = labels != -100
    if not selected.any():
        return student_logits.sum() * 0.0
    log_q = F.log_softmax(at_least_float32(student_logits[selected]), dim=-1)
    soft = -(F.softmax(at_least_float32(teacher_logits[selected]), dim=-1) * log_q).sum(dim=-1).mean()
    hard = masked_lm_cross_entropy(student_logits, labels)
    return ground_truth_ratio * hard + (1.0 - ground_truth_ratio) * soft
