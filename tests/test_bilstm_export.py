"""`kdbert export` of a distilled BiLSTM student: ONNX fp32 and int8 beside its vocab.txt, the
export evaluated and benched like the PyTorch folder, and a pair model's two length axes."""

import json

import numpy as np
import pytest
import torch
from conftest import write_glue_task

from kdbert.cli import main
from kdbert.data.load import TaskOptions, load_task
from kdbert.families.bilstm.model import bilstm_flops, init_bilstm, load_bilstm, save_bilstm
from kdbert.deploy.onnx_runtime import OnnxClassifier

pytest.importorskip("onnxruntime")


def save_student(tmp_path, task: str, glue_folder: str):
    """A tiny BiLSTM (random vectors, E 4, H 5, F 3) for the generated GLUE task, saved as a folder."""
    root = tmp_path / "glue_data"
    write_glue_task(root, glue_folder)
    data = load_task(TaskOptions(task, data_dir=str(root)))
    texts = [text for example in data.train for text in example.texts]
    model, vocab, _ = init_bilstm(texts, data.spec.num_labels, data.spec.is_pair, embedding_dim=4, hidden_size=5,
                                  fc_size=3, seed=3)
    folder = tmp_path / "student"
    save_bilstm(model, vocab, folder)
    return root, folder


@pytest.mark.parametrize("task, glue_folder", [("sst2", "SST-2"), ("mrpc", "MRPC")])
def test_cli_export_of_a_bilstm_scores_and_benches_like_the_pytorch_student(tmp_path, capsys, task, glue_folder):
    root, folder = save_student(tmp_path, task, glue_folder)
    model, vocab = load_bilstm(folder)
    assert main(["export", "--model", str(folder), "--quantize", "int8", "--task", task,
                 "--data-dir", str(root)]) == 0, capsys.readouterr().err
    out = folder / "onnx"
    report = json.loads((out / "export_report.json").read_text())
    assert report["family"] == "BiLSTMStudent"
    assert report["inputs"] == list(model.config.input_names)
    assert report["parity"]["max_abs_logit_diff_fp32"] <= 1e-5
    assert 0 < report["parity"]["max_abs_logit_diff_int8"] <= 0.02  # int8 ran (LSTMs included), and close
    # discrete metrics: each dev row's logits are >3e-2 apart, far above the runtimes' <=1e-5 difference
    assert report["dev_metrics"]["onnx_fp32"] == pytest.approx(report["dev_metrics"]["pytorch"])
    assert (out / "vocab.txt").read_text() == (folder / "vocab.txt").read_text()
    assert json.loads((out / "config.json").read_text()) == json.loads((folder / "config.json").read_text())

    session = OnnxClassifier(out)
    assert session.family.name == "bilstm" and session.pair is (task == "mrpc")
    assert session.encoder.words == vocab.words  # its vocabulary, not a tokenizer

    for file, key in (("model.onnx", "onnx_fp32"), ("model.int8.onnx", "onnx_int8")):
        assert main(["evaluate", "--model", str(out / file), "--task", task, "--data-dir", str(root)]) == 0
        saved = json.loads((out / f"eval_{task}_{file[:-5]}.json").read_text())
        assert saved == pytest.approx(report["dev_metrics"][key])

    bench = tmp_path / "bench.json"
    assert main(["bench", "--model", str(out / "model.int8.onnx"), "--compare", str(folder), "--seq-len", "9",
                 "--runs", "2", "--threads", "1", "--output", str(bench)]) == 0
    torch_row, onnx_row = json.loads(bench.read_text())
    assert onnx_row["runtime"] == "onnxruntime int8" and torch_row["runtime"] == "pytorch fp32"
    assert onnx_row["name"] == "student/onnx/model.int8.onnx"  # the model folder named, not only "onnx"
    assert onnx_row["flops_per_example"] == torch_row["flops_per_example"] == bilstm_flops(model.config, 9)
    assert onnx_row["params_total"] == torch_row["params_total"] == sum(p.numel() for p in model.parameters())


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([row + [0] * (width - len(row)) for row in rows])
    return ids, (ids != 0).long()


def test_exported_pair_model_takes_each_sentence_at_its_own_length(tmp_path, capsys):
    root, folder = save_student(tmp_path, "mrpc", "MRPC")
    assert main(["export", "--model", str(folder), "--output-dir", str(tmp_path / "onnx")]) == 0
    session = OnnxClassifier(tmp_path / "onnx")
    first = padded([[3, 4, 5], [6], [7, 8, 9, 10, 11]])  # (3, 5)
    second = padded([[2, 3, 4, 5, 6, 7, 8, 9], [10, 11], [12]])  # (3, 8)
    model, _ = load_bilstm(folder)
    with torch.no_grad():
        expected = model(*first, *second).logits.numpy()
    got = session({"input_ids": first[0], "attention_mask": first[1],
                   "input_ids_b": second[0], "attention_mask_b": second[1]})
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert not np.allclose(got[0], got[1])  # rows differ: the test would see swapped rows


def test_bilstm_export_bad_input_is_one_line(tmp_path, capsys):
    root, folder = save_student(tmp_path, "mrpc", "MRPC")
    write_glue_task(root, "SST-2")
    assert main(["export", "--model", str(folder), "--output-dir", str(tmp_path / "onnx")]) == 0
    (tmp_path / "onnx" / "vocab.txt").rename(tmp_path / "vocab.txt")
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "onnx"), "--task", "mrpc", "--data-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert "has no vocab.txt beside it" in err and err.count("\n") == 1
    (tmp_path / "vocab.txt").rename(tmp_path / "onnx" / "vocab.txt")
    assert main(["evaluate", "--model", str(tmp_path / "onnx"), "--task", "sst2", "--data-dir", str(root)]) == 2
    err = capsys.readouterr().err
    assert "is a BiLSTM with 2 output(s) for sentence pairs, but sst2 has 2 output(s) and single sentences" in err
    assert err.count("\n") == 1
