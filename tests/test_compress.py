"""kdbert compress, step 1: candidate shapes from every family, exported and timed at the task's
real lengths against the exported teacher; reruns reuse what was measured; targets filter."""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import save_tiny_classifier, write_glue_task

from kdbert.compress import speed
from kdbert.compress.augment import WARM_UP_ROWS
from kdbert.data.load import TaskOptions
from kdbert.errors import KdbertError


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("compress")
    write_glue_task(root / "glue", "SST-2", n_train=12, n_dev=8)
    teacher = save_tiny_classifier(root / "teacher", tiny_tokenizer, hidden_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, intermediate_size=256)
    return {"root": root, "teacher": teacher, "task": TaskOptions("sst2", data_dir=str(root / "glue"))}


def test_every_family_offers_shapes_no_larger_than_the_teacher(env):
    context = speed.shape_context(env["teacher"], env["task"])
    names = [c.name for c in speed.all_candidates(context)]
    # depths 1-2 (the teacher's 2) x width 128 (the teacher's), MobileBERT at depth 2, BiLSTM 150/300
    assert names == ["bilstm-h150", "bilstm-h300", "bert-1x128", "bert-2x128", "mobilebert-2x128"]
    model, vocab = speed.all_candidates(context)[0].build(context)
    words = {w for text in context.texts for w in text.lower().split()}
    assert model.config.hidden_size == 150 and set(vocab.words) >= words  # the training texts' words
    bert, tokenizer = speed.all_candidates(context)[2].build(context)
    # the teacher's head size (32) and FFN-to-width ratio (256 / 128)
    assert (bert.config.num_hidden_layers, bert.config.hidden_size, bert.config.num_attention_heads,
            bert.config.intermediate_size, tokenizer) == (1, 128, 4, 256, context.tokenizer)


def test_speed_table_is_measured_once_and_targets_filter_it(env, monkeypatch):
    out = env["root"] / "run"
    settings = speed.SpeedSettings(length_rows=8, runs=2, threads=1)
    context = speed.shape_context(env["teacher"], env["task"])
    chosen = [c for c in speed.all_candidates(context) if c.name in ("bert-1x128", "bilstm-h150")]
    table = speed.measure_speed(env["teacher"], env["task"], out, settings, chosen)
    assert json.loads((out / "speed.json").read_text()) == table
    assert set(table["candidates"]) == {"bert-1x128", "bilstm-h150"}
    assert (out / "speed" / "bert-1x128" / "model.int8.onnx").is_file()
    for row in table["candidates"].values():
        assert row["speedup"] == table["teacher"]["latency_real_p50_ms"] / row["latency_real_p50_ms"]
    assert table["candidates"]["bert-1x128"]["shape"] == {"num_hidden_layers": 1, "hidden_size": 128,
                                                          "num_attention_heads": 4, "intermediate_size": 256}

    def no_export(*args, **kwargs):
        raise AssertionError("a measured candidate was exported again")

    monkeypatch.setattr(speed, "export_classifier", no_export)
    monkeypatch.setattr(speed, "export_model", no_export)
    assert speed.measure_speed(env["teacher"], env["task"], out, settings, chosen) == table

    by_speed = sorted(table["candidates"], key=lambda n: table["candidates"][n]["latency_real_p50_ms"])
    slowest = table["candidates"][by_speed[-1]]
    assert speed.meeting_target(table, target_speedup=slowest["speedup"]) == by_speed
    assert speed.meeting_target(table, target_latency_ms=slowest["latency_real_p50_ms"]) == by_speed
    fastest = table["candidates"][by_speed[0]]
    with pytest.raises(KdbertError, match=rf"no candidate meets --target-speedup 1e\+06 on this machine: the "
                                          rf"fastest, {by_speed[0]}, runs in {fastest['latency_real_p50_ms']:.2f} ms"):
        speed.meeting_target(table, target_speedup=1e6)
    with pytest.raises(KdbertError, match="pass one of --target-speedup N or --target-latency-ms L"):
        speed.meeting_target(table)
    with pytest.raises(KdbertError, match="--runtime tflite is unknown; use one of onnx-int8, onnx-fp32"):
        speed.SpeedSettings(runtime="tflite")


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


def test_successive_halving_distils_the_better_half_longer_and_resumes(env, monkeypatch):
    from kdbert.compress import search

    task = TaskOptions("sst2", data_dir=str(env["root"] / "glue"), held_out_fraction=0.25)
    context = speed.shape_context(env["teacher"], task)
    chosen = [c for c in speed.all_candidates(context) if c.name in ("bert-1x128", "bert-2x128")]
    settings = search.SearchSettings(rounds=2, first_steps=2, batch_size=4, round_share="steps",
                                     intermediate_share=0.5)
    out = env["root"] / "search"
    window = search.Window.from_now(1800, settings.first_round_share)
    state = search.successive_halving(chosen, env["teacher"], task, out, settings, window)
    first, second = state["rounds"]
    assert sorted(row["candidate"] for row in first) == ["bert-1x128", "bert-2x128"] and {r["steps"] for r in first} == {2}
    assert all(row["selection_loss"] > 0 for row in first)  # the held-out loss, to break ties
    best = max(first, key=lambda row: row["selection_score"])["candidate"]
    assert [(row["candidate"], row["steps"]) for row in second] == [(best, 4)]
    report = json.loads((out / "rounds" / "1" / best / "distill_report.json").read_text())
    assert report["selected_on"] == "held-out training rows (3)"
    assert not list(out.rglob("checkpoints")) and (out / "rounds" / "1" / best / "model.safetensors").is_file()
    # TinyBERT's two stages share the round's 4 steps
    assert (report["method"], report["options"]["intermediate_max_steps"], report["options"]["max_steps"]) == \
        ("tinybert", 2, 2)
    assert json.loads((out / "search.json").read_text()) == state

    def no_run(*args, **kwargs):
        raise AssertionError("a finished run was distilled again")

    monkeypatch.setattr(search, "_distil", no_run)
    assert search.successive_halving(chosen, env["teacher"], task, out, settings, window) == state
    with pytest.raises(KdbertError, match="the search picks on held-out training rows: pass --held-out-fraction"):
        search.successive_halving(chosen, env["teacher"], env["task"], out, settings, window)


