"""expected_gradient's ``sample_reward``: the reward's part of the gradient drawn from the sampler.

In GRPO and PPO the reward's policy gradient and the KL term come from the same samples,
the engine's. With ``sample_reward="sampler"`` the loss placement's reward part is
``E_{y~mu}[c(y) (r_y - E_mu r) grad log pi(y)]`` (the reward placement's weight ``c``);
``"policy"`` is the exact ``pi (r - E_pi r)``, the loss placement's default.

mpmath recipe (independent of klpolicy's formulas): at 40 digits the trainer's surrogate
is written per outcome ``y``, weighted by the sampler's probability ``mu_y`` (held fixed),
with detached factors evaluated at the current logits ``theta0`` and live factors
functions of ``theta``: the reward term ``mu_y c_y (r_y - m_r) log pi_y(theta)`` (``c``
live and no ``log pi`` for a differentiable ratio) or ``pi_y(theta) r_y`` (the exact
reward), the KL term as the placement writes it; ``mpmath.diff`` differentiates it.
"""

from __future__ import annotations

import itertools

import mpmath as mp
import numpy as np
import pytest
from scipy.optimize import root

import klpolicy.estimators as E

from .._mpref import assert_mp_close

pytestmark = pytest.mark.mp_dps(40)

_K = {
    "k1": lambda l: l,
    "k2": lambda l: l * l / 2,
    "k3": lambda l: mp.exp(-l) - 1 + l,
    "abs": lambda l: abs(l),
}


def _softmax(th):
    m = max(th)
    e = [mp.exp(x - m) for x in th]
    s = sum(e)
    return [x / s for x in e]


def _mp_gradient(th0, ref, r, beta, est, place, sampler, ratio, clip, source):
    th0, ref, r = ([mp.mpf(float(x)) for x in v] for v in (th0, ref, r))
    n = len(th0)
    pi0 = _softmax(th0)
    mu = _softmax([mp.mpf(float(x)) for x in sampler])
    base = est.rstrip("+")
    lo, hi = (0, mp.inf) if clip is None else (mp.mpf(clip[0]), mp.mpf(clip[1]))
    l0 = [mp.log(pi0[y] / ref[y]) for y in range(n)]
    w0 = [pi0[y] / mu[y] for y in range(n)]
    k0 = [_K[base](l0[y]) for y in range(n)]
    m_r = sum(mu[y] * r[y] for y in range(n))
    m_k = sum(mu[y] * k0[y] for y in range(n))

    def k_live(l, y):  # straight-through rows: k2 live, the named value held
        if est.endswith("+"):
            return _K["k2"](l) - _K["k2"](l0[y]) + k0[y]
        return _K[est](l)

    def sampled(y, x, m, pi_y, lp):  # mu c (x - m) as the reward placement writes it
        c = {"none": 1, "detached": min(max(w0[y], lo), hi)}.get(ratio)
        if c is None:  # differentiable: the weight is live, no log pi
            return mu[y] * min(max(pi_y / mu[y], lo), hi) * (x - m)
        return mu[y] * c * (x - m) * lp

    def surrogate(*th):
        pi = _softmax(list(th))
        total = 0
        for y in range(n):
            lp = mp.log(pi[y])
            if source == "sampler":
                total += sampled(y, r[y], m_r, pi[y], lp)
            else:
                total += pi[y] * r[y]
            if place == "reward":
                total -= beta * sampled(y, k0[y], m_k, pi[y], lp)
            else:
                w = pi[y] / mu[y]
                c = {
                    "none": 1,
                    "detached": min(max(w0[y], lo), hi),
                    "differentiable": min(max(w, lo), hi),
                }[ratio]
                total -= beta * mu[y] * c * k_live(mp.log(pi[y] / ref[y]), y)
        return total

    return [mp.diff(surrogate, th0, tuple(int(i == j) for i in range(n))) for j in range(n)]


TH = np.array([0.4, -0.3, 0.1, -1.2])
REF = np.array([0.3, 0.3, 0.25, 0.15])
R = np.array([1.0, -0.3, 0.4, 0.8])
OLD = np.array([0.0, 0.5, -0.4, 0.2])


