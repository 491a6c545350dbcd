"""Calibrated rewards, their partition functions and inference-time win rates, against mpmath."""

from __future__ import annotations

import itertools

import mpmath as mp
import numpy as np
import pytest

from klpolicy import optimal_policy
from klpolicy.best_of_n import (
    CALIBRATED_TRANSFORMS,
    best_of_n_win_rate,
    calibrated_partition,
    calibrated_policy,
    calibrated_reward,
    inference_win_rate,
)
from tests._mpref import assert_mp_close

pytestmark = pytest.mark.mp_dps(40)

# problems: (ref, reward); ties, zeros in ref, a zero-ref outcome tied with a supported one
PROBLEMS = [
    ([0.2, 0.5, 0.3], [1.0, 0.3, -2.0]),
    ([0.25, 0.25, 0.5], [1.0, 1.0, 0.0]),
    ([0.1, 0.0, 0.3, 0.2, 0.4], [2.0, 2.0, -1.0, 0.5, 0.5]),
    ([0.0, 0.6, 0.4], [9.0, 1.0, 1.0]),
]


def _mp_c(q, r, ties):
    # mpmath recipe: C(y) = sum_{y'} q(y') [r(y') < r(y)] + h q(y') [r(y') = r(y)], with
    # h = 1/2 (mid) or 1 (upper), summed term by term at 40 digits
    h = mp.mpf(1) / 2 if ties == "mid" else mp.mpf(1)
    q = [mp.mpf(x) for x in q]
    return [
        mp.fsum(qj * (1 if rj < ri else (h if rj == ri else 0)) for qj, rj in zip(q, r)) for ri in r
    ]


def _mp_calibration_transform(name, u, t=None):
    """Phi(u), the transform of the calibrated reward u (``t`` the exponential's rate)."""
    if name == "identity":
        return u
    if name == "log":
        return mp.log(u) if u > 0 else mp.ninf
    if name == "normal-icdf":
        return mp.sqrt(2) * mp.erfinv(2 * u - 1)
    return mp.sign(t) * mp.exp(t * u)


@pytest.mark.parametrize(("q", "r"), PROBLEMS)
@pytest.mark.parametrize("ties", ["mid", "upper"])
def test_calibrated_reward_matches_mpmath(q, r, ties):
    assert_mp_close(calibrated_reward(q, r, ties=ties), _mp_c(q, r, ties), rtol=1e-15)


def test_calibrated_reward_rows_along_axis_and_means():
    rng = np.random.default_rng(3)
    q = rng.dirichlet(np.ones(7), size=4)
    r = rng.integers(0, 3, size=(4, 7)).astype(float)  # many ties
    c = calibrated_reward(q.T, r.T, axis=0)
    for i in range(4):
        np.testing.assert_allclose(c[:, i], calibrated_reward(q[i], r[i]), rtol=0, atol=0)
    # E_ref[C_mid] = 1/2 exactly; E_ref[C_upper] = 1/2 + sum_g q_g^2 / 2
    np.testing.assert_allclose((q * calibrated_reward(q, r)).sum(-1), 0.5, atol=1e-15)
    coll = [sum(q[i][r[i] == g].sum() ** 2 for g in np.unique(r[i])) for i in range(4)]
    np.testing.assert_allclose(
        (q * calibrated_reward(q, r, ties="upper")).sum(-1), 0.5 + 0.5 * np.array(coll), atol=1e-15
    )


def _mp_log_z(q, r, beta, name, ties, t=None):
    # recipe: log sum_y q(y) exp(Phi(C(y))/beta) over the support, at 40 digits
    c = _mp_c(q, r, ties)
    b = mp.mpf(beta)
    return mp.log(
        mp.fsum(
            mp.mpf(qi) * mp.exp(_mp_calibration_transform(name, ci, t) / b)
            for qi, ci in zip(q, c)
            if qi > 0
        )
    )


def _mp_log_z_uniform(beta, name, t=None):
    # recipe: log of int_0^1 exp(Phi(u)/beta) du by mpmath's tanh-sinh quadrature; for
    # normal-icdf as int phi(x) e^{x/beta} dx over the real line (u = Phi(x)), split at
    # the peak x = 1/beta
    b = mp.mpf(beta)
    if name == "normal-icdf":
        dens = lambda x: mp.exp(-x * x / 2 + x / b) / mp.sqrt(2 * mp.pi)  # noqa: E731
        return mp.log(mp.quad(dens, [mp.ninf, 0, 1 / b, mp.inf]))
    return mp.log(
        mp.quad(lambda u: mp.exp(_mp_calibration_transform(name, u, t) / b), [0, 0.5, 0.9, 0.99, 1])
    )


