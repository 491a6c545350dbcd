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

from klpolicy.estimators import gaussian_moments, moments, off_policy_moments

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


def _mp_moments_pq(p, q, name):
    """E_p[k] and Var_p[k] of k(l), l = log(p_n / q_n) per outcome, normalised rows, 400 digits."""
    with mp.workdps(R.DPS):
        pn, qn = R.normalise(p), R.normalise(q)
        ks, ws = [], []
        for a, b in zip(pn, qn):
            if a == 0:
                continue
            ell = mp.log(a / b)
            ks.append({"k1": ell, "k2": ell * ell / 2, "k3": mp.expm1(-ell) + ell}[name])
            ws.append(a)
        mean = mp.fsum(w * k for w, k in zip(ws, ks))
        var = mp.fsum(w * (k - mean) ** 2 for w, k in zip(ws, ks))
        return mean, var


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_estimator_moments_against_mpmath(name):
    # extremes: entries down to 1e-300, and p within 1e-9 of q (KL 1e-18)
    rng = np.random.default_rng(1660)
    for _ in range(100):
        n = int(rng.integers(2, 6))
        q = 10.0 ** rng.uniform(-300, 0, n)
        q[rng.integers(n)] = 1.0
        q = q / q.sum()
        if rng.random() < 0.5:
            p = q * np.exp(rng.normal(size=n) * 1e-9)
        else:
            p = 10.0 ** rng.uniform(-300, 0, n)
            p[rng.integers(n)] = 1.0
        p = p / p.sum()
        mean, var = moments(p, q, name)
        w_mean, w_var = _mp_moments_pq(p, q, name)
        assert float(mean) == pytest.approx(float(w_mean), rel=1e-11, abs=1e-300)
        assert float(var) == pytest.approx(float(w_var), rel=1e-10, abs=1e-300)


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("name", ["k1", "k3"])
def test_off_policy_moments_against_mpmath(name, weighted):
    # samples from mu: E_mu[(p/mu) k] (weighted) or E_mu[k], k at l = log(p_n / q_n)
    rng = np.random.default_rng(1661)
    for _ in range(60):
        n = int(rng.integers(2, 6))
        rows = []
        for _ in range(3):
            x = 10.0 ** rng.uniform(-200, 0, n)
            x[rng.integers(n)] = 1.0
            rows.append(x / x.sum())
        p, q, mu = rows
        if rng.random() < 0.5:
            p = q * np.exp(rng.normal(size=n) * 1e-9)
            p = p / p.sum()
        mean, var = off_policy_moments(p, q, mu, name, weighted=weighted)
        with mp.workdps(R.DPS):
            pn, qn, mn = R.normalise(p), R.normalise(q), R.normalise(mu)
            vals = []
            for a, b, m in zip(pn, qn, mn):
                ell = mp.log(a / b)
                k = ell if name == "k1" else mp.expm1(-ell) + ell
                vals.append(a / m * k if weighted else k)
            w_mean = mp.fsum(m * v for m, v in zip(mn, vals))
            w_var = mp.fsum(m * (v - w_mean) ** 2 for m, v in zip(mn, vals))
        scale = float(mp.fsum(m * abs(v) for m, v in zip(mn, vals)))
        # a signed mean (k1, or weights) cancels: its error is relative to E|value|
        assert abs(float(mean) - float(w_mean)) <= 1e-12 * scale + 1e-300
        assert float(var) == pytest.approx(float(w_var), rel=1e-10, abs=1e-300)
