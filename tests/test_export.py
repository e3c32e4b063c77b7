"""ONNX export, int8 quantisation, and evaluating / benching exported models (tiny random models)."""

import json
import shutil

import numpy as np
import pytest
import torch
from torch import nn
from transformers import (
    AutoModelForSequenceClassification,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    MobileBertConfig,
    MobileBertForSequenceClassification,
)

from conftest import save_tiny_classifier, write_glue_task
from kdbert.deploy.bench import bench_model, compare, count_flops
from kdbert.cli import main
from kdbert.data.load import TaskOptions, load_task
from kdbert.errors import KdbertError
from kdbert.core.evaluate import TaskEvaluator
from kdbert.deploy.export import export_classifier, export_model
from kdbert.families import registry
from kdbert.families.hf import HFFamily
from kdbert.families.registry import InputSpec, family_of_model, register_family
from kdbert.deploy.onnx_runtime import OnnxClassifier


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_tokenizer):
    """A tiny BERT classifier (pairs: token_type_ids matter), exported with int8 and MRPC dev parity."""
    root = tmp_path_factory.mktemp("export")
    glue = root / "glue"
    write_glue_task(glue, "MRPC", n_dev=24)
    model_dir = save_tiny_classifier(root / "bert", tiny_tokenizer, type_vocab_size=2)
    report = export_model(model_dir, quantize="int8", task=TaskOptions("mrpc", data_dir=str(glue)))
    return {"model_dir": model_dir, "onnx": model_dir / "onnx", "glue": glue, "report": report}


