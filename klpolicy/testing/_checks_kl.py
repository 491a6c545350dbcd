"""Check suite for KL divergences (estimators: :mod:`._checks_estimators`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..core import kl_divergence
from ._draws import _columns, _dist_spec, _ints
from ._resolution import (
    EPS,
    MIN_ENTRY,
    as_dtype,
    as_inputs,
    lower_formats,
    output_dtype,
    representable,
    ulps,
)
from ._runner import (
    Falsified,
    call_raw,
    check_options,
    first_alternative,
    log_support,
    run,
)

__all__ = ["check_kl_divergence"]

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


def _resolved(got, exact, tol, scale, fmt_name, raw) -> str | None:
    """Rounding of the declared format, or of a coarser one the result is in, else None."""
    err = abs(got - exact)
    if err <= tol + 64 * EPS[fmt_name] * scale:
        return (
            f"it differs from KL(p||q) by rounding: {err:.3g}, "
            f"{ulps(err, scale, fmt_name):.2g} ulp of {fmt_name} at {scale:.6g} (the size of "
            f"the sum of p log p and p log q it forms), below what the formula resolves in "
            f"{fmt_name}; the tolerance asks for more."
        )
    said = output_dtype(raw)
    for name in lower_formats(fmt_name):
        in_format = said == name or (said is None and representable(np.asarray(got), name))
        if in_format and err <= tol + 64 * EPS[name] * scale:
            return (
                f"it computes in {name}, not {fmt_name}: it returns a {name} number that "
                f"differs from KL(p||q) by {err:.3g}, {ulps(err, scale, name):.2g} ulp of "
                f"{name} at {scale:.6g}: {name} rounding, not a wrong formula. Pass "
                f"dtype={name!r} to check it at {name} resolution."
            )
    return None


def check_kl_divergence(
    fn: Callable[..., Any],
    *,
    max_examples: int = 100,
    rtol: float = 1e-6,
    supports_zero_p: bool = True,
    supports_zero_q: bool = True,
    min_entry: float | None = None,
    dtype: Any = None,
) -> None:
    r"""Check an implementation of :math:`\mathrm{KL}(p\|q) = \sum_y p(y) \log(p(y)/q(y))` in nats.

    ``fn(p, q)`` receives two 1-D distributions of one length and must return
    one number.

    Parameters
    ----------
    fn : callable
        The implementation under test.
    max_examples : int, optional
        Hypothesis examples (default 100; at most 1,000,000).
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
        The smallest positive probability drawn (default 1e-300, and 1e-30
        for float32 and bfloat16); raise it to test an implementation only on
        entries it can represent.
    dtype : {None, "float64", "float32", "bfloat16"} or numpy/torch dtype, optional
        The format ``fn`` computes in (default float64). ``p`` and ``q`` are
        passed as float32 arrays for float32 and bfloat16, and the rounding
        allowance scales with the format's ulp. Without it, a result that is
        float32 (or bfloat16) rounding of the exact KL is reported as
        computed in that format.

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
        :func:`klpolicy.kl_divergence`, diagnosed as rounding (in ulps), as
        computed in float32 or bfloat16, or as ``KL(q||p)`` (arguments in the
        wrong order), bits or the cross-entropy where those differ from the
        KL by more than the format's rounding.
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
    fmt_name = as_dtype(dtype)
    u = EPS[fmt_name]
    rtol = max(rtol, 8 * u)
    min_entry = MIN_ENTRY[fmt_name] if min_entry is None else min_entry

    def prop(case):
        p, q = case
        inputs = {"p": p, "q": q}
        got, raw = call_raw(fn, inputs, as_inputs(p, fmt_name), as_inputs(q, fmt_name))
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
        tol = rtol * abs(exact) + 16 * u * scale
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
                _resolved(got, exact, tol, scale, fmt_name, raw)
                or first_alternative(
                    np.asarray(got), alternatives, np.asarray(tol), exact, np.asarray(tol)
                )
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
