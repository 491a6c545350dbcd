"""Tests for klpolicy.estimators: values, exact moments, Schulman's table, gradients, fixed points.

Reference values come from mpmath (tests/_mpref: 50 digits, set by the conftest fixture,
rows normalised in mpmath): the per-sample formulas are evaluated directly on the exact
log-ratio, and moments are brute-force sums over the outcomes; the recipe sits next to
each test.
"""

import math
import re
import warnings

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import klpolicy
from klpolicy import estimators as E

from .. import _mpref as R

NAMES = ("k1", "k2", "k3", "abs")


# ---------------------------------------------------------------------------
# per-sample values
# ---------------------------------------------------------------------------

FUNCS = {"k1": E.k1, "k2": E.k2, "k3": E.k3, "abs": E.abs_kl}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("p", "q"), [(0.5, 0.25), (0.25, 0.5), (0.9, 0.9), (1e-3, 0.7), (0.6, 1e-8)]
)
def test_per_sample_against_mpmath(name, p, q):
    # mpmath: ell = log(p) - log(q) at 50 digits, then the defining formula
    ell = mp.log(mp.mpf(p)) - mp.log(mp.mpf(q))
    got = FUNCS[name](math.log(p), math.log(q))
    R.assert_mp_close(got, R.k(name, ell), rtol=1e-13, atol=1e-300)


def test_hand_values():
    lp, lq = np.log([0.5, 0.25]), np.log([0.25, 0.5])
    np.testing.assert_allclose(E.k1(lp, lq), [math.log(2), -math.log(2)], rtol=1e-15)
    np.testing.assert_allclose(E.k2(lp, lq), [math.log(2) ** 2 / 2] * 2, rtol=1e-15)
    # k3 = q/p - 1 - log(q/p): 1/2 - 1 + log 2 and 2 - 1 - log 2
    np.testing.assert_allclose(E.k3(lp, lq), [math.log(2) - 0.5, 1 - math.log(2)], rtol=1e-15)
    np.testing.assert_allclose(E.abs_kl(lp, lq), [math.log(2)] * 2, rtol=1e-15)


@given(st.floats(-30, 30, allow_nan=False), st.floats(-30, 30, allow_nan=False))
def test_k3_exact_and_never_negative(logp, logq):
    # mpmath: exp(x) - 1 - x with x = logq - logp taken exactly from the two doubles
    got = float(E.k3(logp, logq))
    # (for |x| < 0.1 the Taylor series sum_{k>=2} x^k/k!, which has no cancellation)
    x = mp.mpf(logq) - mp.mpf(logp)
    ref = sum(x**k / mp.factorial(k) for k in range(2, 40)) if abs(x) < 0.1 else mp.exp(x) - 1 - x
    assert got >= 0
    R.assert_mp_close(got, ref, rtol=1e-13, atol=1e-300)


def test_k3_near_zero_keeps_relative_precision():
    # exp(x) - 1 - x at x = 1e-9 is 5.0000000016666667e-19; the naive form gives 8.3e-17
    R.assert_mp_close(E.k3(-1e-9, 0.0), mp.mpf("5.000000001666666670833333e-19"), rtol=1e-15)
    assert E.k3(np.float32(-1e-4), np.float32(0.0)) > 0
    assert math.exp(1e-9) - 1 - 1e-9 > 100 * float(E.k3(-1e-9, 0.0))  # what we avoid


def test_dtypes_shapes_and_infinities():
    lp = np.log(np.array([[0.5, 0.2]], dtype=np.float32))
    lq = np.log(np.array([0.25, 0.4], dtype=np.float32))
    for f in FUNCS.values():
        out = f(lp, lq)
        assert out.dtype == np.float32 and out.shape == (1, 2)
    assert isinstance(E.k1(-1.0, -2.0), float | np.floating)
    for name in ("k1", "k2", "k3", "abs"):
        assert FUNCS[name](-1.0, -np.inf) == np.inf
    # k3 overflows to inf only where the true value exceeds the float range
    assert E.k3(-800.0, 0.0) == np.inf
    R.assert_mp_close(E.k3(-700.0, 0.0), mp.exp(700) - 1 - 700, rtol=1e-13)


def test_clipping_mirrors_verl_and_has_the_documented_effect():
    lp, lq = np.array([-30.0, -1.0]), np.array([0.0, -1.5])
    raw = E.k3(lp, lq)
    clipped = E.k3(lp, lq, clip=10.0, log_ratio_clip=20.0)
    assert clipped[0] == 10.0  # exp(20) - 1 - 20 is then clamped at 10
    assert clipped[1] == raw[1]
    R.assert_mp_close(E.k3(lp, lq, log_ratio_clip=20.0)[0], mp.exp(20) - 21, rtol=1e-15)
    np.testing.assert_array_equal(E.k1([-5.0, 0.0], [0.0, -5.0], clip=2.0), [-2.0, 2.0])


