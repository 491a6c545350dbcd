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
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core.internal import EXPM1MX_COEFFICIENTS, SERIES_RADIUS, expm1mx, horner_x2, special
from ..core.internal import estimator_values as F
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
        ``value(l)``: the estimate at log-ratios ``l`` (numpy, ``l = +-inf`` allowed),
        evaluated without cancellation: ``array_value`` on numpy.
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
    array_value : callable or None
        ``array_value(xp, l)``: the same value on any array-API namespace ``xp``
        (torch, JAX, CuPy), the formula of :mod:`klpolicy.core` that ``value`` evaluates
        on numpy and ``klpolicy.estimators.k1`` ... hand torch tensors to. None for a
        row with no array-API formula (numpy only).
    mean_is_kl : bool
        Whether :math:`\mathbb{E}_p[k] = \mathrm{KL}(p\|q)` for every pair, ``q``'s
        zeros included (``k1``): the exact mean is then the KL itself, summed from
        non-negative terms.
    nonnegative : bool
        Whether every per-sample value is :math:`\ge 0`.
    differentiable_loss : (str, float) or None
        Where on-policy gradient training converges with the estimator in the
        ``"loss"`` behind a differentiable importance ratio (the pathwise derivative
        plus the score-function term of the value): a kind of ``fixed_point``, or
        ``"numeric"`` (no closed form: the zero of the expected gradient), and the
        factor on ``beta`` at which the kind holds. None: derived, ``("optimum", 1)``
        for an unbiased ordinary row, ``("undefined", 1)`` where the loss kind is
        undefined, ``("numeric", 1)`` otherwise.
    gaussian_stdev_ratio : callable or None
        ``gaussian_stdev_ratio(m2)``: :math:`\sqrt{\mathrm{Var}\,k}/\mathrm{KL}` of
        the Gaussian experiment at ``m2 = mu^2``, computed in log space for where the
        variance of ``gaussian_moments`` overflows; None where it does not overflow
        before the ratio does.
    textbook : (callable, str, str) or None
        For an estimator whose textbook formula cancels: ``(scale, terms, remedy)``,
        ``scale(l, size)`` the magnitude of the terms that formula forms at log-ratios
        ``l`` from log-probabilities of magnitude ``size`` (a correct plain
        implementation rounds to a few ulp of it), ``terms`` their names, ``remedy``
        how to evaluate it without cancellation. None where the value's own size and
        slope bound the rounding.
    known_errors : tuple of (str, callable)
        Wrong implementations seen in the wild: a sentence naming the error and
        ``f(l)``, the per-sample values that implementation returns at log-ratios ``l``
        (what :func:`klpolicy.testing.check_kl_estimator` diagnoses).
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
    array_value: Callable[[Any, Any], Any] | None = None
    mean_is_kl: bool = False
    nonnegative: bool = False
    differentiable_loss: tuple[str, float] | None = None
    gaussian_stdev_ratio: Callable[[NDArray], NDArray] | None = None
    textbook: tuple[Callable[[NDArray, NDArray], NDArray], str, str] | None = None
    known_errors: tuple[tuple[str, Callable[[NDArray], NDArray]], ...] = ()

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


def _on_numpy(formula: Callable[[Any, Any], Any]) -> Callable[[NDArray], NDArray]:
    """``formula(numpy, l)``: an array-API value formula of core as a numpy function."""

    def value(ell: NDArray) -> NDArray:
        with np.errstate(over="ignore", invalid="ignore"):
            return formula(np, ell)

    value.__name__ = value.__qualname__ = formula.__name__
    value.__doc__ = f"``{formula.__name__}(numpy, l)``: the estimate at numpy log-ratios ``l``."
    return value


_K1, _K2, _K3, _ABS = (_on_numpy(f) for f in (F.k1_value, F.k2_value, F.k3_value, F.abs_value))


def _k3_textbook_scale(ell: NDArray, size: NDArray) -> NDArray:
    # exp(x) - 1 - x with x = -l forms exp(x), 1 and x, and its slope expm1(x) scales the
    # rounding of the inputs
    x = -ell
    return size * np.abs(np.expm1(x)) + np.exp(x) + 1 + np.abs(x)


def _k3_stdev_ratio_large(x: NDArray) -> NDArray:
    """sqrt(e^x - 1 - x) / (x / 2) for x = mu^2 >= 1, in log space (inf only past the floats).

    log(e^x - 1 - x) = x + log1p(-(1 + x) e^-x); the ratio overflows for mu above about 37.85.
    """
    with np.errstate(over="ignore", under="ignore"):
        log_var = x + np.log1p(-(1.0 + x) * np.exp(-x))
        return np.exp(0.5 * log_var - np.log(0.5 * x))


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


_K3_FORMULA = "exp(log q(x) - log p(x)) - 1 - (log q(x) - log p(x))"


_SCHULMAN = "Schulman (2020), http://joschu.net/blog/kl-approx.html"


