r"""Calibrated rewards, their exact partition functions, and inference-aware win rates.

The calibrated reward of an outcome is its reward's quantile under the reference,

.. math::

    C(y) = \mathbb{P}_{Y' \sim \pi_{ref}}\big(r(Y') < r(y)\big)
        + \tfrac12\, \mathbb{P}_{Y' \sim \pi_{ref}}\big(r(Y') = r(y)\big)
    \quad\text{(mid-rank)}, \qquad
    C(y) = \mathbb{P}_{Y' \sim \pi_{ref}}\big(r(Y') \le r(y)\big) \quad\text{(upper)}.

The mid-rank is the win rate of ``y`` against one reference draw with ties counted
half (the win-rate convention of InfAlign, Balashankar et al. 2025, whose calibrated
reward is the probability of beating a reference draw: for a reward without atoms all
these coincide); the upper one is QRPO's
quantile reward (Matrenok et al. 2025: ``(ref_rewards <= rewards).mean()``). When the
reward has a continuous law under the reference, :math:`C(Y)` is uniform on
:math:`[0, 1]` and the partition function of the tilt by a transform
:math:`\Phi(C)` is an integral over ``[0, 1]`` that does not depend on the problem,

.. math::

    Z = \mathbb{E}_{\pi_{ref}}\big[e^{\Phi(C)/\beta}\big]
      \;\to\; \int_0^1 e^{\Phi(u)/\beta}\,du
      = \beta\,(e^{1/\beta} - 1) \quad (\Phi(u) = u),

QRPO's closed form. On a discrete support the reward's law has atoms and the exact
:math:`Z` is a quadrature of that integral over the reference's quantile intervals,
which :func:`calibrated_partition` computes beside the closed form.
See ``docs/derivations/horizon.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import prepare as _prepare
from ..core.internal import special
from ..core.internal import validation as V
from ._law import _law, _levels, _one_problem, _row_sum, _setup

__all__ = [
    "CALIBRATED_TRANSFORMS",
    "CalibratedPartition",
    "CalibratedTransform",
    "OptimalExponent",
    "calibrated_partition",
    "calibrated_policy",
    "calibrated_reward",
    "inference_win_rate",
    "optimal_exponent",
]

_TIES = ("mid", "upper")
_DECODINGS = ("best", "worst")


# --------------------------------------------------------------------------------------
# calibrated reward
# --------------------------------------------------------------------------------------


def _level_c(lv, ties: str) -> NDArray:
    """C per reward level: ``below + q/2`` (mid) or ``below + q`` (upper).

    Above the median it is formed from the mass above (``1 - above - q/2``, ``1 - above``),
    so the top level of ``upper`` is exactly 1 and no digit is lost near 1.
    """
    h = 0.5 if ties == "mid" else 1.0
    low = lv.below + h * lv.q
    high = 1.0 - (lv.above + (1.0 - h) * lv.q)
    return np.where(lv.below < 0.5, low, high)


def _scatter(lv, x_level: NDArray) -> NDArray:
    """One value per level back to the outcomes, flat (B*V,), in the callers' order."""
    out = np.empty(lv.ref_n.size)
    out[lv.flat] = x_level if lv.gid is None else x_level[lv.gid]
    return out


def calibrated_reward(
    ref: ArrayLike, reward: ArrayLike, *, ties: str = "mid", axis: int = -1
) -> NDArray[np.floating]:
    r"""The calibrated reward: each outcome's reward quantile under the reference, ties exact.

    .. math::

        C_{mid}(y) = \pi_{ref}(r < r(y)) + \tfrac12\,\pi_{ref}(r = r(y)), \qquad
        C_{upper}(y) = \pi_{ref}(r \le r(y))

    Parameters
    ----------
    ref : array_like
        Reference probabilities along ``axis`` (rows summing to 1; zeros allowed).
    reward : array_like
        Finite rewards, broadcast against ``ref``.
    ties : {"mid", "upper"}, optional
        ``"mid"`` (default): mid-rank, the win rate of ``y`` against one reference draw
        with ties counted half (InfAlign's win-rate convention). ``"upper"``: the reference CDF at ``r(y)``,
        QRPO's quantile reward.
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray
        ``C`` in ``[0, 1]``, the broadcast shape of ``ref`` and ``reward``, float64
        (float32 for float32 inputs). Outcomes of equal reward get equal ``C``;
        an outcome outside the reference's support gets the ``C`` its reward has.

    Raises
    ------
    ValueError
        For ``ties`` not one of the two names, and invalid ``ref`` / ``reward`` as in
        :func:`klpolicy.optimal_policy` (``ref`` negative, not summing to 1, NaN ...).

    Notes
    -----
    One sort per row; equal rewards are grouped exactly (no tolerance: ``1.0`` and
    ``1.0 + 1e-16`` are different rewards). :math:`\mathbb{E}_{\pi_{ref}}[C_{mid}] = 1/2`
    exactly, whatever the ties; :math:`\mathbb{E}_{\pi_{ref}}[C_{upper}] = 1/2 +
    \tfrac12\sum_g q_g^2` over the reward levels' masses :math:`q_g`, so QRPO's
    quantile reward is biased up by half the collision probability. Cost
    :math:`O(V \log V)`.

    References
    ----------
    .. [1] Balashankar et al., "InfAlign: Inference-aware language model alignment",
       ICML 2025, arXiv:2412.19792, Section 4 (calibrated reward).
    .. [2] Matrenok, Moalla, Gulcehre, "Quantile Reward Policy Optimization", 2025,
       arXiv:2507.08068 (quantile reward; CLAIRE-Labo/quantile-reward-policy-optimization
       at e93dcf1, ``src/qrpo/trainers/qrpo.py``, ``qrpo_loss``: ``ref_rewards <= rewards``).

    Examples
    --------
    >>> from klpolicy.best_of_n import calibrated_reward
    >>> calibrated_reward([0.25, 0.25, 0.5], [1.0, 1.0, 0.0])  # a tie at the top
    array([0.75, 0.75, 0.25])
    >>> calibrated_reward([0.25, 0.25, 0.5], [1.0, 1.0, 0.0], ties="upper")
    array([1. , 1. , 0.5])
    """
    t = V.as_choice("ties", ties, _TIES)
    ref_a, rew_a, ax = _setup(ref, reward, axis)
    lv = _levels(ref_a, rew_a)
    c = _scatter(lv, _level_c(lv, t)).reshape(ref_a.shape).astype(ref_a.dtype, copy=False)
    return np.moveaxis(c, -1, ax)


