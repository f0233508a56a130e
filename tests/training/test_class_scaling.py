"""The class-scaled defaults of issue 40: top-model widths and learning rates that follow the number
of classes, and leave binary and regression tasks at the papers' values."""

from __future__ import annotations

import pytest

from verticalfs.training.split import TrainConfig, lr_for_classes, scaled_config, widths_for_classes


@pytest.mark.parametrize(("widths", "classes", "per_class", "want"), [
    ((16,), 30, 2, (60,)),      # 30 classes: at least 60 units
    ((16,), 10, 2, (20,)),
    ((16,), 2, 2, (16,)),       # binary: the paper's width
    ((16,), None, 2, (16,)),    # regression
    ((16,), 30, 0, (16,)),      # 0: as given
    ((64, 8), 26, 2, (64, 52)),  # every hidden layer, never narrower than given
    ((), 30, 2, ()),            # a linear top model stays linear
    ((12,), 7, 1.5, (12,)),     # ceil(10.5) = 11 < 12
])
def test_widths_follow_the_classes(widths, classes, per_class, want):
    assert widths_for_classes(widths, classes, per_class) == want


@pytest.mark.parametrize(("classes", "lr_classes", "want"), [
    (30, 3, 0.003), (10, 3, 0.009), (3, 3, 0.03), (2, 3, 0.03), (None, 3, 0.03), (30, 0, 0.03)])
def test_learning_rate_follows_the_classes(classes, lr_classes, want):
    assert lr_for_classes(0.03, classes, lr_classes) == pytest.approx(want)


def test_scaled_config_is_a_copy():
    c = TrainConfig(lr=0.03, top_hidden=(16,))
    s = scaled_config(c, 30, 2, 3)
    assert (s.top_hidden, s.lr) == ((60,), pytest.approx(0.003))
    assert (c.top_hidden, c.lr) == ((16,), 0.03)
