"""Exact tests of the closed form: worked example, limits, mpmath references, properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import klpolicy as kp

from .. import _mpref as R

# --------------------------------------------------------------------------- worked example


def test_worked_example_beta_half():
    # e^2 / (e^2 + 1): beta = 0.5 turns the reward gap of 1 into a logit gap of 2
    pi = kp.optimal_policy([0.5, 0.5], [1.0, 0.0], 0.5)
    assert pi[0] == pytest.approx(np.exp(2) / (np.exp(2) + 1), rel=1e-12)
    assert round(pi[0], 2) == 0.88


def test_worked_example_beta_two():
    pi = kp.optimal_policy([0.5, 0.5], [1.0, 0.0], 2.0)
    assert pi[0] == pytest.approx(np.exp(0.5) / (np.exp(0.5) + 1), rel=1e-12)
    assert round(pi[0], 2) == 0.62


def test_worked_example_batch_of_betas():
    betas = np.array([[0.5], [2.0]])
    pi = kp.optimal_policy([0.5, 0.5], [1.0, 0.0], betas)
    assert pi.shape == (2, 2)
    np.testing.assert_allclose(
        pi[:, 0], [np.exp(2) / (np.exp(2) + 1), 1 / (1 + np.exp(-0.5))], rtol=1e-12
    )


# --------------------------------------------------------------------------- limits and support


def test_greedy_limit_splits_in_proportion_to_ref():
    ref = np.array([0.1, 0.3, 0.2, 0.4])
    r = np.array([2.0, 2.0, 1.0, -5.0])
    np.testing.assert_allclose(kp.optimal_policy(ref, r, 0.0), [0.25, 0.75, 0.0, 0.0], rtol=1e-15)
    assert kp.soft_value(ref, r, 0.0) == 2.0
    assert kp.optimal_kl(ref, r, 0.0) == pytest.approx(-np.log(0.4), rel=1e-15)
    assert kp.max_kl(ref, r) == pytest.approx(-np.log(0.4), rel=1e-15)


def test_greedy_limit_ignores_rewards_off_support():
    ref = np.array([0.0, 0.5, 0.5])
    r = np.array([100.0, 1.0, 0.0])
    np.testing.assert_array_equal(kp.optimal_policy(ref, r, 0.0), [0.0, 1.0, 0.0])


def test_small_beta_approaches_greedy_and_large_beta_the_reference():
    ref = np.array([0.2, 0.5, 0.3])
    r = np.array([1.0, 0.0, 0.5])
    np.testing.assert_allclose(
        kp.optimal_policy(ref, r, 1e-3), kp.optimal_policy(ref, r, 0.0), atol=1e-200
    )
    np.testing.assert_allclose(kp.optimal_policy(ref, r, 1e12), ref, rtol=1e-11)
    np.testing.assert_array_equal(kp.optimal_policy(ref, r, np.inf), ref)
    assert kp.soft_value(ref, r, np.inf) == pytest.approx(0.35, rel=1e-15)
    assert kp.optimal_kl(ref, r, np.inf) == 0.0


@pytest.mark.parametrize("beta", [0.0, 1e-8, 1e-3, 1.0, 1e3, 1e8, np.inf])
def test_support_is_preserved(beta):
    ref = np.array([0.0, 0.3, 0.0, 0.7])
    r = np.array([1e6, 0.0, 1e6, -1.0])
    pi = kp.optimal_policy(ref, r, beta)
    assert pi[0] == 0.0 and pi[2] == 0.0
    assert pi.sum() == pytest.approx(1.0, abs=1e-15)
    assert np.isfinite(kp.optimal_kl(ref, r, beta))


def test_kl_off_support_is_infinite():
    assert kp.kl_divergence([0.5, 0.5], [1.0, 0.0]) == np.inf
    assert kp.objective([0.5, 0.5], [1.0, 0.0], [0.0, 1.0], 1.0) == -np.inf


# --------------------------------------------------------------------------- mpmath references

BETAS = [1e-8, 1e-4, 1e-2, 0.5, 1.0, 2.0, 1e2, 1e4, 1e8]
CASES = {
    "worked": ([0.5, 0.5], [1.0, 0.0]),
    "large_rewards": ([0.25, 0.25, 0.5], [1e6, -1e6, 3.5e5]),
    "near_ties": ([0.3, 0.3, 0.4], [1.0, 1.0 - 1e-9, 0.999]),
    "tiny_ref": ([1e-300, 1e-200, 0.5, 0.5 - 1e-200], [3.0, 2.0, 0.0, -1.0]),
    "tiny_ref_best": ([1e-300, 1.0 - 1e-300], [700.0, 0.0]),
    "zeros": ([0.0, 0.25, 0.0, 0.75], [5.0, 1.0, -3.0, 0.2]),
    "negative_mean": ([0.7, 0.3], [-0.3, 0.7]),
    # the mode keeps ~all the mass and its log-ratio is ~1e-34: found by tutorial 09's
    # property (KL falls with beta) when u was centred on the best reward
    "tiny_alternative": ([1.0, 1e-33], [2.0, 3.0]),
    "tiny_alternatives_both_sides": ([1e-25, 1.0, 1e-25], [3.0, 2.0, -1.0]),
    "many": (
        list(np.random.default_rng(7).dirichlet(np.full(12, 0.3))),
        list(np.random.default_rng(8).normal(size=12) * 3),
    ),
}


@pytest.mark.parametrize(("case", "beta"), list(itertools.product(CASES, BETAS)))
def test_optimal_policy_against_mpmath(case, beta):
    ref, r = CASES[case]
    got = kp.optimal_policy(ref, r, beta)
    want = R.to_float(R.optimal_policy(ref, r, beta))
    assert np.all(np.isfinite(got))
    normal = want > 1e-290  # below that the float result is subnormal or zero
    assert np.all(R.rel_err(got[normal], want[normal]) < 2e-12), (got, want)
    assert np.all(got[~normal] <= 1e-290)
    assert np.all(got[np.asarray(ref) == 0] == 0)


@pytest.mark.parametrize("tiny", [1e-300, 1e-200, 1e-100, 1e-20])
@pytest.mark.parametrize("beta", [1e-3, 1e-2, 0.1])
def test_a_mode_with_a_tiny_reference_entry_is_exact_to_the_ulp(tiny, beta):
    """The best reward on a reference entry of 1e-300 takes nearly all the mass: its
    probability is a quotient, not exp of a log-ratio near 690 (which gave 1 - 2.4e-14
    where mpmath says 1 - 5e-135, numpy and torch alike)."""
    ref, r = [tiny, 1.0 - tiny], [1.0, 0.0]
    want = R.to_float(R.optimal_policy(ref, r, beta))  # mpmath, tests/_mpref/closed_form.py
    for got in (kp.optimal_policy(ref, r, beta), _torch_policy(ref, r, beta)):
        if got is None:
            continue
        k = int(np.argmax(want))
        assert abs(got[k] - want[k]) <= 2 * np.finfo(float).eps * want[k], (got, want)
        assert np.all(R.rel_err(got, want) < 2e-12), (got, want)


def _torch_policy(ref, r, beta):
    """The same problem through the array-API kernel (float64 tensors), when torch is there."""
    try:
        import torch
    except ImportError:
        return None
    t64 = torch.float64
    return kp.optimal_policy(torch.tensor(ref, dtype=t64), torch.tensor(r, dtype=t64), beta).numpy()


@pytest.mark.parametrize(("case", "beta"), list(itertools.product(CASES, BETAS)))
def test_soft_value_against_mpmath(case, beta):
    ref, r = CASES[case]
    got = kp.soft_value(ref, r, beta)
    want = R.soft_value(ref, r, beta)
    # relative 1e-12, with an absolute floor of a few ulp of the reward spread
    # (the condition number of V with respect to the rewards)
    spread = np.ptp(np.asarray(r)[np.asarray(ref) > 0])
    assert abs(got - float(want)) <= 1e-12 * abs(float(want)) + 8 * np.finfo(float).eps * spread


@pytest.mark.parametrize(("case", "beta"), list(itertools.product(CASES, BETAS)))
def test_optimal_kl_against_mpmath(case, beta):
    ref, r = CASES[case]
    got = kp.optimal_kl(ref, r, beta)
    want = float(R.optimal_kl(ref, r, beta))
    assert np.isfinite(got) and got >= 0
    assert abs(got - want) <= 1e-11 * want + 1e-300, (got, want)


def test_kl_divergence_against_mpmath():
    rng = np.random.default_rng(3)
    for _ in range(20):
        p = rng.dirichlet(np.full(7, 0.5))
        q = rng.dirichlet(np.full(7, 0.5))
        assert kp.kl_divergence(p, q) == pytest.approx(float(R.kl(p, q)), rel=1e-13)


@pytest.mark.parametrize("eps", [1e-3, 1e-6, 1e-9])
def test_kl_divergence_of_nearby_distributions_keeps_relative_precision(eps):
    # KL ~ eps^2 / 2 * chi^2: the naive sum p log(p/q) loses every digit here
    q = np.array([0.2, 0.3, 0.5])
    p = q + eps * np.array([1.0, -3.0, 2.0]) / 10
    want = float(R.kl(p, q))
    assert kp.kl_divergence(p, q) == pytest.approx(want, rel=1e-12)


def test_kl_divergence_with_tiny_entries():
    p = np.array([1e-300, 0.4, 0.6 - 1e-300])
    q = np.array([0.3, 1e-300, 0.7 - 1e-300])
    assert kp.kl_divergence(p, q) == pytest.approx(float(R.kl(p, q)), rel=1e-13)


def test_float32_in_float32_out():
    ref = np.array([0.5, 0.5], dtype=np.float32)
    r = np.array([1.0, 0.0], dtype=np.float32)
    pi = kp.optimal_policy(ref, r, 0.5)
    assert pi.dtype == np.float32
    assert pi[0] == pytest.approx(0.8807971, rel=1e-6)
    assert kp.soft_value(ref, r, 0.5).dtype == np.float32
    assert kp.kl_divergence(ref, ref).dtype == np.float32
    assert kp.optimal_policy([0.5, 0.5], [1, 0], 0.5).dtype == np.float64


# --------------------------------------------------------------------------- beta_for_kl


@pytest.mark.parametrize("kl", [1e-20, 1e-8, 1e-3, 0.1, 0.5, 0.69])
def test_beta_for_kl_round_trip(kl):
    ref, r = [0.5, 0.5], [1.0, 0.0]
    beta = kp.beta_for_kl(ref, r, kl)
    assert kp.optimal_kl(ref, r, beta) == pytest.approx(kl, rel=1e-12)


def test_beta_for_kl_batch_and_limits():
    rng = np.random.default_rng(11)
    ref = rng.dirichlet(np.ones(50), size=64)
    r = rng.normal(size=(64, 50))
    kmax = kp.max_kl(ref, r)
    targets = kmax * rng.uniform(0.01, 0.99, size=64)
    beta = kp.beta_for_kl(ref, r, targets)
    assert beta.shape == (64,)
    np.testing.assert_allclose(kp.optimal_kl(ref, r, beta[:, None]), targets, rtol=1e-11)
    assert kp.beta_for_kl(ref, r, 0.0)[0] == np.inf
    assert kp.beta_for_kl([0.5, 0.5], [1.0, 0.0], np.log(2)) == 0.0


def test_beta_for_kl_equals_one_row_calls():
    rng = np.random.default_rng(12)
    ref = rng.dirichlet(np.ones(6), size=5)
    r = rng.normal(size=(5, 6))
    b = kp.beta_for_kl(ref, r, 0.2)
    for i in range(5):
        assert kp.beta_for_kl(ref[i], r[i], 0.2) == pytest.approx(b[i], rel=1e-11)


def test_beta_for_kl_refuses_unreachable_target():
    with pytest.raises(
        ValueError, match=r"`kl` = 1 is above the largest KL reachable: 0.693147 nats"
    ):
        kp.beta_for_kl([0.5, 0.5], [1.0, 0.0], 1.0)
    with pytest.raises(ValueError, match=r"above the largest KL reachable for row \(1,\): 0 nats"):
        kp.beta_for_kl([[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [2.0, 2.0]], 0.1)


# --------------------------------------------------------------------------- frontier


def test_frontier_matches_pointwise_calls_and_slope_is_beta():
    ref = np.array([0.1, 0.2, 0.3, 0.4])
    r = np.array([1.0, 0.5, -0.2, 0.0])
    betas = np.geomspace(0.05, 20, 41)
    f = kp.frontier(ref, r, betas)
    np.testing.assert_allclose(f.kl, [kp.optimal_kl(ref, r, b) for b in betas], rtol=1e-14)
    np.testing.assert_allclose(f.soft_value, [kp.soft_value(ref, r, b) for b in betas], rtol=1e-14)
    # dE[r]/dKL = beta, checked with a centred difference in beta
    h = 1e-5
    for b in [0.1, 1.0, 5.0]:
        fr = kp.frontier(ref, r, [b * (1 - h), b * (1 + h)])
        slope = (fr.expected_reward[1] - fr.expected_reward[0]) / (fr.kl[1] - fr.kl[0])
        assert slope == pytest.approx(b, rel=1e-6)


def test_frontier_batch_shape():
    f = kp.frontier(np.full((3, 4), 0.25), np.arange(12.0).reshape(3, 4), [0.5, 1.0])
    assert f.kl.shape == (2, 3) and f.beta.shape == (2, 3)


# --------------------------------------------------------------------------- hypothesis properties


@st.composite
def problems(draw, max_v=8, batch=False):
    v = draw(st.integers(1, max_v))
    shape = (draw(st.integers(1, 3)), v) if batch else (v,)
    w = draw(hnp.arrays(np.float64, shape, elements=st.floats(0.0, 1.0)))
    w = np.where(w < 0.15, 0.0, w)  # zeros in the reference
    # keep at least one positive entry per row
    w[..., 0] = np.maximum(w[..., 0], 0.5)
    ref = w / w.sum(-1, keepdims=True)
    # subnormal rewards (< 2.2e-308) carry too few bits for any beta to resolve them
    r = draw(hnp.arrays(np.float64, shape, elements=st.floats(-50, 50, allow_subnormal=False)))
    beta = draw(st.floats(1e-3, 1e3))
    return ref, r, beta


@pytest.mark.slow
@given(problems(batch=True))
def test_rows_sum_to_one_and_batch_equals_rows(prob):
    ref, r, beta = prob
    pi = kp.optimal_policy(ref, r, beta)
    np.testing.assert_allclose(pi.sum(-1), 1.0, atol=1e-14)
    for i in range(ref.shape[0]):
        np.testing.assert_allclose(pi[i], kp.optimal_policy(ref[i], r[i], beta), rtol=1e-15, atol=0)
    np.testing.assert_allclose(kp.optimal_policy(ref.T, r.T, beta, axis=0), pi.T, rtol=1e-15)


@pytest.mark.slow
@given(problems(), st.floats(-1e3, 1e3))
def test_invariant_to_constant_reward_shift(prob, shift):
    ref, r, beta = prob
    a = kp.optimal_policy(ref, r, beta)
    b = kp.optimal_policy(ref, r + shift, beta)
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-300)
    assert kp.soft_value(ref, r + shift, beta) == pytest.approx(
        kp.soft_value(ref, r, beta) + shift, rel=1e-9, abs=1e-9 * (abs(shift) + np.ptp(r))
    )


def test_kl_falls_with_beta_when_a_tiny_alternative_gains_weight():
    ref, r = [1.0, 1e-33], [2.0, 3.0]
    b = 1.333521432163324
    assert kp.optimal_kl(ref, r, 2 * b) < kp.optimal_kl(ref, r, b)
    assert kp.optimal_kl(ref, r, 2 * b) == pytest.approx(
        float(R.optimal_kl(ref, r, 2 * b)), rel=1e-12
    )


@pytest.mark.slow
@given(problems(), st.floats(1.01, 10.0))
def test_kl_and_reward_decrease_in_beta(prob, factor):
    ref, r, beta = prob
    k1, k2 = kp.optimal_kl(ref, r, beta), kp.optimal_kl(ref, r, beta * factor)
    e1 = kp.expected_reward(kp.optimal_policy(ref, r, beta), r)
    e2 = kp.expected_reward(kp.optimal_policy(ref, r, beta * factor), r)
    assert k2 <= k1 * (1 + 1e-12) + 1e-300
    assert e2 <= e1 + 1e-12 * (1 + np.abs(r).max())


@pytest.mark.slow
@given(problems(), st.data())
def test_soft_value_is_the_maximum_and_the_gap_is_a_kl(prob, data):
    ref, r, beta = prob
    v = ref.shape[0]
    w = data.draw(hnp.arrays(np.float64, (v,), elements=st.floats(0.0, 1.0)))
    w = np.where(ref > 0, w, 0.0)
    assume(w.sum() > 1e-3)
    pi = w / w.sum()
    star = kp.optimal_policy(ref, r, beta)
    assume(np.all(star[ref > 0] > 0))  # KL(pi || pi*) is only finite in floats without underflow
    sv = kp.soft_value(ref, r, beta)
    j = kp.objective(pi, ref, r, beta)
    scale = 1e-9 * (1 + np.abs(r).max())
    assert j <= sv + scale
    # J(pi) = V - beta KL(pi || pi*)
    assert j == pytest.approx(sv - beta * kp.kl_divergence(pi, star), abs=scale)
    assert kp.objective(star, ref, r, beta) == pytest.approx(sv, abs=scale)


@pytest.mark.slow
@given(problems(), st.floats(0.05, 0.95))
def test_beta_for_kl_round_trips(prob, frac):
    ref, r, _ = prob
    kmax = kp.max_kl(ref, r)
    assume(kmax > 1e-6)
    target = frac * kmax
    beta = kp.beta_for_kl(ref, r, target)
    assert kp.optimal_kl(ref, r, beta) == pytest.approx(target, rel=1e-10)


def test_kl_divergence_properties():
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.ones(5), size=10)
    q = rng.dirichlet(np.ones(5), size=10)
    kl = kp.kl_divergence(p, q)
    assert kl.shape == (10,) and np.all(kl > 0)
    np.testing.assert_array_equal(kp.kl_divergence(p, p), 0.0)
    np.testing.assert_allclose(kp.kl_divergence(p.T, q.T, axis=0), kl, rtol=1e-15)
    # Pinsker: TV <= sqrt(KL / 2)
    assert np.all(kp.total_variation(p, q) <= np.sqrt(kl / 2))


def test_max_kl_with_a_subnormal_best_mass():
    # -log(2.2e-309): 1 - rest rounds to 0 in floats, so the mass itself must be used
    assert kp.max_kl([0, 0, 1, 2.2e-309], [0, 0, 0, 1]) == pytest.approx(
        -np.log(2.2e-309), rel=1e-12
    )
    assert kp.optimal_kl([0, 0, 1, 2.2e-309], [0, 0, 0, 1], 0.0) == pytest.approx(
        710.7103363747958, rel=1e-12
    )


def test_beta_for_kl_crosses_a_plateau_of_the_kl():
    # rewards 1e-290 apart: the KL rises to log(3/2) at beta ~ 1, stays flat down to
    # beta ~ 1e-289, then rises again; the target sits on the second rise
    ref, r = np.full(3, 1 / 3), np.array([1e-290, 0.0, -1.0])
    target = 0.5 * kp.max_kl(ref, r)
    beta = kp.beta_for_kl(ref, r, target)
    assert 1e-292 < beta < 1e-289
    assert kp.optimal_kl(ref, r, beta) == pytest.approx(target, rel=1e-12)


def test_beta_for_kl_that_cannot_converge_says_so():
    with pytest.raises(RuntimeError, match=r"beta_for_kl did not converge in 2 iterations"):
        kp.beta_for_kl(np.full(3, 1 / 3), [1e-290, 0.0, -1.0], 0.5, max_iter=2)


@st.composite
def lopsided_problems(draw):
    """A dominant outcome and tiny alternatives: the KL of pi* can be 1e-40."""
    v = draw(st.integers(2, 5))
    tiny = draw(st.lists(st.floats(1e-40, 1e-12), min_size=v - 1, max_size=v - 1))
    ref = np.array([1.0 - sum(tiny), *tiny])
    r = np.array(draw(st.lists(st.floats(-5, 5, allow_subnormal=False), min_size=v, max_size=v)))
    return ref, r, draw(st.floats(0.05, 50.0))


@pytest.mark.slow
@settings(max_examples=40)
@given(lopsided_problems())
def test_optimal_kl_of_a_lopsided_reference_against_mpmath(prob):
    ref, r, beta = prob
    want = float(R.optimal_kl(ref, r, beta))
    got = kp.optimal_kl(ref, r, beta)
    assert abs(got - want) <= 1e-11 * want + 1e-300, (got, want)
    assert kp.optimal_kl(ref, r, 2 * beta) <= got * (1 + 1e-11) + 1e-300


def test_optimal_kl_at_a_subnormal_beta_is_finite():
    # 1/beta overflows for beta = 1e-310: the mode-centred log-ratio divides by beta instead
    ref, r = np.full(3, 1 / 3), np.array([0.0, -1.0, -3e-308])
    kl = kp.optimal_kl(ref, r, 1e-310)
    assert np.isfinite(kl) and 0 < kl <= kp.max_kl(ref, r) * (1 + 1e-12)
