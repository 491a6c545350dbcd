"""Tests of klpolicy.testing: strategies, check suites (correct code passes, mutants fail), plugin.

Every check is run with its default settings (100 derandomised examples), so
these tests also show that the suites run in seconds.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.special as sps
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

import klpolicy
import klpolicy.control
import klpolicy.estimators
import klpolicy.preference
from klpolicy.testing import (
    check_dpo_loss,
    check_kl_controller,
    check_kl_divergence,
    check_kl_estimator,
    check_optimal_policy,
    check_soft_value,
)
from klpolicy.testing import strategies as kst

torch = pytest.importorskip("torch")
F = torch.nn.functional
ROOT = Path(__file__).resolve().parents[2]


def _t(x):
    return torch.as_tensor(x, dtype=torch.float64)


def fails(check, fn, *args, match=None, **kwargs):
    """Assert that the check raises AssertionError (whose message matches ``match``)."""
    with pytest.raises(AssertionError) as info:
        check(fn, *args, **kwargs)
    msg = str(info.value)
    assert "Falsifying input:" in msg
    if match is not None:
        assert re.search(match, msg), msg
    return msg


# --------------------------------------------------------------------------- strategies


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(kst.distributions(min_size=2, max_size=5, min_entry=1e-30))
def test_distributions_are_normalised_within_bounds(p):
    assert p.dtype == np.float64 and 2 <= p.size <= 5
    assert (p >= 0).all() and abs(p.sum() - 1) <= 4 * p.size * np.finfo(float).eps
    assert (p[p > 0] >= 1e-30).all()


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(kst.distributions(min_size=st.integers(3, 4), max_size=4, zeros=False))
def test_distributions_strategy_bounds_and_no_zeros(p):
    assert p.size in (3, 4) and (p > 0).all()


@pytest.mark.slow
def test_distributions_reach_tiny_entries_and_zeros():
    seen = {"tiny": False, "zero": False}

    @settings(max_examples=200, derandomize=True, database=None, deadline=None)
    @given(kst.distributions())
    def probe(p):
        seen["tiny"] |= bool((p[p > 0] <= 1e-250).any())
        seen["zero"] |= bool((p == 0).any())

    probe()
    assert seen == {"tiny": True, "zero": True}


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(kst.problems(max_size=5, allow_zero_beta=True, allow_inf_beta=True))
def test_problems_are_valid_klpolicy_inputs(problem):
    ref, reward, beta = problem
    assert ref.shape == reward.shape and 1 <= ref.size <= 5
    assert np.isfinite(reward).all() and (np.abs(reward) <= 1e6).all()
    assert beta in (0.0, math.inf) or 1e-8 <= beta <= 1e8
    pi = klpolicy.optimal_policy(ref, reward, beta)
    assert pi.shape == ref.shape


@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(kst.betas(min_beta=1e-2, max_beta=1e2))
def test_betas_within_bounds(beta):
    assert 1e-2 <= beta <= 1e2


def test_betas_shrink_to_one_and_include_limits_on_request():
    from hypothesis import find

    assert find(kst.betas(), lambda b: True) == 1.0
    assert find(kst.betas(allow_zero=True), lambda b: b == 0) == 0.0
    assert find(kst.betas(allow_inf=True), lambda b: b == math.inf) == math.inf


def test_distributions_shrink_to_uniform():
    from hypothesis import find

    p = find(kst.distributions(min_size=3), lambda p: True)
    assert p.tolist() == [1 / 3, 1 / 3, 1 / 3]


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(kst.token_trees(max_vocab=3, max_length=3))
def test_token_trees_have_the_sequences_layout(tree):
    v = tree[0].shape[0]
    for t, cond in enumerate(tree):
        assert cond.shape == (v,) * (t + 1)
        assert np.allclose(cond.sum(axis=-1), 1, rtol=0, atol=1e-14)
        assert (cond >= 0).all()


@settings(max_examples=30, derandomize=True, database=None, deadline=None)
@given(kst.token_trees(max_vocab=3, max_length=3), kst.betas(min_beta=1e-2, max_beta=1e2))
def test_token_trees_are_valid_klpolicy_sequences_inputs(tree, beta):
    import klpolicy.sequences as seq

    v, t_len = tree[0].shape[0], len(tree)
    p = seq.joint(tree)
    assert p.shape == (v,) * t_len and abs(p.sum() - 1) < 1e-12
    reward = np.arange(p.size, dtype=float).reshape(p.shape) / p.size
    result = seq.soft_bellman(tree, reward, beta)
    # the tree's soft value at the root is the soft value of the joint problem
    assert float(np.ravel(result.value[0])[0]) == pytest.approx(
        float(klpolicy.soft_value(p.ravel(), reward.ravel(), beta)), rel=1e-9, abs=1e-12
    )


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(kst.preference_pairs(max_size=4, min_logp=-100.0))
def test_preference_pairs_are_log_probabilities(batch):
    n = batch.policy_chosen.size
    assert 1 <= n <= 4
    for x in batch:
        assert x.shape == (n,) and (x <= 0).all() and (x >= -100).all()


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(kst.log_ratios(min_value=-5.0, max_value=2.0))
def test_log_ratios_within_bounds(x):
    assert (x >= -5).all() and (x <= 2).all()


@settings(max_examples=40, derandomize=True, database=None, deadline=None)
@given(kst.rewards(min_size=2, max_size=2, min_value=5.0, max_value=6.0))
def test_rewards_within_bounds(r):
    assert r.shape == (2,) and (r >= 5).all() and (r <= 6).all()


BAD_STRATEGY_ARGS = [
    (
        kst.distributions,
        {"min_size": 3, "max_size": 2},
        "`min_size` = 3 must not exceed `max_size` = 2",
    ),
    (kst.distributions, {"min_size": 0}, "`min_size` must be >= 1; got 0"),
    (kst.distributions, {"max_size": 2.5}, "`max_size` must be an integer or a strategy; got 2.5"),
    (kst.distributions, {"min_entry": 0.0}, "`min_entry` must lie in (0, 1]; got 0.0"),
    (
        kst.distributions,
        {"min_entry": 0.2, "max_size": 4},
        "`min_entry` = 0.2 is too large for `max_size` = 4: it must be at most "
        "0.5 / max_size = 0.125",
    ),
    (
        kst.rewards,
        {"min_value": 1.0, "max_value": -1.0},
        "`min_value` = 1.0 must not exceed `max_value` = -1.0",
    ),
    (kst.rewards, {"max_value": math.inf}, "`max_value` must be a finite number; got inf"),
    (
        kst.betas,
        {"min_beta": 0.0},
        "`min_beta` must be positive; got 0.0 (pass allow_zero=True to include beta = 0)",
    ),
    (
        kst.betas,
        {"max_beta": math.inf},
        "`max_beta` must be finite; got inf (pass allow_inf=True to include beta = inf)",
    ),
    (
        kst.betas,
        {"min_beta": 2.0, "max_beta": 1.0},
        "`min_beta` = 2.0 must not exceed `max_beta` = 1.0",
    ),
    (kst.betas, {"min_beta": math.nan}, "`min_beta` must be a finite number; got nan"),
    (
        kst.problems,
        {"min_reward": 3.0, "max_reward": 2.0},
        "`min_value` = 3.0 must not exceed `max_value` = 2.0",
    ),
    (
        kst.token_trees,
        {"max_vocab": 100, "max_length": 3},
        "a tree with `max_vocab` = 100 and `max_length` = 3 has `max_vocab` ** `max_length` = "
        "1,000,000 leaves (every one a distribution drawn and held in memory); "
        "at most 100,000 are allowed",
    ),
    (  # 3**(2**63) was computed exactly: it hung (issue 40, item 18)
        kst.token_trees,
        {"max_length": 2**63},
        "a tree with `max_length` = 9223372036854775808 has 9223372036854775808 positions, "
        "one array each; at most 100,000 are allowed",
    ),
    (
        kst.token_trees,
        {"max_vocab": 2**40, "max_length": 2**16},
        "a tree with `max_vocab` = 1099511627776 and `max_length` = 65536 has `max_vocab` ** "
        "`max_length` = about 10^7.891e+05 leaves (every one a distribution drawn and held in "
        "memory); at most 100,000 are allowed",
    ),
    (
        kst.token_trees,
        {"min_length": 4, "max_length": 3},
        "`min_length` = 4 must not exceed `max_length` = 3",
    ),
    (kst.preference_pairs, {"min_logp": 0.0}, "`min_logp` must be negative; got 0.0"),
    (
        kst.log_ratios,
        {"min_value": 1.0, "max_value": 0.0},
        "`min_value` = 1.0 must not exceed `max_value` = 0.0",
    ),
]


@pytest.mark.parametrize(("strategy", "kwargs", "msg"), BAD_STRATEGY_ARGS)
def test_impossible_bounds_fail_at_once(strategy, kwargs, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        strategy(**kwargs)  # built, never drawn
    with pytest.raises(kst.InvalidArgument):
        strategy(**kwargs)


def test_bounds_given_as_strategies_are_checked_when_drawn():
    @settings(max_examples=1, database=None)
    @given(kst.distributions(min_size=st.just(5), max_size=2))
    def draw_one(p):
        pass

    msg = "`min_size` = 5 must not exceed `max_size` = 2"
    with pytest.raises(ValueError, match=re.escape(msg)):
        draw_one()


def test_bounds_are_keyword_only():
    with pytest.raises(TypeError):
        kst.distributions(1, 3)


# --------------------------------------------------------------------------- check options


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"max_examples": 0}, "`max_examples` must be a positive integer; got 0"),
        ({"max_examples": 1.5}, "`max_examples` must be a positive integer; got 1.5"),
        ({"rtol": 0.0}, "`rtol` must be a number in (0, 1); got 0.0"),
        ({"rtol": "x"}, "`rtol` must be a number in (0, 1); got 'x'"),
    ],
)
def test_bad_check_options(kwargs, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        check_kl_divergence(lambda p, q: 0.0, **kwargs)


@pytest.mark.slow
def test_an_exception_in_fn_is_reported_with_the_input():
    def strict(p, q):
        if (np.asarray(q) == 0).any():
            raise ValueError("q has a zero")
        return sps.rel_entr(p, q).sum()

    msg = fails(check_kl_divergence, strict, match="it raised ValueError: q has a zero")
    assert "supports_*" in msg
    check_kl_divergence(strict, supports_zero_q=False)


def test_a_nondeterministic_fn_is_reported():
    calls = iter(range(10**6))

    def flaky(p, q):  # wrong once, on its 50th call only
        return sps.rel_entr(p, q).sum() + (next(calls) == 50) * 1e-3

    with pytest.raises(AssertionError, match="different results on the same input"):
        check_kl_divergence(flaky)


def test_bad_estimator_name_and_reduction():
    with pytest.raises(
        ValueError, match=re.escape("`estimator` must be one of 'k1', 'k2', 'k3', 'abs'; got 'k4'")
    ):
        check_kl_estimator(lambda lp, lq: lp - lq, "k4")
    with pytest.raises(
        ValueError, match=re.escape("`reduction` must be 'none', 'mean' or 'sum'; got 'avg'")
    ):
        check_dpo_loss(lambda *a: 0.0, reduction="avg")


# --------------------------------------------------------------------------- optimal policy


def softmax_policy(ref, reward, beta):
    return sps.softmax(np.log(ref) + reward / beta)


def torch_policy(ref, reward, beta):
    return torch.softmax(torch.log(_t(ref)) + _t(reward) / beta, dim=-1)


@pytest.mark.slow
def test_optimal_policy_passes_correct_implementations():
    check_optimal_policy(klpolicy.optimal_policy, supports_inf_beta=True)
    check_optimal_policy(softmax_policy)
    check_optimal_policy(torch_policy)


def test_klpolicy_greedy_limit_is_normalised():
    # regression: found by check_optimal_policy(klpolicy.optimal_policy, supports_zero_beta=True)
    # on the first core (log1p(-rest) lost the digits of a best-set mass of 1e-12).
    ref = [0.4999999999995, 0.4999999999995, 0.0, 0.0, 0.0, 1e-12]
    reward = [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    assert abs(klpolicy.optimal_policy(ref, reward, 0.0).sum() - 1) < 1e-12


@pytest.mark.slow
def test_optimal_policy_passes_klpolicy_with_both_limits():
    check_optimal_policy(klpolicy.optimal_policy, supports_zero_beta=True, supports_inf_beta=True)


OPTIMAL_POLICY_MUTANTS = [
    ("no reference", lambda ref, r, b: sps.softmax(r / b), "reference"),
    ("beta multiplies", lambda ref, r, b: sps.softmax(np.log(ref) + r * b), "inverse temperature"),
    ("reward sign", lambda ref, r, b: sps.softmax(np.log(ref) - r / b), "sign of the reward"),
    (
        "naive exp overflows",
        lambda ref, r, b: ref * np.exp(r / b) / np.sum(ref * np.exp(r / b)),
        "overflow|non-finite",
    ),
    ("temperature 2 beta", lambda ref, r, b: sps.softmax(np.log(ref) + r / (2 * b)), "differs"),
    ("not normalised", lambda ref, r, b: ref * np.exp(r / b - np.max(r / b)), "sum to"),
    ("smoothed reference", lambda ref, r, b: sps.softmax(np.log(ref + 1e-8) + r / b), None),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "fn", "match"), OPTIMAL_POLICY_MUTANTS, ids=[m[0] for m in OPTIMAL_POLICY_MUTANTS]
)
def test_optimal_policy_catches_mutants(name, fn, match):
    fails(check_optimal_policy, fn, match=match)


@pytest.mark.slow
def test_optimal_policy_message_names_smallest_input():
    msg = fails(check_optimal_policy, lambda ref, r, b: sps.softmax(r / b))
    assert msg.startswith("check_optimal_policy(<lambda>): it ignores the reference")
    assert (
        "Falsifying input: ref=[0.3333333333333333, 0.6666666666666666], "
        "reward=[0.0, 0.0], beta=1.0" in msg
    )


# --------------------------------------------------------------------------- soft value


@pytest.mark.slow
def test_soft_value_passes_correct_implementations():
    check_soft_value(klpolicy.soft_value, supports_zero_beta=True, supports_inf_beta=True)
    check_soft_value(lambda ref, r, b: b * sps.logsumexp(r / b, b=ref))
    check_soft_value(lambda ref, r, b: b * torch.logsumexp(torch.log(_t(ref)) + _t(r) / b, 0))


SOFT_VALUE_MUTANTS = [
    ("missing beta", lambda ref, r, b: sps.logsumexp(r / b, b=ref), "factor beta"),
    (
        "naive overflow",
        lambda ref, r, b: b * np.log(np.sum(ref * np.exp(r / b))),
        "overflow|returns",
    ),
    ("no reference weights", lambda ref, r, b: b * sps.logsumexp(r / b), "reference weights|above"),
    ("reference mean", lambda ref, r, b: np.sum(ref * r), None),
    ("beta multiplies", lambda ref, r, b: b * sps.logsumexp(r * b, b=ref), None),
    ("soft minimum", lambda ref, r, b: -b * sps.logsumexp(-r / b, b=ref), "below|differs"),
]


@pytest.mark.parametrize(
    ("name", "fn", "match"), SOFT_VALUE_MUTANTS, ids=[m[0] for m in SOFT_VALUE_MUTANTS]
)
def test_soft_value_catches_mutants(name, fn, match):
    fails(check_soft_value, fn, match=match)


# --------------------------------------------------------------------------- KL divergence


def torch_kl(p, q):
    # kl_div(input, target) = sum target * (log target - input): input must be log q, target p
    return F.kl_div(torch.log(_t(q)), _t(p), reduction="sum")


@pytest.mark.slow
def test_kl_divergence_passes_correct_implementations():
    check_kl_divergence(klpolicy.kl_divergence)
    check_kl_divergence(lambda p, q: sps.rel_entr(p, q).sum())
    check_kl_divergence(lambda p, q: scipy.stats.entropy(p, q))
    # torch returns nan for 0 * (log 0 - log 0), so only q > 0 is claimed
    check_kl_divergence(torch_kl, supports_zero_q=False)


def test_torch_kl_div_with_zeros_in_q_is_caught():
    msg = fails(check_kl_divergence, torch_kl, match="both 0")
    assert "Falsifying input: p=[1.0, 0.0], q=[1.0, 0.0]" in msg


def test_klpolicy_kl_divergence_with_tiny_p():
    # regression: found by check_kl_divergence(klpolicy.kl_divergence) on the first core,
    # where log1p((p - q)/q) = log1p(-1) = -inf.
    assert float(klpolicy.kl_divergence([1.0, 1e-17], [0.5, 0.5])) == pytest.approx(math.log(2))


KL_MUTANTS = [
    (
        "torch kl_div argument-order trap",
        lambda p, q: F.kl_div(torch.log(_t(p)), _t(q), reduction="sum"),
        r"KL\(q\|\|p\)|inf",
    ),
    ("reversed rel_entr", lambda p, q: sps.rel_entr(q, p).sum(), r"KL\(q\|\|p\)"),
    ("entropy arguments swapped", lambda p, q: scipy.stats.entropy(q, p), r"KL\(q\|\|p\)"),
    ("bits", lambda p, q: scipy.stats.entropy(p, q, base=2), "bits"),
    ("0 log 0 is nan", lambda p, q: np.sum(p * np.log(p / q)), "nan"),
    ("cross-entropy", lambda p, q: -np.sum(sps.xlogy(p, q)), "cross-entropy"),
    (
        "epsilon clamp",
        lambda p, q: np.sum(sps.xlogy(p, (p + 1e-10) / (q + 1e-10))),
        r"\+inf|differs",
    ),
    (
        "torch kl_div mean reduction",
        lambda p, q: F.kl_div(torch.log(_t(q)), _t(p), reduction="mean"),
        "reduction='mean'",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "fn", "match"), KL_MUTANTS, ids=[m[0] for m in KL_MUTANTS])
def test_kl_divergence_catches_mutants(name, fn, match):
    fails(check_kl_divergence, fn, match=match)


def test_torch_kl_div_trap_message():
    msg = fails(
        check_kl_divergence,
        lambda p, q: F.kl_div(torch.log(_t(p)), _t(q), reduction="sum"),
        supports_zero_p=False,
        supports_zero_q=False,
    )
    assert "it computes KL(q||p), not KL(p||q)" in msg
    assert "Falsifying input: p=[0.5, 0.5], q=[0.9, 0.1]" in msg


# --------------------------------------------------------------------------- estimators


CORRECT_ESTIMATORS = {  # third-party style, in torch
    "k1": lambda lp, lq: _t(lp) - _t(lq),
    "k2": lambda lp, lq: (_t(lp) - _t(lq)) ** 2 / 2,
    # TRL's form: (logr.exp() - 1) - logr with logr = logq - logp
    "k3": lambda lp, lq: torch.exp(_t(lq) - _t(lp)) - 1 - (_t(lq) - _t(lp)),
}


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_estimator_passes_correct_implementations(estimator):
    check_kl_estimator(getattr(klpolicy.estimators, estimator), estimator)
    check_kl_estimator(CORRECT_ESTIMATORS[estimator], estimator)


ESTIMATOR_MUTANTS = [
    ("k3 inverted ratio", "k3", lambda lp, lq: np.expm1(lp - lq) - (lp - lq), "ratio inverted"),
    ("k1 sign", "k1", lambda lp, lq: lq - lp, "wrong sign"),
    ("k2 without half", "k2", lambda lp, lq: (lp - lq) ** 2, "factor 1/2"),
    ("k1 in bits", "k1", lambda lp, lq: (lp - lq) / math.log(2), "bits"),
    ("k1 through probabilities", "k1", lambda lp, lq: np.log(np.exp(lp) / np.exp(lq)), None),
    ("k1 absolute value", "k1", lambda lp, lq: np.abs(lp - lq), "'abs'"),
    ("k3 is really k2", "k3", lambda lp, lq: 0.5 * (lp - lq) ** 2, "computes k2"),
    ("k3 sign of linear term", "k3", lambda lp, lq: np.expm1(lq - lp) + (lq - lp), None),
    (
        "k3 mean instead of per-sample",
        "k3",
        lambda lp, lq: np.mean(np.expm1(lq - lp) - (lq - lp)),
        "shape",
    ),
]


@pytest.mark.parametrize(
    ("name", "estimator", "fn", "match"), ESTIMATOR_MUTANTS, ids=[m[0] for m in ESTIMATOR_MUTANTS]
)
@pytest.mark.slow
def test_kl_estimator_catches_mutants(name, estimator, fn, match):
    fails(check_kl_estimator, fn, estimator, match=match)


# --------------------------------------------------------------------------- DPO


def dpo_numpy(pc, pr, rc, rr, beta):
    return np.logaddexp(0.0, -beta * ((pc - rc) - (pr - rr)))


def dpo_torch(pc, pr, rc, rr, beta):
    # the loss of Rafailov et al. as written in TRL: -logsigmoid(beta * logits)
    logits = (_t(pc) - _t(pr)) - (_t(rc) - _t(rr))
    return -F.logsigmoid(beta * logits)


@pytest.mark.slow
def test_dpo_loss_passes_correct_implementations():
    check_dpo_loss(klpolicy.preference.dpo_loss)
    check_dpo_loss(dpo_torch)
    check_dpo_loss(lambda *a: dpo_torch(*a).mean(), reduction="mean")


DPO_MUTANTS = [
    (
        "margin sign",
        lambda pc, pr, rc, rr, b: np.logaddexp(0.0, b * ((pc - rc) - (pr - rr))),
        "sign of the margin",
    ),
    ("no reference", lambda pc, pr, rc, rr, b: np.logaddexp(0.0, -b * (pc - pr)), "reference"),
    (
        "naive -log sigmoid overflows",
        lambda pc, pr, rc, rr, b: -np.log(1 / (1 + np.exp(-b * ((pc - rc) - (pr - rr))))),
        "inf/nan",
    ),
    (
        "divides by beta",
        lambda pc, pr, rc, rr, b: np.logaddexp(0.0, -((pc - rc) - (pr - rr)) / b),
        "divides",
    ),
    (
        "log sigmoid without minus",
        lambda pc, pr, rc, rr, b: F.logsigmoid(b * ((_t(pc) - _t(rc)) - (_t(pr) - _t(rr)))),
        "negative",
    ),
    ("mean instead of per pair", lambda *a: dpo_numpy(*a).mean(), "shape"),
    ("ignores beta", lambda pc, pr, rc, rr, b: np.logaddexp(0.0, -((pc - rc) - (pr - rr))), None),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "fn", "match"), DPO_MUTANTS, ids=[m[0] for m in DPO_MUTANTS])
def test_dpo_loss_catches_mutants(name, fn, match):
    fails(check_dpo_loss, fn, match=match)


# --------------------------------------------------------------------------- controllers


class TRLAdaptive:
    """TRL's AdaptiveKLController (Ziegler et al. 2019), as released: no input checks."""

    def __init__(self, init_kl_coef, target, horizon):
        self.value, self.target, self.horizon = init_kl_coef, target, horizon

    def update(self, current, n_steps):
        err = np.clip(current / self.target - 1, -0.2, 0.2)
        self.value *= 1 + err * n_steps / self.horizon


