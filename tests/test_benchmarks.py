"""The logic of the benchmark scripts: rerunning a recorded figure and the GPU driver's scheduler.

No training here: the training functions are replaced by stand-ins that return fixed scores.
"""

from __future__ import annotations

import gzip
import json
import shlex
import sys
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import checkpoint_rule  # noqa: E402
import common  # noqa: E402
import compress_seeds  # noqa: E402
import decide_draw  # noqa: E402
import distill_glue  # noqa: E402
import epoch_cap  # noqa: E402
import glue_inputs  # noqa: E402
import gpu_bundle  # noqa: E402
import gradual_pruning  # noqa: E402
import mobilebert_ablation  # noqa: E402
import mobilebert_gpu  # noqa: E402
import plateau  # noqa: E402
import recipe_ablation  # noqa: E402
import step_runner  # noqa: E402
import teacher_best  # noqa: E402
import teacher_glue  # noqa: E402
import wiki_transfer  # noqa: E402

from conftest import tiny_bert_config, write_glue_task  # noqa: E402


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    folder = tmp_path / "results"
    monkeypatch.setattr(common, "RESULTS_DIR", folder)
    return folder


def test_the_machine_names_the_cpu_instructions_that_move_its_figures():
    assert common.cpu_kind({"avx2", "fma"}) == "AVX2"
    assert common.cpu_kind({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}) == "AVX-512, VNNI, bf16"
    assert common.cpu_kind({"avx2", "avx512f"}) == "AVX-512"
    assert common.cpu_kind({"avx2", "avx512f", "avx512_vnni", "amx_int8", "amx_bf16"}) == "AMX"
    assert common.cpu_kind(set()) == ""


def test_compare_rerun_uses_the_std_of_the_recorded_seeds():
    seeds = [70.0, 72.0, 74.0]  # sample std 2.0
    inside = common.compare_rerun(72.0, seeds, 73.9, tolerance=0.1)
    assert inside["noise"] == pytest.approx(2.0) and inside["reproduced"]
    assert inside["delta"] == pytest.approx(1.9)
    assert inside["summary"] == "recorded 72.00, rerun 73.90 (+1.90): within std of the 3 recorded seeds 2.00"
    outside = common.compare_rerun(72.0, seeds, 69.9, tolerance=5.0)  # the tolerance is not used with seeds
    assert not outside["reproduced"] and "NOT within" in outside["summary"]


def test_compare_rerun_of_one_seed_uses_the_tolerance():
    assert common.compare_rerun(57.0, [57.0], 57.5, tolerance=0.5)["reproduced"]
    failed = common.compare_rerun(57.0, [], 57.6, tolerance=0.5)
    assert not failed["reproduced"] and failed["noise_source"] == "--tolerance (one recorded seed)"
    same = common.compare_rerun(57.0, [], 57.0, tolerance=0.0)
    assert same["reproduced"] and same["summary"] == "recorded 57.00, rerun 57.00 (+0.00): identical"


def test_the_intermediate_variant_gives_a_quarter_of_the_steps_to_tinyberts_intermediate_stage(tmp_path):
    from kdbert.compress.recipes import SearchSettings
    from kdbert.families.registry import Candidate

    candidate = Candidate("bert-2x384-ffn384", "hf", (), build=None)
    settings = SearchSettings(seed=42)

    def options(variant):
        return recipe_ablation.search_options(candidate, settings, 1200, "t", tmp_path / "start", tmp_path / "cache",
                                              variant)

    both, alone, search = options("teacher-head-intermediate"), options("teacher-head-tinybert-t1"), options("teacher-head")
    assert (both["method"], both["intermediate_max_steps"], both["intermediate_lr"]) == ("tinybert", 300, 1e-4)
    assert not both.get("skip_intermediate") and alone["skip_intermediate"] and alone["method"] == "tinybert"
    assert "freeze_word_embeddings" not in both and "freeze_word_embeddings" not in alone  # kd's alone
    assert search["freeze_word_embeddings"] is True
    assert search["method"] == "kd" and "intermediate_max_steps" not in search
    assert both["max_steps"] == alone["max_steps"] == search["max_steps"]  # the search's schedule, paused at 1,200


def test_each_recipe_variant_turns_off_its_one_part_of_the_searchs_options(tmp_path):
    from kdbert.compress.recipes import SearchSettings
    from kdbert.families.registry import Candidate

    candidate = Candidate("bert-1x384", "hf", (), build=None, from_teacher=lambda teacher, context: teacher)

    def options(variant):
        return recipe_ablation.search_options(candidate, SearchSettings(seed=42), 1200, "t", tmp_path / "start",
                                              tmp_path / "cache", variant)

    today = options("recipe")
    assert (today["method"], today["ema_decay"], today["freeze_word_embeddings"]) == ("kd", 0.998, True)
    for variant, changed in [("recipe-constant-rate", {"ema_decay": None}), ("recipe-gold-regression", {"alpha": 0.0}),
                             ("recipe-cls-pooling", {}), ("recipe-even-start", {})]:  # the last two: the start
        assert options(variant) == today | changed, variant
    loss = options("recipe-tinybert-loss")  # TinyBERT's prediction stage, a regression against the teacher's score
    assert (loss["method"], loss["skip_intermediate"], loss["regression_target"]) == ("tinybert", True, "teacher")
    assert "freeze_word_embeddings" not in loss and loss["max_steps"] == today["max_steps"]


def test_half_heads_prunes_each_layers_less_important_heads_and_they_get_no_gradient(tmp_path, tiny_tokenizer):
    import torch
    from transformers import BertForSequenceClassification

    from conftest import save_tiny_classifier
    from kdbert.families.importance import Importance

    start = save_tiny_classifier(tmp_path / "start", tiny_tokenizer)  # 2 layers of 4 heads, 4 dims each
    (start / "student_init.json").write_text(json.dumps({"candidate": "bert-2x16"}))
    heads = torch.tensor([[4.0, 1.0, 3.0, 2.0], [9.0, 9.0, 9.0, 9.0], [1.0, 2.0, 3.0, 4.0]])  # teacher: 3 layers
    importance = Importance(heads, torch.ones(3, 32), torch.ones(16), dropped=[1, 0])  # 2 layers: 0 and 2 kept
    recipe_ablation.half_heads_start(start, tmp_path / "half", importance)
    assert json.loads((tmp_path / "half" / "student_init.json").read_text())["pruned_heads"] == {"0": [1, 3],
                                                                                                 "1": [0, 1]}
    model = BertForSequenceClassification.from_pretrained(tmp_path / "half")
    layers = model.bert.encoder.layer
    for layer, dropped in zip(layers, ([1, 3], [0, 1])):
        per_head = layer.attention.self.value.weight.detach().view(4, 4, 16).abs().sum((1, 2))
        assert [h for h in range(4) if per_head[h] == 0] == dropped
    model.train()
    out = model(input_ids=torch.tensor([[2, 5, 6, 7, 3]]), labels=torch.tensor([1]))
    out.loss.backward()
    for layer, dropped in zip(layers, ([1, 3], [0, 1])):
        rows = [h * 4 + i for h in dropped for i in range(4)]
        for part in ("query", "key", "value"):
            assert getattr(layer.attention.self, part).weight.grad[rows].abs().max() == 0
        assert layer.attention.output.dense.weight.grad[:, rows].abs().max() == 0
        kept = [r for r in range(16) if r not in rows]
        assert layer.attention.output.dense.weight.grad[:, kept].abs().max() > 0


