"""Preference games: the regularised Nash equilibrium, Nash-MD, and the geometric mixture.

References are computed here in mpmath, independently of klpolicy's solver:

* the equilibrium: ``mpmath.findroot`` (multidimensional Newton) on the n + 1 equations
  ``tau (z_i - log mu_i) - sum_j P_ij exp(z_j) - c = 0``, ``sum_j exp(z_j) = 1`` in the
  unknowns ``(z, c)`` (``z`` the log-policy), at 40 digits, started from ``(log mu, 0)``;
  the regularised game has one equilibrium, so the root found is it;
* best responses and the regularised payoff ``P_tau(x > y) = x^T P y - tau KL(x||mu) +
  tau KL(y||mu)`` from their definitions, in mpmath;
* the geometric mixtures by enumerating every sequence of the tree in mpmath.
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from klpolicy import optimal_policy
from klpolicy.preference import (
    best_response,
    dpo_optimum,
    exploitability,
    geometric_mixture_laws,
    nash_equilibrium,
    nash_md_path,
    nash_md_rate,
)
from klpolicy.testing.strategies import distributions
from tests._mpref import assert_mp_close

RPS = np.array([[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]])


def _random_game(rng, n, lo=0.0, hi=1.0):
    p = np.full((n, n), 0.5)
    for i, j in itertools.combinations(range(n), 2):
        p[i, j] = rng.uniform(lo, hi)
        p[j, i] = 1.0 - p[i, j]
    return p


def _mp_equilibrium(p, tau, mu):
    """The equilibrium by mpmath.findroot on (z, c) (recipe in the module docstring)."""
    n = len(mu)
    P = [[mp.mpf(float(x)) for x in row] for row in p]
    lmu = [mp.log(mp.mpf(float(x))) for x in mu]
    t = mp.mpf(tau)

    def eqs(*v):
        z, c = v[:n], v[n]
        e = [mp.exp(zj) for zj in z]
        out = [
            t * (z[i] - lmu[i]) - mp.fsum(P[i][j] * e[j] for j in range(n)) - c for i in range(n)
        ]
        return out + [mp.fsum(e) - 1]

    root = mp.findroot(eqs, lmu + [mp.mpf(0)], tol=mp.mpf(10) ** (-35), maxsteps=200)
    return [mp.exp(root[i]) for i in range(n)]


def _mp_payoff(x, y, p, tau, mu):
    """P_tau(x > y) = x^T P y - tau KL(x||mu) + tau KL(y||mu), in mpmath."""
    n = len(mu)

    def kl(a):
        return mp.fsum(
            mp.mpf(a[i]) * mp.log(mp.mpf(a[i]) / mp.mpf(mu[i])) for i in range(n) if a[i] > 0
        )

    xy = mp.fsum(mp.mpf(x[i]) * mp.mpf(p[i][j]) * mp.mpf(y[j]) for i in range(n) for j in range(n))
    return xy - tau * kl(x) + tau * kl(y)


# ---------------------------------------------------------------------------
# the equilibrium against mpmath
# ---------------------------------------------------------------------------


@pytest.mark.mp_dps(40)
@pytest.mark.parametrize("tau", [3.0, 0.5, 0.08])
@pytest.mark.parametrize("n", [3, 6])
def test_equilibrium_matches_mpmath_findroot(rng, n, tau):
    for _ in range(2):
        p = _random_game(rng, n)
        mu = rng.dirichlet(np.ones(n))
        eq = nash_equilibrium(p, tau, mu=mu)
        want = _mp_equilibrium(p, tau, mu)
        assert_mp_close(eq.policy, want, rtol=1e-12, what="pi*_tau: ")
        assert eq.gap < 1e-26
        assert abs(eq.value - 0.5) < 1e-26
        assert_mp_close(eq.win_rate, eq.policy @ p @ mu, rtol=1e-15)


def test_the_best_response_to_the_equilibrium_is_itself(rng):
    for n, tau in [(4, 1.0), (10, 0.2), (30, 0.03)]:
        p = _random_game(rng, n)
        mu = rng.dirichlet(np.ones(n))
        pi = nash_equilibrium(p, tau, mu=mu).policy
        # the KL-regularised optimum of the reward P pi, computed by klpolicy's closed form
        br = optimal_policy(mu, p @ pi, tau)
        np.testing.assert_allclose(br, pi, rtol=1e-12, atol=0)
        np.testing.assert_allclose(best_response(pi, p, tau, mu=mu), pi, rtol=1e-12, atol=0)


@pytest.mark.mp_dps(40)
def test_no_unilateral_deviation_gains(rng):
    n, tau = 4, 0.3
    p = _random_game(rng, n)
    mu = rng.dirichlet(np.ones(n))
    pi = nash_equilibrium(p, tau, mu=mu).policy
    for _ in range(20):
        dev = rng.dirichlet(np.ones(n) * 0.5)
        # the max player cannot beat pi; the min player cannot push pi below 1/2
        assert _mp_payoff(dev, pi, p, tau, mu) <= mp.mpf(0.5) + mp.mpf(1e-14)
        assert _mp_payoff(pi, dev, p, tau, mu) >= mp.mpf(0.5) - mp.mpf(1e-14)
    # pi sums to one within rounding, and pi^T P pi = (sum pi)^2 / 2
    assert abs(_mp_payoff(pi, pi, p, tau, mu) - mp.mpf(0.5)) < 1e-15


@pytest.mark.mp_dps(40)
def test_exploitability_is_the_best_deviation_gain(rng):
    n, tau = 5, 0.4
    p = _random_game(rng, n)
    mu = rng.dirichlet(np.ones(n))
    pi = rng.dirichlet(np.ones(n))
    # the best deviation against pi is the regularised optimum of the reward P pi
    br = optimal_policy(mu, p @ pi, tau)
    want = _mp_payoff(br, pi, p, tau, mu) - mp.mpf(0.5)
    assert_mp_close(exploitability(pi, p, tau, mu=mu), want, rtol=1e-12)
    # and no other deviation does better
    for _ in range(10):
        dev = rng.dirichlet(np.ones(n))
        assert _mp_payoff(dev, pi, p, tau, mu) - mp.mpf(0.5) <= want + mp.mpf(1e-15)


# ---------------------------------------------------------------------------
# closed forms and limits
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("tau", [10.0, 1.0, 0.1, 1e-3, 1e-6])
def test_rock_paper_scissors_uniform_reference_gives_uniform(tau):
    eq = nash_equilibrium(RPS, tau)
    np.testing.assert_allclose(eq.policy, np.full(3, 1 / 3), rtol=1e-15)
    # any balanced tournament (each outcome beats as many as it loses to): uniform too
    n = 5
    cyc = np.full((n, n), 0.5)
    for i in range(n):
        for k in (1, 2):
            cyc[i, (i + k) % n], cyc[(i + k) % n, i] = 0.8, 0.2
    np.testing.assert_allclose(nash_equilibrium(cyc, tau).policy, np.full(n, 0.2), rtol=1e-14)


def test_tau_to_infinity_gives_the_reference(rng):
    p = _random_game(rng, 6)
    mu = rng.dirichlet(np.ones(6))
    assert np.array_equal(nash_equilibrium(p, np.inf, mu=mu).policy, mu)
    prev = math.inf
    for tau in (1e2, 1e4, 1e6):
        d = np.max(np.abs(nash_equilibrium(p, tau, mu=mu).policy / mu - 1))
        assert d < math.expm1(1 / tau)  # |log(pi/mu)| <= 2 max |A pi| / tau <= 1 / tau
        assert d < prev
        prev = d


def test_tau_to_zero_with_a_condorcet_winner_gives_the_winner(rng):
    n, w = 6, 3
    p = _random_game(rng, n, 0.2, 0.8)
    p[w, :] = np.where(np.arange(n) == w, 0.5, 0.6)  # w beats everyone with probability 0.6
    p[:, w] = 1 - p[w, :]
    mu = rng.dirichlet(np.ones(n))
    prev = 0.0
    for tau in (1.0, 0.1, 0.03, 0.01, 0.003):
        pw = nash_equilibrium(p, tau, mu=mu).policy[w]
        assert pw > prev
        prev = pw
    assert prev > 1 - 1e-10


def test_permutation_equivariance(rng):
    n = 7
    p = _random_game(rng, n)
    mu = rng.dirichlet(np.ones(n))
    perm = rng.permutation(n)
    a = nash_equilibrium(p, 0.15, mu=mu).policy
    b = nash_equilibrium(p[np.ix_(perm, perm)], 0.15, mu=mu[perm]).policy
    np.testing.assert_allclose(b, a[perm], rtol=1e-13)


def test_zeros_of_the_reference_stay_zeros(rng):
    n = 6
    p = _random_game(rng, n)
    mu = rng.dirichlet(np.ones(n))
    mu[[1, 4]] = 0.0
    mu /= mu.sum()
    pi = nash_equilibrium(p, 0.2, mu=mu).policy
    assert pi[1] == 0.0 and pi[4] == 0.0
    keep = [0, 2, 3, 5]
    sub = nash_equilibrium(p[np.ix_(keep, keep)], 0.2, mu=mu[keep]).policy
    np.testing.assert_allclose(pi[keep], sub, rtol=1e-14)


def test_float32_in_float32_out():
    eq = nash_equilibrium(RPS.astype(np.float32), 0.5, mu=np.array([0.5, 0.25, 0.25], np.float32))
    assert eq.policy.dtype == np.float32
    assert nash_equilibrium(RPS, 0.5).policy.dtype == np.float64


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

BAD = [
    (
        dict(preferences=[[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]]),
        r"`preferences` must be a non-empty square matrix \(n, n\); got shape \(2, 3\)",
    ),
    (dict(preferences=[0.5]), r"`preferences` must be a non-empty square matrix"),
    (
        dict(preferences=[[0.5, 0.9], [0.3, 0.5]]),
        r"`preferences` must satisfy P\[i, j\] \+ P\[j, i\] = 1 \(tolerance 1.5e-08\); "
        r"found P\[0, 1\] \+ P\[1, 0\] = 1.2",
    ),
    (
        dict(preferences=[[0.4, 0.5], [0.5, 0.6]]),
        r"`preferences` must satisfy P\[i, j\] \+ P\[j, i\] = 1 .*found P\[0, 0\] \+ P\[0, 0\] = 0.8",
    ),
    (
        dict(preferences=[[0.5, 1.5], [-0.5, 0.5]]),
        r"`preferences` entries must lie in \[0, 1\]; found 1.5 at index \(0, 1\)",
    ),
    (
        dict(preferences=[[0.5, np.nan], [0.5, 0.5]]),
        r"`preferences` must not contain NaN; found nan at index \(0, 1\)",
    ),
    (dict(tau=0.0), r"`tau` must be a positive number; got 0"),
    (dict(tau=-1.0), r"`tau` must be a positive number; got -1"),
    (dict(tau=np.nan), r"`tau` must be a positive number; got nan"),
    (
        dict(mu=[0.5, 0.6, 0.1]),
        r"`mu` must sum to 1 along axis -1; it sums to 1.2",
    ),
    (dict(mu=[0.5, -0.5, 1.0]), r"`mu` must be non-negative; found -0.5 at index \(1,\)"),
    (
        dict(mu=[0.5, 0.5]),
        r"`mu` must be one distribution over the 3 outcomes of `preferences`; got shape \(2,\)",
    ),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD)
def test_bad_input_is_refused_by_name(kwargs, message):
    call = dict(preferences=RPS, tau=0.5, mu=None) | kwargs
    with pytest.raises(ValueError, match=message):
        nash_equilibrium(call["preferences"], call["tau"], mu=call["mu"])


def test_bad_nash_md_input_is_refused_by_name():
    with pytest.raises(
        ValueError, match=r"`eta` \* `tau` must be at most 1 .* got eta = 3 with tau = 0.5"
    ):
        nash_md_path(RPS, 0.5, 3.0, 4)
    with pytest.raises(ValueError, match=r"`eta` must be one number or one step size per step"):
        nash_md_path(RPS, 0.5, [0.1, 0.2], 4)
    with pytest.raises(
        ValueError, match=r"`eta` must hold finite numbers > 0; found -0.1 at index \(1,\)"
    ):
        nash_md_path(RPS, 0.5, [0.1, -0.1], 2)
    with pytest.raises(
        ValueError, match=r"`init` must be positive wherever `mu` is; found 0 at index \(2,\)"
    ):
        nash_md_path(RPS, 0.5, 0.1, 2, init=[0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match=r"`tau` must be a positive finite number; got inf"):
        nash_md_path(RPS, np.inf, 0.1, 2)
    with pytest.raises(ValueError, match=r"`eta` \* `tau` must be below 1 for a rate"):
        nash_md_rate(RPS, 0.5, 2.0)
    with pytest.raises(
        ValueError, match=r"`policy` must be 0 where `mu` is 0; found 0.5 at index \(2,\)"
    ):
        best_response([0.25, 0.25, 0.5], RPS, 1.0, mu=[0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match=r"`mixture_coef` must be a number in \[0, 1\]; got 1.5"):
        geometric_mixture_laws(TREE_P, TREE_R, 1.5)


# ---------------------------------------------------------------------------
# Nash-MD
# ---------------------------------------------------------------------------


def test_nash_md_step_is_the_papers_argmax(rng):
    """One step against the closed form of argmax eta P(pi > pi^mu) - KL(pi || pi^mu)."""
    n, tau, eta = 4, 0.7, 0.3
    p = _random_game(rng, n)
    mu = rng.dirichlet(np.ones(n))
    pi0 = rng.dirichlet(np.ones(n))
    mix = pi0 ** (1 - eta * tau) * mu ** (eta * tau)
    mix /= mix.sum()
    want = optimal_policy(mix, eta * (p @ mix), 1.0)  # pi^mu exp(eta P pi^mu) / Z
    got = nash_md_path(p, tau, eta, 1, mu=mu, init=pi0)
    np.testing.assert_allclose(got[0], pi0, rtol=0)
    np.testing.assert_allclose(got[1], want, rtol=1e-13)


def test_nash_md_on_rock_paper_scissors_converges_to_the_equilibrium_at_the_rate():
    tau, eta = 0.5, 0.5
    rate = nash_md_rate(RPS, tau, eta)
    # closed form for uniform mu: omega = (1/3)(sqrt(3)/2), rate = (1 - eta tau) sqrt(1 + eta^2 omega^2)
    omega = math.sqrt(3) / 6
    assert rate.frequency == pytest.approx(omega, rel=1e-14)
    assert rate.rate == pytest.approx(
        (1 - eta * tau) * math.sqrt(1 + (eta * omega) ** 2), rel=1e-14
    )
    np.testing.assert_allclose(rate.fixed_point, nash_equilibrium(RPS, tau).policy, rtol=1e-15)
    path = nash_md_path(RPS, tau, eta, 80, init=[0.7, 0.2, 0.1])
    x = np.log(path)
    err = x - x.mean(axis=1, keepdims=True)  # log-policy error, constants removed (x* = 0)
    norms = np.linalg.norm(err, axis=1)
    ratios = norms[1:] / norms[:-1]
    # three outcomes: the linearised map scales every error by exactly the rate; what is
    # left is the map's curvature (relative ~ the error, 1e-7 at step 55) and rounding
    np.testing.assert_allclose(ratios[55:75], rate.rate, rtol=1e-6)


def test_nash_md_converges_to_its_fixed_point_at_the_stated_rate(rng):
    n, tau, eta = 3, 0.4, 0.8
    p = _random_game(rng, n)
    mu = rng.dirichlet(np.ones(n) * 2)
    r = nash_md_rate(p, tau, eta, mu=mu)
    assert r.rate < 1
    path = nash_md_path(p, tau, eta, 150, mu=mu, init=rng.dirichlet(np.ones(n)))
    # the fixed point is the best response to the equilibrium at tau / (1 - eta tau)
    m = nash_equilibrium(p, tau / (1 - eta * tau), mu=mu).policy
    np.testing.assert_allclose(r.mixture, m, rtol=1e-13)
    np.testing.assert_allclose(r.fixed_point, best_response(m, p, tau, mu=mu), rtol=1e-13)
    np.testing.assert_allclose(path[-1], r.fixed_point, rtol=1e-12)
    # the error in y = L^T (x - x*) shrinks by exactly the rate per step (n = 3)
    s = np.sqrt(r.mixture)
    low_t = (np.eye(n) - np.outer(s, s)) @ np.diag(s)
    y = (np.log(path) - np.log(r.fixed_point)) @ low_t.T
    norms = np.linalg.norm(y, axis=1)
    good = norms > 1e-9
    ratios = norms[1:][good[1:]] / norms[:-1][good[1:]]
    np.testing.assert_allclose(ratios[-10:], r.rate, rtol=1e-6)


def test_nash_md_limit_is_not_the_equilibrium_and_its_offset_is_order_eta(rng):
    n, tau = 5, 0.5
    p = _random_game(rng, n)
    mu = rng.dirichlet(np.ones(n))
    pi = nash_equilibrium(p, tau, mu=mu).policy
    offs = [
        np.max(np.abs(nash_md_rate(p, tau, eta, mu=mu).fixed_point - pi)) for eta in (0.02, 0.01)
    ]
    assert offs[0] > 1e-6  # a real offset, not rounding
    assert offs[0] / offs[1] == pytest.approx(2.0, rel=0.05)  # linear in eta


def test_nash_md_obeys_the_papers_bounds(rng):
    """Munos et al. Theorem 1: constant eta, and the decreasing schedule eta_t = 2/(tau(t+2))."""
    n, tau = 6, 0.5
    for _ in range(3):
        p = _random_game(rng, n)
        mu = rng.dirichlet(np.ones(n))
        pistar = nash_equilibrium(p, tau, mu=mu).policy

        def kl(path, pistar=pistar):
            return np.sum(pistar * (np.log(pistar) - np.log(path)), axis=1)

        steps = 200
        eta = 2.0 / (tau * (np.arange(steps) + 2.0))
        path = nash_md_path(p, tau, eta, steps, mu=mu, init=rng.dirichlet(np.ones(n)))
        t = np.arange(1, steps + 1)
        assert np.all(kl(path)[1:] <= 8.0 / (tau**2 * (t + 1)))
        eta = 0.2
        path = nash_md_path(p, tau, eta, steps, mu=mu, init=rng.dirichlet(np.ones(n)))
        k = kl(path)
        assert np.all(k <= (1 - eta * tau) ** np.arange(steps + 1) * k[0] + 2 * eta / tau + 1e-15)


# ---------------------------------------------------------------------------
# the geometric mixture, per token (TRL) and per sequence
# ---------------------------------------------------------------------------

TREE_P = [[0.6, 0.3, 0.1], [[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]]]
TREE_R = [[0.2, 0.5, 0.3], [[0.3, 0.3, 0.4], [0.5, 0.25, 0.25], [0.6, 0.2, 0.2]]]


def _mp_mixtures(pol, ref, alpha):
    """Both mixtures by enumerating every sequence (T = 2) in mpmath."""
    a = mp.mpf(alpha)
    v = len(pol[0])
    seqs = list(itertools.product(range(v), repeat=2))

    def lp(tree, s):
        return mp.log(mp.mpf(tree[0][s[0]])) + mp.log(mp.mpf(tree[1][s[0]][s[1]]))

    w = [mp.exp((1 - a) * lp(pol, s) + a * lp(ref, s)) for s in seqs]
    z = mp.fsum(w)
    per_seq = [x / z for x in w]

    def cond(pp, rr):  # softmax(a log r + (1 - a) log p): TRL's mixed logits
        e = [mp.mpf(pp[k]) ** (1 - a) * mp.mpf(rr[k]) ** a for k in range(v)]
        t = mp.fsum(e)
        return [x / t for x in e]

    first = cond(pol[0], ref[0])
    per_tok = [first[s[0]] * cond(pol[1][s[0]], ref[1][s[0]])[s[1]] for s in seqs]
    kl = mp.fsum(q * mp.log(q / r) for q, r in zip(per_tok, per_seq))
    rkl = mp.fsum(r * mp.log(r / q) for q, r in zip(per_tok, per_seq))
    return per_tok, per_seq, kl, rkl


@pytest.mark.mp_dps(40)
@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.9])
def test_geometric_mixtures_match_enumeration(alpha):
    g = geometric_mixture_laws(TREE_P, TREE_R, alpha)
    tok, seq, kl, rkl = _mp_mixtures(TREE_P, TREE_R, alpha)
    assert_mp_close(g.per_token.ravel(), tok, rtol=1e-13, what="per token: ")
    assert_mp_close(g.per_sequence.ravel(), seq, rtol=1e-13, what="per sequence: ")
    assert_mp_close(g.kl, kl, rtol=1e-10, what="KL: ")
    assert_mp_close(g.reverse_kl, rkl, rtol=1e-10, what="reverse KL: ")
    assert g.kl > 1e-4  # the per-token mixture is a different law


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_geometric_mixtures_agree_at_the_ends(alpha):
    g = geometric_mixture_laws(TREE_P, TREE_R, alpha)
    np.testing.assert_allclose(g.per_token, g.per_sequence, rtol=1e-15)
    assert g.kl == pytest.approx(0.0, abs=1e-16)


def test_geometric_mixtures_agree_when_the_trees_differ_only_at_the_first_token():
    pol = [[0.6, 0.3, 0.1], TREE_R[1]]
    g = geometric_mixture_laws(pol, TREE_R, 0.4)
    np.testing.assert_allclose(g.per_token, g.per_sequence, rtol=1e-14)


# ---------------------------------------------------------------------------
# Bradley-Terry / DPO on intransitive preferences
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.1, 1.0, 10.0])
def test_dpo_collapses_to_the_reference_on_rock_paper_scissors(beta):
    """Balanced pairs: the Bradley-Terry fit of a cycle is flat, so DPO returns the reference."""
    ref = np.full(3, 1 / 3)
    for prefs in (RPS, 0.5 + 0.6 * (RPS - 0.5)):
        np.testing.assert_allclose(dpo_optimum(ref, prefs, beta), ref, rtol=1e-12)
        np.testing.assert_allclose(nash_equilibrium(prefs, beta, mu=ref).policy, ref, rtol=1e-14)


def test_dpo_on_a_cycle_follows_the_pair_law_not_the_preferences():
    """Unbalanced pairs: DPO's optimum is an artefact of the sampling law.

    The preferences and the reference are symmetric under the rotation rock -> paper ->
    scissors; the pair law is not. DPO's optimum moves away from the reference, and rotating
    the pair law rotates the answer, so it is set by which pairs were drawn. The Nash
    equilibrium (no pair law) stays the reference, unexploitable; DPO's answer is exploitable.
    """
    ref = np.full(3, 1 / 3)
    prefs = 0.5 + 0.6 * (RPS - 0.5)
    beta = 0.5
    m = np.array([0.6, 0.3, 0.1])
    a = dpo_optimum(ref, prefs, beta, mu=m)
    b = dpo_optimum(ref, prefs, beta, mu=np.roll(m, 1))
    assert np.max(np.abs(a - ref)) > 0.05
    np.testing.assert_allclose(b, np.roll(a, 1), rtol=1e-10)
    eq = nash_equilibrium(prefs, beta, mu=ref)
    np.testing.assert_allclose(eq.policy, ref, rtol=1e-14)
    assert exploitability(eq.policy, prefs, beta, mu=ref) < 1e-30
    assert exploitability(a, prefs, beta, mu=ref) > 1e-3


@pytest.mark.parametrize("tau", [1e-4, 1e-8, 1e-12])
def test_tiny_tau_still_solves_to_rounding(rng, tau):
    """Continuation in tau: the fixed point holds to rounding down to tau = 1e-12."""
    for n in (3, 12, 40):
        p = _random_game(rng, n)
        mu = rng.dirichlet(np.ones(n))
        eq = nash_equilibrium(p, tau, mu=mu)
        # the equilibrium is its own best response, in log space where the mass is tiny
        pos = eq.policy > 0
        br = best_response(eq.policy, p, tau, mu=mu)
        lp, lb = np.log(eq.policy[pos]), np.log(br[pos])
        # log-policies of size 1/tau carry rounding of eps / tau
        assert np.max(np.abs(lp - lb)) <= 64 * n * np.finfo(float).eps / tau
        assert eq.gap <= 1e-18


def test_per_token_over_per_sequence_is_the_ratio_of_normalisers():
    """q_tok(y) / q_seq(y) = Z / prod_t Z(a_<t), and Z(a_<t) <= 1 (Hoelder)."""
    alpha = 0.35
    g = geometric_mixture_laws(TREE_P, TREE_R, alpha)
    p0, r0 = np.array(TREE_P[0]), np.array(TREE_R[0])
    p1, r1 = np.array(TREE_P[1]), np.array(TREE_R[1])
    z0 = np.sum(p0 ** (1 - alpha) * r0**alpha)
    z1 = np.sum(p1 ** (1 - alpha) * r1**alpha, axis=1)  # one per first token
    joint_mix = (p0 ** (1 - alpha) * r0**alpha)[:, None] * p1 ** (1 - alpha) * r1**alpha
    z = joint_mix.sum()
    want = np.broadcast_to(z / (z0 * z1[:, None]), (3, 3))
    np.testing.assert_allclose(g.per_token / g.per_sequence, want, rtol=1e-13)
    assert z0 <= 1 and np.all(z1 <= 1)


def test_a_prefix_with_no_shared_next_token_is_refused():
    pol = [[0.5, 0.5], [[1.0, 0.0], [0.5, 0.5]]]
    ref = [[0.5, 0.5], [[0.0, 1.0], [0.5, 0.5]]]
    with pytest.raises(
        ValueError, match=r"per-token mixture is undefined at position 1, prefix \(0,\)"
    ):
        geometric_mixture_laws(pol, ref, 0.5)
    # at the ends there is no mixture to take: the laws are the trees themselves
    g = geometric_mixture_laws(pol, ref, 0.0)
    np.testing.assert_allclose(g.per_token, [[0.5, 0.0], [0.25, 0.25]])


def test_nash_md_keeps_zeros_of_the_reference_and_one_outcome_games(rng):
    p = _random_game(rng, 4)
    mu = np.array([0.5, 0.0, 0.3, 0.2])
    path = nash_md_path(p, 0.5, 0.4, 400, mu=mu, init=[0.25, 0.25, 0.25, 0.25])
    assert np.all(path[1:, 1] == 0.0)
    r = nash_md_rate(p, 0.5, 0.4, mu=mu)
    assert r.fixed_point[1] == 0.0 and r.rate**400 < 1e-13
    np.testing.assert_allclose(path[-1], r.fixed_point, rtol=1e-10)
    one = nash_equilibrium([[0.5]], 0.3)
    assert one.policy.tolist() == [1.0] and one.gap == 0.0
    assert nash_md_rate([[0.5]], 0.3, 0.5).rate == pytest.approx(0.85)


def test_exploitability_at_infinite_tau():
    mu = np.array([0.5, 0.3, 0.2])
    assert exploitability(mu, RPS, np.inf, mu=mu) == 0.0
    assert exploitability([0.4, 0.4, 0.2], RPS, np.inf, mu=mu) == math.inf
    np.testing.assert_array_equal(best_response([1.0, 0.0, 0.0], RPS, np.inf, mu=mu), mu)


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------


@st.composite
def _games(draw):
    mu = draw(distributions(min_size=2, max_size=7, min_entry=1e-12))
    n = mu.size
    upper = draw(
        st.lists(st.floats(0.0, 1.0), min_size=n * (n - 1) // 2, max_size=n * (n - 1) // 2)
    )
    p = np.full((n, n), 0.5)
    iu = np.triu_indices(n, 1)
    p[iu] = upper
    p[(iu[1], iu[0])] = 1.0 - p[iu]
    tau = draw(st.sampled_from([10.0, 1.0, 0.3, 0.05, 0.01]))
    perm = np.array(draw(st.permutations(range(n))))
    return p, mu, tau, perm


@given(_games())
def test_property_the_equilibrium_is_its_own_best_response_and_equivariant(game):
    p, mu, tau, perm = game
    eq = nash_equilibrium(p, tau, mu=mu)
    pi = eq.policy
    assert np.all(pi[mu == 0] == 0) and abs(pi.sum() - 1) < 1e-13
    assert eq.gap < 1e-20 and abs(eq.value - 0.5) < 1e-20
    s = mu > 0
    # its own best response, in log space on the support (tiny entries keep their digits)
    lb = np.log(best_response(pi, p, tau, mu=mu)[s])
    assert np.max(np.abs(np.log(pi[s]) - lb)) <= 1e-10 * max(1.0, 1.0 / tau)
    other = nash_equilibrium(p[np.ix_(perm, perm)], tau, mu=mu[perm]).policy
    np.testing.assert_allclose(other, pi[perm], rtol=1e-9, atol=1e-300)
