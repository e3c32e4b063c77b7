"""The distilled BiLSTM student (Tang et al. 2019, "Distilling Task-Specific Knowledge from BERT
into Simple Neural Networks"), and its folder format.

Architecture (B batch, L words, E embedding size, H hidden size, F fc size, C outputs)::

    single sentence:  ids (B, L) -> embeddings (B, L, E) -> BiLSTM -> h = [h_fwd; h_bwd] (B, 2H)
                      -> ReLU(W_f h + b_f) (B, F) -> W_c . + b_c -> logits (B, C)
    sentence pair:    the same encoder on both sentences (siamese): h1, h2 (B, 2H)
                      -> f = [h1; h2; h1 * h2; |h1 - h2|] (B, 8H) -> ReLU layer -> logits

``h_fwd`` is the forward LSTM's state after the last real word, ``h_bwd`` the backward LSTM's
state after reading the sentence from its last real word back to the first. Regression tasks
have C = 1. Defaults follow the paper: H = 150, F = 200, E = 300 (set E to the word vectors'
size, e.g. 50 for glove.6B.50d).

Padding never changes the outputs: the two directions are two unidirectional ``nn.LSTM``; the
backward one reads each row reversed *within its length* (a gather), and both final states are
gathered at position ``length - 1``. Positions after a row's length therefore never reach its
result. This uses only gathers and plain LSTMs, no packed sequences, so the model exports to
ONNX with dynamic batch and length axes (``torch.onnx.export(..., dynamo=False, dynamic_axes=...)``;
tested against ONNX Runtime).

Forward signature (what an exporter feeds)::

    model(input_ids, attention_mask)                                   # single sentence
    model(input_ids, attention_mask, input_ids_b, attention_mask_b)    # pairs

``input_ids`` (B, L) int64 word ids from :class:`kdbert.families.bilstm.words.Vocab`, right-padded with
``Vocab.pad_id``; ``attention_mask`` (B, L) 1 for words, 0 for padding (only its row sums, the
lengths, are used; a row of length 0 is read as length 1). Returns a ``SequenceClassifierOutput``
whose ``.logits`` is (B, C), like a Hugging Face classifier.

A student folder holds ``config.json`` (:class:`BiLSTMConfig`, ``model_type`` "kdbert-bilstm"),
``model.safetensors`` and ``vocab.txt``; :func:`save_bilstm` writes it atomically,
:func:`load_bilstm` reads it back.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput

from kdbert.families.bilstm.encoder_vectors import (encoder_dim, encoder_frequent_words, encoder_word_vectors,
                                                    is_encoder_source)
from kdbert.families.bilstm.words import (Vocab, WordVectors, embedding_matrix, frequent_file_words, oov_rate,
                                          ranked_words, read_word_vectors, word_vector_dim)
from kdbert.errors import KdbertError
from kdbert.core.atomic_io import replace_dir, write_json

MODEL_TYPE = "kdbert-bilstm"
SENTENCE_INPUTS = ("input_ids", "attention_mask")
PAIR_INPUTS = SENTENCE_INPUTS + ("input_ids_b", "attention_mask_b")
# How many of the word vectors' most frequent words join the training words in a new student's
# vocabulary (--frequent-words): measured in benchmarks/results/bilstm_vocab_size.md.
FREQUENT_WORDS = 20_000


@dataclass
class BiLSTMConfig:
    """Shape of a BiLSTM student. ``pair``: siamese sentence-pair model; ``num_labels`` 1 for
    regression; ``freeze_embeddings``: keep the initial (word-vector) embeddings fixed;
    ``dropout``: on the embeddings and on the ReLU layer's output (0 in the paper)."""

    vocab_size: int
    num_labels: int
    pair: bool = False
    embedding_dim: int = 300
    hidden_size: int = 150
    fc_size: int = 200
    freeze_embeddings: bool = False
    dropout: float = 0.0
    model_type: str = MODEL_TYPE
    kdbert_text_columns: list | None = None  # the columns it was trained on (kdbert.data.tasks.record_text_columns)

    def __post_init__(self):
        sizes = (self.vocab_size, self.num_labels, self.embedding_dim, self.hidden_size, self.fc_size)
        if min(sizes) < 1 or not 0.0 <= self.dropout < 1.0:
            raise KdbertError(f"BiLSTM sizes must be >= 1 and 0 <= dropout < 1 (got {self})")

    @property
    def input_names(self) -> tuple[str, ...]:
        """The forward's inputs, in order: :data:`SENTENCE_INPUTS`, or :data:`PAIR_INPUTS` for pairs."""
        return PAIR_INPUTS if self.pair else SENTENCE_INPUTS

    @property
    def feature_size(self) -> int:
        """Width of the ReLU layer's input: 2H for one sentence, 8H for pairs."""
        return 2 * self.hidden_size * (4 if self.pair else 1)

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """``folder/config.json`` (the name and method Hugging Face configs use, so an export
        writes it beside the ONNX graph as it writes an HF config)."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        write_json(Path(folder) / "config.json", asdict(self))

    @classmethod
    def from_dict(cls, data: dict, where: str = "config") -> BiLSTMConfig:
        if data.get("model_type") != MODEL_TYPE:
            raise KdbertError(f"{where}: model_type is {data.get('model_type')!r}, not {MODEL_TYPE!r}; "
                              "this is not a BiLSTM student folder")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise KdbertError(f"{where}: unknown BiLSTM config field(s) {unknown}; was it written by a newer kdbert?")
        return cls(**data)


class BiLSTMStudent(nn.Module):
    """The paper's BiLSTM classifier / regressor; see the module docstring for shapes and inputs."""

    def __init__(self, config: BiLSTMConfig):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=Vocab.pad_id)
        self.embeddings.weight.requires_grad_(not config.freeze_embeddings)
        self.forward_lstm = nn.LSTM(config.embedding_dim, config.hidden_size, batch_first=True)
        self.backward_lstm = nn.LSTM(config.embedding_dim, config.hidden_size, batch_first=True)
        self.dropout = nn.Dropout(config.dropout)
        self.fc = nn.Linear(config.feature_size, config.fc_size)
        self.classifier = nn.Linear(config.fc_size, config.num_labels)

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Write ``config.json`` and ``model.safetensors`` into ``folder`` (created if needed), the
        names Hugging Face models use, so the trainer saves this student like any other;
        :func:`save_bilstm` adds the vocabulary and makes the write atomic."""
        folder = Path(folder)
        self.config.save_pretrained(folder)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()},
                  str(folder / "model.safetensors"), metadata={"format": "pt"})

    def get_input_embeddings(self) -> nn.Embedding:
        """The word embeddings (the name Hugging Face models use, so size reports find them)."""
        return self.embeddings

    def set_embeddings(self, matrix: torch.Tensor) -> None:
        """Copy an initial embedding matrix (vocab_size, embedding_dim) in, e.g. from word vectors."""
        if tuple(matrix.shape) != tuple(self.embeddings.weight.shape):
            raise KdbertError(f"embedding matrix {tuple(matrix.shape)} does not fit the student's "
                              f"{tuple(self.embeddings.weight.shape)}; rebuild it from the student's vocabulary")
        with torch.no_grad():
            self.embeddings.weight.copy_(matrix)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Sentence vectors h = [h_fwd; h_bwd] (B, 2H) of right-padded word ids (B, L)."""
        batch, width = input_ids.shape
        lengths = attention_mask.sum(dim=-1).clamp(min=1).to(torch.long)  # (B,)
        x = self.dropout(self.embeddings(input_ids))  # (B, L, E)
        positions = torch.arange(width, device=input_ids.device).unsqueeze(0)  # (1, L)
        last = (lengths - 1).unsqueeze(1)  # (B, 1)
        # Reverse each row within its length; padding positions stay where they are.
        reverse = torch.where(positions <= last, last - positions, positions)  # (B, L)
        x_reversed = x.gather(1, reverse.unsqueeze(-1).expand_as(x))
        out_fwd, _ = self.forward_lstm(x)  # (B, L, H)
        out_bwd, _ = self.backward_lstm(x_reversed)
        at_last = last.unsqueeze(-1).expand(batch, 1, self.config.hidden_size)  # (B, 1, H)
        h_fwd = out_fwd.gather(1, at_last).squeeze(1)
        h_bwd = out_bwd.gather(1, at_last).squeeze(1)
        return torch.cat([h_fwd, h_bwd], dim=-1)

    def features(self, input_ids, attention_mask, input_ids_b=None, attention_mask_b=None) -> torch.Tensor:
        """The ReLU layer's input: h (B, 2H), or [h1; h2; h1*h2; |h1-h2|] (B, 8H) for pairs.

        The two sentences of a pair are encoded in two calls: batching them into one call needs
        Python arithmetic on shapes, which an ONNX trace would freeze."""
        if not self.config.pair:
            if input_ids_b is not None:
                raise KdbertError("this BiLSTM student reads one sentence; it was given a second (input_ids_b)")
            return self.encode(input_ids, attention_mask)
        if input_ids_b is None or attention_mask_b is None:
            raise KdbertError("this BiLSTM student reads sentence pairs; pass input_ids_b and attention_mask_b")
        h1 = self.encode(input_ids, attention_mask)
        h2 = self.encode(input_ids_b, attention_mask_b)
        return torch.cat([h1, h2, h1 * h2, (h1 - h2).abs()], dim=-1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                input_ids_b: torch.Tensor | None = None,
                attention_mask_b: torch.Tensor | None = None) -> SequenceClassifierOutput:
        hidden = self.dropout(torch.relu(self.fc(self.features(input_ids, attention_mask, input_ids_b,
                                                               attention_mask_b))))
        return SequenceClassifierOutput(logits=self.classifier(hidden))


