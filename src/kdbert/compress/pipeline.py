"""``kdbert compress``: the fastest student that keeps the teacher's score, found and proven on this
machine within ``--budget-minutes`` of wall time in all, in four steps (each resumable; every
candidate run is an ordinary run folder), each planned against one deadline
(:mod:`kdbert.compress.budget`):

1. load and check the teacher (:mod:`kdbert.compress.teacher`; the training rows it never trained
   on, read off its folder, are held out: half pick checkpoints and promote candidates, half
   decide the winner and its kept share, :mod:`kdbert.data.held_out`), time it exported and every
   family's candidate shapes in the runtime shipped (:mod:`kdbert.compress.speed`), keeping those that meet the speed target (a budget too short to
   time them all times them families in turn, spread over their sizes, and says which it left);
2. build the kept candidates from the teacher and distil them by asynchronous successive halving
   on an Optuna study, in ``--workers`` processes, continuing promoted candidates where they paused
   (:mod:`kdbert.compress.build`, :mod:`kdbert.compress.search`, :mod:`kdbert.compress.schedule`,
   :mod:`kdbert.compress.storage`), with ``--augment`` beside augmented variants of them
   (:mod:`kdbert.compress.augment`);
3. rank every candidate trained on the held-out rows that decide, with a bootstrap noise margin
   (:func:`kdbert.compress.schedule.ranked_candidates`);
4. export the first as it ships, score that graph on the rows that decide and time it in turns
   with the teacher, exporting the next while the shipped one falls short of ``--min-kept`` or of
   the speed asked (:mod:`kdbert.compress.ship`), and write
   ``compress_report.json`` / ``.md`` (:mod:`kdbert.compress.report`) and the winner's model card
   (:mod:`kdbert.deploy.model_card`). Its options: :mod:`kdbert.compress.options`.

Shares in the report: ``kept = student / teacher`` score, and the share of the teacher's gain over
the majority class kept, ``(student - majority) / (teacher - majority)``, which stays meaningful
where the teacher is near chance; agreement: the share of dev rows on which the shipped student
predicts the teacher's class (Pearson x 100 for regression). The shipped export is timed again
with its trained weights, in turns with the exported teacher within the same minutes
(:func:`kdbert.compress.speed.time_against_teacher`: a slow spell of the machine slows both), in a
process of its own that never trained (:mod:`kdbert.compress.timing_process`), the speedup
reported, and the speedup is broken down step by step (:mod:`kdbert.compress.breakdown`).
The exports (the teacher's and the winner's) are scored on the dev rows and a sample of the
held-out rows that pick as large as dev (:func:`kdbert.compress.ship.export_task`), so that their int8 choice and parity check
cost what dev's size does, not the whole held-out set's (6,735 rows on SST-2); the teacher is
scored on all of them once, before anything is timed.

Bad input is refused in one line before anything is written: the options' checks
(``--budget-minutes`` must be positive), an ``--output-dir`` that cannot be written, a teacher that
is not fine-tuned for the task's outputs, a teacher whose folder does not say which rows it never
trained on (unless ``--teacher-trained-on-all-rows``).
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, NamedTuple

import torch

from kdbert.compress import search
from kdbert.compress.augment import (AugmentSettings, augment_for_search, base_name, is_augmented, variant_rows,
                                     with_variant_rows, with_variants)
from kdbert.compress.breakdown import each_at_its_fastest, speedup_breakdown
from kdbert.compress.budget import (RESERVE_FACTOR, TIMING_SHARE, Deadline, Progress, after_export_seconds,
                                    check_seconds, checks_to_reserve, export_passes, finishing_seconds,
                                    fixed_seconds, near_ship_line, ship_risk_line, ship_risks, threads_row,
                                    turns_seconds, with_turns_measured)
from kdbert.compress.disk import disk_full, keep_shipped
from kdbert.compress.options import HELD_OUT_FRACTION, CompressConfig, search_identity
from kdbert.compress.recipes import SearchSettings, reads_stored_logits
from kdbert.compress.report import advice_lines, seconds_per_candidate, spare_line, unseen_sources_line, write_report
from kdbert.compress.schedule import Goal, epoch_steps, ranked_candidates, spread_order
from kdbert.compress.schedule import pretrained as is_pretrained
from kdbert.compress.labelling import afford_labelling, plan_labelling
from kdbert.compress.search import Plan, Window, check_budget, first_round_seconds, teacher_row_seconds
from kdbert.compress.ship import (agreement_measure, decide_score, dev_agreement, export_task, kept_noise,
                                  ship_checked, shipped_dev_outputs, shipped_speed, timed_as_shipped)
from kdbert.compress.spare import Spare, train_on
from kdbert.compress.speed import (RUNTIMES, SpeedSettings, admitted_latency, all_candidates, candidate_notes,
                                   measure_speed, meeting_target, shape_context, timed_threads)
from kdbert.compress.storage import journal_path, open_study
from kdbert.compress.teacher import (Teacher, checked_teacher, held_out_task, loaded_teacher, majority_score,
                                     text_characters, time_and_export_teacher)
from kdbert.compress.teacher_exports import teacher_exports
from kdbert.compress.timing_process import TimingProcess
from kdbert.core.loading import default_model_path, own_tokenizer, resolve_model_path
from kdbert.data.held_out import DECIDE_SHARE, unseen_sources
from kdbert.data.subsets import training_rows
from kdbert.data.load import TaskOptions, load_task, text_columns
from kdbert.deploy.model_card import write_compress_card
from kdbert.errors import KdbertError
from kdbert.families.hf import user_candidate
from kdbert.families.selection import lead_cuts
from kdbert.methods.kd import check_own_tokenizer, own_tokenizer_problem
from kdbert.students.store import Build, default_store, find_build

__all__ = ["CompressConfig", "compress"]


def check_output_dir(out: Path) -> None:
    """Refuse an ``--output-dir`` that cannot be written (a file, or below a file or a folder this
    process cannot create files in: tried with a temporary file, removed at once, since permission
    bits do not tell for root or for read-only and virtual file systems) before anything is written."""
    existing = out
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise KdbertError(f"--output-dir {out}: {existing} is a file, not a folder; choose another --output-dir")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as err:
        raise KdbertError(f"--output-dir {out}: cannot create files in {existing} ({err.strerror}); choose "
                          "another --output-dir") from None


def _offered(context, names: str | None, students: list, pretrained: list) -> list:
    """Every family's candidates and the ``pretrained`` students, or the ``--candidates`` named, then
    the ``students`` the user brings."""
    offered = all_candidates(context) + pretrained
    if names:
        wanted = [name.strip() for name in names.split(",") if name.strip()]
        unknown = sorted(set(wanted) - {c.name for c in offered})
        if unknown:
            raise KdbertError(f"--candidates: unknown {', '.join(unknown)}; this teacher offers "
                              f"{', '.join(c.name for c in offered)}")
        offered = [c for c in offered if c.name in wanted]
    return offered + students


def user_students(paths: list | None, teacher: Teacher, spec) -> list:
    """A candidate ``user-<folder name>`` per ``--student`` (:func:`kdbert.families.hf.user_candidate`):
    on the teacher's tokenizer, or its own where its vocabulary differs (refused in one line where
    ``spec`` needs the teacher's tokens, or the folder has no tokenizer)."""
    candidates, names = [], set()
    for given in paths or []:
        path = resolve_model_path(str(given))
        own = own_tokenizer(path, teacher.model, teacher.tokenizer) is not None
        if own:
            check_own_tokenizer(path, spec)
        stem = re.sub(r"[^A-Za-z0-9.]+", "-", Path(path).name).strip("-").removesuffix("-aug") or "student"
        name, count = f"user-{stem}", 1
        while name in names:
            count += 1
            name = f"user-{stem}-{count}"
        names.add(name)
        candidates.append(user_candidate(path, name, own))
    return candidates