# --------------------------------------------------------------------------------------
# transforms and partition functions
# --------------------------------------------------------------------------------------


class CalibratedTransform(NamedTuple):
    """One transform :math:`\\Phi` of the calibrated reward: a row of :data:`CALIBRATED_TRANSFORMS`.

    ``phi(u, t)`` evaluates :math:`\\Phi` (``t`` its parameter, ``None`` when it takes
    none); ``log_z_uniform(beta, t)`` is :math:`\\log\\int_0^1 e^{\\Phi(u)/\\beta}du`,
    the log partition function for a continuous calibrated reward (uniform on [0, 1]);
    ``takes_t`` says whether ``t`` is required; ``source`` where it comes from.
    """

    name: str
    phi: Callable[[NDArray, Any], NDArray]
    log_z_uniform: Callable[[float, Any], float]
    takes_t: bool
    source: str


_ASYMPTOTIC_FROM = 700.0  # above this, Ei and E1 are formed from their asymptotic series


def _asymptotic(x: float, sign: float) -> float:
    """``log(sum_k sign^k k!/x^k)`` for ``x >= 700``: the series of Ei (sign +1) and E1 (-1)."""
    term, total = 1.0, 1.0
    for k in range(1, 30):
        term *= sign * k / x
        total += term
        if abs(term) < 1e-18:
            break
    return math.log(total)


def _log_ei(x: float) -> float:
    """log Ei(x) for ``x > 0.3725`` (Ei positive), without overflow."""
    if x < _ASYMPTOTIC_FROM:
        return math.log(float(special.expi(x)))
    return x - math.log(x) + _asymptotic(x, 1.0)


def _log_e1(x: float) -> float:
    """log E1(x) for ``x > 0``, without underflow."""
    if x < _ASYMPTOTIC_FROM:
        return math.log(float(special.exp1(x)))
    return -x - math.log(x) + _asymptotic(x, -1.0)


def _log_z_exp(beta: float, t: float) -> float:
    r"""``log int_0^1 exp(sign(t) e^{tu} / beta) du`` by the exponential integrals.

    Where :math:`|e^t - 1|/\beta < 30` the two exponential integrals nearly cancel and a
    64-node Gauss-Legendre rule on the (entire) integrand is used instead, exact to
    rounding there.

    ``t > 0``: :math:`(\mathrm{Ei}(e^t/\beta) - \mathrm{Ei}(1/\beta))/t`;
    ``t < 0``: :math:`(E_1(e^t/\beta) - E_1(1/\beta))/|t|` (substitute :math:`v = e^{tu}`).
    """
    spread = abs(math.expm1(t)) / beta  # the range of Phi(u)/beta over [0, 1]
    if spread < 30.0:
        # Gauss-Legendre, 64 nodes, on the entire integrand exp(sign (e^{tu} - 1)/beta)
        # (the Ei / E1 difference cancels here: its terms agree to ~spread)
        x, w = np.polynomial.legendre.leggauss(64)
        u = 0.5 * (x + 1.0)
        e = math.copysign(1.0, t) * np.expm1(t * u) / beta
        m = float(e.max())
        return math.copysign(1.0, t) / beta + m + math.log(0.5 * float(w @ np.exp(e - m)))
    a, b = 1.0 / beta, math.exp(t) / beta
    if t > 0:
        if b < _ASYMPTOTIC_FROM:
            return math.log((float(special.expi(b)) - float(special.expi(a))) / t)
        lb = _log_ei(b)
        ea = float(special.expi(a)) if a < _ASYMPTOTIC_FROM else None
        ratio = ea * math.exp(-lb) if ea is not None else math.exp(_log_ei(a) - lb)
        return lb + math.log1p(-ratio) - math.log(t)
    lb = _log_e1(b)  # b < a: E1(b) > E1(a)
    return lb + math.log1p(-math.exp(_log_e1(a) - lb)) - math.log(-t)


