"""Student families: what kdbert asks about a kind of model, answered by the family that owns it.

A family (HF encoders, the distilled BiLSTM, one of your own) is one :class:`Family` object.
The deployment side (``kdbert export``, ``bench``, ``evaluate``, ``report``) asks the registry
which family a folder (:func:`family_of_folder`) or a model (:func:`family_of_model`) belongs
to, and the family answers: how to load it and what encodes its text, what inputs it takes
(:class:`InputSpec`), its FLOPs, how to score it on a task, and the rows its export is checked
on. Nothing outside a family's own module tests what kind of model it holds.

Adding a family: subclass :class:`Family` in its own module (``families/<name>.py`` or a
package) and call :func:`register_family` there; a built-in family adds its module to
:data:`BUILT_IN`. Families registered later are asked first; the HF family, which takes any
folder with a ``config.json`` and any hub id, is asked last.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from kdbert.core.trace import output_logits
from kdbert.errors import KdbertError

BUILT_IN = ("kdbert.families.hf", "kdbert.families.bilstm.family")
"""Modules of the built-in families, imported on the first lookup (each registers itself)."""

__all__ = ["InputSpec", "Family", "ShapeContext", "Candidate", "register_family", "families", "family_of_folder",
           "family_of_model", "example_inputs", "count_matmul_flops", "Logits", "TorchRunner"]


@dataclass(frozen=True)
class InputSpec:
    """What a classifier takes: int64 tensors of shape (batch, sequence) named ``names``.

    ``names`` is a subset of ``input_ids``, ``attention_mask``, ``token_type_ids`` (in that
    order), or a word-level student's inputs, where names ending in ``_b`` (a pair's second
    sentence) have a length axis of their own; ``max_positions`` is the longest sequence the
    model accepts (``None``: no limit); ``vocab_size`` bounds the ids. ``graphs``: the kinds of
    ONNX graph the model exports to (:data:`kdbert.deploy.graphs.GRAPHS`), its default first.
    """

    names: tuple[str, ...]
    max_positions: int | None
    vocab_size: int
    graphs: tuple[str, ...] = ("torchscript", "dynamo")

    def length_axis(self, name: str) -> str:
        """The name of input ``name``'s sequence axis: ``sequence``, or ``sequence_b`` for a pair's second text."""
        return "sequence_b" if name.endswith("_b") else "sequence"


@dataclass(frozen=True)
class ShapeContext:
    """What a student shape is built for: the teacher's config (vocabulary, positions), its
    tokenizer, the task's outputs and sentence count, its training texts (word vocabularies), the
    size of the word vectors word-level students start from (None: none given), whether the
    task is question answering (start and end logits per token), and the word vectors themselves
    (a file or ``encoder:MODEL``; None: not named, only their size known), from which a word-level
    student's vocabulary also takes their most frequent words; the teacher's units ranked by
    importance on the task, which students of its architecture keep (None: evenly spaced); and,
    without them, which teacher layers those students copy (``layer_map``: ``uniform``, g(m) =
    ceil(m N / M); ``ends``, the first, the last and evenly between:
    :func:`~kdbert.families.selection.ends_and_between`; ``bottom``, the first M:
    :func:`~kdbert.families.selection.first_layers`); and whether they start with the teacher's task
    head (``head``: ``teacher``) or a fresh one (``fresh``)."""

    teacher_config: Any
    tokenizer: Any
    num_labels: int
    pair: bool
    texts: tuple[str, ...] = ()
    word_vector_dim: int | None = None
    question_answering: bool = False
    word_vectors: str | None = None
    importance: Any = None  # the teacher's units ranked on the task (kdbert.families.importance), or None
    layer_map: str = "uniform"
    head: str = "fresh"


@dataclass(frozen=True)
class Candidate:
    """A student shape of one family, measurable for speed before any training: ``build(context)``
    gives a model of that shape with random weights and its encoder; ``from_teacher(teacher,
    context)``, where the family can, the same shape initialised from the teacher's weights (the
    start of its distillation); ``tokenizer``: the folder of the tokenizer it reads where that is not
    the teacher's (a pre-trained student of another vocabulary)."""

    name: str
    family: str
    shape: tuple[tuple[str, Any], ...]
    build: Callable[[ShapeContext], tuple[nn.Module, Any]]
    from_teacher: Callable[[nn.Module, ShapeContext], nn.Module] | None = None
    start: str = "teacher-weights"  # ``from_teacher``'s start: the teacher's weights, or its own ("user", "pretrained")
    tokenizer: str | None = None