def random_batch(vocab: int, lengths: list[int], pair: bool = True) -> dict[str, torch.Tensor]:
    """Rows of the given lengths padded to the longest; the second half of each row is segment 1."""
    generator = torch.Generator().manual_seed(1)
    longest = max(lengths)
    ids = torch.randint(5, vocab, (len(lengths), longest), generator=generator)
    mask = torch.zeros_like(ids)
    types = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
        ids[row, length:] = 0
        if pair:
            types[row, length // 2:length] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def test_fp32_onnx_logits_match_pytorch_at_any_batch_and_length(exported):
    model = AutoModelForSequenceClassification.from_pretrained(exported["model_dir"]).eval()
    session = OnnxClassifier(exported["onnx"])
    assert session.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    for lengths in ([5], [64, 3, 17], [30] * 2):  # batch 1 and lengths unlike the example inputs (2 x 11)
        batch = random_batch(model.config.vocab_size, lengths)
        with torch.no_grad():
            reference = model(**batch).logits.numpy()
        assert np.abs(session({k: v.numpy() for k, v in batch.items()}) - reference).max() < 1e-4
    parity = exported["report"]["parity"]
    assert parity["max_abs_logit_diff_fp32"] < 1e-4 and parity["fp32_within_tolerance"]
    assert parity["examples"] == 24 and parity["source"].startswith("dev (mrpc")


def test_int8_export_report_matches_its_files(exported):
    report, folder = exported["report"], exported["onnx"]
    assert report == json.loads((folder / "export_report.json").read_text())
    for precision, name in (("fp32", "model.onnx"), ("int8", "model.int8.onnx")):
        assert report["files"][precision] == {"file": name, "size_mb": (folder / name).stat().st_size / 1e6}
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
    # the report's dev metrics and int8 logit difference are what evaluating the files again gives
    data = load_task(TaskOptions("mrpc", data_dir=str(exported["glue"])))
    int8 = OnnxClassifier(folder / "model.int8.onnx")
    evaluator = TaskEvaluator(data, int8.encoder)
    assert evaluator(int8) == report["dev_metrics"]["onnx_int8"]
    model = AutoModelForSequenceClassification.from_pretrained(exported["model_dir"])
    assert evaluator(model) == report["dev_metrics"]["pytorch"]
    from kdbert.core.evaluate import predict

    dataset = evaluator.splits["dev"]
    diff = np.abs(int8.predict(dataset, evaluator.collator) - predict(model, dataset, evaluator.collator)).max()
    assert diff == pytest.approx(report["parity"]["max_abs_logit_diff_int8"], rel=1e-6)
    assert 0 < diff < 0.05  # quantised: close to, but not equal to, fp32
    assert report["params_total"] == sum(p.numel() for p in model.parameters())
    assert report["flops_per_example"] == {str(n): count_flops(model, n) for n in (16, 32, 64)}


@pytest.mark.parametrize("method", ["dynamic", "auto"])
def test_each_graph_predicts_the_dev_rows_once_for_its_metrics_and_parity(exported, tmp_path, monkeypatch, method):
    """The PyTorch model, the fp32 graph and every int8 graph scored (auto: dynamic and three static
    ones) each predict the dev rows once: the parity check reads the logits their scoring computed."""
    calls = []
    real = TaskEvaluator.predict

    def counted(self, model, dataset):
        calls.append(dataset is self.splits["dev"])
        return real(self, model, dataset)

    monkeypatch.setattr(TaskEvaluator, "predict", counted)
    task = TaskOptions("mrpc", data_dir=str(exported["glue"]))
    report = export_model(exported["model_dir"], tmp_path / method, quantize="int8", task=task, int8_method=method)
    graphs = 3 if method == "dynamic" else 2 + sum("dev_score" in v for v in report["quantization"]["variants"].values())
    assert calls.count(True) == graphs
    assert report["parity"]["max_abs_logit_diff_fp32"] < 1e-4 and 0 < report["parity"]["max_abs_logit_diff_int8"]
    assert report["parity"] == {**exported["report"]["parity"], **{
        key: report["parity"][key] for key in ("max_abs_logit_diff_int8", "prediction_agreement_int8")}}


def test_a_known_pytorch_scoring_is_read_not_predicted_again(exported, tmp_path, monkeypatch):
    """``known`` (compress passes the teacher it scored): the PyTorch model predicts nothing, and the
    parity check and its metrics are the known ones; logits shifted by 0.5 read 0.5 from the graph."""
    from kdbert.core.evaluate import Scored

    data = load_task(TaskOptions("mrpc", data_dir=str(exported["glue"])))
    model = AutoModelForSequenceClassification.from_pretrained(exported["model_dir"]).eval()
    evaluator = TaskEvaluator(data, OnnxClassifier(exported["onnx"]).encoder)
    logits = {"dev": evaluator.predict(model, evaluator.splits["dev"]) + 0.5}
    known = {"pytorch": Scored({"score": 12.5}, logits)}
    calls = []
    real = TaskEvaluator.predict

    def counted(self, runner, dataset):
        calls.append(type(runner).__name__)
        return real(self, runner, dataset)

    monkeypatch.setattr(TaskEvaluator, "predict", counted)
    task = TaskOptions("mrpc", data_dir=str(exported["glue"]))
    report = export_model(exported["model_dir"], tmp_path / "known", quantize="int8", task=task,
                          int8_method="dynamic", known=known)
    assert calls and all(name == "OnnxClassifier" for name in calls)
    assert report["dev_metrics"]["pytorch"] == {"score": 12.5}
    assert report["parity"]["max_abs_logit_diff_fp32"] == pytest.approx(0.5, abs=1e-4)  # fp32 graph = PyTorch


def test_evaluate_cli_gives_pytorch_metric_for_onnx(exported, capsys, tmp_path):
    args = ["evaluate", "--task", "mrpc", "--data-dir", str(exported["glue"])]
    assert main(args + ["--model", str(exported["model_dir"]), "--output", str(tmp_path / "pt.json")]) == 0
    assert main(args + ["--model", str(exported["onnx"]), "--output", str(tmp_path / "onnx.json")]) == 0
    # equal although ONNX Runtime's float32 kernels are not PyTorch's: the metrics are discrete and
    # each dev row's two logits are >2e-3 apart, against <1e-8 between the two runtimes
    assert json.loads((tmp_path / "onnx.json").read_text()) == json.loads((tmp_path / "pt.json").read_text())
    capsys.readouterr()


def test_bench_onnx_gives_pytorch_columns_and_efficiency(exported):
    pytorch = bench_model(str(exported["model_dir"]), seq_len=16, runs=3, warmup=1, name="pt")
    onnx = bench_model(exported["onnx"] / "model.int8.onnx", seq_len=16, runs=3, warmup=1, name="int8")
    assert onnx["runtime"] == "onnxruntime int8" and pytorch["runtime"] == "pytorch fp32"
    assert set(pytorch) - {"torch"} == set(onnx) - {"onnxruntime"}
    assert onnx["flops_per_example"] == pytorch["flops_per_example"]
    assert onnx["params_total"] == pytorch["params_total"]
    assert onnx["size_mb"] == (exported["onnx"] / "model.int8.onnx").stat().st_size / 1e6
    expected = onnx["flops_per_example"] / (onnx["latency_median_ms"] / 1000) / (onnx["matmul_gflops"] * 1e9)
    assert onnx["efficiency"] == pytest.approx(expected)
    rows = compare([pytorch, onnx])
    assert rows[1]["speedup"] == pytest.approx(pytorch["latency_median_ms"] / onnx["latency_median_ms"])


def test_distilbert_and_mobilebert_export_with_parity(tmp_path, tiny_tokenizer):
    torch.manual_seed(0)
    vocab = len(tiny_tokenizer)
    distil = DistilBertForSequenceClassification(DistilBertConfig(
        vocab_size=vocab, dim=16, n_layers=2, n_heads=4, hidden_dim=32, max_position_embeddings=64))
    mobile = MobileBertForSequenceClassification(MobileBertConfig(
        vocab_size=vocab, hidden_size=16, embedding_size=8, intra_bottleneck_size=8, true_hidden_size=8,
        num_hidden_layers=2, num_attention_heads=2, intermediate_size=16, num_feedforward_networks=2,
        max_position_embeddings=64))
    for name, model, inputs in (("distil", distil, ["input_ids", "attention_mask"]),
                                ("mobile", mobile, ["input_ids", "attention_mask", "token_type_ids"])):
        report = export_classifier(model, tiny_tokenizer, tmp_path / name)
        assert report["inputs"] == inputs and report["family"] == type(model).__name__
        assert report["parity"]["max_abs_logit_diff_fp32"] < 1e-4, name
        assert report["parity"]["source"].startswith("synthetic") and report["parity"]["max_seq_len"] == 64


class MeanOfEmbeddings(nn.Module):
    """A model with no weight matrix ORT can quantise: logits = mean of word vectors (Gather only)."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(40, 2)

    def forward(self, input_ids):
        return self.embedding(input_ids).mean(dim=1)


class Cholesky(MeanOfEmbeddings):
    def forward(self, input_ids):
        vectors = self.embedding(input_ids)  # (B, L, 2)
        gram = vectors.transpose(1, 2) @ vectors + torch.eye(2)
        return torch.linalg.cholesky(gram).sum(dim=1)


class MeanOfEmbeddingsFamily(HFFamily):
    """Token ids in, a mean of word vectors out: a family that reads the tokenizer like HF models."""

    name = "mean-of-embeddings"

    def owns(self, model):
        return isinstance(model, MeanOfEmbeddings)

    def input_spec(self, model):
        return InputSpec(("input_ids",), None, 40)


def test_a_registered_non_hf_family_exports_and_int8_is_refused_without_matmuls(tmp_path, tiny_tokenizer,
                                                                                 monkeypatch):
    monkeypatch.setattr(registry, "_registered", [])
    register_family(MeanOfEmbeddingsFamily())
    model = MeanOfEmbeddings()
    report = export_classifier(model, tiny_tokenizer, tmp_path / "fp32")
    assert report["inputs"] == ["input_ids"] and report["parity"]["max_abs_logit_diff_fp32"] < 1e-6
    with pytest.raises(KdbertError, match=r"no MatMul/Gemm weights to quantise.*Gather.*deploy the fp32"):
        export_classifier(model, tiny_tokenizer, tmp_path / "int8", quantize="int8")
    assert not (tmp_path / "int8").exists()  # nothing half-written
    with pytest.raises(KdbertError, match=r"cannot export Cholesky to ONNX \(torchscript exporter\): unsupported operator\(s\) "
                                          r"aten\.linalg_cholesky$"):
        export_classifier(Cholesky(), tiny_tokenizer, tmp_path / "chol")
    with pytest.raises(KdbertError, match=r"cannot export Cholesky to ONNX \(dynamo exporter\): unsupported operator\(s\) "
                                          r"aten\.linalg_cholesky_ex$"):
        export_classifier(Cholesky(), tiny_tokenizer, tmp_path / "chol", graph="dynamo")


def test_bad_inputs_give_one_line_errors(exported, tmp_path, capsys):
    with pytest.raises(KdbertError, match="no student family owns a Linear .*register one with"):
        family_of_model(nn.Linear(2, 2))
    (tmp_path / "empty").mkdir()
    cases = [
        (["export", "--model", tmp_path / "empty"], "is not a model folder (no config.json)"),
        (["export", "--model", tmp_path / "missing"], "does not exist"),
        (["export", "--model", exported["onnx"]], "is already an ONNX export; pass the PyTorch model folder"),
        (["export", "--model", exported["model_dir"], "--max-seq-len", 65, "--output-dir", tmp_path / "x"],
         "--max-seq-len 65 is above the model's limit of 64 positions"),
        (["bench", "--model", exported["onnx"], "--seq-len", 65], "--seq-len 65 is above the limit of"),
        (["evaluate", "--model", exported["onnx"], "--task", "mrpc", "--data-dir", exported["glue"],
          "--max-seq-len", 65], "--max-seq-len 65 is above the limit of"),
    ]
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    shutil.copy(exported["onnx"] / "model.onnx", lonely / "model.onnx")
    cases.append((["evaluate", "--model", lonely / "model.onnx", "--task", "mrpc", "--data-dir", exported["glue"]],
                  "has no tokenizer beside it"))
    for argv, message in cases:
        assert main([str(a) for a in argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("kdbert: error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists()
