r"""The f-divergences: a registry of generators and :math:`D_f(p\|q)`, exact and in nats.

.. math::

    D_f(p\|q) = \sum_y q(y)\, f\!\left(\frac{p(y)}{q(y)}\right),
    \qquad f \text{ convex on } [0, \infty),\; f(1) = 0,

with the conventions :math:`0\, f(0/0) = 0` and, off the support of :math:`q`,
:math:`0\, f(p/0) = p\, f'(\infty)` where :math:`f'(\infty) = \lim_{t\to\infty} f(t)/t`
(infinite for the reverse KL and chi-squared, finite for the forward KL, Hellinger,
Jensen-Shannon, total variation and the alpha family below 1). Each row of
:data:`DIVERGENCES` gives the generator :math:`f`, its derivative :math:`f'`, the
inverse :math:`(f')^{-1}` (the density ratio of an optimum, see
:func:`klpolicy.f_optimal_policy`), the convex conjugate
:math:`f^*(s) = \sup_{t \ge 0}\, s t - f(t)`, the second derivative, the tails, the
summands of :math:`D_f` and :math:`D_f` itself on validated rows, the domain and the paper, and an
:class:`Optimum`: how :mod:`klpolicy.core.f_optima` computes the regularised optimum
(the reverse KL's closed form, the total variation's linear program, or the coordinate,
ratios and far-field power laws of a root solve). Code that depends on the divergence
calls these fields; none compares a divergence's name. The conventions (names and the
scale of each :math:`f`) are those of the f-divergence issue (see
``docs/derivations/f_divergences.md``).
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _lazy as special
from . import _validation as V
from ._numerics import kl_terms
from .closed_form import _tilt, beta_for_kl, optimal_policy
from .divergences import _kl_last, _pair

__all__ = ["DIVERGENCES", "FDivergence", "f_divergence"]

_LOG2 = math.log(2.0)


@dataclass(frozen=True, kw_only=True)
class Optimum:
    r"""How the optimum of :math:`\mathbb{E}_\pi[r] - \beta D_f(\pi\|\pi_{ref})` is computed
    for one row at one ``alpha`` (see :mod:`klpolicy.core.f_optima`).

    Three kinds: the reverse KL's closed form (``policy``, ``kernel``, ``budget``); the
    total variation's linear program (``inner``, ``exact_value``, ``no_budget``); and
    the others, a root of the normaliser in the coordinate of ``mode``, in which each
    outcome's ratio :math:`t = \pi^*/\pi_{ref}` is ``ratio`` of its coordinate. Fields a
    kind does not use are None.

    Attributes
    ----------
    method : str
        The method, in words.
    curvature : (float, float) or None
        :math:`(f''(1), f'''(1))`, for the expansion of the value in :math:`1/\beta`
        (None for ``"tv"``, whose generator has a kink at 1).
    large_beta : float
        The expansion is used where ``beta >= large_beta`` times the reward's spread.
    policy, kernel, budget : callable or None
        The closed form: ``policy(ref, reward, beta, axis=)`` (the public function),
        ``kernel(q, r, b) -> pi`` on validated rows (every ``beta``) and
        ``budget(ref, reward, target, axis=, rtol=)`` (``beta_for_divergence``).
    inner, exact_value : callable or None
        ``inner(q, r, b) -> pi`` for validated rows with ``0 < beta < inf``, and
        ``exact_value(q, r, b) -> (use, value, expected_reward, divergence)``, exact at
        every ``beta``.
    no_budget : str or None
        Why ``beta_for_divergence`` has no answer for the row (the error message).
    mode : {"top", "bottom", "free"} or None
        The coordinate: the pole distance :math:`e = f'(\infty) - s` (``"top"``,
        :math:`f'(\infty)` finite), the height :math:`u = s - f'(0)` above the clip
        (``"bottom"``, :math:`f'(0)` finite) or :math:`s = (r - \lambda)/\beta`
        (``"free"``).
    ratio, coordinate : callable or None
        ``ratio(z) -> (t, dt/dz)`` and its inverse ``coordinate(t) -> z``.
    power : (float, float, float) or None
        ``(c, p, k)`` with ``t = (c x)^p``, ``p = 1/k``, at a coordinate ``x`` beyond
        float64 (top and bottom modes; None for ``"js"``, whose ratio is exponential).
    log_ratio, far : callable or None
        Top mode: ``log_ratio(x) -> log t`` at a pole distance ``x`` (where ``t``
        underflows) and ``far(h, beta) -> (t, log t)`` at ``x = 2 h / beta`` beyond float64.
    far_terms : callable or None
        ``far_terms(q, log_t, log_beta) -> (q f~(t), beta q f~(t))`` from ``log t``, for
        the ratios whose ``pi*`` lost its digits (None where ``pi* = 0`` is exact there).

    References
    ----------
    .. [1] Wang et al., "Beyond Reverse KL: Generalizing Direct Preference Optimization
       with Diverse Divergence Constraints", 2023, arXiv:2309.16240 (the optimum
       :math:`\pi^* = \pi_{ref}\,[(f')^{-1}((r - \lambda)/\beta)]_+`).

    Examples
    --------
    >>> from klpolicy import DIVERGENCES
    >>> DIVERGENCES["chi2"].optimum().mode  # f'(0) = -2 is finite: a sparse optimum
    'bottom'
    >>> DIVERGENCES["alpha"].optimum(0.5).mode  # f'(inf) = 2 is finite
    'top'
    >>> DIVERGENCES["alpha"].optimum(1.0) is DIVERGENCES["reverse_kl"].optimum()
    True
    """

    method: str
    curvature: tuple[float, float] | None = None
    large_beta: float = 1e6
    policy: Callable[..., NDArray] | None = None
    kernel: Callable[..., NDArray] | None = None
    budget: Callable[..., NDArray] | None = None
    inner: Callable[..., NDArray] | None = None
    exact_value: Callable[..., tuple] | None = None
    no_budget: str | None = None
    mode: str | None = None
    ratio: Callable[[NDArray], tuple] | None = None
    coordinate: Callable[[NDArray], NDArray] | None = None
    power: tuple[float, float, float] | None = None
    log_ratio: Callable[[NDArray], NDArray] | None = None
    far: Callable[..., tuple] | None = None
    far_terms: Callable[..., tuple] | None = None


@dataclass(frozen=True, kw_only=True)
class FDivergence:
    r"""One f-divergence: its generator and everything an optimum needs from it.

    The array functions are elementwise and take ``alpha=`` (used by the ``"alpha"``
    row only; the others ignore it). Outside the range of :math:`f'` the inverse
    :math:`(f')^{-1}` is clipped: 0 below :math:`f'(0)`, ``inf`` at or above
    :math:`f'(\infty)`; the conjugate is ``inf`` above :math:`f'(\infty)`. Code that
    depends on the divergence calls a field of its row (built with keywords), never
    compares its name.

    Attributes
    ----------
    name : str
        The registry key.
    formula : str
        :math:`f(t)` in words a reader can type.
    f, fprime, fprime_inv, conjugate, fsecond : callable
        ``fn(t_or_s, alpha=None) -> ndarray``: :math:`f`, :math:`f'`,
        :math:`(f')^{-1}`, :math:`f^*` and :math:`f''`.
    fprime_zero, fprime_inf, f_zero : callable
        ``fn(alpha=None) -> float``: :math:`f'(0^+)`, :math:`f'(\infty)` and
        :math:`f(0^+)` (``-inf`` / ``inf`` where infinite).
    takes_alpha : bool
        Whether the row has the coefficient ``alpha`` (required there, refused elsewhere).
    summands : callable
        ``fn(p, q, d, alpha=None) -> ndarray``: :math:`q \tilde f(p/q) \ge 0`, with
        :math:`\tilde f(t) = f(t) - f'(1)(t - 1)`, for normalised rows ``p, q > 0`` and
        their difference ``d = p - q`` (exact where ``p`` and ``q`` nearly agree).
    divergence_last : callable
        ``fn(p, q, alpha=None) -> ndarray``: :math:`D_f(p\|q)` along the last axis of
        validated float64 arrays.
    optimum : callable
        ``fn(alpha=None) -> Optimum``: how the regularised optimum is computed.
    domain : str
        Where the generator is defined and which ``alpha`` the row takes.
    paper : str
        The reference for the divergence (and for its use as a regulariser).

    Examples
    --------
    >>> from klpolicy import DIVERGENCES
    >>> row = DIVERGENCES["hellinger"]  # f(t) = (sqrt(t) - 1)^2, f'(t) = 1 - 1/sqrt(t)
    >>> float(row.fprime_inv(0.5)), row.fprime_inf(), row.optimum().mode
    (4.0, 1.0, 'top')
    """

    name: str
    formula: str
    f: Callable[..., NDArray]
    fprime: Callable[..., NDArray]
    fprime_inv: Callable[..., NDArray]
    conjugate: Callable[..., NDArray]
    fsecond: Callable[..., NDArray]
    fprime_zero: Callable[..., float]
    fprime_inf: Callable[..., float]
    f_zero: Callable[..., float]
    takes_alpha: bool
    summands: Callable[..., NDArray]
    divergence_last: Callable[..., NDArray]
    optimum: Callable[..., Optimum]
    domain: str
    paper: str

    def __repr__(self) -> str:
        return f"FDivergence({self.name!r}: f(t) = {self.formula})"


def _arr(x, name: str = "t") -> NDArray:
    """``x`` as float64; ``None``, strings, objects and complex values refused by name
    (``np.asarray(.., float64)`` made ``None`` a NaN and dropped an imaginary part)."""
    if isinstance(x, np.ndarray) and x.dtype == np.float64:
        return x
    a = np.asarray(x) if x is not None else None
    if a is None or a.dtype.kind not in "biuf":
        what = "None" if a is None else f"{V.describe(x)} (dtype {a.dtype})"
        raise ValueError(f"`{name}` must be a real number or array of them; got {what}")
    return a.astype(np.float64, copy=False)


def _quiet():
    return np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore")


# --- the generators, elementwise (t >= 0, s real) -----------------------------------------


def _rkl_f(t, alpha=None):
    t = _arr(t)
    return special.xlogy(t, t)


def _rkl_fp(t, alpha=None):
    with _quiet():
        return np.log(_arr(t)) + 1.0


def _rkl_inv(s, alpha=None):
    return np.exp(_arr(s, "s") - 1.0)


def _rkl_conj(s, alpha=None):
    return np.exp(_arr(s, "s") - 1.0)


def _rkl_f2(t, alpha=None):
    with _quiet():
        return 1.0 / _arr(t)


def _fkl_f(t, alpha=None):
    with _quiet():
        return -np.log(_arr(t))


def _fkl_fp(t, alpha=None):
    with _quiet():
        return -1.0 / _arr(t)


def _fkl_inv(s, alpha=None):
    s = _arr(s, "s")
    with _quiet():
        return np.where(s < 0, -1.0 / s, np.inf)


def _fkl_conj(s, alpha=None):
    s = _arr(s, "s")
    with _quiet():
        return np.where(s < 0, -1.0 - np.log(-s), np.inf)


def _fkl_f2(t, alpha=None):
    with _quiet():
        return 1.0 / _arr(t) ** 2


def _chi2_f(t, alpha=None):
    return (_arr(t) - 1.0) ** 2


def _chi2_fp(t, alpha=None):
    return 2.0 * (_arr(t) - 1.0)


def _chi2_inv(s, alpha=None):
    return np.maximum(1.0 + 0.5 * _arr(s, "s"), 0.0)


def _chi2_conj(s, alpha=None):
    s = _arr(s, "s")
    return np.where(s >= -2.0, s + 0.25 * s * s, -1.0)


def _chi2_f2(t, alpha=None):
    return np.full_like(_arr(t), 2.0)


def _hel_f(t, alpha=None):
    return (np.sqrt(_arr(t)) - 1.0) ** 2


def _hel_fp(t, alpha=None):
    with _quiet():
        return 1.0 - 1.0 / np.sqrt(_arr(t))


def _hel_inv(s, alpha=None):
    s = _arr(s, "s")
    with _quiet():
        return np.where(s < 1, 1.0 / (1.0 - s) ** 2, np.inf)


def _hel_conj(s, alpha=None):
    s = _arr(s, "s")
    with _quiet():
        return np.where(s < 1, s / (1.0 - s), np.inf)


def _hel_f2(t, alpha=None):
    with _quiet():
        return 0.5 * _arr(t) ** -1.5


def _js_f(t, alpha=None):
    t = _arr(t)
    with _quiet():
        return 0.5 * (special.xlogy(t, t) - (1.0 + t) * (np.log1p(t) - _LOG2))


def _js_fp(t, alpha=None):
    t = _arr(t)
    with _quiet():  # log(2t / (1 + t)) / 2
        return 0.5 * (_LOG2 + np.log(t) - np.log1p(t))


def _js_inv(s, alpha=None):
    s = _arr(s, "s")
    with _quiet():  # t = 1 / (2 exp(-2s) - 1) = 1 / expm1(log 2 - 2 s)
        return np.where(s < 0.5 * _LOG2, 1.0 / np.expm1(_LOG2 - 2.0 * s), np.inf)


def _js_conj(s, alpha=None):
    s = _arr(s, "s")
    with _quiet():  # -log(2 - exp(2 s)) / 2
        return np.where(s < 0.5 * _LOG2, -0.5 * np.log1p(-np.expm1(2.0 * s)), np.inf)


def _js_f2(t, alpha=None):
    t = _arr(t)
    with _quiet():
        return 0.5 / (t * (1.0 + t))


def _a(alpha) -> float:
    if alpha is None:
        raise ValueError("`alpha` is required for the 'alpha' divergence; got None")
    if isinstance(alpha, float) and math.isfinite(alpha):
        return alpha
    return V.as_scalar("alpha", alpha, "(-inf, inf)")


def _alpha_f(t, alpha=None):
    a, t = _a(alpha), _arr(t)
    with _quiet():
        if a == 1.0:
            return special.xlogy(t, t) - t + 1.0
        if a == 0.0:
            return t - 1.0 - np.log(t)
        return (t**a - a * t - (1.0 - a)) / (a * (a - 1.0))


def _alpha_fp(t, alpha=None):
    a, t = _a(alpha), _arr(t)
    with _quiet():
        if a == 1.0:
            return np.log(t)
        return np.expm1((a - 1.0) * np.log(t)) / (a - 1.0)


def _alpha_inv(s, alpha=None):
    a, s = _a(alpha), _arr(s, "s")
    with _quiet():
        if a == 1.0:
            return np.exp(s)
        base = 1.0 + (a - 1.0) * s
        outside = 0.0 if a > 1 else np.inf
        return np.where(base > 0, np.exp(np.log1p((a - 1.0) * s) / (a - 1.0)), outside)


def _alpha_conj(s, alpha=None):
    a, s = _a(alpha), _arr(s, "s")
    with _quiet():
        if a == 1.0:
            return np.expm1(s)
        if a == 0.0:
            return np.where(s < 1, -np.log1p(-s), np.inf)
        base = 1.0 + (a - 1.0) * s
        outside = -1.0 / a if a > 1 else np.inf
        inside = np.expm1(a / (a - 1.0) * np.log1p((a - 1.0) * s)) / a
        return np.where(base > 0, inside, outside)


def _alpha_f2(t, alpha=None):
    a, t = _a(alpha), _arr(t)
    with _quiet():
        return t ** (a - 2.0)


def _chikl_f(t, alpha=None):
    t = _arr(t)
    return 0.5 * (t - 1.0) ** 2 + special.xlogy(t, t)


def _chikl_fp(t, alpha=None):
    t = _arr(t)
    with _quiet():
        return t + np.log(t)


def _chikl_inv(s, alpha=None):
    # t + log t = s  <=>  t e^t = e^s  <=>  t = W(e^s), the Wright omega function of s
    # (scipy.special.wrightomega: W(exp(s)) without overflowing exp(s))
    s = _arr(s, "s")
    with _quiet():
        t = np.where(np.isneginf(s), 0.0, special.wrightomega(s).real)
        # one Newton step on t + log t - s (quadratic: leaves a float-exact root)
        step = np.where(t > 0, (t + np.log(t) - s) * t / (t + 1.0), 0.0)
        step = np.where(np.isfinite(step), step, 0.0)
    return t - step


def _chikl_conj(s, alpha=None):
    t = _chikl_inv(s)
    return 0.5 * (t * t + 2.0 * t - 1.0)


def _chikl_f2(t, alpha=None):
    with _quiet():
        return 1.0 + 1.0 / _arr(t)


def _tv_f(t, alpha=None):
    return 0.5 * np.abs(_arr(t) - 1.0)


def _tv_fp(t, alpha=None):
    return 0.5 * np.sign(_arr(t) - 1.0)


def _tv_inv(s, alpha=None):
    s = _arr(s, "s")
    return np.where(s < -0.5, 0.0, np.where(s <= 0.5, 1.0, np.inf))


def _tv_conj(s, alpha=None):
    s = _arr(s, "s")
    return np.where(s < -0.5, -0.5, np.where(s <= 0.5, s, np.inf))


def _tv_f2(t, alpha=None):
    return np.zeros_like(_arr(t))


def _rchi2_f(t, alpha=None):
    t = _arr(t)
    with _quiet():
        return (1.0 - t) ** 2 / t


def _rchi2_fp(t, alpha=None):
    with _quiet():
        return 1.0 - 1.0 / _arr(t) ** 2


def _rchi2_inv(s, alpha=None):
    s = _arr(s, "s")
    with _quiet():
        return np.where(s < 1, 1.0 / np.sqrt(1.0 - s), np.inf)


def _rchi2_conj(s, alpha=None):
    s = _arr(s, "s")
    with _quiet():
        return np.where(s <= 1, 2.0 - 2.0 * np.sqrt(1.0 - s), np.inf)


def _rchi2_f2(t, alpha=None):
    with _quiet():
        return 2.0 / _arr(t) ** 3


def _const(value):
    return lambda alpha=None: value


def _alpha_fp0(alpha=None):
    a = _a(alpha)
    return -1.0 / (a - 1.0) if a > 1 else -math.inf


def _alpha_fpinf(alpha=None):
    a = _a(alpha)
    return 1.0 / (1.0 - a) if a < 1 else math.inf


def _alpha_f0(alpha=None):
    a = _a(alpha)
    return 1.0 / a if a > 0 else math.inf


# --- D_f(p||q) from non-negative summands ---------------------------------------------------


def _normalised(p: NDArray, q: NDArray):
    """``p/W_p``, ``q/W_q`` and their difference ``d``, exact for nearly equal rows.

    ``d = ((p - q) - q (W_p - W_q)/W_q) / W_p`` with ``W_p - W_q = sum(p - q)``: the
    differences ``p - q`` are exact where ``p`` and ``q`` are within a factor 2, so rows
    normalised only to rounding keep the digits of a small divergence.
    """
    wp = p.sum(axis=-1, keepdims=True)
    wq = q.sum(axis=-1, keepdims=True)
    diff = p - q
    dw = diff.sum(axis=-1, keepdims=True)
    d = (diff - q * (dw / wq)) / wp
    return p / wp, q / wq, d


def _alpha_series(u: NDArray, a: float) -> NDArray:
    """sum_{k>=2} (1 + a + ... + a^(k-2)) u^k / k!: the alpha generator in u = log t."""
    terms = 24
    coeff = []
    c, power = 0.0, 1.0
    for k in range(2, 2 + terms):
        c += power  # 1 + a + ... + a^(k-2)
        power *= a
        coeff.append(c / math.factorial(k))
    acc = np.full_like(u, coeff[-1])
    for ck in coeff[-2::-1]:
        acc = acc * u + ck
    return acc * u * u


def _log_ratio(a: NDArray, b: NDArray, y: NDArray) -> NDArray:
    """``log(a/b)`` from ``y = a/b - 1``: ``log1p(y)`` near 1 (exact), ``log a - log b`` far."""
    return np.where(np.abs(y) < 0.5, np.log1p(y), np.log(a) - np.log(b))


def _alpha_unit(t: NDArray, x: NDArray, u: NDArray, a: float) -> NDArray:
    """The alpha generator at ``t = 1 + x = exp(u)``, without cancellation."""
    with _quiet():
        if a >= 0.5:  # [t (t^(a-1) - 1)/(a-1) - (t - 1)] / a
            b = a - 1.0
            phi = u if b == 0 else np.expm1(b * u) / b
            big = (t * phi - x) / a
        else:  # [(t^a - 1)/a - (t - 1)] / (a - 1)
            phi = u if a == 0 else np.expm1(a * u) / a
            big = (phi - x) / (a - 1.0)
        small = np.abs(u) * max(1.0, abs(a)) < 0.5
        return np.where(small, _alpha_series(np.where(small, u, 0.0), a), big)


# Each row's summands q f~(p/q) >= 0, f~(t) = f(t) - f'(1)(t - 1), for normalised rows
# pn, qn (both > 0) and their difference d = pn - qn (:func:`_normalised`); d (d/q), not
# d^2/q: d^2 underflows for d ~ 1e-250 where d^2/q ~ 1e-238 does not


def _rkl_terms(pn, qn, d, alpha=None):
    with _quiet():  # p log(p/q) - p + q
        return kl_terms(pn, qn, _log_ratio(pn, qn, d / qn))


def _fkl_terms(pn, qn, d, alpha=None):
    with _quiet():  # q log(q/p) - q + p
        return kl_terms(qn, pn, _log_ratio(qn, pn, -d / pn))


def _chi2_terms(pn, qn, d, alpha=None):
    with _quiet():
        return d * (d / qn)


def _rchi2_terms(pn, qn, d, alpha=None):
    with _quiet():
        return d * (d / pn)


def _hel_terms(pn, qn, d, alpha=None):
    with _quiet():
        root = np.sqrt(pn) + np.sqrt(qn)
        return (d / root) ** 2


def _js_terms(pn, qn, d, alpha=None):
    with _quiet():  # the KL summands of p and q to their midpoint m
        m = 0.5 * (pn + qn)
        y = d / (pn + qn)
        up, uq = _log_ratio(pn, m, y), _log_ratio(qn, m, -y)
        out = 0.5 * (kl_terms(pn, m, up) + kl_terms(qn, m, uq))
        return np.where(m > 0, out, 0.0)


def _alpha_terms(pn, qn, d, alpha=None):
    a = _a(alpha)
    if a == 0.0:  # the forward KL's summands (its form in log(q/p))
        return _fkl_terms(pn, qn, d)
    with _quiet():
        x = d / qn
        unit = qn * _alpha_unit(pn / qn, x, _log_ratio(pn, qn, x), a)
        # p/q overflowing (a subnormal q) or huge: the definition itself,
        # (p^a q^(1-a) - a p - (1-a) q) / (a (a-1)), has no cancellation there
        far = ~(np.abs(x) < 1e100)
        direct = (np.exp(a * np.log(pn) + (1.0 - a) * np.log(qn)) - a * pn - (1.0 - a) * qn) / (
            a * (a - 1.0)
        )
        return np.where(far, direct, unit)


def _chikl_terms(pn, qn, d, alpha=None):
    return 0.5 * _chi2_terms(pn, qn, d) + _rkl_terms(pn, qn, d)


def _tv_terms(pn, qn, d, alpha=None):
    return 0.5 * np.abs(d)


def _summed(terms, f_zero, fprime_inf) -> Callable[..., NDArray]:
    """D_f along the last axis from the summands ``terms`` on the common support, and
    ``q f(0)`` (``p = 0 < q``) and ``p f'(inf)`` (``q = 0 < p``) off it."""

    def last(p: NDArray, q: NDArray, alpha=None) -> NDArray:
        pn, qn, d = _normalised(p, q)
        on = (qn > 0) & (pn > 0)
        t = terms(np.where(on, pn, 1.0), np.where(on, qn, 1.0), np.where(on, d, 0.0), alpha)
        f0, fpinf = f_zero(alpha), fprime_inf(alpha)
        with _quiet():
            # p = 0 < q: q f(0); q = 0 < p: p f'(inf); both 0: nothing
            only_q = np.where(qn > 0, qn * f0, 0.0)
            only_p = np.where(pn > 0, pn * fpinf, 0.0)
            t = np.where(on, t, np.where(pn > 0, only_p, only_q))
        return t.sum(axis=-1)

    return last


