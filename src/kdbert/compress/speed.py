"""Step 1 of ``kdbert compress``: the deployed speed of the teacher and of every candidate shape,
measured on this machine before anything is trained.

Each candidate (every registered family's :meth:`~kdbert.families.registry.Family.candidates`:
depth x width of the teacher's own architecture, teacher-matched MobileBERTs for a BERT teacher,
the BiLSTM) is built with random weights (speed does not depend on them), exported as it would
ship (ONNX, int8 by default; fp32 parity checked) and timed in ONNX Runtime on the task's dev rows
at their own lengths, batch 1, and on a throughput batch (:func:`kdbert.deploy.onnx_runtime.bench_onnx`)::

    speedup = teacher latency_real_p50_ms / candidate latency_real_p50_ms

A candidate meets the target when ``speedup >= target_speedup`` (or ``latency_real_p50_ms <=
target_latency_ms``). The teacher is timed once, first, and each candidate after it, so a slow
spell of the machine (another job, a throttled core) during either timing moves the ratio; a
candidate whose ratio lands within a factor :data:`LINE_BAND` of ``target_speedup`` is therefore
timed again in turns with the teacher (:func:`time_in_turns_with_teacher`, as the shipped winner is),
and that ratio decides; so is one that reads faster than a smaller shape of its family, or a
larger one that read faster than it (:func:`_larger_and_faster`: a larger shape never runs
faster, so one of the two timings caught a spell). Those candidates are timed in turns together, once the others are timed,
all of them and the teacher taking turns in the same rounds: the teacher's turns, the dearest
part of each such timing (4.3 ms a row against 0.6-1.5 for the main job's candidates; 5-8x more
for a base-size teacher), are then paid once, not once per candidate. Once the candidates are timed, the teacher is timed alone again, and the
others' ratios are against the faster of its two timings (:func:`with_teacher_again`): a slow spell
during its first timing read the main job's teacher at 6.2 ms where it runs at 4.0-5.2, and so
every candidate 1.3x faster than it is. The table (``speed.json``) and the teacher's export stay in the output
folder; a candidate's export, random weights that no later step uses, is removed once timed (tens
of megabytes each). A rerun measures only what is missing (or a candidate whose shape changed,
e.g. the BiLSTM's embedding size with other word vectors, or one near the line never timed in turns). Each row also keeps what its export and its timing cost
here (``export_seconds``, ``timing_seconds``; the teacher's export includes its int8 choice and
its scores on the task's rows): the finishing phase is estimated from them
(:func:`kdbert.compress.budget.finishing_seconds`). With ``stop_at`` (a clock time, given the table
so far), the candidates are timed in the order given until the next one, at the mean cost of those
timed, and the timing in turns of those near the line (:func:`turns_estimate`) would end past it
(the first is always timed); a rerun with more time measures the rest. With ``target_speedup``, a candidate
no smaller than one of its family already timed below it (every whole number of its shape at least
that one's: more layers, width, heads or FFN units never run faster) is not timed: it cannot meet
the target, and the table's ``skipped`` says which one ruled it out.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kdbert.compress.start_pooling import keeps_teacher_head, pool_as_started
from kdbert.core.atomic_io import write_json
from kdbert.data.load import TaskData, TaskOptions, load_task
from kdbert.deploy.export import export_classifier, export_model
from kdbert.deploy.onnx_runtime import FP32_FILE, INT8_FILE, OnnxClassifier, bench_onnx
from kdbert.deploy.task_rows import TURN_REPEATS, model_feeds, time_in_turns
from kdbert.errors import KdbertError
from kdbert.families.bilstm.model import word_vectors_dim
from kdbert.families.registry import Candidate, ShapeContext, families, family_of_folder

TABLE = "speed.json"
RUNTIMES = {"onnx-int8": INT8_FILE, "onnx-fp32": FP32_FILE}
TURNS = 3  # rounds in which the shipped student and the teacher take turns being timed
# A candidate timed alone within this factor of --target-speedup is timed again in turns with the
# teacher: on one machine, timings alone of one shape moved by up to 1.31x between two searches
# (pretrained-minilm-l6 against MPNet on CoLA: 6.76x and 8.88x; 9.11x in turns; 2026-11-30).
LINE_BAND = 1.5


@dataclass(frozen=True)
class SpeedSettings:
    """How candidates are timed: ``runtime`` (a key of :data:`RUNTIMES`), task rows timed at batch 1
    (both compress's options, their defaults :class:`~kdbert.compress.options.CompressConfig`'s),
    threads (None: all cores), timed runs of the fixed-length and throughput figures, the fixed
    length itself, and the search's ``--pooling``, with which each shape is built for timing as its
    start will read a sentence pair (:mod:`kdbert.compress.start_pooling`; None: as the shape builds)."""

    runtime: str
    length_rows: int
    threads: int | None = None
    runs: int = 10
    seq_len: int = 64
    pooling: str | None = None

    def __post_init__(self):
        if self.runtime not in RUNTIMES:
            raise KdbertError(f"--runtime {self.runtime} is unknown; use one of {', '.join(RUNTIMES)}")

    def key(self) -> dict:
        """What makes two measurements comparable: these settings on this machine."""
        return {"runtime": self.runtime, "threads": self.threads or os.cpu_count(), "length_rows": self.length_rows,
                "seq_len": self.seq_len, "machine": f"{platform.processor() or platform.machine()} "
                                                    f"({os.cpu_count()} CPUs)"}

    def table_key(self) -> dict:
        """What makes two speed tables' candidate rows comparable: :meth:`key` and the pooling they
        were built with (the teacher's timings and exports do not depend on it)."""
        return {**self.key(), **({"pooling": self.pooling} if self.pooling is not None else {})}


def timed_threads(threads: int | None) -> int:
    """The threads a timing runs on: ``--threads``, else torch's (every core unless
    ``$OMP_NUM_THREADS`` says fewer), as :func:`~kdbert.deploy.onnx_runtime.bench_onnx` takes them."""
    import torch

    return threads or torch.get_num_threads()


def other_threads(threads: int | None) -> int | None:
    """The threads a winner timed at ``threads`` (:func:`timed_threads`) is timed at as well: every
    core where that is fewer, else one (a server running one thread per worker); None on one core."""
    timed, cores = timed_threads(threads), os.cpu_count() or 1
    other = cores if timed < cores else 1
    return None if other == timed else other


def shape_context(teacher_dir: str | os.PathLike, task: TaskOptions, word_vectors: str | os.PathLike | None = None,
                  data: TaskData | None = None, teacher: tuple | None = None) -> ShapeContext:
    """What candidates are built for: the teacher's config and tokenizer, the task's outputs and
    texts, and the size of ``word_vectors`` (the BiLSTM's embeddings), when given. ``data``
    (``load_task(task)``) and ``teacher`` ((model, tokenizer) of ``teacher_dir``): as the caller
    has them loaded, else loaded here."""
    teacher, tokenizer = teacher or family_of_folder(teacher_dir).load(Path(teacher_dir))
    data = data or load_task(task)
    texts = tuple(text for example in data.train for text in example.texts)
    dim = word_vectors_dim(word_vectors) if word_vectors else None
    return ShapeContext(teacher.config, tokenizer, data.spec.num_labels, data.spec.is_pair, texts, dim,
                        data.spec.question_answering, word_vectors=str(word_vectors) if word_vectors else None)


def all_candidates(context: ShapeContext) -> list[Candidate]:
    """Every registered family's candidates for ``context``."""
    return [candidate for family in families() for candidate in family.candidates(context)]


def candidate_notes(context: ShapeContext) -> list[str]:
    """What the families say of candidates they do not offer for ``context`` (one line each)."""
    return [note for family in families() if (note := family.candidates_note(context))]


def time_export(file: Path, task: TaskOptions, settings: SpeedSettings) -> dict:
    """The figures compress keeps of one exported model timed with ``settings`` (see module doc)."""
    row = bench_onnx(file, seq_len=settings.seq_len, threads=settings.threads, runs=settings.runs,
                     task=task, length_rows=settings.length_rows)
    keep = ("latency_real_p50_ms", "latency_real_p90_ms", "latency_median_ms", "throughput", "throughput_batch_size",
            "params_total", "flops_per_example", "size_mb", "real_length_p50")
    return {key: row[key] for key in keep}


def time_in_turns_with_teacher(teacher_file: Path, student_files: dict[str, Path], task: TaskOptions,
                               settings: SpeedSettings, rounds: int = TURNS) -> dict:
    """Batch-1 latency of the teacher's export and of each of ``student_files`` (name -> export) on
    the task's dev rows, all timed in turns within the same minutes
    (:func:`kdbert.deploy.task_rows.time_in_turns`), so that a slow spell of the machine cannot
    skew a speedup: ``{"rounds", "latency_real_p50_ms": {"teacher", name...},
    "speedup": {..., name: median over rounds of teacher ms / name's ms}}``."""
    data, teacher = _teacher_in_turns(teacher_file, task, settings)
    return time_in_turns({"teacher": teacher, **{name: timed_model(file, data, settings)
                                                for name, file in student_files.items()}}, rounds)


def time_against_teacher(teacher_file: Path, student_file: Path, task: TaskOptions, settings: SpeedSettings,
                         rounds: int = TURNS) -> dict:
    """:func:`time_in_turns_with_teacher` of one export, named ``student``."""
    return time_in_turns_with_teacher(teacher_file, {"student": student_file}, task, settings, rounds)


_TEACHER_IN_TURNS: dict = {}  # the last teacher timed in turns: {"key": ..., "loaded": (data, (model, feeds))}


def _teacher_in_turns(teacher_file: Path, task: TaskOptions, settings: SpeedSettings) -> tuple:
    """The task's rows and the teacher's (model, feeds) for :func:`time_against_teacher`, loaded once
    per teacher file, task and settings: a search times many candidates against one teacher (loading
    SST-2's rows and the teacher took 3-4 s of each 10-12 s timing in turns)."""
    key = (str(teacher_file), Path(teacher_file).stat().st_mtime_ns, repr(task), settings)
    if _TEACHER_IN_TURNS.get("key") != key:
        data = load_task(task)
        _TEACHER_IN_TURNS.update(key=key, loaded=(data, timed_model(teacher_file, data, settings)))
    return _TEACHER_IN_TURNS["loaded"]


def timed_model(file: Path, data: TaskData, settings: SpeedSettings) -> tuple:
    """An export loaded for timing and its feeds of ``data``'s rows (:func:`model_feeds`)."""
    model = OnnxClassifier(file, threads=settings.threads, load_encoder=False)
    return model, model_feeds(model.family, model.family.load_encoder(model.folder), model.input_spec(), data,
                              settings.length_rows)


def _timed_export(export, file: Path, task: TaskOptions, settings: SpeedSettings) -> dict:
    """``export()`` then :func:`time_export` of ``file``, with the seconds each took."""
    started = time.time()
    export()
    exported = time.time()
    row = time_export(file, task, settings)
    return {**row, "export_seconds": round(exported - started, 2), "timing_seconds": round(time.time() - exported, 2)}


def time_teacher(teacher_dir: str | os.PathLike, task: TaskOptions, output_dir: str | os.PathLike,
                 settings: SpeedSettings, int8_time_left=None, exports=None, known=None) -> dict:
    """The speed table of ``output_dir/speed.json`` for ``settings`` (a new one for other settings)
    with the exported teacher's row, timed now if it is missing (``int8_time_left``: as
    :func:`~kdbert.deploy.export.export_model`'s). ``exports``
    (:class:`~kdbert.compress.teacher_exports.TeacherExports`): where an earlier search's export of
    this teacher is read from, and this one's kept; the row says which (``export``: exported, kept,
    or read; ``export_seconds``: what making it took, here or where it was kept). ``known``: the
    teacher's PyTorch scoring on the task's rows (:meth:`~kdbert.compress.teacher.Teacher.scored`),
    which its export's parity check reads instead of scoring it again."""
    out = Path(output_dir)
    table = {"settings": settings.table_key(), "teacher": None, "candidates": {}}
    if (out / TABLE).is_file():
        previous = json.loads((out / TABLE).read_text())
        if previous.get("settings") == settings.table_key():
            table = previous
    if table["teacher"] is None:
        quantize = "int8" if settings.runtime == "onnx-int8" else None
        graphs = out / "teacher-onnx"
        made_in = exports.restore(graphs) if exports else None  # the kept export's own seconds
        how = {} if made_in is None else {"export": "read from " + str(exports.kept)}

        def export():
            if how:
                return
            started = time.time()
            try:
                export_model(teacher_dir, graphs, quantize=quantize, task=task,  # with its dev score
                             int8_time_left=int8_time_left, known=known)
            except KdbertError as err:
                raise KdbertError(f"--teacher {teacher_dir} cannot be deployed in {settings.runtime}, so there is no "
                                  f"teacher to time students against: {err}") from None
            unkept = exports.keep(graphs, time.time() - started) if exports else "not kept (--teacher-exports none)"
            how["export"] = f"exported; {unkept}" if unkept else f"exported, kept in {exports.kept}"

        table["teacher"] = {**_timed_export(export, graphs / RUNTIMES[settings.runtime], task, settings), **how}
        if made_in is not None:  # read, not made: the finishing scales what making it took
            table["teacher"]["export_seconds"] = made_in
        write_json(out / TABLE, table)
    return table


def measure_speed(teacher_dir: str | os.PathLike, task: TaskOptions, output_dir: str | os.PathLike,
                  settings: SpeedSettings, candidates: list[Candidate] | None = None,
                  context: ShapeContext | None = None, stop_at: Callable[[dict], float] | None = None,
                  clock=time.time, line: float | None = None) -> dict:
    """The teacher's and each candidate's deployed speed (see module doc), as ``{"settings",
    "teacher": row, "candidates": {name: row}}``, also written to ``output_dir/speed.json`` after
    every candidate; rows already there for the same settings are reused. ``stop_at``: the
    ``clock()`` time, given the table so far, past which no more candidates are timed (module doc). ``line``: the speedup
    asked (``--target-speedup``); the candidates timed near it are timed again in turns with the
    teacher, together, once the others are timed or when one of them would rule out the next
    (:func:`near_line`, :func:`retimed_in_turns`)."""
    out = Path(output_dir)
    table = time_teacher(teacher_dir, task, out, settings)
    file_name = RUNTIMES[settings.runtime]
    quantize = "int8" if settings.runtime == "onnx-int8" else None
    context = context or shape_context(teacher_dir, task)
    teacher_file = out / "teacher-onnx" / file_name
    timed: list[float] = []
    near: dict[str, Path] = {}  # timed alone near the line, to be timed again in turns together

    def time_near_in_turns() -> None:
        for name, update in retimed_in_turns(teacher_file, near, task, settings, table["candidates"], clock).items():
            table["candidates"][name].update(update)
            shutil.rmtree(near[name].parent, ignore_errors=True)
        near.clear()
        write_json(out / TABLE, table)

    def export(candidate: Candidate) -> Path:  # random weights: the shape's speed, read as its start reads
        model, encoder = candidate.build(context)
        if settings.pooling is not None:
            pool_as_started(model, context, settings.pooling, keeps_teacher_head(candidate, context))
        folder = out / "speed" / candidate.name
        export_classifier(model, encoder, folder, quantize=quantize, source=f"{candidate.name} (random weights)")
        return folder / file_name

    table["skipped"] = {}
    candidates = all_candidates(context) if candidates is None else candidates
    by_name = {candidate.name: candidate for candidate in candidates}
    for candidate in candidates:
        if _measured(table["candidates"].get(candidate.name), candidate, line):
            continue
        others = {name: row for name, row in table["candidates"].items() if name != candidate.name}
        slower = _no_smaller_than(candidate, {name: row for name, row in others.items() if name not in near}, line)
        if slower is None and _no_smaller_than(candidate, others, line) is not None:
            time_near_in_turns()  # ruled out only by a speed timed alone near the line: first those in turns
            slower = _no_smaller_than(candidate, others, line)
        if slower is not None:
            table["skipped"][candidate.name] = {"family": candidate.family, "shape": dict(candidate.shape),
                                                "no_smaller_than": slower,
                                                "its_speedup": table["candidates"][slower]["speedup"]}
            write_json(out / TABLE, table)
            continue
        in_turns = turns_estimate(table, [*near, None] if line is not None else [], settings)
        if stop_at is not None and timed and clock() + sum(timed) / len(timed) + in_turns > stop_at(table):
            break
        started = clock()
        folder = out / "speed" / candidate.name
        row = _timed_export(lambda: export(candidate), folder / file_name, task, settings)
        row["speedup"] = table["teacher"]["latency_real_p50_ms"] / row["latency_real_p50_ms"]
        table["candidates"][candidate.name] = {"family": candidate.family, "shape": dict(candidate.shape), **row}
        write_json(out / TABLE, table)
        # near the line, or faster than a smaller shape of its family: timed again in turns (_larger_and_faster)
        larger = [] if line is None else [name for name in _larger_and_faster(
            candidate, row["speedup"], {n: r for n, r in table["candidates"].items() if n not in near}) if name in by_name]
        if near_line(row["speedup"], line) or (line is not None and _no_smaller_than(candidate, others, row["speedup"])):
            near[candidate.name] = folder / file_name
        else:
            shutil.rmtree(folder, ignore_errors=True)
        for name in larger:  # timed before it, their exports removed: made again for the turns
            near[name] = export(by_name[name])
        timed.append(clock() - started)
    if near:
        time_near_in_turns()
    if timed and teacher_file.is_file():
        table = with_teacher_again(table, time_export(teacher_file, task, settings)["latency_real_p50_ms"])
        write_json(out / TABLE, table)
    return table


def with_teacher_again(table: dict, latency_ms: float) -> dict:
    """``table`` with the teacher timed alone again at ``latency_ms``: its latency the faster of its
    timings (``latency_alone_ms`` lists them; a slow spell only ever slows a model down), and the
    speedup of each candidate timed alone against it; those timed again in turns keep theirs, both
    latencies measured within the same seconds."""
    teacher = table["teacher"]
    timings = [*teacher.get("latency_alone_ms", [teacher["latency_real_p50_ms"]]), latency_ms]
    teacher = {**teacher, "latency_alone_ms": timings, "latency_real_p50_ms": min(timings)}
    candidates = {name: row if "timed_in_turns" in row else
                  {**row, "speedup": teacher["latency_real_p50_ms"] / row["latency_real_p50_ms"]}
                  for name, row in table["candidates"].items()}
    return {**table, "teacher": teacher, "candidates": candidates}


def _no_smaller_than(candidate: Candidate, rows: dict, line: float | None) -> str | None:
    """The name of a timed candidate of ``candidate``'s family that ran below ``line`` and that
    ``candidate`` is no smaller than (:func:`_at_least`), or None (always None without a line)."""
    if line is None:
        return None
    shape = dict(candidate.shape)
    for name, row in rows.items():
        if row.get("family") == candidate.family and row["speedup"] < line and _at_least(shape, row.get("shape", {})):
            return name
    return None


def _larger_and_faster(candidate: Candidate, speedup: float, rows: dict) -> list[str]:
    """The timed candidates of ``candidate``'s family, none timed in turns, that are no smaller than it
    (:func:`_at_least`) yet read faster than its ``speedup``: a larger shape never runs faster, so their
    timing alone caught a fast spell (or ``candidate``'s a slow one). The main job once timed
    bert-2x384-ffn384 alone at 6.07x, outside the band timed again in turns, where bert-2x384-ffn192
    read 4.29x in turns; ffn384 took every promotion and shipped at 3.83x, below the 4x asked."""
    shape = dict(candidate.shape)
    return [name for name, row in rows.items()
            if name != candidate.name and row.get("family") == candidate.family and "timed_in_turns" not in row
            and row["speedup"] > speedup and _at_least(row.get("shape", {}), shape)]


def _at_least(shape: dict, other: dict) -> bool:
    """Whether ``shape`` is no smaller than ``other``: the same shape names, each whole number at least
    as large (more layers, width, heads or FFN units never run faster), every other value the same."""
    return shape.keys() == other.keys() and all(
        value == other[key] or (_whole(value) and _whole(other[key]) and value > other[key])
        for key, value in shape.items())


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def near_line(speedup: float, line: float | None) -> bool:
    """Whether a speedup timed alone is within a factor :data:`LINE_BAND` of ``line`` (either
    side), where a slow spell of the machine during one of the two timings could move it across."""
    return line is not None and line / LINE_BAND <= speedup < line * LINE_BAND


def _measured(row: dict | None, candidate: Candidate, line: float | None) -> bool:
    """Whether ``row`` (the table's, if any) is ``candidate``'s at its shape, timed in turns where it
    is near the line (a search stopped between its timing alone and that left it without)."""
    return (row is not None and row.get("shape") == dict(candidate.shape)
            and ("timed_in_turns" in row or not near_line(row["speedup"], line)))


def turns_estimate(table: dict, names: list, settings: SpeedSettings) -> float:
    """Seconds to time ``names`` in turns with the teacher (none: 0): each of ``settings.length_rows``
    rows timed ``TURN_REPEATS`` times in each of ``TURNS`` rounds, at the teacher's latency and each one's (a name
    not in the table yet, e.g. None for the next candidate, at the slowest timed so far); the timing
    itself, without loading the models and encoding their rows."""
    if not names:
        return 0.0
    rows = table["candidates"]
    slowest = max((row["latency_real_p50_ms"] for row in rows.values()), default=0.0)
    latencies = [rows[name]["latency_real_p50_ms"] if name in rows else slowest for name in names]
    return TURNS * TURN_REPEATS * settings.length_rows * (table["teacher"]["latency_real_p50_ms"] + sum(latencies)) / 1000.0


def retimed_in_turns(teacher_file: Path, files: dict[str, Path], task: TaskOptions, settings: SpeedSettings,
                     rows: dict[str, dict], clock=time.time) -> dict[str, dict]:
    """The rows of the candidates near the line (``files``: name -> its export), timed again in
    turns with the teacher, all together (:func:`time_in_turns_with_teacher`), as updates of their
    ``rows``: ``speedup`` becomes the median over rounds of the teacher's latency over the
    candidate's, both measured within the same seconds; the first timing stays as ``speedup_alone``,
    the rounds as ``timed_in_turns`` (``{"teacher", "student"}`` each). Of the ``seconds`` the
    timing took, with L the rounds' latencies::

        turns_seconds  = seconds * (L_teacher + L_candidate) / (L_teacher + sum of L)
        timing_seconds += seconds * (L_teacher / n + L_candidate) / (L_teacher + sum of L)

    ``turns_seconds``: what timing it in turns alone with the teacher takes, as the finishing's
    check of a winner does (:func:`~kdbert.compress.budget.turns_seconds`); ``timing_seconds``
    its share of the time spent, the teacher's turns shared among the ``n`` candidates."""
    started = clock()
    in_turns = time_in_turns_with_teacher(teacher_file, files, task, settings)
    seconds = clock() - started
    latency = in_turns["latency_real_p50_ms"]
    total = sum(latency.values())
    return {name: {"speedup_alone": rows[name]["speedup"], "speedup": in_turns["speedup"][name],
                   "timed_in_turns": [{"teacher": r["teacher"], "student": r[name]} for r in in_turns["rounds"]],
                   "turns_seconds": round(seconds * (latency["teacher"] + latency[name]) / total, 2),
                   "timing_seconds": round(rows[name]["timing_seconds"]
                                           + seconds * (latency["teacher"] / len(files) + latency[name]) / total, 2)}
            for name in files}


def admitted_latency(table: dict) -> dict[str, float]:
    """Each candidate's latency as its admission read it: the teacher's over the candidate's
    ``speedup``, so that a candidate timed again in turns (whose ``latency_real_p50_ms`` is still
    its timing alone) is ordered by the speed that admitted it. The main job once timed bert-1x384
    at 0.57 ms alone, the slowest of its candidates, and at 6.0x in turns, among the fastest."""
    teacher = table["teacher"]["latency_real_p50_ms"]
    return {name: teacher / row["speedup"] for name, row in table["candidates"].items()}


def meets_target(speedup: float, latency_ms: float, target_speedup: float | None,
                 target_latency_ms: float | None) -> bool:
    """``speedup >= target_speedup`` where a speedup is asked, else ``latency_ms <= target_latency_ms``."""
    if target_speedup is not None:
        return speedup >= target_speedup
    return latency_ms <= target_latency_ms


def meeting_target(table: dict, target_speedup: float | None = None, target_latency_ms: float | None = None) -> list[str]:
    """Names of the candidates that meet the target, fastest first; a target none meets is refused
    with the fastest measured."""
    if (target_speedup is None) == (target_latency_ms is None):
        raise KdbertError("pass one of --target-speedup N or --target-latency-ms L")
    rows = table["candidates"]
    if not rows:
        raise KdbertError("no candidate was measured; check the teacher and the task")

    kept = sorted((name for name, row in rows.items()
                   if meets_target(row["speedup"], row["latency_real_p50_ms"], target_speedup, target_latency_ms)),
                  key=lambda n: rows[n]["latency_real_p50_ms"])
    if not kept:
        name = min(rows, key=lambda n: rows[n]["latency_real_p50_ms"])
        fastest = rows[name]
        target = (f"--target-speedup {target_speedup:g}" if target_speedup is not None
                  else f"--target-latency-ms {target_latency_ms:g}")
        raise KdbertError(f"no candidate meets {target} on this machine: the fastest, {name}, runs in "
                          f"{fastest['latency_real_p50_ms']:.2f} ms per row ({fastest['speedup']:.1f}x the teacher); "
                          "lower the target")
    return kept