def test_gradual_pruning_halves_the_ffn_to_a_sub_network_of_the_student_as_trained(tmp_path, tiny_tokenizer):
    import torch
    from transformers import BertForSequenceClassification

    from conftest import save_tiny_classifier
    from kdbert.data.load import TaskOptions
    from kdbert.errors import KdbertError

    assert gradual_pruning.widths(1536, 192) == [1536, 768, 384, 192]
    assert gradual_pruning.widths(32, 32) == [32]
    for target in (24, 64):  # not the full width over a power of two
        with pytest.raises(KdbertError, match="halves the FFN"):
            gradual_pruning.widths(32, target)
    write_glue_task(tmp_path / "glue", "SST-2")
    start = save_tiny_classifier(tmp_path / "full", tiny_tokenizer, seed=3)  # 2 layers, FFN 32 wide
    cut = gradual_pruning.narrower_ffn(start, 16, TaskOptions(task="sst2", data_dir=str(tmp_path / "glue")),
                                       tmp_path / "cut")
    full, half = (BertForSequenceClassification.from_pretrained(f).eval() for f in (start, cut))
    assert half.config.intermediate_size == 16 and half.config.num_hidden_layers == 2
    with torch.no_grad():  # the units the cut kept, found by their rows; the full model with the others off
        for big, small in zip(full.bert.encoder.layer, half.bert.encoder.layer):
            rows = big.intermediate.dense.weight
            kept = [int((rows == row).all(1).nonzero()[0]) for row in small.intermediate.dense.weight]
            assert kept == sorted(set(kept)) and len(kept) == 16  # distinct units, in the student's order
            dropped = [u for u in range(32) if u not in kept]
            big.output.dense.weight[:, dropped] = 0.0
        inputs = {"input_ids": torch.tensor([[2, 5, 6, 7, 3], [2, 8, 9, 3, 0]]),
                  "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])}
        assert torch.allclose(half(**inputs).logits, full(**inputs).logits, atol=1e-5)  # head and pooler kept too


def test_the_recipe_parts_table_gives_each_part_off_as_the_per_seed_change_in_the_kept_share(results_dir):
    from sections.compress_results import recipe_parts_section

    def record(variant, seed, dev, decide):
        return {"variant": variant, "seed": seed, "dev": dev, "decide": decide, "teacher_dev": 80.0,
                "teacher_decide": 50.0, "date": "2026-12-04", "machine": "2 cores", "command": f"run {variant}"}

    results_dir.mkdir()
    (results_dir / "recipe_ablation.json").write_text(json.dumps({
        "mrpc/bert-1x384/1200-first300/recipe/seed42": record("recipe", 42, 76.0, 45.0),
        "mrpc/bert-1x384/1200-first300/recipe/seed43": record("recipe", 43, 72.0, 47.0),
        "mrpc/bert-1x384/1200-first300/recipe-even-start/seed42": record("recipe-even-start", 42, 72.0, 45.0),
        "mrpc/bert-1x384/1200-first300/recipe-even-start/seed43": record("recipe-even-start", 43, 64.0, 46.0),
        "mrpc/bert-1x384/1200-first300/recipe-gradual-ffn/seed43": record("recipe-gradual-ffn", 43, 76.0, 48.0),
        "mrpc/bert-1x384/1200-first300/search/seed42": record("search", 42, 10.0, 10.0)}))  # another study's
    rows = [line for line in recipe_parts_section() if line.startswith("| mrpc")]
    # today: dev 95% and 90% of 80 (mean 92.5), decide 90% and 94% of 50 (92.0); even start: dev -5 and -10
    # points of kept (mean -7.5, sd 3.5), decide 0 and -2 (mean -1.0, sd 1.4); gradual pruning, seed 43 alone:
    # dev +5 (95% against 90%), decide +2 (96% against 94%), one seed: no sd; the other parts not run
    assert rows == ["| mrpc: bert-1x384, 1200 | 80.00 / 50.00 | 92.5% / 92.0% (2 seeds) | - | - | - | "
                    "-7.5 ± 3.5 / -1.0 ± 1.4 | - | - | - | +5.0 / +2.0 |"]


def test_a_long_recipe_run_is_shown_as_its_curve_and_left_out_of_the_parts_table(results_dir):
    from sections.compress_results import recipe_curve_lines, recipe_parts_section

    def run(seed, devs, decides):
        curve = [{"step": step, "held_out": 70.0, "decide": decide, "dev": dev}
                 for step, dev, decide in zip((1000, 2000, 3000), devs, decides)]
        return {"variant": "recipe", "seed": seed, "dev": devs[1], "decide": decides[1], "teacher_dev": 80.0,
                "teacher_decide": 50.0, "curve": curve, "date": "2026-12-04", "machine": "2 cores", "command": "run long"}

    results_dir.mkdir()
    (results_dir / "recipe_ablation.json").write_text(json.dumps({
        "sst2/bert-2x384/3000-first300/recipe/seed42": run(42, (60.0, 64.0, 68.0), (40.0, 45.0, 46.0)),
        "sst2/bert-2x384/3000-first300/recipe/seed43": run(43, (64.0, 64.0, 64.0), (40.0, 40.0, 48.0))}))
    rows = [line for line in recipe_curve_lines() if line.startswith("| sst2")]
    # dev of 80: (75% + 80%) / 2, (80% + 80%) / 2, (85% + 80%) / 2; decide of 50: (80% + 80%) / 2, (90% + 80%) / 2,
    # (92% + 96%) / 2
    assert rows == ["| sst2: bert-2x384, 42, 43 | 80.00 / 50.00 | 1,000: 77.5% / 80.0%; 2,000: 80.0% / 85.0%; "
                    "3,000: 82.5% / 94.0% |"]
    assert recipe_parts_section() == []  # the parts table has no "recipe" group of equal-step runs to show


def test_a_continued_run_keeps_the_runs_options_but_the_one_its_variant_changes(tmp_path):
    run = tmp_path / "out" / "runs" / "mpnet-3x384"
    run.mkdir(parents=True)
    (run / "run_config.json").write_text(json.dumps({
        "command": "distill task", "task": "sst2", "held_out_rows": "teacher", "method": "kd", "temperature": 20.0,
        "alpha": 0.7, "max_steps": 614400, "ema_decay": 0.998, "warmup_ratio": 5e-05, "freeze_word_embeddings": True,
        "teacher_onnx": None, "seed": 1}))

    def options(variant):
        return plateau.continued_options(run, variant, 43, 2000, "teacher.int8.onnx")

    stable = options("stable")
    assert stable == {"method": "kd", "temperature": 20.0, "alpha": 0.7, "max_steps": 614400, "ema_decay": 0.998,
                      "warmup_ratio": 0.0, "freeze_word_embeddings": True, "teacher_onnx": None, "seed": 43,
                      "student": str(run), "eval_every": 500, "keep_checkpoints": 1, "no_progress": True,
                      "teacher_cache": str(tmp_path / "out" / "teacher-cache")}
    assert options("decay") == stable | {"max_steps": 2000, "ema_decay": None}  # annealed to zero over the 2,000
    assert options("t2") == stable | {"temperature": 2.0, "alpha": 1.0}
    assert options("trained-words") == stable | {"freeze_word_embeddings": False}
    stored = options("imdb-sentences")
    assert stored["teacher_onnx"] == "teacher.int8.onnx" and "teacher_cache" not in stored
    assert {k: v for k, v in stored.items() if k not in ("teacher_onnx", "logits_cache")} == {
        k: v for k, v in stable.items() if k not in ("teacher_onnx", "teacher_cache")}
    with pytest.raises(Exception, match="--teacher-onnx"):
        plateau.continued_options(run, "int8-targets", 43, 2000, None)


def test_the_plateau_table_gives_each_variants_kept_share_beside_the_runs_start(results_dir):
    from sections.compress_results import plateau_section

    def record(variant, seed, dev, decide):
        return {"variant": variant, "seed": seed, "dev": dev, "decide": decide, "teacher_dev": 80.0,
                "teacher_decide": 50.0, "start_step": 14017, "start_dev": 72.0, "start_decide": 45.0,
                "date": "2026-12-06", "machine": "2 cores", "command": f"run {variant}"}

    results_dir.mkdir()
    (results_dir / "plateau.json").write_text(json.dumps({
        "sst2/cut-from14017/2000/decay/seed42": record("decay", 42, 76.0, 45.0),
        "sst2/cut-from14017/2000/stable/seed42": record("stable", 42, 72.0, 46.0),
        "sst2/cut-from14017/2000/stable/seed43": record("stable", 43, 76.0, 48.0)}))
    rows = [line for line in plateau_section() if line.startswith("| sst2")]
    # start: 72 of 80 = 90%, 45 of 50 = 90%; stable: dev 90% and 95% (mean 92.5, sd 3.5), decide 92% and 96% (94.0,
    # sd 2.8); decay, one seed: 95% and 90%; the stable rows first
    assert rows == ["| sst2: cut, 14,017 | 80.00 / 50.00 | 90.0% / 90.0% | 2,000 | stable | 2 | 92.5% ± 3.5 "
                    "| 94.0% ± 2.8 | 42: 72.00, 43: 76.00 |",
                    "| sst2: cut, 14,017 | 80.00 / 50.00 | 90.0% / 90.0% | 2,000 | decay | 1 | 95.0% | 90.0% | 42: 76.00 |"]


def test_teachers_compete_on_held_out_rows_drawn_by_one_rule():
    def run(date, rule=None, fraction=0.1):
        return {"date": date, "overrides": {"held_out_fraction": fraction}, **({"held_out_rule": rule} if rule else {})}

    before = {"cola/full-a": run("2026-12-01"), "cola/full-b": run("2026-12-01"), "cola/cpu": run("2026-11-20"),
              "cola/full-all": run("2026-11-20", fraction=0.0), "mrpc/full-a": run("2026-12-01")}
    assert set(teacher_best.tuning_runs(before, "cola")) == {"cola/full-a", "cola/full-b"}  # no rule recorded: all
    after = {**before, "cola/full-a": run("2026-12-02", "nearness-matched")}
    assert set(teacher_best.tuning_runs(after, "cola")) == {"cola/full-a"}  # the rows the others held out differ
    # the rule most runs record; on a tie the latest build's
    tie = {**after, "cola/full-b": run("2026-12-03", "uniform")}
    assert set(teacher_best.tuning_runs(tie, "cola")) == {"cola/full-b"}
    most = {**tie, "cola/full-c": run("2026-12-01", "nearness-matched")}
    assert set(teacher_best.tuning_runs(most, "cola")) == {"cola/full-a", "cola/full-c"}


def test_augmented_runs_get_the_steps_of_the_runs_on_the_original_rows():
    # 2 epochs of ceil(rows / 32) batches: RTE 2 x 78, MRPC 2 x 115, STS-B 3 x 180, CoLA 2 x 268
    assert [distill_glue.equal_steps(2, 2490), distill_glue.equal_steps(2, 3668),
            distill_glue.equal_steps(3, 5749), distill_glue.equal_steps(2, 8551)] == [156, 230, 540, 536]
    assert distill_glue.equal_steps(2, 2490, factor=4) == 624


def _record(variant: str, student: str | None = None, task: str = "cola", seed: int = 42, score: float = 20.0):
    options = {"method": "tinybert", "teacher": f"runs/teacher-{task}", "seed": seed}
    if student:
        options["student"] = student
    return {"task": task, "variant": variant, "seed": seed, "budget": "cpu", "metrics": {"score": score},
            "options": options, "output_dir": f"runs/distill-{task}-{variant}-s{seed}"}


def test_dependencies_of_recorded_runs():
    aug = _record("tinybert-ws-general-task-aug", "runs/general-tinybert4-ws")
    assert distill_glue.dependencies(aug) == [("teacher", "runs/teacher-cola"),
                                              ("general", "runs/general-tinybert4-ws"),
                                              ("mlm", "runs/mlm-k2"), ("aug", "runs/aug-cola/train_aug.tsv")]
    assert distill_glue.dependencies({**aug, "train_file": "elsewhere.tsv"})[-1] == ("aug", "elsewhere.tsv")
    assert distill_glue.dependencies(_record("tinybert-ws-task", "tinybert4")) == [("teacher", "runs/teacher-cola")]
    assert distill_glue.dependencies(_record("kd")) == [("teacher", "runs/teacher-cola")]
    assert distill_glue.dependencies(_record("distilbert-d", "runs/distilbert-init"))[-1] == \
        ("unbuildable", "runs/distilbert-init")


def test_distill_rerun_builds_then_compares_with_the_recorded_seeds(results_dir, monkeypatch, tmp_path):
    done = {f"cola/tinybert-ws-general-task/cpu/seed{s}": _record("tinybert-ws-general-task",
                                                                  "runs/general-tinybert4-ws", seed=s, score=score)
            for s, score in ((42, 16.0), (43, 17.0), (44, 18.0))}  # std 1.0
    built, calls = [], []
    monkeypatch.setattr(distill_glue, "build", lambda kind, path, record, args: built.append((kind, path)))

    def fake_distill(task, options, out, resume):
        calls.append((task.task, task.train_file, options, out, resume))
        return {"dev_metrics": {"score": 16.5}}

    monkeypatch.setattr(distill_glue, "distill_task", fake_distill)
    args = Namespace(runs_dir=str(tmp_path / "runs"), data_dir="glue", tolerance=0.1)
    verdict = distill_glue.rerun("cola/tinybert-ws-general-task/cpu/seed42", done, args)
    assert built == [("teacher", "runs/teacher-cola"), ("general", "runs/general-tinybert4-ws")]
    (task, train_file, options, out, resume), = calls
    assert (task, train_file, resume) == ("cola", None, False)
    # recorded before mixed_precision was recorded: those runs were float32
    assert options == {"mixed_precision": "no", **done["cola/tinybert-ws-general-task/cpu/seed42"]["options"],
                       "no_progress": True}
    assert out == str(tmp_path / "runs" / "rerun" / "distill-cola-tinybert-ws-general-task-s42")
    assert verdict["reproduced"] and verdict["noise"] == pytest.approx(1.0) and verdict["delta"] == pytest.approx(0.5)
    saved = json.loads((results_dir / "reruns.json").read_text())["distill/cola/tinybert-ws-general-task/cpu/seed42"]
    assert saved["rerun"] == 16.5 and saved["reproduced"]


def test_teacher_glue_records_a_command_its_own_options_accept():
    tuning = {"epochs": 10, "held_out_fraction": 0.1, "learning_rate": 3e-5, "batch_size": 32, "max_seq_len": 128}
    assert glue_inputs.teacher_command("stsb", "full", tuning) == (
        "python benchmarks/teacher_glue.py --budget full --tasks stsb --epochs 10 --held-out-fraction 0.1 "
        "--learning-rate 3e-05 --build-missing")
    assert glue_inputs.teacher_command("rte", "cpu", {}) == "python benchmarks/teacher_glue.py --budget cpu --tasks rte"
    recorded = json.loads((Path(__file__).parents[1] / "benchmarks/results/teacher_glue.json").read_text())
    for key, record in recorded.items():
        words = shlex.split(record["command"])
        assert words[:2] == ["python", "benchmarks/teacher_glue.py"], key
        args = teacher_glue.build_parser().parse_args(words[2:])  # exits on an option the script lacks
        assert args.tasks == [key.split("/")[0]], key


def test_teacher_glue_skips_a_recorded_task_and_reruns_it_on_request(results_dir, monkeypatch, capsys, tmp_path):
    common.save_result("teacher_glue", "rte/cpu", {
        "task": "rte", "metrics": {"score": 57.0}, "output_dir": "runs/teacher-rte", "overrides": {"epochs": 3},
        "hyperparameters": {"epochs": 3, "learning_rate": 1e-4, "batch_size": 32, "max_seq_len": 128}})
    trained = []

    def fake_fine_tune(task, budget, tuning, data_dir, out=None, runs_dir="runs", model="default"):
        trained.append((task, budget, tuning, str(out)))
        return {"metrics": {"score": 58.5}}

    monkeypatch.setattr(teacher_glue, "fine_tune", fake_fine_tune)
    monkeypatch.setattr(sys, "argv", ["teacher_glue.py", "--tasks", "rte"])
    teacher_glue.main()
    assert trained == [] and "rte/cpu: recorded" in capsys.readouterr().out
    runs = str(tmp_path / "runs")
    monkeypatch.setattr(sys, "argv", ["teacher_glue.py", "--tasks", "rte", "--rerun", "--runs-dir", runs,
                                      "--tolerance", "1"])
    teacher_glue.main()
    # the recorded hyper-parameters, not today's defaults (which may have changed since)
    assert trained == [("rte", "cpu", {"epochs": 3, "learning_rate": 1e-4, "batch_size": 32, "max_seq_len": 128},
                        str(Path(runs) / "rerun" / "teacher-rte"))]
    assert "NOT within --tolerance (one recorded seed) 1.00" in capsys.readouterr().out
    assert json.loads((results_dir / "reruns.json").read_text())["teacher_glue/rte/cpu"]["delta"] == pytest.approx(1.5)
    # the recorded figure itself is left as it was
    assert json.loads((results_dir / "teacher_glue.json").read_text())["rte/cpu"]["metrics"]["score"] == 57.0


def _step(name, code, needs=()):
    return step_runner.Step(name, [sys.executable, "-c", code], list(needs))


def test_driver_runs_steps_after_what_they_need_and_blocks_after_a_failure(tmp_path):
    order = tmp_path / "order.txt"
    write = f"open({str(order)!r}, 'a').write('{{}}\\n')"
    steps = [_step("a", write.format("a")), _step("b", write.format("b"), ["a"]),
             _step("bad", "import sys; sys.exit(3)"), _step("after-bad", write.format("x"), ["bad"]),
             _step("c", write.format("c"), ["a", "b"])]
    states = step_runner.run(steps, tmp_path / "results", tmp_path / "logs", jobs=2, deadline=60, env={},
                                  poll=0.05)
    assert states == {"a": "done", "b": "done", "bad": "failed (exit 3)",
                      "after-bad": "blocked (a step it needs failed)", "c": "done"}
    assert order.read_text().split() == ["a", "b", "c"]


def test_driver_skips_recorded_steps_and_stops_running_ones_at_the_deadline(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "distill.json").write_text(json.dumps({"rte/x/cpu/seed42": {}}))
    recorded = _step("recorded", "import sys; sys.exit(1)")
    recorded.result = ("distill", "rte/x/cpu/seed42")
    steps = [recorded, _step("slow", "import time; time.sleep(60)"), _step("later", "pass", ["slow"])]
    states = step_runner.run(steps, results, tmp_path / "logs", jobs=4, deadline=0.5, env={}, poll=0.05)
    assert states == {"recorded": "done (recorded)", "slow": "stopped at the deadline (resumes next time)",
                      "later": "not started"}


def test_teacher_glue_builds_a_missing_folder_of_a_recorded_task_on_request(results_dir, monkeypatch, tmp_path):
    record = {"task": "rte", "metrics": {"score": 57.0}, "output_dir": "runs/teacher-rte", "overrides": {"epochs": 3},
              "hyperparameters": {"epochs": 3, "learning_rate": 1e-4, "batch_size": 32, "max_seq_len": 128}}
    common.save_result("teacher_glue", "rte/cpu", record)
    trained = []

    def fake_fine_tune(task, budget, tuning, data_dir, out=None, runs_dir="runs", model="default"):
        trained.append((task, tuning, str(out), model))
        return {"metrics": {"score": 56.0}, "overrides": record["overrides"],
                "hyperparameters": record["hyperparameters"]}

    monkeypatch.setattr(teacher_glue, "fine_tune", fake_fine_tune)
    runs = tmp_path / "runs"
    argv = ["teacher_glue.py", "--tasks", "rte", "--runs-dir", str(runs), "--model", "T"]
    monkeypatch.setattr(sys, "argv", argv)
    teacher_glue.main()
    assert trained == []  # without --build-missing a recorded task is only listed
    monkeypatch.setattr(sys, "argv", argv + ["--build-missing"])
    teacher_glue.main()
    assert trained == [("rte", teacher_glue.recorded_settings(record), str(runs / "teacher-rte"), "T")]
    # the record describes the teacher built; the earlier build's figures are kept beside it
    recorded = json.loads((results_dir / "teacher_glue.json").read_text())["rte/cpu"]
    assert recorded == {"metrics": {"score": 56.0}, "overrides": {"epochs": 3},
                        "hyperparameters": record["hyperparameters"], "earlier_builds": [{"metrics": {"score": 57.0}}]}
    folder = runs / "teacher-rte"
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"score": 56.0}))
    teacher_glue.main()
    assert len(trained) == 1  # the folder is there now, as recorded
    # a folder built but not recorded (another score): read back, its training time from its log
    (folder / "metrics.json").write_text(json.dumps({"score": 55.0}))
    (folder / "log.jsonl").write_text('{"time": 100.0, "step": 20}\n{"time": 160.5, "step": 40}\n')
    teacher_glue.main()
    recorded = json.loads((results_dir / "teacher_glue.json").read_text())["rte/cpu"]
    assert len(trained) == 2 and recorded["train_seconds"] == 60.5 and len(recorded["earlier_builds"]) == 2


