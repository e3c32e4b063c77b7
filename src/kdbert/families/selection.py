"""Weight selection for every architecture kdbert can cut, read from one table of module layouts.

A student of the teacher's own architecture, narrower and shallower, takes a sub-tensor of every
teacher tensor (Xu et al., 2024, "Initializing Models with Larger Ones"): the same rule for BERT,
RoBERTa / XLM-R, MPNet, ELECTRA and DistilBERT, which differ only in where their tensors live
(:data:`LAYOUTS`). ``kdbert compress`` offers such students as ``<prefix>-<layers>x<width>``
candidates (:func:`speed_candidates`; ``bert-2x256`` for a BERT teacher, ``roberta-2x256`` for a
RoBERTa one); a teacher of another architecture gets none, and :func:`uncut_note` says why.

What the architectures add to BERT's layout, and what selection does with it:

- RoBERTa / XLM-R and MPNet number positions from ``padding_idx + 1``: the student keeps the
  teacher's ``max_position_embeddings`` and pad id, and position rows are copied row for row, so
  the offset carries over;
- MPNet's relative attention bias, a (buckets, heads) table shared by every layer: its columns
  are the kept heads;
- ELECTRA projects its embeddings to the hidden size when ``embedding_size != hidden_size``: the
  student then keeps the teacher's embedding width (tables and their LayerNorm copied whole) and
  the projection's rows are the kept hidden units; without a projection the tables are cut like
  BERT's;
- the dense layer a task head applies to the first token (BERT's pooler, the ``classifier.dense``
  of RoBERTa, XLM-R, MPNet and ELECTRA heads, DistilBERT's ``pre_classifier``) is cut like the
  pooler; the output layer stays fresh, or, with ``head`` (compress's ``--head teacher``), is the
  teacher's on the kept hidden units (``Layout.head_outputs``);
- a student pools as the teacher does (:mod:`kdbert.core.pooling`): ``task_config`` copies the
  teacher's config, where the pooling is recorded.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

import torch
from torch import nn
from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification, PreTrainedModel

from kdbert.core.pooling import apply_pooling
from kdbert.errors import KdbertError
from kdbert.families.registry import Candidate, ShapeContext


@dataclass(frozen=True)
class Layout:
    """Where one architecture keeps the tensors weight selection cuts: dotted paths below the base
    model (``model.base_model``), those of a layer below ``layers[i]``.

    ``tables``: embedding tables (rows: tokens, positions, token types); ``poolers``: dense layers on
    the first token before a task head's output, below the base model or the model (copied where
    both models have one); ``head_bias``: a (buckets, heads) attention-bias table; ``projection``:
    the embeddings-to-hidden projection, present when ``config.embedding_size != hidden_size``;
    ``ffn_size``: the config field of the FFN width; ``prefix``: candidate names' first word;
    ``head_outputs``: a task head's output layers (below the model), which read the hidden units."""

    prefix: str
    tables: tuple[str, ...]
    layers: str
    query: str
    key: str
    value: str
    attention_out: str
    attention_norm: str
    ffn_in: str
    ffn_out: str
    ffn_norm: str
    poolers: tuple[str, ...]
    embedding_norm: str = "embeddings.LayerNorm"
    head_bias: str | None = None
    projection: str | None = None
    ffn_size: str = "intermediate_size"
    head_outputs: tuple[str, ...] = ("classifier", "qa_outputs")


_BERT_LAYER = dict(layers="encoder.layer", query="attention.self.query", key="attention.self.key",
                   value="attention.self.value", attention_out="attention.output.dense",
                   attention_norm="attention.output.LayerNorm", ffn_in="intermediate.dense",
                   ffn_out="output.dense", ffn_norm="output.LayerNorm")
_BERT_TABLES = ("embeddings.word_embeddings", "embeddings.position_embeddings", "embeddings.token_type_embeddings")
_HEAD_OUT_PROJ = ("classifier.out_proj", "qa_outputs")  # a classification head of dense, then out_proj
_ROBERTA = Layout("roberta", _BERT_TABLES, poolers=("pooler.dense", "classifier.dense"), head_outputs=_HEAD_OUT_PROJ,
                  **_BERT_LAYER)