def _phi_exp(u: NDArray, t: float) -> NDArray:
    return math.copysign(1.0, t) * np.exp(t * u)


def _phi_log(u: NDArray, t: Any) -> NDArray:
    with np.errstate(divide="ignore"):
        return np.log(u)


#: The named transforms of the calibrated reward, each with its partition function for a
#: continuous calibrated reward. ``"identity"`` (QRPO, InfAlign's standard win rate),
#: ``"log"`` and ``"normal-icdf"`` (QRPO's other transforms), ``"exp"`` (InfAlign's
#: exponential transform :math:`\Phi_t(u) = \mathrm{sign}(t)\,e^{tu}`: ``t > 0`` for
#: best-of-N decoding, ``t < 0`` for worst-of-N).
CALIBRATED_TRANSFORMS: dict[str, CalibratedTransform] = {
    "identity": CalibratedTransform(
        "identity",
        lambda u, t: u,
        # beta (e^{1/beta} - 1) in logs: log beta + 1/beta + log(1 - e^{-1/beta})
        lambda beta, t: math.log(beta) + 1.0 / beta + math.log1p(-math.exp(-1.0 / beta)),
        False,
        "QRPO Eq. (11) (arXiv:2507.08068); InfAlign's calibrated win rate",
    ),
    "log": CalibratedTransform(
        "log",
        _phi_log,
        lambda beta, t: math.log(beta) - math.log1p(beta),  # int u^{1/beta} = beta/(1+beta)
        False,
        "QRPO's log transform (qrpo_loss, qrpo_transform_type='log')",
    ),
    "normal-icdf": CalibratedTransform(
        "normal-icdf",
        lambda u, t: special.ndtri(u),
        lambda beta, t: 0.5 / beta**2,  # E exp(X/beta), X ~ N(0, 1)
        False,
        "QRPO's normal-icdf transform (qrpo_transform_type='normal-icdf')",
    ),
    "exp": CalibratedTransform(
        "exp",
        _phi_exp,
        _log_z_exp,
        True,
        "InfAlign (arXiv:2412.19792) Section 4: exponential transforms, t > 0 for "
        "best-of-N, t < 0 for worst-of-N",
    ),
}


