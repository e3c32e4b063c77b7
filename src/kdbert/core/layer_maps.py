"""Layer maps g(m): which teacher layer each student layer learns from.

Layer indices follow HF's ``hidden_states`` tuple: 0 is the embedding output and 1..M
(student) or 1..N (teacher) are the transformer layers, so a pair (m, n) matches
``student.hidden_states[m]`` with ``teacher.hidden_states[n]``. The attention of layer m
(1-based) is ``attentions[m - 1]``; :attr:`LayerMap.attention_pairs` gives those indices.

Methods (M student layers, N teacher layers):
  - uniform: g(m) = m * N / M, g(0) = 0 (TinyBERT; N % M == 0). TinyBERT4 from 12: 3m.
  - top:     g(m) = N - M + m, g(0) = 0.
  - bottom:  g(m) = m.
  - explicit: g(1..M) given as a list, g(0) = 0.
  - skip:    BERT-PKD-Skip, student layers 1..M-1 only, g(m) = m * N / M
             (12 -> 6: teacher 2, 4, 6, 8, 10, i.e. the reference's 0-based {1,3,5,7,9}).
  - last:    BERT-PKD-Last, student layers 1..M-1 only, g(m) = N - M + m
             (12 -> 6: teacher 7..11, the reference's 0-based {6..10}).
PKD leaves the last student layer out: it is covered by the logit KD term.

:func:`resolve_layer_map` is the one resolver every method calls: a method states its
:class:`LayerMapRules` (the maps it offers, its default, whether the embeddings and the last
student layer are matched) and the resolver reads ``--layer-map`` / ``--teacher-layers``, refuses
what does not fit with one-line errors, and returns a validated :class:`ResolvedLayerMap` whose
:meth:`~ResolvedLayerMap.describe` is what every method prints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kdbert.errors import KdbertError


@dataclass(frozen=True)
class LayerMap:
    """(student_layer, teacher_layer) pairs; index 0 is the embedding output."""

    pairs: tuple[tuple[int, int], ...]

    @property
    def student_layers(self) -> tuple[int, ...]:
        return tuple(s for s, _ in self.pairs)

    @property
    def teacher_layers(self) -> tuple[int, ...]:
        return tuple(t for _, t in self.pairs)

    @property
    def attention_pairs(self) -> tuple[tuple[int, int], ...]:
        """0-based indices into the ``attentions`` tuples; the embedding pair has none."""
        return tuple((s - 1, t - 1) for s, t in self.pairs if s > 0)

    def validate(
        self,
        student_layers: int,
        teacher_layers: int,
        student_heads: int | None = None,
        teacher_heads: int | None = None,
        needs_attention: bool = False,
        head_average: bool = False,
    ) -> LayerMap:
        """Check the map against models of these depths; return self or raise KdbertError.

        Indices must lie in 0..M (student) and 0..N (teacher), and both sides must be
        strictly increasing. When attention is distilled, head counts must match unless
        ``head_average`` is set.
        """
        if not self.pairs:
            raise KdbertError("layer map is empty; map at least one student layer")
        for i, (s, t) in enumerate(self.pairs):
            for side, layer, depth, prev in (
                ("student", s, student_layers, self.pairs[i - 1][0] if i else None),
                ("teacher", t, teacher_layers, self.pairs[i - 1][1] if i else None),
            ):
                where = f"layer map pair {s} -> {t}"
                if not 0 <= layer <= depth:
                    raise KdbertError(
                        f"{where}: {side} layer {layer} is out of range; the {side} has "
                        f"{depth} layers (use 0 for embeddings, 1..{depth})"
                    )
                if prev is not None and layer <= prev:
                    raise KdbertError(
                        f"{where}: {side} layer {layer} does not come after {prev}; "
                        f"{side} layers must be strictly increasing"
                    )
        if needs_attention and any(s > 0 and t == 0 for s, t in self.pairs):
            raise KdbertError(
                "layer map pairs a student transformer layer with the teacher's embeddings, "
                "which have no attention; map it to a teacher layer >= 1"
            )
        if (
            needs_attention
            and not head_average
            and student_heads is not None
            and teacher_heads is not None
            and student_heads != teacher_heads
        ):
            raise KdbertError(
                f"student has {student_heads} attention heads, teacher has {teacher_heads}: "
                "attention distillation needs equal counts; set head_average or drop the "
                "attention loss"
            )
        return self

    def table(self) -> str:
        """Printable two-column table, 'emb' for the embedding output."""

        def name(layer: int) -> str:
            return "emb" if layer == 0 else str(layer)

        lines = ["student -> teacher"]
        lines += [f"{name(s):>7} -> {name(t)}" for s, t in self.pairs]
        return "\n".join(lines)


def _ratio(m: int, n: int, method: str) -> int:
    if m < 1 or n % m != 0:
        raise KdbertError(
            f"{method} layer map needs the teacher depth to be a multiple of the student "
            f"depth, got teacher {n} and student {m}; use 'explicit' with a list of "
            f"{m} teacher layers instead"
        )
    return n // m


def _check_depths(m: int, n: int, method: str) -> None:
    if not 1 <= m <= n:
        raise KdbertError(
            f"{method} layer map needs 1 <= student layers <= teacher layers, got student "
            f"{m} and teacher {n}"
        )


def uniform(m: int, n: int) -> LayerMap:
    """g(m) = m * N / M for m = 0..M (TinyBERT)."""
    k = _ratio(m, n, "uniform")
    return LayerMap(tuple((i, i * k) for i in range(m + 1))).validate(m, n)


def top(m: int, n: int) -> LayerMap:
    """g(0) = 0, g(m) = N - M + m: the student learns from the teacher's last M layers."""
    _check_depths(m, n, "top")
    return LayerMap(((0, 0),) + tuple((i, n - m + i) for i in range(1, m + 1))).validate(m, n)


