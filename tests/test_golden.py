"""Golden values: every method and stage type, run from the command line on tiny random models
(CPU, float32, one thread), must give the loss terms of its first optimiser step and the
weights after 5 steps pinned in ``golden_values.json``.

These pin *behaviour*, not code: a refactor of the training core must reproduce them to within
what float32 rounding can move them (:func:`_tolerance`), on any x86 CPU. To regenerate after a
deliberate change of behaviour (say so in the commit message)::

    KDBERT_REGENERATE_GOLDEN=1 python -m pytest tests/test_golden.py
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch
from conftest import WORDS, save_tiny_classifier, sentence, tiny_bert_config, write_glue_task
from safetensors.torch import load_file
from transformers import BertForMaskedLM, BertModel

from kdbert.cli import commands as cli
from kdbert.core.trainer import Trainer

GOLDEN = Path(__file__).with_name("golden_values.json")
REGENERATE = os.environ.get("KDBERT_REGENERATE_GOLDEN") == "1"
STEPS = 5
# Tolerances (:func:`_tolerance`). The runs are float32, and CPUs run other kernels for the same
# arithmetic (AVX2, AVX-512 and AMX machines block matrix products and vectorise reductions
# differently), so a value is pinned to what rounding can move it, not to one machine's bits: 2^6
# ulp (2^-24 each) of its scale, |v| for a loss and sum_i |w_i| for a weight sum sum_i w_i (rounding
# of one ulp per operation, through a few layers, a backward pass and 5 AdamW steps, which pass a
# relative gradient error one to one into the step), and at least a floor: 5e-6 for a loss (a small
# difference of large terms, such as the squared difference of two means of MobileBERT hidden
# states of size ~30, carries an absolute error of some ulp of those terms), 1e-5 for a weight sum (an
# element whose gradient is within rounding of zero takes AdamW steps the rounding decides).
# Measured: this AVX-512 machine, AVX2-only kernels and scalar ones (ATEN_CPU_CAPABILITY,
# MKL_ENABLE_INSTRUCTIONS or MKL_CBWR=COMPATIBLE, ONEDNN_MAX_CPU_ISA) differ by at most 1/3 of
# these; AdamW's beta1 0.92 instead of 0.9 is caught in 18 of the 19 AdamW cases.
ROUNDING_ULPS = 2 ** 6
LOSS_FLOOR, WEIGHT_FLOOR = 5e-6, 1e-5


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("golden")
    torch.manual_seed(0)
    config = tiny_bert_config(tiny_tokenizer, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                              intermediate_size=48)
    BertForMaskedLM(config).save_pretrained(root / "mlm-teacher")
    tiny_tokenizer.save_pretrained(root / "mlm-teacher")
    torch.manual_seed(1)
    BertModel(config).save_pretrained(root / "bare-teacher")
    tiny_tokenizer.save_pretrained(root / "bare-teacher")
    shape = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48)
    save_tiny_classifier(root / "teacher-rte", tiny_tokenizer, num_labels=2, seed=2, **shape)
    save_tiny_classifier(root / "teacher-stsb", tiny_tokenizer, num_labels=1, seed=3, **shape)
    torch.manual_seed(4)
    BertModel(tiny_bert_config(tiny_tokenizer, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=24)).save_pretrained(root / "narrow-student")
    tiny_tokenizer.save_pretrained(root / "narrow-student")
    tiny_bert_config(tiny_tokenizer, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=24).save_pretrained(root / "narrow-config")
    glue = root / "glue_data"
    write_glue_task(glue, "RTE", n_train=40, n_dev=8)
    write_glue_task(glue, "STS-B", n_train=40, n_dev=8)
    rng = random.Random(0)
    docs = ["\n".join(". ".join(sentence(rng).capitalize() for _ in range(3)) + "." for _ in range(4))
            for _ in range(30)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    assert cli.main(["init-student", "--from", str(root / "mlm-teacher"), "--output-dir",
                     str(root / "distilbert-student")]) == 0
    assert cli.main([*_mobilebert_general("progressive", root), "--output-dir", str(root / "mobilebert-general"),
                     "--no-progress"]) == 0
    (root / "vectors.txt").write_text("".join(  # a tiny GloVe file: deterministic vectors of the corpus words
        f"{word} " + " ".join(f"{((i + 1) * (j + 3)) % 7 / 10 - 0.3:.2f}" for j in range(4)) + "\n"
        for i, word in enumerate(WORDS)))
    return root


def _task(env, method, task, *extra):
    teacher = env / ("teacher-stsb" if task == "stsb" else "teacher-rte")
    return ["distill", "task", "--method", method, "--task", task, "--data-dir", str(env / "glue_data"),
            "--teacher", str(teacher), "--batch-size", "8", "--max-steps", str(STEPS), "--seed", "7", *extra]


def _general(env, method, *extra):
    return ["distill", "general", "--method", method, "--corpus", str(env / "corpus.txt"), "--max-seq-len", "24",
            "--batch-size", "4", "--max-steps", str(STEPS), "--seed", "7", *extra]


def _mobilebert_general(strategy, env, *extra):
    """MobileBERT general distillation: 4 layers x 1 step (+ 2 of pre-training distillation)."""
    return ["distill", "general", "--method", "mobilebert", "--strategy", strategy, "--teacher",
            str(env / "mlm-teacher"), "--corpus", str(env / "corpus.txt"), "--max-seq-len", "24", "--batch-size", "4",
            "--layer-steps", "1", "--pretrain-steps", "2", "--seed", "7", *extra]


CASES = {
    "finetune": lambda e: ["finetune", "--model", str(e / "teacher-rte"), "--task", "rte", "--data-dir",
                           str(e / "glue_data"), "--batch-size", "8", "--max-steps", str(STEPS), "--seed", "7"],
    "kd": lambda e: _task(e, "kd", "rte", "--student-layers", "2"),
    "kd-stsb": lambda e: _task(e, "kd", "stsb", "--student-layers", "2"),
    "kd-mse-finetune": lambda e: _task(e, "kd", "rte", "--student-layers", "0,3", "--kd-loss", "mse",
                                       "--alpha", "0.4"),
    "pkd-skip": lambda e: _task(e, "pkd", "rte", "--student-layers", "2", "--layer-map", "skip"),
    "pkd-last-sum": lambda e: _task(e, "pkd", "rte", "--student-layers", "3", "--layer-map", "last",
                                    "--patience-reduction", "sum"),
    "distilbert-task": lambda e: _task(e, "distilbert", "rte", "--student", str(e / "distilbert-student")),
    "tinybert-task": lambda e: _task(e, "tinybert", "rte", "--student", str(e / "narrow-student"),
                                     "--intermediate-max-steps", str(STEPS)),
    "tinybert-task-shared-masked": lambda e: _task(
        e, "tinybert", "rte", "--student", str(e / "narrow-student"), "--intermediate-max-steps", str(STEPS),
        "--hidden-projection", "shared", "--attention-reduction", "masked-mean", "--no-embedding-loss"),
    "tinybert-task-stsb-teacher": lambda e: _task(
        e, "tinybert", "stsb", "--student", str(e / "narrow-student"), "--intermediate-max-steps", str(STEPS),
        "--regression-target", "teacher", "--no-attention-loss"),
    "tinybert-gold-only": lambda e: _task(e, "tinybert", "rte", "--student-layers", "2", "--skip-intermediate",
                                          "--no-prediction-loss"),
    "tinybert-general": lambda e: _general(e, "tinybert", "--teacher", str(e / "bare-teacher"), "--student",
                                           str(e / "narrow-config")),
    "distilbert-general": lambda e: _general(e, "distilbert", "--teacher", str(e / "mlm-teacher"), "--student",
                                             str(e / "distilbert-student"), "--mlm-smoothing", "0.7"),
    "mobilebert-progressive": lambda e: _mobilebert_general("progressive", e),
    "mobilebert-progressive-frozen": lambda e: _mobilebert_general("progressive", e, "--previous-layers", "frozen"),
    "mobilebert-joint": lambda e: _mobilebert_general("joint", e),
    "mobilebert-auxiliary": lambda e: _mobilebert_general("auxiliary", e),
    "mobilebert-task": lambda e: _task(e, "mobilebert", "rte", "--student", str(e / "mobilebert-general"),
                                       "--alpha", "0.5", "--temperature", "2"),
    "mobilebert-task-preset-stsb": lambda e: _task(e, "mobilebert", "stsb", "--student", "mobilebert-matched"),
    "bilstm": lambda e: _task(e, "bilstm", "rte", "--word-vectors", str(e / "vectors.txt"), "--hidden-size", "6",
                              "--fc-size", "5"),
    "bilstm-stsb-labels": lambda e: _task(e, "bilstm", "stsb", "--word-vectors", str(e / "vectors.txt"),
                                          "--hidden-size", "6", "--fc-size", "5", "--alpha", "0"),
}


class Sum(float):
    """A weight sum sum_i w_i that knows its scale sum_i |w_i| (not stored: the tolerance's)."""

    def __new__(cls, tensor: torch.Tensor):
        value = super().__new__(cls, float(tensor.double().sum()))
        value.scale = float(tensor.double().abs().sum())
        return value


def _checksum(path: Path) -> dict:
    """Per-tensor sums of the student (keyed by HF name) and, name-independently, of other modules."""
    tensors = load_file(str(path))
    student = {k.removeprefix("student."): Sum(v) for k, v in sorted(tensors.items()) if k.startswith("student.")}
    others = sorted(Sum(v) for k, v in tensors.items() if not k.startswith("student."))
    absolute = Sum(torch.cat([v.abs().flatten() for k, v in tensors.items() if k.startswith("student.")]))
    return {"student": student, "student_abs": absolute, "others": others}


def _observe(out: Path) -> dict:
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    first = {}
    for record in records:
        if "loss" in record and record["stage"] not in first:
            first[record["stage"]] = {k: v for k, v in record.items() if k not in ("time", "stage", "epoch")}
    checkpoints = {}
    for folder in sorted((out / "checkpoints").glob("checkpoint-*")):
        checkpoints[folder.name] = _checksum(folder / "modules.safetensors")
    return {"first_step": first, "checkpoints": checkpoints}


def _run(args, out: Path, monkeypatch) -> dict:
    original = Trainer.__init__

    def init(self, *a, **k):
        original(self, *a, **k)
        self.run.log_every = 1  # every step's loss terms in log.jsonl

    monkeypatch.setattr(Trainer, "__init__", init)
    assert cli.main([*args, "--output-dir", str(out), "--no-progress"]) == 0
    return _observe(out)


def _mlm_head(env, out: Path) -> dict:
    assert cli.main(["mlm-head", "--encoder", str(env / "bare-teacher"), "--corpus", str(env / "corpus.txt"),
                     "--output-dir", str(out), "--steps", str(STEPS), "--batch-size", "4", "--max-seq-len", "24",
                     "--eval-sequences", "4", "--seed", "7", "--unfreeze-top-layers", "1"]) == 0
    report = json.loads((out / "mlm_head_report.json").read_text())
    tensors = load_file(str(out / "model.safetensors"))
    return {"final_train_loss": report["final_train_loss"], "eval_before": report["eval_before"],
            "eval_after": report["eval_after"],
            "weights": {k: Sum(v) for k, v in sorted(tensors.items())}}


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}/{key}")
    elif isinstance(value, list):
        yield f"{prefix}#len", len(value)
        for i, item in enumerate(value):
            yield from _flatten(item, f"{prefix}[{i}]")
    else:
        yield prefix, value


