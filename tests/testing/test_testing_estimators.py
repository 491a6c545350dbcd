"""check_kl_estimator and check_kl_divergence on the KL code of real RLHF trainers.

Resolution-aware verdicts (rounding, float32/bfloat16, clamps, "abs"), the
``dtype``, ``reduction`` and ``clamp`` knobs. Each mutant's verdict is asserted
word for word; docs/testing.md quotes the same messages.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.special import rel_entr

import klpolicy
import klpolicy.estimators
from klpolicy.testing import ClampBiasWarning, check_kl_divergence, check_kl_estimator

torch = pytest.importorskip("torch")


def _t(x):
    return torch.as_tensor(x, dtype=torch.float64)


def _fail(check, fn, *args, **kwargs):
    with pytest.raises(AssertionError) as info:
        check(fn, *args, **kwargs)
    return str(info.value)


# --------------------------------------------------------------------------- the mutants


def k3_one_ulp(logp, logq):
    """k3 through an exp that is one ulp high (a slightly different libm)."""
    x = logq - logp
    return np.nextafter(np.exp(x), np.inf) - 1 - x


def k1_float32(logp, logq):
    """k1 after a downcast to float32, as a mixed-precision training step computes it."""
    return torch.as_tensor(logp, dtype=torch.float32) - torch.as_tensor(logq, dtype=torch.float32)


def k3_clamped(logp, logq):
    """verl's low_var_kl: k3 clamped to [-10, 10] "for numerical stability"."""
    kl = _t(logq) - _t(logp)
    return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)


def kl_abs(logp, logq):
    """TRL's kl_penalty="abs"."""
    return (_t(logp) - _t(logq)).abs()


def k3_trl(logp, logq):
    logr = _t(logq) - _t(logp)
    return (logr.exp() - 1) - logr


ONE_ULP_VERDICT = (
    "check_kl_estimator(k3_one_ulp): it differs from k3 by rounding: 2.22e-16 at index 0, 0.5 ulp "
    "of float64 at 2, the size of the terms it forms (exp(log q - log p), 1 and log q - log p). "
    "That is below what the textbook formula resolves in float64, so it is not a different "
    "estimator; the tolerance asks for more (rtol=1e-06, atol=0): evaluate k3 as expm1(x) - x "
    "(or klpolicy.estimators.k3), or pass a larger atol.\n"
    "Falsifying input: logp=[0.0], logq=[0.0]\n"
    "expected [0.0], got [2.220446049250313e-16]"
)
FLOAT32_VERDICT = (
    "check_kl_estimator(k1_float32): it computes in float32, not float64: its values are float32 "
    "numbers and differ from k1 by 4.58e-06 at index 0, 0.3 ulp of float32 at 203.4 (log p and "
    "log q), 19 ulp of the result: float32 rounding, not a wrong formula. Pass "
    "dtype='float32' to check it at float32 resolution.\n"
    "Falsifying input: logp=[-100.1], logq=[-103.3]\n"
    "expected [3.200000000000003], got [3.2000045776367188]"
)
CLAMP_VERDICT = (
    "check_kl_estimator(k3_clamped): it clamps k3: its values are capped at 10.0 for log-ratios "
    "log q - log p beyond 2.61 and below -11 (on 31 of 122 probed inputs). A clamp "
    "biases the mean under p; if it is intended, declare it with clamp=(-10.0, 10.0) to check "
    "the clamped estimator exactly and see what it costs.\n"
    "Falsifying input: logp=[-3.0], logq=[0.0]\n"
    "expected [16.085536923187668], got [10.0]"
)
ABS_VERDICT = (
    "check_kl_estimator(kl_abs): it computes |log p - log q| (TRL's and verl's 'abs'), not k1: "
    "|log p - log q| is not an estimator of KL(p||q), its mean under p exceeds the KL by "
    "2 E_p[max(log q - log p, 0)].\n"
    "Falsifying input: logp=[-0.6931471805599453, -0.6931471805599453], "
    "logq=[-0.10536051565782628, -2.3025850929940455]\n"
    "expected [-0.5877866649021191, 1.6094379124341], got [0.5877866649021191, 1.6094379124341]"
)


