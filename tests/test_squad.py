"""SQuAD-format question answering: the reader and its checks, windows, the official EM / F1, the
span search, and fine-tuning, distillation and evaluation through the CLI on tiny files."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from conftest import WORDS, record_held_out, save_tiny_classifier, tiny_bert_config
from test_cli import run_cli
from transformers import BertForQuestionAnswering

from kdbert.core.qa_evaluate import best_answer, exact_match, f1_score, normalize_answer, squad_scores
from kdbert.data.batching import PAD_LOGIT, EncodedDataset, PaddingCollator, predict_rows
from kdbert.data.glue import Example
from kdbert.data.load import TaskOptions, load_task
from kdbert.data.qa_windows import answer_positions, encode_qa
from kdbert.data.squad import Answers, read_squad
from kdbert.errors import KdbertError


def squad_file(path, articles: int = 4, questions: int = 3, seed: int = 0, version: str = "1.1"):
    """A SQuAD-format file of tiny-vocabulary contexts whose answers are real spans."""
    rng = random.Random(seed)
    data = []
    for a in range(articles):
        paragraphs = []
        for p in range(2):
            context = " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 30)))
            words = context.split()
            qas = []
            for q in range(questions):
                first = rng.randrange(len(words) - 2)
                text = " ".join(words[first:first + rng.randint(1, 2)])
                start = len(" ".join(words[:first])) + (1 if first else 0)
                qas.append({"id": f"{a}-{p}-{q}", "question": " ".join(rng.choice(WORDS) for _ in range(5)),
                            "answers": [{"text": text, "answer_start": start}]})
            paragraphs.append({"context": context, "qas": qas})
        data.append({"title": f"article {a}", "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": version, "data": data}))
    return path


def test_official_normalisation_exact_match_and_f1_by_hand():
    assert normalize_answer("The  Cat, sat!") == "cat sat"
    assert normalize_answer("an Apple a day") == "apple day"
    assert exact_match("the cat", "Cat.") == 1.0 and exact_match("cat sat", "cat") == 0.0
    # pred "cat sat on mat" vs gold "the cat on a mat": common 3 (cat, on, mat); P 3/4, R 3/3
    assert f1_score("cat sat on mat", "the cat on a mat") == pytest.approx(2 * 0.75 * 1.0 / 1.75)
    assert f1_score("dog", "cat") == 0.0 and f1_score("", "") == 1.0 and f1_score("", "cat") == 0.0
    examples = [Example(("q", "c"), Answers([("the cat", 0), ("a dog", 9)])), Example(("q", "c"), Answers())]
    # question 1: best over its golds (EM 1 with "dog"); question 2 unanswerable: "" is right
    assert squad_scores(["dog", ""], examples) == {"exact_match": 100.0, "f1": 100.0}
    assert squad_scores(["cat dog", "x"], examples) == pytest.approx({"exact_match": 0.0, "f1": 100 * (2 / 3) / 2})


def test_best_answer_picks_the_best_valid_span_over_windows():
    offsets = [None, None, (0, 3), (4, 7), (8, 11), None]  # [CLS] q [SEP]? context "cat sat mat" [SEP]
    context = "cat sat mat"
    start = np.array([5.0, 0, 1.0, 3.0, 0.5, 9.0])  # position 5 is outside the context: never chosen
    end = np.array([5.0, 0, 0.2, 0.1, 2.0, 9.0])
    assert best_answer(context, [(start, end, offsets)], allow_empty=False) == "sat mat"  # 3.0 + 2.0
    assert best_answer(context, [(start, end, offsets)], allow_empty=True) == ""  # [CLS] 10 > 5
    # a second window with a better span wins
    other = (np.array([0, 0, 4.0, 0, 0, 0]), np.array([0, 0, 4.0, 0, 0, 0]), offsets)
    assert best_answer(context, [(start, end, offsets), other], allow_empty=False) == "cat"


def test_answer_positions_by_hand():
    offsets = [None, None, None, (0, 3), (4, 7), (8, 11), None]
    assert answer_positions(Answers([("sat mat", 4)]), offsets) == [4, 5]
    assert answer_positions(Answers([("at", 5)]), offsets) == [4, 4]  # inside one token
    assert answer_positions(Answers([("mat dog", 8)]), offsets) == [0, 0]  # runs past the window
    assert answer_positions(Answers(), offsets) == [0, 0]


def test_windows_cover_a_long_context_with_the_stride(tiny_tokenizer):
    context = " ".join(WORDS[:20])
    start = context.index("small red")
    example = Example(("cat dog", context), Answers([("small red", start)]))
    rows = encode_qa(tiny_tokenizer, [example], max_seq_len=19, doc_stride=4)
    # [CLS] cat dog [SEP] + 14 context tokens + [SEP]: the 20 one-token words in windows 0-13 and
    # 10-19 (the second starts 4 tokens before the first ends)
    assert [len(r["input_ids"]) for r in rows] == [19, 4 + 10 + 1]
    assert [r["offsets"][4] for r in rows] == [(0, 3), (context.index("big"), context.index("big") + 3)]
    for row in rows:
        assert row["example"] == 0 and row["offsets"][:4] == [None] * 4 and row["offsets"][-1] is None
        s, e = row["labels"]
        if (s, e) != (0, 0):
            assert context[row["offsets"][s][0]:row["offsets"][e][1]] == "small red"
    assert sum(r["labels"] != [0, 0] for r in rows) == 2  # the answer lies in both windows (the overlap)
    # 19 - 3 specials - 2 question tokens = 14 context tokens a window: sharing 13, each window moves
    # on by one token (7 windows for 20); sharing 14 cannot move on
    assert len(encode_qa(tiny_tokenizer, [example], max_seq_len=19, doc_stride=13)) == 7
    with pytest.raises(KdbertError, match="--doc-stride 14 does not fit windows of --max-seq-len 19 beside a question "
                                          "of 2 tokens: they hold 14 text tokens, so share at most 13"):
        encode_qa(tiny_tokenizer, [example], max_seq_len=19, doc_stride=14)
    with pytest.raises(KdbertError, match="--max-seq-len 5 leaves no room for text beside a question of 2 tokens"):
        encode_qa(tiny_tokenizer, [example], max_seq_len=5, doc_stride=1)


def test_reader_checks_answers_contexts_and_splits_by_article(tmp_path):
    path = squad_file(tmp_path / "dev.json")
    articles = read_squad(path)
    assert len(articles) == 4 and all(len(q) == 6 for _, q in articles)
    first = articles[0][1][0]
    assert first.label.qid == "0-0-0" and first.texts[1][first.label[0][1]:].startswith(first.label[0][0])
    data = load_task(TaskOptions("squad", dev_file=str(path), train_articles=3))
    assert len(data.train) == 18 and len(data.dev["dev"]) == 6 and data.spec.question_answering
    document = json.loads(path.read_text())
    document["data"][1]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 1
    path.write_text(json.dumps(document))
    with pytest.raises(KdbertError, match=r"article 'article 1', question 1-0-0: answer .* is not at offset"):
        read_squad(path)
    document["data"][1]["paragraphs"][0]["context"] = ""
    path.write_text(json.dumps(document))
    with pytest.raises(KdbertError, match="question 1-0-0: the question has no context"):
        read_squad(path)
    with pytest.raises(KdbertError, match=r"missing .*dev-v1.1.json"):
        load_task(TaskOptions("squad", data_dir=str(tmp_path)))
    with pytest.raises(KdbertError, match="--train-articles 4: the dev file has 4 articles"):
        load_task(TaskOptions("squad", dev_file=str(squad_file(tmp_path / "ok.json")), train_articles=4))


def test_finetune_distil_and_evaluate_question_answering(tmp_path, capsys, tiny_tokenizer):
    dev = squad_file(tmp_path / "dev.json", articles=5)
    base = save_tiny_classifier(tmp_path / "base", tiny_tokenizer)
    common = ["--task", "squad", "--dev-file", dev, "--train-articles", 4, "--max-seq-len", 32, "--doc-stride", 8,
              "--no-progress"]
    code, stdout, _ = run_cli(capsys, "finetune", "--model", base, "--output-dir", tmp_path / "teacher",
                              "--max-steps", 4, "--batch-size", 8, *common)
    assert code == 0 and "exact_match=" in stdout and "f1=" in stdout
    code, _, err = run_cli(capsys, "distill", "task", "--method", "kd", "--teacher", tmp_path / "teacher",
                           "--student-layers", 1, "--temperature", 2, "--output-dir", tmp_path / "kd",
                           "--max-steps", 3, *common)
    assert code == 0, err
    report = json.loads((tmp_path / "kd" / "distill_report.json").read_text())
    assert set(report["dev_metrics"]) == {"exact_match", "f1", "score"}
    code, _, _ = run_cli(capsys, "evaluate", "--model", tmp_path / "kd", "--task", "squad", "--dev-file", dev,
                         "--train-articles", 4, "--max-seq-len", 32, "--doc-stride", 8)
    assert code == 0
    assert json.loads((tmp_path / "kd" / "eval_squad.json").read_text()) == pytest.approx(report["dev_metrics"])


def test_qa_losses_are_the_mean_of_start_and_end_terms_by_hand():
    import math

    import torch

    from kdbert.core.losses import kl_div_loss
    from kdbert.core.matching import hard_label_loss

    logits = torch.tensor([[[0.0, 1.0, 2.0], [2.0, 0.0, 0.0]]])  # (B=1, start/end, L=3)
    # start: -log softmax([0,1,2])[2]; end: -log softmax([2,0,0])[0]
    start = -(2.0 - math.log(1 + math.e + math.e ** 2))
    end = -(2.0 - math.log(math.e ** 2 + 2))
    assert hard_label_loss(logits, torch.tensor([[2, 0]])).item() == pytest.approx((start + end) / 2)
    teacher = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    # T = 1: KL(uniform || softmax([0,1,2])) and KL(softmax([1,0,0]) || softmax([2,0,0])), averaged
    def kl(p, q):
        return sum(a * math.log(a / b) for a, b in zip(p, q))

    def softmax(xs):
        z = sum(math.exp(x) for x in xs)
        return [math.exp(x) / z for x in xs]

    expected = (kl([1 / 3] * 3, softmax([0, 1, 2])) + kl(softmax([1, 0, 0]), softmax([2, 0, 0]))) / 2
    assert kl_div_loss(logits, teacher, 1.0).item() == pytest.approx(expected, rel=1e-5)


def save_tiny_qa_model(folder, tokenizer, seed: int = 0):
    """A tiny random BertForQuestionAnswering + tokenizer saved as an HF folder."""
    import torch

    torch.manual_seed(seed)
    BertForQuestionAnswering(tiny_bert_config(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_per_position_outputs_are_cut_to_each_row_and_padded_in_dataset_order():
    rows = EncodedDataset([{"input_ids": [5] * n, "attention_mask": [1] * n} for n in (3, 1, 2)])
    seen = []

    def outputs_of(batch):  # (B, 2, L): start = position, end = 10 * batch length + position
        seen.append(batch["input_ids"].shape)
        b, length = batch["input_ids"].shape
        return np.stack([np.stack([np.arange(length), 10 * length + np.arange(length)])] * b)

    logits = predict_rows(rows, PaddingCollator(0), 2, outputs_of)
    assert seen == [(2, 2), (1, 3)]  # length-sorted batches: rows 1 and 2, then row 0
    p = PAD_LOGIT
    assert logits.tolist() == [[[0, 1, 2], [30, 31, 32]],
                               [[0, p, p], [20, p, p]],
                               [[0, 1, p], [20, 21, p]]]


def test_qa_export_has_parity_and_the_same_em_f1_in_every_runtime(tmp_path, capsys, tiny_tokenizer):
    import onnxruntime as ort

    dev = squad_file(tmp_path / "dev.json", articles=5, questions=4)
    model = save_tiny_qa_model(tmp_path / "qa", tiny_tokenizer)
    task = ["--task", "squad", "--dev-file", dev, "--train-articles", 4, "--max-seq-len", 24, "--doc-stride", 8]
    code, _, err = run_cli(capsys, "export", "--model", model, "--quantize", "int8", "--int8-method", "dynamic",
                           "--output-dir", tmp_path / "onnx", *task)
    assert code == 0, err
    report = json.loads((tmp_path / "onnx" / "export_report.json").read_text())
    parity, metrics = report["parity"], report["dev_metrics"]
    assert parity["fp32_within_tolerance"] and parity["examples"] > 8  # windows of the 8 dev questions
    assert metrics["onnx_fp32"] == pytest.approx(metrics["pytorch"])
    assert set(metrics["pytorch"]) == {"exact_match", "f1", "score"}
    # the graph's logits are (B, 2, L) at any length
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"))
    for length in (5, 17):
        feed = {i.name: np.ones((3, length), dtype=np.int64) for i in session.get_inputs()}
        assert session.run(None, feed)[0].shape == (3, 2, length)
    code, _, err = run_cli(capsys, "evaluate", "--model", tmp_path / "onnx", *task)
    assert code == 0, err
    assert json.loads((tmp_path / "onnx" / "eval_squad_model.json").read_text()) == pytest.approx(metrics["onnx_fp32"])


@pytest.mark.parametrize("method", ["distilbert", "mobilebert"])
def test_distilbert_and_mobilebert_students_answer_questions(tmp_path, capsys, tiny_tokenizer, method):
    dev = squad_file(tmp_path / "dev.json", articles=3)
    teacher = save_tiny_qa_model(tmp_path / "teacher", tiny_tokenizer)
    task = ["--task", "squad", "--dev-file", dev, "--train-articles", 2, "--max-seq-len", 24, "--doc-stride", 8,
            "--no-progress"]
    if method == "distilbert":
        code, _, err = run_cli(capsys, "init-student", "--from", teacher, "--layers", "0", "--output-dir",
                               tmp_path / "init")
        assert code == 0, err
        student = ["--student", tmp_path / "init"]
    else:
        student = ["--student", "mobilebert-tiny"]
    code, _, err = run_cli(capsys, "distill", "task", "--method", method, "--teacher", teacher, "--alpha", 0.5,
                           "--output-dir", tmp_path / "student", "--max-steps", 2, *student, *task)
    assert code == 0, err
    config = json.loads((tmp_path / "student" / "config.json").read_text())
    assert config["architectures"] == [f"{'DistilBert' if method == 'distilbert' else 'MobileBert'}ForQuestionAnswering"]
    report = json.loads((tmp_path / "student" / "distill_report.json").read_text())
    assert set(report["dev_metrics"]) == {"exact_match", "f1", "score"}


def test_the_bilstm_refuses_question_answering_in_one_line(tmp_path, capsys, tiny_tokenizer):
    dev = squad_file(tmp_path / "dev.json", articles=3)
    teacher = save_tiny_qa_model(tmp_path / "teacher", tiny_tokenizer)
    code, _, err = run_cli(capsys, "distill", "task", "--method", "bilstm", "--teacher", teacher, "--task", "squad",
                           "--dev-file", dev, "--train-articles", 2, "--output-dir", tmp_path / "s")
    assert code == 2
    assert err.strip() == ("kdbert: error: --method bilstm classifies whole texts and cannot point at answer spans in "
                           "squad; use --method kd, tinybert, pkd, distilbert or mobilebert")


def test_qa_teacher_cache_serves_start_and_end_logits_at_any_shorter_batch_length(tmp_path, tiny_tokenizer):
    import torch
    from safetensors.torch import load_file

    from kdbert.core.teacher_cache import TeacherCache
    from kdbert.methods.front import distill_task

    dev = squad_file(tmp_path / "dev.json", articles=5)
    teacher_dir = save_tiny_qa_model(tmp_path / "teacher", tiny_tokenizer, seed=3)
    task = TaskOptions("squad", dev_file=str(dev), train_articles=4, doc_stride=8)

    def distill(out, cache=None):
        options = {"method": "kd", "teacher": str(teacher_dir), "student_layers": "1", "max_seq_len": 24,
                   "epochs": 2, "batch_size": 8, "no_progress": True, "temperature": 2.0,
                   "teacher_cache": str(cache) if cache else None}
        return distill_task(task, options, str(out)), load_file(str(out / "model.safetensors"))

    _, plain = distill(tmp_path / "plain")
    cold_report, cold = distill(tmp_path / "cold", tmp_path / "cache")
    warm_report, warm = distill(tmp_path / "warm", tmp_path / "cache")
    cold_cache, warm_cache = cold_report["teacher_cache"], warm_report["teacher_cache"]
    rows = cold_cache["rows_stored"]
    assert rows > 24 and cold_cache["stages"]["kd"]["fields"] == ["span_logits"]
    # epoch 2 is served whenever a row's batch is no longer than the batch it was stored from
    assert cold_cache["rows_looked_up"] == 2 * rows and cold_cache["rows_served"] > 0
    assert (warm_cache["teacher_batches_run"], warm_cache["rows_served"]) == (0, 2 * rows)
    # Close, not equal: a row is served at the longest length it was stored at, so warm's epoch 1 may
    # read logits that cold's epoch 2 computed again in a longer batch (other last bits on CPUs whose
    # kernels depend on the shape) where cold's epoch 1 used its own. Logits moved by 1e-6 relative
    # (~8 ulp) move these weights by <1e-9, far inside the tolerance; logits served to the wrong rows
    # move the first tensor compared by 2e-5.
    for name, value in cold.items():
        torch.testing.assert_close(warm[name], value, rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(value, plain[name], rtol=1e-5, atol=1e-6, msg=name)
    # served rows are the computed logits, cut to the batch's length
    teacher = BertForQuestionAnswering.from_pretrained(teacher_dir).eval()
    cache = TeacherCache(tmp_path / "cache2", teacher, 24, question_answering=True)
    windows = [{k: r[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
               for r in encode_qa(tiny_tokenizer, load_task(task).train[:6], 24, 8)]
    collate = PaddingCollator(tiny_tokenizer.pad_token_id)
    long_batch = collate(windows)
    short = sorted(range(len(windows)), key=lambda i: len(windows[i]["input_ids"]))[:2]
    short_batch = collate([windows[i] for i in short])
    length = short_batch["input_ids"].shape[1]
    assert length < long_batch["input_ids"].shape[1]
    cache.trace(teacher, short_batch, ["span_logits"], with_attention=False)  # stored at the short length
    computed = cache.trace(teacher, long_batch, ["span_logits"], with_attention=False).logits  # too short: run
    served = cache.trace(teacher, short_batch, ["span_logits"], with_attention=False).logits
    assert served.shape == (2, 2, length) and torch.equal(served, computed[short][:, :, :length])
    counts = cache.counts[""]
    assert (counts.teacher_batches_run, counts.teacher_batches_skipped) == (2, 1)


def test_compress_finds_distils_and_ships_a_question_answerer(tmp_path, tiny_tokenizer):
    from kdbert.cli import main
    from kdbert.core.qa_evaluate import QAEvaluator
    from kdbert.deploy.onnx_runtime import OnnxClassifier

    dev = squad_file(tmp_path / "dev.json", articles=5)
    teacher_dir = save_tiny_qa_model(tmp_path / "teacher", tiny_tokenizer)
    record_held_out(teacher_dir, TaskOptions("squad", dev_file=str(dev), train_articles=4, doc_stride=8), 0.1)
    out = tmp_path / "compress"
    task = ["--task", "squad", "--dev-file", str(dev), "--train-articles", "4", "--doc-stride", "8"]
    assert main(["compress", "--teacher", str(teacher_dir), *task, "--candidates", "mobilebert-2x16", "--rounds", "1",
                 "--first-steps", "2", "--batch-size", "4", "--length-rows", "4", "--threads", "1",
                 "--output-dir", str(out), "--target-speedup", "0.01"]) == 0
    report = json.loads((out / "compress_report.json").read_text())
    config = json.loads((out / "winner" / "config.json").read_text())
    assert config["architectures"] == ["MobileBertForQuestionAnswering"]
    exported = json.loads((out / "winner" / "export_report.json").read_text())
    shipped = report["shipped"]
    assert shipped["dev_score"] == exported["dev_metrics"]["onnx_int8"]["score"]
    assert (shipped["majority_dev"], shipped["gain_kept_dev"]) == (None, None)  # no constant answer to beat
    # agreement: the share of dev questions whose shipped answer is the teacher's, by hand
    data = load_task(TaskOptions("squad", dev_file=str(dev), train_articles=4, doc_stride=8, held_out_fraction=0.1))
    student = OnnxClassifier(out / "winner" / "model.int8.onnx")
    teacher = BertForQuestionAnswering.from_pretrained(teacher_dir).eval()
    ours, theirs = (QAEvaluator(data, tiny_tokenizer) for _ in range(2))
    rows = data.dev["dev"]
    same = [a == b for a, b in zip(ours.answers(student, rows, ours.splits["dev"]),
                                   theirs.answers(teacher, rows, theirs.splits["dev"]))]
    assert shipped["agreement_measure"] == "% of questions, same answer"
    assert shipped["agreement_dev"] == pytest.approx(100.0 * sum(same) / len(same))
    # every candidate offered for QA is built with start and end logits; the BiLSTM is not offered
    from kdbert.compress.speed import all_candidates, shape_context

    context = shape_context(teacher_dir, TaskOptions("squad", dev_file=str(dev), train_articles=4))
    offered = all_candidates(context)
    assert [c.name for c in offered] == ["mobilebert-2x16"]
    assert all(type(c.build(context)[0]).__name__.endswith("ForQuestionAnswering") for c in offered)


def test_pkd_kd_term_on_qa_is_per_distribution_not_per_position():
    from kdbert.data.tasks import GLUE_TASKS, SQUAD_TASKS
    from kdbert.methods.base import kd_matches, kd_report
    from kdbert.methods.pkd import PKDConfig

    config = PKDConfig()
    assert config.kd_reduction == "mean"  # the reference's, kept on classification
    soft = {spec.name: next(m for m in kd_matches(config, spec) if m.term == "soft")
            for spec in (GLUE_TASKS["sst2"], SQUAD_TASKS["squad"])}
    assert soft["sst2"].options["reduction"] == "mean" and soft["squad"].options["reduction"] == "batchmean"
    assert kd_report(config, SQUAD_TASKS["squad"])["kd_reduction"] == "batchmean"
