"""kdbert compress: the candidates each family offers, their starts and recipes, the search's
rounds and workers, augmented and transfer rows, the held-out rows, and the command line end to end
(timing and the budget: test_compress_timing.py; the ship checks: test_compress_ship.py)."""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import socket
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compress_env, save_tiny_classifier, write_glue_task
from transformers import BertForSequenceClassification

from kdbert.compress import speed
from kdbert.core.loading import load_task_model
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    return compress_env(tmp_path_factory.mktemp("compress"), tiny_tokenizer)


def test_every_family_offers_shapes_no_larger_than_the_teacher(env):
    context = speed.shape_context(env["teacher"], env["task"])
    names = [c.name for c in speed.all_candidates(context)]
    # depths 1-2 (the teacher's 2) x width 128 (the teacher's), at that width with a half, a quarter and an
    # eighth of the FFN too, MobileBERT at depth 2, BiLSTM 150/300
    assert names == ["bilstm-h150", "bilstm-h300", "bert-1x128", "bert-2x128", "bert-1x128-ffn128", "bert-1x128-ffn64",
                     "bert-1x128-ffn32", "bert-2x128-ffn128", "bert-2x128-ffn64", "bert-2x128-ffn32", "mobilebert-2x128"]
    model, vocab = speed.all_candidates(context)[0].build(context)
    words = {w for text in context.texts for w in text.lower().split()}
    assert model.config.hidden_size == 150 and set(vocab.words) >= words  # the training texts' words
    bert, tokenizer = speed.all_candidates(context)[2].build(context)
    # the teacher's head size (32) and FFN-to-width ratio (256 / 128)
    assert (bert.config.num_hidden_layers, bert.config.hidden_size, bert.config.num_attention_heads,
            bert.config.intermediate_size, tokenizer) == (1, 128, 4, 256, context.tokenizer)
    # a narrow FFN at the teacher's width: every embedding and attention weight of the teacher's layer it
    # copies, and every fourth of its FFN units (evenly spaced: 0, 4, ..., 252)
    narrow = next(c for c in speed.all_candidates(context) if c.name == "bert-2x128-ffn64")
    teacher = BertForSequenceClassification.from_pretrained(env["teacher"])
    student = narrow.from_teacher(teacher, context)
    assert student.config.intermediate_size == 64 and student.config.hidden_size == 128
    last = teacher.bert.encoder.layer[1]
    torch.testing.assert_close(student.bert.embeddings.word_embeddings.weight, teacher.bert.embeddings.word_embeddings.weight)
    torch.testing.assert_close(student.bert.encoder.layer[1].attention.self.query.weight, last.attention.self.query.weight)
    torch.testing.assert_close(student.bert.encoder.layer[1].intermediate.dense.weight,
                               last.intermediate.dense.weight[torch.arange(0, 256, 4)])
    torch.testing.assert_close(student.bert.encoder.layer[1].output.dense.weight,
                               last.output.dense.weight[:, torch.arange(0, 256, 4)])


def test_kept_candidates_are_built_from_the_teacher_weights(env, tmp_path):
    from transformers import BertForSequenceClassification

    from kdbert.compress.build import build_from_teacher
    from kdbert.families.registry import family_of_folder

    context = speed.shape_context(env["teacher"], env["task"])
    by_name = {c.name: c for c in speed.all_candidates(context)}
    folder = build_from_teacher(by_name["bert-1x128"], env["teacher"], env["task"], tmp_path / "bert")
    assert family_of_folder(folder).name == "hf"
    assert json.loads((folder / "student_init.json").read_text())["shape"]["num_hidden_layers"] == 1
    student = BertForSequenceClassification.from_pretrained(folder)
    teacher = BertForSequenceClassification.from_pretrained(env["teacher"])
    # the one student layer is teacher layer g(1) = ceil(1 * 2 / 1) = 2, whole (same width, heads, FFN)
    s_layer, t_layer = student.bert.encoder.layer[0], teacher.bert.encoder.layer[1]
    for name in ("attention.self.query", "attention.output.dense", "intermediate.dense", "output.LayerNorm"):
        assert torch.equal(s_layer.get_submodule(name).weight, t_layer.get_submodule(name).weight), name
    assert torch.equal(student.bert.embeddings.word_embeddings.weight, teacher.bert.embeddings.word_embeddings.weight)
    mobile = build_from_teacher(by_name["mobilebert-2x128"], env["teacher"], env["task"], tmp_path / "mobile")
    assert (mobile / "model.safetensors").is_file() and (mobile / "tokenizer.json").is_file()
    with pytest.raises(KdbertError, match="candidate bilstm-h150 is built by its own method"):
        build_from_teacher(by_name["bilstm-h150"], env["teacher"], env["task"], tmp_path / "bilstm")


def _plan(env, names, out, settings, seconds=1800.0, min_kept=0.97, teacher_score=100.0, threads=1, clock=None):
    """A search plan over the tiny teacher's candidates ``names`` (latency: their order), holding rows out."""
    import time

    from kdbert.compress import search
    from kdbert.compress.schedule import Goal

    task = TaskOptions("sst2", data_dir=str(env["root"] / "glue"), held_out_fraction=0.25)
    by_name = {c.name: c for c in speed.all_candidates(speed.shape_context(env["teacher"], task))}
    goal = Goal(teacher_score, min_kept, {name: 1.0 + i for i, name in enumerate(names)})
    return search.Plan([by_name[n] for n in names], str(env["teacher"]), task, str(out), settings, goal,
                       search.Window.from_now(seconds, settings.first_round_share), threads, clock or time.time)


def test_a_search_whose_window_cannot_rank_the_layers_says_so_and_keeps_the_uniform_map(env, tmp_path, capsys):
    from kdbert.compress import search
    from kdbert.compress.recipes import SearchSettings
    from kdbert.families.registry import family_of_folder

    teacher = family_of_folder(env["teacher"]).load(env["teacher"])
    hurried = _plan(env, ["bert-1x128"], tmp_path / "hurried", SearchSettings(first_steps=2), seconds=0.01)
    assert search.search_importance(hurried, teacher).layer_rule == "uniform"
    assert "ranking the layers would have taken longer" in capsys.readouterr().out
    ample = _plan(env, ["bert-1x128"], tmp_path / "ample", SearchSettings(first_steps=2))
    assert search.search_importance(ample, teacher).layer_rule != "uniform"
    assert "would have taken longer" not in capsys.readouterr().out


def test_a_promoted_candidate_continues_its_run_and_a_finished_search_is_returned_as_it_is(env, tmp_path,
                                                                                          monkeypatch):
    from kdbert.compress import search
    from kdbert.compress.recipes import SearchSettings
    from kdbert.compress.schedule import horizon
    from kdbert.compress.storage import open_study

    settings = SearchSettings(rounds=2, first_steps=2, batch_size=4, round_share="steps", first_round_share=1.0)
    plan = _plan(env, ["bert-1x128", "bert-2x128", "mobilebert-2x128"], tmp_path, settings, min_kept=2.0)
    study = open_study(tmp_path, {"search": "test"})
    loaded = search.Loaded()
    searched = search.run_search(plan, study, loaded=loaded)
    # the segments shared one teacher, which none of them changed
    teacher, _ = loaded.teacher
    fresh = load_task_model(str(env["teacher"]), loaded.task_data(plan.task, settings.seed).spec, new_head_ok=False)
    assert all(torch.equal(value, fresh.state_dict()[name]) for name, value in teacher.state_dict().items())
    assert len(loaded.rows) == 1
    rung_0, rung_1 = searched["rounds"]
    assert sorted(row["candidate"] for row in rung_0) == ["bert-1x128", "bert-2x128", "mobilebert-2x128"]
    assert {(row["steps"], row["trained"]) for row in rung_0} == {(2, 2)}
    # none keeps 2x the teacher: of three at rung 0, the best one goes on at once (floor(3 / 2)), the
    # second once nothing else is left (ceil(3 / 2)); both continue their runs to 4 steps
    ranked = sorted(rung_0, key=lambda r: (-r["score"], r.get("loss", math.inf), r["candidate"]))
    assert [row["candidate"] for row in rung_1] == [row["candidate"] for row in ranked[:2]]
    assert {(row["steps"], row["trained"]) for row in rung_1} == {(4, 2)}
    best = rung_1[0]
    report = json.loads((Path(best["run"]) / "distill_report.json").read_text())
    assert report["paused_at_step"] == 4 and report["options"]["max_steps"] == horizon(settings) == 2 * 2 * 16
    steps = [json.loads(line)["step"] for line in (Path(best["run"]) / "log.jsonl").read_text().splitlines()
             if '"step"' in line and '"loss"' in line]
    assert steps == sorted(set(steps))
    assert [entry["step"] for entry in report["eval_history"]] == [2, 4]  # one run, evaluated at each pause
    assert [p.name for p in (Path(best["run"]) / "checkpoints").iterdir()] == ["checkpoint-s0-0000004"]  # the last
    assert report["selected_on"] == "held-out training rows (3)"
    assert all(row["loss"] > 0 for row in rung_0)  # the held-out loss, to break ties
    assert study.user_attrs["ended"] is True

    def no_run(*args, **kwargs):
        raise AssertionError("a finished segment was distilled again")

    monkeypatch.setattr(search, "distil_segment", no_run)
    assert search.run_search(plan, open_study(tmp_path, {"search": "test"})) == searched
    with pytest.raises(KdbertError, match="the search picks on held-out training rows: pass --held-out-fraction"):
        search.run_search(replace(plan, task=env["task"]), study)


@pytest.mark.parametrize("where", ["journal", "postgresql"])
def test_two_worker_processes_share_the_study_never_run_a_segment_twice_and_pick_the_same_winner(env, tmp_path,
                                                                                                 request, where,
                                                                                                 monkeypatch):
    from kdbert.compress import search
    from kdbert.compress.recipes import SearchSettings
    from kdbert.compress.schedule import pick_winner
    from kdbert.compress.storage import open_study

    url = request.getfixturevalue("postgres_url") if where == "postgresql" else None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    settings = SearchSettings(rounds=2, first_steps=2, batch_size=4, round_share="steps", first_round_share=1.0)
    names = ["bert-1x128", "bert-2x128", "bilstm-h150"]
    found = {}
    for workers in (1, 2):
        out = tmp_path / str(workers)
        plan = _plan(env, names, out, settings, min_kept=2.0)
        # as on a machine with two GPUs: worker i gets GPU i (CUDA_VISIBLE_DEVICES); this torch runs on the CPU
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 if workers == 2 else 0)
        name = f"{tmp_path.name}-{workers}"  # a study of its own in the test server's database
        study = open_study(out, {"search": "test"}, url, name)
        searched = search.run_search(plan, study, workers=workers, storage_url=url, study_name=name,
                                     identity={"search": "test"})
        segments = searched["segments"]
        keys = [(row["candidate"], row["rung"]) for row in segments]
        assert len(keys) == len(set(keys))  # no segment twice
        assert len(searched["workers"]) == workers
        gpus = {row["worker"]: row.get("gpu") for row in segments}
        assert sorted(gpus.values(), key=str) == ([None] if workers == 1 else ["0", "1"])
        winner = pick_winner([{**row, "state": "done"} for row in segments], plan.goal)
        found[workers] = (winner["candidate"], winner["steps"], winner["score"],
                          sorted((row["candidate"], row["steps"]) for row in segments))
    assert found[2] == found[1]


