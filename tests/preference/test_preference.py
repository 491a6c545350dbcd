"""Tests for klpolicy.preference: Bradley-Terry, DPO/IPO losses, population optima, finite data."""

import re

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import minimize

from klpolicy import optimal_policy
from klpolicy.preference import (
    bradley_terry,
    dpo_loss,
    dpo_loss_grad,
    dpo_optimum,
    empirical_dpo_loss,
    fit_dpo,
    fit_dpo_online,
    implicit_reward,
    ipo_loss,
    ipo_loss_grad,
    ipo_optimum,
    population_dpo_loss,
    population_ipo_loss,
    reward_decomposition,
    sample_preference_counts,
)

from .. import _mpref as R


@pytest.fixture(autouse=True)
def _mp_precision():
    """mpmath references at 50 digits, set per test so other modules' global dps is untouched."""
    with mp.workdps(50):
        yield


CYCLE = np.array([[0.5, 0.9, 0.2], [0.1, 0.5, 0.7], [0.8, 0.3, 0.5]])  # intransitive


def _random_problem(rng, n, scale=2.0, zero=True):
    ref = rng.dirichlet(np.ones(n))
    if zero and n > 2:
        ref[rng.integers(n)] = 0.0
        ref /= ref.sum()
    return ref, rng.normal(size=n) * scale


def _max_rel_err_above_tiny(p, q):
    """The largest relative error over the entries of q above 1e-300 (the tiny ones are 0)."""
    m = q > 1e-300
    return float(np.max(R.rel_err(p[m], q[m])))


# ---------------------------------------------------------------------------
# per-pair losses: values against mpmath, stability, gradients
# ---------------------------------------------------------------------------


def _mp_dpo(h, beta, eps):
    # recipe: x = beta*h in 50-digit arithmetic;
    # loss = -(1-eps) log(1/(1+e^-x)) - eps log(1/(1+e^x)) = (1-eps) log1p(e^-x) + eps log1p(e^x)
    x = mp.mpf(beta) * mp.mpf(h)
    return (1 - mp.mpf(eps)) * mp.log1p(mp.exp(-x)) + mp.mpf(eps) * mp.log1p(mp.exp(x))


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5])
@pytest.mark.parametrize(
    "h", [-5000.0, -40.0, -1.0, -1e-8, 0.0, 1e-8, 0.3, 1.0, 37.0, 700.0, 5000.0]
)
@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_dpo_loss_matches_mpmath(h, beta, eps):
    got = float(dpo_loss(h, 0.0, 0.0, 0.0, beta, label_smoothing=eps))
    ref = _mp_dpo(h, beta, eps)
    if ref == 0:
        assert got == 0.0
    else:
        # beta*h is rounded once (relative eps/2), which exp(-x) amplifies by |x|
        rel = 4e-15 + 2.3e-16 * abs(beta * h)
        assert abs(got - float(ref)) <= rel * float(ref) + 1e-300


def test_dpo_loss_hand_values():
    # h = (-1 - -3) - (-2 - -2) = 2, beta = 0.5: -log sigmoid(1) = log(1 + e^-1)
    assert float(dpo_loss(-1.0, -3.0, -2.0, -2.0, 0.5)) == pytest.approx(
        np.log1p(np.exp(-1.0)), rel=1e-15
    )
    # equal margins: log 2, whatever beta
    assert float(dpo_loss(-5.0, -7.0, -1.0, -3.0, 3.0)) == pytest.approx(np.log(2.0), rel=1e-15)
    # label smoothing 0.5: symmetric in h, minimised at h = 0
    a = dpo_loss(0.0, -1.0, 0.0, 0.0, 1.0, label_smoothing=0.5)
    b = dpo_loss(-1.0, 0.0, 0.0, 0.0, 1.0, label_smoothing=0.5)
    assert float(a) == pytest.approx(float(b), rel=1e-15)