def _rkl_last(p, q, alpha=None):
    return _kl_last(p, q)


def _fkl_last(p, q, alpha=None):
    return _kl_last(q, p)


def _tv_last(p, q, alpha=None):
    _, _, d = _normalised(p, q)
    return 0.5 * np.abs(d).sum(axis=-1)


_chi2_last = _summed(_chi2_terms, lambda alpha=None: 1.0, lambda alpha=None: math.inf)


def _chikl_last(p, q, alpha=None):
    return 0.5 * _chi2_last(p, q) + _kl_last(p, q)


def _alpha_last(p, q, alpha=None):
    a = _a(alpha)
    if a == 1.0:
        return _kl_last(p, q)
    if a == 0.0:
        return _kl_last(q, p)
    return _alpha_summed(p, q, a)


_alpha_summed = _summed(_alpha_terms, _alpha_f0, _alpha_fpinf)


# --- the regularised optima: each row's Optimum -----------------------------------------------
# The ratio t = pi*/ref of an outcome as a function of the coordinate of its mode (see
# klpolicy.core.f_optima): the pole distance e = f'(inf) - s ("top"), the height
# u = s - f'(0) above the clip ("bottom"), or s itself ("free"); with dt/dz, the inverse
# (the coordinate of a ratio), the power law t = (c x)^p (p = 1/k) far from the pole or
# the clip, and the summands q f~(t) from log t (for ratios too small or too large for t).