class GuardedAdaptive(TRLAdaptive):
    """TRL's rule with the three guards a training loop needs: each mutant below drops one."""

    def __init__(self, init_kl_coef, target, horizon):
        if not target > 0:
            raise ValueError(f"`target` must be positive; got {target!r}")
        super().__init__(init_kl_coef, target, horizon)

    def update(self, current, n_steps):
        if not math.isfinite(current):
            raise ValueError(f"`current` must be finite; got {current!r}")
        err = min(max(float(current) / self.target - 1, -0.2), 0.2)
        step = err * n_steps / self.horizon
        # 1 + (-0.1) * 10 is 0 in exact arithmetic and 3.3e-16 in floats: zero up to rounding
        if not 1 + step > 8 * np.finfo(float).eps * (1 + abs(step)):
            raise FloatingPointError(f"`n_steps` / `horizon` is too large: multiplier {1 + step}")
        self.value *= 1 + step


class SignGuarded(GuardedAdaptive):
    """Refuses a negative multiplier but takes 3.3e-16 (0 in exact arithmetic) as a step."""

    def update(self, current, n_steps):
        if not math.isfinite(current):
            raise ValueError(f"`current` must be finite; got {current!r}")
        err = min(max(float(current) / self.target - 1, -0.2), 0.2)
        mult = 1 + err * n_steps / self.horizon
        if not mult > 0:
            raise FloatingPointError(f"`n_steps` / `horizon` is too large: multiplier {mult}")
        self.value *= mult