def _k1_row() -> Estimator:
    """k1: the log-ratio itself, unbiased."""
    return Estimator(
        name="k1",
        formula="log p(x) - log q(x)",
        value=_K1,
        derivative=lambda ell: np.ones_like(ell),
        weighted_value=lambda pi, ref, ell: pi * ell,
        weighted_derivative=lambda pi, ref, ell: pi,
        exact_bias=lambda pn, qn, ell, q_out: np.zeros_like(q_out),
        gaussian_moments=lambda mu: (0.5 * mu * mu, mu * mu),
        fixed_point=MappingProxyType({"reward": "optimum", "loss": "greedy"}),
        estimates_kl=True,
        unbiased=True,
        reference=_SCHULMAN,
        array_value=F.k1_value,
        mean_is_kl=True,
        differentiable_loss=("optimum", 1.0),
        known_errors=(
            (
                "k1 has the wrong sign: it computes logq - logp; k1 = log p(x) - log q(x).",
                lambda ell: -ell,
            ),
        ),
    )


def _k2_row() -> Estimator:
    """k2: half the squared log-ratio, biased by O(l^3)."""
    return Estimator(
        name="k2",
        formula="(log p(x) - log q(x))^2 / 2",
        value=_K2,
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
        reference=_SCHULMAN,
        array_value=F.k2_value,
        nonnegative=True,
        differentiable_loss=("numeric", 1.0),
        known_errors=(
            (
                "k2 is missing the factor 1/2: k2 = (log p(x) - log q(x))^2 / 2.",
                lambda ell: ell * ell,
            ),
        ),
    )


def _k3_row() -> Estimator:
    """k3: exp(-l) - 1 + l, unbiased where q covers p's support, never negative."""
    return Estimator(
        name="k3",
        formula=_K3_FORMULA,
        value=_K3,
        derivative=lambda ell: -np.expm1(-ell),
        weighted_value=_k3_weighted_value,
        # pi (1 - ref/pi) = pi - ref: no overflow where pi is tiny
        weighted_derivative=lambda pi, ref, ell: np.where(pi > 0, pi - ref, 0),
        exact_bias=lambda pn, qn, ell, q_out: 0.0 - q_out,  # E_p[q/p] - 1 = q(p > 0) - 1
        gaussian_moments=lambda mu: (0.5 * mu * mu, expm1mx(mu * mu)),
        fixed_point=MappingProxyType({"reward": "none", "loss": "forward_kl"}),
        estimates_kl=True,
        unbiased=True,
        reference=_SCHULMAN,
        array_value=F.k3_value,
        nonnegative=True,
        differentiable_loss=("optimum", 1.0),
        gaussian_stdev_ratio=_k3_stdev_ratio_large,
        textbook=(
            _k3_textbook_scale,
            "exp(log q - log p), 1 and log q - log p",
            "evaluate k3 as expm1(x) - x (or klpolicy.estimators.k3)",
        ),
        known_errors=(
            (
                "k3 has its ratio inverted: it computes exp(logp - logq) - 1 - (logp - logq), "
                f"whose mean under p is not KL(p||q); k3 = {_K3_FORMULA}.",
                lambda ell: _K3(-ell),
            ),
        ),
    )


def _abs_row() -> Estimator:
    """TRL's and verl's ``abs``: abs(l), not an estimator of the KL."""
    return Estimator(
        name="abs",
        formula="|log p(x) - log q(x)|",
        value=_ABS,
        derivative=np.sign,
        weighted_value=lambda pi, ref, ell: pi * np.abs(ell),
        weighted_derivative=lambda pi, ref, ell: pi * np.sign(ell),
        exact_bias=_abs_bias,
        gaussian_moments=_abs_gaussian,
        fixed_point=MappingProxyType({"reward": "none", "loss": "undefined"}),
        estimates_kl=False,
        unbiased=False,
        reference='TRL and verl, kl_penalty="abs" (not an estimator of KL)',
        array_value=F.abs_value,
        nonnegative=True,
        differentiable_loss=("undefined", 1.0),
    )


def _rows() -> dict[str, Estimator]:
    rows = [_k1_row(), _k2_row(), _k3_row(), _abs_row()]
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

# The straight-through rows: (the row whose value they take, where the loss placement behind
# a differentiable ratio lands, whether OpenRLHF ships it). That placement adds the value's
# score-function term to k2's gradient: for k1 it is grad KL too (k1's pathwise part
# E_pi[grad log pi] is 0), so the step is twice grad KL and lands at pi* at 2 beta; for k3
# and abs there is no closed form.
_STRAIGHT_THROUGH = (
    ("k1", ("optimum", 2.0), True),
    ("k3", ("numeric", 1.0), True),
    ("abs", ("numeric", 1.0), False),
)


def _straight_through_rows(base_rows: dict[str, Estimator]) -> list[Estimator]:
    """``k1+``, ``k3+``, ``abs+``: the value of k1, k3 or abs, the gradient of k2."""
    k2 = base_rows["k2"]
    out = []
    for base, differentiable_loss, openrlhf in _STRAIGHT_THROUGH:
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
                + (_OPENRLHF.format(base=base) if openrlhf else ""),
                straight_through="k2",
                array_value=row.array_value,
                mean_is_kl=row.mean_is_kl,
                nonnegative=row.nonnegative,
                differentiable_loss=differentiable_loss,
                gaussian_stdev_ratio=row.gaussian_stdev_ratio,
                textbook=row.textbook,
                known_errors=row.known_errors,
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
