r"""Reward over-optimisation: optimise a proxy reward, measure a gold reward.

A *gold* reward stands for what we want; a *proxy* reward (a learned reward
model) agrees with it on typical outcomes but has errors. Optimising the proxy
moves the policy away from the reference; the gold reward first rises, then,
once the optimiser reaches the proxy's errors, stops rising or falls (reward
hacking). Gao, Schulman and Hilton (2022) measured this against the distance
:math:`d = \sqrt{\mathrm{KL}(\pi\|\pi_{ref})}` and fitted

.. math::

    R_{bon}(d) = d\,(a - b\,d), \qquad R_{RL}(d) = d\,(a - b \log d),

with :math:`R` the gold reward gained over the reference. This module builds
small proxy-vs-gold problems, optimises the proxy exactly with the closed form
(sweeping :math:`\beta`) and with best-of-n (sweeping :math:`n`), and fits both
forms. Everything is exact: no sampling noise enters the curves.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import prepare as _prepare
from ..core.internal import tilt as _tilt
from ..core.internal import validation as V
from ._law import _expected_reward, _kl, _law, _levels

__all__ = [
    "KINDS",
    "GaoFit",
    "GoldPeak",
    "OptimizationCurve",
    "ProxyGoldProblem",
    "best_of_n_sweep",
    "closed_form_sweep",
    "fit_gao_bon",
    "fit_gao_rl",
    "gold_peak",
    "make_problem",
]

KINDS = ("noise", "misspecified", "rare_errors")


class ProxyGoldProblem(NamedTuple):
    """A reference, a gold reward and a proxy of it, over ``size`` outcomes (1-D arrays)."""

    ref: NDArray
    gold: NDArray
    proxy: NDArray
    kind: str


def make_problem(
    kind: str = "rare_errors",
    *,
    size: int = 5000,
    error: float = 1.0,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
) -> ProxyGoldProblem:
    r"""A random proxy-vs-gold problem of one of three kinds.

    The reference is :math:`\pi_{ref}(y) \propto e^{1.5\,\ell_y}`, :math:`\ell_y \sim N(0, 1)`
    (common and rare outcomes), and the gold reward :math:`g_y \sim N(0, 1)`,
    independent. The proxy :math:`p_y` is

    * ``"noise"``: :math:`p = g + \sigma \varepsilon`, :math:`\varepsilon \sim N(0, 1)`
      (regressional Goodhart: noise the optimiser selects for);
    * ``"misspecified"``: outcomes carry a feature :math:`x \sim N(0, 1)`
      (think length); :math:`g = z + x - x^2` penalises extremes while the proxy
      :math:`p = z + \sigma x` keeps rewarding the feature;
    * ``"rare_errors"``: :math:`p = g + \sigma\, s_y |\varepsilon_y|` with
      :math:`s_y = \max(0, \log \mathrm{median}(\pi_{ref}) - \log\pi_{ref}(y))`: the
      proxy over-rates outcomes the reference rarely produces, where a reward
      model has seen little data (extremal Goodhart).

    Parameters
    ----------
    kind : {"noise", "misspecified", "rare_errors"}
        Which error the proxy has.
    size : int, optional
        Number of outcomes (default 5000), ``>= 2``.
    error : float, optional
        The error scale :math:`\sigma > 0` (default 1).
    seed : int, optional
        Seed for ``np.random.default_rng`` when ``rng`` is not given.
    rng : numpy.random.Generator, optional
        Source of randomness; takes precedence over ``seed``.

    Returns
    -------
    ProxyGoldProblem
        ``(ref, gold, proxy, kind)``, arrays of shape ``(size,)``.

    Raises
    ------
    ValueError
        For an unknown ``kind``, ``size < 2``, a non-positive ``error`` or an
        ``rng`` that is not a ``numpy.random.Generator``.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, "Scaling Laws for Reward Model
       Overoptimization", 2022, arXiv:2210.10760.
    .. [2] Manheim and Garrabrant, "Categorizing Variants of Goodhart's Law",
       2018, arXiv:1803.04585 (regressional and extremal Goodhart).

    Examples
    --------
    >>> from klpolicy.overoptimization import make_problem
    >>> prob = make_problem("noise", size=5, seed=0)
    >>> prob.ref.shape, round(float(prob.ref.sum()), 12)
    ((5,), 1.0)
    """
    V.as_choice("kind", kind, KINDS)
    size = V.as_count("size", size, lo=2, hi=V.MAX_LOOP_COUNT)
    sigma = V.as_positive_scalar("error", error)
    if rng is None:
        rng = V.as_rng("seed", seed)
    elif not isinstance(rng, np.random.Generator):
        raise ValueError(f"`rng` must be a numpy.random.Generator; got {type(rng).__name__}")
    logits = 1.5 * rng.standard_normal(size)
    ref = np.exp(logits - logits.max())
    ref /= ref.sum()
    if kind == "noise":
        gold = rng.standard_normal(size)
        proxy = gold + sigma * rng.standard_normal(size)
    elif kind == "misspecified":
        z = rng.standard_normal(size)
        x = rng.standard_normal(size)
        gold = z + x - x**2
        proxy = z + sigma * x
    else:
        gold = rng.standard_normal(size)
        log_ref = np.log(ref)
        rarity = np.maximum(0.0, np.median(log_ref) - log_ref)
        proxy = gold + sigma * rarity * np.abs(rng.standard_normal(size))
    return ProxyGoldProblem(ref, gold, proxy, kind)


class OptimizationCurve(NamedTuple):
    """Proxy optimisation along a sweep; arrays of the sweep's length.

    ``knob`` is ``beta`` (closed form) or ``n`` (best-of-n); ``d = sqrt(kl)``;
    ``gold_gain`` is the gold reward minus its reference mean.
    """

    method: str
    knob: NDArray
    kl: NDArray
    d: NDArray
    proxy_reward: NDArray
    gold_reward: NDArray
    gold_gain: NDArray


def _problem(ref: ArrayLike, proxy: ArrayLike, gold: ArrayLike):
    V.one_problem(("ref", ref), ("proxy", proxy), ("gold", gold))
    ref_a, prox = _prepare(ref, proxy, -1, ("ref", "proxy"))
    gold_a = V.as_rewards("gold", gold, -1)
    if ref_a.ndim != 1:
        raise ValueError(f"`ref` must be one-dimensional here; got shape {ref_a.shape}")
    if gold_a.shape != ref_a.shape:
        raise ValueError(f"`gold` must have the shape of `ref` {ref_a.shape}; got {gold_a.shape}")
    return ref_a.astype(np.float64), prox.astype(np.float64), gold_a.astype(np.float64)


def closed_form_sweep(
    ref: ArrayLike, proxy: ArrayLike, gold: ArrayLike, betas: ArrayLike
) -> OptimizationCurve:
    r"""Optimise the proxy with the closed form :math:`\pi^*_\beta`; score it with the gold reward.

    .. math::

        \pi^*_\beta \propto \pi_{ref}\, e^{r_{proxy}/\beta}, \qquad
        \beta \mapsto \big(\sqrt{\mathrm{KL}(\pi^*_\beta\|\pi_{ref})},\;
        \mathbb{E}_{\pi^*_\beta}[r_{gold}] - \mathbb{E}_{\pi_{ref}}[r_{gold}]\big)

    Parameters
    ----------
    ref : array_like
        Reference probabilities, shape ``(V,)``.
    proxy, gold : array_like
        Proxy (optimised) and gold (measured) rewards, shape ``(V,)``.
    betas : array_like
        Grid of ``beta >= 0`` (``0``: greedy on the proxy; ``inf``: the reference).

    Returns
    -------
    OptimizationCurve
        With ``method="closed_form"`` and ``knob = betas`` (flattened).

    Raises
    ------
    ValueError
        For invalid inputs (as in :func:`klpolicy.optimal_policy`) or arrays
        that are not one-dimensional.

    Notes
    -----
    With a proxy, small ``beta`` is no longer the best choice for the gold
    reward: the curve typically peaks at some KL and then falls, which is why
    the KL penalty exists (reward hacking at small ``beta``).

    References
    ----------
    .. [1] Gao, Schulman and Hilton, 2022, arXiv:2210.10760.

    Examples
    --------
    >>> from klpolicy.overoptimization import closed_form_sweep
    >>> ref, proxy, gold = [0.5, 0.25, 0.25], [0.0, 1.0, 2.0], [0.0, 1.0, 0.0]
    >>> c = closed_form_sweep(ref, proxy, gold, [0.0, float("inf")])
    >>> c.gold_gain  # greedy on the proxy picks the outcome the gold reward rates 0
    array([-0.25,  0.  ])
    """
    ref_a, prox, gold_a = _problem(ref, proxy, gold)
    grid = V.check_beta_values("betas", betas).ravel()
    b = V.as_beta(grid.reshape(-1, 1), 2, 1, name="betas")
    t = _tilt(
        np.broadcast_to(ref_a, (grid.size, ref_a.size)),
        np.broadcast_to(prox, (grid.size, ref_a.size)),
        b,
    )
    gold_mean = t.pi @ gold_a
    base = ref_a @ gold_a / ref_a.sum()
    kl = t.kl[:, 0]
    return OptimizationCurve(
        "closed_form", grid, kl, np.sqrt(kl), t.mean[:, 0], gold_mean, gold_mean - base
    )


def best_of_n_sweep(
    ref: ArrayLike, proxy: ArrayLike, gold: ArrayLike, ns: ArrayLike
) -> OptimizationCurve:
    r"""Best-of-n on the proxy, scored with the gold reward, exactly.

    .. math::

        n \mapsto \Big(\sqrt{\mathrm{KL}(\pi_n\|\pi_{ref})},\;
        \sum_y \pi_n(y)\, r_{gold}(y) - \mathbb{E}_{\pi_{ref}}[r_{gold}]\Big)

    where :math:`\pi_n` keeps the draw with the highest *proxy* reward
    (:func:`klpolicy.best_of_n.best_of_n_policy`).

    Parameters
    ----------
    ref, proxy, gold
        As in :func:`closed_form_sweep`.
    ns : array_like of int
        Sample counts, integers ``>= 1``.

    Returns
    -------
    OptimizationCurve
        With ``method="best_of_n"`` and ``knob = ns`` (flattened).

    Raises
    ------
    ValueError
        For invalid inputs or ``ns`` (first bad entry shown).

    Notes
    -----
    One sort by proxy reward; each ``n`` then costs :math:`O(V)`: within a
    proxy level the gold reward enters through its reference-weighted mean.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, 2022, arXiv:2210.10760.

    Examples
    --------
    >>> from klpolicy.overoptimization import best_of_n_sweep
    >>> c = best_of_n_sweep([0.5, 0.5], [0.0, 1.0], [0.0, 1.0], [1, 2])
    >>> c.gold_reward
    array([0.5 , 0.75])
    """
    ref_a, prox, gold_a = _problem(ref, proxy, gold)
    grid = V.as_positive_int_array("ns", ns).ravel()
    lv = _levels(ref_a, prox)
    ps = lv.ref_n[lv.flat]
    gs = gold_a[lv.flat]
    if lv.gid is None:
        gbar = gs
    else:
        with np.errstate(invalid="ignore", divide="ignore"):
            gbar = np.bincount(lv.gid, weights=ps * gs) / lv.q
        gbar = np.where(lv.q > 0, gbar, 0.0)
    base = float(np.sum(lv.ref_n * gold_a))
    kl, proxy_r, gold_r = [], [], []
    for n in grid:
        law = _law(lv, float(n))
        kl.append(float(_kl(lv, law)))
        proxy_r.append(float(_expected_reward(lv, law)))
        gold_r.append(float(np.sum(law.mass * gbar)))
    kl_a, gold_arr = np.array(kl), np.array(gold_r)
    return OptimizationCurve(
        "best_of_n",
        grid.astype(np.int64),
        kl_a,
        np.sqrt(kl_a),
        np.array(proxy_r),
        gold_arr,
        gold_arr - base,
    )


class GaoFit(NamedTuple):
    """A fitted Gao et al. form: coefficients, the peak and the fit's RMS residual."""

    form: str
    a: float
    b: float
    d_peak: float
    gain_peak: float
    rmse: float


