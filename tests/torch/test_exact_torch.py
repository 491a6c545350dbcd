"""Torch trainers and policies on extremes and degenerate counts: refused by name, never NaN."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from klpolicy.torch import TabularPolicy, fit_policy, fit_reference  # noqa: E402


def test_fit_reference_refuses_zero_steps_by_name():
    # was ZeroDivisionError inside the learning-rate schedule; steps counts updates (>= 1)
    with pytest.raises(ValueError, match=r"`steps` must be an integer >= 1; got 0"):
        fit_reference([[0.5, 0.5]], steps=0, device="cpu")


def test_tabular_policy_refuses_nan():
    # was accepted: NaN failed `p > 0`, left the support and gave [[0, 1]]
    with pytest.raises(ValueError, match=r"`probs` must not contain NaN"):
        TabularPolicy([float("nan"), 0.5])
    np.testing.assert_allclose(TabularPolicy([[0.25, 0.75]]).probs(), [[0.25, 0.75]], rtol=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize(
    "train",
    [
        lambda lr: fit_policy([0.5, 0.5], [1.0, 0.0], 0.5, lr=lr, steps=5, device="cpu"),
        lambda lr: fit_reference([[0.5, 0.5]], lr=lr, steps=5, device="cpu"),
    ],
)
def test_divergence_raises_instead_of_returning_nan(train):
    # was a NaN policy returned silently
    with pytest.raises(ValueError, match=r"training diverged: .* step 1 of 5; `lr` = 1e\+308"):
        train(1e308)
    res = train(0.03)
    assert np.isfinite(res.history["distance"]).all()