class FloorsBeta(SignGuarded):
    """Takes the 3.3e-16 multiplier, but never lets beta underflow: it keeps the last positive."""

    def update(self, current, n_steps):
        old = self.value
        super().update(current, n_steps)
        if not self.value > 0:
            self.value = old


class Float32Coefficient(GuardedAdaptive):
    """The guarded rule with its coefficient stored as a float32 tensor, as torchrl's ``coef *=``.

    torchrl's AdaptiveKLController (torchrl/data/llm/utils.py, pytorch/rl at commit
    92d6a12424cc51355f8fa976fe476b5c4d5dd01e) forms the KL with ``torch.as_tensor`` (float32)
    and multiplies ``self.coef *= mult`` by a float32 tensor, so the coefficient is float32.
    """

    def update(self, current, n_steps):
        if not math.isfinite(current):
            raise ValueError(f"`current` must be finite; got {current!r}")
        err = torch.clip(torch.as_tensor(float(current)) / self.target - 1, -0.2, 0.2)
        mult = 1 + err * n_steps / self.horizon
        if not mult > 8 * torch.finfo(torch.float32).eps:
            raise FloatingPointError(f"`n_steps` / `horizon` is too large: multiplier {mult}")
        self.value *= mult


class TorchRLAdaptive(TRLAdaptive):
    """torchrl's update (see Float32Coefficient) with TRL's interface: no guards, float32."""

    def update(self, current, n_steps):
        err = np.clip(torch.as_tensor(current) / self.target - 1, -0.2, 0.2)
        self.value *= 1 + err * n_steps / self.horizon


