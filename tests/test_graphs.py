"""The graph an export is made of (kdbert.deploy.graphs): every kind a family offers matches
PyTorch, ORT's transformer fusion is recorded operator by operator, and a fusion that changes the
logits is not kept (tiny random models)."""

import json

import numpy as np
import onnx
import pytest
import torch
from transformers import (
    BertForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    MobileBertConfig,
    MobileBertForSequenceClassification,
)

from conftest import save_tiny_classifier
from kdbert.cli import main
from kdbert.deploy import graphs
from kdbert.deploy.export import export_classifier
from kdbert.deploy.onnx_runtime import OnnxClassifier
from kdbert.errors import KdbertError
from test_export import random_batch


def operators(file) -> set[str]:
    return {node.op_type for node in onnx.load(str(file)).graph.node}


def max_difference_from_pytorch(model, folder, file: str = "model.onnx", pair: bool = True) -> float:
    """max |ORT - PyTorch| over batch 1 and padded batches of lengths unlike the export's example."""
    session = OnnxClassifier(folder / file)
    worst = 0.0
    for lengths in ([5], [40, 3, 17]):
        batch = random_batch(model.config.vocab_size, lengths, pair)
        batch = {name: batch[name] for name in session.input_names}
        with torch.no_grad():
            reference = model(**batch).logits.numpy()
        worst = max(worst, float(np.abs(session({k: v.numpy() for k, v in batch.items()}) - reference).max()))
    return worst


@pytest.fixture(scope="module")
def bert(tmp_path_factory, tiny_tokenizer):
    """A tiny 2-layer BERT whose segment ids matter (type_vocab_size 2)."""
    folder = save_tiny_classifier(tmp_path_factory.mktemp("graphs") / "bert", tiny_tokenizer, type_vocab_size=2)
    return BertForSequenceClassification.from_pretrained(folder).eval()


@pytest.mark.parametrize("graph", ["dynamo", "torchscript", "fused"])
def test_every_graph_of_a_bert_matches_pytorch_in_fp32(bert, tiny_tokenizer, tmp_path, graph):
    report = export_classifier(bert, tiny_tokenizer, tmp_path, quantize="int8", graph=graph)
    assert report["graph"]["graph"] == graph and report["graph"]["requested"] == graph
    assert max_difference_from_pytorch(bert, tmp_path) < 1e-4
    assert 0 < max_difference_from_pytorch(bert, tmp_path, "model.int8.onnx") < 0.05
    assert report["graph"] == json.loads((tmp_path / "export_report.json").read_text())["graph"]
    assert bert.config._attn_implementation == "sdpa"  # traced with eager attention, then restored


def test_the_fused_graph_has_one_fused_node_per_layer_and_int8_quantises_them(bert, tiny_tokenizer, tmp_path):
    report = export_classifier(bert, tiny_tokenizer, tmp_path, quantize="int8", graph="fused")
    layers = bert.config.num_hidden_layers
    assert report["graph"]["fused_operators"] == {"EmbedLayerNormalization": 1, "Attention": layers,
                                                  "BiasGelu": layers, "SkipLayerNormalization": 2 * layers}
    assert report["graph"]["fusion_max_abs_diff"] < 1e-4
    assert {"Attention", "EmbedLayerNormalization"} <= operators(tmp_path / "model.onnx")
    assert {"QAttention", "QEmbedLayerNormalization"} <= operators(tmp_path / "model.int8.onnx")
    assert "Attention" not in operators(tmp_path / "model.int8.onnx")


def test_a_fusion_that_changes_the_logits_is_not_kept(bert, tiny_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr(graphs, "_max_difference", lambda *args: 0.5)
    report = export_classifier(bert, tiny_tokenizer, tmp_path, graph="fused")
    assert report["graph"] == {"graph": "torchscript", "requested": "fused", "fusion_max_abs_diff": 0.5,
                               "fusion_rejected": "fused logits differ by 5.00e-01 > 0.0001"}
    assert "Attention" not in operators(tmp_path / "model.onnx")
    assert sorted(p.name for p in tmp_path.glob("*.onnx")) == ["model.onnx"]


def test_the_fusion_check_feeds_are_padded_and_the_difference_is_read_from_both_graphs(bert, tiny_tokenizer,
                                                                                        tmp_path):
    spec = graphs.family_of_model(bert).input_spec(bert)
    feeds = graphs._fusion_check_feeds(spec)
    assert [feed["input_ids"].shape for feed in feeds] == [(1, 7), (3, 19)]
    assert feeds[1]["attention_mask"][-1].tolist() == [1] * 9 + [0] * 10 and feeds[1]["attention_mask"][0].all()
    export_classifier(bert, tiny_tokenizer, tmp_path / "a", graph="torchscript")
    other = BertForSequenceClassification(bert.config).eval()
    export_classifier(other, tiny_tokenizer, tmp_path / "b", graph="torchscript")
    files = tmp_path / "a" / "model.onnx", tmp_path / "b" / "model.onnx"
    assert graphs._max_difference(files[0], files[0], spec) == 0.0
    expected = max(float(np.abs(OnnxClassifier(files[0])(feed) - OnnxClassifier(files[1])(feed)).max())
                   for feed in feeds)
    assert graphs._max_difference(*files, spec) == pytest.approx(expected) and expected > 1e-3


def test_distilbert_fuses_and_mobilebert_is_not_offered_fusion(tiny_tokenizer, tmp_path):
    torch.manual_seed(0)
    vocab = len(tiny_tokenizer)
    distil = DistilBertForSequenceClassification(DistilBertConfig(
        vocab_size=vocab, dim=16, n_layers=2, n_heads=4, hidden_dim=32, max_position_embeddings=64)).eval()
    report = export_classifier(distil, tiny_tokenizer, tmp_path / "distil", graph="fused")
    assert report["graph"]["graph"] == "fused" and report["graph"]["fused_operators"]["Attention"] == 2
    assert max_difference_from_pytorch(distil, tmp_path / "distil", pair=False) < 1e-4
    mobile = MobileBertForSequenceClassification(MobileBertConfig(
        vocab_size=vocab, hidden_size=16, embedding_size=8, intra_bottleneck_size=8, true_hidden_size=8,
        num_hidden_layers=2, num_attention_heads=2, intermediate_size=16, num_feedforward_networks=2,
        max_position_embeddings=64)).eval()
    with pytest.raises(KdbertError, match=r"^--graph fused is not offered for MobileBertForSequenceClassification; "
                                          r"use one of torchscript, dynamo$"):
        export_classifier(mobile, tiny_tokenizer, tmp_path / "mobile", graph="fused")
    assert not (tmp_path / "mobile").exists()


def test_export_cli_names_the_graph_and_its_fused_operators(bert, tiny_tokenizer, tmp_path, capsys):
    bert.save_pretrained(tmp_path / "bert")
    tiny_tokenizer.save_pretrained(tmp_path / "bert")
    assert main(["export", "--model", str(tmp_path / "bert"), "--graph", "fused"]) == 0
    assert ("graph: fused (1 EmbedLayerNormalization, 2 Attention, 2 BiasGelu, 4 SkipLayerNormalization)"
            in capsys.readouterr().out)
