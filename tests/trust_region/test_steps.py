"""TRPO's step is the closed form with pi_old as reference; PPO's clip is not a trust region."""

import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import klpolicy
from klpolicy.trust_region import ppo_clip_step, trust_region_beta, trust_region_step


def test_step_is_the_closed_form_at_beta_for_kl():
    p_old, adv = np.array([0.2, 0.5, 0.3]), np.array([1.0, -0.5, 0.2])
    new = trust_region_step(p_old, adv, 0.05)
    beta = klpolicy.beta_for_kl(p_old, adv, 0.05)
    np.testing.assert_allclose(new, klpolicy.optimal_policy(p_old, adv, beta), rtol=1e-14)
    assert klpolicy.kl_divergence(new, p_old) == pytest.approx(0.05, rel=1e-12)


def test_worked_example_inverse():
    # the worked example: KL(pi*_0.5 || [.5, .5]) = 0.3499..., so that radius gives beta = 0.5
    kl = float(klpolicy.optimal_kl([0.5, 0.5], [1.0, 0.0], 0.5))
    assert float(trust_region_beta([0.5, 0.5], [1.0, 0.0], kl)) == pytest.approx(0.5, rel=1e-10)
    np.testing.assert_allclose(
        trust_region_step([0.5, 0.5], [1.0, 0.0], kl),
        [0.8807970779778823, 0.1192029220221177],
        rtol=1e-12,
    )


@given(
    st.lists(st.floats(0.05, 1.0), min_size=2, max_size=5),
    st.floats(0.001, 0.5),
    st.integers(0, 2**32 - 1),
)
@pytest.mark.slow
def test_no_policy_in_the_trust_region_has_more_advantage(weights, delta, seed):
    rng = np.random.default_rng(seed)
    p_old = np.array(weights) / np.sum(weights)
    adv = rng.normal(size=p_old.size)
    new = trust_region_step(p_old, adv, delta)
    best = new @ adv
    # random policies near p_old that satisfy the constraint never beat the closed form
    cand = p_old * np.exp(rng.normal(scale=0.5, size=(400, p_old.size)))
    cand /= cand.sum(1, keepdims=True)
    inside = klpolicy.kl_divergence(cand, p_old) <= delta
    assert np.all(cand[inside] @ adv <= best + 1e-12)


def test_radius_beyond_the_greedy_kl_gives_the_greedy_step():
    new = trust_region_step([0.5, 0.25, 0.25], [1.0, 0.0, 0.0], 5.0)
    np.testing.assert_array_equal(new, [1.0, 0.0, 0.0])
    assert float(trust_region_beta([0.5, 0.5], [1.0, 0.0], 0.0)) == np.inf


def test_batched_rows_and_axis():
    p_old = np.array([[0.5, 0.5], [0.2, 0.8]])
    adv = np.array([[1.0, 0.0], [0.0, 1.0]])
    new = trust_region_step(p_old.T, adv.T, np.array([0.01, 0.02]), axis=0)
    np.testing.assert_allclose(
        klpolicy.kl_divergence(new, p_old.T, axis=0), [0.01, 0.02], rtol=1e-11
    )


def test_ppo_clip_step_first_epoch_is_the_policy_gradient():
    p_old, adv = np.array([0.5, 0.5]), np.array([1.0, -1.0])
    new = ppo_clip_step(p_old, adv, 0.2, lr=1.0, epochs=1)
    # logits move by lr * pi (A - E_pi A) = (0.5, -0.5): sigmoid(1)
    np.testing.assert_allclose(new, [1 / (1 + np.exp(-1.0)), 1 / (1 + np.exp(1.0))], rtol=1e-14)


def test_ppo_clip_is_dominated_by_the_trust_region_step_at_equal_kl():
    p_old = np.array([0.4, 0.3, 0.2, 0.1])
    adv = np.array([0.5, -1.0, 1.0, 0.2])
    for lr, epochs in [(0.5, 4), (2.0, 10), (5.0, 20)]:
        ppo = ppo_clip_step(p_old, adv, 0.2, lr=lr, epochs=epochs)
        kl = float(klpolicy.kl_divergence(ppo, p_old))
        trpo = trust_region_step(p_old, adv, kl)
        assert trpo @ adv >= ppo @ adv - 1e-12
    # the clip does not bound the step: ratios leave [0.8, 1.2] (the softmax keeps pushing a
    # clipped outcome through the others) and the KL spent depends on lr, not only on the clip
    far = ppo_clip_step(p_old, adv, 0.2, lr=2.0, epochs=40)
    assert (far / p_old).min() < 0.5
    slow = ppo_clip_step(p_old, adv, 0.2, lr=0.1, epochs=200)
    assert klpolicy.kl_divergence(far, p_old) > 1.5 * klpolicy.kl_divergence(slow, p_old)


