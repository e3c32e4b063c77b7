"""Which int8 graph an export ships: each method of :data:`~kdbert.deploy.quantize.INT8_METHODS`
scored and timed at batch 1 at the rows' own lengths, on the task's held-out training rows when it
has them (``--held-out-fraction``), else on dev.

``--int8-method auto`` (the default) makes ``dynamic``, then the static methods in turn (minmax,
percentile, entropy) until one keeps the score: every static graph has the same operators, only
its scales differ, so a later calibration could win only by the noise of the timing (the others are
recorded as ``skipped``). Of those made it keeps::

    the fastest method m (median batch-1 latency over the rows) with
        score_fp32 - score_m <= MAX_SCORE_DROP points (score_fp32: the ORT fp32 graph's score)
    else, when none qualifies, the method with the highest score

Scores are held-out scores where the task holds rows out, so that dev only reports the graph it did
not pick (``chosen_on`` says which rows decided; every variant's dev score is recorded beside).
Without a task there are no rows to calibrate on or to check against: ``auto`` is ``dynamic``.
Latency is the smaller of two rounds that alternate between methods, so that a drift of the
machine's speed during the measurement does not favour the method timed first.

With a deadline (``time_left``: compress gives its exports one, so that they keep its budget),
``auto`` scores the fp32 graph and makes ``dynamic`` first, then each static method only while it
would end before the deadline: the longest static method made so far, or before the first
``STATIC_PASSES`` times the fp32 graph's scoring (a static method runs the graph with every
activation as an output on the calibration rows, then is scored: about 4.5 scoring passes of the
quickstart's teacher on an AMD EPYC). What was left out is recorded as ``skipped``.

Every graph has the weights ``--int8-target`` asks for (:mod:`kdbert.deploy.int8_kernels`: 7-bit,
exact on every x86 CPU, by default); the report records the target, the largest weight and the CPU
that quantised and checked it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from kdbert.core.evaluate import Scored, scored_with_logits
from kdbert.deploy.int8_kernels import INT8_TARGETS, cpu_int8_facts, largest_weight
from kdbert.deploy.quantize import INT8_METHODS, calibration_batches, quantize_int8
from kdbert.deploy.task_rows import task_feeds, time_feeds
from kdbert.errors import KdbertError

MAX_SCORE_DROP = 0.5  # points of the task's score an int8 graph may lose against fp32
CALIBRATION_ROWS = 256  # training rows the static methods calibrate on
TIMED_ROWS = 100  # rows timed per method
ROUNDS = 2
STATIC_PASSES = 5.0  # a static method's calibration and scoring, in fp32 scoring passes (module doc)

__all__ = ["INT8_CHOICES", "MAX_SCORE_DROP", "choose_int8", "pick_int8"]

INT8_CHOICES = ("auto",) + INT8_METHODS


def _calibration(family, encoder, spec, data, max_seq_len: int):
    feeds = task_feeds(family, encoder, spec, data, max_seq_len, CALIBRATION_ROWS, split="train")
    return calibration_batches(feeds, pad_id=getattr(encoder, "pad_token_id", 0) or 0), len(feeds)


def keeps_score(fp32_score: float, int8_score: float) -> bool:
    """Whether an int8 graph scoring ``int8_score`` is within :data:`MAX_SCORE_DROP` of fp32."""
    return fp32_score - int8_score <= MAX_SCORE_DROP


def pick_int8(variants: dict[str, dict], fp32_score: float, score: str = "dev_score") -> tuple[str, str]:
    """The method the rule of the module doc keeps among ``variants`` (method -> ``score`` (the
    key of the rows that decide: ``held_out_score`` or ``dev_score``), ``latency_real_p50_ms``;
    entries with an ``error`` are skipped), and the rule that decided."""
    rows = "held-out" if score == "held_out_score" else "dev"
    scored = {name: v for name, v in variants.items() if score in v}
    kept = [name for name, v in scored.items() if keeps_score(fp32_score, v[score])]
    if kept:
        return (min(kept, key=lambda name: scored[name]["latency_real_p50_ms"]),
                f"fastest within {MAX_SCORE_DROP} points of the fp32 {rows} score")
    return (max(scored, key=lambda name: scored[name][score]),
            f"none within {MAX_SCORE_DROP} points of the fp32 {rows} score: the best {rows} score")


def _weights(int8_file: Path, target: str) -> dict:
    return {"target": target, "weight_bits": 7 if target == "any" else 8,
            "largest_weight": largest_weight(int8_file), "quantised_and_checked_on": cpu_int8_facts()}


def choose_int8(fp32_file: Path, int8_file: Path, method: str, family, encoder, spec, data=None,
                evaluator=None, max_seq_len: int = 128, threads: int | None = None, target: str = "any",
                time_left: Callable[[], float] | None = None) -> dict:
    """Quantise ``fp32_file`` into ``int8_file`` with ``method`` (one of :data:`INT8_CHOICES`) for
    ``target`` CPUs and return what was chosen and why, ``{"method", "requested", "rule",
    "chosen_on", "target", "weight_bits", "largest_weight", "quantised_and_checked_on" (this machine's
    :func:`~kdbert.deploy.int8_kernels.cpu_int8_facts`), "variants": {method: {"held_out_score",
    "dev_score", "latency_real_p50_ms", "size_mb"} | {"error"} | {"skipped"}}, ...}``, with the
    ``evaluator``'s metrics and dev logits of the graphs it scored (``{"onnx_fp32", "onnx_int8"}``:
    :class:`~kdbert.core.evaluate.Scored`; ``auto`` only), so that the export need not score them
    or predict their parity rows again. ``data`` (a TaskData) and ``evaluator``
    (its family's evaluator) are needed by the static methods and by ``auto``; ``time_left()``, the
    seconds to ``auto``'s deadline (module doc)."""
    from kdbert.deploy.onnx_runtime import OnnxClassifier

    if method not in INT8_CHOICES:
        raise KdbertError(f"--int8-method {method} is unknown; choose one of {', '.join(INT8_CHOICES)}")
    if target not in INT8_TARGETS:
        raise KdbertError(f"--int8-target {target} is unknown; choose one of {', '.join(INT8_TARGETS)}")
    if data is None:
        if method not in ("auto", "dynamic"):
            raise KdbertError(f"--int8-method {method} calibrates on the task's training rows; pass --task")
        quantize_int8(fp32_file, int8_file, target=target)
        return {"method": "dynamic", "requested": method, **_weights(int8_file, target),
                "rule": "no task: dynamic (static methods need training rows to calibrate, rows to check)"}, {}
    if method != "auto":
        calibration, calibration_rows = (None, 0) if method == "dynamic" else _calibration(
            family, encoder, spec, data, max_seq_len)
        quantize_int8(fp32_file, int8_file, method, calibration, target=target)
        return {"method": method, "requested": method, "calibration_rows": calibration_rows,
                **_weights(int8_file, target), "rule": "requested"}, {}
    held_out = bool(data.held_out)
    score = "held_out_score" if held_out else "dev_score"

    graphs: dict[str, Scored] = {}  # the evaluator's metrics and dev logits of each graph scored

    def scores(name: str, file: Path) -> dict:
        graphs[name] = scored_with_logits(evaluator, OnnxClassifier(file, threads=threads, load_encoder=False))
        metrics = graphs[name].metrics
        return {"dev_score": metrics["score"], **({"held_out_score": metrics["selection_score"]} if held_out else {})}

    began = time.perf_counter()
    fp32 = scores("fp32", fp32_file)
    guess = STATIC_PASSES * (time.perf_counter() - began)
    measured: list[float] = []  # seconds of each static method made
    calibration, calibration_rows = None, 0
    variants: dict[str, dict] = {}
    files: dict[str, Path] = {}
    kept_static = None  # the first static method within the drop: no other calibration is made
    for name in INT8_METHODS:
        expected = max(measured, default=guess)
        if name != "dynamic" and kept_static is not None:
            variants[name] = {"skipped": f"{kept_static} kept the score, and a static graph's speed does not "
                                         "depend on its calibration"}
            continue
        if name != "dynamic" and time_left is not None and expected > time_left():
            variants[name] = {"skipped": f"would end past the export's deadline (about {expected:.0f} s)"}
            continue
        began = time.perf_counter()
        if name != "dynamic" and calibration is None:
            calibration, calibration_rows = _calibration(family, encoder, spec, data, max_seq_len)
        try:
            files[name] = quantize_int8(fp32_file, int8_file.with_name(f"{name}.int8.onnx"), name, calibration,
                                        target=target)
        except KdbertError as err:
            variants[name] = {"error": str(err)}
            continue
        variants[name] = {**scores(name, files[name]), "size_mb": files[name].stat().st_size / 1e6}
        if name != "dynamic":
            measured.append(time.perf_counter() - began)
            if keeps_score(fp32[score], variants[name][score]):
                kept_static = name
    runners = {name: OnnxClassifier(file, threads=threads, load_encoder=False) for name, file in files.items()}
    feeds = task_feeds(family, encoder, spec, data, max_seq_len, TIMED_ROWS, split="held-out" if held_out else "dev")
    latency = {name: float("inf") for name in runners}
    for _ in range(ROUNDS):
        for name, runner in runners.items():
            latency[name] = min(latency[name], time_feeds(runner, feeds)["latency_real_p50_ms"])
    for name in runners:
        variants[name]["latency_real_p50_ms"] = latency[name]
    chosen, rule = pick_int8(variants, fp32[score], score)
    del runners
    files[chosen].replace(int8_file)
    for name, file in files.items():
        if name != chosen:
            file.unlink()
    return {"method": chosen, "requested": method, "calibration_rows": calibration_rows,
            **_weights(int8_file, target), "rule": rule,
            "chosen_on": "held-out" if held_out else "dev", "fp32_dev_score": fp32["dev_score"],
            **({"fp32_held_out_score": fp32["held_out_score"]} if held_out else {}),
            "timed_rows": len(feeds), "variants": variants}, {"onnx_fp32": graphs["fp32"], "onnx_int8": graphs[chosen]}
