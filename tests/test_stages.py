"""Stages and matches as data: YAML stage plans (the packaged examples), per-layer stage
generation, parameter groups with lr multipliers, lazily created projections, per-model inputs
and the hook trace adapter."""

from __future__ import annotations

import json
import random

import pytest
import torch
import yaml
from conftest import method_config, save_tiny_classifier, sentence, stage_terms, tiny_bert_config, write_glue_task
from torch import nn
from transformers import BertModel

from kdbert.cli import commands as cli
from kdbert.core import losses
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.glue import load_glue_dir
from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError
from kdbert.core.matching import Match, MatchLoss
from kdbert.core.trace import HookAdapter, register_adapter, trace
from kdbert.methods import tinybert
from kdbert.core.method import DistillContext
from kdbert.core.optim import optimizer_groups
from kdbert.core.stages import ParamGroup, Stage, StageConfig
from kdbert.core.trainer import RunConfig, Trainer

SPEC = GLUE_TASKS["rte"]


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("stages")
    shape = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48)
    teacher = save_tiny_classifier(root / "teacher", tiny_tokenizer, seed=2, **shape)
    torch.manual_seed(4)
    BertModel(tiny_bert_config(tiny_tokenizer, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=24)).save_pretrained(root / "student")
    tiny_tokenizer.save_pretrained(root / "student")
    write_glue_task(root / "glue", "RTE", n_train=24, n_dev=8)
    return {"root": root, "teacher": teacher, "student": root / "student", "glue": root / "glue",
            "tokenizer": tiny_tokenizer}


def recipe_plan(name: str) -> list:
    return yaml.safe_load((cli.RECIPE_DIR / "examples" / f"{name}.yaml").read_text())["stages"]


def plan_for(env, stages):
    from transformers import BertForSequenceClassification

    teacher = BertForSequenceClassification.from_pretrained(env["teacher"]).eval()
    config = method_config("tinybert", {"student": str(env["student"]), "stages": stages, "seed": 3}, "rte")
    student = tinybert.METHOD.initial_student(teacher, SPEC, config)
    train = encode_examples(env["tokenizer"], load_glue_dir(SPEC, env["glue"]).train, 32)
    plan = tinybert.METHOD.build_task_plan(DistillContext(teacher, student, env["tokenizer"], SPEC, train, config, 3))
    batch = PaddingCollator(env["tokenizer"].pad_token_id)([train[i] for i in range(6)])
    student.model.eval()
    return plan, batch, teacher, student.model


def test_last_layer_example_terms_equal_hand_assembly(env):
    plan, batch, teacher, student = plan_for(env, recipe_plan("last-layer"))
    assert [s.config.name for s in plan.stages] == ["last-layer", "prediction"]
    assert (plan.stages[0].config.schedule, plan.stages[0].config.evaluate) == ("constant", False)
    terms = stage_terms(plan, batch)
    s, t = trace(student, batch), trace(teacher, batch)
    projection = plan.modules["projections"]["layer_-1"]
    assert projection.weight.shape == (32, 16)  # widths from the first traced batch
    mask = batch["attention_mask"]
    torch.testing.assert_close(terms["attention_scores"], losses.attention_mse(s.attention_scores[-1],
                                                                               t.attention_scores[-1], mask))
    torch.testing.assert_close(terms["hidden"], losses.hidden_mse(s.hidden_states[-1], t.hidden_states[-1],
                                                                  projection))
    with torch.no_grad():
        expected = losses.soft_cross_entropy(student(**{k: batch[k] for k in ("input_ids", "attention_mask",
                                                                           "token_type_ids")}).logits,
                                             teacher(**{k: batch[k] for k in ("input_ids", "attention_mask",
                                                                           "token_type_ids")}).logits, 1.0)
    torch.testing.assert_close(stage_terms(plan, batch, 1)["logits"].detach(), expected)


def test_last_layer_example_runs_from_the_cli(env, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["distill", "task", "--recipe", "examples/last-layer", "--task", "rte", "--data-dir",
                     str(env["glue"]), "--teacher", str(env["teacher"]), "--student", str(env["student"]),
                     "--output-dir", str(out), "--max-steps", "2", "--batch-size", "8", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "distill_report.json").read_text())
    assert set(report["stage_losses"]) == {"last-layer", "prediction"}
    assert {"attention_scores", "hidden"} <= set(report["stage_losses"]["last-layer"][-1])
    assert report["matches"]["last-layer"][1] == "hidden: 1 * hidden_mse(hidden[-1] via layer_-1, hidden[-1])"
    assert report["projections"]["names"] == ["layer_-1"] and (out / "projections.safetensors").is_file()