class PretrainedStudent(NamedTuple):
    """A packaged pre-trained student: the function giving its folder, the layers it is cut to and
    the FFN units each keeps (None: all; :func:`kdbert.families.hf.user_candidate`'s ``depth`` and ``ffn``)."""

    folder: Callable[[], str]
    depth: int | None = None
    ffn: int | None = None

    def candidate(self, name: str, own: bool):
        """The student as a candidate called ``name`` from its own weights (``own``: its own tokenizer)."""
        return user_candidate(self.folder(), name, own, start="pretrained", depth=self.depth, ffn=self.ffn)


PRETRAINED_STUDENTS = {"pretrained-minilm-l6": PretrainedStudent(default_model_path),
                       "pretrained-minilm-l4": PretrainedStudent(default_model_path, 4),
                       "pretrained-minilm-l4-ffn512": PretrainedStudent(default_model_path, 4, 512),
                       "pretrained-minilm-l3": PretrainedStudent(default_model_path, 3)}
"""Packaged pre-trained students offered as candidates. The 4-layer cut with a third of its FFN units
fills the gap at 8x over a base-size teacher served on every core: against an int8 MPNet-base on an
SST-2 row, both on two threads of an AMX Xeon, it times 8.4-9.0x where the whole 4-layer cut times
6.7-7.2x, the 3-layer one 8.8-9.2x and the 4-layer one with half its FFN 7.9-8.3x
(``benchmarks/timing_threads.py``, key ``sst2-mpnet-amx-ffn``)."""