@pytest.mark.parametrize(
    ("call", "msg"),
    [
        (
            lambda: trust_region_step([0.5, 0.5], [1.0, 0.0], -0.1),
            "`delta` must be a finite non-negative number of nats; got -0.1",
        ),
        (
            lambda: trust_region_step([0.5, 0.6], [1.0, 0.0], 0.1),
            "`pi_old` must sum to 1 along axis -1",
        ),
        (
            lambda: ppo_clip_step([0.5, 0.5], [1.0, 0.0], 0.0),
            "`clip` must be a positive finite number; got 0.0",
        ),
        (
            lambda: ppo_clip_step([0.5, 0.5], [1.0, 0.0], 0.2, epochs=0),
            "`epochs` must be an integer >= 1; got 0",
        ),
    ],
)
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()


# ---------------------------------------------------------------- the two constraints
import mpmath  # noqa: E402

from klpolicy.estimators import fixed_point  # noqa: E402


def _mp_bisect(f, lo, hi, n=260):
    """Root of a decreasing f on [lo, hi] by bisection in mpmath."""
    lo, hi = mpmath.mpf(lo), mpmath.mpf(hi)
    for _ in range(n):
        mid = (lo + hi) / 2
        if f(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _mp_trpo(p_old, adv, delta):
    """mpmath recipe (60 digits): pi = p / (t + x) / sum, x = max A - A on the support,
    t = exp(s) with KL(p || pi_t) = delta found by bisection on s."""
    with mpmath.workdps(60):
        p = [mpmath.mpf(float(v)) for v in p_old]
        p = [pi / sum(p) for pi in p]  # the exact KL needs exactly normalised pi_old
        a = [mpmath.mpf(float(v)) for v in adv]
        c = max(ai for pi, ai in zip(p, a) if pi > 0)
        x = [c - ai for ai in a]

        def pol(s):
            t = mpmath.e**s
            w = [pi / (t + xi) if pi > 0 else mpmath.mpf(0) for pi, xi in zip(p, x)]
            z = sum(w)
            return [wi / z for wi in w]

        def kl(s):
            q = pol(s)
            return sum(pi * mpmath.log(pi / qi) for pi, qi in zip(p, q) if pi > 0) - delta

        s = _mp_bisect(kl, -3000, 400)
        return np.array([float(v) for v in pol(s)])


def _mp_mirror(p_old, adv, delta):
    """mpmath recipe (60 digits): pi = p exp(A / beta) / Z with KL(pi || p) = delta,
    log beta found by bisection."""
    with mpmath.workdps(60):
        p = [mpmath.mpf(float(v)) for v in p_old]
        p = [pi / sum(p) for pi in p]
        a = [mpmath.mpf(float(v)) for v in adv]
        c = max(ai for pi, ai in zip(p, a) if pi > 0)

        def pol(lb):
            b = mpmath.e**lb
            w = [pi * mpmath.e ** ((ai - c) / b) for pi, ai in zip(p, a)]
            z = sum(w)
            return [wi / z for wi in w]

        def kl(lb):
            q = pol(lb)
            return sum(qi * mpmath.log(qi / pi) for pi, qi in zip(p, q) if qi > 0) - delta

        lb = _mp_bisect(kl, -60, 60)
        return np.array([float(v) for v in pol(lb)])


EXTREME = [
    # (pi_old, advantage, delta)
    ([0.4, 0.3, 0.2, 0.1], [0.5, -1.0, 1.0, 0.2], 0.1),
    ([0.4, 0.3, 0.2, 0.1], [0.5, -1.0, 1.0, 0.2], 1e-10),
    ([0.4, 0.3, 0.2, 0.1], [0.5, -1.0, 1.0, 0.2], 20.0),
    ([0.5, 0.5 - 1e-300, 1e-300], [0.0, 1.0, 2.0], 0.5),
    ([0.7, 0.0, 0.3], [1e8, 3e8, -2e8], 0.05),
    ([0.99, 0.01], [0.0, 1.0], 2.0),
    # a tiny best action and a large budget need t far below the smallest float (a
    # bracket on log t floored at log(tiny) spent 213.4 of 306.6 nats)
    ([1e-215, 0.6, 0.4], [1.0, 0.0, -1.0], 306.6),
    ([1e-215, 0.6, 0.4], [1.0, 0.0, -1.0], 600.0),
    ([5e-324, 0.6, 0.4], [1.0, 0.0, -1.0], 50.0),
]


@pytest.mark.parametrize(("p_old", "adv", "delta"), EXTREME)
def test_trpo_step_matches_mpmath_at_extremes(p_old, adv, delta):
    got = trust_region_step(p_old, adv, delta, constraint="trpo")
    np.testing.assert_allclose(got, _mp_trpo(p_old, adv, delta), rtol=1e-12, atol=0)
    assert float(klpolicy.kl_divergence(p_old, got)) == pytest.approx(delta, rel=1e-11)


@pytest.mark.parametrize(("p_old", "adv", "delta"), [e for e in EXTREME if e[2] < 1.0])
def test_mirror_step_matches_mpmath(p_old, adv, delta):
    got = trust_region_step(p_old, adv, delta, constraint="mirror")
    want = _mp_mirror(p_old, adv, delta)
    big = want > 1e-250  # entries that underflow in the tilt are compared absolutely
    np.testing.assert_allclose(got[big], want[big], rtol=1e-11)
    assert np.all(got[~big] <= 1e-250)


def test_default_is_the_mirror_step_and_the_two_differ_beyond_second_order():
    p_old = np.array([0.4, 0.3, 0.2, 0.1])
    adv = np.array([0.5, -1.0, 1.0, 0.2])
    np.testing.assert_array_equal(
        trust_region_step(p_old, adv, 0.1), trust_region_step(p_old, adv, 0.1, constraint="mirror")
    )
    tv = (
        0.5
        * np.abs(
            trust_region_step(p_old, adv, 0.1)
            - trust_region_step(p_old, adv, 0.1, constraint="trpo")
        ).sum()
    )
    assert tv == pytest.approx(0.04502, abs=5e-5)  # tutorial 08's figure
    small = (
        0.5
        * np.abs(
            trust_region_step(p_old, adv, 1e-6)
            - trust_region_step(p_old, adv, 1e-6, constraint="trpo")
        ).sum()
    )
    assert small < 1e-5 * np.sqrt(1e-6) * 100  # third order: far below the step's size


def test_trpo_step_is_the_k3_in_loss_fixed_point_at_its_multiplier():
    p_old = np.array([0.4, 0.3, 0.2, 0.1])
    adv = np.array([0.5, -1.0, 1.0, 0.2])
    beta = float(trust_region_beta(p_old, adv, 0.1, constraint="trpo"))
    step = trust_region_step(p_old, adv, 0.1, constraint="trpo")
    fp = fixed_point(p_old, adv, beta, estimator="k3", placement="loss")
    np.testing.assert_allclose(step, fp, rtol=1e-12)
    # and the KKT form: beta * p / (lambda - A) with one lambda
    lam = adv + beta * p_old / step
    np.testing.assert_allclose(lam, lam[0], rtol=1e-12)


@pytest.mark.slow
@given(
    st.lists(st.floats(0.05, 1.0), min_size=2, max_size=5),
    st.floats(0.001, 2.0),
    st.integers(0, 2**32 - 1),
)
def test_no_policy_in_the_trpo_region_has_more_advantage(weights, delta, seed):
    rng = np.random.default_rng(seed)
    p_old = np.array(weights) / np.sum(weights)
    adv = rng.normal(size=p_old.size)
    best = trust_region_step(p_old, adv, delta, constraint="trpo") @ adv
    cand = p_old * np.exp(rng.normal(scale=1.0, size=(400, p_old.size)))
    cand /= cand.sum(1, keepdims=True)
    inside = klpolicy.kl_divergence(p_old, cand) <= delta
    assert np.all(cand[inside] @ adv <= best + 1e-12)


def test_trpo_degenerate_rows_batches_and_zeros():
    # delta 0, constant advantage, all mass on the best: the step is pi_old, beta infinite
    np.testing.assert_array_equal(
        trust_region_step([0.3, 0.7], [1.0, 0.0], 0.0, constraint="trpo"), [0.3, 0.7]
    )
    np.testing.assert_array_equal(
        trust_region_step([0.3, 0.7], [2.0, 2.0], 0.4, constraint="trpo"), [0.3, 0.7]
    )
    assert float(trust_region_beta([0.3, 0.7], [2.0, 2.0], 0.4, constraint="trpo")) == np.inf
    # zeros in pi_old stay zero; rows and axis broadcast like the mirror step
    step = trust_region_step([0.5, 0.0, 0.5], [0.0, 9.0, 1.0], 0.2, constraint="trpo")
    assert step[1] == 0.0 and float(klpolicy.kl_divergence([0.5, 0.0, 0.5], step)) == (
        pytest.approx(0.2, rel=1e-12)
    )
    p_old = np.array([[0.5, 0.5], [0.2, 0.8]])
    adv = np.array([[1.0, 0.0], [0.0, 1.0]])
    new = trust_region_step(p_old.T, adv.T, np.array([0.01, 0.02]), axis=0, constraint="trpo")
    np.testing.assert_allclose(
        klpolicy.kl_divergence(p_old.T, new, axis=0), [0.01, 0.02], rtol=1e-11
    )
    betas = trust_region_beta(p_old, adv, np.array([0.01, 0.02]), constraint="trpo")
    assert betas.shape == (2,) and np.all(np.diff(betas) < 0)


def test_unknown_constraint_is_refused():
    with pytest.raises(
        ValueError, match=re.escape("`constraint` must be one of 'mirror', 'trpo'; got 'forward'")
    ):
        trust_region_step([0.5, 0.5], [1.0, 0.0], 0.1, constraint="forward")


# --- budgets beyond the floats -----------------------------------------------------------
# KL(pi_old || pi) has no supremum (it grows without bound as pi empties an outcome), but the
# step's smallest probabilities fall like exp(-delta / mass): a delta of 1e4 nats on
# (0.5, 0.3, 0.2) returned the greedy (1, 0, 0), whose KL is inf, and beta 0.0


@pytest.mark.parametrize(
    ("p_old", "adv", "delta", "largest"),
    [
        ([0.5, 0.3, 0.2], [1.0, 0.0, -1.0], 1e4, "352.838"),
        ([1e-300, 0.5, 0.5], [1.0, 0.0, -1.0], 1e4, "707.356"),
        (np.float32([0.5, 0.3, 0.2]), np.float32([1.0, 0.0, -1.0]), 50.0, "42.309"),
    ],
)
def test_trpo_refuses_a_budget_beyond_the_floats_and_names_the_largest(p_old, adv, delta, largest):
    dtype = np.asarray(p_old).dtype
    msg = (
        f"`delta` = {delta!r} cannot be spent by a TRPO step in {dtype} (row 0): its smallest "
        f"probabilities would fall below the smallest normal {dtype}"
    )
    for fn in (trust_region_step, trust_region_beta):
        with pytest.raises(ValueError, match=re.escape(msg)) as info:
            fn(p_old, adv, delta, constraint="trpo")
        assert str(info.value).endswith(
            f"the largest radius a {dtype} step spends here is {largest} nats"
        )
    # the radius the message names is spent, to the last digits, with no entry lost
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step = trust_region_step(p_old, adv, float(largest), constraint="trpo")
    assert step.dtype == dtype and np.all(step > 0)
    if dtype == np.float64:
        np.testing.assert_allclose(step, _mp_trpo(p_old, adv, float(largest)), rtol=1e-12)


@pytest.mark.parametrize(
    ("p_old", "adv", "delta"),
    [
        ([1e-300, 0.5, 0.5], [1.0, 0.0, -1.0], 600.0),  # a 1e-300 best action, a large budget
        ([0.5, 0.5, 1e-300], [1.0, 0.0, -1.0], 0.1),  # a 1e-300 worst action keeps its mass
        ([0.5, 0.3, 0.2], [1.0, 0.0, -1.0], 352.0),  # entries of 1e-307, still normal floats
    ],
)
def test_trpo_at_the_edge_of_the_floats_matches_mpmath(p_old, adv, delta):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = trust_region_step(p_old, adv, delta, constraint="trpo")
    np.testing.assert_allclose(got, _mp_trpo(p_old, adv, delta), rtol=1e-12, atol=0)
    assert abs(float(klpolicy.kl_divergence(p_old, got)) - delta) <= 1e-13 * delta


def test_float32_trust_region_steps_do_not_warn():
    # comparing a float32 advantage with 2.0**1020 overflowed in the cast (a RuntimeWarning)
    p, a = np.float32([0.5, 0.3, 0.2]), np.float32([1.0, 0.0, -1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for constraint in ("mirror", "trpo"):
            step = trust_region_step(p, a, 0.3, constraint=constraint)
            assert step.dtype == np.float32
            np.testing.assert_allclose(
                step,
                trust_region_step(p.astype(float), a.astype(float), 0.3, constraint=constraint),
                rtol=2e-6,
            )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mirror_radius_past_the_greedy_kl_is_the_greedy_step_at_every_dtype(dtype):
    # the greedy step spends -log pi_old(best) = log 2 here; float32 gave beta 0.048 and
    # (1, 6e-10, 4e-19) for delta = 1 (its tilt reaches log 2 to rounding above beta = 0)
    p, a = np.array([0.5, 0.3, 0.2], dtype), np.array([1.0, 0.0, -1.0], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step = trust_region_step(p, a, 1.0)
        beta = trust_region_beta(p, a, np.array([1.0, 0.1]))
    assert step.dtype == dtype
    np.testing.assert_array_equal(step, [1.0, 0.0, 0.0])
    assert beta[0] == 0.0 and beta[1] > 0