def bottom(m: int, n: int) -> LayerMap:
    """g(m) = m: the student learns from the teacher's first M layers."""
    _check_depths(m, n, "bottom")
    return LayerMap(tuple((i, i) for i in range(m + 1))).validate(m, n)


def explicit(teacher_layers: list[int], n: int) -> LayerMap:
    """g(0) = 0 and g(i) = teacher_layers[i - 1] for i = 1..len(teacher_layers)."""
    layers = list(teacher_layers)
    if not layers:
        raise KdbertError("explicit layer map is empty; give one teacher layer per student layer")
    pairs = ((0, 0),) + tuple((i, int(t)) for i, t in enumerate(layers, start=1))
    return LayerMap(pairs).validate(len(layers), n)


def _pkd_check(m: int, n: int, method: str) -> None:
    _check_depths(m, n, method)
    if m < 2:
        raise KdbertError(
            f"PKD-{method} needs a student with at least 2 layers (its last layer is left to "
            "the logit loss), got 1"
        )


def pkd_skip(m: int, n: int) -> LayerMap:
    """BERT-PKD-Skip: g(m) = m * N / M for student layers 1..M-1."""
    _pkd_check(m, n, "skip")
    k = _ratio(m, n, "skip")
    return LayerMap(tuple((i, i * k) for i in range(1, m))).validate(m, n)


def pkd_last(m: int, n: int) -> LayerMap:
    """BERT-PKD-Last: g(m) = N - M + m for student layers 1..M-1."""
    _pkd_check(m, n, "last")
    return LayerMap(tuple((i, n - m + i) for i in range(1, m))).validate(m, n)


def parse_layers(value, option: str, expected: str = "a comma-separated list of integers, e.g. 3,6,9,12") -> list[int]:
    """``"0,2,4"`` (or a list) -> ``[0, 2, 4]``; a one-line error naming ``option`` otherwise."""
    parts = list(value) if isinstance(value, (list, tuple)) else [p.strip() for p in str(value).split(",") if p.strip()]
    try:
        layers = [int(p) for p in parts]
    except (TypeError, ValueError):
        raise KdbertError(f"{option} {value!r} is not {expected}") from None
    if not layers:
        raise KdbertError(f"{option} is empty; give {expected}")
    return layers


_BUILDERS = {
    "uniform": uniform, "top": top, "bottom": bottom, "skip": pkd_skip, "last": pkd_last,
    "explicit": explicit,
}


def resolve(method: str, m: int, n: int, explicit: list[int] | None = None) -> LayerMap:
    """Build the layer map named ``method`` for an M-layer student and N-layer teacher."""
    if method not in _BUILDERS:
        raise KdbertError(f"unknown layer map {method!r}; choose one of {', '.join(_BUILDERS)}")
    if method == "explicit":
        if explicit is None:
            raise KdbertError("layer map 'explicit' needs a list of teacher layers, one per student layer")
        if len(explicit) != m:
            raise KdbertError(
                f"explicit layer map has {len(explicit)} teacher layers but the student has "
                f"{m} layers; give exactly one teacher layer per student layer"
            )
        return _BUILDERS["explicit"](explicit, n)
    if explicit is not None:
        raise KdbertError(
            f"a list of teacher layers was given with layer map {method!r}; use 'explicit' "
            "or drop the list"
        )
    return _BUILDERS[method](m, n)


# ----------------------------------------------------------------------------- the resolver
EVEN_MAPS = ("uniform", "skip")  # g(m) = m * N / M: the teacher depth must be a multiple of the student's


def rounded_uniform(m: int, n: int) -> list[int]:
    """g(m) = ceil(m * N / M), m = 1..M: the uniform map when N is not a multiple of M (6 -> 4: 2,3,5,6)."""
    return [math.ceil(i * n / m) for i in range(1, m + 1)]


