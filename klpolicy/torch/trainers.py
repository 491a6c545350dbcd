r"""Trainers for the KL-regularised objective, each measured against the exact optimum.

:func:`fit_policy` trains a :class:`~klpolicy.torch.TabularPolicy` on
``max_pi E_pi[r] - beta KL(pi || ref)`` for one or a batch of contexts;
:func:`fit_sequence_policy` does the same on a token tree (whole-sequence
reward), with tabular conditionals or a small autoregressive model;
:func:`fit_reference` is the "SFT" stage (maximum likelihood). Every result
records, per step, the exact expected reward and KL of the current policy and
its total-variation distance to the target (by default the exact optimum
:math:`\pi^* = \pi_{ref} e^{r/\beta}/Z`), so a trainer's bias shows as a
distance that does not go to zero.

Methods
-------
``"exact"``
    Gradient ascent on the exact objective (all outcomes enumerated).
``"reinforce"``
    Score-function gradient from samples of the policy, leave-one-out
    baseline; the KL term is the estimator ``estimator`` ("k1", "k2", "k3")
    placed in the ``"reward"`` (detached, subtracted from the reward) or in
    the ``"loss"`` (differentiated). Unbiased: k1 in the reward, k2 in the loss.
``"ppo"``
    Clipped ratio, ``epochs`` optimiser steps per batch, the KL estimate in
    the reward; an optional ``controller`` (``.value``, ``.update(current,
    n_steps)``, as in TRL and ``klpolicy.control``) sets beta between batches.
``"grpo"``
    Group-normalised advantages ``(r - mean) / (std + eps)`` over groups of
    ``group_size`` samples, k3 in the loss. Converges to
    :func:`klpolicy.torch.grpo_fixed_point`, not to pi*.
``"dpo"``, ``"ipo"``
    Pairs drawn from the reference, labels drawn from Bradley-Terry on the
    reward, ``P(y1 > y2) = sigmoid(r(y1) - r(y2))``; DPO's population optimum is pi*.
``"trust_region"``
    Mirror descent: each step is the closed form with pi_old as reference,
    advantage ``r - beta log(pi_old / ref)`` and multiplier
    ``max(beta, beta_for_kl(pi_old, A, delta))`` (a KL radius ``delta``).
"""

from __future__ import annotations

import copy
import sys
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from numpy.typing import ArrayLike

from klpolicy import sequences
from klpolicy.core import optimal_policy
from klpolicy.core.internal import prepare as _prepare
from klpolicy.core.internal import validation as V
from klpolicy.torch._steps import ESTIMATORS, STEPS, Problem, kl_exact, step_trust_region
from klpolicy.torch.policies import (
    AutoregressivePolicy,
    TabularConditionals,
    TabularPolicy,
    default_device,
    token_log_probs_from_conditionals,
)

__all__ = ["FitResult", "fit_policy", "fit_reference", "fit_sequence_policy"]

METHODS = (*STEPS, "trust_region")
_DEFAULT_LR = {"exact": 0.1, "reinforce": 0.05, "ppo": 0.02, "grpo": 0.05, "dpo": 0.05, "ipo": 0.05}


@dataclass
class FitResult:
    """What a trainer returns.

    Attributes
    ----------
    policy : ndarray or list of ndarray
        The learned policy: ``(V,)`` / ``(B, V)`` probabilities for
        :func:`fit_policy`, dense conditionals for the sequence trainers.
    history : dict of str to ndarray
        Per step: ``"loss"``, ``"reward"`` (exact expected reward),
        ``"kl"`` (exact KL to the reference), ``"distance"`` (total variation
        to ``target``), each averaged over contexts, and ``"beta"`` (the
        coefficient used, which a controller may change).
    target : ndarray
        The distribution ``distance`` is measured to (the exact optimum unless
        given); a joint law ``(V,)*T`` for token trees.
    model : torch.nn.Module
        The trained module (on its device).
    method : str
        The method used.
    steps_per_second : float
        Measured training speed.
    """

    policy: np.ndarray | list
    history: dict[str, np.ndarray]
    target: np.ndarray
    model: torch.nn.Module
    method: str
    steps_per_second: float = field(default=float("nan"))


