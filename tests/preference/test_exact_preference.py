"""Population preference optima against mpmath, at the extremes.

Recipes (tests/_mpref/closed_form.py, 400 digits, the reference normalised there):
* DPO with Bradley-Terry preferences P = expit(r_i - r_j): every pair's loss is minimised
  at beta (g_i - g_j) = r_i - r_j, so the optimum is pi*_beta = ref e^{r/beta} / Z
  (R.optimal_policy);
* IPO with mu = ref: pi = ref exp(p(y > mu) / tau) / Z, p(y > mu) = sum_y' ref(y') P[y, y'],
  evaluated in mpmath from the float P.
The float answer can be no closer than the log-odds it reads back from P: an error of eps
in each log P moves pi by eps |r| / beta relative, which the tolerances below allow.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from klpolicy.preference import bradley_terry, dpo_optimum, ipo_optimum, population_dpo_loss

from .. import _mpref as R


def _ref(rng, n):
    ref = 10.0 ** rng.uniform(-300, 0, n)
    ref[rng.random(n) < 0.15] = 0.0
    ref[rng.integers(n)] = 1.0
    return ref / ref.sum()


@pytest.mark.parametrize(
    "ref, r, beta",
    [
        ([1e-10, 1.0, 1e-170], [3.36, -2.22, 2.92], 0.012),  # was LinAlgError
        # was about ref: the Newton start on 1e-279 pair masses stopped at once
        ([2.7e-68, 1.6e-111, 1.0, 2.8e-261, 1.8e-279], [3.36, -2.97, -2.22, 2.92, -4.15], 0.012),
    ],
)
def test_dpo_optimum_issue_16_cases(ref, r, beta):
    got = dpo_optimum(ref, bradley_terry(r), beta)
    R.assert_mp_close(got, R.optimal_policy(ref, r, beta), rtol=1e-12)


def test_dpo_optimum_at_a_subnormal_beta():
    # was NaN: g = logit / 1e-310 overflowed; log(0.7 / 0.3) > 0 makes outcome 0 the winner
    got = dpo_optimum([0.5, 0.5], [[0.5, 0.7], [0.3, 0.5]], 1e-310)
    assert got.tolist() == [1.0, 0.0]
    r = [float(np.log(0.7) - np.log(0.3)), 0.0]
    R.assert_mp_close(
        dpo_optimum([0.5, 0.5], [[0.5, 0.7], [0.3, 0.5]], 0.5),
        R.optimal_policy([0.5, 0.5], r, 0.5),
        rtol=1e-14,
    )


@pytest.mark.slow
def test_dpo_optimum_bradley_terry_at_the_extremes():
    rng = np.random.default_rng(1603)
    for _ in range(150):
        n = int(rng.integers(2, 6))
        ref = _ref(rng, n)
        r = np.round(rng.uniform(-5, 5, n), 2)
        beta = float(10.0 ** rng.uniform(-3, 3))
        got = dpo_optimum(ref, bradley_terry(r), beta)
        rtol = 1e-13 + 1e-14 * float(np.max(np.abs(r))) / beta
        R.assert_mp_close(got, R.optimal_policy(ref, r, beta), rtol=rtol)


def test_dpo_optimum_with_label_smoothing_is_stationary():
    # smoothed labels are not additive: the Newton path; check the exact stationarity of the
    # population loss in mpmath at the returned policy (gradient / curvature scale < 1e-10)
    rng = np.random.default_rng(1604)
    for _ in range(20):
        n = int(rng.integers(2, 5))
        ref = rng.dirichlet(np.ones(n))
        r = rng.uniform(-2, 2, n)
        beta, eps = float(10.0 ** rng.uniform(-1, 1)), float(rng.uniform(0.01, 0.4))
        pi = dpo_optimum(ref, bradley_terry(r), beta, label_smoothing=eps)
        with mp.workdps(50):
            p = [[mp.mpf(float(x)) for x in row] for row in bradley_terry(r)]
            g = [mp.log(mp.mpf(float(a)) / mp.mpf(float(b))) for a, b in zip(pi, ref)]
            q = [mp.mpf(float(v)) for v in ref]
            grad, scale = [], mp.mpf(0)
            for i in range(n):
                s = mp.mpf(0)
                for j in range(n):
                    if i == j:
                        continue
                    for a, b, sign in ((i, j, 1), (j, i, -1)):
                        w = 2 * q[a] * q[b] * ((1 - eps) * p[a][b] + eps * p[b][a])
                        d = -beta * w / (1 + mp.exp(beta * (g[a] - g[b])))
                        s += sign * d
                        scale += abs(d)
                grad.append(s)
            assert max(abs(x) for x in grad) <= 1e-10 * scale


def test_ipo_optimum_at_the_extremes():
    rng = np.random.default_rng(1605)
    for _ in range(100):
        n = int(rng.integers(2, 6))
        ref = _ref(rng, n)
        p = bradley_terry(rng.uniform(-5, 5, n))
        tau = float(10.0 ** rng.uniform(-3, 3))
        with mp.workdps(R.DPS):
            q = R.normalise(ref)
            pref = [mp.fsum(q[j] * mp.mpf(float(p[i, j])) for j in range(n)) for i in range(n)]
        want = R.optimal_policy(ref, [float(x) for x in pref], tau)
        # p(y > mu) rounded to a float: eps / tau relative
        R.assert_mp_close(ipo_optimum(ref, p, tau), want, rtol=1e-13 + 1e-15 / tau)


def _mp_weights(ref, p, joint=None):
    """W_ij = (mu_ij + mu_ji) P_ij with mu = ref x ref (or the given joint), in mpmath."""
    n = len(ref)
    if joint is None:
        q = R.normalise(ref)
        mu = [[q[i] * q[j] for j in range(n)] for i in range(n)]
    else:
        mu = [[mp.mpf(float(joint[i][j])) for j in range(n)] for i in range(n)]
    return [[(mu[i][j] + mu[j][i]) * mp.mpf(float(p[i][j])) for j in range(n)] for i in range(n)]


def test_population_dpo_loss_against_mpmath():
    # sum_ij W_ij softplus(-beta (g_i - g_j)), g = log(pi / ref), in 400 digits
    rng = np.random.default_rng(1606)
    for _ in range(60):
        n = int(rng.integers(2, 5))
        ref = rng.dirichlet(np.ones(n))
        pi = rng.dirichlet(np.ones(n))
        p = bradley_terry(rng.uniform(-5, 5, n))
        beta = float(10.0 ** rng.uniform(-2, 2))
        with mp.workdps(R.DPS):
            w = _mp_weights(ref, p)
            g = [mp.log(mp.mpf(float(a))) - mp.log(b) for a, b in zip(pi, R.normalise(ref))]
            want = mp.fsum(
                w[i][j] * mp.log1p(mp.exp(-beta * (g[i] - g[j])))
                for i in range(n)
                for j in range(n)
            )
        got = population_dpo_loss(pi, ref, p, beta)
        assert got == pytest.approx(float(want), rel=1e-13)


def test_ipo_optimum_with_a_joint_pair_law_is_stationary():
    # the linear solve: 2 sum_j W_kj (h_kj - c) - 2 sum_i W_ik (h_ik - c) = 0 for every k,
    # c = 1 / (2 tau), h = g_i - g_j; checked in mpmath at the returned policy
    rng = np.random.default_rng(1607)
    for _ in range(30):
        n = int(rng.integers(2, 5))
        ref = rng.dirichlet(np.ones(n))
        joint = rng.dirichlet(np.ones(n * n)).reshape(n, n)
        p = bradley_terry(rng.uniform(-3, 3, n))
        tau = float(10.0 ** rng.uniform(-1, 1))
        pi = ipo_optimum(ref, p, tau, mu=joint)
        with mp.workdps(50):
            w = _mp_weights(ref, p, joint)
            g = [mp.log(mp.mpf(float(a)) / mp.mpf(float(b))) for a, b in zip(pi, ref)]
            c = 1 / (2 * mp.mpf(tau))
            scale = mp.fsum(
                abs(w[i][j]) * (abs(g[i] - g[j]) + c) for i in range(n) for j in range(n)
            )
            for k in range(n):
                grad = mp.fsum(w[k][j] * (g[k] - g[j] - c) for j in range(n)) - mp.fsum(
                    w[i][k] * (g[i] - g[k] - c) for i in range(n)
                )
                assert abs(grad) <= 1e-12 * scale
