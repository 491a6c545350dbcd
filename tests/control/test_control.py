"""Tests for klpolicy.control: the controllers' rules, their closed loop and the argument checks."""

import copy
import math
import re
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import klpolicy as kp
from klpolicy.control import (
    AdaptiveKLController,
    DeadZoneKLController,
    FixedKLController,
    LagrangianKLController,
    compare_controllers,
    convert_kl_target,
    kl_elasticity,
    simulate,
    stability_region,
)

REF = np.array([0.5, 0.3, 0.2])
REW = np.array([1.0, 0.0, 0.5])


def _run_updates(c, kls, n_steps=1):
    values = []
    for kl in kls:
        c.update(kl, n_steps)
        values.append(c.value)
    return values


# --- the rules against hand-computed sequences ------------------------------------------


def test_adaptive_matches_hand_computed_sequence_with_clipping():
    # TRL's defaults (init 0.2, target 6, horizon 10000) with a batch of 256.
    # error: 3/6-1 = -0.5 -> clipped -0.2; 6.6/6-1 = 0.1; 12/6-1 = 1 -> clipped 0.2;
    # 6/6-1 = 0; 5.7/6-1 = -0.05. Exact rational reference, multiplier 1 + e*256/10000.
    kls = [3.0, 6.6, 12.0, 6.0, 5.7]
    errors = [Fraction(-1, 5), Fraction(1, 10), Fraction(1, 5), Fraction(0), Fraction(-1, 20)]
    c = AdaptiveKLController(0.2, 6.0, 10000)
    got = _run_updates(c, kls, n_steps=256)
    exact = Fraction(1, 5)
    for g, e in zip(got, errors, strict=True):
        exact *= 1 + e * 256 / 10000
        assert g == pytest.approx(float(exact), rel=4e-16)
    assert got[0] == pytest.approx(0.198976, rel=1e-15)
    assert got[3] == got[2]  # zero error: unchanged


def test_adaptive_is_bit_exact_with_the_reference_arithmetic():
    # the reference implementations compute clip(current/target - 1), then
    # 1 + error * n_steps / horizon (left to right), then value *= mult
    c = AdaptiveKLController(0.05, 0.3, 777.0)
    v = 0.05
    for kl, n in [(0.1, 64), (0.45, 64), (0.31, 3), (2.0, 100), (-0.2, 7)]:
        c.update(kl, n)
        err = min(max(kl / 0.3 - 1, -0.2), 0.2)
        v *= 1 + err * n / 777.0
        assert c.value == v


def test_adaptive_clip_option():
    c = AdaptiveKLController(1.0, 1.0, 10.0, clip=0.5)
    c.update(3.0, 1)  # error 2 -> clipped at 0.5
    assert c.value == pytest.approx(1.05, rel=1e-15)


@given(
    kl=st.floats(-10, 100, allow_nan=False),
    n=st.integers(1, 1000),
    horizon=st.floats(250.0, 1e5),
    target=st.floats(1e-3, 10),
)
def test_adaptive_step_is_bounded_and_signed(kl, n, horizon, target):
    c = AdaptiveKLController(0.3, target, horizon)
    c.update(kl, n)
    rel = c.value / 0.3 - 1
    # value / 0.3 - 1 carries an absolute rounding error of a few ulp of 1
    assert abs(rel) <= 0.2 * n / horizon * (1 + 1e-12) + 4 * np.finfo(float).eps
    assert np.sign(rel) == np.sign(kl / target - 1) or rel == 0