@pytest.mark.slow
def test_one_ulp_k3_passes_by_default_and_is_rounding_at_atol_0():
    check_kl_estimator(k3_one_ulp, "k3")
    assert _fail(check_kl_estimator, k3_one_ulp, "k3", atol=0.0) == ONE_ULP_VERDICT


@pytest.mark.slow
def test_textbook_k3_at_atol_0_is_rounding_never_k2():
    # the case: exp(x) - 1 - x at x = -1e-5 gives 5.0000007e-11 for 5.0000167e-11;
    # k3 - k2 there is 1.7e-16, below what the formula resolves, so "computes k2" is wrong
    msg = _fail(check_kl_estimator, k3_trl, "k3", atol=0.0)
    assert "it differs from k3 by rounding" in msg
    assert "computes k2" not in msg
    assert "logp=[-1e-05], logq=[0.0]" in msg
    x = -1e-5
    assert abs(float(klpolicy.estimators.k3(0.0, x) - klpolicy.estimators.k2(0.0, x))) < 2e-16


@pytest.mark.slow
def test_float32_k1_is_float32_rounding_and_passes_when_declared():
    assert _fail(check_kl_estimator, k1_float32, "k1") == FLOAT32_VERDICT
    check_kl_estimator(k1_float32, "k1", dtype="float32")
    check_kl_estimator(k1_float32, "k1", dtype=torch.float32)
    check_kl_estimator(k1_float32, "k1", dtype=np.float32)


@pytest.mark.slow
def test_bfloat16_k3_passes_when_declared_and_is_named_when_not():
    def k3_bf16(logp, logq):
        x = torch.as_tensor(logq).to(torch.bfloat16) - torch.as_tensor(logp).to(torch.bfloat16)
        return torch.exp(x) - 1 - x

    check_kl_estimator(k3_bf16, "k3", dtype="bfloat16")
    msg = _fail(check_kl_estimator, k3_bf16, "k3")
    assert msg.startswith("check_kl_estimator(k3_bf16): it computes in bfloat16, not float64")
    msg = _fail(check_kl_estimator, k3_bf16, "k3", dtype="float32")
    assert "it computes in bfloat16, not float32" in msg


def test_a_wrong_float32_formula_is_not_excused_as_rounding():
    def k3_f32_inverted(logp, logq):
        return klpolicy.estimators.k3(np.float32(logq), np.float32(logp))

    msg = _fail(check_kl_estimator, k3_f32_inverted, "k3", dtype="float32")
    assert "ratio inverted" in msg


def test_clamped_k3_is_reported_as_a_clamp_with_cap_and_threshold():
    assert _fail(check_kl_estimator, k3_clamped, "k3") == CLAMP_VERDICT
    # the thresholds are where k3 reaches 10: exp(x) - 1 - x = 10
    from scipy.optimize import brentq

    assert round(brentq(lambda x: math.expm1(x) - x - 10, 0, 5), 2) == 2.61
    assert round(brentq(lambda x: math.expm1(x) - x - 10, -20, 0)) == -11


def openrlhf_approx_kl(kl_estimator):
    """OpenRLHF's ``compute_approx_kl(log_probs, log_probs_base, kl_estimator)``, one estimator.

    openrlhf/models/utils.py (OpenRLHF/OpenRLHF at commit
    473f61bd290a1718381e65338316a87b4f722b5a): the log-ratio after ``.float()`` (a downcast to
    float32), k1, k2 or k3 of it, then ``clamp(min=-10, max=10)`` for every estimator.
    """

    def fn(logp, logq):
        log_ratio = torch.as_tensor(logp).float() - torch.as_tensor(logq).float()
        if kl_estimator == "k2":
            log_ratio = log_ratio**2 / 2.0
        if kl_estimator == "k3":
            log_ratio = -log_ratio
            log_ratio = log_ratio.exp() - 1 - log_ratio
        return log_ratio.clamp(min=-10, max=10)

    fn.__name__ = f"openrlhf_{kl_estimator}"
    return fn