def test_compress_cli_finds_distils_ships_and_resumes(env, tmp_path, capsys, monkeypatch):
    from collections import Counter

    from kdbert.cli import main
    from kdbert.compress import breakdown, budget, search, ship, timing_process
    from kdbert.data.load import load_task

    out = tmp_path / "compress"
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bert-1x128,bilstm-h150", "--rounds", "2", "--first-steps", "2", "--batch-size", "4",
            "--length-rows", "4", "--threads", "1", "--output-dir", str(out)]
    from kdbert.methods import front

    def loaded_again(*args, **kwargs):
        raise AssertionError("a segment loaded the task or the teacher again")

    for module, name in ((front, "load_task"), (front, "load_task_model"), (front, "load_tokenizer"),
                         (search, "load_task"), (search, "load_task_model")):
        monkeypatch.setattr(module, name, loaded_again)  # the search's segments use compress's own

    def timed_here(*args, **kwargs):
        raise AssertionError("the ship check timed in the process that searched")

    monkeypatch.setattr(ship, "time_against_teacher", timed_here)
    monkeypatch.setattr(breakdown, "time_against_teacher", timed_here)  # its other-threads row too
    monkeypatch.setattr(budget, "SHIPPED_OVER_ADMITTED", 0.0)  # nothing ships at 0.01x more often than not: all risks
    capsys.readouterr()
    assert main([*args, "--target-speedup", "0.01"]) == 0
    monkeypatch.undo()
    report = json.loads((out / "compress_report.json").read_text())
    assert set(report["ship_risk"]) == {"bert-1x128", "bilstm-h150"}  # named in the report, the line and the table
    assert all(chance < 0.5 for chance in report["ship_risk"].values())
    assert report["shipped"]["speedup"] > 0 and len(report["shipped"]["timed_in_turns"]) == 3
    printed = capsys.readouterr()
    risk_line = next(line for line in printed.out.splitlines() if line.startswith("ship risk: "))
    assert "bert-1x128 (admitted at " in risk_line and "may time under 0.01x as shipped" in risk_line
    # one line per finished segment; the runs' precision and threads said once for the search, their own
    # lines in their logs; the budget's bar on stderr
    segments = report["search"]["segments"]
    lines = [line for line in printed.out.splitlines() if line.startswith("rung ")]
    assert lines == [search.segment_line(row) for row in segments]
    assert lines[0].startswith(f"rung 0  {segments[0]['candidate']}  {segments[0]['steps']} steps (+")
    assert printed.out.count("runs train in float32 (auto, from $KDBERT_MIXED_PRECISION) on 1 thread(s)") == 1
    assert "precision:" not in printed.out and "threads:" not in printed.out
    assert "precision: float32" in (out / "runs" / "bert-1x128.log").read_text()
    assert "s of the budget" in printed.err
    assert set(report["budget"]["phase_seconds"]) == {"timing", "search", "finishing", "other"}
    assert report["budget"]["untimed"] == [] and report["budget"]["minutes"] == 30
    # the 2 rows the teacher's held_out.json lists (not the default 10%): one picks, one decides
    assert (report["held_out_rows"], report["decide_rows"]) == (1, 1)
    assert report["teacher_saw_held_out_rows"] is False and "held_out.json" in report["held_out"]["source"]
    assert report["held_out"]["teacher_picked_on_deciding_rows"] is False and "was picked on" not in printed.out
    # which recipe each candidate ran, from its run's own report
    recipes = {row["candidate"]: row["recipe"] for row in segments}
    assert recipes["bert-1x128"].startswith("kd: 0.7 * kl_div(logits, logits) + 0.3 * hard_label(logits, labels) at "
                                            "T=20; adamw at ")
    assert recipes["bert-1x128"].endswith(", weights averaged (EMA 0.998), word embeddings kept as they start")
    assert recipes["bilstm-h150"].startswith("bilstm: 1 * squared_l2(logits, logits); adadelta at 1, batch 50, ")
    markdown = (out / "compress_report.md").read_text()
    for name, chance in report["ship_risk"].items():  # each candidate's row says its chance
        assert f"| {name} | " in markdown and f"x (ship risk: {chance:.0%} to ship at the target) |" in markdown
    assert f"- bert-1x128: {recipes['bert-1x128']}" in markdown and f"- bilstm-h150: {recipes['bilstm-h150']}" in markdown
    assert "held-out rows: 2 training rows the teacher never trained on" in printed.out
    checked = report["shipped"]["checks"][0]  # the shipped graph scored on the row that decides
    assert checked["candidate"] == report["winner"]["candidate"]
    decide_data = load_task(TaskOptions("sst2", data_dir=str(env["root"] / "glue"), held_out_rows=str(env["teacher"]),
                                        decide_share=0.5))
    scored, predictions = ship.decide_score(out / "winner", "model.int8.onnx", decide_data)
    score, error = scored["decide_score"], scored["decide_se"]
    assert (report["shipped"]["decide_score"], report["shipped"]["decide_se"]) == (
        checked["decide_score"], checked["decide_se"]) == (score, error)
    assert score == 100.0 * np.mean(predictions == [row.label for row in decide_data.decide])
    assert report["shipped"]["margin_kind"] == checked["margin_kind"] == "paired"
    # every run was scored against the teacher's predictions on the rows that decide, as the ranking reads it
    assert all(row["decide_paired_se"] >= 0.0 for row in segments)
    assert not (out / "exports").exists()  # only the shipped export is kept
    first_round = {row["candidate"]: row for row in report["search"]["rounds"][0]}
    assert {name: row["method"] for name, row in first_round.items()} == {"bert-1x128": "kd", "bilstm-h150": "bilstm"}
    assert report["winner"]["candidate"] in first_round and report["winner"]["rule"].startswith(
        ("fastest keeping 0.97", "none keeps 0.97", "none beats the majority class"))
    for name in first_round:  # every segment of a candidate continues its one run: the steps add up
        own = [row for row in segments if row["candidate"] == name]
        assert [row["steps"] for row in own] == list(itertools.accumulate(row["trained"] for row in own))
        assert report["seconds_per_candidate"][name] == pytest.approx(sum(row["seconds"] for row in own), abs=0.06)
    assert all(row["train_seconds"] <= row["seconds"] for row in segments)
    store = tmp_path / "cache-home" / "kdbert" / "teacher-logits"  # the tests' $XDG_CACHE_HOME
    assert sorted(store.iterdir()) and report["labelling"]["cache"] == str(store)  # the BiLSTM's, stored once
    exported = json.loads((out / "winner" / "export_report.json").read_text())
    assert report["shipped"]["dev_score"] == exported["dev_metrics"]["onnx_int8"]["score"]
    assert report["shipped"]["kept_dev"] == report["shipped"]["dev_score"] / report["teacher_scores"]["dev"]
    teacher_export = json.loads((out / "teacher-onnx" / "export_report.json").read_text())
    assert report["teacher_scores"]["dev_deployed"] == teacher_export["dev_metrics"]["onnx_int8"]["score"]
    data = load_task(TaskOptions("sst2", data_dir=str(env["root"] / "glue"), held_out_fraction=0.1))
    majority = Counter(row.label for row in data.train).most_common(1)[0][0]
    dev = data.dev[next(iter(data.dev))]
    assert report["shipped"]["majority_dev"] == pytest.approx(100.0 * sum(r.label == majority for r in dev) / len(dev))
    markdown = (out / "compress_report.md").read_text()
    assert "Winner: **" in markdown and "![dev score against latency](pareto.png)" in markdown
    assert "x the teacher's speed on dev rows at 1 thread(s) (trained export, " in markdown  # --threads 1
    assert (out / "pareto.png").stat().st_size > 0
    # the shipped export timed again with its trained weights, in turns with the exported teacher
    turns = report["shipped"]["timed_in_turns"]
    assert len(turns) == 3 and report["shipped"]["speedup"] == pytest.approx(
        statistics.median(r["teacher"] / r["student"] for r in turns))
    assert report["shipped"]["latency_real_p50_ms"] == statistics.median(r["student"] for r in turns)
    assert report["shipped"]["teacher_latency_real_p50_ms"] == statistics.median(r["teacher"] for r in turns)
    assert report["shipped"]["agreement_measure"] == "% of rows, same class"
    rows = report["speedup_breakdown"]
    assert rows[4]["latency_ms"] == report["shipped"]["latency_real_p50_ms"]  # the winner as timed in turns
    assert [(row["model"], row["change"]) for row in rows] == [
        ("teacher", "PyTorch fp32, padded to 64 tokens"), ("teacher", "each row at its own length"),
        ("teacher", "ONNX Runtime fp32"),
        ("teacher", f"ONNX Runtime int8 ({teacher_export['quantization']['method']})"),
        ("winner", "distilled"),
        *([("winner", f"{os.cpu_count()} thread(s) instead of 1")] if os.cpu_count() > 1 else [])]
    assert [row["dev_score"] for row in rows[2:5]] == [teacher_export["dev_metrics"]["onnx_fp32"]["score"],
                                                      report["teacher_scores"]["dev_deployed"],
                                                      report["shipped"]["dev_score"]]
    assert math.prod(row["factor"] for row in rows) == pytest.approx(rows[-1]["total"])
    fastest = report["shipped"]["each_at_its_fastest"]  # the teacher and winner each at its lower latency
    if os.cpu_count() > 1:
        teacher_ms = min(report["shipped"]["teacher_latency_real_p50_ms"], rows[-1]["teacher_latency_ms"])
        winner_ms = min(report["shipped"]["latency_real_p50_ms"], rows[-1]["latency_ms"])
        assert (fastest["timed_threads"], fastest["speedup"]) == (1, pytest.approx(teacher_ms / winner_ms))
    else:
        assert fastest is None
    assert rows[-1]["total"] == pytest.approx(rows[0]["latency_ms"] / rows[-1]["latency_ms"])
    assert "Where the speedup comes from" in markdown

    def no_run(*args, **kwargs):
        raise AssertionError("a finished run was distilled again")

    monkeypatch.setattr(search, "distil_segment", no_run)
    monkeypatch.setattr(breakdown, "measure_latency", no_run)
    monkeypatch.setattr(breakdown, "time_feeds", no_run)
    monkeypatch.setattr(timing_process.TimingProcess, "time_against_teacher", no_run)
    capsys.readouterr()
    # resumed: timings, runs and the breakdown reused; --no-progress hides the bar
    assert main([*args, "--target-speedup", "0.01", "--no-progress"]) == 0
    assert "of the budget" not in capsys.readouterr().err
    resumed = json.loads((out / "compress_report.json").read_text())
    assert (resumed["winner"], resumed["shipped"]["speedup"]) == (report["winner"], report["shipped"]["speedup"])
    capsys.readouterr()
    assert main([*args, "--target-speedup", "1e6"]) == 2  # another search in the same folder
    assert ("study 'kdbert-compress' is a search with options {'target_speedup': 0.01, "
            in capsys.readouterr().err)
    monkeypatch.undo()
    args[args.index(str(out))] = str(tmp_path / "other")
    assert main([*args, "--target-speedup", "1e6"]) == 2
    assert "no candidate meets --target-speedup 1e+06 on this machine: the fastest" in capsys.readouterr().err
    assert main(args) == 2
    assert "pass one of --target-speedup N or --target-latency-ms L" in capsys.readouterr().err
    assert main([*args, "--target-speedup", "2", "--candidates", "bert-9x999"]) == 2
    assert "--candidates: unknown bert-9x999; this teacher offers" in capsys.readouterr().err


def test_a_process_joining_a_study_that_has_ended_exits_0_saying_so(env, tmp_path, capsys):
    from kdbert.cli import main

    url = f"sqlite:///{tmp_path / 'studies.db'}"
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bert-1x128", "--rounds", "1", "--first-steps", "2", "--batch-size", "4",
            "--length-rows", "4", "--threads", "1", "--target-speedup", "0.01", "--no-progress",
            "--storage", url, "--study", "sst2-tiny"]
    assert main([*args, "--output-dir", str(tmp_path / "first")]) == 0
    capsys.readouterr()
    assert main([*args, "--output-dir", str(tmp_path / "second")]) == 0
    assert capsys.readouterr().out.strip().endswith(
        f"study 'sst2-tiny' has ended: nothing left to distil (its winner is shipped by "
        f"{socket.gethostname()}:{os.getpid()} into {(tmp_path / 'first').resolve()}/winner)")
    assert not (tmp_path / "second" / "winner").exists() and not (tmp_path / "second" / "speed.json").exists()
    assert main([*args, "--output-dir", str(tmp_path / "third"), "--min-kept", "0.5"]) == 2
    assert ("study 'sst2-tiny' in sqlite:///" in capsys.readouterr().err)


def test_a_second_compress_on_a_search_under_way_joins_it_as_a_worker_and_exits_0(env, tmp_path):
    import subprocess
    import sys
    import time

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    out = tmp_path / "search"
    command = [sys.executable, "-c", LEAD_ONCE_JOINED,
               "compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
               "--candidates", "bert-1x128,bert-2x128,mobilebert-2x128,bilstm-h150", "--rounds", "2",
               "--first-steps", "8", "--batch-size", "4", "--length-rows", "4", "--threads", "1",
               "--target-speedup", "0.01", "--no-progress", "--output-dir", str(out)]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    leader = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)
    # the second process runs compress as soon as the first leads; the first distils nothing until the
    # second has claimed a segment, so the second joins before the search can end, however fast the machine
    joiner = subprocess.Popen([sys.executable, "-c", JOIN_ONCE_LED, str(out), *command[3:]], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=environment)
    deadline = time.time() + 300
    while "leader" not in _study_attrs(out, optuna, JournalStorage, JournalFileBackend):
        assert leader.poll() is None and time.time() < deadline, "the first compress never led its search"
        time.sleep(0.5)
    joined, errors = joiner.communicate(timeout=600)
    assert leader.wait(timeout=600) == 0 and joiner.returncode == 0, errors[-2000:]
    leader_id = f"{socket.gethostname()}:{leader.pid}"
    last = joined.strip().splitlines()[-1]
    assert last.startswith("joined study 'kdbert-compress': ") and last.endswith(f"; {leader_id} ships the winner")
    ran_here = int(last.split(": ")[1].split()[0])
    report = json.loads((out / "compress_report.json").read_text())
    segments = report["search"]["segments"]
    assert ran_here == sum(row["worker"] == f"{socket.gethostname()}:{joiner.pid}" for row in segments)
    assert {row["worker"] for row in segments} <= {leader_id, f"{socket.gethostname()}:{joiner.pid}"}
    keys = [(row["candidate"], row["rung"], row["steps"]) for row in segments]
    assert len(keys) == len(set(keys))  # no segment run twice
    assert not (out / "winner").is_dir() or report["winner"]["candidate"] in {row["candidate"] for row in segments}


