"""benchmarks/distill_step.py's arithmetic (the step benchmarks/throughput.py times) and its BENCHMARKS.md
section, on hand-computed values (nothing timed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import distill_step  # noqa: E402
from sections import speed_results  # noqa: E402

from kdbert.core.matching import Match  # noqa: E402


def test_step_flops_counts_the_teacher_once_and_the_student_and_projections_three_times():
    # all-MiniLM-L6-v2 at 64 tokens: 6 * (64 * (8*384^2 + 4*384*1536) + 4*64^2*384) + pooler and 2-label head
    # 2*384*384 + 2*384*2, as kdbert.deploy.bench.count_flops counts it
    teacher = 6 * (64 * (8 * 384**2 + 4 * 384 * 1536) + 4 * 64**2 * 384) + 2 * 384 * 384 + 2 * 384 * 2
    assert teacher == 1_396_999_680
    projections = distill_step.projection_flops(64, [(312, 384)] * 5)
    assert projections == 5 * 2 * 312 * 384 * 64 == 76_677_120
    assert distill_step.step_flops(teacher, 600_000_000, projections) == teacher + 3 * (600_000_000 + 76_677_120)
    assert distill_step.step_flops(10, 2) == 16


def test_examples_per_second_uses_the_steps_after_the_warmup():
    times = [0.0, 10.0, 11.0, 12.5, 13.0]  # end of steps 1..5
    assert distill_step.examples_per_second(times, warmup=2, steps=3, batch_size=32) == pytest.approx(32 * 3 / 3.0)
    assert distill_step.examples_per_second(times, warmup=1, steps=1, batch_size=8) == pytest.approx(8 / 10.0)
    with pytest.raises(ValueError):
        distill_step.examples_per_second(times, warmup=2, steps=4, batch_size=32)


def test_gflops_and_share_of_the_peak():
    achieved, share = distill_step.gflops_and_share(40.0, 3.5e9, 200.0)  # 40 * 3.5 = 140 GFLOP/s of 200
    assert achieved == pytest.approx(140.0) and share == pytest.approx(70.0)


def test_kdbert_matches_become_textbrewer_matches_with_hf_layer_numbers():
    matches = [Match("embedding", "embeddings", "hidden_mse", student_layer=0, teacher_layer=0, projection="linear"),
               Match("attention", "attention_scores", "attention_mse", student_layer=1, teacher_layer=2),
               Match("hidden", "hidden", "hidden_mse", student_layer=4, teacher_layer=6, projection="linear")]
    assert distill_step.textbrewer_matches(matches, 312, 384, 1e-4) == [
        {"layer_T": 0, "layer_S": 0, "feature": "hidden", "loss": "hidden_mse", "weight": 1.0,
         "proj": ["linear", 312, 384, {"lr": 1e-4}]},
        {"layer_T": 1, "layer_S": 0, "feature": "attention", "loss": "attention_mse", "weight": 1.0},
        {"layer_T": 6, "layer_S": 4, "feature": "hidden", "loss": "hidden_mse", "weight": 1.0,
         "proj": ["linear", 312, 384, {"lr": 1e-4}]}]
    with pytest.raises(ValueError):
        distill_step.textbrewer_matches([Match("prediction", "logits", "soft_cross_entropy")], 312, 384, 1e-4)


def _row(framework, precision, rate, vs_same, vs_fp32, share):
    return {"framework": framework, "precision": precision, "seq_len": 64, "examples_per_s": rate,
            "gflops": rate * 3.5, "percent_of_peak": share, "vs_textbrewer_same_precision": vs_same,
            "vs_textbrewer_fp32": vs_fp32, "runs": [{"round": 0, "examples_per_s": rate, "load_before": 0.1,
                                                     "load_after": 0.2}]}


def test_report_section_renders_the_rows_and_the_targets(tmp_path):
    record = {"threads": 2, "teacher": "all-MiniLM-L6-v2 (packaged)", "student": "tinybert4", "batch_size": 32,
              "learning_rate": 5e-5, "textbrewer": "0.2.1.post1", "steps": 30, "warmup": 5, "rounds": 3,
              "matmul_gflops": {"fp32": {"peak": 190.0}, "bf16": {"peak": 790.0}},
              "flops_per_example": {"64": {"step": 3.5e9, "teacher_forward": 1.4e9, "student_forward": 0.6e9,
                                           "projections_forward": 0.077e9,
                                           "matches": ["embedding: 1 * hidden_mse(embeddings[0] via embeddings, "
                                                       "embeddings[0])",
                                                       "attention: 1 * attention_mse(attention_scores[1], "
                                                       "attention_scores[2])"]}},
              "rows": [_row("textbrewer", "fp32", 40.0, 1.0, 1.0, 73.7), _row("kdbert", "fp32", 44.0, 1.1, 1.1, 81.0),
                       _row("textbrewer", "bf16", 50.0, 1.0, 1.25, 22.2),
                       _row("kdbert", "bf16", 130.0, 2.6, 3.25, 57.6)],
              "load_average_max": 0.3, "load_average_min": 0.1, "machine": "x86_64 2 CPU cores, no GPU",
              "torch": "2.x", "date": "2026-01-01", "command": "python benchmarks/throughput.py --threads 2"}
    (tmp_path / "throughput.json").write_text(json.dumps({"t2": record}))
    text = "\n".join(speed_results.throughput_section(tmp_path))
    assert "| kdbert | bf16 | 64 | 130.0 | 2.60x | 3.25x | 455 | 58% | 130.0 (0.1) |" in text
    assert "| textbrewer | fp32 | 64 | 40.0 | 1.00x | 1.00x | 140 | 74% |" in text
    assert "embedding x1 (projected), attention x1" in text
    assert ">= 3x TextBrewer's examples/s: met by kdbert's fastest setting against TextBrewer in fp32 (3.25x)" in text
    assert ">= 50% of the bf16 matmul peak for kdbert's bf16 step: met (58%)" in text
    assert "shared" not in text  # load below the thread count
    assert speed_results.throughput_section(tmp_path / "none") == []
