"""The distilled BiLSTM family: word-level students with their own vocabulary (``vocab.txt``).

A folder is the family's when its ``config.json`` says ``model_type`` "kdbert-bilstm" (the
trained student, or its export). Its inputs are word ids and masks, two of each for a siamese
pair model (``input_ids_b``, ``attention_mask_b``, with a length axis of their own), so it is
exported with the TorchScript exporter (torch 2.13's dynamo exporter fixes those lengths to the
example's). ``FlopCounterMode`` does not count LSTMs: its FLOPs are
:func:`~kdbert.families.bilstm.model.bilstm_flops`.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import torch
from torch import nn

from kdbert.core.trace import HookAdapter
from kdbert.errors import KdbertError
from kdbert.families.bilstm.model import (
    FREQUENT_WORDS,
    BiLSTMConfig,
    BiLSTMStudent,
    bilstm_flops,
    build_bilstm,
    frequent_vector_words,
    is_bilstm_folder,
    load_bilstm,
)
from kdbert.families.bilstm.words import Vocab
from kdbert.families.registry import Candidate, Family, InputSpec, ShapeContext, register_family

SYNTHETIC_ROWS = 64
SPEED_HIDDEN_SIZES = (150, 300)  # the paper's sentence and pair settings
DEFAULT_EMBEDDING_DIM = BiLSTMConfig.__dataclass_fields__["embedding_dim"].default  # without word vectors


def student_vocab(context: ShapeContext, frequent_words: int = FREQUENT_WORDS) -> Vocab:
    """The vocabulary a student distilled for ``context`` ships with, by
    :func:`~kdbert.families.bilstm.model.init_bilstm`'s rule: the training words, plus, with word
    vectors, up to ``frequent_words`` of their most frequent words that the training words lack
    (:func:`~kdbert.families.bilstm.model.frequent_vector_words`, which reads only the lines it
    needs). Word vectors known only by their size (``context.word_vectors`` None) get
    ``frequent_words`` stand-in entries that no text matches, as many as a full-size vector file
    gives, so that the student's size still counts them. Without word vectors: the training words."""
    vocab = Vocab.build(context.texts)
    if context.word_vectors is not None:
        return vocab.extended(frequent_vector_words(context.word_vectors, frequent_words, vocab.index))
    if context.word_vector_dim is not None:
        return vocab.extended(f"[frequent word {i}]" for i in range(frequent_words))
    return vocab


def _random_student(hidden: int, context: ShapeContext) -> tuple[BiLSTMStudent, Vocab]:
    """A student of the shipped one's size (its vocabulary: :func:`student_vocab`), random weights."""
    vocab = student_vocab(context)
    config = BiLSTMConfig(vocab_size=len(vocab), num_labels=context.num_labels, pair=context.pair, hidden_size=hidden,
                          embedding_dim=context.word_vector_dim or DEFAULT_EMBEDDING_DIM)
    return build_bilstm(config), vocab


class BiLSTMFamily(Family):
    name = "bilstm"
    model_classes = (BiLSTMStudent,)

    def recognises(self, folder: Path) -> bool:
        return is_bilstm_folder(folder)

    def trace_adapter(self) -> HookAdapter:
        """Matches read its logits (the distilled BiLSTM matches nothing else)."""
        return HookAdapter({})

    def load(self, folder: Path, task=None):
        model, vocab = load_bilstm(folder)
        if task is not None:
            self.check_fits(str(folder), model.config.num_labels, model.config.pair, task)
        return model, vocab

    def load_encoder(self, folder: Path) -> Vocab:
        if not (folder / "vocab.txt").is_file():
            raise KdbertError(f"the word-level export in {folder} has no vocab.txt beside it; "
                              "export it with `kdbert export` or copy the student's vocab.txt there")
        return Vocab.load(folder / "vocab.txt")

    def from_config(self, folder: Path) -> BiLSTMStudent:
        config_path = folder / "config.json"
        return BiLSTMStudent(BiLSTMConfig.from_dict(json.loads(config_path.read_text()), str(config_path)))

    def input_spec(self, model: nn.Module) -> InputSpec:
        return InputSpec(model.config.input_names, None, model.config.vocab_size, graphs=("torchscript",))

    def flops(self, model: nn.Module, seq_len: int) -> int:
        return bilstm_flops(model.config, seq_len)

    def evaluator(self, data, encoder, max_seq_len: int | None, batch_size: int):
        """Whole texts (the student has no length limit) encoded with its vocabulary."""
        from kdbert.families.bilstm.evaluate import WordTaskEvaluator

        return WordTaskEvaluator(data, encoder, batch_size)

    def synthetic_rows(self, spec: InputSpec, seq_len: int, encoder, batch_size: int):
        """64 rows of random word ids >= 2 (neither padding nor UNK) and lengths 1..seq_len, a
        pair's two texts drawn apart."""
        from kdbert.families.bilstm.batching import DistillationDataset
        from kdbert.families.bilstm.evaluate import predict_words

        generator = torch.Generator().manual_seed(0)
        features = []
        for _ in range(SYNTHETIC_ROWS):
            texts = {}
            for name in spec.names:
                if name.startswith("input_ids"):
                    length = int(torch.randint(1, seq_len + 1, (1,), generator=generator))
                    texts[name] = torch.randint(2, max(3, spec.vocab_size), (length,), generator=generator).tolist()
            features.append({"student": texts})
        dataset = DistillationDataset(features)
        return dataset, lambda model: predict_words(model, dataset, batch_size)

    def runner(self, model: nn.Module, spec: InputSpec):
        return model

    def candidates(self, context: ShapeContext) -> list[Candidate]:
        """The distilled BiLSTM at hidden 150 and 300, its embeddings the size of the word vectors
        given (else 300), its vocabulary the shipped student's (:func:`student_vocab`: the training
        texts' words, plus the word vectors' most frequent words when vectors are given), so that the
        size and parameters measured are the shipped student's; none without training texts or for
        question answering (it classifies whole texts)."""
        if not context.texts or context.question_answering:
            return []
        dim = context.word_vector_dim or DEFAULT_EMBEDDING_DIM
        return [Candidate(f"bilstm-h{hidden}", self.name, (("hidden_size", hidden), ("embedding_dim", dim)),
                          partial(_random_student, hidden)) for hidden in SPEED_HIDDEN_SIZES]

    def check_fits(self, where: str, num_labels: int | None, pair: bool, task) -> None:
        """Refuse a student whose outputs or sentence count differ from the task's."""
        if num_labels not in (None, task.num_labels) or pair != task.is_pair:
            raise KdbertError(f"{where} is a BiLSTM with {num_labels} output(s) for "
                              f"{'sentence pairs' if pair else 'single sentences'}, but {task.name} has "
                              f"{task.num_labels} output(s) and {'pairs' if task.is_pair else 'single sentences'}; "
                              "evaluate it on the task it was distilled for")


register_family(BiLSTMFamily(), built_in=True)
