import pytest

from kdbert.core import layer_maps as mapping
from kdbert.errors import KdbertError
from kdbert.core.layer_maps import LayerMap


def test_uniform_tinybert4_from_12_is_3m():
    lm = mapping.uniform(4, 12)
    assert lm.pairs == ((0, 0), (1, 3), (2, 6), (3, 9), (4, 12))
    assert lm.attention_pairs == ((0, 2), (1, 5), (2, 8), (3, 11))


def test_uniform_6_to_3():
    assert mapping.uniform(3, 6).pairs == ((0, 0), (1, 2), (2, 4), (3, 6))


def test_uniform_refuses_non_multiple():
    with pytest.raises(KdbertError, match="multiple.*teacher 12 and student 5.*explicit"):
        mapping.uniform(5, 12)


def test_top_and_bottom():
    assert mapping.top(4, 12).pairs == ((0, 0), (1, 9), (2, 10), (3, 11), (4, 12))
    assert mapping.bottom(4, 12).pairs == ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4))
    with pytest.raises(KdbertError, match="student 13 and teacher 12"):
        mapping.top(13, 12)


def test_pkd_skip_and_last_match_reference_for_12_to_6():
    skip = mapping.pkd_skip(6, 12)
    assert skip.student_layers == (1, 2, 3, 4, 5)
    assert skip.teacher_layers == (2, 4, 6, 8, 10)  # reference 0-based {1, 3, 5, 7, 9}
    last = mapping.pkd_last(6, 12)
    assert last.student_layers == (1, 2, 3, 4, 5)
    assert last.teacher_layers == (7, 8, 9, 10, 11)  # reference 0-based {6, ..., 10}
    # 24-layer teacher: the reference hard-codes 0-based [3, 7, 11, 15, 19].
    assert mapping.pkd_skip(6, 24).teacher_layers == (4, 8, 12, 16, 20)
    with pytest.raises(KdbertError, match="at least 2 layers"):
        mapping.pkd_skip(1, 12)


def test_explicit():
    lm = mapping.explicit([2, 5, 12], 12)
    assert lm.pairs == ((0, 0), (1, 2), (2, 5), (3, 12))


@pytest.mark.parametrize(
    "layers,message",
    [
        ([3, 6, 13], "pair 3 -> 13: teacher layer 13 is out of range; the teacher has 12 layers"),
        ([3, 3, 9], "pair 2 -> 3: teacher layer 3 does not come after 3"),
        ([6, 3], "pair 2 -> 3: teacher layer 3 does not come after 6"),
        ([0, 4], "pair 1 -> 0: teacher layer 0 does not come after 0"),
        ([-1], "pair 1 -> -1: teacher layer -1 is out of range"),
    ],
)
def test_explicit_bad_lists_name_the_index(layers, message):
    with pytest.raises(KdbertError, match=message):
        mapping.explicit(layers, 12)


def test_validate_student_side_and_heads():
    with pytest.raises(KdbertError, match="pair 5 -> 12: student layer 5 is out of range; the student has 4"):
        LayerMap(((0, 0), (5, 12))).validate(4, 12)
    lm = mapping.uniform(4, 12)
    with pytest.raises(KdbertError, match="4 attention heads, teacher has 12.*head_average"):
        lm.validate(4, 12, student_heads=4, teacher_heads=12, needs_attention=True)
    assert lm.validate(4, 12, 4, 12, needs_attention=True, head_average=True) is lm
    assert lm.validate(4, 12, 4, 12, needs_attention=False) is lm
    with pytest.raises(KdbertError, match="no attention"):
        LayerMap(((1, 0),)).validate(4, 12, needs_attention=True)
    with pytest.raises(KdbertError, match="empty"):
        LayerMap(()).validate(4, 12)


def test_resolve():
    assert mapping.resolve("uniform", 4, 12) == mapping.uniform(4, 12)
    assert mapping.resolve("top", 4, 12) == mapping.top(4, 12)
    assert mapping.resolve("bottom", 4, 12) == mapping.bottom(4, 12)
    assert mapping.resolve("skip", 6, 12) == mapping.pkd_skip(6, 12)
    assert mapping.resolve("last", 6, 12) == mapping.pkd_last(6, 12)
    assert mapping.resolve("explicit", 2, 12, [4, 8]) == mapping.explicit([4, 8], 12)
    with pytest.raises(KdbertError, match="unknown layer map 'even'; choose one of uniform"):
        mapping.resolve("even", 4, 12)
    with pytest.raises(KdbertError, match="needs a list"):
        mapping.resolve("explicit", 2, 12)
    with pytest.raises(KdbertError, match="has 3 teacher layers but the student has 2"):
        mapping.resolve("explicit", 2, 12, [4, 8, 12])
    with pytest.raises(KdbertError, match="use 'explicit'"):
        mapping.resolve("uniform", 2, 12, [4, 8])


def test_table_and_frozen():
    lm = mapping.uniform(2, 4)
    assert lm.table() == "student -> teacher\n    emb -> emb\n      1 -> 2\n      2 -> 4"
    with pytest.raises(AttributeError):
        lm.pairs = ()  # type: ignore[misc]
