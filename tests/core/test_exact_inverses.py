"""The package's inverses (beta from a KL budget, the trust-region step) against mpmath.

Recipe (tests/_mpref/closed_form.py): inputs are converted exactly to 400-digit mpmath numbers, the
reference normalised there, and KL(pi*_beta || ref) evaluated from its definition
sum pi log(pi / ref) with pi = ref exp(r / beta) / Z. A returned beta passes when the
mpmath KL at it equals the target to 1e-10 relative, or, where the KL is so steep that no
float beta gets that close, when the target lies between the KLs at beta's two float
neighbours (beta is then the best float there is).
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from hypothesis import assume, given, settings

import klpolicy as kp
from klpolicy.estimators import fixed_point
from klpolicy.testing.strategies import problems
from klpolicy.trust_region import ppo_clip_step, trust_region_step

from .. import _mpref as R


def _extreme_case(rng):
    """ref with entries down to 1e-300 and zeros; rewards tiny, huge, tied or spread."""
    n = int(rng.integers(2, 7))
    ref = 10.0 ** rng.uniform(-300, 0, n)
    ref[rng.random(n) < 0.15] = 0.0
    ref[rng.integers(n)] = 1.0
    ref = ref / ref.sum()
    kind = rng.integers(4)
    if kind == 0:
        rew = rng.normal(size=n) * 10.0 ** rng.uniform(-8, 8)
    elif kind == 1:
        rew = np.round(rng.uniform(-20, 20, n), 2)
    elif kind == 2:
        rew = rng.choice([0.0, 1.0, 1 + 1e-12, 1e300, -1e300, 1e-300], n)
    else:
        rew = rng.normal(size=n) * 10.0 ** rng.uniform(-300, 300)
    return ref, rew


def _reachable_target(rng, ref, rew):
    """A KL the optimal policy attains at some float beta (or max_kl's near neighbourhood)."""
    support = ref > 0
    spread = float(np.ptp(rew[support])) if support.any() else 0.0
    if rng.random() < 0.8 and 0 < spread < np.inf:
        beta = spread * 10.0 ** rng.uniform(-4, 4)
    else:
        beta = 10.0 ** rng.uniform(-300, 300)
    kl = float(kp.optimal_kl(ref, rew, beta))
    if rng.random() < 0.1:  # within a whisker of the greedy limit
        kl = float(kp.max_kl(ref, rew)) * (1 - 10.0 ** rng.uniform(-15, -2))
    return kl


def _check_beta(ref, rew, kl, beta):
    got = R.optimal_kl(ref, rew, beta)
    with mp.workdps(R.DPS):
        if abs(got / mp.mpf(kl) - 1) <= 1e-10:
            return
        below = R.optimal_kl(ref, rew, np.nextafter(beta, np.inf))
        above = R.optimal_kl(ref, rew, np.nextafter(beta, 0)) if beta > 0 else got
        assert below <= mp.mpf(kl) <= above, (list(ref), list(rew), kl, beta, float(got))


@pytest.mark.slow
def test_beta_for_kl_hits_reachable_targets_at_the_extremes():
    """2,000 seeded extreme cases; the issue-16 report found 6 of 2,000 raising RuntimeError."""
    rng = np.random.default_rng(1616)
    checked = 0
    for _ in range(2000):
        ref, rew = _extreme_case(rng)
        kl = _reachable_target(rng, ref, rew)
        if not 0 < kl < float(kp.max_kl(ref, rew)):
            continue
        beta = float(kp.beta_for_kl(ref, rew, kl))
        _check_beta(ref, rew, kl, beta)
        checked += 1
    assert checked > 1500


def test_beta_for_kl_issue_16_case():
    # formerly RuntimeError: the KL has a plateau at max_kl for beta < 0.08, then drops by
    # 1e35 within a factor 2 of beta; bisection on the float range of beta brackets it
    ref, rew, kl = [1.0, 1e-69], [0.0, 13.05], 2.27e-33
    beta = float(kp.beta_for_kl(ref, rew, kl))
    with mp.workdps(R.DPS):
        assert abs(R.optimal_kl(ref, rew, beta) / mp.mpf(kl) - 1) < 1e-12


@pytest.mark.slow
def test_beta_for_kl_batch_of_extremes_matches_row_by_row():
    rng = np.random.default_rng(7)
    rows = []
    while len(rows) < 40:
        ref, rew = _extreme_case(rng)
        if ref.size == 4:
            kl = _reachable_target(rng, ref, rew)
            if 0 < kl < float(kp.max_kl(ref, rew)):
                rows.append((ref, rew, kl))
    ref = np.array([r[0] for r in rows])
    rew = np.array([r[1] for r in rows])
    kl = np.array([r[2] for r in rows])
    batch = kp.beta_for_kl(ref, rew, kl)
    one = [float(kp.beta_for_kl(a, b, c)) for a, b, c in rows]
    np.testing.assert_array_equal(batch, one)


def test_beta_for_kl_off_support_huge_rewards_do_not_poison_the_kl():
    # formerly NaN from the fast path: -1e300 / 1e-9 = -inf at a zero reference entry gave
    # a -inf * 0 summand; reference: the same problem without that entry (it has no mass)
    ref, rew = [0.5, 0.5, 0.0], [1e-7, 0.0, -1e300]
    for beta in (1e-9, 3e-8, 0.3):
        with_zero = kp.optimal_kl(ref, rew, beta)
        assert float(with_zero) == float(kp.optimal_kl(ref[:2], rew[:2], beta))
        assert float(with_zero) == pytest.approx(float(R.optimal_kl(ref, rew, beta)), rel=1e-13)
    ref, rew = [0.5, 0.5, 0.0], [1.0, 0.0, -1e300]
    b = float(kp.beta_for_kl(ref, rew, 0.2))
    _check_beta(np.array(ref), np.array(rew), 0.2, b)


def test_beta_for_kl_needing_a_beta_above_the_float_range_says_so():
    # KL ~ 5.9e-265 (1e300 / beta)^2 / 2 >= 9e-282 for every float beta: 6e-303 is out of reach
    with pytest.raises(ValueError, match=r"above the largest float64"):
        kp.beta_for_kl([1.0, 5.9e-265], [1.0, -1e300], 6e-303)


def test_trust_region_step_at_the_issue_16_case():
    # trust_region_step solves beta_for_kl on (policy, advantage): it inherited the failure
    p, a, delta = [1.0, 1e-69], [0.0, 13.05], 2.27e-33
    new = trust_region_step(p, a, delta)
    beta = float(kp.beta_for_kl(p, a, delta))
    _check_beta(np.array(p), np.array(a), delta, beta)
    np.testing.assert_allclose(new, R.to_float(R.optimal_policy(p, a, beta)), rtol=1e-12)


@pytest.mark.slow
def test_trust_region_step_on_extremes_spends_its_budget():
    rng = np.random.default_rng(15)
    for _ in range(200):
        p, a = _extreme_case(rng)
        delta = _reachable_target(rng, p, a)
        if not 0 < delta < float(kp.max_kl(p, a)):
            continue
        new = trust_region_step(p, a, delta)
        # the step is pi*_beta of (p, a) at beta = beta_for_kl(p, a, delta) (checked against
        # mpmath above); the policy itself is then exact entrywise (its KL, recomputed from
        # rounded entries, would carry eps * |log ratio| / KL of relative noise)
        beta = float(kp.beta_for_kl(p, a, delta))
        _check_beta(p, a, delta, beta)
        np.testing.assert_allclose(new, R.to_float(R.optimal_policy(p, a, beta)), rtol=1e-12)


@pytest.mark.slow
def test_k3_loss_fixed_point_against_mpmath():
    # the k3-in-the-loss fixed point solves a monotone equation in u with the package's root
    # finder (formerly a fixed 110-step bisection)
    rng = np.random.default_rng(3)
    for _ in range(60):
        ref, rew = _extreme_case(rng)
        if ref.size > 4 or not np.all(np.abs(rew) < 1e200):
            continue
        spread = float(np.ptp(rew)) or 1.0
        beta = spread * 10.0 ** rng.uniform(-6, 6)
        got = fixed_point(ref, rew, beta, estimator="k3", placement="loss")
        np.testing.assert_allclose(
            got, R.to_float(R.forward_kl_optimum(ref, rew, beta)), rtol=1e-12
        )


def _mp_ppo_clip_step(p_old, adv, clip, lr, epochs):
    """PPO's epochs of logit ascent on the exact clipped surrogate, in 400 digits.

    Recipe: theta = log pi_old; per epoch p = softmax(theta), rho = p / pi_old,
    g_y = A_y where the clip is inactive (A >= 0 and rho <= 1 + clip, or A < 0 and
    rho >= 1 - clip), else 0; theta += lr p (g - E_p[g]).
    """
    with mp.workdps(R.DPS):
        q = R.normalise(p_old)
        a = [mp.mpf(float(v)) for v in adv]
        sup = [x > 0 for x in q]
        theta = [mp.log(x) if s else None for x, s in zip(q, sup)]
        for _ in range(epochs + 1):
            top = max(t for t in theta if t is not None)
            e = [mp.exp(t - top) if t is not None else mp.mpf(0) for t in theta]
            z = mp.fsum(e)
            p = [x / z for x in e]
            if _ == epochs:
                return [float(x) for x in p]
            g = []
            for pi, qi, ai in zip(p, q, a):
                if qi == 0:
                    g.append(mp.mpf(0))
                    continue
                rho = pi / qi
                on = rho <= 1 + mp.mpf(clip) if ai >= 0 else rho >= 1 - mp.mpf(clip)
                g.append(ai if on else mp.mpf(0))
            mean = mp.fsum(pi * gi for pi, gi in zip(p, g))
            theta = [
                t + mp.mpf(lr) * pi * (gi - mean) if t is not None else None
                for t, pi, gi in zip(theta, p, g)
            ]


def test_ppo_clip_step_against_mpmath():
    rng = np.random.default_rng(1650)
    for _ in range(60):
        n = int(rng.integers(2, 6))
        p_old = 10.0 ** rng.uniform(-300, 0, n)
        p_old[rng.random(n) < 0.15] = 0.0
        p_old[rng.integers(n)] = 1.0
        p_old = p_old / p_old.sum()
        adv = rng.normal(size=n) * 10.0 ** rng.uniform(-3, 1)
        clip, lr, epochs = float(rng.uniform(0.05, 0.5)), float(rng.uniform(0.1, 3)), 4
        got = ppo_clip_step(p_old, adv, clip, lr=lr, epochs=epochs)
        want = _mp_ppo_clip_step(p_old, adv, clip, lr, epochs)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


@pytest.mark.slow
@given(problems(min_size=2, max_size=6))
@settings(max_examples=40)
def test_beta_for_kl_round_trip_on_the_strategies_extremes(pb):
    # hypothesis' extreme problems (entries down to 1e-300, zeros, rewards to 1e6, beta
    # 1e-8..1e8): the KL attained at beta is a reachable target; beta_for_kl recovers a beta
    # whose mpmath KL is that target (or the best float beta for it)
    kl = float(kp.optimal_kl(pb.ref, pb.reward, pb.beta))
    assume(0 < kl < float(kp.max_kl(pb.ref, pb.reward)))
    _check_beta(pb.ref, pb.reward, kl, float(kp.beta_for_kl(pb.ref, pb.reward, kl)))
