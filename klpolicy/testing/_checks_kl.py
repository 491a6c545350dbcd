"""Check suites for KL divergences and per-sample KL estimators."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .. import estimators as _est
from ..core import kl_divergence
from ._draws import _columns, _dist_spec, _ints, _value_spec
from ._runner import (
    EPS,
    Falsified,
    call,
    check_options,
    first_alternative,
    fmt,
    log_support,
    run,
    worst,
)

__all__ = ["check_kl_divergence", "check_kl_estimator"]

_LN2 = math.log(2.0)


# --------------------------------------------------------------------------- KL divergence


@st.composite
def _kl_pairs(draw, zero_p: bool, zero_q: bool, min_entry: float):
    # drawn row by row (p_i and q_i together), so that shrinking removes outcomes
    same = draw(_ints(0, 1))
    if same:
        p = _columns(draw, (1, 8), _dist_spec(8, zero_p and zero_q, min_entry))[0]
        return p, p.copy()
    return tuple(
        _columns(draw, (1, 8), _dist_spec(8, zero_p, min_entry), _dist_spec(8, zero_q, min_entry))
    )


def check_kl_divergence(
    fn: Callable[..., Any],
    *,
    max_examples: int = 100,
    rtol: float = 1e-6,
    supports_zero_p: bool = True,
    supports_zero_q: bool = True,
    min_entry: float = 1e-300,
) -> None:
    r"""Check an implementation of :math:`\mathrm{KL}(p\|q) = \sum_y p(y) \log(p(y)/q(y))` in nats.

    ``fn(p, q)`` receives two 1-D distributions of one length and must return
    one number.

    Parameters
    ----------
    fn : callable
        The implementation under test.
    max_examples : int, optional
        Hypothesis examples (default 100).
    rtol : float, optional
        Relative tolerance (default 1e-6), on top of the rounding slack of
        ``sum(p log p) - sum(p log q)``.
    supports_zero_p : bool, optional
        Whether ``p`` may contain zeros, which count as ``0 log 0 = 0``
        (default True).
    supports_zero_q : bool, optional
        Whether ``q`` may contain zeros; where ``p > 0`` and ``q = 0`` the
        KL is ``+inf`` (default True).
    min_entry : float, optional
        The smallest positive probability drawn (default 1e-300); raise it to
        test, e.g., a float32 implementation only on entries it can represent.

    Returns
    -------
    None
        When every property holds.

    Raises
    ------
    AssertionError
        Naming the smallest falsifying ``(p, q)`` and what is wrong: not one
        number, NaN (``0 log 0``), a finite value off ``q``'s support, a
        negative value, a non-zero ``KL(p||p)``, or a mismatch with
        :func:`klpolicy.kl_divergence`, diagnosed when it is ``KL(q||p)``
        (arguments in the wrong order), bits or the cross-entropy.
    ValueError
        For invalid options.

    Examples
    --------
    >>> from scipy.special import rel_entr
    >>> check_kl_divergence(lambda p, q: rel_entr(p, q).sum())
    >>> check_kl_divergence(lambda p, q: rel_entr(q, p).sum())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: check_kl_divergence(<lambda>): it computes KL(q||p), not KL(p||q)...
    """
    max_examples, rtol = check_options(max_examples, rtol)

    def prop(case):
        p, q = case
        inputs = {"p": p, "q": q}
        got = call(fn, inputs, p, q)
        if got.size != 1:
            raise Falsified(f"it returns shape {got.shape}; expected one number.", inputs)
        got = float(got.reshape(()))
        exact = float(kl_divergence(p, q))
        detail = f"expected {exact!r} (klpolicy.kl_divergence), got {got!r}"
        if math.isnan(got):
            why = ""
            if ((p == 0) & (q == 0)).any():
                why = " Where p and q are both 0 the term 0 * log(0/0) must count as 0."
            elif (p == 0).any():
                why = " 0 * log 0 must count as 0."
            raise Falsified(f"it returns nan.{why}", inputs, detail)
        if math.isinf(exact):
            if got != math.inf:
                raise Falsified(
                    f"it returns {got!r} where p puts mass on an outcome that q gives "
                    "probability 0; KL(p||q) is +inf there.",
                    inputs,
                    detail,
                )
            return
        both = (p > 0) & (q > 0)
        scale = float(np.sum(np.where(both, p * (1 + log_support(p) + log_support(q)), 0.0)))
        tol = rtol * abs(exact) + 16 * EPS * scale
        if got < -tol:
            raise Falsified(
                f"it returns {got!r} < 0; a KL divergence is never negative.", inputs, detail
            )
        if abs(got - exact) <= tol:
            return
        if got == math.inf:
            raise Falsified(
                "it returns inf where KL(p||q) is finite (q > 0 wherever p > 0).", inputs, detail
            )
        if np.array_equal(p, q):
            raise Falsified(f"it returns {got!r} for q = p; KL(p||p) is 0.", inputs, detail)
        alternatives = [
            (
                "it computes KL(q||p), not KL(p||q): its arguments are in the wrong order "
                "(torch.nn.functional.kl_div(input, target) computes KL(target || exp(input))).",
                lambda: kl_divergence(q, p),
            ),
            (
                "it returns bits (log base 2); klpolicy works in nats: multiply by log(2).",
                lambda: exact / math.log(2),
            ),
            (
                "it returns a base-10 logarithm; klpolicy works in nats: multiply by log(10).",
                lambda: exact / math.log(10),
            ),
            (
                "it averages the terms over outcomes (torch's reduction='mean') instead of "
                "summing them (reduction='sum').",
                lambda: exact / p.size,
            ),
            (
                "it returns the cross-entropy -sum(p log q), not KL(p||q) = "
                "cross-entropy - entropy(p).",
                lambda: -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, q, 1.0)), 0.0)),
            ),
        ]
        raise Falsified(
            lambda: (
                first_alternative(np.asarray(got), alternatives, np.asarray(tol))
                or f"it differs from the exact KL(p||q) by {got - exact:.6g}."
            ),
            inputs,
            detail,
        )

    explicit = [(np.array([0.5, 0.5]), np.array([0.9, 0.1]))]
    if supports_zero_p:
        explicit.append((np.array([1.0, 0.0]), np.array([0.5, 0.5])))
    strategy = _kl_pairs(supports_zero_p, supports_zero_q, min_entry)
    run("check_kl_divergence", fn, prop, strategy, max_examples, explicit)


# --------------------------------------------------------------------------- KL estimators

_ESTIMATORS = _est.estimator_names(kl_only=True)
_FORMULAS = {n: _est.get_estimator(n).formula for n in _ESTIMATORS}


@st.composite
def _log_prob_pairs(draw):
    # drawn row by row (x_i and base_i together), so that shrinking removes samples
    x, base = _columns(
        draw,
        (1, 8),
        _value_spec(-100.0, 100.0, (-3, 3), tiny=True),  # log q - log p
        _value_spec(-1e3, 0.0, (-3, 0), tiny=True),
    )
    logp = base - np.maximum(x, 0.0)
    return logp, logp + x


@st.composite
def _full_support_pairs(draw):
    spec = _dist_spec(8, False, 1e-300)
    return tuple(_columns(draw, (1, 8), spec, spec))


def check_kl_estimator(
    fn: Callable[..., Any],
    estimator: str,
    *,
    max_examples: int = 100,
    rtol: float = 1e-6,
    atol: float = 1e-12,
) -> None:
    r"""Check a per-sample KL estimator ``fn(logp, logq)`` against Schulman's k1, k2 or k3.

    For samples :math:`x \sim p` with ``logp = log p(x)`` and
    ``logq = log q(x)``: :math:`k_1 = \log p - \log q`,
    :math:`k_2 = (\log p - \log q)^2 / 2`,
    :math:`k_3 = e^{\log q - \log p} - 1 - (\log q - \log p)`. ``fn`` receives
    two 1-D arrays of one length and must return the per-sample estimates, an
    array of that length.

    Parameters
    ----------
    fn : callable
        The implementation under test.
    estimator : {"k1", "k2", "k3"}
        Which estimator ``fn`` claims to be.
    max_examples : int, optional
        Hypothesis examples (default 100).
    rtol, atol : float, optional
        Tolerances per sample (defaults 1e-6 and 1e-12). ``atol`` lets the
        textbook ``exp(x) - 1 - x`` pass near ``x = 0``, where it keeps only
        absolute precision; pass ``atol=0`` to demand full relative precision.

    Returns
    -------
    None
        When every property holds.

    Raises
    ------
    AssertionError
        Naming the smallest falsifying input and what is wrong: wrong shape,
        NaN/inf (overflow), a negative k2/k3, a mismatch with the definition
        (diagnosed when it is the inverted ratio in k3, k1 with its sign
        flipped, k2 without the 1/2, bits, or another estimator), or a mean
        under ``p`` that is not the exact one (``KL(p||q)`` for the unbiased
        k1 and k3).
    ValueError
        For an unknown ``estimator`` or invalid options.

    Notes
    -----
    Log-ratios range over [-100, 100] (plus tiny ones like 1e-12) and log
    probabilities down to -1100. Unbiasedness is checked exactly, by summing
    ``p(x) fn(log p(x), log q(x))`` over the whole support of random
    full-support distributions.

    References
    ----------
    .. [1] J. Schulman, "Approximating KL divergence", 2020,
       http://joschu.net/blog/kl-approx.html.

    Examples
    --------
    >>> import numpy as np
    >>> check_kl_estimator(lambda lp, lq: np.expm1(lq - lp) - (lq - lp), "k3")
    >>> check_kl_estimator(lambda lp, lq: np.expm1(lp - lq) - (lp - lq), "k3")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: check_kl_estimator(<lambda>): k3 has its ratio inverted...
    """
    if estimator not in _ESTIMATORS:
        *head, last = map(repr, _ESTIMATORS)
        raise ValueError(f"`estimator` must be {', '.join(head)} or {last}; got {estimator!r}")
    max_examples, rtol = check_options(max_examples, rtol)
    atol = float(atol)
    if not atol >= 0:
        raise ValueError(f"`atol` must be non-negative; got {atol!r}")
    exact_fn = getattr(_est, estimator)

    def slack(lp, lq):
        x = lq - lp
        deriv = np.abs(_est.get_estimator(estimator).derivative(-x))
        return 16 * EPS * (np.abs(lp) + np.abs(lq)) * deriv

    def samples_ok(lp, lq, inputs):
        got = call(fn, inputs, lp, lq)
        if got.shape != lp.shape:
            raise Falsified(
                f"it returns shape {got.shape}; expected one estimate per sample, {lp.shape}.",
                inputs,
            )
        exact = exact_fn(lp, lq)
        if not np.isfinite(got).all():
            raise Falsified(
                f"it returns non-finite values {got.tolist()} (overflow?); the estimates are "
                f"{exact.tolist()}.",
                inputs,
            )
        tol = rtol * np.abs(exact) + atol + slack(lp, lq)
        i = worst(got, exact, tol)
        if i is None:
            return
        if estimator != "k1" and got[i] < -tol[i]:
            raise Falsified(
                f"it returns {float(got[i])!r} < 0 at index {i}; {estimator} is never negative.",
                inputs,
            )
        alternatives = [
            (
                "k3 has its ratio inverted: it computes exp(logp - logq) - 1 - (logp - logq), "
                f"whose mean under p is not KL(p||q); k3 = {_FORMULAS['k3']}.",
                lambda: _est.k3(lq, lp) if estimator == "k3" else np.nan,
            ),
            (
                "k1 has the wrong sign: it computes logq - logp; k1 = log p(x) - log q(x).",
                lambda: _est.k1(lq, lp) if estimator == "k1" else np.nan,
            ),
            (
                "k2 is missing the factor 1/2: k2 = (log p(x) - log q(x))^2 / 2.",
                lambda: 2 * exact if estimator == "k2" else np.nan,
            ),
            ("it returns bits (log base 2); klpolicy works in nats.", lambda: exact / _LN2),
            *[
                (f"it computes {other}, not {estimator}.", lambda o=other: getattr(_est, o)(lp, lq))
                for other in _ESTIMATORS
                if other != estimator
            ],
        ]
        raise Falsified(
            lambda: (
                first_alternative(got, alternatives, tol)
                or f"it differs from {estimator} = {_FORMULAS[estimator]} at index {i}: expected "
                f"{float(exact[i])!r}, got {float(got[i])!r}."
            ),
            inputs,
        )

    def mean_ok(p, q):
        lp, lq = np.log(p), np.log(q)
        inputs = {"logp": lp, "logq": lq}
        got = call(fn, inputs, lp, lq)
        if got.shape != lp.shape:
            return  # reported by samples_ok
        mean = float(np.sum(p * got))
        target = float(_est.moments(p, q, estimator)[0])  # exact mean under p
        what = "E_p[(log p - log q)^2] / 2" if estimator == "k2" else "KL(p||q)"
        tol = rtol * abs(target) + float(np.sum(p * (atol + slack(lp, lq))))
        if not abs(mean - target) <= tol:
            raise Falsified(
                f"its mean under p, sum_x p(x) fn(log p(x), log q(x)) = {mean!r}, is not "
                f"{what} = {target!r}"
                + ("; the estimator is biased." if estimator != "k2" else "."),
                inputs,
                f"where p = {fmt(p)} and q = {fmt(q)}",
            )

    def prop(case):
        (lp, lq), (p, q) = case
        samples_ok(lp, lq, {"logp": lp, "logq": lq})
        mean_ok(p, q)

    explicit = [
        ((np.log([0.5, 0.5]), np.log([0.9, 0.1])), (np.array([0.5, 0.5]), np.array([0.9, 0.1])))
    ]
    strategy = st.tuples(_log_prob_pairs(), _full_support_pairs())
    run("check_kl_estimator", fn, prop, strategy, max_examples, explicit)
