"""Best-of-n's exact law against mpmath, at the extremes.

Recipe (tests/_mpref/closed_form.py): the reference is normalised in 400 digits; reward level g
(ties grouped) has mass q_g and mass strictly below F_g-; best-of-n puts
F_g^n - F_g-^n on g, split within the level as the reference; the KL, expected reward
and win rate (P(beats a reference draw) + half the ties) follow from their definitions.
"""

from __future__ import annotations

import numpy as np
import pytest

from klpolicy import max_kl
from klpolicy.best_of_n import (
    best_of_n_curve,
    best_of_n_expected_reward,
    best_of_n_for_kl,
    best_of_n_kl,
    best_of_n_policy,
    best_of_n_vs_optimal,
    best_of_n_win_rate,
)

from .. import _mpref as R


def _case(rng):
    n_out = int(rng.integers(2, 6))
    ref = 10.0 ** rng.uniform(-300, 0, n_out)
    ref[rng.random(n_out) < 0.15] = 0.0
    ref[rng.integers(n_out)] = 1.0
    ref = ref / ref.sum()
    if rng.random() < 0.4:  # ties
        rew = rng.choice([0.0, 1.0, 2.0], n_out)
    else:
        rew = rng.normal(size=n_out) * 10.0 ** rng.uniform(-200, 200)
    n = int(rng.choice([2, 3, 16, 1000, 10**9]))
    return ref, rew, n


def test_best_of_n_for_kl_supremum_resolves_a_tiny_tail():
    # was refused with "supremum 0 nats": -log(q_top) rounded the top mass 1 - 7e-82 to 1
    ref = [6.97592749e-82, 1.0]
    ref = list(np.array(ref) / sum(ref))
    assert int(best_of_n_for_kl(ref, [0.0, 1.0], 0.0)) == 1
    # KL_2 = q - O(q^2) with q = 7e-82 the tail: half the supremum is spent already at n = 1
    assert int(best_of_n_for_kl(ref, [0.0, 1.0], 0.5 * float(max_kl(ref, [0.0, 1.0])))) == 1


def test_tied_rewards_give_exactly_the_reference():
    # formerly 2.47e-32: the tied level's mass 0.6 + 0.3 + 0.1 rounds to 1 - 1.1e-16
    assert float(best_of_n_kl([0.6, 0.3, 0.1], [0.0, 0.0, 0.0], 2)) == 0.0
    assert float(best_of_n_kl([0.6, 0.3, 0.1, 0.0], [1.0, 1.0, 1.0, 5.0], 10**6)) == 0.0


def test_a_tiny_best_level_beside_a_rounded_bulk():
    # formerly 6% off: the bulk level's log-mass carried the 1.1e-16 rounding of its sum
    ref, rew = [0.6, 0.3, 0.1, 1e-30], [0.0, 0.0, 0.0, 1.0]
    want = float(R.best_of_n_kl(ref, rew, 2))
    assert float(best_of_n_kl(ref, rew, 2)) == pytest.approx(want, rel=1e-13)


@pytest.mark.slow
def test_law_and_figures_against_mpmath():
    rng = np.random.default_rng(1601)
    for _ in range(150):
        ref, rew, n = _case(rng)
        pol = best_of_n_policy(ref, rew, n)
        np.testing.assert_allclose(pol, R.to_float(R.best_of_n_policy(ref, rew, n)), rtol=1e-12)
        kl = float(R.best_of_n_kl(ref, rew, n))
        assert float(best_of_n_kl(ref, rew, n)) == pytest.approx(kl, rel=1e-11, abs=1e-300)
        er = float(R.best_of_n_expected_reward(ref, rew, n))
        scale = float(np.max(np.abs(rew)))
        got = float(best_of_n_expected_reward(ref, rew, n))
        assert abs(got - er) <= 1e-13 * scale, (ref.tolist(), rew.tolist(), n, got, er)
        wr = float(R.best_of_n_win_rate(ref, rew, n))
        assert float(best_of_n_win_rate(ref, rew, n)) == pytest.approx(wr, rel=1e-12, abs=1e-300)


@pytest.mark.slow
def test_best_of_n_vs_optimal_against_mpmath():
    # the matched optimal policy spends best-of-n's KL: checked through the mpmath KL at its beta
    rng = np.random.default_rng(1602)
    for _ in range(40):
        ref, rew, n = _case(rng)
        if not np.all(np.abs(rew) < 1e100):
            continue
        cmp = best_of_n_vs_optimal(ref, rew, n)
        kl = float(R.best_of_n_kl(ref, rew, n))
        if not 0 < kl:
            continue
        assert float(cmp.kl) == pytest.approx(kl, rel=1e-11)
        beta = float(cmp.beta)
        if 0 < beta < np.inf:
            assert float(R.optimal_kl(ref, rew, beta)) == pytest.approx(float(cmp.kl), rel=1e-10)
            mean, _, _ = R.tilt_moments(ref, rew, beta)
            scale = float(np.max(np.abs(rew)))
            assert abs(float(cmp.optimal_reward) - float(mean)) <= 1e-12 * scale
        assert float(cmp.best_of_n_reward) <= float(cmp.optimal_reward) + 1e-12 * np.max(
            np.abs(rew)
        )


def test_best_of_n_curve_against_mpmath():
    rng = np.random.default_rng(1612)
    for _ in range(40):
        ref, rew, _ = _case(rng)
        ns = np.array([1, 2, 9, 1000])
        c = best_of_n_curve(ref, rew, ns)
        scale = float(np.max(np.abs(rew)))
        for i, n in enumerate(ns):
            kl = float(R.best_of_n_kl(ref, rew, int(n)))
            assert float(c.kl[i]) == pytest.approx(kl, rel=1e-11, abs=1e-300)
            er = float(R.best_of_n_expected_reward(ref, rew, int(n)))
            assert abs(float(c.expected_reward[i]) - er) <= 1e-13 * scale


def test_best_of_n_for_kl_is_the_largest_n_within_budget():
    # n(kl) = max{n : KL_n <= kl}: KL at n within the budget and at n + 1 beyond it (mpmath)
    rng = np.random.default_rng(1613)
    for _ in range(30):
        ref, rew, _ = _case(rng)
        kmax = float(R.best_of_n_kl(ref, rew, 10**15))
        if kmax == 0:
            continue
        n_true = int(rng.choice([1, 2, 3, 17, 400]))
        budget = float(R.best_of_n_kl(ref, rew, n_true))
        if budget >= float(max_kl(ref, rew)):  # rounds onto the supremum: refused, documented
            continue
        if float(R.best_of_n_kl(ref, rew, n_true + 1)) <= budget * (1 + 1e-10):
            continue  # KL_n flat to float resolution: the largest n is not determined
        n = int(best_of_n_for_kl(ref, rew, budget))
        assert float(R.best_of_n_kl(ref, rew, n)) <= budget * (1 + 1e-12)
        assert float(R.best_of_n_kl(ref, rew, n + 1)) > budget * (1 - 1e-12) or n >= n_true