def test_the_winner_is_the_fastest_that_keeps_enough_else_the_best():
    from kdbert.compress.search import pick_winner

    speed_rows = {"a": {"latency_real_p50_ms": 1.0}, "b": {"latency_real_p50_ms": 2.0}, "c": {"latency_real_p50_ms": 3.0}}
    last = [{"candidate": "a", "selection_score": 80.0}, {"candidate": "b", "selection_score": 88.0},
            {"candidate": "c", "selection_score": 90.0}]
    winner = pick_winner(last, speed_rows, teacher_selection_score=90.0, min_kept=0.97)
    assert (winner["candidate"], winner["kept"], winner["rule"]) == ("b", 88.0 / 90.0, "fastest keeping 0.97")
    winner = pick_winner(last[:2], speed_rows, teacher_selection_score=95.0, min_kept=0.97)
    assert (winner["candidate"], winner["rule"]) == ("b", "none keeps 0.97: best score")
    tied = [{"candidate": "a", "selection_score": 0.0, "selection_loss": 0.6},
            {"candidate": "b", "selection_score": 0.0, "selection_loss": 0.5}]
    assert pick_winner(tied, speed_rows, teacher_selection_score=50.0, min_kept=0.97)["candidate"] == "b"
    with pytest.raises(KdbertError, match="no candidate finished a round within --budget-minutes"):
        pick_winner([], speed_rows, 90.0, 0.97)


def test_compress_cli_finds_distils_ships_and_resumes(env, tmp_path, capsys, monkeypatch):
    from collections import Counter

    from kdbert.cli import main
    from kdbert.compress import breakdown, pipeline, search
    from kdbert.data.load import load_task

    out = tmp_path / "compress"
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bert-1x128,bilstm-h150", "--rounds", "2", "--first-steps", "2", "--batch-size", "4",
            "--length-rows", "4", "--threads", "1", "--output-dir", str(out)]
    capsys.readouterr()
    assert main([*args, "--target-speedup", "0.01"]) == 0
    report = json.loads((out / "compress_report.json").read_text())
    printed = capsys.readouterr()
    # one line per finished run; the runs' precision and threads said once for the search, their own
    # lines in their logs; the budget's bar on stderr
    runs = [(r, row) for r, rows in enumerate(report["search"]["rounds"]) for row in rows]
    lines = [line for line in printed.out.splitlines() if line.startswith("round ")]
    assert {f"round {r}  {row['candidate']}  {row['steps']} steps  held-out {row['selection_score']:.2f}  "
            f"{row['seconds']:.0f} s" for r, row in runs} <= set(lines)
    assert len(lines) == len(runs) + sum("superseded_seconds" in row for _, row in runs)  # a rerun's first run too
    assert printed.out.count("runs train in float32 (auto, from $KDBERT_MIXED_PRECISION) on 1 thread(s)") == 1
    assert "precision:" not in printed.out and "threads:" not in printed.out
    assert "precision: float32" in (out / "rounds" / "0" / "bert-1x128.log").read_text()
    assert "s of the budget" in printed.err
    assert set(report["budget"]["phase_seconds"]) == {"timing", "search", "finishing", "other"}
    assert report["budget"]["untimed"] == [] and report["budget"]["minutes"] == 30
    assert report["held_out_rows"] == 1  # the default --held-out-fraction 0.1 of 12 rows
    assert report["teacher_saw_held_out_rows"] is None  # a folder saved without `kdbert finetune`: unknown
    first_round = {row["candidate"]: row for row in report["search"]["rounds"][0]}
    assert {name: row["method"] for name, row in first_round.items()} == {"bert-1x128": "tinybert",
                                                                          "bilstm-h150": "bilstm"}
    assert report["winner"]["candidate"] == report["search"]["rounds"][-1][0]["candidate"]
    last = report["search"]["rounds"][-1][0]
    first = first_round[last["candidate"]]  # its round 0 may have run twice (a cheap family's steps)
    assert report["seconds_per_candidate"][last["candidate"]] == pytest.approx(
        first["seconds"] + first.get("superseded_seconds", 0.0) + last["seconds"], abs=0.16)
    assert all(row["train_seconds"] <= row["seconds"] for rows in report["search"]["rounds"] for row in rows)
    assert sorted(p.name for p in (out / "teacher-logits").iterdir())  # the BiLSTM's logits stored in the search
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
        *([("winner", f"{os.cpu_count()} threads instead of 1")] if os.cpu_count() > 1 else [])]
    assert [row["dev_score"] for row in rows[2:5]] == [teacher_export["dev_metrics"]["onnx_fp32"]["score"],
                                                      report["teacher_scores"]["dev_deployed"],
                                                      report["shipped"]["dev_score"]]
    assert math.prod(row["factor"] for row in rows) == pytest.approx(rows[-1]["total"])
    assert rows[-1]["total"] == pytest.approx(rows[0]["latency_ms"] / rows[-1]["latency_ms"])
    assert "Where the speedup comes from" in markdown

    def no_run(*args, **kwargs):
        raise AssertionError("a finished run was distilled again")

    monkeypatch.setattr(search, "_distil", no_run)
    monkeypatch.setattr(breakdown, "bench_model", no_run)
    monkeypatch.setattr(pipeline, "time_against_teacher", no_run)
    capsys.readouterr()
    # resumed: timings, runs and the breakdown reused; --no-progress hides the bar
    assert main([*args, "--target-speedup", "0.01", "--no-progress"]) == 0
    assert "of the budget" not in capsys.readouterr().err
    resumed = json.loads((out / "compress_report.json").read_text())
    assert (resumed["winner"], resumed["shipped"]["speedup"]) == (report["winner"], report["shipped"]["speedup"])
    capsys.readouterr()
    assert main([*args, "--target-speedup", "1e6"]) == 2
    assert "no candidate meets --target-speedup 1e+06 on this machine: the fastest" in capsys.readouterr().err
    assert main(args) == 2
    assert "pass one of --target-speedup N or --target-latency-ms L" in capsys.readouterr().err
    assert main([*args, "--target-speedup", "2", "--candidates", "bert-9x999"]) == 2
    assert "--candidates: unknown bert-9x999; this teacher offers" in capsys.readouterr().err


