"""int8 graphs (kdbert.deploy.quantize, kdbert.deploy.int8_choice, kdbert.deploy.int8_kernels):
static calibration pinned on a one-product graph with tolerances from the arithmetic, the 16-bit
saturation of the u8s8 kernel without VNNI in exact integers (and, with qemu-user, in ONNX Runtime
on an emulated AVX2 CPU), the choice rule on hand-made variants, and an export that measures every
method on held-out (else dev) rows and ships the one the rule keeps (tiny random models)."""

import json
import platform
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import save_tiny_classifier
from kdbert.cli import main
from kdbert.data.load import TaskOptions, load_task
from kdbert.deploy.export import export_classifier
from kdbert.deploy.int8_choice import MAX_SCORE_DROP, choose_int8, pick_int8
from kdbert.deploy.int8_kernels import REDUCED_WEIGHT_MAX, largest_weight, saturation_note, target_for_weights
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


def product_error_bound(x: np.ndarray, x_scale: float, w_scale: np.ndarray) -> np.ndarray:
    """The most an int8 product x @ WEIGHT can differ from fp32 when every pair sum is exact: with
    |x^ - x| <= s_x / 2 and |w^ - w| <= s_j / 2 (round to nearest),
    |sum_i x^_i w^_ij - x_i W_ij| <= sum_i |x_i| s_j / 2 + |W_ij| s_x / 2 + s_x s_j / 4, plus fp32
    rounding of the rescaled int32 sum (below 1e-5 here). Holds for every kernel that sums the
    integer products exactly: VNNI, AMX, u8u8, and AVX2 u8s8 while no pair saturates."""
    terms = np.abs(x)[:, None] * w_scale / 2 + np.abs(WEIGHT) * x_scale / 2 + x_scale * w_scale / 4
    return terms.sum(axis=0) + 1e-5


CALIBRATION = [{"X": np.array([[-1, 0.5, 2, 3]], np.float32)}, {"X": np.array([[0, 1, 1, -2]], np.float32)}]
X = np.array([[1.0, -1.0, 0.5, 2.0]], np.float32)  # within the calibration range [-2, 3]


def test_static_minmax_quantises_the_input_with_the_calibration_range_and_weights_per_column(tmp_path):
    int8 = quantize_int8(one_product(tmp_path), tmp_path / "product.int8.onnx", "static-minmax", CALIBRATION)
    # activation range [-2, 3] over both batches: scale = 5 / 255, zero point = round(2 / scale) = 102
    assert initializer(int8, "X_scale") == pytest.approx(5 / 255)
    assert initializer(int8, "X_zero_point") == 102
    # symmetric 7-bit per output column (target "any"): scale_j = max_i |W_ij| / 64
    w_scale = initializer(int8, "W_scale")
    np.testing.assert_allclose(w_scale, [5 / 64, 5 / 64, 6 / 64], rtol=1e-6)
    assert np.abs(initializer(int8, "W_quantized")).max() == 64
    # exact pair sums on every x86 CPU: 255 * (|w_a| + |w_b|) <= 255 * 128 < 2^15
    bound = product_error_bound(X[0], 5 / 255, w_scale)
    assert np.all(np.abs(ort_session(int8).run(None, {"X": X})[0] - X @ WEIGHT) <= bound)


def test_the_vnni_target_keeps_8_bit_weights(tmp_path):
    int8 = quantize_int8(one_product(tmp_path), tmp_path / "product.int8.onnx", "static-minmax", CALIBRATION,
                         target="vnni")
    np.testing.assert_allclose(initializer(int8, "W_scale"), [5 / 127, 5 / 127, 6 / 127], rtol=1e-6)
    assert (largest_weight(int8), target_for_weights(largest_weight(int8))) == (127, "vnni")


def u8s8_pair_sums(x_q: np.ndarray, w_q: np.ndarray) -> np.ndarray:
    """sum_k sat16(x_q[2k] w_q[2k, j] + x_q[2k+1] w_q[2k+1, j]): the VPMADDUBSW kernel of ONNX Runtime
    on x86 CPUs without VNNI, in exact integers (x_q uint8 (K,), w_q int8 (K, N), K even)."""
    products = x_q.astype(np.int64)[:, None] * w_q.astype(np.int64)
    pairs = products[0::2] + products[1::2]
    return np.clip(pairs, -2**15, 2**15 - 1).sum(axis=0)


