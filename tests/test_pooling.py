"""Mean and pair pooling (kdbert.core.pooling): the pooled vector by hand, the config round trip through kdbert's
loaders, ``finetune --pooling auto`` on a sentence-transformers folder, compress's weight-selected
students of a mean-pooling teacher, and ONNX exports of every graph kind (tiny random models)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import save_tiny_classifier, tiny_bert_config, write_glue_task
from test_export import random_batch
from test_graphs import max_difference_from_pytorch
from transformers import (AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification, BertModel,
                          DistilBertConfig, GPT2Config, MPNetConfig, RobertaConfig)

from kdbert.cli import main
from kdbert.core.loading import load_sequence_classifier
from kdbert.core.pooling import (POOLING_KEY, after_first_separator, apply_pooling, choose_pooling, masked_mean,
                                 pair_product, pool_pairs, pooling_of, set_pooling)
from kdbert.deploy.export import export_classifier
from kdbert.deploy.onnx_runtime import OnnxClassifier
from kdbert.errors import KdbertError
from kdbert.families.hf import HFFamily
from kdbert.families.registry import ShapeContext

SHAPE = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32)
WIDE = dict(hidden_size=256, num_attention_heads=8, intermediate_size=512)  # compress's candidates are >= 128 wide
LENGTHS = [7, 3]  # two rows of different lengths: the second padded with 4 masked tokens


def _classifier(kind: str, vocab: int, **shape):
    common = dict(vocab_size=vocab, max_position_embeddings=66, num_labels=shape.pop("num_labels", 2))
    shape = {**SHAPE, **shape}
    config = {"bert": lambda: BertConfig(**shape, **common),
              "roberta": lambda: RobertaConfig(**shape, **common, pad_token_id=0),
              "mpnet": lambda: MPNetConfig(**shape, **common, pad_token_id=1, eos_token_id=2),
              "distilbert": lambda: DistilBertConfig(dim=16, n_layers=2, n_heads=4, hidden_dim=32, **common)}[kind]()
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(config).eval()


def _hand_logits(model, batch: dict) -> torch.Tensor:
    """The head applied to the mean of each row's real tokens' last hidden states, written out per row
    and per architecture (BERT, MobileBERT: the classifier on the mean, no pooler; RoBERTa: its head's dense + tanh
    + out_proj; DistilBERT: pre_classifier + ReLU + classifier)."""
    with torch.no_grad():
        hidden = model(**batch, output_hidden_states=True).hidden_states[-1]
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        pooled = torch.stack([hidden[row, :length].sum(dim=0) / length for row, length in enumerate(lengths)])
        kind = model.config.model_type
        if kind in ("bert", "mobilebert"):
            return model.classifier(pooled)
        if kind == "distilbert":
            return model.classifier(torch.relu(model.pre_classifier(pooled)))
        return model.classifier.out_proj(torch.tanh(model.classifier.dense(pooled)))


def _logits(model, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


def _batch(model) -> dict:
    batch = random_batch(model.config.vocab_size, LENGTHS, pair=False)
    names = ("input_ids", "attention_mask") + (("token_type_ids",) if model.config.model_type == "bert" else ())
    return {name: batch[name] for name in names}


# ----------------------------------------------------------------------------- the pooled vector
@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])
def test_mean_pooling_feeds_the_head_the_mean_of_the_real_tokens(kind, tiny_tokenizer):
    model = _classifier(kind, len(tiny_tokenizer))
    batch = _batch(model)
    cls_logits = _logits(model, batch)
    set_pooling(model, "mean")
    set_pooling(model, "mean")  # idempotent: one hook
    # float32 sums in another order than the model's kernels: compared at float32 tolerance
    torch.testing.assert_close(_logits(model, batch), _hand_logits(model, batch), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(_logits(model, batch), cls_logits, atol=1e-4)
    set_pooling(model, "cls")
    assert torch.equal(_logits(model, batch), cls_logits) and POOLING_KEY not in model.config.to_dict()


def test_masked_mean_by_hand():
    hidden = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    expected = torch.stack([(hidden[0, 0] + hidden[0, 1]) / 2, torch.zeros(4)])  # an empty row: / max(1, 0)
    assert torch.equal(masked_mean(hidden, mask), expected)


def _hand_pair_logits(model, batch: dict) -> torch.Tensor:
    """BERT's classifier on H * u/|u| * v/|v|, u and v the plain means of each row's type-0 and type-1
    tokens, each sentence encoded alone: the encoder run per row and sentence with a 2-D mask that
    keeps that sentence's real tokens only (transformers' own masking, no pair hooks)."""
    pooling, model.config.kdbert_pooling = model.config.kdbert_pooling, "cls"  # the plain encoder
    try:
        rows = []
        with torch.no_grad():
            for row in range(batch["input_ids"].shape[0]):
                real = batch["attention_mask"][row].bool()
                means = []
                for sentence in (0, 1):
                    keep = real & (batch["token_type_ids"][row] == sentence)
                    hidden = model.bert(input_ids=batch["input_ids"][row:row + 1], attention_mask=keep[None].long(),
                                        token_type_ids=batch["token_type_ids"][row:row + 1]).last_hidden_state[0]
                    means.append(hidden[keep].mean(dim=0))
                u, v = means
                rows.append(u.shape[0] * (u / u.norm()) * (v / v.norm()))
            return model.classifier(torch.stack(rows))
    finally:
        model.config.kdbert_pooling = pooling


def test_pair_pooling_feeds_the_head_a_learned_cosine_of_the_two_sentences(tiny_tokenizer):
    model = set_pooling(_classifier("bert", len(tiny_tokenizer)), "pair")
    batch = random_batch(model.config.vocab_size, LENGTHS, pair=True)  # each row's second half is sentence 2
    torch.testing.assert_close(_logits(model, batch), _hand_pair_logits(model, batch), rtol=1e-5, atol=1e-5)
    # weights c / H and no bias read c * cos(u, v)
    with torch.no_grad():
        model.classifier.weight.fill_(3.0 / model.config.hidden_size)
        model.classifier.bias.zero_()
    products = _hand_pair_logits(model, batch)[:, 0] / 3.0  # cos(u, v) per row, by hand
    assert torch.all(products.abs() <= 1 + 1e-6) and products.std() > 0
    torch.testing.assert_close(_logits(model, batch), 3.0 * products.unsqueeze(1).expand(-1, 2), rtol=1e-5,
                               atol=1e-5)
    # each sentence attends to itself alone: a token of the second sentence changes the first's mean not at all
    changed = {**batch, "input_ids": batch["input_ids"].clone()}
    changed["input_ids"][0, LENGTHS[0] - 1] = 6 if int(batch["input_ids"][0, LENGTHS[0] - 1]) != 6 else 7
    set_pooling(model, "cls")
    assert not torch.allclose(_hidden_first_mean(model, changed), _hidden_first_mean(model, batch), atol=1e-6)
    set_pooling(model, "pair")
    assert torch.equal(_hidden_first_mean(model, changed), _hidden_first_mean(model, batch))


def _hidden_first_mean(model, batch: dict) -> torch.Tensor:
    """Row 0's mean of its first sentence's last hidden states (the pair hooks applied if set)."""
    with torch.no_grad():
        hidden = model.bert(**batch).last_hidden_state[0]
    keep = batch["attention_mask"][0].bool() & (batch["token_type_ids"][0] == 0)
    return hidden[keep].mean(dim=0)


def test_pair_product_of_an_empty_sentence_is_zero_not_nan():
    hidden = torch.ones(1, 3, 4)
    pooled = pair_product(hidden, torch.tensor([[1, 1, 0]]), torch.zeros(1, 3, dtype=torch.long))
    assert torch.equal(pooled, torch.zeros(1, 4))


def test_pair_pooling_needs_the_second_sentence_marked(tmp_path, tiny_tokenizer, capsys):
    with pytest.raises(KdbertError, match="pair pooling is offered for bert, roberta, xlm-roberta, mpnet "
                                          "classifiers, not distilbert; use --pooling cls"):
        set_pooling(_classifier("distilbert", len(tiny_tokenizer)), "pair")
    separatorless = _classifier("mpnet", len(tiny_tokenizer))
    separatorless.config.eos_token_id = None
    with pytest.raises(KdbertError, match="records no sep_token_id or eos_token_id; add the tokenizer's sep_token_id"):
        set_pooling(separatorless, "pair")
    model = set_pooling(_classifier("bert", len(tiny_tokenizer)), "pair")
    batch = _batch(model)
    with pytest.raises(KdbertError, match="pair pooling reads which tokens are the second sentence's from "
                                          "token_type_ids"):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    glue = tmp_path / "glue"
    write_glue_task(glue, "SST-2", n_train=8, n_dev=4)
    assert main(["finetune", "--model", save_tiny_classifier(tmp_path / "m", tiny_tokenizer).as_posix(), "--task",
                 "sst2", "--data-dir", str(glue), "--max-steps", "1", "--pooling", "pair", "--output-dir",
                 str(tmp_path / "o"), "--no-progress"]) == 2
    assert ("--pooling pair compares a sentence pair's two sentences; sst2 has one text per row: use --pooling mean "
            "or cls") in capsys.readouterr().err


# RoBERTa and MPNet mark no token types: a pair is <s> A </s></s> B </s> (ids 0 and 2; padding 1)
SEPARATED = torch.tensor([[0, 7, 8, 9, 2, 2, 10, 11, 2],
                          [0, 12, 2, 2, 13, 14, 2, 1, 1]])
SECOND = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1, 1],  # the second sentence: from the second separator on
                       [0, 0, 0, 1, 1, 1, 1, 1, 1]])


def test_the_second_sentence_starts_after_the_first_separator():
    assert torch.equal(after_first_separator(SEPARATED, 2), SECOND)


def _hand_separated_pair_logits(model, batch: dict) -> torch.Tensor:
    """Each sentence of each row encoded alone (<s> A </s> and </s> B </s>, found by hand above), the
    means of its last hidden states u and v, then the dense + tanh + out_proj head on H (u/|u|)(v/|v|)."""
    pooling = model.config.kdbert_pooling
    set_pooling(model, "cls")  # the base model without the pair hooks
    try:
        with torch.no_grad():
            rows = []
            for row in range(len(SEPARATED)):
                real = batch["attention_mask"][row].bool()
                means = []
                for sentence in (0, 1):
                    keep = real & (SECOND[row] == sentence)
                    hidden = model.base_model(input_ids=SEPARATED[row:row + 1],
                                              attention_mask=keep[None].long()).last_hidden_state[0]
                    means.append(hidden[keep].mean(dim=0))
                u, v = means
                rows.append(u.shape[0] * (u / u.norm()) * (v / v.norm()))
            head = model.classifier
            return head.out_proj(torch.tanh(head.dense(torch.stack(rows))))
    finally:
        set_pooling(model, pooling)


@pytest.mark.parametrize("kind", ["roberta", "mpnet"])
def test_pair_pooling_finds_the_second_sentence_after_the_separator(kind, tiny_tokenizer):
    model = set_pooling(_classifier(kind, len(tiny_tokenizer)), "pair")
    batch = {"input_ids": SEPARATED, "attention_mask": (SEPARATED != 1).long()}
    torch.testing.assert_close(_logits(model, batch), _hand_separated_pair_logits(model, batch), rtol=1e-5,
                               atol=1e-5)
    # a token of the second sentence changes the first's states (position 0 holds the pooled vector) not at all
    changed = {**batch, "input_ids": SEPARATED.clone()}
    changed["input_ids"][0, 6] = 20
    with torch.no_grad():
        first = [model.base_model(**b).last_hidden_state[0, 1:5] for b in (batch, changed)]
    assert torch.equal(first[0], first[1])


@pytest.mark.parametrize("labels", [1, 2])
def test_a_tanh_head_starts_as_the_cosine_of_the_two_sentences(labels, tiny_tokenizer):
    model = pool_pairs(_classifier("mpnet", len(tiny_tokenizer), num_labels=labels))
    batch = {"input_ids": SEPARATED, "attention_mask": (SEPARATED != 1).long()}
    if labels == 2:  # a classifier's head starts at 0
        assert not _logits(model, batch).any()
        return
    pooled = _pooled(model, batch)  # H (u/|u|)(v/|v|): its mean over the H units is cos(u, v)
    cosines = pooled.mean(dim=1)
    torch.testing.assert_close(_logits(model, batch)[:, 0], cosines, rtol=0, atol=linearisation_error(pooled))
    assert torch.all(cosines.abs() <= 1) and (cosines[0] - cosines[1]).abs() > 1e-3


def linearisation_error(pooled: torch.Tensor) -> float:
    """The most a tanh head started as the cosine (dense 0.01 I, out_proj 1 / (0.01 H)) can differ from the mean of
    ``pooled``: |x - tanh(0.01 x) / 0.01| <= 0.01^2 |x|^3 / 3 per unit, so the mean is off by at most that at the
    largest |x|; plus float32 rounding of sums of order 1."""
    return 0.01 ** 2 * float(pooled.abs().max()) ** 3 / 3 + 1e-6


def _pooled(model, batch: dict) -> torch.Tensor:
    """What the pair-pooled base model puts at the first position (B, H)."""
    with torch.no_grad():
        return model.base_model(**batch).last_hidden_state[:, 0]


@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_a_cosine_head_reads_a_scaled_and_shifted_cosine_per_class(kind, tiny_tokenizer):
    from kdbert.core.pooling import cosine_head

    model = pool_pairs(_classifier(kind, len(tiny_tokenizer), num_labels=3))
    batch = (random_batch(model.config.vocab_size, LENGTHS, pair=True) if kind == "bert"
             else {"input_ids": SEPARATED, "attention_mask": (SEPARATED != 1).long()})
    with torch.no_grad():  # what the head reads: H (u/|u|)(v/|v|), whose mean over the H units is cos(u, v)
        pooled = model.bert(**batch).pooler_output if kind == "bert" else _pooled(model, batch)
    cosines = pooled.mean(dim=1)
    scales, biases = torch.tensor([-2.0, 0.5, 3.0]), torch.tensor([0.25, -1.0, 0.0])
    cosine_head(model, scales, biases)
    expected = cosines.unsqueeze(1) * scales + biases  # logit_c = a_c cos(u, v) + b_c
    error = 1e-5 if kind == "bert" else 3.0 * linearisation_error(pooled)  # |a_c| <= 3 times the tanh's error
    torch.testing.assert_close(_logits(model, batch), expected, rtol=0, atol=error)


def test_one_feature_logistic_puts_the_threshold_between_symmetric_classes():
    from kdbert.compress.start_pooling import one_feature_logistic

    # symmetric about 0.5: the fitted logits tie there, class 1 above, class 0 below
    values, labels = torch.tensor([0.1, 0.2, 0.3, 0.7, 0.8, 0.9, 0.45, 0.55]), torch.tensor([0, 0, 0, 1, 1, 1, 1, 0])
    a, b = one_feature_logistic(values, labels, 2)
    margin = lambda value: float((a[1] - a[0]) * value + b[1] - b[0])  # noqa: E731 - logit_1 - logit_0
    assert abs(margin(0.5)) < 1e-4
    assert margin(0.9) > 1.0 and margin(0.1) < -1.0
    # an unbalanced set moves it towards the rarer class: more 0s put the tie above 0.5
    a, b = one_feature_logistic(torch.tensor([0.1, 0.2, 0.3, 0.4, 0.6, 0.9]), torch.tensor([0, 0, 0, 0, 1, 1]), 2)
    assert float((a[1] - a[0]) * 0.5 + b[1] - b[0]) < 0


def test_a_pair_classifiers_fitted_cosine_head_follows_the_cosine_of_its_two_sentences(tiny_tokenizer):
    import random

    from conftest import sentence

    from kdbert.compress.start_pooling import fit_cosine_classifier
    from kdbert.core.pooling import cosine_head
    from kdbert.data.glue import Example

    rng = random.Random(0)
    pairs = [(sentence(rng), sentence(rng)) for _ in range(60)]
    model = pool_pairs(_classifier("bert", len(tiny_tokenizer), **WIDE, type_vocab_size=2))
    encoded = dict(tiny_tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt"))
    assert not _logits(model, encoded).any()  # the zero head: every row a tie
    cosines = _logits(cosine_head(model, torch.ones(2), torch.zeros(2)), encoded)[:, 0]
    low, high = cosines.quantile(0.4), cosines.quantile(0.6)  # labels by the cosine, a gap left between the classes
    kept = [(pair, int(c > high)) for pair, c in zip(pairs, cosines) if not low <= c <= high]
    rows = [Example(pair, label) for pair, label in kept]
    fit_cosine_classifier(pool_pairs(model), tiny_tokenizer, rows, 32)
    encoded = dict(tiny_tokenizer([p[0] for p, _ in kept], [p[1] for p, _ in kept], padding=True, return_tensors="pt"))
    assert _logits(model, encoded).argmax(dim=1).tolist() == [label for _, label in kept]
    assert not (model.classifier.weight.std(dim=1)).any()  # each class's row reads the cosine: one weight for all


# ----------------------------------------------------------------------------- recorded and loaded
def test_the_pooling_is_saved_in_the_config_and_every_loader_applies_it(tmp_path, tiny_tokenizer):
    folder = save_tiny_classifier(tmp_path / "model", tiny_tokenizer)
    model = set_pooling(BertForSequenceClassification.from_pretrained(folder).eval(), "mean")
    model.save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())[POOLING_KEY] == "mean"
    batch = _batch(model)
    expected = _logits(model, batch)
    family = HFFamily()
    from_config = family.from_config(folder)
    from_config.load_state_dict(model.state_dict())
    # each loaded model computes the saved one's logits in the same batch: bit for bit
    for loaded in (family.load(folder)[0], family.load_for_bench(str(folder)),
                   load_sequence_classifier(str(folder), 2, new_head_ok=False), from_config):
        assert torch.equal(_logits(loaded.eval(), batch), expected), type(loaded).__name__
    assert not torch.allclose(_logits(set_pooling(model, "cls"), batch), expected, atol=1e-4)


def test_an_unknown_pooling_or_an_architecture_without_a_first_token_head_is_refused(tiny_tokenizer):
    model = _classifier("bert", len(tiny_tokenizer))
    model.config.kdbert_pooling = "max"
    with pytest.raises(KdbertError, match="kdbert_pooling 'max'; use one of cls, mean"):
        apply_pooling(model)
    gpt2 = AutoModelForSequenceClassification.from_config(GPT2Config(vocab_size=40, n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(KdbertError, match="not gpt2; use --pooling cls"):
        set_pooling(gpt2, "mean")


# ----------------------------------------------------------------------------- --pooling auto
def _sentence_transformers_folder(folder, tokenizer, modes: dict) -> str:
    """A tiny pre-trained BERT saved as sentence-transformers saves all-MiniLM-L6-v2: modules.json and
    1_Pooling/config.json beside the model."""
    torch.manual_seed(0)
    BertModel(tiny_bert_config(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 16, **modes}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    return str(folder)


MEAN_TOKENS = {"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}


def test_finetune_pools_by_mean_where_the_folder_says_so_and_as_asked(tmp_path, tiny_tokenizer, capsys):
    glue = tmp_path / "glue"
    write_glue_task(glue, "SST-2", n_train=8, n_dev=4)
    folder = _sentence_transformers_folder(tmp_path / "encoder", tiny_tokenizer, MEAN_TOKENS)
    common = ["--model", folder, "--task", "sst2", "--data-dir", str(glue), "--max-steps", "1", "--batch-size", "4",
              "--no-progress"]
    assert main(["finetune", *common, "--output-dir", str(tmp_path / "auto")]) == 0
    out = capsys.readouterr().out
    assert f"pooling: mean ({tmp_path / 'encoder' / '1_Pooling' / 'config.json'} pools by mean tokens)" in out
    assert json.loads((tmp_path / "auto" / "config.json").read_text())[POOLING_KEY] == "mean"
    assert main(["finetune", *common, "--pooling", "cls", "--output-dir", str(tmp_path / "cls")]) == 0
    assert "pooling: cls (--pooling cls)" in capsys.readouterr().out
    assert POOLING_KEY not in json.loads((tmp_path / "cls" / "config.json").read_text())


def test_auto_reads_what_kdbert_recorded_then_the_sentence_transformers_modes(tmp_path, tiny_tokenizer):
    bert = tiny_bert_config(tiny_tokenizer)
    recorded = tiny_bert_config(tiny_tokenizer, kdbert_pooling="cls")
    mean = _sentence_transformers_folder(tmp_path / "mean", tiny_tokenizer, MEAN_TOKENS)
    both = _sentence_transformers_folder(tmp_path / "both", tiny_tokenizer,
                                         {**MEAN_TOKENS, "pooling_mode_max_tokens": True})  # concatenated
    assert choose_pooling("auto", mean, bert)[0] == "mean"
    assert choose_pooling(None, mean, recorded) == ("cls", f"{mean} records kdbert_pooling cls in its config.json")
    assert choose_pooling("cls", mean, bert) == ("cls", "--pooling cls")
    assert choose_pooling("auto", both, bert)[0] == "cls"
    assert choose_pooling("auto", mean, GPT2Config())[0] == "cls"  # its head reads the last token
    assert choose_pooling("auto", str(tmp_path), bert) == ("cls", f"{tmp_path} has no sentence-transformers "
                                                                   "pooling config")


# ----------------------------------------------------------------------------- compress's students
@pytest.mark.parametrize("kind,name", [("bert", "bert-1x128"), ("bert", "mobilebert-2x256"),
                                       ("roberta", "roberta-1x128")])
def test_students_compress_builds_from_a_mean_pooling_teacher_pool_by_mean(kind, name, tmp_path, tiny_tokenizer):
    teacher = set_pooling(_classifier(kind, len(tiny_tokenizer), **WIDE), "mean")
    context = ShapeContext(teacher.config, tiny_tokenizer, 2, False)
    candidate = next(c for c in HFFamily().candidates(context) if c.name == name)
    for student in (candidate.from_teacher(teacher, context), candidate.build(context)[0]):
        student.eval()
        assert student.config.kdbert_pooling == "mean"
        batch = _batch(student)
        torch.testing.assert_close(_logits(student, batch), _hand_logits(student, batch), rtol=1e-5, atol=1e-6)
    student.save_pretrained(tmp_path / "start")  # distillation loads its start with a fresh head
    loaded = load_sequence_classifier(str(tmp_path / "start"), 2, new_head_ok=True).eval()
    assert torch.equal(_logits(loaded, batch), _logits(student, batch))


# ----------------------------------------------------------------------------- ONNX
@pytest.mark.parametrize("kind,graph", [("bert", "torchscript"), ("bert", "dynamo"), ("bert", "fused"),
                                        ("roberta", "torchscript")])  # RoBERTa's graph differs in its positions only
def test_onnx_exports_carry_the_mean_pooling(kind, graph, tmp_path, tiny_tokenizer):
    model = _classifier(kind, len(tiny_tokenizer))
    cls_model = _classifier(kind, len(tiny_tokenizer))
    set_pooling(model, "mean")
    report = export_classifier(model, tiny_tokenizer, tmp_path, graph=graph)
    assert report["graph"]["graph"] == graph
    pair = kind == "bert"
    assert max_difference_from_pytorch(model, tmp_path, pair=pair) < 1e-4  # padded rows, batch 1 and 3
    batch = _batch(model)
    onnx_logits = OnnxClassifier(tmp_path)({name: tensor.numpy() for name, tensor in batch.items()})
    assert np.abs(onnx_logits - _hand_logits(model, batch).numpy()).max() < 1e-4
    assert np.abs(onnx_logits - _logits(cls_model, batch).numpy()).max() > 1e-3


@pytest.mark.parametrize("graph", ["torchscript", "dynamo", "fused"])
def test_onnx_exports_carry_the_pair_pooling(graph, tmp_path, tiny_tokenizer):
    model = set_pooling(_classifier("bert", len(tiny_tokenizer), type_vocab_size=2), "pair")
    export_classifier(model, tiny_tokenizer, tmp_path, graph=graph)
    assert max_difference_from_pytorch(model, tmp_path, pair=True) < 1e-4  # padded pairs, batch 1 and 3
    batch = random_batch(model.config.vocab_size, LENGTHS, pair=True)
    onnx_logits = OnnxClassifier(tmp_path)({name: tensor.numpy() for name, tensor in batch.items()})
    assert np.abs(onnx_logits - _hand_pair_logits(model, batch).numpy()).max() < 1e-4


def test_a_pair_pooled_graph_runs_each_sentence_as_a_row_of_its_own(tmp_path, tiny_tokenizer):
    # the TorchScript graph's attention scores: (2B, heads, W, W), W the longest sentence, where the
    # pair's mask would give (B, heads, L, L)
    import onnx
    import onnxruntime

    model = set_pooling(_classifier("bert", len(tiny_tokenizer), type_vocab_size=2), "pair")
    export_classifier(model, tiny_tokenizer, tmp_path, graph="torchscript")
    graph = onnx.load(str(tmp_path / "model.onnx"))
    scores = [node.output[0] for node in graph.graph.node if node.op_type == "Softmax"]
    graph.graph.output.extend(onnx.ValueInfoProto(name=name) for name in scores)
    session = onnxruntime.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    batch = random_batch(model.config.vocab_size, [9, 6], pair=True)  # sentences of 4 + 5 and 3 + 3 tokens
    outputs = session.run(None, {name: batch[name].numpy() for name in ("input_ids", "attention_mask", "token_type_ids")})
    assert len(scores) == SHAPE["num_hidden_layers"]
    assert all(out.shape == (4, SHAPE["num_attention_heads"], 5, 5) for out in outputs[1:])
    with torch.no_grad():
        np.testing.assert_allclose(outputs[0], model(**batch).logits.numpy(), atol=1e-4)  # the parity tests' bound


@pytest.mark.parametrize("kind", ["roberta", "mpnet"])
def test_onnx_exports_carry_the_separator_pair_pooling(kind, tmp_path, tiny_tokenizer):
    model = pool_pairs(_classifier(kind, len(tiny_tokenizer)))
    with torch.no_grad():  # a head that does not start at 0, so the logits say something
        model.classifier.out_proj.weight.normal_()
    export_classifier(model, tiny_tokenizer, tmp_path, graph="torchscript")
    session = OnnxClassifier(tmp_path)
    batch = {"input_ids": SEPARATED, "attention_mask": (SEPARATED != 1).long()}
    feed = {name: batch[name].numpy() if name in batch else np.zeros_like(SEPARATED.numpy())
            for name in session.input_names}
    onnx_logits = session(feed)
    assert np.abs(onnx_logits - _hand_separated_pair_logits(model, batch).numpy()).max() < 1e-4
    for row in range(2):  # batch 1, unpadded: the same
        single = {name: value[row:row + 1, :int(batch["attention_mask"][row].sum())] for name, value in feed.items()}
        assert np.abs(session(single) - onnx_logits[row:row + 1]).max() < 1e-4


# ----------------------------------------------------------------------------- compress --pooling pair
@pytest.mark.parametrize("pair", [True, False])
def test_compress_pair_pooling_starts_pair_task_students_on_a_fresh_pair_head(pair, tmp_path, tiny_tokenizer):
    from kdbert.compress.build import build_from_teacher
    from kdbert.data.load import TaskOptions

    teacher = set_pooling(_classifier("bert", len(tiny_tokenizer), **WIDE, type_vocab_size=2), "mean")
    context = ShapeContext(teacher.config, tiny_tokenizer, 2, pair, head="teacher")  # compress's default head
    candidate = next(c for c in HFFamily().candidates(context) if c.name == "bert-1x128")
    folder = build_from_teacher(candidate, "teacher", TaskOptions("mrpc" if pair else "sst2"), tmp_path / "start",
                                context, (teacher, tiny_tokenizer), pooling="pair")
    # the teacher's head where the student reads what it read; a pair-pooled one starts as a cosine instead
    assert json.loads((folder / "student_init.json").read_text())["head"] == (
        "cosine (pair pooling)" if pair else "teacher")
    student = load_sequence_classifier(str(folder), 2, new_head_ok=True).eval()  # as distillation loads its start
    expected = "pair" if pair else "mean"  # a single-sentence task keeps the teacher's pooling
    assert student.config.kdbert_pooling == expected
    assert json.loads((folder / "student_init.json").read_text())["pooling"] == expected
    if pair:
        batch = random_batch(student.config.vocab_size, LENGTHS, pair=True)
        torch.testing.assert_close(_logits(student, batch), _hand_pair_logits(student, batch), rtol=1e-5, atol=1e-5)
        # a classifier head starts at 0: its first steps point each class where the data says
        assert not student.classifier.weight.any() and not student.classifier.bias.any()


def test_compress_fits_a_pair_pooled_classifiers_head_on_the_training_rows(tmp_path, tiny_tokenizer):
    """Given the task's rows, the start's head reads a*cos + b per class, fitted there, not zero."""
    from kdbert.compress.build import build_from_teacher
    from kdbert.data.load import TaskOptions, load_task

    write_glue_task(tmp_path / "glue", "MRPC", n_train=40)
    task = TaskOptions("mrpc", data_dir=str(tmp_path / "glue"))
    teacher = set_pooling(_classifier("bert", len(tiny_tokenizer), **WIDE, type_vocab_size=2), "mean")
    context = ShapeContext(teacher.config, tiny_tokenizer, 2, True, head="fresh")
    candidate = next(c for c in HFFamily().candidates(context) if c.name == "bert-1x128")
    folder = build_from_teacher(candidate, "teacher", task, tmp_path / "start", context, (teacher, tiny_tokenizer),
                                pooling="pair", data=load_task(task))
    assert json.loads((folder / "student_init.json").read_text())["head"] == (
        "cosine threshold fitted on the training rows (pair pooling)")
    weight = load_sequence_classifier(str(folder), 2).classifier.weight
    assert weight.any() and not weight.std(dim=1).any()  # each class's row one weight a_c / H: a scaled cosine
    assert not torch.equal(weight[0], weight[1])


@pytest.mark.parametrize("pooling, num_labels, head, expected", [("auto", 2, "teacher", "mean"),
                                                               ("auto", 1, "teacher", "pair"),
                                                               ("auto", 2, "fresh", "pair"),
                                                               (None, 2, "teacher", "pair")])
def test_compress_auto_pooling_keeps_the_teachers_reading_for_a_classifier_with_its_head(pooling, num_labels, head,
                                                                                        expected, tmp_path,
                                                                                        tiny_tokenizer):
    """--pooling auto: a classifier cut with the teacher's head reads the pair as the teacher did (one sequence,
    mean-pooled), so the head it copies reads what it was trained on; a regression and a fresh head are
    pair-pooled, their heads starting as the cosine. compress's default (None here), pair, pair-pools them all."""
    from kdbert.compress.build import build_from_teacher
    from kdbert.data.load import TaskOptions

    teacher = set_pooling(_classifier("bert", len(tiny_tokenizer), **WIDE, type_vocab_size=2, num_labels=num_labels),
                          "mean")
    with torch.no_grad():
        teacher.classifier.bias.fill_(0.25)
    context = ShapeContext(teacher.config, tiny_tokenizer, num_labels, True, head=head)
    candidate = next(c for c in HFFamily().candidates(context) if c.name == "bert-1x128")
    folder = build_from_teacher(candidate, "teacher", TaskOptions("mrpc" if num_labels == 2 else "stsb"),
                                tmp_path / "start", context, (teacher, tiny_tokenizer),
                                **({"pooling": pooling} if pooling else {}))
    student = load_sequence_classifier(str(folder), num_labels, new_head_ok=True).eval()
    assert student.config.kdbert_pooling == expected
    assert json.loads((folder / "student_init.json").read_text())["pooling"] == expected
    batch = random_batch(student.config.vocab_size, LENGTHS, pair=True)
    hand = _hand_logits(student, batch) if expected == "mean" else _hand_pair_logits(student, batch)
    torch.testing.assert_close(_logits(student, batch), hand, rtol=1e-5, atol=1e-5)
    if expected == "mean":  # the teacher's head on the kept hidden units: its bias, its weights' columns
        torch.testing.assert_close(student.classifier.bias, teacher.classifier.bias)
        columns = {tuple(column.tolist()) for column in teacher.classifier.weight.T}
        assert all(tuple(column.tolist()) in columns for column in student.classifier.weight.T)
    else:
        assert not student.classifier.bias.any()