class TRLFixed:
    def __init__(self, kl_coef):
        self.value = kl_coef

    def update(self, current, n_steps):
        pass


class DeadZone:
    """PPO paper, sec. 4 (a target of 0 is refused: every positive KL would double beta)."""

    def __init__(self, init_kl_coef, target, band=1.5, factor=2.0):
        if not target > 0:
            raise ValueError(f"`target` must be positive; got {target!r}")
        self.value, self.target, self.band, self.factor = init_kl_coef, target, band, factor

    def update(self, current, n_steps):
        if current > self.target * self.band:
            self.value *= self.factor
        elif current < self.target / self.band:
            self.value /= self.factor


class SkipsNonFinite(GuardedAdaptive):
    """Skips a NaN/inf KL instead of refusing it: beta stays finite and positive, which passes."""

    def update(self, current, n_steps):
        if math.isfinite(current):
            super().update(current, n_steps)


@pytest.mark.slow
def test_kl_controller_passes_correct_implementations():
    check_kl_controller(klpolicy.control.AdaptiveKLController)
    check_kl_controller(klpolicy.control.FixedKLController)
    check_kl_controller(klpolicy.control.DeadZoneKLController)
    check_kl_controller(GuardedAdaptive)
    check_kl_controller(FloorsBeta)
    check_kl_controller(Float32Coefficient, dtype="float32")
    check_kl_controller(SkipsNonFinite)
    check_kl_controller(TRLFixed)
    check_kl_controller(DeadZone)