# ---------------------------------------------------------------------------
# full KL over a vocabulary
# ---------------------------------------------------------------------------


def test_full_kl_matches_kl_divergence_and_mpmath(rng):
    p = rng.dirichlet(np.ones(7), size=(3, 2))
    q = rng.dirichlet(np.ones(7), size=(3, 2))
    got = E.full_kl(np.log(p), np.log(q))
    assert got.shape == (3, 2)
    np.testing.assert_allclose(got, klpolicy.kl_divergence(p, q), rtol=1e-13)
    R.assert_mp_close(
        E.full_kl(np.log(p[0, 0]), np.log(q[0, 0])), R.kl(p[0, 0], q[0, 0]), rtol=1e-13
    )
    # axis, zeros and support
    np.testing.assert_allclose(E.full_kl(np.log(p[0]).T, np.log(q[0]).T, axis=0), got[0])
    with np.errstate(divide="ignore"):
        assert E.full_kl(np.log([0.5, 0.5, 0.0]), np.log([0.25, 0.5, 0.25])) > 0
        assert E.full_kl(np.log([0.5, 0.5]), np.log([1.0, 0.0])) == np.inf


# ---------------------------------------------------------------------------
# exact moments and bias
# ---------------------------------------------------------------------------

PROBLEMS = [
    ([0.5, 0.5], [0.25, 0.75]),
    ([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]),
    ([0.7, 0.3, 0.0], [0.2, 0.3, 0.5]),  # q has mass off p's support
    ([0.2500001, 0.7499999], [0.25, 0.75]),  # nearly equal
    ([0.98, 0.01, 0.01], [1e-6, 0.5, 0.499999]),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("p", "q"), PROBLEMS)
def test_moments_against_brute_force(name, p, q):
    # mpmath: sum_x p(x) k(x) and sum_x p(x) (k(x) - mean)^2 over the outcomes
    mean, var = E.moments(p, q, name)
    ref_mean, ref_var = R.estimator_moments(p, q, name)
    R.assert_mp_close(mean, ref_mean, rtol=1e-12)
    R.assert_mp_close(var, ref_var, rtol=1e-9)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("p", "q"), PROBLEMS)
def test_bias_against_brute_force(name, p, q):
    # mpmath: bias = sum p k - sum p log(p/q); at 50 digits the difference is exact
    ref_mean, _ = R.estimator_moments(p, q, name)
    ref = ref_mean - R.kl(p, q)
    got = E.bias(p, q, name)
    R.assert_mp_close(got, ref, rtol=1e-8, atol=1e-20)


def test_unbiasedness_of_k1_and_k3(rng):
    for _ in range(50):
        p = rng.dirichlet(np.ones(6) * 0.5, size=4)
        q = rng.dirichlet(np.ones(6) * 0.5, size=4)
        kl = klpolicy.kl_divergence(p, q)
        for name in ("k1", "k3"):
            assert np.all(E.bias(p, q, name) == 0)
            np.testing.assert_allclose(E.moments(p, q, name)[0], kl, rtol=1e-12)
        assert np.all(E.bias(p, q, "abs") >= 0)
    # k3 is biased by -q(p = 0) when q has mass outside p's support
    R.assert_mp_close(E.bias([0.7, 0.3, 0.0], [0.2, 0.3, 0.5], "k3"), -0.5, rtol=1e-15)


def test_moments_batch_axis_and_infinite_kl():
    p = np.array([[0.5, 0.5], [0.9, 0.1]])
    q = np.array([0.25, 0.75])
    mean, _ = E.moments(p.T, q[:, None], "k3", axis=0)
    assert mean.shape == (2,)
    np.testing.assert_allclose(mean, [E.moments(r, q, "k3")[0] for r in p], rtol=1e-15)
    assert E.moments([0.5, 0.5], [1.0, 0.0], "k2") == (np.inf, np.inf)
    assert E.bias([0.5, 0.5], [1.0, 0.0], "k2") == 0
    # a clamp makes the estimator finite; its bias against an infinite KL is -inf
    assert np.isfinite(E.moments([0.5, 0.5], [1.0, 0.0], "k3", clip=10)[0])
    assert E.bias([0.5, 0.5], [1.0, 0.0], "k3", clip=10) == -np.inf


def test_clipped_moments_and_bias():
    # p = (0.9, 0.1), q = (0.02, 0.98): k3 at x=1 is 9.8 - 1 - log 9.8 = 6.517..., clamped to 2
    p, q = [0.9, 0.1], [0.02, 0.98]
    lr = [mp.log(mp.mpf(a) / b) for a, b in zip(p, q, strict=True)]
    ks = [min(mp.exp(-x) - 1 + x, 2) for x in lr]
    mean = p[0] * ks[0] + p[1] * ks[1]
    R.assert_mp_close(E.moments(p, q, "k3", clip=2.0)[0], mean, rtol=1e-12)
    R.assert_mp_close(E.bias(p, q, "k3", clip=2.0), mean - R.kl(p, q), rtol=1e-12)
    assert E.bias(p, q, "k3", clip=2.0) < 0