def parameter_count(candidate, context) -> int:
    """The parameters of ``candidate`` as the task's model (its head included), counted on a model
    built on the meta device (no memory, no weights read)."""
    with torch.device("meta"):
        model, _ = candidate.build(context)
    return sum(p.numel() for p in model.parameters())


def pretrained_students(teacher: Teacher, context, spec) -> list:
    """The :data:`PRETRAINED_STUDENTS` whose whole model (uncut) has fewer parameters than the
    teacher (each as the task's model), as candidates from their own weights with a fresh task head;
    one of another vocabulary reads its own tokenizer, and is not offered where ``spec`` needs the
    teacher's tokens. A teacher no bigger than the pre-trained model (the one fine-tuned from it)
    gets none of its cuts either: its own layers are the same start."""
    size = sum(p.numel() for p in teacher.model.parameters())
    folders = {}  # folder -> (reads its own tokenizer, offered), read and counted once per folder
    candidates = []
    for name, student in PRETRAINED_STUDENTS.items():
        path = student.folder()
        if path not in folders:
            own = own_tokenizer(path, teacher.model, teacher.tokenizer, option=name) is not None
            folders[path] = own, (not (own and own_tokenizer_problem(spec))
                                  and parameter_count(user_candidate(path, name, own), context) < size)
        own, offered = folders[path]
        if offered:
            candidates.append(student.candidate(name, own))
    return candidates


def _latency_ratio(config: CompressConfig, table: dict | None = None, kept: list | None = None) -> float:
    """The winner's latency over the teacher's, at most: the slowest ``kept`` candidate's, or before
    they are timed, what the target allows (at most 1; a latency target, before the teacher is
    timed: 1)."""
    if kept is not None:  # as admitted (a candidate timed again in turns: its speedup then)
        return max(1.0 / table["candidates"][c.name]["speedup"] for c in kept)
    if config.target_speedup is not None:
        return min(1.0, 1.0 / config.target_speedup)
    return 1.0 if table is None else min(1.0, config.target_latency_ms / table["teacher"]["latency_real_p50_ms"])


def _check_fits(config: CompressConfig, teacher: Teacher, data, offered: list, settings: SearchSettings,
                train_rows: int, spent: float) -> None:
    """Refuse, before anything is written, a budget shorter than what compress needs on this machine
    whatever it searches: the ``spent`` seconds of loading and scoring the teacher, then
    :func:`~kdbert.compress.budget.fixed_seconds` and one first round, at the
    teacher's measured speed on the dev and held-out rows (both halves), per character of text (the
    exports' sample of the rows that pick, :func:`export_task`, costs its share of them)."""
    dev = [row for rows in data.dev.values() for row in rows]
    sample = min(len(dev), len(data.held_out))
    scored_characters = text_characters(dev) + text_characters(data.held_out) * sample / max(1, len(data.held_out))
    teacher_characters = text_characters(dev) + text_characters(data.held_out) + text_characters(data.decide)
    pass_seconds = teacher.pass_seconds * scored_characters / max(1, teacher_characters)
    row_seconds = teacher.pass_seconds / (len(dev) + len(data.held_out) + len(data.decide))
    rows, first_round = first_round_seconds(offered, settings, train_rows, row_seconds)
    needed = spent + fixed_seconds(pass_seconds, config.runtime, _latency_ratio(config)) + first_round
    if needed > 60 * config.budget_minutes:
        raise KdbertError(f"--budget-minutes {config.budget_minutes:g} is too short for this teacher on this machine: "
                          f"exporting it and the winner scores {len(dev) + sample} dev and held-out rows "
                          f"{export_passes(config.runtime)} times each (the int8 choice and the parity check), "
                          f"{pass_seconds:.0f} s a time for the teacher here, and one first round runs the teacher on "
                          f"{rows} rows: about {needed / 60:.1f} min with the {spent:.0f} s spent loading and scoring "
                          f"the teacher; give it at least {math.ceil(needed / 60)} min")


def _finishing(config: CompressConfig, table: dict, teacher: Teacher, kept: list | None = None) -> float:
    """:func:`~kdbert.compress.budget.finishing_seconds` for the slowest of ``kept`` (before timing: the
    slowest the target allows, its own export not known yet)."""
    exports = [table["candidates"][c.name].get("export_seconds", 0.0) for c in kept or ()]
    checks = checks_to_reserve([table["candidates"][c.name]["speedup"] for c in kept or ()], config.target_speedup)
    return finishing_seconds(with_turns_measured(table), _latency_ratio(config, table, kept),
                             max(exports, default=0.0), teacher.dev_seconds, threads_row(config.speed_threads), checks)


