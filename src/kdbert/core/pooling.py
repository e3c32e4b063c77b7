"""What a sequence classifier's head reads: the first token ([CLS], the default), the masked mean
of the last hidden states, as sentence-transformers models such as all-MiniLM-L6-v2 were trained, or,
for a sentence pair, a learned cosine of its two sentences encoded apart (``pair``): BERT reads
which tokens are the second sentence's from its token types, RoBERTa, XLM-R and MPNet (no token
types) from the separators between them (:func:`after_first_separator`).

The choice lives in the model's ``config.json`` (``kdbert_pooling: "mean"``; absent: ``cls``), so a
saved model pools the same way wherever kdbert loads or builds it: every load and build point calls
:func:`apply_pooling` (or :func:`pool_like_folder` where a folder gets a new head), which puts a
forward hook on the model's base model (and, for ``pair``, a pre-hook that keeps each sentence's
attention to itself: :func:`pair_attention_mask`). The hooks read the config at each call, so
:func:`set_pooling` switches a built model either way; ONNX exports trace them like any forward.
Question-answering models read every token and are left alone.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch
from torch import nn

from kdbert.errors import KdbertError

POOLING_KEY = "kdbert_pooling"
POOLINGS = ("cls", "mean", "pair")
MEAN_POOLED_TYPES = ("bert", "roberta", "xlm-roberta", "electra", "mpnet", "distilbert", "mobilebert")
"""Model types whose sequence-classification head reads the first token (BERT and MobileBERT through
their pooler output), which the mean can replace."""
SEPARATOR_PAIRED_TYPES = ("roberta", "xlm-roberta", "mpnet")
"""Those whose tokenizers join a pair as ``<s> A </s></s> B </s>`` with no token types, and whose head
reads the first position through dense + tanh + out_proj."""
PAIR_POOLED_TYPES = ("bert", *SEPARATOR_PAIRED_TYPES)
"""Those whose inputs mark a pair's second sentence (BERT: ``token_type_ids`` 1; the others: the
tokens after the first separator) and whose attention takes the mask ``pair`` gives it."""


def masked_mean(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """pooled_b = sum_t m_bt h_bt / max(1, sum_t m_bt): hidden (B, L, H), attention mask m (B, L) -> (B, H)."""
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1)


def pair_product(hidden: torch.Tensor, mask: torch.Tensor, token_types: torch.Tensor) -> torch.Tensor:
    """pooled = H * (u / |u|) * (v / |v|) (B, H), u and v the masked means (:func:`masked_mean`) of the
    first sentence's tokens (mask 1, type 0) and the second's (type 1): hidden (B, L, H), mask and
    types (B, L). Its mean over the H units is cos(u, v), so a linear head reads a learned cosine
    (weights c / H: c * cos(u, v)), as sentence encoders compare two sentences."""
    real = mask.to(torch.bool)
    first, second = real & (token_types == 0), real & (token_types == 1)
    u = torch.nn.functional.normalize(masked_mean(hidden, first), dim=-1)
    v = torch.nn.functional.normalize(masked_mean(hidden, second), dim=-1)
    return hidden.shape[-1] * u * v


def after_first_separator(input_ids: torch.Tensor, separator: int) -> torch.Tensor:
    """The (B, L) token types of pairs joined with separators (input_ids (B, L)): type_t = 1 where a
    separator stands before position t, else 0. ``<s> A </s></s> B </s>`` gives 0 to ``<s> A </s>``
    and 1 to ``</s> B </s>`` (BERT's ``[CLS] A [SEP] B [SEP]`` gives its own token types)."""
    separators = (input_ids == separator).long()
    return ((separators.cumsum(dim=1) - separators) > 0).long()


def separator_of(config) -> int:
    """The separator token id of a :data:`SEPARATOR_PAIRED_TYPES` model: ``sep_token_id``, else
    ``eos_token_id`` (RoBERTa's and MPNet's ``</s>``); refused where its config records neither."""
    separator = getattr(config, "sep_token_id", None)
    separator = getattr(config, "eos_token_id", None) if separator is None else separator
    if not isinstance(separator, int):
        raise KdbertError(f"pair pooling of a {config.model_type} model finds the second sentence after the "
                          "separator, and its config.json records no sep_token_id or eos_token_id; add the "
                          "tokenizer's sep_token_id to it")
    return separator


def second_sentence_marks(config, args: tuple, kwargs: dict) -> torch.Tensor:
    """The (B, L) token types a base model's call gives a pair (1: the second sentence): its
    ``token_type_ids`` (BERT), or :func:`after_first_separator` of its ``input_ids`` (the
    :data:`SEPARATOR_PAIRED_TYPES`)."""
    if config.model_type in SEPARATOR_PAIRED_TYPES:
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if input_ids is None:
            raise KdbertError(f"pair pooling of a {config.model_type} model finds the second sentence after the "
                              "separator in input_ids; pass input_ids, not inputs_embeds")
        return after_first_separator(input_ids, separator_of(config))
    token_types = kwargs.get("token_type_ids")
    if token_types is None:
        raise KdbertError("pair pooling reads which tokens are the second sentence's from token_type_ids; "
                          "pass them (the tokenizer gives them for a sentence pair)")
    return token_types


def pair_attention_mask(mask: torch.Tensor, token_types: torch.Tensor, additive: bool) -> torch.Tensor:
    """Attention that encodes a pair's two sentences apart, as a sentence encoder reads each one:
    allow[b, i, j] = real_bi real_bj [type_bi == type_bj], and a padding position i attends to
    position 0 alone (so no softmax row is empty); (B, 1, L, L) from mask and types (B, L), as bool
    (True: attend; what ``scaled_dot_product_attention`` takes) or ``additive`` (0 or float32's
    minimum: eager attention). A position is real exactly where it attends to itself
    (:func:`real_positions`), position 0 (right padding) included."""
    real = mask.to(torch.bool)
    same = (token_types.unsqueeze(2) == token_types.unsqueeze(1)) & real.unsqueeze(2) & real.unsqueeze(1)
    first = torch.arange(mask.shape[1], device=mask.device) == 0  # (L,): the key at position 0
    allow = (same | (first & ~real.unsqueeze(2))).unsqueeze(1)
    if not additive:
        return allow
    return torch.zeros(allow.shape, dtype=torch.float32, device=mask.device).masked_fill(
        ~allow, torch.finfo(torch.float32).min)


def real_positions(attention: torch.Tensor) -> torch.Tensor:
    """The (B, L) real-token mask of a :func:`pair_attention_mask` (its diagonal)."""
    diagonal = attention[:, 0].diagonal(dim1=-2, dim2=-1)
    return diagonal if diagonal.dtype == torch.bool else diagonal == 0


def pooling_of(config) -> str:
    """The pooling ``config`` records (``cls`` when it records none); an unknown value is refused."""
    pooling = getattr(config, POOLING_KEY, None) or "cls"
    if pooling not in POOLINGS:
        raise KdbertError(f"config.json has {POOLING_KEY} {pooling!r}; use one of {', '.join(POOLINGS)}")
    return pooling


def _mean_pool(base: nn.Module, args: tuple, kwargs: dict, output):
    """Forward hook on a classifier's base model: under mean (or pair) pooling, what the head reads of
    the first token becomes the masked mean of ``last_hidden_state`` (or :func:`pair_product`): the
    pooler output where the base model has a pooler (BERT, MobileBERT: the classifier reads it
    directly, no dense + tanh), else the first position of ``last_hidden_state`` (RoBERTa, XLM-R,
    ELECTRA, MPNet, DistilBERT heads)."""
    pooling = pooling_of(base.config)
    if pooling == "cls":
        return None
    hidden = output.last_hidden_state
    mask = kwargs.get("attention_mask")  # transformers' heads pass it by name; None: every token is real
    mask = torch.ones(hidden.shape[:2], device=hidden.device) if mask is None else mask
    if pooling == "pair":  # the mask is _pair_attention's
        pooled = pair_product(hidden, real_positions(mask), second_sentence_marks(base.config, args, kwargs))
    else:
        pooled = masked_mean(hidden, mask)
    if getattr(output, "pooler_output", None) is not None:
        output.pooler_output = pooled
    else:
        output.last_hidden_state = torch.cat([pooled.unsqueeze(1), hidden[:, 1:]], dim=1)
    return output


def _pair_attention(base: nn.Module, args: tuple, kwargs: dict):
    """Forward pre-hook on a classifier's base model: under pair pooling, its 2-D attention mask becomes
    :func:`pair_attention_mask` (bool for ``sdpa``, additive for ``eager`` attention)."""
    if pooling_of(base.config) != "pair":
        return None
    token_types, mask = second_sentence_marks(base.config, args, kwargs), kwargs.get("attention_mask")
    if mask is None:
        mask = torch.ones_like(token_types)
    implementation = getattr(base.config, "_attn_implementation", None) or "eager"
    if implementation not in ("sdpa", "eager"):
        raise KdbertError(f"pair pooling masks sdpa or eager attention, not {implementation}; load the model with "
                          "attn_implementation='sdpa'")
    return args, {**kwargs, "attention_mask": pair_attention_mask(mask, token_types, implementation == "eager")}


def _is_sequence_classifier(model: nn.Module) -> bool:
    return type(model).__name__.endswith("ForSequenceClassification")


def apply_pooling(model: nn.Module) -> nn.Module:
    """Make ``model`` pool as its config records (a no-op for ``cls`` and for models other than
    sequence classifiers; idempotent); returns it. Mean pooling of an architecture whose head does
    not read the first token, and pair pooling of one whose inputs do not mark the second sentence,
    are refused."""
    pooling = pooling_of(model.config) if _is_sequence_classifier(model) else "cls"
    if pooling == "cls":
        return model
    offered = PAIR_POOLED_TYPES if pooling == "pair" else MEAN_POOLED_TYPES
    if model.config.model_type not in offered:
        raise KdbertError(f"{pooling} pooling is offered for {', '.join(offered)} classifiers, not "
                          f"{model.config.model_type}; use --pooling cls")
    base = model.base_model
    if not any(hook is _mean_pool for hook in base._forward_hooks.values()):
        base.register_forward_hook(_mean_pool, with_kwargs=True)
    if pooling == "pair" and model.config.model_type in SEPARATOR_PAIRED_TYPES:
        separator_of(model.config)  # refused now, not at the first call, where the config has none
    if pooling == "pair" and not any(hook is _pair_attention for hook in base._forward_pre_hooks.values()):
        base.register_forward_pre_hook(_pair_attention, with_kwargs=True)
    return model


def set_pooling(model: nn.Module, pooling: str) -> nn.Module:
    """Record ``pooling`` (``cls``: no record) in ``model``'s config and apply it; returns ``model``."""
    if pooling in ("mean", "pair"):
        setattr(model.config, POOLING_KEY, pooling)
    elif hasattr(model.config, POOLING_KEY):
        delattr(model.config, POOLING_KEY)
    return apply_pooling(model)


class PairRows(nn.Module):
    """A pair-pooled classifier as it is exported: each pair's two sentences run as two rows of one
    batch, the first sentence's tokens (type 0) in row b, the second's in row B + b, moved to the
    front with the positions they had, so attention reads a plain (2B, W) padding mask, W the longer
    sentence, and costs L_a^2 + L_b^2 instead of (L_a + L_b)^2. It computes what the hooks of
    :func:`apply_pooling` compute (:func:`pair_attention_mask`, :func:`pair_product`, the head) with
    no (B, 1, L, L) mask in the graph: in ONNX Runtime, int8, one thread, MRPC's bert-1x384 ran at
    4.98x the teacher against 4.52x with the mask (5.63x reading the pair as one sequence). Inputs
    are padded on the right (kdbert's tokenisers pad so); the model's pooling is ``mean`` while it
    runs (:func:`pair_rows`)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        config, base = self.model.config, self.model.base_model
        real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        marks = second_sentence_marks(config, (), {"input_ids": input_ids, "token_type_ids": token_type_ids})
        first_length = (real & (marks == 0)).sum(dim=1, keepdim=True)  # (B, 1)
        second_length = (real & (marks == 1)).sum(dim=1, keepdim=True)
        width = torch.maximum(first_length.max(), second_length.max())
        steps = torch.narrow(torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0), 1, 0, width)
        first = steps.expand(input_ids.shape[0], -1)  # (B, W): where each row's tokens stand in the pair
        second = (first_length + steps).clamp(max=input_ids.shape[1] - 1)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        if config.model_type != "bert":  # RoBERTa's and MPNet's: counted over non-padding ids, from the padding id
            counted = (input_ids != config.pad_token_id).long()
            positions = counted.cumsum(dim=1) * counted + config.pad_token_id
        inputs = {"input_ids": torch.cat([input_ids.gather(1, first), input_ids.gather(1, second)]),
                  "attention_mask": torch.cat([steps < first_length, steps < second_length]).long(),
                  "position_ids": torch.cat([positions.gather(1, first), positions.gather(1, second)])}
        if config.model_type == "bert":
            inputs["token_type_ids"] = torch.cat([torch.zeros_like(first), torch.ones_like(second)])
        output = base(**inputs)
        means = output.pooler_output if getattr(output, "pooler_output", None) is not None else output.last_hidden_state[:, 0]
        u, v = torch.nn.functional.normalize(means, dim=-1).chunk(2)
        pooled = means.shape[-1] * u * v  # pair_product
        if config.model_type == "bert":
            return self.model.classifier(self.model.dropout(pooled))
        return self.model.classifier(pooled.unsqueeze(1))  # dense + tanh + out_proj read the first position


@contextlib.contextmanager
def pair_rows(model: nn.Module):
    """``model`` as it is exported (:class:`PairRows` for a pair-pooled sequence classifier, itself
    otherwise), its pooling ``mean`` meanwhile (so its base model's hook gives each row's masked mean)."""
    if not _is_sequence_classifier(model) or pooling_of(model.config) != "pair":
        yield model
        return
    set_pooling(model, "mean")
    try:
        yield PairRows(model)
    finally:
        set_pooling(model, "pair")


LINEAR_SCALE = 0.01
"""The dense layer of a tanh head that starts as a cosine: tanh(0.01 x) = 0.01 x (1 - 3e-5 x^2 ...),
so the head reads its input linearly to 1e-4 where |x| <= 2 (x = H u_i v_i: 1 on average)."""


def pool_pairs(model: nn.Module) -> nn.Module:
    """``model`` (a :data:`PAIR_POOLED_TYPES` classifier) set to pair pooling with a head that starts
    as a cosine, since what it reads is no longer the vector it learned on; returns it. A regression
    reads cos(u, v); a classifier's logits start at 0 (its first steps point each class's row where
    the data says; :func:`cosine_head` with fitted scales starts them where a threshold on the cosine
    puts them)."""
    set_pooling(model, "pair")
    classes = model.config.num_labels
    return cosine_head(model, torch.ones(1) if classes == 1 else torch.zeros(classes), torch.zeros(classes))


def cosine_head(model: nn.Module, scales: torch.Tensor, biases: torch.Tensor) -> nn.Module:
    """Set a pair-pooled classifier's head so that logit_c = a_c cos(u, v) + b_c (``scales`` a and
    ``biases`` b: (C,)); returns ``model``. A linear head (BERT) reads x = H u v (:func:`pair_product`):
    W_c = a_c / H, b_c. A dense + tanh + out_proj head (RoBERTa, MPNet): dense s I (s =
    :data:`LINEAR_SCALE`, so tanh reads linearly), out_proj_c = a_c / (H s), b_c, and with every a_c
    zero, dense I (the identity a classifier's first steps learn through)."""
    head = model.classifier
    scales, biases = scales.to(torch.float32), biases.to(torch.float32)
    with torch.no_grad():
        if isinstance(head, nn.Linear):
            head.weight.copy_((scales / head.in_features).unsqueeze(1).expand_as(head.weight))
            head.bias.copy_(biases)
            return model
        width = head.dense.out_features
        scale = 1.0 if not scales.any() else LINEAR_SCALE
        head.dense.weight.copy_(scale * torch.eye(width, head.dense.in_features))
        nn.init.zeros_(head.dense.bias)
        head.out_proj.weight.copy_((scales / (width * scale)).unsqueeze(1).expand_as(head.out_proj.weight))
        head.out_proj.bias.copy_(biases)
    return model


def inherit_pooling(config, source_config):
    """``config`` with the pooling ``source_config`` (None: none) records, for a student built from a
    teacher; returns it."""
    if pooling_of(source_config) != "cls":
        setattr(config, POOLING_KEY, pooling_of(source_config))
    return config


def _sentence_transformers_pooling(folder: Path) -> Path | None:
    """The config of a sentence-transformers folder's Pooling module (``modules.json`` names its folder,
    by default ``1_Pooling``), None where there is none."""
    modules = folder / "modules.json"
    try:
        listed = json.loads(modules.read_text()) if modules.is_file() else []
    except (OSError, ValueError) as err:
        raise KdbertError(f"could not read {modules}: {err}") from None
    paths = [module.get("path", "") for module in listed if str(module.get("type", "")).endswith(".Pooling")]
    config = folder / (paths[0] if paths else "1_Pooling") / "config.json"
    return config if config.is_file() else None


def choose_pooling(requested: str | None, path: str, config) -> tuple[str, str]:
    """The pooling of a model loaded from ``path`` (its ``config`` as saved) to train a head on, and
    why: ``requested`` (``cls`` / ``mean``); else (``None`` / ``auto``) what ``config`` records (a model
    kdbert fine-tuned keeps its pooling); else ``mean`` where the folder's sentence-transformers Pooling
    module pools by mean tokens alone and kdbert can mean-pool the architecture; else ``cls``."""
    if requested in POOLINGS:
        return requested, f"--pooling {requested}"
    if getattr(config, POOLING_KEY, None) is not None:
        return pooling_of(config), f"{path} records {POOLING_KEY} {pooling_of(config)} in its config.json"
    file = _sentence_transformers_pooling(Path(path)) if Path(path).is_dir() else None
    if file is None:
        return "cls", f"{path} has no sentence-transformers pooling config"
    try:
        modes = sorted(key for key, value in json.loads(file.read_text()).items()
                       if key.startswith("pooling_mode_") and value is True)
    except (OSError, ValueError, AttributeError) as err:
        raise KdbertError(f"could not read {file}: {err}") from None
    if modes != ["pooling_mode_mean_tokens"]:
        return "cls", f"{file} pools by {', '.join(modes) or 'nothing'}, not mean tokens alone"
    if getattr(config, "model_type", None) not in MEAN_POOLED_TYPES:
        return "cls", f"{file} pools by mean tokens, which kdbert offers for {', '.join(MEAN_POOLED_TYPES)} only"
    return "mean", f"{file} pools by mean tokens"


def pool_like_folder(model: nn.Module, path: str) -> nn.Module:
    """``model``, loaded from ``path`` (its config as saved) for a new head, pooling as
    :func:`choose_pooling` decides without a request; returns it."""
    return set_pooling(model, choose_pooling(None, path, model.config)[0])
