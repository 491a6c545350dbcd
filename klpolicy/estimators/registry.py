r"""The KL-estimator registry: one row per per-sample estimator, the one place they are defined.

Every module that names, evaluates, differentiates or reasons about an estimator looks
it up here: the per-sample values and exact moments (:mod:`~klpolicy.estimators.samples`,
:mod:`~klpolicy.estimators.offpolicy`), the Gaussian table
(:mod:`~klpolicy.estimators.gaussian`), the expected gradients and fixed points
(:mod:`~klpolicy.estimators.gradients`), the token-level diagnostics
(:mod:`klpolicy.sequences`), the torch trainers and the check suites of
:mod:`klpolicy.testing`. A new estimator is one :class:`Estimator` row in
:data:`ESTIMATORS` plus its tests.

With samples :math:`x \sim p` and the log-ratio :math:`\ell = \log p(x) - \log q(x)`
(Schulman 2020, with his letters swapped: samples come from ``p``):

=========  ======================================  =========================
name       per-sample value :math:`k(\ell)`         mean under :math:`x\sim p`
=========  ======================================  =========================
``k1``     :math:`\ell`                             :math:`\mathrm{KL}(p\|q)`
``k2``     :math:`\ell^2/2`                         :math:`\mathrm{KL}(p\|q) + O(\ell^3)`
``k3``     :math:`e^{-\ell} - 1 + \ell`             :math:`\mathrm{KL}(p\|q) - q(p = 0)`
``abs``    :math:`|\ell|`                           :math:`\ge \mathrm{KL}(p\|q)`
=========  ======================================  =========================

``abs`` (TRL's and verl's ``kl_penalty="abs"``) is listed because libraries ship it, but it
is not an estimator of the KL (:attr:`Estimator.estimates_kl` is False).

References
----------
.. [1] J. Schulman, "Approximating KL divergence", 2020,
   http://joschu.net/blog/kl-approx.html
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from numpy.typing import NDArray

from ..core.internal import EXPM1MX_COEFFICIENTS, SERIES_RADIUS, expm1mx, horner_x2, special
from ..core.internal import validation as V

__all__ = ["ESTIMATORS", "PLACEMENTS", "Estimator", "estimator_names", "get_estimator"]

#: Where an estimator can be placed in training: subtracted from the reward (a
#: REINFORCE/PPO-style penalty, no gradient through it) or added to the loss
#: (differentiated through the log-probabilities).
PLACEMENTS = ("reward", "loss")


@dataclass(frozen=True)
class Estimator:
    r"""One per-sample KL estimator and everything klpolicy knows of it exactly.

    Attributes
    ----------
    name : str
        The name users pass (``estimator="k3"``).
    formula : str
        The per-sample value in terms of ``log p(x)`` and ``log q(x)``, as text.
    value : callable
        ``value(l)``: the estimate at log-ratios ``l`` (numpy, ``l = +inf`` allowed),
        evaluated without cancellation.
    derivative : callable
        ``derivative(l)``: :math:`dk/d\ell`, what a loss placement differentiates.
    weighted_value : callable
        ``weighted_value(pi, ref, l)``: :math:`\pi\,k(\ell)` with ``l = log(pi/ref)``,
        finite where ``pi`` is tiny and ``ref/pi`` overflows.
    weighted_derivative : callable
        ``weighted_derivative(pi, ref, l)``: :math:`\pi\,k'(\ell)`, likewise.
    exact_bias : callable or None
        ``exact_bias(pn, qn, l, q_out)``: :math:`\mathbb{E}_p[k] - \mathrm{KL}(p\|q)` in
        closed form for normalised rows (last axis), ``q_out = q(p = 0)``; every sum has
        terms of one sign.
    gaussian_moments : callable
        ``gaussian_moments(mu)``: mean and variance of ``k`` when the log-ratio is
        Gaussian, :math:`\ell \sim N(\mu^2/2, \mu^2)` (Schulman's experiment: ``p = N(0, 1)``,
        ``q = N(mu, 1)``).
    fixed_point : dict
        Where on-policy gradient training converges with the estimator placed in the
        ``"reward"`` or the ``"loss"``: ``"optimum"`` (the closed form
        :math:`\pi^*_\beta`), ``"greedy"`` (:math:`\pi^*_0`), ``"forward_kl"`` (the
        maximiser of :math:`\mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi_{ref}\|\pi)`, the
        forward KL under the convention of ``docs/derivations/closed_form.md``),
        ``"none"`` (training does not converge to an interior policy) or
        ``"undefined"`` (the derivative jumps, there is no fixed point to compute).
        The forward-KL kind was named ``"reverse"`` before; a row built with that
        value gets ``"forward_kl"`` and a :class:`DeprecationWarning`.
    estimates_kl : bool
        Whether :math:`\mathbb{E}_p[k]` estimates :math:`\mathrm{KL}(p\|q)` at all.
    unbiased : bool
        Whether :math:`\mathbb{E}_p[k] = \mathrm{KL}(p\|q)` whenever ``q``'s support
        contains ``p``'s.
    reference : str
        Where it comes from.
    straight_through : str or None
        For a straight-through row, the name of the row whose *gradient* it uses
        (``"k2"``): the value is ``value``, the derivative is that row's
        (``derivative`` and ``weighted_derivative`` are already that row's). ``None``
        for an ordinary estimator, whose derivative is the derivative of its value.
    """

    name: str
    formula: str
    value: Callable[[NDArray], NDArray]
    derivative: Callable[[NDArray], NDArray]
    weighted_value: Callable[[NDArray, NDArray, NDArray], NDArray]
    weighted_derivative: Callable[[NDArray, NDArray, NDArray], NDArray]
    exact_bias: Callable[[NDArray, NDArray, NDArray, NDArray], NDArray] | None
    gaussian_moments: Callable[[NDArray], tuple[NDArray, NDArray]]
    fixed_point: Mapping[str, str]
    estimates_kl: bool
    unbiased: bool
    reference: str
    straight_through: str | None = None

    def __post_init__(self) -> None:
        if any(kind in _RENAMED_KINDS for kind in self.fixed_point.values()):
            warnings.warn(
                "the fixed-point kind 'reverse' is now 'forward_kl' (the maximiser of "
                "E_pi[r] - beta KL(ref||pi) is the forward-KL point); 'reverse' will be refused "
                "in a future release",
                DeprecationWarning,
                stacklevel=3,
            )
            renamed = {p: _RENAMED_KINDS.get(k, k) for p, k in self.fixed_point.items()}
            object.__setattr__(self, "fixed_point", MappingProxyType(renamed))


#: Fixed-point kinds renamed: old value -> new value (the old one warns, then is mapped).
_RENAMED_KINDS = MappingProxyType({"reverse": "forward_kl"})


# exp(x) - 1 - x - x^2/2 = sum_{k>=3} x^k / k!: k2's exact bias, without cancellation near 0
_EXPM1MX2 = np.concatenate([[0.0], EXPM1MX_COEFFICIENTS[1:]])


def _expm1mx2(x: NDArray) -> NDArray:
    small = np.abs(x) < SERIES_RADIUS
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.expm1(x) - x - 0.5 * x * x
    if small.any():
        out = np.where(small, horner_x2(np.where(small, x, 0), _EXPM1MX2.astype(x.dtype)), out)
    return out


def _k3_value(ell: NDArray) -> NDArray:
    # e^{-l} - 1 + l; at l = -inf (p = 0 < q) it is +inf, not inf - inf = NaN
    return np.where(ell == -np.inf, np.inf, expm1mx(np.where(ell == -np.inf, 0.0, ell) * -1))


def _k3_weighted_value(pi: NDArray, ref: NDArray, ell: NDArray) -> NDArray:
    # pi (e^{-l} - 1 + l) = ref - pi + pi l: finite when ref/pi overflows
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(ell < -1, ref - pi + pi * ell, pi * expm1mx(-ell))


def _k2_bias(pn, qn, ell, q_out):
    with np.errstate(invalid="ignore"):
        return -np.sum(np.where(pn > 0, pn * _expm1mx2(-ell), 0), -1) - q_out


def _abs_bias(pn, qn, ell, q_out):
    # E|l| - E l = 2 E[max(-l, 0)]
    with np.errstate(invalid="ignore"):
        return 2 * np.sum(np.where(pn > 0, pn * np.maximum(-ell, 0), 0), -1)


def _abs_gaussian(mu: NDArray) -> tuple[NDArray, NDArray]:
    # E|l| = mu^2/2 + delta with delta = E|l| - E l >= 0 (erfc: no 1 - erf cancellation);
    # Var|l| = Var l - delta (E|l| + E l): the mu^4/4 terms cancel analytically, not in
    # floating point (they swamped Var l = mu^2 from mu ~ 1e6)
    m2, a = mu * mu, np.abs(mu)
    with np.errstate(over="ignore", invalid="ignore"):
        delta = a * math.sqrt(2 / math.pi) * np.exp(-m2 / 8) - 0.5 * m2 * special.erfc(
            a / (2 * math.sqrt(2))
        )
    delta = np.where(np.isfinite(delta), np.maximum(delta, 0.0), 0.0)
    mean = 0.5 * m2 + delta
    return mean, m2 - delta * (mean + 0.5 * m2)


def _rows() -> dict[str, Estimator]:
    schulman = "Schulman (2020), http://joschu.net/blog/kl-approx.html"
    rows = [
        Estimator(
            name="k1",
            formula="log p(x) - log q(x)",
            value=lambda ell: ell,
            derivative=lambda ell: np.ones_like(ell),
            weighted_value=lambda pi, ref, ell: pi * ell,
            weighted_derivative=lambda pi, ref, ell: pi,
            exact_bias=lambda pn, qn, ell, q_out: np.zeros_like(q_out),
            gaussian_moments=lambda mu: (0.5 * mu * mu, mu * mu),
            fixed_point=MappingProxyType({"reward": "optimum", "loss": "greedy"}),
            estimates_kl=True,
            unbiased=True,
            reference=schulman,
        ),
        Estimator(
            name="k2",
            formula="(log p(x) - log q(x))^2 / 2",
            value=lambda ell: 0.5 * ell * ell,
            derivative=lambda ell: ell,
            weighted_value=lambda pi, ref, ell: pi * (0.5 * ell * ell),
            weighted_derivative=lambda pi, ref, ell: pi * ell,
            exact_bias=_k2_bias,
            gaussian_moments=lambda mu: (
                0.5 * mu**2 + mu**4 / 8,
                mu**4 / 2 + mu**6 / 4,
            ),
            fixed_point=MappingProxyType({"reward": "none", "loss": "optimum"}),
            estimates_kl=True,
            unbiased=False,
            reference=schulman,
        ),
        Estimator(
            name="k3",
            formula="exp(log q(x) - log p(x)) - 1 - (log q(x) - log p(x))",
            value=_k3_value,
            derivative=lambda ell: -np.expm1(-ell),
            weighted_value=_k3_weighted_value,
            # pi (1 - ref/pi) = pi - ref: no overflow where pi is tiny
            weighted_derivative=lambda pi, ref, ell: np.where(pi > 0, pi - ref, 0),
            exact_bias=lambda pn, qn, ell, q_out: 0.0 - q_out,  # E_p[q/p] - 1 = q(p > 0) - 1
            gaussian_moments=lambda mu: (0.5 * mu * mu, expm1mx(mu * mu)),
            fixed_point=MappingProxyType({"reward": "none", "loss": "forward_kl"}),
            estimates_kl=True,
            unbiased=True,
            reference=schulman,
        ),
        Estimator(
            name="abs",
            formula="|log p(x) - log q(x)|",
            value=np.abs,
            derivative=np.sign,
            weighted_value=lambda pi, ref, ell: pi * np.abs(ell),
            weighted_derivative=lambda pi, ref, ell: pi * np.sign(ell),
            exact_bias=_abs_bias,
            gaussian_moments=_abs_gaussian,
            fixed_point=MappingProxyType({"reward": "none", "loss": "undefined"}),
            estimates_kl=False,
            unbiased=False,
            reference='TRL and verl, kl_penalty="abs" (not an estimator of KL)',
        ),
    ]
    rows += _straight_through_rows({row.name: row for row in rows})
    return {row.name: row for row in rows}


# verl (kl_penalty / kl_penalty_forward in verl/trainer/ppo/core_algos.py) and OpenRLHF's
# straight-through PR return k2 - k2.detach() + estimate.detach(): the value of the named
# estimate and the gradient of k2 (Liu et al. 2025, arXiv:2505.17508)
_VERL = (
    "verl, kl_penalty(..., '{name}') in verl/trainer/ppo/core_algos.py "
    "(verl-project/verl@5b98636684f9e4881697a4ad46ddf5bf6f8f5fdc): value of "
    "{base}, gradient of k2 (straight-through)"
)
_OPENRLHF = (
    "; OpenRLHF PR #1101 (compute_approx_kl in openrlhf/models/utils.py): the same "
    "straight-through k2 for kl_estimator {base}"
)


def _straight_through_rows(base_rows: dict[str, Estimator]) -> list[Estimator]:
    """``k1+``, ``k3+``, ``abs+``: the value of k1, k3 or abs, the gradient of k2."""
    k2 = base_rows["k2"]
    out = []
    for base in ("k1", "k3", "abs"):
        row = base_rows[base]
        loss_kind = k2.fixed_point["loss"]  # the gradient is k2's
        out.append(
            Estimator(
                name=base + "+",
                formula=f"{row.formula} (value); gradient of {k2.formula}",
                value=row.value,
                derivative=k2.derivative,
                weighted_value=row.weighted_value,
                weighted_derivative=k2.weighted_derivative,
                exact_bias=row.exact_bias,
                gaussian_moments=row.gaussian_moments,
                fixed_point=MappingProxyType(
                    {"reward": row.fixed_point["reward"], "loss": loss_kind}
                ),
                estimates_kl=row.estimates_kl,
                unbiased=row.unbiased,
                reference=_VERL.format(name=base + "+", base=base)
                + (_OPENRLHF.format(base=base) if base != "abs" else ""),
                straight_through="k2",
            )
        )
    return out


#: The registry: estimator name -> :class:`Estimator` (read-only).
ESTIMATORS: Mapping[str, Estimator] = MappingProxyType(_rows())


def estimator_names(*, kl_only: bool = False, straight_through: bool = False) -> tuple[str, ...]:
    """The registered estimator names, in registry order.

    Parameters
    ----------
    kl_only : bool
        Only those whose mean estimates the KL (drops ``"abs"``).
    straight_through : bool
        Also the straight-through rows (``"k1+"``, ``"k3+"``, ``"abs+"``: a value and
        another row's gradient), which only the gradient functions take.

    Returns
    -------
    tuple of str
        The names.

    Examples
    --------
    >>> from klpolicy.estimators import estimator_names
    >>> estimator_names()
    ('k1', 'k2', 'k3', 'abs')
    >>> estimator_names(kl_only=True)
    ('k1', 'k2', 'k3')
    >>> estimator_names(straight_through=True)
    ('k1', 'k2', 'k3', 'abs', 'k1+', 'k3+', 'abs+')
    """
    kl_only = V.as_bool("kl_only", kl_only)
    straight_through = V.as_bool("straight_through", straight_through)
    return tuple(
        n
        for n, row in ESTIMATORS.items()
        if (row.estimates_kl or not kl_only) and (straight_through or row.straight_through is None)
    )


def get_estimator(
    name: object,
    *,
    argument: str = "estimator",
    kl_only: bool = False,
    straight_through: bool = False,
) -> Estimator:
    """The registry row of ``name``; a ``ValueError`` naming ``argument`` if there is none.

    Parameters
    ----------
    name : str
        An estimator name.
    argument : str
        The caller's argument name, for the error message.
    kl_only : bool
        Refuse estimators that do not estimate the KL (``"abs"``).
    straight_through : bool
        Accept the straight-through rows (``"k3+"``, ...).

    Returns
    -------
    Estimator
        The estimator's registry row.

    Raises
    ------
    ValueError
        For a name not in :data:`ESTIMATORS` (or not a KL estimator with ``kl_only``).

    Examples
    --------
    >>> from klpolicy.estimators import get_estimator
    >>> get_estimator("k3").formula
    'exp(log q(x) - log p(x)) - 1 - (log q(x) - log p(x))'
    >>> get_estimator("k4")
    Traceback (most recent call last):
    ...
    ValueError: `estimator` must be one of 'k1', 'k2', 'k3', 'abs'; got 'k4'
    """
    choices = estimator_names(kl_only=kl_only, straight_through=straight_through)
    return ESTIMATORS[V.as_choice(argument, name, choices)]