def _finishing_bound(config: CompressConfig, table: dict, teacher: Teacher) -> float:
    """The most :func:`_finishing` can reserve whichever of the candidates timed so far are admitted: a
    winner as slow as the target allows, the largest export timed, and a second check where a speedup
    is asked and more than one candidate is timed (one may be admitted near it,
    :func:`~kdbert.compress.budget.checks_to_reserve`)."""
    exports = [row.get("export_seconds", 0.0) for row in table["candidates"].values()]
    checks = checks_to_reserve([config.target_speedup] * len(table["candidates"]), config.target_speedup)
    return finishing_seconds(with_turns_measured(table), _latency_ratio(config, table),
                             max(exports, default=0.0), teacher.dev_seconds, threads_row(config.speed_threads), checks)


def _timing_stop(config: CompressConfig, table: dict, teacher: Teacher, first_round: float, deadline: Deadline,
                 started: float) -> float:
    """The clock time past which no more candidates are timed (``measure_speed``'s ``stop_at``),
    given the table so far: the search keeps one first round before the finishing's most
    (:func:`_finishing_bound`), and at least ``1 - TIMING_SHARE`` of the time from the timing's
    ``started`` to its own latest end."""
    search_end = deadline.end - _finishing_bound(config, table, teacher)
    return min(search_end - first_round, started + TIMING_SHARE * (search_end - started))


def _timing_order(offered: list, lead: frozenset[str] = frozenset()) -> list:
    """The order candidates are timed in: pre-trained students first, then the teacher's lead cuts
    (``lead``, :func:`~kdbert.families.selection.lead_cuts`: its whole width, and from two layers
    the widest width below it), smallest first, then the others, families in turn, each spread over
    its sizes (the product of a shape's whole numbers, which grows with each of them), all as
    :func:`~kdbert.compress.schedule.spread_order` orders them but the lead ones. Pre-trained and
    whole-width students led every search that trained them, and a short budget times only the
    first candidates; smallest first, the first lead cut timed below the target rules out the rest
    no smaller than it (``measure_speed``'s ``line``)."""
    size = {c.name: math.prod(v for v in dict(c.shape).values() if isinstance(v, int) and not isinstance(v, bool))
            for c in offered}
    others = spread_order([c for c in offered if c.name not in lead], size)
    lead_first = sorted((c for c in offered if c.name in lead), key=lambda c: size[c.name])
    return [c for c in others if is_pretrained(c)] + lead_first + [c for c in others if not is_pretrained(c)]


def compress(task: TaskOptions, config: CompressConfig, output_dir: str | os.PathLike,
             clock=time.time, command: str | list[str] | None = None) -> dict:
    """Run the four steps (module doc) into ``output_dir`` within ``config.budget_minutes`` from now
    (``clock``: :class:`~kdbert.compress.budget.Deadline`'s; ``command``: the command line, for the
    winner's model card); returns the report."""
    config.check()
    deadline = Deadline(config.budget_minutes, clock)
    with TimingProcess() as timing_process:  # its imports overlap the teacher's loading
        return _compress_timed(task, config, output_dir, deadline, command, timing_process)