def example_inputs(spec: InputSpec, seq_len: int, batch_size: int = 1) -> dict[str, torch.Tensor]:
    """The bench's synthetic batch: ``[CLS] tok ... tok [SEP]`` of length ``seq_len`` (ids 101/102
    when the vocabulary has them), masks all ones, ``token_type_ids`` zeros when the model takes
    them, and for a pair model a second sentence (the rows in reverse order). Seeded (0)."""
    if seq_len < 2:
        raise KdbertError(f"seq_len {seq_len} is too short; pass seq_len >= 2 ([CLS] and [SEP])")
    if batch_size < 1:
        raise KdbertError(f"batch_size {batch_size} must be positive; pass batch_size >= 1")
    if spec.max_positions is not None and seq_len > spec.max_positions:
        raise KdbertError(f"seq_len {seq_len} exceeds the model's max_position_embeddings {spec.max_positions}; "
                          f"pass seq_len <= {spec.max_positions}")
    vocab = spec.vocab_size
    cls_id, sep_id = (101, 102) if vocab > 102 else (1 % vocab, 2 % vocab)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab, (batch_size, seq_len), generator=generator)
    input_ids[:, 0], input_ids[:, -1] = cls_id, sep_id
    values = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
              "token_type_ids": torch.zeros_like(input_ids),
              "input_ids_b": input_ids.flip(0), "attention_mask_b": torch.ones_like(input_ids)}
    return {name: values[name] for name in spec.names}