@pytest.mark.parametrize("pooling, num_labels, head, expected", [("auto", 1, "teacher", "pair"),
                                                               ("auto", 2, "teacher", "mean"),
                                                               ("auto", 2, "fresh", "pair"), (None, 1, "teacher", "mean")])
def test_compress_times_a_pair_tasks_shape_as_its_start_reads_the_pair(pooling, num_labels, head, expected, tmp_path,
                                                                       tiny_tokenizer, monkeypatch):
    """A pair-pooled graph runs slower than the same shape reading the pair as one sequence (its per-sentence
    attention mask is not fused), so the random-weight copy compress times pools as the start it trains will
    (the search's --pooling; None: as the shape builds, the teacher's mean)."""
    from kdbert.compress import speed
    from kdbert.compress.build import build_from_teacher
    from kdbert.data.load import TaskOptions

    teacher = set_pooling(_classifier("bert", len(tiny_tokenizer), **WIDE, type_vocab_size=2, num_labels=num_labels),
                          "mean")
    context = ShapeContext(teacher.config, tiny_tokenizer, num_labels, True, head=head)
    candidate = next(c for c in HFFamily().candidates(context) if c.name == "bert-1x128")
    timed = {}
    monkeypatch.setattr(speed, "time_teacher", lambda *args, **kwargs: {
        "settings": {}, "teacher": {"latency_real_p50_ms": 2.0}, "candidates": {}})
    monkeypatch.setattr(speed, "export_classifier",
                        lambda model, encoder, folder, **kwargs: timed.update({folder.name: pooling_of(model.config)}))
    monkeypatch.setattr(speed, "_timed_export", lambda export, file, task, settings: (
        export(), {"latency_real_p50_ms": 1.0})[1])
    task = TaskOptions("mrpc" if num_labels == 2 else "stsb")
    table = speed.measure_speed("teacher", task, tmp_path, speed.SpeedSettings("onnx-int8", 4, pooling=pooling),
                                [candidate], context)
    assert timed == {"bert-1x128": expected} and table["candidates"]["bert-1x128"]["speedup"] == 2.0
    if pooling is not None:  # the start trained reads the pair the same way
        folder = build_from_teacher(candidate, "teacher", task, tmp_path / "start", context, (teacher, tiny_tokenizer),
                                    pooling=pooling)
        assert json.loads((folder / "student_init.json").read_text())["pooling"] == expected
    assert speed.SpeedSettings("onnx-int8", 4, pooling="auto").key() == speed.SpeedSettings("onnx-int8", 4).key()
    assert speed.SpeedSettings("onnx-int8", 4, pooling="auto").table_key() != speed.SpeedSettings("onnx-int8", 4).table_key()


