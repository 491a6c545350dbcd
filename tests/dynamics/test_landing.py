"""Where each rule lands: the closed forms as identities, the numeric fixed points against an
mpmath evaluation of the exact update, stability, and the bad inputs.

mpmath recipe: the update at a landing point is evaluated by the enumeration of
tests/_mpref/dynamics.py (50 digits); pi* from tests/_mpref (400 digits); the infinite
group's root solves t = beta (sd_{pi*_t}(r) + 1e-4) by mp.findroot from the float answer.
"""

import math

import mpmath as mp
import numpy as np
import pytest

import klpolicy
from klpolicy.dynamics import RULES, expected_update, landing_point, trajectory

from .. import _mpref as R

REF = np.array([0.4, 0.3, 0.2, 0.1])
REW = np.array([1.0, 0.0, 0.5, 2.0])


@pytest.mark.parametrize("G", [2, 3, 8, None])
@pytest.mark.parametrize("beta", [0.05, 0.5, 40.0])
def test_grpo_without_scale_lands_at_pistar_of_beta_g_over_g_minus_1(G, beta):
    lp = landing_point("grpo", REF, REW, beta, num_generations=G, scale_rewards="none")
    want_beta = beta if G is None else beta * G / (G - 1)
    assert lp.kind == "pistar" and lp.beta_eff == pytest.approx(want_beta, rel=1e-15)
    R.assert_mp_close(lp.policy, R.optimal_policy(REF, REW, want_beta), rtol=1e-12, atol=1e-300)
    u = expected_update(
        "grpo", np.log(lp.policy), REF, REW, beta, num_generations=G, scale_rewards="none"
    )
    assert np.abs(u).max() <= 1e-14 * max(1.0, beta)  # the identity: the update vanishes there
    assert lp.interior and lp.stable and "beta G/(G-1)" in lp.reason


@pytest.mark.parametrize("G", [2, 5])
def test_plain_k3_lands_at_the_forward_kl_optimum(G):
    lp = landing_point(
        "grpo", REF, REW, 0.5, num_generations=G, scale_rewards="none", use_bias_correction_kl=False
    )
    b = 0.5 * G / (G - 1)
    assert lp.kind == "forward_kl" and lp.beta_eff is None and lp.beta_divergence == b
    np.testing.assert_allclose(
        lp.policy, klpolicy.f_optimal_policy(REF, REW, b, divergence="forward_kl"), rtol=1e-14
    )
    # pi_j = b ref_j / (lambda - r_j): the forward-KL stationarity, checked directly
    lam = b * REF / lp.policy + REW
    np.testing.assert_allclose(lam, lam[0], rtol=1e-13)


@pytest.mark.parametrize(
    "rule,opts",
    [
        ("rloo", {}),
        ("rloo", {"num_generations": 7}),
        ("rloo", {"normalize_advantages": True}),
        ("reinforce", {"baseline": "none"}),
        ("reinforce", {"baseline": "mean"}),
        ("ppo", {"kl_estimator": "k1"}),
    ],
)
def test_unbiased_rules_land_at_pistar_of_beta(rule, opts):
    lp = landing_point(rule, REF, REW, 0.7, **opts)
    assert lp.kind == "pistar" and lp.beta_eff == 0.7
    R.assert_mp_close(lp.policy, R.optimal_policy(REF, REW, 0.7), rtol=1e-12)
    u = expected_update(rule, np.log(lp.policy), REF, REW, 0.7, **opts)
    # standardised advantages divide the shaped rewards' rounding (1e-16) by std + 5e-5
    assert np.abs(u).max() <= (1e-11 if opts.get("normalize_advantages") else 1e-14)


def test_beta_zero_is_the_greedy_limit_for_every_rule():
    for rule in RULES:
        reward = None if rule == "distill" else REW
        lp = landing_point(rule, REF, reward, 0.0)
        assert lp.kind == "greedy" and not lp.interior and lp.beta_eff == 0.0
    assert "TRL 1.16.0's default" in landing_point("grpo", REF, REW, 0.0).reason


