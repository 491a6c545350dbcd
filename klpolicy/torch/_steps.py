"""One update of each training method, on a problem flattened to (contexts, outcomes).

Every function takes the model (anything with ``log_probs() -> (B, K)``), the
problem (:class:`Problem`), the options and the torch generator, performs one
outer step (one batch; PPO and GRPO take several optimiser steps on it) and
returns the loss as a float.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch

import klpolicy
from klpolicy.estimators import estimator_names
from klpolicy.torch import closed_form as _closed_form
from klpolicy.trust_region import trust_region_beta

# the core's estimators; the samples come from the model itself (finite log-probabilities),
# so the per-call value checks (a device-to-host sync each) are skipped inside the loop
ESTIMATORS = {
    name: functools.partial(getattr(_closed_form, name), validate=False)
    for name in estimator_names(kl_only=True)
}


@dataclass
class Problem:
    """A KL-regularised problem over ``K`` outcomes for ``B`` contexts, on a device."""

    ref: torch.Tensor  # (B, K)
    logq: torch.Tensor  # (B, K), -inf off the support
    reward: torch.Tensor  # (B, K)
    beta: float
    support: torch.Tensor  # (B, K) bool
    logq_tokens: torch.Tensor | None = None  # (1, K, T): per-token KL estimates when set

    @classmethod
    def from_numpy(cls, ref: np.ndarray, reward: np.ndarray, beta: float, device, dtype):
        q = torch.as_tensor(ref, dtype=dtype, device=device)
        sup = q > 0
        logq = torch.where(sup, torch.log(torch.where(sup, q, torch.ones_like(q))), -math.inf)
        r = torch.as_tensor(reward, dtype=dtype, device=device)
        return cls(q, logq, r, float(beta), sup)


def _sample(probs: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    return torch.multinomial(probs, n, replacement=True, generator=gen)


def _loo_baseline(x: torch.Tensor) -> torch.Tensor:
    """Leave-one-out mean along the last axis (keeps the estimator unbiased)."""
    n = x.shape[-1]
    return (x.sum(-1, keepdim=True) - x) / (n - 1)


def kl_exact(lp: torch.Tensor, prob: torch.Tensor, pb: Problem) -> torch.Tensor:
    """KL(pi || ref) per context from full log-probabilities, NaN-free gradient."""
    zero = torch.zeros_like(lp)
    d = torch.where(pb.support, lp, zero) - torch.where(pb.support, pb.logq, zero)
    return (prob * d).sum(-1)


def _kl_estimate(est, model, pb: Problem, idx, lp_y, lq_y, *, detach: bool) -> torch.Tensor:
    """Per-sample KL estimate: of the whole outcome, or summed over tokens (``logq_tokens``)."""
    if pb.logq_tokens is None:
        return est(lp_y.detach() if detach else lp_y, lq_y)
    t = pb.logq_tokens.shape[-1]
    flat = idx.reshape(1, -1, 1).expand(1, -1, t)
    lpt = model.token_log_probs().gather(1, flat).reshape(*idx.shape, t)
    lqt = pb.logq_tokens.gather(1, flat).reshape(*idx.shape, t)
    return est(lpt.detach() if detach else lpt, lqt).sum(-1)


def _clipped(ratio, adv, clip):
    return torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)


def step_exact(model, pb: Problem, opt, o, gen) -> float:
    lp = model.log_probs()
    p = lp.exp()
    objective = (p * pb.reward).sum(-1) - pb.beta * kl_exact(lp, p, pb)
    loss = -objective.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def step_reinforce(model, pb: Problem, opt, o, gen) -> float:
    lp = model.log_probs()
    idx = _sample(lp.detach().exp(), o["batch_size"], gen)
    lp_y, lq_y, r_y = lp.gather(1, idx), pb.logq.gather(1, idx), pb.reward.gather(1, idx)
    est = ESTIMATORS[o["estimator"]]
    if o["placement"] == "reward":
        ret = r_y - pb.beta * _kl_estimate(est, model, pb, idx, lp_y, lq_y, detach=True)
        loss = -((ret - _loo_baseline(ret)) * lp_y).mean()
    else:
        adv = r_y - _loo_baseline(r_y)
        kl = _kl_estimate(est, model, pb, idx, lp_y, lq_y, detach=False)
        loss = -(adv * lp_y).mean() + pb.beta * kl.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def step_ppo(model, pb: Problem, opt, o, gen) -> float:
    with torch.no_grad():
        lp_all = model.log_probs()
        idx = _sample(lp_all.exp(), o["batch_size"], gen)
        lp_old = lp_all.gather(1, idx)
        lq_y, r_y = pb.logq.gather(1, idx), pb.reward.gather(1, idx)
        ctrl = o["controller"]
        beta = float(ctrl.value) if ctrl is not None else pb.beta
        est = ESTIMATORS[o["estimator"]]
        kl_samples = _kl_estimate(est, model, pb, idx, lp_old, lq_y, detach=True)
        ret = r_y - beta * kl_samples
        adv = ret - _loo_baseline(ret)
    for _ in range(o["epochs"]):
        ratio = torch.exp(model.log_probs().gather(1, idx) - lp_old)
        loss = -_clipped(ratio, adv, o["clip"]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if ctrl is not None:
        ctrl.update(float(ESTIMATORS["k1"](lp_old, lq_y).mean()), int(idx.numel()))
    o["_beta_now"] = beta
    return float(loss.detach())


def step_grpo(model, pb: Problem, opt, o, gen) -> float:
    g, n_groups = o["group_size"], o["n_groups"]
    with torch.no_grad():
        lp_all = model.log_probs()
        idx = _sample(lp_all.exp(), g * n_groups, gen)
        lp_old = lp_all.gather(1, idx)
        lq_y = pb.logq.gather(1, idx)
        r_y = pb.reward.gather(1, idx).reshape(idx.shape[0], n_groups, g)
        mean = r_y.mean(-1, keepdim=True)
        std = r_y.std(-1, keepdim=True, unbiased=o["unbiased_std"])
        adv = ((r_y - mean) / (std + o["eps"])).reshape(idx.shape)
    for _ in range(o["epochs"]):
        lp_y = model.log_probs().gather(1, idx)
        ratio = torch.exp(lp_y - lp_old)
        kl = _kl_estimate(ESTIMATORS["k3"], model, pb, idx, lp_y, lq_y, detach=False)
        loss = -_clipped(ratio, adv, o["clip"]).mean() + pb.beta * kl.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


def _preference_loss(h, beta, kind):
    if kind == "dpo":
        return -torch.nn.functional.logsigmoid(beta * h)
    return (h - 1.0 / (2.0 * beta)) ** 2


def step_preference(model, pb: Problem, opt, o, gen) -> float:
    n = o["batch_size"]
    y1, y2 = _sample(pb.ref, n, gen), _sample(pb.ref, n, gen)
    pref = torch.sigmoid(pb.reward.gather(1, y1) - pb.reward.gather(1, y2))  # Bradley-Terry
    lp = model.log_probs()
    zero = torch.zeros_like(lp)
    s = torch.where(pb.support, lp, zero) - torch.where(pb.support, pb.logq, zero)
    h = s.gather(1, y1) - s.gather(1, y2)  # implicit-reward margin of y1 over y2, over beta
    kind = o["method"]
    if o["labels"] == "expected":
        loss = pref * _preference_loss(h, pb.beta, kind) + (1 - pref) * _preference_loss(
            -h, pb.beta, kind
        )
    else:
        first = torch.bernoulli(pref, generator=gen) > 0
        loss = _preference_loss(torch.where(first, h, -h), pb.beta, kind)
    loss = loss.mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def step_trust_region(model, pb: Problem, o, set_policy) -> float:
    """Mirror descent: the closed form with pi_old as reference, KL radius ``delta``.

    The advantage is the functional gradient of the regularised objective,
    ``r - beta log(pi_old / ref)``; the multiplier is capped below at ``beta``
    so that the step lands exactly on pi* once pi* is within ``delta``.
    """
    with torch.no_grad():
        p_old = model.log_probs().exp().cpu().numpy()
    q, r = pb.ref.cpu().numpy(), pb.reward.cpu().numpy()
    sup = q > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        adv = np.where(sup, r - pb.beta * np.log(np.where(sup, p_old / np.where(sup, q, 1), 1)), 0)
    beta_t = np.maximum(pb.beta, trust_region_beta(p_old, adv, o["delta"]))
    new = klpolicy.optimal_policy(p_old, adv, np.asarray(beta_t)[..., None])
    set_policy(new)
    return float(-np.mean(klpolicy.objective(new, q / q.sum(-1, keepdims=True), r, pb.beta)))


STEPS = {
    "exact": step_exact,
    "reinforce": step_reinforce,
    "ppo": step_ppo,
    "grpo": step_grpo,
    "dpo": step_preference,
    "ipo": step_preference,
}