def test_sample_estimates_scatter_around_the_exact_moments():
    p, q = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.4, 0.3, 0.2, 0.1])
    n = 40_000
    for name in NAMES:
        est = E.sample_estimates(p, q, name, n, np.random.default_rng(7))
        mean, var = E.moments(p, q, name)
        assert est.shape == (n,)
        # 5 standard errors of the mean, from the exact variance
        assert abs(est.mean() - mean) < 5 * math.sqrt(var / n)
    batch = E.sample_estimates(np.stack([p, q]), q, "k3", 5, 3)
    assert batch.shape == (2, 5)
    np.testing.assert_array_equal(batch[1], 0.0)  # p == q: every k3 estimate is 0
    again = E.sample_estimates(np.stack([p, q]), q, "k3", 5, 3)
    np.testing.assert_array_equal(batch, again)


# ---------------------------------------------------------------------------
# off-policy
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("weighted", [True, False])
def test_off_policy_against_brute_force(name, weighted):
    # mpmath: E_mu[w k] and Var_mu[w k], w = p/mu (or 1), summed over the outcomes
    p, q, mu = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6], [0.3, 0.3, 0.4]
    mean, var = E.off_policy_moments(p, q, mu, name, weighted=weighted)
    ref_mean, ref_var = R.estimator_moments(p, q, name, weighted=bool(weighted), sampler=mu)
    R.assert_mp_close(mean, ref_mean, rtol=1e-12)
    R.assert_mp_close(var, ref_var, rtol=1e-11)
    bias_ref = ref_mean - R.kl(p, q)
    R.assert_mp_close(
        E.off_policy_bias(p, q, mu, name, weighted=weighted), bias_ref, rtol=1e-11, atol=1e-30
    )


def test_off_policy_identities(rng):
    for _ in range(20):
        p, q, mu = rng.dirichlet(np.ones(5), size=3)
        for name in ("k1", "k3"):
            R.assert_mp_close(E.off_policy_bias(p, q, mu, name), 0.0, rtol=1e-12, atol=1e-15)
        # unweighted k1: KL(mu||q) - KL(mu||p) - KL(p||q)
        kl = klpolicy.kl_divergence
        ident = kl(mu, q) - kl(mu, p) - kl(p, q)
        R.assert_mp_close(
            E.off_policy_bias(p, q, mu, "k1", weighted=False), ident, rtol=1e-12, atol=1e-13
        )
    # mu == p: the on-policy moments
    p, q = [0.6, 0.4], [0.5, 0.5]
    for name in NAMES:
        np.testing.assert_allclose(
            E.off_policy_moments(p, q, p, name, weighted=False), E.moments(p, q, name), rtol=1e-14
        )


# ---------------------------------------------------------------------------
# Schulman's Gaussian table
# ---------------------------------------------------------------------------


def _discretised_gaussians(mu, h=0.01, half_width=16.0):
    x = np.arange(-half_width, half_width + h / 2, h)
    p = np.exp(-0.5 * (x - mu) ** 2)
    q = np.exp(-0.5 * x**2)
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize("mu", [0.1, 1.0, 2.0])
@pytest.mark.parametrize("name", NAMES)
def test_gaussian_closed_forms_match_fine_discretisation(mu, name):
    # A uniform grid sums Gaussians with spectrally small error, so the discrete
    # moments reproduce the integrals to rounding.
    # |ell| has a kink, where the grid sum is only second-order accurate (h^2 = 1e-4).
    p, q = _discretised_gaussians(mu)
    mean, var = E.moments(p, q, name)
    cmean, cvar = E.gaussian_moments(mu, name)
    rtol = 1e-4 if name == "abs" else 1e-9
    R.assert_mp_close(mean, cmean, rtol=rtol)
    R.assert_mp_close(var, cvar, rtol=10 * rtol)


@pytest.mark.slow
def test_gaussian_closed_forms_against_mpmath_quadrature():
    # mpmath: E and Var of k(ell), ell = mu x - mu^2/2, x ~ N(mu, 1), by quadrature
    mu = mp.mpf(1)
    dens = lambda x: mp.exp(-((x - mu) ** 2) / 2) / mp.sqrt(2 * mp.pi)  # noqa: E731
    for name in NAMES:
        f = lambda x, name=name: R.k(name, mu * x - mu**2 / 2)  # noqa: E731
        pts = [-mp.inf, mu / 2, mp.inf]  # split at the kink of |ell| (ell = 0 at x = mu/2)
        m = mp.quad(lambda x, f=f: dens(x) * f(x), pts)
        v = mp.quad(lambda x, f=f, m=m: dens(x) * (f(x) - m) ** 2, pts)
        cm, cv = E.gaussian_moments(1.0, name)
        R.assert_mp_close(cm, m, rtol=1e-13)
        R.assert_mp_close(cv, v, rtol=1e-13)


