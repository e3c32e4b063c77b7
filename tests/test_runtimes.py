"""OpenVINO beside ONNX Runtime (kdbert.deploy.openvino_runtime): the same export gives the same
logits and dev scores, static int8 runs on OpenVINO's kernels, `kdbert bench --runtime a,b` compares
them and names the fastest (tiny random models)."""

import json

import numpy as np
import pytest

from conftest import save_tiny_classifier
from kdbert.cli import main
from kdbert.data.load import TaskOptions
from kdbert.deploy.export import export_model
from kdbert.deploy.onnx_runtime import OnnxClassifier
from test_export import random_batch

pytest.importorskip("openvino")


@pytest.fixture(scope="module")
def export(tmp_path_factory, tiny_tokenizer):
    """A tiny BERT exported with static int8, its GLUE root."""
    from conftest import write_glue_task

    root = tmp_path_factory.mktemp("runtimes")
    write_glue_task(root / "glue_data", "SST-2")
    folder = save_tiny_classifier(root / "bert", tiny_tokenizer, hidden_size=32, intermediate_size=64)
    task = TaskOptions(task="sst2", data_dir=str(root / "glue_data"))
    export_model(folder, root / "export", quantize="int8", task=task, int8_method="static-minmax")
    return root / "export", root / "glue_data", folder


def logits(file, runtime, batch):
    classifier = OnnxClassifier(file, runtime=runtime, load_encoder=False)
    return classifier({name: batch[name].numpy() for name in classifier.input_names})


@pytest.mark.parametrize("file, tolerance", [("model.onnx", 1e-4), ("model.int8.onnx", 0.05)])
def test_openvino_gives_onnx_runtimes_logits_on_padded_batches(export, file, tolerance):
    folder, _, _ = export
    for lengths in ([5], [30, 3, 17]):
        batch = random_batch(30, lengths, pair=True)
        difference = np.abs(logits(folder / file, "openvino", batch) - logits(folder / file, "onnxruntime", batch))
        assert difference.max() < tolerance


def test_evaluate_in_openvino_scores_like_onnx_runtime(export, tmp_path, capsys):
    folder, glue_dir, _ = export
    scores = {}
    for runtime in ("onnxruntime", "openvino"):
        output = tmp_path / f"{runtime}.json"
        assert main(["evaluate", "--model", str(folder), "--task", "sst2", "--data-dir", str(glue_dir),
                     "--runtime", runtime, "--output", str(output)]) == 0
        scores[runtime] = json.loads(output.read_text())
    assert scores["openvino"] == scores["onnxruntime"]


def test_bench_compares_runtimes_row_by_row_and_names_the_fastest(export, tmp_path, capsys):
    folder, glue_dir, _ = export
    output = tmp_path / "rows.json"
    assert main(["bench", "--model", str(folder), "--runtime", "onnxruntime,openvino", "--runs", "3",
                 "--seq-len", "16", "--task", "sst2", "--data-dir", str(glue_dir), "--length-rows", "8",
                 "--output", str(output)]) == 0
    rows = json.loads(output.read_text())
    assert [row["runtime"] for row in rows] == ["onnxruntime fp32", "openvino fp32"]
    assert "max_abs_logit_diff" not in rows[0] and rows[1]["max_abs_logit_diff"] < 1e-4
    assert rows[1]["speedup_real"] == pytest.approx(rows[0]["latency_real_p50_ms"] / rows[1]["latency_real_p50_ms"])
    fastest = min(rows, key=lambda row: row["latency_real_p50_ms"])["runtime"]
    assert f"fastest here: {fastest} (" in capsys.readouterr().out


def test_a_runtime_for_a_pytorch_model_or_an_unknown_one_is_refused(export, capsys):
    folder, glue_dir, model = export
    assert main(["evaluate", "--model", str(model), "--task", "sst2", "--data-dir", str(glue_dir),
                 "--runtime", "openvino"]) == 2
    assert "--runtime openvino runs an ONNX export" in capsys.readouterr().err
    assert main(["bench", "--model", str(folder), "--runtime", "onnxruntime,tensorrt"]) == 2
    assert "--runtime tensorrt is unknown; choose one of onnxruntime, openvino, openvino-bf16" in capsys.readouterr().err