def test_dpo_loss_large_margins_stable_and_asymptotic():
    h = np.array([-1e4, -3000.0, -800.0, 800.0, 3000.0, 1e4])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        loss = dpo_loss(h, 0.0, 0.0, 0.0, 1.0)
        g = dpo_loss_grad(h, 0.0, 0.0, 0.0, 1.0)
    assert np.all(np.isfinite(loss)) and np.all(np.isfinite(g.policy_chosen))
    # wrong side: loss = |x| exactly (e^-800 is far below rounding);
    # right side: 0 (e^-x underflows)
    np.testing.assert_array_equal(loss[:3], -h[:3])
    np.testing.assert_array_equal(loss[3:], 0.0)
    np.testing.assert_array_equal(g.policy_chosen, [-1.0, -1.0, -1.0, 0.0, 0.0, 0.0])
    # cDPO: linear on both sides, with slopes (1 - eps) and eps
    eps = 0.1
    ls = dpo_loss(h, 0.0, 0.0, 0.0, 2.0, label_smoothing=eps)
    np.testing.assert_allclose(ls, np.where(h < 0, (1 - eps) * 2 * -h, eps * 2 * h), rtol=1e-15)
    # moderately large x: loss ~ exp(-x) with full relative precision
    x = 40.0
    assert float(dpo_loss(x, 0.0, 0.0, 0.0, 1.0)) == pytest.approx(
        float(mp.log1p(mp.exp(-x))), rel=1e-15
    )


def test_dpo_loss_margin_of_thousands_from_large_logps():
    # sequence log-probs of thousands of nats, margin 2 after cancellation
    pc, pr, rc, rr = -12000.0, -15000.0, -12001.0, -14999.0
    assert float(dpo_loss(pc, pr, rc, rr, 0.1)) == pytest.approx(np.log1p(np.exp(-0.2)), rel=1e-15)


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_dpo_grad_matches_finite_differences(rng, eps):
    x = rng.normal(size=(4, 7)) * 3
    beta = 0.7
    g = dpo_loss_grad(*x, beta, label_smoothing=eps)
    step = 1e-6
    for k, field in enumerate(g):
        up, dn = x.copy(), x.copy()
        up[k] += step
        dn[k] -= step
        fd = (
            dpo_loss(*up, beta, label_smoothing=eps) - dpo_loss(*dn, beta, label_smoothing=eps)
        ) / (2 * step)
        np.testing.assert_allclose(field, fd, rtol=1e-7, atol=1e-9)


def test_dpo_grad_matches_mpmath():
    # recipe: d/dh [(1-eps) log1p(e^{-beta h}) + eps log1p(e^{beta h})] by mp.diff at 50 digits
    beta, eps = 1.3, 0.15
    for h in [-30.0, -2.0, 0.0, 0.5, 20.0]:
        ref = mp.diff(lambda t: _mp_dpo(t, beta, eps), mp.mpf(h))
        got = float(dpo_loss_grad(h, 0.0, 0.0, 0.0, beta, label_smoothing=eps).policy_chosen)
        assert got == pytest.approx(float(ref), rel=1e-14, abs=1e-300)


def test_ipo_loss_and_grad():
    # hand: h = 1.5 - 0.5 = 1, tau = 0.25 -> target 2: loss 1, d/dh = -2
    assert float(ipo_loss(-0.5, -2.0, -1.0, -1.5, 0.25)) == 1.0
    g = ipo_loss_grad(-0.5, -2.0, -1.0, -1.5, 0.25)
    assert (g.policy_chosen, g.policy_rejected, g.ref_chosen, g.ref_rejected) == (
        -2.0,
        2.0,
        2.0,
        -2.0,
    )
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 5))
    step = 1e-6
    for k, field in enumerate(ipo_loss_grad(*x, 0.3)):
        up, dn = x.copy(), x.copy()
        up[k] += step
        dn[k] -= step
        np.testing.assert_allclose(
            field, (ipo_loss(*up, 0.3) - ipo_loss(*dn, 0.3)) / (2 * step), rtol=1e-7
        )
    # large margins: exact squares, no overflow
    assert float(ipo_loss(5000.0, 0.0, 0.0, 0.0, 0.5)) == 4999.0**2


def test_losses_agree_with_trl_formulas_in_torch():
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(7)
    x = rng.normal(size=(4, 50)) * 20
    beta, eps = 0.2, 0.1
    t = [torch.tensor(a, requires_grad=True) for a in x]
    logits = (t[0] - t[1]) - (t[2] - t[3])
    # TRL loss_type="sigmoid" with label_smoothing, and loss_type="ipo" (beta plays tau)
    trl = -F.logsigmoid(beta * logits) * (1 - eps) - F.logsigmoid(-beta * logits) * eps
    np.testing.assert_allclose(
        dpo_loss(*x, beta, label_smoothing=eps), trl.detach().numpy(), rtol=1e-13
    )
    trl.sum().backward()
    g = dpo_loss_grad(*x, beta, label_smoothing=eps)
    for field, ti in zip(g, t, strict=True):
        np.testing.assert_allclose(field, ti.grad.numpy(), rtol=1e-12, atol=1e-300)
    ipo = (logits - 1 / (2 * beta)) ** 2
    np.testing.assert_allclose(ipo_loss(*x, beta), ipo.detach().numpy(), rtol=1e-13)