def build_bilstm(config: BiLSTMConfig, embeddings: torch.Tensor | None = None, seed: int = 42) -> BiLSTMStudent:
    """A fresh student: PyTorch's default init under ``torch.manual_seed(seed)``, then the given
    initial ``embeddings`` (see :func:`kdbert.families.bilstm.words.embedding_matrix`) if any."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = BiLSTMStudent(config)
    if embeddings is not None:
        model.set_embeddings(torch.as_tensor(embeddings))
    return model


def init_bilstm(texts: Sequence[str], num_labels: int, pair: bool, word_vectors: str | os.PathLike | None = None,
                min_count: int = 1, embedding_dim: int | None = None, seed: int = 42, dev_texts: Sequence[str] = (),
                vectors_folder: str | os.PathLike | None = None, frequent_words: int = FREQUENT_WORDS,
                **config: Any) -> tuple[BiLSTMStudent, Vocab, dict]:
    """A new student for a task, its vocabulary and a report.

    Vocabulary: the words of ``texts`` (every text of the training rows, augmented ones included)
    seen at least ``min_count`` times, then the ``frequent_words`` most frequent words of
    ``word_vectors`` that they lack (:func:`frequent_vector_words`), so that the common words of new
    text keep their pretrained vector instead of becoming ``[UNK]``. No other word joins: a word
    that only the dev texts hold is ``[UNK]``, as it is in a user's text, so dev scores say what new
    text gets. Without word vectors the vocabulary is the training words alone (a word no training
    row holds would have a random row that training never moves).
    Embeddings: from ``word_vectors`` (GloVe / word2vec text, or ``encoder:MODEL``:
    :func:`load_word_vectors`, stored in ``vectors_folder``) where they have the word, seeded
    random otherwise; ``embedding_dim`` defaults to the vectors' size (300 without vectors).
    ``config``: the other :class:`BiLSTMConfig` fields.

    The report: ``vocab_sources`` (words from each source), ``dev_oov_rate`` (the share of the
    words of ``dev_texts`` read as ``[UNK]`` with the training words only and with the frequent
    vector words added: what new text gets; with ``dev_texts``) and ``embeddings``
    (:func:`kdbert.families.bilstm.words.embedding_matrix`'s coverage).
    """
    if frequent_words < 0:
        raise KdbertError(f"--frequent-words must be 0 or more (got {frequent_words}); 0 keeps the training words only")
    train_vocab = Vocab.build(texts, min_count=min_count)
    frequent = [] if word_vectors is None else frequent_vector_words(word_vectors, frequent_words, train_vocab.index)
    vocab = train_vocab.extended(frequent)
    wanted = vocab.words[vocab.num_reserved:]
    vectors = None if word_vectors is None else load_word_vectors(word_vectors, wanted, embedding_dim, vectors_folder)
    dim = embedding_dim or (vectors.dim if vectors is not None else 300)
    matrix, coverage = embedding_matrix(vocab, dim, vectors, seed)
    model = build_bilstm(BiLSTMConfig(vocab_size=len(vocab), num_labels=num_labels, pair=pair, embedding_dim=dim,
                                      **config), torch.from_numpy(matrix), seed)
    report = {"vocab_sources": {"train": len(train_vocab) - train_vocab.num_reserved,
                                "frequent vector words": len(vocab) - len(train_vocab)}}
    dev_counts = ranked_words(dev_texts)
    if dev_counts:
        report["dev_oov_rate"] = {"train words only": oov_rate(train_vocab, dev_counts),
                                  "with frequent vector words": oov_rate(vocab, dev_counts)}
    return model, vocab, {**report, "embeddings": coverage}


def frequent_vector_words(source: str | os.PathLike, count: int, known: Iterable[str]) -> list[str]:
    """The ``count`` most frequent words of the word vectors ``source`` names that are not in
    ``known``, most frequent first: the first words of a GloVe or word2vec text file (ordered by
    frequency; :func:`kdbert.families.bilstm.words.frequent_file_words`), or for ``encoder:MODEL``,
    which has no frequencies, the first whole words of its tokenizer's vocabulary
    (:func:`kdbert.families.bilstm.encoder_vectors.encoder_frequent_words`; at most as many as it has)."""
    if is_encoder_source(source):
        return encoder_frequent_words(str(source), count, set(known))
    return frequent_file_words(source, count, known)


def load_word_vectors(source: str | os.PathLike, wanted: list[str], expected_dim: int | None = None,
                      folder: str | os.PathLike | None = None) -> WordVectors:
    """The vectors of the ``wanted`` words: from an encoder when ``source`` is ``encoder:MODEL``
    (:func:`kdbert.families.bilstm.encoder_vectors.encoder_word_vectors`, stored in ``folder``), else
    from a GloVe or word2vec text file (:func:`kdbert.families.bilstm.words.read_word_vectors`)."""
    if not is_encoder_source(source):
        return read_word_vectors(source, wanted, expected_dim)
    width = encoder_dim(str(source))  # from the config, before the encoder runs over every word
    if expected_dim is not None and width != expected_dim:
        raise KdbertError(f"--word-vectors {source}: the encoder's vectors have {width} dimensions but the "
                          f"student's embeddings have {expected_dim}; set --embedding-dim {width}")
    return encoder_word_vectors(str(source), wanted, folder)


def word_vectors_dim(source: str | os.PathLike) -> int:
    """The size of the vectors ``source`` gives (an encoder's hidden size, or a text file's width)."""
    return encoder_dim(str(source)) if is_encoder_source(source) else word_vector_dim(source)


def bilstm_flops(config: BiLSTMConfig, length: int) -> int:
    """Multiply-add FLOPs (2 per multiply-add) of one example of ``length`` words (each sentence of
    a pair), the form ``kdbert bench`` reports for transformers: per word and direction, the LSTM's
    gate projections ``2 * 4H * (E + H)``; then the ReLU layer ``2 * feature_size * F`` and the
    output layer ``2 * F * C``. Biases, gate nonlinearities and the embedding lookup are left out."""
    sentences = 2 if config.pair else 1
    lstm = sentences * 2 * length * 2 * 4 * config.hidden_size * (config.embedding_dim + config.hidden_size)
    return lstm + 2 * config.feature_size * config.fc_size + 2 * config.fc_size * config.num_labels


def save_bilstm(model: BiLSTMStudent, vocab: Vocab, folder: str | os.PathLike,
                reports: dict[str, dict] | None = None) -> None:
    """Write ``config.json``, ``model.safetensors``, ``vocab.txt`` (and JSON ``reports``) into
    ``folder`` atomically: a reader sees the old folder or the complete new one."""
    if len(vocab) != model.config.vocab_size:
        raise KdbertError(f"the vocabulary has {len(vocab)} words but the student {model.config.vocab_size}; "
                          "save the vocabulary the student was built with")
    out = Path(folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    vocab.save_pretrained(tmp)
    for name, report in (reports or {}).items():
        write_json(tmp / name, report)
    replace_dir(tmp, out)


def is_bilstm_folder(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds a BiLSTM student (its ``config.json`` says so)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text()).get("model_type") == MODEL_TYPE
    except (json.JSONDecodeError, AttributeError):
        return False


def load_bilstm(folder: str | os.PathLike) -> tuple[BiLSTMStudent, Vocab]:
    """Read a folder written by :func:`save_bilstm`: the student (in eval mode) and its vocabulary."""
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise KdbertError(f"{folder} has no config.json; pass a BiLSTM student folder")
    try:
        data = json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        raise KdbertError(f"{config_path}: not valid JSON ({exc.msg})") from None
    config = BiLSTMConfig.from_dict(data, str(config_path))
    vocab = Vocab.load(folder / "vocab.txt")
    if len(vocab) != config.vocab_size:
        raise KdbertError(f"{folder / 'vocab.txt'} has {len(vocab)} words but config.json says vocab_size "
                          f"{config.vocab_size}; the folder is inconsistent")
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise KdbertError(f"{folder} has no model.safetensors; the student was not saved completely")
    model = BiLSTMStudent(config)
    try:
        model.load_state_dict(load_file(str(weights)))
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[-1].strip()
        raise KdbertError(f"{weights}: the weights do not fit config.json ({first})") from None
    return model.eval(), vocab
