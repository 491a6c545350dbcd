"""Tests for LOSSES["sigmoid_norm"] (Tulu 3's length-normalised DPO, TRL's sigmoid_norm)."""

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.special import expit, log_expit, logsumexp

from klpolicy.preference import (
    LOSSES,
    bradley_terry,
    dpo_optimum,
    population_loss,
    population_optimum,
)


def _problem(rng, n):
    ref = rng.dirichlet(np.ones(n))
    r = rng.normal(size=n)
    lengths = rng.integers(1, 30, n).astype(float)
    return ref, r, lengths


def _direct_minimiser(ref, p, beta, lengths):
    """Independent route: BFGS on the logits of the loss written out here (mu = ref x ref),
    sum_ij W_ij * -log sigmoid(beta (g_i / L_i - g_j / L_j)), with its gradient by hand."""
    w = 2 * np.outer(ref, ref) * p
    lref = np.log(ref)

    def fun(z):
        g = z - logsumexp(z) - lref
        s = beta * g / lengths
        x = s[:, None] - s[None, :]
        val = -np.sum(w * log_expit(x))
        d = w * expit(-x)  # d val / d x_ij = -d
        ds = -d.sum(axis=1) + d.sum(axis=0)
        dg = ds * beta / lengths
        pi = np.exp(z - logsumexp(z))
        return val, dg - pi * dg.sum()

    z0 = lref.copy()
    res = minimize(fun, z0, jac=True, method="BFGS", options={"gtol": 1e-13, "maxiter": 10000})
    return np.exp(res.x - logsumexp(res.x))


def test_pair_value_and_gradient_are_the_normalised_sigmoid():
    pc, pr = np.array([-12.0, -30.5]), np.array([-20.0, -8.25])
    rc, rr = np.array([-13.0, -29.0]), np.array([-19.0, -9.0])
    lc, lr = np.array([4.0, 10.0]), np.array([8.0, 3.0])
    beta = 0.5
    row = LOSSES["sigmoid_norm"]
    got = row.value(pc, pr, rc, rr, beta, lengths=(lc, lr))
    want = -log_expit(beta * ((pc - rc) / lc - (pr - rr) / lr))
    np.testing.assert_allclose(got, want, rtol=1e-15)
    g = row.gradient(pc, pr, rc, rr, beta, lengths=(lc, lr))
    h = 1e-6
    num = (
        row.value(pc + h, pr, rc, rr, beta, lengths=(lc, lr))
        - row.value(pc - h, pr, rc, rr, beta, lengths=(lc, lr))
    ) / (2 * h)
    np.testing.assert_allclose(g.policy_chosen, num, rtol=1e-8)
    np.testing.assert_allclose(g.ref_rejected, -g.policy_rejected, rtol=0)
    # equal lengths L: the sigmoid loss at beta / L
    np.testing.assert_allclose(
        row.value(pc, pr, rc, rr, beta, lengths=(4.0, 4.0)),
        LOSSES["sigmoid"].value(pc, pr, rc, rr, beta / 4.0),
        rtol=1e-15,
    )


@pytest.mark.parametrize("n", [2, 3, 5])
def test_population_optimum_matches_a_direct_minimisation_permuted(rng, n):
    for _ in range(3):
        ref, r, lengths = _problem(rng, n)
        beta = float(rng.uniform(0.2, 3.0))
        p = bradley_terry(r)
        pi = population_optimum(ref, p, beta, loss="sigmoid_norm", lengths=lengths)
        direct = _direct_minimiser(ref, p, beta, lengths)
        np.testing.assert_allclose(pi, direct, rtol=2e-6, atol=1e-12)
        assert population_loss(
            pi, ref, p, beta, loss="sigmoid_norm", lengths=lengths
        ) <= population_loss(direct, ref, p, beta, loss="sigmoid_norm", lengths=lengths)
        # Bradley-Terry from r: the normalised scores beta log(pi/ref) / L are r + const
        s = beta * np.log(pi / ref) / lengths - r
        np.testing.assert_allclose(s, s[0], rtol=0, atol=1e-12 * (1 + np.abs(s[0])))
        perm = rng.permutation(n)
        pi_p = population_optimum(
            ref[perm], p[np.ix_(perm, perm)], beta, loss="sigmoid_norm", lengths=lengths[perm]
        )
        np.testing.assert_allclose(pi_p, pi[perm], rtol=1e-13)


def test_population_optimum_general_preferences_and_pair_law(rng):
    n = 4
    ref, _, lengths = _problem(rng, n)
    u = rng.uniform(0.05, 0.95, (n, n))
    p = np.triu(u, 1) + np.tril(1 - u.T, -1) + 0.5 * np.eye(n)
    pi = population_optimum(ref, p, 0.9, loss="sigmoid_norm", lengths=lengths)
    np.testing.assert_allclose(pi, _direct_minimiser(ref, p, 0.9, lengths), rtol=2e-6)
    # the scores are the sigmoid optimum's implied reward plus one constant
    x = np.log(dpo_optimum(ref, p, 1.0) / ref)
    s = 0.9 * np.log(pi / ref) / lengths - x
    np.testing.assert_allclose(s, s[0], atol=1e-12)