def test_adaptive_refuses_a_non_positive_multiplier_and_keeps_its_state():
    c = AdaptiveKLController(0.2, 6.0, 100)
    msg = (
        "`n_steps` / `horizon` = 600 / 100 is too large: the multiplier 1 + error * n_steps / "
        "horizon = -0.2 (error -0.2) would make the coefficient non-positive; "
        "use n_steps / horizon < 5"
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        c.update(0.0, 600)
    assert c.value == 0.2
    c.update(12.0, 600)  # a positive error is fine with the same gain
    assert c.value == pytest.approx(0.2 * 2.2)


def test_adaptive_refuses_a_multiplier_that_is_zero_up_to_rounding():
    # 1 + (5.4 / 6 - 1) * 1000 / 100 is 0 in exact arithmetic; in floats 5.4 / 6 - 1 is
    # -0.09999999999999998 and the product 3.3e-16: 21 such updates would leave beta at 0.0
    c = AdaptiveKLController(1.0, 6.0, 100)
    msg = (
        "`n_steps` / `horizon` = 1000 / 100 is too large: the multiplier 1 + error * n_steps / "
        "horizon = 3.33067e-16 (zero up to rounding) (error -0.1) would make the coefficient "
        "non-positive; use n_steps / horizon < 5"
    )
    for _ in range(3):
        with pytest.raises(ValueError, match=re.escape(msg)):
            c.update(5.4, 1000)
    assert c.value == 1.0
    # the smallest multipliers a gain below 1 / clip allows are taken exactly
    c.update(5.4, 999)
    assert c.value == pytest.approx(1 + (5.4 / 6 - 1) * 9.99, rel=1e-12)
    assert c.value == pytest.approx(1e-3, rel=1e-9)
    c = AdaptiveKLController(1.0, 6.0, 100)
    c.update(0.0, 499)  # 1 - 0.2 * 4.99 = 0.002
    assert c.value == pytest.approx(0.002, rel=1e-12)


def test_dead_zone_matches_the_ppo_paper_rule():
    # d_targ = 0.1: beta /= 2 if d < 0.1/1.5, beta *= 2 if d > 0.1*1.5, strict inequalities
    c = DeadZoneKLController(1.0, 0.1)
    kls = [0.2, 0.1 * 1.5, 0.1, 0.1 / 1.5, 0.0667, 0.06, 0.01, -0.3, 0.5]
    assert _run_updates(c, kls) == [2.0, 2.0, 2.0, 2.0, 2.0, 1.0, 0.5, 0.25, 0.5]


def test_dead_zone_rllib_configuration():
    # RLlib: *1.5 if kl > 2 * target, *0.5 if kl < 0.5 * target
    c = DeadZoneKLController.rllib(0.2, 0.01)
    got = _run_updates(c, [0.021, 0.02, 0.005, 0.0049, 0.01])
    expected, v = [], 0.2
    for kl in [0.021, 0.02, 0.005, 0.0049, 0.01]:
        if kl > 2.0 * 0.01:
            v *= 1.5
        elif kl < 0.5 * 0.01:
            v *= 0.5
        expected.append(v)
    assert got == expected == [0.30000000000000004, 0.30000000000000004, 0.30000000000000004,
                               0.15000000000000002, 0.15000000000000002]  # fmt: skip


def test_dead_zone_asymmetric_options():
    c = DeadZoneKLController(1.0, 1.0, lower_band=4.0, upper_band=1.25, decrease=8.0, increase=1.25)
    assert (c.low, c.high) == (0.25, 1.25)
    assert _run_updates(c, [1.3, 1.2, 0.3, 0.2]) == [1.25, 1.25, 1.25, 0.15625]
    assert "per='sequence'" in repr(c)


def test_dead_zone_ignores_n_steps():
    a, b = DeadZoneKLController(1.0, 0.1), DeadZoneKLController(1.0, 0.1)
    assert _run_updates(a, [0.3, 0.01], 1) == _run_updates(b, [0.3, 0.01], 4096)


def test_lagrangian_projected_dual_ascent_sequence():
    c = LagrangianKLController(0.5, 0.1, lr=2.0)
    # 0.5 + 2(0.3-0.1) = 0.9; 0.9 + 2(0-0.1) = 0.7; 0.7 + 2(-0.5-0.1) = -0.5 -> 0; 0 + 2(0.2-0.1)
    got = _run_updates(c, [0.3, 0.0, -0.5, 0.2])
    assert got == pytest.approx([0.9, 0.7, 0.0, 0.2], abs=1e-15)
    assert got[2] == 0.0
    c = LagrangianKLController(0.5, 0.1, lr=2.0, min_kl_coef=0.05)
    assert _run_updates(c, [-1.0]) == [0.05]


def test_fixed_never_moves():
    c = FixedKLController(0.05)
    assert _run_updates(c, [0.0, 100.0, -3.0], 256) == [0.05] * 3
    assert FixedKLController(0).value == 0.0


def test_convert_kl_target_round_trip():
    assert convert_kl_target(6.0, 24, to="token") == 0.25
    assert convert_kl_target(0.25, 24, to="sequence") == 6.0
    assert convert_kl_target(convert_kl_target(0.3, 7.5, to="token"), 7.5, to="sequence") == (
        pytest.approx(0.3, rel=1e-15)
    )


# --- the closed loop --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("measure", ["before", "after"])
def test_adaptive_settles_on_beta_for_kl_with_instant_response(measure):
    target = 0.1
    tr = simulate(AdaptiveKLController(2.0, target, 8.0), REF, REW, steps=600, measure=measure)
    beta_star = kp.beta_for_kl(REF, REW, target)
    assert tr.beta[-1] == pytest.approx(beta_star, rel=1e-10)
    assert tr.kl[-1] == pytest.approx(target, rel=1e-10)
    assert abs(tr.steady_state_error) < 1e-10
    assert tr.settle_time < 600 * 0.9
    assert tr.target == target


@settings(max_examples=25)
@given(
    v=st.integers(2, 5),
    seed=st.integers(0, 2**32 - 1),
    frac=st.floats(0.05, 0.7),
    start=st.floats(-1.0, 1.0),
)
@pytest.mark.slow
def test_adaptive_settles_on_beta_for_kl_property(v, seed, frac, start):
    g = np.random.default_rng(seed)
    ref = g.dirichlet(np.ones(v))
    rew = g.normal(size=v)
    rew[0] += 0.5  # never constant
    target = frac * float(kp.max_kl(ref, rew))
    beta_star = float(kp.beta_for_kl(ref, rew, target))
    eta = kl_elasticity(ref, rew, beta_star)
    horizon = max(eta / 0.5, 0.5)  # loop gain g*eta <= 0.5: inside the stable region
    tr = simulate(
        AdaptiveKLController(beta_star * math.exp(start), target, horizon), ref, rew, steps=200
    )
    assert tr.beta[-1] == pytest.approx(beta_star, rel=1e-8)
    assert tr.kl[-1] == pytest.approx(target, rel=1e-8)


def test_measure_after_with_instant_response_is_the_exact_optimum():
    tr = simulate(LagrangianKLController(1.0, 0.2, 0.5), REF, REW, steps=20, measure="after")
    np.testing.assert_allclose(tr.kl, kp.optimal_kl(REF, REW, tr.beta[:, None]), rtol=1e-13)
    pi = kp.optimal_policy(REF, REW, tr.beta[:, None])
    np.testing.assert_allclose(tr.reward, pi @ REW, rtol=1e-13)
    np.testing.assert_array_equal(tr.kl_measured, tr.kl)


def test_before_measures_the_policy_of_the_previous_coefficient():
    tr = simulate(AdaptiveKLController(1.0, 0.1, 4.0), REF, REW, steps=30)
    assert tr.kl[0] == 0.0  # starts at the reference
    np.testing.assert_allclose(tr.kl[1:], kp.optimal_kl(REF, REW, tr.beta[:-1, None]), rtol=1e-13)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("lag", "horizon", "measure"),
    [(0.0, 4.0, "before"), (0.5, 4.0, "before"), (0.8, 10.0, "before"),
     (0.5, 2.0, "after"), (0.8, 1.0, "after")],
)  # fmt: skip
def test_linearised_loop_obeys_the_derived_characteristic_polynomial(lag, horizon, measure):
    # y_t = log(beta_t / beta*) satisfies y_{t+2} + a1 y_{t+1} + a0 y_t = O(y^2) with
    # before: z^2 - (1+lag) z + lag + k;  after: z^2 - (1+lag-k) z + lag;  k = (1-lag) eta / H
    target = 0.1
    beta_star = kp.beta_for_kl(REF, REW, target)
    k = (1 - lag) * kl_elasticity(REF, REW, beta_star) / horizon
    a1, a0 = (-(1 + lag), lag + k) if measure == "before" else (-(1 + lag - k), lag)
    tr = simulate(
        AdaptiveKLController(1.0, target, horizon), REF, REW, steps=400, lag=lag, measure=measure
    )
    y = np.log(tr.beta / beta_star)
    small = (np.abs(y) < 1e-3) & (np.abs(y) > 1e-9)
    i = np.flatnonzero(small[:-2] & small[1:-1] & small[2:])[:40]
    assert i.size > 20
    resid = y[i + 2] + a1 * y[i + 1] + a0 * y[i]
    scale = np.maximum.reduce([np.abs(y[i]), np.abs(y[i + 1]), np.abs(y[i + 2])])
    assert np.max(np.abs(resid) / scale) < 5e-3


