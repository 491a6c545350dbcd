r"""Capability retention: what the KL budget guarantees on a task the reward does not see.

One outcome space, a reward on task A and a score on task B that the reward
ignores. Under :math:`\pi^*_\beta` the task-B score moves only through the
reference's coupling of the two; whatever the coupling, a KL budget caps the
loss: :func:`worst_case_drop` is the exact largest loss of any policy within the
budget, itself a tilt (by ``-score``), and Pinsker's inequality bounds it by
:math:`(\max s - \min s)\sqrt{\mathrm{KL}/2}`. :func:`retention_slope` is the
initial slope against :math:`\sqrt{\mathrm{KL}}`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import beta_for_kl, max_kl
from ..core.internal import tilt as _tilt
from ..core.internal import validation as V
from ._inputs import as_beta_grid

__all__ = [
    "RetentionCurve",
    "retention_curve",
    "retention_slope",
    "worst_case_drop",
]


class RetentionCurve(NamedTuple):
    """Task-B score of :math:`\\pi^*_\\beta` and its guarantees; arrays of the grid's shape."""

    beta: NDArray
    kl: NDArray
    reward: NDArray
    score: NDArray
    worst_case_score: NDArray
    pinsker_score: NDArray


def _one_problem(ref, reward, name="reward"):
    """Validate one 1-D problem; ``name`` is the second argument's name in messages."""
    ref_a = V.as_probabilities("ref", ref, -1).astype(np.float64)
    if ref_a.ndim != 1:
        raise ValueError(f"`ref` must be 1-D (one problem); got shape {np.shape(ref)}")
    r = V.as_rewards(name, reward, -1).astype(np.float64)
    if r.shape != ref_a.shape:
        raise ValueError(f"`{name}` must have shape {ref_a.shape}, like `ref`; got {r.shape}")
    return ref_a, r


def _worst_drop(ref_a, s, kl):
    """Exact worst-case drop at validated ref and score, for a flat kl array."""
    ref_n = ref_a / ref_a.sum()
    base = float(np.sum(ref_n * s))
    kmax = float(max_kl(ref_a, -s))
    k = np.minimum(kl, kmax)
    beta = np.atleast_1d(np.asarray(beta_for_kl(ref_a, -s, k), dtype=np.float64))
    n = beta.size
    t = _tilt(
        np.broadcast_to(ref_a, (n, ref_a.size)), np.broadcast_to(-s, (n, s.size)), beta[:, None]
    )
    # E_ref[s] - E_pi[s] = -sum ref expm1(u) (s - c), u = log(pi / ref), for any c: summed
    # this way, not as a difference of two expectations of size |s| whose rounding swamps a
    # drop of sqrt(2 Var kl) (1e-15 |s| at kl = 1e-30); c = E_ref[s] keeps the terms small
    sup = ref_n > 0
    with np.errstate(invalid="ignore"):
        terms = np.where(sup, ref_n * np.expm1(t.u) * (s - base), 0.0)
    return -np.sum(terms, -1)


