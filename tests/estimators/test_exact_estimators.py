"""Gaussian estimator moments against mpmath.

Recipe: for samples from N(mu, 1) against N(0, 1), the log-ratio l = log(p/q)(x) is
N(mu^2/2, mu^2); k1 = l, k3 = e^{-l} - 1 + l, abs = |l|, with E[e^{-l}] = 1 and
E[e^{-2l}] = e^{mu^2}, Cov(e^{-l}, l) = -mu^2; E|l| for l ~ N(m, s^2) is
s sqrt(2/pi) e^{-m^2/(2 s^2)} + m erf(m / (s sqrt 2)); all in 400 digits.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from klpolicy.estimators import gaussian_moments

from .. import _mpref as R


def _mp_moments(mu, name):
    with mp.workdps(R.DPS):
        m = mp.mpf(float(mu))
        m2 = m * m
        if name == "k1":
            return m2 / 2, m2
        if name == "k3":
            return m2 / 2, mp.exp(m2) - 1 - m2
        s = abs(m)
        mean_l = m2 / 2
        ea = s * mp.sqrt(2 / mp.pi) * mp.exp(-m2 / 8) + mean_l * mp.erf(mean_l / (s * mp.sqrt(2)))
        return ea, mean_l**2 + m2 - ea**2


def test_huge_mu_gives_infinite_moments_not_nan():
    # was a NaN variance: expm1mx(inf) = inf - inf
    for name in ("k1", "k2", "k3", "abs"):
        mean, var = gaussian_moments([1e308], name)
        assert mean.tolist() == [np.inf] and var.tolist() == [np.inf], name


@pytest.mark.parametrize("name", ["k1", "k3", "abs"])
def test_gaussian_moments_against_mpmath(name):
    mus = [1e-150, 1e-8, 0.1, 1.0, 3.0, -7.0, 20.0, 1e3, 1e6, 1e100]
    for mu in mus:
        if name == "k3" and abs(mu) > 26:
            continue  # e^{mu^2} overflows: inf, checked above
        mean, var = gaussian_moments(mu, name)
        w_mean, w_var = _mp_moments(mu, name)
        assert float(mean) == pytest.approx(float(w_mean), rel=1e-13), mu
        # abs at 1e6..1e100: mu^4/4 terms once cancelled to nothing; now Var = mu^2 exactly-ish
        assert float(var) == pytest.approx(float(w_var), rel=1e-12), mu