def test_progressive_example_generates_one_stage_per_layer_with_lr_groups(env, tmp_path):
    plan, batch, *_ = plan_for(env, recipe_plan("progressive"))
    assert [s.config.name for s in plan.stages] == ["layer-1", "layer-2", "prediction"]
    assert plan.stages[1].config.train == (ParamGroup("student.*.layer.1.*"), ParamGroup("projections.layer_2.*"),
                                           ParamGroup("student.*.layer.0.*", 0.1))
    assert [m.student_layer for m in plan.matches["layer-2"]] == [2, 2]
    assert [m.teacher_layer for m in plan.matches["layer-2"]] == [4, 4]
    for index in (0, 1):  # projections are created from the first batch, per stage
        stage_terms(plan, batch, index)
    trainer = Trainer(plan.modules, plan.stages, RunConfig(str(tmp_path), progress=False),
                      PaddingCollator(env["tokenizer"].pad_token_id), frozen=plan.frozen)
    config = StageConfig("layer-2", learning_rate=1e-3, train=plan.stages[1].config.train)
    groups = optimizer_groups(trainer.modules, config)
    rates = {id(p): g["lr"] for g in groups for p in g["params"]}
    named = dict(trainer.modules.named_parameters())
    assert rates[id(named["student.bert.encoder.layer.1.output.dense.weight"])] == 1e-3
    assert rates[id(named["projections.layer_2.weight"])] == 1e-3
    assert rates[id(named["student.bert.encoder.layer.0.output.dense.weight"])] == pytest.approx(1e-4)
    assert id(named["student.classifier.weight"]) not in rates
    assert not named["student.bert.embeddings.word_embeddings.weight"].requires_grad


@pytest.mark.parametrize("stages, message", [
    ([{"matches": [{"feature": "hidden"}]}], "needs at least 'feature' and 'loss'"),
    ([{"matches": [{"feature": "hidden", "loss": "l7"}]}], "unknown loss 'l7'"),
    ([{"matches": [{"feature": "logits", "loss": "logit_mse", "layers": "last"}]}], "has no layers"),
    ([{"epochs": 1, "lr": 3}], "unknown key"),
    ([{"matches": [{"feature": "hidden", "loss": "hidden_mse", "layers": "l"}]}], "only meaningful inside"),
])
def test_bad_stage_plans_refused(env, stages, message):
    with pytest.raises(KdbertError, match=message):
        plan_for(env, stages)


def test_a_pattern_that_matches_nothing_is_refused(env, tmp_path):
    plan, *_ = plan_for(env, [{"matches": [{"feature": "logits", "loss": "soft_cross_entropy"}],
                               "train": ["students.*"]}])
    trainer = Trainer(plan.modules, plan.stages, RunConfig(str(tmp_path), progress=False),
                      PaddingCollator(env["tokenizer"].pad_token_id), frozen=plan.frozen)
    with pytest.raises(KdbertError, match="no parameter matches 'students.\\*'"):
        optimizer_groups(trainer.modules, plan.stages[0].config)


# ----------------------------------------------------------------------------- other student families
class WordStudent(nn.Module):
    """A word-level student that is not an HF model: embeddings -> mean -> classifier."""

    def __init__(self, vocab: int, dim: int = 8, labels: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.encoder = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, labels)

    def forward(self, word_ids, lengths):
        mask = (torch.arange(word_ids.shape[1])[None, :] < lengths[:, None]).float()
        encoded = torch.tanh(self.encoder(self.embed(word_ids)))
        pooled = (encoded * mask[..., None]).sum(1) / lengths[:, None]
        return self.classifier(pooled)