def _sdpa_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of fused attention: ``2*L*L*d`` for Q @ K^T plus ``2*L*L*d`` for scores @ V."""
    return sdpa_flop_count(query, key, value)


# FlopCounterMode knows the CUDA fused-attention kernels but not the CPU one that
# scaled_dot_product_attention dispatches to, so BERT's attention would count as 0.
_EXTRA_FLOP_FORMULAS: dict[Any, Callable[..., int]] = {}
if hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"):
    _EXTRA_FLOP_FORMULAS[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu] = _sdpa_flops


def count_matmul_flops(model: nn.Module, inputs: dict[str, torch.Tensor]) -> int:
    """FLOPs of ``model(**inputs)`` for the whole batch, as ``FlopCounterMode`` counts them (matrix
    products only, a multiply-add is 2), in eval mode without gradients."""
    was_training = model.training
    counter = FlopCounterMode(display=False, custom_mapping=_EXTRA_FLOP_FORMULAS)
    try:
        with torch.inference_mode(), counter:
            model.eval()(**inputs)
    finally:
        model.train(was_training)
    return counter.get_total_flops()


class Logits(nn.Module):
    """``forward(*inputs) -> logits``: a classifier called with its inputs in ``names`` order (the
    exported graph's signature)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        output = self.model(**dict(zip(self.names, inputs)))
        logits = output_logits(output)  # QA: start and end logits (B, 2, L)
        return output if logits is None else logits


class TorchRunner:
    """A PyTorch classifier behind the ``predict(dataset, collator, batch_size)`` of an ONNX
    export, fed exactly the graph's inputs (a name the batch lacks gets zeros)."""

    def __init__(self, model: nn.Module, spec: InputSpec):
        self.logits = Logits(model, spec.names).eval()
        self.names = spec.names

    @torch.no_grad()
    def predict(self, dataset, collator, batch_size: int = 64) -> np.ndarray:
        """Logits (N, C) over an encoded dataset, in its order (QA: (N, 2, n_max),
        :func:`~kdbert.data.batching.predict_rows`)."""
        from kdbert.data.batching import predict_rows

        def outputs_of(batch: dict) -> np.ndarray:
            inputs = [batch[name] if name in batch else torch.zeros_like(batch["input_ids"]) for name in self.names]
            return self.logits(*inputs).float().numpy()

        return predict_rows(dataset, collator, batch_size, outputs_of)


class Family:
    """Everything kdbert asks about one kind of student; subclasses answer for their models.

    ``encoder`` below is what turns a task's text into the model's inputs: an HF tokenizer, or a
    word-level student's vocabulary (anything with ``save_pretrained(folder)``).
    """

    name = "family"
    model_classes: tuple[type, ...] = ()
    """The ``nn.Module`` classes of the family's models (subclasses included)."""

    def recognises(self, folder: Path) -> bool:
        """Whether ``folder`` (a trained model, or its ONNX export) belongs to this family."""
        raise NotImplementedError

    def owns(self, model: nn.Module) -> bool:
        """Whether ``model`` (a PyTorch module) belongs to this family."""
        return isinstance(model, self.model_classes)

    def trace_adapter(self):
        """What matches can read from the family's models (a :mod:`kdbert.core.trace` adapter,
        e.g. ``HookAdapter({"encoded": "encoder"})``); None: the HF adapter serves them."""
        return None

    def load(self, folder: Path, task=None) -> tuple[nn.Module, Any]:
        """The trained model in ``folder`` (eval mode) and its encoder; with ``task`` (a
        :class:`~kdbert.data.tasks.TaskSpec`) refuse a model that does not fit that task."""
        raise NotImplementedError

    def load_for_bench(self, path: str) -> nn.Module:
        """The model ``kdbert bench`` times (a head is not required)."""
        return self.load(Path(path).expanduser())[0]

    def load_encoder(self, folder: Path) -> Any:
        """The encoder saved beside an export in ``folder``."""
        raise NotImplementedError

    def from_config(self, folder: Path) -> nn.Module:
        """A model of the shape saved in ``folder/config.json``, random weights (FLOPs, parameters)."""
        raise NotImplementedError

    def input_spec(self, model: nn.Module) -> InputSpec:
        raise NotImplementedError

    def export_form(self, model: nn.Module, exporter: str = "torchscript"):
        """A context manager giving the module the ONNX ``exporter`` (``torchscript`` or ``dynamo``)
        traces (``model`` itself by default), restored when it exits."""
        return contextlib.nullcontext(model)

    def fusion_settings(self, model: nn.Module) -> dict | None:
        """Keyword arguments of ORT's ``optimize_model`` (``model_type``, ``num_heads``,
        ``hidden_size``) for the ``fused`` graph; None: the family has none."""
        return None

    def flops(self, model: nn.Module, seq_len: int) -> int:
        """FLOPs of one example of ``seq_len`` tokens (:func:`count_matmul_flops` by default)."""
        return count_matmul_flops(model, example_inputs(self.input_spec(model), seq_len))

    def evaluator(self, data, encoder, max_seq_len: int | None, batch_size: int):
        """``evaluator(model) -> metrics`` on ``data``'s dev split(s), with ``splits`` (name ->
        encoded rows) and ``predict(model, rows) -> logits``; ``model`` may be an ONNX export."""
        raise NotImplementedError

    def synthetic_rows(self, spec: InputSpec, seq_len: int, encoder, batch_size: int):
        """Rows of random ids and lengths (at most ``seq_len``) and ``predict(model) -> logits``
        over them in batches of ``batch_size``: what an export is checked on without a task."""
        raise NotImplementedError

    def runner(self, model: nn.Module, spec: InputSpec):
        """The PyTorch model as the reference an export's outputs are compared with."""
        return TorchRunner(model, spec)

    def candidates(self, context: ShapeContext) -> list[Candidate]:
        """The student shapes of this family worth timing for ``context`` (none by default)."""
        return []

    def candidates_note(self, context: ShapeContext) -> str | None:
        """One line saying why :meth:`candidates` offers none for ``context`` where the user would
        expect some (None: nothing to say)."""
        return None

    def check_fits(self, where: str, num_labels: int | None, pair: bool, task) -> None:
        """Refuse a model with another number of outputs than ``task`` (a TaskSpec) needs."""
        if num_labels not in (None, task.num_labels):
            raise KdbertError(f"{where} has {num_labels} output(s) but {task.name} needs {task.num_labels}; "
                              "use a model fine-tuned on this task")


_registered: list[Family] = []
_built_in: list[Family] = []
_built_ins_imported = False


def register_family(family: Family, built_in: bool = False) -> Family:
    """Make ``family`` known, with its trace adapter; families registered later are asked first
    (built-ins after all others)."""
    if not isinstance(family, Family):
        raise KdbertError(f"register_family expects a kdbert.families.registry.Family, got {type(family).__name__}")
    adapter = family.trace_adapter()
    if adapter is not None:
        from kdbert.core.trace import register_adapter

        for cls in family.model_classes:
            register_adapter(cls, adapter)
    target = _built_in if built_in else _registered
    target[:] = [f for f in target if f.name != family.name]
    target.insert(0, family)
    return family


def families() -> list[Family]:
    """Every registered family, in the order they are asked (the built-ins imported first)."""
    global _built_ins_imported
    if not _built_ins_imported:
        _built_ins_imported = True
        for module in BUILT_IN:
            importlib.import_module(module)
    return _registered + _built_in


def family_of_folder(folder: str | Path) -> Family:
    """The family of the model (or export) saved in ``folder``; any other name is the HF family's (a hub id)."""
    path = Path(folder).expanduser()
    return next(f for f in families() if f.recognises(path))


def family_of_model(model: nn.Module) -> Family:
    """The family of a PyTorch ``model``."""
    for family in families():
        if family.owns(model):
            return family
    names = ", ".join(f.name for f in families())
    raise KdbertError(f"no student family owns a {type(model).__name__} (registered: {names}); "
                      "register one with kdbert.families.registry.register_family")