def _adaptive(rule):
    class Mutant(GuardedAdaptive):  # keeps the guards, changes the rule
        def update(self, current, n_steps):
            if not math.isfinite(current):
                raise ValueError(f"`current` must be finite; got {current!r}")
            new = rule(self, current, n_steps)
            if not (math.isfinite(new) and new > 0):
                raise ValueError(f"`n_steps` {n_steps} is too large: beta would be {new}")
            self.value = new

    return Mutant


class NaNPropagating(GuardedAdaptive):
    """Drops the finiteness guard: one NaN KL (a diverged step) makes beta NaN for good."""

    def update(self, current, n_steps):
        err = np.clip(current / self.target - 1, -0.2, 0.2)
        self.value *= 1 + err * n_steps / self.horizon


class NegativeBeta(GuardedAdaptive):
    """Drops the step guard: at horizon 100, update(0.0, 1000) multiplies beta by 1 - 0.2 * 10."""

    def update(self, current, n_steps):
        if not math.isfinite(current):
            raise ValueError(f"`current` must be finite; got {current!r}")
        err = min(max(current / self.target - 1, -0.2), 0.2)
        self.value *= 1 + err * n_steps / self.horizon


class TargetZero(NegativeBeta):
    """Accepts target = 0: np.float64(3.0) / 0 is inf (clipped to 0.2), 3.0 / 0 raises."""

    def __init__(self, init_kl_coef, target, horizon):
        TRLAdaptive.__init__(self, init_kl_coef, target, horizon)

    def update(self, current, n_steps):
        err = min(max(current / self.target - 1, -0.2), 0.2)
        mult = 1 + err * n_steps / self.horizon
        if not mult > 0:
            raise ValueError(f"`n_steps` / `horizon` is too large: multiplier {mult}")
        self.value *= mult


