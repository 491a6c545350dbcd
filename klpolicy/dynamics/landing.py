"""Where a trainer rule lands: the zero of its expected update that training reaches."""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.typing import ArrayLike

from . import _inputs
from .results import Landing

__all__ = ["landing_point"]


def landing_point(rule: str, ref: ArrayLike, reward: ArrayLike, beta: float, **options) -> Landing:
    r"""Where on-policy training with ``rule`` converges from the reference, and why.

    .. math::

        \text{GRPO, no scale:}\ \pi^*_{\beta G/(G-1)};\qquad
        \text{RLOO:}\ \pi^*_\beta;\qquad
        \text{GRPO, std, } G = \infty:\ \pi^*_{\beta'},\ \beta' = \beta\,(\mathrm{sd}_{\pi^*_{\beta'}}(r) + 10^{-4})

    Closed forms where they exist; otherwise the exact zeros of
    :func:`klpolicy.dynamics.expected_update` (a finite group with the standard-deviation
    scale; RLOO with ``normalize_advantages``), each classified by the eigenvalues of the
    update's Jacobian. With ``beta = 0`` (TRL 1.16.0 GRPO's default) nothing holds the
    policy: it goes to the greedy limit.

    Parameters
    ----------
    rule, ref, reward, beta, **options
        As in :func:`klpolicy.dynamics.expected_update`.

    Returns
    -------
    Landing
        ``.policy`` (zeros off the reference's support), ``.beta_eff`` (the beta at which the
        policy is pi*, else None), ``.interior``, ``.stable``, ``.kl``, ``.kind``,
        ``.points`` (every fixed point found) and ``.reason``; ``str()`` says it in a line.

    Raises
    ------
    ValueError
        As :func:`klpolicy.dynamics.expected_update`.

    Notes
    -----
    Training starts at the reference (TRL's policy is initialised from the reference
    model). Several stable points are all reported in ``.points``; the landing point is the
    first found from the reference (along the pi* family for the infinite group: the root
    of largest beta'). The derivations are in ``docs/derivations/dynamics.md``.

    References
    ----------
    .. [1] Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", 2025,
       arXiv:2503.20783 (Dr. GRPO: the std scale and the length normalisation).
    .. [2] Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning
       Language Models", 2025, arXiv:2505.22617.

    Examples
    --------
    >>> from klpolicy.dynamics import landing_point
    >>> lp = landing_point("grpo", [0.5, 0.5], [1.0, 0.0], 0.5, num_generations=2,
    ...                    scale_rewards="none")
    >>> lp.beta_eff, lp.policy.round(4)
    (1.0, array([0.7311, 0.2689]))
    >>> landing_point("rloo", [0.5, 0.5], [1.0, 0.0], 0.5).beta_eff
    0.5
    """
    row, o = _inputs.rule_and_options(rule, options)
    q, r, b = _inputs.problem(ref, reward, beta, rule)
    sup = q > 0
    got = row.land(q[sup], r[sup], b, o)
    return _on_full_row(got, sup)


def _embed(pi, sup):
    if pi is None:
        return None
    out = np.zeros(sup.shape)
    out[sup] = pi
    return out


def _on_full_row(got: Landing, sup) -> Landing:
    points = tuple(dataclasses.replace(p, policy=_embed(p.policy, sup)) for p in got.points)
    return dataclasses.replace(got, policy=_embed(got.policy, sup), points=points)