LAYOUTS: dict[str, Layout] = {
    "bert": Layout("bert", _BERT_TABLES, poolers=("pooler.dense",), **_BERT_LAYER),
    "roberta": _ROBERTA,
    "xlm-roberta": replace(_ROBERTA, prefix="xlmr"),
    "electra": Layout("electra", _BERT_TABLES, poolers=("classifier.dense",), projection="embeddings_project",
                      head_outputs=_HEAD_OUT_PROJ, **_BERT_LAYER),
    "mpnet": Layout("mpnet", _BERT_TABLES[:2], layers="encoder.layer", query="attention.attn.q",
                    key="attention.attn.k", value="attention.attn.v", attention_out="attention.attn.o",
                    attention_norm="attention.LayerNorm", ffn_in="intermediate.dense", ffn_out="output.dense",
                    ffn_norm="output.LayerNorm", poolers=("pooler.dense", "classifier.dense"),
                    head_bias="encoder.relative_attention_bias", head_outputs=_HEAD_OUT_PROJ),
    "distilbert": Layout("distilbert", _BERT_TABLES[:2], layers="transformer.layer", query="attention.q_lin",
                         key="attention.k_lin", value="attention.v_lin", attention_out="attention.out_lin",
                         attention_norm="sa_layer_norm", ffn_in="ffn.lin1", ffn_out="ffn.lin2",
                         ffn_norm="output_layer_norm", poolers=("pre_classifier",), ffn_size="hidden_dim"),
}
"""``config.model_type`` -> :class:`Layout` of every architecture kdbert cuts."""

KINDS = tuple(layout.prefix for layout in LAYOUTS.values())
"""The candidate kinds (name prefixes) of weight-selected students."""

SIZES = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")


def layout_of(config) -> Layout | None:
    """The layout of a model config's architecture, None when kdbert cannot cut it."""
    return LAYOUTS.get(getattr(config, "model_type", None))


def _sizes(config, layout: Layout) -> dict[str, int]:
    """Depth, width, heads and FFN width of ``config`` under :data:`SIZES` names."""
    return {name: int(getattr(config, layout.ffn_size if name == "intermediate_size" else name)) for name in SIZES}


def find_module(model: nn.Module, path: str) -> nn.Module | None:
    """The submodule at ``path`` below the base model or the model, None where there is none."""
    for root in (model.base_model, model):
        try:
            return root.get_submodule(path)
        except AttributeError:
            continue
    return None


def evenly_spaced(count: int, size: int) -> torch.Tensor:
    """``count`` indices spread evenly over ``range(size)``: floor(i * size / count), i < count."""
    return torch.arange(count) * size // count


def top(scores: torch.Tensor, count: int) -> torch.Tensor:
    """The indices of the ``count`` largest ``scores``, ascending (ties: the lower index)."""
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    return torch.tensor(sorted(order[:count]), dtype=torch.long)


def _selection_layers(student_depth: int, teacher_depth: int) -> list[int]:
    """0-based teacher layer for each student layer: the uniform map ceil(m*N/M) - 1."""
    return [math.ceil(m * teacher_depth / student_depth) - 1 for m in range(1, student_depth + 1)]


def ends_and_between(depth: int, total: int) -> list[int]:
    """0-based layers a ``depth``-layer cut of a ``total``-layer pre-trained model keeps: its first and
    last, the rest evenly between, round(m*(N-1)/(M-1)) for m < M (6 -> 3: 0, 2, 5; one layer: the
    last). A sentence encoder's pooled output lives after its last layer and its first reads the
    embeddings; the uniform map (1, 3, 5) drops the first."""
    if depth == 1:
        return [total - 1]
    return [round(m * (total - 1) / (depth - 1)) for m in range(depth)]


def first_layers(depth: int, total: int) -> list[int]:
    """0-based layers a ``depth``-layer cut keeps when it drops the teacher's top layers: its first
    ``depth`` (6 -> 2: 0, 1), a whole prefix of the teacher's network, as Sajjad et al. (2020) found
    best for a pre-trained model cut before fine-tuning."""
    return list(range(min(depth, total)))


LAYER_CHOICES = {"ends": ends_and_between, "bottom": first_layers}
"""The teacher layers a cut copies by ``ShapeContext.layer_map``, besides the uniform map."""