def _fkl_ratio(e):
    with _quiet():  # t = 1/e
        t = 1.0 / e
        return t, -t * t


def _fkl_coordinate(t):
    with _quiet():
        return 1.0 / t


def _hel_ratio(e):
    with _quiet():  # t = 1/e^2
        t = 1.0 / (e * e)
        return t, -2.0 * t / e


def _hel_coordinate(t):
    with _quiet():
        return 1.0 / np.sqrt(t)


def _js_ratio(e):
    with _quiet():  # t = 1/expm1(2 e)
        em = np.expm1(2.0 * e)
        t = 1.0 / em
        return t, -2.0 * (em + 1.0) * t * t


def _js_coordinate(t):
    with _quiet():
        return 0.5 * np.log1p(1.0 / t)


def _js_log_ratio(x):
    with _quiet():  # log(1/expm1(2x))
        return -2.0 * x - np.log(-np.expm1(-2.0 * x))


def _js_far(h, beta):
    return np.zeros_like(h), np.full_like(h, -np.inf)  # t = 1/expm1(2 d) < 1e-300000


def _rchi2_ratio(e):
    with _quiet():  # t = e^(-1/2)
        t = 1.0 / np.sqrt(e)
        return t, -0.5 * t / e


def _rchi2_coordinate(t):
    with _quiet():
        return 1.0 / (t * t)


