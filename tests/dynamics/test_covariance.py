"""Clip-Cov and KL-Cov (Cui et al. 2025, arXiv:2505.22617) as verl 0.9.1 writes them.

Three independent checks of the mean-field rows ``"clip_cov"`` and ``"kl_cov"``:

* mpmath (50 digits, the conftest's fixture): the infinite group's advantage
  a(y) = (r(y) - E r)/(sd + 1e-6), the covariance c(y) = (a(y) - E a)(log pi(y) - E log pi),
  the band S = {y : lb < c(y) < ub}, w(y) = 1 - [y in S] min(1, ratio / pi(S)); the update
  sum_y pi(y) w(y) a(y) (e_y - pi) minus beta times the k3 loss gradient
  sum_y pi(y) (1 - ref(y)/pi(y)) (e_y - pi), written out by hand.
* verl's own loss, re-expressed in a small torch function (`_verl_clip_cov_loss`, from
  verl 0.9.1 verl/trainer/ppo/core_algos.py lines 1744-1846: covariance against the batch
  means, the strict band, a random `max(int(ratio N), 1)` of the band's tokens detached,
  token mean), on a batch of a million tokens drawn from pi: its autograd gradient matches
  the mean-field update within the Monte Carlo error.
* KL-Cov's penalty `ppo_kl_coef * |log pi - log pi_old|` (lines 1849-1920) on-policy has
  gradient 0 in torch (sign(0) = 0): the step is the plain one.
"""

import mpmath as mp
import numpy as np
import pytest

from klpolicy.dynamics import expected_update, landing_point
from klpolicy.dynamics.covariance import clip_cov_weights, token_covariance

from .. import _mpref as R


def _mp_clip_cov_update(th, ref, r, beta, *, ratio, lb, ub, scaled=True):
    """The mean-field Clip-Cov update and the weights w (the module's mpmath recipe)."""
    e = [mp.exp(mp.mpf(float(t))) for t in th]
    z = mp.fsum(e)
    pi = [x / z for x in e]
    n = len(pi)
    er = mp.fsum(p * mp.mpf(float(v)) for p, v in zip(pi, r))
    if scaled:
        sd = mp.sqrt(mp.fsum(p * (mp.mpf(float(v)) - er) ** 2 for p, v in zip(pi, r)))
        a = [(mp.mpf(float(v)) - er) / (sd + mp.mpf("1e-6")) for v in r]
    else:
        a = [mp.mpf(float(v)) - er for v in r]
    ea = mp.fsum(p * x for p, x in zip(pi, a))
    elog = mp.fsum(p * mp.log(p) for p in pi)
    c = [(a[i] - ea) * (mp.log(pi[i]) - elog) for i in range(n)]
    band = [mp.mpf(lb) < c[i] < mp.mpf(ub) for i in range(n)]
    mass = mp.fsum(pi[i] for i in range(n) if band[i])
    drop = min(mp.mpf(1), mp.mpf(ratio) / mass) if mass > 0 else mp.mpf(0)
    w = [1 - drop if band[i] else mp.mpf(1) for i in range(n)]
    g = [mp.mpf(0)] * n
    for y in range(n):
        coef = pi[y] * (w[y] * a[y] - beta * (1 - mp.mpf(float(ref[y])) / pi[y]))
        for k in range(n):
            g[k] += coef * ((1 if k == y else 0) - pi[k])
    return g, w