class TargetZeroFloat(TargetZero):
    """The same, converting the KL with float() first, as `kl.item()` does: 3.0 / 0 raises."""

    def update(self, current, n_steps):
        super().update(float(current), n_steps)


# the verdicts, exactly as check_kl_controller prints them (copied into docs/testing.md)
NAN_VERDICT = (
    "check_kl_controller(NaNPropagating): it turns beta into nan after one NaN KL, at update 0 "
    "(current=nan, n_steps=256), and it stays nan (an update at the target KL afterwards leaves "
    "it nan). Refuse a non-finite KL with a ValueError, or skip the update; beta must stay "
    "finite and positive.\n"
    "Falsifying input: constructor=(0.2, 6.0, 10000), "
    "updates (current, n_steps)=[(nan, 256), (6.0, 256)]"
)
NEGATIVE_VERDICT = (
    "check_kl_controller(NegativeBeta): .value became -0.2 (not positive) at update 0 "
    "(current=0.0, n_steps=1000): the clipped error -0.2 times n_steps / horizon = 10 makes the "
    "multiplier 1 + (-0.2) * 10 = -1; refuse a multiplier that is not positive beyond rounding "
    "(n_steps / horizon >= 5 can make it so) with a ValueError, or bound the step (e.g. multiply "
    "by exp(error * n_steps / horizon)); beta must stay finite and positive.\n"
    "Falsifying input: constructor=(0.2, 6.0, 100), updates (current, n_steps)=[(0.0, 1000)]"
)
ZERO_MULTIPLIER_VERDICT = (
    "check_kl_controller(SignGuarded): .value became 0.0 (not positive) at update 20 "
    "(current=5.4, n_steps=1000): the clipped error -0.1 times n_steps / horizon = 10 makes the "
    "multiplier 1 + (-0.1) * 10 = 2.22e-16, zero up to rounding; refuse a multiplier that is not "
    "positive beyond rounding (n_steps / horizon >= 5 can make it so) with a ValueError, or "
    "bound the step (e.g. multiply by exp(error * n_steps / horizon)); beta must stay finite "
    "and positive.\n"
    "Falsifying input: constructor=(1.0, 6.0, 100), "
    "updates (current, n_steps)=[(5.4, 1000, 'x200')]"
)
FLOAT32_VERDICT = (
    "check_kl_controller(Float32Coefficient): it computes in float32, not float64: its "
    "coefficient is a float32 number and differs from the exact rule's 0.2 by 2.98e-09, "
    "0.2 ulp of float32, at update 0 (current=6.0, n_steps=256): float32 "
    "rounding, not a wrong rule. Pass dtype='float32' to check it at float32 resolution.\n"
    "Falsifying input: constructor=(0.2, 6.0, 10000), "
    "updates (current, n_steps)=[(6.0, 256)]"
)
TARGET_ZERO_VERDICT = (
    "check_kl_controller(TargetZero): it accepts target=0.0 and returns .value = 0.201024 at "
    "update 0 (current=np.float64(3.0), n_steps=256), silently: current / target is undefined "
    "at target 0. Refuse target <= 0 in the constructor with a ValueError.\n"
    "Falsifying input: constructor=(0.2, 0.0, 10000), "
    "updates (current, n_steps)=[(np.float64(3.0), 256)]"
)
TARGET_ZERO_FLOAT_VERDICT = (
    "check_kl_controller(TargetZeroFloat): it accepts target=0.0 in its constructor and then "
    "raises ZeroDivisionError: float division by zero at update 0 "
    "(current=np.float64(3.0), n_steps=256); refuse invalid input at once with a ValueError "
    "naming the argument (target must be > 0).\n"
    "Falsifying input: constructor=(0.2, 0.0, 10000), "
    "updates (current, n_steps)=[(np.float64(3.0), 256)]"
)