def worst_case_drop(ref: ArrayLike, score: ArrayLike, kl: ArrayLike) -> NDArray[np.float64]:
    r"""The largest loss in expected score of any policy within a KL budget.

    .. math::

        \Delta^\star(\varepsilon) = \max_{\pi:\ \mathrm{KL}(\pi\|\pi_{ref}) \le \varepsilon}
          \mathbb{E}_{\pi_{ref}}[s] - \mathbb{E}_\pi[s]
        = \mathbb{E}_{\pi_{ref}}[s] - \mathbb{E}_{\pi^{-s}_{\lambda}}[s],
        \qquad \pi^{-s}_\lambda \propto \pi_{ref}\, e^{-s/\lambda},\ \mathrm{KL} = \varepsilon

    Parameters
    ----------
    ref : array_like, shape (n,)
        Reference probabilities.
    score : array_like, shape (n,)
        Task-B score of each outcome (finite).
    kl : array_like
        KL budgets in nats, ``>= 0``, any shape; budgets above the largest
        useful one (``max_kl(ref, -score)``) give the greedy worst case
        :math:`\mathbb{E}_{ref}[s] - \min_{supp} s`; ``np.inf`` (no budget)
        gives it too.

    Returns
    -------
    ndarray
        :math:`\Delta^\star`, shape of ``kl``; non-decreasing and concave in
        ``kl``, at most :math:`(\max s - \min s)\sqrt{\mathrm{kl}/2}` (Pinsker)
        and :math:`\approx \sqrt{2\,\mathrm{Var}_{ref}(s)\,\mathrm{kl}}` for small ``kl``.

    Raises
    ------
    ValueError
        For invalid ``ref`` or ``score``, a ``ref`` that is not 1-D, and a
        negative or NaN ``kl``.

    Notes
    -----
    The maximiser of :math:`-\mathbb{E}_\pi[s]` under a KL constraint is the
    KL-regularised optimum for the reward :math:`-s` (Lagrange duality), so the
    worst case is exact: it is computed with :func:`klpolicy.beta_for_kl` on
    ``-score``. This is the safety margin a KL budget buys for every capability
    the reward does not see.

    References
    ----------
    .. [1] Donsker and Varadhan, "Asymptotic evaluation of certain Markov
       process expectations for large time", 1975, Comm. Pure Appl. Math. 28.
    .. [2] Pinsker, "Information and Information Stability of Random Variables
       and Processes", 1964.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.retention import worst_case_drop
    >>> worst_case_drop([0.5, 0.5], [0.0, 1.0], [0.0, 0.1, np.log(2)]).round(6)
    array([0.      , 0.219795, 0.5     ])
    """
    ref_a, s = _one_problem(ref, score, "score")
    k = V.as_kl_budget("kl", kl, allow_inf=True)
    return _worst_drop(ref_a, s, k.reshape(-1)).reshape(k.shape)


def retention_slope(ref: ArrayLike, reward: ArrayLike, score: ArrayLike) -> float:
    r"""Slope of the task-B score of :math:`\pi^*_\beta` against :math:`\sqrt{\mathrm{KL}}` at 0.

    .. math::

        \lim_{\beta\to\infty}
        \frac{\mathbb{E}_{\pi^*_\beta}[s] - \mathbb{E}_{\pi_{ref}}[s]}
             {\sqrt{\mathrm{KL}(\pi^*_\beta\|\pi_{ref})}}
        = \sqrt{2}\,\frac{\mathrm{Cov}_{ref}(r, s)}{\sqrt{\mathrm{Var}_{ref}(r)}}
        = \sqrt{2}\,\rho_{ref}(r, s)\,\sigma_{ref}(s)

    Parameters
    ----------
    ref : array_like, shape (n,)
        Reference probabilities.
    reward : array_like, shape (n,)
        Task-A reward.
    score : array_like, shape (n,)
        Task-B score.

    Returns
    -------
    float
        The slope (0 when the reward is constant on the support). It lies in
        :math:`[-\sqrt2\,\sigma(s), \sqrt2\,\sigma(s)]`; the lower end is the
        worst case of :func:`worst_case_drop`.

    Raises
    ------
    ValueError
        For invalid inputs or a ``ref`` that is not 1-D.

    Notes
    -----
    For large ``beta``, :math:`\mathbb{E}_{\pi^*}[s] - \mathbb{E}_{ref}[s] =
    \mathrm{Cov}(r, s)/\beta + O(\beta^{-2})` and
    :math:`\mathrm{KL} = \mathrm{Var}(r)/(2\beta^2) + O(\beta^{-3})`; eliminating
    ``beta`` gives the slope. The loss of a capability is linear in
    :math:`\sqrt{\mathrm{KL}}`, not in the KL, at small budgets.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, 2022, arXiv:2210.10760 (rewards plotted
       against the square root of the KL).

    Examples
    --------
    >>> from klpolicy.retention import retention_slope
    >>> round(retention_slope([0.5, 0.5], [1.0, 0.0], [0.0, 1.0]), 6)  # -1/sqrt(2)
    -0.707107
    """
    ref_a, r = _one_problem(ref, reward)
    _, s = _one_problem(ref_a, score, "score")
    p = ref_a / ref_a.sum()
    # the slope does not depend on the reward's unit and is linear in the score's: work in
    # units of their largest values on the support, so that no square overflows
    cr = float(np.max(np.abs(np.where(p > 0, r, 0.0))))
    cs = float(np.max(np.abs(np.where(p > 0, s, 0.0))))
    if cr == 0 or cs == 0:
        return 0.0
    r, s = np.where(p > 0, r / cr, 0.0), np.where(p > 0, s / cs, 0.0)
    mr, ms = np.sum(p * r), np.sum(p * s)
    var = float(np.sum(p * (r - mr) ** 2))
    if var == 0:
        return 0.0
    return float(math.sqrt(2.0) * np.sum(p * (r - mr) * (s - ms)) / math.sqrt(var) * cs)