@pytest.mark.slow
def test_stability_depends_on_the_measurement_order():
    # loop gain g*eta = 1.70: unstable when the KL lags one step (before), stable after
    eta = kl_elasticity(REF, REW, kp.beta_for_kl(REF, REW, 0.1))
    assert eta == pytest.approx(1.6953, abs=1e-4)
    before = simulate(AdaptiveKLController(1.0, 0.1, 1.0), REF, REW, steps=300)
    after = simulate(AdaptiveKLController(1.0, 0.1, 1.0), REF, REW, steps=300, measure="after")
    assert before.settle_time == math.inf
    assert np.ptp(before.kl[-50:]) > 0.05  # a bounded limit cycle (the clip bounds each step)
    assert after.settle_time < 100 and after.kl[-1] == pytest.approx(0.1, rel=1e-10)


def test_dead_zone_ends_inside_its_band():
    # target 0.4: one halving of beta moves the KL by a factor below band^2 = 2.25, so the
    # loop cannot jump over the band (measured after the update, instant response)
    c = DeadZoneKLController(4.0, 0.4)
    b_low, b_high = kp.beta_for_kl(REF, REW, c.low), kp.beta_for_kl(REF, REW, c.high)
    up = np.linspace(b_low, 2 * b_low, 50)  # halving from just below the band
    down = np.linspace(b_high / 2, b_high, 50)  # doubling from just above it
    assert np.all(kp.optimal_kl(REF, REW, up[:, None] / 2) < c.high)
    assert np.all(kp.optimal_kl(REF, REW, 2 * down[:, None]) > c.low)
    tr = simulate(c, REF, REW, steps=60, measure="after")
    assert c.low < tr.kl[-1] < c.high
    assert np.all(tr.beta[-20:] == tr.beta[-1])
    assert c.value == 4.0  # simulate works on a copy