def _chi2_ratio(z):
    with _quiet():  # t = max(u, 0)/2
        u = np.maximum(z, 0.0)
        return 0.5 * u, np.where(z > 0, 0.5, 0.0)


def _chi2_coordinate(t):
    with _quiet():
        return 2.0 * t


def _chikl_ratio(s):
    with _quiet():  # t = W(e^s), dt/ds = 1/f''(t)
        t = _chikl_inv(s)
        return t, np.where(t > 0, t / (t + 1.0), 0.0)


def _chikl_coordinate(t):
    with _quiet():
        return t + np.log(t)


def _power_far(c: float, p: float, k_div: float, h: NDArray, beta: NDArray):
    """``(t, log t)`` with ``t = (c d)^p`` at ``d = 2 h / beta`` beyond float64.

    With ``h = m_h 2^{k_h}``, ``beta = m_b 2^{k_b}`` (:func:`numpy.frexp`), ``c d = M 2^K``
    with ``M = 2 c m_h / m_b`` and ``K = k_h - k_b``, and ``t = M^p 2^{K/k_div}``
    (``p = 1/k_div``: one rounding of the exponent; exact for forward KL, Hellinger and
    reverse chi2) is assembled by :func:`numpy.ldexp`, however far below float64's range
    ``t`` lies.
    """
    mh, kh = np.frexp(h)
    mb, kb = np.frexp(beta)
    m = 2.0 * c * mh / mb
    pk = (kh - kb).astype(np.float64) / k_div
    n = np.floor(pk)
    with np.errstate(under="ignore", over="ignore", divide="ignore"):
        t = np.ldexp(np.exp(p * np.log(m) + (pk - n) * _LOG2), n.astype(np.int64))
    return t, p * np.log(m) + pk * _LOG2


