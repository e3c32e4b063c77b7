"""A vocabulary pruned to a task's tokens (kdbert.deploy.vocabulary, kdbert export --prune-vocab):
the remap pinned on a hand-made embedding, and an export that keeps the unpruned model's logits on
the task's rows with a smaller file (tiny random models)."""

import json

import onnx
import torch
from torch import nn

from conftest import save_tiny_classifier
from kdbert.cli import main
from kdbert.data.glue import Example, TaskData
from kdbert.data.load import TaskOptions
from kdbert.deploy.export import export_model
from kdbert.deploy.vocabulary import PrunedEmbedding, kept_token_ids


def test_kept_ids_read_their_rows_and_the_others_read_unk():
    source = nn.Embedding(6, 2)
    source.weight.data = torch.arange(12, dtype=torch.float32).reshape(6, 2)  # row i = [2i, 2i+1]
    pruned = PrunedEmbedding(source, kept=[1, 3, 4], unk_id=3)
    assert pruned.remap.tolist() == [1, 0, 1, 1, 2, 1]
    assert pruned(torch.tensor([[4, 3, 0, 5]])).tolist() == [[[8, 9], [6, 7], [6, 7], [6, 7]]]
    assert pruned.embedding.weight.shape == (3, 2)


def test_kept_ids_are_the_texts_tokens_and_the_special_ones(tiny_tokenizer, tmp_path):
    spec = type("Spec", (), {"name": "toy"})()
    data = TaskData(spec, train=[Example(("the cat",), 0)], dev={"dev": [Example(("a dog", "the"), 1)]})
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("runs\n")
    words = tiny_tokenizer(["the cat", "a dog", "runs"], add_special_tokens=False)["input_ids"]
    expected = sorted(set(tiny_tokenizer.all_special_ids) | {i for ids in words for i in ids})
    assert kept_token_ids(tiny_tokenizer, data, str(corpus)) == expected
    assert len(expected) < len(tiny_tokenizer)


def test_a_pruned_export_matches_the_unpruned_model_on_the_task_and_is_smaller(tmp_path, tiny_tokenizer, glue_dir):
    folder = save_tiny_classifier(tmp_path / "bert", tiny_tokenizer, hidden_size=32, intermediate_size=64)
    task = TaskOptions(task="sst2", data_dir=str(glue_dir))
    full = export_model(folder, tmp_path / "full", task=task)
    pruned = export_model(folder, tmp_path / "pruned", task=task, prune_vocab=True, quantize="int8",
                          int8_method="dynamic")
    assert pruned["parity"]["max_abs_logit_diff_fp32"] < 1e-4  # against the unpruned PyTorch model
    assert pruned["dev_metrics"]["onnx_fp32"] == full["dev_metrics"]["onnx_fp32"]
    vocabulary = pruned["vocabulary"]
    assert vocabulary["vocab_size"] == len(tiny_tokenizer) and vocabulary["kept_tokens"] < len(tiny_tokenizer)
    assert vocabulary["embedding_params_after"] == vocabulary["kept_tokens"] * 32
    assert full["params_total"] - pruned["params_total"] == (len(tiny_tokenizer) - vocabulary["kept_tokens"]) * 32
    shapes = [tuple(t.dims) for t in onnx.load(str(tmp_path / "pruned" / "model.onnx")).graph.initializer]
    assert (vocabulary["kept_tokens"], 32) in shapes and (len(tiny_tokenizer), 32) not in shapes
    assert json.loads((tmp_path / "pruned" / "export_report.json").read_text())["vocabulary"] == vocabulary


def test_pruning_without_a_task_is_refused(tmp_path, tiny_tokenizer, capsys):
    folder = save_tiny_classifier(tmp_path / "bert", tiny_tokenizer)
    assert main(["export", "--model", str(folder), "--prune-vocab", "--output-dir", str(tmp_path / "out")]) == 2
    assert "--prune-vocab keeps the tokens of a task's texts; pass --task" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
