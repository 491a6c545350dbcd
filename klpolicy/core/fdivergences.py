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
:math:`f^*(s) = \sup_{t \ge 0}\, s t - f(t)`, the second derivative, the domain and
the paper. The conventions (names and the scale of each :math:`f`) are those of
the f-divergence issue (see ``docs/derivations/f_divergences.md``).
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _lazy as special
from . import _validation as V
from ._numerics import kl_terms
from .divergences import _kl_last, _pair

__all__ = ["DIVERGENCES", "FDivergence", "f_divergence"]

_LOG2 = math.log(2.0)


@dataclass(frozen=True)
class FDivergence:
    r"""One f-divergence: its generator and everything an optimum needs from it.

    The array functions are elementwise and take ``alpha=`` (used by the ``"alpha"``
    row only; the others ignore it). Outside the range of :math:`f'` the inverse
    :math:`(f')^{-1}` is clipped: 0 below :math:`f'(0)`, ``inf`` at or above
    :math:`f'(\infty)`; the conjugate is ``inf`` above :math:`f'(\infty)`.

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
    domain : str
        Where the generator is defined and which ``alpha`` the row takes.
    paper : str
        The reference for the divergence (and for its use as a regulariser).
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


def _const(value: float) -> Callable[..., float]:
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


_CSISZAR = "Csiszar, 'Information-type measures of difference of probability distributions', 1967"

DIVERGENCES: types.MappingProxyType[str, FDivergence] = types.MappingProxyType(
    {
        row.name: row
        for row in (
            FDivergence(
                "reverse_kl",
                "t log t",
                _rkl_f,
                _rkl_fp,
                _rkl_inv,
                _rkl_conj,
                _rkl_f2,
                _const(-math.inf),
                _const(math.inf),
                _const(0.0),
                "t >= 0; D = KL(p||q)",
                "Kullback and Leibler, 'On Information and Sufficiency', 1951",
            ),
            FDivergence(
                "forward_kl",
                "-log t",
                _fkl_f,
                _fkl_fp,
                _fkl_inv,
                _fkl_conj,
                _fkl_f2,
                _const(-math.inf),
                _const(0.0),
                _const(math.inf),
                "t > 0; D = KL(q||p)",
                "Wang et al., 'Beyond Reverse KL', 2023, arXiv:2309.16240",
            ),
            FDivergence(
                "chi2",
                "(t - 1)^2",
                _chi2_f,
                _chi2_fp,
                _chi2_inv,
                _chi2_conj,
                _chi2_f2,
                _const(-2.0),
                _const(math.inf),
                _const(1.0),
                "t >= 0; D = chi^2(p||q) = sum p^2/q - 1",
                "Pearson, 1900; Huang et al., 'Correcting the Mythos of KL-Regularization', "
                "2024, arXiv:2407.13399",
            ),
            FDivergence(
                "hellinger",
                "(sqrt(t) - 1)^2",
                _hel_f,
                _hel_fp,
                _hel_inv,
                _hel_conj,
                _hel_f2,
                _const(-math.inf),
                _const(1.0),
                _const(1.0),
                "t >= 0; D = sum (sqrt p - sqrt q)^2 (twice the squared Hellinger distance)",
                "Hellinger, 1909; " + _CSISZAR,
            ),
            FDivergence(
                "js",
                "(t log t - (1 + t) log((1 + t)/2)) / 2",
                _js_f,
                _js_fp,
                _js_inv,
                _js_conj,
                _js_f2,
                _const(-math.inf),
                _const(0.5 * _LOG2),
                _const(0.5 * _LOG2),
                "t >= 0; D = JS(p, q) = (KL(p||m) + KL(q||m))/2, m = (p + q)/2",
                "Lin, 'Divergence measures based on the Shannon entropy', 1991, IEEE TIT 37(1)",
            ),
            FDivergence(
                "alpha",
                "(t^a - a t - (1 - a)) / (a (a - 1))",
                _alpha_f,
                _alpha_fp,
                _alpha_inv,
                _alpha_conj,
                _alpha_f2,
                _alpha_fp0,
                _alpha_fpinf,
                _alpha_f0,
                "t >= 0, any finite alpha = a; a = 1: reverse_kl, a = 0: forward_kl (limits)",
                "Amari, 'Differential-Geometrical Methods in Statistics', 1985; "
                "Wang et al., 'Beyond Reverse KL', 2023, arXiv:2309.16240",
            ),
            FDivergence(
                "chi2_kl",
                "(t - 1)^2 / 2 + t log t",
                _chikl_f,
                _chikl_fp,
                _chikl_inv,
                _chikl_conj,
                _chikl_f2,
                _const(-math.inf),
                _const(math.inf),
                _const(0.5),
                "t >= 0; D = chi^2(p||q)/2 + KL(p||q) (chi-PO)",
                "Huang et al., 'Correcting the Mythos of KL-Regularization', 2024, "
                "arXiv:2407.13399",
            ),
            FDivergence(
                "tv",
                "|t - 1| / 2",
                _tv_f,
                _tv_fp,
                _tv_inv,
                _tv_conj,
                _tv_f2,
                _const(-0.5),
                _const(0.5),
                _const(0.5),
                "t >= 0; D = TV(p, q); f' is the subgradient's midpoint (0 at t = 1)",
                "Tsybakov, 'Introduction to Nonparametric Estimation', 2009, sec. 2.4",
            ),
            FDivergence(
                "reverse_chi2",
                "(1 - t)^2 / t",
                _rchi2_f,
                _rchi2_fp,
                _rchi2_inv,
                _rchi2_conj,
                _rchi2_f2,
                _const(-math.inf),
                _const(1.0),
                _const(math.inf),
                "t > 0; D = chi^2(q||p) = sum q^2/p - 1 (Neyman's chi-squared)",
                "Neyman, 'Contribution to the theory of the chi^2 test', 1949",
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
    key = V.as_choice(name, divergence, tuple(DIVERGENCES))
    if key == "alpha":
        if alpha is None:
            raise ValueError(
                f"`alpha` is required when `{name}` is 'alpha' (any finite real; "
                "1 is the reverse KL, 0 the forward KL); got None"
            )
        return DIVERGENCES[key], V.as_scalar("alpha", alpha, "(-inf, inf)")
    if alpha is not None:
        raise ValueError(
            f"`alpha` applies only when `{name}` is 'alpha'; got alpha={V.describe(alpha)} "
            f"with {name}={key!r}"
        )
    return DIVERGENCES[key], None


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


def _summands(key: str, pn: NDArray, qn: NDArray, d: NDArray, alpha) -> NDArray:
    """q f~(p/q) >= 0 with f~(t) = f(t) - f'(1)(t - 1), on the support of q."""
    with _quiet():
        # d (d/q), not d^2/q: d^2 underflows for d ~ 1e-250 where d^2/q ~ 1e-238 does not
        if key == "chi2":
            return d * (d / qn)
        if key == "reverse_chi2":
            return d * (d / pn)
        if key == "hellinger":
            root = np.sqrt(pn) + np.sqrt(qn)
            return (d / root) ** 2
        if key == "js":
            m = 0.5 * (pn + qn)
            y = d / (pn + qn)
            up, uq = _log_ratio(pn, m, y), _log_ratio(qn, m, -y)
            out = 0.5 * (kl_terms(pn, m, up) + kl_terms(qn, m, uq))
            return np.where(m > 0, out, 0.0)
        if key == "alpha":
            x = d / qn
            unit = qn * _alpha_unit(pn / qn, x, _log_ratio(pn, qn, x), alpha)
            # p/q overflowing (a subnormal q) or huge: the definition itself,
            # (p^a q^(1-a) - a p - (1-a) q) / (a (a-1)), has no cancellation there
            far = ~(np.abs(x) < 1e100)
            a = float(alpha)
            direct = (np.exp(a * np.log(pn) + (1.0 - a) * np.log(qn)) - a * pn - (1.0 - a) * qn) / (
                a * (a - 1.0)
            )
            return np.where(far, direct, unit)
    raise AssertionError(key)  # pragma: no cover - rows dispatched in f_divergence


