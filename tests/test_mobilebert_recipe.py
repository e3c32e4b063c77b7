"""`kdbert distill general|task --method mobilebert` end to end on tiny models: the three strategies
from the CLI, the optimiser groups the trainer really builds, frozen layers, refusals before any
training, resume of a progressive run, the terms against losses.*, and the task stage."""

from __future__ import annotations

import json
import random

import pytest
import torch
from conftest import save_tiny_classifier, sentence, stage_terms, tiny_bert_config, write_glue_task
from transformers import AutoModelForSequenceClassification, BertForMaskedLM, BertModel, MobileBertForMaskedLM

from kdbert.cli import commands as cli
from kdbert.core import transfer_losses as losses
from kdbert.methods.front import distill_general
from kdbert.families.mobilebert import mobilebert_config
from kdbert.core.trainer import Trainer

LAYER = "student.mobilebert.encoder.layer.{}."


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("mobilebert")
    torch.manual_seed(0)
    config = tiny_bert_config(tiny_tokenizer, num_hidden_layers=3)
    BertForMaskedLM(config).save_pretrained(root / "mlm-teacher")
    tiny_tokenizer.save_pretrained(root / "mlm-teacher")
    BertModel(config).save_pretrained(root / "bare-teacher")
    tiny_tokenizer.save_pretrained(root / "bare-teacher")
    finetuned = save_tiny_classifier(root / "finetuned", tiny_tokenizer, num_hidden_layers=3, seed=2)
    for name, overrides in {"wide": {"hidden_size": 32}, "two-heads": {"num_attention_heads": 2}}.items():
        (root / name).mkdir()
        mobilebert_config("mobilebert-matched", config, **overrides).save_pretrained(root / name)
    glue = root / "glue_data"
    write_glue_task(glue, "SST-2", n_train=24, n_dev=8)
    rng = random.Random(0)
    docs = ["\n".join(". ".join(sentence(rng).capitalize() for _ in range(3)) + "." for _ in range(4))
            for _ in range(12)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    return {"root": root, "mlm": root / "mlm-teacher", "bare": root / "bare-teacher", "finetuned": finetuned,
            "glue": glue, "corpus": root / "corpus.txt", "config": config}


def general_args(env, out, *extra):
    return ["distill", "general", "--method", "mobilebert", "--teacher", str(env["mlm"]), "--corpus",
            str(env["corpus"]), "--max-seq-len", "24", "--batch-size", "4", "--max-sequences", "16",
            "--layer-steps", "2", "--pretrain-steps", "2", "--output-dir", str(out), "--no-progress", *extra]


def options(env, **extra):
    values = {"method": "mobilebert", "teacher": str(env["mlm"]), "corpus": [str(env["corpus"])], "max_seq_len": 24,
              "batch_size": 4, "max_sequences": 16, "layer_steps": 2, "pretrain_steps": 2, "no_progress": True}
    return {**values, **extra}


# ----------------------------------------------------------------------------- end to end
PROGRESSIVE_TABLE = [
    "stage             steps  terms        trains (lr x); rest frozen                    schedule",
    "layer-1           2      layers 1<-1  layer 1 x3; embeddings x3                     constant_warmup",
    "layer-2           2      layers 2<-2  layer 2 x3; embeddings x0.3; layer 1 x0.3     constant_warmup",
    "layer-3           2      layers 3<-3  layer 3 x3; embeddings x0.3; layers 1-2 x0.3  constant_warmup",
    "pretrain-distill  2      MLM          all x1                                        linear",
]
STAGES = {"progressive": ["layer-1", "layer-2", "layer-3", "pretrain-distill"],
          "joint": ["joint", "pretrain-distill"], "auxiliary": ["auxiliary"]}
LAYER_TERMS = {"feature_map", "mean", "variance", "attention"}


@pytest.mark.parametrize("strategy", list(STAGES))
def test_each_strategy_runs_from_the_cli(env, tmp_path, capsys, strategy):
    out = tmp_path / strategy
    code = cli.main(general_args(env, out, "--strategy", strategy))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert ("direct transfer: student inter-block width 16 = the teacher's; the teacher (a bert) plays IB-BERT's role"
            in captured.out)
    report = json.loads((out / "general_report.json").read_text())
    distinct = report["embedding_distinctness"]
    assert distinct["tokens"] > 2 and distinct["student_mean_cosine"] < 0.9
    assert (f"mean cosine between different tokens (1.0 = indistinguishable): student "
            f"{distinct['student_mean_cosine']:.3f}, teacher {distinct['teacher_mean_cosine']:.3f}") in captured.out
    assert [s["name"] for s in report["stages"]] == STAGES[strategy]
    assert report["total_steps"] == 8 and sum(s["max_steps"] for s in report["stages"]) == 8
    if strategy == "progressive":
        assert "\n".join(PROGRESSIVE_TABLE) in captured.out
    losses_logged = report["stage_losses"]
    first = STAGES[strategy][0]
    expected = LAYER_TERMS | {"mlm"} if strategy == "auxiliary" else LAYER_TERMS
    assert expected <= set(losses_logged[first][-1])
    if strategy != "auxiliary":
        last = losses_logged["pretrain-distill"][-1]
        assert "mlm" in last and "mean" not in last
    student = AutoModelForSequenceClassification.from_pretrained(out, num_labels=2)
    assert type(student).__name__ == "MobileBertForSequenceClassification"


# ----------------------------------------------------------------------------- what the trainer uses
def record_steps(monkeypatch):
    """Per optimiser step: the stage, {parameter name: lr the optimizer was built with}, layer 1's weights."""
    records = []
    step = Trainer._optimizer_step

    def recording(self, module, optimizer, scheduler, config):
        names = {id(p): n for n, p in self.modules.named_parameters()}
        rates = {names[id(p)]: group["initial_lr"] for group in optimizer.param_groups for p in group["params"]}
        step(self, module, optimizer, scheduler, config)
        layer1 = {n: p.detach().clone() for n, p in self.modules.named_parameters() if n.startswith(LAYER.format(0))}
        records.append((config.name, rates, layer1))

    monkeypatch.setattr(Trainer, "_optimizer_step", recording)
    return records


def test_optimizer_groups_are_the_generated_ones(env, tmp_path, monkeypatch):
    records = record_steps(monkeypatch)
    distill_general(options(env, learning_rate=1e-3), str(tmp_path / "out"))
    every = [n for n, _ in MobileBertForMaskedLM.from_pretrained(tmp_path / "out").named_parameters()]
    every = ["student." + n for n in every]
    by_stage = {name: rates for name, rates, _ in records}
    assert list(by_stage) == STAGES["progressive"]

    def expected(current: int, previous: list[int]) -> dict:
        rates = {n: 3e-3 for n in every if n.startswith(LAYER.format(current - 1))}
        embeddings = [n for n in every if n.startswith("student.mobilebert.embeddings.")]
        rates.update({n: 3e-4 if previous else 3e-3 for n in embeddings})
        rates.update({n: 3e-4 for n in every for layer in previous if n.startswith(LAYER.format(layer - 1))})
        return rates

    for layer in (1, 2, 3):
        rates = {n: pytest.approx(v) for n, v in expected(layer, list(range(1, layer))).items()}
        assert by_stage[f"layer-{layer}"] == rates
    assert by_stage["pretrain-distill"] == {n: pytest.approx(1e-3) for n in every}


@pytest.mark.parametrize("previous_layers, changes", [("frozen", False), ("official", True)])
def test_earlier_layers_frozen_or_slow(env, tmp_path, monkeypatch, previous_layers, changes):
    records = record_steps(monkeypatch)
    distill_general(options(env, pretrain_steps=0, previous_layers=previous_layers), str(tmp_path / "out"))
    after_layer1 = [weights for stage, _, weights in records if stage == "layer-1"][-1]
    later = [weights for stage, _, weights in records if stage in ("layer-2", "layer-3")]
    assert len(later) == 4
    same = [all(torch.equal(w[n], after_layer1[n]) for n in after_layer1) for w in later]
    assert same == [not changes] * 4


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("args, message", [
    (["--teacher-layers", "1,2"], "--teacher-layers lists 2 layers but the student has 3"),
    (["--student", "mobilebert-tiny"], "the student has 24 layers but the teacher has 3"),
    (["--student", "{root}/wide"], "student layer 1 is 32 wide but teacher layer 1 is 16.*--projection"),
    (["--student", "{root}/two-heads"], "the student has 2 attention heads per layer, the teacher 4.*--head-average"),
    (["--teacher", "{root}/bare-teacher"], "has no masked-LM head.*run `kdbert mlm-head"),
    (["--max-steps", "3"], "--epochs/--max-steps do not apply to --method mobilebert"),
])
def test_bad_input_is_refused_before_training(env, tmp_path, capsys, monkeypatch, args, message):
    import re

    monkeypatch.setattr(Trainer, "train", lambda *a, **k: pytest.fail("training started"))
    out = tmp_path / "out"
    code = cli.main(general_args(env, out, *[a.format(root=env["root"]) for a in args]))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("kdbert: error: ") and err.count("\n") == 1
    assert re.search(message, err), err
    assert not out.exists()


def test_bare_teacher_is_enough_without_mlm_terms(env, tmp_path):
    report = distill_general(options(env, teacher=str(env["bare"]), strategy="joint", pretrain_steps=0),
                             str(tmp_path / "out"))
    assert [s["name"] for s in report["stages"]] == ["joint"]


# ----------------------------------------------------------------------------- resume
def test_progressive_run_resumes_mid_way(env, tmp_path, monkeypatch):
    settings = options(env, save_every=1, seed=3)
    distill_general(dict(settings), str(tmp_path / "full"))
    save = Trainer._save_checkpoint

    def save_then_stop(self, *args):
        save(self, *args)
        if self.state["stage"] == 1 and self.state["step"] == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        distill_general(dict(settings), str(tmp_path / "cut"))
    monkeypatch.setattr(Trainer, "_save_checkpoint", save)
    records = record_steps(monkeypatch)
    distill_general(dict(settings), str(tmp_path / "cut"), resume=True)
    assert [stage for stage, _, _ in records] == ["layer-2", "layer-3", "layer-3", "pretrain-distill",
                                                  "pretrain-distill"]
    full = MobileBertForMaskedLM.from_pretrained(tmp_path / "full").state_dict()
    resumed = MobileBertForMaskedLM.from_pretrained(tmp_path / "cut").state_dict()
    for name, value in full.items():
        torch.testing.assert_close(resumed[name], value, msg=name)


# ----------------------------------------------------------------------------- terms
def test_auxiliary_terms_equal_hand_assembly(env, monkeypatch):
    from kdbert.methods.front import _config
    from kdbert.core.loading import load_tokenizer
    from kdbert.core.trace import trace
    from kdbert.methods import mobilebert
    from kdbert.core.method import DistillContext

    config = _config(options(env, strategy="auxiliary", ground_truth_ratio=0.25, attention_reduction="masked-mean"),
                     general=True)
    teacher, _ = mobilebert.METHOD.general_teacher(config)
    tokenizer = load_tokenizer(str(env["mlm"]))
    student = mobilebert.METHOD.general_student(teacher, tokenizer, config)
    dataset, collator, _ = mobilebert.METHOD.general_data([[2, 7, 9, 11, 8, 3], [2, 12, 3]], tokenizer, teacher, config)
    torch.manual_seed(0)
    batch = collator([dataset[0], dataset[1]])
    plan = mobilebert.METHOD.build_general_plan(DistillContext(teacher, student, tokenizer, None, dataset, config),
                                         log=lambda _: None)
    # the traces the loss read: the student runs in training mode (attention dropout 0.1), so another
    # forward pass would differ from them by the dropout masks (and by the CPU's random stream)
    import kdbert.core.matching as matching

    read = {}

    def recorded(model, batch, **kwargs):
        read[kwargs["role"]] = trace(model, batch, **kwargs)
        return read[kwargs["role"]]

    monkeypatch.setattr(matching, "trace", recorded)
    terms = stage_terms(plan, batch)
    s, t = read["student"], read["teacher"]
    mask = batch["attention_mask"]
    assert set(terms) == {"mlm", "feature_map", "mean", "variance", "attention"}
    expected = {
        "mlm": losses.mlm_distillation_loss(s.logits, t.logits, batch["labels"], 0.25),
        "feature_map": sum(100 / 3 * losses.feature_map_mse(s.hidden_states[i], t.hidden_states[i]) for i in (1, 2, 3)),
        "mean": sum(5000 / 3 * losses.mean_transfer_loss(s.hidden_states[i], t.hidden_states[i]) for i in (1, 2, 3)),
        "variance": sum(5 / 3 * losses.variance_transfer_loss(s.hidden_states[i], t.hidden_states[i])
                        for i in (1, 2, 3)),
        "attention": sum(1 / 3 * losses.attention_kl(s.attention_scores[i], t.attention_scores[i], mask, "masked-mean")
                         for i in (0, 1, 2)),
    }
    for name, value in expected.items():  # the same traces: only the sums' order may differ, by a few ulp
        torch.testing.assert_close(terms[name].detach(), value, rtol=1e-6, atol=0, msg=name)


# ----------------------------------------------------------------------------- task stage
def test_task_stage_fine_tunes_a_distilled_student(env, tmp_path, capsys):
    general = tmp_path / "general"
    assert cli.main(general_args(env, general, "--strategy", "joint", "--pretrain-steps", "0")) == 0
    task = tmp_path / "task"
    code = cli.main(["distill", "task", "--method", "mobilebert", "--task", "sst2", "--data-dir", str(env["glue"]),
                     "--teacher", str(env["finetuned"]), "--student", str(general), "--alpha", "0.5",
                     "--temperature", "2", "--output-dir", str(task), "--max-steps", "3", "--batch-size", "8",
                     "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads((task / "distill_report.json").read_text())
    assert report["method"] == "mobilebert" and report["loss"]["alpha"] == 0.5
    assert {"soft", "hard"} <= set(report["stage_losses"]["mobilebert"][-1])
    model = AutoModelForSequenceClassification.from_pretrained(task)
    assert type(model).__name__ == "MobileBertForSequenceClassification" and model.config.num_labels == 2
    distilled = MobileBertForMaskedLM.from_pretrained(general).mobilebert.encoder.layer[0].attention.self.query.weight
    # the task run started from the distilled encoder, then trained it
    assert not torch.equal(model.mobilebert.encoder.layer[0].attention.self.query.weight, distilled)


def test_task_stage_refuses_a_non_mobilebert_student(env, tmp_path, capsys):
    code = cli.main(["distill", "task", "--method", "mobilebert", "--task", "sst2", "--data-dir", str(env["glue"]),
                     "--teacher", str(env["finetuned"]), "--student", str(env["finetuned"]), "--output-dir",
                     str(tmp_path / "t"), "--max-steps", "1", "--no-progress"])
    assert code == 2 and "is a 'bert' model; --method mobilebert needs a MobileBERT folder" in capsys.readouterr().err


def test_general_student_from_a_config_folder_or_a_trained_folder(env, tmp_path):
    from kdbert.methods.front import _config
    from kdbert.families.mobilebert import build_mobilebert
    from kdbert.methods import mobilebert

    teacher = BertForMaskedLM.from_pretrained(env["mlm"])
    shaped = mobilebert.METHOD.general_student(teacher, None, _config(options(env, student=str(env["root"] / "two-heads"),
                                                                        head_average=True), general=True))
    assert shaped.model.config.num_attention_heads == 2
    position = teacher.bert.embeddings.position_embeddings.weight  # fitted from the teacher: centred for NoNorm
    torch.testing.assert_close(shaped.model.mobilebert.embeddings.position_embeddings.weight,
                               position - position.mean(dim=-1, keepdim=True), rtol=0, atol=1e-7)
    trained = build_mobilebert(mobilebert_config("mobilebert-matched", env["config"]), "masked-lm", seed=5)
    trained.save_pretrained(tmp_path / "trained")
    loaded = mobilebert.METHOD.general_student(teacher, None, _config(options(env, student=str(tmp_path / "trained")),
                                                               general=True))
    for name, value in trained.state_dict().items():
        torch.testing.assert_close(loaded.model.state_dict()[name], value, msg=name)
