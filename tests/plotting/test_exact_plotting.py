"""Figures on valid inputs whose numbers are infinite: the infinities are counted and labelled."""

from __future__ import annotations

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

from klpolicy import plotting  # noqa: E402


def test_estimator_histograms_with_an_infinite_kl():
    # was a ValueError inside numpy.histogram: half the samples land where q = 0, where every
    # estimate (and the KL) is +inf; the finite half is drawn and the legend says the rest
    ax = plotting.estimator_histograms([0.5, 0.5], [1.0, 0.0], n=1000, rng=3)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    n_inf = int(labels[0].split(": ")[1].split(" of")[0].replace(",", ""))
    gen = np.random.default_rng(3)
    assert n_inf == int(np.count_nonzero(gen.choice(2, size=1000, p=[0.5, 0.5]) == 1))
    assert labels[0] == f"$k_1$: {n_inf:,} of 1,000 samples infinite ($q = 0$)"
    assert labels[-1] == r"true KL $= \infty$ ($p > 0$ where $q = 0$)"
    # every estimate is infinite: nothing to bin, still a figure with its legend
    ax = plotting.estimator_histograms([0.0, 1.0], [1.0, 0.0], n=50)
    assert ax.get_legend().get_texts()[0].get_text() == "$k_1$: 50 of 50 samples infinite ($q = 0$)"
    matplotlib.pyplot.close("all")