def _compress_timed(task: TaskOptions, config: CompressConfig, output_dir: str | os.PathLike, deadline: Deadline,
                    command, timing_process: TimingProcess) -> dict:
    """:func:`compress` with ``timing_process``, where the ship check times."""
    if not task.held_out_fraction:
        task = replace(task, held_out_fraction=HELD_OUT_FRACTION)
    if not task.decide_share:
        task = replace(task, decide_share=DECIDE_SHARE)
    out = Path(output_dir)
    check_output_dir(out)
    augment = AugmentSettings.parse(config.augment, config.transfer_text, copies=config.augment_copies,
                                    max_rows=config.augment_max_rows,
                                    nltk_data=config.nltk_data, labelling_share=config.augment_labelling_share)
    loaded = loaded_teacher(config, load_task(replace(task, held_out_fraction=0.0, held_out_rows=None,
                                                      decide_share=0.0)).spec)
    task, held_out = held_out_task(loaded[0], task, config.teacher_trained_on_all_rows)
    saw_held_out = held_out["teacher_saw_held_out_rows"]
    data = load_task(task, seed=config.seed)  # the rows every run of the search reads
    dev_rows = [row for rows in data.dev.values() for row in rows]
    held_out.update(rule=data.held_out_rule, pick_rows=len(data.held_out), decide_rows=len(data.decide),
                    dev_rows=len(dev_rows), dev_sources_unseen=unseen_sources(data.train + data.held_out + data.decide,
                                                                              dev_rows),
                    unlabelled_rows=len(data.unlabelled), unlabelled_from_epoch=task.unlabelled_from_epoch,
                    texts=len(data.spec.text_fields), train_rows=len(data.train))
    print(f"held-out rows: {len(data.held_out) + len(data.decide)} training rows the teacher "
          f"{'trained on (--teacher-trained-on-all-rows: kept shares read high)' if saw_held_out else 'never trained on'}"
          f", drawn {data.held_out_rule or 'as recorded'} (from {held_out['source']}): {len(data.held_out)} pick "
          f"checkpoints and promote, {len(data.decide)} decide the winner and its kept share")
    if held_out["dev_sources_unseen"]:
        print(unseen_sources_line(held_out["dev_sources_unseen"], len(dev_rows)))
    for advice in advice_lines(held_out):
        print(advice)
    if held_out.get("teacher_picked_on_deciding_rows"):
        print("the teacher's checkpoint was picked on every held-out row, those that decide included (its "
              "held_out.json predates the record of them): its score there reads high and the kept shares there low; "
              "`kdbert finetune --held-out-fraction` again picks on the other half and records them")
    teacher = checked_teacher(loaded, data)
    general = general_students(config, teacher)
    context = shape_context(teacher.folder, task, config.word_vectors, data, (teacher.model, teacher.tokenizer))
    offered = _offered(context, config.candidates, user_students(config.student, teacher, data.spec),
                       pretrained_students(teacher, context, data.spec))
    search_settings = SearchSettings.of(config)
    train_rows = training_rows(data, config.max_train_examples, config.train_subset)
    new_folder, new_journal = not out.exists(), config.storage is None and not journal_path(out).exists()
    identity = search_identity(config, task, teacher.folder, general and general.facts)
    study = open_study(out, identity, config.storage, config.study)
    if search.other_leader(study) or search.ended_elsewhere(study, out):
        timing_process.close()  # a joining worker ships nothing
        return _join(study, config, task, out, context, offered, augment, search_settings)
    progress = Progress(deadline, enabled=not config.no_progress)
    try:
        if not search.under_way(study):  # a search under way was judged when it started
            _check_fits(config, teacher, data, offered, search_settings, len(train_rows), deadline.spent())
        with search.leading(study, out):
            return _compress(task, config, out, data, train_rows, teacher, context, offered, augment,
                             search_settings, deadline, progress, held_out, study, identity, general, timing_process,
                             command)
    except OSError as err:
        full = disk_full(err, out)
        if full is None:
            raise
        raise full from None
    except KdbertError:
        if new_journal and not search.under_way(study):  # refused before the search: nothing left behind
            journal_path(out).unlink(missing_ok=True)
            if new_folder and not any(out.iterdir()):
                out.rmdir()
        raise
    finally:
        progress.close()


def _join(study, config: CompressConfig, task: TaskOptions, out: Path, context, offered, augment,
          settings: SearchSettings) -> None:
    """Work on the search another live process leads (same ``--storage``/``--study``, this machine
    seeing its output folder); that process ships the winner."""
    plan_attrs = search.wait_for_plan(study)
    leading = study.user_attrs[search.LEADER_ATTR]
    leader = leading["worker"]
    if study.user_attrs.get(search.ENDED_ATTR):
        print(f"study '{study.study_name}' has ended: nothing left to distil (its winner is shipped by {leader} "
              f"into {leading['output_dir']}/winner)")
        return None
    by_name = {c.name: c for c in with_variants(offered, augment.kinds)}
    plan = Plan([by_name[name] for name in plan_attrs["candidates"]], str(Path(config.teacher).expanduser()),
                task, str(out), settings, Goal(**plan_attrs["goal"]), Window(**plan_attrs["window"]), config.threads,
                general=plan_attrs.get("general"), general_shapes=tuple(plan_attrs.get("general_shapes", ())),
                labelling=plan_attrs.get("labelling"))
    missing = search.missing_starts(plan)
    if missing:
        raise KdbertError(f"--output-dir {out} has no start for {', '.join(missing)}: a process joining study "
                          f"'{study.study_name}' must use the output folder of the search {leader} leads "
                          "(shared with this machine, e.g. over NFS)")
    ran = search.work(study, plan, lambda row: print(search.segment_line(row), flush=True))
    print(f"joined study '{study.study_name}': {ran} segment(s) distilled here; {leader} ships the winner")
    return None


def general_students(config: CompressConfig, teacher: Teacher) -> Build | None:
    """The general students built for the teacher's base (:func:`kdbert.students.store.find_build`),
    said in one line either way; None with ``--no-general-students``."""
    if config.no_general_students:
        return None
    found = find_build(teacher.model, config.students_store)
    if found is None:
        print(f"general students: none built for this teacher's base in {config.students_store or default_store()}; "
              "candidates of the teacher's architecture start from its weights (`kdbert students build` builds "
              "them once per base model)")
        return None
    build, drift = found
    print(f"general students: {build.describe()}; the teacher's embeddings are {drift:.1%} from that base's")
    return build