LEAD_ONCE_JOINED = """
import sys, time

import kdbert.compress.search as search
from kdbert.cli import main

work = search.work


def work_once_joined(study, plan, *args, **kwargs):
    deadline = time.time() + 300
    while time.time() < deadline and not any(trial.user_attrs.get("worker") not in (None, search.storage.worker_id())
                                             for trial in study.get_trials(deepcopy=False)):
        time.sleep(0.2)
    return work(study, plan, *args, **kwargs)


search.work = work_once_joined
sys.exit(main(sys.argv[1:]))
"""


JOIN_ONCE_LED = """
import sys, time
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend

from kdbert.cli import main

out = Path(sys.argv[1])
while True:
    if (out / "study.journal").is_file():
        try:
            storage = JournalStorage(JournalFileBackend(str(out / "study.journal")))
            if "leader" in optuna.load_study(study_name="kdbert-compress", storage=storage).user_attrs:
                break
        except KeyError:
            pass
    time.sleep(0.1)
sys.exit(main(sys.argv[2:]))
"""


def _study_attrs(out, optuna, JournalStorage, JournalFileBackend) -> dict:
    """The user attributes of the study in ``out``'s journal (empty before it exists)."""
    if not (out / "study.journal").is_file():
        return {}
    storage = JournalStorage(JournalFileBackend(str(out / "study.journal")))
    try:
        return optuna.load_study(study_name="kdbert-compress", storage=storage).user_attrs
    except KeyError:
        return {}


def test_each_kind_of_candidate_gets_its_recipe(monkeypatch):
    from kdbert.compress.recipes import SearchSettings, run_options
    from kdbert.families.registry import Candidate

    def candidate(name, from_teacher=lambda teacher, context: teacher, **shape):
        return Candidate(name, "x", tuple(shape.items()), build=None, from_teacher=from_teacher)

    settings = SearchSettings(first_steps=400, batch_size=16, learning_rate=2e-4, seed=7, word_vectors="glove.txt",
                              intermediate_share=0.25)
    # the intermediate stage takes its share of the first rung (400 steps here); the rest is prediction
    bert = run_options(candidate("bert-2x256"), 400, settings, "cache")
    assert bert == {"method": "tinybert", "head_average": True, "intermediate_max_steps": 100, "intermediate_lr": 2e-4, "max_steps": 300,
                    "seed": 7, "eval_every": 150, "no_progress": True, "batch_size": 16, "learning_rate": 2e-4,
                    "ema_decay": 0.998, "teacher_cache": "cache"}
    # without an intermediate share: the one logit-KD loss every token-level candidate shares
    none = run_options(candidate("bert-2x256"), 400, SearchSettings(intermediate_share=0.0), "cache")
    assert none == {**run_options(candidate("mobilebert-2x384"), 400, SearchSettings(), "cache"), "method": "kd",
                    "freeze_word_embeddings": True}  # a cut of the teacher keeps its word embeddings
    assert (none["method"], none["max_steps"], "intermediate_max_steps" in none) == ("kd", 400, False)
    trained = run_options(candidate("bert-2x256"), 400, SearchSettings(word_embeddings="trained"), "cache")
    assert trained["freeze_word_embeddings"] is False
    assert "freeze_word_embeddings" not in run_options(candidate("mobilebert-2x384"), 400, SearchSettings(), "cache")
    assert run_options(candidate("mobilebert-2x384"), 400, settings, "cache")["method"] == "kd"
    # every AdamW candidate is scored on its weights' moving average unless --ema-decay 0
    assert "ema_decay" not in run_options(candidate("bert-2x256"), 400, SearchSettings(ema_decay=0.0), "cache")
    monkeypatch.setenv("KDBERT_MIXED_PRECISION", "bf16")
    bilstm = run_options(candidate("bilstm-h300", from_teacher=None, hidden_size=300, embedding_dim=50), 400,
                         settings, "cache")
    assert bilstm == {"method": "bilstm", "max_steps": 400, "hidden_size": 300, "word_vectors": "glove.txt",
                      "teacher_dtype": "bfloat16", "seed": 7, "eval_every": 200,
                      "no_progress": True}  # its own optimiser (no average), batch and rate; labelled in bf16
    monkeypatch.setenv("KDBERT_MIXED_PRECISION", "no")
    assert run_options(candidate("bilstm-h300", from_teacher=None, hidden_size=300), 400, settings,
                       "cache")["teacher_dtype"] == "float32"
    subset = SearchSettings(max_train_examples=5000)
    assert run_options(candidate("bilstm-h150", from_teacher=None, hidden_size=150), 400, subset,
                       "cache")["max_train_examples"] == 5000
    assert run_options(candidate("bert-2x256"), 400, subset, "cache")["max_train_examples"] == 5000
    with pytest.raises(KdbertError, match="compress has no distillation recipe for gru candidates"):
        run_options(candidate("gru-1x64"), 400, settings, "cache")
    with pytest.raises(KdbertError, match="--intermediate-share 1 must be in"):
        SearchSettings(intermediate_share=1.0)


def test_bilstm_candidates_take_the_word_vectors_size(env, tmp_path):
    vectors = tmp_path / "vectors.txt"
    vectors.write_text("good 0.1 0.2 0.3 0.4\nbad 0.4 0.3 0.2 0.1\n")
    context = speed.shape_context(env["teacher"], env["task"], vectors)
    bilstm = [c for c in speed.all_candidates(context) if c.name == "bilstm-h150"][0]
    assert dict(bilstm.shape) == {"hidden_size": 150, "embedding_dim": 4}
    assert bilstm.build(context)[0].config.embedding_dim == 4
    with pytest.raises(KdbertError, match="word-vector file .*missing.txt does not exist"):
        speed.shape_context(env["teacher"], env["task"], tmp_path / "missing.txt")
    # vectors read off an encoder (here the teacher's own) have its hidden size
    encoder = speed.shape_context(env["teacher"], env["task"], f"encoder:{env['teacher']}")
    width = json.loads((Path(env["teacher"]) / "config.json").read_text())["hidden_size"]
    assert dict([c for c in speed.all_candidates(encoder) if c.name == "bilstm-h150"][0].shape)["embedding_dim"] == width


def test_a_search_window_too_small_for_one_candidate_is_refused_before_any_run():
    from kdbert.compress.search import SearchSettings, check_budget
    from kdbert.families.registry import Candidate

    # the deployed teacher: 100 rows/s at 64 tokens, median dev row 32 tokens -> 0.005 s per row
    table = {"settings": {"seq_len": 64}, "teacher": {"throughput": 100.0, "real_length_p50": 32}}
    bert = Candidate("bert-1x128", "hf", (), build=None, from_teacher=lambda teacher, context: teacher)
    bilstm = Candidate("bilstm-h150", "bilstm", (), build=None)
    settings = SearchSettings(first_steps=300, batch_size=32)
    with pytest.raises(KdbertError, match=r"--budget-minutes 2 leaves 0.5 min to distil on this machine after timing "
                                          r"and before shipping the winner, too little for one candidate: its first "
                                          r"round runs the teacher on at least 9600 rows, about 0.8 min"):
        check_budget(table, [bert], settings, 60000, 2.0, seconds=30.0)  # 9600 rows x 0.005 s = 48 s > 30 s
    check_budget(table, [bert], settings, 60000, 2.0, seconds=54.0)
    check_budget(table, [bert, bilstm], settings, 5000, 2.0, seconds=30.0)  # the BiLSTM labels 5000 rows: 25 s


