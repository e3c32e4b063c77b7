"""Task definitions: the nine GLUE tasks, IMDb and users' own CSV / TSV / JSONL data sets.

A :class:`TaskSpec` says what a task's rows look like (one or two text columns), its fixed
label vocabulary (``None`` for regression), its metrics and its default sequence length.
Label vocabularies are fixed per task and every source (GLUE TSV files, HF ``datasets``)
is mapped onto them *by label name*, so a label id means the same thing whichever source
was read. (The classic MNLI bug: the original GLUE processors order labels
contradiction/entailment/neutral, HF ``datasets`` orders them entailment/neutral/contradiction.)
"""

from __future__ import annotations

from dataclasses import dataclass, field


# what a text longer than the token limit keeps: its first tokens, its last ones, a quarter of the
# limit from the head and the rest from the tail (Sun et al., 2019, "How to Fine-Tune BERT for Text
# Classification?": 128 + 382 of 512 tokens did best on IMDb), or all of it in windows that share
# ``doc_stride`` tokens, each trained on as a row and scored by the mean of a text's window logits
TRUNCATIONS = ("head", "tail", "head+tail", "windows")
DOC_STRIDE = 128  # tokens consecutive windows share by default (BERT's SQuAD recipe)


@dataclass(frozen=True)
class TaskSpec:
    """What a task is.

    Attributes:
        name: canonical lower-case name ("rte"; for a user data set, its file stem).
        text_fields: names of the text column(s): one for single-sentence tasks, two for pairs.
        labels: label vocabulary in id order; ``None`` for regression (STS-B, user regression).
        metrics: metric names computed on dev (see :mod:`kdbert.core.metrics`).
        max_seq_len: default maximum sequence length (64 single sentence, 128 pairs).
        dev_splits: names of the evaluation splits (MNLI has matched and mismatched).
        truncation: which tokens a text longer than the limit keeps (:data:`TRUNCATIONS`).
        doc_stride: tokens shared by consecutive windows (QA, and ``truncation="windows"``).
        question_answering: extractive QA (``texts`` = question, context; the label is the gold
            answers; the model gives a start and an end logit per token; :mod:`kdbert.data.squad`),
            read in windows that share ``doc_stride`` tokens (:mod:`kdbert.data.qa_windows`).
        file_columns: our field names -> a file's columns (names, or positions in a file without a header).
    """

    name: str
    text_fields: tuple[str, ...]
    labels: tuple[str, ...] | None
    metrics: tuple[str, ...]
    max_seq_len: int
    dev_splits: tuple[str, ...] = ("dev",)
    glue_folder: str | None = None
    hf_config: str | None = None
    file_columns: dict = field(default_factory=dict, compare=False, hash=False)
    truncation: str = "head"
    question_answering: bool = False
    doc_stride: int = DOC_STRIDE

    @property
    def is_regression(self) -> bool:
        return self.labels is None and not self.question_answering

    @property
    def num_labels(self) -> int:
        """Outputs per row (per token for QA: start and end)."""
        return 2 if self.question_answering else 1 if self.labels is None else len(self.labels)

    @property
    def is_pair(self) -> bool:
        return len(self.text_fields) == 2


def _glue(name, folder, text_fields, labels, metrics, hf_config, columns, dev_splits=("dev",)):
    max_len = 128 if len(text_fields) == 2 else 64
    return TaskSpec(name, tuple(text_fields), labels, tuple(metrics), max_len, tuple(dev_splits),
                    folder, hf_config, columns)


# ``columns`` maps our field names to the GLUE TSV header names; CoLA's files have no header,
# so its columns are positions. "label" is the gold column; "source", where a file has one, the
# collection each row comes from (STS-B's file name column: MSRvid, headlines, answers-forums, ...;
# MNLI's genre), optional: a file without it reads ``source=None``.
GLUE_TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in [
        _glue("cola", "CoLA", ["sentence"], ("0", "1"), ["mcc"], "cola",
              {"sentence": 3, "label": 1}),
        _glue("sst2", "SST-2", ["sentence"], ("0", "1"), ["accuracy"], "sst2",
              {"sentence": "sentence", "label": "label"}),
        _glue("mrpc", "MRPC", ["sentence1", "sentence2"], ("0", "1"), ["accuracy", "f1"], "mrpc",
              {"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality"}),
        _glue("stsb", "STS-B", ["sentence1", "sentence2"], None, ["pearson", "spearman"], "stsb",
              {"sentence1": "sentence1", "sentence2": "sentence2", "label": "score", "source": "filename"}),
        _glue("qqp", "QQP", ["question1", "question2"], ("0", "1"), ["accuracy", "f1"], "qqp",
              {"question1": "question1", "question2": "question2", "label": "is_duplicate"}),
        _glue("mnli", "MNLI", ["premise", "hypothesis"], ("entailment", "neutral", "contradiction"),
              ["accuracy"], "mnli",
              {"premise": "sentence1", "hypothesis": "sentence2", "label": "gold_label", "source": "genre"},
              dev_splits=("dev_matched", "dev_mismatched")),
        _glue("qnli", "QNLI", ["question", "sentence"], ("entailment", "not_entailment"),
              ["accuracy"], "qnli",
              {"question": "question", "sentence": "sentence", "label": "label"}),
        _glue("rte", "RTE", ["sentence1", "sentence2"], ("entailment", "not_entailment"),
              ["accuracy"], "rte",
              {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"}),
        _glue("wnli", "WNLI", ["sentence1", "sentence2"], ("0", "1"), ["accuracy"], "wnli",
              {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"}),
    ]
}

# IMDb (Maas et al., 2011): reviews of up to ~2,500 words; 512 tokens as the DistilBERT paper,
# scored on the official test split (:mod:`kdbert.data.imdb`)
IMDB_TASK = TaskSpec("imdb", ("text",), ("neg", "pos"), ("accuracy",), 512, ("test",),
                     file_columns={"text": "text", "label": "label"})

# SQuAD (Rajpurkar et al., 2016 / 2018): name -> file version; scored with the official EM / F1;
# 384-token windows as the BERT and DistilBERT papers
QA_TASKS = {"squad": "v1.1", "squad2": "v2.0"}
SQUAD_TASKS = {name: TaskSpec(name, ("question", "context"), None, ("exact_match", "f1"), 384,
                              question_answering=True) for name in QA_TASKS}

_ALIASES = {"sst-2": "sst2", "sts-b": "stsb", "mnli-m": "mnli", "mnli-mm": "mnli"}


def canonical_task_name(name: str) -> str | None:
    """'SST-2' -> 'sst2'; ``None`` when ``name`` is not a GLUE task."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    return key if key in GLUE_TASKS else None


TEXT_COLUMNS_KEY = "kdbert_text_columns"


def record_text_columns(model, spec: TaskSpec) -> None:
    """Write the task's text columns into ``model``'s config (``kdbert_text_columns`` of its
    ``config.json``), so `kdbert predict` and `serve` read a file's rows by the columns it was trained
    on, whatever the data set."""
    setattr(model.config, TEXT_COLUMNS_KEY, list(spec.text_fields))
