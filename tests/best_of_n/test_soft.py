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


@pytest.mark.parametrize(
    ("q", "r", "n", "lam"),
    [
        # weights e^{r/lam} spread over e^-200 .. 1, the top two within lam of each other:
        # every outcome is, at some nodes of the integral, above, inside and below the
        # window of nodes evaluated term by term (soft.py's _LOW, _HIGH)
        ([0.3, 0.2, 0.4, 0.1], [1.0, 0.995, 0.3, -1.0], 4, 0.01),
        ([0.3, 0.2, 0.4, 0.1], [1.0, 0.9995, 0.3, -1.0], 4, 0.001),  # e^-2000 .. 1
        ([0.1, 0.25, 0.0, 0.4, 0.25], [2.0, 1.9995, 5.0, 0.5, 0.5], 5, 0.001),  # a tie, a zero
        ([0.05, 0.9, 0.05], [1.0, 0.0, 0.999], 3, 0.01),  # most mass far below the top
    ],
)
def test_law_matches_enumeration_at_small_lam(q, r, n, lam):
    got = soft_best_of_n_policy(q, r, n, lam)
    want = _mp_enumerate(q, r, n, lam)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("lam", [1.0, 0.01, 0.001])
def test_law_sums_to_one_on_many_outcomes(lam):
    # an identity (sum_y pi(y) = 1) on 10^4 outcomes: every weight window in use
    rng = np.random.default_rng(7)
    q = rng.dirichlet(np.ones(10**4))
    r = rng.normal(size=10**4)
    p = soft_best_of_n_policy(q, r, 64, lam)
    assert abs(p.sum() - 1.0) < 1e-13
    assert (p >= 0).all()


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


def _mp_tilt(q, r, lam):
    # recipe: pi*(y) = q(y) e^{r(y)/lam} / sum q e^{r/lam} at 40 digits
    w = [mp.mpf(x) * mp.exp(mp.mpf(y) / mp.mpf(lam)) for x, y in zip(q, r)]
    z = mp.fsum(w)
    return [x / z for x in w]


def _mp_coefficients(q, r, lam):
    # recipe: rho = pi*/q on the support, m = E_pi*[rho]; the leading terms
    # Var_pi*(rho)/2, E_pi*|rho - m|/2 and Cov_pi*(r, rho), summed in mpmath
    ps = _mp_tilt(q, r, lam)
    on = [i for i in range(len(q)) if q[i] > 0]
    rho = {i: ps[i] / mp.mpf(q[i]) for i in on}
    m = mp.fsum(ps[i] * rho[i] for i in on)
    mr = mp.fsum(ps[i] * r[i] for i in on)
    return (
        mp.fsum(ps[i] * (rho[i] - m) ** 2 for i in on) / 2,
        mp.fsum(ps[i] * abs(rho[i] - m) for i in on) / 2,
        mp.fsum(ps[i] * (rho[i] - m) * (r[i] - mr) for i in on),
    )


@pytest.mark.parametrize(
    ("q", "r", "lam"),
    [([0.2, 0.5, 0.3], [1.0, 0.3, -2.0], 0.5), ([0.4, 0.0, 0.6], [0.0, 9.0, 1.0], 2.0)],
)
def test_gap_to_the_tilt_exact_for_small_n(q, r, lam):
    from klpolicy.best_of_n import soft_best_of_n_gap
    from tests._mpref import assert_mp_close

    n = 4
    law = [mp.mpf(x) for x in _mp_enumerate(q, r, n, lam)]
    ps = _mp_tilt(q, r, lam)
    on = [i for i in range(len(q)) if q[i] > 0]
    kl = mp.fsum(law[i] * mp.log(law[i] / ps[i]) for i in on)
    tv = mp.fsum(abs(law[i] - ps[i]) for i in on) / 2
    gap = mp.fsum((ps[i] - law[i]) * r[i] for i in on)
    g = soft_best_of_n_gap(q, r, n, lam)
    assert_mp_close(g.kl, kl, rtol=1e-9)
    assert_mp_close(g.tv, tv, rtol=1e-11)
    assert_mp_close(g.reward_gap, gap, rtol=1e-11)
    c = _mp_coefficients(q, r, lam)
    assert_mp_close([g.kl_coefficient, g.tv_coefficient, g.reward_coefficient], c, rtol=1e-13)