def _f_divergence_last(key: str, p: NDArray, q: NDArray, alpha=None) -> NDArray:
    """D_f along the last axis for validated float64 arrays (keepdims=False).

    Returns
    -------
    ndarray
        The divergence per row.
    """
    if key == "reverse_kl" or (key == "alpha" and alpha == 1.0):
        return _kl_last(p, q)
    if key == "forward_kl" or (key == "alpha" and alpha == 0.0):
        return _kl_last(q, p)
    if key == "tv":
        pn, qn, d = _normalised(p, q)
        return 0.5 * np.abs(d).sum(axis=-1)
    if key == "chi2_kl":
        return 0.5 * _f_divergence_last("chi2", p, q) + _kl_last(p, q)
    row = DIVERGENCES[key]
    pn, qn, d = _normalised(p, q)
    on = (qn > 0) & (pn > 0)
    terms = _summands(
        key, np.where(on, pn, 1.0), np.where(on, qn, 1.0), np.where(on, d, 0.0), alpha
    )
    f0, fpinf = row.f_zero(alpha), row.fprime_inf(alpha)
    with _quiet():
        # p = 0 < q: q f(0); q = 0 < p: p f'(inf); both 0: nothing
        only_q = np.where(qn > 0, qn * f0, 0.0)
        only_p = np.where(pn > 0, pn * fpinf, 0.0)
        terms = np.where(on, terms, np.where(pn > 0, only_p, only_q))
    return terms.sum(axis=-1)


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