@pytest.mark.parametrize(("q", "r"), PROBLEMS)
@pytest.mark.parametrize(
    ("name", "t", "ties"),
    [("identity", None, "mid"), ("identity", None, "upper"), ("log", None, "mid"),
     ("normal-icdf", None, "mid"), ("exp", 4.0, "mid"), ("exp", -4.0, "upper")],
)  # fmt: skip
@pytest.mark.parametrize("beta", [0.05, 0.7])
def test_partition_exact_and_closed_form_match_mpmath(q, r, name, t, ties, beta):
    p = calibrated_partition(q, r, beta, transform=name, t=t, ties=ties)
    want = _mp_log_z(q, r, beta, name, ties, t)
    assert_mp_close(p.log_z, want, rtol=1e-13, atol=1e-13)
    want_c = _mp_log_z_uniform(beta, name, t)
    assert_mp_close(p.log_z_continuous, want_c, rtol=1e-12, atol=1e-13)
    assert_mp_close(p.log_gap, want - want_c, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(("beta", "t"), [(1e-3, 12.0), (2e-3, -30.0), (0.01, 8.0)])
def test_exponential_closed_form_far_in_the_tails(beta, t):
    # Ei / E1 at arguments past 700 (their asymptotic series): against mpmath's ei / e1
    b = mp.mpf(beta)
    if t > 0:
        want = mp.log((mp.ei(mp.exp(t) / b) - mp.ei(1 / b)) / t)
    else:
        want = mp.log((mp.e1(mp.exp(t) / b) - mp.e1(1 / b)) / -t)
    got = CALIBRATED_TRANSFORMS["exp"].log_z_uniform(beta, t)
    assert_mp_close(got, want, rtol=1e-13)


def test_qrpo_closed_form_holds_in_the_tie_free_limit():
    # many equiprobable outcomes, distinct rewards: the gap is the midpoint rule's,
    # -1/(24 beta^2 V^2) to leading order, and tends to 0 as V grows
    beta = 0.5
    gaps = []
    for v in (10, 100, 1000, 10000):
        p = calibrated_partition(np.full(v, 1.0 / v), np.arange(v, dtype=float), beta)
        gaps.append(float(p.log_gap))
        np.testing.assert_allclose(p.log_gap, -1.0 / (24 * beta**2 * v**2), rtol=5e-3)
    assert abs(gaps[-1]) < 2e-9
    # upper ties (QRPO's quantile reward): first order, about +1/(2 beta V)
    p = calibrated_partition(np.full(10000, 1e-4), np.arange(10000.0), beta, ties="upper")
    np.testing.assert_allclose(p.log_gap, 1.0 / (2 * beta * 10000), rtol=1e-3)


def test_qrpo_closed_form_fails_with_ties_by_the_computed_amount():
    # 1000 outcomes, the top 30% of the mass one tied level: C = 0.85 for all of it
    v = 1000
    q = np.full(v, 1.0 / v)
    r = np.arange(v, dtype=float)
    r[700:] = 700.0
    for beta in (1.0, 0.1, 0.01):
        p = calibrated_partition(q, r, beta)
        # mpmath: 700 levels of 1/1000 at C = (k + 1/2)/1000 and one of 0.3 at C = 0.85
        b = mp.mpf(beta)
        z = mp.fsum(mp.exp((k + mp.mpf(1) / 2) / 1000 / b) for k in range(700)) / 1000
        z += mp.mpf(3) / 10 * mp.exp(mp.mpf(85) / 100 / b)
        zc = b * mp.expm1(1 / b)
        assert_mp_close(p.log_gap, mp.log(z) - mp.log(zc), rtol=1e-11)
    # the gap at beta = 0.01: log(0.3 / 0.01) - 0.15 / 0.01 plus the rest, about -11.6
    assert float(p.log_gap) < -11


def test_calibrated_policy_is_the_tilt_of_the_transformed_reward():
    q = np.array([0.1, 0.0, 0.3, 0.2, 0.4])
    r = np.array([2.0, 2.0, -1.0, 0.5, 0.5])
    for name, t in [("identity", None), ("exp", 5.0), ("exp", -5.0), ("log", None)]:
        pi = calibrated_policy(q, r, 0.3, transform=name, t=t)
        c = calibrated_reward(q, r)
        phi = CALIBRATED_TRANSFORMS[name].phi(c, t)
        np.testing.assert_allclose(pi, optimal_policy(q, phi, 0.3), rtol=1e-13, atol=1e-300)
        assert pi[1] == 0.0
        # log(pi/ref) = Phi(C)/beta - log Z: the regression targets with the exact Z
        logz = calibrated_partition(q, r, 0.3, transform=name, t=t).log_z
        on = q > 0
        np.testing.assert_allclose(np.log(pi[on] / q[on]), phi[on] / 0.3 - logz, atol=1e-13)


def test_callable_transform_matches_the_named_one():
    q, r = [0.2, 0.5, 0.3], [1.0, 0.3, -2.0]
    a = calibrated_partition(q, r, 0.4, transform=lambda u: np.exp(3.0 * u))
    b = calibrated_partition(q, r, 0.4, transform="exp", t=3.0)
    np.testing.assert_allclose(a.log_z, b.log_z, rtol=1e-15)
    np.testing.assert_allclose(a.log_z_continuous, b.log_z_continuous, rtol=1e-11)


def _mp_win_rate(pi, q, r, n, worst):
    # recipe: enumerate all n-tuples of draws from pi; the kept draw is the highest (lowest)
    # reward, ties split (only its reward matters); then sum q(y') [r_kept > r(y')] +
    # q(y')/2 [r_kept = r(y')]
    pi = [mp.mpf(x) for x in pi]
    q = [mp.mpf(x) for x in q]
    total = mp.mpf(0)
    for tup in itertools.product(range(len(pi)), repeat=n):
        pr = mp.fprod(pi[j] for j in tup)
        if pr == 0:
            continue
        rk = (min if worst else max)(r[j] for j in tup)
        win = mp.fsum(
            qj * (1 if rk > rj else (mp.mpf(1) / 2 if rk == rj else 0)) for qj, rj in zip(q, r)
        )
        total += pr * win
    return total


@pytest.mark.parametrize(("q", "r"), PROBLEMS)
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("decoding", ["best", "worst"])
def test_inference_win_rate_matches_enumeration(q, r, n, decoding):
    pi = calibrated_policy(q, r, 0.5, transform="exp", t=2.0 if decoding == "best" else -2.0)
    got = inference_win_rate(pi, q, r, n, decoding=decoding)
    want = _mp_win_rate(pi, q, r, n, decoding == "worst")
    assert_mp_close(got, want, rtol=1e-13)


def test_inference_win_rate_reduces_to_best_of_n_win_rate():
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(50), size=3)
    r = rng.integers(0, 8, size=(3, 50)).astype(float)
    for n in (1, 3, 64):
        np.testing.assert_allclose(
            inference_win_rate(q, q, r, n), best_of_n_win_rate(q, r, n), rtol=1e-13
        )
    # n = 1: the standard win rate E_pi[C_mid]
    pi = calibrated_policy(q, r, 0.2)
    np.testing.assert_allclose(
        inference_win_rate(pi, q, r, 1), (pi * calibrated_reward(q, r)).sum(-1), rtol=1e-14
    )