@pytest.mark.parametrize("beta", [5.0, 20.0])
def test_the_infinite_group_with_the_std_solves_its_scalar_equation(beta):
    ref, r = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    lp = landing_point("grpo", ref, r, beta, num_generations=None)
    t = lp.beta_eff

    def h(tt):
        pi = R.optimal_policy(ref, r, tt)
        m = pi[0]
        return tt - beta * (mp.sqrt(m * (1 - m)) + mp.mpf("1e-4"))

    with mp.workdps(40):
        want = mp.findroot(h, mp.mpf(t))
    assert t == pytest.approx(float(want), rel=1e-10)
    assert len([p for p in lp.points if p.stable]) == 2  # a near-greedy root is stable too
    u = expected_update("grpo", np.log(lp.policy), ref, r, beta, num_generations=None)
    assert np.abs(u).max() < 1e-12


def test_the_infinite_group_with_the_std_collapses_when_beta_is_small():
    # beta' = beta (sd + 1e-4) has only the near-greedy root below beta ~ 4 for this problem
    lp = landing_point("grpo", [0.5, 0.5], [1.0, 0.0], 1.0, num_generations=None)
    assert lp.kind == "greedy" and not lp.interior
    assert "collapses" in str(lp) and lp.beta_eff == pytest.approx(1e-4, rel=1e-6)


@pytest.mark.parametrize("G", [2, 4])
@pytest.mark.parametrize("corrected", [True, False])
def test_finite_groups_with_the_std_land_on_an_exact_zero_of_the_update(G, corrected):
    beta = 0.5
    lp = landing_point("grpo", REF, REW, beta, num_generations=G, use_bias_correction_kl=corrected)
    assert lp.kind == "fixed_point" and lp.stable and lp.interior
    # the update at the landing point, by the independent mpmath enumeration, is 0 to the
    # rounding of the point: each component below 1e-10 of its probability
    th = np.log(lp.policy)
    want = R.expected_group_update(
        th, REF, REW, beta, G, "mean", "std", "k3_corrected" if corrected else "k3"
    )
    for w, p in zip(want, lp.policy):
        assert abs(float(w)) <= 1e-10 * p
    # no vertex is reported as a fixed point: near one the KL term pushes back (k3's
    # pi k3' tends to -ref, and expected_gradient keeps underflowed outcomes), so a vertex
    # with update 0 can only be rounding
    assert all(np.max(p.policy) < 1 - 1e-6 for p in lp.points)


def test_k3_in_ppos_reward_runs_off():
    lp = landing_point("ppo", REF, REW, 0.5, kl_estimator="k3")
    assert lp.kind == "run_off" and lp.policy is None and not lp.interior
    assert "runs off" in str(lp)


def test_distillation_lands_on_the_teacher():
    lp = landing_point("distill", REF, None, 0.3)
    np.testing.assert_allclose(lp.policy, REF, rtol=1e-15)
    assert "teacher" in lp.reason


def test_zeros_in_the_reference_stay_zero():
    ref = np.array([0.5, 0.0, 0.5])
    lp = landing_point("grpo", ref, [1.0, 5.0, 0.0], 0.5, num_generations=2, scale_rewards="none")
    assert lp.policy[1] == 0.0 and lp.policy.sum() == pytest.approx(1.0)
    th = np.log(np.where(ref > 0, ref, 1.0))
    th[1] = -np.inf
    u = expected_update("grpo", th, ref, [1.0, 5.0, 0.0], 0.5, num_generations=2)
    assert u[1] == 0.0


def test_str_is_one_line_saying_where_and_why():
    s = str(landing_point("grpo", REF, REW, 0.5, num_generations=2, scale_rewards="none"))
    assert "\n" not in s and "lands at pi* at beta_eff = 1" in s and "includes the sample" in s


# --------------------------------------------------------------------------- trajectories


def test_natural_steps_stay_in_the_pistar_family_and_reach_the_landing_point():
    tr = trajectory(
        "grpo",
        REF,
        REW,
        0.5,
        steps=300,
        lr=1.0,
        optimizer="natural",
        num_generations=2,
        scale_rewards="none",
    )
    assert tr.kl_to_landing[-1] < 1e-20
    np.testing.assert_allclose(tr.beta_fit[-1], 1.0, rtol=1e-9)
    assert tr.beta_fit[0] == math.inf and np.all(np.diff(tr.beta_fit[1:]) <= 1e-12)
    np.testing.assert_allclose(tr.reward, tr.policy @ REW)


