"""Check suite for DPO losses (controllers: :mod:`._checks_control`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..preference import dpo_loss as _dpo_loss
from . import strategies as kst
from ._runner import (
    EPS,
    Falsified,
    call,
    check_options,
    first_alternative,
    fmt,
    run,
    worst,
)

__all__ = ["check_dpo_loss"]

_LN2 = math.log(2.0)


# --------------------------------------------------------------------------- DPO


def check_dpo_loss(
    fn: Callable[..., Any],
    *,
    max_examples: int = 100,
    rtol: float = 1e-6,
    atol: float = 1e-12,
    reduction: str = "none",
) -> None:
    r"""Check a DPO loss ``fn(pc, pr, rc, rr, beta)`` against the exact per-pair loss.

    .. math::

        \ell = -\log\sigma\big(\beta[(\log\pi(y_c) - \log\pi_{ref}(y_c))
                                    - (\log\pi(y_r) - \log\pi_{ref}(y_r))]\big)

    ``fn`` receives the policy's chosen and rejected sequence log-probabilities,
    the reference's chosen and rejected ones (1-D arrays of one length) and a
    float ``beta``.

    Parameters
    ----------
    fn : callable
        The implementation under test.
    max_examples : int, optional
        Hypothesis examples (default 100; at most 1,000,000).
    rtol, atol : float, optional
        Tolerances per pair (defaults 1e-6 and 1e-12), on top of the rounding
        slack of forming the margin from log-probabilities.
    reduction : {"none", "mean", "sum"}, optional
        What ``fn`` returns: the per-pair losses (default), or their mean or sum.

    Returns
    -------
    None
        When every property holds.

    Raises
    ------
    AssertionError
        Naming the smallest falsifying input and what is wrong: wrong shape,
        inf/NaN (``-log(sigmoid(x))`` overflows for margins below -745), a
        negative loss, or a mismatch, diagnosed when it has the sign of the
        margin reversed, ignores the reference log-probabilities, ignores or
        divides by ``beta``, or is in bits.
    ValueError
        For invalid options.

    Notes
    -----
    Log-probabilities go down to -1e4 and ``beta`` ranges over [1e-3, 1e3],
    so margins reach 1e7: a correct loss is ``softplus(-beta * margin)``
    (``np.logaddexp(0, -x)``, ``torch.nn.functional.softplus``, or
    ``-logsigmoid``), which is finite everywhere.

    References
    ----------
    .. [1] Rafailov et al., "Direct Preference Optimization: Your Language
       Model is Secretly a Reward Model", 2023, arXiv:2305.18290, eq. (7).

    Examples
    --------
    >>> import numpy as np
    >>> def dpo(pc, pr, rc, rr, beta):
    ...     return np.logaddexp(0.0, -beta * ((pc - rc) - (pr - rr)))
    >>> check_dpo_loss(dpo)
    """
    max_examples, rtol = check_options(max_examples, rtol)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"`reduction` must be 'none', 'mean' or 'sum'; got {reduction!r}")
    atol = float(atol)
    if not atol >= 0:
        raise ValueError(f"`atol` must be non-negative; got {atol!r}")

    def reduce(x):
        x = np.asarray(x, dtype=np.float64)
        return x if reduction == "none" else (x.mean() if reduction == "mean" else x.sum())

    def prop(case):
        (pc, pr, rc, rr), beta = case
        inputs = {"pc": pc, "pr": pr, "rc": rc, "rr": rr, "beta": beta}
        got = call(fn, inputs, pc, pr, rc, rr, beta)
        shape = pc.shape if reduction == "none" else ()
        if got.size != int(np.prod(shape)) or (reduction == "none" and got.shape != shape):
            raise Falsified(
                f"it returns shape {got.shape}; expected {shape}"
                + (
                    " (one loss per pair; pass reduction='mean' if it averages)."
                    if reduction == "none"
                    else "."
                ),
                inputs,
            )
        got = got.reshape(shape)
        exact = reduce(_dpo_loss(pc, pr, rc, rr, beta))
        detail = f"expected {fmt(exact)}, got {fmt(got)}"
        if not np.isfinite(got).all():
            raise Falsified(
                "it returns inf/nan: -log(sigmoid(beta * margin)) overflows for large negative "
                "margins; compute it as softplus(-beta * margin) (np.logaddexp(0, -x)).",
                inputs,
                detail,
            )
        tol = reduce(
            rtol * _dpo_loss(pc, pr, rc, rr, beta)
            + atol
            + 16 * EPS * beta * (np.abs(pc) + np.abs(pr) + np.abs(rc) + np.abs(rr))
        )
        if (got < -tol).any():
            raise Falsified(
                "it returns a negative loss; -log(sigmoid(x)) is always positive (is the sign of "
                "the loss flipped?).",
                inputs,
                detail,
            )
        if worst(got, exact, tol) is None:
            return
        alternatives = [
            (
                "it has the sign of the margin reversed: it prefers the rejected response.",
                lambda: reduce(_dpo_loss(pr, pc, rr, rc, beta)),
            ),
            (
                "it ignores the reference log-probabilities: the margin must be "
                "(pc - rc) - (pr - rr), not pc - pr.",
                lambda: reduce(_dpo_loss(pc, pr, 0 * rc, 0 * rr, beta)),
            ),
            ("it ignores beta.", lambda: reduce(_dpo_loss(pc, pr, rc, rr, 1.0))),
            (
                "it divides the margin by beta; DPO multiplies it by beta.",
                lambda: reduce(_dpo_loss(pc, pr, rc, rr, 1 / beta)),
            ),
            (
                "it returns bits (log base 2); the DPO loss is in nats.",
                lambda: reduce(_dpo_loss(pc, pr, rc, rr, beta) / _LN2),
            ),
        ]
        raise Falsified(
            lambda: (
                first_alternative(got, alternatives, tol)
                or "it differs from the exact DPO loss softplus(-beta * ((pc - rc) - (pr - rr)))."
            ),
            inputs,
            detail,
        )

    explicit = [
        ((np.array([-1.0]), np.array([-2.0]), np.array([-1.5]), np.array([-1.5])), 0.5),
    ]
    strategy = st.tuples(kst.preference_pairs(), kst.betas(min_beta=1e-3, max_beta=1e3))
    run("check_dpo_loss", fn, prop, strategy, max_examples, explicit)