@pytest.mark.parametrize(
    ("q", "r", "lam"),
    [
        ([0.2, 0.5, 0.3], [1.0, 0.3, -2.0], 0.5),
        ([0.1, 0.2, 0.3, 0.4], [3.0, 1.0, 1.0, 0.0], 1.5),  # a tie
    ],
)
def test_gap_rates_kl_one_over_n_squared_tv_and_reward_one_over_n(q, r, lam):
    # Verdun et al. prove O(1/n) in KL and reward; exactly: KL ~ Var(rho)/(2 n^2),
    # TV ~ E|delta|/(2n), reward gap ~ Cov(r, rho)/n, the relative error O(1/n)
    from klpolicy.best_of_n import soft_best_of_n_gap

    prev = None
    for n in (1000, 10000, 100000):
        g = soft_best_of_n_gap(q, r, n, lam)
        ratios = np.array(
            [
                g.kl * n**2 / g.kl_coefficient,
                g.tv * n / g.tv_coefficient,
                g.reward_gap * n / g.reward_coefficient,
            ]
        )
        err = np.abs(ratios - 1.0)
        assert (err < 60.0 / n).all(), (n, ratios)
        if prev is not None:  # the error falls like 1/n: ten times smaller per decade
            assert (err < prev / 5).all()
        prev = err
    assert g.kl * n < 1e-3 * g.kl_coefficient  # far below an O(1/n) rate


def test_frontier_between_best_of_n_and_the_tilt():
    from klpolicy.best_of_n import (
        best_of_n_expected_reward,
        best_of_n_kl,
        soft_best_of_n_frontier,
    )

    rng = np.random.default_rng(1)
    q = rng.dirichlet(np.ones(30))
    r = rng.normal(size=30)
    f = soft_best_of_n_frontier(q, r, 8)
    assert f.lam[0] == 0 and f.lam[-1] == np.inf
    np.testing.assert_allclose(f.kl[0], best_of_n_kl(q, r, 8), rtol=1e-13)
    np.testing.assert_allclose(f.expected_reward[0], best_of_n_expected_reward(q, r, 8), rtol=1e-13)
    np.testing.assert_allclose([f.kl[-1], f.expected_reward[-1]], [0.0, q @ r], atol=1e-15)
    assert (f.expected_reward <= f.optimal_expected_reward + 1e-12).all()
    assert (np.diff(f.kl) <= 1e-15).all()  # KL falls as lam grows
    # at the KL of hard best-of-4, the soft curve at n = 8 earns more than best-of-4
    k4 = float(best_of_n_kl(q, r, 4))
    er_soft = np.interp(k4, f.kl[::-1], f.expected_reward[::-1])
    assert er_soft > float(best_of_n_expected_reward(q, r, 4))
    np.testing.assert_array_equal(f.best_of_n.n, [1, 2, 4, 8])


@pytest.mark.parametrize(
    ("fn", "args", "name"),
    [
        ("soft_best_of_n_gap", {"lam": 0.0}, "lam"),
        ("soft_best_of_n_gap", {"lam": np.inf}, "lam"),
        ("soft_best_of_n_gap", {"n": 0}, "n"),
        ("soft_best_of_n_frontier", {"n": 0}, "n"),
        ("soft_best_of_n_frontier", {"lams": [-1.0]}, "lams"),
        ("soft_best_of_n_frontier", {"ref": [[0.5, 0.5]]}, "ref"),
        ("soft_best_of_n_frontier", {"ref": [[0.5, 0.5], [1.0]]}, "ref"),  # ragged
        ("soft_best_of_n_frontier", {"reward": [[1.0, 0.0], [1.0]]}, "reward"),
        ("soft_best_of_n_policy", {"ref": [0.5, 0.6]}, "ref"),
    ],
)
def test_gap_and_frontier_refuse_bad_input_by_name(fn, args, name):
    import klpolicy.best_of_n as bon

    base = {"ref": [0.5, 0.5], "reward": [1.0, 0.0], "n": 2}
    if fn != "soft_best_of_n_frontier":
        base["lam"] = 0.5
    with pytest.raises(ValueError, match=f"`{name}`"):
        getattr(bon, fn)(**(base | args))


def test_frontier_of_a_constant_reward_is_the_reference():
    """Every law is the reference: KL 0 up to rounding (3.6e-33 here), which beta_for_kl
    refused as above the reachable 0, naming a `kl` the caller never passed."""
    from klpolicy.best_of_n import soft_best_of_n_frontier

    f = soft_best_of_n_frontier([0.5, 0.3, 0.2], [1.0, 1.0, 1.0], 4)
    assert np.all(np.abs(f.kl) < 1e-15)
    # the soft law is a quadrature: its mass is 1 - 1.4e-14 here (measured)
    np.testing.assert_allclose(f.expected_reward, 1.0, rtol=1e-13)
    np.testing.assert_allclose(f.optimal_expected_reward, 1.0, rtol=1e-15)
