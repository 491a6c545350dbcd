"""Tests for klpolicy.overoptimization: problems, exact sweeps, Gao et al. fits, bad input."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from klpolicy.overoptimization import (
    KINDS,
    best_of_n_sweep,
    closed_form_sweep,
    fit_gao_bon,
    fit_gao_rl,
    gold_peak,
    make_problem,
)

import klpolicy
from klpolicy.best_of_n import best_of_n_kl, best_of_n_policy

BETAS = np.geomspace(1e-3, 1e2, 40)
NS = np.unique(np.geomspace(1, 1e6, 50).astype(int))


# ---------------------------------------------------------------- problems


@pytest.mark.parametrize("kind", KINDS)
def test_problem_shapes_and_reproducibility(kind):
    a = make_problem(kind, size=300, seed=4)
    b = make_problem(kind, size=300, rng=np.random.default_rng(4))
    for x, y in zip(a[:3], b[:3], strict=True):
        np.testing.assert_array_equal(x, y)
        assert x.shape == (300,)
    assert a.kind == kind
    assert a.ref.sum() == pytest.approx(1.0, abs=1e-14) and (a.ref > 0).all()
    c = make_problem(kind, size=300, seed=5)
    assert not np.array_equal(a.proxy, c.proxy)


def test_problem_structure():
    p = make_problem("rare_errors", size=2000, seed=0)
    err = p.proxy - p.gold
    common = p.ref >= np.median(p.ref)
    assert (err >= 0).all() and (err[common] == 0).all() and (err[~common] > 0).any()
    p = make_problem("misspecified", size=2000, seed=0)
    # proxy and gold agree on average for typical outcomes: positively correlated
    assert np.corrcoef(p.proxy, p.gold)[0, 1] > 0.3
    p = make_problem("noise", size=20000, error=0.5, seed=0)
    # noise of standard deviation 0.5: sample sd within 5 standard errors
    sd = np.std(p.proxy - p.gold)
    assert abs(sd - 0.5) < 5 * 0.5 / math.sqrt(2 * 20000)


# ---------------------------------------------------------------- sweeps are exact


def test_closed_form_sweep_matches_direct_computation():
    p = make_problem("misspecified", size=400, seed=1)
    betas = [0.0, 0.05, 0.3, 1.0, 7.0, np.inf]
    c = closed_form_sweep(p.ref, p.proxy, p.gold, betas)
    base = p.ref @ p.gold
    for i, b in enumerate(betas):
        pi = klpolicy.optimal_policy(p.ref, p.proxy, b)
        assert c.gold_reward[i] == pytest.approx(pi @ p.gold, rel=1e-12, abs=1e-14)
        assert c.proxy_reward[i] == pytest.approx(pi @ p.proxy, rel=1e-12, abs=1e-14)
        assert c.kl[i] == pytest.approx(float(klpolicy.optimal_kl(p.ref, p.proxy, b)), rel=1e-12)
        assert c.gold_gain[i] == pytest.approx(pi @ p.gold - base, rel=1e-10, abs=1e-13)
    np.testing.assert_allclose(c.d, np.sqrt(c.kl), rtol=0)
    assert c.gold_gain[-1] == pytest.approx(0.0, abs=1e-14) and c.method == "closed_form"


def test_best_of_n_sweep_matches_direct_computation():
    p = make_problem("rare_errors", size=300, seed=2)
    p_proxy = np.round(p.proxy, 1)  # ties in the proxy
    ns = [1, 2, 5, 40, 1000]
    c = best_of_n_sweep(p.ref, p_proxy, p.gold, ns)
    for i, n in enumerate(ns):
        pi = best_of_n_policy(p.ref, p_proxy, n)
        assert c.gold_reward[i] == pytest.approx(pi @ p.gold, rel=1e-12, abs=1e-14)
        assert c.proxy_reward[i] == pytest.approx(pi @ p_proxy, rel=1e-12, abs=1e-14)
        assert c.kl[i] == pytest.approx(float(best_of_n_kl(p.ref, p_proxy, n)), rel=1e-13, abs=0)
    assert c.gold_gain[0] == pytest.approx(0.0, abs=1e-14)
    np.testing.assert_array_equal(c.knob, ns)
    assert c.method == "best_of_n"


def test_proxy_rises_along_both_sweeps():
    p = make_problem("noise", size=500, seed=3)
    c = closed_form_sweep(p.ref, p.proxy, p.gold, BETAS[::-1])  # beta decreasing: KL increasing
    b = best_of_n_sweep(p.ref, p.proxy, p.gold, NS)
    assert np.all(np.diff(c.kl) >= -1e-12) and np.all(np.diff(c.proxy_reward) >= -1e-12)
    assert np.all(np.diff(b.kl) >= -1e-12) and np.all(np.diff(b.proxy_reward) >= -1e-12)


# ---------------------------------------------------------------- reward hacking


@pytest.mark.parametrize("kind", ["misspecified", "rare_errors"])
def test_reward_hacking_at_small_beta(kind):
    # seed 0: the gold reward peaks at an intermediate KL and falls at small beta / large n
    p = make_problem(kind, seed=0)
    c = closed_form_sweep(p.ref, p.proxy, p.gold, BETAS)
    b = best_of_n_sweep(p.ref, p.proxy, p.gold, NS)
    pc, pb = gold_peak(c), gold_peak(b)
    assert pc.loss > 0.5 and pb.loss > 0.5
    assert pc.knob > BETAS[0]  # the best beta is not the smallest
    assert 0 < pc.d < c.d.max()
    # while the proxy keeps rising as beta falls
    assert c.proxy_reward[0] == pytest.approx(c.proxy_reward.max())


def test_noise_alone_gives_diminishing_not_negative_returns():
    p = make_problem("noise", seed=0)
    b = best_of_n_sweep(p.ref, p.proxy, p.gold, NS)
    peak = gold_peak(b)
    # regressional error: the gold reward levels off (loss under 1% of the gain) but never
    # falls below the reference's
    assert peak.loss < 0.01 * peak.gold_gain
    assert np.all(b.gold_gain >= -1e-12)


# ---------------------------------------------------------------- Gao et al. fits


@given(st.floats(0.1, 5.0), st.floats(0.05, 2.0))
def test_bon_fit_recovers_exact_coefficients(a, b):
    d = np.linspace(0.0, 2 * a / b, 25)
    f = fit_gao_bon(d, d * (a - b * d))
    assert f.a == pytest.approx(a, rel=1e-9) and f.b == pytest.approx(b, rel=1e-9)
    assert f.d_peak == pytest.approx(a / (2 * b), rel=1e-9)
    assert f.gain_peak == pytest.approx(a * a / (4 * b), rel=1e-9)
    assert f.rmse < 1e-9 * (1 + a * a / b) and f.form == "bon"


@given(st.floats(0.1, 3.0), st.floats(0.1, 2.0))
def test_rl_fit_recovers_exact_coefficients(a, b):
    d = np.geomspace(1e-3, 3 * math.exp(a / b - 1), 30)
    f = fit_gao_rl(d, d * (a - b * np.log(d)))
    assert f.a == pytest.approx(a, rel=1e-8) and f.b == pytest.approx(b, rel=1e-8)
    assert f.d_peak == pytest.approx(math.exp(a / b - 1), rel=1e-7)
    assert f.gain_peak == pytest.approx(b * math.exp(a / b - 1), rel=1e-7)


def test_fits_recover_coefficients_from_noisy_data():
    rng = np.random.default_rng(11)
    d = np.tile(np.linspace(0.05, 6.0, 60), 20)
    sigma = 0.05
    for fit, truth in (
        (fit_gao_bon, d * (1.2 - 0.3 * d)),
        (fit_gao_rl, d * (1.2 - 0.6 * np.log(d))),
    ):
        gain = truth + sigma * rng.standard_normal(d.size)
        f = fit(d, gain)
        cols = np.column_stack([d, -(d**2)] if fit is fit_gao_bon else [d, -d * np.log(d)])
        # exact standard errors of the least-squares coefficients: sigma^2 (X^T X)^-1
        se = sigma * np.sqrt(np.diag(np.linalg.inv(cols.T @ cols)))
        b_true = 0.3 if fit is fit_gao_bon else 0.6
        assert abs(f.a - 1.2) < 5 * se[0] and abs(f.b - b_true) < 5 * se[1]
        assert f.rmse == pytest.approx(sigma, rel=0.1)


def test_fit_without_peak():
    d = np.linspace(0, 3, 10)
    f = fit_gao_bon(d, d * (1 + 0.2 * d))  # b = -0.2
    assert f.b == pytest.approx(-0.2) and f.d_peak == np.inf and f.gain_peak == np.inf
    f = fit_gao_rl(d, 2 * d)
    assert f.b == pytest.approx(0.0, abs=1e-12) and f.d_peak == np.inf


def test_fit_on_misspecified_problem_has_interior_peak():
    p = make_problem("misspecified", seed=0)
    b = best_of_n_sweep(p.ref, p.proxy, p.gold, NS)
    f = fit_gao_bon(b.d, b.gold_gain)
    assert f.b > 0 and 0 < f.d_peak < b.d.max()


# ---------------------------------------------------------------- bad input

REF, PROXY, GOLD = [0.5, 0.5], [1.0, 0.0], [0.0, 1.0]

BAD = [
    (
        make_problem,
        ("bogus",),
        {},
        "`kind` must be one of 'noise', 'misspecified', 'rare_errors'; got 'bogus'",
    ),
    (make_problem, ("noise",), {"size": 1}, "`size` must be an integer >= 2; got 1"),
    (make_problem, ("noise",), {"size": 2.5}, "`size` must be an integer >= 2; got 2.5"),
    (make_problem, ("noise",), {"error": 0.0}, "`error` must be a positive finite number; got 0.0"),
    (make_problem, ("noise",), {"rng": 3}, "`rng` must be a numpy.random.Generator; got int"),
    (
        closed_form_sweep,
        (REF, PROXY, GOLD, [-1.0]),
        {},
        "`betas` must be non-negative; found -1 at index (0,)",
    ),
    (closed_form_sweep, (REF, PROXY, GOLD, []), {}, "`betas` must not be empty; got shape (0,)"),
    (
        closed_form_sweep,
        (REF, PROXY, [0.0, np.inf], [1.0]),
        {},
        "`gold` must be finite; found inf at index (1,)",
    ),
    (
        closed_form_sweep,
        (REF, PROXY, [0.0], [1.0]),
        {},
        "`gold` must have the shape of `ref` (2,); got (1,)",
    ),
    (
        closed_form_sweep,
        ([[0.5, 0.5]], PROXY, GOLD, [1.0]),
        {},
        "`ref` must be one problem's 1-D array (shape (V,)); got shape (1, 2)",
    ),
    (
        best_of_n_sweep,
        (REF, PROXY, GOLD, [1, 0]),
        {},
        "`ns` must be an integer >= 1; found 0 at index (1,)",
    ),
    (
        best_of_n_sweep,
        (REF, PROXY, GOLD, [2.5]),
        {},
        "`ns` must be an integer >= 1; found 2.5 at index (0,)",
    ),
    (
        best_of_n_sweep,
        ([0.5, 0.7], PROXY, GOLD, [2]),
        {},
        "`ref` must sum to 1 along axis -1; it sums to 1.2",
    ),
    (fit_gao_bon, ([0.0, 1.0], [0.0]), {}, "`d` and `gain` must have the same size; got 2 and 1"),
    (
        fit_gao_bon,
        ([0.0, -1.0], [0.0, 1.0]),
        {},
        "`d` must be non-negative; found -1 at index (1,)",
    ),
    (
        fit_gao_bon,
        ([0.0, 1.0], [0.0, np.nan]),
        {},
        "`gain` must be finite; found nan at index (1,)",
    ),
    (
        fit_gao_rl,
        ([0.0, 1.0, 1.0], [0.0, 1.0, 1.0]),
        {},
        "the fit needs at least two distinct positive values of `d`",
    ),
]


@pytest.mark.parametrize(("fn", "args", "kwargs", "msg"), BAD)
def test_bad_input(fn, args, kwargs, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        fn(*args, **kwargs)
