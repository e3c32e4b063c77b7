"""Distillation objectives as pure functions of tensors.

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


def _check_same_shape(what: str, student: torch.Tensor, teacher: torch.Tensor, fix: str) -> None:
    if student.shape != teacher.shape:
        raise KdbertError(
            f"{what}: student shape {tuple(student.shape)} != teacher shape "
            f"{tuple(teacher.shape)}; {fix}"
        )


def _select_tokens(x: torch.Tensor, mask: torch.Tensor, what: str) -> torch.Tensor:
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
    _check_same_shape(
        "hidden_mse", student_hidden, teacher_hidden,
        "student and teacher must see the same batch (and the projection must output d_t)",
    )
    if reduction == "mean":
        return F.mse_loss(student_hidden, teacher_hidden)
    if reduction == "masked-mean":
        if attention_mask is None:
            raise KdbertError("hidden_mse: reduction='masked-mean' needs attention_mask (B, L)")
        diff = _select_tokens(student_hidden - teacher_hidden, attention_mask, "hidden_mse")
        return diff.pow(2).mean()
    raise KdbertError(
        f"hidden_mse: unknown reduction {reduction!r}; use 'mean' or 'masked-mean'"
    )


def attention_mse(
    student_scores: torch.Tensor,
    teacher_scores: torch.Tensor,
    attention_mask: torch.Tensor,
    reduction: str = "tinybert-reference",
    head_average: bool = False,
) -> torch.Tensor:
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
    _check_same_shape(
        "attention_mse", student_scores, teacher_scores,
        "student and teacher must see the same batch",
    )
    if reduction == "tinybert-reference":
        zero = torch.zeros((), dtype=student_scores.dtype, device=student_scores.device)
        s = torch.where(student_scores <= REFERENCE_SCORE_THRESHOLD, zero, student_scores)
        t = torch.where(teacher_scores <= REFERENCE_SCORE_THRESHOLD, zero, teacher_scores)
        return F.mse_loss(s, t)
    if reduction == "masked-mean":
        b, _, lq, lk = student_scores.shape
        if attention_mask.shape != (b, lk) or lq != lk:
            raise KdbertError(
                f"attention_mse: attention_mask shape {tuple(attention_mask.shape)} does not "
                f"fit scores of shape {tuple(student_scores.shape)}; pass the (B, L) mask"
            )
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
    """
    _check_same_shape("soft_cross_entropy", student_logits, teacher_logits,
                      "student and teacher need the same number of labels")
    targets = F.softmax(teacher_logits / temperature, dim=-1)
    return (-targets * F.log_softmax(student_logits / temperature, dim=-1)).mean()


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
    """
    if reduction not in ("batchmean", "mean"):
        raise KdbertError(f"kl_div_loss: unknown reduction {reduction!r}; use 'batchmean' or 'mean'")
    _check_same_shape("kl_div_loss", student_logits, teacher_logits,
                      "student and teacher need the same number of labels / vocabulary")
    if mask is not None:
        student_logits = _select_tokens(student_logits, mask, "kl_div_loss")
        teacher_logits = _select_tokens(teacher_logits, mask, "kl_div_loss")
    n_classes = student_logits.shape[-1]
    log_q = F.log_softmax(student_logits.reshape(-1, n_classes) / temperature, dim=-1)
    p = F.softmax(teacher_logits.reshape(-1, n_classes) / temperature, dim=-1)
    return temperature**2 * F.kl_div(log_q, p, reduction=reduction)


def logit_mse(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """MSE between logits (Distilled BiLSTM; DistilBERT's optional alpha_mse term).

    ``mean_{n,c} (z_s - z_t)^2`` over (N, C) logits. The BiLSTM paper writes the squared L2
    norm per example (a sum over classes); this mean divides it by C. DistilBERT's
    ``alpha_mse`` sums and divides by the number of tokens instead.
    """
    _check_same_shape("logit_mse", student_logits, teacher_logits,
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
    _check_same_shape("patience_loss", student_cls, teacher_cls,
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
    _check_same_shape("cosine_hidden_loss", student_hidden, teacher_hidden,
                      "the cosine term needs a student of the teacher's width")
    s = _select_tokens(student_hidden, attention_mask, "cosine_hidden_loss")
    t = _select_tokens(teacher_hidden, attention_mask, "cosine_hidden_loss")
    return (1.0 - F.cosine_similarity(s, t, dim=-1)).mean()


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


# ----------------------------------------------------------------------------- MobileBERT
# Layer-wise transfer terms of MobileBERT (Sun et al., 2020, section 3.5) and its pre-training
# distillation. The official code (TF1 google-research/mobilebert, TF2 tensorflow/models
# official/projects/mobilebert) multiplies each term by a factor and divides by the number of
# transferred layers L; kdbert.methods.mobilebert_transfer.TransferWeights holds those factors.


def _reduce_tokens(per_token: torch.Tensor, attention_mask: torch.Tensor | None, reduction: str, what: str) -> torch.Tensor:
    """Mean of a (B, L) per-token loss over all tokens ("mean") or non-pad ones ("masked-mean")."""
    if reduction == "mean":
        return per_token.mean()
    if reduction == "masked-mean":
        if attention_mask is None:
            raise KdbertError(f"{what}: reduction='masked-mean' needs attention_mask (B, L)")
        return _select_tokens(per_token, attention_mask, what).mean()
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
    _check_same_shape(
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


def attention_kl(
    student_scores: torch.Tensor,
    teacher_scores: torch.Tensor,
    attention_mask: torch.Tensor,
    reduction: str = "reference",
    head_average: bool = False,
) -> torch.Tensor:
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
    must be equal.
    """
    h_s, h_t = student_scores.shape[1], teacher_scores.shape[1]
    if h_s != h_t and not head_average:
        raise KdbertError(
            f"attention_kl: student has {h_s} attention heads, teacher has {h_t}; use a student "
            f"with {h_t} heads or pass head_average=True (averages groups of teacher heads)"
        )
    b, _, lq, lk = student_scores.shape
    if attention_mask.shape != (b, lk) or lq != lk:
        raise KdbertError(
            f"attention_kl: attention_mask shape {tuple(attention_mask.shape)} does not fit scores "
            f"of shape {tuple(student_scores.shape)}; pass the (B, L) mask of the batch"
        )
    valid = attention_mask.bool()
    if not valid.any(dim=1).all():
        raise KdbertError("attention_kl: an example has no valid token; check the batch's attention mask")
    keys = valid[:, None, None, :]
    teacher_p = F.softmax(teacher_scores.masked_fill(~keys, float("-inf")), dim=-1)
    if head_average:
        teacher_p = average_head_groups(teacher_p, h_s)
    _check_same_shape("attention_kl", student_scores, teacher_p, "student and teacher must see the same batch")
    student_log_p = F.log_softmax(student_scores.masked_fill(~keys, float("-inf")), dim=-1)
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
    with no masked position gives 0 (still attached to the graph).
    """
    if not 0.0 <= ground_truth_ratio <= 1.0:
        raise KdbertError(f"ground_truth_ratio {ground_truth_ratio} must lie in [0, 1]")
    _check_same_shape("mlm_distillation_loss", student_logits, teacher_logits,
                      "student and teacher need the same vocabulary and the same batch")
    selected = labels != -100
    if not selected.any():
        return student_logits.sum() * 0.0
    log_q = F.log_softmax(student_logits[selected], dim=-1)
    soft = -(F.softmax(teacher_logits[selected], dim=-1) * log_q).sum(dim=-1).mean()
    hard = masked_lm_cross_entropy(student_logits, labels)
    return ground_truth_ratio * hard + (1.0 - ground_truth_ratio) * soft


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
    _check_same_shape("bilstm_distill_loss", student_logits, teacher_logits,
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