@pytest.mark.parametrize(
    ("cls", "verdict"),
    [
        (NaNPropagating, NAN_VERDICT),
        (NegativeBeta, NEGATIVE_VERDICT),
        (TargetZero, TARGET_ZERO_VERDICT),
        (TargetZeroFloat, TARGET_ZERO_FLOAT_VERDICT),
        (SignGuarded, ZERO_MULTIPLIER_VERDICT),
        (Float32Coefficient, FLOAT32_VERDICT),
    ],
    ids=["nan-propagating", "negative-beta", "target-0", "target-0-float", "zero-mult", "f32"],
)
def test_kl_controller_robustness_mutants_exact_verdicts(cls, verdict):
    with pytest.raises(AssertionError) as info:
        check_kl_controller(cls)
    assert str(info.value) == verdict


def test_kl_controller_holds_klpolicy_and_peers_to_one_rule():
    # klpolicy's controller refuses the multiplier 1 + (-0.1) * 10 (3.3e-16 in floats) that
    # left beta at 0.0 after 21 updates; a peer that keeps beta positive there passes, one
    # that refuses only negative multipliers fails with the same words
    check_kl_controller(klpolicy.control.AdaptiveKLController, max_examples=20)
    check_kl_controller(FloorsBeta, max_examples=20)
    with pytest.raises(AssertionError, match="zero up to rounding; refuse a multiplier"):
        check_kl_controller(SignGuarded, max_examples=20)


def test_float32_coefficient_passes_when_declared():
    check_kl_controller(Float32Coefficient, dtype="float32", max_examples=30)
    check_kl_controller(Float32Coefficient, dtype=torch.float32, max_examples=30)
    with pytest.raises(ValueError, match="`dtype` must be 'float64', 'float32' or 'bfloat16'"):
        check_kl_controller(Float32Coefficient, dtype="float16x")
    with pytest.raises(ValueError, match="`report` must be 'first' or 'all'; got 'every'"):
        check_kl_controller(Float32Coefficient, report="every")


TORCHRL_ALL_VERDICT = "\n\n".join(
    [
        "check_kl_controller(TorchRLAdaptive): 4 properties fail.",
        "1. " + NAN_VERDICT.replace("NaNPropagating", "TorchRLAdaptive"),
        "2. "
        + NEGATIVE_VERDICT.replace("NegativeBeta", "TorchRLAdaptive").replace(
            "-0.2 (not", "-0.20000000298023224 (not"
        ),
        "3. " + TARGET_ZERO_VERDICT.replace("TargetZero", "TorchRLAdaptive"),
        "4. " + FLOAT32_VERDICT.replace("Float32Coefficient", "TorchRLAdaptive"),
    ]
)


def test_report_all_lists_every_failing_property():
    with pytest.raises(AssertionError) as info:
        check_kl_controller(TorchRLAdaptive, report="all", max_examples=30)
    assert str(info.value) == TORCHRL_ALL_VERDICT
    # at float32 resolution the rounding is no longer a failure; the three defects remain
    with pytest.raises(AssertionError) as info:
        check_kl_controller(TorchRLAdaptive, report="all", dtype="float32", max_examples=30)
    assert str(info.value).startswith("check_kl_controller(TorchRLAdaptive): 3 properties fail.")
    assert "float32 rounding" not in str(info.value)
    # one failing property: the same message as report="first"
    with pytest.raises(AssertionError) as info:
        check_kl_controller(SignGuarded, report="all", max_examples=20)
    assert str(info.value) == ZERO_MULTIPLIER_VERDICT