def _progress(step: int, steps: int, dist: float, enabled: bool) -> None:
    if enabled and (step + 1) % max(1, steps // 20) == 0:
        bar = "#" * (20 * (step + 1) // steps)
        print(f"\r[{bar:<20}] {step + 1}/{steps} TV={dist:.4f}", end="", file=sys.stderr)
        if step + 1 == steps:
            print(file=sys.stderr)


def _options(method, kw) -> dict:
    V.as_choice("method", method, tuple(METHODS))
    o = {
        "method": method,
        "batch_size": 256,
        "estimator": "k1",
        "placement": "reward",
        "clip": 0.2,
        "epochs": 4 if method == "ppo" else 1,
        "controller": None,
        "group_size": 8,
        "n_groups": 32,
        "eps": 1e-6,
        "unbiased_std": True,
        "labels": "sampled",
        "delta": 0.1,
    }
    unknown = set(kw) - set(o)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {sorted(unknown)} for method {method!r}")
    o.update(kw)
    V.as_choice("estimator", o["estimator"], tuple(ESTIMATORS))
    V.as_choice("placement", o["placement"], ("reward", "loss"))
    V.as_choice("labels", o["labels"], ("sampled", "expected"))
    for name in ("batch_size", "epochs", "group_size", "n_groups"):
        o[name] = V.as_positive_int(name, o[name], hi=V.MAX_LOOP_COUNT)
    if o["batch_size"] < 2:
        raise ValueError(f"`batch_size` must be at least 2; got {o['batch_size']}")
    if o["group_size"] < 2:
        raise ValueError(f"`group_size` must be at least 2; got {o['group_size']}")
    o["clip"] = V.as_positive_scalar("clip", o["clip"])
    o["eps"] = V.as_scalar("eps", o["eps"], "[0, inf)")
    o["unbiased_std"] = V.as_bool("unbiased_std", o["unbiased_std"])
    return o


def _train(
    model,
    pb: Problem,
    target_t,
    method,
    steps,
    seed,
    lr,
    schedule,
    progress,
    o,
    set_joint,
    callback,
):
    steps = V.as_positive_int("steps", steps, hi=V.MAX_LOOP_COUNT)
    progress = V.as_bool("progress", progress)
    V.as_choice("schedule", schedule, ("linear", "constant"))
    device = pb.ref.device
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    opt = sched = None
    if method != "trust_region":
        lr = _DEFAULT_LR[method] if lr is None else V.as_positive_scalar("lr", lr)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        if schedule == "linear":
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: max(0.0, 1.0 - i / steps))
    rows = []
    start = time.perf_counter()
    for i in range(steps):
        o["_beta_now"] = pb.beta
        if method == "trust_region":
            loss = step_trust_region(model, pb, o, set_joint)
        else:
            loss = STEPS[method](model, pb, opt, o, gen)
            if sched is not None:
                sched.step()
        with torch.no_grad():
            lp = model.log_probs()
            p = lp.exp()
            reward = (p * pb.reward).sum(-1).mean()
            kl = kl_exact(lp, p, pb).mean()
            dist = 0.5 * (p - target_t).abs().sum(-1).mean()
        rows.append(
            torch.stack(
                [
                    torch.as_tensor(loss, dtype=p.dtype, device=device),
                    reward,
                    kl,
                    dist,
                    torch.as_tensor(o["_beta_now"], dtype=p.dtype, device=device),
                ]
            )
        )
        _progress(i, steps, float(dist) if progress else 0.0, progress)
        if callback is not None:
            callback(i + 1, model)
    seconds = time.perf_counter() - start
    table = torch.stack(rows).cpu().numpy()
    _check_diverged(table[:, 3], steps, lr if method != "trust_region" else None)
    hist = dict(zip(("loss", "reward", "kl", "distance", "beta"), table.T, strict=True))
    return hist, steps / seconds


def _check_diverged(distance: np.ndarray, steps: int, lr) -> None:
    """Raise when training left the finite numbers (checked once, after the loop: no sync)."""
    bad = ~np.isfinite(distance)
    if bad.any():
        k = int(np.argmax(bad))
        why = f"`lr` = {lr:g} is too large for this problem; use a smaller one" if lr else ""
        raise ValueError(
            f"training diverged: the policy became non-finite at step {k + 1} of {steps}"
            + (f"; {why}" if why else "")
        )


def fit_policy(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: float,
    *,
    method: str = "exact",
    steps: int = 300,
    seed: int = 0,
    device=None,
    lr: float | None = None,
    schedule: str = "linear",
    target: ArrayLike | None = None,
    progress: bool = False,
    dtype: torch.dtype = torch.float64,
    policy=None,
    callback=None,
    **options,
) -> FitResult:
    r"""Train a tabular softmax policy (or any model of the outcomes' law) on the KL-regularised objective.

    .. math::

        \pi^* = \pi_{ref}\,e^{r/\beta}/Z \quad\text{(the target the history measures to)}

    Parameters
    ----------
    ref : array_like, shape (V,) or (B, V)
        Reference probabilities; the policy starts there. Batch rows are
        separate contexts trained together.
    reward : array_like
        Rewards, broadcasting against ``ref``.
    beta : float
        KL coefficient, ``> 0`` (``>= 0`` for ``"trust_region"``).
    method : str, optional
        ``"exact"``, ``"reinforce"``, ``"ppo"``, ``"grpo"``, ``"dpo"``,
        ``"ipo"`` or ``"trust_region"`` (see the module docstring).
    steps : int, optional
        Outer steps (batches).
    seed : int, optional
        Seeds the sampler: the same seed gives the same run.
    device : str or torch.device, optional
        ``"cuda"`` when available, else ``"cpu"``.
    lr : float, optional
        Adam's learning rate (a per-method default otherwise).
    schedule : {"linear", "constant"}, optional
        Learning rate decayed linearly to zero over ``steps`` (the default,
        which lets sampled methods settle), or kept constant.
    target : array_like, optional
        What ``history["distance"]`` measures to; the exact optimum by default.
    progress : bool, optional
        Print a progress bar to stderr.
    dtype : torch.dtype, optional
        The dtype of the policy's parameters and of the problem's tensors (default
        float64).
    policy : torch.nn.Module, optional
        The model to train instead of a :class:`TabularPolicy` started at ``ref``: any
        module whose ``log_probs()`` returns the ``(B, V)`` log-probabilities of its exact
        law over the outcomes (differentiable in its parameters, ``dtype`` on ``device``),
        e.g. a language model's law over an enumerated set of completions. Trained in
        place; its own dtype is kept. Not for ``"trust_region"`` (which sets the
        probabilities directly).
    callback : callable, optional
        ``callback(step, model)`` after each step (``step`` from 1), e.g. to record the law.
    **options
        ``batch_size`` (samples per context per step; pairs for DPO/IPO),
        ``estimator`` and ``placement`` (reinforce; PPO uses ``estimator``
        for its KL in the reward), ``clip`` and ``epochs`` (PPO, GRPO),
        ``controller`` (PPO), ``group_size``, ``n_groups``, ``eps``,
        ``unbiased_std`` (GRPO), ``labels`` ("sampled" or "expected", DPO/IPO),
        ``delta`` (trust_region).

    Returns
    -------
    FitResult
        ``.policy`` has ``ref``'s broadcast shape; ``.history`` arrays have
        length ``steps``.

    Raises
    ------
    ValueError
        For invalid problems, an unknown method, estimator or placement; a ``policy``
        without ``log_probs()`` or whose law is not of ``ref``'s shape, ``dtype`` and
        device; a ``policy`` with ``"trust_region"``.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593; Schulman et al., 2017,
       arXiv:1707.06347; Shao et al., 2024, arXiv:2402.03300; Rafailov et al.,
       2023, arXiv:2305.18290; Azar et al., 2023, arXiv:2310.12036.

    Examples
    --------
    >>> from klpolicy.torch import fit_policy
    >>> res = fit_policy([0.5, 0.5], [1.0, 0.0], 0.5, method="exact", steps=200, device="cpu")
    >>> res.policy.round(3)
    array([0.881, 0.119])
    """
    o = _options(method, options)
    q, r = _prepare(ref, reward, -1)
    one_d = q.ndim == 1
    q2, r2 = np.atleast_2d(q).astype(np.float64), np.atleast_2d(r).astype(np.float64)
    V.as_scalar("beta", beta, "[0, inf)" if method == "trust_region" else "(0, inf)")
    tgt = (
        optimal_policy(q2, r2, beta) if target is None else np.atleast_2d(np.asarray(target, float))
    )
    dev = default_device(device)
    pb = Problem.from_numpy(q2, r2, beta, dev, dtype)
    if policy is None:
        model = TabularPolicy(q2, device=dev, dtype=dtype)
        set_probs = model.set_probs
    else:
        model, set_probs = _given_policy(policy, method, pb), None
    if callback is not None and not callable(callback):
        raise ValueError(f"`callback` must be callable or None; got {V.describe(callback)}")
    target_t = torch.as_tensor(tgt, dtype=dtype, device=dev)
    hist, sps = _train(
        model, pb, target_t, method, steps, seed, lr, schedule, progress, o, set_probs, callback
    )
    if policy is None:
        pol = model.probs()
    else:
        with torch.no_grad():
            pol = model.log_probs().exp().cpu().numpy()
    return FitResult(
        pol[0] if one_d else pol,
        hist,
        tgt[0] if one_d and tgt.shape[0] == 1 else tgt,
        model,
        method,
        sps,
    )


def _given_policy(policy, method: str, pb: Problem):
    """``fit_policy``'s ``policy``: a module whose ``log_probs()`` is the law of ``pb``'s shape."""
    if method == "trust_region":
        raise ValueError("`method` 'trust_region' needs the tabular policy; pass `policy=None`")
    if not isinstance(policy, torch.nn.Module) or not callable(getattr(policy, "log_probs", None)):
        raise ValueError(
            f"`policy` must be a torch.nn.Module with log_probs() or None; got {V.describe(policy)}"
        )
    with torch.no_grad():
        lp = policy.log_probs()
    want = (tuple(pb.ref.shape), pb.ref.dtype, pb.ref.device)
    got = (tuple(lp.shape), lp.dtype, lp.device)
    if got != want:
        raise ValueError(
            f"`policy`.log_probs() must return (shape, dtype, device) {want}, as `ref`; got {got}"
        )
    return policy


def _tree(ref_conditionals, reward):
    """Validate a token tree and a sequence reward; return (conditionals, reward, joint)."""
    conds = [c.astype(np.float64) for c in V.as_token_tree("ref_conditionals", ref_conditionals)]
    vocab, length = conds[0].shape[0], len(conds)
    rew = V.as_sequence_rewards("reward", reward, (vocab,) * length, "one reward per sequence")
    return conds, rew.astype(np.float64), sequences.joint(conds)


def fit_sequence_policy(
    ref_conditionals,
    reward: ArrayLike,
    beta: float,
    *,
    method: str = "exact",
    steps: int = 300,
    seed: int = 0,
    device=None,
    policy=None,
    kl_level: str = "sequence",
    lr: float | None = None,
    schedule: str = "linear",
    progress: bool = False,
    dtype: torch.dtype = torch.float64,
    **options,
) -> FitResult:
    r"""Train a policy over a token tree on the sequence-level KL-regularised objective.

    .. math::

        \max_\pi \mathbb{E}_{a\sim\pi}[r(a)] - \beta\,\mathrm{KL}(\pi\|\pi_{ref}),
        \qquad \pi^*(a) = \pi_{ref}(a)\,e^{r(a)/\beta}/Z

    Parameters
    ----------
    ref_conditionals : list of array_like
        ``[t]`` of shape ``(V,)*(t+1)``: ``p(a_t | a_<t)`` (the
        ``klpolicy.sequences`` layout).
    reward : array_like, shape (V,)*T
        Reward of each whole sequence.
    beta : float
        KL coefficient.
    method, steps, seed, device, lr, schedule, progress, dtype, **options
        As in :func:`fit_policy`; the outcomes are the ``V**T`` sequences,
        sampled from the model's joint law (the same law as token-by-token
        sampling), and KL estimators act on whole-sequence log-ratios.
    policy : None, "tabular", or AutoregressivePolicy, optional
        The model to train: free conditionals initialised at the reference
        (default), or an autoregressive model (copied, not modified), e.g. the
        one :func:`fit_reference` returns. ``"trust_region"`` needs tabular.
    kl_level : {"sequence", "token"}, optional
        Where the sampled KL estimate is taken (``"reinforce"``, ``"ppo"``,
        ``"grpo"``): on the whole-sequence log-ratio, or per token and summed,
        as TRL and GRPO do. The two agree for k1 (the per-token log-ratios sum
        to the sequence's) and differ for k2 and k3.

    Returns
    -------
    FitResult
        ``.policy`` is the list of learned conditionals; ``.target`` the exact
        optimal joint law ``(V,)*T``; ``history["distance"]`` the total
        variation between joint laws.

    Raises
    ------
    ValueError
        For malformed conditionals or reward, an autoregressive policy against
        a reference with zeros, or ``"trust_region"`` with an autoregressive model.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.torch import fit_sequence_policy
    >>> ref = [np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.5, 0.5]])]
    >>> reward = np.array([[1.0, 0.0], [0.0, 0.0]])
    >>> res = fit_sequence_policy(ref, reward, 1.0, method="exact", steps=300, device="cpu")
    >>> float(res.history["distance"][-1]) < 1e-3
    True
    """
    o = _options(method, options)
    conds, rew, joint = _tree(ref_conditionals, reward)
    dev = default_device(device)
    if method != "trust_region":
        V.as_positive_scalar("beta", beta)
    if policy is None or (isinstance(policy, str) and policy == "tabular"):
        model = TabularConditionals(conds, device=dev, dtype=dtype)
    elif isinstance(policy, AutoregressivePolicy):
        if not (joint > 0).all():
            raise ValueError("an autoregressive `policy` needs `ref_conditionals` without zeros")
        model = copy.deepcopy(policy).to(device=dev, dtype=dtype)
    else:
        raise ValueError(
            f"`policy` must be None, 'tabular' or an AutoregressivePolicy; got {policy!r}"
        )
    if method == "trust_region" and not isinstance(model, TabularConditionals):
        raise ValueError("`method` 'trust_region' needs a tabular `policy`")
    target = optimal_policy(joint.reshape(1, -1), rew.reshape(1, -1), beta)
    pb = Problem.from_numpy(joint.reshape(1, -1), rew.reshape(1, -1), beta, dev, dtype)
    if kl_level not in ("sequence", "token"):
        raise ValueError(f"`kl_level` must be 'sequence' or 'token'; got {kl_level!r}")
    if kl_level == "token":
        if method not in ("reinforce", "ppo", "grpo"):
            raise ValueError(
                f"`kl_level` 'token' applies to 'reinforce', 'ppo' and 'grpo'; got method {method!r}"
            )
        logs = [
            torch.as_tensor(np.where(c > 0, np.log(np.where(c > 0, c, 1.0)), -np.inf))
            for c in conds
        ]
        pb.logq_tokens = token_log_probs_from_conditionals(logs).unsqueeze(0).to(dev, dtype)
    target_t = torch.as_tensor(target, dtype=dtype, device=dev)

    def set_joint(new):
        model.set_conditionals(sequences.from_joint(new.reshape(joint.shape)))

    hist, sps = _train(
        model, pb, target_t, method, steps, seed, lr, schedule, progress, o, set_joint, None
    )
    return FitResult(model.conditionals(), hist, target.reshape(joint.shape), model, method, sps)


def fit_reference(
    ref_conditionals,
    *,
    steps: int = 300,
    seed: int = 0,
    device=None,
    hidden: int = 32,
    n_samples: int | None = None,
    lr: float = 0.03,
    progress: bool = False,
    dtype: torch.dtype = torch.float64,
) -> FitResult:
    r"""Supervised fine-tuning: fit an autoregressive model to a token tree by maximum likelihood.

    .. math:: \min_\theta\; -\mathbb{E}_{a\sim\pi_{ref}}[\log\pi_\theta(a)]

    Parameters
    ----------
    ref_conditionals : list of array_like
        The distribution to imitate (``klpolicy.sequences`` layout); the
        reward is not needed.
    steps, seed, device, lr, progress, dtype
        As in :func:`fit_policy` (``seed`` also seeds the initial weights).
    hidden : int, optional
        GRU width.
    n_samples : int, optional
        Fit a finite data set of this many sequences drawn from the reference
        (seeded); by default the exact cross-entropy (an infinite data set).

    Returns
    -------
    FitResult
        ``.model`` is the fitted model (use it as ``policy=`` of
        :func:`fit_sequence_policy`), ``.policy`` its conditionals, ``.target``
        the reference joint; ``history["kl"]`` is ``KL(ref || model)``.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.torch import fit_reference
    >>> ref = [np.array([0.7, 0.3]), np.array([[0.9, 0.1], [0.2, 0.8]])]
    >>> sft = fit_reference(ref, steps=200, device="cpu")
    >>> float(sft.history["kl"][-1]) < 1e-3
    True
    """
    steps = V.as_positive_int("steps", steps, hi=V.MAX_LOOP_COUNT)
    progress = V.as_bool("progress", progress)
    tree = V.as_token_tree("ref_conditionals", ref_conditionals)
    _, _, joint = _tree(tree, np.zeros((tree[0].shape[-1],) * len(tree)))
    dev = default_device(device)
    vocab, length = joint.shape[0], joint.ndim
    model = AutoregressivePolicy(vocab, length, hidden=hidden, seed=seed, device=dev, dtype=dtype)
    weights = joint.reshape(1, -1)
    if n_samples is not None:
        n = V.as_positive_int("n_samples", n_samples, hi=V.MAX_LOOP_COUNT)
        counts = np.random.default_rng(seed).multinomial(n, weights[0] / weights[0].sum())
        weights = (counts / n)[None, :]
    w = torch.as_tensor(weights, dtype=dtype, device=dev)
    q = torch.as_tensor(joint.reshape(1, -1), dtype=dtype, device=dev)
    lr = V.as_positive_scalar("lr", lr)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: max(0.0, 1.0 - i / steps))
    rows = []
    start = time.perf_counter()
    for i in range(steps):
        lp = model.log_probs()
        loss = -(w * torch.where(w > 0, lp, torch.zeros_like(lp))).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            lp = model.log_probs()
            p = lp.exp()
            zero = torch.zeros_like(q)
            kl = (
                q
                * (
                    torch.where(q > 0, torch.log(torch.where(q > 0, q, 1)), zero)
                    - torch.where(q > 0, lp, zero)
                )
            ).sum()
            dist = 0.5 * (p - q).abs().sum()
        rows.append([float(loss.detach()), float("nan"), float(kl), float(dist), float("nan")])
        _progress(i, steps, float(dist), progress)
    sps = steps / (time.perf_counter() - start)
    table = np.array(rows)
    _check_diverged(table[:, 3], steps, lr)
    hist = dict(zip(("loss", "reward", "kl", "distance", "beta"), table.T, strict=True))
    return FitResult(model.conditionals(), hist, joint, model, "sft", sps)