def test_schulman_table_reproduced():
    t = E.schulman_table()
    assert t.estimators == ("k1", "k2", "k3")
    np.testing.assert_allclose(t.true_kl, [0.005, 0.5], rtol=1e-15)
    # closed forms: k2 bias/true = mu^2/4; stdev = mu for k1,
    # sqrt(mu^4/2 + mu^6/4)/(mu^2/2) for k2, sqrt(e^{mu^2} - 1 - mu^2)/(mu^2/2) for k3
    for i, mu in enumerate((0.1, 1.0)):
        np.testing.assert_allclose(t.bias_over_true[i], [0, mu**2 / 4, 0], atol=1e-15)
        s = [mu, math.sqrt(mu**4 / 2 + mu**6 / 4), math.sqrt(math.expm1(mu**2) - mu**2)]
        np.testing.assert_allclose(t.stdev_over_true[i], np.array(s) / (mu**2 / 2), rtol=1e-12)
    # the published (Monte Carlo, rounded) entries agree to their last printed digit
    for i, mu in enumerate((0.1, 1.0)):
        for j, name in enumerate(t.estimators):
            b, s = E.SCHULMAN_2020_TABLE[mu][name]
            for ours, theirs in ((t.bias_over_true[i, j], b), (t.stdev_over_true[i, j], s)):
                digits = len(repr(theirs).split(".")[1]) if theirs % 1 else 0
                assert abs(ours - theirs) <= 0.5 * 10.0**-digits + 1e-12, (mu, name)


def test_schulman_table_by_sampling():
    rng = np.random.default_rng(11)
    n = 200_000
    for mu in (0.1, 1.0):
        x = rng.normal(mu, 1.0, n)
        logp, logq = -0.5 * (x - mu) ** 2, -0.5 * x**2
        for name in ("k1", "k2", "k3"):
            est = FUNCS[name](logp, logq)
            mean, var = E.gaussian_moments(mu, name)
            assert abs(est.mean() - mean) < 5 * math.sqrt(var / n)


# ---------------------------------------------------------------------------
# expected gradients
# ---------------------------------------------------------------------------

PLACEMENTS = ("reward", "loss")


def _torch_expected_gradient(logits, ref, reward, beta, name, placement):
    torch = pytest.importorskip("torch")
    th = torch.tensor(logits, dtype=torch.float64, requires_grad=True)
    logpi = torch.log_softmax(th, -1)
    pi = logpi.exp().detach()
    logref = torch.log(torch.tensor(ref, dtype=torch.float64))
    r = torch.tensor(reward, dtype=torch.float64)
    lr = logref - logpi  # log(ref/pi), as libraries write it
    k = {
        "k1": -lr,
        "k2": 0.5 * lr**2,
        "k3": torch.exp(lr) - 1 - lr,
        "abs": lr.abs(),
    }[name]
    if placement == "reward":  # REINFORCE with the estimate in the reward (stop-gradient)
        surrogate = (pi * (r - beta * k).detach() * logpi).sum()
    else:  # reward by REINFORCE, beta * k in the loss, differentiated through logpi
        surrogate = (pi * (r * logpi - beta * k)).sum()
    surrogate.backward()
    return th.grad.numpy()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_expected_gradient_matches_torch_autograd(name, placement, rng):
    for _ in range(5):
        logits = rng.normal(size=5)
        ref = rng.dirichlet(np.ones(5))
        reward = rng.normal(size=5)
        beta = float(rng.uniform(0.05, 3))
        got = E.expected_gradient(logits, ref, reward, beta, estimator=name, placement=placement)
        want = _torch_expected_gradient(logits, ref, reward, beta, name, placement)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        assert abs(got.sum()) < 1e-14


def _objective(logits, ref, reward, beta):
    pi = np.exp(logits - np.logaddexp.reduce(logits))
    return pi @ reward - beta * klpolicy.kl_divergence(pi / pi.sum(), ref)


def _forward_objective(logits, ref, reward, beta):
    pi = np.exp(logits - np.logaddexp.reduce(logits))
    return pi @ reward - beta * klpolicy.kl_divergence(ref, pi / pi.sum())