def test_exponential_transform_beats_identity_for_best_of_n_at_equal_kl():
    # InfAlign's claim on a continuous-ish problem: at the same KL, t > 0 raises the
    # best-of-4 win rate above the identity's (the standard win-rate optimum)
    from scipy.optimize import brentq

    from klpolicy import kl_divergence

    v = 2000
    q = np.full(v, 1.0 / v)
    r = np.arange(v, dtype=float)

    def at_kl(name, t, target):
        def f(lb):
            pi = calibrated_policy(q, r, np.exp(lb), transform=name, t=t)
            return float(kl_divergence(pi, q)) - target

        lb = brentq(f, -8, 8, xtol=1e-12)
        return calibrated_policy(q, r, np.exp(lb), transform=name, t=t)

    pid = at_kl("identity", None, 0.5)
    pex = at_kl("exp", 5.0, 0.5)
    w_id = float(inference_win_rate(pid, q, r, 4))
    w_ex = float(inference_win_rate(pex, q, r, 4))
    assert w_ex > w_id + 1e-3
    # and the identity wins at n = 1 (it is the standard win-rate optimum at that KL)
    assert float(inference_win_rate(pid, q, r, 1)) > float(inference_win_rate(pex, q, r, 1))


BAD = [
    (calibrated_reward, {"ties": "lower"}, "ties", "'mid', 'upper'"),
    (calibrated_reward, {"ref": [0.5, 0.6]}, "ref", "sum to 1"),
    (calibrated_reward, {"ref": [-0.5, 1.5]}, "ref", "non-negative"),
    (calibrated_partition, {"beta": 0.0}, "beta", "0"),
    (calibrated_partition, {"beta": -1.0}, "beta", "-1"),
    (calibrated_partition, {"beta": np.inf}, "beta", "inf"),
    (calibrated_partition, {"transform": "square"}, "transform", "'identity'"),
    (calibrated_partition, {"transform": "exp"}, "t", "None"),
    (calibrated_partition, {"transform": "exp", "t": 0.0}, "t", "non-zero"),
    (calibrated_partition, {"transform": "exp", "t": 1e4}, "t", "10000.0"),
    (calibrated_partition, {"t": 2.0}, "t", "'exp'"),
    (
        calibrated_partition,
        {"ties": "upper", "transform": "normal-icdf"},
        "transform",
        "ties='mid'",
    ),
    (calibrated_policy, {"ties": 1}, "ties", "'mid'"),
    (inference_win_rate, {"n": 0}, "n", "0"),
    (inference_win_rate, {"n": 2.5}, "n", "2.5"),
    (inference_win_rate, {"decoding": "median"}, "decoding", "'best', 'worst'"),
    (inference_win_rate, {"policy": [0.2, 0.2]}, "policy", "sum to 1"),
    (inference_win_rate, {"ref": [1.0, 0.1]}, "ref", "sum to 1"),
    # a callable transform: not numbers (numpy's "could not convert" before), -inf on the
    # whole support (log Z was NaN, the policy all NaN)
    (calibrated_partition, {"transform": lambda u: "x"}, "transform", "real numbers"),
    (
        calibrated_partition,
        {"transform": lambda u: np.full(np.shape(u), -np.inf)},
        "transform",
        "every calibrated reward",
    ),
    (
        calibrated_policy,
        {"transform": lambda u: np.where(u > 0.9, 0.0, -np.inf)},  # C is 1/4 and 3/4
        "transform",
        "row 0",
    ),
]


