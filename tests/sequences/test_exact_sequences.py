"""Token-level figures against the joint closed form in mpmath.

Recipe: the joint reference ref(y) = prod_t ref(y_t | y_<t) and the optimum
pi*(y) = ref(y) e^{R(y)/beta} / Z are formed in 400 digits (inputs converted exactly);
the token policy is the joint's conditional pi*(a | prefix) = M(prefix a) / M(prefix),
M the joint's prefix marginals; V_0 = beta log Z.
"""

from __future__ import annotations

import itertools

import mpmath as mp
import numpy as np
import pytest

import klpolicy as kp
from klpolicy import sequences as S

from .. import _mpref as R
from ._trees import random_tree


def _mp_token_policy(tree, reward, beta):
    """Per level t, the conditionals pi*(a | prefix) as float arrays of shape (V,)*(t+1)."""
    T, V = len(tree), tree[0].shape[-1]
    with mp.workdps(R.DPS):
        b = mp.mpf(float(beta))
        seqs = list(itertools.product(range(V), repeat=T))
        logw = {}
        for y in seqs:
            lr = mp.mpf(0)
            for t in range(T):
                p = float(tree[t][y[: t + 1]])
                if p == 0:
                    lr = None
                    break
                lr += mp.log(mp.mpf(p))
            if lr is not None:
                logw[y] = lr + mp.mpf(float(reward[y])) / b
        top = max(logw.values())
        w = {y: mp.exp(v - top) for y, v in logw.items()}
        out = []
        for t in range(T):
            pol = np.full((V,) * (t + 1), np.nan)  # NaN: a prefix the reference never emits
            for prefix in itertools.product(range(V), repeat=t):
                mass = [
                    mp.fsum(v for y, v in w.items() if y[: t + 1] == prefix + (a,))
                    for a in range(V)
                ]
                tot = mp.fsum(mass)
                if tot > 0:
                    pol[prefix] = [float(m / tot) for m in mass]
            out.append(pol)
        return out, float(top * b + b * mp.log(mp.fsum(w.values())))


def test_issue_16_tiny_beta_keeps_the_subtree_masses():
    # was [0.5, 0.5]: V_1 = 1e6 + 1e-12 log(0.3) rounds to 1e6, dropping which subtree holds
    # more mass on the best reward; the joint closed form gives [0.15, 0.3] / 0.45
    tree = [np.array([0.5, 0.5]), np.array([[0.3, 0.7], [0.6, 0.4]])]
    res = S.soft_bellman(tree, [[1e6, 0.0], [1e6, 0.0]], 1e-12)
    np.testing.assert_allclose(res.policy[0], [1 / 3, 2 / 3], rtol=1e-15)


@pytest.mark.parametrize("seed", range(6))
def test_soft_bellman_matches_the_joint_closed_form(seed):
    rng = np.random.default_rng(1610 + seed)
    V, T = int(rng.integers(2, 4)), int(rng.integers(2, 4))
    for _ in range(8):
        tree = random_tree(rng, V, T, zeros=bool(rng.random() < 0.5))
        if rng.random() < 0.5:  # large, tied-ish rewards: only the masses separate the branches
            reward = 1e6 * rng.integers(0, 2, size=(V,) * T).astype(float)
        else:
            reward = rng.normal(size=(V,) * T) * 10.0 ** rng.uniform(-3, 3)
        beta = float(10.0 ** rng.uniform(-12, 2))
        res = S.soft_bellman(tree, reward, beta)
        want, v0 = _mp_token_policy(tree, reward, beta)
        for got, exp in zip(res.policy, want):
            seen = ~np.isnan(exp)
            np.testing.assert_allclose(got[seen], exp[seen], rtol=1e-11, atol=1e-300)
        assert float(res.value[0]) == pytest.approx(v0, rel=1e-14, abs=1e-14 * beta)


def _mp_per_token_kl(pol, ref):
    """sum over prefixes of pi(prefix) KL(pi(.|prefix) || ref(.|prefix)), per position."""
    T, V = len(pol), pol[0].shape[-1]
    out = []
    with mp.workdps(R.DPS):
        for t in range(T):
            total = mp.mpf(0)
            for prefix in itertools.product(range(V), repeat=t):
                w = mp.mpf(1)
                for s in range(t):
                    w *= mp.mpf(float(pol[s][prefix[: s + 1]]))
                if w == 0:
                    continue
                total += w * R.kl(pol[t][prefix], ref[t][prefix])
            out.append(total)
    return out


