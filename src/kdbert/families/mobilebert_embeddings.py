"""A student's embedding layer fitted to a BERT teacher's, and how distinct embeddings are.

MobileBERT factorises its word embeddings (a k-wide table, a trigram transform to the hidden
width) and may replace LayerNorm by NoNorm, so copying same-named tensors from a BERT teacher
leaves a student whose words all look alike; :func:`fit_embeddings_to_teacher` fits the whole
layer instead, and :func:`embedding_output_cosine` measures the result.
"""

from __future__ import annotations

import re

import torch
from transformers import PreTrainedModel

from kdbert.errors import KdbertError

_BASE_PREFIX = re.compile(r"^(bert|mobilebert|distilbert)\.")


def strip_prefix(name: str) -> str:
    """A parameter name without its base-model prefix (``bert.``, ``mobilebert.``, ``distilbert.``)."""
    return _BASE_PREFIX.sub("", name)


# Word ids and positions whose teacher embedding sums estimate the LayerNorm scale folded into NoNorm.
_SCALE_WORDS, _SCALE_POSITIONS = 4096, 16


def _teacher_embedding_tables(teacher: PreTrainedModel) -> dict[str, torch.Tensor] | None:
    """The teacher's word / position / token-type tables and LayerNorm (BERT names), or None."""
    tensors = {strip_prefix(n): p for n, p in teacher.state_dict().items()}
    names = {"word": "embeddings.word_embeddings.weight", "position": "embeddings.position_embeddings.weight",
             "type": "embeddings.token_type_embeddings.weight", "gamma": "embeddings.LayerNorm.weight",
             "beta": "embeddings.LayerNorm.bias"}
    if not all(name in tensors for name in names.values()):
        return None
    return {key: tensors[name].detach().float() for key, name in names.items()}


def can_fit_embeddings(student: PreTrainedModel, teacher: PreTrainedModel) -> bool:
    """Whether :func:`fit_embeddings_to_teacher` applies: a MobileBERT student whose embedding
    output, position and token-type tables have the teacher's width and vocabulary, and whose
    word-table rank fits the teacher's table (k <= min(V, d))."""
    config = student.config
    tables = _teacher_embedding_tables(teacher)
    if getattr(config, "model_type", None) != "mobilebert" or tables is None:
        return False
    word, position, token_type = tables["word"], tables["position"], tables["type"]
    return (word.shape[0] == config.vocab_size and word.shape[1] == config.hidden_size
            and config.embedding_size <= min(word.shape)
            and position.shape[0] >= config.max_position_embeddings and token_type.shape[0] >= config.type_vocab_size)


def _centred(x: torch.Tensor) -> torch.Tensor:
    """Each row minus its mean: what LayerNorm's centring does to a sum of such rows."""
    return x - x.mean(dim=-1, keepdim=True)