def test_released_trl_controller_fails_on_the_nan_kl_first():
    msg = fails(check_kl_controller, TRLAdaptive, match="it turns beta into nan after one NaN KL")
    assert "constructor=(0.2, 6.0, 10000)" in msg


@pytest.mark.slow
def test_hypothesis_finds_the_robustness_bugs_beyond_the_explicit_cases():
    # with the three runs disabled, the drawn runs must still find each bug; rebuild each
    # mutant so that it passes those three runs and fails only on what the draws contain
    class NaNOnlyAfterFirst(GuardedAdaptive):  # a NaN KL poisons beta unless it comes first
        seen = 0

        def update(self, current, n_steps):
            self.seen += 1
            if math.isnan(current) and self.seen > 1:
                self.value = math.nan
                return
            super().update(current, n_steps)

    class InfPoisons(GuardedAdaptive):  # an infinite KL (overflowed estimate) makes beta inf
        def update(self, current, n_steps):
            if math.isinf(current):
                self.value = math.inf
                return
            super().update(current, n_steps)

    class Tiny(GuardedAdaptive):  # a tiny target: current / 1e-12 overflows a float32 KL
        def update(self, current, n_steps):
            if self.target < 1e-9 and current > 0:
                self.value = 0.0
                return
            super().update(current, n_steps)

    class LongRun(GuardedAdaptive):  # a state bug that shows only after 100 updates
        n = 0

        def update(self, current, n_steps):
            self.n += 1
            super().update(current, n_steps)
            if self.n > 100:
                self.value = -1.0

    fails(check_kl_controller, NaNOnlyAfterFirst, match="nan after one NaN KL")
    fails(check_kl_controller, InfPoisons, match=r"became inf .*current=inf")
    fails(check_kl_controller, Tiny, match="became 0.0")
    fails(check_kl_controller, LongRun, match=r"x200")


CONTROLLER_MUTANTS = [
    (
        "sign error",
        _adaptive(
            lambda s, c, n: s.value * (1 - np.clip(c / s.target - 1, -0.2, 0.2) * n / s.horizon)
        ),
        "wrong way",
    ),
    (
        "no clip",
        _adaptive(lambda s, c, n: s.value * (1 + (c / s.target - 1) * n / s.horizon)),
        "clip",
    ),
    (
        "ignores n_steps",
        _adaptive(lambda s, c, n: s.value * (1 + np.clip(c / s.target - 1, -0.2, 0.2) / s.horizon)),
        "n_steps",
    ),
    (
        "additive update",
        _adaptive(lambda s, c, n: s.value + np.clip(c / s.target - 1, -0.2, 0.2) * n / s.horizon),
        None,
    ),
    (
        "inverted ratio",
        _adaptive(
            lambda s, c, n: (
                s.value * (1 + np.clip(s.target / max(c, 1e-12) - 1, -0.2, 0.2) * n / s.horizon)
            )
        ),
        "wrong way",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "cls", "match"), CONTROLLER_MUTANTS, ids=[m[0] for m in CONTROLLER_MUTANTS]
)
def test_kl_controller_catches_mutants(name, cls, match):
    fails(check_kl_controller, cls, match=match)


@pytest.mark.slow
def test_dead_zone_and_fixed_mutants():
    class Drifting(TRLFixed):
        def update(self, current, n_steps):
            self.value *= 1.01

    class Inverted(DeadZone):
        def update(self, current, n_steps):
            if current > self.target * self.band:
                self.value /= self.factor

    class DeadZoneTargetZero(DeadZone):
        def __init__(self, init_kl_coef, target, band=1.5, factor=2.0):
            self.value, self.target, self.band, self.factor = init_kl_coef, target, band, factor

    fails(check_kl_controller, Drifting, match="never moves")
    fails(check_kl_controller, Inverted, match="left the coefficient at 0.2; .* outside the dead")
    fails(check_kl_controller, DeadZoneTargetZero, match="accepts target=0.0")
    with pytest.raises(ValueError, match="pass kind="):
        check_kl_controller(type("Anon", (), {"__init__": lambda self, a, b: None}))


# --------------------------------------------------------------------------- pytest plugin


@pytest.mark.slow
def test_pytest_plugin_fixture_marker_and_options(tmp_path):
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from scipy.special import rel_entr

            def test_good(klpolicy_check):
                klpolicy_check.kl_divergence(lambda p, q: rel_entr(p, q).sum())

            def test_reversed(klpolicy_check):
                klpolicy_check.kl_divergence(lambda p, q: rel_entr(q, p).sum())

            @pytest.mark.klpolicy(max_examples=5, supports_zero_q=False, unused_option=1)
            def test_marker(klpolicy_check):
                assert klpolicy_check.defaults["max_examples"] == 5
                klpolicy_check.kl_divergence(lambda p, q: rel_entr(p, q).sum())

            def test_cli_option(klpolicy_check):
                assert klpolicy_check.defaults == {"max_examples": 7}
            """
        )
    )
    # load the plugin explicitly, whether or not klpolicy's pytest11 entry point is installed
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "klpolicy.testing.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--klpolicy-max-examples=7",
            "test_user.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert "1 failed, 3 passed" in out, out
    assert "it computes KL(q||p), not KL(p||q)" in out


@pytest.mark.slow
def test_plugin_import_does_not_load_hypothesis():
    code = "import sys, klpolicy.testing.pytest_plugin; print('hypothesis' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"