@pytest.mark.parametrize(("fn", "bad", "name", "shows"), BAD)
def test_bad_input_refused_by_name(fn, bad, name, shows):
    args = {"ref": [0.5, 0.5], "reward": [1.0, 0.0]}
    if fn is calibrated_partition or fn is calibrated_policy:
        args["beta"] = 0.5
    if fn is inference_win_rate:
        args |= {"policy": [0.7, 0.3], "n": 2}
    args |= bad
    with pytest.raises(ValueError, match=f"`{name}`") as e:
        fn(**args)
    assert shows in str(e.value)


@pytest.mark.parametrize(("t", "beta"), [(20.0, 4.5e-5), (20.0, 1.0), (None, 1e-300)])
def test_calibrated_policy_stays_normalised_when_phi_over_beta_is_huge(t, beta):
    # Phi/beta up to 1e13 (and 1e300): log(pi/ref) must be formed as (Phi - Phi_max)/beta,
    # not Phi/beta - log Z, which loses |Phi/beta| * eps (a 6.6e-4 mass error, once)
    v = 2000
    q = np.full(v, 1.0 / v)
    r = np.arange(v, dtype=float)
    pi = calibrated_policy(q, r, beta, transform="exp" if t else "identity", t=t)
    assert abs(pi.sum() - 1.0) < 1e-14
    assert np.isfinite(
        calibrated_partition(q, r, beta, transform="exp" if t else "identity", t=t).log_z
    )


def _tilt_at_kl(q, r, kl, t):
    # the exp tilt with KL(pi || ref) = kl, beta by Brent in log beta (KL falls as beta grows)
    from scipy.optimize import brentq

    from klpolicy import kl_divergence

    def gap(lb):
        return (
            float(kl_divergence(calibrated_policy(q, r, np.exp(lb), transform="exp", t=t), q)) - kl
        )

    lo, hi = -60.0, 80.0
    return calibrated_policy(q, r, np.exp(brentq(gap, lo, hi, xtol=1e-12)), transform="exp", t=t)