def test_rebuild_missing_trains_a_gone_folder_again_and_keeps_the_record(results_dir, tmp_path, capsys):
    folder = tmp_path / "runs" / "teacher-windows"
    record = {"metrics": {"accuracy": 86.6, "score": 86.6}, "output_dir": str(folder), "truncation": "windows"}
    common.save_result("imdb", "teacher-windows", record)
    calls = []

    def rebuild(metrics):
        def run():
            calls.append(1)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "metrics.json").write_text("{}")
            return {"metrics": metrics}
        return run

    rebuilt = common.rebuild_missing("imdb", "teacher-windows", rebuild({"accuracy": 86.6, "score": 86.6}))
    assert calls == [1] and rebuilt["rebuilt"]["same_as_recorded"] is True
    stored = json.loads((results_dir / "imdb.json").read_text())["teacher-windows"]
    assert {k: stored[k] for k in record} == record  # the recorded figures stay
    assert "the same as the record" in capsys.readouterr().out
    assert common.rebuild_missing("imdb", "teacher-windows", rebuild({"score": 0.0})) is None  # folder there
    assert calls == [1]
    (folder / "metrics.json").unlink()
    rebuilt = common.rebuild_missing("imdb", "teacher-windows", rebuild({"accuracy": 85.0, "score": 85.0}))
    assert rebuilt["rebuilt"]["same_as_recorded"] is False and rebuilt["metrics"]["score"] == 86.6
    assert "differs from the record" in capsys.readouterr().out
    (folder / "metrics.json").unlink()
    steps = []
    common.rebuild_missing_steps("imdb", ["teacher-windows", "never-recorded"],
                                 lambda step: steps.append(step) or rebuild({"score": 86.6})())
    assert steps == ["teacher-windows"]  # only a recorded step is trained again


