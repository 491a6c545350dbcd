r"""Calibration of the KL-regularised optimum on a question-answering table, exactly.

Questions :math:`j` with weights :math:`w_j`, answers :math:`a`, a policy
:math:`\pi(a\mid j)` that samples an answer and reports its own probability
:math:`\pi(a\mid j)` as confidence, and the truth law :math:`t(a\mid j)` =
P(answer ``a`` is correct). The reference is calibrated when ``truth = ref``.
:func:`brier_score` and :func:`expected_calibration_error` are the exact
population values; :func:`calibration_curve` follows them along
:math:`\pi^*_\beta` (one ``beta`` shared by all questions), and
:func:`calibration_threshold` finds the KL at which a calibration measure
reaches a multiple of the reference's (by default: where the Brier score doubles).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import prepare as _prepare
from ..core.internal import tilt as _tilt
from ..core.internal import validation as V
from ._inputs import as_beta_grid

__all__ = [
    "CalibrationCurve",
    "CalibrationThreshold",
    "brier_score",
    "calibration_curve",
    "calibration_threshold",
    "expected_calibration_error",
]


class CalibrationCurve(NamedTuple):
    """Calibration of :math:`\\pi^*_\\beta` along a grid; each array has the grid's shape."""

    beta: NDArray
    kl: NDArray
    ece: NDArray
    brier: NDArray
    confidence: NDArray
    accuracy: NDArray


class CalibrationThreshold(NamedTuple):
    """Where a calibration measure first reaches ``factor`` times its reference value."""

    beta: float
    kl: float
    value: float
    reference_value: float


def _table(name: str, x: ArrayLike) -> NDArray[np.float64]:
    a = V.as_probabilities(name, x, -1).astype(np.float64)
    return a.reshape(-1, a.shape[-1])


def _weights(weights: ArrayLike | None, m: int) -> NDArray[np.float64]:
    if weights is None:
        return np.full(m, 1.0 / m)
    w = V.as_probabilities("weights", weights, -1).astype(np.float64)
    if w.ndim != 1 or w.size != m:
        raise ValueError(f"`weights` must have shape ({m},), one per question; got {w.shape}")
    return w


def _bins(bins) -> int:
    return V.as_positive_int("bins", bins, hi=V.MAX_LOOP_COUNT)


def _qa(pi, truth, weights):
    p = _table("pi", pi)
    t = _table("truth", truth)
    if p.shape != t.shape:
        if p.shape[-1] != t.shape[-1]:
            raise ValueError(
                "`truth` must have the same number of answers as `pi`; "
                f"got {t.shape[-1]} and {p.shape[-1]}"
            )
        raise ValueError(f"`truth` must have the shape of `pi`; got {t.shape} and {p.shape}")
    return p, t, _weights(weights, p.shape[0])


def _excess(x):
    """``sum(x) - 1`` per row, exact to rounding of the small parts: (max - 1) + the others."""
    is_top = np.arange(x.shape[-1]) == np.argmax(x, axis=-1)[..., None]
    others = np.sum(np.where(is_top, 0.0, x), -1, keepdims=True)
    top = np.sum(np.where(is_top, x, 0.0), -1, keepdims=True)
    return (top - 1.0) + others, is_top, others


def _diff(a, b):
    """``a/sum(a) - b/sum(b)`` per entry, exact where the difference is tiny."""
    da, _, _ = _excess(a)
    db, _, _ = _excess(b)
    return ((a - b) + (a * db - b * da)) / ((1.0 + da) * (1.0 + db))


def _brier(p, t, w, d=None):
    # Rows are taken as exactly normalised (as kl_divergence does). Summed as
    # sum (p - t)^2 + sum t (1 - t), non-negative terms, where the expanded form
    # sum p^2 - 2 sum p t + 1 cancels to rounding noise (p = t = [1 - 1e-10, 1e-10] has
    # Brier 2e-10, near-equal p and t a (p - t)^2 of 1e-20); 1 - t of a row's largest entry
    # is the sum of the others. ``d``: p - t when the caller knows it more precisely.
    dt, is_top, others = _excess(t)
    if d is None:
        d = _diff(p, t)
    one_minus = np.where(is_top, others, (1.0 + dt) - t)
    spread = np.sum(t * one_minus, -1) / (1.0 + dt[..., 0]) ** 2
    per_q = np.sum(d * d, -1) + spread
    return np.sum(w * per_q, -1)