def test_8_bit_weights_saturate_a_16_bit_pair_sum_and_7_bit_weights_do_not(tmp_path):
    """The saturation case itself, in exact integer arithmetic (so it holds on every CPU): column 2
    of X @ WEIGHT with 8-bit weights [-64, 0, 64, 127] sums the pair x_q[2:4] = (128, 204) to
    128 * 64 + 204 * 127 = 34100 > 32767; the saturated sum gives 9.283, the value ONNX Runtime
    printed on an AVX2-only EPYC and under an emulated Haswell, against 10.518 where sums are exact."""
    path = one_product(tmp_path)
    x_scale, zero = 5 / 255, 102
    x_q = np.clip(np.round(X[0] / x_scale) + zero, 0, 255)
    for target, saturates in (("vnni", True), ("any", False)):
        int8 = quantize_int8(path, tmp_path / f"{target}.int8.onnx", "static-minmax", CALIBRATION, target=target)
        w_q, w_scale = initializer(int8, "W_quantized"), initializer(int8, "W_scale")
        exact = x_q.astype(np.int64) @ w_q.astype(np.int64)
        kernel = u8s8_pair_sums(x_q, w_q)
        assert bool((kernel != exact).any()) == saturates
        # y_j = s_x s_j (sum_i x_q_i w_q_ij - zero * sum_i w_q_ij)
        y = x_scale * w_scale * (kernel - zero * w_q.astype(np.int64).sum(axis=0))
        if saturates:
            assert y[2] == pytest.approx(9.283, abs=1e-3) and kernel[2] == 2**15 - 1 - 153 * 64 != exact[2]
        assert (largest_weight(int8) > REDUCED_WEIGHT_MAX) == saturates
        assert bool(saturation_note(int8, flags={"avx2", "fma"}, x86=True)) == saturates
        # ONNX Runtime here (any kernel) on the graph shipped by default: within the arithmetic bound
        if not saturates:
            assert np.all(np.abs(ort_session(int8).run(None, {"X": X})[0] - X @ WEIGHT)
                          <= product_error_bound(X[0], x_scale, w_scale))


def test_the_note_is_only_for_8_bit_weights_on_an_x86_cpu_without_vnni_or_amx(tmp_path):
    vnni = quantize_int8(one_product(tmp_path), tmp_path / "vnni.int8.onnx", target="vnni")
    portable = quantize_int8(one_product(tmp_path), tmp_path / "any.int8.onnx")
    assert largest_weight(portable) <= REDUCED_WEIGHT_MAX and largest_weight(one_product(tmp_path)) is None
    note = saturation_note(vnni, flags={"avx2", "avx512bw"}, x86=True)
    assert note.startswith("note: vnni.int8.onnx has 8-bit int8 weights (up to 127)") and "\n" not in note
    assert "--int8-target any" in note
    for flags in ({"avx2", "avx512_vnni"}, {"avx2", "avx_vnni"}, {"avx2", "amx_int8"}):
        assert saturation_note(vnni, flags=flags, x86=True) is None
    assert saturation_note(vnni, flags=set(), x86=False) is None  # ARM: other kernels
    assert saturation_note(portable, flags={"avx2"}, x86=True) is None
    with pytest.raises(KdbertError, match="--int8-target avx2 is unknown"):
        quantize_int8(one_product(tmp_path), tmp_path / "x.int8.onnx", target="avx2")


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


def test_the_rule_decides_on_the_held_out_score_when_there_is_one():
    variants = {"dynamic": {"held_out_score": 80.0, "dev_score": 70.0, "latency_real_p50_ms": 1.0},
                "static-minmax": {"held_out_score": 75.0, "dev_score": 80.0, "latency_real_p50_ms": 0.5}}
    assert pick_int8(variants, 80.2, "held_out_score") == (
        "dynamic", "fastest within 0.5 points of the fp32 held-out score")
    assert pick_int8(variants, 80.2)[0] == "static-minmax"  # on dev, the other one would ship


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
    assert int8["chosen_on"] == "dev" and "fp32 dev score" in int8["rule"]  # no held-out rows: today's rule
    assert (int8["target"], int8["weight_bits"]) == ("any", 7) and int8["largest_weight"] <= REDUCED_WEIGHT_MAX
    assert set(int8["quantised_and_checked_on"]) == {"cpu", "machine", "int8_flags", "u8s8_saturates"}
    assert report["dev_metrics"]["onnx_int8"]["score"] == int8["variants"][int8["method"]]["dev_score"]
    assert int8["calibration_rows"] > 0
    assert sorted(p.name for p in (tmp_path / "export").glob("*.onnx")) == ["model.int8.onnx", "model.onnx"]
    shipped = {node.op_type for node in onnx.load(str(tmp_path / "export" / "model.int8.onnx")).graph.node}
    assert ("DynamicQuantizeLinear" in shipped) == (int8["method"] == "dynamic")
    assert ("QuantizeLinear" in shipped) == (int8["method"] != "dynamic")
    assert json.loads((tmp_path / "export" / "export_report.json").read_text())["quantization"] == int8


