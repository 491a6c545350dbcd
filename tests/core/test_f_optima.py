"""f_optimal_policy, f_soft_value, f_frontier and beta_for_divergence against mpmath.

mpmath recipe (``R.f_optimum``): inputs converted exactly, the reference normalised at
80 digits; the density ratio ``t(s)`` of each row typed here from the issue's table
(``(f')^{-1}``, clipped at 0, ``inf`` past ``f'(inf)``; chi2_kl through ``mp.lambertw``);
the multiplier ``lambda`` found by 320 bisections of ``sum_y ref t((r - lambda)/beta) = 1``
(decreasing in lambda) on ``[min r - 100 beta - 10, max r + 100 beta + 10]``; then
``pi = ref t``, ``V = E_pi r - beta D_f(pi||ref)`` with ``D_f`` from the definition
(tests/core/test_fdivergences.py). The total variation's optimum (a linear program) is
checked against scipy's ``linprog`` instead.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

import klpolicy as kp
from klpolicy.core.fdivergences import DIVERGENCES

from .. import _mpref as R

ROWS = [(n, None) for n in DIVERGENCES if n not in ("alpha", "tv")]
ROWS += [("alpha", a) for a in (-1.5, -0.3, 0.0, 0.25, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0)]
IDS = [f"{n}" if a is None else f"alpha={a}" for n, a in ROWS]


def _problem(rng):
    n = int(rng.integers(2, 9))
    ref = 10.0 ** rng.uniform(-12, 0, n)
    if rng.random() < 0.2:
        ref[rng.integers(n)] = 0.0
    ref[rng.integers(n)] = 1.0
    ref = ref / ref.sum()
    reward = rng.normal(size=n) * 10.0 ** rng.uniform(-1, 1)
    beta = 10.0 ** rng.uniform(-2, 1.5)
    return ref, reward, beta


def _against_mpmath(name, a, count, seed):
    rng = np.random.default_rng(seed + ROWS.index((name, a)))
    for _ in range(count):
        ref, reward, beta = _problem(rng)
        want = R.f_optimum(ref, reward, beta, name, a)
        got = kp.f_optimal_policy(ref, reward, beta, divergence=name, alpha=a)
        for g, w in zip(got, want):
            err = abs(g - float(w))
            assert err <= 1e-12 * float(w) + 1e-300, (ref.tolist(), reward.tolist(), beta, g, w)
        d_mp = R.f_divergence([float(w) for w in want], ref, name, a)
        d = kp.f_divergence(got, ref, name, alpha=a)
        assert abs(float(d) - float(d_mp)) <= 1e-12 * float(d_mp) + 1e-300
        with mp.workdps(80):
            v_mp = mp.fsum(w * mp.mpf(float(x)) for w, x in zip(want, reward)) - beta * d_mp
        v = float(kp.f_soft_value(ref, reward, beta, divergence=name, alpha=a))
        scale = abs(float(v_mp)) + float(np.max(np.abs(reward))) * 1e-3
        assert abs(v - float(v_mp)) <= 1e-12 * scale, (v, float(v_mp))


@pytest.mark.parametrize(("name", "a"), ROWS, ids=IDS)
def test_optimum_value_and_divergence_against_mpmath(name, a):
    _against_mpmath(name, a, 1, 2810)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "a"), ROWS, ids=IDS)
def test_optimum_against_mpmath_many_problems(name, a):
    _against_mpmath(name, a, 25, 2910)


ALL = [*ROWS, ("tv", None)]
ALL_IDS = [*IDS, "tv"]


def test_reverse_kl_is_optimal_policy_itself():
    rng = np.random.default_rng(2820)
    ref = rng.dirichlet(np.ones(6), size=3)
    r = rng.normal(size=(3, 6))
    b = np.array([[0.3], [1.0], [0.0]])
    want = kp.optimal_policy(ref, r, b)
    np.testing.assert_array_equal(kp.f_optimal_policy(ref, r, b, divergence="reverse_kl"), want)
    np.testing.assert_array_equal(kp.f_optimal_policy(ref, r, b, divergence="alpha", alpha=1), want)
    np.testing.assert_allclose(
        kp.f_soft_value(ref, r, b, divergence="reverse_kl"), kp.soft_value(ref, r, b), rtol=1e-13
    )
    np.testing.assert_allclose(
        kp.beta_for_divergence(ref, r, 0.1, divergence="reverse_kl"),
        kp.beta_for_kl(ref, r, 0.1),
        rtol=0,
    )


@pytest.mark.parametrize(("name", "a"), ALL, ids=ALL_IDS)
def test_permutation_batch_axis_and_float32(name, a):
    rng = np.random.default_rng(2821)
    ref = rng.dirichlet(np.ones(7), size=4)
    ref[0, 2] = 0.0
    ref[0] /= ref[0].sum()
    r = rng.normal(size=(4, 7))
    b = np.array([[0.05], [0.4], [2.0], [30.0]])
    pi = kp.f_optimal_policy(ref, r, b, divergence=name, alpha=a)
    assert pi.shape == (4, 7) and pi[0, 2] == 0.0
    np.testing.assert_allclose(pi.sum(-1), 1.0, rtol=1e-14)
    for _ in range(3):
        perm = rng.permutation(7)
        got = kp.f_optimal_policy(ref[:, perm], r[:, perm], b, divergence=name, alpha=a)
        np.testing.assert_allclose(got, pi[:, perm], rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(
        kp.f_optimal_policy(ref.T, r.T, b.T, divergence=name, alpha=a, axis=0), pi.T, rtol=1e-14
    )
    for i in range(4):  # a batch is its rows
        one = kp.f_optimal_policy(ref[i], r[i], b[i, 0], divergence=name, alpha=a)
        np.testing.assert_allclose(one, pi[i], rtol=1e-14)
    p32 = kp.f_optimal_policy(
        ref.astype(np.float32), r.astype(np.float32), b.astype(np.float32), divergence=name, alpha=a
    )
    assert p32.dtype == np.float32
    np.testing.assert_allclose(p32, pi, atol=1e-5)
    v = kp.f_soft_value(ref, r, b, divergence=name, alpha=a)
    assert v.shape == (4,)
    v32 = kp.f_soft_value(ref.astype(np.float32), r.astype(np.float32), b, divergence=name, alpha=a)
    assert v32.dtype == np.float32
    np.testing.assert_allclose(v32, v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("name", "a"), ALL, ids=ALL_IDS)
def test_limits_greedy_and_reference(name, a):
    ref = np.array([0.1, 0.2, 0.3, 0.4, 0.0])
    r = np.array([1.0, 1.0, 0.2, -0.5, 5.0])  # a tie at the top; 5.0 off the support
    greedy = np.array([1 / 3, 2 / 3, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(
        kp.f_optimal_policy(ref, r, 0.0, divergence=name, alpha=a), greedy, rtol=1e-15
    )
    np.testing.assert_array_equal(
        kp.f_optimal_policy(ref, r, np.inf, divergence=name, alpha=a), ref
    )
    # mass-covering rows (f(0) = inf: reverse_chi2, alpha <= 0) approach the greedy policy
    # only like beta^(1/(1-a)) (beta^(1/2) for reverse chi2): 1e-9 is near for the others
    near0 = kp.f_optimal_policy(ref, r, 1e-9, divergence=name, alpha=a)
    slow = name == "reverse_chi2" or (name == "alpha" and a <= 0)
    np.testing.assert_allclose(near0, greedy, atol=1e-3 if slow else 1e-6)
    far = kp.f_optimal_policy(ref, r, 1e9, divergence=name, alpha=a)
    np.testing.assert_allclose(far, ref, atol=1e-8)
    tiny = kp.f_optimal_policy(ref, r, 1e-300, divergence=name, alpha=a)  # spread/beta overflows
    np.testing.assert_allclose(tiny, greedy, atol=1e-12)
    assert float(kp.f_soft_value(ref, r, 0.0, divergence=name, alpha=a)) == 1.0
    assert float(kp.f_soft_value(ref, r, np.inf, divergence=name, alpha=a)) == pytest.approx(
        0.1 + 0.2 + 0.06 - 0.2, rel=1e-15
    )


@pytest.mark.parametrize(
    ("name", "a"), [("chi2", None), ("alpha", 1.5), ("alpha", 3.0), ("tv", None)]
)
def test_sparse_optima_and_their_threshold(name, a):
    """Where f'(0) is finite, outcomes with r <= lambda + beta f'(0) get exactly zero mass."""
    ref = np.full(6, 1 / 6)
    r = np.array([2.0, 1.5, 1.0, 0.3, 0.0, -1.0])
    beta = 0.4
    pi = kp.f_optimal_policy(ref, r, beta, divergence=name, alpha=a)
    assert (pi == 0).any() and pi[0] > 0
    row = DIVERGENCES[name]
    if name != "tv":
        k = int(np.argmax(pi))
        lam = r[k] - beta * float(row.fprime(pi[k] / ref[k], alpha=a))
        on = pi > 0
        # stationarity where pi > 0, the KKT inequality where pi = 0
        np.testing.assert_allclose(
            r[on] - beta * row.fprime(pi[on] / ref[on], alpha=a), lam, rtol=1e-13
        )
        assert np.all(r[~on] <= lam + beta * row.fprime_zero(alpha=a) + 1e-13)
    else:
        np.testing.assert_allclose(pi, [1, 0, 0, 0, 0, 0], rtol=1e-15)  # every gap > beta
        pi = kp.f_optimal_policy(ref, r, 0.6, divergence=name)  # the gap 0.5 <= beta stays
        np.testing.assert_allclose(pi, [5 / 6, 1 / 6, 0, 0, 0, 0], rtol=1e-15)


def test_tv_optimum_is_the_linear_program():
    from scipy.optimize import linprog

    rng = np.random.default_rng(2822)
    for _ in range(8):
        n = int(rng.integers(2, 8))
        ref = rng.dirichlet(np.ones(n))
        r = rng.normal(size=n)
        beta = float(10 ** rng.uniform(-1.5, 0.5))
        # variables pi (n) and slack e (n) with e >= |pi - ref|: max r.pi - beta/2 sum e
        c = np.concatenate([-r, np.full(n, beta / 2)])
        eye = np.eye(n)
        a_ub = np.block([[eye, -eye], [-eye, -eye]])
        b_ub = np.concatenate([ref, -ref])
        a_eq = np.concatenate([np.ones(n), np.zeros(n)])[None]
        res = linprog(c, a_ub, b_ub, a_eq, [1.0], bounds=[(0, None)] * (2 * n), method="highs")
        v = float(kp.f_soft_value(ref, r, beta, divergence="tv"))
        assert v == pytest.approx(-res.fun, abs=1e-9)
        pi = kp.f_optimal_policy(ref, r, beta, divergence="tv")
        assert float(r @ pi - beta * kp.total_variation(pi, ref)) == pytest.approx(v, abs=1e-15)


def test_chi_po_ratio_is_lambert_w_and_grows_linearly():
    ref = np.full(4, 0.25)
    beta = 1.0
    for big in (10.0, 30.0, 100.0):
        r = np.array([big, 0.0, 0.0, 0.0])
        pi = kp.f_optimal_policy(ref, r, beta, divergence="chi2_kl")
        t = pi / ref
        # stationarity: (t + log t)(best) - (t + log t)(rest) = (r_best - r_rest)/beta
        lhs = (t[0] + math.log(t[0])) - (t[1] + math.log(t[1]))
        assert lhs == pytest.approx(big / beta, rel=1e-13)
        # bounded ratio 1/ref: the best outcome's mass tends to 1, the rest like beta/big
        assert t[1] == pytest.approx(
            float(DIVERGENCES["chi2_kl"].fprime_inv(t[0] + math.log(t[0]) - big)), rel=1e-12
        )
    # the unconstrained ratio at a large reward: W(e^s) ~ s, linear; the KL's is e^(s - 1)
    s = np.array([10.0, 100.0, 1000.0])
    w = DIVERGENCES["chi2_kl"].fprime_inv(s)
    assert np.all(np.abs(w - s) < np.log(s) + 1)


@pytest.mark.parametrize(("name", "a"), ALL, ids=ALL_IDS)
def test_value_is_the_dual_and_frontier_is_consistent(name, a):
    rng = np.random.default_rng(2823)
    ref = rng.dirichlet(np.ones(5))
    r = rng.normal(size=5)
    betas = np.array([0.0, 0.05, 0.3, 1.0, 4.0, np.inf])
    fr = kp.f_frontier(ref, r, betas, divergence=name, alpha=a)
    row = DIVERGENCES[name]
    for i, b in enumerate(betas):
        pi = kp.f_optimal_policy(ref, r, b, divergence=name, alpha=a)
        assert fr.expected_reward[i] == pytest.approx(float(r @ pi), rel=1e-14)
        assert fr.divergence[i] == pytest.approx(
            float(kp.f_divergence(pi, ref, name, alpha=a)), rel=1e-14
        )
        v = float(kp.f_soft_value(ref, r, b, divergence=name, alpha=a))
        assert fr.value[i] == pytest.approx(v, rel=1e-14)
        if 0 < b < np.inf and name != "tv":
            k = int(np.argmax(pi))
            lam = r[k] - b * float(row.fprime(pi[k] / ref[k], alpha=a))
            dual = lam + b * float(np.sum(ref * row.conjugate((r - lam) / b, alpha=a)))
            assert v == pytest.approx(dual, rel=1e-11, abs=1e-12)
    # the frontier's slope dE[r]/dD is beta (central differences in beta)
    if name != "tv":
        b, h = 0.7, 1e-5
        f2 = kp.f_frontier(ref, r, [b - h, b + h], divergence=name, alpha=a)
        slope = np.diff(f2.expected_reward)[0] / np.diff(f2.divergence)[0]
        assert slope == pytest.approx(b, rel=1e-5)


@pytest.mark.parametrize(("name", "a"), ROWS, ids=IDS)
def test_beta_for_divergence_inverts_the_frontier(name, a):
    rng = np.random.default_rng(2824)
    ref = rng.dirichlet(np.ones(5), size=2)
    r = rng.normal(size=(2, 5))
    betas = np.array([0.02, 0.7])
    d = [
        float(
            kp.f_divergence(
                kp.f_optimal_policy(ref[i], r[i], betas[i], divergence=name, alpha=a),
                ref[i],
                name,
                alpha=a,
            )
        )
        for i in range(2)
    ]
    got = kp.beta_for_divergence(ref, r, d, divergence=name, alpha=a)
    assert got.shape == (2,)
    for i in range(2):
        back = kp.f_optimal_policy(ref[i], r[i], got[i], divergence=name, alpha=a)
        dd = float(kp.f_divergence(back, ref[i], name, alpha=a))
        assert dd == pytest.approx(d[i], rel=1e-12)
    assert float(kp.beta_for_divergence(ref[0], r[0], 0.0, divergence=name, alpha=a)) == np.inf


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: kp.f_optimal_policy([0.5, 0.5], [1, 0], 1.0, divergence="kl"),
            "`divergence` must be one of",
        ),
        (
            lambda: kp.f_optimal_policy([0.5, 0.5], [1, 0], 1.0, divergence="alpha"),
            "`alpha` is required",
        ),
        (
            lambda: kp.f_optimal_policy([0.5, 0.5], [1, 0], 1.0, divergence="js", alpha=0.5),
            "`alpha` applies only",
        ),
        (
            lambda: kp.f_optimal_policy([0.5, 0.5], [1, 0], -1.0, divergence="js"),
            "`beta` must be non-negative",
        ),
        (lambda: kp.f_soft_value([0.5, 0.6], [1, 0], 1.0, divergence="js"), "`ref`"),
        (
            lambda: kp.f_frontier([0.5, 0.5], [1, 0], [np.nan], divergence="js"),
            "`betas` must not be NaN",
        ),
        (
            lambda: kp.beta_for_divergence([0.5, 0.5], [1, 0], 2.0, divergence="chi2"),
            r"`target` = 2 is above the largest chi2 divergence reachable: 1 nats",
        ),
        (
            lambda: kp.beta_for_divergence([0.5, 0.5], [1, 0], 0.1, divergence="tv"),
            "`divergence` 'tv' has no",
        ),
        (lambda: kp.beta_for_divergence([0.5, 0.5], [1, 0], -0.1, divergence="js"), "`target`"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()