def test_each_kind_of_candidate_gets_its_recipe(monkeypatch):
    from kdbert.compress.recipes import SearchSettings, run_options
    from kdbert.families.registry import Candidate

    def candidate(name, from_teacher=lambda teacher, context: teacher, **shape):
        return Candidate(name, "x", tuple(shape.items()), build=None, from_teacher=from_teacher)

    settings = SearchSettings(batch_size=16, learning_rate=2e-4, seed=7, word_vectors="glove.txt",
                              intermediate_share=0.25)
    bert = run_options(candidate("bert-2x256"), 400, settings, "cache")
    assert bert == {"method": "tinybert", "head_average": True, "intermediate_max_steps": 100, "intermediate_lr": 2e-4, "max_steps": 300,
                    "seed": 7, "eval_every": 150, "no_progress": True, "batch_size": 16, "learning_rate": 2e-4,
                    "teacher_cache": "cache"}
    none = run_options(candidate("bert-2x256"), 400, SearchSettings(intermediate_share=0.0), "cache")
    assert (none["skip_intermediate"], none["max_steps"], "intermediate_max_steps" in none) == (True, 400, False)
    assert run_options(candidate("mobilebert-2x384"), 400, settings, "cache")["method"] == "kd"
    monkeypatch.setenv("KDBERT_MIXED_PRECISION", "bf16")
    bilstm = run_options(candidate("bilstm-h300", from_teacher=None, hidden_size=300, embedding_dim=50), 400,
                         settings, "cache")
    assert bilstm == {"method": "bilstm", "max_steps": 400, "hidden_size": 300, "word_vectors": "glove.txt",
                      "teacher_dtype": "bfloat16", "seed": 7, "eval_every": 200,
                      "no_progress": True}  # its own optimiser, batch and rate; labelled in the runs' precision
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
           "scores 9 dev and held-out rows 8 times each (the int8 choice and the parity check)" in err
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


def fake_search(env, monkeypatch, cost: dict, score: dict, first_labelling: dict | None = None,
                loss: dict | None = None):
    """The search module with its runs faked on a fake clock: a run of candidate ``name`` takes
    ``cost[name]`` training seconds a step (plus ``first_labelling[name]`` seconds of labelling in its
    first run), moving the clock on by as much, and scores ``score[name]``, with held-out loss
    ``loss[name]`` where given; returns the module, the candidates, a task holding rows out and
    ``run(folder, settings, seconds)``, which searches into ``folder`` in a window of ``seconds`` from
    the fake clock's now (``run.clock``; nothing sleeps)."""
    from kdbert.compress import search
    from kdbert.families.registry import Candidate

    labelled, clock = set(), FakeClock()

    def fake_distil(candidate, start, teacher_dir, task, steps, settings, out, caches, deadline):
        name = candidate.name
        labelling = 0.0 if name in labelled else (first_labelling or {}).get(name, 0.0)
        labelled.add(name)
        held_out_loss = {"selection_loss": loss[name]} if name in (loss or {}) else {}
        clock.now += cost[name] * steps + labelling
        return {"candidate": name, "method": "fake", "steps": steps, "seconds": cost[name] * steps + labelling,
                "labelling_seconds": labelling, "selection_score": score[name], **held_out_loss,
                "dev_score": score[name], "run": str(out)}

    monkeypatch.setattr(search, "_distil", fake_distil)
    candidates = [Candidate(name, "x", (), build=None) for name in score]
    task = TaskOptions("sst2", data_dir=str(env["root"] / "glue"), held_out_fraction=0.25)

    def run(folder, settings, seconds, order=None):
        window = search.Window.from_now(seconds, settings.first_round_share, clock)
        return search.successive_halving(order or candidates, env["teacher"], task, folder, settings, window)

    run.clock = clock
    return search, candidates, task, run