class WordInputs:
    """A word-level student's own inputs (kdbert.data.batching.ModelInputs): word ids and lengths."""

    def __init__(self, vocabulary: dict[str, int]):
        self.vocabulary = vocabulary

    def encode(self, examples):
        return [{"word_ids": [self.vocabulary.get(w, 0) for w in " ".join(e.texts).split()]} for e in examples]

    def collate(self, features):
        longest = max(len(f["word_ids"]) for f in features)
        return {"word_ids": torch.tensor([f["word_ids"] + [0] * (longest - len(f["word_ids"])) for f in features]),
                "lengths": torch.tensor([len(f["word_ids"]) for f in features])}


def test_word_level_student_with_its_own_inputs_trains_through_the_trainer(env, tmp_path):
    """Per-model inputs: the teacher reads its token ids, the student its own word ids; the hook
    adapter traces the student; a match on a feature it does not record fails naming its class."""
    from transformers import BertForSequenceClassification

    from kdbert.data.batching import TaskCollator, TokenizerInputs, encode_task
    from kdbert.data.glue import Example
    from kdbert.core.evaluate import TaskEvaluator

    register_adapter(WordStudent, HookAdapter({"encoded": "encoder"}))
    teacher = BertForSequenceClassification.from_pretrained(env["teacher"]).eval()
    rng = random.Random(0)
    examples = [Example((sentence(rng),), i % 2) for i in range(12)]
    words = {w: i + 1 for i, w in enumerate(sorted({w for e in examples for w in e.texts[0].split()}))}
    teacher_inputs, student_inputs = TokenizerInputs(env["tokenizer"], 32), WordInputs(words)
    rows = encode_task(examples, teacher_inputs, student_inputs)
    assert rows[0]["teacher"]["input_ids"][0] == env["tokenizer"].cls_token_id and "word_ids" in rows[0]["student"]
    collate = TaskCollator(teacher_inputs, student_inputs)

    torch.manual_seed(0)
    student = WordStudent(len(words) + 1)
    matches = [Match("soft", "logits", "logit_mse", 0.5), Match("hard", "logits", "hard_label", 0.5, target="labels")]
    stage = Stage(StageConfig("kd", max_steps=3, batch_size=4, evaluate=False), MatchLoss(matches), rows)
    before = student.classifier.weight.detach().clone()
    Trainer({"student": student}, [stage], RunConfig(str(tmp_path), progress=False, log_every=1), collate,
            frozen={"teacher": teacher}).train()
    assert not torch.equal(before, student.classifier.weight)
    assert (tmp_path / "model.safetensors").is_file()  # a non-HF student is saved as its weights

    batch = collate([rows[i] for i in range(4)])
    student_trace = trace(student, batch)
    assert student_trace.features["encoded"].shape == (4, batch["student"]["word_ids"].shape[1], 8)
    with pytest.raises(KdbertError, match=r"the student \(WordStudent\) recorded no hidden_states"):
        MatchLoss([Match("hidden", "hidden", "hidden_mse", student_layer=1, teacher_layer=1)])(
            nn.ModuleDict({"student": student}), {"teacher": teacher}, batch)
    # the evaluator reads the student's own inputs too
    data = load_glue_dir(SPEC, env["glue"])
    metrics = TaskEvaluator(data, env["tokenizer"], inputs=student_inputs)(student.eval())
    assert set(metrics) == {"accuracy", "score"}


def test_a_feature_the_teacher_does_not_record_fails_before_training(env):
    """Setup (before the first step) names the model class and what it did record."""
    torch.manual_seed(0)
    student = WordStudent(30)
    register_adapter(WordStudent, HookAdapter({"encoded": "encoder", "hidden": "encoder"}))
    ids = torch.randint(1, 30, (2, 5))
    batch = {"student": {"word_ids": ids, "lengths": torch.tensor([5, 5])},
             "teacher": {"input_ids": torch.randint(5, 30, (2, 5)),
                         "attention_mask": torch.ones(2, 5, dtype=torch.long)},
             "labels": torch.tensor([0, 1])}
    teacher_trace_match = Match("hidden", "encoded", "hidden_mse", projection="encoded-to-teacher")
    with pytest.raises(KdbertError, match=r"the teacher \(BertModel\) recorded no feature 'encoded'"):
        loss = MatchLoss([teacher_trace_match])
        teacher = BertModel(tiny_bert_config(env["tokenizer"]))
        loss.setup(nn.ModuleDict({"student": student}), {"teacher": teacher}, batch)