@dataclass(frozen=True)
class LayerMapRules:
    """How a method maps its student's layers.

    Attributes:
        method: the method's name in messages and the printed table ("TinyBERT").
        maps: the ``--layer-map`` values it accepts; ``explicit`` is the ``--teacher-layers`` list.
        default: the map without ``--layer-map`` or ``--teacher-layers``.
        embeddings: the map starts with the embeddings pair 0 -> 0.
        last_layer: the student's last layer is matched (PKD leaves it to the logit loss).
        rounded_default: when the default is ``uniform`` and N % M != 0, use :func:`rounded_uniform`
            (announced as ``uniform-rounded``) instead of refusing.
    """

    method: str
    maps: tuple[str, ...]
    default: str
    embeddings: bool = True
    last_layer: bool = True
    rounded_default: bool = False

    def matched(self, student_depth: int) -> int:
        """How many student layers (1..k) the map gives a teacher layer."""
        return student_depth if self.last_layer else student_depth - 1


@dataclass(frozen=True)
class ResolvedLayerMap:
    """A validated map, the name it was chosen by and the depths it was resolved for."""

    layer_map: LayerMap
    name: str
    method: str
    student_depth: int
    teacher_depth: int

    @property
    def layer_pairs(self) -> list[tuple[int, int]]:
        """The transformer-layer pairs (the embeddings pair left out)."""
        return [(s, t) for s, t in self.layer_map.pairs if s > 0]

    def describe(self) -> str:
        """What a run prints before training: the method, map name, depths and table."""
        return (f"{self.method} layer map ({self.name}, student {self.student_depth} layers, teacher "
                f"{self.teacher_depth}):\n{self.layer_map.table()}")


def resolve_layer_map(rules: LayerMapRules, student_depth: int, teacher_depth: int, layer_map: str | None = None,
                      teacher_layers=None) -> ResolvedLayerMap:
    """The map of an M-layer student and N-layer teacher from the ``--layer-map`` and
    ``--teacher-layers`` options under ``rules``, validated against both depths."""
    m, n, method = student_depth, teacher_depth, rules.method
    if m > n:
        raise KdbertError(f"the student has {m} layers but the teacher has {n}: {method} gives each student layer a "
                          f"teacher layer of its own; use a student with at most {n} layers")
    count = rules.matched(m)
    if count < 1:
        raise KdbertError(f"{method} needs a student of at least 2 layers (its last layer is left to the logit loss), "
                          f"got {m}; use a deeper student, or --method kd")
    example = ",".join(map(str, rounded_uniform(m, n)[:count]))
    listed = None if teacher_layers in (None, "") else parse_layers(teacher_layers, "--teacher-layers")
    name = layer_map or ("explicit" if listed is not None else rules.default)
    if name not in rules.maps:
        raise KdbertError(f"--layer-map {name}: not a {method} layer map; use one of {', '.join(rules.maps)}")
    if name == "explicit" and listed is None:
        raise KdbertError(f"--layer-map explicit needs --teacher-layers: {count} teacher layers (1-based), one per "
                          f"student layer 1..{count}, e.g. {example}")
    if name != "explicit" and listed is not None:
        raise KdbertError(f"--teacher-layers needs --layer-map explicit, not {name}; drop one of them")
    if name in EVEN_MAPS and n % m:
        if layer_map is not None or not rules.rounded_default:
            others = [f"--layer-map {other}" for other in rules.maps if other not in (name, "explicit")]
            raise KdbertError(f"the {name} layer map needs the teacher depth ({n}) to be a multiple of the student "
                              f"depth ({m}); pass --teacher-layers with {count} 1-based teacher layers, e.g. "
                              f"--teacher-layers {example}{''.join(f', or {o}' for o in others)}")
        name, listed = "uniform-rounded", rounded_uniform(m, n)[:count]
    if listed is not None:
        if len(listed) != count:
            left_out = "" if rules.last_layer else f" and {method} matches layers 1..{count} (the last is left to " \
                                                    "the logit loss)"
            raise KdbertError(f"--teacher-layers lists {len(listed)} layers but the student has {m}{left_out} (got "
                              f"{teacher_layers}); give {count} teacher layers (1-based), one per matched student "
                              "layer")
        if any(t < 1 for t in listed):
            raise KdbertError(f"--teacher-layers {teacher_layers}: teacher layers are 1-based (1..{n}); 0 is the "
                              "embeddings")
        pairs = tuple(enumerate(listed, start=1))
    else:
        pairs = tuple((s, t) for s, t in resolve(name, m, n).pairs if 0 < s <= count)
    pairs = ((0, 0),) + pairs if rules.embeddings else pairs
    return ResolvedLayerMap(LayerMap(pairs).validate(m, n), name, method, m, n)