def test_a_teacher_the_runtime_cannot_export_and_a_tiny_budget_are_one_line_errors(env, tmp_path, capsys,
                                                                                   monkeypatch):
    import torch.onnx

    from kdbert.cli import main

    out = tmp_path / "compress"
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bert-1x128", "--length-rows", "4", "--threads", "1", "--target-speedup", "0.01",
            "--no-progress", "--output-dir", str(out)]
    assert main([*args, "--first-steps", "100000", "--budget-minutes", "0.001"]) == 2
    err = capsys.readouterr().err.strip()
    # judged on the teacher's measured dev pass, before anything is timed or written
    assert "--budget-minutes 0.001 is too short for this teacher on this machine: exporting it and the winner " \
           "scores 9 dev and held-out rows 4 times each (the int8 choice and the parity check)" in err
    assert "and one first round runs the teacher on 3200000 rows: about" in err
    assert len(err.splitlines()) == 1 and not out.exists()

    def unsupported(*args, **kwargs):
        raise RuntimeError("Unsupported operator: aten::fancy_op.default")

    monkeypatch.setattr(torch.onnx, "export", unsupported)
    other = tmp_path / "unexportable"
    assert main([*args[:-1], str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--teacher {env['teacher']} cannot be deployed in onnx-int8, so there is no teacher to time "
                        "students against: cannot export BertForSequenceClassification to ONNX (torchscript exporter): unsupported "
                        "operator(s) aten.fancy_op")
    assert len(err.splitlines()) == 1 and not (other / "speed.json").exists()
    assert not [p for p in other.rglob("*") if p.is_file()]  # nothing half-written


def test_the_first_round_runs_families_in_turn_spread_over_their_speeds():
    from kdbert.compress.schedule import spread_order
    from kdbert.families.registry import Candidate

    latency = {"bert-1x128": 0.1, "bilstm-h150": 0.15, "bert-1x192": 0.2, "bert-2x128": 0.3, "bert-1x256": 0.4,
               "bilstm-h300": 0.45, "bert-2x192": 0.5, "mobilebert-2x384": 0.6, "bert-2x256": 0.7}
    candidates = [Candidate(name, "x", (), build=None) for name in sorted(latency)]
    # bert by bisection of its six: fastest (0), slowest (5), middle (2), then 1 and 3 (the two
    # halves' middles), then 4
    assert [c.name for c in spread_order(candidates, latency)] == [
        "bert-1x128", "bilstm-h150", "mobilebert-2x384", "bert-2x256", "bilstm-h300", "bert-2x128", "bert-1x192",
        "bert-1x256", "bert-2x192"]
    # candidates that start from a general student lead their family, fastest first
    assert [c.name for c in spread_order(candidates, latency, frozenset({"bert-2x256", "bert-2x128"}))] == [
        "bert-2x128", "bilstm-h150", "mobilebert-2x384", "bert-2x256", "bilstm-h300", "bert-1x128", "bert-2x192",
        "bert-1x192", "bert-1x256"]
    # whole-width candidates come next in their family, the slowest first (of one depth), then the rest
    assert [c.name for c in spread_order(candidates, latency, frozenset({"bert-2x128"}),
                                         frozenset({"bert-1x256", "bert-2x256", "bert-1x192"}))] == [
        "bert-2x128", "bilstm-h150", "mobilebert-2x384", "bert-2x256", "bilstm-h300", "bert-1x256", "bert-1x192",
        "bert-1x128", "bert-2x192"]
    # a whole-width candidate admitted near the speed line starts after the others of its width
    assert [c.name for c in spread_order(candidates, latency, frozenset({"bert-2x128"}),
                                         frozenset({"bert-1x256", "bert-2x256", "bert-1x192"}),
                                         frozenset({"bert-2x256"}))] == [
        "bert-2x128", "bilstm-h150", "mobilebert-2x384", "bert-1x256", "bilstm-h300", "bert-1x192", "bert-2x256",
        "bert-1x128", "bert-2x192"]
    # among whole-width candidates the deeper start first, whatever their latency: a 2-layer one timed
    # faster than a 1-layer one (noise, or a narrower FFN) still starts before it; of one depth, those
    # near the line start after the others, the fastest (likeliest to pass as shipped) first
    deep = {"bert-1x384": 0.5, "bert-1x384-ffn768": 0.4, "bert-2x384-ffn192": 0.45, "bert-1x384-ffn192": 0.2,
            "bert-2x384-ffn384": 0.55, "bert-2x384-ffn768": 0.6}
    wide = [Candidate(name, "hf", (("num_hidden_layers", int(name[5])), ("hidden_size", 384)), build=None)
            for name in deep]
    assert [c.name for c in spread_order(wide, deep, lead=frozenset(deep),
                                         near_line=frozenset({"bert-2x384-ffn768", "bert-2x384-ffn384"}))] == [
        "bert-2x384-ffn192", "bert-2x384-ffn384", "bert-2x384-ffn768", "bert-1x384", "bert-1x384-ffn768",
        "bert-1x384-ffn192"]
    # the widest width below the teacher's leads from two layers: of one depth the widest first (then
    # the slowest), and any depth of two before one layer of the teacher's width (an AMX Xeon's main job
    # admits no 2-layer cut at 384: bert-2x256-ffn512 kept 94.7% at 3,000 steps, bert-1x384 93.0%)
    def cut(name):
        layers, hidden = name[5:].split("-")[0].split("x")
        return Candidate(name, "hf", (("num_hidden_layers", int(layers)), ("hidden_size", int(hidden))), build=None)

    narrow = {"bert-1x384": 0.5, "bert-1x384-ffn192": 0.2, "bert-2x256-ffn512": 0.45, "bert-2x256": 0.55,
              "bert-2x384-ffn192": 0.4, "bert-2x192": 0.3}
    assert [c.name for c in spread_order([cut(name) for name in narrow], narrow,
                                         lead=frozenset(narrow) - {"bert-2x192"})] == [
        "bert-2x384-ffn192", "bert-2x256", "bert-2x256-ffn512", "bert-1x384", "bert-1x384-ffn192", "bert-2x192"]
    assert [c.name for c in spread_order([cut(name) for name in narrow], narrow,
                                         lead=frozenset(narrow) - {"bert-2x192"},
                                         near_line=frozenset({"bert-2x256"}))] == [
        "bert-2x384-ffn192", "bert-2x256-ffn512", "bert-2x256", "bert-1x384", "bert-1x384-ffn192", "bert-2x192"]
    # from two layers the teacher's width starts before a deeper narrower cut (MRPC at 4x: bert-2x384-ffn384
    # before bert-3x256-ffn512), and a cut near the speed line after every one clear of it from two layers
    mrpc = {"bert-3x256-ffn512": 0.46, "bert-2x384-ffn384": 0.5, "bert-2x384-ffn192": 0.43, "bert-2x384-ffn768": 0.58,
            "bert-1x384": 0.4}
    assert [c.name for c in spread_order([cut(name) for name in mrpc], mrpc, lead=frozenset(mrpc),
                                         near_line=frozenset({"bert-2x384-ffn768"}))] == [
        "bert-2x384-ffn384", "bert-2x384-ffn192", "bert-3x256-ffn512", "bert-2x384-ffn768", "bert-1x384"]
    latency.update({"pretrained-minilm-l3": 0.25, "pretrained-minilm-l4": 0.35, "pretrained-minilm-l6": 0.55})
    candidates += [Candidate(name, "x", (), build=None, start="pretrained")
                   for name in ("pretrained-minilm-l3", "pretrained-minilm-l4", "pretrained-minilm-l6")]
    assert [c.name for c in spread_order(candidates, latency)][:9] == [
        "pretrained-minilm-l6", "bert-1x128", "bilstm-h150", "mobilebert-2x384", "pretrained-minilm-l4", "bert-2x256",
        "bilstm-h300", "pretrained-minilm-l3", "bert-2x128"]
    # a kind's augmented variants (same speed) take turns with it as a family of their own
    latency = {"bilstm-h150": 0.15, "bilstm-h150-aug": 0.15, "bilstm-h300": 0.45, "bilstm-h300-aug": 0.45}
    candidates = [Candidate(name, "x", (), build=None) for name in sorted(latency)]
    assert [c.name for c in spread_order(candidates, latency)] == ["bilstm-h150", "bilstm-h150-aug", "bilstm-h300",
                                                                   "bilstm-h300-aug"]


def test_candidates_are_ordered_by_the_speed_that_admitted_them_and_lead_cuts_are_named():
    from types import SimpleNamespace

    from kdbert.compress.speed import admitted_latency
    from kdbert.families.registry import Candidate
    from kdbert.families.selection import lead_cuts

    # bert-1x384 timed 0.57 ms alone, then 6x in turns: its latency is the teacher's 2.0 ms over 6
    table = {"teacher": {"latency_real_p50_ms": 2.0},
             "candidates": {"bert-1x384": {"latency_real_p50_ms": 0.57, "speedup": 6.0},
                            "bert-2x256": {"latency_real_p50_ms": 0.40, "speedup": 5.0}}}
    assert admitted_latency(table) == pytest.approx({"bert-1x384": 2.0 / 6.0, "bert-2x256": 0.4})
    # the teacher's whole width, and from two layers the widest width below it (256 under 384)
    shapes = {"bert-1x384": {"hidden_size": 384, "num_hidden_layers": 1},
              "bert-2x384-ffn768": {"hidden_size": 384, "num_hidden_layers": 2, "intermediate_size": 768},
              "bert-2x256": {"hidden_size": 256, "num_hidden_layers": 2},
              "bert-2x256-ffn512": {"hidden_size": 256, "num_hidden_layers": 2, "intermediate_size": 512},
              "bert-1x256": {"hidden_size": 256, "num_hidden_layers": 1},
              "bert-4x192": {"hidden_size": 192, "num_hidden_layers": 4}, "mobilebert-2x384": {"num_hidden_layers": 2},
              "bilstm-h384": {"hidden_size": 384}}
    candidates = [Candidate(name, "bilstm" if name.startswith("bilstm") else "hf", tuple(shape.items()), build=None)
                  for name, shape in shapes.items()]
    candidates.append(Candidate("pretrained-minilm-l6", "hf", (("hidden_size", 384),), build=None, start="pretrained"))
    assert lead_cuts(candidates, SimpleNamespace(hidden_size=384)) == {
        "bert-1x384", "bert-2x384-ffn768", "bert-2x256", "bert-2x256-ffn512"}
    # a teacher 256 wide: 192 is the widest below it, whatever is offered
    assert lead_cuts(candidates, SimpleNamespace(hidden_size=256)) == {"bert-2x256", "bert-2x256-ffn512",
                                                                       "bert-1x256", "bert-4x192"}


def test_distillation_time_adds_up_every_segment_of_a_candidate():
    from kdbert.compress.report import seconds_per_candidate

    searched = {"segments": [{"candidate": "a", "seconds": 10.2}, {"candidate": "b", "seconds": 3.1},
                             {"candidate": "a", "seconds": 20.5}, {"candidate": "a", "seconds": 41.0}]}
    assert seconds_per_candidate(searched) == {"a": 71.7, "b": 3.1}


NLTK_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "nltk_data"


@pytest.mark.skipif(not NLTK_DATA.is_dir(), reason="needs the offline nltk_data folder")
def test_augmented_variants_train_on_new_versions_of_the_rows_left_after_the_hold_out(env, tmp_path, capsys,
                                                                                        monkeypatch):
    from kdbert.augment.bilstm import BiLSTMAugmenter
    from kdbert.augment.pos_tagging import NltkTagger
    from kdbert.cli import main
    from kdbert.core import teacher_logits
    from kdbert.data.load import load_task

    labelled = []
    run_teacher = teacher_logits._run_teacher

    def counting(labeller, examples, *args, **kwargs):
        labelled.extend(examples)
        return run_teacher(labeller, examples, *args, **kwargs)

    monkeypatch.setattr(teacher_logits, "_run_teacher", counting)
    out = tmp_path / "compress"
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bilstm-h150", "--augment", "bilstm", "--augment-copies", "3", "--nltk-data",
            str(NLTK_DATA), "--rounds", "1", "--first-steps", "2", "--length-rows", "4", "--threads", "1",
            "--target-speedup", "0.01", "--keep", "runs", "--output-dir", str(out)]  # both runs are read below
    assert main(args) == 0
    report = json.loads((out / "compress_report.json").read_text())
    assert sorted(row["candidate"] for row in report["search"]["rounds"][0]) == ["bilstm-h150", "bilstm-h150-aug"]
    assert report["speed"]["candidates"]["bilstm-h150-aug"]["latency_real_p50_ms"] == \
        report["speed"]["candidates"]["bilstm-h150"]["latency_real_p50_ms"]

    # the versions come from the 10 training rows left after the teacher's hold-out, never from a held-out row
    data = load_task(TaskOptions("sst2", data_dir=str(env["root"] / "glue"), held_out_rows=str(env["teacher"])))
    texts = [row.texts[0] for row in data.train]
    expected = [v for versions in BiLSTMAugmenter.from_texts(texts, NltkTagger(NLTK_DATA), n_iter=3, seed=42)
                .augment([row.texts for row in data.train]) for v in versions[1:]]
    written = [json.loads(line)["sentence"] for line in (out / "augmented.jsonl").read_text().splitlines()]
    assert written == [v[0] for v in expected] and len(written) > 10
    facts = report["augmentation"]
    assert {k: facts[k] for k in ("file", "input_rows", "augmented_rows", "tries_per_row", "rows")} == {
        "file": str(out / "augmented.jsonl"), "input_rows": 10, "augmented_rows": 10, "tries_per_row": 3,
        "rows": len(written)}
    assert facts["affordable_rows"] > 10 * 3  # a tiny teacher labels fast: --augment-copies decided
    plain = json.loads((out / "runs" / "bilstm-h150" / "distill_report.json").read_text())
    variant = json.loads((out / "runs" / "bilstm-h150-aug" / "distill_report.json").read_text())
    assert (plain["train_rows"], variant["train_rows"], variant["unlabelled"]["rows"]) == \
        (10, 10 + len(written), len(written))
    # the teacher's int8 export labelled each distinct row once for both runs, at the speed it was timed at
    from collections import Counter

    counts = Counter(texts[0] for texts in labelled)
    assert {text: counts[text] for text in written} == {text: 1 for text in written}
    assert {text: counts[text] for text in texts} == {text: 1 for text in texts} and \
        len(counts) == len(set(texts) | set(written))
    assert report["labelling"]["onnx"] == str(out / "teacher-onnx" / "model.int8.onnx")
    assert variant["unlabelled"]["onnx"] == report["labelling"]["onnx"]
    assert "Candidates named -aug also trained on" in (out / "compress_report.md").read_text()

    stamp = (out / "augmented.jsonl").stat().st_mtime_ns
    assert main(args) == 0 and (out / "augmented.jsonl").stat().st_mtime_ns == stamp  # resumed: reused
    capsys.readouterr()
    # more training rows than augmentation would add: no variants, said in one line
    large = tmp_path / "large"
    assert main([*args[:-2], "--output-dir", str(large), "--augment-max-rows", "9"]) == 0
    report = json.loads((large / "compress_report.json").read_text())
    assert [row["candidate"] for row in report["search"]["rounds"][0]] == ["bilstm-h150"]
    assert report["augmentation"] is None and not (large / "augmented.jsonl").exists()
    assert report["augmentation_skipped"].startswith("--augment: no augmented variants: the 10 training rows are "
                                                     "more than --augment-max-rows 9")
    assert report["augmentation_skipped"] in capsys.readouterr().out
    assert main([*args[:-2], "--output-dir", str(tmp_path / "at-cap"), "--augment-max-rows", "10"]) == 0
    at_cap = json.loads((tmp_path / "at-cap" / "compress_report.json").read_text())
    assert sorted(row["candidate"] for row in at_cap["search"]["rounds"][0]) == ["bilstm-h150", "bilstm-h150-aug"]
    assert main([*args[:-2], "--output-dir", str(tmp_path / "other"), "--augment", "lstm"]) == 2
    assert ("--augment lstm: unknown kind 'lstm'; use kinds among bert, roberta, xlmr, electra, mpnet, distilbert, "
            "mobilebert, bilstm") in capsys.readouterr().err