def _take(dst: nn.Module, src: nn.Module, rows: torch.Tensor | None, cols: torch.Tensor | None = None) -> None:
    """``dst`` (Linear, LayerNorm, Embedding) <- ``src``'s weight rows x columns and bias rows (None: all)."""
    weight = src.weight
    if rows is not None:
        weight = weight[rows]
    if cols is not None:
        weight = weight[:, cols]
    dst.weight.copy_(weight)
    if getattr(src, "bias", None) is not None:
        dst.bias.copy_(src.bias if rows is None else src.bias[rows])


def _checked_layout(student: PreTrainedModel, teacher: PreTrainedModel) -> Layout:
    """The layout both models share, refused in one line when they differ or kdbert cannot cut it."""
    s_type, t_type = (getattr(m.config, "model_type", type(m).__name__) for m in (student, teacher))
    layout = layout_of(teacher.config)
    if layout is None:
        raise KdbertError(f"--student-init teacher-weights cannot cut the weights of a {t_type!r} teacher (it cuts "
                          f"{', '.join(LAYOUTS)}); use --student-init random")
    if s_type != t_type:
        raise KdbertError(f"--student-init teacher-weights needs a student of the teacher's architecture ({t_type}), "
                          f"got {s_type}; use --student-init random")
    if layout.projection and (find_module(student, layout.projection) is None) != (find_module(teacher, layout.projection) is None):
        raise KdbertError("--student-init teacher-weights needs a student whose embeddings are projected (embedding_"
                          "size != hidden_size) exactly when the teacher's are; give the student the teacher's "
                          "embedding_size")
    return layout


