"""DistilBERT recipe: init-student, dynamic masking, the triple loss against losses.*, refusals, and
tiny end-to-end runs of `init-student`, `distill general --method distilbert` and
`distill task --method distilbert`."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
import torch.nn.functional as F
from conftest import method_config, save_tiny_classifier, sentence, stage_terms, tiny_bert_config, write_glue_task
from torch import nn
from transformers import (
    BertForMaskedLM,
    BertForSequenceClassification,
    BertModel,
    DistilBertForMaskedLM,
    DistilBertForSequenceClassification,
)

from kdbert.cli import commands as cli
from kdbert.core import losses
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.corpus import pack_sequences
from kdbert.data.glue import load_glue_dir
from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError
from kdbert.families.bert import init_distilbert_student
from kdbert.data import masking
from kdbert.methods import distilbert
from kdbert.methods.front import distill_general
from kdbert.core.matching import MatchLoss
from kdbert.core.method import DistillContext


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("distilbert")
    torch.manual_seed(0)
    config = tiny_bert_config(tiny_tokenizer, num_hidden_layers=4)
    mlm = BertForMaskedLM(config)
    mlm.save_pretrained(root / "mlm-teacher")
    tiny_tokenizer.save_pretrained(root / "mlm-teacher")
    BertModel(config).save_pretrained(root / "bare-teacher")
    tiny_tokenizer.save_pretrained(root / "bare-teacher")
    finetuned = save_tiny_classifier(root / "finetuned", tiny_tokenizer, num_hidden_layers=4, seed=2)
    glue = root / "glue_data"
    write_glue_task(glue, "SST-2", n_train=24, n_dev=8)
    rng = random.Random(0)
    docs = ["\n".join(". ".join(sentence(rng).capitalize() for _ in range(3)) + "." for _ in range(4))
            for _ in range(12)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    return {"root": root, "mlm": root / "mlm-teacher", "bare": root / "bare-teacher", "finetuned": finetuned,
            "glue": glue, "corpus": root / "corpus.txt", "tokenizer": tiny_tokenizer}


def special_ids(tokenizer):
    return torch.tensor(sorted(set(tokenizer.all_special_ids)))


# ----------------------------------------------------------------------------- init-student
def test_init_student_cli(env, tmp_path, capsys):
    out = tmp_path / "student"
    assert cli.main(["init-student", "--from", str(env["mlm"]), "--layers", "0,2", "--output-dir", str(out)]) == 0
    assert "teacher layers [0, 2]" in capsys.readouterr().out
    student = DistilBertForMaskedLM.from_pretrained(out)
    teacher = BertForMaskedLM.from_pretrained(env["mlm"])
    assert student.config.n_layers == 2
    torch.testing.assert_close(student.distilbert.transformer.layer[1].ffn.lin1.weight,
                               teacher.bert.encoder.layer[2].intermediate.dense.weight)
    torch.testing.assert_close(student.vocab_transform.weight, teacher.cls.predictions.transform.dense.weight)
    assert (out / "tokenizer_config.json").is_file()
    report = json.loads((out / distilbert.INIT_REPORT).read_text())
    assert report["layers"] == [0, 2] and report["mlm_head_copied"] is True
    # a teacher without an MLM head works too (BertModel); every other layer by default
    bare_out = tmp_path / "from-bare"
    assert cli.main(["init-student", "--from", str(env["bare"]), "--output-dir", str(bare_out)]) == 0
    assert DistilBertForMaskedLM.from_pretrained(bare_out).config.n_layers == 2
    assert json.loads((bare_out / distilbert.INIT_REPORT).read_text())["mlm_head_copied"] is False


@pytest.mark.parametrize("args, message", [
    (["--layers", "0,4"], "out of range"),
    (["--layers", "2,1"], "strictly increasing"),
    (["--layers", "x"], "not a comma-separated list"),
    (["--layer-choice", "hf-bert-base"], "larger than the teacher"),  # [0,2,4,7,9,11] needs 12 layers
])
def test_init_student_bad_layers(env, tmp_path, capsys, args, message):
    code = cli.main(["init-student", "--from", str(env["mlm"]), "--output-dir", str(tmp_path / "s"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert not (tmp_path / "s").exists()


def test_init_student_refuses_non_empty_dir(env, tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "x").write_text("x")
    with pytest.raises(KdbertError, match="not empty"):
        distilbert.init_student(str(env["mlm"]), str(tmp_path / "s"))
    distilbert.init_student(str(env["mlm"]), str(tmp_path / "s"), overwrite=True)
    assert not (tmp_path / "s" / "x").exists()


# ----------------------------------------------------------------------------- masking
def test_masking_spares_special_and_pad_and_masks_15_percent(env):
    tok = env["tokenizer"]
    rng = random.Random(1)
    rows = [tok(sentence(rng, 5, 30))["input_ids"] for _ in range(256)]
    collate = masking.MlmCollator(tok.pad_token_id, masking.DynamicMasker(tok))
    features = [{"input_ids": r} for r in rows]
    torch.manual_seed(0)
    batch = collate(features)
    original = PaddingCollator(tok.pad_token_id)(features)["input_ids"]
    chosen = batch["labels"] != -100
    eligible = batch["attention_mask"].bool() & ~torch.isin(original, special_ids(tok))
    assert not (chosen & ~eligible).any()  # never a special token or padding
    assert int(chosen.sum()) == math.ceil(0.15 * int(eligible.sum()))
    torch.testing.assert_close(batch["labels"][chosen], original[chosen])
    assert torch.equal(batch["input_ids"][~chosen], original[~chosen])  # only chosen positions change
    # BERT's 80/10/10: of the chosen tokens, [MASK] / a random token / kept. About 700 chosen tokens:
    # each share must be within 4 binomial standard deviations of its target.
    masked, kept = batch["input_ids"][chosen], original[chosen]
    n = int(chosen.sum())
    shares = {"mask": float((masked == tok.mask_token_id).float().mean()),
              "kept": float((masked == kept).float().mean())}
    shares["random"] = 1.0 - shares["mask"] - shares["kept"]
    for name, target in (("mask", 0.8), ("random", 0.1), ("kept", 0.1)):
        assert abs(shares[name] - target) < 4 * math.sqrt(target * (1 - target) / n), (name, shares, n)
    assert not torch.isin(batch["input_ids"][chosen & (batch["input_ids"] != tok.mask_token_id)],
                          special_ids(tok)).any()  # random replacements are ordinary tokens
    # seeded: the same generator state gives the same masks
    torch.manual_seed(0)
    assert torch.equal(collate(features)["labels"], batch["labels"])


def test_rare_token_weighting(env):
    tok = env["tokenizer"]
    common, rare = tok.convert_tokens_to_ids(["the", "cat"])
    sequences = [[tok.cls_token_id] + [common] * 9 + [rare] + [tok.sep_token_id]] * 20
    weights = masking.token_weights(sequences, len(tok), 0.7)
    assert weights[rare] == pytest.approx(20 ** -0.7) and weights[common] == pytest.approx(180 ** -0.7)
    masker = masking.DynamicMasker(tok, weights=weights)
    ids = torch.tensor(sequences)
    generator = torch.Generator().manual_seed(0)
    hits = sum(int((masker(ids, torch.ones_like(ids), generator)[1] == rare).sum()) for _ in range(30))
    uniform = masking.DynamicMasker(tok)
    base = sum(int((uniform(ids, torch.ones_like(ids), generator)[1] == rare).sum()) for _ in range(30))
    assert hits > 2 * base


# ----------------------------------------------------------------------------- general loss
def test_general_terms_equal_hand_assembly(env):
    tok = env["tokenizer"]
    teacher = BertForMaskedLM.from_pretrained(env["mlm"]).eval()
    student = init_distilbert_student(teacher, [0, 2]).eval()
    with torch.no_grad():  # make the student differ from the teacher
        for p in student.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rng = random.Random(2)
    features = [{"input_ids": tok(sentence(rng, 3, 12))["input_ids"]} for _ in range(5)]
    torch.manual_seed(3)
    batch = masking.MlmCollator(tok.pad_token_id, masking.DynamicMasker(tok))(features)
    config = method_config("distilbert", {"alpha_ce": 5.0, "alpha_mlm": 2.0, "alpha_cos": 1.0, "temperature": 3},
                           general=True)
    terms = MatchLoss(distilbert.general_matches(config))(nn.ModuleDict({"student": student}), {"teacher": teacher},
                                                          batch)
    assert set(terms) == {"ce", "mlm", "cos"}
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    s = student(**inputs, output_hidden_states=True)
    t = teacher(**inputs, output_hidden_states=True)
    mask = batch["attention_mask"]
    torch.testing.assert_close(terms["ce"], 5.0 * losses.kl_div_loss(s.logits, t.logits, 3.0, mask=mask))
    torch.testing.assert_close(terms["mlm"], 2.0 * losses.masked_lm_cross_entropy(s.logits, batch["labels"]))
    torch.testing.assert_close(terms["cos"], 1.0 * losses.cosine_hidden_loss(s.hidden_states[-1],
                                                                               t.hidden_states[-1], mask))
    # defaults are the reference run's
    defaults = method_config("distilbert", general=True)
    assert (defaults.temperature, defaults.alpha_ce, defaults.alpha_mlm, defaults.alpha_cos) == (2.0, 5.0, 2.0, 1.0)
    only_mlm = method_config("distilbert", {"alpha_ce": 0, "alpha_cos": 0}, general=True)
    assert not MatchLoss(distilbert.general_matches(only_mlm)).uses_teacher
    with pytest.raises(KdbertError, match="all 0"):
        method_config("distilbert", {"alpha_ce": 0, "alpha_cos": 0, "alpha_mlm": 0}, general=True)


def test_general_refuses_teacher_without_mlm_head(env, tmp_path, capsys):
    with pytest.raises(KdbertError, match="no MLM head.*kdbert mlm-head"):
        distill_general({"method": "distilbert", "teacher": str(env["bare"]), "corpus": [str(env["corpus"])]},
                        str(tmp_path / "g"))
    code = cli.main(["distill", "general", "--method", "distilbert", "--teacher", str(env["finetuned"]),
                     "--corpus", str(env["corpus"]), "--output-dir", str(tmp_path / "g")])
    assert code == 2 and "kdbert mlm-head" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()
    with pytest.raises(KdbertError, match="not DistilBERT.*init-student"):
        distill_general({"method": "distilbert", "teacher": str(env["mlm"]), "student": str(env["finetuned"]),
                                "corpus": [str(env["corpus"])]}, str(tmp_path / "g"))
    with pytest.raises(KdbertError, match="--max-seq-len 100"):
        distill_general({"method": "distilbert", "teacher": str(env["mlm"]), "corpus": [str(env["corpus"])],
                         "max_seq_len": 100},
                               str(tmp_path / "g"))


# ----------------------------------------------------------------------------- task time
def test_task_student_refusals(env):
    teacher = BertForSequenceClassification.from_pretrained(env["finetuned"])
    spec = GLUE_TASKS["sst2"]
    with pytest.raises(KdbertError, match="needs --student"):
        distilbert.METHOD.initial_student(teacher, spec, method_config("distilbert"))
    with pytest.raises(KdbertError, match="not DistilBERT.*kdbert init-student"):
        distilbert.METHOD.initial_student(teacher, spec, method_config("distilbert", {"student": str(env["finetuned"])}))
    with pytest.raises(KdbertError, match="--student-layers is a"):
        method_config("distilbert", {"student_layers": "2"})


def test_task_terms_and_plain_finetuning(env, tmp_path):
    tok = env["tokenizer"]
    distilbert.init_student(str(env["mlm"]), str(tmp_path / "init"), layers="0,1")
    teacher = BertForSequenceClassification.from_pretrained(env["finetuned"]).eval()
    spec = GLUE_TASKS["sst2"]
    train = encode_examples(tok, load_glue_dir(spec, env["glue"]).train, 32)
    batch = PaddingCollator(tok.pad_token_id)([train[i] for i in range(6)])
    for alpha, names in ((None, {"soft", "hard"}), (0.0, {"hard"})):
        options = {"student": str(tmp_path / "init"), "alpha": alpha}
        config = method_config("distilbert", options)
        initial = distilbert.METHOD.initial_student(teacher, spec, config)
        student = initial.model.eval()
        assert isinstance(student, DistilBertForSequenceClassification) and student.config.num_labels == 2
        plan = distilbert.METHOD.build_task_plan(DistillContext(teacher, initial, tok, spec, train, config))
        terms = stage_terms(plan, batch)
        assert set(terms) == names
        s = student(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        if alpha is None:  # defaults alpha 0.5, T 2
            t = teacher(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).logits
            torch.testing.assert_close(terms["soft"], 0.5 * losses.kl_div_loss(s, t, 2.0))
            torch.testing.assert_close(terms["hard"], 0.5 * F.cross_entropy(s, batch["labels"]))
        else:
            assert plan.frozen == {} and plan.report["plain_finetuning"]
            torch.testing.assert_close(terms["hard"], F.cross_entropy(s, batch["labels"]))


# ----------------------------------------------------------------------------- end to end
def test_end_to_end_general_then_task(env, tmp_path, capsys):
    init = tmp_path / "init"
    assert cli.main(["init-student", "--from", str(env["mlm"]), "--layer-choice", "every-other",
                     "--output-dir", str(init)]) == 0
    general = tmp_path / "general"
    code = cli.main(["distill", "general", "--recipe", "distilbert/general", "--teacher", str(env["mlm"]),
                     "--student", str(init), "--corpus", str(env["corpus"]), "--max-seq-len", "32",
                     "--batch-size", "4", "--max-steps", "3", "--output-dir", str(general), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads((general / distilbert.GENERAL_REPORT).read_text())
    assert report["method"] == "distilbert"
    assert report["sequences"] == len(pack_sequences(env["tokenizer"], [env["corpus"]], 32, None, 42))
    assert report["masking"]["mlm_smoothing"] == 0.7 and report["loss"]["alpha_ce"] == 5
    assert {"ce", "mlm", "cos"} <= set(report["stage_losses"]["general"][-1])
    student = DistilBertForMaskedLM.from_pretrained(general)
    assert student.config.n_layers == 2
    assert not torch.equal(student.distilbert.transformer.layer[0].ffn.lin1.weight,
                           DistilBertForMaskedLM.from_pretrained(init).distilbert.transformer.layer[0].ffn.lin1.weight)

    task = tmp_path / "task"
    code = cli.main(["distill", "task", "--recipe", "distilbert/task", "--task", "sst2", "--data-dir",
                     str(env["glue"]), "--teacher", str(env["finetuned"]), "--student", str(general),
                     "--output-dir", str(task), "--max-steps", "3", "--batch-size", "8", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads((task / "distill_report.json").read_text())
    assert report["method"] == "distilbert" and report["loss"]["alpha"] == 0.5
    assert {"soft", "hard"} <= set(report["stage_losses"]["distilbert"][-1])
    model = DistilBertForSequenceClassification.from_pretrained(task)
    assert model.config.num_labels == 2


def test_general_without_student_uses_every_other_layer(env, tmp_path):
    report = distill_general({"method": "distilbert", "teacher": str(env["mlm"]), "corpus": [str(env["corpus"])],
                              "max_seq_len": 24,
                                     "batch_size": 4, "max_steps": 1, "max_sequences": 8, "alpha_cos": 0.0,
                                     "no_progress": True}, str(tmp_path / "g"))
    assert report["student_init"] == "every other teacher layer [0, 2]" and report["sequences"] == 8
    assert "cos" not in report["stage_losses"]["general"][-1]
    assert DistilBertForMaskedLM.from_pretrained(tmp_path / "g").config.n_layers == 2


def test_general_resume_matches_uninterrupted_run(env, tmp_path, monkeypatch):
    from kdbert.core.trainer import Trainer

    options = {"method": "distilbert", "teacher": str(env["mlm"]), "corpus": [str(env["corpus"])], "max_seq_len": 24,
               "batch_size": 4,
               "max_steps": 4, "max_sequences": 16, "save_every": 1, "no_progress": True, "seed": 7}
    distill_general(dict(options), str(tmp_path / "full"))

    save = Trainer._save_checkpoint

    def save_then_stop(self, *args):
        save(self, *args)
        if self.state["step"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_save_checkpoint", save_then_stop)
    with pytest.raises(KeyboardInterrupt):
        distill_general(dict(options), str(tmp_path / "cut"))
    monkeypatch.setattr(Trainer, "_save_checkpoint", save)
    step, steps_run = Trainer._optimizer_step, []

    def counted_step(self, *args):
        steps_run.append(self.state["step"] + 1)
        step(self, *args)

    monkeypatch.setattr(Trainer, "_optimizer_step", counted_step)
    distill_general(dict(options), str(tmp_path / "cut"), resume=True)
    assert steps_run == [3, 4]  # continued from the step-2 checkpoint
    full = DistilBertForMaskedLM.from_pretrained(tmp_path / "full").state_dict()
    resumed = DistilBertForMaskedLM.from_pretrained(tmp_path / "cut").state_dict()
    for name, value in full.items():
        torch.testing.assert_close(resumed[name], value, msg=name)


def test_task_distillation_on_a_pair_regression_task(env, tmp_path, capsys):
    """STS-B: sentence pairs (DistilBERT has no segment embeddings) and MSE to teacher and gold."""
    write_glue_task(env["glue"], "STS-B", n_train=24, n_dev=8)
    teacher = save_tiny_classifier(tmp_path / "teacher", env["tokenizer"], num_labels=1, num_hidden_layers=4)
    init = tmp_path / "init"
    assert cli.main(["init-student", "--from", str(teacher), "--output-dir", str(init)]) == 0
    task = tmp_path / "task"
    code = cli.main(["distill", "task", "--method", "distilbert", "--task", "stsb", "--data-dir", str(env["glue"]),
                     "--teacher", str(teacher), "--student", str(init), "--output-dir", str(task),
                     "--max-steps", "2", "--batch-size", "8", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    report = json.loads((task / "distill_report.json").read_text())
    assert report["loss"]["kd_loss"] == "mse" and report["loss"]["regression"]
    assert {"pearson", "spearman", "score"} == set(report["dev_metrics"])
    assert DistilBertForSequenceClassification.from_pretrained(task).config.num_labels == 1