def _ece(p, t, w, bins):
    """Exact binned ECE; p, t (..., m, K), w (m,)."""
    # rows taken as exactly normalised (as in _brier): t - p is the difference of the
    # normalised rows, exact where it is tiny (near-calibrated policies)
    dp, _, _ = _excess(p)
    pn = p / (1.0 + dp)
    mass = w[:, None] * pn
    # bin b holds ((b-1)/M, b/M]; edges b/M are correctly rounded, so 0.7 lands in (0.6, 0.7]
    edges = np.arange(bins + 1) / bins
    idx = np.clip(np.searchsorted(edges, pn, side="left") - 1, 0, bins - 1)
    gap = mass * _diff(t, p)
    flat_gap = gap.reshape((*gap.shape[:-2], -1))
    flat_idx = idx.reshape(flat_gap.shape)
    out = np.zeros((*flat_gap.shape[:-1], bins))
    np.add.at(out, (*np.indices(flat_idx.shape)[:-1], flat_idx), flat_gap)
    return np.abs(out).sum(-1)


def brier_score(pi: ArrayLike, truth: ArrayLike, *, weights: ArrayLike | None = None) -> float:
    r"""Exact expected multi-class Brier score of a question-answering policy.

    .. math::

        \mathrm{BS}(\pi) = \sum_j w_j\, \mathbb{E}_{a^\star\sim t(\cdot\mid j)}
          \sum_a \big(\pi(a\mid j) - 1[a = a^\star]\big)^2
        = \sum_j w_j \Big(\sum_a \pi(a\mid j)^2 - 2\sum_a \pi(a\mid j)\, t(a\mid j) + 1\Big)

    Parameters
    ----------
    pi : array_like, shape (m, K) or (K,)
        The policy's answer probabilities, one row per question.
    truth : array_like, same shape
        :math:`t(a\mid j)`, the probability that answer ``a`` is the correct
        one (``truth = ref`` for a calibrated reference).
    weights : array_like, shape (m,), optional
        Question weights summing to 1 (default uniform).

    Returns
    -------
    float
        In [0, 2]; 0 only for a policy certain of an answer that is surely right.

    Raises
    ------
    ValueError
        For invalid probability rows in ``pi``, ``truth`` or ``weights``, or
        shapes that differ.

    Notes
    -----
    A strictly proper score: for fixed ``truth`` it is minimised by
    ``pi = truth``, with value :math:`1 - \sum_a t^2` (the refinement term of
    Murphy's decomposition). Any sharpening of a calibrated reference raises it.

    References
    ----------
    .. [1] Brier, "Verification of Forecasts Expressed in Terms of
       Probability", 1950, Monthly Weather Review 78(1).

    Examples
    --------
    >>> from klpolicy.calibration import brier_score
    >>> round(brier_score([0.8, 0.2], [0.8, 0.2]), 6)  # 1 - 0.68
    0.32
    >>> round(brier_score([1.0, 0.0], [0.8, 0.2]), 6)
    0.4
    """
    p, t, w = _qa(pi, truth, weights)
    return float(_brier(p, t, w))


def expected_calibration_error(
    pi: ArrayLike, truth: ArrayLike, *, weights: ArrayLike | None = None, bins: int = 10
) -> float:
    r"""Exact population expected calibration error of the sampled answer.

    .. math::

        \mathrm{ECE} = \sum_{b=1}^{M} \Big|\sum_{(j,a):\, \pi(a\mid j)\in I_b}
          w_j\,\pi(a\mid j)\,\big(t(a\mid j) - \pi(a\mid j)\big)\Big|,
        \qquad I_b = \big(\tfrac{b-1}{M}, \tfrac{b}{M}\big]

    Parameters
    ----------
    pi, truth, weights
        As in :func:`brier_score`.
    bins : int, optional
        Number ``M`` of equal-width confidence bins (default 10).

    Returns
    -------
    float
        In [0, 1]; 0 when every bin's accuracy equals its mean confidence.

    Raises
    ------
    ValueError
        As in :func:`brier_score`, and for ``bins`` not an integer ``>= 1``.

    Notes
    -----
    The policy draws answer :math:`a` with probability :math:`\pi(a\mid j)`
    and reports that number as its confidence; the event is right with
    probability :math:`t(a\mid j)`. The sum is the usual
    :math:`\sum_b P(b)\,|\mathrm{acc}(b) - \mathrm{conf}(b)|` computed from the
    population, not from samples. A calibrated reference (``truth = ref``)
    has ECE 0 for every binning. ECE is piecewise smooth in ``pi``: it jumps
    when an answer's confidence crosses a bin edge.

    References
    ----------
    .. [1] Guo et al., "On Calibration of Modern Neural Networks", 2017,
       arXiv:1706.04599.
    .. [2] OpenAI, "GPT-4 Technical Report", 2023, arXiv:2303.08774, fig. 8
       (post-training hurts calibration).

    Examples
    --------
    >>> from klpolicy.calibration import expected_calibration_error
    >>> expected_calibration_error([0.8, 0.2], [0.8, 0.2])
    0.0
    >>> round(expected_calibration_error([0.9, 0.1], [0.8, 0.2]), 6)  # |0.9 - 0.8|
    0.1
    """
    p, t, w = _qa(pi, truth, weights)
    return float(_ece(p, t, w, _bins(bins)))