def _finite_difference(f, x, h=1e-5):
    g = np.empty_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = h
        g[j] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def test_which_placements_follow_which_gradient(rng):
    for _ in range(10):
        logits, reward = rng.normal(size=4), rng.normal(size=4)
        ref, beta = rng.dirichlet(np.ones(4)), float(rng.uniform(0.1, 2))
        args = (logits, ref, reward, beta)
        true = E.objective_gradient(*args)
        fd = _finite_difference(lambda th, a=args: _objective(th, *a[1:]), logits)
        np.testing.assert_allclose(true, fd, atol=1e-8)
        for name, place in (("k1", "reward"), ("k2", "loss")):
            g = E.expected_gradient(*args, estimator=name, placement=place)
            np.testing.assert_allclose(g, true, rtol=1e-12, atol=1e-15)
        # k1 in the loss: no KL gradient at all
        g = E.expected_gradient(*args, estimator="k1", placement="loss")
        np.testing.assert_allclose(g, E.objective_gradient(logits, ref, reward, 0.0), atol=1e-15)
        # k3 in the loss: the gradient of E[r] - beta KL(ref || pi)
        g = E.expected_gradient(*args, estimator="k3", placement="loss")
        fd = _finite_difference(lambda th, a=args: _forward_objective(th, *a[1:]), logits)
        np.testing.assert_allclose(g, fd, atol=1e-8)
        assert np.abs(g - true).max() > 1e-6


def test_expected_gradient_off_support_and_batch():
    ref = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    logits = np.array([[0.3, -0.1, -np.inf], [0.0, 0.1, 0.2]])
    g = E.expected_gradient(
        logits, ref, [1.0, 0.0, 2.0], [[0.5], [1.0]], estimator="k3", placement="reward"
    )
    assert g.shape == (2, 3) and g[0, 2] == 0 and np.isfinite(g).all()
    row = E.expected_gradient(
        logits[1], ref[1], [1.0, 0.0, 2.0], 1.0, estimator="k3", placement="reward"
    )
    np.testing.assert_allclose(g[1], row, rtol=1e-15)
    gt = E.expected_gradient(
        logits.T,
        ref.T,
        np.array([[1.0, 0.0, 2.0]]).T,
        [[0.5, 1.0]],
        estimator="k3",
        placement="reward",
        axis=0,
    )
    np.testing.assert_allclose(gt.T, g, rtol=1e-15)


# ---------------------------------------------------------------------------
# fixed points
# ---------------------------------------------------------------------------

SOLVED = [("k1", "reward"), ("k2", "loss"), ("k1", "loss"), ("k3", "loss")]


@pytest.mark.parametrize(("name", "place"), SOLVED)
def test_fixed_points_are_stationary(name, place, rng):
    for _ in range(10):
        ref = rng.dirichlet(np.ones(5))
        reward = rng.normal(size=5)
        beta = float(np.exp(rng.uniform(-1, 2)))
        pi = E.fixed_point(ref, reward, beta, estimator=name, placement=place)
        np.testing.assert_allclose(pi.sum(), 1.0, rtol=1e-14)
        with np.errstate(divide="ignore"):
            g = E.expected_gradient(np.log(pi), ref, reward, beta, estimator=name, placement=place)
        assert np.abs(g).max() < 1e-13 * max(1.0, np.ptp(reward), beta)
        star = klpolicy.optimal_policy(ref, reward, beta)
        if (name, place) in (("k1", "reward"), ("k2", "loss")):
            np.testing.assert_allclose(pi, star, rtol=1e-14)
        else:  # a different policy whenever beta > 0 and the reward is not constant
            # (k3 in the loss agrees with pi* to first order in 1/beta: the gap is O(1/beta^2))
            assert np.abs(pi - star).max() > 1e-5


def test_k3_in_loss_fixed_point_against_mpmath():
    # ref (1/2, 1/2), r = (1, 0), beta = 1/2: pi_j = ref_j / (u + d_j), d = (0, 2),
    # 1/(2u) + 1/(2(u + 2)) = 1  <=>  u^2 + u - 1 = 0  <=>  u = (sqrt 5 - 1)/2
    u = (mp.sqrt(5) - 1) / 2
    pi = E.fixed_point([0.5, 0.5], [1.0, 0.0], 0.5, estimator="k3", placement="loss")
    R.assert_mp_close(pi[0], 1 / (2 * u), rtol=1e-15)
    R.assert_mp_close(pi[1], 1 / (2 * (u + 2)), rtol=1e-14)
    # stationarity in closed form: pi_j (r_j - m) = beta (pi_j - ref_j)
    m = pi @ [1.0, 0.0]
    np.testing.assert_allclose(pi * ([1.0, 0.0] - m), 0.5 * (pi - 0.5), atol=1e-16)


def test_k3_in_loss_fixed_point_maximises_the_forward_objective(rng):
    from scipy import optimize

    ref, reward, beta = rng.dirichlet(np.ones(4)), rng.normal(size=4), 0.7
    pi = E.fixed_point(ref, reward, beta, estimator="k3", placement="loss")
    best = optimize.minimize(
        lambda th: -_forward_objective(th, ref, reward, beta), np.log(ref), tol=1e-14
    ).x
    pi_num = np.exp(best - np.logaddexp.reduce(best))
    np.testing.assert_allclose(pi, pi_num, atol=1e-6)


