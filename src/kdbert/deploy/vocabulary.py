"""A vocabulary pruned to the tokens a task uses, for ``kdbert export --prune-vocab``.

The embedding matrix E (V, d) of a BERT-sized student is most of its parameters (30522 x 384 =
11.7M of a 3-layer student's 17.4M). The export keeps the rows of the tokens that the task's
training, held-out and dev texts (and an optional corpus file) tokenize to, plus every special
token, and maps the tokenizer's ids onto them inside the graph::

    remap[i] = position of i among the kept ids     (i kept)
             = position of [UNK]                     (otherwise)
    embedding(ids) = E[kept][remap[ids]]             remap (V,) int64, E[kept] (K, d)

so the exported model reads the same tokenizer's ids as before, and every text made of the kept
tokens gives exactly the unpruned model's output; a token outside them reads as [UNK].
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from kdbert.errors import KdbertError

__all__ = ["PrunedEmbedding", "kept_token_ids", "prune_vocabulary"]


class PrunedEmbedding(nn.Module):
    """``embedding(remap[ids])``: the rows ``kept`` of ``source`` (an ``nn.Embedding`` of V rows),
    read through ``remap`` (V,) from the full vocabulary's ids; ids not kept read ``unk_id``'s row."""

    def __init__(self, source: nn.Embedding, kept: list[int], unk_id: int):
        super().__init__()
        if unk_id not in kept:
            raise KdbertError("the pruned vocabulary must keep the [UNK] token")
        remap = torch.full((source.num_embeddings,), kept.index(unk_id), dtype=torch.long)
        remap[torch.tensor(kept)] = torch.arange(len(kept))
        self.register_buffer("remap", remap)
        self.embedding = nn.Embedding.from_pretrained(source.weight.detach()[kept].clone(), freeze=True,
                                                      padding_idx=None)
        self.num_embeddings, self.embedding_dim = source.num_embeddings, source.embedding_dim

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(self.remap[ids])


def _texts(data, corpus: str | None) -> list[str]:
    texts = [text for split in (data.train, data.held_out, *data.dev.values()) for example in split
             for text in example.texts]
    if corpus is not None:
        path = Path(corpus).expanduser()
        if not path.is_file():
            raise KdbertError(f"--prune-vocab-corpus {path} does not exist; pass a text file (one text per line)")
        texts += [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return texts


def kept_token_ids(tokenizer, data, corpus: str | None = None) -> list[int]:
    """Sorted ids of every token the task's texts (and ``corpus``) tokenize to, and the special tokens."""
    if getattr(tokenizer, "unk_token_id", None) is None:
        raise KdbertError("--prune-vocab needs a tokenizer with an [UNK] token (a WordPiece tokenizer such as "
                          "BERT's); export without --prune-vocab")
    kept = set(tokenizer.all_special_ids)
    texts = _texts(data, corpus)
    for start in range(0, len(texts), 1024):
        for ids in tokenizer(texts[start:start + 1024], add_special_tokens=False)["input_ids"]:
            kept.update(ids)
    return sorted(kept)


def prune_vocabulary(model: nn.Module, tokenizer, data, corpus: str | None = None) -> tuple[nn.Module, dict]:
    """A copy of ``model`` whose input embedding is a :class:`PrunedEmbedding` over
    :func:`kept_token_ids`, and what was kept: ``{"kept_tokens", "vocab_size", "embedding_params_before",
    "embedding_params_after", "sources"}``."""
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if not isinstance(embedding, nn.Embedding):
        raise KdbertError(f"--prune-vocab works on models with a token embedding (BERT, DistilBERT, MobileBERT); "
                          f"{type(model).__name__} has none; export without --prune-vocab")
    kept = kept_token_ids(tokenizer, data, corpus)
    pruned = copy.deepcopy(model)
    pruned.set_input_embeddings(PrunedEmbedding(embedding, kept, tokenizer.unk_token_id))
    sources = ["train", "held-out", "dev"] + ([str(corpus)] if corpus else [])
    return pruned, {"kept_tokens": len(kept), "vocab_size": embedding.num_embeddings,
                    "embedding_params_before": embedding.weight.numel(),
                    "embedding_params_after": len(kept) * embedding.embedding_dim, "sources": sources}