def test_compress_seeds_reruns_read_the_teacher_outputs_the_search_stored(tmp_path):
    search = tmp_path / "search"
    assert compress_seeds.search_caches(search, {"student": "starts/bert-1x128"}) == {}  # nothing stored
    (search / "teacher-cache").mkdir(parents=True)
    (search / "teacher-logits").mkdir()
    assert compress_seeds.search_caches(search, {"student": "starts/bert-1x128"}) == {
        "teacher_cache": str(search / "teacher-cache")}
    assert compress_seeds.search_caches(search, {"method": "bilstm"}) == {"logits_cache": str(search / "teacher-logits")}
    # a student of its own tokenizer (or a BiLSTM) whose run names the shared store reads that store again
    assert compress_seeds.search_caches(search, {"student": "starts/pretrained-minilm-l6",
                                                 "logits_cache": "/cache/teacher-logits"}) == {}


def test_checkpoint_rule_replays_both_rules_on_a_logged_run(tmp_path):
    # a step logged twice (a resumed segment) counts once, its last record; the highest keeps step 200,
    # the latest within one standard error of it (84 - 2 = 82) keeps step 400, and 81 at step 800 is outside
    evaluation = lambda pick, se, dev: {"score": dev, "selection_score": pick, "selection_se": se, "decide_score": dev}
    records = [{"step": 100, "eval": evaluation(80.0, 2.0, 70.0)}, {"step": 100, "loss": 0.5},
               {"step": 200, "eval": evaluation(83.0, 2.0, 71.0)}, {"step": 200, "eval": evaluation(84.0, 2.0, 72.0)},
               {"step": 400, "eval": evaluation(82.5, 2.0, 75.0)}, {"step": 800, "eval": evaluation(81.0, 2.0, 76.0)}]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(record) + "\n" for record in records))
    history = checkpoint_rule.evaluations(log)
    assert [metrics["step"] for metrics in history] == [100, 200, 400, 800] and history[1]["score"] == 72.0
    assert checkpoint_rule.highest(history)["step"] == 200
    assert checkpoint_rule.latest_within_noise(history)["step"] == 400


def test_epoch_cap_reads_a_run_at_its_last_segment_within_the_limit_and_at_its_end():
    # 320 training rows at batch 32: 10 steps a pass, so 2 passes end at step 20 (21 within the rounding allowed);
    # the cut ran to 40 steps, the BiLSTM is not limited and the short run never passed the limit
    recipe = "kd: ...; adamw at 0.0001, batch 32, linear schedule"
    segment = lambda name, steps, dev: {"candidate": name, "steps": steps, "dev_score": dev, "recipe": recipe}
    record = {"command": "python benchmarks/bench_compress.py --task mrpc", "labelling": {"rows": 320},
              "teacher_scores": {"dev": 80.0}, "winner": {"candidate": "bert-2x256"},
              "search": {"segments": [segment("bert-2x256", 10, 60.0), segment("bert-2x256", 20, 72.0),
                                      segment("bert-2x256", 40, 68.0), segment("bert-1x128", 15, 50.0),
                                      segment("bilstm-h150", 400, 70.0)]}}
    assert epoch_cap.readable("mrpc/x4-trust", record) and not epoch_cap.readable("mrpc/x8-trust", record)
    [row] = epoch_cap.reread("mrpc/x4-trust", record, epochs=2)
    assert (row["candidate"], row["shipped"], row["steps_at_limit"], row["steps"]) == ("bert-2x256", True, 20, 40)
    assert row["dev_kept_at_limit"] == pytest.approx(0.9) and row["dev_kept"] == pytest.approx(0.85)
    assert epoch_cap.summary([row]) == {"runs": 1, "mean_change": pytest.approx(-5.0), "se": None, "better_at_limit": 1}
    unlabelled = {**record, "command": record["command"] + " --unlabelled pairs.jsonl"}
    assert epoch_cap.reread("mrpc/x4-trust", unlabelled, epochs=2) == []  # its rows a pass are not known


