"""Soft best-of-n's exact law against an exact mpmath enumeration of all n-tuples."""

from __future__ import annotations

import itertools

import mpmath as mp
import numpy as np
import pytest

from klpolicy.best_of_n import best_of_n_policy, soft_best_of_n_kl, soft_best_of_n_policy

pytestmark = pytest.mark.mp_dps(40)  # mpmath's working precision (tests/conftest.py)


def _mp_enumerate(q, r, n, lam):
    # mpmath recipe (40 digits): sum over all n-tuples of reference draws of
    # prod q(y_j) * exp(r(y_i)/lam) / sum_j exp(r(y_j)/lam), credited to y_i.
    q = [mp.mpf(x) for x in q]
    w = [mp.exp(mp.mpf(x) / mp.mpf(lam)) for x in r]
    p = [mp.mpf(0)] * len(q)
    for t in itertools.product(range(len(q)), repeat=n):
        pr = mp.fprod(q[j] for j in t)
        tot = mp.fsum(w[j] for j in t)
        for j in t:
            p[j] += pr * w[j] / tot
    return [float(x) for x in p]


@pytest.mark.parametrize(
    ("q", "r", "n", "lam"),
    [
        ([0.2, 0.5, 0.3], [1.0, 0.3, -2.0], 4, 0.5),
        ([0.25, 0.25, 0.5], [1.0, 1.0, 0.0], 3, 0.2),  # a tie
        ([0.1, 0.6, 0.3], [5.0, 0.0, -5.0], 5, 0.05),
        ([0.4, 0.0, 0.6], [0.0, 9.0, 1.0], 3, 2.0),  # zero in the reference
    ],
)
def test_law_matches_enumeration(q, r, n, lam):
    got = soft_best_of_n_policy(q, r, n, lam)
    want = _mp_enumerate(q, r, n, lam)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


def test_limits_hard_best_of_n_and_reference():
    q, r = [0.2, 0.5, 0.3], [1.0, 0.3, -2.0]
    np.testing.assert_array_equal(soft_best_of_n_policy(q, r, 4, 0.0), best_of_n_policy(q, r, 4))
    np.testing.assert_allclose(
        soft_best_of_n_policy(q, r, 4, 1e-3), best_of_n_policy(q, r, 4), atol=1e-12
    )
    np.testing.assert_allclose(soft_best_of_n_policy(q, r, 4, np.inf), q)
    np.testing.assert_allclose(soft_best_of_n_policy(q, r, 1, 0.5), q)


def test_kl_is_below_log_n():
    q, r = [0.2, 0.5, 0.3], [1.0, 0.3, -2.0]
    assert 0 < soft_best_of_n_kl(q, r, 8, 0.3) < np.log(8)


@pytest.mark.parametrize(("name", "value"), [("n", 0), ("lam", -1.0)])
def test_bad_n_and_lam_refused_by_name(name, value):
    args = {"n": 2, "lam": 0.5} | {name: value}
    with pytest.raises(ValueError, match=f"`{name}`"):
        soft_best_of_n_policy([0.5, 0.5], [1.0, 0.0], **args)
