"""`kdbert predict` and `kdbert.load(...).predict`: every family in PyTorch and as ONNX fp32 / int8
exports (tiny random models), checked against a softmax of each model's own logits computed here."""

import csv
import inspect
import io
import json
import random

import numpy as np
import pytest
import torch
from conftest import WORDS, save_tiny_classifier, sentence, tiny_bert_config
from transformers import (
    BertForQuestionAnswering,
    BertModel,
    DistilBertConfig,
    DistilBertForSequenceClassification,
    MobileBertConfig,
    MobileBertForSequenceClassification,
)

import kdbert
from kdbert.cli import main
from kdbert.deploy.export import export_model
from kdbert.deploy.onnx_runtime import OnnxClassifier
from kdbert.families.bilstm.model import init_bilstm, load_bilstm, save_bilstm

pytest.importorskip("onnxruntime")

FAMILIES = ("bert", "distilbert", "mobilebert", "bilstm")
RUNTIMES = ("pytorch", "onnx", "onnx-int8")
TOLERANCE = 1e-5  # float32 logits of the same model run batched and padded, or alone


def texts(count: int, seed: int = 0, low: int = 1, high: int = 20) -> list[str]:
    rng = random.Random(seed)
    return [sentence(rng, low, high) for _ in range(count)]


def save_hf(folder, model, tokenizer):
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_family(folder, family: str, tokenizer, num_labels: int = 3, pair: bool = False):
    """A tiny random classifier of ``family`` saved as its kind of folder."""
    torch.manual_seed(0)
    vocab = len(tokenizer)
    if family == "bert":
        return save_tiny_classifier(folder, tokenizer, num_labels=num_labels)
    if family == "distilbert":
        return save_hf(folder, DistilBertForSequenceClassification(DistilBertConfig(
            vocab_size=vocab, dim=16, n_layers=2, n_heads=4, hidden_dim=32, max_position_embeddings=64,
            num_labels=num_labels)), tokenizer)
    if family == "mobilebert":
        return save_hf(folder, MobileBertForSequenceClassification(MobileBertConfig(
            vocab_size=vocab, hidden_size=16, embedding_size=8, intra_bottleneck_size=8, true_hidden_size=8,
            num_hidden_layers=2, num_attention_heads=2, intermediate_size=16, num_feedforward_networks=2,
            max_position_embeddings=64, num_labels=num_labels)), tokenizer)
    model, vocab_, _ = init_bilstm([" ".join(WORDS)], num_labels, pair, embedding_dim=4, hidden_size=5, fc_size=3,
                                   seed=3)
    save_bilstm(model, vocab_, folder)
    return folder


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_tokenizer):
    """Every family saved and exported with an int8 copy: {family: folder}."""
    root = tmp_path_factory.mktemp("predict")
    folders = {}
    for family in FAMILIES:
        folders[family] = save_family(root / family, family, tiny_tokenizer)
        export_model(folders[family], quantize="int8", int8_method="dynamic")
    return folders


def model_path(models, family: str, runtime: str):
    folder = models[family]
    return {"pytorch": folder, "onnx": folder / "onnx", "onnx-int8": folder / "onnx" / "model.int8.onnx"}[runtime]