@pytest.mark.parametrize("length", [1.0, 7.0, 250.0])
def test_equal_lengths_are_the_sigmoid_optimum_at_beta_over_length(rng, length):
    ref, r, _ = _problem(rng, 5)
    p = bradley_terry(r)
    got = population_optimum(ref, p, 2.0, loss="sigmoid_norm", lengths=np.full(5, length))
    np.testing.assert_allclose(got, dpo_optimum(ref, p, 2.0 / length), rtol=1e-12)
    pi = rng.dirichlet(np.ones(5))
    assert population_loss(
        pi, ref, p, 2.0, loss="sigmoid_norm", lengths=np.full(5, length)
    ) == pytest.approx(population_loss(pi, ref, p, 2.0 / length), rel=1e-14)


def test_zero_reference_entries_stay_zero():
    ref = np.array([0.5, 0.0, 0.5])
    p = bradley_terry([1.0, 2.0, 0.0])
    pi = population_optimum(ref, p, 1.0, loss="sigmoid_norm", lengths=[2.0, 3.0, 4.0])
    assert pi[1] == 0.0
    assert pi.sum() == pytest.approx(1.0, rel=1e-15)
    # a pair of outcomes: 2 log(pi_0 / ref_0) / 2 - log(pi_2 / ref_2) / 4 = 1
    assert np.log(pi[0] / 0.5) / 2 - np.log(pi[2] / 0.5) / 4 == pytest.approx(1.0, rel=1e-13)


@pytest.mark.parametrize(
    ("lengths", "match"),
    [
        ([1.0, 0.0, 2.0], r"`lengths` must be a positive, finite array; got 0.0 at index \(1,\)"),
        ([1.0, 2.0, -3.0], r"`lengths` must be a positive, finite array; got -3.0 at index \(2,"),
        ([np.nan, 2.0, 3.0], r"`lengths` must be a positive, finite array; got nan at index \(0,"),
        (
            [1.0, 2.0],
            r"`lengths` must have one length per outcome, shape \(3,\) .*got shape \(2,\)",
        ),
        (None, r"`lengths` is required"),
        ("abc", r"`lengths` must be an array of real numbers"),
    ],
)
def test_bad_lengths_name_the_argument(lengths, match):
    ref = [0.2, 0.3, 0.5]
    p = bradley_terry([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match=match):
        population_optimum(ref, p, 1.0, loss="sigmoid_norm", lengths=lengths)
    with pytest.raises(ValueError, match=match):
        population_loss(ref, ref, p, 1.0, loss="sigmoid_norm", lengths=lengths)


def test_missing_lengths_are_refused():
    # (f-divergences with lengths are solved: tests/preference/test_fdpo_trl.py)
    ref = [0.2, 0.3, 0.5]
    p = bradley_terry([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match=r"`lengths` is required"):
        population_optimum(ref, p, 1.0, loss="sigmoid_norm")
    with pytest.raises(ValueError, match=r"`lengths` is required"):
        population_optimum(ref, p, 1.0, loss="sigmoid_norm", divergence="js")
    with pytest.raises(ValueError, match=r"`lengths` of a pair loss must have shape \(2, \.\.\.\)"):
        LOSSES["sigmoid_norm"].value(-1.0, -2.0, -1.0, -2.0, 1.0, lengths=[1.0, 2.0, 3.0])


@pytest.mark.mp_dps(40)
def test_population_optimum_against_mpmath_stationarity(rng):
    # reference: mpmath (40 digits) solves the stationarity of the population loss in the
    # free logits z_1..z_{n-1} (z_0 = 0), sum_ij W_ij sp(-beta (g_i/L_i - g_j/L_j)),
    # g = z - logsumexp(z) - log ref, by Newton (mp.findroot) from the BFGS minimiser
    import mpmath as mp

    ref = np.array([0.125, 0.25, 0.0625, 0.5625])
    r = np.array([0.5, -1.25, 2.0, 0.0])
    lengths = np.array([3.0, 11.0, 5.0, 2.0])
    beta = 0.75
    p = bradley_terry(r)
    n = ref.size
    start = _direct_minimiser(ref, p, beta, lengths)
    R = [mp.mpf(v) for v in r]
    ref_m = [mp.mpf(v) for v in ref]

    def grad(*z_free):
        z = [mp.mpf(0)] + list(z_free)
        lz = mp.log(mp.fsum(mp.exp(v) for v in z))
        g = [z[k] - lz - mp.log(ref_m[k]) for k in range(n)]
        s = [beta * g[k] / lengths[k] for k in range(n)]
        ds = [mp.mpf(0)] * n
        for i in range(n):
            for j in range(n):
                wij = 2 * ref_m[i] * ref_m[j] / (1 + mp.exp(R[j] - R[i]))
                d = wij / (1 + mp.exp(s[i] - s[j]))
                ds[i] -= d
                ds[j] += d
        dg = [ds[k] * beta / lengths[k] for k in range(n)]
        pi = [mp.exp(z[k] - lz) for k in range(n)]
        tot = mp.fsum(dg)
        return [dg[k] - pi[k] * tot for k in range(1, n)]

    z0 = np.log(start) - np.log(start[0])
    z = mp.findroot(grad, [mp.mpf(v) for v in z0[1:]])
    zz = [mp.mpf(0)] + [z[k] for k in range(n - 1)]
    lz = mp.log(mp.fsum(mp.exp(v) for v in zz))
    want = np.array([float(mp.exp(v - lz)) for v in zz])
    got = population_optimum(ref, p, beta, loss="sigmoid_norm", lengths=lengths)
    np.testing.assert_allclose(got, want, rtol=1e-13)  # measured: 6.4e-15