@pytest.mark.skipif(not NLTK_DATA.is_dir(), reason="needs the offline nltk_data folder")
def test_augmented_rows_are_capped_by_what_the_teacher_can_label_and_a_rerun_keeps_the_plan(tmp_path):
    from kdbert.compress.augment import AugmentSettings, write_augmented_rows
    from kdbert.data.glue import Example

    rows = [Example((f"the {w} film was good and long",), 1) for w in ("first", "second", "third", "fourth")]
    settings = AugmentSettings(kinds=("bilstm",), copies=5, max_rows=100, nltk_data=str(NLTK_DATA))
    two_each = write_augmented_rows(rows, ["sentence"], tmp_path / "a", settings, 42, affordable=9)
    assert (two_each["augmented_rows"], two_each["tries_per_row"]) == (4, 2)  # 9 affordable // 4 rows
    first_rows = write_augmented_rows(rows, ["sentence"], tmp_path / "b", settings, 42, affordable=3)
    assert (first_rows["augmented_rows"], first_rows["tries_per_row"]) == (3, 1)  # not one each: the first 3
    written = (tmp_path / "b" / "augmented.jsonl").read_text()
    assert "fourth" not in written and first_rows["rows"] == len(written.splitlines())
    capped = write_augmented_rows(rows, ["sentence"], tmp_path / "c", replace(settings, max_rows=4), 42, 1000)
    assert capped["tries_per_row"] == 1
    # a rerun (timed again, at another speed) makes the same rows
    assert write_augmented_rows(rows, ["sentence"], tmp_path / "b", settings, 42, affordable=1000) == first_rows
    assert (tmp_path / "b" / "augmented.jsonl").read_text() == written
    (tmp_path / "b" / "augmented.json").unlink()
    with pytest.raises(KdbertError, match=r"augmented.jsonl has no plan \(.*augmented.json\): written by an earlier"):
        write_augmented_rows(rows, ["sentence"], tmp_path / "b", settings, 42, affordable=1000)


def test_transfer_text_gives_rows_of_sentences_tab_separated_texts_or_sentence_pairs(tmp_path):
    import gzip

    from kdbert.compress.transfer import read_transfer_text, rows_of_line, sentences

    line = "The cat sat on the mat. It was happy there! Short one. Then 3 dogs came in and barked loudly?"
    assert sentences(line) == ["The cat sat on the mat.", "It was happy there!",
                               "Then 3 dogs came in and barked loudly?"]  # "Short one." has under 4 words
    assert rows_of_line(line, 2) == [("The cat sat on the mat.", "It was happy there!")]  # the third has no mate
    assert rows_of_line("a first text\ta second text\tignored", 2) == [("a first text", "a second text")]
    assert rows_of_line("only one text\t", 2) == []
    corpus = tmp_path / "wiki.txt.gz"
    with gzip.open(corpus, "wt") as handle:
        handle.write('<doc id="1" title="Cats">\nCats\n\n' + line + "\n</doc>\n")
    rows = read_transfer_text([corpus], 1, 10, seed=0)
    assert sorted(rows) == sorted((s,) for s in sentences(line))  # "Cats" (a title) is too short
    assert read_transfer_text([corpus], 1, 2, seed=0) == rows[:2]  # shuffled once, then cut
    titles = tmp_path / "titles.txt"
    titles.write_text("Cats\nDogs and mats\n")
    with pytest.raises(KdbertError, match=r"--transfer-text .*titles.txt: no rows found; give text files with "
                                          r"lines of two tab-separated texts, or of two sentences"):
        read_transfer_text([titles], 2, 10, seed=0)


@pytest.mark.skipif(not NLTK_DATA.is_dir(), reason="needs the offline nltk_data folder")
def test_transfer_text_shares_the_labelling_cap_with_the_augmented_rows(tmp_path):
    from kdbert.compress.augment import AugmentSettings, variant_rows_file, write_augmented_rows
    from kdbert.data.glue import Example

    text = tmp_path / "in-domain.txt"
    text.write_text("\n".join(f"review number {i} says the film was fine" for i in range(50)) + "\n")
    rows = [Example((f"the {w} film was good and long",), 1) for w in ("first", "second", "third", "fourth")]
    settings = AugmentSettings.parse("bert", [str(text)], copies=5, max_rows=100, nltk_data=str(NLTK_DATA))
    out = tmp_path / "out"
    facts = write_augmented_rows(rows, ["sentence"], out, settings, 42, affordable=10)
    # 10 affordable: 5 for the versions (one each of the 4 rows), 5 rows of the text
    assert (facts["augmented_rows"], facts["tries_per_row"], facts["transfer_rows"]) == (4, 1, 5)
    versions = (out / "augmented.jsonl").read_text().splitlines()
    combined = (out / "transfer.jsonl").read_text().splitlines()
    assert combined[:len(versions)] == versions and len(combined) == len(versions) + 5
    assert all(json.loads(r)["sentence"].startswith("review number") for r in combined[len(versions):])
    assert variant_rows_file(out) == out / "transfer.jsonl"
    assert variant_rows_file(tmp_path / "b") == tmp_path / "b" / "augmented.jsonl"  # no plan: the versions
    with pytest.raises(KdbertError, match=r"--transfer-text is what the -aug variants distil on: pass --augment "
                                          r"KINDS too"):
        AugmentSettings.parse(None, [str(text)])


def test_the_teachers_held_out_rows_are_found_in_its_folder_not_guessed(env, tmp_path):
    from kdbert.compress.teacher import held_out_task
    from kdbert.data.load import load_task

    task = replace(env["task"], held_out_fraction=0.1)

    def teacher(record: Path | None = None, **identity) -> str:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        (folder / "run_config.json").write_text(json.dumps(identity))
        if record is not None:
            shutil.copy(record / "held_out.json", folder)
        return str(folder)

    finetuned = {"command": "finetune", "task": "sst2", "train_file": None}
    # recorded: those rows, whatever share the search was asked for (the record's 2 of 12, not 10%)
    found, facts = held_out_task(teacher(env["teacher"], **finetuned, held_out_fraction=0.2), task, False)
    assert (found.held_out_rows, found.held_out_fraction, facts["teacher_saw_held_out_rows"]) == (
        facts["source"].split(" (")[0].removesuffix("/held_out.json"), 0.2, False)
    assert [r.texts for r in load_task(found).held_out] == [r.texts for r in load_task(
        replace(task, held_out_fraction=0.2)).held_out]
    assert facts["teacher_picked_on_deciding_rows"] is False  # the record lists the rows it did not pick on
    # a record written before those rows were: the teacher picked on all of them, which the report says
    older = Path(teacher(env["teacher"], **finetuned, held_out_fraction=0.2))
    recorded = json.loads((older / "held_out.json").read_text())
    del recorded["decide"]
    (older / "held_out.json").write_text(json.dumps(recorded))
    assert held_out_task(str(older), task, False)[1]["teacher_picked_on_deciding_rows"] is True
    # fine-tuned with a share before the rows were recorded: that share, as this task's rows are drawn uniformly
    legacy, facts = held_out_task(teacher(**finetuned, held_out_fraction=0.25), task, False)
    assert (legacy.held_out_fraction, legacy.held_out_rows, facts["teacher_saw_held_out_rows"]) == (0.25, None, False)
    # nothing says which rows it never saw: refused, naming the command, unless the user accepts it
    for folder in (teacher(**finetuned), teacher(command="distill task", task="sst2"), str(tmp_path / "hub")):
        with pytest.raises(KdbertError, match=r"does not say which training rows it never trained on .*"
                                              r"`kdbert finetune --task sst2 --held-out-fraction 0.1`"):
            held_out_task(folder, task, False)
        assert held_out_task(folder, task, True) == (task, {"source": "--teacher-trained-on-all-rows",
                                                            "teacher_saw_held_out_rows": True})


def test_a_legacy_teacher_of_a_task_now_held_out_by_length_is_refused(tmp_path):
    from kdbert.compress.teacher import held_out_task

    phrases = [f"word{i} word{i + 1}" for i in range(200)]  # training phrases of 2 words, dev sentences of 12
    sentences = [" ".join(f"w{i}x{k}" for k in range(12)) for i in range(60)]
    (tmp_path / "SST-2").mkdir()
    for split, texts in (("train", phrases), ("dev", sentences)):
        (tmp_path / "SST-2" / f"{split}.tsv").write_text(
            "sentence\tlabel\n" + "".join(f"{text}\t{i % 2}\n" for i, text in enumerate(texts)))
    folder = tmp_path / "teacher"
    folder.mkdir()
    (folder / "run_config.json").write_text(json.dumps(
        {"command": "finetune", "task": "sst2", "train_file": None, "held_out_fraction": 0.1}))
    with pytest.raises(KdbertError, match="was fine-tuned before kdbert recorded its held-out rows, and sst2's rows "
                                          "are now held out to look like dev"):
        held_out_task(str(folder), TaskOptions("sst2", data_dir=str(tmp_path), held_out_fraction=0.1), False)


def test_compress_refuses_a_teacher_that_does_not_say_which_rows_it_never_saw(env, tmp_path, capsys, monkeypatch):
    from kdbert.compress import pipeline

    unrecorded = tmp_path / "teacher"
    shutil.copytree(env["teacher"], unrecorded)
    (unrecorded / "held_out.json").unlink()
    line = refused(capsys, {**env, "teacher": unrecorded}, tmp_path / "compress")
    assert "does not say which training rows it never trained on" in line and "--teacher-trained-on-all-rows" in line

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(pipeline, "checked_teacher", stop)  # the first step after the hold-out
    config = pipeline.CompressConfig(teacher=str(unrecorded), target_speedup=4.0, teacher_trained_on_all_rows=True)
    with pytest.raises(Stop):
        pipeline.compress(replace(env["task"], held_out_fraction=0.2), config, tmp_path / "out")
    assert "rows the teacher trained on (--teacher-trained-on-all-rows: kept shares read high)" in \
        capsys.readouterr().out


def test_the_labelling_speed_is_timed_after_a_warm_up_and_scaled_by_the_tokens_labelled(monkeypatch, tmp_path):
    """The first labelling of a process pays the runtime's start-up (CUDA's, on a GPU): timed, it would
    make the teacher look slow and cap the augmented rows far below what it labels. The rate is per
    token the labeller runs on, so rows longer than the sample's cost more."""
    from kdbert.compress import labelling

    calls, ticks = [], iter([10.0, 12.0])  # the timed labelling takes 2 s
    monkeypatch.setattr(labelling, "label_rows", lambda labeller, rows, folder: calls.append((list(rows), folder)))
    monkeypatch.setattr(labelling, "padded_tokens", lambda labeller, rows: sum(len(texts[0]) for texts in rows))
    texts = [("x" * n,) for n in range(1, 41)]  # 40 rows of 1 to 40 "tokens"
    to_label = texts[20:]  # 21 to 40: 610 tokens, 30.5 a row
    seconds = labelling.measured_row_seconds(None, texts, to_label, str(tmp_path), sample=12, clock=lambda: next(ticks))
    (warm_up, first_store), (timed, timed_store) = calls
    assert len(warm_up) == labelling.WARM_UP_ROWS and len(timed) == 12 - labelling.WARM_UP_ROWS
    assert set(warm_up + timed) <= set(to_label) and not set(warm_up) & set(timed)
    assert first_store == timed_store == str(tmp_path)  # the sample stays in the store the runs read
    assert seconds == pytest.approx(2.0 / sum(len(t[0]) for t in timed) * 30.5)
    # nothing left to label (augmented rows still need the rate): a sample of all rows, in stores of its own
    calls.clear()
    ticks = iter([0.0, 1.0])
    labelling.measured_row_seconds(None, texts, [], str(tmp_path), sample=12, clock=lambda: next(ticks))
    assert str(tmp_path) not in {folder for _, folder in calls}


def test_a_segment_line_says_rung_candidate_steps_held_out_score_and_seconds():
    from kdbert.compress.search import segment_line

    row = {"candidate": "bert-2x256", "rung": 2, "steps": 800, "trained": 400, "score": 84.567, "seconds": 61.4}
    assert segment_line(row) == "rung 2  bert-2x256  800 steps (+400)  held-out 84.57  61 s"
    assert segment_line({**row, "steps": 650, "trained": 250, "stopped": True}) == \
        "rung 2  bert-2x256  650 steps (+250) (stopped at the budget's end)  held-out 84.57  61 s"


def test_a_segment_past_the_window_stops_early_scored_and_keeps_the_steps_it_trained(env, tmp_path):
    from kdbert.compress import search
    from kdbert.compress.recipes import SearchSettings
    from kdbert.compress.schedule import Job

    settings = SearchSettings(first_steps=6, batch_size=2)
    plan = _plan(env, ["bert-1x128"], tmp_path, settings, seconds=-1.0)  # --selection importance, the default
    search.build_starts(plan)
    assert json.loads((tmp_path / "starts" / "bert-1x128" / "student_init.json").read_text())["selection"] == "importance"
    assert (tmp_path / "importance.safetensors").is_file()  # ranked once, even past the window (on one batch)
    row = search.distil_segment(plan, Job("bert-1x128", 0, 6), done_steps=0)
    assert (row["steps"], row["trained"], row["stopped"]) == (1, 1, True) and row["score"] == \
        json.loads((tmp_path / "runs" / "bert-1x128" / "distill_report.json").read_text())["dev_metrics"]["selection_score"]
    assert "precision:" in (tmp_path / "runs" / "bert-1x128.log").read_text()  # the run's own lines, in its log
    # resumed in a later window, the run goes on from its step 1 to its rung's end
    row = search.distil_segment(replace(plan, window=search.Window.from_now(600, 1.0)), Job("bert-1x128", 0, 6), 1)
    assert (row["steps"], row["trained"], row["stopped"]) == (6, 5, False)