def _clamp_verdict(name, estimator, said, example, expected):
    return (
        f"check_kl_estimator({name}): it clamps {estimator}: its values are {said}. A clamp "
        "biases the mean under p; if it is intended, declare it with clamp=(-10.0, 10.0) to check "
        "the clamped estimator exactly and see what it costs.\n"
        f"Falsifying input: {example}\n"
        f"expected [{expected}], got [10.0]"
    )


_K1_SAID = (
    "capped at 10.0 for log-ratios log q - log p below -10 (on {n} of 122 probed inputs) and "
    "floored at -10.0 for log-ratios log q - log p beyond 10 (on {n} of 122 probed inputs)"
)
_K3_SAID = (
    "capped at 10.0 for log-ratios log q - log p beyond 2.61 and below -11 "
    "(on {n} of 122 probed inputs)"
)
_AT_12 = "logp=[-1.0], logq=[-13.0]"
_AT_3 = "logp=[-3.0], logq=[0.0]"


@pytest.mark.parametrize(
    ("estimator", "dtype", "verdict"),
    [
        ("k1", None, _clamp_verdict("openrlhf_k1", "k1", _K1_SAID.format(n=12), _AT_12, "12.0")),
        (
            "k1",
            "float32",
            _clamp_verdict("openrlhf_k1", "k1", _K1_SAID.format(n=11), _AT_12, "12.0"),
        ),
        (
            "k2",
            None,
            _clamp_verdict(
                "openrlhf_k2",
                "k2",
                "capped at 10.0 for log-ratios log q - log p beyond 4.47 and below -4.47 "
                "(on 34 of 122 probed inputs)",
                _AT_12,
                "72.0",
            ),
        ),
        (
            "k3",
            None,
            _clamp_verdict("openrlhf_k3", "k3", _K3_SAID.format(n=31), _AT_3, "16.085536923187668"),
        ),
        (
            "k3",
            "float32",
            _clamp_verdict("openrlhf_k3", "k3", _K3_SAID.format(n=29), _AT_3, "16.085536923187668"),
        ),
    ],
    ids=["k1", "k1-float32", "k2", "k3", "k3-float32"],
)
def test_a_float32_clamp_is_named_first_at_any_dtype(estimator, dtype, verdict):
    # OpenRLHF computes in float32 and clamps at +-10: the clamp is the finding (it biases the
    # mean), named before float32 rounding at the default dtype and through float32 noise at
    # dtype="float32"; a cap and a floor are two values, each with its own count
    assert _fail(check_kl_estimator, openrlhf_approx_kl(estimator), estimator, dtype=dtype) == (
        verdict
    )


def test_openrlhf_passes_with_its_clamp_and_dtype_declared():
    for estimator in ("k1", "k3"):
        with pytest.warns(ClampBiasWarning, match=f"biases {estimator}"):
            check_kl_estimator(
                openrlhf_approx_kl(estimator),
                estimator,
                dtype="float32",
                clamp=(-10, 10),
                max_examples=30,
            )
    # with the clamp declared and float64 expected, what is left is float32 rounding
    msg = _fail(check_kl_estimator, openrlhf_approx_kl("k1"), "k1", clamp=(-10, 10))
    assert msg.startswith("check_kl_estimator(openrlhf_k1): it computes in float32, not float64")


