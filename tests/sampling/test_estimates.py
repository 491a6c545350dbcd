"""What the KL machinery sees under the sampler: logged KL on trees, importance corrections."""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest

from klpolicy.estimators import off_policy_moments
from klpolicy.sampling import (
    corrected_gradient_moments,
    corrected_kl_moments,
    logged_kl_moments,
    sampler_law,
    sampler_tree,
)
from klpolicy.sequences import per_token_kl, sequence_kl_moments

from .. import _mpref as R


def _mp_corrected(pi, ref, s, name, correction, C):
    """Recipe: inputs converted exactly, 50 digits; c(x) from the module table; mean and
    variance of c k under s summed over the support of s, term by term."""
    with mp.workdps(50):
        pi, ref, s = ([mp.mpf(float(v)) for v in a] for a in (pi, ref, s))
        vals, ws = [], []
        for p, q, w in zip(pi, ref, s):
            if w == 0:
                continue
            r = p / w
            if correction == "none":
                c = 1
            elif correction == "full":
                c = r
            elif correction == "tis":
                c = min(r, C)
            else:
                c = r if r <= C else 0
            if c == 0:
                v = mp.mpf(0)
            else:
                v = c * R.k(name, mp.log(p) - mp.log(q))
            vals.append(v)
            ws.append(w)
        mean = mp.fsum(w * v for w, v in zip(ws, vals))
        var = mp.fsum(w * (v - mean) ** 2 for w, v in zip(ws, vals))
        kl = mp.fsum(p * mp.log(p / q) for p, q in zip(pi, ref) if p > 0)
        return float(mean), float(mean - kl), float(var)


PI = np.array([0.45, 0.25, 0.15, 0.1, 0.05])
REF = np.array([0.2, 0.2, 0.2, 0.2, 0.2])
SAMPLERS = {
    "temperature": {"temperature": 0.6},
    "hot": {"temperature": 1.8},
    "top_k": {"top_k": 3},
    "top_p": {"top_p": 0.8, "temperature": 1.2},
}


@pytest.mark.parametrize("sampler", list(SAMPLERS))
@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
@pytest.mark.parametrize(
    ("correction", "C"), [("none", None), ("full", None), ("tis", 1.5), ("mis", 1.5)]
)
def test_corrected_kl_moments_against_mpmath(sampler, name, correction, C):
    s = sampler_law(np.log(PI), **SAMPLERS[sampler])
    got = corrected_kl_moments(PI, REF, s, estimator=name, correction=correction, threshold=C)
    want = _mp_corrected(PI, REF, s, name, correction, C)
    for g, w in zip(got, want):
        assert float(g) == pytest.approx(w, rel=1e-12, abs=1e-15)


def test_full_and_none_are_off_policy_moments():
    s = sampler_law(np.log(PI), temperature=1.5)
    for weighted, corr in [(True, "full"), (False, "none")]:
        for name in ("k1", "k2", "k3"):
            mean, var = off_policy_moments(PI, REF, s, name, weighted=weighted)
            got = corrected_kl_moments(PI, REF, s, estimator=name, correction=corr)
            assert float(got.mean) == pytest.approx(float(mean), rel=1e-13)
            assert float(got.variance) == pytest.approx(float(var), rel=1e-12)


def test_full_ratio_is_unbiased_with_full_support_and_not_under_truncation():
    hot = sampler_law(np.log(PI), temperature=1.7)
    assert abs(float(corrected_kl_moments(PI, REF, hot).bias)) < 1e-15
    topk = sampler_law(np.log(PI), top_k=2)
    m = corrected_kl_moments(PI, REF, topk)
    # the missing mass: -sum over truncated tokens of pi k1
    missing = -np.sum((PI * np.log(PI / REF))[2:])
    assert float(m.bias) == pytest.approx(missing, rel=1e-13)
    # C = inf: truncation and masking are the full ratio
    for corr in ("tis", "mis"):
        m2 = corrected_kl_moments(PI, REF, hot, correction=corr, threshold=np.inf)
        assert float(m2.mean) == float(corrected_kl_moments(PI, REF, hot).mean)


def test_truncation_lowers_variance_and_adds_bias():
    s = sampler_law(np.log(PI), temperature=2.5)
    full = corrected_kl_moments(PI, REF, s, estimator="k3")
    tis = corrected_kl_moments(PI, REF, s, estimator="k3", correction="tis", threshold=1.2)
    assert float(tis.variance) < float(full.variance)
    assert abs(float(tis.bias)) > abs(float(full.bias)) + 1e-3