class FakeClock:
    """A clock that moves only when told: ``clock.now += seconds``."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_last_candidate_left_goes_on_doubling_while_the_budget_allows(env, tmp_path, monkeypatch):
    search, candidates, task, run = fake_search(env, monkeypatch, cost={"a": 1.0, "b": 0.1, "c": 0.01},
                                                score={"a": 70.0, "b": 80.0, "c": 90.0})
    cheapest_first = candidates[::-1]  # round 0's estimate of a's run comes from c's and b's
    # spent after each round: 11.1 s, 13.3 s (b and c, 20 steps), 13.7 s (c alone, 40 steps); the
    # next round (c, 80 steps: 0.8 s by its latest run) would end at 14.5 s, past the 14 s window
    settings = search.SearchSettings(rounds=6, first_steps=10, round_share="steps", first_round_share=1.0)
    state = run(tmp_path / "14", settings, 14.0, cheapest_first)
    assert [[(row["candidate"], row["steps"]) for row in rows] for rows in state["rounds"]] == \
        [[("c", 10), ("b", 10), ("a", 10)], [("c", 20), ("b", 20)], [("c", 40)]]
    assert state["ended"] and run(tmp_path / "14", settings, 14.0, cheapest_first) == state  # ended: as it is
    state = run(tmp_path / "15", settings, 15.0, cheapest_first)
    assert [(row["candidate"], row["steps"]) for row in state["rounds"][-1]] == [("c", 80)]


def test_a_tied_held_out_score_is_broken_by_the_lower_held_out_loss_not_the_name(env, tmp_path, monkeypatch):
    # CoLA: every candidate predicts the majority class (MCC 0); a (run before losses were kept) has none
    search, candidates, task, run = fake_search(env, monkeypatch, cost=dict.fromkeys("abcd", 0.01),
                                                score=dict.fromkeys("abcd", 0.0), loss={"b": 0.7, "c": 0.6, "d": 0.65})
    settings = search.SearchSettings(rounds=2, first_steps=10, round_share="steps", first_round_share=1.0)
    state = run(tmp_path, settings, 600.0)
    assert [row["candidate"] for row in search.rank(state["rounds"][0])] == ["c", "d", "b", "a"]
    assert [row["candidate"] for row in state["rounds"][1]] == ["c", "d"]


def test_rounds_shared_by_wall_time_give_cheap_steps_more_of_them(env, tmp_path, monkeypatch):
    # c's first run also labels its rows (5 s); a, b and c are families of their own
    search, candidates, task, run = fake_search(env, monkeypatch, cost={"a": 1.0, "b": 0.1, "c": 0.01},
                                                score={"a": 70.0, "b": 80.0, "c": 90.0}, first_labelling={"c": 5.0})
    # round 0: a 10 steps (10 s); b 10 steps (1 s), then the mean cost a step is (1 + 0.1) / 2 = 0.55 s,
    # 5.5 times b's: b runs again for 55 steps (5.5 s); c 10 steps (0.1 s + 5 s labelling), mean (1 +
    # 0.1 + 0.01) / 3 = 0.37 s: c runs again for 370 steps (3.7 s), b would get 37 (fewer than 1.5 x 55:
    # it keeps its run); 25.3 s spent. Round 1 gives c and b 20 * 0.37 = 7.4 s each (740 and 74 steps),
    # round 2 c alone 14.8 s (1480 steps), ending at 54.9 s; round 3 (29.6 s more) would overrun 55 s
    settings = search.SearchSettings(rounds=6, first_steps=10, first_round_share=1.0)
    state = run(tmp_path, settings, 55.0)
    assert [[(row["candidate"], row["steps"]) for row in rows] for rows in state["rounds"]] == \
        [[("a", 10), ("b", 55), ("c", 370)], [("c", 740), ("b", 74)], [("c", 1480)]]
    assert [row.get("superseded_seconds") for row in state["rounds"][0]] == [None, 1.0, 5.1]
    # the reruns' shorter runs counted
    assert sum(search.spent_seconds(row) for row in state["rounds"][0]) == pytest.approx(25.3)
    same_steps = search.SearchSettings(rounds=1, first_steps=10, round_share="steps", first_round_share=1.0)
    state = run(tmp_path / "steps", same_steps, 55.0)
    assert [(row["candidate"], row["steps"]) for row in state["rounds"][0]] == [("a", 10), ("b", 10), ("c", 10)]
    with pytest.raises(KdbertError, match="--round-share 'flops': choose one of time, steps"):
        search.SearchSettings(round_share="flops")


def test_the_first_round_plan_gives_a_cheap_family_the_same_wall_time_and_reruns_only_when_worth_it():
    from kdbert.compress.search import SearchSettings, first_round_plan
    from kdbert.families.registry import Candidate

    def row(name, steps, cost):
        return {"candidate": name, "steps": steps, "seconds": cost * steps, "labelling_seconds": 0.0}

    order = [Candidate(name, "x", (), build=None) for name in ("bert-2", "bert-1", "bilstm-1", "bilstm-2", "mob-1", "bert-3")]
    settings = SearchSettings(first_steps=10)
    # mean cost a step (1.0 + 0.6 + 0.2) / 3 = 0.6: bilstm (0.2) gets 10 * 3 = 30 steps, bert (0.8 on
    # average) 0.75 of its mean: first_steps, for bert-3 too; mob has not run: first_steps
    done = [row("bert-2", 10, 1.0), row("bert-1", 10, 0.6), row("bilstm-1", 10, 0.2)]
    assert first_round_plan(done, order, settings) == {"bert-2": 10, "bert-1": 10, "bilstm-1": 30, "bilstm-2": 30,
                                                       "mob-1": 10, "bert-3": 10}
    # bilstm-1 ran 25 steps: 30 is less than 1.5 x 25, so it keeps its run; after 20 it would run again
    done[2] = row("bilstm-1", 25, 0.2)
    assert first_round_plan(done, order, settings)["bilstm-1"] == 25
    done[2] = row("bilstm-1", 20, 0.2)
    assert first_round_plan(done, order, settings)["bilstm-1"] == 30
    done[2] = row("bilstm-1", 10, 0.2)
    assert set(first_round_plan(done, order, SearchSettings(first_steps=10, round_share="steps")).values()) == {10}


def test_what_a_run_spends_outside_its_training_loop_is_not_a_cost_per_step():
    from kdbert.compress.search import SearchSettings, Window, first_round_plan, may_start
    from kdbert.families.registry import Candidate

    # an augmented twin reads and labels many more rows (71.2 s labelling, 10.2 s more loading) but
    # its steps cost what its plain twin's do: neither is cheap, nobody runs again
    plain = {"candidate": "bert-1", "steps": 300, "seconds": 6.6, "labelling_seconds": 0.0, "train_seconds": 5.0}
    twin = {"candidate": "bert-1-aug", "steps": 300, "seconds": 86.5, "labelling_seconds": 71.2,
            "train_seconds": 5.1}
    order = [Candidate(name, "x", (), build=None) for name in ("bert-1", "bert-1-aug")]
    assert first_round_plan([plain, twin], order, SearchSettings(first_steps=300)) == {"bert-1": 300,
                                                                                       "bert-1-aug": 300}
    # the next bert run: 300 steps at 5.0 / 300 s, plus bert-1's 1.6 s outside the loop, 6.6 s into
    # round 0: 13.2 s, past a 13 s round 0 (11.6 s without the overhead would fit)
    clock = FakeClock(now=6.6)
    bert_2 = Candidate("bert-2", "x", (), build=None)
    assert not may_start([plain], bert_2, 300, 0, Window(end=100.0, first_round_end=13.0, clock=clock))
    assert may_start([plain], bert_2, 300, 0, Window(end=100.0, first_round_end=13.3, clock=clock))
    assert may_start([plain], bert_2, 300, 1, Window(end=13.0, first_round_end=13.0, clock=clock))  # round 1
    assert may_start([], bert_2, 300, 0, Window(end=7.0, first_round_end=6.6, clock=clock))  # the first goes
    assert not may_start([], bert_2, 300, 1, Window(end=6.6, first_round_end=6.6, clock=clock))  # window ended
    # a loop too short for its tenth-of-a-second record (0.0 s) counts as 0.1 s: mean (5.0 + 0.1) / 600
    # a step, 25.5 times the BiLSTM's 0.1 / 300
    instant = {"candidate": "bilstm-1", "steps": 300, "seconds": 2.0, "labelling_seconds": 0.0, "train_seconds": 0.0}
    bilstm = [Candidate("bilstm-1", "x", (), build=None)]
    assert first_round_plan([plain, instant], bilstm, SearchSettings(first_steps=300)) == {"bilstm-1": 7650}


def test_a_finished_first_round_is_not_replanned_on_resume(env, tmp_path, monkeypatch):
    # a search whose round 0 gave every candidate the same steps (as searches did before round 0
    # learned costs): resumed under the wall-time rule, its rounds stand as they are
    search, candidates, task, run = fake_search(env, monkeypatch, cost={"a": 1.0, "b": 0.1, "c": 0.01},
                                                score={"a": 70.0, "b": 80.0, "c": 90.0})
    steps = search.SearchSettings(rounds=2, first_steps=10, round_share="steps", first_round_share=1.0)
    state = run(tmp_path, steps, 60.0)
    saved = json.loads((tmp_path / "search.json").read_text())
    del saved["ended"]  # as if killed before it was marked ended: resumed, its rounds stand
    (tmp_path / "search.json").write_text(json.dumps(saved))
    monkeypatch.setattr(search, "_distil", lambda *args: pytest.fail("a finished round ran again"))
    time = search.SearchSettings(rounds=2, first_steps=10, first_round_share=1.0)
    assert run(tmp_path, time, 60.0) == state


@pytest.mark.parametrize("killed_at", [2, 3, 4])
def test_a_first_round_killed_between_a_run_and_its_rerun_resumes_to_the_same_search(env, tmp_path, monkeypatch,
                                                                                      killed_at):
    search, candidates, task, run = fake_search(env, monkeypatch, cost={"a": 1.0, "b": 0.1, "c": 0.01},
                                                score={"a": 70.0, "b": 80.0, "c": 90.0})
    settings = search.SearchSettings(rounds=2, first_steps=10, first_round_share=1.0)
    whole = run(tmp_path / "whole", settings, 60.0)
    calls, fake = [], search._distil

    def killed(candidate, *args):
        calls.append(candidate.name)
        if len(calls) == killed_at:
            raise KeyboardInterrupt
        return fake(candidate, *args)

    monkeypatch.setattr(search, "_distil", killed)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "killed", settings, 60.0)
    monkeypatch.setattr(search, "_distil", fake)
    resumed = run(tmp_path / "killed", settings, 60.0)
    assert [[(r["candidate"], r["steps"]) for r in rows] for rows in resumed["rounds"]] == \
        [[(r["candidate"], r["steps"]) for r in rows] for rows in whole["rounds"]]
    assert resumed["plans"] == whole["plans"]


def test_a_round_over_budget_runs_only_the_best_candidates_that_fit(env, tmp_path, monkeypatch):
    search, candidates, task, run = fake_search(env, monkeypatch, cost=dict.fromkeys("abcd", 0.1),
                                                score={"a": 60.0, "b": 70.0, "c": 80.0, "d": 90.0})
    # round 0: 4 x 1 s; round 1 would run d and c for 2 s each (8 s in all, past the 7 s window):
    # only d, the best, fits (6 s); round 2 (d, 4 s more) does not
    settings = search.SearchSettings(rounds=6, first_steps=10, round_share="steps", first_round_share=1.0)
    state = run(tmp_path, settings, 7.0)
    assert [[(row["candidate"], row["steps"]) for row in rows] for rows in state["rounds"]] == \
        [[("a", 10), ("b", 10), ("c", 10), ("d", 10)], [("d", 20)]]
    assert state["plans"] == [{"a": 10, "b": 10, "c": 10, "d": 10}, {"d": 20}]


def test_the_first_round_stops_at_its_share_of_the_budget_and_resumes_the_same(env, tmp_path, monkeypatch):
    search, candidates, task, run = fake_search(env, monkeypatch,
                                                cost={"a": 0.2, "b": 0.1, "c": 0.1, "d": 0.1, "e": 0.1},
                                                score={"a": 60.0, "b": 90.0, "c": 80.0, "d": 70.0, "e": 50.0})
    # a third of a 13.2 s window, 4.4 s: a (2 s), then b (by a's 0.2 s a step, ending at 4 s) fit; c
    # would end at 3 + 10 * 0.15 = 4.5 s: round 0 stops with a and b; round 1 runs b alone (20 steps,
    # 2 s), round 2 b for 40 steps (4 s, ending at 9 s); round 3 (8 s more) does not fit
    settings = search.SearchSettings(rounds=6, first_steps=10, round_share="steps")
    state = run(tmp_path, settings, 13.2)
    assert [[(row["candidate"], row["steps"]) for row in rows] for rows in state["rounds"]] == \
        [[("a", 10), ("b", 10)], [("b", 20)], [("b", 40)]]
    assert state["plans"][0] == {"a": 10, "b": 10}
    monkeypatch.setattr(search, "_distil", lambda *args: pytest.fail("a resumed search reran a finished run"))
    assert run(tmp_path, settings, 13.2) == state
    with pytest.raises(KdbertError, match=r"--first-round-share 0 must be in \(0, 1\]"):
        search.SearchSettings(first_round_share=0.0)


def test_a_first_round_cut_short_by_a_kill_resumes_in_its_own_order(env, tmp_path, monkeypatch):
    search, candidates, task, run = fake_search(env, monkeypatch, cost=dict.fromkeys("abc", 0.1),
                                                score={"c": 60.0, "b": 70.0, "a": 80.0})
    assert [c.name for c in candidates] == ["c", "b", "a"]  # not the sorted order search.json keeps
    settings = search.SearchSettings(rounds=1, first_steps=10)
    ran, fake = [], search._distil

    def killed_after_the_first(candidate, *args):
        if ran:
            raise KeyboardInterrupt
        ran.append(candidate.name)
        return fake(candidate, *args)

    monkeypatch.setattr(search, "_distil", killed_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, settings, 60.0)
    monkeypatch.setattr(search, "_distil", fake)
    state = run(tmp_path, settings, 60.0)
    assert [row["candidate"] for row in state["rounds"][0]] == ["c", "b", "a"]


def test_candidates_tied_on_held_out_score_go_on_by_name_not_by_running_order(env, tmp_path, monkeypatch):
    search, candidates, task, run = fake_search(env, monkeypatch, cost=dict.fromkeys("abc", 0.1),
                                                score=dict.fromkeys("abc", 50.0))
    settings = search.SearchSettings(rounds=2, first_steps=10, round_share="steps")
    state = run(tmp_path, settings, 60.0, candidates[::-1])  # run c, b, a
    assert [row["candidate"] for row in state["rounds"][0]] == ["c", "b", "a"]
    assert state["plans"][1] == {"a": 20, "b": 20}


def test_the_first_round_runs_families_in_turn_spread_over_their_speeds():
    from kdbert.compress.search import spread_order
    from kdbert.families.registry import Candidate

    latency = {"bert-1x128": 0.1, "bilstm-h150": 0.15, "bert-1x192": 0.2, "bert-2x128": 0.3, "bert-1x256": 0.4,
               "bilstm-h300": 0.45, "bert-2x192": 0.5, "mobilebert-2x384": 0.6, "bert-2x256": 0.7}
    candidates = [Candidate(name, "x", (), build=None) for name in sorted(latency)]
    # bert by bisection of its six: fastest (0), slowest (5), middle (2), then 1 and 3 (the two
    # halves' middles), then 4
    assert [c.name for c in spread_order(candidates, latency)] == [
        "bert-1x128", "bilstm-h150", "mobilebert-2x384", "bert-2x256", "bilstm-h300", "bert-2x128", "bert-1x192",
        "bert-1x256", "bert-2x192"]
    # a kind's augmented variants (same speed) take turns with it as a family of their own
    latency = {"bilstm-h150": 0.15, "bilstm-h150-aug": 0.15, "bilstm-h300": 0.45, "bilstm-h300-aug": 0.45}
    candidates = [Candidate(name, "x", (), build=None) for name in sorted(latency)]
    assert [c.name for c in spread_order(candidates, latency)] == ["bilstm-h150", "bilstm-h150-aug", "bilstm-h300",
                                                                   "bilstm-h300-aug"]


def test_distillation_time_adds_up_every_round_a_candidate_ran():
    from kdbert.compress.pipeline import _seconds_per_candidate

    search = {"rounds": [[{"candidate": "a", "seconds": 10.2}, {"candidate": "b", "seconds": 3.1,
                                                                 "superseded_seconds": 0.4}],
                         [{"candidate": "a", "seconds": 20.5}], [{"candidate": "a", "seconds": 41.0}]]}
    assert _seconds_per_candidate(search) == {"a": 71.7, "b": 3.5}


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

    def counting(model, tokenizer, examples, *args, **kwargs):
        labelled.extend(examples)
        return run_teacher(model, tokenizer, examples, *args, **kwargs)

    monkeypatch.setattr(teacher_logits, "_run_teacher", counting)
    out = tmp_path / "compress"
    args = ["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
            "--candidates", "bilstm-h150", "--augment", "bilstm", "--augment-copies", "3", "--nltk-data",
            str(NLTK_DATA), "--rounds", "1", "--first-steps", "2", "--length-rows", "4", "--threads", "1",
            "--target-speedup", "0.01", "--output-dir", str(out)]
    assert main(args) == 0
    report = json.loads((out / "compress_report.json").read_text())
    assert sorted(row["candidate"] for row in report["search"]["rounds"][0]) == ["bilstm-h150", "bilstm-h150-aug"]
    assert report["speed"]["candidates"]["bilstm-h150-aug"]["latency_real_p50_ms"] == \
        report["speed"]["candidates"]["bilstm-h150"]["latency_real_p50_ms"]

    # the versions come from the 11 training rows left after the hold-out, never from the held-out row
    data = load_task(TaskOptions("sst2", data_dir=str(env["root"] / "glue"), held_out_fraction=0.1))
    texts = [row.texts[0] for row in data.train]
    expected = [v for versions in BiLSTMAugmenter.from_texts(texts, NltkTagger(NLTK_DATA), n_iter=3, seed=42)
                .augment([row.texts for row in data.train]) for v in versions[1:]]
    written = [json.loads(line)["sentence"] for line in (out / "augmented.jsonl").read_text().splitlines()]
    assert written == [v[0] for v in expected] and len(written) > 11
    facts = report["augmentation"]
    assert {k: facts[k] for k in ("file", "input_rows", "augmented_rows", "tries_per_row", "rows")} == {
        "file": str(out / "augmented.jsonl"), "input_rows": 11, "augmented_rows": 11, "tries_per_row": 3,
        "rows": len(written)}
    assert facts["affordable_rows"] > 11 * 3  # a tiny teacher labels fast: --augment-copies decided
    plain = json.loads((out / "rounds" / "0" / "bilstm-h150" / "distill_report.json").read_text())
    variant = json.loads((out / "rounds" / "0" / "bilstm-h150-aug" / "distill_report.json").read_text())
    assert (plain["train_rows"], variant["train_rows"], variant["unlabelled"]["rows"]) == \
        (11, 11 + len(written), len(written))
    # the teacher labelled each distinct augmented row once for both runs, and each training row once for
    # them and once in the timing of its labelling speed
    from collections import Counter

    counts = Counter(texts[0] for texts in labelled)
    assert {text: counts[text] for text in written} == {text: 1 for text in written}
    warmed_up = set(texts[:WARM_UP_ROWS])  # and the first rows once more, in the timing's untimed first batch
    assert {text: counts[text] for text in texts} == {text: 2 + (text in warmed_up) for text in texts} and \
        len(counts) == len(set(texts) | set(written))
    assert "Candidates named -aug also trained on" in (out / "compress_report.md").read_text()

    stamp = (out / "augmented.jsonl").stat().st_mtime_ns
    assert main(args) == 0 and (out / "augmented.jsonl").stat().st_mtime_ns == stamp  # resumed: reused
    capsys.readouterr()
    assert main([*args[:-2], "--output-dir", str(tmp_path / "other"), "--augment", "lstm"]) == 2
    assert "--augment lstm: unknown kind 'lstm'; use kinds among bert, mobilebert, bilstm" in capsys.readouterr().err


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


def test_whether_the_teacher_saw_the_held_out_rows_is_read_from_its_finetune_folder(tmp_path, capsys):
    from kdbert.compress.pipeline import teacher_saw_held_out_rows

    task = TaskOptions("sst2", held_out_fraction=0.1)

    def teacher(**identity) -> str:
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        (folder / "run_config.json").write_text(json.dumps(identity))
        return str(folder)

    finetuned = {"command": "finetune", "task": "sst2", "train_file": None}
    assert teacher_saw_held_out_rows(teacher(**finetuned, held_out_fraction=0.1), task) is False
    assert teacher_saw_held_out_rows(teacher(**finetuned), task) is True  # fine-tuned on every row
    assert teacher_saw_held_out_rows(teacher(**finetuned, held_out_fraction=0.2), task) is True  # other rows
    assert teacher_saw_held_out_rows(teacher(**{**finetuned, "task": "rte"}, held_out_fraction=0.1), task) is None
    assert teacher_saw_held_out_rows(teacher(**{**finetuned, "train_file": "aug.tsv"}), task) is None
    assert teacher_saw_held_out_rows(teacher(command="distill task", task="sst2", train_file=None), task) is None
    assert teacher_saw_held_out_rows(str(tmp_path / "hub-model"), task) is None


def test_compress_prints_a_note_before_searching_with_a_teacher_that_trained_on_the_held_out_rows(
        tmp_path, capsys, monkeypatch):
    from kdbert.compress import pipeline

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(pipeline, "load_task", stop)  # the first step after the note
    config = pipeline.CompressConfig(teacher=str(tmp_path), target_speedup=4.0)
    for identity, noted in (({}, True), ({"held_out_fraction": 0.1}, False)):
        (tmp_path / "run_config.json").write_text(json.dumps(
            {"command": "finetune", "task": "sst2", "train_file": None, **identity}))
        with pytest.raises(Stop):
            pipeline.compress(TaskOptions("sst2"), config, tmp_path / "out")
        printed = capsys.readouterr().out
        assert ("note: the teacher was fine-tuned on the 10% of training rows this search holds out" in printed) \
            is noted


def test_the_labelling_speed_leaves_the_first_batch_untimed(monkeypatch):
    """The first labelling of a process pays the device's start-up (CUDA's, on a GPU): timed, it
    would make the teacher look slow and cap the augmented rows far below what it labels."""
    import time

    from kdbert.compress import augment
    from kdbert.core import teacher_logits
    from kdbert.data.glue import Example
    from kdbert.data.tasks import GLUE_TASKS

    calls = []

    def label(model, tokenizer, examples, folder, max_seq_len, **options):
        time.sleep(0.5 if not calls else 0.001)  # a slow start-up, then 1 ms for the timed rows
        calls.append(len(examples))

    monkeypatch.setattr(teacher_logits, "label_with_teacher", label)
    rows = [Example(texts=(f"row {i}",), label=0) for i in range(100)]
    affordable = augment.affordable_rows(torch.nn.Linear(1, 1), None, rows, GLUE_TASKS["sst2"], seconds=1.0)
    assert calls == [augment.WARM_UP_ROWS, 100]
    assert affordable >= 20_000  # 100 rows in about 1 ms (the sleep's floor): about 100,000 a second


def test_a_run_line_says_round_candidate_steps_held_out_score_and_seconds():
    from kdbert.compress.search import run_line

    row = {"candidate": "bert-2x256", "steps": 400, "selection_score": 84.567, "seconds": 61.4}
    assert run_line(2, row) == "round 2  bert-2x256  400 steps  held-out 84.57  61 s"
    assert run_line(1, {**row, "trained_steps": 250}) == \
        "round 1  bert-2x256  250 of 400 steps (stopped at the budget's end)  held-out 84.57  61 s"


def test_a_run_past_its_deadline_stops_early_scored_and_its_row_keeps_the_steps_it_trained(env, tmp_path):
    from kdbert.compress import search
    from kdbert.compress.build import build_from_teacher

    task = replace(env["task"], held_out_fraction=0.25)
    context = speed.shape_context(env["teacher"], task)
    bert = next(c for c in speed.all_candidates(context) if c.name == "bert-1x128")
    start = build_from_teacher(bert, env["teacher"], task, tmp_path / "start", context)
    settings = search.SearchSettings(first_steps=6, batch_size=2)
    row = search._distil(bert, start, env["teacher"], task, 6, settings, tmp_path / "run", tmp_path, deadline=0.0)
    assert (row["steps"], row["trained_steps"]) == (6, 1) and row["selection_score"] >= 0.0
    assert "precision:" in (tmp_path / "run.log").read_text()  # the run's own lines, in its log
    # its cost a step is its loop's seconds over the one step it trained, not over the six planned
    assert search._step_seconds(row) == max(row["train_seconds"], search.TIMER_RESOLUTION) / 1


def test_a_round_the_window_ends_is_cut_to_its_finished_runs_and_the_search_ends(env, tmp_path, monkeypatch):
    search, candidates, task, run = fake_search(env, monkeypatch, cost=dict.fromkeys("abcd", 0.1),
                                                score={"a": 60.0, "b": 70.0, "c": 80.0, "d": 90.0})
    # round 0 (4 x 1 s); round 1 plans d, then c (2 s each: ending at 8 s, within 8.5 s), but d's run
    # takes 3 s longer than its steps say, ending at 9 s: c never starts, the search ends there
    fake = search._distil

    def d_slower(candidate, *args):
        row = fake(candidate, *args)
        if (candidate.name, row["steps"]) == ("d", 20):
            run.clock.now += 3.0
        return row

    monkeypatch.setattr(search, "_distil", d_slower)
    settings = search.SearchSettings(rounds=3, first_steps=10, round_share="steps", first_round_share=1.0)
    state = run(tmp_path, settings, 8.5)
    assert state["plans"] == [{"a": 10, "b": 10, "c": 10, "d": 10}, {"d": 20}]  # c, planned, never started
    assert [[row["candidate"] for row in rows] for rows in state["rounds"]] == [["a", "b", "c", "d"], ["d"]]
    assert state["ended"]


def test_a_round_is_planned_against_the_time_left_in_the_window():
    from kdbert.compress.search import SearchSettings, Window, plan_round
    from kdbert.families.registry import Candidate

    round_0 = [{"candidate": name, "steps": 10, "seconds": 1.0, "labelling_seconds": 0.0} for name in "abcd"]
    ranked = [Candidate(name, "x", (), build=None) for name in ("d", "c")]  # best first
    settings = SearchSettings(first_steps=10, round_share="steps")
    # round 1: d and c for 20 steps, 2 s each by their round-0 runs
    assert plan_round([round_0], ranked, 1, settings, Window(104.0, 104.0, FakeClock(100.0))) == {"d": 20, "c": 20}
    assert plan_round([round_0], ranked, 1, settings, Window(103.9, 103.9, FakeClock(100.0))) == {"d": 20}
    assert plan_round([round_0], ranked, 1, settings, Window(101.9, 101.9, FakeClock(100.0))) == {}
    # a run the deadline stopped after 5 of its 10 steps cost 0.2 s a step: c's 20 steps take 4 s
    cut = [*round_0[:2], {**round_0[2], "trained_steps": 5}, round_0[3]]
    assert plan_round([cut], ranked, 1, settings, Window(105.9, 105.9, FakeClock(100.0))) == {"d": 20}
    assert plan_round([cut], ranked, 1, settings, Window(106.0, 106.0, FakeClock(100.0))) == {"d": 20, "c": 20}


def test_the_finishing_reserve_is_the_teachers_measured_costs_scaled_to_the_slowest_winner():
    from kdbert.compress.budget import RESERVE_FACTOR, finishing_seconds
    from kdbert.compress.speed import TURNS

    teacher = {"export_seconds": 200.0, "timing_seconds": 6.0}
    # a winner a quarter of the teacher's latency: its export 200 / 4 + its own 3 s; timed in turns
    # 3 x (6 + 1.5) s; its dev pass for the agreement 8 / 4 s
    expected = 50.0 + 3.0 + TURNS * 7.5 + 2.0
    assert finishing_seconds(teacher, 0.25, 3.0, 8.0, every_core=False) == pytest.approx(RESERVE_FACTOR * expected)
    # timed on every core too: one more timing of the winner
    assert finishing_seconds(teacher, 0.25, 3.0, 8.0, every_core=True) == pytest.approx(
        RESERVE_FACTOR * (expected + 1.5))


def test_timing_stops_before_a_candidate_that_would_end_past_its_time(env, tmp_path, monkeypatch):
    from kdbert.compress import pipeline
    from kdbert.families.registry import Candidate

    settings = speed.SpeedSettings(length_rows=4, runs=2, threads=1)
    (tmp_path / "speed.json").write_text(json.dumps({"settings": settings.key(), "candidates": {}, "teacher": {
        "latency_real_p50_ms": 4.0, "export_seconds": 20.0, "timing_seconds": 2.0}}))
    clock, costs = FakeClock(0.0), {"bert-1x8": 2.0, "bert-2x8": 5.0, "bert-4x8": 4.0, "bilstm-h8": 1.0}

    def fake_export(export, file, task, settings):  # a candidate's export and timing, on the fake clock
        clock.now += costs[file.parent.name]
        return {"latency_real_p50_ms": 1.0}

    monkeypatch.setattr(speed, "_timed_export", fake_export)
    shapes = {"bert-1x8": (("layers", 1), ("width", 8)), "bert-2x8": (("layers", 2), ("width", 8)),
              "bert-4x8": (("layers", 4), ("width", 8)), "bilstm-h8": (("hidden_size", 8),)}
    candidates = [Candidate(name, "x", shape, build=lambda context: (None, None)) for name, shape in shapes.items()]
    order = pipeline._timing_order(candidates)
    assert [c.name for c in order] == ["bert-1x8", "bilstm-h8", "bert-4x8", "bert-2x8"]  # families in turn, spread
    # bert-1x8 (2 s), then bilstm-h8 at the mean 2 s would end at 4 s <= 4.4 s (it takes 1 s); then
    # bert-4x8 at the mean 1.5 s would end at 4.5 s > 4.4 s: timing stops
    table = speed.measure_speed(env["teacher"], env["task"], tmp_path, settings, order, context=object(),
                                stop_at=4.4, clock=clock)
    assert list(table["candidates"]) == ["bert-1x8", "bilstm-h8"]
    table = speed.measure_speed(env["teacher"], env["task"], tmp_path, settings, order, context=object(),
                                stop_at=0.0, clock=clock)  # a rerun times what is missing: at least one
    assert list(table["candidates"]) == ["bert-1x8", "bilstm-h8", "bert-4x8"]


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


def test_what_compress_needs_whatever_it_searches_is_two_exports_at_the_teachers_speed():
    from kdbert.compress.budget import export_passes, fixed_seconds

    # int8: parity scores PyTorch, fp32 and int8 and predicts dev with each; the int8 choice scores fp32
    # and dynamic (static methods only when time allows); fp32: PyTorch and fp32, scored and on dev
    assert export_passes("onnx-int8") == 3 + 3 + 2 == 8 and export_passes("onnx-fp32") == 2 + 2
    # a pass of 2 s, 8 times: 16 s for the teacher, 4 s for a winner at a quarter of its latency; 4 passes
    # (8 s) to time the teacher and its steps of the breakdown
    assert fixed_seconds(2.0, "onnx-int8", 0.25) == pytest.approx(28.0)


def test_the_budget_keeps_each_phases_seconds_on_its_clock():
    from kdbert.compress.budget import Deadline, Progress

    clock = FakeClock(0.0)
    deadline = Deadline(2.0, clock)
    progress = Progress(deadline, enabled=False)
    clock.now = 5.0  # the checks
    with progress.phase("timing"):
        clock.now = 35.0
    with progress.phase("search"):
        clock.now = 95.0
    clock.now = 100.0
    assert progress.phase_seconds() == {"timing": 30.0, "search": 60.0, "other": 10.0}
    assert (deadline.spent(), deadline.left(), deadline.end) == (100.0, 20.0, 120.0)
    progress.close()


def test_a_budget_that_times_too_few_candidates_to_meet_the_target_says_so(env, tmp_path, capsys, monkeypatch):
    from kdbert.cli import main
    from kdbert.compress import pipeline

    timing = pipeline.measure_speed
    monkeypatch.setattr(pipeline, "measure_speed", lambda *args, **kwargs: timing(*args, **{**kwargs, "stop_at": 0.0}))
    out = tmp_path / "compress"
    assert main(["compress", "--teacher", str(env["teacher"]), "--task", "sst2", "--data-dir", str(env["root"] / "glue"),
                 "--candidates", "bert-1x128,bert-2x128", "--length-rows", "4", "--threads", "1",
                 "--target-speedup", "1000", "--budget-minutes", "5", "--no-progress", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    # the deadline times one candidate (a rerun times what is missing: at least one), and it is too slow
    assert err.startswith("kdbert: error: --budget-minutes 5 left time to time 1 of 2 candidates on this machine (")
    assert " s spent) and none of them meets the target (the fastest, bert-" in err
    assert err.endswith("the teacher)); raise --budget-minutes")
