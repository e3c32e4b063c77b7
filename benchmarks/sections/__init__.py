"""The sections of the benchmark pages: each renders its Markdown lines from
``benchmarks/results/*.json`` (and the hand-written notes in ``benchmarks/notes/``), or nothing
when its results are missing. BENCHMARKS.md is the headline (``shared.HEADLINE``, then a short
section per study); every other section goes on its study's page under docs/benchmarks/
(``shared.PAGES``). A new section is a function, one line in ``SECTIONS`` and its name in a page."""

from __future__ import annotations

from collections.abc import Callable

from sections import (augmentation_results, bilstm_results, compress_results, distill_results, long_text_results,
                      mobilebert_results, reproduction, scoreboard, speed_results, students_results, trust_results)
from sections.shared import LINK_BASE, PAGES

SECTIONS: list[tuple[str, Callable[[], list[str]]]] = [
    # the headline: BENCHMARKS.md
    ("intro", reproduction.intro_section),
    ("scoreboard", scoreboard.scoreboard_section),
    ("kept", trust_results.kept_section),
    ("agreement", trust_results.agreement_section),
    ("paired-margin", trust_results.paired_margin_section),
    ("winner-rule", trust_results.winner_rule_section),
    ("recipe-parts", compress_results.recipe_parts_section),
    ("teachers", trust_results.teachers_section),
    ("base-teachers", trust_results.base_teachers_section),
    ("base-teachers-gpu", trust_results.base_teachers_gpu_section),
    # the full records, page by page (shared.PAGES)
    ("quickstart", speed_results.quickstart_section),
    ("quickstart-seeds", speed_results.quickstart_seeds_section),
    ("checkpoint-rule", speed_results.checkpoint_rule_section),
    ("compress", compress_results.compress_section),
    ("kept-history", trust_results.kept_history_section),
    ("compress-budget", compress_results.compress_budget_section),
    ("spare-time", compress_results.spare_time_section),
    ("compress-engines", compress_results.compress_engines_section),
    ("recipe-ablation", compress_results.recipe_ablation_section),
    ("plateau", compress_results.plateau_section),
    ("epoch-cap", compress_results.epoch_cap_section),
    ("near-duplicates", trust_results.near_duplicates_section),
    ("kept-by-source", trust_results.kept_by_source_section),
    ("decide-draw", trust_results.decide_draw_section),
    ("timing-turns", speed_results.timing_turns_section),
    ("timing-together", speed_results.timing_together_section),
    ("timing-process", speed_results.timing_process_section),
    ("timing-threads", speed_results.timing_threads_section),
    ("general-students", students_results.general_students_section),
    ("pretrained-cuts", students_results.pretrained_cuts_section),
    ("deploy", speed_results.deploy_section),
    ("export-graphs", speed_results.export_graphs_section),
    ("breakdown", speed_results.breakdown_section),
    ("int8-targets", speed_results.int8_targets_section),
    ("serve-load", speed_results.serve_load_section),
    ("efficiency", speed_results.efficiency_section),
    ("bench", speed_results.bench_section),
    ("throughput", speed_results.throughput_section),
    ("teacher-cache", speed_results.teacher_cache_section),
    ("labelling", speed_results.labelling_section),
    ("teacher", distill_results.teacher_section),
    ("precision", distill_results.precision_section),
    ("tinybert", distill_results.tinybert_section),
    ("pkd", distill_results.pkd_section),
    ("general", distill_results.general_section),
    ("mlm-head", distill_results.mlm_head_section),
    ("augmentation-gpu", augmentation_results.augmentation_gpu_section),
    ("augmented-files", augmentation_results.augmented_files_section),
    ("augment-throughput", augmentation_results.augment_section),
    ("mobilebert-ops", mobilebert_results.mobilebert_ops_section),
    ("mobilebert-ablation", mobilebert_results.mobilebert_ablation_section),
    ("mobilebert-task", mobilebert_results.mobilebert_task_section),
    ("bilstm-vectors", bilstm_results.bilstm_vectors_section),
    ("bilstm-augment", bilstm_results.bilstm_augment_section),
    ("bilstm-distill", bilstm_results.bilstm_distill_section),
    ("imdb", long_text_results.imdb_section),
    ("squad", long_text_results.squad_section),
    ("rerun", reproduction.rerun_section),
    ("reruns", reproduction.reruns_section),
    ("quickstart-before-bf16", speed_results.quickstart_archive_section),
    ("compress-superseded", compress_results.compress_archive_section),
    ("kept-superseded", trust_results.kept_superseded_section),
]


def render(names: list[str] | None = None) -> str:
    """The Markdown of the sections named (all, in page order, when ``names`` is None)."""
    chosen = SECTIONS if names is None else [(name, section) for name, section in SECTIONS if name in names]
    return "\n".join(line for _, section in chosen for line in section())


def pages() -> dict[str, str]:
    """The Markdown of each page of full records (``docs/benchmarks/<page>.md``), by page."""
    written = {}
    for page, (title, names) in PAGES.items():
        body = render(names)
        written[page] = "\n".join([f"# {title}", "", reproduction.page_intro(page), "",
                                   body or "No results recorded yet.", ""])
    return written


def headline(full_records: dict[str, str], base: str = LINK_BASE) -> str:
    """BENCHMARKS.md (``base``: the pages' folder as it links to them): the headline sections, then per
    page of ``full_records`` (the archive aside) its scoreboard rows and what else it records."""
    rows = scoreboard.headline_rows()
    lines = [*reproduction.intro_section(base), *scoreboard.scoreboard_section(base, rows),
             *trust_results.kept_section(), *trust_results.agreement_section(),
             *trust_results.paired_margin_section(),
             *trust_results.winner_rule_section(), *compress_results.recipe_parts_section(),
             *trust_results.teachers_section(),
             *trust_results.base_teachers_section(), *trust_results.base_teachers_gpu_section()]
    for page, (title, _) in PAGES.items():
        if page == "archive":
            continue
        lines += [f"## {title}", ""]
        results = [f"- {row.result}: {row.ours} ({row.where})." for row in rows if row.page == page]
        if results:
            lines += [*results, ""]
        titles = [line[3:] for line in full_records[page].splitlines() if line.startswith("## ")]
        lines += [f"The full record, [{page}.md]({base}{page}.md): "
                  + ("; ".join(titles) if titles else "no results recorded yet") + ".", ""]
    return "\n".join(lines)
