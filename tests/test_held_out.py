"""Honest selection: ``--held-out-fraction`` holds out the same training rows for every run, the
evaluator scores them apart, and the trainer keeps the checkpoint they pick, not dev's."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import save_tiny_classifier, write_glue_task
from transformers import BertForSequenceClassification

from kdbert.cli import main
from kdbert.compress.report import few_pairs_line, phrases_line, unlabelled_line, unseen_sources_line
from kdbert.core.metrics import bootstrap_standard_error
from kdbert.core.evaluate import (TaskEvaluator, held_out_loss, predict, replaces_checkpoint, selection_key,
                                   to_predictions)
from kdbert.core.matching import Match, MatchLoss
from kdbert.core.stages import Stage, StageConfig
from kdbert.core.trainer import RunConfig, Trainer
from kdbert.data.batching import PaddingCollator, encode_examples
from kdbert.data.glue import Example, TaskData, load_glue_dir
from kdbert.data.held_out import (HELD_OUT_SEED, hold_out_recorded, lengths_differ, record, row_hash, row_length,
                                  sources_differ, split_decide, uniform_indices, unseen_sources)
from kdbert.data.load import TaskOptions, hold_out, load_task
from kdbert.data.nearness import TrainingTexts
from kdbert.data.tasks import GLUE_TASKS
from kdbert.errors import KdbertError
from kdbert.options import build_config


@pytest.fixture(scope="module")
def glue(tmp_path_factory):
    root = tmp_path_factory.mktemp("held-out")
    write_glue_task(root, "RTE", n_train=40, n_dev=12)
    return root


def test_the_same_rows_are_held_out_whatever_the_seed(glue):
    full = load_task(TaskOptions("rte", data_dir=str(glue)))
    runs = [load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.25), seed=seed) for seed in (1, 2)]
    assert [ex.texts for ex in runs[0].held_out] == [ex.texts for ex in runs[1].held_out]
    data = runs[0]
    assert (len(data.held_out), len(data.train)) == (10, 30)  # round(0.25 * 40)
    assert sorted(ex.texts for ex in data.train + data.held_out) == sorted(ex.texts for ex in full.train)
    assert data.dev == full.dev


def test_bad_held_out_settings_are_one_line_errors(glue):
    with pytest.raises(KdbertError, match=r"--held-out-fraction must be a share of the training rows in \[0, 0.5\]"):
        build_config(TaskOptions, {"task": "rte", "held_out_fraction": 0.7}).check()
    one_row = load_task(TaskOptions("rte", data_dir=str(glue)))
    with pytest.raises(KdbertError, match="--held-out-fraction 0.1 leaves no training rows of 1; lower it"):
        hold_out(TaskData(one_row.spec, one_row.train[:1], one_row.dev), 0.1)
    with pytest.raises(KdbertError, match="--held-out-fraction with --train-file would train on augmented copies"):
        load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.2, train_file="aug.tsv"))


def test_evaluator_scores_held_out_rows_apart_from_dev(glue, tiny_tokenizer, tmp_path):
    data = load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.25))
    model = BertForSequenceClassification.from_pretrained(save_tiny_classifier(tmp_path / "m", tiny_tokenizer))
    metrics = TaskEvaluator(data, tiny_tokenizer, 64)(model)
    rows = encode_examples(tiny_tokenizer, data.held_out, 64)
    logits = predict(model, rows, PaddingCollator(tiny_tokenizer.pad_token_id))
    labels = np.array([ex.label for ex in data.held_out])
    accuracy = 100.0 * float(np.mean(to_predictions(data.spec, logits) == labels))
    assert metrics["held-out/accuracy"] == pytest.approx(accuracy) == pytest.approx(metrics["selection_score"])
    cross_entropy = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels)).item()
    assert metrics["held-out/loss"] == metrics["selection_loss"] == pytest.approx(cross_entropy, rel=1e-5)
    assert set(metrics) == {"accuracy", "score", "held-out/accuracy", "held-out/loss", "selection_score",
                            "selection_loss", "selection_se"}
    assert metrics["selection_se"] == bootstrap_standard_error(["accuracy"], to_predictions(data.spec, logits), labels)


def test_held_out_loss_is_the_mean_cross_entropy_or_squared_error():
    # row 1: log(e^0 + e^0) - 0 = ln 2; row 2: log(e^ln3 + e^0) - ln 3 = ln 4 - ln 3 = ln(4/3)
    logits = np.array([[0.0, 0.0], [math.log(3.0), 0.0]], dtype=np.float32)
    assert held_out_loss(GLUE_TASKS["cola"], logits, np.array([0, 0])) == \
        pytest.approx((math.log(2.0) + math.log(4.0 / 3.0)) / 2)
    # label 1 of [1000, 0]: log(e^1000 + 1) - 0 = 1000 + log(1 + e^-1000) = 1000, without overflow
    assert held_out_loss(GLUE_TASKS["cola"], np.array([[1000.0, 0.0]]), np.array([1])) == pytest.approx(1000.0)
    # regression: ((1 - 1.5)^2 + (2.5 - 2.5)^2 + (4 - 3)^2) / 3 = (0.25 + 0 + 1) / 3
    assert held_out_loss(GLUE_TASKS["stsb"], np.array([[1.0], [2.5], [4.0]]), np.array([1.5, 2.5, 3.0])) == \
        pytest.approx(1.25 / 3)


def train_with_scripted_evaluations(glue, tiny_tokenizer, tmp_path, scripted, steps: int, resume: bool = False,
                                    pause_at_step: int | None = None) -> dict:
    """A tiny classifier trained ``steps`` steps on RTE, evaluated after each step by the next of
    ``scripted``'s metrics (paused at ``pause_at_step``, or resumed); the trainer's report."""
    data = load_task(TaskOptions("rte", data_dir=str(glue)))
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(save_tiny_classifier(tmp_path / "m", tiny_tokenizer))
    stage = Stage(StageConfig("labels", max_steps=steps, batch_size=4, eval_every=1),
                  MatchLoss([Match("hard", "logits", "hard_label", target="labels")]),
                  encode_examples(tiny_tokenizer, data.train, 64))
    return Trainer({"student": model}, [stage], RunConfig(str(tmp_path / "run"), progress=False, log_every=1,
                                                          pause_at_step=pause_at_step),
                   PaddingCollator(tiny_tokenizer.pad_token_id), evaluator=lambda student: next(scripted)).train(resume)


def test_trainer_keeps_the_checkpoint_the_held_out_rows_pick(glue, tiny_tokenizer, tmp_path):
    scripted = iter([{"score": 90.0, "selection_score": 50.0}, {"score": 60.0, "selection_score": 70.0},
                     {"score": 80.0, "selection_score": 60.0}])
    report = train_with_scripted_evaluations(glue, tiny_tokenizer, tmp_path, scripted, steps=3)
    assert (report["best_metrics"], report["best_step"]) == ({"score": 60.0, "selection_score": 70.0}, 2)


def test_trainer_keeps_the_latest_checkpoint_within_a_standard_error_of_the_highest(glue, tiny_tokenizer, tmp_path):
    # 70 +- 2 tops the run; 68.5 (within 2 of it) replaces it as the later student, 67.5 (outside) does not, and a
    # new top (72 +- 0.5) narrows the band: 71.6 stands, 71.4 does not
    scripted = iter([{"score": 1.0, "selection_score": 60.0, "selection_se": 3.0},
                     {"score": 2.0, "selection_score": 70.0, "selection_se": 2.0},
                     {"score": 3.0, "selection_score": 68.5, "selection_se": 2.2},
                     {"score": 4.0, "selection_score": 67.5, "selection_se": 2.4},
                     {"score": 5.0, "selection_score": 72.0, "selection_se": 0.5},
                     {"score": 6.0, "selection_score": 71.6, "selection_se": 0.5},
                     {"score": 7.0, "selection_score": 71.4, "selection_se": 0.5}])
    report = train_with_scripted_evaluations(glue, tiny_tokenizer, tmp_path, scripted, steps=7)
    assert (report["best_metrics"]["score"], report["best_step"]) == (6.0, 6)
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["score"] == 6.0


def test_the_highest_evaluation_outlives_a_pause(glue, tiny_tokenizer, tmp_path):
    # 70 +- 2 tops the run and 68.5 is kept before the pause; resumed, 67.5 is within a standard error of
    # 68.5 (2.2) but not of 70, so 68.5 stays
    scripted = iter([{"score": 1.0, "selection_score": 70.0, "selection_se": 2.0},
                     {"score": 2.0, "selection_score": 68.5, "selection_se": 2.2},
                     {"score": 3.0, "selection_score": 67.5, "selection_se": 2.4}])
    paused = train_with_scripted_evaluations(glue, tiny_tokenizer, tmp_path, scripted, steps=3, pause_at_step=2)
    assert (paused["paused_at_step"], paused["best_step"]) == (2, 2)
    report = train_with_scripted_evaluations(glue, tiny_tokenizer, tmp_path, scripted, steps=3, resume=True)
    assert [record["step"] for record in report["history"]] == [1, 2, 3]
    assert (report["best_metrics"]["score"], report["best_step"]) == (2.0, 2)


def test_replaces_checkpoint_by_hand():
    top = {"score": 0.0, "selection_score": 80.0, "selection_se": 1.5}
    assert replaces_checkpoint({"score": 0.0, "selection_score": 78.5}, top, top)  # 80 - 1.5: on the line
    assert not replaces_checkpoint({"score": 0.0, "selection_score": 78.4}, top, top)
    exact = {"score": 0.0, "selection_score": 80.0, "selection_loss": 0.3}  # no standard error: the highest, as before
    assert not replaces_checkpoint({"score": 0.0, "selection_score": 79.9}, exact, exact)
    assert replaces_checkpoint({"score": 0.0, "selection_score": 80.0, "selection_loss": 0.2}, exact, exact)
    assert replaces_checkpoint({"score": 0.0}, None, {"score": 0.0})


def test_trainer_breaks_a_tied_held_out_score_by_the_lower_held_out_loss(glue, tiny_tokenizer, tmp_path):
    # every held-out score 0 (MCC of the majority class): the lower loss wins, an evaluation without one (a run
    # resumed from before losses were kept) loses to any with one, and an equal loss keeps the first
    scripted = iter([{"score": 90.0, "selection_score": 0.0},
                     {"score": 60.0, "selection_score": 0.0, "selection_loss": 0.6},
                     {"score": 50.0, "selection_score": 0.0, "selection_loss": 0.5},
                     {"score": 80.0, "selection_score": 0.0, "selection_loss": 0.5}])
    report = train_with_scripted_evaluations(glue, tiny_tokenizer, tmp_path, scripted, steps=4)
    assert (report["best_metrics"]["score"], report["best_step"]) == (50.0, 3)


def test_finetune_cli_selects_on_held_out_rows_and_resume_checks_the_fraction(glue, tiny_tokenizer, tmp_path,
                                                                              capsys):
    model = save_tiny_classifier(tmp_path / "m", tiny_tokenizer)
    args = ["finetune", "--model", str(model), "--task", "rte", "--data-dir", str(glue), "--max-steps", "4",
            "--batch-size", "8", "--eval-every", "2", "--no-progress", "--output-dir", str(tmp_path / "run")]
    assert main([*args, "--held-out-fraction", "0.25"]) == 0
    # the folder says which rows the teacher never trained on, and a distillation from it holds out those
    recorded = json.loads((tmp_path / "run" / "held_out.json").read_text())
    held = load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.25)).held_out
    assert (recorded["fraction"], recorded["rule"], recorded["rows"]) == (0.25, "uniform", 10)
    assert recorded["hashes"] == [row_hash(row) for row in held]
    # the teacher's checkpoint is picked on half of them; the other half is recorded, to decide on later
    assert recorded["decide"] == [row_hash(row) for row in held[5:]]
    again = load_task(TaskOptions("rte", data_dir=str(glue), held_out_rows=str(tmp_path / "run")))
    assert [row.texts for row in again.held_out] == [row.texts for row in held]
    assert main(["distill", "task", "--method", "kd", "--teacher", str(tmp_path / "run"), "--task", "rte",
                 "--data-dir", str(glue), "--held-out-rows", str(tmp_path / "run"), "--decide-share", "0.5",
                 "--student-layers", "1", "--max-steps", "2", "--batch-size", "8", "--no-progress",
                 "--output-dir", str(tmp_path / "kd")]) == 0
    distilled = json.loads((tmp_path / "kd" / "distill_report.json").read_text())
    assert distilled["selected_on"] == "held-out training rows (5)" and "decide_score" in distilled["dev_metrics"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    history = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    evals = [record["eval"] for record in history if "eval" in record]
    top = max(evals, key=selection_key)  # the latest within a standard error of the highest is kept
    assert len(evals) == 2 and evals[-1]["selection_score"] >= top["selection_score"] - top["selection_se"]
    assert metrics == evals[-1]
    assert all("decide_score" in scores for scores in evals)  # scored there, never picking
    capsys.readouterr()
    assert main([*args, "--held-out-fraction", "0.1", "--resume"]) == 2
    assert "held_out_fraction" in capsys.readouterr().err


def _rows(lengths, label=0, start=0) -> list[Example]:
    return [Example((" ".join(f"w{start + i}x{k}" for k in range(n)),), label) for i, n in enumerate(lengths)]


def test_rows_like_dev_are_held_out_when_the_training_rows_are_shorter(glue):
    # SST-2's shape: training rows mostly short phrases (2-4 words), some sentences (10-19); dev all sentences
    rng = random.Random(0)
    phrases, sentences = _rows([rng.randint(2, 4) for _ in range(900)]), _rows(
        [rng.randint(10, 19) for _ in range(600)], start=900)
    train = phrases + sentences
    rng.shuffle(train)
    dev = _rows([rng.randint(10, 19) for _ in range(100)], start=5000)
    spec = GLUE_TASKS["sst2"]
    assert lengths_differ(train, dev) and not lengths_differ(sentences, dev)
    data = hold_out(TaskData(spec, list(train), {"dev": dev}), 0.1)
    assert data.held_out_rule == "length-matched" and len(data.held_out) == 150  # 10% of 1,500: a quarter of the sentences
    assert all(10 <= row_length(row) <= 19 for row in data.held_out)  # no phrase: none is as short as a dev row
    assert np.mean([row_length(row) for row in data.held_out]) == pytest.approx(
        np.mean([row_length(row) for row in dev]), abs=1.0)  # dev's shape (mean 14.5), not the training file's
    # no bin gives more than half its rows: asked for 40%, it holds out fewer, keeping dev's shape
    most = hold_out(TaskData(spec, list(train), {"dev": dev}), 0.4)
    assert 150 < len(most.held_out) <= 300 + 10 and all(10 <= row_length(row) <= 19 for row in most.held_out)
    # alike lengths: the uniform rule of every earlier run, row for row
    alike = hold_out(TaskData(spec, list(sentences), {"dev": dev}), 0.1)
    chosen = set(uniform_indices(600, 60))
    assert alike.held_out_rule == "uniform" and alike.held_out == [r for i, r in enumerate(sentences) if i in chosen]
    assert HELD_OUT_SEED == "kdbert-held-out"  # the seed recorded teachers were fine-tuned with


def _write_stsb_split(path, collections: dict[str, int], start: int) -> None:
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    names = [name for name, n in collections.items() for _ in range(n)]
    rows = [f"{start + i}\tmain-g\t{name}\ty\to\ts\ts\tw{start + i} a b\tw{start + i} c\t{(i % 50) / 10:.3f}"
            for i, name in enumerate(names)]
    path.write_text("\n".join([header, *rows]) + "\n")


def test_rows_from_dev_s_mix_of_collections_are_held_out_and_dev_s_other_collections_are_counted(tmp_path):
    # STS-B's shape: training and dev share some collections (MSRvid, headlines) in other shares, and
    # each has its own (training: deft-forum; dev: answers-forums, which no held-out row can stand in for)
    folder = tmp_path / "STS-B"
    folder.mkdir()
    _write_stsb_split(folder / "train.tsv", {"MSRvid": 700, "deft-forum": 160, "headlines": 1140}, 0)
    _write_stsb_split(folder / "dev.tsv", {"MSRvid": 168, "answers-forums": 100, "headlines": 132}, 10000)
    data = load_glue_dir(GLUE_TASKS["stsb"], tmp_path)
    assert {row.source for row in data.dev["dev"]} == {"MSRvid", "answers-forums", "headlines"}
    assert sources_differ(data.train, data.dev["dev"])
    held = hold_out(data, 0.1)
    mix = {name: sum(row.source == name for row in held.held_out) for name in ("MSRvid", "deft-forum", "headlines")}
    # 200 rows in dev's shares of the collections both have (168 and 132 of 300): 112 and 88, none of
    # deft-forum, where a uniform draw gives about 70, 16 and 114
    assert held.held_out_rule == "source-matched" and mix == {"MSRvid": 112, "deft-forum": 0, "headlines": 88}
    assert len(held.train) == 1800 and not {row_hash(r) for r in held.held_out} & {row_hash(r) for r in held.train}
    assert unseen_sources(held.train + held.held_out, data.dev["dev"]) == {"answers-forums": 100}
    assert unseen_sources_line({"answers-forums": 100}, 400) == (
        "100 of dev's 400 rows come from sources the training file lacks (answers-forums: 100); no held-out row can "
        "stand in for them, so the kept share on the rows that decide speaks for the others, and dev's can differ "
        "from it by what the student keeps on those")
    # asked for more than half of a collection's rows (40% of 2,000 is 800; MSRvid gives at most 350 of its
    # 700), it holds out fewer in dev's shares
    most = hold_out(load_glue_dir(GLUE_TASKS["stsb"], tmp_path), 0.4)
    msrvid = sum(row.source == "MSRvid" for row in most.held_out)
    assert msrvid <= 350 and 620 <= len(most.held_out) <= 625 and msrvid / len(most.held_out) == pytest.approx(0.56, abs=0.01)
    # the same mix, or a file that does not say (None), leaves the rule to the lengths
    assert not sources_differ(list(data.dev["dev"]), data.dev["dev"])
    assert not sources_differ([replace(row, source=None) for row in held.train], data.dev["dev"])
    assert unseen_sources([replace(row, source=None) for row in held.train], [replace(row, source=None) for row
                                                                               in data.dev["dev"]]) == {}


def test_half_the_held_out_rows_decide_and_a_prefix_of_the_rest_never_holds_one(glue):
    options = TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.25)
    whole = load_task(options).held_out
    split = load_task(replace(options, decide_share=0.5))
    assert (len(split.held_out), len(split.decide)) == (5, 5)
    assert sorted(r.texts for r in split.held_out + split.decide) == sorted(r.texts for r in whole)
    assert split.held_out == whole[:5] and split.decide == whole[5:]  # share 0 orders the same rows first
    capped = load_task(replace(options, max_held_out_examples=3))
    assert capped.held_out == split.held_out[:3] and not capped.decide
    assert load_task(replace(options, decide_share=0.5, max_held_out_examples=2)).decide == split.decide[:2]
    one = TaskData(split.spec, [], {}, held_out=whole[:1])
    with pytest.raises(KdbertError, match="the 1 held-out row.s. cannot be split into rows that pick and rows that "
                                          "decide; raise --held-out-fraction"):
        split_decide(one, 0.5)


def test_the_evaluator_scores_the_rows_that_decide_apart_and_picks_on_the_others(glue, tiny_tokenizer, tmp_path):
    data = load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.25, decide_share=0.5))
    model = BertForSequenceClassification.from_pretrained(save_tiny_classifier(tmp_path / "m", tiny_tokenizer))
    metrics = TaskEvaluator(data, tiny_tokenizer, 64)(model)
    for rows, key in ((data.held_out, "selection"), (data.decide, "decide")):
        logits = predict(model, encode_examples(tiny_tokenizer, rows, 64), PaddingCollator(tiny_tokenizer.pad_token_id))
        labels = np.array([ex.label for ex in rows])
        predictions = to_predictions(data.spec, logits)
        assert metrics[f"{key}_score"] == pytest.approx(100.0 * float(np.mean(predictions == labels)))
        assert metrics[f"{key}_se"] == bootstrap_standard_error(["accuracy"], predictions, labels)
    assert metrics["decide/accuracy"] == metrics["decide_score"]
    only = TaskEvaluator(TaskData(data.spec, [], {}, decide=data.decide), tiny_tokenizer, 64)(model)
    assert set(only) == {"decide/accuracy", "decide_score", "decide_se"}


def test_the_rows_a_record_says_decide_decide_and_with_no_share_asked_they_come_last(glue, tmp_path):
    """A teacher's checkpoint was picked on the other rows: a distillation from it decides on the very
    rows the record lists, whatever the seeded split would draw, and never picks on them first."""
    data = load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.25, decide_share=0.5))
    recorded = record(data, 0.25, "uniform")
    recorded["decide"] = [row_hash(row) for row in data.held_out[:3]]  # not the seeded split's rows
    (tmp_path / "held_out.json").write_text(json.dumps(recorded))
    options = TaskOptions("rte", data_dir=str(glue), held_out_rows=str(tmp_path))
    split = load_task(replace(options, decide_share=0.5))
    assert [row_hash(row) for row in split.decide] == recorded["decide"]
    assert sorted(map(row_hash, split.held_out)) == sorted(map(row_hash, data.held_out[3:] + data.decide))
    every = load_task(options)  # no share asked: all pick, those that decide last (a prefix picks first)
    assert not every.decide and [row_hash(row) for row in every.held_out[-3:]] == recorded["decide"]
    recorded["decide"] = recorded["hashes"]
    (tmp_path / "held_out.json").write_text(json.dumps(recorded))
    with pytest.raises(KdbertError, match="the record's 10 rows that decide leave 0 held-out row.s. to pick"):
        load_task(replace(options, decide_share=0.5))


def test_a_record_from_other_rows_is_refused_in_one_line(glue):
    data = load_task(TaskOptions("rte", data_dir=str(glue), held_out_fraction=0.25))
    recorded = record(data, 0.25, "uniform")
    other = load_task(TaskOptions("rte", data_dir=str(glue)))
    other.train = other.train[:20]  # the record's rows are not all there
    with pytest.raises(KdbertError, match=r"--held-out-rows x: \d+ of the 10 held-out rows it lists are not among this "
                                          r"task's 20 training rows; pass the task and --train-file"):
        hold_out_recorded(other, recorded, "--held-out-rows x")
    with pytest.raises(KdbertError, match="--held-out-rows .*nowhere: no held_out.json there"):
        load_task(TaskOptions("rte", data_dir=str(glue), held_out_rows=str(glue / "nowhere")))


def test_where_most_rows_are_parts_of_others_whole_rows_are_held_out_and_their_parts_leave_training(glue):
    # SST-2's shape: every sentence (8-14 words) comes with phrases of it (its runs of 2-5 words); dev: sentences
    rng = random.Random(1)
    sentences = [tuple(f"s{i}w{k}" for k in range(rng.randint(8, 14))) for i in range(200)]
    phrases = {words[start:start + n] for words in sentences for n in (2, 3, 5) for start in (0, 1, 3)}
    train = [Example((" ".join(words),), i % 2) for i, words in enumerate(sentences + sorted(phrases))]
    dev = [Example((" ".join(f"d{i}w{k}" for k in range(rng.randint(8, 14))),), 0) for i in range(80)]
    data = hold_out(TaskData(GLUE_TASKS["sst2"], list(train), {"dev": dev}), 0.1)
    held = {tuple(row.texts[0].split()) for row in data.held_out}
    assert data.held_out_rule == "whole rows" and len(held) == 20 and held <= set(sentences)  # a tenth of the sentences
    parts = {words[i:j] for words in held for i in range(len(words)) for j in range(i + 1, len(words) + 1)
             if j - i < len(words)}
    assert {tuple(row.texts[0].split()) for row in data.held_out_parts} == parts & phrases  # 9 phrases a sentence
    assert len(data.held_out_parts) == 20 * 9 and not any(tuple(r.texts[0].split()) in parts for r in data.train)
    assert len(data.train) == len(train) - 20 - 180
    # a record carries the parts: a distillation from that teacher leaves them out of training too
    recorded = record(data, 0.1, data.held_out_rule)
    again = hold_out_recorded(TaskData(GLUE_TASKS["sst2"], list(train), {"dev": dev}), recorded, "x")
    assert again.held_out == data.held_out and again.held_out_parts == data.held_out_parts and again.train == data.train


def test_nearness_is_the_largest_word_set_jaccard_to_a_training_text_by_hand():
    train = [Example(("The cat sat on the mat",), 1), Example(("a dog ran",), 0), Example(("the cat sat",), 1)]
    texts = TrainingTexts(train)
    # {the, cat, sat, on, mat} against {the, cat, sat}: 3 / 5; against {a, dog, ran}: 0
    assert texts.nearness([Example(("the CAT sat",), 0)]) == pytest.approx([1.0])
    assert texts.nearness([Example(("the cat sat on a sofa",), 0)]) == pytest.approx([4 / 7])  # 4 shared of 7 (row 0)
    assert texts.nearness([Example(("unseen words only",), 0)]) == pytest.approx([0.0])
    # each training row against the others only: row 0 and row 2 are each other's nearest (3/5), row 1 has none
    assert texts.nearness(train, leave_out_self=True) == pytest.approx([3 / 5, 0.0, 3 / 5])
    pair_rows = [Example(("a b", "c d"), 0), Example(("a b", "x y"), 1)]
    pairs = TrainingTexts(pair_rows)
    # a pair's nearness is the mean of its texts': "a b" 1.0, "c z" 1/3 (against "c d")
    assert pairs.nearness([Example(("a b", "c z"), 0)]) == pytest.approx([(1.0 + 1 / 3) / 2])
    # left out, each row's "a b" finds the other's (1.0) and its second text nothing (0)
    assert pairs.nearness(pair_rows, leave_out_self=True) == pytest.approx([0.5, 0.5])


def test_rows_as_far_from_training_as_dev_are_held_out_where_training_rows_have_siblings():
    # CoLA's shape: training sentences in groups a word apart (each has siblings in training), a third of them
    # alone; dev's rows come from elsewhere (no sibling), so a uniform draw would hold out mostly siblings
    rng = random.Random(0)
    grouped = [Example((f"g{g} a{g} b{g} c{g} d{g} v{k}",), k % 2) for g in range(300) for k in range(3)]
    alone = [Example((" ".join(f"s{i}x{k}" for k in range(6)),), i % 2) for i in range(450)]
    train = grouped + alone
    rng.shuffle(train)
    dev = [Example((" ".join(f"d{i}x{k}" for k in range(6)),), i % 2) for i in range(100)]
    spec = GLUE_TASKS["cola"]
    assert not lengths_differ(train, dev)
    data = hold_out(TaskData(spec, list(train), {"dev": dev}), 0.1)
    assert data.held_out_rule == "nearness-matched" and len(data.held_out) == 135
    assert all(row.texts[0].startswith("s") for row in data.held_out)  # as far from training as dev's rows
    # rows whose siblings are as common in dev as in training: uniform, row for row
    sibling_dev = [Example((f"g{g} a{g} b{g} c{g} d{g} w",), 0) for g in range(0, 300, 5)] + dev[:40]
    alike = hold_out(TaskData(spec, list(train), {"dev": sibling_dev}), 0.1)
    chosen = set(uniform_indices(len(train), 135))
    assert alike.held_out_rule == "uniform" and alike.held_out == [r for i, r in enumerate(train) if i in chosen]


def test_a_search_of_phrases_without_unlabelled_sentences_is_told_what_it_lacks():
    # SST-2's rule: its rows are mostly phrases of its sentences, whole sentences held out
    assert phrases_line({"rule": "whole rows", "unlabelled_rows": 0}).startswith(
        "most training rows are phrases of its other rows, where the rows that decide (and dev's) are whole sentences")
    assert "--unlabelled" in phrases_line({"rule": "whole rows", "unlabelled_rows": 0})
    assert phrases_line({"rule": "whole rows"}) is None  # a report written before the count was kept cannot say
    assert phrases_line({"rule": "whole rows", "unlabelled_rows": 60000}) is None  # it has them
    for rule in ("uniform", "length-matched", "nearness-matched", "source-matched", None):
        assert phrases_line({"rule": rule, "unlabelled_rows": 0}) is None, rule


def test_a_small_pair_task_without_unlabelled_rows_is_told_of_mined_pairs():
    mrpc = {"texts": 2, "unlabelled_rows": 0, "train_rows": 3301}
    assert few_pairs_line(mrpc).startswith("only 3,301 training pairs and no --unlabelled rows")
    assert "kdbert mine-pairs" in few_pairs_line(mrpc)
    assert few_pairs_line({**mrpc, "unlabelled_rows": 60000}) is None  # it has them
    assert few_pairs_line({**mrpc, "texts": 1}) is None  # single texts: nothing to pair
    assert few_pairs_line({**mrpc, "train_rows": 10_000}) is None  # enough pairs of its own
    assert few_pairs_line({"texts": 2, "unlabelled_rows": 0}) is None  # a report written before the counts


def test_the_report_says_which_unlabelled_rows_every_candidate_read_and_from_when():
    assert unlabelled_line({"unlabelled_rows": 0}) is None and unlabelled_line({}) is None
    assert unlabelled_line({"unlabelled_rows": 60000}) == (
        "every candidate also trained on 60,000 rows without labels (--unlabelled), labelled by the teacher")
    assert unlabelled_line({"unlabelled_rows": 60000, "unlabelled_from_epoch": 1}).endswith(
        "labelled by the teacher, from its epoch 2 on (the earlier epochs read the labelled rows alone)")