def test_fixed_point_limits_batch_and_extremes():
    ref, r = np.array([0.25, 0.25, 0.5]), np.array([1.0, 1.0, 0.0])
    for name, place in SOLVED:
        f0 = E.fixed_point(ref, r, 0.0, estimator=name, placement=place)
        np.testing.assert_allclose(f0, [0.5, 0.5, 0.0], rtol=1e-15)
    for name, place in (("k1", "reward"), ("k2", "loss"), ("k3", "loss")):
        finf = E.fixed_point(ref, r, np.inf, estimator=name, placement=place)
        np.testing.assert_allclose(finf, ref, rtol=1e-15)
    betas = np.array([[0.1], [1.0], [10.0]])
    batch = E.fixed_point(ref, r, betas, estimator="k3", placement="loss")
    assert batch.shape == (3, 3)
    for i, b in enumerate(betas[:, 0]):
        np.testing.assert_allclose(
            batch[i], E.fixed_point(ref, r, b, estimator="k3", placement="loss"), rtol=1e-15
        )
    # the forward-KL optimum keeps more mass on the bad response than pi*
    assert batch[0, 2] > klpolicy.optimal_policy(ref, r, 0.1)[2]
    # tiny beta and a tiny reference mass on the best response stay exact
    tiny = E.fixed_point([1e-12, 1 - 1e-12], [1.0, 0.0], 1e-3, estimator="k3", placement="loss")
    g = E.expected_gradient(
        np.log(tiny), [1e-12, 1 - 1e-12], [1.0, 0.0], 1e-3, estimator="k3", placement="loss"
    )
    assert np.abs(g).max() < 1e-15 and np.isfinite(tiny).all()
    # off the reference's support stays zero; float32 stays float32
    z = E.fixed_point(
        np.float32([0.5, 0.5, 0.0]),
        np.float32([0, 1, 5]),
        np.float32(1.0),
        estimator="k3",
        placement="loss",
    )
    assert z.dtype == np.float32 and z[2] == 0


@pytest.mark.slow
@pytest.mark.parametrize(("name", "place"), [("k1", "reward"), ("k2", "loss"), ("k3", "loss")])
def test_training_converges_to_the_fixed_point(name, place):
    ref, r, beta = np.array([0.2, 0.3, 0.5]), np.array([1.0, 0.5, 0.0]), 0.5
    flow = E.gradient_flow(
        ref, r, beta, estimator=name, placement=place, steps=3000, lr=2.0, record_every=1000
    )
    target = E.fixed_point(ref, r, beta, estimator=name, placement=place)
    np.testing.assert_allclose(flow.policy, target, atol=1e-10)
    assert flow.history.shape == (4, 3) and list(flow.steps) == [0, 1000, 2000, 3000]
    np.testing.assert_allclose(flow.history[0], ref)


def test_k1_in_loss_training_goes_greedy():
    flow = E.gradient_flow(
        [0.5, 0.5],
        [1.0, 0.0],
        5.0,
        estimator="k1",
        placement="loss",
        steps=2000,
        lr=1.0,
        record_every=100,
    )
    assert np.all(np.diff(flow.history[:, 1]) < 0)  # the bad response only loses mass
    assert flow.policy[1] < 0.01  # far below pi*_5 = 0.45


@pytest.mark.slow
@pytest.mark.parametrize("name", ["k2", "k3"])
def test_k2_k3_in_reward_collapse_instead_of_converging(name):
    ref, r, beta = [0.5, 0.5], [1.0, 0.0], 2.0
    with pytest.raises(ValueError, match=re.escape(f"{name!r} in the reward has no fixed point")):
        E.fixed_point(ref, r, beta, estimator=name, placement="reward")
    flow = E.gradient_flow(
        ref, r, beta, estimator=name, placement="reward", steps=4000, record_every=500
    )
    bad = flow.history[:, 1]
    assert np.all(np.diff(bad) <= 0)
    # below pi* (0.3775) and still falling at the end (k3: already at 0): no interior fixed point
    assert bad[-1] < 0.05 < klpolicy.optimal_policy(ref, r, beta)[1]
    assert bad[-1] < bad[-2] or bad[-1] == 0
    # at beta = 0 every placement is plain reward maximisation
    np.testing.assert_array_equal(
        E.fixed_point(ref, r, 0.0, estimator=name, placement="reward"), [1.0, 0.0]
    )


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

P, Q = [0.5, 0.5], [0.25, 0.75]
G = dict(estimator="k3", placement="loss")