def _power_log_ratio(p: float) -> Callable[[NDArray], NDArray]:
    """``log t = p log x`` for the ratio ``t = x^p`` (top mode, ``c = 1``)."""

    def log_ratio(x):
        with _quiet():
            return p * np.log(x)

    return log_ratio


def _power_top_far(c: float, p: float, k_div: float) -> Callable[..., tuple]:
    def far(h, beta):
        return _power_far(c, p, k_div, h, beta)

    return far


def _fkl_far_terms(q, lt, lb):
    """``q (t - 1 - log t)`` and ``beta`` times it, from ``lt = log t``, ``lb = log beta``."""
    with _quiet():
        t = np.exp(lt)
        term = q * ((t - 1.0) - lt)
        return term, np.exp(lb) * term


def _rchi2_far_terms(q, lt, lb):
    """``q (1 - t)^2 / t`` and ``beta`` times it, with ``log q``, ``log beta`` in the exp."""
    with _quiet():
        t = np.exp(lt)
        lq = np.log(q)
        sq = (1.0 - t) ** 2
        return np.exp(lq - lt) * sq, np.exp(lb + lq - lt) * sq


def _chi2_far_terms(q, lt, lb):
    """A huge ``t`` (``f'(0)`` finite): ``q t^2 (1 - 1/t)^2`` and ``beta`` times it."""
    with _quiet():
        lq = np.log(q)
        sq = np.expm1(-lt) ** 2
        return np.exp(lq + 2.0 * lt) * sq, np.exp(lb + lq + 2.0 * lt) * sq


def _alpha_far_terms(a: float) -> Callable[..., tuple]:
    """``q (t^a - 1 - a(t - 1)) / (a(a-1))`` and ``beta`` times it, from ``log t``."""

    def far_terms(q, lt, lb):
        with _quiet():
            t = np.exp(lt)
            lq = np.log(q)
            # q expm1(a lt)/(a(a-1)) + q (1 - t) / (a - 1)
            coef = 1.0 / (a * (a - 1.0))
            # (q - q t)/(a - 1), with q t as one exp where t alone overflows (1/q_best = 1e320)
            rest = np.where(np.isinf(t), q - np.exp(lq + lt), q * (1.0 - t)) / (a - 1.0)
            rest_b = np.where(np.isinf(t), np.exp(lb) * q - np.exp(lb + lq + lt), np.exp(lb) * rest)
            u = a * lt
            big = u > 600.0  # (a < 0) e^u q coef - q coef: the first as one exp
            lc = math.log(abs(coef))
            main = np.where(big, np.exp(u + lq + lc), q * np.expm1(np.minimum(u, 600.0)) * coef)
            main_b = np.where(big, np.exp(u + lq + lc + lb), np.exp(lb) * main)
            extra = np.where(big, -q * coef, 0.0)
            rest_b = np.where(np.isinf(t), rest_b / (a - 1.0), rest_b)
            return main + extra + rest, main_b + np.exp(lb) * extra + rest_b

    return far_terms


def _tv_rows(ref: NDArray, reward: NDArray, beta: NDArray) -> NDArray:
    """The total-variation optimum (a linear program) for rows with 0 < beta < inf."""
    support = ref > 0
    top = np.max(np.where(support, reward, -np.inf), axis=-1, keepdims=True)
    best = support & (reward == top)
    with np.errstate(over="ignore"):  # an overflowing gap is above any beta
        gap = np.where(support, top - reward, 0.0)
    drop = support & (gap > beta)  # moving their mass to the best gains gap - beta > 0
    freed = np.sum(np.where(drop, ref, 0.0), axis=-1, keepdims=True)
    on_best = np.sum(np.where(best, ref, 0.0), axis=-1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):  # ref / a subnormal on_best, off best
        return np.where(drop, 0.0, ref) + np.where(best, (ref / on_best) * freed, 0.0)


