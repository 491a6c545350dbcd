r"""The expected advantage of one sample of a group, exactly, for every group baseline and scale.

A trainer draws a group of :math:`G` completions :math:`y_1, \dots, y_G \sim \pi` and
turns their rewards :math:`v_i = v(y_i)` into advantages. Conditioned on one member,
:math:`y_1 = y`, the other :math:`G - 1` are independent draws from :math:`\pi`, and
only their counts :math:`c` over the distinct values of :math:`v` matter:

.. math::

    a(y) = \mathbb{E}[A_1 \mid y_1 = y]
         = \sum_{c} \binom{G-1}{c}\, \prod_k q_k^{c_k}\; A\big(v(y), c\big),

with :math:`q_k` the probability of the :math:`k`-th distinct value. For the group mean
:math:`m = (v(y) + c\cdot v)/G` (it includes the sample) and
:math:`A = v(y) - m`, the sum is :math:`a(y) = \tfrac{G-1}{G}(v(y) - \mathbb{E}_\pi v)`; for
the leave-one-out baseline it is :math:`v(y) - \mathbb{E}_\pi v`; dividing by the group's
standard deviation (unbiased, plus a constant, as TRL 1.16.0 does) has no closed form,
and the sum over the :math:`\binom{G+K-2}{K-1}` count vectors of the :math:`K` distinct
values is done exactly.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
from numpy.typing import NDArray

from ..core.internal import special

__all__ = ["BASELINES", "MAX_COMPOSITIONS", "SCALES", "group_advantage"]

#: How a group's rewards are centred: ``"mean"`` (the group mean, the sample included:
#: GRPO), ``"loo"`` (the mean of the other members: RLOO), ``"none"``.
BASELINES = ("mean", "loo", "none")
#: How they are scaled: ``"none"``, or ``"std"`` (divided by the group's unbiased standard
#: deviation plus a constant).
SCALES = ("none", "std")
#: The most count vectors one exact sum may take (about 0.1-0.3 s of numpy each million).
MAX_COMPOSITIONS = 4_000_000


def compositions_count(total: int, parts: int) -> int:
    """``C(total + parts - 1, parts - 1)``: the count vectors of ``parts`` values summing to ``total``."""
    from math import comb

    return comb(total + parts - 1, parts - 1)


@functools.lru_cache(maxsize=32)
def _compositions(total: int, parts: int) -> NDArray[np.int64]:
    """All count vectors of ``parts`` non-negative integers summing to ``total`` (stars and bars)."""
    if parts == 1:
        out = np.array([[total]], dtype=np.int64)
    else:
        bars = np.array(
            list(itertools.combinations(range(total + parts - 1), parts - 1)), dtype=np.int64
        ).reshape(-1, parts - 1)
        edges = np.concatenate(
            [np.full((len(bars), 1), -1), bars, np.full((len(bars), 1), total + parts - 1)], axis=1
        )
        out = np.diff(edges, axis=1) - 1
    out.setflags(write=False)
    return out


def _levels(prob: NDArray, value: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """(distinct values on the support, their probabilities, each outcome's level index)."""
    sup = prob > 0
    levels, index = np.unique(value[sup], return_inverse=True)
    q = np.bincount(index, weights=prob[sup], minlength=levels.size)
    full = np.full(value.shape, -1, dtype=np.int64)
    full[sup] = index
    return levels, q, full


def group_advantage(
    prob: NDArray,
    value: NDArray,
    num_generations: int | None,
    *,
    baseline: str,
    scale: str,
    eps: float = 0.0,
) -> NDArray[np.float64]:
    r"""The expected advantage :math:`a(y)` of a group member that is outcome :math:`y`.

    .. math::

        a(y) = \mathbb{E}_{y_2..y_G \sim \pi}\Big[\frac{v(y) - b}{s}\Big],\quad
        b \in \{\bar v_G,\ \bar v_{G\setminus 1},\ 0\},\quad
        s \in \{1,\ \mathrm{sd}_{G-1}(v_{1..G}) + \epsilon\}

    Parameters
    ----------
    prob : ndarray, shape (n,)
        The policy's probabilities (float64, summing to one).
    value : ndarray, shape (n,)
        The value each outcome gets in the group (its reward, or a shaped reward).
    num_generations : int or None
        ``G >= 2``; ``None`` is the infinite group (the baseline is
        :math:`\mathbb{E}_\pi v`, the scale the population standard deviation).
    baseline : {"mean", "loo", "none"}
        The group mean (sample included), the leave-one-out mean, or no baseline.
    scale : {"none", "std"}
        No scaling, or division by the group's unbiased standard deviation plus ``eps``.
    eps : float
        The constant added to the standard deviation (TRL 1.16.0: 1e-4).

    Returns
    -------
    ndarray, shape (n,)
        :math:`a(y)` for every outcome (0 off the support of ``prob``).

    Raises
    ------
    ValueError
        When the exact sum would take more than :data:`MAX_COMPOSITIONS` count vectors
        (the message names ``num_generations`` and the number of distinct values).

    Notes
    -----
    A group whose values are all equal has advantage 0 (TRL: :math:`0/(0 + \epsilon)`).
    With ``scale="std"`` the values are taken in units of their largest magnitude (the
    advantage does not change when :math:`v` and :math:`\epsilon` are divided by the
    same number), so that no square overflows.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.dynamics.groups import group_advantage
    >>> p, r = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    >>> group_advantage(p, r, 4, baseline="mean", scale="none")  # (G-1)/G (r - E r)
    array([ 0.375, -0.375])
    >>> group_advantage(p, r, 2, baseline="mean", scale="std")  # (+-1/2) / (1/sqrt 2) half the time
    array([ 0.35355339, -0.35355339])
    """
    levels, q, index = _levels(prob, value)
    out = np.zeros(value.shape, dtype=np.float64)
    if levels.size == 1:
        if baseline == "none":
            out[index >= 0] = levels[0]
        return out
    unit = 1.0
    if scale == "std":
        unit = float(np.max(np.abs(levels)))
        levels, eps = levels / unit, eps / unit
    if num_generations is None:
        a = _infinite(q, levels, baseline, scale, eps)
    else:
        a = _finite(q, levels, num_generations, baseline, scale, eps)
    out[index >= 0] = a[index[index >= 0]]
    return out


def _infinite(q, v, baseline, scale, eps):
    """The infinite group: b = E v (both means), s = sd_pi(v) + eps."""
    mean = q @ v
    a = v - (0.0 if baseline == "none" else mean)
    if scale == "std":
        sd = np.sqrt(q @ (v - mean) ** 2)
        a = np.divide(a, sd + eps, out=np.zeros_like(a), where=(sd + eps) > 0)
    return a


def _finite(q, v, G, baseline, scale, eps):
    """The exact sum over the count vectors of the other G - 1 members."""
    K = v.size
    M = compositions_count(G - 1, K)
    if M > MAX_COMPOSITIONS:
        raise ValueError(
            f"`num_generations` {G} with {K} distinct rewards on the policy's support needs "
            f"{M:,} group compositions, more than the {MAX_COMPOSITIONS:,} of one exact sum; "
            "use fewer generations or reward levels, or num_generations=None (the infinite group)"
        )
    if scale == "none" and baseline != "none":
        # linear in the others' values: the closed forms (G-1)/G (v - E v) and v - E v
        factor = (G - 1) / G if baseline == "mean" else 1.0
        return factor * (v - q @ v)
    if scale == "none":
        return v.copy()
    c = _compositions(G - 1, K)
    with np.errstate(divide="ignore"):
        logq = np.log(q)
    terms = np.where(c > 0, c * logq, 0.0)
    logw = special.gammaln(G) - special.gammaln(c + 1).sum(1) + terms.sum(1)
    w = np.exp(logw)
    others = c @ v  # (M,)
    a = np.empty(K)
    for k in range(K):
        total = v[k] + others
        m = total / G
        b = {"mean": m, "loo": others / (G - 1), "none": 0.0}[baseline]
        dev = v[None, :] - m[:, None]
        ss = (v[k] - m) ** 2 + (c * dev**2).sum(1)
        s = np.sqrt(ss / (G - 1)) + eps
        num = v[k] - b
        adv = np.divide(num, s, out=np.zeros_like(m), where=s > 0)
        a[k] = w @ adv
    return a