def direct_logits(path, runtime: str, items) -> np.ndarray:
    """Each text's (or pair's) logits from the model itself, one text at a time (batch 1, no padding)."""
    onnx = runtime != "pytorch"
    session = OnnxClassifier(path) if onnx else None
    bilstm = (path if not onnx else path if path.is_dir() else path.parent) / "vocab.txt"
    rows = []
    for item in items:
        item = (item,) if isinstance(item, str) else tuple(item)
        if bilstm.is_file():
            from kdbert.families.bilstm.words import Vocab

            vocab = Vocab.load(bilstm)
            feed = {}
            for suffix, text in zip(("", "_b"), item):
                ids = torch.tensor([vocab.encode(text)])
                feed[f"input_ids{suffix}"], feed[f"attention_mask{suffix}"] = ids, torch.ones_like(ids)
            if onnx:
                rows.append(session(feed)[0])
            else:
                with torch.no_grad():
                    rows.append(load_bilstm(path)[0](**feed).logits[0].numpy())
            continue
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        folder = path if path.is_dir() else path.parent
        tokenizer = AutoTokenizer.from_pretrained(folder)
        encoded = tokenizer(*item, truncation=True, max_length=64, return_tensors="pt")
        if onnx:
            rows.append(session({k: v.numpy() for k, v in encoded.items()})[0])
        else:
            model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
            accepted = inspect.signature(model.forward).parameters
            with torch.no_grad():
                rows.append(model(**{k: v for k, v in encoded.items() if k in accepted}).logits[0].numpy())
    return np.stack(rows).astype(np.float64)


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def check_records(records, logits, labels):
    probabilities = softmax(logits)
    assert [r["label"] for r in records] == [labels[i] for i in probabilities.argmax(-1)]
    np.testing.assert_allclose([r["probability"] for r in records], probabilities.max(-1), rtol=0, atol=TOLERANCE)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write_jsonl(path, rows: list[dict]):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_and_runtime_gives_the_softmax_of_its_own_logits(models, tmp_path, capsys, family, runtime):
    path = model_path(models, family, runtime)
    items = texts(7, seed=1)
    # int8 graphs quantise each batch's activations as a whole: batch 1 is the graph run on one text
    batch = 1 if runtime == "onnx-int8" else 3
    source = write_jsonl(tmp_path / "in.jsonl", [{"text": t, "id": i} for i, t in enumerate(items)])
    code, out, err = run_cli(capsys, "predict", "--model", path, "--input", source, "--batch-size", batch)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert records == kdbert.load(path, batch_size=batch).predict(items)
    check_records(records, direct_logits(path, runtime, items), ["LABEL_0", "LABEL_1", "LABEL_2"])
    if runtime == "onnx-int8":  # the int8 graph ran, not the fp32 one beside it
        fp32 = kdbert.load(model_path(models, family, "onnx"), batch_size=1).logits(items)
        assert np.abs(kdbert.load(path, batch_size=1).logits(items) - fp32).max() > 1e-6


def test_order_is_kept_across_length_batches(models, tmp_path, capsys):
    items = texts(11, seed=2, low=1, high=30)
    assert len({len(t.split()) for t in items}) > 5  # lengths differ: batches are sorted by them
    for runtime in ("pytorch", "onnx"):
        path = model_path(models, "bert", runtime)
        records = kdbert.load(path, batch_size=2).predict(items)
        check_records(records, direct_logits(path, runtime, items), ["LABEL_0", "LABEL_1", "LABEL_2"])
        assert len({r["probability"] for r in records}) == len(items)  # rows differ: a swap would show