def test_per_token_kl_against_mpmath():
    rng = np.random.default_rng(1620)
    for _ in range(20):
        V, T = int(rng.integers(2, 4)), int(rng.integers(1, 4))
        ref = random_tree(rng, V, T)
        # a policy close to the reference (KLs of 1e-20) or far from it, inside its support
        tilt = [rng.normal(size=c.shape) * 10.0 ** rng.uniform(-10, 0.5) for c in ref]
        pol = [
            c * np.exp(x) / np.sum(c * np.exp(x), axis=-1, keepdims=True) for c, x in zip(ref, tilt)
        ]
        got = S.per_token_kl(pol, ref)
        want = _mp_per_token_kl(pol, ref)
        for g, w in zip(got, want):
            assert float(g) == pytest.approx(float(w), rel=1e-11, abs=1e-300)


@pytest.mark.slow
def test_reward_ceiling_against_mpmath():
    # the ceiling is E_{pi*_beta}[r] at the beta spending the budget: both checked in mpmath
    rng = np.random.default_rng(1621)
    for _ in range(100):
        n = int(rng.integers(2, 6))
        ref = 10.0 ** rng.uniform(-300, 0, n)
        ref[rng.random(n) < 0.15] = 0.0
        ref[rng.integers(n)] = 1.0
        ref = ref / ref.sum()
        rew = rng.normal(size=n) * 10.0 ** rng.uniform(-100, 100)
        kmax = float(kp.max_kl(ref, rew))
        if kmax == 0:  # one supported outcome: nothing to spend
            continue
        budget = kmax * 10.0 ** rng.uniform(-12, 0.3)
        c = S.reward_ceiling(ref, rew, budget)
        assert float(c.kl) == min(budget, kmax)
        beta = float(c.beta)
        scale = float(np.max(np.abs(rew)))
        if beta == 0:  # the greedy limit: the best supported reward
            assert float(c.expected_reward) == float(np.max(rew[ref > 0]))
            continue
        with mp.workdps(R.DPS):
            spent = R.optimal_kl(ref, rew, beta)
            assert abs(spent / mp.mpf(float(c.kl)) - 1) < 1e-10
            mean, _, _ = R.tilt_moments(ref, rew, beta)
        assert abs(float(c.expected_reward) - float(mean)) <= 1e-13 * scale


def _mp_sequence_moments(pol, ref, estimator):
    """Mean and variance over sequences y ~ pi of sum_t k(log pi(y_t|.) - log ref(y_t|.)).

    Every conditional row is normalised in 400 digits (rows summing to 1 only to rounding
    are the exactly normalised distributions, as everywhere in klpolicy).
    """
    T, V = len(pol), pol[0].shape[-1]
    with mp.workdps(R.DPS):
        vals, probs = [], []
        for y in itertools.product(range(V), repeat=T):
            pr, tot = mp.mpf(1), mp.mpf(0)
            for t in range(T):
                a = R.normalise(pol[t][y[:t]])[y[t]]
                b = R.normalise(ref[t][y[:t]])[y[t]]
                pr *= a
                if a == 0:
                    break
                ell = mp.log(a / b)
                tot += {"k1": ell, "k2": ell * ell / 2, "k3": mp.expm1(-ell) + ell}[estimator]
            if pr > 0:
                vals.append(tot)
                probs.append(pr)
        mean = mp.fsum(p * v for p, v in zip(probs, vals))
        var = mp.fsum(p * (v - mean) ** 2 for p, v in zip(probs, vals))
        return mean, var


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_sequence_kl_moments_against_mpmath(estimator):
    # near-identical trees (KL 1e-20) included: the k1 mean is then a sum of signed
    # log-ratios of 1e-10, each known only to eps |log p| when taken as log p - log q
    rng = np.random.default_rng(1622)
    for _ in range(12):
        V, T = int(rng.integers(2, 4)), int(rng.integers(1, 4))
        ref = random_tree(rng, V, T)
        tilt = [rng.normal(size=c.shape) * 10.0 ** rng.uniform(-10, 0) for c in ref]
        pol = [
            c * np.exp(x) / np.sum(c * np.exp(x), axis=-1, keepdims=True) for c, x in zip(ref, tilt)
        ]
        mean, var = S.sequence_kl_moments(pol, ref, estimator=estimator)
        w_mean, w_var = _mp_sequence_moments(pol, ref, estimator)
        assert mean == pytest.approx(float(w_mean), rel=1e-10, abs=1e-300)
        assert var == pytest.approx(float(w_var), rel=1e-10, abs=1e-300)
