"""The mean-field path of a trainer rule: its exact expected step, iterated."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..core import entropy, kl_divergence
from ..core.internal import validation as V
from . import _inputs
from .landing import landing_point
from .results import Trajectory
from .solvers import _beta_fit
from .update import expected_update

__all__ = ["trajectory"]


def trajectory(
    rule: str,
    ref: ArrayLike,
    reward: ArrayLike,
    beta: float,
    *,
    steps: int,
    lr: float,
    optimizer: str = "sgd",
    sync_ref_model: bool = False,
    ref_model_mixup_alpha: float = 0.6,
    ref_model_sync_steps: int = 512,
    **options,
) -> Trajectory:
    r"""The mean-field path of ``rule`` from the reference: the exact expected step, iterated.

    .. math::

        \theta_{t+1} = \theta_t + \eta\, u(\theta_t)\ \ (\text{sgd}),\qquad
        \theta_{t+1} = \theta_t + \eta\, u(\theta_t) / \pi_t\ \ (\text{natural})

    with :math:`u` :func:`klpolicy.dynamics.expected_update` (the natural step solves
    :math:`F d = u` for the softmax's Fisher matrix :math:`F = \mathrm{diag}\,\pi - \pi\pi^\top`).
    With ``sync_ref_model`` the reference moves as TRL 1.16.0's ``SyncRefModelCallback``
    (and TR-DPO, Gorbatovski et al. 2024, arXiv:2404.09656) moves it: every
    ``ref_model_sync_steps`` steps, :math:`\pi_{ref} \leftarrow \alpha\pi + (1-\alpha)\pi_{ref}`
    (:math:`\alpha` = ``ref_model_mixup_alpha``; 1 is a hard reset), mixing the
    probabilities as TRL mixes the weights of the two models' heads only in the
    tabular case (for a network TRL mixes parameters, not laws).

    Parameters
    ----------
    rule, ref, reward, beta, **options
        As in :func:`klpolicy.dynamics.expected_update`.
    steps : int
        The number of steps.
    lr : float
        The step size, ``> 0``.
    optimizer : {"sgd", "natural"}
        Plain gradient steps in the logits, or natural-gradient steps.
    sync_ref_model : bool
        Move the reference (TRL's option of the same name).
    ref_model_mixup_alpha : float
        In ``[0, 1]``: the weight of the policy in the new reference.
    ref_model_sync_steps : int
        Steps between two moves of the reference.

    Returns
    -------
    Trajectory
        Per step: the policy, ``E_pi r``, the entropy, ``KL(pi || ref0)``, the KL to the
        landing point, ``beta_fit`` (the beta of the pi* of the initial reference with the
        policy's expected reward: the pi* nearest the policy), the reference in use.

    Raises
    ------
    ValueError
        For bad ``steps``, ``lr``, ``optimizer`` or reference-sync arguments, and as
        :func:`klpolicy.dynamics.expected_update`.

    Notes
    -----
    A natural step of a rule whose update is :math:`\pi\odot(c(r - \mathbb{E}r) - \beta'(\ell -
    \mathrm{KL}))` adds a multiple of ``r`` to the logits: the path stays in the pi* family
    and ``beta_fit`` is its exact beta. With a hard reset every ``k`` steps the effective
    beta to the initial reference obeys :math:`1/\beta_{n+1} = 1/\beta_n + 1/\beta_{eff}`
    at convergence between resets: it goes to 0 (the greedy limit).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.dynamics import trajectory
    >>> tr = trajectory("rloo", [0.5, 0.5], [1.0, 0.0], 0.5, steps=400, lr=2.0, optimizer="natural")
    >>> float(tr.beta_fit[-1]).__round__(6), float(tr.kl_to_landing[-1]) < 1e-12
    (0.5, True)
    """
    _inputs.rule_and_options(rule, options)
    q, r, b = _inputs.problem(ref, reward, beta, rule)
    n_steps = V.as_count("steps", steps, lo=1)
    eta = V.as_scalar("lr", lr, "(0, inf)")
    opt = V.as_choice("optimizer", optimizer, ("sgd", "natural"))
    sync = V.as_bool("sync_ref_model", sync_ref_model)
    alpha = V.as_closed_interval("ref_model_mixup_alpha", ref_model_mixup_alpha)
    every = V.as_count("ref_model_sync_steps", ref_model_sync_steps, lo=1)
    land = landing_point(rule, q, r, b, **options)
    sup = q > 0
    th = np.where(sup, np.log(np.where(sup, q, 1.0)), -np.inf)
    cur_ref = q.copy()
    pis, refs = [], []
    for t in range(n_steps + 1):
        e = np.exp(th - th[sup].max())
        pi = e / e.sum()
        pis.append(pi)
        refs.append(cur_ref.copy())
        if t == n_steps:
            break
        u = expected_update(rule, th, cur_ref, r, b, **options)
        if opt == "natural":
            with np.errstate(divide="ignore", invalid="ignore"):
                u = np.where(pi > 0, u / pi, 0.0)
        th = np.where(sup, th + eta * u, -np.inf)
        if sync and (t + 1) % every == 0:
            e = np.exp(th - th[sup].max())
            cur_ref = alpha * (e / e.sum()) + (1 - alpha) * cur_ref
    P = np.array(pis)
    to_land = (
        np.array([float(kl_divergence(p, land.policy)) for p in P])
        if land.policy is not None
        else np.full(len(P), np.nan)
    )
    return Trajectory(
        policy=P,
        reward=P @ r,
        entropy=np.array([float(entropy(p)) for p in P]),
        kl_to_ref=np.array([float(kl_divergence(p, q)) for p in P]),
        kl_to_landing=to_land,
        beta_fit=np.array([_beta_fit(p, q, r) for p in P]),
        ref=np.array(refs),
        landing=land,
    )