@torch.no_grad()
def select_teacher_weights(student: PreTrainedModel, teacher: PreTrainedModel, importance=None,
                           layers: list[int] | None = None, head: bool = False,
                           ffn_scores: torch.Tensor | None = None) -> dict:
    """Initialise a narrower/shallower ``student`` of the teacher's architecture in place from the
    teacher's weights: every student tensor is a sub-tensor of the matching teacher tensor, picked
    consistently so the student computes a slice of the teacher's residual stream.

    Evenly spaced (``importance`` None):

    - layers: student layer m (1-based) copies teacher layer g(m) = ceil(m*N/M), the uniform
      map its hidden states are distilled towards;
    - hidden units H = evenly_spaced(d_s, d_t), used for every residual-stream dimension
      (embedding columns, LayerNorms, the rows of attention output and FFN output, poolers);
    - attention: heads evenly_spaced(h_s, h_t), and within each head dims
      evenly_spaced(d_s/h_s, d_t/h_t) of the query/key/value rows (MPNet's bias: those heads);
    - FFN units evenly_spaced(i_s, i_t);

    By ``importance`` (an :class:`~kdbert.families.importance.Importance`, ranked on the task): the layers left by
    its elimination, the most important hidden units, and per copied layer its most important heads
    and FFN units (heads ranked over all layers where a bias table shares them: MPNet), each kept in
    the teacher's order. What each architecture adds: the module doc.

    ``layers`` (0-based, without ``importance``): the teacher layers copied instead of the uniform map;
    ``ffn_scores`` (N, i) (without ``importance``): each copied layer keeps its highest-scoring FFN
    units instead of evenly spaced ones (:func:`~kdbert.families.importance.ffn_activation_importance`).
    The task head's output layer keeps its fresh initialisation unless ``head``: then, where both
    models have one with as many outputs (the teacher fine-tuned on the student's task), the
    teacher's, its columns the hidden units H. Each student size must be at most the teacher's.
    Returns what was selected, for reports.
    """
    layout = _checked_layout(student, teacher)
    s_base, t_base = student.base_model, teacher.base_model
    sc, tc = _sizes(student.config, layout), _sizes(teacher.config, layout)
    s_head_dim = sc["hidden_size"] // sc["num_attention_heads"]
    t_head_dim = tc["hidden_size"] // tc["num_attention_heads"]
    for name, s, t in [*((n, sc[n], tc[n]) for n in SIZES), ("head size", s_head_dim, t_head_dim)]:
        if s > t:
            raise KdbertError(f"--student-init teacher-weights needs a student no larger than the teacher, but the "
                              f"student's {name} is {s} > the teacher's {t}; use --student-init random")
    if student.config.vocab_size != teacher.config.vocab_size:
        raise KdbertError(f"--student-init teacher-weights needs the teacher's vocabulary ({teacher.config.vocab_size} "
                          f"tokens), the student has {student.config.vocab_size}")
    h_s, i_s = sc["num_attention_heads"], sc["intermediate_size"]
    if importance is None:
        hidden = evenly_spaced(sc["hidden_size"], tc["hidden_size"])
        layers = layers or _selection_layers(sc["num_hidden_layers"], tc["num_hidden_layers"])
        heads = {t: evenly_spaced(h_s, tc["num_attention_heads"]) for t in layers}
        ffn = {t: evenly_spaced(i_s, tc["intermediate_size"]) if ffn_scores is None else top(ffn_scores[t], i_s)
               for t in layers}
    else:
        hidden = top(importance.hidden, sc["hidden_size"])
        layers = importance.layers(sc["num_hidden_layers"])
        shared = top(importance.heads.sum(0), h_s) if layout.head_bias else None  # one bias table for all layers
        heads = {t: shared if shared is not None else top(importance.heads[t], h_s) for t in layers}
        ffn = {t: top(importance.ffn[t], i_s) for t in layers}
    dims = evenly_spaced(s_head_dim, t_head_dim)

    projection = find_module(teacher, layout.projection) if layout.projection else None
    embedding_units = None if projection is not None else hidden  # projected: the embedding width is kept
    for path in layout.tables:  # every row: the student keeps the teacher's vocabulary and positions
        dst, src = s_base.get_submodule(path), t_base.get_submodule(path)
        _take(dst, src, torch.arange(dst.weight.shape[0]), embedding_units)
    _take(s_base.get_submodule(layout.embedding_norm), t_base.get_submodule(layout.embedding_norm), embedding_units)
    if projection is not None:
        _take(find_module(student, layout.projection), projection, hidden)
    s_layers, t_layers = s_base.get_submodule(layout.layers), t_base.get_submodule(layout.layers)
    for s_layer, t_index in zip(s_layers, layers):
        t_layer = t_layers[t_index]
        attention = (heads[t_index][:, None] * t_head_dim + dims[None, :]).reshape(-1)
        pairs = [(layout.query, attention, hidden), (layout.key, attention, hidden), (layout.value, attention, hidden),
                 (layout.attention_out, hidden, attention), (layout.attention_norm, hidden, None),
                 (layout.ffn_in, ffn[t_index], hidden), (layout.ffn_out, hidden, ffn[t_index]),
                 (layout.ffn_norm, hidden, None)]
        for path, rows, cols in pairs:
            _take(s_layer.get_submodule(path), t_layer.get_submodule(path), rows, cols)
    if layout.head_bias:
        bias = t_base.get_submodule(layout.head_bias).weight[:, heads[layers[0]]]
        s_base.get_submodule(layout.head_bias).weight.copy_(bias)
    for path in layout.poolers:
        dst, src = find_module(student, path), find_module(teacher, path)
        if dst is not None and src is not None:
            _take(dst, src, hidden, hidden)
    head_copied = False
    for path in layout.head_outputs if head else ():
        dst, src = find_module(student, path), find_module(teacher, path)
        if dst is not None and src is not None and dst.weight.shape[0] == src.weight.shape[0]:
            _take(dst, src, None, hidden)
            head_copied = True
    selection = "importance" if importance is not None else "evenly spaced" if ffn_scores is None else "FFN by activation"
    return {"student_init": "teacher-weights", "selection": selection,
            "teacher_layers": [i + 1 for i in layers],
            "hidden_units": f"{sc['hidden_size']} of {tc['hidden_size']}",
            "heads": f"{sc['num_attention_heads']} of {tc['num_attention_heads']} ({s_head_dim} of {t_head_dim} "
                     "dims each)",
            "ffn_units": f"{sc['intermediate_size']} of {tc['intermediate_size']}",
            "head": "the teacher's" if head_copied else "fresh"}


# ----------------------------------------------------------------------------- shapes worth timing
SPEED_DEPTHS = (1, 2, 3, 4)
SPEED_WIDTHS = (128, 192, 256, 384)
"""Students whose deployed speed ``kdbert compress`` measures: every depth x width up to the
teacher's, with the teacher's head size and FFN-to-width ratio, so that every one of them can take
its weights from the teacher (:func:`select_teacher_weights`)."""
FFN_DIVISORS = (2, 4, 8)
"""At the teacher's own width, students whose FFN keeps 1/2, 1/4 and 1/8 of the teacher's units as
well (``<prefix>-<layers>x<width>-ffn<units>``): embeddings, attention and the residual stream stay
whole, so they keep what the teacher's embeddings know, and the FFN, about two thirds of a layer's
multiply-adds at width 384 on short rows, shrinks, as structured pruning finds it can (FastFormers;
CoFi, Xia et al. 2022). The eighth puts a second whole-width layer past 4x where the quarter sits at
the line (the main job on 2 threads of an AVX2 CPU: bert-2x384-ffn192 5.2x, -ffn384 4.4-4.8x and 3.97x
as shipped; at 1,200 steps they kept 93.2% and 94.7% of its teacher on dev, 1-layer ones 91.0%)."""