def test_loss_dtype_and_shapes():
    f32 = np.float32
    out = dpo_loss(f32(-1), f32(-2), f32(-1), f32(-1), 0.5)
    assert out.dtype == np.float32
    assert ipo_loss(np.zeros(3, f32), f32(0), f32(0), f32(0), 1.0).dtype == np.float32
    assert dpo_loss(np.zeros((2, 1)), np.zeros(3), 0.0, 0.0, 1.0).shape == (2, 3)
    assert dpo_loss_grad(np.zeros((2, 1)), np.zeros(3), 0.0, 0.0, 1.0).ref_rejected.shape == (2, 3)


# ---------------------------------------------------------------------------
# Bradley-Terry, implicit reward, the decomposition identity
# ---------------------------------------------------------------------------


def test_bradley_terry_values_and_batches():
    r = np.array([[1.0, 0.0, -2.0], [0.0, 0.0, 300.0]])
    p = bradley_terry(r)
    assert p.shape == (2, 3, 3)
    # recipe: P[i, j] = 1/(1 + exp(r_j - r_i)) at 50 digits
    for b in range(2):
        for i in range(3):
            for j in range(3):
                ref = 1 / (1 + mp.exp(mp.mpf(r[b, j]) - mp.mpf(r[b, i])))
                assert p[b, i, j] == pytest.approx(float(ref), rel=1e-15)
    np.testing.assert_allclose(p + np.swapaxes(p, -1, -2), 1.0, atol=2e-16)
    np.testing.assert_array_equal(np.diagonal(p, axis1=-2, axis2=-1), 0.5)
    assert bradley_terry(r.T, axis=0).shape == (2, 3, 3)


def test_implicit_reward():
    assert float(implicit_reward(np.log(0.8), np.log(0.4), 0.5)) == pytest.approx(
        0.5 * np.log(2), rel=1e-15
    )
    assert implicit_reward(np.zeros((3, 1)), np.zeros(2), 1.0).shape == (3, 2)


@pytest.mark.slow
@given(
    st.integers(2, 6),
    st.floats(0.05, 20.0),
    st.integers(0, 2**31 - 1),
)
def test_reward_decomposition_identity(n, beta, seed):
    rng = np.random.default_rng(seed)
    ref, r = _random_problem(rng, n, scale=5.0)
    d = reward_decomposition(ref, r, beta)
    on = ref > 0
    np.testing.assert_allclose(
        d.implicit_reward[on] + d.log_partition, r[on], rtol=0, atol=1e-13 * max(1, np.abs(r).max())
    )
    assert np.all(d.implicit_reward[~on] == -np.inf)
    # two routes of the kernel (with statistics the shift by max r, for pi alone none
    # while the weights are normal), each within 2 |r / beta| u of the exact policy
    bound = 4 * np.abs(r[on] / beta).max() * 2**-53 + 1e-15
    np.testing.assert_allclose(d.policy, optimal_policy(ref, r, beta), rtol=bound, atol=0)
    # differences of implicit rewards are reward differences (beta log Z cancels)
    i, j = np.flatnonzero(on)[:2]
    with np.errstate(divide="ignore"):
        lp = np.log(d.policy)
    diff = implicit_reward(lp[i], np.log(ref[i]), beta) - implicit_reward(
        lp[j], np.log(ref[j]), beta
    )
    assert diff == pytest.approx(r[i] - r[j], abs=1e-12 * max(1, np.abs(r).max()))


def test_reward_decomposition_mpmath():
    # recipe: Z = sum ref e^{r/beta}, implicit = beta log(ref e^{r/beta}/Z / ref) = r - beta log Z
    ref, r, beta = [0.2, 0.3, 0.5], [1.0, -2.0, 0.5], 0.3
    z = sum(mp.mpf(a) * mp.exp(mp.mpf(b) / mp.mpf(beta)) for a, b in zip(ref, r, strict=True))
    d = reward_decomposition(ref, r, beta)
    assert float(d.log_partition) == pytest.approx(float(beta * mp.log(z)), rel=1e-15)
    for k in range(3):
        assert d.implicit_reward[k] == pytest.approx(float(r[k] - beta * mp.log(z)), rel=1e-14)