@pytest.mark.slow
def test_declared_clamp_is_checked_exactly_and_its_bias_reported_exactly():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_kl_estimator(k3_clamped, "k3", clamp=(-10, 10))
    (w,) = [c for c in caught if issubclass(c.category, ClampBiasWarning)]
    msg = str(w.message)
    assert msg.startswith("check_kl_estimator: the clamp (-10.0, 10.0) biases k3: on p = ")
    # the reported bias is klpolicy.estimators.bias of the clamped estimator on that (p, q)
    p = np.array([0.4666666666666667, 0.5333333333333333])
    q = np.array([1e-300, 1.0])
    assert "p = [0.4666666666666667, 0.5333333333333333], q = [1e-300, 1.0]" in msg
    exact = float(klpolicy.estimators.bias(p, q, "k3", clip=10.0))
    assert f"a bias of {exact:.6g}" in msg
    # mean: p1 * 10 + p2 * k3(log 0.5333 -> log 1); KL = sum p log(p/q) (mpmath-free: two terms)
    mean = p[0] * 10.0 + p[1] * (1 / p[1] - 1 + math.log(p[1]))
    assert abs(exact - (mean - float(klpolicy.kl_divergence(p, q)))) < 1e-12 * abs(exact)


def test_declared_clamp_that_is_not_applied_or_is_elsewhere():
    msg = _fail(check_kl_estimator, klpolicy.estimators.k3, "k3", clamp=(-10, 10))
    assert "it does not apply the declared clamp (-10.0, 10.0)" in msg

    def k3_clamped_5(logp, logq):
        return np.minimum(klpolicy.estimators.k3(logp, logq), 5.0)

    msg = _fail(check_kl_estimator, k3_clamped_5, "k3", clamp=(-10, 10))
    assert "capped at 5.0" in msg


@pytest.mark.slow
def test_clamped_k1_reports_both_sides():
    msg = _fail(check_kl_estimator, lambda lp, lq: np.clip(lp - lq, -10, 10), "k1")
    # found on the support of the distributions drawn for the mean under p, diagnosed by a probe
    assert msg.startswith("check_kl_estimator(<lambda>): it clamps k1: its values are capped")
    assert "capped at 10.0 for log-ratios log q - log p below -10" in msg
    assert "floored at -10.0 for log-ratios log q - log p beyond 10" in msg
    with pytest.warns(ClampBiasWarning, match="biases k1"):
        check_kl_estimator(lambda lp, lq: np.clip(lp - lq, -10, 10), "k1", clamp=(-10, 10))


@pytest.mark.slow
def test_abs_is_not_a_kl_estimator():
    assert _fail(check_kl_estimator, kl_abs, "k1") == ABS_VERDICT
    msg = _fail(check_kl_estimator, kl_abs, "k3")
    assert "it computes |log p - log q| (TRL's and verl's 'abs'), not k3" in msg
    # checked as what it is: |log p - log q| and its exact mean E_p|log p - log q|
    check_kl_estimator(kl_abs, "abs")
    check_kl_estimator(klpolicy.estimators.abs_kl, "abs")
    msg = _fail(check_kl_estimator, lambda lp, lq: np.abs(lp - lq) + 0.01, "abs")
    assert "KL" not in msg.split("\n")[0]


# --------------------------------------------------------------------------- reductions

_M = {
    "masked": lambda lp, lq, m: k3_trl(lp, lq),
    "masked_sum": lambda lp, lq, m: (k3_trl(lp, lq) * _t(m)).sum(),
    "masked_mean": lambda lp, lq, m: (k3_trl(lp, lq) * _t(m)).sum() / _t(m).sum(),
    # GRPO (TRL's GRPOTrainer with loss_type="grpo"): per-response token mean, then batch mean
    "seq_mean": lambda lp, lq, m: ((k3_trl(lp, lq) * _t(m)).sum(-1) / _t(m).sum(-1)).mean(),
    "seq_sum": lambda lp, lq, m: (k3_trl(lp, lq) * _t(m)).sum(-1).mean(),
    "mean": lambda lp, lq: k3_trl(lp, lq).mean(),
    "sum": lambda lp, lq: k3_trl(lp, lq).sum(),
}


@pytest.mark.slow
@pytest.mark.parametrize("reduction", sorted(_M))
def test_reductions_accept_the_forms_trainers_use(reduction):
    check_kl_estimator(_M[reduction], "k3", reduction=reduction)


