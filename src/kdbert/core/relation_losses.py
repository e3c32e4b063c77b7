"""MiniLMv2's self-attention relation loss (Wang et al., 2021), as pure functions.

The queries (likewise keys, values) of one layer, all attention heads concatenated, X (B, L, d),
are split into R relation heads X_r (B, L, d_r), d_r = d / R, whatever the model's own head count::

    relation:  A_r = softmax(X_r X_r^T / sqrt(d_r))              (B, R, L, L), over the key axis
    loss:      KL(A_r^t || A_r^s) = sum_j A_t[i, j] (log A_t[i, j] - log A_s[i, j])
               averaged over relation heads r and real query tokens i (padded rows and keys left out)
    MiniLM:    L = KL_QQ + KL_KK + KL_VV

Student and teacher widths may differ (each is split into the same R heads): no projection.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kdbert.errors import KdbertError

RELATION_TYPES = ("query", "key", "value")


def split_relation_heads(states: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, L, d) -> (B, R, L, d / R): the width cut into ``heads`` equal parts."""
    batch, length, width = states.shape
    if width % heads:
        raise KdbertError(f"{heads} relation heads do not divide the width {width}")
    return states.view(batch, length, heads, width // heads).transpose(1, 2)


def relation_log_probs(states: torch.Tensor, heads: int, mask: torch.Tensor) -> torch.Tensor:
    """log softmax(X_r X_r^T / sqrt(d_r)) over keys (B, R, L, L); padded keys (``mask`` (B, L) 0) get
    probability 0."""
    split = split_relation_heads(states.float(), heads)
    scores = split @ split.transpose(-1, -2) / split.shape[-1] ** 0.5
    scores = scores.masked_fill(~mask.bool()[:, None, None, :], torch.finfo(scores.dtype).min)
    return F.log_softmax(scores, dim=-1)


def relation_kl(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor, heads: int) -> torch.Tensor:
    """KL(teacher relation || student relation) of one relation type: student (B, L, d_s), teacher
    (B, L, d_t), ``mask`` (B, L) 1 for real tokens; mean over relation heads and real query rows."""
    log_s = relation_log_probs(student, heads, mask)
    log_t = relation_log_probs(teacher, heads, mask)
    real = mask.bool()
    pointwise = F.kl_div(log_s, log_t, log_target=True, reduction="none")
    pointwise = pointwise.masked_fill(~real[:, None, None, :], 0.0)
    per_row = pointwise.sum(-1)  # (B, R, L)
    rows = real[:, None, :].expand_as(per_row)
    return per_row[rows].mean()


def minilm_relation_loss(student: dict, teacher: dict, mask: torch.Tensor, heads: int) -> torch.Tensor:
    """KL_QQ + KL_KK + KL_VV (:func:`relation_kl`); ``student`` / ``teacher`` map query, key and value to
    (B, L, d) tensors."""
    return sum(relation_kl(student[name], teacher[name], mask, heads) for name in RELATION_TYPES)