def test_pairs_from_a_tsv_into_csv(tmp_path, capsys, tiny_tokenizer):
    folder = save_family(tmp_path / "bert", "bert", tiny_tokenizer, num_labels=2)
    pairs = list(zip(texts(5, seed=3), texts(5, seed=4)))
    source = tmp_path / "pairs.tsv"
    source.write_text("premise\thypothesis\n" + "".join(f"{a}\t{b}\n" for a, b in pairs))
    output = tmp_path / "out.csv"
    code, out, err = run_cli(capsys, "predict", "--model", folder, "--input", source,
                             "--text-columns", "premise,hypothesis", "--output", output)
    assert code == 0, err
    assert out == ""  # predictions go to the file only
    with open(output, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [list(row) for row in rows] == [["label", "probability"]] * 5
    records = kdbert.load(folder).predict(pairs)
    assert [row["label"] for row in rows] == [r["label"] for r in records]
    np.testing.assert_allclose([float(row["probability"]) for row in rows], [r["probability"] for r in records])
    check_records(records, direct_logits(folder, "pytorch", pairs), ["LABEL_0", "LABEL_1"])
    single = kdbert.load(folder).predict([a for a, _ in pairs])
    assert [r["probability"] for r in single] != [r["probability"] for r in records]  # the second text counts


@pytest.mark.parametrize("runtime", ("pytorch", "onnx"))
def test_a_bilstm_pair_model_reads_both_texts(tmp_path, capsys, tiny_tokenizer, runtime):
    folder = save_family(tmp_path / "bilstm", "bilstm", tiny_tokenizer, num_labels=2, pair=True)
    if runtime == "onnx":
        export_model(folder)
        folder = folder / "onnx"
    pairs = list(zip(texts(6, seed=5), texts(6, seed=6)))
    source = write_jsonl(tmp_path / "in.jsonl", [{"a": a, "b": b} for a, b in pairs])
    code, out, err = run_cli(capsys, "predict", "--model", folder, "--input", source, "--text-columns", "a,b")
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert records == kdbert.load(folder).predict(pairs)
    check_records(records, direct_logits(folder, runtime, pairs), ["LABEL_0", "LABEL_1"])
    code, _, err = run_cli(capsys, "predict", "--model", folder, "--input", source, "--text-columns", "a")
    assert code == 2 and "reads sentence pairs; pass two texts per item" in err and err.count("\n") == 1


def test_regression_gives_the_score(tmp_path, capsys, tiny_tokenizer):
    folder = save_family(tmp_path / "stsb", "bert", tiny_tokenizer, num_labels=1)
    pairs = list(zip(texts(4, seed=7), texts(4, seed=8)))
    records = kdbert.load(folder).predict(pairs)
    assert list(records[0]) == ["score"]
    np.testing.assert_allclose([r["score"] for r in records], direct_logits(folder, "pytorch", pairs)[:, 0],
                               rtol=0, atol=TOLERANCE)


def test_label_names_from_id2label_else_the_recorded_task(tmp_path, tiny_tokenizer, capsys):
    named = save_tiny_classifier(tmp_path / "named", tiny_tokenizer, num_labels=2,
                                 id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1})
    assert {r["label"] for r in kdbert.load(named).predict(texts(8))} <= {"negative", "positive"}
    run = save_family(tmp_path / "run", "bilstm", tiny_tokenizer, num_labels=3, pair=True)
    (run / "run_config.json").write_text(json.dumps({"command": "distill task", "task": "mnli"}))
    export_model(run)
    for path in (run, run / "onnx"):  # the export finds the task recorded in the folder above it
        predictor = kdbert.load(path)
        assert predictor.labels == ("entailment", "neutral", "contradiction")
        assert predictor.text_fields == ("premise", "hypothesis")
        pairs = list(zip(texts(4), texts(4, seed=1)))
        check_records(predictor.predict(pairs), direct_logits(path, "pytorch" if path == run else "onnx", pairs),
                      predictor.labels)


def test_jsonl_from_stdin(models, capsys, monkeypatch):
    items = texts(3)
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(json.dumps({"text": t}) + "\n" for t in items)))
    code, out, err = run_cli(capsys, "predict", "--model", models["bilstm"], "--input", "-")
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == kdbert.load(models["bilstm"]).predict(items)