# ---------------------------------------------------------------------------
# population optima
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.01, 0.1, 0.5, 1.0, 10.0, 1e3])
@pytest.mark.parametrize("mu_kind", ["ref", "vector", "joint"])
def test_dpo_optimum_equals_optimal_policy(rng, beta, mu_kind):
    for _ in range(4):
        ref, r = _random_problem(rng, 6, scale=3.0)
        if mu_kind == "ref":
            mu = None
        elif mu_kind == "vector":
            mu = np.where(ref > 0, rng.dirichlet(np.ones(6)), 0.0)
            mu /= mu.sum()
        else:
            mu = rng.dirichlet(np.ones(36)).reshape(6, 6) * np.outer(ref > 0, ref > 0)
            mu /= mu.sum()
        pi = dpo_optimum(ref, bradley_terry(r), beta, mu=mu)
        star = optimal_policy(ref, r, beta)
        assert np.max(np.abs(pi - star)) < 1e-14
        assert _max_rel_err_above_tiny(pi, star) < 1e-10
        assert np.all(pi[ref == 0] == 0)


@pytest.mark.slow
@given(st.integers(2, 7), st.floats(0.02, 50.0), st.floats(0.1, 30.0), st.integers(0, 2**31 - 1))
def test_dpo_optimum_equals_optimal_policy_property(n, beta, scale, seed):
    rng = np.random.default_rng(seed)
    ref, r = _random_problem(rng, n, scale=scale)
    pi = dpo_optimum(ref, bradley_terry(r), beta)
    star = optimal_policy(ref, r, beta)
    assert np.max(np.abs(pi - star)) < 1e-13
    assert _max_rel_err_above_tiny(pi, star) < 1e-9


@pytest.mark.parametrize("beta", [0.01, 0.1, 10.0, 1000.0])
def test_dpo_optimum_equals_optimal_policy_large_reward_gaps(beta):
    # reward gaps of hundreds of nats: P entries like 1e-80 next to entries that round to 1
    rng = np.random.default_rng(123)
    done = 0
    while done < 5:
        ref, r = _random_problem(rng, 6, scale=100.0)
        if np.ptp(r) > 650:  # beyond this, sigma(-gap) underflows and P is truly deterministic
            continue
        pi, star = dpo_optimum(ref, bradley_terry(r), beta), optimal_policy(ref, r, beta)
        assert np.max(np.abs(pi - star)) < 1e-14
        assert _max_rel_err_above_tiny(pi, star) < 1e-8
        done += 1


@pytest.mark.slow
@given(st.integers(3, 6), st.floats(0.1, 5.0), st.integers(0, 2**31 - 1))
def test_dpo_and_ipo_rank_log_ratios_like_win_rates(n, beta, seed):
    # product pair law m x m: both optima order log(pi/ref) like p(i > m)
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.ones(n))
    u = np.triu(rng.uniform(0.05, 0.95, (n, n)), 1)
    p = u + np.tril(1 - u.T, -1) + np.diag(np.full(n, 0.5))
    win = p @ ref
    d = np.log(dpo_optimum(ref, p, beta) / ref)
    i = np.log(ipo_optimum(ref, p, beta) / ref)
    order = np.argsort(win)
    gaps = np.diff(win[order])
    strict = gaps > 1e-9
    assert np.all((np.diff(d[order]) > 0)[strict])
    assert np.all((np.diff(i[order]) > 0)[strict])


def test_dpo_matches_ipo_with_tau_beta_over_4_near_indifference():
    # sigma(x) ~ 1/2 + x/4: when the log-ratios are small DPO(beta) ~ IPO(beta/4)
    ref = np.array([0.2, 0.3, 0.5])
    gaps = [
        np.max(np.abs(dpo_optimum(ref, CYCLE, b) - ipo_optimum(ref, CYCLE, b / 4)))
        for b in (0.5, 8.0)
    ]
    assert gaps[0] < 1e-4 and gaps[1] < 1e-5 and gaps[1] < gaps[0]