def _fit_data(d: ArrayLike, gain: ArrayLike):
    d_a = V.as_finite_array("d", np.ravel(V.as_float_array("d", d))).astype(np.float64)
    g_a = V.as_finite_array("gain", np.ravel(V.as_float_array("gain", gain))).astype(np.float64)
    if d_a.shape != g_a.shape:
        raise ValueError(f"`d` and `gain` must have the same size; got {d_a.size} and {g_a.size}")
    if (d_a < 0).any():
        i = int(np.flatnonzero(d_a < 0)[0])
        raise ValueError(f"`d` must be non-negative; found {d_a[i]:g} at index ({i},)")
    if np.unique(d_a[d_a > 0]).size < 2:
        raise ValueError("the fit needs at least two distinct positive values of `d`")
    return d_a, g_a


def _scales(d: NDArray, g: NDArray) -> tuple[float, float]:
    """Powers of two for ``d`` and ``gain`` where the unscaled fit would overflow or
    underflow (``d**2`` past float64 at ``d = 1e308``, where lstsq met ``inf``), else 1."""
    pos = d[d > 0]
    dmax, dmin = float(np.max(pos)), float(np.min(pos))
    gmax = float(np.max(np.abs(g)))
    s = 1.0 if 1e-150 < dmin and dmax < 1e150 else math.ldexp(1.0, math.frexp(dmax)[1] - 1)
    gs = 1.0 if gmax == 0 or 1e-150 < gmax < 1e150 else math.ldexp(1.0, math.frexp(gmax)[1] - 1)
    return s, gs