def _brute_gradient(pi, r, s, correction, C):
    V = len(pi)
    ghat, w = [], []
    for x in range(V):
        if s[x] == 0:
            continue
        ratio = pi[x] / s[x]
        c = {
            "none": 1.0,
            "full": ratio,
            "tis": min(ratio, C or 0),
            "mis": ratio * (ratio <= (C or 0)),
        }
        e = np.zeros(V)
        e[x] = 1
        ghat.append(c[correction] * r[x] * (e - pi))
        w.append(s[x])
    ghat, w = np.array(ghat), np.array(w)
    mean = w @ ghat
    var = float(w @ np.sum((ghat - mean) ** 2, axis=1))
    true = pi * (r - pi @ r)
    return mean, mean - true, var


@pytest.mark.parametrize("sampler", list(SAMPLERS))
@pytest.mark.parametrize(
    ("correction", "C"), [("none", None), ("full", None), ("tis", 1.3), ("mis", 1.3)]
)
def test_corrected_gradient_against_enumeration(sampler, correction, C):
    r = np.array([1.0, -0.5, 2.0, 0.0, 3.0])
    s = sampler_law(np.log(PI), **SAMPLERS[sampler])
    got = corrected_gradient_moments(PI, r, s, correction=correction, threshold=C)
    mean, bias, var = _brute_gradient(PI, r, s, correction, C)
    np.testing.assert_allclose(got.mean, mean, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(got.bias, bias, rtol=1e-13, atol=1e-15)
    assert float(got.variance) == pytest.approx(var, rel=1e-12)


def test_gradient_full_ratio_unbiased_on_full_support_and_batches():
    rng = np.random.default_rng(0)
    pi = rng.dirichlet(np.ones(6), size=4)
    r = rng.normal(size=(4, 6))
    s = sampler_law(np.log(pi), temperature=1.4)
    got = corrected_gradient_moments(pi, r, s)
    assert got.mean.shape == (4, 6) and got.variance.shape == (4,)
    np.testing.assert_allclose(got.bias, 0, atol=1e-15)
    # permuting outcomes permutes the gradient
    perm = rng.permutation(6)
    got_p = corrected_gradient_moments(pi[:, perm], r[:, perm], s[:, perm])
    np.testing.assert_allclose(got_p.mean, got.mean[:, perm], atol=1e-15)
    # float32 in, float32 out
    g32 = corrected_gradient_moments(pi.astype(np.float32), r, s.astype(np.float32))
    assert g32.mean.dtype == np.float32


def _tree(rng, V, T):
    return [rng.dirichlet(np.ones(V), size=(V,) * t) for t in range(T)]


@pytest.mark.parametrize("name", ["k1", "k2", "k3"])
def test_logged_kl_moments_by_enumeration(name):
    """Recipe: every sequence enumerated in 50-digit mpmath, per-token estimates summed."""
    rng = np.random.default_rng(1)
    pi, ref = _tree(rng, 3, 3), _tree(rng, 3, 3)
    s = sampler_tree(pi, temperature=1.6, top_k=2).conditionals
    got = logged_kl_moments(pi, ref, s, estimator=name)
    with mp.workdps(50):
        vals, ws = [], []
        for y in itertools.product(range(3), repeat=3):
            w, tot = mp.mpf(1), mp.mpf(0)
            for t in range(3):
                pre = y[:t]
                w *= mp.mpf(float(s[t][pre][y[t]]))
                tot += R.k(
                    name,
                    mp.log(mp.mpf(float(pi[t][pre][y[t]])))
                    - mp.log(mp.mpf(float(ref[t][pre][y[t]]))),
                )
            if w > 0:
                vals.append(tot)
                ws.append(w)
        mean = mp.fsum(a * b for a, b in zip(ws, vals))
        var = mp.fsum(a * (b - mean) ** 2 for a, b in zip(ws, vals))
    assert got[0] == pytest.approx(float(mean), rel=1e-12)
    assert got[1] == pytest.approx(float(var), rel=1e-11)


def test_logged_k1_is_kl_s_ref_minus_kl_s_pi_and_on_policy_is_sequence_kl_moments():
    rng = np.random.default_rng(2)
    pi, ref = _tree(rng, 3, 2), _tree(rng, 3, 2)
    s = sampler_tree(pi, temperature=2.0).conditionals
    want = per_token_kl(s, ref).sum() - per_token_kl(s, pi).sum()
    assert logged_kl_moments(pi, ref, s)[0] == pytest.approx(want, rel=1e-12)
    for name in ("k1", "k3"):
        assert logged_kl_moments(pi, ref, pi, estimator=name) == pytest.approx(
            sequence_kl_moments(pi, ref, estimator=name), rel=1e-12
        )


def test_negative_logged_kl_with_top_k_and_min_length():
    # the policy learned to stop (token 0 = EOS) more than the reference; the engine
    # forbids EOS at the first position and keeps the top 2 tokens
    pi = [[0.5, 0.3, 0.2], [[1 / 3, 1 / 3, 1 / 3], [0.6, 0.3, 0.1], [0.6, 0.1, 0.3]]]
    ref = [[0.1, 0.5, 0.4], [[1 / 3, 1 / 3, 1 / 3], [0.3, 0.4, 0.3], [0.3, 0.3, 0.4]]]
    s = sampler_tree(pi, top_k=2, eos_token=0, min_length=1).conditionals
    mean, _ = logged_kl_moments(pi, ref, s)
    assert mean < 0 < per_token_kl(pi, ref).sum()
    assert mean == pytest.approx(per_token_kl(s, ref).sum() - per_token_kl(s, pi).sum(), rel=1e-12)
    assert logged_kl_moments(pi, ref, s, estimator="k3")[0] >= 0


BAD = [
    ({"correction": "pareto"}, "`correction` must be one of 'none', 'full', 'tis', 'mis'"),
    ({"correction": "tis"}, "`threshold` is required with correction='tis'"),
    ({"correction": "mis", "threshold": 0.0}, "`threshold` must be a positive number"),
    ({"correction": "full", "threshold": 2.0}, "`threshold` is used only by"),
    ({"sampler": [0.5, 0.6, 0.0]}, "`sampler` must sum to 1"),
]


@pytest.mark.parametrize(("kw", "msg"), BAD)
def test_bad_input(kw, msg):
    base = {"policy": [0.5, 0.3, 0.2], "ref": [0.3, 0.3, 0.4], "sampler": [0.6, 0.4, 0.0]}
    with pytest.raises(ValueError, match=msg):
        corrected_kl_moments(**{**base, **kw})
    base.pop("ref")
    with pytest.raises(ValueError, match=msg):
        corrected_gradient_moments(reward=[1.0, 0.0, 2.0], **{**base, **kw})


def test_logged_kl_moments_refuses_mismatched_trees():
    t2 = [[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]]
    with pytest.raises(ValueError, match="`sampler_conditionals` must have the same vocabulary"):
        logged_kl_moments(t2, t2, [[1.0]])
    with pytest.raises(ValueError, match="estimator"):
        logged_kl_moments(t2, t2, t2, estimator="k9")
    assert math.isinf(logged_kl_moments(t2, [[1.0, 0.0], [[0.5, 0.5], [0.5, 0.5]]], t2)[0])


def test_corrected_kl_moments_permutation_float32_and_batches():
    rng = np.random.default_rng(4)
    pi = rng.dirichlet(np.ones(5), size=3)
    ref = rng.dirichlet(np.ones(5), size=3)
    s = sampler_law(np.log(pi), temperature=0.7, top_k=4)
    kw = {"estimator": "k3", "correction": "tis", "threshold": 1.5}
    got = corrected_kl_moments(pi, ref, s, **kw)
    assert got.mean.shape == (3,)
    for i in range(3):
        row = corrected_kl_moments(pi[i], ref[i], s[i], **kw)
        assert float(row.variance) == pytest.approx(float(got.variance[i]), rel=1e-14)
    perm = rng.permutation(5)
    got_p = corrected_kl_moments(pi[:, perm], ref[:, perm], s[:, perm], **kw)
    np.testing.assert_allclose(got_p.mean, got.mean, rtol=1e-13)
    np.testing.assert_allclose(got_p.bias, got.bias, rtol=1e-12, atol=1e-15)
    g32 = corrected_kl_moments(*(a.astype(np.float32) for a in (pi, ref, s)), **kw)
    assert g32.mean.dtype == np.float32
    np.testing.assert_allclose(g32.mean, got.mean, rtol=1e-5)
    # along another axis
    got_ax = corrected_kl_moments(pi.T, ref.T, s.T, axis=0, **kw)
    np.testing.assert_allclose(got_ax.mean, got.mean, rtol=1e-15)


# --- issue 40, item 17: infinite k3, overflowing gradient variance, float32 rows ----------


def test_k3_value_at_minus_inf_is_inf_and_its_mean_too():
    """k3 = e^{-l} - 1 + l -> +inf as l -> -inf (p = 0 < q), not inf - inf = NaN."""
    from klpolicy.estimators import ESTIMATORS

    k3 = ESTIMATORS["k3"].value
    assert k3(np.array(-np.inf)) == np.inf
    out = k3(np.array([-np.inf, 0.0, np.inf], dtype=np.float32))
    assert out.dtype == np.float32 and out.tolist() == [np.inf, 0.0, np.inf]
    # the sampler draws outcome 1, which the policy rules out and the reference allows:
    # the uncorrected k3 estimate is +inf there, so its mean is inf (it was refused)
    m = corrected_kl_moments([1.0, 0.0], [0.5, 0.5], [0.5, 0.5], estimator="k3", correction="none")
    assert m.mean == np.inf and m.variance == np.inf
    # with the full ratio the outcome has weight 0 and contributes nothing:
    # E = 1 * k3(log 2) = 1/2 - 1 + log 2 (exact), bias = that - KL = 1/2 - 1 + log 2 - log 2
    m = corrected_kl_moments([1.0, 0.0], [0.5, 0.5], [0.5, 0.5], estimator="k3")
    assert m.mean == pytest.approx(math.log(2) - 0.5, rel=1e-15)
    assert m.bias == pytest.approx(-0.5, rel=1e-15)


def test_gradient_variance_is_inf_where_it_overflows_and_exact_below():
    pi, s = [0.5, 0.5], [0.5, 0.5]
    # mpmath recipe: c = 1, g_hat(x) = r(x)(e_x - pi); E||g||^2 = 0.5 * r^2 * 0.5,
    # ||E g||^2 = 2 * (0.25 r)^2: variance = r^2 / 4 - r^2 / 8 = r^2 / 8
    for r in [1.0, 1e150, 1e154, 3e154]:
        with np.errstate(all="raise"):
            var = corrected_gradient_moments(pi, [r, 0.0], s).variance
        assert var == pytest.approx(r / 8 * r, rel=1e-15)
    for r in [1e155, 1e200, 1.7e308]:
        with np.errstate(all="raise"):
            var = corrected_gradient_moments(pi, [r, 0.0], s).variance
        assert var == np.inf
    # the scaling is a power of two: same bits as the unscaled sums where those are finite
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(6), size=5), rng.dirichlet(np.ones(6), size=5)
    r = rng.normal(size=(5, 6)) * 7
    pn, sn = p / p.sum(-1, keepdims=True), q / q.sum(-1, keepdims=True)
    c = pn / sn
    mean = sn * c * r - pn * np.sum(sn * c * r, -1, keepdims=True)
    sq = 1 - 2 * pn + np.sum(pn * pn, -1, keepdims=True)
    want = np.sum(sn * (c * r) ** 2 * sq, -1) - np.sum(mean * mean, -1)
    np.testing.assert_allclose(corrected_gradient_moments(p, r, q).variance, want, rtol=1e-14)


def test_corrected_kl_moments_takes_float32_rows_normalised_in_float32():
    rng = np.random.default_rng(4)
    rows = [rng.random(1000).astype(np.float32) for _ in range(3)]
    pi, ref, s = (r / r.sum() for r in rows)  # sums 1 - 7e-8: within float32's tolerance
    assert abs(float(pi.sum(dtype=np.float64)) - 1) > 1.5e-8
    m = corrected_kl_moments(pi, ref, s)
    assert m.mean.dtype == np.float32
    want = corrected_kl_moments(*(r.astype(np.float64) / r.sum(dtype=np.float64) for r in rows))
    np.testing.assert_allclose(m.mean, want.mean, rtol=1e-5)
    np.testing.assert_allclose(m.bias, want.bias, rtol=1e-4, atol=1e-6)
    # a bad row is refused under its own name, never `p`
    with pytest.raises(ValueError, match=r"^`policy` must sum to 1"):
        corrected_kl_moments(pi * 1.1, ref, s)
    with pytest.raises(ValueError, match=r"^`ref` must sum to 1"):
        corrected_kl_moments(pi, ref * 1.1, s)