def test_compress_seeds_takes_the_ablation_seeds_only_when_one_reproduces_the_winner(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    winner = {"candidate": "bert-2x128", "steps": 6752, "decide_score": 24.5, "run": "runs/bert-2x128"}
    (tmp_path / "compress.json").write_text(json.dumps({"cola/x4": {"winner": winner}}))
    run = {"date": "d", "machine": "m", "command": "c", "held_out": 30.0}
    prefix = "cola/bert-2x128/2400-first300/v"  # the winner kept its step-2400 checkpoint
    (tmp_path / "recipe_ablation.json").write_text(json.dumps({
        f"{prefix}/seed42": {**run, "dev": 20.0, "decide": 24.5}, f"{prefix}/seed43": {**run, "dev": 22.0, "decide": 20.0},
        "cola/bert-2x128/2400/v/seed42": {**run, "dev": 20.0, "decide": 23.0}}))
    record = compress_seeds.from_ablation("cola/x4", prefix)
    assert (record["steps"], record["dev_mean"], sorted(record["seeds"])) == (2400, 21.0, ["42", "43"])
    with pytest.raises(SystemExit, match="no run reproduces"):
        compress_seeds.from_ablation("cola/x4", "cola/bert-2x128/2400/v")
    with pytest.raises(SystemExit, match="not the winner"):
        compress_seeds.from_ablation("cola/x4", "cola/bert-2x128/9600/v")


def test_compress_seeds_pause_where_the_search_paused_the_winner():
    segment = lambda run, steps: {"run": run, "steps": steps}  # noqa: E731
    report = {"winner": {"run": "runs/a"}, "search": {"segments": [
        segment("runs/a", 865), segment("runs/b", 300), segment("runs/a", 300), segment("runs/a", 1312)]}}
    assert compress_seeds.pauses(report) == [300, 865, 1312]
    assert compress_seeds.pauses({"winner": {"run": "runs/a"}, "search": [[segment("runs/a", 300)]]}) == []  # one run
    spare = {"winner": {"run": "runs/a.spare", "steps": 1400}, "search": report["search"]}  # trained on, shipped
    assert compress_seeds.pauses(spare) == [300, 865, 1312, 1400]


def test_distill_glue_mobilebert_variants_distil_the_general_student(results_dir, monkeypatch, tmp_path):
    runs = tmp_path / "runs"
    (runs / "teacher-rte").mkdir(parents=True)
    (runs / "teacher-rte" / "metrics.json").write_text("{}")
    calls = []

    def fake_distill(task, options, out, resume):
        calls.append((task.task, options, out))
        return {"dev_metrics": {"score": 60.0}, "wall_seconds": 1.0}

    monkeypatch.setattr(distill_glue, "distill_task", fake_distill)
    monkeypatch.setattr(sys, "argv", ["distill_glue.py", "--task", "rte", "--variants", "mobilebert-task",
                                      "mobilebert-finetune", "mobilebert-long-task", "--seeds", "43", "--runs-dir",
                                      str(runs), "--mobilebert-general", "R/mb-progressive-s42",
                                      "--mobilebert-long-general", "L/mb-progressive-s42"])
    distill_glue.main()
    (_, kd, kd_out), (_, plain, _), (_, long_kd, long_out) = calls
    assert (long_kd["student"], long_kd["alpha"], long_out) == ("L/mb-progressive-s42", 0.5,
                                                                str(runs / "distill-rte-mobilebert-long-task-s43"))
    assert (kd["method"], kd["student"], kd["alpha"], kd["temperature"]) == ("mobilebert", "R/mb-progressive-s42",
                                                                             0.5, 2.0)
    assert (plain["method"], plain["student"], plain["alpha"]) == ("mobilebert", "R/mb-progressive-s42", 0.0)
    assert kd["teacher"] == str(runs / "teacher-rte") and kd["seed"] == 43
    assert kd_out == str(runs / "distill-rte-mobilebert-task-s43")
    recorded = json.loads((results_dir / "distill.json").read_text())
    assert set(recorded) == {"rte/mobilebert-task/cpu/seed43", "rte/mobilebert-finetune/cpu/seed43",
                             "rte/mobilebert-long-task/cpu/seed43"}
    record = recorded["rte/mobilebert-task/cpu/seed43"]
    # the student is built by mobilebert_ablation.py, not by --rerun's builders
    assert distill_glue.dependencies(record) == [("teacher", str(runs / "teacher-rte")),
                                                 ("unbuildable", "R/mb-progressive-s42")]
    with pytest.raises(SystemExit, match="mobilebert_ablation.py"):
        distill_glue.build("unbuildable", str(tmp_path / "mb-progressive-s42"), record, Namespace())


def test_mobilebert_ablation_defaults_give_the_recorded_commands_and_options_place_the_runs():
    recorded = json.loads((Path(common.__file__).parent / "results" / "mobilebert_ablation.json").read_text())
    args = mobilebert_ablation.parse_args([])
    assert "kdbert " + " ".join(mobilebert_ablation.mlm_head_argv(args)) == recorded["teacher_mlm_head"]["command"]
    for key, row in recorded.items():
        if key.endswith("teacher_mlm_head") or row.get("budget", "cpu") != "cpu":  # other budgets: other options
            continue
        if row["general_command"]:
            general = mobilebert_ablation.general_argv(row["strategy"], row["seed"], args)
            assert "kdbert " + " ".join(general) == row["general_command"]
        student = Path(f"runs/mb-{row['strategy']}-s{row['seed']}")
        finetune = mobilebert_ablation.finetune_argv(student, row["task"], row["seed"], args)
        assert "kdbert " + " ".join(finetune) == row["finetune_command"]
    placed = mobilebert_ablation.parse_args(["--runs-dir", "R", "--corpus", "C.gz", "--data-dir", "G", "--teacher", "T",
                                             "--mlm-steps", "300", "--mlm-unfreeze", "2", "--batch-size", "32"])
    head = mobilebert_ablation.mlm_head_argv(placed)
    assert head[:3] == ["mlm-head", "--encoder", "T"] and _value(head, "--output-dir") == "R/mlm-mb"
    assert (_value(head, "--steps"), _value(head, "--unfreeze-top-layers"), _value(head, "--corpus")) == \
        ("300", "2", "C.gz")
    general = mobilebert_ablation.general_argv("joint", 43, placed)
    assert (_value(general, "--teacher"), _value(general, "--corpus"), _value(general, "--output-dir"),
            _value(general, "--batch-size")) == ("R/mlm-mb", "C.gz", "R/mb-joint-s43", "32")
    finetune = mobilebert_ablation.finetune_argv(Path("R/mb-joint-s43"), "sst2", 43, placed)
    assert (_value(finetune, "--data-dir"), _value(finetune, "--output-dir")) == ("G", "R/mb-joint-s43-sst2")
    assert "--mixed-precision" not in general + finetune
    float32 = mobilebert_ablation.parse_args(["--mixed-precision", "no"])
    assert _value(mobilebert_ablation.general_argv("joint", 43, float32), "--mixed-precision") == "no"
    assert _value(mobilebert_ablation.finetune_argv(Path("R/s"), "sst2", 43, float32), "--mixed-precision") == "no"


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _mobilebert_plan(*options: str) -> dict:
    args = mobilebert_gpu.parse_args(["--results-dir", "res", "--runs-dir", "R", "--teacher", "T", "--data-dir", "G",
                                      "--corpus", "C.gz", *options])
    return {step.name: step for step in mobilebert_gpu.plan(args)}


def test_mobilebert_gpu_plan_steps_needs_and_results():
    steps = _mobilebert_plan("--seeds", "42", "43", "--tasks", "cola", "mrpc")
    ablations = [f"ablation-{s}-s{seed}" for seed in (42, 43) for s in ("progressive", "joint", "auxiliary", "none")]
    distill = [f"{t}-{v}-s{seed}" for seed in (42, 43) for t in ("cola", "mrpc")
               for v in ("mobilebert-task", "mobilebert-finetune")]
    assert list(steps) == ["mlm", "teacher-cola", "teacher-mrpc", *ablations, *distill, "bench-cola", "bench-mrpc"]
    mlm = steps["mlm"]
    assert "--mlm-only" in mlm.argv and (_value(mlm.argv, "--mlm-steps"), _value(mlm.argv, "--mlm-unfreeze")) == \
        ("1000", "0")  # the head only: the encoder the student copies stays the task teachers' own
    assert mlm.result == ("mobilebert_ablation", "teacher_mlm_head") and mlm.output == "R/mlm-mb/config.json"
    teacher = steps["teacher-mrpc"]
    assert teacher.argv[1].endswith("teacher_glue.py") and _value(teacher.argv, "--model") == "T"
    assert "--build-missing" in teacher.argv and teacher.result == ("teacher_glue", "mrpc/cpu")
    joint = steps["ablation-joint-s43"]
    assert joint.argv[1].endswith("mobilebert_ablation.py") and joint.needs == ["mlm"]
    assert [_value(joint.argv, f) for f in ("--strategies", "--seeds", "--layer-steps", "--pretrain-steps",
                                            "--sequences", "--finetune-steps", "--teacher", "--corpus",
                                            "--runs-dir")] == ["joint", "43", "1000", "4000", "60000", "600", "T",
                                                               "C.gz", "R"]
    assert joint.argv[joint.argv.index("--tasks") + 1:][:2] == ["sst2", "mrpc"]
    assert joint.result == ("mobilebert_ablation", "joint/s43/mrpc") and joint.output is None
    assert steps["ablation-progressive-s42"].output == "R/mb-progressive-s42/general_report.json"
    kd = steps["cola-mobilebert-task-s43"]
    assert kd.needs == ["ablation-progressive-s42", "teacher-cola"]
    assert [_value(kd.argv, f) for f in ("--variants", "--seeds", "--mobilebert-general", "--budget",
                                         "--max-train-examples")] == ["mobilebert-task", "43",
                                                                      "R/mb-progressive-s42", "cpu", "8551"]
    assert kd.result == ("distill", "cola/mobilebert-task/cpu/seed43") and kd.output is None
    assert steps["cola-mobilebert-task-s42"].output == "R/distill-cola-mobilebert-task-s42/config.json"
    assert "--max-train-examples" not in steps["mrpc-mobilebert-finetune-s42"].argv
    bench = steps["bench-mrpc"]
    assert [_value(bench.argv, f) for f in ("--model", "--compare", "--seq-len")] == \
        ["R/distill-mrpc-mobilebert-task-s42", "R/teacher-mrpc", "128"]
    assert bench.argv[2] == "bench" and bench.result == ("mobilebert_bench", "mrpc/seq128")
    assert set(bench.needs) == {"teacher-mrpc", "bench-cola", *distill}  # last, one at a time
    # another budget and general student
    other = _mobilebert_plan("--seeds", "7", "--general-seed", "7", "--tasks", "rte", "--layer-steps", "5",
                             "--strategies", "progressive")
    assert list(other) == ["mlm", "teacher-rte", "ablation-progressive-s7", "rte-mobilebert-task-s7",
                           "rte-mobilebert-finetune-s7", "bench-rte"]
    assert _value(other["ablation-progressive-s7"].argv, "--layer-steps") == "5"
    assert _value(other["rte-mobilebert-task-s7"].argv, "--mobilebert-general") == "R/mb-progressive-s7"
    with pytest.raises(SystemExit):  # the distill runs need the progressive student of --general-seed
        mobilebert_gpu.parse_args(["--results-dir", "res", "--seeds", "43"])


def test_mobilebert_gpu_reruns_a_recorded_step_whose_folder_a_pending_step_needs(tmp_path):
    runs, results = tmp_path / "R", tmp_path / "res"
    args = mobilebert_gpu.parse_args(["--results-dir", str(results), "--runs-dir", str(runs), "--seeds", "42",
                                      "--tasks", "rte", "--strategies", "progressive"])
    results.mkdir()
    (results / "teacher_glue.json").write_text(json.dumps({"rte/cpu": {}}))
    (results / "mobilebert_ablation.json").write_text(json.dumps({"teacher_mlm_head": {},
                                                                  "progressive/s42/mrpc": {}}))
    steps = mobilebert_gpu.plan(args)
    # a fresh machine: nothing under R, the distill runs still to do
    assert mobilebert_gpu.reopen(steps, results) == ["mlm", "teacher-rte", "ablation-progressive-s42"]
    assert all(s.result is None for s in steps if s.name in ("mlm", "teacher-rte", "ablation-progressive-s42"))
    # the teacher's folder is there: only what is missing runs again
    (runs / "teacher-rte").mkdir(parents=True)
    (runs / "teacher-rte" / "metrics.json").write_text("{}")
    assert mobilebert_gpu.reopen(mobilebert_gpu.plan(args), results) == ["mlm", "ablation-progressive-s42"]
    # every distill run recorded: a missing folder no longer matters
    (results / "distill.json").write_text(json.dumps({f"rte/{v}/cpu/seed42": {} for v in mobilebert_gpu.VARIANTS}))
    (results / "mobilebert_bench.json").write_text(json.dumps({"rte/seq128": {}}))
    assert mobilebert_gpu.reopen(mobilebert_gpu.plan(args), results) == []


def test_gpu_bundle_writes_a_float16_teacher_glue_folders_and_a_corpus_slice(tmp_path, tiny_tokenizer):
    import torch
    from safetensors import safe_open
    from transformers import AutoModel, AutoTokenizer, BertModel

    from kdbert.core.loading import load_sequence_classifier

    glue = tmp_path / "glue_data"
    for task in gpu_bundle.GLUE_TASKS:
        write_glue_task(glue, task, n_train=30)
    docs = [f'<doc id="{i}" url="u" title="t{i}">\nt{i}\n\n' + "the cat sat on the mat .\n" * 20 + "</doc>\n"
            for i in range(3)]
    corpus = tmp_path / "corpus.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as handle:
        handle.write("".join(docs))
    torch.manual_seed(0)
    teacher = tmp_path / "teacher"
    BertModel(tiny_bert_config(tiny_tokenizer)).save_pretrained(teacher)
    tiny_tokenizer.save_pretrained(teacher)
    out = tmp_path / "carry"
    # a limit between one and two articles of text: the slice ends with the second article
    sizes = gpu_bundle.build_bundle(out, glue, corpus, str(teacher), sst2_rows=10,
                                    corpus_mb=(len(docs[0]) + 10) / 1e6)
    assert sizes["total"] == sum(v for k, v in sizes.items() if k != "total")
    with safe_open(str(out / "teacher" / "model.safetensors"), "pt") as weights:
        assert {weights.get_tensor(name).dtype for name in weights.keys()} == {torch.float16}
    loaded = AutoModel.from_pretrained(out / "teacher")
    original = BertModel.from_pretrained(teacher)
    for (name, value), (_, reference) in zip(loaded.state_dict().items(), original.state_dict().items()):
        assert value.dtype == torch.float32 and torch.equal(value, reference.half().float()), name
    assert next(load_sequence_classifier(str(out / "teacher"), 2, new_head_ok=True).parameters()).dtype == \
        torch.float32  # kdbert finetune --model's loader
    assert AutoTokenizer.from_pretrained(out / "teacher").get_vocab() == tiny_tokenizer.get_vocab()
    sst2 = (out / "glue_data" / "SST-2" / "train.tsv").read_text().splitlines()
    assert sst2 == (glue / "SST-2" / "train.tsv").read_text().splitlines()[:11]  # header + 10 rows
    for task in gpu_bundle.GLUE_TASKS:
        assert (out / "glue_data" / task / "dev.tsv").read_bytes() == (glue / task / "dev.tsv").read_bytes()
    assert (out / "glue_data" / "RTE" / "train.tsv").read_bytes() == (glue / "RTE" / "train.tsv").read_bytes()
    with gzip.open(out / "corpus.txt.gz", "rt", encoding="utf-8") as handle:
        assert handle.read() == docs[0] + docs[1]
    with pytest.raises(SystemExit, match="exists"):
        gpu_bundle.build_bundle(out, glue, corpus, str(teacher))
    with pytest.raises(SystemExit, match="above --max-mib 0.01"):
        gpu_bundle.build_bundle(tmp_path / "small", glue, corpus, str(teacher), max_mib=0.01)
    assert not (tmp_path / "small").exists() and not (tmp_path / "small.tmp").exists()


def test_gpu_bundle_keeps_the_first_word_vectors_and_the_training_words_in_file_order(tmp_path):
    """The cut file gives a BiLSTM the vocabulary and vectors the whole file gives: its first lines as far
    as each task's --frequent-words read, then the training words' lines; a dev-only word goes."""
    from kdbert.families.bilstm.model import init_bilstm

    glue = tmp_path / "glue_data"
    (glue / "CoLA").mkdir(parents=True)
    (glue / "RTE").mkdir()
    (glue / "CoLA" / "train.tsv").write_text("src\t1\t\tThe cat didn't sit.\n", encoding="utf-8")
    (glue / "CoLA" / "dev.tsv").write_text("src\t0\t\tA zebra ran.\n", encoding="utf-8")  # zebra: dev only
    (glue / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\tA dog ran.\tThe dog sat.\t"
                                            "entailment\n", encoding="utf-8")
    vectors = tmp_path / "vectors.txt.gz"
    lines = ["12 2\n", "the 0.1 0.2\n", "Cat 0.3 0.4\n", "e-mail 0.5 0.5\n", "fish 0.5 0.6\n", "Fish 0.6 0.6\n",
             "dog 0.7 0.8\n", "zebra 0.9 1.0\n", "sit 1.1 1.2\n", "FISH 1.3 1.4\n", "bird 1.5 1.6\n", "sat 1.7 1.8\n",
             "Ran 1.9 2.0\n"]
    with gzip.open(vectors, "wt", encoding="utf-8") as handle:
        handle.write("".join(lines))
    words = gpu_bundle.train_words(glue)
    assert words["CoLA"] == {"the", "cat", "did", "n't", "sit", ".", "src", "1"} and "zebra" not in words["RTE"]
    cut = tmp_path / "kept.txt.gz"
    kept = gpu_bundle.filter_word_vectors(vectors, cut, words, frequent=2)
    with gzip.open(cut, "rt", encoding="utf-8") as handle:
        # the header goes; the first lines stay until CoLA (fish, dog) and RTE (cat, fish) each had 2 words
        # beyond their training words (e-mail, which no vocabulary holds, and Fish, a repeat, count for
        # neither); after them the training words' lines (Ran lowercased) and FISH (a first word) stay,
        # zebra (a dev word) and bird go
        assert handle.read() == "".join(lines[1:7] + [lines[8], lines[9], lines[11], lines[12]])
    assert kept == 10
    for texts in (["The cat didn't sit."], ["A dog ran.", "The dog sat."]):
        built = [init_bilstm(texts, 2, False, word_vectors=file, frequent_words=2, hidden_size=3, fc_size=4)
                 for file in (vectors, cut)]
        assert built[0][1].words == built[1][1].words
        assert built[0][0].embeddings.weight.tolist() == built[1][0].embeddings.weight.tolist()
    assert "zebra" not in built[1][1].words and built[1][1].words[-2:] == ["cat", "fish"]
    # the default keeps the BiLSTM's FREQUENT_WORDS: here the whole file but the header
    assert gpu_bundle.filter_word_vectors(vectors, tmp_path / "all.txt.gz", words) == 12


def test_mobilebert_gpu_bench_records_the_student_against_the_teacher(results_dir, tmp_path, tiny_tokenizer):
    from conftest import save_tiny_classifier

    teacher = save_tiny_classifier(tmp_path / "teacher-rte", tiny_tokenizer, max_position_embeddings=160)
    student = save_tiny_classifier(tmp_path / "distill-rte-mobilebert-task-s42", tiny_tokenizer, seed=1,
                                   num_hidden_layers=1, max_position_embeddings=160)
    mobilebert_gpu.bench(["--task", "rte", "--model", str(student), "--compare", str(teacher), "--seq-len", "128"])
    row = json.loads((results_dir / "mobilebert_bench.json").read_text())["rte/seq128"]
    assert row["command"] == f"kdbert bench --model {student} --compare {teacher} --seq-len 128 --threads 1"
    assert (row["teacher"]["name"], row["student"]["name"]) == ("teacher-rte", "distill-rte-mobilebert-task-s42")
    assert row["student"]["params_total"] < row["teacher"]["params_total"] and row["teacher"]["speedup"] == 1.0
    assert row["student"]["seq_len"] == 128 and row["student"]["threads"] == 1


def test_majority_class_score_predicts_the_commonest_training_label_on_dev(tmp_path):
    from sections.shared import majority_class_score

    sst2 = tmp_path / "glue" / "SST-2"
    sst2.mkdir(parents=True)
    (sst2 / "train.tsv").write_text("sentence\tlabel\ngood\t1\nfine\t1\nbad\t0\n")
    (sst2 / "dev.tsv").write_text("sentence\tlabel\nnice\t1\nawful\t0\npoor\t0\ndull\t0\n")
    assert majority_class_score("sst2", str(tmp_path / "glue")) == 25.0  # always 1: 1 of 4 right
    write_glue_task(tmp_path / "glue", "STS-B")
    assert majority_class_score("stsb", str(tmp_path / "glue")) == 0.0  # the mean correlates with nothing
    assert majority_class_score("rte", str(tmp_path / "glue")) is None  # no RTE files: no baseline row


def test_report_renders_one_section_or_the_whole_page(results_dir, capsys, monkeypatch):
    import report
    from sections import SECTIONS, augmentation_results, render, scoreboard, trust_results

    monkeypatch.setattr(augmentation_results, "GPU_RESULTS", results_dir / "gpu-h100")
    monkeypatch.setattr(scoreboard, "GPU_RESULTS", results_dir / "gpu-h100")
    monkeypatch.setattr(trust_results, "GPU_H200_BASE_RESULTS", results_dir / "gpu-h200-base")

    names = [name for name, _ in SECTIONS]
    assert len(set(names)) == len(names) and names[0] == "intro"
    report.main(["--list"])
    assert capsys.readouterr().out.split() == names
    report.main(["--section", "intro"])  # no results: the introduction only, from its note
    intro = capsys.readouterr().out
    assert intro.startswith("# kdbert benchmarks\n\nThe headline: generated by `python benchmarks/report.py`")
    assert "[archive](docs/benchmarks/archive.md)" in intro  # linked from the repository root
    assert render() + "\n" == intro
    results_dir.mkdir()
    (results_dir / "general.json").write_text(json.dumps({"tinybert": {
        "method": "tinybert", "steps": 150, "first_loss": {"loss": 9.5}, "last_loss": {"loss": 7.15},
        "wall_seconds": 600, "machine": "2 cores", "date": "2026-11-24", "command": "kdbert distill general"}}))
    report.main(["--section", "general"])
    assert capsys.readouterr().out.startswith("## General distillation runs (CPU budgets)\n\nThe starting students")
    assert "| tinybert | 150 | 9.50 | 7.15 | 10 min | 2 cores | 2026-11-24 | `kdbert distill general` |" in render()


def test_every_section_sits_on_the_headline_or_one_page_and_every_page_is_in_the_docs_nav():
    import yaml
    from sections import SECTIONS
    from sections.shared import HEADLINE, PAGES

    placed = HEADLINE + [name for _, names in PAGES.values() for name in names]
    assert [name for name, _ in SECTIONS] == placed  # each once, in page order
    repo = Path(__file__).resolve().parents[1]
    nav = yaml.safe_load((repo / "mkdocs.yml").read_text())["nav"]
    benchmarks = next(entry["Benchmarks"] for entry in nav if isinstance(entry, dict) and "Benchmarks" in entry)
    assert [next(iter(entry.values())) for entry in benchmarks] == (
        ["benchmarks/index.md"] + [f"benchmarks/{page}.md" for page in PAGES])


def test_report_writes_the_headline_and_every_page_and_checks_them(results_dir, tmp_path, capsys, monkeypatch):
    import report
    from sections import augmentation_results, scoreboard
    from sections.shared import PAGES

    monkeypatch.setattr(augmentation_results, "GPU_RESULTS", results_dir / "gpu-h100")
    monkeypatch.setattr(scoreboard, "GPU_RESULTS", results_dir / "gpu-h100")
    monkeypatch.setattr(report, "ROOT", tmp_path)
    report.main([])  # no results: every page is there all the same, for the docs nav
    pages = tmp_path / "docs" / "benchmarks"
    assert sorted(p.name for p in pages.iterdir()) == sorted(["index.md", *(f"{page}.md" for page in PAGES)])
    assert (pages / "speed.md").read_text().startswith("# Speed and deployment\n\nGenerated by ")
    assert "No results recorded yet." in (pages / "speed.md").read_text()
    headline = (tmp_path / "BENCHMARKS.md").read_text()
    assert "The full record, [speed.md](docs/benchmarks/speed.md): no results recorded yet." in headline
    assert (pages / "index.md").read_text() == headline.replace("](docs/benchmarks/", "](")
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        report.main(["--check"])
    assert done.value.code == 0 and capsys.readouterr().out == "every page is current\n"
    (pages / "archive.md").write_text("edited by hand\n")
    with pytest.raises(SystemExit) as done:
        report.main(["--check"])
    assert done.value.code == 1 and capsys.readouterr().out == "stale: docs/benchmarks/archive.md\n"


def test_the_headline_from_the_recorded_results_is_a_short_scoreboard_linking_every_page(tmp_path, monkeypatch):
    """BENCHMARKS.md as the recorded results render it: at most 400 lines, every scoreboard row with
    its command and the page of its full record, a short section per study, nothing superseded."""
    import re

    import report
    from sections import speed_results
    from sections.shared import PAGES

    (tmp_path / "docs").mkdir()
    monkeypatch.setattr(speed_results, "ROOT", tmp_path)  # the Pareto plot, not the repository's
    written = report.documents(tmp_path)
    headline = written[tmp_path / "BENCHMARKS.md"].splitlines()
    assert len(headline) <= 400
    start = headline.index("| result | ours | published (paper) | machine, date | command | full record |")
    rows = headline[start + 2:headline.index("", start)]
    assert len(rows) >= 10
    pages_with_rows = set()
    for row in rows:
        command, record = row.strip("| ").split(" | ")[-2:]
        assert re.fullmatch(r"`([A-Z_]+=\S+ )*(python benchmarks/\S+\.py|kdbert) [^`]+`", command), row
        page = re.fullmatch(r"\[.+\]\(docs/benchmarks/([a-z-]+)\.md\)", record).group(1)
        assert tmp_path / "docs" / "benchmarks" / f"{page}.md" in written
        pages_with_rows.add(page)
    assert pages_with_rows == set(PAGES) - {"archive"}  # a current result for every study
    for page, (title, _) in PAGES.items():
        assert (f"## {title}" in headline) == (page != "archive")
    assert not any("before bf16" in line for line in headline)  # the superseded run is on the archive
    assert "## The main job before bf16 became the default" in written[tmp_path / "docs/benchmarks/archive.md"]
    linked = set(re.findall(r"\]\(([a-z-]+\.md)\)", written[tmp_path / "docs" / "benchmarks" / "index.md"]))
    assert linked and all(tmp_path / "docs" / "benchmarks" / name in written for name in linked)


def test_data_and_runs_roots_come_from_one_place(monkeypatch, tmp_path):
    import importlib

    import paths

    repo = Path(__file__).resolve().parents[1]
    try:
        monkeypatch.chdir(repo)  # from the repository root, as documented: the relative defaults
        monkeypatch.delenv("KDBERT_DATA_ROOT", raising=False)
        monkeypatch.delenv("KDBERT_RUNS_DIR", raising=False)
        importlib.reload(paths)
        assert (paths.GLUE_DIR, paths.run_folder("teacher-rte"), paths.run_folder()) == (
            "../shared/data/glue_data", "runs/teacher-rte", "runs")
        monkeypatch.chdir(tmp_path)  # from elsewhere: the same folders, absolute
        importlib.reload(paths)
        assert Path(paths.GLUE_DIR) == repo.parent / "shared" / "data" / "glue_data"
        assert Path(paths.run_folder("x")) == repo / "runs" / "x"
        monkeypatch.setenv("KDBERT_DATA_ROOT", str(tmp_path / "data"))
        monkeypatch.setenv("KDBERT_RUNS_DIR", str(tmp_path / "runs"))
        importlib.reload(paths)
        assert paths.CORPUS == str(tmp_path / "data" / "corpus" / "enwiki_wikiextractor_sample.txt.gz")
        assert paths.run_folder("gpu") == str(tmp_path / "runs" / "gpu")
    finally:
        monkeypatch.undo()
        importlib.reload(paths)


def test_decide_draw_reads_the_kept_share_of_each_subset_and_draws_each_without_replacement():
    # 4 rows: the teacher right on all, the student on rows 0 and 1 only
    predictions = {"teacher": np.array([1, 0, 1, 0]), "student": np.array([1, 0, 0, 1])}
    references = np.array([1, 0, 1, 0])
    subsets = np.array([[0, 1], [0, 2], [2, 3]])
    kept = decide_draw.kept_over(subsets, ["accuracy"], predictions, references)
    assert kept.tolist() == [1.0, 0.5, 0.0]  # student 100, 50, 0 over the teacher's 100
    drawn = decide_draw.random_subsets(rows=10, size=10, draws=5)
    assert all(sorted(row) == list(range(10)) for row in drawn.tolist())  # no row twice in a draw
    assert decide_draw.mean_error(np.array([1.0, 3.0]), np.array([2.0, 2.0]), regression=True) == 1.0
    assert decide_draw.mean_error(np.array([1, 0, 1]), np.array([1, 1, 1]), regression=False) == 1 / 3


def test_decide_draw_places_the_dev_against_decide_gap_among_re_drawn_splits_of_both():
    # the teacher right on all 4 rows, the student on rows 0 and 1 only; parts of 2 rows and the rest
    predictions = {"teacher": np.array([1, 0, 1, 0]), "student": np.array([1, 0, 0, 1])}
    references = np.array([1, 0, 1, 0])
    orders = np.array([[0, 1, 2, 3], [0, 2, 1, 3], [2, 3, 0, 1]])
    gaps = decide_draw.permuted_gaps(["accuracy"], predictions, references, 2, orders)
    assert gaps.tolist() == [1.0, 0.0, -1.0]  # kept 100% - 0%, 50% - 50%, 0% - 100%
    assert decide_draw.two_sided_p(1.0, gaps) == 2 / 3  # two of three at least 1 from zero
    assert decide_draw.two_sided_p(0.0, gaps) == 1.0
    assert sorted(decide_draw.random_orders(rows=6, draws=3)[1].tolist()) == list(range(6))


def test_the_kept_table_reads_the_gap_against_its_measured_or_estimated_noise():
    from sections.trust_results import gap_noise_cell

    measured = {"gap_se": 0.0204}  # 2.04 points of kept: a gap of 3 is within twice it, 4.5 is not
    assert gap_noise_cell("quickstart sst2-avx2", measured, 1.2, 688, -3.0) == "yes (± 2.0)"
    assert gap_noise_cell("quickstart sst2-avx2", measured, 1.2, 688, 4.5) == "no (± 2.0)"
    # estimated: MRPC's margin 3.0 over 184 deciding and 408 dev rows: 3.0 * sqrt(1 + 184 / 408) = 3.61
    assert gap_noise_cell("compress mrpc/x4-trust-pair", {}, 3.0, 184, 7.0) == "yes (≈ ± 3.6)"
    assert gap_noise_cell("compress mrpc/x4-trust-pair", {}, 3.0, 184, 7.3) == "no (≈ ± 3.6)"
    assert gap_noise_cell("compress imdb/x4", {}, 3.0, 184, 1.0) == "-"  # no dev size known


def test_sentences_like_a_task_follow_its_training_rows_word_counts(tmp_path):
    from kdbert.data.load import TaskOptions

    glue = tmp_path / "glue"
    (glue / "CoLA").mkdir(parents=True)
    train = [f"src\t1\t\t{' '.join(['word'] * n)}" for n in [4] * 30 + [6] * 10]  # three rows of 4 words to one of 6
    dev = ["src\t1\t\tthe cat sat here"] * 4
    (glue / "CoLA" / "train.tsv").write_text("\n".join(train) + "\n")
    (glue / "CoLA" / "dev.tsv").write_text("\n".join(dev) + "\n")
    corpus = tmp_path / "corpus.txt.gz"
    four = [f"Alpha beta gamma delta{i}." for i in range(50)]
    six = [f"One two three four five six{i}." for i in range(50)]
    five = [f"One two three four five{i}." for i in range(50)]
    with gzip.open(corpus, "wt") as handle:
        handle.write("<doc id=1>\n" + " ".join(four + six + five) + "\n</doc>\n")
    out = wiki_transfer.sentences_like(tmp_path / "like.jsonl", TaskOptions(task="cola", data_dir=str(glue)), 20,
                                       str(corpus))
    rows = [json.loads(line)["sentence"] for line in out.read_text().splitlines()]
    counts = sorted(len(row.split()) for row in rows)
    assert counts == [4] * 15 + [6] * 5  # 20 rows in the training rows' 3:1, no 5-word sentence
    assert len(set(rows)) == 20


def test_each_edit_breaks_a_sentence_by_one_word_and_perturbed_breaks_the_share_asked():
    import random

    words = "the cat sat on the mat".split()
    for edit, size in ((wiki_transfer.swap_neighbours, 6), (wiki_transfer.drop_word, 5),
                       (wiki_transfer.repeat_word, 7), (wiki_transfer.move_word, 6)):
        for seed in range(20):
            broken = edit(words, random.Random(seed))
            assert len(broken) == size and set(broken) <= set(words)  # one word fewer or more, none made up
            if size == 6:  # a swap or a move changes the order
                assert broken != words
    texts = [f"sentence number {i} of ten" for i in range(10)] + ["too short"]
    out = wiki_transfer.perturbed(texts, 0.5, seed=0)
    changed = [i for i, (a, b) in enumerate(zip(texts, out)) if a != b]
    assert out[-1] == "too short" and 4 <= len(changed) <= 6  # round(0.5 * 11) = 6 drawn; the short one whole
    assert out == wiki_transfer.perturbed(texts, 0.5, seed=0)  # seeded


def test_a_run_on_other_added_rows_never_overwrites_a_recorded_one():
    from kdbert.errors import KdbertError

    key = "mrpc/bert-1x384/6000-first300/recipe-mined-pairs/seed43"
    # recorded before the field: its rows read off its command, the options it left out at their defaults
    old = {key: {"command": "python benchmarks/recipe_ablation.py --task mrpc --steps 6000"}}
    at = lambda low, rows: Namespace(mined_low=low, unlabelled_rows=rows)
    recipe_ablation.check_keys({key: "recipe-mined-pairs"}, old, at(0.5, 30000))  # the same rows: it continues
    with pytest.raises(KdbertError, match=r"recorded with other added rows \(-0.5-30000 against -0.3-60000\); "
                                          "pass another --key-suffix"):
        recipe_ablation.check_keys({key: "recipe-mined-pairs"}, old, at(0.3, 60000))
    given = {key: {"command": "... --unlabelled-rows 60000 --mined-low 0.3"}}
    recipe_ablation.check_keys({key: "recipe-mined-pairs"}, given, at(0.3, 60000))
    recorded = {key: {"added_rows": "-0.4-60000", "command": ""}}
    with pytest.raises(KdbertError):
        recipe_ablation.check_keys({key: "recipe-mined-pairs"}, recorded, at(0.3, 60000))
    recipe_ablation.check_keys({"other": "recipe-mined-pairs"}, recorded, at(0.3, 60000))  # not recorded: runs
    recipe_ablation.check_keys({key: "recipe"}, {key: {"command": ""}}, at(0.3, 60000))  # adds no rows


def test_runs_on_other_added_rows_never_share_a_folder():
    args = Namespace(mined_low=0.5, unlabelled_rows=30000)
    tags = {recipe_ablation.rows_tag(variant, Namespace(mined_low=low, unlabelled_rows=rows))
            for variant in ("recipe-mined-pairs",) for low in (0.4, 0.5) for rows in (30000, 60000)}
    assert len(tags) == 4
    assert recipe_ablation.rows_tag("imdb-sentences", args) != recipe_ablation.rows_tag(
        "imdb-sentences", Namespace(mined_low=0.5, unlabelled_rows=60000))
    assert recipe_ablation.rows_tag("recipe-wiki-sentences", args) == "-30000"
    assert recipe_ablation.rows_tag("recipe", args) == ""