def _solve(cols: NDArray, g: NDArray) -> tuple[float, float, float]:
    import scipy.linalg  # lazy: keeps `import klpolicy` light

    coef, *_ = scipy.linalg.lstsq(cols, g)
    a, b = float(coef[0]), float(coef[1])
    rmse = float(np.sqrt(np.mean((cols @ coef - g) ** 2)))
    return a, b, rmse


def fit_gao_bon(d: ArrayLike, gain: ArrayLike) -> GaoFit:
    r"""Fit Gao et al.'s best-of-n form :math:`R(d) = d\,(a - b\,d)` by least squares.

    .. math::

        \min_{a, b} \sum_i \big(a\,d_i - b\,d_i^2 - R_i\big)^2, \qquad
        d^* = \frac{a}{2b}, \quad R(d^*) = \frac{a^2}{4b}

    Parameters
    ----------
    d : array_like
        Distances :math:`\sqrt{\mathrm{KL}}`, non-negative.
    gain : array_like
        Gold reward gained over the reference at each ``d``.

    Returns
    -------
    GaoFit
        ``(form="bon", a, b, d_peak, gain_peak, rmse)``; ``d_peak`` and
        ``gain_peak`` are ``inf`` when ``b <= 0`` (no peak).

    Raises
    ------
    ValueError
        For non-finite values, negative ``d``, mismatched sizes or fewer than
        two distinct positive ``d``.

    Notes
    -----
    The form is linear in :math:`(a, b)`, so the least-squares fit is a linear
    solve (``scipy.linalg.lstsq``): exact, with no starting point to choose. Where
    ``d`` or ``gain`` lies beyond ``1e150`` (or below ``1e-150``), where ``d**2`` and the
    squared residuals leave float64, the fit is solved for ``d`` and ``gain`` divided by
    powers of two and the coefficients, peak and RMS residual scaled back (``d = 1e308``
    once reached lstsq as ``inf``); a coefficient beyond float64 is then ``0`` or ``inf``.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, "Scaling Laws for Reward Model
       Overoptimization", 2022, arXiv:2210.10760, eq. (1).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.overoptimization import fit_gao_bon
    >>> d = np.linspace(0.0, 4.0, 9)
    >>> f = fit_gao_bon(d, d * (1.0 - 0.25 * d))
    >>> round(f.a, 12), round(f.b, 12), round(f.d_peak, 12)
    (1.0, 0.25, 2.0)
    """
    d_a, g_a = _fit_data(d, gain)
    s, gs = _scales(d_a, g_a)
    if s == 1.0 and gs == 1.0:
        a, b, rmse = _solve(np.column_stack([d_a, -(d_a**2)]), g_a)
        if b > 0:
            return GaoFit("bon", a, b, a / (2 * b), a * a / (4 * b), rmse)
        return GaoFit("bon", a, b, np.inf, np.inf, rmse)
    # d = s x, gain = gs y (powers of two): y = A x - B x^2 with a = gs A / s, b = gs B / s^2;
    # the peak d* = s A / (2B), R(d*) = gs A^2 / (4B) from the scaled coefficients
    x, y = d_a / s, g_a / gs
    big_a, big_b, rmse = _solve(np.column_stack([x, -(x**2)]), y)
    with np.errstate(over="ignore", under="ignore"):
        a, b = gs * big_a / s, gs * big_b / s / s
        if big_b > 0:
            peak = (s * (big_a / (2 * big_b)), gs * (big_a * (big_a / (4 * big_b))))
        else:
            peak = (np.inf, np.inf)
    return GaoFit("bon", float(a), float(b), float(peak[0]), float(peak[1]), float(gs * rmse))


