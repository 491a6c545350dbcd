"""Tests for klpolicy.best_of_n.frontier: curves along n, n for a KL budget, the optimum."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import klpolicy
from klpolicy.best_of_n import best_of_n_expected_reward, best_of_n_kl, best_of_n_win_rate
from klpolicy.best_of_n.frontier import best_of_n_curve, best_of_n_for_kl, best_of_n_vs_optimal

from ._best_of_n_problems import normalise, problems

# ---------------------------------------------------------------- n for a budget, frontier


@pytest.mark.slow
@given(problems, st.floats(0.0, 0.99))
def test_for_kl_is_largest_n_within_budget(prob, frac):
    ref, reward = normalise(prob[0]), np.array(prob[1], float)
    sup = float(klpolicy.max_kl(ref, reward))
    if sup < 1e-6:
        return
    budget = frac * sup
    n = int(best_of_n_for_kl(ref, reward, budget))
    assert best_of_n_kl(ref, reward, n) <= budget
    assert best_of_n_kl(ref, reward, n + 1) > budget


def test_for_kl_values_and_batch():
    ref, r = [0.25, 0.25, 0.25, 0.25], [0.0, 1.0, 2.0, 3.0]
    assert best_of_n_for_kl(ref, r, 0.0) == 1
    assert best_of_n_for_kl(ref, r, 0.5) == 3  # KL(3) = 0.4194..., KL(4) = 0.5903...
    out = best_of_n_for_kl(ref, r, [0.0, 0.5, 1.0])
    assert out.shape == (3,) and out.dtype == np.int64
    np.testing.assert_array_equal(out, [1, 3, 7])
    # a budget close to the supremum needs a large n, found exactly
    n = int(best_of_n_for_kl([1e-6, 1 - 1e-6], [1.0, 0.0], 13.0))
    assert best_of_n_kl([1e-6, 1 - 1e-6], [1.0, 0.0], n) <= 13.0
    assert best_of_n_kl([1e-6, 1 - 1e-6], [1.0, 0.0], n + 1) > 13.0


def test_curve_shapes_and_batch_for_kl():
    rng = np.random.default_rng(5)
    ref = rng.dirichlet(np.ones(7), size=3)
    reward = rng.integers(0, 4, size=(3, 7)).astype(float)
    grid = np.array([[1, 2], [8, 64]])
    c = best_of_n_curve(ref, reward, grid)
    assert c.kl.shape == (2, 2, 3) and c.n.shape == (2, 2, 3)
    for i in range(2):
        for j in range(2):
            for row in range(3):
                n = int(grid[i, j])
                assert c.kl[i, j, row] == pytest.approx(
                    best_of_n_kl(ref[row], reward[row], n), rel=1e-14, abs=1e-300
                )
                assert c.win_rate[i, j, row] == pytest.approx(
                    best_of_n_win_rate(ref[row], reward[row], n), rel=1e-14
                )
    budgets = 0.5 * np.asarray(klpolicy.max_kl(ref, reward))
    out = best_of_n_for_kl(ref, reward, budgets)
    assert out.shape == (3,)
    for row in range(3):
        assert out[row] == best_of_n_for_kl(ref[row], reward[row], budgets[row])


@pytest.mark.slow
@given(problems, st.integers(1, 200))
def test_best_of_n_on_or_below_frontier(prob, n):
    ref, reward = normalise(prob[0]), np.array(prob[1], float)
    c = best_of_n_vs_optimal(ref, reward, [n])
    scale = 1e-9 * (1 + np.abs(reward).max())
    assert c.best_of_n_reward[0] <= c.optimal_reward[0] + scale
    if c.kl[0] > 0:
        assert klpolicy.optimal_kl(ref, reward, c.beta[0]) == pytest.approx(c.kl[0], rel=1e-9)


def test_comparison_values():
    ref, r = [0.25, 0.25, 0.25, 0.25], [0.0, 1.0, 2.0, 3.0]
    c = best_of_n_vs_optimal(ref, r, [1, 2, 4, 16])
    assert c.beta[0] == np.inf and c.optimal_reward[0] == 1.5
    assert np.all(c.optimal_reward[1:] > c.best_of_n_reward[1:])
    np.testing.assert_allclose(
        c.best_of_n_reward,
        [best_of_n_expected_reward(ref, r, n) for n in (1, 2, 4, 16)],
        rtol=1e-15,
    )


# ---------------------------------------------------------------- bad input

REF, REW = [0.5, 0.5], [1.0, 0.0]

BAD = [
    (best_of_n_curve, (REF, REW, [1, -2]), "`ns` must be an integer >= 1; found -2 at index (1,)"),
    (
        best_of_n_for_kl,
        (REF, REW, -0.1),
        "`kl` must be a finite non-negative number of nats; got -0.1",
    ),
    (
        best_of_n_for_kl,
        (REF, REW, np.nan),
        "`kl` must be a finite non-negative number of nats; got nan",
    ),
    (
        best_of_n_for_kl,
        (REF, REW, 0.7),
        "`kl` = 0.7 is at or above the supremum of the best-of-n KL, 0.693147 nats (-log of the "
        "reference mass on the best reward): every n stays within it",
    ),
    (
        best_of_n_for_kl,
        (REF, [1.0, 1.0], 0.0),
        "`kl` = 0 is at or above the supremum of the best-of-n KL, 0 nats",
    ),
    (
        best_of_n_for_kl,
        ([[0.5, 0.5], [0.9, 0.1]], REW, 1.0),
        "`kl` = 1 is at or above the supremum of the best-of-n KL for row (0,), 0.693147 nats",
    ),
    (
        best_of_n_for_kl,
        ([1e-15, 1 - 1e-15], REW, 34.536),
        "`kl` = 34.536 needs more than 2**53 draws; best_of_n_for_kl cannot represent that n",
    ),
]


@pytest.mark.parametrize(("fn", "args", "msg"), BAD)
def test_bad_input(fn, args, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        fn(*args)