@pytest.mark.parametrize(("n", "decoding"), [(4, "best"), (4, "worst"), (16, "worst")])
def test_optimal_exponent_beats_a_grid_and_is_consistent(n, decoding):
    from klpolicy import kl_divergence
    from klpolicy.best_of_n import optimal_exponent

    v = 400
    q, r = np.full(v, 1.0 / v), np.arange(v, dtype=float)
    o = optimal_exponent(q, r, n, 0.5, decoding=decoding)
    assert (o.t > 0) == (decoding == "best") and not o.at_bound
    pi = calibrated_policy(q, r, o.beta, transform="exp", t=o.t)
    np.testing.assert_allclose(kl_divergence(pi, q), 0.5, rtol=1e-10)
    np.testing.assert_allclose(
        inference_win_rate(pi, q, r, n, decoding=decoding), o.win_rate, rtol=1e-12
    )
    pid = calibrated_policy(q, r, o.identity_beta)
    np.testing.assert_allclose(kl_divergence(pid, q), 0.5, rtol=1e-10)
    np.testing.assert_allclose(
        inference_win_rate(pid, q, r, n, decoding=decoding), o.identity_win_rate, rtol=1e-12
    )
    sign = 1.0 if decoding == "best" else -1.0
    for t in (0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0, 20.0):
        w = float(inference_win_rate(_tilt_at_kl(q, r, 0.5, sign * t), q, r, n, decoding=decoding))
        assert o.win_rate >= w - 1e-9, (t, w, o)
    assert o.win_rate > o.identity_win_rate + 0.01


def test_optimal_exponent_depends_on_n_and_kl_only_for_a_continuous_reward():
    # InfAlign's reduction: with C(Y) (nearly) uniform the problem does not matter
    from klpolicy.best_of_n import optimal_exponent

    a = optimal_exponent(np.full(2000, 5e-4), np.arange(2000.0), 4, 0.5)
    rng = np.random.default_rng(5)
    b = optimal_exponent(rng.dirichlet(np.full(3000, 5.0)), rng.normal(size=3000), 4, 0.5)
    np.testing.assert_allclose(a.t, b.t, rtol=1e-3)
    np.testing.assert_allclose(a.win_rate, b.win_rate, rtol=1e-4)
    # and at n = 1 the identity is the optimum: t goes to the small end, no gain
    o = optimal_exponent(np.full(2000, 5e-4), np.arange(2000.0), 1, 0.5)
    assert abs(o.t) < 0.1 and o.win_rate <= o.identity_win_rate + 1e-9


@pytest.mark.parametrize(
    ("bad", "name"),
    [
        ({"kl": 0.0}, "kl"),
        ({"kl": 5.0}, "kl"),  # above -log q_top = log 4
        ({"n": 0}, "n"),
        ({"decoding": "mean"}, "decoding"),
        ({"ties": "low"}, "ties"),
        ({"t_max": -1.0}, "t_max"),
        ({"ref": [[0.25] * 4]}, "ref"),
        ({"ref": [0.25, 0.25, 0.25, 0.3]}, "ref"),
        ({"ref": [[0.25] * 4, [0.5]]}, "ref"),  # ragged: numpy's message before
        ({"reward": [[0.0, 1.0, 2.0, 3.0], [1.0]]}, "reward"),
    ],
)
def test_optimal_exponent_refuses_bad_input_by_name(bad, name):
    from klpolicy.best_of_n import optimal_exponent

    args = {"ref": [0.25] * 4, "reward": [0.0, 1.0, 2.0, 3.0], "n": 4, "kl": 0.3} | bad
    with pytest.raises(ValueError, match=f"`{name}`"):
        optimal_exponent(**args)


@pytest.mark.parametrize("t", [1e-6, -1e-6, 1e-3, -0.01, 0.5])
@pytest.mark.parametrize("beta", [0.3, 100.0])
def test_exponential_closed_form_for_small_exponents(t, beta):
    # where Ei(e^t/beta) - Ei(1/beta) cancels (|e^t - 1|/beta small): against mpmath's
    # exponential integrals at 40 digits
    b, a = mp.mpf(beta), mp.mpf(t)
    if t > 0:
        want = mp.log((mp.ei(mp.exp(a) / b) - mp.ei(1 / b)) / a)
    else:
        want = mp.log((mp.e1(mp.exp(a) / b) - mp.e1(1 / b)) / -a)
    got = CALIBRATED_TRANSFORMS["exp"].log_z_uniform(beta, t)
    assert_mp_close(got, want, rtol=1e-13, atol=1e-16)


@pytest.mark.parametrize("t_max", [1e-3, 5e-3])
@pytest.mark.parametrize("decoding", ["best", "worst"])
def test_optimal_exponent_stays_within_a_small_t_max(t_max, decoding):
    """Below t_max = 1e-2 the grid ran backwards, from 1e-2 down, and t came out > t_max."""
    from klpolicy.best_of_n import optimal_exponent

    o = optimal_exponent([0.5, 0.3, 0.2], [1.0, 0.0, -1.0], 2, 0.1, decoding=decoding, t_max=t_max)
    assert abs(o.t) <= t_max * (1 + 1e-12)
    assert (o.t > 0) == (decoding == "best")
    # the win rate rises with |t| here (the best exponent is about 3), so the bound binds
    assert o.at_bound
