"""The HF family: any transformers model (BERT, DistilBERT, MobileBERT and every other encoder with
a sequence-classification head), saved with ``save_pretrained`` or named by a hub id.

It is asked last, so it takes every folder and name another family does not claim. Its models
read the tokenizer's ``input_ids``, ``attention_mask`` and, when ``forward`` names it,
``token_type_ids``; FLOPs are counted by ``FlopCounterMode``.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate, Family, InputSpec, ShapeContext, register_family

TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
SYNTHETIC_ROWS = 64
FUSABLE = ("bert", "distilbert")  # model types ORT's "bert" transformer fusions apply to


def _looks_local(path: str) -> bool:
    """True when ``path`` can only be a folder (not an ``org/name`` hub id)."""
    return os.path.isabs(path) or path.startswith((".", "~")) or path.count("/") > 1 or (os.sep != "/" and os.sep in path)


def _max_positions(model: nn.Module) -> int | None:
    """The longest sequence ``model`` takes: ``max_position_embeddings``, less the rows up to the
    padding row where positions are numbered after it (RoBERTa, XLM-R, MPNet: from padding_idx + 1,
    so roberta-base's 514 rows take 512 tokens)."""
    limit = getattr(model.config, "max_position_embeddings", None)
    table = getattr(getattr(getattr(model, "base_model", model), "embeddings", None), "position_embeddings", None)
    padding = getattr(table, "padding_idx", None)
    return limit if limit is None or padding is None else limit - padding - 1


class HFFamily(Family):
    name = "hf"
    model_classes = (PreTrainedModel,)

    def recognises(self, folder: Path) -> bool:
        return True

    def load(self, folder: Path, task=None) -> tuple[nn.Module, Any]:
        """A fine-tuned classifier (or QA model) with its tokenizer; without ``task``, with the head it
        was saved with."""
        from transformers import AutoConfig

        from kdbert.core.loading import (check_classifier_head, has_qa_head, load_question_answerer,
                                         load_sequence_classifier, load_task_model, load_tokenizer)

        path = str(folder)
        if task is not None:
            model = load_task_model(path, task, new_head_ok=False)
        else:
            try:
                config = AutoConfig.from_pretrained(path)
            except (OSError, ValueError) as err:
                raise KdbertError(f"{folder}/config.json is not a model config: {str(err).splitlines()[0]}") from None
            if has_qa_head(config):
                model = load_question_answerer(path, new_head_ok=False)
            else:
                check_classifier_head(path, config, config.num_labels)
                model = load_sequence_classifier(path, config.num_labels, new_head_ok=False)
        return model, load_tokenizer(path)

    def load_for_bench(self, path: str) -> nn.Module:
        """The classifier (or QA model) in ``path`` (a folder or hub id), else its bare encoder."""
        from transformers import AutoConfig, AutoModel, AutoModelForQuestionAnswering, AutoModelForSequenceClassification

        from kdbert.core.loading import has_qa_head
        from kdbert.core.pooling import apply_pooling

        local = Path(path).expanduser()
        missing = f"model path {path} does not exist; pass a folder saved with save_pretrained or a hub id"
        if not local.exists() and _looks_local(path):
            raise KdbertError(missing)
        source = str(local) if local.exists() else path
        try:
            try:
                if has_qa_head(AutoConfig.from_pretrained(source)):
                    return AutoModelForQuestionAnswering.from_pretrained(source)
                return apply_pooling(AutoModelForSequenceClassification.from_pretrained(source))
            except (ValueError, KeyError):  # no classification head for this architecture
                return AutoModel.from_pretrained(source)
        except (OSError, ValueError) as err:
            if not local.exists():
                raise KdbertError(missing) from err
            first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise KdbertError(f"could not load a model from {path} ({first_line}); "
                              "pass a folder saved with save_pretrained") from err

    def load_encoder(self, folder: Path):
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(str(folder))
        except (OSError, ValueError, TypeError):
            raise KdbertError(f"the export in {folder} has no tokenizer beside it; export with `kdbert export` "
                              "(it saves the tokenizer) or copy the model's tokenizer files into that folder") from None

    def from_config(self, folder: Path) -> nn.Module:
        from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoModelForSequenceClassification

        from kdbert.core.loading import has_qa_head
        from kdbert.core.pooling import apply_pooling

        config = AutoConfig.from_pretrained(str(folder))
        head = AutoModelForQuestionAnswering if has_qa_head(config) else AutoModelForSequenceClassification
        return apply_pooling(head.from_config(config))

    def input_spec(self, model: nn.Module) -> InputSpec:
        """The inputs ``forward`` names, the position limit, the vocabulary size, and the graphs:
        ``fused`` too where ORT's transformer optimiser knows the architecture."""
        accepted = inspect.signature(model.forward).parameters
        graphs = ("torchscript", "fused", "dynamo") if self.fusion_settings(model) else ("torchscript", "dynamo")
        return InputSpec(tuple(n for n in TOKEN_INPUTS if n in accepted), _max_positions(model),
                         model.config.vocab_size, graphs)

    @contextlib.contextmanager
    def export_form(self, model: nn.Module, exporter: str = "torchscript"):
        """The model with eager attention while it is traced: ORT's optimisers recognise its
        MatMul-Softmax-MatMul pattern, not the one ``scaled_dot_product_attention`` exports to; for
        the TorchScript exporter, a pair-pooled classifier's two sentences as two rows of one batch
        (:class:`~kdbert.core.pooling.PairRows`, whose row width depends on the data, which the
        dynamo exporter does not trace: its graph keeps the pair's attention mask)."""
        from kdbert.core.pooling import pair_rows

        previous = getattr(getattr(model, "config", None), "_attn_implementation", None)
        switch = previous not in (None, "eager") and hasattr(model, "set_attn_implementation")
        if switch:
            model.set_attn_implementation("eager")
        try:
            with pair_rows(model) if exporter == "torchscript" else contextlib.nullcontext(model) as traced:
                yield traced
        finally:
            if switch:
                model.set_attn_implementation(previous)

    def fusion_settings(self, model: nn.Module) -> dict | None:
        """ORT's ``bert`` fusions for BERT and DistilBERT (heads and width from the config)."""
        config = getattr(model, "config", None)
        if getattr(config, "model_type", None) not in FUSABLE:
            return None
        return {"model_type": "bert", "num_heads": getattr(config, "num_attention_heads", None) or config.n_heads,
                "hidden_size": getattr(config, "hidden_size", None) or config.dim}

    def candidates(self, context: ShapeContext) -> list[Candidate]:
        """Students of the teacher's architecture (depth x width, weights selected from the teacher's:
        :mod:`kdbert.families.selection`), and teacher-matched MobileBERTs for a BERT teacher."""
        from kdbert.families import bert, mobilebert, selection

        layout = selection.layout_of(context.teacher_config)
        if layout is None:
            return []
        if layout is selection.LAYOUTS["bert"]:
            return bert.speed_candidates(context) + mobilebert.speed_candidates(context)
        return selection.speed_candidates(context)

    def candidates_note(self, context: ShapeContext) -> str | None:
        """Why a teacher kdbert cannot cut gets no candidates of its architecture."""
        from kdbert.families.selection import uncut_note

        return uncut_note(context.teacher_config)

    def evaluator(self, data, encoder, max_seq_len: int | None, batch_size: int):
        from kdbert.core.evaluators import task_evaluator

        return task_evaluator(data, encoder, max_seq_len, batch_size)

    def synthetic_rows(self, spec: InputSpec, seq_len: int, encoder, batch_size: int):
        """64 rows of random ids (>= 1) and lengths 2..seq_len, padded with the tokenizer's pad id."""
        from kdbert.data.batching import EncodedDataset, PaddingCollator

        generator = torch.Generator().manual_seed(0)
        features = []
        for _ in range(SYNTHETIC_ROWS):
            length = int(torch.randint(2, seq_len + 1, (1,), generator=generator))
            ids = torch.randint(1, spec.vocab_size, (length,), generator=generator).tolist()
            features.append({"input_ids": ids, "attention_mask": [1] * length, "token_type_ids": [0] * length})
        dataset, collator = EncodedDataset(features), PaddingCollator(getattr(encoder, "pad_token_id", 0) or 0)
        return dataset, lambda model: model.predict(dataset, collator, batch_size)


register_family(HFFamily(), built_in=True)


# ----------------------------------------------------------------------------- students users bring
def _task_config(path: str, context: ShapeContext, depth: int | None = None, ffn: int | None = None):
    """The folder's config with the task's outputs (one for regression, start and end for QA) and,
    given ``depth``, that many layers; given ``ffn``, that many FFN units per layer."""
    from transformers import AutoConfig

    from kdbert.families.selection import layout_of

    config = AutoConfig.from_pretrained(path, **({"num_hidden_layers": depth} if depth else {}))
    if ffn:
        setattr(config, layout_of(config).ffn_size, ffn)
    config.num_labels = 2 if context.question_answering else context.num_labels
    if context.num_labels == 1 and not context.question_answering:
        config.problem_type = "regression"
    return config


def _task_class(context: ShapeContext):
    from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification

    return AutoModelForQuestionAnswering if context.question_answering else AutoModelForSequenceClassification


def user_candidate(path: str, name: str, own_tokenizer: bool = False, start: str = "user",
                   depth: int | None = None, ffn: int | None = None) -> Candidate:
    """A student the user brings (a BERT-family folder or hub id) as a candidate called ``name``,
    reading the teacher's tokenizer or, with ``own_tokenizer``, the folder's (checked by the caller):
    timed with random weights of its config, distilled from its own weights (``start``) with a fresh
    task head, pooling as the folder says (:func:`kdbert.core.pooling.pool_like_folder`).

    ``depth``: the folder's model cut to that many layers, its first and last and the rest evenly
    between (:func:`~kdbert.families.selection.ends_and_between`; copied by :func:`~kdbert.families.
    selection.select_teacher_weights` with the folder's model as the teacher), every other weight its own;
    ``ffn``: each layer keeps that many of its FFN units, those writing most into the residual stream
    on the task's training texts (:func:`~kdbert.families.importance.ffn_activation_importance`)."""
    from transformers import AutoConfig

    from kdbert.core.loading import load_tokenizer
    from kdbert.core.pooling import pool_like_folder
    from kdbert.families.importance import ffn_activation_importance
    from kdbert.families.selection import ends_and_between, layout_of, select_teacher_weights

    config = AutoConfig.from_pretrained(path)
    total = getattr(config, "num_hidden_layers", 0)
    if depth is not None and not 0 < depth <= total:
        raise KdbertError(f"cannot cut {path} to {depth} layers: it has {total}")
    layout = layout_of(config)
    if ffn is not None and (layout is None or not 0 < ffn <= getattr(config, layout.ffn_size)):
        raise KdbertError(f"cannot cut {path}'s FFN to {ffn} units: "
                          + (f"it has {getattr(config, layout.ffn_size)}" if layout else
                             f"kdbert cannot cut a {config.model_type!r} model"))
    shape = {"path": str(path), "model_type": config.model_type,
             **({"num_hidden_layers": depth or total} if hasattr(config, "num_hidden_layers") else {}),
             **({"hidden_size": config.hidden_size} if hasattr(config, "hidden_size") else {}),
             **({"intermediate_size": ffn} if ffn else {}),
             **({"tokenizer": "own"} if own_tokenizer else {})}

    def random_model(context: ShapeContext):
        return pool_like_folder(_task_class(context).from_config(_task_config(path, context, depth, ffn)), path)

    def tokenizer_of(context: ShapeContext):
        return load_tokenizer(path) if own_tokenizer else context.tokenizer

    def build(context: ShapeContext):
        return random_model(context), tokenizer_of(context)

    def own_weights(teacher, context: ShapeContext):
        full = _task_class(context).from_pretrained(path, config=_task_config(path, context),
                                                    ignore_mismatched_sizes=True)
        if (depth is None or depth == total) and ffn is None:
            return pool_like_folder(full, path)
        scores = ffn_activation_importance(full, layout, tokenizer_of(context), list(context.texts)) if ffn else None
        cut = random_model(context)
        select_teacher_weights(cut, full, layers=ends_and_between(depth or total, total), ffn_scores=scores)
        return cut

    return Candidate(name, "hf", tuple(shape.items()), build, own_weights, start=start,
                     tokenizer=str(path) if own_tokenizer else None)