def test_dead_zone_cycles_when_a_step_jumps_over_the_band():
    # target 0.05: halving beta multiplies the KL by about 3.3 > 2.25: no rest point
    c = DeadZoneKLController(1.0, 0.05)
    tr = simulate(c, REF, REW, steps=80, measure="after")
    inside = (tr.kl > c.low) & (tr.kl < c.high)
    assert not inside[-40:].any()
    assert len(set(tr.beta[-40:])) == 2


@pytest.mark.slow
def test_noisy_kl_still_settles():
    # k1 estimate from n samples: sigma^2 = Var_pi*(log pi*/ref) / n. Linearised with
    # k = g*eta, the final KL has stationary variance sigma^2 k (1+k) / ((1-k)(2+k))
    # (AR(2) in log beta, see docs/derivations/control.md); 40 independent runs.
    target, horizon, n, runs = 0.1, 10.0, 4000, 40
    beta_star = float(kp.beta_for_kl(REF, REW, target))
    pi = kp.optimal_policy(REF, REW, beta_star)
    u = np.log(pi / REF)
    sigma2 = float(pi @ (u - pi @ u) ** 2) / n
    assert math.sqrt(sigma2) / target < 0.1  # the clip at 0.2 is (almost) never active
    k = kl_elasticity(REF, REW, beta_star) / horizon
    var = sigma2 * k * (1 + k) / ((1 - k) * (2 + k))
    out = compare_controllers(
        {i: AdaptiveKLController(1.0, target, horizon) for i in range(runs)},
        REF, REW, steps=300, kl_samples=n, rng=20261130,
    )  # fmt: skip
    final = np.array([t.kl[-1] for t in out.values()])
    assert abs(final.mean() - target) < 4 * math.sqrt(var / runs)
    assert 0.4 < final.var(ddof=1) / var < 2.0  # chi2(39)/39: outside with p < 1e-3
    measured = np.array([t.kl_measured for t in out.values()])
    assert np.any(measured != np.array([t.kl for t in out.values()]))


