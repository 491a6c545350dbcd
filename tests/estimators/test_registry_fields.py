"""The fields of each estimator row hold: what callers branch on is true of the estimator."""

from __future__ import annotations

import re

import mpmath as mp
import numpy as np
import pytest

import klpolicy.estimators as E
from klpolicy import optimal_policy
from klpolicy.core.internal import estimator_values as F
from tests._mpref import assert_mp_close
from tests._mpref import kl as mp_kl
from tests._mpref.estimators import estimator_moments

ROWS = sorted(E.ESTIMATORS)
BASE = E.estimator_names()  # the rows with a value of their own
GRID = np.array([-np.inf, -40.0, -2.0, -1e-9, 0.0, 1e-9, 0.7, 40.0, np.inf])


@pytest.mark.parametrize("name", ROWS)
def test_value_is_the_array_api_formula_on_numpy(name):
    row = E.ESTIMATORS[name]
    x = np.concatenate([GRID, np.linspace(-3, 3, 61)])
    with np.errstate(over="ignore", invalid="ignore"):
        want = row.array_value(np, x)
    np.testing.assert_array_equal(row.value(x), want)
    assert row.value(x.astype(np.float32)).dtype == np.float32


def test_the_rows_formulas_are_cores():
    assert {E.ESTIMATORS[n].array_value for n in BASE} == {
        F.k1_value,
        F.k2_value,
        F.k3_value,
        F.abs_value,
    }


# p and q with q's zeros, p's zeros and ordinary entries: E_p[k] = KL only for a mean_is_kl row
PAIRS = [
    ([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]),
    ([0.5, 0.5, 0.0], [0.25, 0.25, 0.5]),
    ([0.6, 0.4], [1.0, 0.0]),
]


@pytest.mark.parametrize("name", BASE)
def test_mean_is_kl_says_whether_the_mean_is_the_kl_for_every_pair(name):
    row = E.ESTIMATORS[name]
    # mpmath: E_p[k(log p - log q)] and KL(p||q) at 50 digits on the normalised rows
    equal = []
    for p, q in PAIRS:
        mean, _ = estimator_moments(p, q, name)
        kl = mp_kl(p, q)
        equal.append(mean == kl if mp.isinf(kl) else abs(mean - kl) <= mp.mpf(10) ** -40)
        if row.mean_is_kl:
            assert_mp_close(E.moments(p, q, name)[0], kl, rtol=4e-16)
    assert all(equal) == row.mean_is_kl, (name, equal)


@pytest.mark.parametrize("name", ROWS)
def test_nonnegative_says_whether_a_value_can_be_negative(name):
    row = E.ESTIMATORS[name]
    with np.errstate(over="ignore", invalid="ignore"):
        k = row.value(np.concatenate([GRID, np.linspace(-3, 3, 61)]))
    assert bool((k >= 0).all()) == row.nonnegative, (name, k.min())


@pytest.mark.parametrize("name", ROWS)
def test_differentiable_loss_is_where_that_training_lands(name):
    kind, scale = E.ESTIMATORS[name].differentiable_loss
    ref, r, beta = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.2, -0.5]), 0.7
    opts = dict(estimator=name, placement="loss", ratio="differentiable")
    if kind == "undefined":
        with pytest.raises(ValueError, match="has no fixed point here"):
            E.fixed_point(ref, r, beta, **opts)
        return

    def stationary(pi):
        return np.allclose(E.expected_gradient(np.log(pi), ref, r, beta, **opts), 0, atol=1e-10)

    if kind == "optimum":  # pi* at scale * beta zeroes that gradient, and fixed_point says so
        pistar = optimal_policy(ref, r, scale * beta)
        assert stationary(pistar)
        np.testing.assert_allclose(E.fixed_point(ref, r, beta, **opts), pistar, rtol=1e-12)
    else:  # "numeric": no pi* of the family is stationary
        assert kind == "numeric"
        assert not any(stationary(optimal_policy(ref, r, s * beta)) for s in (0.5, 1, 2, 4))


def _mp_stdev_ratio(x: float):
    """mpmath: sqrt(e^x - 1 - x) / (x / 2), k3's stdev over the KL at x = mu^2, 50 digits."""
    x = mp.mpf(x)
    return mp.sqrt(mp.exp(x) - 1 - x) / (x / 2)


def test_k3_gaussian_stdev_ratio_where_the_variance_overflows():
    ratio = E.ESTIMATORS["k3"].gaussian_stdev_ratio
    m2 = np.array([1.0, 50.0, 700.0, 1500.0])
    assert_mp_close(ratio(m2), [_mp_stdev_ratio(x) for x in m2], rtol=1e-13)
    # e^900 overflows the variance: the table takes the ratio from the row
    t = E.schulman_table(np.array([30.0]), estimators=("k3",))
    assert_mp_close(t.stdev_over_true[:, 0], [_mp_stdev_ratio(900.0)], rtol=1e-13)
    assert all(E.ESTIMATORS[n].gaussian_stdev_ratio is None for n in ("k1", "k2", "abs"))


@pytest.mark.parametrize("name", E.estimator_names(kl_only=True))
def test_each_known_error_is_diagnosed_by_the_check_suite(name):
    from klpolicy.testing import check_kl_estimator

    for sentence, wrong in E.ESTIMATORS[name].known_errors:
        x = np.linspace(-3, 3, 13)
        with np.errstate(over="ignore"):
            assert not np.allclose(wrong(x), E.ESTIMATORS[name].value(x))

        def fn(lp, lq, wrong=wrong):
            with np.errstate(over="ignore"):
                return wrong(np.asarray(lp) - np.asarray(lq))

        with pytest.raises(AssertionError, match=re.escape(sentence)):
            check_kl_estimator(fn, name, max_examples=30)


def test_the_textbook_form_of_k3_is_described_and_bounds_its_rounding():
    scale, terms, remedy = E.ESTIMATORS["k3"].textbook
    assert "expm1" in remedy and "exp(log q - log p)" in terms
    ell = np.array([-5.0, -1e-9, 1e-9, 0.5, 5.0])
    # the terms exp(-l), 1 and l are each at most the scale, and k3 is their signed sum
    assert (scale(ell, np.zeros_like(ell)) >= np.exp(-ell) + 1).all()
    assert (scale(ell, np.zeros_like(ell)) >= E.ESTIMATORS["k3"].value(ell)).all()
    assert all(E.ESTIMATORS[n].textbook is None for n in ("k1", "k2", "abs"))