NARROWER_HALF_FFN_DEPTHS = (2, 3, 4)
"""Below the teacher's width, at these depths the widest cut width also with half its FFN
(``<prefix>-2x256-ffn512`` under a 384-wide teacher): two narrow layers where one whole-width layer
is all 4x admits. On an AMX Xeon (2 threads) the main job's teacher admits no 2-layer cut at its
width (bert-2x384-ffn192 3.6-3.9x) and bert-2x256 times 3.7-4.0x; bert-2x256-ffn512 timed 4.7x and
at 3,000 steps kept 94.7% of the teacher on dev and 94.0% on the rows that decide, bert-1x384 93.0% and
91.5% (three seeds, ``narrow_ffn_ablation.py``). Every narrower width with half its FFN (twelve shapes)
cost the main job's timing its reach; one width, from two layers, costs three."""


def widest_narrower(width: int | None) -> int | None:
    """The widest of :data:`SPEED_WIDTHS` below a teacher ``width`` wide (None: none, or no width)."""
    return max((hidden for hidden in SPEED_WIDTHS if width is not None and hidden < width), default=None)


def _shape_of(layers: int, hidden: int, teacher_config, ffn_divisor: int = 1) -> dict:
    """The shape ``<prefix>-<layers>x<hidden>`` of a student of ``teacher_config``: the teacher's head
    size and FFN-to-width ratio, the FFN ``ffn_divisor`` times narrower."""
    sizes = _sizes(teacher_config, layout_of(teacher_config))
    head_size = sizes["hidden_size"] // sizes["num_attention_heads"]
    return {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": hidden // head_size,
            "intermediate_size": hidden * sizes["intermediate_size"] // sizes["hidden_size"] // ffn_divisor}


def _cuttable_width(hidden: int, teacher_config, layout: Layout) -> bool:
    """Whether a student ``hidden`` wide can take the teacher's weights: its heads keep the teacher's
    head size, and where the teacher projects its embeddings the student does too (ELECTRA makes no
    projection for a width equal to ``embedding_size``)."""
    sizes = _sizes(teacher_config, layout)
    projected = layout.projection and teacher_config.embedding_size != sizes["hidden_size"]
    return (hidden <= sizes["hidden_size"] and hidden % (sizes["hidden_size"] // sizes["num_attention_heads"]) == 0
            and not (projected and hidden == teacher_config.embedding_size))


def speed_shapes(teacher_config, narrow_ffn: bool = True) -> dict[str, dict]:
    """Name -> shape of :data:`SPEED_DEPTHS` x :data:`SPEED_WIDTHS` no larger than the teacher, and
    (``narrow_ffn``) at the teacher's width those of :data:`FFN_DIVISORS`, below it those of
    :data:`NARROWER_HALF_FFN_DEPTHS` (none for an architecture kdbert cannot cut)."""
    layout = layout_of(teacher_config)
    if layout is None:
        return {}
    sizes = _sizes(teacher_config, layout)
    depths = [layers for layers in SPEED_DEPTHS if layers <= sizes["num_hidden_layers"]]
    shapes = {f"{layout.prefix}-{layers}x{hidden}": _shape_of(layers, hidden, teacher_config)
              for layers in depths for hidden in SPEED_WIDTHS if _cuttable_width(hidden, teacher_config, layout)}
    if not narrow_ffn:
        return shapes
    width = sizes["hidden_size"]
    fewer_ffn = []
    if width in SPEED_WIDTHS and _cuttable_width(width, teacher_config, layout):
        fewer_ffn += [(layers, width, divisor) for layers in depths for divisor in FFN_DIVISORS]
    narrower = widest_narrower(width)
    if narrower is not None and _cuttable_width(narrower, teacher_config, layout):
        fewer_ffn += [(layers, narrower, 2) for layers in depths if layers in NARROWER_HALF_FFN_DEPTHS]
    for layers, hidden, divisor in fewer_ffn:
        shape = _shape_of(layers, hidden, teacher_config, divisor)
        shapes[f"{layout.prefix}-{layers}x{hidden}-ffn{shape['intermediate_size']}"] = shape
    return shapes


def task_config(teacher_config, shape: dict, num_labels: int, question_answering: bool = False):
    """The teacher's config with ``shape`` (:data:`SIZES` names) and the task's outputs (start and
    end for QA, one for regression); an unprojected ELECTRA's embedding width follows the width."""
    layout = layout_of(teacher_config)
    config = copy.deepcopy(teacher_config)
    for name, value in shape.items():
        setattr(config, layout.ffn_size if name == "intermediate_size" else name, value)
    if layout.projection and teacher_config.embedding_size == teacher_config.hidden_size:
        config.embedding_size = shape["hidden_size"]
    config.num_labels = 2 if question_answering else num_labels
    config.problem_type = "regression" if num_labels == 1 and not question_answering else None
    config.architectures = None
    return config


def task_student(shape: dict, context: ShapeContext) -> tuple[PreTrainedModel, object]:
    """A random (seed 0) model of the teacher's architecture, ``shape``, the task's head and the
    teacher's pooling, with the teacher's tokenizer."""
    config = task_config(context.teacher_config, shape, context.num_labels, context.question_answering)
    head = AutoModelForQuestionAnswering if context.question_answering else AutoModelForSequenceClassification
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return apply_pooling(head.from_config(config)), context.tokenizer


def _from_teacher(random_student: Callable, shape: dict, teacher: PreTrainedModel,
                  context: ShapeContext) -> PreTrainedModel:
    """``random_student``'s model of ``shape`` with weights selected from the teacher (by the
    context's importance where it has one, else from the layers of its ``layer_map``)."""
    student, _ = random_student(shape, context)
    layers = None
    if context.importance is None and context.layer_map in LAYER_CHOICES:
        layers = LAYER_CHOICES[context.layer_map](student.config.num_hidden_layers, teacher.config.num_hidden_layers)
    select_teacher_weights(student, teacher, context.importance, layers=layers, head=context.head == "teacher")
    return student


def speed_candidates(context: ShapeContext, random_student: Callable = task_student) -> list[Candidate]:
    """The shapes of :func:`speed_shapes`, built by ``random_student(shape, context)`` (random weights)
    or from the teacher's weights."""
    return [Candidate(name, "hf", tuple(shape.items()), partial(random_student, shape),
                      partial(_from_teacher, random_student, shape))
            for name, shape in speed_shapes(context.teacher_config).items()]


def lead_cuts(candidates: list[Candidate], teacher_config) -> frozenset[str]:
    """The names of ``candidates`` cut from the teacher that a search times and starts first: those
    that keep its whole width (its embeddings and every hidden unit; fewer layers or FFN units only)
    and, from two layers, those of the widest width below it, where one whole-width layer is all the
    speed asked admits (:data:`NARROWER_HALF_FFN_DEPTHS`). Deep and narrow cuts keep less: at 3,000
    steps on SST-2 (the main job's teacher, three seeds) bert-3x128 kept 93.2% on dev and 88.3% on the
    rows that decide, bert-4x128 94.2% and 90.0%, bert-2x256-ffn512 94.7% and 94.0%."""
    width = getattr(teacher_config, "hidden_size", None)
    narrower = widest_narrower(width)

    def leads(shape: dict) -> bool:
        return shape.get("hidden_size") == width or (
            shape.get("hidden_size") == narrower and shape.get("num_hidden_layers", 0) in NARROWER_HALF_FFN_DEPTHS)

    return frozenset(c.name for c in candidates
                     if c.family == "hf" and c.start == "teacher-weights" and leads(dict(c.shape)))


def uncut_note(teacher_config) -> str | None:
    """One line saying why a teacher gets no weight-selected candidates (None when it gets them)."""
    if layout_of(teacher_config) is not None:
        return None
    kind = getattr(teacher_config, "model_type", None) or type(teacher_config).__name__
    return (f"no candidates of the teacher's architecture ({kind}): kdbert cuts the weights of "
            f"{', '.join(LAYOUTS)} teachers only; the BiLSTM and --student candidates are still offered")
