"""Check suites for the closed form: the optimal policy and the soft value."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .. import core as _cf
from . import strategies as kst
from ._runner import (
    EPS,
    Falsified,
    call,
    check_options,
    first_alternative,
    log_support,
    run,
    worst,
)

__all__ = ["check_optimal_policy", "check_soft_value"]

_SHIFTS = (1.0, -2.0, 1000.0, -1000.0)
_OVERFLOW = math.log(np.finfo(np.float64).max)  # exp(x) overflows for x > 709.78


def _logit_scale(ref: np.ndarray, reward: np.ndarray, beta: float) -> float:
    """Largest |reward/beta| + |log ref| on the support: what a softmax must form."""
    if not 0 < beta < math.inf:
        return 0.0
    return float(np.max(np.where(ref > 0, np.abs(reward) / beta + log_support(ref), 0.0)))


# --------------------------------------------------------------------------- optimal policy


def check_optimal_policy(
    fn: Callable[..., Any],
    *,
    max_examples: int = 100,
    rtol: float = 1e-6,
    supports_zero_ref: bool = True,
    supports_zero_beta: bool = False,
    supports_inf_beta: bool = False,
    min_entry: float = 1e-300,
) -> None:
    r"""Check an implementation of the optimal policy :math:`\pi^* = \pi_{ref} e^{r/\beta} / Z`.

    ``fn(ref, reward, beta)`` receives a 1-D reference distribution, a 1-D
    reward of the same length and a float ``beta``, and must return the
    optimal policy as an array (or tensor) of the same length.

    Parameters
    ----------
    fn : callable
        The implementation under test.
    max_examples : int, optional
        Hypothesis examples per property run (default 100; at most 1,000,000).
    rtol : float, optional
        Relative tolerance on each probability (default 1e-6), on top of the
        rounding slack of a softmax of ``log(ref) + reward / beta``.
    supports_zero_ref : bool, optional
        Whether ``ref`` may contain zeros (default True).
    supports_zero_beta, supports_inf_beta : bool, optional
        Whether ``fn`` handles the limits ``beta = 0`` (greedy on the best
        rewards in the support, split as ``ref``) and ``beta = inf`` (the
        reference). Default False.
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
        Naming the smallest falsifying ``(ref, reward, beta)`` and what is
        wrong: wrong shape, NaN/inf (overflow), negative entries, mass off the
        reference's support, not summing to one, a mismatch with
        :func:`klpolicy.optimal_policy` (with a diagnosis when it matches a
        known mistake: the reference ignored, ``exp(reward * beta)``, the wrong
        sign), or a change when a constant is added to the reward.
    ValueError
        For invalid options.

    Notes
    -----
    Rewards go up to 1e6 in magnitude, ``beta`` from 1e-8 to 1e8 and reference
    entries down to 1e-300, so that an implementation that exponentiates
    ``reward / beta`` without subtracting the maximum overflows.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.special import softmax
    >>> check_optimal_policy(lambda ref, r, beta: softmax(np.log(ref) + r / beta))
    >>> check_optimal_policy(lambda ref, r, beta: softmax(r / beta))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: check_optimal_policy(<lambda>): it ignores the reference...
    """
    max_examples, rtol = check_options(max_examples, rtol)
    problems = kst.problems(
        min_entry=min_entry,
        zeros=supports_zero_ref,
        allow_zero_beta=supports_zero_beta,
        allow_inf_beta=supports_inf_beta,
    )

    def policy_ok(ref, reward, beta, inputs, shifted=0.0):
        got = call(fn, inputs, ref, reward, beta)
        n = ref.size
        if got.shape != ref.shape:
            raise Falsified(f"it returns shape {got.shape}; expected {ref.shape}.", inputs)
        if not np.isfinite(got).all():
            big = _logit_scale(ref, reward, beta) > _OVERFLOW
            why = (
                " exp(reward / beta) overflows float64 here (reward / beta > 709.8): subtract the "
                "largest reward before exponentiating (a softmax / log-sum-exp)."
                if big
                else ""
            )
            raise Falsified(f"it returns non-finite values {got.tolist()}.{why}", inputs)
        if (got < 0).any():
            raise Falsified(f"it returns negative probabilities {got.tolist()}.", inputs)
        off = (ref == 0) & (got > 0)
        if off.any():
            i = int(np.argmax(off))
            raise Falsified(
                f"it puts mass {got[i]:.6g} at index {i} where ref is 0; the optimal policy "
                "never leaves the reference's support (ref * exp(reward / beta) / Z).",
                inputs,
            )
        total = float(got.sum())
        if abs(total - 1) > max(rtol, 16 * n * EPS):
            raise Falsified(f"its entries sum to {total!r}, not 1.", inputs)
        exact = _cf.optimal_policy(ref, reward, beta)
        slack = 16 * EPS * _logit_scale(ref, reward, beta)
        tol = (rtol + slack) * exact + 1e-250
        i = worst(got, exact, tol)
        if i is None:
            return
        detail = f"expected {exact.tolist()} (klpolicy.optimal_policy), got {got.tolist()}"
        if shifted:
            raise Falsified(
                f"its output changes when the constant {shifted!r} is added to every reward; "
                "the optimal policy is invariant to that shift.",
                inputs,
                detail,
            )
        finite = 0 < beta < math.inf
        uniform = np.full(n, 1.0 / n)
        alternatives = [
            (
                "it ignores the reference: it returns softmax(reward / beta) instead of "
                "ref * exp(reward / beta) / Z.",
                lambda: _cf.optimal_policy(uniform, reward, beta),
            ),
            (
                "it uses beta as an inverse temperature, exp(reward * beta); beta is a "
                "temperature: the policy is ref * exp(reward / beta) / Z.",
                lambda: _cf.optimal_policy(ref, reward, 1 / beta) if finite else None,
            ),
            (
                "it has the sign of the reward wrong: it favours low rewards "
                "(exp(-reward / beta)).",
                lambda: _cf.optimal_policy(ref, -reward, beta),
            ),
            ("it returns the reference unchanged.", lambda: ref),
        ]
        raise Falsified(
            lambda: (
                first_alternative(got, alternatives, tol)
                or f"it differs from the exact optimal policy at index {i}: expected "
                f"{float(exact[i])!r}, got {float(got[i])!r}."
            ),
            inputs,
            detail,
        )

    def prop(case):
        (ref, reward, beta), c = case
        policy_ok(ref, reward, beta, {"ref": ref, "reward": reward, "beta": beta})
        r2 = reward + c
        policy_ok(ref, r2, beta, {"ref": ref, "reward": r2, "beta": beta}, shifted=c)

    explicit = [((np.array([0.5, 0.5]), np.array([1.0, 0.0]), 0.5), 1000.0)]
    strategy = st.tuples(problems, st.sampled_from(_SHIFTS))
    run("check_optimal_policy", fn, prop, strategy, max_examples, explicit)


# --------------------------------------------------------------------------- soft value


def check_soft_value(
    fn: Callable[..., Any],
    *,
    max_examples: int = 100,
    rtol: float = 1e-6,
    supports_zero_ref: bool = True,
    supports_zero_beta: bool = False,
    supports_inf_beta: bool = False,
    min_entry: float = 1e-300,
) -> None:
    r"""Check an implementation of the soft value :math:`\beta \log \mathbb{E}_{ref}[e^{r/\beta}]`.

    ``fn(ref, reward, beta)`` receives 1-D ``ref`` and ``reward`` and a float
    ``beta`` and must return one number (a float or a 0-d / size-1 array).

    Parameters
    ----------
    fn : callable
        The implementation under test.
    max_examples : int, optional
        Hypothesis examples per property run (default 100; at most 1,000,000).
    rtol : float, optional
        Relative tolerance (default 1e-6), on top of the rounding slack of a
        log-sum-exp: a few ulp of ``max |reward|`` and of ``beta * |log ref|``.
    supports_zero_ref, supports_zero_beta, supports_inf_beta : bool, optional
        As in :func:`check_optimal_policy`; the limits are ``max reward on the
        support`` at ``beta = 0`` and ``E_ref[reward]`` at ``beta = inf``.

    Returns
    -------
    None
        When every property holds.

    Raises
    ------
    AssertionError
        Naming the smallest falsifying input and what is wrong: not one
        finite number (overflow), outside ``[E_ref[r], max r]``, a mismatch
        with :func:`klpolicy.soft_value` (diagnosed when it is the log-sum-exp
        without ``beta``, without the reference weights, or with
        ``exp(reward * beta)``), or ``V(r + c) != V(r) + c``.
    ValueError
        For invalid options.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.special import logsumexp
    >>> check_soft_value(lambda ref, r, beta: beta * logsumexp(r / beta, b=ref))
    """
    max_examples, rtol = check_options(max_examples, rtol)
    problems = kst.problems(
        min_entry=min_entry,
        zeros=supports_zero_ref,
        allow_zero_beta=supports_zero_beta,
        allow_inf_beta=supports_inf_beta,
    )

    def value_ok(ref, reward, beta, inputs, shifted=0.0):
        got = call(fn, inputs, ref, reward, beta)
        if got.size != 1:
            raise Falsified(f"it returns shape {got.shape}; expected one number.", inputs)
        got = float(got.reshape(()))
        if not math.isfinite(got):
            big = _logit_scale(ref, reward, beta) > _OVERFLOW
            why = (
                " exp(reward / beta) overflows float64 here: use a log-sum-exp that subtracts "
                "the largest reward first."
                if big
                else ""
            )
            raise Falsified(f"it returns {got!r}.{why}", inputs)
        exact = float(_cf.soft_value(ref, reward, beta))
        scale = float(np.max(np.abs(reward)))
        if 0 < beta < math.inf:
            scale += beta * float(np.max(log_support(ref)))
        tol = rtol * abs(exact) + 16 * EPS * scale
        top = float(np.max(reward[ref > 0]))
        mean = float(np.sum(ref * reward) / np.sum(ref))
        detail = f"expected {exact!r} (klpolicy.soft_value), got {got!r}"
        if abs(got - exact) <= tol:
            return
        if shifted:
            raise Falsified(
                f"V(reward + c) differs from V(reward) + c for c = {shifted!r}; adding a "
                "constant to every reward must add it to the soft value.",
                inputs,
                detail,
            )
        n = ref.size
        finite = 0 < beta < math.inf
        uniform = np.full(n, 1.0 / n)
        alternatives = [
            (
                "it returns log E_ref[exp(reward / beta)]: the factor beta in front of the log "
                "is missing.",
                lambda: exact / beta if finite else None,
            ),
            (
                "it ignores the reference weights: it returns beta * log sum exp(reward / beta).",
                lambda: _cf.soft_value(uniform, reward, beta) + beta * math.log(n),
            ),
            (
                "it ignores the reference: it returns beta * log mean exp(reward / beta) "
                "(uniform weights).",
                lambda: _cf.soft_value(uniform, reward, beta),
            ),
            (
                "it uses beta as an inverse temperature: beta * log E_ref[exp(reward * beta)].",
                lambda: beta**2 * _cf.soft_value(ref, reward, 1 / beta) if finite else None,
            ),
        ]

        def sentence():
            known = first_alternative(np.asarray(got), alternatives, np.asarray(tol))
            if known:
                return known
            if got > top + tol:
                return (
                    f"it returns {got!r}, above the largest reward on ref's support ({top!r}); "
                    "the soft value never exceeds it."
                )
            if got < mean - tol:
                return (
                    f"it returns {got!r}, below E_ref[reward] = {mean!r}; the soft value is at "
                    "least the value of staying at the reference."
                )
            return f"it differs from the exact soft value by {got - exact:.6g}."

        raise Falsified(sentence, inputs, detail)

    def prop(case):
        (ref, reward, beta), c = case
        value_ok(ref, reward, beta, {"ref": ref, "reward": reward, "beta": beta})
        r2 = reward + c
        value_ok(ref, r2, beta, {"ref": ref, "reward": r2, "beta": beta}, shifted=c)

    explicit = [((np.array([0.5, 0.5]), np.array([1.0, 0.0]), 0.5), 1000.0)]
    strategy = st.tuples(problems, st.sampled_from(_SHIFTS))
    run("check_soft_value", fn, prop, strategy, max_examples, explicit)