def test_compress_pair_pooling_starts_an_mpnet_teachers_students_on_the_separators(tmp_path, tiny_tokenizer):
    from kdbert.compress.build import build_from_teacher
    from kdbert.data.load import TaskOptions

    teacher = set_pooling(_classifier("mpnet", len(tiny_tokenizer), **WIDE, num_labels=1), "mean")
    context = ShapeContext(teacher.config, tiny_tokenizer, 1, True)
    candidate = next(c for c in HFFamily().candidates(context) if c.name == "mpnet-1x128")
    folder = build_from_teacher(candidate, "teacher", TaskOptions("stsb"), tmp_path / "start", context,
                                (teacher, tiny_tokenizer), pooling="pair")
    student = load_sequence_classifier(str(folder), 1, new_head_ok=True).eval()
    assert student.config.kdbert_pooling == "pair" and student.config.model_type == "mpnet"
    batch = {"input_ids": SEPARATED, "attention_mask": (SEPARATED != 1).long()}
    torch.testing.assert_close(_logits(student, batch), _hand_separated_pair_logits(student, batch), rtol=1e-5,
                               atol=1e-5)
    pooled = _pooled(student, batch)  # a regression head starts as cos(u, v), the mean of the pooled vector
    torch.testing.assert_close(_logits(student, batch)[:, 0], pooled.mean(dim=1), rtol=0,
                               atol=linearisation_error(pooled))


