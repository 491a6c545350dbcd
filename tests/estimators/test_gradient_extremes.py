"""expected_gradient at extreme logits, against the mpmath enumeration of test_kl_terms.

Two failures of the float formulas (issue 40, item 17):

* off-policy, an outcome whose policy probability underflows (logits -745 and below in
  float64) was dropped although the sampler draws it: the log-ratio and the weight were
  masked by ``pi > 0`` instead of being formed from the log-probabilities, and the answer
  jumped between logits -700 (right) and -800 (k1 in the reward: [-0.173, 0.173] for the
  exact [-200, 200]);
* a nearly deterministic policy formed its dominant component as ``a_* - pi_* sum a``, a
  difference of two numbers of size ``a_*`` (logits [0, -30]: the entries did not sum to 0).

mpmath recipe (``_mp_expected_gradient`` in ``test_kl_terms.py``, not a closed form of
klpolicy's): at 60 digits the trainer's surrogate loss is built per outcome, weighted by the
sampler's probability, detached factors held at the current logits, and differentiated by
``mpmath.diff``; the exact value is then rounded to the tested dtype (an exact value beyond
the dtype's range is an infinity there).
"""

from __future__ import annotations

import itertools

import mpmath as mp
import numpy as np
import pytest

import klpolicy.estimators as E

from .._mpref import assert_mp_close
from .test_kl_terms import _mp_expected_gradient

pytestmark = pytest.mark.mp_dps(60)

REF = np.array([0.5, 0.3, 0.2])
R = np.array([0.3, -0.2, 0.5])
BETA = 0.7
SAMPLER = np.array([0.0, 0.0, 0.5])  # draws every outcome with probability >= 0.27
NAMES = E.estimator_names(straight_through=True)


def _check(got, want, dtype, rtol):
    """``got`` (of ``dtype``) against the exact ``want`` rounded to ``dtype``."""
    assert got.dtype == dtype
    with np.errstate(over="ignore"):
        w = np.asarray(want, dtype=np.float64).astype(dtype).astype(np.float64)
    fin = np.isfinite(w)
    scale = float(np.max(np.abs(w[fin]))) if fin.any() else 0.0
    assert_mp_close(got.astype(np.float64), w, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("low", [-700.0, -745.0, -800.0, -1e4])
@pytest.mark.parametrize(
    ("est", "place"),
    # k3's value e^-l is beyond float64 from l < -709.8 (its exact gradients are then
    # infinities, which the loss placement returns); in the reward (and in k3+'s value) the
    # reference itself needs hundreds of digits to resolve them: not tested here
    [
        ("k1", "reward"),
        ("k2", "reward"),
        ("abs", "reward"),
        ("k1", "loss"),
        ("k2", "loss"),
        ("k3", "loss"),
        ("k1+", "loss"),
        ("abs", "loss"),
    ],
)
def test_a_drawn_outcome_whose_probability_underflows_keeps_its_terms(low, est, place):
    th = np.array([0.0, low, -1.0])
    for ratio, clip in itertools.product(E.RATIOS, [None, (0.5, 2.0)]):
        for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-5)):
            args = [a.astype(dtype) for a in (th, REF, R, SAMPLER)]
            want = _mp_expected_gradient(*args[:3], BETA, est, place, args[3], ratio, clip)
            got = E.expected_gradient(
                th.astype(dtype),
                REF.astype(dtype),
                R.astype(dtype),
                BETA,
                estimator=est,
                placement=place,
                sampler=SAMPLER.astype(dtype),
                ratio=ratio,
                ratio_clip=clip,
            )
            _check(got, want, dtype, rtol)


def test_the_issues_numbers():
    th0, ref, z = [0.0, -800.0], [0.5, 0.5], [0.0, 0.0]
    kw = {"sampler": [0.0, 0.0]}
    g = E.expected_gradient(th0, ref, z, 1.0, estimator="k1", placement="reward", **kw)
    # R = -l = (-log 2, 800 - log 2), each drawn half the time: g_1 = mu_1 (R_1 - E_mu R) = 800/4
    np.testing.assert_allclose(g, [-200.0, 200.0], rtol=1e-15)
    g = E.expected_gradient(
        th0,
        ref,
        z,
        1.0,
        estimator="k2",
        placement="loss",
        ratio="detached",
        ratio_clip=(0.5, 2.0),
        **kw,
    )
    # y = 1: the weight e^-800 is clipped to 0.5, so g_1 = -beta mu_1 0.5 k2'(l_1) = -l_1 / 4
    # with l_1 = log pi_1 - log ref_1 = -800 - log 0.5; y = 0 (weight 2, inside) has pi_0 = 1
    l1 = -800.0 - np.log(0.5)
    np.testing.assert_allclose(g, [0.25 * l1, -0.25 * l1], rtol=1e-14)
    # and the answer is continuous from -700 to -800: it is linear in the logit
    lows = np.array([-600.0, -700.0, -745.0, -750.0, -800.0, -1e4])
    gs = [
        E.expected_gradient([0.0, lw], ref, z, 1.0, estimator="k1", placement="reward", **kw)[1]
        for lw in lows
    ]
    np.testing.assert_allclose(gs, -lows / 4, rtol=1e-13)