def retention_curve(
    ref: ArrayLike,
    reward: ArrayLike,
    score: ArrayLike,
    *,
    beta: ArrayLike | None = None,
    kl: ArrayLike | None = None,
) -> RetentionCurve:
    r"""Task-A reward and task-B score of :math:`\pi^*_\beta` along a grid, with guarantees.

    .. math::

        \mathbb{E}_{\pi^*_\beta}[s] \;\ge\; \mathbb{E}_{ref}[s] - \Delta^\star(\mathrm{KL})
        \;\ge\; \mathbb{E}_{ref}[s] - (\max s - \min s)\sqrt{\mathrm{KL}/2}

    Parameters
    ----------
    ref : array_like, shape (n,)
        Reference probabilities over outcomes (e.g. a flattened joint over
        task-A and task-B behaviours).
    reward : array_like, shape (n,)
        Task-A reward (the only thing optimised).
    score : array_like, shape (n,)
        Task-B score (not seen by the reward).
    beta, kl : array_like
        Exactly one: a grid of coefficients, or of KL budgets (turned into
        ``beta`` by :func:`klpolicy.beta_for_kl`).

    Returns
    -------
    RetentionCurve
        Named tuple ``(beta, kl, reward, score, worst_case_score,
        pinsker_score)``, each of the grid's shape: the expected task-A reward
        and task-B score of :math:`\pi^*_\beta`, the lowest task-B score any
        policy with that KL can have (:func:`worst_case_drop`) and Pinsker's
        lower bound (range taken on the reference's support).

    Raises
    ------
    ValueError
        Unless exactly one of ``beta`` and ``kl`` is given; as in
        :func:`worst_case_drop` and :func:`klpolicy.beta_for_kl`.

    References
    ----------
    .. [1] Ouyang et al., "Training language models to follow instructions
       with human feedback", 2022, arXiv:2203.02155 (the alignment tax).

    Examples
    --------
    >>> from klpolicy.retention import retention_curve
    >>> c = retention_curve([0.5, 0.5], [1.0, 0.0], [0.0, 1.0], beta=[1.0])
    >>> c.score.round(6), c.worst_case_score.round(6)  # pure conflict: the worst case
    (array([0.268941]), array([0.268941]))
    """
    if (beta is None) == (kl is None):
        raise ValueError("give exactly one of `beta` and `kl`")
    ref_a, r = _one_problem(ref, reward)
    _, s = _one_problem(ref_a, score, "score")
    grid = (
        np.asarray(beta_for_kl(ref_a, r, kl), dtype=np.float64)
        if kl is not None
        else as_beta_grid("beta", beta)
    )
    flat = grid.reshape(-1, 1)
    n = flat.shape[0]
    t = _tilt(np.broadcast_to(ref_a, (n, ref_a.size)), np.broadcast_to(r, (n, r.size)), flat)
    kls = t.kl[:, 0]
    p = ref_a / ref_a.sum()
    base = float(np.sum(p * s))
    sup = s[ref_a > 0]
    shape = grid.shape
    return RetentionCurve(
        beta=grid.copy(),
        kl=kls.reshape(shape),
        reward=t.mean[:, 0].reshape(shape),
        score=np.sum(t.pi * s, -1).reshape(shape),
        worst_case_score=(base - _worst_drop(ref_a, s, kls)).reshape(shape),
        pinsker_score=(base - (sup.max() - sup.min()) * np.sqrt(kls / 2)).reshape(shape),
    )