@pytest.mark.parametrize("selection", ["ends", "bottom"])
def test_selection_of_layers_builds_starts_from_the_teacher_layers_it_names(env, tmp_path, selection):
    from kdbert.compress import search
    from kdbert.compress.recipes import SearchSettings

    plan = replace(_plan(env, ["bert-1x128"], tmp_path, SearchSettings(first_steps=6, batch_size=2)),
                   selection=selection)
    search.build_starts(plan)  # the layers themselves: test_weight_selection's layer-map tests
    start = tmp_path / "starts" / "bert-1x128"
    assert json.loads((start / "student_init.json").read_text())["selection"] == selection
    from transformers import AutoModelForSequenceClassification

    from kdbert.families.selection import evenly_spaced

    student = AutoModelForSequenceClassification.from_pretrained(start).bert.encoder.layer[0]
    teacher = AutoModelForSequenceClassification.from_pretrained(env["teacher"]).bert.encoder.layer
    copied = teacher[1 if selection == "ends" else 0]  # of the 2-layer tiny teacher: its last, its first
    units = evenly_spaced(student.output.LayerNorm.weight.numel(), copied.output.LayerNorm.weight.numel())
    ffn = evenly_spaced(student.intermediate.dense.weight.shape[0], copied.intermediate.dense.weight.shape[0])
    assert torch.equal(student.output.dense.weight, copied.output.dense.weight[units][:, ffn])


@pytest.mark.parametrize("head", ["teacher", "fresh"])
def test_starts_take_the_teachers_task_head_unless_asked_for_a_fresh_one(env, tmp_path, head):
    from transformers import AutoModelForSequenceClassification

    from kdbert.compress import search
    from kdbert.compress.recipes import SearchSettings
    from kdbert.families.selection import evenly_spaced

    plan = replace(_plan(env, ["bert-1x128"], tmp_path, SearchSettings(first_steps=6, batch_size=2)), head=head)
    search.build_starts(plan)
    start = tmp_path / "starts" / "bert-1x128"
    assert json.loads((start / "student_init.json").read_text())["head"] == head
    student = AutoModelForSequenceClassification.from_pretrained(start).classifier
    teacher = AutoModelForSequenceClassification.from_pretrained(env["teacher"]).classifier
    units = evenly_spaced(student.weight.shape[1], teacher.weight.shape[1])
    assert torch.equal(student.weight, teacher.weight[:, units]) == (head == "teacher")


def refused(capsys, env, out, *extra, created: bool = False) -> str:
    """``kdbert compress`` with ``extra`` options into ``out``: exit 2 with one error line (returned),
    and nothing written: no ``out`` (unless it was there before: ``created``)."""
    from kdbert.cli import main

    capsys.readouterr()
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--target-speedup", "2", "--output-dir", str(out), *extra]
    code = main([str(a) for a in args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("kdbert: error: "), err
    assert created or not out.exists()
    return err


@pytest.mark.parametrize("minutes", ["0", "-2"])
def test_a_budget_that_is_not_positive_is_refused_in_one_line(env, tmp_path, capsys, minutes):
    line = refused(capsys, env, tmp_path / "compress", "--budget-minutes", minutes)
    assert f"--budget-minutes must be a positive finite number (got {float(minutes)})" in line


def test_an_output_dir_that_cannot_be_written_is_refused_in_one_line(env, tmp_path, capsys):
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a folder")
    out = in_the_way / "compress"
    line = refused(capsys, env, out, "--budget-minutes", "1")
    assert line.endswith(f"--output-dir {out}: {in_the_way} is a file, not a folder; choose another --output-dir")
    assert in_the_way.read_text() == "not a folder"
    line = refused(capsys, env, in_the_way, "--budget-minutes", "1", created=True)
    assert f"--output-dir {in_the_way}: {in_the_way} is a file" in line and in_the_way.read_text() == "not a folder"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_output_dir_without_write_permission_is_refused_in_one_line(env, tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        line = refused(capsys, env, locked / "compress", "--budget-minutes", "1")
    finally:
        locked.chmod(0o700)
    assert line.endswith(f"cannot create files in {locked} (Permission denied); choose another --output-dir")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_output_dir_where_no_file_can_be_created_is_refused_even_for_root(env, capsys):
    # /proc takes no new files whoever asks, root included, whatever its permission bits say
    line = refused(capsys, env, Path("/proc/kdbert-test/compress"), "--budget-minutes", "1", created=True)
    assert line.endswith("--output-dir /proc/kdbert-test/compress: cannot create files in /proc (No such file or "
                         "directory); choose another --output-dir")


def test_a_teacher_that_is_not_a_classifier_for_the_task_is_refused_in_one_line(env, tmp_path, capsys,
                                                                               tiny_tokenizer):
    from transformers import BertModel

    from conftest import tiny_bert_config

    encoder = tmp_path / "encoder"  # a model without a classifier head
    BertModel(tiny_bert_config(tiny_tokenizer)).save_pretrained(encoder)
    tiny_tokenizer.save_pretrained(encoder)
    three_labels = save_tiny_classifier(tmp_path / "three", tiny_tokenizer, num_labels=3)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "compress"
    cases = {encoder: f"{encoder} is not a fine-tuned sequence-classification model (architectures: ['BertModel'])",
             three_labels: f"{three_labels} has a classifier with 3 output(s) but the task needs 2",
             empty: f"model folder {empty} has no config.json",
             tmp_path / "missing": f"--teacher {tmp_path / 'missing'} is not a folder"}
    for teacher, says in cases.items():
        assert says in refused(capsys, {**env, "teacher": teacher}, out, "--budget-minutes", "1")


def test_a_student_the_user_brings_is_timed_and_distilled_from_its_own_weights(env, tmp_path, capsys,
                                                                             tiny_tokenizer):
    from transformers import BertForSequenceClassification, BertModel

    from conftest import tiny_bert_config
    from kdbert.cli import main

    mine = tmp_path / "my small-bert"  # any folder name: the candidate is user-my-small-bert
    torch.manual_seed(3)
    BertModel(tiny_bert_config(tiny_tokenizer, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=64)).save_pretrained(mine)
    tiny_tokenizer.save_pretrained(mine)
    out = tmp_path / "compress"
    capsys.readouterr()
    assert main(["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
                 "--candidates", "bert-1x128", "--student", str(mine), "--rounds", "1", "--first-steps", "2",
                 "--batch-size", "4", "--length-rows", "4", "--threads", "1", "--target-speedup", "0.01",
                 "--keep", "runs", "--output-dir", str(out)]) == 0  # the user's start is read below
    report = json.loads((out / "compress_report.json").read_text())
    assert report["starts"] == {"bert-1x128": "teacher-weights", "user-my-small-bert": "user"}
    row = report["speed"]["candidates"]["user-my-small-bert"]
    assert (row["shape"]["path"], row["shape"]["hidden_size"]) == (str(mine), 32)
    assert {s["candidate"] for s in report["search"]["segments"]} == {"bert-1x128", "user-my-small-bert"}
    start = BertForSequenceClassification.from_pretrained(out / "starts" / "user-my-small-bert")
    own = BertModel.from_pretrained(mine).state_dict()
    assert all(torch.equal(value, own[key]) for key, value in start.bert.state_dict().items())
    assert "| kd, user start |" in (out / "compress_report.md").read_text()


def test_students_of_their_own_tokenizer_learn_the_stored_teacher_logits_and_ship_with_it(env, tmp_path, capsys,
                                                                                      monkeypatch):
    import kdbert
    from transformers import AutoTokenizer

    from conftest import count_teacher_runs, save_char_student
    from kdbert.cli import main
    from kdbert.compress import pipeline
    from kdbert.data.load import load_task

    pretrained = save_char_student(tmp_path / "char-pretrained", seed=2)
    monkeypatch.setattr(pipeline, "PRETRAINED_STUDENTS",
                        {"pretrained-char": pipeline.PretrainedStudent(lambda: str(pretrained))})
    mine = save_char_student(tmp_path / "char bert", seed=3, hidden_size=16)
    seen = count_teacher_runs(monkeypatch)
    out = tmp_path / "compress"
    capsys.readouterr()
    assert main(["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
                 "--candidates", "pretrained-char", "--student", str(mine), "--rounds", "1", "--first-steps", "2",
                 "--batch-size", "4", "--length-rows", "4", "--threads", "1", "--target-speedup", "0.01",
                 "--keep", "runs", "--output-dir", str(out)]) == 0  # both runs are read below
    report = json.loads((out / "compress_report.json").read_text())
    assert report["starts"] == {"pretrained-char": "pretrained", "user-char-bert": "user"}
    assert {name: row["shape"]["tokenizer"] for name, row in report["speed"]["candidates"].items()} == {
        "pretrained-char": "own", "user-char-bert": "own"}
    assert {(s["candidate"], s["method"]) for s in report["search"]["segments"]} == {("pretrained-char", "kd"),
                                                                                   ("user-char-bert", "kd")}
    # the teacher labelled each training row once for both, with its tokenizer; no token-level cache
    train = load_task(TaskOptions("sst2", data_dir=str(env["root"] / "glue"), held_out_rows=str(env["teacher"]),
                                  decide_share=0.5)).train
    assert sorted(seen) == sorted(row.texts for row in train) and not (out / "teacher-cache").exists()
    for name in ("pretrained-char", "user-char-bert"):
        run = json.loads((out / "runs" / name / "distill_report.json").read_text())
        assert run["teacher_logits"]["store"] == report["labelling"]["cache"] and run["student_tokenizer"]["rows_cut"] == 0
    assert "| kd, pretrained start |" in (out / "compress_report.md").read_text()
    # shipped with its own tokenizer: `kdbert predict` reads it
    own = AutoTokenizer.from_pretrained(mine).get_vocab()
    assert AutoTokenizer.from_pretrained(out / "winner").get_vocab() == own
    assert len(kdbert.load(str(out / "winner")).predict(["the cat sat", "a dog ran fast"])) == 2


def test_a_student_of_another_vocabulary_without_a_tokenizer_is_refused_naming_the_difference(env, tmp_path, capsys,
                                                                                          tiny_tokenizer):
    from transformers import BertModel

    from conftest import tiny_bert_config

    vocab = tiny_tokenizer.get_vocab()
    bigger = tmp_path / "bigger"
    BertModel(tiny_bert_config(tiny_tokenizer, vocab_size=len(vocab) + 5, hidden_size=32, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=64)).save_pretrained(bigger)
    line = refused(capsys, env, tmp_path / "compress", "--student", bigger)
    assert line == (f"kdbert: error: --student {bigger} uses a different vocabulary from the teacher's "
                    f"({len(vocab) + 5} tokens, the teacher {len(vocab)}) and has no tokenizer of its own; save its "
                    "tokenizer in that folder (tokenizer.save_pretrained)")


def test_the_packaged_minilm_is_offered_as_a_student_only_under_a_bigger_teacher(env, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from transformers import AutoConfig, AutoTokenizer, BertForSequenceClassification

    from conftest import save_char_student
    from kdbert.compress import pipeline
    from kdbert.core.loading import default_model_path
    from kdbert.data.load import load_task
    from kdbert.data.tasks import SQUAD_TASKS

    context = speed.shape_context(env["teacher"], env["task"])
    spec = load_task(env["task"]).spec

    def teacher(config, tokenizer):
        with torch.device("meta"):  # its size, not its weights
            return SimpleNamespace(model=BertForSequenceClassification(config), tokenizer=tokenizer)

    minilm = AutoConfig.from_pretrained(default_model_path())
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())

    def names(found):
        return [(c.name, c.start, c.tokenizer) for c in found]

    # fine-tuned from it (the default teacher): as big, not offered; one more layer: offered, on its tokenizer
    assert pipeline.pretrained_students(teacher(minilm, tokenizer), context, spec) == []
    deeper = AutoConfig.from_pretrained(default_model_path(), num_hidden_layers=7)
    offered = pipeline.pretrained_students(teacher(deeper, tokenizer), context, spec)
    assert names(offered) == [(f"pretrained-minilm-{cut}", "pretrained", None) for cut in ("l6", "l4", "l4-ffn512", "l3")]
    assert [dict(c.shape)["num_hidden_layers"] for c in offered] == [6, 4, 4, 3]
    assert [dict(c.shape).get("intermediate_size") for c in offered] == [None, None, 512, None]
    # a tiny pre-trained student of its own tokenizer under the tiny teacher, not under a smaller one
    student = save_char_student(tmp_path / "char", max_position_embeddings=64)
    monkeypatch.setattr(pipeline, "PRETRAINED_STUDENTS",
                        {"pretrained-char": pipeline.PretrainedStudent(lambda: str(student))})
    big = SimpleNamespace(model=load_task_model(str(env["teacher"]), spec), tokenizer=context.tokenizer)
    assert names(pipeline.pretrained_students(big, context, spec)) == [("pretrained-char", "pretrained", str(student))]
    small = save_tiny_classifier(tmp_path / "small", context.tokenizer, hidden_size=4, num_hidden_layers=1,
                                 num_attention_heads=1, intermediate_size=4, max_position_embeddings=16)
    assert pipeline.pretrained_students(SimpleNamespace(model=load_task_model(str(small), spec),
                                                        tokenizer=context.tokenizer), context, spec) == []
    # question answering's per-token targets cannot cross tokenizers: not offered there
    assert pipeline.pretrained_students(big, context, SQUAD_TASKS["squad"]) == []


def test_a_pretrained_student_cut_to_fewer_layers_keeps_its_first_and_last_and_its_own_weights(env, tmp_path):
    """Cut to 3 of 5 layers, the student keeps the folder's 1st, 3rd and 5th: the cut computes what
    the whole model computes with only those layers, pooling as the folder does."""
    from transformers import AutoModelForSequenceClassification

    from conftest import save_char_student
    from kdbert.compress import speed
    from kdbert.core.pooling import pooling_of
    from kdbert.families.hf import user_candidate

    folder = save_char_student(tmp_path / "char", seed=4, num_hidden_layers=5)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    context = speed.shape_context(env["teacher"], env["task"])
    cut = user_candidate(str(folder), "pretrained-char-l3", own_tokenizer=True, start="pretrained", depth=3)
    assert dict(cut.shape)["num_hidden_layers"] == 3
    model = cut.from_teacher(None, context).eval()
    assert model.config.num_hidden_layers == 3 and pooling_of(model.config) == "mean"
    whole = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=context.num_labels).eval()
    whole.bert.encoder.layer = torch.nn.ModuleList([whole.bert.encoder.layer[i] for i in (0, 2, 4)])
    whole.classifier.load_state_dict(model.classifier.state_dict())
    tokenizer = cut.build(context)[1]
    batch = tokenizer(["the cat sat", "a dog ran fast"], padding=True, return_tensors="pt")
    mask = batch["attention_mask"].unsqueeze(-1).float()
    with torch.no_grad():
        hidden = whole.bert(**batch).last_hidden_state
        expected = whole.classifier((hidden * mask).sum(1) / mask.sum(1))  # mean pooling by hand
        assert torch.allclose(model(**batch).logits, expected, atol=1e-5)
    with pytest.raises(KdbertError, match="cannot cut .* to 6 layers: it has 5"):
        user_candidate(str(folder), "too-deep", depth=6)


def test_a_pretrained_student_cut_to_fewer_ffn_units_keeps_those_that_write_most(env, tmp_path):
    """Cut to 8 of 16 FFN units per layer, each layer keeps its 8 highest-scoring units (not evenly
    spaced ones), and the cut computes what the whole model computes with the other units silenced."""
    from conftest import save_char_student
    from transformers import AutoModelForSequenceClassification

    from kdbert.compress import speed
    from kdbert.families.hf import user_candidate
    from kdbert.families.importance import ffn_activation_importance
    from kdbert.families.selection import LAYOUTS, evenly_spaced, top

    folder = save_char_student(tmp_path / "char", seed=5, num_hidden_layers=3)
    context = speed.shape_context(env["teacher"], env["task"])
    candidate = user_candidate(str(folder), "char-ffn8", own_tokenizer=True, start="pretrained", ffn=8)
    assert dict(candidate.shape)["intermediate_size"] == 8
    model = candidate.from_teacher(None, context).eval()
    tokenizer = candidate.build(context)[1]
    whole = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=context.num_labels).eval()
    scores = ffn_activation_importance(whole, LAYOUTS["bert"], tokenizer, list(context.texts))
    with torch.no_grad():
        for index, (cut, full) in enumerate(zip(model.bert.encoder.layer, whole.bert.encoder.layer)):
            kept = top(scores[index], 8)
            assert torch.equal(cut.intermediate.dense.weight, full.intermediate.dense.weight[kept])
            assert not torch.equal(kept, evenly_spaced(8, 16))
            silenced = torch.ones(16, dtype=torch.bool)
            silenced[kept] = False
            full.output.dense.weight[:, silenced] = 0
        whole.classifier.load_state_dict(model.classifier.state_dict())
        batch = tokenizer(["the cat sat", "a dog ran fast"], padding=True, return_tensors="pt")
        assert torch.allclose(model(**batch).logits, whole(**batch).logits, atol=1e-5)
    with pytest.raises(KdbertError, match="cannot cut .*'s FFN to 32 units: it has 16"):
        user_candidate(str(folder), "too-wide", ffn=32)


def test_every_compress_option_is_part_of_a_searchs_identity_unless_said_otherwise():
    from dataclasses import dataclass, fields

    from kdbert.compress.options import OUTSIDE_IDENTITY, CompressConfig, search_identity
    from kdbert.options import option

    @dataclass
    class WithNewOption(CompressConfig):
        new_option: int = option(3, "an option added later", type=int, group="compress")

    task = TaskOptions("sst2", held_out_fraction=0.1)
    identity = search_identity(WithNewOption(teacher="t", target_speedup=2.0), task, "t")
    assert identity["options"]["new_option"] == 3  # a new option changes the identity unless exempted
    assert set(OUTSIDE_IDENTITY) < {f.name for f in fields(CompressConfig)}  # no exemption names a lost option
    assert not set(OUTSIDE_IDENTITY) & set(identity["options"])
    assert {"seed", "learning_rate", "candidates", "min_kept", "augment"} <= set(identity["options"])


def test_the_search_settings_take_compress_options_and_their_defaults_from_one_place():
    from kdbert.compress.options import CompressConfig
    from kdbert.compress.recipes import SearchSettings

    assert SearchSettings() == SearchSettings.of(CompressConfig(teacher="t", target_speedup=2.0))
    given = SearchSettings.of(CompressConfig(teacher="t", target_speedup=2.0, rounds=3, seed=7, round_share="steps"))
    assert (given.rounds, given.seed, given.round_share) == (3, 7, "steps")


def _tiny_compress_args(env, out) -> list[str]:
    return ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bert-1x128,bert-2x128", "--rounds", "1", "--first-steps", "2", "--batch-size", "4",
            "--length-rows", "4", "--threads", "1", "--target-speedup", "0.01", "--no-progress",
            "--output-dir", str(out)]


