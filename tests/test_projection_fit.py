"""TinyBERT's W_e / W_h fitted to the first batch (``--projection-init fit``)."""

import pytest
import torch
from torch import nn

from kdbert.core.matching import Match, MatchLoss, fit_projection
from kdbert.errors import KdbertError


def states(seed: int, shape=(4, 5, 6)) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_a_student_equal_to_the_teacher_gets_the_identity():
    teacher = states(0)
    mask = torch.ones(4, 5, dtype=torch.bool)
    linear = nn.Linear(6, 6)
    fit_projection(linear, teacher.clone(), teacher, mask)
    # ridge 1e-3 of the mean Gram diagonal shrinks W by about that share
    torch.testing.assert_close(linear.weight, torch.eye(6), atol=5e-3, rtol=0)
    torch.testing.assert_close(linear.bias, torch.zeros(6), atol=5e-3, rtol=0)


def test_selected_dimensions_map_back_to_where_they_came_from_and_padding_is_ignored():
    teacher = states(1, (8, 6, 6))
    student = 2.0 * teacher[..., [0, 2, 4]] + 1.0  # a narrower student: teacher dims 0, 2, 4, rescaled
    mask = torch.ones(8, 6, dtype=torch.bool)
    mask[:, 4:] = False
    student[:, 4:] = 1e3  # padding: must not enter the fit
    linear = nn.Linear(3, 6)
    fit_projection(linear, student, teacher, mask)
    expected = torch.zeros(6, 3)
    expected[[0, 2, 4], [0, 1, 2]] = 0.5
    torch.testing.assert_close(linear.weight[[0, 2, 4]], expected[[0, 2, 4]], atol=5e-3, rtol=0)
    torch.testing.assert_close(linear.bias[[0, 2, 4]], torch.full((3,), -0.5), atol=5e-3, rtol=0)


def test_an_unknown_projection_init_is_refused():
    with pytest.raises(KdbertError, match="projection init 'identity' is unknown; use one of random, fit"):
        MatchLoss([Match("task", "logits", "hard_label", target="labels")], projection_init="identity")
