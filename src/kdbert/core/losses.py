"""Distillation objectives as pure functions of tensors (MobileBERT's layer-wise transfer terms
are in :mod:`kdbert.core.transfer_losses`).

Each function takes tensors (student first, teacher second), returns a scalar tensor that
is differentiable w.r.t. its student inputs, and documents the published formula, the
shapes, the reduction and where the reference code differs. Teacher tensors are expected
to come from a no-grad forward pass; nothing here detaches them.

Shape letters: B batch, L sequence length, H attention heads, d hidden size, C classes,
V vocabulary size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from kdbert.errors import KdbertError

# The reference TinyBERT code zeroes every attention score at or below this value: with the
# additive key mask of -10000 it catches exactly the masked (query, padded key) entries.
REFERENCE_SCORE_THRESHOLD = -1e2


def check_same_shape(what: str, student: torch.Tensor, teacher: torch.Tensor, fix: str) -> None:
    if student.shape != teacher.shape:
        raise KdbertError(
            f"{what}: student shape {tuple(student.shape)} != teacher shape "
            f"{tuple(teacher.shape)}; {fix}"
        )


def at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 when it is in a narrower float (bf16, fp16 under autocast); float64 stays."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def select_tokens(x: torch.Tensor, mask: torch.Tensor, what: str) -> torch.Tensor:
    """Rows of ``x`` (B, L, ...) where ``mask`` (B, L) is non-zero, as (n_selected, ...)."""
    if mask.shape != x.shape[:2]:
        raise KdbertError(
            f"{what}: mask shape {tuple(mask.shape)} does not match the first two dims "
            f"{tuple(x.shape[:2])} of the inputs; pass the batch's (B, L) attention mask"
        )
    keep = mask.bool()
    if not keep.any():
        raise KdbertError(f"{what}: the mask selects no tokens; check the batch's attention mask")
    return x[keep]


def hidden_mse(
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    projection: nn.Module | None = None,
    attention_mask: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """TinyBERT hidden-state (and embedding) loss: ``MSE(H_s W_h, H_t)``.

    Paper: ``L_hidn = MSE(H^S W_h, H^T)``, and ``L_embd = MSE(E^S W_e, E^T)`` for the
    embedding output, where ``W`` is a learnable d_s x d_t matrix.

    Shapes: student (B, L, d_s), teacher (B, L, d_t), attention_mask (B, L) of 0/1.
    ``projection`` maps d_s -> d_t (e.g. ``nn.Linear(d_s, d_t)``); it may be None only when
    d_s == d_t.

    Reductions:
      - ``"mean"``: mean over all B*L*d_t entries, padded positions included. This is the
        TinyBERT reference (``MSELoss()`` on the full tensors).
      - ``"masked-mean"``: mean over the d_t entries of non-pad positions only, i.e. the
        sum of squared errors over valid tokens divided by ``n_valid_tokens * d_t``.

    Reference difference: TinyBERT v1 code shares one projection across all layers
    (embeddings included); its v2 checkpoints hold one per layer. Which projection to pass
    is the recipe's choice; this function applies the one it is given.
    """
    if projection is not None:
        student_hidden = projection(student_hidden)
    elif student_hidden.shape[-1] != teacher_hidden.shape[-1]:
        d_s, d_t = student_hidden.shape[-1], teacher_hidden.shape[-1]
        raise KdbertError(
            f"hidden_mse: student hidden size {d_s} != teacher hidden size {d_t}; "
            f"pass projection=nn.Linear({d_s}, {d_t})"
        )
    check_same_shape(
        "hidden_mse", student_hidden, teacher_hidden,
        "student and teacher must see the same batch (and the projection must output d_t)",
    )
    if reduction == "mean":
        return F.mse_loss(student_hidden, teacher_hidden)
    if reduction == "masked-mean":
        if attention_mask is None:
            raise KdbertError("hidden_mse: reduction='masked-mean' needs attention_mask (B, L)")
        diff = select_tokens(student_hidden - teacher_hidden, attention_mask, "hidden_mse")
        return diff.pow(2).mean()
    raise KdbertError(
        f"hidden_mse: unknown reduction {reduction!r}; use 'mean' or 'masked-mean'"
    )


def check_attention_mask(loss: str, attention_mask: torch.Tensor, scores: torch.Tensor) -> None:
    """Refuse an attention mask that is not (B, L) for scores of shape (B, H, L, L)."""
    b, _, lq, lk = scores.shape
    if attention_mask.shape != (b, lk) or lq != lk:
        raise KdbertError(f"{loss}: attention_mask shape {tuple(attention_mask.shape)} does not fit scores "
                          f"of shape {tuple(scores.shape)}; pass the (B, L) mask of the batch")


def attention_mse(student_scores: torch.Tensor, teacher_scores: torch.Tensor, attention_mask: torch.Tensor,
                  reduction: str = "tinybert-reference", head_average: bool = False) -> torch.Tensor:
    """TinyBERT attention loss: ``(1/h) * sum_i MSE(A_i^S, A_i^T)`` on pre-softmax scores.

    Scores are PRE-softmax, shape (B, H, L, L) with queries on dim 2 and keys on dim 3:
    ``Q K^T / sqrt(d_h) + (1 - mask_key) * -10000`` (the convention of our trace).
    attention_mask is (B, L) of 0/1.

    Reductions:
      - ``"tinybert-reference"``: every entry <= -1e2 is replaced by 0 in both student and
        teacher, then the MSE is averaged over all B*H*L*L entries. Padded *query* rows keep
        their real values and count, and the zeroed (query, padded key) entries count in
        the denominator too. Relies on the -10000 mask: with a ``finfo.min`` mask, fp16, or
        real scores below -100 it silently changes meaning.
      - ``"masked-mean"``: squared differences over valid-query x valid-key pairs only,
        divided by ``H * sum_b len_b^2``. No threshold, so no dependence on the mask value.

    On the same batch the two differ whenever it has padding: the reference both adds the
    padded query rows' errors and divides by the padded size.

    Head counts must match. With ``head_average=True`` both tensors are first averaged over
    heads (the workaround of TinyBERT issue #125 for e.g. 16-head BERT-large -> 12-head
    students), giving a single-head comparison.
    """
    h_s, h_t = student_scores.shape[1], teacher_scores.shape[1]
    if head_average:
        student_scores = student_scores.mean(dim=1, keepdim=True)
        teacher_scores = teacher_scores.mean(dim=1, keepdim=True)
    elif h_s != h_t:
        raise KdbertError(
            f"attention_mse: student has {h_s} attention heads, teacher has {h_t}; "
            "pass head_average=True or drop the attention loss"
        )
    check_same_shape(
        "attention_mse", student_scores, teacher_scores,
        "student and teacher must see the same batch",
    )
    if reduction == "tinybert-reference":
        zero = torch.zeros((), dtype=student_scores.dtype, device=student_scores.device)
        s = torch.where(student_scores <= REFERENCE_SCORE_THRESHOLD, zero, student_scores)
        t = torch.where(teacher_scores <= REFERENCE_SCORE_THRESHOLD, zero, teacher_scores)
        return F.mse_loss(s, t)
    if reduction == "masked-mean":
        check_attention_mask("attention_mse", attention_mask, student_scores)
        valid = attention_mask.bool()
        pairs = valid[:, None, :, None] & valid[:, None, None, :]  # (B, 1, L, L)
        pairs = pairs.expand_as(student_scores)
        return (student_scores - teacher_scores)[pairs].pow(2).mean()
    raise KdbertError(
        f"attention_mse: unknown reduction {reduction!r}; use 'tinybert-reference' or "
        "'masked-mean'"
    )


def soft_cross_entropy(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """TinyBERT prediction-layer loss, reference form.

    ``mean_{n,c}( -softmax(z_t/T)_{n,c} * log_softmax(z_s/T)_{n,c} )``

    Shapes: logits (N, C). The mean runs over batch AND classes, so the value is the
    per-example cross-entropy divided by C. No T^2 factor (TinyBERT uses T = 1). The paper
    writes plain cross-entropy ``-softmax(z_t/T) . log_softmax(z_s/T)``; the reference code's
    ``.mean()`` scales it by 1/C, which only rescales the learning rate.

    QA span logits (B, 2, L), where the "classes" are the L positions: the plain cross-entropy
    of each start and end distribution (sum over positions), mean over the 2B of them; the
    reference's 1/C would divide the loss, and so the learning rate, by the window length.
    Computed in float32 whatever the logits' dtype (CPU autocast leaves softmax in bf16).
    """
    check_same_shape("soft_cross_entropy", student_logits, teacher_logits,
                      "student and teacher need the same number of labels")
    targets = F.softmax(at_least_float32(teacher_logits) / temperature, dim=-1)
    per_class = -targets * F.log_softmax(at_least_float32(student_logits) / temperature, dim=-1)
    return per_class.sum(-1).mean() if student_logits.dim() == 3 else per_class.mean()


def kl_div_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float,
    mask: torch.Tensor | None = None,
    reduction: str = "batchmean",
) -> torch.Tensor:
    """Temperature-scaled KL divergence (Hinton et al.; DistilBERT's L_ce).

    ``T^2 * (1/n) * sum_rows KL( softmax(z_t/T) || softmax(z_s/T) )``

    Shapes: logits (N, C), or (B, L, V) for token-level distillation. With ``mask`` (B, L)
    only the selected tokens count (DistilBERT: non-pad tokens, or only masked tokens with
    ``--restrict_ce_to_mask``) and n is their number; without it every row counts. The
    reduction ``batchmean`` sums over classes and divides by the number of rows, the KL
    divergence per example. ``mean`` divides by rows x classes instead, as the BERT-PKD
    reference's ``KLDivLoss(reduction='mean')``: C times smaller (2x on binary tasks, 3x on
    MNLI). The T^2 factor keeps gradient magnitudes comparable across temperatures.
    Computed in float32 whatever the logits' dtype: under CPU bf16 autocast the softmaxes stay in
    bf16 (8 bits of mantissa), and at T=20 the rounding of ``log_softmax(z/T)`` (~0.002) outweighs
    the KL of a student near its teacher (~1e-5 before T^2): the loss read negative and the
    gradient was off by 26-55% at logit gaps of 0.3-0.1 (``tests/test_losses.py``).
    """
    if reduction not in ("batchmean", "mean"):
        raise KdbertError(f"kl_div_loss: unknown reduction {reduction!r}; use 'batchmean' or 'mean'")
    check_same_shape("kl_div_loss", student_logits, teacher_logits,
                      "student and teacher need the same number of labels / vocabulary")
    if mask is not None:
        student_logits = select_tokens(student_logits, mask, "kl_div_loss")
        teacher_logits = select_tokens(teacher_logits, mask, "kl_div_loss")
    n_classes = student_logits.shape[-1]
    log_q = F.log_softmax(at_least_float32(student_logits.reshape(-1, n_classes)) / temperature, dim=-1)
    p = F.softmax(at_least_float32(teacher_logits.reshape(-1, n_classes)) / temperature, dim=-1)
    return temperature**2 * F.kl_div(log_q, p, reduction=reduction)


def logit_mse(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """MSE between logits (Distilled BiLSTM; DistilBERT's optional alpha_mse term).

    ``mean_{n,c} (z_s - z_t)^2`` over (N, C) logits. The BiLSTM paper writes the squared L2
    norm per example (a sum over classes); this mean divides it by C. DistilBERT's
    ``alpha_mse`` sums and divides by the number of tokens instead.
    """
    check_same_shape("logit_mse", student_logits, teacher_logits,
                      "student and teacher need the same number of labels")
    return F.mse_loss(student_logits, teacher_logits)


def patience_loss(
    student_cls: torch.Tensor, teacher_cls: torch.Tensor, reduction: str = "mean"
) -> torch.Tensor:
    """BERT-PKD patience loss on L2-normalised [CLS] states.

    Shapes: (n_layers, B, d) stacked [CLS] states of the matched layers; each vector is
    normalised over d first: ``h_hat = h / ||h||_2``.

    Reductions:
      - ``"mean"``: ``F.mse_loss`` mean over n_layers*B*d, as in the PKD reference code.
      - ``"sum"``: the paper, ``(1/B) * sum_b sum_layers ||h_hat_s - h_hat_t||_2^2``.

    ``sum = mean * d * n_layers``, so a beta tuned for one is rescaled by that factor for
    the other: the reference's beta = 500 with d = 768 and 5 layers equals a paper-form beta
    of 500 / 3840 ~= 0.13. That is why the PKD configs use beta in the hundreds.
    """
    check_same_shape("patience_loss", student_cls, teacher_cls,
                      "PKD matches students of the teacher's width; check the layer map")
    s = F.normalize(student_cls, p=2, dim=-1)
    t = F.normalize(teacher_cls, p=2, dim=-1)
    if reduction == "mean":
        return F.mse_loss(s, t)
    if reduction == "sum":
        return (s - t).pow(2).sum(dim=(0, 2)).mean()
    raise KdbertError(f"patience_loss: unknown reduction {reduction!r}; use 'mean' or 'sum'")


def cosine_hidden_loss(
    student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """DistilBERT cosine-embedding loss on the last hidden states.

    ``mean_{valid tokens} (1 - cos(h_s, h_t))``

    Shapes: hidden (B, L, d) (the last layer only, ``hidden_states[-1]``), attention_mask
    (B, L). Equals the reference's ``CosineEmbeddingLoss(target=1, reduction="mean")`` over
    the non-pad tokens.
    """
    check_same_shape("cosine_hidden_loss", student_hidden, teacher_hidden,
                      "the cosine term needs a student of the teacher's width")
    s = select_tokens(student_hidden, attention_mask, "cosine_hidden_loss")
    t = select_tokens(teacher_hidden, attention_mask, "cosine_hidden_loss")
    return (1.0 - F.cosine_similarity(s, t, dim=-1)).mean()


def cosine_distance(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """``mean_b (1 - cos(s_b, t_b))`` of one vector per row: student and teacher (B, d), the student's
    already projected to the teacher's width (the sentence term of :mod:`kdbert.methods.kd`)."""
    check_same_shape("cosine_distance", student, teacher, "project the student's vector to the teacher's width")
    return (1.0 - F.cosine_similarity(student.float(), teacher.float(), dim=-1)).mean()


def similarity_relation_mse(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """``mean_{i != j} (cos(s_i, s_j) - cos(t_i, t_j))^2`` over the rows of a batch: how alike the
    student finds each pair of rows against how alike the teacher does (a relation, as RKD's, so the
    two widths need no projection). student (B, d_s), teacher (B, d_t); 0 for a batch of one row."""
    rows = student.shape[0]
    if rows < 2:
        return student.sum() * 0.0
    s, t = F.normalize(student.float(), dim=-1), F.normalize(teacher.float(), dim=-1)
    off_diagonal = ~torch.eye(rows, dtype=torch.bool, device=s.device)
    return ((s @ s.T - t @ t.T)[off_diagonal] ** 2).mean()


def masked_lm_cross_entropy(mlm_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Masked-LM cross-entropy (DistilBERT's L_mlm).

    ``mean_{positions with labels != -100} -log softmax(logits)[label]``

    Shapes: mlm_logits (B, L, V), labels (B, L) with -100 at unmasked positions. A batch
    with no masked position gives 0 (still attached to the graph) rather than NaN.
    """
    vocab = mlm_logits.shape[-1]
    labels = labels.reshape(-1)
    if not (labels != -100).any():
        return mlm_logits.sum() * 0.0
    return F.cross_entropy(mlm_logits.reshape(-1, vocab), labels, ignore_index=-100)


def regression_mse(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """STS-B prediction-layer loss: ``mean_n (y_hat_n - y_n)^2`` against gold scores.

    Shapes: predictions (B,) or (B, 1), targets (B,). TinyBERT's prediction stage uses this
    for regression tasks instead of matching the teacher.
    """
    if predictions.dim() == 2 and predictions.shape[-1] == 1:
        predictions = predictions.squeeze(-1)
    if predictions.shape != targets.shape:
        raise KdbertError(
            f"regression_mse: predictions {tuple(predictions.shape)} do not match targets "
            f"{tuple(targets.shape)}; a regression model needs num_labels=1 and one gold "
            "score per example"
        )
    return F.mse_loss(predictions, targets.to(predictions.dtype))


def bilstm_distill_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor | None = None,
    alpha: float = 0.0,
) -> torch.Tensor:
    """Distilled BiLSTM objective (Tang et al. 2019, eq. 2-3).

    ``L = (1 - alpha) * L_distill + alpha * L_hard``, with
    ``L_distill = (1/N) sum_n ||z_s,n - z_t,n||_2^2``, the squared L2 distance between the
    student's and the teacher's logits (the paper's form: summed over the C outputs, averaged
    over the batch; :func:`logit_mse` is the same divided by C), and ``L_hard`` the mean
    cross-entropy to gold class ids (classification, ``labels`` (N,) long) or the mean squared
    error to gold scores (regression: C = 1, ``labels`` (N,) float). Regression distillation is
    therefore the squared error to the teacher's score.

    Shapes: logits (N, C). ``alpha`` 0 (the default: the distillation term alone, as the paper trains;
    the castorini/d-bert code adds the cross-entropy) needs no labels.
    """
    check_same_shape("bilstm_distill_loss", student_logits, teacher_logits,
                      "student and teacher need the same number of labels")
    if not 0.0 <= alpha <= 1.0:
        raise KdbertError(f"--alpha must be between 0 and 1 (got {alpha})")
    distill = (student_logits - teacher_logits).pow(2).sum(dim=-1).mean()
    if alpha == 0.0:
        return distill
    if labels is None:
        raise KdbertError("--alpha > 0 mixes in the gold labels, but the batch has none; use labelled data or --alpha 0")
    if student_logits.shape[-1] == 1 and labels.is_floating_point():
        hard = regression_mse(student_logits, labels)
    else:
        hard = F.cross_entropy(student_logits, labels)
    return (1.0 - alpha) * distill + alpha * hard