def _transform(transform: Any, t: Any):
    """``(phi(u) -> array, log_z_uniform(beta) -> float or None)`` for a name or a callable."""
    if callable(transform):
        if t is not None:
            raise ValueError(
                f"`t` is the parameter of a named transform; got t={V.describe(t)} with a "
                "callable `transform` (close over the parameter instead)"
            )

        def phi(u):
            got = transform(np.asarray(u, dtype=np.float64))
            try:
                out = np.asarray(got, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(
                    "`transform` must map an array of calibrated rewards to an array of real "
                    f"numbers; got {V.describe(got)}"
                ) from None
            if out.shape != np.shape(u):
                raise ValueError(
                    f"`transform` must map an array of calibrated rewards to an array of the "
                    f"same shape; got shape {out.shape} for input shape {np.shape(u)}"
                )
            if np.isnan(out).any() or (out == np.inf).any():
                raise ValueError(
                    "`transform` must return finite values or -inf; got NaN or +inf "
                    f"at C = {np.asarray(u)[np.isnan(out) | (out == np.inf)][0]!r}"
                )
            return out

        return phi, None
    name = V.as_choice("transform", transform, tuple(CALIBRATED_TRANSFORMS))
    row = CALIBRATED_TRANSFORMS[name]
    if row.takes_t:
        tv = V.as_scalar("t", t, what="the exponent of the transform")
        if tv == 0 or abs(tv) > 700:
            raise ValueError(
                "`t` must be non-zero (t > 0: best-of-N, t < 0: worst-of-N) with |t| <= 700 "
                f"(e^t overflows past it); got {tv!r}"
            )
    elif t is not None:
        raise ValueError(
            f"`t` is only for the transforms that take a parameter ('exp'); got "
            f"t={V.describe(t)} with transform={name!r}"
        )
    else:
        tv = None
    return (lambda u: row.phi(u, tv)), (lambda beta: row.log_z_uniform(beta, tv))


def _log_uniform_quad(phi, beta: float) -> float:
    """``log int_0^1 exp(phi(u)/beta) du`` by adaptive quadrature (a callable transform)."""
    from scipy import integrate

    grid = np.linspace(0.0, 1.0, 257)[1:-1]
    shift = float(np.max(phi(grid))) / beta
    val, _ = integrate.quad(
        lambda u: math.exp(float(phi(np.asarray([u]))[0]) / beta - shift),
        0.0, 1.0, limit=200, epsabs=0.0, epsrel=1e-12,
    )  # fmt: skip
    return math.log(val) + shift


class CalibratedPartition(NamedTuple):
    """The exact partition function of a calibrated tilt, beside the continuous closed form.

    Fields are per batch row (the probability axis removed), in nats:

    * ``log_z``: :math:`\\log \\sum_y \\pi_{ref}(y)\\, e^{\\Phi(C(y))/\\beta}`, exact;
    * ``log_z_continuous``: :math:`\\log\\int_0^1 e^{\\Phi(u)/\\beta}du`, the value for a
      continuous calibrated reward (QRPO's closed form for the identity);
    * ``log_gap``: ``log_z - log_z_continuous``. The policy QRPO's regression targets,
      :math:`\\pi_{ref}\\,e^{\\Phi(C)/\\beta}/Z_{cont}`, has total mass ``exp(log_gap)``;
      its log-ratios are all off by ``log_gap``.
    """

    log_z: NDArray | np.floating
    log_z_continuous: float
    log_gap: NDArray | np.floating


def _calibrated_terms(ref, reward, beta, transform, t, ties, axis):
    """Validated pieces: levels, per-level ``Phi(C)``, ``beta``, ``log_z_uniform``, layout."""
    tie = V.as_choice("ties", ties, _TIES)
    b = V.as_scalar("beta", beta, "(0, inf)", what="the KL coefficient")
    phi, log_z_u = _transform(transform, t)
    ref_a, rew_a, ax = _setup(ref, reward, axis)
    lv = _levels(ref_a, rew_a)
    c = _level_c(lv, tie)
    with np.errstate(divide="ignore", over="ignore"):
        f = np.asarray(phi(c), dtype=np.float64)
    on = lv.q > 0
    if (f[on] == np.inf).any():
        where = float(c[on][f[on] == np.inf][0])
        raise ValueError(
            f"`transform` is +inf at a calibrated reward of the support (C = {where!r}; "
            f"'normal-icdf' at C = 1 with ties='upper'): the partition function is infinite; "
            "use ties='mid'"
        )
    top = np.maximum.reduceat(np.where(on, f, -np.inf), lv.row_first)
    if (top == -np.inf).any():
        row = int(np.argmax(top == -np.inf))
        raise ValueError(
            f"`transform` is -inf at every calibrated reward of the support of row {row}: "
            "the tilt puts no mass anywhere (its partition function is 0)"
        )
    return lv, f, b, log_z_u, ref_a, ax


def _tilt_rows(lv, f: NDArray, b: float) -> tuple[NDArray, NDArray]:
    """``log Z`` per row and ``log(pi/ref)`` per level for the tilt by ``exp(f/b)``.

    The largest ``f`` on each row's support is subtracted before dividing by ``b``, so
    ``(f - f_max)/b`` carries no cancellation however large ``f/b`` is (a subtraction
    after the division would lose ``|f/b| * eps`` and the law its normalisation).
    """
    on = lv.q > 0
    row = np.searchsorted(lv.row_first, np.arange(f.size), side="right") - 1
    fmax = np.maximum.reduceat(np.where(on, f, -np.inf), lv.row_first)
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        d = np.where(on, (f - fmax[row]) / b, -np.inf)  # <= 0, 0 at the row's top
        e = np.where(on, np.log(np.where(on, lv.q, 1.0)) + d, -np.inf)
        m = np.maximum.reduceat(e, lv.row_first)
        lse = m + np.log(np.add.reduceat(np.exp(e - m[row]), lv.row_first))
    log_z = (fmax / b + lse).reshape(lv.shape)
    return log_z, d - lse[row]


def calibrated_partition(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: float,
    *,
    transform: str | Callable[[NDArray], NDArray] = "identity",
    t: float | None = None,
    ties: str = "mid",
    axis: int = -1,
) -> CalibratedPartition:
    r"""The exact partition function of :math:`\pi_{ref}\,e^{\Phi(C)/\beta}`, and QRPO's closed form.

    .. math::

        Z = \sum_g q_g\, e^{\Phi(C_g)/\beta}, \qquad
        Z_{cont} = \int_0^1 e^{\Phi(u)/\beta}\,du
        \;\overset{\Phi(u)=u}{=}\; \beta\,(e^{1/\beta} - 1)

    summed over the reward levels :math:`g` (reference mass :math:`q_g`, calibrated
    reward :math:`C_g`).

    Parameters
    ----------
    ref, reward : array_like
        As in :func:`calibrated_reward`.
    beta : float
        The KL coefficient, ``0 < beta < inf``.
    transform : str or callable, optional
        A name in :data:`CALIBRATED_TRANSFORMS` (``"identity"`` by default, ``"log"``,
        ``"normal-icdf"``, ``"exp"``) or a function mapping an array of calibrated
        rewards to :math:`\Phi` of them (values finite or ``-inf``).
    t : float, optional
        The exponent of ``"exp"`` (required there, non-zero); ``None`` otherwise.
    ties : {"mid", "upper"}, optional
        The calibration, as in :func:`calibrated_reward`.
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    CalibratedPartition
        ``log_z`` (exact, per row), ``log_z_continuous`` (the closed form; adaptive
        quadrature for a callable ``transform``) and ``log_gap = log_z - log_z_continuous``.

    Raises
    ------
    ValueError
        For ``beta`` not in ``(0, inf)``, ``ties`` or ``transform`` not a valid name, ``t``
        missing, zero or given where it means nothing, a transform that is ``+inf`` on the
        support (``"normal-icdf"`` with ``ties="upper"``), and invalid ``ref`` / ``reward``.

    Notes
    -----
    The reference's quantile intervals :math:`[F^-_g, F_g]` (length :math:`q_g`) tile
    ``[0, 1]``, so :math:`Z` is a quadrature rule for :math:`Z_{cont}`: the midpoint rule
    for ``ties="mid"``, the right-endpoint rule for ``"upper"``. The closed form is exact
    only for a continuous calibrated reward; with atoms the relative gap is

    * ``mid``: :math:`\sum_g q_g^3\,\overline{(e^{\Phi/\beta})''}/24 \,/\, Z` to leading
      order, :math:`\approx \max_g q_g^2/(24\beta^2)` for the identity, small while every
      level's mass is below :math:`\beta`;
    * ``upper``: first order, :math:`\approx \sum_g q_g^2 (e^{\Phi/\beta})'/2 \,/\, Z`,
      about :math:`q_{top}/(2\beta)` for the identity: QRPO's targets are biased up;

    and once a level's mass exceeds :math:`\beta` the closed form is off by more than
    its own size: for the identity with a top level of mass :math:`q`,
    ``log_gap`` tends to :math:`\log(q/\beta) - q/(2\beta)` (mid) as :math:`\beta \to 0`.
    Both sums are formed in log space (the largest term factored out), so ``beta``
    down to 1e-300 neither overflows nor loses the gap.

    References
    ----------
    .. [1] Matrenok, Moalla, Gulcehre, "Quantile Reward Policy Optimization: Alignment
       with Pointwise Regression and Exact Partition Functions", 2025, arXiv:2507.08068,
       Eq. (11); CLAIRE-Labo/quantile-reward-policy-optimization at e93dcf1,
       ``src/qrpo/trainers/qrpo.py``, ``qrpo_loss`` (``log_Z = log(beta) + 1/beta``, the
       large-``1/beta`` form of :math:`\log\beta(e^{1/\beta}-1)`; ``log``:
       :math:`\beta/(1+\beta)`; ``normal-icdf``: :math:`e^{1/(2\beta^2)}`).
    .. [2] Balashankar et al., 2025, arXiv:2412.19792, Section 4 (the exponential
       transforms).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.best_of_n import calibrated_partition
    >>> p = calibrated_partition(np.full(1000, 1e-3), np.arange(1000.0), 0.5)  # no ties
    >>> round(float(p.log_gap), 8)  # the midpoint rule's error, about -1/(24 beta^2 V^2)
    -1.7e-07
    >>> p = calibrated_partition([0.5, 0.5], [1.0, 1.0], 0.5)  # one tie: C = 1/2
    >>> round(float(p.log_z), 6), round(float(p.log_z_continuous), 6)
    (1.0, 1.161439)
    """
    lv, f, b, log_z_u, ref_a, _ = _calibrated_terms(ref, reward, beta, transform, t, ties, axis)
    log_z, _ = _tilt_rows(lv, f, b)
    if log_z_u is None:
        phi, _ = _transform(transform, None)
        log_zc = _log_uniform_quad(phi, b)
    else:
        log_zc = float(log_z_u(b))
    dtype = ref_a.dtype
    return CalibratedPartition(
        np.asarray(log_z, dtype=dtype)[()], log_zc, np.asarray(log_z - log_zc, dtype=dtype)[()]
    )


def calibrated_policy(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: float,
    *,
    transform: str | Callable[[NDArray], NDArray] = "identity",
    t: float | None = None,
    ties: str = "mid",
    axis: int = -1,
) -> NDArray[np.floating]:
    r"""The KL-regularised optimum for the transformed calibrated reward (InfAlign-CTRL's target).

    .. math::

        \pi(y) = \pi_{ref}(y)\, e^{\Phi(C(y))/\beta} / Z

    with the exact :math:`Z` of :func:`calibrated_partition`.

    Parameters
    ----------
    ref, reward, beta, transform, t, ties, axis
        As in :func:`calibrated_partition`.

    Returns
    -------
    ndarray
        The policy, the broadcast shape of ``ref`` and ``reward`` (float64, or float32
        for float32 inputs); zero off the reference's support; outcomes of equal reward
        keep their reference odds.

    Raises
    ------
    ValueError
        As in :func:`calibrated_partition`.

    Notes
    -----
    InfAlign's Theorem: for an inference-time procedure (best-of-N, worst-of-N), the
    policy that maximises the inference-time win rate against the reference under a KL
    budget is such a tilt for some transform; InfAlign-CTRL calibrates, transforms and
    then solves the standard KL-regularised problem. This is that solution in closed
    form; :func:`inference_win_rate` scores it. Equal to
    :func:`klpolicy.optimal_policy` ``(ref, Phi(C), beta)`` where ``Phi(C)`` is finite.

    References
    ----------
    .. [1] Balashankar et al., "InfAlign: Inference-aware language model alignment",
       ICML 2025, arXiv:2412.19792, Sections 3-4.

    Examples
    --------
    >>> from klpolicy.best_of_n import calibrated_policy
    >>> calibrated_policy([0.5, 0.5], [1.0, 0.0], 0.5).round(6)  # C = 3/4 and 1/4
    array([0.731059, 0.268941])
    """
    lv, f, b, _, ref_a, ax = _calibrated_terms(ref, reward, beta, transform, t, ties, axis)
    _, u = _tilt_rows(lv, f, b)
    with np.errstate(under="ignore"):
        pi = lv.ref_n * np.exp(_scatter(lv, u))
    pi = np.where(lv.ref_n > 0, pi, 0.0)
    pi = pi.reshape(ref_a.shape).astype(ref_a.dtype, copy=False)
    return np.moveaxis(pi, -1, ax)


# --------------------------------------------------------------------------------------
# inference-time win rate
# --------------------------------------------------------------------------------------


def inference_win_rate(
    policy: ArrayLike,
    ref: ArrayLike,
    reward: ArrayLike,
    n: int,
    *,
    decoding: str = "best",
    axis: int = -1,
) -> NDArray[np.floating] | np.floating:
    r"""The exact win rate against the reference of the best (or worst) of ``n`` draws from a policy.

    .. math::

        W = \mathbb{P}\big(r(Y_n) > r(Y)\big) + \tfrac12\,\mathbb{P}\big(r(Y_n) = r(Y)\big)
          = \sum_g P_n(g)\, C_{mid}(g),

        P_n(g) = G_g^n - (G_g^-)^n \;\text{(best)}, \qquad
        P_n(g) = (1 - G_g^-)^n - (1 - G_g)^n \;\text{(worst)},

    with :math:`Y_n` the kept draw of ``n`` i.i.d. draws from ``policy``,
    :math:`Y \sim \pi_{ref}`, :math:`G` the policy's reward CDF and :math:`C_{mid}`
    the reference's mid-rank calibrated reward.

    Parameters
    ----------
    policy : array_like
        The aligned policy's probabilities along ``axis`` (rows summing to 1).
    ref : array_like
        The reference's probabilities, same outcomes.
    reward : array_like
        Finite rewards, broadcast against both.
    n : int
        Number of draws, an integer ``>= 1`` (``1``: standard sampling).
    decoding : {"best", "worst"}, optional
        Keep the highest-reward draw (best-of-N sampling, the default) or the lowest
        (worst-of-N, InfAlign's model of best-of-N jailbreaking).
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray or float
        The win rate per batch row, in ``[0, 1]``; ties count half.

    Raises
    ------
    ValueError
        For ``n`` not an integer ``>= 1``, ``decoding`` not one of the two names,
        invalid ``policy`` / ``ref`` / ``reward`` (each named).

    Notes
    -----
    Only the law of the kept draw's reward level matters: the best of ``n`` has level
    ``g`` with probability :math:`G_g^n - (G_g^-)^n` (formed as in
    :func:`best_of_n_policy`, in log space); the worst of ``n`` is the best of ``n`` for
    the reward :math:`-r`. A win against a reference draw at level ``g`` has
    probability :math:`C_{mid}(g)`. With ``policy = ref`` and ``decoding="best"`` this
    is :func:`best_of_n_win_rate`; with ``n = 1`` it is :math:`\mathbb{E}_\pi[C_{mid}]`,
    the standard win rate that the identity transform's tilt maximises under a KL
    budget (InfAlign, Section 4).

    References
    ----------
    .. [1] Balashankar et al., "InfAlign: Inference-aware language model alignment",
       ICML 2025, arXiv:2412.19792, Section 2 (inference-time win rate) and Section 4.

    Examples
    --------
    >>> from klpolicy.best_of_n import inference_win_rate
    >>> float(inference_win_rate([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], 3))  # best_of_n_win_rate
    0.6875
    >>> float(inference_win_rate([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], 3, decoding="worst"))
    0.3125
    """
    from .law import _scalar_n

    mode = V.as_choice("decoding", decoding, _DECODINGS)
    nn = _scalar_n(n)
    pol_a, rew_a = _prepare(policy, reward, axis, ("policy", "reward"))
    ref_a = V.as_probabilities("ref", ref, axis)
    try:
        shape = np.broadcast_shapes(pol_a.shape, ref_a.shape)
    except ValueError:
        raise ValueError(
            f"`policy` and `ref` must have the same outcomes and broadcastable batch axes; "
            f"got shapes {pol_a.shape} and {ref_a.shape} (probability axis last)"
        ) from None
    if shape[-1] != pol_a.shape[-1] or shape[-1] != ref_a.shape[-1]:
        raise ValueError(
            f"`policy` and `ref` must have the same number of outcomes along axis {axis}; "
            f"got {pol_a.shape[-1]} and {ref_a.shape[-1]}"
        )
    pol_a = np.broadcast_to(pol_a, shape)
    ref_b = np.broadcast_to(ref_a.astype(np.float64), shape)
    rew_b = np.broadcast_to(rew_a, shape)
    if mode == "worst":
        rew_b = -rew_b
    lv_pi = _levels(pol_a, rew_b)
    lv_ref = _levels(ref_b, rew_b)
    mass = _law(lv_pi, nn).mass
    # a win against a reference draw: the reference mass strictly below in the order of
    # the kept draw's reward (above, for worst-of-n), plus half the tie
    c = _level_c(lv_ref, "mid") if mode == "best" else lv_ref.above + 0.5 * lv_ref.q
    wr = _row_sum(lv_ref, mass * c)
    return np.asarray(wr, dtype=V.result_dtype(pol_a, ref_a))[()]


# --------------------------------------------------------------------------------------
# the exponent InfAlign's transform should take
# --------------------------------------------------------------------------------------


class OptimalExponent(NamedTuple):
    """The exponential transform that maximises a best-of-N (worst-of-N) win rate at a KL.

    ``t`` and ``beta`` define the tilt :math:`\\pi_{ref}\\,e^{\\mathrm{sign}(t)e^{tC}/\\beta}/Z`
    with the given KL; ``win_rate`` is its inference-time win rate; ``identity_beta`` and
    ``identity_win_rate`` are the identity transform's at the same KL (the standard
    win-rate optimum), for comparison; ``at_bound`` is True when ``|t|`` is the search's
    largest, ``t_max`` (the optimum is there or beyond).
    """

    t: float
    beta: float
    win_rate: float
    identity_beta: float
    identity_win_rate: float
    at_bound: bool


def _excl(p: NDArray) -> tuple[NDArray, NDArray]:
    below = np.concatenate([[0.0], np.cumsum(p[:-1])])
    above = np.concatenate([np.cumsum(p[:0:-1])[::-1], [0.0]])
    return below, above


def optimal_exponent(
    ref: ArrayLike,
    reward: ArrayLike,
    n: int,
    kl: float,
    *,
    decoding: str = "best",
    ties: str = "mid",
    t_max: float = 60.0,
) -> OptimalExponent:
    r"""The exponent of InfAlign's transform that maximises the best-of-N win rate at a KL budget.

    .. math::

        t^* = \arg\max_t\; W_N\big(\pi_{t,\beta(t)}\big), \qquad
        \pi_{t,\beta} \propto \pi_{ref}\, e^{\mathrm{sign}(t)\,e^{tC}/\beta},\quad
        \mathrm{KL}(\pi_{t,\beta(t)}\|\pi_{ref}) = \mathrm{kl}

    over ``0 < t <= t_max`` for best-of-N decoding and ``-t_max <= t < 0`` for worst-of-N,
    with :math:`W_N` the exact win rate of :func:`inference_win_rate`.

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
        One problem.
    n : int
        Number of draws the decoder takes, an integer ``>= 1``.
    kl : float
        The KL budget, ``0 < kl <`` the largest KL a tilt reaches
        (:math:`-\log` of the top reward level's reference mass).
    decoding : {"best", "worst"}, optional
        Best-of-N sampling (``t > 0``) or worst-of-N (``t < 0``).
    ties : {"mid", "upper"}, optional
        The calibration, as in :func:`calibrated_reward`.
    t_max : float, optional
        The largest ``|t|`` searched (default 60, at most 700).

    Returns
    -------
    OptimalExponent
        ``t``, its ``beta``, its win rate, the identity transform's ``beta`` and win
        rate at the same KL, and whether ``|t|`` hit ``t_max``.

    Raises
    ------
    ValueError
        For ``ref`` / ``reward`` not one 1-D problem, ``n < 1``, ``kl`` outside its range,
        ``decoding`` / ``ties`` not valid names, ``t_max`` not in ``(0, 700]``.

    Notes
    -----
    For each ``t`` the KL is decreasing in ``beta`` and ``beta(t)`` is found by Brent's
    method in :math:`\log\beta`; the win rate is then maximised over
    :math:`\log|t|` by a 25-point grid (from :math:`\min(10^{-2}, t_{max}/100)` to
    :math:`t_{max}`) refined by a bounded Brent search around its best
    point (the win rate need not be unimodal in ``t``; the grid guards against a wrong
    local maximum). As :math:`t \to 0` the transform is the identity (:math:`e^{tC}
    \approx 1 + tC`), so the result is never worse than the identity's up to the search's
    tolerance. At ``n = 1`` the identity is optimal and ``t`` comes out near the
    grid's smallest value. Measured on 2000 equiprobable outcomes at ``kl = 0.5``:
    best-of-4 ``t = 8.80`` (win rate 0.9597 against the identity's 0.9406), worst-of-4
    ``t = -3.82`` (0.5696 against 0.5443), worst-of-16 ``t = -15.8`` (0.4490 against
    0.3103); best-of-16 reaches the default bound ``t = 60`` (0.9975 against 0.9851).
    For a continuous calibrated reward the answer depends on
    ``n`` and ``kl`` only (InfAlign's reduction to the uniform law on [0, 1]); the tests
    check that two different near-continuous problems give the same ``t``.

    References
    ----------
    .. [1] Balashankar et al., "InfAlign: Inference-aware language model alignment",
       ICML 2025, arXiv:2412.19792, Section 4 (exponential transforms; positive exponents
       for best-of-N, negative for worst-of-N).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.best_of_n import optimal_exponent
    >>> v = 500
    >>> o = optimal_exponent(np.full(v, 1 / v), np.arange(v, dtype=float), 4, 0.5)
    >>> bool(o.t > 1), bool(o.win_rate > o.identity_win_rate + 0.01)
    (True, True)
    """
    from scipy.optimize import brentq, minimize_scalar

    from .law import _scalar_n

    _one_problem(ref=ref, reward=reward)
    mode = V.as_choice("decoding", decoding, _DECODINGS)
    tie = V.as_choice("ties", ties, _TIES)
    nn = _scalar_n(n)
    tm = V.as_scalar("t_max", t_max, "(0, 700]", what="the largest |t| searched")
    ref_a, rew_a, _ = _setup(ref, reward, -1)
    lv = _levels(ref_a, rew_a)
    on = lv.q > 0
    lv = lv._replace(q=lv.q[on], below=lv.below[on], above=lv.above[on], reward=lv.reward[on])
    c = _level_c(lv, tie)
    q = lv.q
    kl_max = -math.log(float(q[-1])) if q.size > 1 else 0.0
    k = V.as_scalar("kl", kl, "(0, inf)", what="the KL budget")
    if not k < kl_max:
        raise ValueError(
            f"`kl` must be below the largest KL a tilt reaches, -log q_top = {kl_max:.6g}; "
            f"got {k!r}"
        )
    # a win against a reference draw, in the kept draw's order (reversed for worst-of-n)
    c_win = _level_c(lv, "mid") if mode == "best" else _level_c(lv, "mid")[::-1]

    def law_u(f, b):
        _, u = _tilt_rows(lv._replace(row_first=np.array([0]), shape=()), f, b)
        return u

    def kl_of(f, lb):
        u = law_u(f, math.exp(lb))
        with np.errstate(under="ignore"):
            p = q * np.exp(u)
        return float(np.sum(p * u))

    def beta_for(f):
        spread = float(np.max(f) - np.min(f))
        lo, hi = math.log(spread) - 3.0, math.log(spread) + 3.0
        while kl_of(f, lo) < k:
            lo -= 3.0
        while kl_of(f, hi) > k:
            hi += 3.0
        return math.exp(brentq(lambda x: kl_of(f, x) - k, lo, hi, xtol=1e-13, rtol=1e-14))

    def win(f, b):
        with np.errstate(under="ignore"):
            p = q * np.exp(law_u(f, b))
        if mode == "worst":
            p = p[::-1]
        below, above = _excl(p)
        mass = _law(lv._replace(q=p, below=below, above=above), nn).mass
        return float(np.sum(mass * c_win))

    sign = 1.0 if mode == "best" else -1.0

    def phi(t):
        return sign * np.exp(sign * t * c)

    def score(s):
        f = phi(math.exp(s))
        return win(f, beta_for(f))

    # |t| from min(1e-2, t_max/100): a t_max below 1e-2 gave a reversed grid and a t > t_max
    grid = np.linspace(math.log(min(1e-2, tm / 100)), math.log(tm), 25)
    vals = [score(s) for s in grid]
    i = int(np.argmax(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    if hi > lo:
        res = minimize_scalar(lambda s: -score(s), bounds=(lo, hi), method="bounded",
                              options={"xatol": 1e-6})  # fmt: skip
        s_best = float(res.x) if -res.fun >= vals[i] else float(grid[i])
    else:
        s_best = float(grid[i])
    t_best = sign * math.exp(s_best)
    f = phi(abs(t_best))
    b = beta_for(f)
    b_id = beta_for(c)
    at_bound = s_best >= grid[-1] - 1e-9
    return OptimalExponent(t_best, b, win(f, b), b_id, win(c, b_id), bool(at_bound))