def test_hard_reference_resets_drive_the_effective_beta_to_zero():
    tr = trajectory(
        "rloo",
        REF,
        REW,
        0.5,
        steps=600,
        lr=1.0,
        optimizer="natural",
        sync_ref_model=True,
        ref_model_mixup_alpha=1.0,
        ref_model_sync_steps=200,
    )
    # converged between resets: 1/beta_n = n / beta after n resets, pi* of the first reference
    for k, step in enumerate((199, 399, 599), start=1):
        np.testing.assert_allclose(tr.beta_fit[step + 1], 0.5 / k, rtol=1e-6)
    assert not np.allclose(tr.ref[0], tr.ref[-1])


# --------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "call,msg",
    [
        (lambda: landing_point("ppo2", REF, REW, 1.0), "`rule` must be one of 'grpo'"),
        (
            lambda: landing_point("grpo", REF, REW, 1.0, num_gens=2),
            "rule 'grpo' has no option 'num_gens'; its options are: num_generations=8, "
            "scale_rewards='group', loss_type='dapo'",
        ),
        (
            lambda: landing_point("grpo", REF, REW, 1.0, num_generations=1),
            "`num_generations` must be at least 2",
        ),
        (
            lambda: landing_point("grpo", REF, REW, 1.0, scale_rewards="std"),
            "`scale_rewards` must be one of 'group', 'batch', 'none'; got 'std'",
        ),
        (
            lambda: landing_point("grpo", REF, REW, 1.0, loss_type="sum"),
            "`loss_type` must be one of 'grpo', 'bnpo', 'dr_grpo', 'dapo'; got 'sum'",
        ),
        (lambda: landing_point("grpo", REF, REW, -0.1), "`beta` must be"),
        (
            lambda: expected_update("grpo", [0.0, 0.0, 0.0], REF, REW, 1.0),
            "`logits` must have the shape",
        ),
        (
            lambda: expected_update("grpo", [0.0, 1.0], [1.0, 0.0], [0.0, 1.0], 1.0),
            "`logits` give probability to outcome 1, where `ref` is 0",
        ),
        (
            lambda: expected_update("grpo", np.zeros(4), REF, REW, 1.0, num_generations=600),
            "`num_generations` 600 with 4 distinct rewards",
        ),
        (lambda: trajectory("grpo", REF, REW, 1.0, steps=0, lr=1.0), "`steps` must be"),
        (
            lambda: trajectory("grpo", REF, REW, 1.0, steps=3, lr=1.0, optimizer="adam"),
            "`optimizer` must be one of 'sgd', 'natural'",
        ),
    ],
)
def test_bad_inputs_are_refused_by_name(call, msg):
    with pytest.raises(ValueError, match=__import__("re").escape(msg)):
        call()


@pytest.mark.parametrize("baseline", ["none", "loo", "mean"])
@pytest.mark.parametrize(
    ("estimator", "placement", "kind"),
    [
        ("k1", "reward", "pistar"),
        ("k2", "loss", "pistar"),
        ("k3", "loss", "forward_kl"),
        ("k1", "loss", "greedy"),
        ("k2", "reward", "run_off"),
        ("k3", "reward", "run_off"),
    ],
)
def test_reinforce_with_an_estimator_lands_where_the_placement_says(
    baseline, estimator, placement, kind
):
    G, beta = 4, 0.7
    opts = {
        "baseline": baseline,
        "num_generations": G,
        "kl_estimator": estimator,
        "placement": placement,
    }
    lp = landing_point("reinforce", REF, REW, beta, **opts)
    assert lp.kind == kind
    # a mean baseline scales the advantage by (G-1)/G; in the loss the KL term is not scaled
    b = beta * G / (G - 1) if baseline == "mean" and placement == "loss" else beta
    if kind == "run_off":
        assert lp.policy is None and "no fixed point" in lp.reason
        return
    if kind == "greedy":
        assert lp.beta_eff == 0.0 and "no expected gradient" in lp.reason
        return
    if kind == "pistar":
        assert lp.beta_eff == pytest.approx(b, rel=1e-15)
        R.assert_mp_close(lp.policy, R.optimal_policy(REF, REW, b), rtol=1e-12)
    else:
        assert lp.beta_eff is None and lp.beta_divergence == pytest.approx(b, rel=1e-15)
        R.assert_mp_close(lp.policy, R.forward_kl_optimum(REF, REW, b), rtol=1e-12)
    u = expected_update("reinforce", np.log(lp.policy), REF, REW, beta, **opts)
    assert np.abs(u).max() <= 1e-13
