"""The sections of BENCHMARKS.md, in page order: each renders its Markdown lines from
``benchmarks/results/*.json`` (and the hand-written notes in ``benchmarks/notes/``), or nothing
when its results are missing. A new section is a function here and one line in ``SECTIONS``."""

from __future__ import annotations

from collections.abc import Callable

from sections import (augmentation_results, bilstm_results, compress_results, distill_results, long_text_results,
                      mobilebert_results, reproduction, scoreboard, speed_results, students_results, trust_results)

SECTIONS: list[tuple[str, Callable[[], list[str]]]] = [
    ("intro", reproduction.intro_section),
    ("scoreboard", scoreboard.scoreboard_section),
    ("kept", trust_results.kept_section),
    ("teachers", trust_results.teachers_section),
    ("quickstart", speed_results.quickstart_section),
    ("compress", compress_results.compress_section),
    ("compress-budget", compress_results.compress_budget_section),
    ("compress-engines", compress_results.compress_engines_section),
    ("general-students", students_results.general_students_section),
    ("bilstm-vectors", bilstm_results.bilstm_vectors_section),
    ("rerun", reproduction.rerun_section),
    ("deploy", speed_results.deploy_section),
    ("export-graphs", speed_results.export_graphs_section),
    ("breakdown", speed_results.breakdown_section),
    ("int8-targets", speed_results.int8_targets_section),
    ("serve-load", speed_results.serve_load_section),
    ("efficiency", speed_results.efficiency_section),
    ("teacher", distill_results.teacher_section),
    ("bench", speed_results.bench_section),
    ("throughput", speed_results.throughput_section),
    ("precision", distill_results.precision_section),
    ("tinybert", distill_results.tinybert_section),
    ("augmentation-gpu", augmentation_results.augmentation_gpu_section),
    ("pkd", distill_results.pkd_section),
    ("general", distill_results.general_section),
    ("mlm-head", distill_results.mlm_head_section),
    ("augmented-files", augmentation_results.augmented_files_section),
    ("augment-throughput", augmentation_results.augment_section),
    ("mobilebert-ops", mobilebert_results.mobilebert_ops_section),
    ("mobilebert-ablation", mobilebert_results.mobilebert_ablation_section),
    ("mobilebert-task", mobilebert_results.mobilebert_task_section),
    ("bilstm-augment", bilstm_results.bilstm_augment_section),
    ("bilstm-distill", bilstm_results.bilstm_distill_section),
    ("teacher-cache", speed_results.teacher_cache_section),
    ("imdb", long_text_results.imdb_section),
    ("squad", long_text_results.squad_section),
    ("reruns", reproduction.reruns_section),
]


def render(names: list[str] | None = None) -> str:
    """The Markdown of the sections named (all, in page order, when ``names`` is None)."""
    chosen = SECTIONS if names is None else [(name, section) for name, section in SECTIONS if name in names]
    return "\n".join(line for _, section in chosen for line in section())