def _minimise_numerically(loss, ref):
    """BFGS over the log-ratios on the support, from the reference."""
    on = ref > 0

    def f(z):
        g = np.zeros(ref.size)
        g[on] = z
        pi = np.where(on, ref * np.exp(g - g.max()), 0)
        return loss(pi / pi.sum())

    res = minimize(f, np.zeros(on.sum()), method="BFGS", options={"gtol": 1e-12})
    g = np.zeros(ref.size)
    g[on] = res.x
    pi = np.where(on, ref * np.exp(g - g.max()), 0)
    return pi / pi.sum()


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_dpo_optimum_non_bradley_terry_against_numerical_minimisation(eps):
    ref = np.array([0.2, 0.3, 0.5])
    pi = dpo_optimum(ref, CYCLE, 1.5, label_smoothing=eps)
    num = _minimise_numerically(
        lambda p: population_dpo_loss(p, ref, CYCLE, 1.5, label_smoothing=eps), ref
    )
    np.testing.assert_allclose(pi, num, atol=1e-6)
    # stationarity to much better than BFGS: central differences of the exact loss in g
    g0 = np.log(pi / ref)
    for k in range(3):
        e = np.zeros(3)
        e[k] = 1e-5
        up, dn = ref * np.exp(g0 + e), ref * np.exp(g0 - e)
        d = population_dpo_loss(
            up / up.sum(), ref, CYCLE, 1.5, label_smoothing=eps
        ) - population_dpo_loss(dn / dn.sum(), ref, CYCLE, 1.5, label_smoothing=eps)
        assert abs(d / 2e-5) < 1e-9