def test_reductions_are_checked_in_one_call_per_batch():
    shapes = []

    def k3_masked_mean(lp, lq, m):
        shapes.append(lp.shape)
        return _M["masked_mean"](lp, lq, m)

    check_kl_estimator(k3_masked_mean, "k3", reduction="masked_mean", max_examples=20)
    assert any(len(s) == 2 and s[0] > 1 for s in shapes)  # (B, T) batches, B > 1


@pytest.mark.slow
def test_wrong_reduction_is_named():
    msg = _fail(check_kl_estimator, _M["masked_mean"], "k3", reduction="seq_mean")
    assert "it reduces as reduction='masked_mean' (the mean over every unmasked token" in msg
    msg = _fail(check_kl_estimator, _M["seq_mean"], "k3", reduction="masked_mean")
    assert "it reduces as reduction='seq_mean'" in msg


@pytest.mark.slow
def test_padding_that_leaks_into_the_mean_fails():
    def unmasked(lp, lq, m):  # forgets the mask: padding tokens enter the mean
        return k3_trl(lp, lq).mean()

    msg = _fail(check_kl_estimator, unmasked, "k3", reduction="masked_mean")
    assert "mask=" in msg


def test_per_sample_fn_declared_as_reduced_is_a_shape_error():
    msg = _fail(check_kl_estimator, k3_trl, "k3", reduction="mean")
    assert "expected one number (reduction='mean')" in msg
    msg = _fail(check_kl_estimator, _M["mean"], "k3")
    assert "pass reduction='mean' or 'sum' if it reduces" in msg


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"dtype": "float16"}, "`dtype` must be 'float64', 'float32' or 'bfloat16'"),
        ({"clamp": (10, -10)}, "`clamp` must be a pair (lo, hi) with lo < hi; got (10, -10)"),
        ({"clamp": 10}, "`clamp` must be a pair (lo, hi) of numbers; got 10"),
        ({"reduction": "avg"}, "`reduction` must be one of 'none', 'mean', 'sum', 'masked'"),
        ({"atol": -1.0}, "`atol` must be non-negative; got -1.0"),
    ],
)
def test_bad_options(kwargs, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        check_kl_estimator(klpolicy.estimators.k3, "k3", **kwargs)


def test_estimator_names_come_from_klpolicy():
    from klpolicy.testing._resolution import ESTIMATOR_NAMES

    p, q = [0.5, 0.5], [0.25, 0.75]
    for name in ESTIMATOR_NAMES:  # every name is one klpolicy.estimators knows
        assert np.isfinite(klpolicy.estimators.moments(p, q, name)[0])
    assert set(ESTIMATOR_NAMES) >= {"k1", "k2", "k3", "abs"}


# --------------------------------------------------------------------------- KL divergence


@pytest.mark.slow
def test_kl_divergence_float32_is_named_and_passes_when_declared():
    def kl_f32(p, q):
        p, q = np.asarray(p, np.float32), np.asarray(q, np.float32)
        return rel_entr(p, q).sum(dtype=np.float32)

    msg = _fail(check_kl_divergence, kl_f32)
    assert msg.startswith("check_kl_divergence(kl_f32): it computes in float32, not float64")
    assert "Pass dtype='float32'" in msg
    check_kl_divergence(kl_f32, dtype="float32")


def test_kl_divergence_bfloat16_declared():
    def kl_bf16(p, q):
        p, q = _t(p).to(torch.bfloat16), _t(q).to(torch.bfloat16)
        return torch.where(p > 0, p * (p.log() - q.log()), torch.zeros_like(p)).sum()

    check_kl_divergence(kl_bf16, dtype="bfloat16", supports_zero_q=False)


def test_kl_divergence_reversed_is_named_only_where_it_differs_beyond_rounding():
    # KL(q||p) and KL(p||q) agree to third order for nearly equal p, q; with rtol tiny the
    # error on such inputs is rounding of the textbook sum, never "KL(q||p)"
    def rounded(p, q):
        return float(rel_entr(p, q).sum()) * (1 + 4e-16)

    try:
        check_kl_divergence(rounded, rtol=1e-15)
    except AssertionError as exc:
        assert "KL(q||p)" not in str(exc)