def test_noisy_simulation_is_reproducible_from_the_seed():
    c = AdaptiveKLController(1.0, 0.1, 10.0)
    a = simulate(c, REF, REW, steps=50, kl_samples=100, rng=7)
    b = simulate(c, REF, REW, steps=50, kl_samples=100, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(a.kl_measured, b.kl_measured)


@pytest.mark.slow
def test_per_token_target_in_the_loop():
    length = 20
    c = AdaptiveKLController(1.0, 0.1 / length, 8.0, per="token")
    tr = simulate(c, REF, REW, steps=400, length=length)
    assert tr.target == pytest.approx(0.1, rel=1e-15)
    assert tr.kl[-1] == pytest.approx(0.1, rel=1e-10)


@pytest.mark.slow
def test_lag_slows_the_response_and_adds_overshoot():
    region = stability_region(
        REF, REW, 0.1, lags=[0.0, 0.5, 0.8], horizons=[4.0], init_kl_coef=1.0, steps=400
    )
    assert region.settle_time.shape == (3, 1)
    assert np.all(np.diff(region.overshoot[:, 0]) > 0)
    assert np.all(np.diff(region.settle_time[:, 0]) > 0)
    assert region.gain[0] == pytest.approx(region.elasticity / 4.0)
    # consistent with simulate
    tr = simulate(AdaptiveKLController(1.0, 0.1, 4.0), REF, REW, steps=400, lag=0.5)
    assert tr.settle_time == region.settle_time[1, 0]
    assert tr.overshoot == region.overshoot[1, 0]


def test_fixed_controller_trace_and_duck_typing():
    class Halver:  # anything with .value and .update(current, n_steps)
        def __init__(self):
            self.value = 1.0

        def update(self, current, n_steps):
            self.value /= 2

    tr = simulate(Halver(), REF, REW, steps=5, measure="after")
    np.testing.assert_array_equal(tr.beta, [1.0, 0.5, 0.25, 0.125, 0.0625])
    assert math.isnan(tr.target) and math.isnan(tr.settle_time)
    fixed = simulate(FixedKLController(0.5), REF, REW, steps=3, measure="after")
    assert fixed.kl[-1] == pytest.approx(kp.optimal_kl(REF, REW, 0.5), rel=1e-14)


def test_simulate_does_not_modify_the_controller():
    c = AdaptiveKLController(1.0, 0.1, 4.0)
    before = copy.deepcopy(c.__dict__)
    simulate(c, REF, REW, steps=20)
    assert c.__dict__ == before


def test_kl_elasticity_against_mpmath():
    # recipe: 50 digits (the conftest fixture); KL(b) = sum pi log(pi/ref) with pi = ref e^{r/b}/Z;
    # eta = -d log KL / d log b by mp.diff at s = log b
    ref = [mp.mpf(1) / 2, mp.mpf(3) / 10, mp.mpf(1) / 5]
    rew = [mp.mpf(1), mp.mpf(0), mp.mpf(1) / 2]

    def log_kl(s):
        b = mp.e**s
        w = [p * mp.e ** (r / b) for p, r in zip(ref, rew, strict=True)]
        z = mp.fsum(w)
        return mp.log(mp.fsum(wi / z * mp.log(wi / z / p) for wi, p in zip(w, ref, strict=True)))

    for b in [0.05, 0.7, 3.0, 40.0]:
        expected = -mp.diff(log_kl, mp.log(b))
        assert kl_elasticity(REF, REW, b) == pytest.approx(float(expected), rel=1e-12)


# --- argument checks --------------------------------------------------------------------

BAD = [
    (lambda: FixedKLController(-0.1), "`kl_coef` must be a non-negative finite number; got -0.1"),
    (
        lambda: FixedKLController(float("nan")),
        "`kl_coef` must be a non-negative finite number; got nan",
    ),
    (lambda: FixedKLController("a"), "`kl_coef` must be a non-negative finite number; got 'a'"),
    (
        lambda: AdaptiveKLController(0.2, 0, 10000),
        "`target` must be a positive finite number; got 0",
    ),
    (
        lambda: AdaptiveKLController(0.2, -6, 10000),
        "`target` must be a positive finite number; got -6",
    ),
    (lambda: AdaptiveKLController(0.2, 6, 0), "`horizon` must be a positive finite number; got 0"),
    (
        lambda: AdaptiveKLController(0.2, 6, -5.0),
        "`horizon` must be a positive finite number; got -5.0",
    ),
    (
        lambda: AdaptiveKLController(-0.2, 6, 10),
        "`init_kl_coef` must be a positive finite number; got -0.2",
    ),
    (
        lambda: AdaptiveKLController(0.0, 6, 10),
        "`init_kl_coef` must be a positive finite number; got 0.0",
    ),
    (
        lambda: AdaptiveKLController(0.2, float("inf"), 10),
        "`target` must be a positive finite number; got inf",
    ),
    (
        lambda: AdaptiveKLController(0.2, 6, 10, clip=0),
        "`clip` must be a positive finite number; got 0",
    ),
    (
        lambda: AdaptiveKLController(0.2, 6, 10, per="tok"),
        "`per` must be 'sequence' or 'token'; got 'tok'",
    ),
    (lambda: DeadZoneKLController(0.2, 0.0), "`target` must be a positive finite number; got 0.0"),
    (
        lambda: DeadZoneKLController(-1, 0.1),
        "`init_kl_coef` must be a positive finite number; got -1",
    ),
    (
        lambda: DeadZoneKLController(0.2, 0.1, band=1.0),
        "`band` must be a finite number > 1; got 1.0",
    ),
    (
        lambda: DeadZoneKLController(0.2, 0.1, band=0.5),
        "`band` must be a finite number > 1; got 0.5",
    ),
    (
        lambda: DeadZoneKLController(0.2, 0.1, factor=1),
        "`factor` must be a finite number > 1; got 1",
    ),
    (
        lambda: DeadZoneKLController(0.2, 0.1, lower_band=1),
        "`lower_band` must be a finite number > 1; got 1",
    ),
    (
        lambda: DeadZoneKLController(0.2, 0.1, upper_band=float("inf")),
        "`upper_band` must be a finite number > 1; got inf",
    ),
    (
        lambda: DeadZoneKLController(0.2, 0.1, increase=0.5),
        "`increase` must be a finite number > 1; got 0.5",
    ),
    (
        lambda: DeadZoneKLController(0.2, 0.1, decrease=True),
        "`decrease` must be a finite number > 1; got True",
    ),
    (
        lambda: LagrangianKLController(-0.1, 0.1, 1.0),
        "`init_kl_coef` must be a non-negative finite number; got -0.1",
    ),
    (
        lambda: LagrangianKLController(0.1, 0, 1.0),
        "`target` must be a positive finite number; got 0",
    ),
    (lambda: LagrangianKLController(0.1, 0.1, 0), "`lr` must be a positive finite number; got 0"),
    (
        lambda: LagrangianKLController(0.1, 0.1, 1.0, min_kl_coef=-1),
        "`min_kl_coef` must be a non-negative finite number; got -1",
    ),
    (
        lambda: LagrangianKLController(0.1, 0.1, 1.0, min_kl_coef=0.2),
        "`init_kl_coef` must be >= `min_kl_coef` = 0.2; got 0.1",
    ),
    (
        lambda: convert_kl_target(0, 10, to="token"),
        "`target` must be a positive finite number; got 0",
    ),
    (
        lambda: convert_kl_target(1, 0, to="token"),
        "`length` must be a positive finite number; got 0",
    ),
    (
        lambda: convert_kl_target(1, 10, to="tokens"),
        "`to` must be 'token' or 'sequence'; got 'tokens'",
    ),
]


@pytest.mark.parametrize(("make", "msg"), BAD)
def test_bad_arguments(make, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        make()


CONTROLLERS = [
    lambda: FixedKLController(0.1),
    lambda: AdaptiveKLController(0.1, 1.0, 100),
    lambda: DeadZoneKLController(0.1, 1.0),
    lambda: LagrangianKLController(0.1, 1.0, 0.1),
]

BAD_UPDATES = [
    ((float("nan"), 1), "`current` must be a finite real number (a KL in nats); got nan"),
    ((float("inf"), 1), "`current` must be a finite real number (a KL in nats); got inf"),
    ((-float("inf"), 1), "`current` must be a finite real number (a KL in nats); got -inf"),
    (("x", 1), "`current` must be a finite real number (a KL in nats); got 'x'"),
    ((None, 1), "`current` must be a finite real number (a KL in nats); got None"),
    ((0.5, 0), "`n_steps` must be an integer >= 1; got 0"),
    ((0.5, 2.5), "`n_steps` must be an integer >= 1; got 2.5"),
]


@pytest.mark.parametrize("make", CONTROLLERS)
@pytest.mark.parametrize(("args", "msg"), BAD_UPDATES)
def test_bad_updates_leave_the_state_alone(make, args, msg):
    c = make()
    before = c.value
    with pytest.raises(ValueError, match=re.escape(msg)):
        c.update(*args)
    assert c.value == before


def test_updates_accept_numpy_scalars_and_negative_estimates():
    c = AdaptiveKLController(0.1, 1.0, 100)
    c.update(np.float32(0.5), np.int64(10))
    c.update(np.array(-0.1), 10)
    # errors -0.5 and -1.1 are both clipped to -0.2: two multipliers 1 - 0.2 * 10 / 100
    assert c.value == pytest.approx(0.1 * 0.98 * 0.98, rel=1e-15)


class _Negative:
    value = 1.0

    def update(self, current, n_steps):
        self.value = -1.0


SIM_BAD = [
    (
        lambda: simulate(object(), REF, REW, steps=3),
        "`controller` must have a `.value` attribute and an `.update(current, n_steps)` "
        "method; got object",
    ),
    (
        lambda: simulate(FixedKLController(1), REF, REW, steps=0),
        "`steps` must be an integer >= 1; got 0",
    ),
    (
        lambda: simulate(FixedKLController(1), REF, REW, steps=3, n_steps=0),
        "`n_steps` must be an integer >= 1; got 0",
    ),
    (
        lambda: simulate(FixedKLController(1), REF, REW, steps=3, lag=1.0),
        "`lag` must be a number in [0, 1); got 1.0",
    ),
    (
        lambda: simulate(FixedKLController(1), REF, REW, steps=3, lag=-0.1),
        "`lag` must be a number in [0, 1); got -0.1",
    ),
    (
        lambda: simulate(FixedKLController(1), REF, REW, steps=3, kl_samples=0),
        "`kl_samples` must be an integer >= 1; got 0",
    ),
    (
        lambda: simulate(FixedKLController(1), REF, REW, steps=3, length=0),
        "`length` must be a positive finite number; got 0",
    ),
    (
        lambda: simulate(FixedKLController(1), REF, REW, steps=3, measure="during"),
        "`measure` must be 'before' or 'after'; got 'during'",
    ),
    (
        lambda: simulate(FixedKLController(1), [[0.5, 0.5]], [1.0, 0.0], steps=3),
        "`ref` must be one problem's 1-D array (shape (V,)); got shape (1, 2)",
    ),
    (
        lambda: simulate(FixedKLController(1), [0.5, 0.6], [1.0, 0.0], steps=3),
        "`ref` must sum to 1 along axis -1",
    ),
    (
        lambda: simulate(_Negative(), REF, REW, steps=3),
        "controller 0 set its coefficient to -1.0 at step 1; a KL coefficient must be non-negative",
    ),
    (
        lambda: compare_controllers({}, REF, REW, steps=3),
        "`controllers` must be a non-empty mapping of names to controllers",
    ),
    (
        lambda: compare_controllers({"a": 1}, REF, REW, steps=3),
        "`controllers['a']` must have a `.value` attribute",
    ),
    (
        lambda: stability_region(REF, REW, 0.7, lags=[0], horizons=[1], init_kl_coef=1, steps=3),
        "`target` must be below the greedy policy's KL 0.693147; got 0.7",
    ),
    (
        lambda: stability_region(REF, REW, 0.1, lags=[1.5], horizons=[1], init_kl_coef=1, steps=3),
        "`lags` must be a number in [0, 1); got 1.5",
    ),
    (
        lambda: stability_region(REF, REW, 0.1, lags=[0], horizons=[0], init_kl_coef=1, steps=3),
        "`horizons` must be a positive finite number; got 0.0",
    ),
    (lambda: kl_elasticity(REF, REW, 0), "`beta` must be a positive finite number; got 0"),
    (
        lambda: kl_elasticity(REF, [1.0, 1.0, 1.0], 1.0),
        "`reward` is constant on the support of `ref`",
    ),
]


@pytest.mark.parametrize(("call", "msg"), SIM_BAD)
def test_bad_simulation_arguments(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()


@pytest.mark.parametrize(
    ("gain", "measure", "settles"),
    [(0.9, "before", True), (1.1, "before", False), (1.9, "after", True), (2.1, "after", False)],
)
def test_lagrangian_stability_threshold(gain, measure, settles):
    # linearised: delta_{t+1} = delta_t - lr kappa delta_{t-1} (before) or (1 - lr kappa) delta_t
    # (after), kappa = Var_pi*(r) / beta*^3: stable iff lr kappa < 1 (before) or < 2 (after)
    target = 0.4
    beta_star = float(kp.beta_for_kl(REF, REW, target))
    pi = kp.optimal_policy(REF, REW, beta_star)
    kappa = float(pi @ (REW - pi @ REW) ** 2) / beta_star**3
    c = LagrangianKLController(beta_star * 1.01, target, gain / kappa)
    tr = simulate(c, REF, REW, steps=400, measure=measure)
    assert (tr.settle_time < math.inf) == settles
    if settles:
        assert tr.beta[-1] == pytest.approx(beta_star, rel=1e-9)


@pytest.mark.slow
def test_zero_reference_mass_stays_off_the_support():
    # outcome 2 has no reference mass and the best reward: it must never be sampled or counted
    ref, rew = [0.6, 0.4, 0.0], [1.0, 0.0, 5.0]
    target = 0.2
    tr = simulate(AdaptiveKLController(1.0, target, 4.0), ref, rew, steps=300)
    assert tr.beta[-1] == pytest.approx(kp.beta_for_kl(ref, rew, target), rel=1e-10)
    noisy = simulate(
        AdaptiveKLController(1.0, target, 4.0), ref, rew, steps=50, kl_samples=50, rng=3
    )
    assert np.all(np.isfinite(noisy.kl_measured))
    assert np.all(noisy.kl <= kp.max_kl(ref, rew) + 1e-15)