def test_dpo_optimum_deterministic_preferences():
    ref = np.array([0.2, 0.3, 0.5])
    total = np.array([[0.5, 1.0, 1.0], [0.0, 0.5, 0.7], [0.0, 0.3, 0.5]])  # 0 always wins
    np.testing.assert_array_equal(dpo_optimum(ref, total, 0.1), [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(dpo_optimum(ref, total, 100.0), [1.0, 0.0, 0.0])
    # the loss keeps decreasing towards the limit: no finite minimiser
    vals = [population_dpo_loss([1 - 2 * t, t, t], ref, total, 1.0) for t in (0.1, 1e-3, 1e-6)]
    assert vals[0] > vals[1] > vals[2]
    # a deterministic cycle is strongly connected: finite optimum, all mass positive
    cyc = np.array([[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]])
    pi = dpo_optimum(ref, cyc, 1.0)
    np.testing.assert_allclose(
        pi, _minimise_numerically(lambda p: population_dpo_loss(p, ref, cyc, 1.0), ref), atol=1e-6
    )
    # top group {0, 1} beats 2 surely: the limit is the group's own optimum
    grp = np.array([[0.5, 0.6, 1.0], [0.4, 0.5, 1.0], [0.0, 0.0, 0.5]])
    pi = dpo_optimum(ref, grp, 2.0)
    sub = dpo_optimum(ref[:2] / 0.5, grp[:2, :2], 2.0)
    np.testing.assert_allclose(pi, [sub[0], sub[1], 0.0], rtol=1e-14)
    # label smoothing restores a finite minimiser
    pi = dpo_optimum(ref, total, 1.0, label_smoothing=0.1)
    assert np.all(pi > 0) and pi[0] < 1


@pytest.mark.parametrize("tau", [0.05, 0.3, 1.0, 5.0])
def test_ipo_optimum_closed_form_against_numerical_minimisation(tau):
    ref = np.array([0.1, 0.2, 0.3, 0.4])
    p = np.array(
        [[0.5, 0.9, 0.2, 1.0], [0.1, 0.5, 0.7, 0.6], [0.8, 0.3, 0.5, 0.0], [0.0, 0.4, 1.0, 0.5]]
    )
    for mu in (None, np.array([0.4, 0.3, 0.2, 0.1])):
        m = ref if mu is None else mu
        pi = ipo_optimum(ref, p, tau, mu=mu)
        # hand: ref * exp((P @ mu)/tau), normalised
        w = ref * np.exp(p @ m / tau)
        np.testing.assert_allclose(pi, w / w.sum(), rtol=1e-14)
        num = _minimise_numerically(
            lambda q, mu=mu: population_ipo_loss(q, ref, p, tau, mu=mu), ref
        )
        np.testing.assert_allclose(pi, num, rtol=1e-6, atol=1e-9)
        # the joint-law solver on mu x mu gives the closed form
        np.testing.assert_allclose(ipo_optimum(ref, p, tau, mu=np.outer(m, m)), pi, rtol=1e-12)


def test_ipo_optimum_general_joint_law_is_stationary(rng):
    ref = np.array([0.25, 0.25, 0.5])
    mu = rng.dirichlet(np.ones(9)).reshape(3, 3)
    pi = ipo_optimum(ref, CYCLE, 0.5, mu=mu)
    num = _minimise_numerically(lambda q: population_ipo_loss(q, ref, CYCLE, 0.5, mu=mu), ref)
    np.testing.assert_allclose(pi, num, rtol=1e-6)
    # ... and it differs from the product closed form with mu's marginal
    assert np.max(np.abs(pi - ipo_optimum(ref, CYCLE, 0.5, mu=mu.sum(1)))) > 1e-3


def test_ipo_optimum_deterministic_is_finite_and_hand_value():
    pi = ipo_optimum([0.5, 0.5], [[0.5, 1.0], [0.0, 0.5]], 1.0)
    # p(0 > ref) = 0.5*0.5 + 0.5*1 = 0.75, p(1 > ref) = 0.25
    assert pi[0] == pytest.approx(1 / (1 + np.exp(-0.5)), rel=1e-15)


def test_dpo_and_ipo_differ_on_non_bt_preferences():
    ref = np.array([0.2, 0.3, 0.5])
    d, i = dpo_optimum(ref, CYCLE, 1.0), ipo_optimum(ref, CYCLE, 1.0)
    assert np.max(np.abs(d - i)) > 0.01
    # deterministic preferences: DPO's limit is greedy, IPO's optimum keeps every outcome
    total = np.array([[0.5, 1.0, 1.0], [0.0, 0.5, 1.0], [0.0, 0.0, 0.5]])
    assert dpo_optimum(ref, total, 1.0)[0] == 1.0
    assert np.all(ipo_optimum(ref, total, 1.0) > 0.1)


# ---------------------------------------------------------------------------
# finite data
# ---------------------------------------------------------------------------


def test_sample_preference_counts_moments():
    p = CYCLE
    m = np.array([0.5, 0.3, 0.2])
    n = 20000
    c = sample_preference_counts(p, m, n, rng=np.random.default_rng(11))
    assert c.sum() == n and c.dtype == np.int64
    w = (2 * np.outer(m, m)) * p
    # multinomial: each count has mean n W and variance n W (1 - W); allow 5 sd
    sd = np.sqrt(n * w * (1 - w))
    assert np.all(np.abs(c - n * w) <= 5 * sd + 1e-12)


def test_fit_dpo_out_of_data_outcome_gains_probability():
    ref = np.array([0.05, 0.65, 0.3])
    counts = np.array([[0, 3, 0], [1, 0, 0], [0, 0, 0]])
    beta = 0.5
    fit = fit_dpo(ref, counts, beta, steps=3000, lr=5.0)
    # exact stationary point: beta * h = log 3 and theta_0 + theta_1 conserved by the gradient
    delta = np.log(3) / beta
    w = np.array([ref[0] * np.exp(delta / 2), ref[1] * np.exp(-delta / 2), ref[2]])
    np.testing.assert_allclose(fit.policy, w / w.sum(), rtol=1e-12)
    assert fit.policy[2] > 0.44 > ref[2]
    assert np.all(np.diff(fit.loss) <= 1e-15)
    # the same data under a reward that makes outcome 2 bad: the KL optimum lowers it
    star = optimal_policy(ref, [np.log(3), 0.0, -3.0], beta)
    assert star[2] < ref[2]


def test_empirical_loss_is_blind_to_uncompared_outcomes_even_off_support():
    ref = np.array([0.4, 0.6, 0.0])
    counts = np.array([[0, 5, 0], [2, 0, 0], [0, 0, 0]])
    a = empirical_dpo_loss([0.4, 0.6, 0.0], ref, counts, 1.0)
    # move 90% of the mass onto outcome 2, which ref excludes: same ratio 0/1, same loss
    b = empirical_dpo_loss([0.04, 0.06, 0.9], ref, counts, 1.0)
    assert a == pytest.approx(b, rel=1e-15)
    # the KL-regularised optimum never leaves the support
    assert optimal_policy(ref, [1.0, 0.0, 100.0], 0.01)[2] == 0.0


def test_fit_dpo_online_moves_towards_optimum():
    ref = np.array([0.45, 0.45, 0.1])
    r = np.array([0.0, 1.0, 2.0])
    fit = fit_dpo_online(
        ref, bradley_terry(r), 1.0, rounds=15, pairs_per_round=400, steps_per_round=20, rng=5
    )
    star = optimal_policy(ref, r, 1.0)
    assert fit.path.shape == (16, 3) and fit.loss.shape == (16,)
    # the population loss at pi* is the minimum: every iterate is above it
    floor = population_dpo_loss(star, ref, bradley_terry(r), 1.0)
    assert np.all(fit.loss >= floor - 1e-12)
    assert np.abs(fit.policy - star).sum() < np.abs(ref - star).sum() / 2


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

GOOD = dict(ref=[0.5, 0.5], p=[[0.5, 0.8], [0.2, 0.5]])

BAD = [
    (
        lambda: dpo_loss([0.0, 0.0], [0.0, 0.0, 0.0], 0.0, 0.0, 1.0),
        "the log-probability arrays do not broadcast: `policy_chosen_logps` (2,), "
        "`policy_rejected_logps` (3,), `ref_chosen_logps` (), `ref_rejected_logps` ()",
    ),
    (lambda: dpo_loss(0.0, 0.0, 0.0, 0.0, 0.0), "`beta` must be a positive finite number; got 0.0"),
    (lambda: dpo_loss(0.0, 0.0, 0.0, 0.0, -1), "`beta` must be a positive finite number; got -1"),
    (
        lambda: dpo_loss(0.0, 0.0, 0.0, 0.0, np.inf),
        "`beta` must be a positive finite number; got inf",
    ),
    (
        lambda: dpo_loss(0.0, 0.0, 0.0, 0.0, 1.0, label_smoothing=0.7),
        "`label_smoothing` must be a number in [0, 0.5]; got 0.7",
    ),
    (
        lambda: dpo_loss([0.0, np.nan], 0.0, 0.0, 0.0, 1.0),
        "`policy_chosen_logps` must be finite; found nan at index (1,)",
    ),
    (
        lambda: dpo_loss(0.0, -np.inf, 0.0, 0.0, 1.0),
        "`policy_rejected_logps` must be finite; got -inf",
    ),
    (lambda: ipo_loss(0.0, 0.0, 0.0, 0.0, 0.0), "`tau` must be a positive finite number; got 0.0"),
    (
        lambda: implicit_reward([0.0, 0.0], [0.0, 0.0, 0.0], 1.0),
        "`policy_logps` (2,) and `ref_logps` (3,) do not broadcast",
    ),
    (lambda: bradley_terry([0.0, np.inf]), "`reward` must be finite; found inf at index (1,)"),
    (
        lambda: reward_decomposition([0.5, 0.5], [1.0, 0.0], 0.0),
        "`beta` must be positive and finite for the decomposition; found 0",
    ),
    (
        lambda: dpo_optimum(GOOD["ref"], [[0.5, 0.8, 0.1], [0.2, 0.5, 0.3]], 1.0),
        "`preferences` must be a square matrix of shape (2, 2) matching `ref`; got shape (2, 3)",
    ),
    (
        lambda: dpo_optimum(GOOD["ref"], [[0.5, 1.2], [-0.2, 0.5]], 1.0),
        "`preferences` entries must lie in [0, 1]; found 1.2 at index (0, 1)",
    ),
    (
        lambda: dpo_optimum(GOOD["ref"], [[0.5, 0.8], [0.3, 0.5]], 1.0),
        "`preferences` must satisfy P[i, j] + P[j, i] = 1 (tolerance 1.5e-08); "
        "found P[0, 1] + P[1, 0] = 1.1",
    ),
    (
        lambda: dpo_optimum(GOOD["ref"], [[0.4, 0.8], [0.2, 0.5]], 1.0),
        "`preferences` must satisfy P[i, j] + P[j, i] = 1 (tolerance 1.5e-08); "
        "found P[0, 0] + P[0, 0] = 0.8",
    ),
    (
        lambda: dpo_optimum(GOOD["ref"], [[0.5, np.nan], [0.2, 0.5]], 1.0),
        "`preferences` must not contain NaN; found nan at index (0, 1)",
    ),
    (
        lambda: dpo_optimum(GOOD["ref"], GOOD["p"], 0.0),
        "`beta` must be a positive finite number; got 0.0",
    ),
    (
        lambda: dpo_optimum([0.5, 0.6], GOOD["p"], 1.0),
        "`ref` must sum to 1 along axis -1; it sums to 1.1 (tolerance 1.5e-08); "
        "klpolicy never renormalises silently",
    ),
    (
        lambda: dpo_optimum([[0.5, 0.5]], GOOD["p"], 1.0),
        "`ref` must be one distribution (1-D) here; got shape (1, 2)",
    ),
    (
        lambda: dpo_optimum(GOOD["ref"], GOOD["p"], 1.0, mu=[0.2, 0.3, 0.5]),
        "`mu` must have the same size as `ref` along the probability axis; got 3 and 2",
    ),
    (
        lambda: dpo_optimum([1.0, 0.0], GOOD["p"], 1.0, mu=[0.5, 0.5]),
        "`mu` puts mass 0.25 on the pair (0, 1) but `ref` is 0 at outcome 1; "
        "log(pi/ref) is undefined there",
    ),
    (
        lambda: dpo_optimum(
            [0.3, 0.3, 0.4], np.full((3, 3), 0.5), 1.0, mu=np.diag([0.3, 0.3, 0.4])
        ),
        "the pairs drawn from `mu` do not connect the support of `ref`: outcomes [0] are never "
        "compared with outcomes [1, 2]; the population loss does not determine their "
        "relative probabilities",
    ),
    (
        lambda: dpo_optimum(
            [0.3, 0.3, 0.4],
            [[0.5, 0.5, 1], [0.5, 0.5, 1], [0, 0, 0.5]],
            1.0,
            mu=np.array([[0, 0, 1], [0, 0, 1], [0, 0, 0]]) / 2,
        ),
        "the population DPO loss has no unique limit: the groups of outcomes [[0], [1]] "
        "each win all their drawn comparisons with the others with probability 1, "
        "and the pairs do not fix their relative mass",
    ),
    (
        lambda: ipo_optimum(GOOD["ref"], GOOD["p"], -1.0),
        "`tau` must be a positive finite number; got -1.0",
    ),
    (
        lambda: population_dpo_loss([1.0, 0.0], GOOD["ref"], GOOD["p"], 1.0),
        "`policy` must be positive on every outcome the pairs involve; found 0 at index (1,)",
    ),
    (
        lambda: population_dpo_loss([1.0, 0.0, 0.0], GOOD["ref"], GOOD["p"], 1.0),
        "`policy` must have the same shape as `ref`; got (3,) and (2,)",
    ),
    (
        lambda: empirical_dpo_loss(GOOD["ref"], GOOD["ref"], [[0, -1], [2, 0]], 1.0),
        "`counts` must be finite and non-negative; found -1 at index (0, 1)",
    ),
    (
        lambda: empirical_dpo_loss(GOOD["ref"], GOOD["ref"], [[0, 0], [0, 0]], 1.0),
        "`counts` must contain at least one comparison; all counts are 0",
    ),
    (
        lambda: fit_dpo([1.0, 0.0], [[0, 1], [0, 0]], 1.0),
        "`counts` has comparisons of the pair (0, 1) but `ref` is 0 at outcome 1; "
        "log(pi/ref) is undefined there",
    ),
    (
        lambda: fit_dpo(GOOD["ref"], [[0, 1], [0, 0]], 1.0, init=[1.0, 0.0]),
        "`init` must have the same support as `ref`; they differ at index (1,)",
    ),
    (
        lambda: sample_preference_counts(np.full((3, 3), 0.5), [0.5, 0.5], 10, rng=0),
        "`preferences` must be a square matrix of shape (2, 2) matching `mu`; got shape (3, 3)",
    ),
    (
        lambda: fit_dpo(GOOD["ref"], [[0, 1], [0, 0]], 1.0, steps=2.5),
        "`steps` must be an integer >= 1; got 2.5",
    ),
    (
        lambda: sample_preference_counts(GOOD["p"], [0.5, 0.5], 0, rng=0),
        "`size` must be an integer >= 1; got 0",
    ),
]


@pytest.mark.parametrize("call, msg", BAD)
def test_bad_input_messages(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()


def test_counts_of_1e308_are_the_same_dataset_as_small_counts():
    # the sum of the counts overflowed, every weight was 0 and the loss 0.0
    small = np.array([[0.0, 1.5, 0.5], [1.0, 0.0, 2.0], [0.25, 0.75, 0.0]])
    pol, ref = [0.5, 0.3, 0.2], [0.4, 0.4, 0.2]
    for scale in (1e308 / 2, 1e-300):
        big = small * scale
        assert empirical_dpo_loss(pol, ref, big, 0.5) == pytest.approx(
            empirical_dpo_loss(pol, ref, small, 0.5), rel=1e-14
        )
        np.testing.assert_allclose(
            fit_dpo(ref, big, 0.5, steps=5).loss, fit_dpo(ref, small, 0.5, steps=5).loss, rtol=1e-13
        )