BAD = [
    (lambda: E.moments(P, Q, "k4"), "`estimator` must be one of 'k1', 'k2', 'k3', 'abs'; got 'k4'"),
    (lambda: E.bias(P, Q, None), "`estimator` must be one of 'k1', 'k2', 'k3', 'abs'; got None"),
    (
        lambda: E.expected_gradient([0.0, 0.0], P, [1, 0], 1.0, estimator="k3", placement="kl"),
        "`placement` must be one of 'reward', 'loss'; got 'kl'",
    ),
    (lambda: E.k3([-1.0, np.nan], 0.0), "`logp` must not contain NaN; found nan at index (1,)"),
    (lambda: E.k3(-np.inf, 0.0), "`logp` must be finite; found -inf"),
    (lambda: E.k1(0.0, [0.0, np.inf]), "`logq` must not be +inf; found inf at index (1,)"),
    (
        lambda: E.k2([0.0, 0.0], [0.0, 0.0, 0.0]),
        "the shapes of `logp` (2,) and `logq` (3,) do not broadcast",
    ),
    (lambda: E.k3(0.0, 0.0, clip=-1.0), "`clip` must be a positive number; got -1.0"),
    (lambda: E.k3(0.0, 0.0, log_ratio_clip=0), "`log_ratio_clip` must be a positive number; got 0"),
    (lambda: E.k1("a", 0.0), "`logp` must be an array of real numbers; got 'a'"),
    (
        lambda: E.full_kl(np.log([0.5, 0.6]), np.log(Q)),
        "`logp_all` must be normalised along axis -1 (logsumexp 0); its logsumexp is 0.0953102",
    ),
    (
        lambda: E.full_kl(np.log(P), np.log([0.25, 0.5, 0.25])),
        "`logq_all` must have the same size as `logp_all` along the probability axis; got 3 and 2",
    ),
    (
        lambda: E.moments([0.5, -0.5, 1.0], [0.2, 0.3, 0.5], "k1"),
        "`p` must be non-negative; found -0.5 at index (1,)",
    ),
    (
        lambda: E.moments(P, [0.3, 0.3], "k1"),
        "`q` must sum to 1 along axis -1; it sums to 0.6 (tolerance 1.5e-08); "
        "klpolicy never renormalises silently",
    ),
    (lambda: E.sample_estimates(P, Q, "k1", 0, 1), "`n` must be an integer >= 1; got 0"),
    (
        lambda: E.sample_estimates(P, Q, "k1", 3, None),
        "`rng` must be a numpy.random.Generator or an int seed; got None",
    ),
    (
        lambda: E.off_policy_moments(P, Q, [0.5, 0.6], "k1"),
        "`mu` must sum to 1 along axis -1; it sums to 1.1 (tolerance 1.5e-08); "
        "klpolicy never renormalises silently",
    ),
    (lambda: E.gaussian_moments(np.inf, "k1"), "`mu` must be finite; got inf"),
    (
        lambda: E.schulman_table([0.0, 1.0]),
        "`mus` must be a 1-D array of finite non-zero numbers; got [0.0, 1.0]",
    ),
    (
        lambda: E.expected_gradient([0.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1, 0, 0], 1.0, **G),
        "`logits` put probability where `ref` is zero (index (2,)); every KL estimate is "
        "infinite there (use -inf logits off the reference's support)",
    ),
    (
        lambda: E.expected_gradient([-np.inf, -np.inf], P, [1, 0], 1.0, **G),
        "`logits` must have a finite entry in every row; row () is all -inf",
    ),
    (
        lambda: E.expected_gradient([0.0, np.nan], P, [1, 0], 1.0, **G),
        "`logits` must not contain NaN; found nan at index (1,)",
    ),
    (
        lambda: E.expected_gradient([0.0, 0.0], P, [1, 0], np.inf, **G),
        "`beta` must be finite for a gradient; got inf",
    ),
    (
        lambda: E.expected_gradient([0.0, 0.0], P, [1, 0], -1.0, **G),
        "`beta` must be non-negative; found -1",
    ),
    (
        lambda: E.expected_gradient([0.0, 0.0, 0.0], P, [1, 0], 1.0, **G),
        "`ref` must have the same size as `logits` along the probability axis; got 2 and 3",
    ),
    (
        lambda: E.fixed_point(P, [1, 0], 1.0, estimator="abs", placement="loss"),
        "`estimator` 'abs' has no fixed point here: its derivative jumps at log pi = log ref, "
        "so gradient training does not converge; use 'k1', 'k2' or 'k3'",
    ),
    (
        lambda: E.fixed_point(P, [1, 0], 1.0, estimator="k2", placement="reward"),
        "'k2' in the reward has no fixed point for `beta` > 0: the estimate penalises rare "
        "responses most, so on-policy training drives some probabilities to zero instead of "
        "converging to an interior policy; simulate it with klpolicy.estimators.gradient_flow",
    ),
    (
        lambda: E.fixed_point(P, [1, np.nan], 1.0, **G),
        "`reward` must be finite; found nan at index (1,)",
    ),
    (
        lambda: E.gradient_flow(P, [1, 0], 1.0, **G, steps=0),
        "`steps` must be an integer >= 1; got 0",
    ),
    (
        lambda: E.gradient_flow(P, [1, 0], 1.0, **G, lr=0.0),
        "`lr` must be a positive finite number; got 0.0",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


@pytest.mark.slow
def test_import_does_not_pull_optional_dependencies():
    import subprocess
    import sys

    code = (
        "import sys, klpolicy.estimators; "
        "print(any(m in sys.modules for m in ('torch', 'matplotlib', 'hypothesis')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_float32_in_float32_out():
    f = np.float32
    p, q = f([0.5, 0.3, 0.2]), f([0.25, 0.25, 0.5])
    outs = [
        E.full_kl(np.log(p), np.log(q)),
        *E.moments(p, q, "k1"),
        *E.moments(p, q, "k3", clip=1.0),
        *[E.bias(p, q, k) for k in NAMES],
        *E.off_policy_moments(p, q, q, "k2"),
        E.off_policy_bias(p, q, q, "k3"),
        E.off_policy_bias(p, q, q, "k3", weighted=False),
        E.sample_estimates(p, q, "k2", 3, 0),
        E.expected_gradient(np.log(p), q, f([1, 0, 0]), f(1.0), estimator="k3", placement="loss"),
    ]
    assert all(np.asarray(o).dtype == np.float32 for o in outs)
    np.testing.assert_allclose(
        E.moments(p, q, "k3")[0], E.moments(p.astype(float), q, "k3")[0], rtol=1e-6
    )


@pytest.mark.slow
@given(
    st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=6),
    st.lists(st.floats(-5, 5), min_size=6, max_size=6),
    st.floats(1e-3, 1e3),
)
def test_k3_in_loss_fixed_point_is_stationary_property(weights, rewards, beta):
    ref = np.array(weights) / np.sum(weights)
    reward = np.array(rewards[: ref.size])
    pi = E.fixed_point(ref, reward, beta, estimator="k3", placement="loss")
    assert np.all(pi > 0) and abs(pi.sum() - 1) < 1e-12
    g = E.expected_gradient(np.log(pi), ref, reward, beta, estimator="k3", placement="loss")
    assert np.abs(g).max() < 1e-12 * max(1.0, beta, np.ptp(reward))
    # and it maximises E[r] - beta KL(ref || pi): no better than pi* on the reverse-KL objective
    star = klpolicy.optimal_policy(ref, reward, beta)
    assert (
        klpolicy.objective(pi, ref, reward, beta)
        <= klpolicy.objective(star, ref, reward, beta) + 1e-12
    )


@pytest.mark.parametrize("mus", [[1e308, 1.0], [1e-320], [-1e200], [1e-100]])
def test_schulman_table_refuses_mus_whose_kl_or_moments_leave_the_floats(mus):
    # these gave NaN fields (mu^2/2 = inf, inf / inf) or a k2 ratio of 0
    with pytest.raises(ValueError, match=r"^`mus` must lie in 1\.22e-77 <= \|mu\| <= 1\.34e\+154"):
        E.schulman_table(mus)


def test_schulman_table_at_the_edges_of_its_range():
    t = E.schulman_table([1e-76, -1e-40])
    assert np.isfinite(t.stdev_over_true).all() and np.isfinite(t.bias_over_true).all()
    np.testing.assert_allclose(t.stdev_over_true[:, 1:], math.sqrt(2), rtol=1e-12)


@pytest.mark.parametrize("mu", [1.0, 5.0, 20.0, 26.6, 26.7, 30.0, -33.3, 37.8, 37.85])
def test_schulman_table_k3_stdev_ratio_matches_mpmath_where_the_variance_overflows(mu):
    # e^(mu^2) overflowed from |mu| ~ 26.6 and the ratio was inf up to ~37.8, where it is
    # still a float. Recipe: sqrt(e^x - 1 - x) / (x/2), x = mu^2, at 50 digits
    with mp.workdps(50):
        x = mp.mpf(mu) ** 2
        exact = float(mp.sqrt(mp.exp(x) - 1 - x) / (x / 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = E.schulman_table([mu], estimators=("k3",))
    # the ratio is exp(mu^2/2 + ...): a relative error of ulp(mu^2) in mu^2 costs ~mu^2 ulp
    np.testing.assert_allclose(t.stdev_over_true[0, 0], exact, rtol=4e-16 * max(1.0, mu * mu))


def test_schulman_table_k3_stdev_ratio_is_inf_only_past_the_floats():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = E.schulman_table([37.8, 37.9, 1e3], estimators=("k3", "k1"))
    assert np.isfinite(t.stdev_over_true[0]).all()
    assert np.isinf(t.stdev_over_true[1:, 0]).all() and np.isfinite(t.stdev_over_true[:, 1]).all()