def test_with_held_out_rows_auto_chooses_on_them_and_dev_only_reports(bert_and_task, tmp_path):
    model, encoder, task = bert_and_task
    task = replace(task, held_out_fraction=0.1)
    int8 = export_classifier(model, encoder, tmp_path / "export", quantize="int8", task=task)["quantization"]
    assert int8["chosen_on"] == "held-out" and "fp32 held-out score" in int8["rule"]
    assert (int8["method"], int8["rule"]) == pick_int8(int8["variants"], int8["fp32_held_out_score"],
                                                       "held_out_score")
    assert all({"held_out_score", "dev_score"} <= set(v) for v in int8["variants"].values()
               if "error" not in v and "skipped" not in v)


def choose_on_scores(bert_and_task, folder, dev: dict[str, float], time_left=None) -> tuple[dict, dict, list]:
    """``choose_int8`` of the tiny BERT's export in ``folder`` with an evaluator that gives each graph
    the score ``dev[file name]``; also the graphs it scored, in order."""
    model, encoder, task = bert_and_task
    export_classifier(model, encoder, folder)
    family = family_of_folder(folder)
    scored = []

    def evaluator(runner):
        scored.append(runner.file.name)
        return {"score": dev[runner.file.name]}

    int8, metrics = choose_int8(folder / "model.onnx", folder / "model.int8.onnx", "auto", family, encoder,
                                family.input_spec(model), load_task(task), evaluator, 64, time_left=time_left)
    return int8, metrics, scored


def test_auto_stops_calibrating_at_the_first_static_method_that_keeps_the_score(bert_and_task, tmp_path):
    # minmax drops 2 points, percentile 0.4 (within MAX_SCORE_DROP), entropy would score best
    dev = {"model.onnx": 80.0, "dynamic.int8.onnx": 79.0, "static-minmax.int8.onnx": 78.0,
           "static-percentile.int8.onnx": 79.6, "static-entropy.int8.onnx": 90.0}
    int8, metrics, scored = choose_on_scores(bert_and_task, tmp_path / "export", dev)
    assert scored == ["model.onnx", "dynamic.int8.onnx", "static-minmax.int8.onnx", "static-percentile.int8.onnx"]
    assert int8["variants"]["static-entropy"] == {
        "skipped": "static-percentile kept the score, and a static graph's speed does not depend on its calibration"}
    assert int8["method"] == "static-percentile"  # dynamic is 1 point down
    assert {name: graph.metrics for name, graph in metrics.items()} == {"onnx_fp32": {"score": 80.0},
                                                                       "onnx_int8": {"score": 79.6}}


def test_with_a_deadline_auto_makes_dynamic_first_and_a_static_method_only_while_it_fits(bert_and_task, tmp_path):
    dev = {"model.onnx": 80.0, "dynamic.int8.onnx": 80.0, "static-minmax.int8.onnx": 70.0}  # minmax: not kept
    # asked once per static method, in INT8_METHODS' order: time for the first, none after it
    int8, _, _ = choose_on_scores(bert_and_task, tmp_path / "export", dev, iter([1e9, -1.0, -1.0]).__next__)
    variants = int8["variants"]
    made = [name for name, v in variants.items() if "latency_real_p50_ms" in v]
    assert made == ["dynamic", "static-minmax"] and list(variants) == list(INT8_METHODS)
    assert all(variants[name]["skipped"].startswith("would end past the export's deadline (about ")
               for name in ("static-percentile", "static-entropy"))
    assert int8["method"] == "dynamic"
    model, encoder, task = bert_and_task
    nothing_left = export_classifier(model, encoder, tmp_path / "late", quantize="int8", task=task,
                                     int8_time_left=lambda: 0.0)["quantization"]
    assert nothing_left["method"] == "dynamic" and nothing_left["calibration_rows"] == 0
    assert [name for name, v in nothing_left["variants"].items() if "skipped" in v] == list(INT8_METHODS[1:])


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


EMULATED_CPU = ["qemu-x86_64", "-cpu", "Haswell"]  # AVX2 and FMA, no AVX-512, no VNNI


@pytest.mark.skipif(shutil.which(EMULATED_CPU[0]) is None or platform.machine() != "x86_64",
                    reason="needs qemu-user (Debian's qemu-user; .ci/run installs it) on an x86-64 host")