@pytest.mark.parametrize("est", E.estimator_names(straight_through=True))
@pytest.mark.parametrize("place", E.PLACEMENTS)
def test_sample_reward_matches_mpmath(est, place):
    for ratio, clip, source in itertools.product(
        E.RATIOS, [None, (0.8, 1.25)], ["policy", "sampler"]
    ):
        got = E.expected_gradient(
            TH,
            REF,
            R,
            0.7,
            estimator=est,
            placement=place,
            sampler=OLD,
            ratio=ratio,
            ratio_clip=clip,
            sample_reward=source,
        )
        want = _mp_gradient(TH, REF, R, 0.7, est, place, OLD, ratio, clip, source)
        assert_mp_close(got, want, rtol=1e-12, atol=1e-14, what=f"{ratio} {clip} {source}: ")


def test_the_default_is_each_placements_own():
    kw = {"estimator": "k3", "sampler": OLD}
    for place, own in (("reward", "sampler"), ("loss", "policy")):
        default = E.expected_gradient(TH, REF, R, 0.7, placement=place, **kw)
        same = E.expected_gradient(TH, REF, R, 0.7, placement=place, sample_reward=own, **kw)
        other = "policy" if own == "sampler" else "sampler"
        changed = E.expected_gradient(TH, REF, R, 0.7, placement=place, sample_reward=other, **kw)
        np.testing.assert_array_equal(default, same)
        assert np.abs(changed - default).max() > 0.01
    # without a sampler (or with unclipped importance weights) the two are the same
    for source in ("policy", "sampler"):
        a = E.expected_gradient(
            TH, REF, R, 0.7, estimator="k2", placement="loss", sample_reward=source
        )
        b = E.expected_gradient(
            TH,
            REF,
            R,
            0.7,
            estimator="k2",
            placement="loss",
            sampler=OLD,
            ratio="detached",
            sample_reward=source,
        )
        np.testing.assert_allclose(
            a, E.expected_gradient(TH, REF, R, 0.7, estimator="k2", placement="loss"), atol=1e-16
        )
        np.testing.assert_allclose(b, a, atol=1e-15)


def test_the_reward_part_from_the_sampler_is_mu_times_the_centred_reward():
    # beta = 0, no ratio: sum_y mu_y (r_y - E_mu r)(e_y - pi) = mu (r - E_mu r), whatever pi
    mu = np.exp(OLD) / np.exp(OLD).sum()
    for th in (TH, np.zeros(4), np.array([3.0, -2.0, 0.0, 1.0])):
        g = E.expected_gradient(
            th, REF, R, 0.0, estimator="k1", placement="loss", sampler=OLD, sample_reward="sampler"
        )
        np.testing.assert_allclose(g, mu * (R - mu @ R), atol=1e-15)


def test_fixed_point_with_the_reward_from_a_fixed_sampler():
    ref, r, beta = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.0, 0.5, 1.0, 2.0]), 1.0
    old = np.log([0.25, 0.25, 0.25, 0.25])
    kw = {
        "estimator": "k2",
        "placement": "loss",
        "sampler": old,
        "ratio": "detached",
        "ratio_clip": (0.8, 1.25),
    }
    p = E.fixed_point(ref, r, beta, sample_reward="sampler", **kw)
    g = E.expected_gradient(np.log(p), ref, r, beta, sample_reward="sampler", **kw)
    assert np.abs(g).max() < 1e-12
    assert bool(E.fixed_point_stability(p, ref, r, beta, sample_reward="sampler", **kw).stable)
    # an independent zero: scipy's root of the field written out here, in the free logits
    mu = np.full(4, 0.25)

    def field(z):
        th = np.append(z, 0.0)
        pi = np.exp(th - th.max())
        pi /= pi.sum()
        w = pi / mu
        c = np.clip(w, 0.8, 1.25)  # the detached weight
        a = mu * c * (r - mu @ r) - beta * mu * c * np.log(pi / ref)
        return (a - pi * a.sum())[:-1]

    start = np.log(p[:-1] / p[-1])
    sol = root(field, start + 0.05, tol=1e-14)
    th = np.append(sol.x, 0.0)
    q = np.exp(th - th.max())
    np.testing.assert_allclose(p, q / q.sum(), atol=1e-10)
    # and the two sources land apart
    assert np.abs(E.fixed_point(ref, r, beta, **kw) - p).max() > 0.01


@pytest.mark.parametrize("bad", ["both", "", 1, 2.5])
def test_sample_reward_refuses_other_values(bad):
    for fn, first in ((E.expected_gradient, TH), (E.fixed_point, None)):
        args = (REF, R, 0.7) if first is None else (first, REF, R, 0.7)
        with pytest.raises(ValueError, match="`sample_reward` must be one of"):
            fn(*args, estimator="k2", placement="loss", sampler=OLD, sample_reward=bad)