@pytest.mark.parametrize("gap", [30.0, 36.0, 80.0])
@pytest.mark.parametrize("est", ["k1", "k2", "k3", "k3+"])
@pytest.mark.parametrize("place", ["reward", "loss"])
def test_a_nearly_deterministic_policy_loses_no_digits(gap, est, place):
    th = np.array([0.0, -gap, -gap - 5.0])
    cases = [
        (None, "none", None),
        (SAMPLER, "none", None),
        (SAMPLER, "detached", (0.5, 2.0)),
        (np.array([0.0, -gap, -gap]), "differentiable", None),
    ]
    for sampler, ratio, clip in cases:
        for dtype, rtol in ((np.float64, 1e-12), (np.float32, 2e-5)):
            args = [a.astype(dtype) for a in (th, REF, R)]
            smp = None if sampler is None else sampler.astype(dtype)
            want = _mp_expected_gradient(*args, BETA, est, place, smp, ratio, clip)
            got = E.expected_gradient(
                th.astype(dtype),
                REF.astype(dtype),
                R.astype(dtype),
                BETA,
                estimator=est,
                placement=place,
                sampler=None if sampler is None else sampler.astype(dtype),
                ratio=ratio,
                ratio_clip=clip,
            )
            # every entry to its own relative accuracy, the small ones included
            assert_mp_close(got.astype(np.float64), want, rtol=rtol)


def test_the_entries_sum_to_zero_for_a_nearly_deterministic_policy():
    # logits [0, -30] on-policy: the two entries are -+ pi_0 pi_1 (R_0 - R_1) to the last digit
    th, ref, r = np.array([0.0, -30.0]), np.array([0.5, 0.5]), np.array([1.0, 0.0])
    for est in NAMES:
        for place in E.PLACEMENTS:
            g = E.expected_gradient(th, ref, r, 0.5, estimator=est, placement=place)
            assert abs(g[0] + g[1]) <= 4 * np.finfo(float).eps * abs(g[1]), (est, place, g)
    # k1 in the reward, written out: pi_0 pi_1 (R_1 - R_0), R = r - beta log(pi / ref)
    with mp.workdps(40):
        p1 = mp.exp(-30) / (1 + mp.exp(-30))
        p0 = 1 - p1
        big_r = [
            1 - mp.mpf(0.5) * mp.log(p0 / mp.mpf(0.5)),
            -mp.mpf(0.5) * mp.log(p1 / mp.mpf(0.5)),
        ]
        want = [p0 * p1 * (big_r[0] - big_r[1]), p0 * p1 * (big_r[1] - big_r[0])]
    g = E.expected_gradient(th, ref, r, 0.5, estimator="k1", placement="reward")
    assert_mp_close(g, want, rtol=1e-14)


@pytest.mark.parametrize("low", [-700.0, -745.0, -800.0, -1e4])
@pytest.mark.parametrize("place", ["reward", "loss"])
def test_on_policy_k3_keeps_the_mass_of_a_rare_outcome(low, place):
    # pi k3 -> ref and pi k3' -> -ref as pi -> 0: an outcome of probability e^-800 still
    # carries -+beta ref of the gradient (the reward's was 0 once pi underflowed, and
    # -beta ref at -700)
    th = np.array([0.0, low, -1.0])
    want = _mp_expected_gradient(th, REF, R, BETA, "k3", place, None, "none", None)
    got = E.expected_gradient(th, REF, R, BETA, estimator="k3", placement=place)
    _check(got, want, np.float64, 1e-12)
    sign = -1 if place == "reward" else 1
    assert got[1] == pytest.approx(sign * BETA * REF[1], rel=1e-12)