def _tv_value(q: NDArray, r: NDArray, b: NDArray):
    """The linear program's value, expected reward and divergence per row, exact.

    Moving the mass of the outcomes more than ``beta`` below the best (``drop``) gives
    ``D = sum_drop q`` and ``V = E_ref[r] + sum_drop q (gap - beta)`` (``pi* = ref``
    when nothing is dropped). Returns ``(use, value, expected_reward, divergence)``.
    """
    sup = q > 0
    qn = np.where(sup, q, 0.0) / np.sum(np.where(sup, q, 0.0), axis=-1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore", under="ignore", divide="ignore"):
        mean = np.sum(np.where(sup, qn * r, 0.0), axis=-1)
        top = np.max(np.where(sup, r, -np.inf), axis=-1, keepdims=True)
        gap = np.where(sup, top - r, 0.0)
        drop = sup & (gap > b[..., None])
        div = np.sum(np.where(drop, qn, 0.0), axis=-1)
        gain = np.sum(np.where(drop, qn * (gap - b[..., None]), 0.0), axis=-1)
        er = mean + np.sum(np.where(drop, qn * gap, 0.0), axis=-1)
        use = (b > 0) & np.isfinite(mean) & np.isfinite(er)
        value = np.where(div == 0, mean, mean + gain)
        return use, value, np.where(div == 0, mean, er), div


def _kl_kernel(q: NDArray, r: NDArray, b: NDArray) -> NDArray:
    """The reverse KL's optimum ``ref exp(r/beta)/Z`` of validated rows (every beta)."""
    return _tilt(q, r, b, {"pi"}).pi


_LARGE_BETA = 1e6  # the expansion in 1/beta is used where beta >= 1e6 * spread

_KL_OPTIMUM = Optimum(
    method="the closed form ref exp(r/beta)/Z (klpolicy.optimal_policy)",
    curvature=(1.0, -1.0),
    policy=optimal_policy,
    kernel=_kl_kernel,
    budget=beta_for_kl,
)
_FKL_OPTIMUM = Optimum(
    method="root of the normaliser in the pole distance e: t = 1/e",
    curvature=(1.0, -2.0),
    mode="top",
    ratio=_fkl_ratio,
    coordinate=_fkl_coordinate,
    power=(1.0, -1.0, -1.0),
    log_ratio=_power_log_ratio(-1.0),
    far=_power_top_far(1.0, -1.0, -1.0),
    far_terms=_fkl_far_terms,
)
_CHI2_OPTIMUM = Optimum(
    method="root of the normaliser in the height u above the clip: t = max(u, 0)/2",
    curvature=(2.0, 0.0),
    mode="bottom",
    ratio=_chi2_ratio,
    coordinate=_chi2_coordinate,
    power=(0.5, 1.0, 1.0),
    far_terms=_chi2_far_terms,
)
_HEL_OPTIMUM = Optimum(
    method="root of the normaliser in the pole distance e: t = 1/e^2",
    curvature=(0.5, -0.75),
    mode="top",
    ratio=_hel_ratio,
    coordinate=_hel_coordinate,
    power=(1.0, -2.0, -0.5),
    log_ratio=_power_log_ratio(-2.0),
    far=_power_top_far(1.0, -2.0, -0.5),
)
_JS_OPTIMUM = Optimum(
    method="root of the normaliser in the pole distance e: t = 1/expm1(2e)",
    curvature=(0.25, -0.375),
    mode="top",
    ratio=_js_ratio,
    coordinate=_js_coordinate,
    log_ratio=_js_log_ratio,
    far=_js_far,
)
_CHIKL_OPTIMUM = Optimum(
    method="root of the normaliser in s = (r - lambda)/beta: t = W(e^s)",
    curvature=(2.0, -1.0),
    mode="free",
    ratio=_chikl_ratio,
    coordinate=_chikl_coordinate,
)
_TV_OPTIMUM = Optimum(
    method="a linear program, in closed form",
    inner=_tv_rows,
    exact_value=_tv_value,
    no_budget=(
        "`divergence` 'tv' has no beta_for_divergence: the optimum's total variation "
        "is a step function of beta (it jumps where beta crosses a reward gap), so "
        "most budgets are attained by no beta"
    ),
)
_RCHI2_OPTIMUM = Optimum(
    method="root of the normaliser in the pole distance e: t = e^(-1/2)",
    curvature=(2.0, -6.0),
    mode="top",
    ratio=_rchi2_ratio,
    coordinate=_rchi2_coordinate,
    power=(1.0, -0.5, -2.0),
    log_ratio=_power_log_ratio(-0.5),
    far=_power_top_far(1.0, -0.5, -2.0),
    far_terms=_rchi2_far_terms,
)

# |alpha - 1| below which the alpha row is solved in s itself: the pole distance or height
# 1/|alpha - 1| + s would lose log10(1/|alpha - 1|) digits of s, and the ratio
# ((alpha-1) u)^(1/(alpha-1)) would amplify a rounding of u by 1/|alpha - 1|
_NEAR_ONE = 1e-2


def _alpha_top(a: float) -> dict:
    """alpha < 1 (not 0, not near 1): t = ((1 - a) e)^(1/(a-1)) at the pole distance e."""

    def ratio(e):
        with _quiet():  # ((1 - a) e overflows for e near float64's max: its log as a sum there)
            ce = (1.0 - a) * e
            lce = np.where(np.isinf(ce) & np.isfinite(e), math.log1p(-a) + np.log(e), np.log(ce))
            t = np.exp(lce / (a - 1.0))
            return t, t / ((a - 1.0) * e)

    def coordinate(t):
        with _quiet():
            return np.exp((a - 1.0) * np.log(t)) / (1.0 - a)

    def log_ratio(x):
        with _quiet():  # (log(1-a) + log x)/(a-1): one rounding of p
            return (np.log(1.0 - a) + np.log(x)) / (a - 1.0)

    power = (1.0 - a, 1.0 / (a - 1.0), a - 1.0)
    return dict(
        method="root of the normaliser in the pole distance e: t = ((1-a) e)^(1/(a-1))",
        mode="top",
        ratio=ratio,
        coordinate=coordinate,
        power=power,
        log_ratio=log_ratio,
        far=_power_top_far(*power),
    )


def _alpha_bottom(a: float) -> dict:
    """alpha > 1 (not near 1): t = ((a - 1) max(u, 0))^(1/(a-1)) at the height u."""

    def ratio(z):
        with _quiet():
            u = np.maximum(z, 0.0)
            t = np.exp(np.log((a - 1.0) * u) / (a - 1.0))
            return t, np.where(z > 0, t / ((a - 1.0) * u), 0.0)

    def coordinate(t):
        with _quiet():
            return np.exp((a - 1.0) * np.log(t)) / (a - 1.0)

    return dict(
        method="root of the normaliser in the height u above the clip: "
        "t = ((a-1) max(u, 0))^(1/(a-1))",
        mode="bottom",
        ratio=ratio,
        coordinate=coordinate,
        power=(a - 1.0, 1.0 / (a - 1.0), a - 1.0),
    )


def _alpha_free(a: float) -> dict:
    """alpha near 1: t = (1 + (a - 1) s)^(1/(a-1)) in s itself."""

    def ratio(s):
        with _quiet():  # dt/ds = 1/f''(t) = t^(2-a)
            t = _alpha_inv(s, alpha=a)
            return t, np.where(t > 0, np.exp((2.0 - a) * np.log(t)), 0.0)

    def coordinate(t):
        with _quiet():
            return np.expm1((a - 1.0) * np.log(t)) / (a - 1.0)

    return dict(
        method="root of the normaliser in s = (r - lambda)/beta: t = (1 + (a-1) s)^(1/(a-1))",
        mode="free",
        ratio=ratio,
        coordinate=coordinate,
    )


@functools.lru_cache(maxsize=64)
def _alpha_plan(a: float) -> Optimum:
    if a == 1.0:  # the reverse KL
        return _KL_OPTIMUM
    if a == 0.0:  # the forward KL
        return _FKL_OPTIMUM
    if abs(a - 1.0) < _NEAR_ONE:
        fields = _alpha_free(a)
    elif a < 1.0:
        fields = _alpha_top(a)
    else:
        fields = _alpha_bottom(a)
    return Optimum(
        curvature=(1.0, a - 2.0),
        large_beta=_LARGE_BETA * max(1.0, abs(a)),  # higher derivatives grow with alpha
        far_terms=_alpha_far_terms(a),
        **fields,
    )


def _alpha_optimum(alpha=None) -> Optimum:
    return _alpha_plan(_a(alpha))


def _row(**fields) -> FDivergence:
    """A row from its fields; ``divergence_last`` defaults to the sum of its ``summands`` on
    the common support, ``q f(0)`` and ``p f'(inf)`` off it."""
    if "divergence_last" not in fields:
        fields["divergence_last"] = _summed(
            fields["summands"], fields["f_zero"], fields["fprime_inf"]
        )
    return FDivergence(**fields)


_CSISZAR = "Csiszar, 'Information-type measures of difference of probability distributions', 1967"

DIVERGENCES: types.MappingProxyType[str, FDivergence] = types.MappingProxyType(
    {
        row.name: row
        for row in (
            _row(
                name="reverse_kl",
                formula="t log t",
                f=_rkl_f,
                fprime=_rkl_fp,
                fprime_inv=_rkl_inv,
                conjugate=_rkl_conj,
                fsecond=_rkl_f2,
                fprime_zero=_const(-math.inf),
                fprime_inf=_const(math.inf),
                f_zero=_const(0.0),
                takes_alpha=False,
                summands=_rkl_terms,
                divergence_last=_rkl_last,
                optimum=_const(_KL_OPTIMUM),
                domain="t >= 0; D = KL(p||q)",
                paper="Kullback and Leibler, 'On Information and Sufficiency', 1951",
            ),
            _row(
                name="forward_kl",
                formula="-log t",
                f=_fkl_f,
                fprime=_fkl_fp,
                fprime_inv=_fkl_inv,
                conjugate=_fkl_conj,
                fsecond=_fkl_f2,
                fprime_zero=_const(-math.inf),
                fprime_inf=_const(0.0),
                f_zero=_const(math.inf),
                takes_alpha=False,
                summands=_fkl_terms,
                divergence_last=_fkl_last,
                optimum=_const(_FKL_OPTIMUM),
                domain="t > 0; D = KL(q||p)",
                paper="Wang et al., 'Beyond Reverse KL', 2023, arXiv:2309.16240",
            ),
            _row(
                name="chi2",
                formula="(t - 1)^2",
                f=_chi2_f,
                fprime=_chi2_fp,
                fprime_inv=_chi2_inv,
                conjugate=_chi2_conj,
                fsecond=_chi2_f2,
                fprime_zero=_const(-2.0),
                fprime_inf=_const(math.inf),
                f_zero=_const(1.0),
                takes_alpha=False,
                summands=_chi2_terms,
                divergence_last=_chi2_last,
                optimum=_const(_CHI2_OPTIMUM),
                domain="t >= 0; D = chi^2(p||q) = sum p^2/q - 1",
                paper="Pearson, 1900; Huang et al., 'Correcting the Mythos of KL-Regularization', "
                "2024, arXiv:2407.13399",
            ),
            _row(
                name="hellinger",
                formula="(sqrt(t) - 1)^2",
                f=_hel_f,
                fprime=_hel_fp,
                fprime_inv=_hel_inv,
                conjugate=_hel_conj,
                fsecond=_hel_f2,
                fprime_zero=_const(-math.inf),
                fprime_inf=_const(1.0),
                f_zero=_const(1.0),
                takes_alpha=False,
                summands=_hel_terms,
                optimum=_const(_HEL_OPTIMUM),
                domain="t >= 0; D = sum (sqrt p - sqrt q)^2 (twice the squared Hellinger distance)",
                paper="Hellinger, 1909; " + _CSISZAR,
            ),
            _row(
                name="js",
                formula="(t log t - (1 + t) log((1 + t)/2)) / 2",
                f=_js_f,
                fprime=_js_fp,
                fprime_inv=_js_inv,
                conjugate=_js_conj,
                fsecond=_js_f2,
                fprime_zero=_const(-math.inf),
                fprime_inf=_const(0.5 * _LOG2),
                f_zero=_const(0.5 * _LOG2),
                takes_alpha=False,
                summands=_js_terms,
                optimum=_const(_JS_OPTIMUM),
                domain="t >= 0; D = JS(p, q) = (KL(p||m) + KL(q||m))/2, m = (p + q)/2",
                paper="Lin, 'Divergence measures based on the Shannon entropy', 1991, IEEE TIT 37(1)",
            ),
            _row(
                name="alpha",
                formula="(t^a - a t - (1 - a)) / (a (a - 1))",
                f=_alpha_f,
                fprime=_alpha_fp,
                fprime_inv=_alpha_inv,
                conjugate=_alpha_conj,
                fsecond=_alpha_f2,
                fprime_zero=_alpha_fp0,
                fprime_inf=_alpha_fpinf,
                f_zero=_alpha_f0,
                takes_alpha=True,
                summands=_alpha_terms,
                divergence_last=_alpha_last,
                optimum=_alpha_optimum,
                domain="t >= 0, any finite alpha = a; a = 1: reverse_kl, a = 0: forward_kl (limits)",
                paper="Amari, 'Differential-Geometrical Methods in Statistics', 1985; "
                "Wang et al., 'Beyond Reverse KL', 2023, arXiv:2309.16240",
            ),
            _row(
                name="chi2_kl",
                formula="(t - 1)^2 / 2 + t log t",
                f=_chikl_f,
                fprime=_chikl_fp,
                fprime_inv=_chikl_inv,
                conjugate=_chikl_conj,
                fsecond=_chikl_f2,
                fprime_zero=_const(-math.inf),
                fprime_inf=_const(math.inf),
                f_zero=_const(0.5),
                takes_alpha=False,
                summands=_chikl_terms,
                divergence_last=_chikl_last,
                optimum=_const(_CHIKL_OPTIMUM),
                domain="t >= 0; D = chi^2(p||q)/2 + KL(p||q) (chi-PO)",
                paper="Huang et al., 'Correcting the Mythos of KL-Regularization', 2024, "
                "arXiv:2407.13399",
            ),
            _row(
                name="tv",
                formula="|t - 1| / 2",
                f=_tv_f,
                fprime=_tv_fp,
                fprime_inv=_tv_inv,
                conjugate=_tv_conj,
                fsecond=_tv_f2,
                fprime_zero=_const(-0.5),
                fprime_inf=_const(0.5),
                f_zero=_const(0.5),
                takes_alpha=False,
                summands=_tv_terms,
                divergence_last=_tv_last,
                optimum=_const(_TV_OPTIMUM),
                domain="t >= 0; D = TV(p, q); f' is the subgradient's midpoint (0 at t = 1)",
                paper="Tsybakov, 'Introduction to Nonparametric Estimation', 2009, sec. 2.4",
            ),
            _row(
                name="reverse_chi2",
                formula="(1 - t)^2 / t",
                f=_rchi2_f,
                fprime=_rchi2_fp,
                fprime_inv=_rchi2_inv,
                conjugate=_rchi2_conj,
                fsecond=_rchi2_f2,
                fprime_zero=_const(-math.inf),
                fprime_inf=_const(1.0),
                f_zero=_const(math.inf),
                takes_alpha=False,
                summands=_rchi2_terms,
                optimum=_const(_RCHI2_OPTIMUM),
                domain="t > 0; D = chi^2(q||p) = sum q^2/p - 1 (Neyman's chi-squared)",
                paper="Neyman, 'Contribution to the theory of the chi^2 test', 1949",
            ),
        )
    }
)
"""The f-divergences by name (read-only): ``DIVERGENCES["chi2"].fprime_inv(s)``."""


def as_divergence(divergence, alpha, name: str = "divergence") -> tuple[FDivergence, float | None]:
    """The registry row and the checked ``alpha`` (internal; raises naming the argument).

    ``alpha`` is required (any finite real) for ``"alpha"`` and must be ``None`` for
    the other rows, so that a coefficient passed to the wrong divergence is not
    silently ignored.

    Returns
    -------
    (FDivergence, float or None)
        The row and ``alpha`` (None for a row without one).
    """
    row = DIVERGENCES[V.as_choice(name, divergence, tuple(DIVERGENCES))]
    if row.takes_alpha:
        if alpha is None:
            raise ValueError(
                f"`alpha` is required when `{name}` is {row.name!r} (any finite real; "
                "1 is the reverse KL, 0 the forward KL); got None"
            )
        return row, V.as_scalar("alpha", alpha, "(-inf, inf)")
    if alpha is not None:
        raise ValueError(
            f"`alpha` applies only when `{name}` is 'alpha'; got alpha={V.describe(alpha)} "
            f"with {name}={row.name!r}"
        )
    return row, None


def _f_divergence_last(key: str, p: NDArray, q: NDArray, alpha=None) -> NDArray:
    """D_f of the row ``key`` along the last axis for validated float64 arrays (keepdims=False).

    Returns
    -------
    ndarray
        The divergence per row.
    """
    return DIVERGENCES[key].divergence_last(p, q, alpha)


def f_divergence(
    p: ArrayLike, q: ArrayLike, divergence: str, *, alpha: float | None = None, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The f-divergence :math:`D_f(p\|q)` of a row of :data:`DIVERGENCES`, in nats.

    .. math::

        D_f(p\|q) = \sum_{y:\,q(y)>0} q(y)\, f\!\left(\frac{p(y)}{q(y)}\right)
          + f'(\infty) \sum_{y:\,q(y)=0} p(y)

    Parameters
    ----------
    p, q : array_like
        Probabilities along ``axis`` (non-negative, rows summing to 1 within
        rounding); batch axes broadcast.
    divergence : str
        A key of :data:`DIVERGENCES`: ``"reverse_kl"``, ``"forward_kl"``,
        ``"chi2"``, ``"hellinger"``, ``"js"``, ``"alpha"``, ``"chi2_kl"``,
        ``"tv"`` or ``"reverse_chi2"``.
    alpha : float, optional
        The coefficient of the ``"alpha"`` row (any finite real; required there,
        refused elsewhere).
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray or float
        One non-negative value per batch row (float32 for float32 input);
        ``inf`` off the support where the divergence is infinite there: mass of
        ``p`` where ``q`` has none when :math:`f'(\infty) = \infty` (reverse KL,
        chi2, chi2_kl, alpha >= 1), and zeros of ``p`` where ``q`` has mass when
        :math:`f(0) = \infty` (forward KL, reverse chi2, alpha <= 0).

    Raises
    ------
    ValueError
        For invalid probabilities, an unknown ``divergence``, or an ``alpha``
        that is missing, not finite, or given to another row.

    Notes
    -----
    Each summand is written as :math:`q\,\tilde f(p/q)` with the normalised
    generator :math:`\tilde f(t) = f(t) - f'(1)(t - 1) \ge 0` (the same sum for
    normalised rows), so no summand cancels another: ``"reverse_kl"`` is
    :func:`klpolicy.kl_divergence` itself and ``"forward_kl"`` is
    ``kl_divergence(q, p)``; chi2, reverse chi2 and Hellinger are
    :math:`d^2/q`, :math:`d^2/p` and :math:`d^2/(\sqrt p + \sqrt q)^2` from the
    difference :math:`d = p - q` of the normalised rows (exact for nearly equal
    rows); JS sums KL summands to the midpoint with ``log1p`` of
    :math:`\pm d/(p + q)`; the alpha family uses
    :math:`[t\,\mathrm{expm1}((a-1)u)/(a-1) - (t-1)]/a` (:math:`a \ge 1/2`) or
    :math:`[\mathrm{expm1}(a u)/a - (t-1)]/(a-1)` (:math:`a < 1/2`), with
    :math:`u = \log t`, and its Taylor series
    :math:`\sum_{k\ge2} (1 + a + \dots + a^{k-2})\, u^k/k!` near :math:`t = 1`.
    A divergence of 1e-30 between nearly equal rows keeps its digits.

    References
    ----------
    .. [1] Csiszar, "Information-type measures of difference of probability
       distributions and indirect observations", 1967, Studia Sci. Math. Hungarica 2.
    .. [2] Ali and Silvey, "A general class of coefficients of divergence of one
       distribution from another", 1966, J. R. Stat. Soc. B 28(1).

    Examples
    --------
    >>> from klpolicy import f_divergence
    >>> round(float(f_divergence([0.88, 0.12], [0.5, 0.5], "chi2")), 6)
    0.5776
    >>> round(float(f_divergence([0.88, 0.12], [0.5, 0.5], "alpha", alpha=0.5)), 6)
    0.366904
    >>> round(float(f_divergence([0.5, 0.5], [1.0, 0.0], "hellinger")), 12)  # 2 - sqrt 2
    0.585786437627
    >>> float(f_divergence([0.5, 0.5], [1.0, 0.0], "chi2"))
    inf
    """
    row, a = as_divergence(divergence, alpha)
    pa, qa = _pair(p, q, axis)
    dtype = pa.dtype
    out = _f_divergence_last(row.name, pa.astype(np.float64), qa.astype(np.float64), a)
    return out.astype(dtype, copy=False)[()]