@pytest.mark.parametrize("folder, name, labels", [("STS-B", "stsb", 1), ("MRPC", "mrpc", 2)])
def test_compress_pooling_pair_ships_a_pair_pooled_int8_winner(folder, name, labels, tmp_path, tiny_tokenizer, capsys):
    from conftest import record_held_out

    from kdbert.compress import ship
    from kdbert.data.load import TaskOptions, load_task

    write_glue_task(tmp_path / "glue", folder, n_train=12, n_dev=8)
    teacher = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer, num_labels=labels, hidden_size=128,
                                   num_hidden_layers=2, num_attention_heads=4, intermediate_size=256, type_vocab_size=2)
    task = TaskOptions(name, data_dir=str(tmp_path / "glue"))
    record_held_out(teacher, task, 0.2)
    out = tmp_path / "compress"
    assert main(["compress", "--teacher", str(teacher), "--task", name, "--data-dir", str(tmp_path / "glue"),
                 "--candidates", "bert-1x128", "--rounds", "1", "--first-steps", "2", "--batch-size", "4",
                 "--length-rows", "4", "--threads", "1", "--pooling", "pair", "--target-speedup", "0.01",
                 "--output-dir", str(out)]) == 0
    report = json.loads((out / "compress_report.json").read_text())
    assert report["search"]["segments"][0]["recipe"].endswith("; pair pooling")
    head = json.loads((out / "starts" / "bert-1x128" / "student_init.json").read_text())["head"]
    assert head == ("cosine threshold fitted on the training rows (pair pooling)" if labels > 1 else
                    "cosine (pair pooling)")  # a regression's head reads the cosine itself
    winner = out / "winner"
    assert json.loads((winner / "config.json").read_text())[POOLING_KEY] == "pair"
    # the shipped int8 graph computes the pair pooling: scored on the deciding rows as the report says
    data = load_task(TaskOptions(name, data_dir=str(tmp_path / "glue"), held_out_rows=str(teacher),
                                 decide_share=0.5))
    assert report["shipped"]["decide_score"] == ship.decide_score(winner, "model.int8.onnx", data)[0]["decide_score"]
    student = load_sequence_classifier(str(out / "runs" / "bert-1x128"), labels, new_head_ok=False).eval()  # what shipped
    batch = random_batch(student.config.vocab_size, LENGTHS, pair=True)
    onnx_logits = OnnxClassifier(winner / "model.onnx")({name: tensor.numpy() for name, tensor in batch.items()})
    assert np.abs(onnx_logits - _hand_pair_logits(student, batch).numpy()).max() < 1e-4