def fit_gao_rl(d: ArrayLike, gain: ArrayLike) -> GaoFit:
    r"""Fit Gao et al.'s RL form :math:`R(d) = d\,(a - b \log d)` by least squares.

    .. math::

        \min_{a, b} \sum_i \big(a\,d_i - b\,d_i \log d_i - R_i\big)^2, \qquad
        d^* = e^{a/b - 1}, \quad R(d^*) = b\, d^*

    Parameters
    ----------
    d, gain
        As in :func:`fit_gao_bon` (``d log d`` is taken as 0 at ``d = 0``).

    Returns
    -------
    GaoFit
        ``(form="rl", a, b, d_peak, gain_peak, rmse)``; ``d_peak`` and
        ``gain_peak`` are ``inf`` when ``b <= 0``.

    Raises
    ------
    ValueError
        As in :func:`fit_gao_bon`.

    Notes
    -----
    Linear in :math:`(a, b)` as well; solved with ``scipy.linalg.lstsq``. The
    peak solves :math:`a - b\log d - b = 0`.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, 2022, arXiv:2210.10760, eq. (2).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.overoptimization import fit_gao_rl
    >>> d = np.linspace(0.1, 6.0, 30)
    >>> f = fit_gao_rl(d, d * (1.0 - 0.5 * np.log(d)))
    >>> round(f.a, 12), round(f.b, 12), round(f.d_peak, 10)  # exp(1/0.5 - 1) = e
    (1.0, 0.5, 2.7182818285)
    """
    d_a, g_a = _fit_data(d, gain)
    s, gs = _scales(d_a, g_a)
    if s == 1.0 and gs == 1.0:
        with np.errstate(divide="ignore", invalid="ignore"):
            dlogd = np.where(d_a > 0, d_a * np.log(np.where(d_a > 0, d_a, 1.0)), 0.0)
        a, b, rmse = _solve(np.column_stack([d_a, -dlogd]), g_a)
        if b > 0 and a / b - 1 < 709:
            d_star = float(np.exp(a / b - 1))
            return GaoFit("rl", a, b, d_star, b * d_star, rmse)
        return GaoFit("rl", a, b, np.inf, np.inf, rmse)
    # d = s x, gain = gs y: y = A x - B x log x with b = gs B / s, a = gs A / s + b log s;
    # d* = s e^{A/B - 1} and R(d*) = b d* = gs B e^{A/B - 1}, from the scaled coefficients
    x, y = d_a / s, g_a / gs
    with np.errstate(divide="ignore", invalid="ignore"):
        xlogx = np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)
    big_a, big_b, rmse = _solve(np.column_stack([x, -xlogx]), y)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        b = gs * big_b / s
        a = gs * big_a / s + b * math.log(s)
        if big_b > 0 and big_a / big_b - 1 < 709:
            e = math.exp(big_a / big_b - 1)
            peak = (s * e, gs * big_b * e)
        else:
            peak = (np.inf, np.inf)
    return GaoFit("rl", float(a), float(b), float(peak[0]), float(peak[1]), float(gs * rmse))