def test_compress_keeps_what_the_shipped_winner_needs_and_says_how_much(env, tmp_path, capsys):
    from kdbert.cli import main

    out = tmp_path / "shipped"
    assert main(_tiny_compress_args(env, out)) == 0
    report = json.loads((out / "compress_report.json").read_text())
    checked = {check["candidate"] for check in report["shipped"]["checks"]}
    assert {run.name for run in (out / "runs").iterdir() if run.is_dir()} == checked
    assert all((out / "runs" / name / "model.safetensors").is_file() for name in checked)
    assert not any((out / "runs" / name / "checkpoints").exists() for name in checked)
    assert {start.parent.name for start in (out / "starts").glob("*/model.safetensors")} == checked
    assert {start.name for start in (out / "starts").iterdir()} == {"bert-1x128", "bert-2x128"}  # their records
    assert report["disk"]["keep"] == "shipped" and 0 < report["disk"]["kept_mb"] < report["disk"]["written_mb"]
    assert f"keeps {report['disk']['kept_mb']:.0f} MB (--keep shipped)" in (out / "compress_report.md").read_text()

    everything = tmp_path / "runs"
    assert main([*_tiny_compress_args(env, everything), "--keep", "runs"]) == 0
    report = json.loads((everything / "compress_report.json").read_text())
    assert {run.name for run in (everything / "runs").iterdir() if run.is_dir()} == {"bert-1x128", "bert-2x128"}
    assert all((everything / "runs" / name / "checkpoints").is_dir() for name in ("bert-1x128", "bert-2x128"))
    assert report["disk"]["kept_mb"] == report["disk"]["written_mb"]


def test_a_full_disk_stops_compress_in_one_line_and_the_rerun_continues_the_search(env, tmp_path, capsys,
                                                                                 monkeypatch):
    import errno

    from kdbert.cli import main
    from kdbert.compress import search

    out = tmp_path / "compress"
    distilled = []
    real = search.distil_segment

    def disk_fills_after_one_segment(*args, **kwargs):
        if distilled:
            raise OSError(errno.ENOSPC, "No space left on device")
        distilled.append(args[1].candidate)
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "distil_segment", disk_fills_after_one_segment)
    capsys.readouterr()
    assert main(_tiny_compress_args(env, out)) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"kdbert: error: the disk holding --output-dir {out} is full (") and \
        error.endswith("rerun the same command, which continues the search from its last finished segment")
    monkeypatch.setattr(search, "distil_segment", real)
    assert main(_tiny_compress_args(env, out)) == 0
    segments = json.loads((out / "compress_report.json").read_text())["search"]["segments"]
    first = [row for row in segments if row["candidate"] == distilled[0]]
    assert len(first) == 1 and len(segments) == 2  # the segment done before the disk filled was kept, not redone


def test_labelling_that_outlasts_the_first_round_leaves_its_candidates_out_or_refuses_the_budget():
    """Hand numbers: 1,000 rows of which 400 stored, 0.5 s a row: 300 s of labelling. A 900 s
    window starts candidates in its first 300 s (a third): labelling fits exactly; in a 600 s window
    (200 s) the BiLSTM is left out, with the budget that admits it: ceil(2 min outside the window +
    300 s / (1/3) / 60) = 17 min; with only readers of stored logits, that line refuses the budget."""
    from kdbert.compress.labelling import Labelling, afford_labelling
    from kdbert.compress.recipes import SearchSettings, reads_stored_logits, run_options
    from kdbert.families.registry import Candidate

    bert = Candidate("bert-1x128", "hf", (), build=None, from_teacher=lambda teacher, context: teacher)
    bilstm = Candidate("bilstm-h150", "bilstm", (), build=None)
    labelling = Labelling("/cache", "/out/teacher-onnx/model.int8.onnx", rows=1000, stored=400, row_seconds=0.5)
    assert labelling.seconds == 300
    assert afford_labelling([bert, bilstm], labelling, 900, 1 / 3, 2.0, 20) == ([bert, bilstm], None, labelling)
    kept, line, _ = afford_labelling([bert, bilstm], labelling, 600, 1 / 3, 2.0, 20)
    assert kept == [bert] and line.startswith("left out: bilstm-h150 learn from the teacher's labels of the 1,000")
    assert "export model.int8.onnx labels the 600 not stored yet in about 5.0 min here (2 rows/s)" in line
    assert "than the 3.3 min in which candidates start; --budget-minutes 17 or more admits them" in line
    assert "\n" not in line
    with pytest.raises(KdbertError, match=r"^--budget-minutes 20 is too short to label the rows: bilstm-h150 learn"):
        afford_labelling([bilstm], labelling, 600, 1 / 3, 2.0, 20)
    assert afford_labelling([bert], labelling, 60, 1 / 3, 2.0, 20) == ([bert], None, labelling)  # no reader
    # more readers than the line names: their count and the first three
    many = [Candidate(f"bilstm-h{h}", "bilstm", (), build=None) for h in (100, 150, 200, 300)]
    with pytest.raises(KdbertError, match=r"rows: 4 candidates \(bilstm-h100, bilstm-h150, bilstm-h200, \.\.\.\) learn"):
        afford_labelling(many, labelling, 600, 1 / 3, 2.0, 20)
    # a candidate distilled by logit KD alone reads the export's labels where they fit, else runs the teacher beside
    settings, tinybert = SearchSettings(kd_labels="export"), SearchSettings(kd_labels="export", intermediate_share=0.5)
    assert not afford_labelling([bert], labelling, 900, 1 / 3, 2.0, 20, SearchSettings())[2].kd  # beside: the default
    assert afford_labelling([bert], labelling, 900, 1 / 3, 2.0, 20, settings)[2].kd
    assert not afford_labelling([bert], labelling, 600, 1 / 3, 2.0, 20, settings)[2].kd
    assert not afford_labelling([bert], replace(labelling, onnx=None), 900, 1 / 3, 2.0, 20, settings)[2].kd
    assert reads_stored_logits(bert, settings, export_labels=True) and not reads_stored_logits(bert, settings)
    assert not reads_stored_logits(bert, SearchSettings(), export_labels=True)
    assert not reads_stored_logits(bert, tinybert, export_labels=True)  # its intermediate stage reads the teacher
    options = run_options(bert, 100, settings, "/cache/teacher", export_labels=True)
    assert "teacher_cache" not in options and run_options(bert, 100, settings, "/cache/teacher")["teacher_cache"]


