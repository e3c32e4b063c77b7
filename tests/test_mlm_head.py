"""MLM-head fitting on a tiny random encoder checkpoint without a head."""

import json

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertModel, BertTokenizerFast

from kdbert.errors import KdbertError
from kdbert.methods import mlm_head
from kdbert.methods.mlm_head import REPORT_NAME, fit_mlm_head

WORDS = "the a cat dog sat on mat and ran far away house red blue big small".split()


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("encoder")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]) + "\n")
    tokenizer = BertTokenizerFast.from_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    BertModel(config).save_pretrained(folder)  # an encoder-only checkpoint, like the default teacher
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    gen = torch.Generator().manual_seed(0)
    lines = [" ".join(WORDS[i] for i in torch.randint(len(WORDS), (12,), generator=gen)) + "." for _ in range(60)]
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n\n".join(lines) + "\n")
    return path


def fit(encoder_dir, corpus_file, out, **kw):
    return fit_mlm_head({"encoder": encoder_dir, "corpus": corpus_file, "steps": 4, "batch_size": 4,
                         "learning_rate": 1e-2, "max_seq_len": 16, "eval_sequences": 8, **kw}, out)


def test_frozen_encoder_trains_only_head_and_saves_tied_model(encoder_dir, corpus_file, tmp_path):
    report = fit(encoder_dir, corpus_file, tmp_path / "mlm")
    saved = json.loads((tmp_path / "mlm" / REPORT_NAME).read_text())
    assert saved == json.loads(json.dumps(report))
    assert report["steps"] == 4 and report["unfreeze_top_layers"] == 0
    assert (report["top1"], report["top15"]) == (report["eval_after"]["top1"], report["eval_after"]["top15"])
    assert report["eval_after"]["masked_tokens"] == report["eval_before"]["masked_tokens"] > 0
    assert sorted(report["trainable_names"]) == sorted([
        "cls.predictions.bias", "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias"])

    model = BertForMaskedLM.from_pretrained(tmp_path / "mlm")
    BertTokenizerFast.from_pretrained(tmp_path / "mlm")
    assert model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
    original = BertModel.from_pretrained(encoder_dir).state_dict()
    for name, value in model.bert.state_dict().items():
        assert torch.equal(value, original[name]), name  # encoder (and the tied decoder) unchanged
    assert model.cls.predictions.bias.abs().sum() > 0  # head bias trained (it starts at zero)
    assert not list(tmp_path.glob(".mlm*"))  # no temporary folder left


def test_unfrozen_top_layer_trains(encoder_dir, corpus_file, tmp_path):
    report = fit(encoder_dir, corpus_file, tmp_path / "mlm", unfreeze_top_layers=1)
    assert any(n.startswith("bert.encoder.layer.1.") for n in report["trainable_names"])
    assert not any(n.startswith("bert.encoder.layer.0.") for n in report["trainable_names"])
    model = BertForMaskedLM.from_pretrained(tmp_path / "mlm")
    original = BertModel.from_pretrained(encoder_dir).state_dict()
    trained = model.bert.state_dict()
    assert torch.equal(trained["encoder.layer.0.output.dense.weight"], original["encoder.layer.0.output.dense.weight"])
    assert not torch.equal(trained["encoder.layer.1.output.dense.weight"], original["encoder.layer.1.output.dense.weight"])
    assert torch.equal(trained["embeddings.word_embeddings.weight"], original["embeddings.word_embeddings.weight"])


def test_bad_inputs(encoder_dir, corpus_file, tmp_path):
    with pytest.raises(KdbertError, match="unfreeze_top_layers=3 must be between 0 and 2"):
        fit(encoder_dir, corpus_file, tmp_path / "x", unfreeze_top_layers=3)
    with pytest.raises(KdbertError, match="missing.txt does not exist"):
        fit(encoder_dir, tmp_path / "missing.txt", tmp_path / "x")
    with pytest.raises(KdbertError, match="no config.json"):
        fit(tmp_path, corpus_file, tmp_path / "x")


def test_accuracy_counts_top1_and_top15_hits(monkeypatch):
    # 3 masked tokens over a vocabulary of 16: token 0 ranked first (top-1 and top-15 hit), token 1
    # ranked second (top-15 hit only), token 2 ranked last (no hit): top1 1/3, top15 2/3.
    logits = torch.arange(16.0).flip(0).repeat(3, 1)  # token k ranked k-th in every row
    labels = torch.tensor([0, 1, 15])
    monkeypatch.setattr(mlm_head, "masked_logits", lambda model, batch: (logits, labels))
    result = mlm_head.evaluate(torch.nn.Linear(1, 1), [{}])
    assert result == {"top1": 1 / 3, "top15": 2 / 3, "masked_tokens": 3}