class GoldPeak(NamedTuple):
    """Where a sweep's gold reward peaks, and how much is lost at its far end."""

    knob: float
    d: float
    gold_gain: float
    final_gold_gain: float
    loss: float


def gold_peak(curve: OptimizationCurve) -> GoldPeak:
    r"""The best gold reward along a sweep and the loss at the sweep's most optimised end.

    .. math::

        \text{loss} = \max_i R_i - R_{\text{end}}, \quad
        \text{end} = \arg\max_i d_i

    Parameters
    ----------
    curve : OptimizationCurve
        From :func:`closed_form_sweep` or :func:`best_of_n_sweep`.

    Returns
    -------
    GoldPeak
        ``(knob, d, gold_gain, final_gold_gain, loss)``: the ``beta`` or ``n``
        of the peak, its distance and gain, the gain at the largest ``d`` and
        the difference. A positive ``loss`` is reward hacking: pushing the
        proxy further lowered the gold reward.

    Raises
    ------
    ValueError
        For a curve with no points.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, 2022, arXiv:2210.10760.

    Examples
    --------
    >>> from klpolicy.overoptimization import closed_form_sweep, gold_peak
    >>> c = closed_form_sweep([0.5, 0.25, 0.25], [0.0, 1.0, 2.0], [0.0, 1.0, 0.0],
    ...                       [0.0, 0.5, 1.0, 4.0, float("inf")])
    >>> p = gold_peak(c)
    >>> float(p.knob), round(p.loss, 4)
    (4.0, 0.2603)
    """
    if not all(hasattr(curve, f) for f in ("knob", "d", "gold_gain")):
        raise ValueError(
            "`curve` must be an OptimizationCurve (from closed_form_sweep or best_of_n_sweep); "
            f"got {V.describe(curve)}"
        )
    if len(curve.d) == 0:
        raise ValueError("`curve` has no points")
    i = int(np.argmax(curve.gold_gain))
    end = int(np.argmax(curve.d))
    return GoldPeak(
        float(curve.knob[i]),
        float(curve.d[i]),
        float(curve.gold_gain[i]),
        float(curve.gold_gain[end]),
        float(curve.gold_gain[i] - curve.gold_gain[end]),
    )