def _tolerance(value) -> float:
    """How far float32 rounding may move ``value`` on another CPU (see ``ROUNDING_ULPS``)."""
    if isinstance(value, Sum):
        return max(WEIGHT_FLOOR, ROUNDING_ULPS * 2.0 ** -24 * value.scale)
    return max(LOSS_FLOOR, ROUNDING_ULPS * 2.0 ** -24 * abs(value))


def _compare(name: str, got: dict) -> None:
    stored = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if REGENERATE:
        stored[name] = got
        GOLDEN.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
        return
    assert name in stored, f"no golden values for {name}; regenerate with KDBERT_REGENERATE_GOLDEN=1"
    expected, actual = dict(_flatten(stored[name])), dict(_flatten(got))
    assert expected.keys() == actual.keys(), sorted(set(expected) ^ set(actual))
    for key, value in expected.items():
        if isinstance(value, float):
            assert abs(actual[key] - value) <= _tolerance(actual[key]), (key, actual[key], value)
        else:
            assert actual[key] == value, key


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_training_run(name, env, tmp_path, monkeypatch):
    _compare(name, _run(CASES[name](env), tmp_path / name, monkeypatch))


def test_golden_mlm_head(env, tmp_path):
    _compare("mlm-head", _mlm_head(env, tmp_path / "mlm-head"))