def _qa_problem(ref, reward, truth, weights):
    ref_a, rew_a = _prepare(ref, reward, -1)
    ref_a = ref_a.astype(np.float64).reshape(-1, ref_a.shape[-1])
    rew_a = np.broadcast_to(rew_a.astype(np.float64), ref_a.shape)
    t = ref_a if truth is None else _table("truth", truth)
    if t.shape != ref_a.shape:
        raise ValueError(f"`truth` must have the shape of `ref`; got {t.shape} and {ref_a.shape}")
    return ref_a, rew_a, t, _weights(weights, ref_a.shape[0])


def _calibration_at(ref_a, rew_a, t, w, grid, bins):
    flat = np.asarray(grid, dtype=np.float64).reshape(-1, 1, 1)
    n = flat.shape[0]
    tl = _tilt(
        np.broadcast_to(ref_a, (n, *ref_a.shape)), np.broadcast_to(rew_a, (n, *ref_a.shape)), flat
    )
    p = tl.pi
    kl = np.sum(w * tl.kl[..., 0], -1)
    # pi - t = ref_n expm1(u) + (ref_n - t_n): the policy's offset from its reference from
    # its log-ratios, exact where pi rounded to floats would not resolve it (Brier 1e-18)
    dr, _, _ = _excess(ref_a)
    ref_n = ref_a / (1.0 + dr)
    with np.errstate(invalid="ignore"):
        d = np.where(ref_a > 0, ref_n * np.expm1(tl.u), 0.0) + _diff(ref_a, t)
    return (
        kl,
        _ece(p, t, w, bins),
        _brier(p, t, w, d),
        np.sum(w * np.sum(p * p, -1), -1),
        np.sum(w * np.sum(p * t, -1), -1),
    )


def calibration_curve(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    truth: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    bins: int = 10,
) -> CalibrationCurve:
    r"""Calibration of :math:`\pi^*_\beta` on a question-answering table along a ``beta`` grid.

    .. math::

        \pi^*_\beta(a\mid j) \propto \pi_{ref}(a\mid j)\, e^{r(j,a)/\beta},
        \qquad \mathrm{KL} = \sum_j w_j\,
        \mathrm{KL}\big(\pi^*_\beta(\cdot\mid j)\,\|\,\pi_{ref}(\cdot\mid j)\big)

    Parameters
    ----------
    ref : array_like, shape (m, K) or (K,)
        Reference answer probabilities per question.
    reward : array_like
        Rewards broadcasting against ``ref`` (e.g. a bonus for confident answers).
    beta : array_like
        Grid of coefficients (``>= 0``, ``inf`` allowed), any shape.
    truth : array_like, optional
        P(answer is correct), shape of ``ref``; default ``ref`` (a calibrated
        reference).
    weights : array_like, shape (m,), optional
        Question weights (default uniform).
    bins : int, optional
        Confidence bins for the ECE.

    Returns
    -------
    CalibrationCurve
        Named tuple ``(beta, kl, ece, brier, confidence, accuracy)``:
        ``confidence`` = :math:`\sum_j w_j \sum_a \pi^2` (the mean reported
        confidence), ``accuracy`` = :math:`\sum_j w_j \sum_a \pi t`; their
        difference is the overconfidence.

    Raises
    ------
    ValueError
        As in :func:`klpolicy.optimal_policy`, :func:`brier_score` and
        :func:`expected_calibration_error`.

    References
    ----------
    .. [1] Kadavath et al., "Language Models (Mostly) Know What They Know",
       2022, arXiv:2207.05221.

    Examples
    --------
    >>> from klpolicy.calibration import calibration_curve
    >>> c = calibration_curve([0.8, 0.2], [1.0, 0.0], [float("inf"), 1.0])
    >>> c.ece.round(6), c.brier.round(6)
    (array([0.      , 0.115776]), array([0.32    , 0.346808]))
    """
    ref_a, rew_a, t, w = _qa_problem(ref, reward, truth, weights)
    grid = as_beta_grid("beta", beta)
    kl, ece, brier, conf, acc = _calibration_at(ref_a, rew_a, t, w, grid, _bins(bins))
    s = grid.shape
    return CalibrationCurve(
        grid.copy(),
        kl.reshape(s),
        ece.reshape(s),
        brier.reshape(s),
        conf.reshape(s),
        acc.reshape(s),
    )