def _compress(task, config, out, data, train_rows, teacher: Teacher, context, offered, augment, search_settings,
              deadline: Deadline, progress: Progress, held_out: dict, study, identity: dict, general: Build | None,
              timing_process: TimingProcess, command=None) -> dict:
    notes = candidate_notes(context)
    for note in notes:
        progress.line(note)
    speed_settings = SpeedSettings(config.runtime, config.length_rows, config.speed_threads, pooling=config.pooling)
    scored = export_task(task, data)
    with progress.phase("timing"):
        timing_process.wait_ready()  # nothing timed while its imports run
        exports = teacher_exports(config.teacher_exports, teacher.model, teacher.tokenizer, data.spec.max_seq_len,
                                  [row for rows in data.dev.values() for row in rows] + list(data.held_out),
                                  speed_settings.key())
        table = time_and_export_teacher(teacher, scored, out, speed_settings, deadline, exports)
        first_round = first_round_seconds(offered, search_settings, len(train_rows), teacher_row_seconds(table))[1]
        started = deadline.clock()
        order = _timing_order(offered, lead_cuts(offered, context.teacher_config))
        table = measure_speed(teacher.folder, scored, out, speed_settings, order, context,
                              stop_at=lambda timed: _timing_stop(config, timed, teacher, first_round, deadline, started),
                              clock=deadline.clock, line=config.target_speedup)
    too_large = table.get("skipped", {})
    if too_large:
        slower = sorted({row["no_smaller_than"] for row in too_large.values()})
        progress.line(f"not timed: {', '.join(too_large)}, each no smaller than a candidate of its family timed "
                      f"below {config.target_speedup:g}x ({', '.join(slower)})")
    untimed = [c.name for c in offered if c.name not in table["candidates"] and c.name not in too_large]
    timed = [c for c in offered if c.name in table["candidates"]]
    if untimed:
        progress.line(f"timed {len(timed)} of {len(offered)} candidates in the time the budget leaves for timing (at "
                      f"most {TIMING_SHARE:.0%} of it before the search); not timed: {', '.join(untimed)} (a rerun "
                      "with a larger --budget-minutes times them)")
    try:
        fast = set(meeting_target({**table, "candidates": {c.name: table["candidates"][c.name] for c in timed}},
                                  config.target_speedup, config.target_latency_ms))
    except KdbertError as err:
        if not untimed:
            raise
        raise KdbertError(f"--budget-minutes {config.budget_minutes:g} left time to time {len(timed)} of "
                          f"{len(offered)} candidates on this machine ({deadline.spent():.0f} s spent) and none of "
                          f"them meets the target ({str(err).split(': ', 1)[1].split('; ')[0]}); raise "
                          "--budget-minutes") from None
    kinds = augment.kinds_for(len(train_rows))
    skipped = None
    if augment.kinds and not kinds:
        skipped = (f"--augment: no augmented variants: the {len(train_rows):,} training rows are more than "
                   f"--augment-max-rows {augment.max_rows:,}, the most new rows it writes, so the variants would "
                   "only share the budget (raise --augment-max-rows to augment anyway)")
        progress.line(skipped)
    kept = with_variants([c for c in timed if c.name in fast], kinds)
    table = with_variant_rows(table, kept)
    latency = admitted_latency(table)
    general_starts = frozenset(c.name for c in kept if general and base_name(c.name) in general.shapes)
    near_line = frozenset(name for name, row in table["candidates"].items()
                          if near_ship_line(row["speedup"], config.target_speedup))
    lead = lead_cuts(kept, context.teacher_config)
    lead_layers = {c.name: dict(c.shape).get("num_hidden_layers", 0) for c in kept if c.name in lead}
    kept = spread_order(kept, latency, general_starts, lead, near_line)
    reserve = _finishing(config, table, teacher, kept)
    labelling = plan_labelling(config.logits_cache, out / "teacher-onnx" / RUNTIMES[config.runtime], teacher.model,
                               teacher.tokenizer, data.spec, train_rows, kept, search_settings, data.unlabelled)
    kept, left_out, labelling = afford_labelling(kept, labelling, deadline.left() - reserve, config.first_round_share,
                                                 (deadline.spent() + reserve) / 60, config.budget_minutes,
                                                 search_settings)
    if left_out:
        progress.line(left_out)
    if not search.under_way(study):  # a search under way was judged when it started
        check_budget(table, kept, search_settings, labelling.rows - labelling.stored, config.budget_minutes,
                     deadline.left() - reserve, labelling.kd, every_run_labels=bool(labelling.unlabelled))
    augmentation = None
    with progress.phase("search"):
        if any(is_augmented(c.name) for c in kept):
            text_fields = text_columns(task, data.spec)
            augmentation = augment_for_search(train_rows, text_fields, out, augment, config.budget_minutes * 60,
                                              config.seed, labelling.row_seconds)
        labelled = bool(labelling.unlabelled) or any(reads_stored_logits(c, search_settings, labelling.kd)
                                                or is_augmented(c.name) for c in kept)
        window = Window.from_now(deadline.left() - reserve, config.first_round_share,
                                 labelling_seconds=labelling.seconds if labelled else 0.0)
        admitted = {c.name: table["candidates"][c.name]["speedup"] for c in kept}
        risks = ship_risks(admitted, config.target_speedup)
        if risks:
            progress.line(ship_risk_line(risks, admitted, config.target_speedup))
        goal = Goal(teacher.metrics["selection_score"], config.min_kept, latency, teacher.metrics["decide_score"],
                    teacher.metrics["decide_se"], majority_score(data, data.decide) if data.decide else None,
                    None if teacher.decide_predictions is None else tuple(teacher.decide_predictions.tolist()),
                    len(data.decide) / max(1, len(data.held_out) + len(data.decide)),
                    lead_layers, dict(sorted(risks.items())),
                    epoch_steps(kept, len(train_rows), len(data.unlabelled), variant_rows(augmentation),
                                search_settings.batch_size))
        plan = Plan(kept, teacher.folder, task, str(out), search_settings, goal, window, config.threads,
                    general=general and str(general.folder), general_shapes=tuple(general.shapes if general else ()),
                    labelling=labelling.plan_options(), selection=config.selection,
                    head=config.head)
        loaded = search.Loaded((teacher.model, teacher.tokenizer))
        loaded.keep(task, config.seed, data)
        searched = search.run_search(plan, study, config.workers, config.storage, config.study, identity,
                                     progress.segment_finished, context, loaded)
        starts = {c.name: search.start_of(plan, c.name) for c in kept}
    with progress.phase("finishing"):
        report = _finish(scored, config, out, data, teacher, table, searched, goal, speed_settings, deadline,
                         plan, loaded, progress, timing_process)
    report.update(augmentation=augmentation, augmentation_skipped=skipped,
                  labelling={**labelling.summary(), "left_out": left_out},
                  teacher_saw_held_out_rows=held_out["teacher_saw_held_out_rows"], held_out=held_out,
                  starts=starts, candidate_notes=notes, max_epochs=config.max_epochs,
                  ship_risk={name: round(chance, 3) for name, chance in risks.items()},
                  general_students=general and {"folder": str(general.folder), "base": general.facts["base"],
                                                "key": general.facts["key"], "steps": general.facts["steps"],
                                                "minutes": general.facts["trained_seconds"] / 60}, budget={
        "minutes": config.budget_minutes, "finishing_reserve_seconds": round(reserve, 1), "untimed": untimed,
        "phase_seconds": progress.phase_seconds(), "seconds": round(deadline.spent(), 1)})
    report["disk"] = keep_shipped(out, config.keep, [Path(check["run"]).name for check in report["shipped"]["checks"]])
    write_report(report, out, config.runtime)
    write_compress_card(out / "winner", report, data, task.held_out_fraction, len(train_rows), command)
    progress.line(f"compress: {deadline.spent() / 60:.1f} min of --budget-minutes {config.budget_minutes:g} ("
                  + ", ".join(f"{name} {seconds / 60:.1f}" for name, seconds in progress.phase_seconds().items())
                  + " min)")
    return report