def test_a_second_search_of_the_teacher_reads_its_export_and_stored_labels_and_a_budget_that_cannot_label_is_refused(
        env, tmp_path, capsys, monkeypatch):
    from conftest import count_teacher_runs

    from kdbert.cli import main
    from kdbert.compress import labelling

    exported = []
    export_model = speed.export_model
    monkeypatch.setattr(speed, "export_model", lambda *a, **k: exported.append(a[0]) or export_model(*a, **k))
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bilstm-h150", "--rounds", "1", "--first-steps", "2", "--length-rows", "4",
            "--threads", "1", "--target-speedup", "0.01"]  # int8: the graph chosen by timing, kept for later
    seen = count_teacher_runs(monkeypatch)
    assert main([*args, "--output-dir", str(tmp_path / "first")]) == 0
    report = json.loads((tmp_path / "first" / "compress_report.json").read_text())
    first = report["labelling"]
    # labelled once each (the timing's sample stays in the store)
    assert (first["rows"], first["stored"], first["left_out"]) == (10, 0, None) and len(seen) == 10
    assert first["onnx"].endswith("teacher-onnx/model.int8.onnx") and first["row_seconds"] > 0
    assert report["speed"]["teacher"]["export"].startswith("exported, kept in ")
    assert exported.count(str(env["teacher"])) == 1
    made_in = report["speed"]["teacher"]["export_seconds"]
    # another search of the same teacher reads its export (the same int8 graph), so nothing is labelled
    # again, and the budget counts no labelling, however slow the teacher is said to be
    monkeypatch.setattr(labelling, "measured_row_seconds", lambda *args, **kwargs: 600.0)
    assert main([*args, "--output-dir", str(tmp_path / "second")]) == 0
    report = json.loads((tmp_path / "second" / "compress_report.json").read_text())
    second = report["labelling"]
    assert (second["stored"], second["seconds"], len(seen)) == (10, 0, 10)
    assert report["speed"]["teacher"]["export"].startswith("read from ") and exported.count(str(env["teacher"])) == 1
    # the finishing's estimate scales what making the export took, not the instant of reading it
    assert 0 < report["speed"]["teacher"]["export_seconds"] <= made_in
    for name in ("model.int8.onnx", "export_report.json"):
        assert (tmp_path / "second" / "teacher-onnx" / name).read_bytes() == \
            (tmp_path / "first" / "teacher-onnx" / name).read_bytes()
    # a store without them: 10 rows at 600 s each cannot be labelled in a 30-minute budget
    capsys.readouterr()
    assert main([*args, "--output-dir", str(tmp_path / "third"), "--logits-cache", str(tmp_path / "empty")]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("kdbert: error: --budget-minutes 30 is too short to label the rows: bilstm-h150 learn")
    assert "labels the 10 not stored yet in about 100.0 min here" in error


def test_kd_labels_export_gives_a_cut_candidate_the_exports_labels_stored_once(env, tmp_path, monkeypatch):
    """``--kd-labels export``: a candidate cut from the teacher learns from the labels its export stored
    once per training row (the store counts every row once), not from the teacher beside it."""
    from conftest import count_teacher_runs

    from kdbert.cli import main

    seen = count_teacher_runs(monkeypatch)
    out = tmp_path / "out"
    assert main(["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
                 "--candidates", "bert-1x128", "--rounds", "1", "--first-steps", "2", "--batch-size", "4",
                 "--length-rows", "4", "--threads", "1", "--target-speedup", "0.01", "--kd-labels", "export",
                 "--logits-cache", str(tmp_path / "store"), "--output-dir", str(out)]) == 0
    report = json.loads((out / "compress_report.json").read_text())
    assert report["labelling"]["kd"] is True and len(seen) == 10  # the 10 rows not held out, by the export
    run = json.loads((Path(report["winner"]["run"]) / "distill_report.json").read_text())
    assert run["teacher_logits"]["onnx"] == report["labelling"]["onnx"] and "teacher_cache" not in run


def test_the_unlabelled_rows_are_labelled_once_by_the_export_and_counted_in_the_budget(env, tmp_path, monkeypatch,
                                                                                      capsys):
    """``--unlabelled`` rows are labelled in a run's first segment: the plan counts them with the training
    rows (a pair task's 60,000 mined pairs took minutes the round-0 window did not know of)."""
    from conftest import count_teacher_runs

    from kdbert.cli import main
    from kdbert.compress import labelling

    unlabelled = tmp_path / "more.jsonl"
    unlabelled.write_text("".join(json.dumps({"sentence": f"an unlabelled review number {i}"}) + "\n" for i in range(6)))
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bilstm-h150", "--rounds", "1", "--first-steps", "2", "--length-rows", "4",
            "--threads", "1", "--target-speedup", "0.01", "--unlabelled", str(unlabelled)]
    seen = count_teacher_runs(monkeypatch)
    assert main([*args, "--logits-cache", str(tmp_path / "store"), "--output-dir", str(tmp_path / "out")]) == 0
    facts = json.loads((tmp_path / "out" / "compress_report.json").read_text())["labelling"]
    assert (facts["rows"], facts["unlabelled"], facts["stored"]) == (16, 6, 0)
    assert len(seen) == 16  # the 10 training rows not held out and the 6 unlabelled, once each
    # the same rows at 600 s each cannot be labelled in 30 minutes, and the refusal counts both kinds
    monkeypatch.setattr(labelling, "measured_row_seconds", lambda *args, **kwargs: 600.0)
    capsys.readouterr()
    assert main([*args, "--logits-cache", str(tmp_path / "empty"), "--output-dir", str(tmp_path / "slow")]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "labels of the 16 training and --unlabelled rows" in error
    assert "labels the 16 not stored yet in about 160.0 min here" in error


def test_a_candidate_with_the_teacher_beside_it_reads_the_exports_labels_of_the_unlabelled_rows(env, tmp_path,
                                                                                               monkeypatch, capsys):
    """A candidate cut from the teacher learns beside it, but its ``--unlabelled`` rows' labels come from
    the export the plan timed, stored once where the plan looked (the PyTorch teacher labelled them in the
    run's first segment, at a rate the budget never counted)."""
    from conftest import count_teacher_runs

    from kdbert.cli import main
    from kdbert.compress import labelling

    unlabelled = tmp_path / "more.jsonl"
    unlabelled.write_text("".join(json.dumps({"sentence": f"an unlabelled review number {i}"}) + "\n" for i in range(6)))
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bert-1x128", "--rounds", "1", "--first-steps", "2", "--batch-size", "4",
            "--length-rows", "4", "--threads", "1", "--target-speedup", "0.01", "--unlabelled", str(unlabelled)]
    seen = count_teacher_runs(monkeypatch)
    assert main([*args, "--logits-cache", str(tmp_path / "store"), "--output-dir", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "compress_report.json").read_text())
    assert report["labelling"]["row_seconds"] > 0 and report["labelling"]["kd"] is False
    run = json.loads((Path(report["winner"]["run"]) / "distill_report.json").read_text())
    assert run["unlabelled"]["onnx"] == report["labelling"]["onnx"]
    assert run["unlabelled"]["store"] == str(tmp_path / "store") and "teacher_cache" in run
    # the export labelled the 6 unlabelled rows (timing it on them too); the teacher beside it gave the
    # training rows' logits
    assert set(seen) == {(json.loads(line)["sentence"],) for line in unlabelled.read_text().splitlines()}
    assert (report["labelling"]["rows"], report["labelling"]["unlabelled"]) == (6, 6)
    # the same rows at 600 s each cannot be labelled in 30 minutes: refused, where they went uncounted
    monkeypatch.setattr(labelling, "measured_row_seconds", lambda *args, **kwargs: 600.0)
    capsys.readouterr()
    assert main([*args, "--logits-cache", str(tmp_path / "empty"), "--output-dir", str(tmp_path / "slow")]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("kdbert: error: --budget-minutes 30 is too short to label the rows: bert-1x128 learn "
                            "from the teacher's labels of the 6 --unlabelled rows")


def test_the_recipe_line_names_each_stage_and_a_temperature_only_where_a_term_softens_by_it():
    from kdbert.compress.report import recipe_line

    stage = {"name": "kd", "optimizer": "adamw", "learning_rate": 1e-4, "batch_size": 32, "schedule": "linear",
             "max_steps": 614400}
    kd = {"stages": [stage], "loss": {"temperature": 20.0},
          "matches": {"kd": ["soft: 0.7 * kl_div(logits, logits)", "hard: 0.3 * hard_label(logits, labels)"]}}
    assert recipe_line(kd) == ("kd: 0.7 * kl_div(logits, logits) + 0.3 * hard_label(logits, labels) at T=20; adamw at "
                               "0.0001, batch 32, linear schedule over 614,400 steps")
    regression = {**kd, "matches": {"kd": ["soft: 0.7 * logit_mse(logits, logits)"]}}  # STS-B: no temperature
    assert recipe_line(regression) == "kd: 0.7 * logit_mse(logits, logits); adamw at 0.0001, batch 32, linear " \
                                      "schedule over 614,400 steps"
    constant = {"stages": [{**stage, "name": "bilstm", "optimizer": "adadelta", "learning_rate": 1.0,
                            "batch_size": 50, "schedule": "constant"}],
                "matches": {"bilstm": ["distill: 1 * squared_l2(logits, logits)"]}}
    assert recipe_line(constant) == "bilstm: 1 * squared_l2(logits, logits); adadelta at 1, batch 50, constant schedule"
    averaged = {**kd, "stages": [{**stage, "ema_decay": 0.998}]}
    assert recipe_line(averaged) == recipe_line(kd) + ", weights averaged (EMA 0.998)"
    assert recipe_line({**kd, "student_pooling": "pair"}) == recipe_line(kd) + "; pair pooling"
    kept = {**kd, "stages": [{**stage, "frozen": ["student.bert.embeddings.word_embeddings.weight"]}]}
    assert recipe_line(kept) == recipe_line(kd) + ", word embeddings kept as they start"


def test_the_reports_recipes_name_the_searchs_limit_on_passes_where_it_had_one():
    from kdbert.compress.report import recipe_lines

    segment = {"candidate": "bert-2x256", "rung": 0, "steps": 300, "recipe": "kd: ..."}
    report = {"search": {"segments": [segment]}}
    assert recipe_lines(report) == ["", "Recipes (from each run's distill_report.json):", "", "- bert-2x256: kd: ..."]
    assert recipe_lines({**report, "max_epochs": 24.0})[-1] == (
        "- at most 24 passes over its rows for each candidate cut from the teacher or brought (--max-epochs)")


@pytest.mark.parametrize("pooling, rule", [("pair", "pair cosine elimination"), ("teacher", "greedy elimination")])
def test_a_search_whose_cuts_read_a_pair_apart_ranks_the_teachers_layers_by_their_cosine(tmp_path, tiny_tokenizer,
                                                                                         pooling, rule):
    import time

    from kdbert.compress import search
    from kdbert.compress.recipes import SearchSettings
    from kdbert.compress.schedule import Goal
    from kdbert.families.importance import Importance

    write_glue_task(tmp_path / "glue", "STS-B", n_train=12, n_dev=8)
    teacher = save_tiny_classifier(tmp_path / "teacher", tiny_tokenizer, num_labels=1, hidden_size=128,
                                   num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    task = TaskOptions("stsb", data_dir=str(tmp_path / "glue"), held_out_fraction=0.25)
    candidate = next(c for c in speed.all_candidates(speed.shape_context(teacher, task)) if c.name == "bert-1x128")
    settings = SearchSettings(first_steps=2, batch_size=2, pooling=pooling)
    plan = search.Plan([candidate], str(teacher), task, str(tmp_path / "out"), settings, Goal(100.0, 0.97, {}),
                       search.Window.from_now(1800.0, settings.first_round_share), 1, time.time)
    search.build_starts(plan)
    assert Importance.load(tmp_path / "out").layer_rule == rule
