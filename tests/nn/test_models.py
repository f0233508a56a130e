"""Bottom and top models shrink for real and keep computing the same function."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verticalfs.exceptions import ConfigError
from verticalfs.nn.models import BottomMLP, TopModel, make_optimizer, seeded


@pytest.fixture
def x():
    return torch.randn(32, 10)


class TestShrinking:
    @pytest.mark.parametrize("hidden", [(), (16,), (16, 8)])
    def test_keep_inputs_equals_zeroed_inputs(self, x, hidden):
        m = seeded(0, lambda: BottomMLP(10, hidden, 4))
        keep = np.array([0, 3, 4, 9])
        x0 = x.clone()
        x0[:, np.setdiff1d(np.arange(10), keep)] = 0
        with torch.no_grad():
            expected = m(x0)
            full = m(x)
        m.keep_inputs(keep)
        assert m.n_inputs == 4 and m.input_layer.weight.shape == (m.input_layer.out_features, 4)
        with torch.no_grad():
            out = m(x[:, keep])
        torch.testing.assert_close(out, expected)
        assert not torch.allclose(out, full)

    @pytest.mark.parametrize("hidden", [(), (16, 8)])
    def test_keep_outputs_slices_outputs(self, x, hidden):
        m = seeded(1, lambda: BottomMLP(10, hidden, 6))
        keep = np.array([1, 2, 5])
        with torch.no_grad():
            expected = m(x)[:, keep]
        m.keep_outputs(keep)
        assert m.n_outputs == 3
        with torch.no_grad():
            torch.testing.assert_close(m(x), expected)

    def test_top_model_keep_inputs(self):
        top = seeded(2, lambda: TopModel(6, (), 2))
        h = torch.randn(8, 6)
        keep = [0, 1, 4]
        h0 = h.clone()
        h0[:, [2, 3, 5]] = 0
        with torch.no_grad():
            expected = top(h0)
        top.keep_inputs(keep)
        with torch.no_grad():
            torch.testing.assert_close(top(h[:, keep]), expected)

    def test_shrunk_model_still_trains(self, x):
        m = BottomMLP(10, (8,), 3)
        m.keep_inputs([0, 1])
        opt = make_optimizer(m.parameters(), "adam", 0.1)
        before = m.input_layer.weight.detach().clone()
        m(x[:, :2]).pow(2).sum().backward()
        opt.step()
        assert not torch.equal(before, m.input_layer.weight)


class TestBuilding:
    def test_seeded_is_deterministic_and_restores_rng(self):
        torch.manual_seed(123)
        state = torch.random.get_rng_state()
        a = seeded(5, lambda: BottomMLP(4, (8,), 2))
        assert torch.equal(torch.random.get_rng_state(), state)
        b = seeded(5, lambda: BottomMLP(4, (8,), 2))
        c = seeded(6, lambda: BottomMLP(4, (8,), 2))
        assert torch.equal(a.input_layer.weight, b.input_layer.weight)
        assert not torch.equal(a.input_layer.weight, c.input_layer.weight)

    def test_layers(self):
        m = BottomMLP(5, (7, 3), 2, activation="tanh")
        assert [(lin.in_features, lin.out_features) for lin in m.linears] == [(5, 7), (7, 3), (3, 2)]
        assert isinstance(m.net[1], torch.nn.Tanh)

    @pytest.mark.parametrize("kwargs", [{"activation": "swish"}, {"d_in": 0}])
    def test_bad_config(self, kwargs):
        args = {"d_in": 3, "widths": (4,), "d_out": 2, **kwargs}
        with pytest.raises(ConfigError):
            BottomMLP(**args)

    def test_unknown_optimizer(self):
        with pytest.raises(ConfigError, match="adam"):
            make_optimizer(BottomMLP(2, (), 1).parameters(), "rmsprop", 0.1)