def test_onnx_runtime_on_an_emulated_cpu_without_vnni_saturates_8_bit_weights_and_not_7_bit(tmp_path):
    """ONNX Runtime's own u8s8 kernel on an emulated AVX2-only CPU, whatever CPU runs the test: the
    8-bit graph gives the saturated 9.283 of the integer model above, the default 7-bit graph stays
    within the arithmetic bound."""
    path = one_product(tmp_path)
    files = {target: quantize_int8(path, tmp_path / f"{target}.int8.onnx", "static-minmax", CALIBRATION,
                                   target=target) for target in ("vnni", "any")}
    script = ("import sys, json, numpy as np, onnxruntime as ort\n"
              "x = np.array([[1.0, -1.0, 0.5, 2.0]], np.float32)\n"
              "print(json.dumps([ort.InferenceSession(f, providers=['CPUExecutionProvider'])"
              ".run(None, {'X': x})[0][0].tolist() for f in sys.argv[1:]]))")
    done = subprocess.run([*EMULATED_CPU, sys.executable, "-c", script, str(files["vnni"]), str(files["any"])],
                          capture_output=True, text=True, timeout=600, check=True)
    vnni, portable = (np.array(row) for row in json.loads(done.stdout.strip().splitlines()[-1]))
    assert vnni[2] == pytest.approx(9.283, abs=1e-3)
    assert np.all(np.abs(portable - (X @ WEIGHT)[0])
                  <= product_error_bound(X[0], 5 / 255, initializer(files["any"], "W_scale")))


def test_export_takes_the_target_and_evaluate_and_bench_note_8_bit_weights_on_a_cpu_without_vnni(
        tmp_path, tiny_tokenizer, glue_dir, capsys, monkeypatch):
    folder = save_tiny_classifier(tmp_path / "bert", tiny_tokenizer)
    for target in ("vnni", "any"):
        assert main(["export", "--model", str(folder), "--quantize", "int8", "--int8-target", target,
                     "--output-dir", str(tmp_path / target)]) == 0
        assert f"{ {'vnni': 8, 'any': 7}[target]}-bit weights" in capsys.readouterr().out
    monkeypatch.setattr("kdbert.deploy.int8_kernels.cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr("kdbert.deploy.int8_kernels._is_x86", lambda: True)
    for target, noted in (("vnni", True), ("any", False)):
        model = str(tmp_path / target / "model.int8.onnx")
        assert main(["evaluate", "--model", model, "--task", "sst2", "--data-dir", str(glue_dir)]) == 0
        assert ("note: model.int8.onnx has 8-bit int8 weights" in capsys.readouterr().out) == noted
        assert main(["bench", "--model", model, "--runs", "2", "--seq-len", "8"]) == 0
        assert ("note: model.int8.onnx has 8-bit int8 weights" in capsys.readouterr().out) == noted


def test_static_calibration_reads_one_batch_at_a_time(tmp_path, monkeypatch):
    # the histogram calibrators hold every batch's activations until they histogram them: read in one go, a
    # base-size teacher's 16 batches took 20 GB; strided, one batch is held at a time
    from onnxruntime.quantization.calibrate import HistogramCalibrater

    held = []
    collect = HistogramCalibrater.collect_data

    def counting(self, reader):
        start = reader.next
        collect(self, reader)
        held.append(reader.next - start)

    monkeypatch.setattr(HistogramCalibrater, "collect_data", counting)
    rows = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    calibration = [{"X": rows[i:i + 16]} for i in range(0, 64, 16)]
    quantize_int8(one_product(tmp_path), tmp_path / "p.int8.onnx", "static-percentile", calibration)
    assert held == [1, 1, 1, 1]


def test_the_shipped_graph_is_scored_one_row_at_a_time_as_each_row_would_run_alone(tmp_path, tiny_tokenizer):
    # a dynamic int8 graph quantises a batch's activations with one scale, so batched rows read
    # other outputs than each row alone; the rows that decide score what each row gives by itself
    from kdbert.compress import ship
    from kdbert.data.glue import Example, TaskData
    from kdbert.data.tasks import GLUE_TASKS
    from kdbert.deploy.predict import load

    folder = save_tiny_classifier(tmp_path / "bert", tiny_tokenizer, num_labels=1, hidden_size=32, intermediate_size=64)
    model, encoder = family_of_folder(folder).load(folder)
    export_classifier(model, encoder, tmp_path / "export", quantize="int8", int8_method="dynamic")
    words = "the cat sat on a mat while dogs ran far away from home".split()
    pairs = [(" ".join(words[: 2 + i % 11]), " ".join(words[i % 5:][: 3 + i % 7])) for i in range(24)]
    data = TaskData(GLUE_TASKS["stsb"], [], {}, decide=[Example(pair, float(i % 5)) for i, pair in enumerate(pairs)])
    _, predictions = ship.decide_score(tmp_path / "export", "model.int8.onnx", data)
    alone = load(tmp_path / "export" / "model.int8.onnx", batch_size=1)  # the threads decide_score runs on
    assert np.array_equal(predictions, np.array([alone.logits([pair])[0, 0] for pair in pairs]))