CASES = [
    # (theta, ref, reward, beta, ratio, lb, ub): a band that holds some outcomes in each
    (np.log([0.9, 0.09, 0.01]), [0.5, 0.3, 0.2], [1.0, 0.0, -2.0], 0.1, 0.005, 0.5, 50.0),
    (np.log([0.6, 0.3, 0.1]), [0.2, 0.5, 0.3], [2.0, 1.0, 0.0], 0.0, 0.2, 0.05, 5.0),
    (np.array([3.0, -1.0, 0.0, -7.0]), [0.25] * 4, [1.0, 0.5, 0.0, -1.0], 0.3, 1.0, 0.0, 9.0),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("scaled", [True, False])
def test_clip_cov_update_matches_mpmath(case, scaled):
    th, ref, r, beta, ratio, lb, ub = case
    got = expected_update(
        "clip_cov",
        th,
        ref,
        r,
        beta,
        clip_cov_ratio=ratio,
        clip_cov_lb=lb,
        clip_cov_ub=ub,
        norm_adv_by_std_in_grpo=scaled,
    )
    want, w = _mp_clip_cov_update(th, ref, r, beta, ratio=ratio, lb=lb, ub=ub, scaled=scaled)
    assert any(x < 1 for x in w) or not scaled  # the band is not empty in the scaled cases
    R.assert_mp_close(got, want, rtol=1e-12, atol=1e-14)


def test_an_empty_band_is_the_plain_step():
    th, ref, r = np.log([0.6, 0.3, 0.1]), np.array([0.2, 0.5, 0.3]), np.array([2.0, 1.0, 0.0])
    got = expected_update(
        "clip_cov", th, ref, r, 0.2, clip_cov_lb=1e6, clip_cov_ub=1e7, norm_adv_by_std_in_grpo=False
    )
    plain = expected_update(
        "grpo",
        th,
        ref,
        r,
        0.2,
        num_generations=None,
        scale_rewards="none",
        use_bias_correction_kl=False,
    )
    np.testing.assert_allclose(got, plain, rtol=1e-13, atol=1e-15)
    kl_cov = expected_update("kl_cov", th, ref, r, 0.2, norm_adv_by_std_in_grpo=False)
    np.testing.assert_allclose(kl_cov, plain, rtol=1e-13, atol=1e-15)


def _verl_clip_cov_loss(torch, logits, ys, adv, *, ratio, lb, ub, gen):
    """verl 0.9.1's compute_policy_loss_clip_cov for one-token responses, on-policy."""
    log_prob = torch.log_softmax(logits, -1)[ys]
    old = log_prob.detach()
    r_t = torch.exp(log_prob - old)
    loss1 = -adv * r_t
    loss2 = -adv * torch.clamp(r_t, 0.8, 1.2)
    clipped = loss2 > loss1
    cov = (adv - adv.mean()) * (log_prob - log_prob.detach().mean())
    cov = torch.where(clipped, torch.full_like(cov, -torch.inf), cov)
    n_clip = max(int(ratio * len(ys)), 1)
    idx = torch.nonzero((cov < ub) & (cov > lb)).flatten()
    corr = torch.ones_like(adv)
    if len(idx):
        corr[idx[torch.randperm(len(idx), generator=gen)[: min(n_clip, len(idx))]]] = 0
    return (torch.maximum(loss1, loss2) * corr).mean()


def test_clip_cov_update_matches_verls_loss_on_a_large_batch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    pi = np.array([0.9, 0.09, 0.01])
    r = np.array([1.0, 0.0, -2.0])
    ratio, lb, ub = 0.005, 0.5, 50.0
    # the infinite group's advantage, as each token gets it
    sd = np.sqrt(pi @ (r - pi @ r) ** 2)
    a = (r - pi @ r) / (sd + 1e-6)
    N = 1_000_000
    logits = torch.tensor(np.log(pi), dtype=torch.float64, requires_grad=True)
    ys = torch.multinomial(torch.tensor(pi), N, replacement=True, generator=gen)
    adv = torch.tensor(a, dtype=torch.float64)[ys]
    loss = _verl_clip_cov_loss(torch, logits, ys, adv, ratio=ratio, lb=lb, ub=ub, gen=gen)
    loss.backward()
    mc = -logits.grad.numpy()
    exact = expected_update("clip_cov", np.log(pi), pi, r, 0.0, clip_cov_ratio=ratio,
                            clip_cov_lb=lb, clip_cov_ub=ub)  # fmt: skip
    # the plain step differs from it by more than the tolerance (the band matters here)
    plain = expected_update("clip_cov", np.log(pi), pi, r, 0.0, clip_cov_lb=1e6, clip_cov_ub=1e7)
    assert np.max(np.abs(plain - exact)) > 5e-3
    np.testing.assert_allclose(mc, exact, atol=2e-3)


def test_kl_cov_penalty_has_no_on_policy_gradient():
    torch = pytest.importorskip("torch")
    logits = torch.tensor([0.3, -0.2, 1.0], dtype=torch.float64, requires_grad=True)
    log_prob = torch.log_softmax(logits, -1)
    (0.1 * (log_prob - log_prob.detach()).abs()).sum().backward()
    assert torch.all(logits.grad == 0)


def test_landing_points_are_fixed_points():
    ref, r = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.0, 0.5])
    for rule, opts in (("clip_cov", {"clip_cov_ratio": 0.05, "clip_cov_lb": 0.1}), ("kl_cov", {})):
        land = landing_point(rule, ref, r, 0.1, **opts)
        assert land.kind == "fixed_point" and land.stable
        u = expected_update(rule, np.log(land.policy), ref, r, 0.1, **opts)
        assert np.max(np.abs(u)) < 1e-10
    assert landing_point("clip_cov", ref, r, 0.0).kind == "greedy"


def test_token_covariance_off_the_support_is_minus_inf():
    c = token_covariance(np.array([0.5, 0.5, 0.0]), np.array([1.0, -1.0, 3.0]))
    assert c[2] == -np.inf and np.all(np.isfinite(c[:2]))


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        ({"clip_cov_lb": 5.0, "clip_cov_ub": 1.0}, "`clip_cov_lb` must be below `clip_cov_ub`"),
        ({"clip_cov_ratio": 0.0}, "`clip_cov_ratio`"),
        ({"clip_cov_ratio": 1.5}, "`clip_cov_ratio`"),
        ({"clip_cov_lb": float("nan")}, "`clip_cov_lb`"),
        ({"norm_adv_by_std_in_grpo": "yes"}, "`norm_adv_by_std_in_grpo`"),
        ({"kl_cov_ratio": 0.1}, "rule 'clip_cov' has no option 'kl_cov_ratio'"),
    ],
)
def test_bad_options(opts, match):
    ref, r = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    with pytest.raises(ValueError, match=match):
        expected_update("clip_cov", np.log(ref), ref, r, 0.1, **opts)
    if "kl_cov_ratio" not in opts:
        with pytest.raises(ValueError, match=match):
            landing_point("clip_cov", ref, r, 0.1, **opts)


def test_weights_refuse_an_empty_band():
    with pytest.raises(ValueError, match="`clip_cov_lb` must be below"):
        clip_cov_weights(np.array([1.0]), np.array([0.0]), ratio=0.1, lower=1.0, upper=1.0)
