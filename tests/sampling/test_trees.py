"""sampler_tree: the sampler's token tree and its two KLs, against mpmath on the enumerated joint."""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest

from klpolicy.sampling import sampler_law, sampler_tree
from klpolicy.sequences import joint

from ._reference import reference_law


def _random_tree(rng, V, T, zeros=False):
    levels = []
    for t in range(T):
        c = rng.dirichlet(np.ones(V) * 0.7, size=(V,) * t)
        if zeros:
            c = np.where(c < 0.05, 0.0, c)
            c /= c.sum(-1, keepdims=True)
        levels.append(c)
    return levels


def _mp_kl_joint(p_tree, q_tree):
    """Recipe: rows converted exactly and normalised in 60 digits; the joint of each
    sequence the product of its conditionals; KL(p||q) = sum_{p>0} p log(p/q) over all
    V**T sequences (inf where q = 0 < p)."""
    with mp.workdps(60):
        V, T = p_tree[0].shape[0], len(p_tree)

        def row(c, prefix):
            xs = [mp.mpf(float(x)) for x in c[prefix]]
            s = mp.fsum(xs)
            return [x / s for x in xs]

        total = []
        for y in itertools.product(range(V), repeat=T):
            pp = qq = mp.mpf(1)
            for t in range(T):
                pp *= row(p_tree[t], y[:t])[y[t]]
                qq *= row(q_tree[t], y[:t])[y[t]]
            if pp > 0:
                if qq == 0:
                    return math.inf
                total.append(pp * mp.log(pp / qq))
        return float(mp.fsum(total))


SETTINGS = [
    {"temperature": 0.7},
    {"top_k": 2},
    {"top_p": 0.8},
    {"min_p": 0.2},
    {"temperature": 1.3, "top_k": 3, "top_p": 0.9, "min_p": 0.05},
    {"temperature": 1.3, "top_k": 3, "top_p": 0.9, "min_p": 0.05, "order": "vllm"},
]


@pytest.mark.parametrize("kw", SETTINGS)
def test_rows_and_both_kls_against_mpmath(kw):
    rng = np.random.default_rng(3)
    pi = _random_tree(rng, 4, 3, zeros=True)
    res = sampler_tree(pi, **kw)
    with np.errstate(divide="ignore"):
        for c_s, c_pi in zip(res.conditionals, pi):
            flat_pi = np.log(c_pi.reshape(-1, 4))
            want = [reference_law(r, **{"order": "transformers", **kw}) for r in flat_pi]
            np.testing.assert_allclose(c_s.reshape(-1, 4), want, rtol=0, atol=1e-15)
    want = _mp_kl_joint(res.conditionals, pi)
    assert res.kl_sampler_policy == pytest.approx(want, rel=1e-12)
    assert res.per_token_sampler_policy.sum() == pytest.approx(want, rel=1e-12)
    back = _mp_kl_joint(pi, res.conditionals)
    if math.isinf(back):
        assert res.kl_policy_sampler == math.inf and res.policy_mass_outside > 0
    else:
        assert res.kl_policy_sampler == pytest.approx(back, rel=1e-12)
        assert res.policy_mass_outside == 0


def test_temperature_alone_keeps_support_and_both_kls_finite():
    rng = np.random.default_rng(4)
    pi = _random_tree(rng, 3, 3)
    res = sampler_tree(pi, temperature=0.5)
    assert res.policy_mass_outside == 0
    assert res.kl_policy_sampler == pytest.approx(_mp_kl_joint(pi, res.conditionals), rel=1e-12)
    # the sequence law of per-token temperature is not pi(y)^(1/T) normalised
    pj = joint(pi).ravel()
    tempered = pj**2 / np.sum(pj**2)
    assert np.max(np.abs(joint(res.conditionals).ravel() - tempered)) > 1e-3


def test_top_k_per_token_keeps_more_sequences_than_top_k_of_the_joint():
    pi = [[0.5, 0.3, 0.2], [[0.6, 0.3, 0.1], [0.4, 0.35, 0.25], [0.9, 0.05, 0.05]]]
    res = sampler_tree(pi, top_k=2)
    assert np.count_nonzero(joint(res.conditionals)) == 4  # k**T, not k
    assert res.policy_mass_outside == pytest.approx(1 - (0.5 * 0.9 + 0.3 * 0.75))


def test_identity_settings_give_the_policy_and_zero_kl():
    rng = np.random.default_rng(5)
    pi = _random_tree(rng, 3, 2, zeros=True)
    res = sampler_tree(pi, top_p=1.0, min_p=0.0)
    for a, b in zip(res.conditionals, pi):
        np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-16)
    assert res.kl_sampler_policy == pytest.approx(0, abs=1e-15)
    assert res.kl_policy_sampler == pytest.approx(0, abs=1e-15)


def test_min_length_forbids_eos_before_min_length():
    pi = [[0.2, 0.5, 0.3], [[0.1, 0.6, 0.3], [0.5, 0.25, 0.25], [0.3, 0.3, 0.4]]]
    res = sampler_tree(pi, eos_token=0, min_length=1)
    np.testing.assert_allclose(res.conditionals[0], [0, 0.625, 0.375])
    np.testing.assert_allclose(res.conditionals[1], pi[1])  # from position 1 on: allowed
    assert res.policy_mass_outside == pytest.approx(0.2)
    assert res.kl_sampler_policy == pytest.approx(-math.log(0.8), rel=1e-14)
    with pytest.raises(ValueError, match="`min_length` = 1 blocks `eos_token` = 0"):
        sampler_tree([[1.0, 0.0], [[0.5, 0.5], [0.5, 0.5]]], eos_token=0, min_length=1)
    with pytest.raises(ValueError, match=r"`eos_token` must be a token id in \[0, 3\)"):
        sampler_tree(pi, eos_token=3, min_length=1)
    with pytest.raises(ValueError, match="`min_length` must be an integer >= 0"):
        sampler_tree(pi, eos_token=0, min_length=-1)


def test_float32_tree_and_token_permutation():
    rng = np.random.default_rng(6)
    pi = _random_tree(rng, 3, 2)
    kw = {"temperature": 0.8, "top_k": 2}
    res32 = sampler_tree([c.astype(np.float32) for c in pi], **kw)
    assert res32.conditionals[1].dtype == np.float32
    res = sampler_tree(pi, **kw)
    assert res32.kl_sampler_policy == pytest.approx(res.kl_sampler_policy, rel=1e-5)
    # relabelling the tokens relabels the tree and leaves the KLs unchanged
    perm = np.array([2, 0, 1])
    pi_p = [pi[0][perm], pi[1][np.ix_(perm, perm)]]
    res_p = sampler_tree(pi_p, **kw)
    np.testing.assert_allclose(res_p.conditionals[1], res.conditionals[1][np.ix_(perm, perm)])
    assert res_p.kl_sampler_policy == pytest.approx(res.kl_sampler_policy, rel=1e-14)


def test_rows_are_sampler_law_rows():
    rng = np.random.default_rng(7)
    pi = _random_tree(rng, 5, 2)
    kw = {"temperature": 0.9, "top_p": 0.7, "order": "vllm"}
    res = sampler_tree(pi, **kw)
    np.testing.assert_array_equal(res.conditionals[1], sampler_law(np.log(pi[1]), **kw))