def _finish(task, config: CompressConfig, out: Path, data, teacher: Teacher, table: dict, searched: dict,
            goal: Goal, speed_settings: SpeedSettings, deadline: Deadline, plan: Plan, loaded: search.Loaded,
            progress: Progress, timing_process: TimingProcess) -> dict:
    """Step 4: the winner picked on the rows that decide, exported (scored on ``task``,
    :func:`export_task`, its static int8 methods only while they leave the rest its time) and checked
    there as it ships and timed in turns with the teacher in ``timing_process`` (the next exported
    when it falls short of either, :func:`ship_checked`), broken down and compared; the report
    (without the budget's figures)."""
    ranking = ranked_candidates([{**row, "state": "done"} for row in searched["segments"]], goal)
    ratio = 1.0 / table["candidates"][ranking[0]["candidate"]]["speedup"]  # as admitted, as the reserve counted it
    timing = with_turns_measured(table)
    after = after_export_seconds(timing, ratio, teacher.dev_seconds, threads_row(config.speed_threads))
    file_name = RUNTIMES[config.runtime]

    def next_check(name: str) -> float:
        """A next check as the finishing's reserve counts it, less the winner's timing in turns that
        ``after`` holds and the first check's speed check already did (kept in shipped_speed.json)."""
        return RESERVE_FACTOR * (check_seconds(timing, 1.0 / table["candidates"][name]["speedup"],
                                               table["candidates"][name].get("export_seconds", 0.0))
                                 - turns_seconds(timing, ratio))

    def speed_check(row: dict, export_file: Path) -> dict:
        again = RESERVE_FACTOR * turns_seconds(timing, 1.0 / table["candidates"][row["candidate"]]["speedup"])
        return timed_as_shipped(row["run"], export_file, out, task, speed_settings, config.target_speedup,
                                config.target_latency_ms,  # a next check as big as this one's after timing again
                                lambda: deadline.left() - after - again >= next_check(row["candidate"]),
                                timing_process.time_against_teacher)

    winner, shipped, checks = ship_checked(
        ranking, out, task, config.runtime, goal, data, int8_time_left=lambda: deadline.left() - after,
        check_seconds=next_check, speed_check=speed_check)
    spare = Spare({"trained": False, "shipped": False, "why": "--no-spare-training"})
    if not config.no_spare_training:
        first = next(check for check in checks if check["run"] == str(winner["run"]))
        spare = train_on(plan, winner, first, searched["segments"], deadline.left() - after
                         - next_check(winner["candidate"]), out, task, config.runtime, goal, data,
                         (shipped.get("quantization") or {}).get("method"), speed_check, loaded, deadline.clock)
        progress.line(spare_line(spare.summary))
    if spare.check is not None:
        checks.append(spare.check)
    if spare.row is not None:
        winner, shipped = spare.row, spare.export
    winner = {key: value for key, value in winner.items() if key != "state"}
    winner["latency_real_p50_ms"] = table["candidates"][winner["candidate"]]["latency_real_p50_ms"]
    shipped_decide = next(check for check in checks if check["run"] == str(winner["run"]))
    in_turns = shipped_speed(winner["run"], out / "winner" / file_name, out, task, speed_settings,
                             timer=timing_process.time_against_teacher)
    runtime_key = "onnx_int8" if config.runtime == "onnx-int8" else "onnx_fp32"
    majority = majority_score(data)
    student_dev, teacher_dev = shipped["dev_metrics"][runtime_key]["score"], teacher.metrics["score"]
    student_outputs = shipped_dev_outputs(data, out / "winner", file_name)
    noise = kept_noise(data, teacher.outputs, student_outputs, goal.teacher_decide_predictions,
                       decide_score(out / "winner", file_name, data)[1])
    breakdown = speedup_breakdown(teacher.steps, out, task, speed_settings, student_dev, winner["run"],
                                  in_turns["latency_real_p50_ms"]["student"], timing_process.time_against_teacher)
    return {
        "task": data.spec.name, "teacher": teacher.folder, "runtime": config.runtime,
        "target": {"speedup": config.target_speedup, "latency_ms": config.target_latency_ms,
                   "min_kept": config.min_kept},
        "held_out_rows": len(data.held_out), "decide_rows": len(data.decide), "speed": table, "search": searched,
        "winner": winner,
        "seconds_per_candidate": seconds_per_candidate(searched), "speedup_breakdown": breakdown,
        "spare_training": spare.summary,
        "teacher_scores": {"held_out": teacher.metrics["selection_score"], "decide": goal.teacher_decide,
                           "decide_se": goal.teacher_decide_se, "dev": teacher_dev,
                           "dev_deployed": teacher.deployed.get(runtime_key)},
        "shipped": {"folder": str(out / "winner"), "dev_score": student_dev, "parity": shipped["parity"],
                    "int8": shipped.get("quantization"),
                    "decide_score": shipped_decide["decide_score"], "decide_se": shipped_decide["decide_se"],
                    "kept_decide": shipped_decide["kept"], "keeps": shipped_decide["keeps"],
                    "margin": shipped_decide["margin"], "margin_kind": shipped_decide["margin_kind"],
                    "checks": checks,
                    "speedup": in_turns["speedup"]["student"],
                    "speedup_random_weights": table["candidates"][winner["candidate"]]["speedup"],
                    "latency_real_p50_ms": in_turns["latency_real_p50_ms"]["student"],
                    "teacher_latency_real_p50_ms": in_turns["latency_real_p50_ms"]["teacher"],
                    "timed_in_turns": in_turns["rounds"],
                    "each_at_its_fastest": each_at_its_fastest(
                        breakdown, timed_threads(speed_settings.threads),
                        in_turns["latency_real_p50_ms"]["teacher"], in_turns["latency_real_p50_ms"]["student"]),
                    "kept_dev": student_dev / teacher_dev,
                    "gain_kept_dev": (student_dev - majority) / (teacher_dev - majority)
                    if majority is not None and teacher_dev != majority else None,
                    "majority_dev": majority,
                    "agreement_dev": dev_agreement(data, teacher.outputs, student_outputs),
                    "agreement_measure": agreement_measure(data.spec), **noise},
    }