def calibration_threshold(
    ref: ArrayLike,
    reward: ArrayLike,
    *,
    factor: float = 2.0,
    metric: str = "brier",
    truth: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    bins: int = 10,
) -> CalibrationThreshold:
    r"""The KL at which a calibration measure of the optimum reaches ``factor`` x the reference's.

    .. math::

        \beta^\dagger = \sup\{\beta : m(\pi^*_\beta) \ge \mathrm{factor}\cdot m(\pi_{ref})\},
        \qquad \mathrm{KL}^\dagger = \mathrm{KL}(\pi^*_{\beta^\dagger}\|\pi_{ref})

    Parameters
    ----------
    ref, reward, truth, weights, bins
        As in :func:`calibration_curve`.
    factor : float, optional
        The multiple of the reference's value to reach, ``> 1`` (default 2: the
        KL at which calibration error doubles).
    metric : {"brier", "ece"}, optional
        The measure :math:`m`.

    Returns
    -------
    CalibrationThreshold
        Named tuple ``(beta, kl, value, reference_value)``.

    Raises
    ------
    ValueError
        For ``factor <= 1``, an unknown ``metric``, a reference value of 0
        (an ECE of a calibrated reference: no multiple of 0 is ever
        "reached"), and when the target is never reached down to the greedy
        limit (the message gives the greedy value); as in
        :func:`calibration_curve`.

    Notes
    -----
    ``beta`` is scanned from :math:`10^4` to :math:`10^{-12}` times the
    reward's range (161 log-spaced points), then the first crossing is
    refined by Brent's method on :math:`\log\beta` to a relative 1e-13. For
    the Brier score the measure is smooth, so the value returned equals the
    target; the ECE jumps at bin edges, so the crossing may be a jump and the
    value returned is the one just past it.

    References
    ----------
    .. [1] Brent, "Algorithms for Minimization without Derivatives", 1973, ch. 4.

    Examples
    --------
    >>> from klpolicy.calibration import calibration_threshold
    >>> th = calibration_threshold([0.6, 0.4], [0.0, 1.0])  # the reward likes the unlikely answer
    >>> round(th.value / th.reference_value, 9), round(th.kl, 4), round(th.beta, 4)
    (2.0, 0.5249, 0.4008)
    """
    f = V.as_positive_scalar("factor", factor)
    if f <= 1:
        raise ValueError(f"`factor` must be > 1; got {factor!r}")
    if metric not in ("brier", "ece"):
        raise ValueError(f"`metric` must be 'brier' or 'ece'; got {metric!r}")
    ref_a, rew_a, t, w = _qa_problem(ref, reward, truth, weights)
    nb = _bins(bins)
    pick = 2 if metric == "brier" else 1

    def m(b):
        return _calibration_at(ref_a, rew_a, t, w, np.atleast_1d(b), nb)[pick]

    at_ref = _calibration_at(ref_a, rew_a, t, w, np.atleast_1d(np.inf), nb)
    m_ref = float(at_ref[pick][0])
    if m_ref == 0:
        # advise the Brier score only where it is not 0 too (it is 0 only for exact answers)
        other = metric == "ece" and float(at_ref[2][0]) > 0
        raise ValueError(
            f"the reference's {metric} is 0 (it is calibrated), so no multiple of it is reached; "
            + ("use metric='brier'" if other else "no `factor` of it is a threshold")
        )
    target = f * m_ref
    spread = float(np.max(rew_a) - np.min(rew_a)) or 1.0
    grid = spread * np.logspace(4, -12, 161)
    vals = m(grid)
    hit = np.flatnonzero(vals >= target)
    if hit.size == 0:
        greedy = float(m(0.0)[0])
        raise ValueError(
            f"the {metric} of pi*_beta never reaches {f:g} x its reference value {m_ref:.6g}; "
            f"it is {greedy:.6g} in the greedy limit beta -> 0"
        )
    i = int(hit[0])
    if i == 0:
        b_star = float(grid[0])
    else:
        lo, hi = math.log(grid[i]), math.log(grid[i - 1])
        # Brent, not core.roots: the measure has no slope to give Newton (the ECE is a step
        # function, the Brier score's derivative is not computed) and this is one scalar
        from scipy.optimize import brentq  # lazy: `import klpolicy` must not load scipy.optimize

        s = brentq(lambda s: float(m(math.exp(s))[0]) - target, lo, hi, xtol=1e-14, rtol=1e-13)
        b_star = math.exp(s)
        if m(b_star)[0] < target:  # a jump (ECE): take the side past it
            b_star = math.exp(s - 1e-12)
    kl, *_ = _calibration_at(ref_a, rew_a, t, w, np.array([b_star]), nb)
    return CalibrationThreshold(b_star, float(kl[0]), float(m(b_star)[0]), m_ref)