def test_a_qa_model_gives_the_answer_span_and_its_probability(tmp_path, capsys, tiny_tokenizer):
    from kdbert.core.qa_evaluate import best_answer

    torch.manual_seed(0)
    folder = save_hf(tmp_path / "qa", BertForQuestionAnswering(tiny_bert_config(tiny_tokenizer)), tiny_tokenizer)
    model = BertForQuestionAnswering.from_pretrained(folder).eval()
    pairs = list(zip(texts(3, seed=9, low=3, high=5), texts(3, seed=10, low=8, high=12)))
    source = write_jsonl(tmp_path / "qa.jsonl", [{"question": q, "context": c} for q, c in pairs])
    code, out, err = run_cli(capsys, "predict", "--model", folder, "--input", source)
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert records == kdbert.load(folder).predict(pairs)
    for (question, context), record in zip(pairs, records):
        encoded = tiny_tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
        offsets = [tuple(o) if s == 1 else None
                   for o, s in zip(encoded.pop("offset_mapping")[0].tolist(), encoded.sequence_ids(0))]
        with torch.no_grad():
            output = model(**encoded)
        start, end = output.start_logits[0].numpy(), output.end_logits[0].numpy()
        assert record["answer"] == best_answer(context, [(start, end, offsets)], allow_empty=False) != ""
        assert record["answer"] in context
        starts, ends = softmax(start.astype(np.float64)), softmax(end.astype(np.float64))
        assert any(abs(record["score"] - starts[i] * ends[j]) < TOLERANCE
                   for i in range(len(offsets)) for j in range(len(offsets)))
    export_model(folder)
    exported = kdbert.load(folder / "onnx").predict(pairs)
    assert [r["answer"] for r in exported] == [r["answer"] for r in records]
    np.testing.assert_allclose([r["score"] for r in exported], [r["score"] for r in records], rtol=0, atol=TOLERANCE)
    code, _, err = run_cli(capsys, "predict", "--model", folder, "--input", source, "--text-columns", "question")
    assert code == 2 and "reads (question, context) pairs" in err


def bad_inputs(tmp_path, models, tiny_tokenizer):
    """(argv, words of the one-line error) of every kind of bad input."""
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": "the cat"}])
    unknown = tmp_path / "rows.txt"
    unknown.write_text("the cat\n")
    header_only = tmp_path / "empty.csv"
    header_only.write_text("text\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    other_column = write_jsonl(tmp_path / "other.jsonl", [{"text": "a dog"}, {"sentence": "the cat", "id": 3}])
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    broken_config = tmp_path / "broken"
    broken_config.mkdir()
    (broken_config / "config.json").write_text("{nope")
    bare_encoder = tmp_path / "bare"
    BertModel(tiny_bert_config(tiny_tokenizer)).save_pretrained(bare_encoder)
    model = models["bert"]
    return [
        (["--model", model, "--input", tmp_path / "missing.csv"], "data file", "does not exist"),
        (["--model", model, "--input", unknown], "unsupported file type '.txt'",),
        (["--model", model, "--input", other_column], "other.jsonl:2: no column 'text'", "the row has sentence, id"),
        (["--model", model, "--input", good, "--text-columns", "a,b,c"], "one column name or two"),
        (["--model", model, "--input", header_only], "no data rows found",),
        (["--model", model, "--input", empty], "no data rows found",),
        (["--model", not_a_model, "--input", good], "is not a model folder (no config.json)",),
        (["--model", broken_config, "--input", good], "config.json: not valid JSON",),
        (["--model", tmp_path / "nowhere", "--input", good], "does not exist",),
        (["--model", bare_encoder, "--input", good], "is not a fine-tuned sequence-classification model",),
        (["--model", good, "--input", good], "neither a model folder nor an .onnx file",),
        (["--model", model, "--input", good, "--batch-size", 0], "--batch-size must be a positive integer",),
    ]


def test_bad_input_is_one_line_exit_2_and_no_output_file(models, tmp_path, capsys, tiny_tokenizer):
    for argv, *words in bad_inputs(tmp_path, models, tiny_tokenizer):
        output = tmp_path / "out" / "predictions.jsonl"
        output.parent.mkdir(exist_ok=True)
        code, out, err = run_cli(capsys, "predict", *argv, "--output", output)
        assert code == 2, (argv, err)
        assert err.startswith("kdbert: error: ") and err.count("\n") == 1, err
        assert all(word in err for word in words), (words, err)
        assert out == "" and list(output.parent.iterdir()) == [], argv
