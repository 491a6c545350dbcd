"""sampler_mismatch: the mismatch KL(s||pi) from logged log-probs, against exact trees."""

from __future__ import annotations

import math

import numpy as np
import pytest

from klpolicy.sampling import sampler_law, sampler_mismatch, sampler_tree
from klpolicy.sequences import marginals, sample, token_logprobs


def test_hand_computed_example():
    s_lp = np.log([[0.5, 0.9, 0.6], [0.4, 0.8, 0.5]])
    pi_lp = np.log([[0.5, 0.8, 0.6], [0.5, 0.8, 0.1]])
    m = sampler_mismatch(s_lp, pi_lp, estimator="k3")
    rho = np.exp(pi_lp - s_lp)
    k3 = rho - 1 - np.log(rho)
    np.testing.assert_allclose(m.per_token, k3, rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(m.log_ratio, np.log(rho), rtol=1e-14, atol=1e-16)
    seq = k3.sum(1)
    assert m.kl == pytest.approx(seq.mean(), rel=1e-14)
    assert m.kl_se == pytest.approx(seq.std(ddof=1) / math.sqrt(2), rel=1e-13)
    np.testing.assert_allclose(m.per_position, k3.mean(0), rtol=1e-14)
    np.testing.assert_allclose(m.per_position_se, k3.std(0, ddof=1) / math.sqrt(2), rtol=1e-12)
    assert m.extreme_fraction == pytest.approx(1 / 6)
    m1 = sampler_mismatch(s_lp, pi_lp)
    np.testing.assert_allclose(m1.per_token, s_lp - pi_lp, atol=1e-15)
    assert m.outside_mass is None and m.outside_fraction is None


def test_mask_ignores_padding_and_trainer_zero_is_infinite():
    s_lp = np.log([[0.5, 0.9, 0.6], [0.4, 0.8, 0.5]])
    pi_lp = np.log([[0.5, 0.8, 0.6], [0.5, 0.8, 0.1]])
    mask = np.array([[1, 1, 0], [1, 1, 1]])
    s_pad, pi_pad = s_lp.copy(), pi_lp.copy()
    s_pad[0, 2], pi_pad[0, 2] = np.nan, 5.0  # padding may hold anything
    m = sampler_mismatch(s_pad, pi_pad, mask, estimator="k3")
    full = sampler_mismatch(s_lp, pi_lp, estimator="k3")
    assert m.per_token[0, 2] == 0 and m.per_token[1, 2] == full.per_token[1, 2]
    assert m.per_position_se[2] == math.inf  # one token at that position
    with np.errstate(divide="ignore"):
        z = sampler_mismatch(s_lp, np.where([[1, 1, 1], [1, 1, 0]], pi_lp, -np.inf))
    assert z.trainer_zero_fraction == pytest.approx(1 / 6) and z.kl == math.inf


def test_converges_to_the_exact_sequence_kl():
    """Samples from the sampler's tree (temperature and top-p); k1's mean lies within 4
    standard errors of KL(s||pi), exact; k3's within 4 of KL(s||pi) less the truncated
    mass E_s[sum_t pi(s = 0 | a_<t)]."""
    rng = np.random.default_rng(0)
    pi = [rng.dirichlet(np.ones(4), size=(4,) * t) for t in range(3)]
    res = sampler_tree(pi, temperature=0.8, top_p=0.95)
    s, exact = res.conditionals, res.kl_sampler_policy
    prefix = [np.ones(()), *marginals(s)[:-1]]
    truncated = sum(
        float(np.sum(m * np.sum(np.where(c_s == 0, c_pi, 0.0), axis=-1)))
        for m, c_s, c_pi in zip(prefix, s, pi)
    )
    assert truncated > 0.01
    seqs = sample(s, 20_000, rng=1)
    with np.errstate(divide="ignore"):
        lp_s, lp_pi = token_logprobs(s, seqs), token_logprobs(pi, seqs)
    m1 = sampler_mismatch(lp_s, lp_pi)
    assert abs(m1.kl - exact) < 4 * m1.kl_se < 0.2 * exact
    m3 = sampler_mismatch(lp_s, lp_pi, estimator="k3")
    assert abs(m3.kl - (exact - truncated)) < 4 * m3.kl_se
    assert abs(m3.kl - exact) > 20 * m3.kl_se  # k3 misses the truncated mass


def test_logits_give_the_mass_outside_the_support_and_refuse_impossible_tokens():
    logits = np.log(np.array([[[0.5, 0.3, 0.15, 0.05], [0.4, 0.3, 0.2, 0.1]]]))
    law = sampler_law(logits, top_k=2)
    tokens = np.array([[1, 1]])
    s_lp = np.log(np.take_along_axis(law, tokens[..., None], -1)[..., 0])
    pi_lp = np.log([[0.3, 0.3]])
    m = sampler_mismatch(s_lp, pi_lp, tokens=tokens, logits=logits, top_k=2)
    np.testing.assert_allclose(m.outside_mass, [[0.2, 0.3]], atol=1e-15)
    assert m.outside_fraction == pytest.approx(0.25) and m.impossible_fraction == 0
    with pytest.raises(ValueError, match=r"`tokens` holds token 3 at \(batch 0, position 0\)"):
        sampler_mismatch(s_lp, pi_lp, tokens=[[3, 3]], logits=logits, top_k=2)
    lax = sampler_mismatch(s_lp, pi_lp, tokens=[[3, 1]], logits=logits, top_k=2, strict=False)
    assert lax.impossible_fraction == 0.5
    # a tie at the k-th logit keeps every tied token: nothing is outside
    flat = np.zeros((1, 1, 4))
    m = sampler_mismatch([[np.log(0.25)]], [[np.log(0.25)]], tokens=[[3]], logits=flat, top_k=2)
    assert m.outside_fraction == 0 and m.kl == 0


BAD = [
    ({"sampler_logprobs": [[-0.1, -np.inf]]}, "`sampler_logprobs` must be finite at sampled"),
    ({"sampler_logprobs": [[-0.1, 0.5]]}, r"`sampler_logprobs` must hold log-probabilities"),
    ({"trainer_logprobs": [[-0.1]]}, "`trainer_logprobs` must have the same shape"),
    ({"sampler_logprobs": [-0.1, -0.2], "trainer_logprobs": [-0.1, -0.2]}, "shape \\(batch, T\\)"),
    ({"ratio_threshold": 1.0}, "`ratio_threshold` must be"),
    ({"estimator": "k9"}, "estimator"),
    ({"tokens": [[0, 1]]}, "`tokens` is used only with `logits`"),
    ({"logits": [[[0.0, 1.0], [0.0, 1.0]]]}, "`tokens` is required with `logits`"),
    ({"logits": [[[0.0, 1.0]]], "tokens": [[0]]}, r"`logits` must have shape \(batch, T, V\)"),
    ({"logits": [[[0.0, 1.0], [0.0, 1.0]]], "tokens": [[0, 2]]}, r"`tokens` must hold ids"),
    ({"top_p": 2.0}, "`top_p` must be"),
]


@pytest.mark.parametrize(("kw", "msg"), BAD)
def test_bad_input(kw, msg):
    base = {"sampler_logprobs": [[-0.1, -0.2]], "trainer_logprobs": [[-0.2, -0.1]]}
    with pytest.raises(ValueError, match=msg):
        sampler_mismatch(**{**base, **kw})


def test_float32_and_permuted_batch():
    rng = np.random.default_rng(3)
    s_lp = np.log(rng.uniform(0.1, 1, size=(5, 4)))
    pi_lp = np.log(rng.uniform(0.1, 1, size=(5, 4)))
    m = sampler_mismatch(s_lp, pi_lp)
    m32 = sampler_mismatch(s_lp.astype(np.float32), pi_lp.astype(np.float32))
    assert m32.per_token.dtype == np.float32
    assert m32.kl == pytest.approx(m.kl, abs=1e-6)
    perm = rng.permutation(5)
    mp_ = sampler_mismatch(s_lp[perm], pi_lp[perm])
    assert mp_.kl == pytest.approx(m.kl, rel=1e-14)
    np.testing.assert_allclose(mp_.per_position, m.per_position, rtol=1e-14)
