"""A teacher whose labels are the task's in another order is reordered, never silently misread."""

from __future__ import annotations

import pytest
import torch
from conftest import save_tiny_classifier
from transformers import AutoConfig

from kdbert.errors import KdbertError
from kdbert.core.loading import load_sequence_classifier

MNLI = ("entailment", "neutral", "contradiction")


def save_named(tmp_path, tokenizer, names, name="teacher"):
    folder = save_tiny_classifier(tmp_path / name, tokenizer, num_labels=len(names))
    config = AutoConfig.from_pretrained(folder)
    config.id2label = dict(enumerate(names))
    config.label2id = {label: i for i, label in enumerate(names)}
    config.save_pretrained(folder)
    return folder


def logits(model, tokenizer):
    batch = tokenizer(["the cat sat", "a dog ran"], return_tensors="pt")
    model.eval()
    with torch.no_grad():
        return model(**batch).logits


def test_reordered_mnli_teacher_is_permuted_into_the_task_order(tmp_path, tiny_tokenizer, capsys):
    published = ("CONTRADICTION", "entailment", "Neutral")  # as some public checkpoints order them
    folder = save_named(tmp_path, tiny_tokenizer, published)
    raw = load_sequence_classifier(str(folder), 3, new_head_ok=False)
    aligned = load_sequence_classifier(str(folder), 3, new_head_ok=False, labels=MNLI)
    before, after = logits(raw, tiny_tokenizer), logits(aligned, tiny_tokenizer)
    # task order entailment, neutral, contradiction = the published outputs 1, 2, 0. Close, not
    # equal: the classifier's rows are permuted, so the matmul may compute a label's output in
    # another kernel block (full vs tail), which can change its last bits on some CPUs; the three
    # logits of a row are ~4e-3 apart here, far outside the tolerance
    torch.testing.assert_close(after, before[:, [1, 2, 0]], rtol=1e-5, atol=1e-6)
    for name in ("weight", "bias"):  # the rows themselves are copied exactly
        assert torch.equal(getattr(aligned.classifier, name), getattr(raw.classifier, name)[[1, 2, 0]])
    assert aligned.config.id2label == {0: "entailment", 1: "neutral", 2: "contradiction"}
    assert "reordered to the task's ['entailment', 'neutral', 'contradiction']" in capsys.readouterr().out


def test_same_order_placeholders_and_numeric_tasks_are_left_alone(tmp_path, tiny_tokenizer):
    same = save_named(tmp_path, tiny_tokenizer, MNLI, "same")
    placeholder = save_tiny_classifier(tmp_path / "placeholder", tiny_tokenizer, num_labels=3)
    for folder in (same, placeholder):
        raw = load_sequence_classifier(str(folder), 3, new_head_ok=False)
        aligned = load_sequence_classifier(str(folder), 3, new_head_ok=False, labels=MNLI)
        assert torch.equal(logits(raw, tiny_tokenizer), logits(aligned, tiny_tokenizer))  # same weights and batch
    # SST-2's labels are '0'/'1': a teacher naming them 'negative'/'positive' cannot be checked
    named = save_named(tmp_path, tiny_tokenizer, ("positive", "negative"), "sst")
    model = load_sequence_classifier(str(named), 2, new_head_ok=False, labels=("0", "1"))
    assert model.config.id2label == {0: "positive", 1: "negative"}


def test_teacher_with_other_label_names_is_refused(tmp_path, tiny_tokenizer):
    folder = save_named(tmp_path, tiny_tokenizer, ("entailment", "neutral", "unrelated"))
    with pytest.raises(KdbertError, match=r"names its labels \['entailment', 'neutral', 'unrelated'\] but the "
                                          r"task's labels are \['entailment', 'neutral', 'contradiction'\]"):
        load_sequence_classifier(str(folder), 3, new_head_ok=False, labels=MNLI)
