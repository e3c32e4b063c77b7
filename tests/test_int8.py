"""int8 graphs (kdbert.deploy.quantize, kdbert.deploy.int8_choice): static calibration pinned on a
one-product graph, the choice rule on hand-made variants, and an export that measures every method
and ships the one the rule keeps (tiny random models)."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import save_tiny_classifier
from kdbert.cli import main
from kdbert.data.load import TaskOptions
from kdbert.deploy.export import export_classifier
from kdbert.deploy.int8_choice import MAX_SCORE_DROP, pick_int8
from kdbert.deploy.onnx_runtime import ort_session
from kdbert.deploy.quantize import INT8_METHODS, calibration_batches, quantize_int8
from kdbert.errors import KdbertError
from kdbert.families.registry import family_of_folder

WEIGHT = np.arange(12, dtype=np.float32).reshape(4, 3) - 5  # columns [-5,-2,1,4], [-4,-1,2,5], [-3,0,3,6]


def one_product(folder) -> str:
    """An ONNX graph Y = X @ WEIGHT, X (n, 4) an input."""
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["Y"], name="product")], "one_product",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 3])],
                              [numpy_helper.from_array(WEIGHT, "W")])
    path = str(folder / "product.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), path)
    return path


def initializer(file, name) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in onnx.load(str(file)).graph.initializer if t.name == name)


def test_calibration_rows_are_padded_to_the_longest_with_the_pad_id_and_a_zero_mask():
    feeds = [{"input_ids": np.array([[5, 6]]), "attention_mask": np.array([[1, 1]])},
             {"input_ids": np.array([[7, 8, 9]]), "attention_mask": np.array([[1, 1, 1]])},
             {"input_ids": np.array([[4]]), "attention_mask": np.array([[1]])}]
    batches = calibration_batches(feeds, pad_id=3, batch_size=2)
    assert len(batches) == 1  # the incomplete last batch is dropped
    np.testing.assert_array_equal(batches[0]["input_ids"], [[5, 6, 3], [7, 8, 9]])
    np.testing.assert_array_equal(batches[0]["attention_mask"], [[1, 1, 0], [1, 1, 1]])
    alone = calibration_batches(feeds[2:], pad_id=3, batch_size=2)
    np.testing.assert_array_equal(alone[0]["input_ids"], [[4]])
    with pytest.raises(KdbertError, match="no calibration rows"):
        calibration_batches([])


def test_calibration_pads_a_pair_students_second_text_to_its_own_longest():
    feeds = [{"input_ids": np.array([[5, 6, 7]]), "input_ids_b": np.array([[8]])},
             {"input_ids": np.array([[4]]), "input_ids_b": np.array([[9, 9, 9, 9]])}]
    batch = calibration_batches(feeds, pad_id=0, batch_size=2)[0]
    np.testing.assert_array_equal(batch["input_ids"], [[5, 6, 7], [4, 0, 0]])
    np.testing.assert_array_equal(batch["input_ids_b"], [[8, 0, 0, 0], [9, 9, 9, 9]])


def test_static_minmax_quantises_the_input_with_the_calibration_range_and_weights_per_column(tmp_path):
    calibration = [{"X": np.array([[-1, 0.5, 2, 3]], np.float32)}, {"X": np.array([[0, 1, 1, -2]], np.float32)}]
    int8 = quantize_int8(one_product(tmp_path), tmp_path / "product.int8.onnx", "static-minmax", calibration)
    # activation range [-2, 3] over both batches: scale = 5 / 255, zero point = round(2 / scale) = 102
    assert initializer(int8, "X_scale") == pytest.approx(5 / 255)
    assert initializer(int8, "X_zero_point") == 102
    # symmetric int8 per output column: scale_j = max_i |W_ij| / 127
    np.testing.assert_allclose(initializer(int8, "W_scale"), [5 / 127, 5 / 127, 6 / 127], rtol=1e-6)
    x = np.array([[1.0, -1.0, 0.5, 2.0]], np.float32)
    session = ort_session(int8)
    np.testing.assert_allclose(session.run(None, {"X": x})[0], x @ WEIGHT, atol=0.1)


def test_static_percentile_ignores_an_outlier_that_widens_minmax(tmp_path):
    rows = np.random.default_rng(0).standard_normal((2**16, 4)).astype(np.float32)
    rows[0, 0] = 1000.0  # one value in 2^18: beyond the 99.999th percentile
    calibration = [{"X": rows[i:i + 2**14]} for i in range(0, 2**16, 2**14)]
    path = one_product(tmp_path)
    minmax = initializer(quantize_int8(path, tmp_path / "a.int8.onnx", "static-minmax", calibration), "X_scale")
    percentile = initializer(quantize_int8(path, tmp_path / "b.int8.onnx", "static-percentile", calibration), "X_scale")
    assert minmax >= 1000 / 255
    assert percentile < minmax / 10


def test_the_rule_keeps_the_fastest_within_the_drop_else_the_best_score():
    variants = {"dynamic": {"dev_score": 80.0, "latency_real_p50_ms": 1.0},
                "static-minmax": {"dev_score": 80.9, "latency_real_p50_ms": 0.9},
                "static-percentile": {"dev_score": 79.0, "latency_real_p50_ms": 0.5},
                "static-entropy": {"error": "no weight products"}}
    assert pick_int8(variants, 81.0)[0] == "static-minmax"  # percentile is faster but 2 points down
    slower = {**variants, "static-minmax": {"dev_score": 80.9, "latency_real_p50_ms": 1.2}}
    assert pick_int8(slower, 80.0 + MAX_SCORE_DROP)[0] == "dynamic"  # exactly at the drop is kept
    assert pick_int8(variants, 85.0) == ("static-minmax", "none within 0.5 points of the fp32 dev score: "
                                                          "the best dev score")


@pytest.fixture
def bert_and_task(tmp_path, tiny_tokenizer, glue_dir):
    folder = save_tiny_classifier(tmp_path / "bert", tiny_tokenizer, hidden_size=32, intermediate_size=64)
    model, encoder = family_of_folder(folder).load(folder)
    return model, encoder, TaskOptions(task="sst2", data_dir=str(glue_dir))


def test_auto_measures_every_method_and_ships_the_one_the_rule_keeps(bert_and_task, tmp_path):
    model, encoder, task = bert_and_task
    report = export_classifier(model, encoder, tmp_path / "export", quantize="int8", task=task)
    int8 = report["quantization"]
    assert set(int8["variants"]) == set(INT8_METHODS) and int8["requested"] == "auto"
    assert int8["fp32_dev_score"] == report["dev_metrics"]["onnx_fp32"]["score"]
    assert (int8["method"], int8["rule"]) == pick_int8(int8["variants"], int8["fp32_dev_score"])
    assert report["dev_metrics"]["onnx_int8"]["score"] == int8["variants"][int8["method"]]["dev_score"]
    assert int8["calibration_rows"] > 0
    assert sorted(p.name for p in (tmp_path / "export").glob("*.onnx")) == ["model.int8.onnx", "model.onnx"]
    shipped = {node.op_type for node in onnx.load(str(tmp_path / "export" / "model.int8.onnx")).graph.node}
    assert ("DynamicQuantizeLinear" in shipped) == (int8["method"] == "dynamic")
    assert ("QuantizeLinear" in shipped) == (int8["method"] != "dynamic")
    assert json.loads((tmp_path / "export" / "export_report.json").read_text())["quantization"] == int8


def test_a_requested_static_method_quantises_only_the_weight_products(bert_and_task, tmp_path):
    model, encoder, task = bert_and_task
    report = export_classifier(model, encoder, tmp_path / "export", quantize="int8", task=task,
                               int8_method="static-entropy", graph="torchscript")
    assert report["quantization"]["method"] == "static-entropy" and report["quantization"]["rule"] == "requested"
    graph = onnx.load(str(tmp_path / "export" / "model.int8.onnx")).graph
    fed_by = {output: node for node in graph.node for output in node.output}
    products = [node for node in graph.node if node.op_type == "MatMul"]
    dequantized = [node for node in products if fed_by.get(node.input[1]) is not None
                   and fed_by[node.input[1]].op_type == "DequantizeLinear"]
    # two layers: six weight products each are int8, the two attention products each stay fp32
    assert (len(products), len(dequantized)) == (16, 12)
    assert report["parity"]["prediction_agreement_int8"] >= 0.9


def test_a_static_method_without_a_task_is_refused_and_writes_nothing(tmp_path, tiny_tokenizer, capsys):
    folder = save_tiny_classifier(tmp_path / "bert", tiny_tokenizer)
    assert main(["export", "--model", str(folder), "--quantize", "int8", "--int8-method", "static-minmax",
                 "--output-dir", str(tmp_path / "export")]) == 2
    assert "--int8-method static-minmax calibrates on the task's training rows; pass --task" in capsys.readouterr().err
    assert not (tmp_path / "export").exists()