@torch.no_grad()
def fit_embeddings_to_teacher(student: PreTrainedModel, teacher: PreTrainedModel) -> dict:
    """Fit a MobileBERT student's embedding layer to a BERT teacher's, in place.

    Teacher: ``LN(E[w] + P[p] + T[t]) * g + b`` with ``E`` (V x d). Student: ``norm(W [E_s[w+1];
    E_s[w]; E_s[w-1]] + c + P_s[p] + T_s[t])`` with ``E_s`` (V x k) and ``W`` (d x 3k; one slot
    without trigram input). The word table is a rank-k truncated SVD of the row-centred ``E``:
    ``E_c ~ U_k S_k V_k^T``, ``E_s = U_k S_k^1/2`` and the current-word slot of ``W`` is ``V_k S_k^1/2``
    (neighbour slots and ``c`` zero), so ``W ... ~ E_c[w]``; when k = d without trigram input the
    table is ``E`` itself. Position and token-type tables are the teacher's. With NoNorm (``x * w
    + b``) there is no normalisation, so the tables are row-centred (LN's centring, exactly) and
    ``w = g / sigma``, ``b = b`` where sigma is the mean standard deviation of the student's own
    (centred, low-rank) sums ``E_s[w] W + P[p] + T[0]`` over 4096 evenly spaced words x 16
    positions: LN's scaling, on average. A LayerNorm student copies ``g`` and ``b``.

    Returns what was done: rank, the share of ``E_c``'s squared norm the rank keeps, sigma.
    """
    tables = _teacher_embedding_tables(teacher)
    embeddings = getattr(student, student.base_model_prefix).embeddings
    config = student.config
    no_norm = config.normalization_type == "no_norm"
    k, positions, types = config.embedding_size, config.max_position_embeddings, config.type_vocab_size
    word, position, token_type = tables["word"], tables["position"][:positions], tables["type"][:types]
    if no_norm:
        word, position, token_type = _centred(word), _centred(position), _centred(token_type)
    report: dict = {"rank": k, "normalization": config.normalization_type}
    projected = config.trigram_input or k != config.hidden_size
    if projected:
        u, s, vh = torch.linalg.svd(word, full_matrices=False)
        # A singular value at rounding level is a zero one (a centred table has rank <= d - 1): its
        # vectors are whatever the LAPACK build picked, and AdamW would turn the gradients they
        # give (rounding noise) into full steps. Such directions start at zero instead.
        s = torch.where(s > s[0] * max(word.shape) * torch.finfo(s.dtype).eps, s, torch.zeros_like(s))
        # Each singular pair's sign is arbitrary (LAPACK builds differ): fix it so that the largest
        # entry of each column of u is positive, as scikit-learn's svd_flip does.
        signs = torch.sign(u.gather(0, u.abs().argmax(dim=0, keepdim=True))).squeeze(0)
        u, vh = u * signs, vh * signs[:, None]
        root = s[:k].sqrt()
        embeddings.word_embeddings.weight.copy_(u[:, :k] * root)
        transform = embeddings.embedding_transformation
        slot = k if config.trigram_input else 0
        transform.weight.zero_()
        transform.weight[:, slot:slot + k] = (vh[:k].T * root).to(transform.weight.dtype)
        transform.bias.zero_()
        report["energy_kept"] = round(float((s[:k] ** 2).sum() / (s ** 2).sum()), 4)
        word = (u[:, :k] * s[:k]) @ vh[:k]  # what the student's words now are
    else:
        embeddings.word_embeddings.weight.copy_(word)
    embeddings.position_embeddings.weight.copy_(position)
    embeddings.token_type_embeddings.weight.copy_(token_type)
    gamma, beta = tables["gamma"], tables["beta"]
    if no_norm:
        words = word[:: max(1, word.shape[0] // _SCALE_WORDS)]
        places = position[:: max(1, positions // _SCALE_POSITIONS)]
        sums = words[:, None, :] + places[None, :, :] + token_type[0]
        sigma = float(sums.std(dim=-1, unbiased=False).mean())
        gamma = gamma / sigma
        report["layer_norm_scale"] = round(sigma, 4)
    embeddings.LayerNorm.weight.copy_(gamma)
    embeddings.LayerNorm.bias.copy_(beta)
    return report


@torch.no_grad()
def embedding_output_cosine(model: PreTrainedModel, token_ids: list[int]) -> float:
    """Mean cosine between the embedding-layer outputs of different tokens (1.0: collapsed).

    Each id is embedded alone at position 0 with token type 0 (input shape (n, 1)), so the
    outputs differ only by word; the mean is over the n(n-1) ordered pairs of different ids.
    Works for BERT-style and MobileBERT models (``<base>.embeddings(input_ids=...)``).
    """
    if len(token_ids) < 2:
        raise KdbertError("embedding_output_cosine needs at least two token ids")
    base = getattr(model, model.base_model_prefix, model)
    was_training = base.training
    base.eval()
    outputs = base.embeddings(input_ids=torch.tensor(token_ids, device=base.device).unsqueeze(1)).squeeze(1).float()
    base.train(was_training)
    unit = torch.nn.functional.normalize(outputs, dim=-1)
    n = len(token_ids)
    return float(((unit @ unit.T).sum() - n) / (n * (n - 1)))
