"""Check suite for pair preference losses against the rows of klpolicy.preference.LOSSES."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from ..core import DIVERGENCES
from ..preference import LOSSES, f_divergence_score
from ..preference.fdpo import (
    DEFAULT_TRL_VERSION,
    check_f_loss,
    keeps_constants,
    resolve_divergence,
    uses_f_divergence,
)
from . import strategies as kst
from ._runner import EPS, Falsified, call, check_options, first_alternative, fmt, run, worst

__all__ = ["check_pair_loss"]

_LN2 = math.log(2.0)


def _alternatives(row, opts, pc, pr, rc, rr, beta, reduce):
    """Common mistakes, as (sentence, thunk) pairs; the first that matches is reported."""

    def v(a, b, c, d, bt, **o):
        return reduce(row.value(a, b, c, d, bt, **{**opts, **o}))

    alts = [
        (
            "it has chosen and rejected swapped: it prefers the rejected response.",
            lambda: v(pr, pc, rr, rc, beta),
        ),
        (
            "it ignores the reference log-probabilities: the log-ratios are pc - rc and pr - rr.",
            lambda: v(pc, pr, 0 * rc, 0 * rr, beta),
        ),
        ("it ignores beta.", lambda: v(pc, pr, rc, rr, 1.0)),
        ("it uses 1/beta where the loss has beta.", lambda: v(pc, pr, rc, rr, 1 / beta)),
    ]

    def bound(a, b, c, d, bt):
        return row.value(a, b, c, d, bt, **opts)

    for m in row.mistakes:  # the row's own common mistakes
        alts.append(
            (m.sentence, lambda m=m: reduce(m.wrong(bound, pc, pr, rc, rr, beta))),
        )
    for name in ("label_smoothing", "epsilon", "tau", "delta"):
        if name in opts and opts[name] != 0:
            why = next(o.if_ignored for o in row.options if o.name == name)
            alts.append(
                (
                    f"it ignores the option {name}={opts[name]!r} {why}.",
                    lambda name=name: v(pc, pr, rc, rr, beta, **{name: _default(row, name)}),
                )
            )
    alts.append(
        (
            "it returns bits (log base 2); the loss is in nats.",
            lambda: v(pc, pr, rc, rr, beta) / _LN2,
        )
    )
    return alts


def _reduce(x, reduction: str):
    """fn's reduction applied to exact per-pair values."""
    x = np.asarray(x, dtype=np.float64)
    return x if reduction == "none" else (x.mean() if reduction == "mean" else x.sum())


def _call_shaped(fn, reduction, pc, pr, rc, rr, beta):
    """Call fn on one case; its output reshaped, or Falsified when its shape is wrong."""
    inputs = {"pc": pc, "pr": pr, "rc": rc, "rr": rr, "beta": beta}
    got = call(fn, inputs, pc, pr, rc, rr, beta)
    shape = pc.shape if reduction == "none" else ()
    if got.size != int(np.prod(shape)) or (reduction == "none" and got.shape != shape):
        raise Falsified(f"it returns shape {got.shape}; expected {shape}.", inputs)
    return inputs, got.reshape(shape)


def _nonfinite_sentence(row, opts, pc, pr, rc, rr, beta, got, reduction):
    """Why ``fn`` returns inf/nan where the loss is finite, naming the term where it is known."""
    generic = (
        "it returns inf/nan where the loss is finite: evaluate log-sigmoids as "
        "softplus (np.logaddexp(0, -x)) and exponentials in log space."
    )
    if row.nonfinite_hint is None:
        return generic
    with np.errstate(all="ignore"):
        x = beta * ((pc - pr) - (rc - rr))
    bad = ~np.isfinite(got) if reduction == "none" else np.ones(x.shape, bool)
    return row.nonfinite_hint(x, bad, got, opts) or generic


def _default(row, name):
    return next(o.default for o in row.options if o.name == name)


def check_pair_loss(
    fn: Callable[..., Any],
    loss: str = "sigmoid",
    *,
    grad: Callable[..., Any] | None = None,
    max_examples: int = 100,
    rtol: float = 1e-6,
    atol: float = 1e-12,
    reduction: str = "none",
    divergence: str = "reverse_kl",
    alpha: float | None = None,
    alpha_clamp: float | None = None,
    trl_version: str = DEFAULT_TRL_VERSION,
    **options: float,
) -> None:
    r"""Check a pair loss ``fn(pc, pr, rc, rr, beta)`` against its row of :data:`LOSSES`.

    .. math::

        \ell = \texttt{LOSSES[loss].value}(p_c, p_r, r_c, r_r, \beta, \ldots),\qquad
        \nabla\ell = \texttt{LOSSES[loss].gradient}(\ldots)

    ``fn`` receives the policy's chosen and rejected sequence log-probabilities, the
    reference's (1-D arrays of one length) and a float ``beta``, in TRL's order.

    Parameters
    ----------
    fn : callable
        The implementation under test.
    loss : str, optional
        A key of :data:`klpolicy.preference.LOSSES` (TRL's ``loss_type``).
    grad : callable, optional
        ``grad(pc, pr, rc, rr, beta)`` returning the derivatives of the *sum* of the
        per-pair losses with respect to the four inputs (a 4-tuple of arrays); checked on
        every example. Without it, ``fn``'s own derivative is checked by central
        differences on a few moderate inputs.
    max_examples : int, optional
        Hypothesis examples (default 100; at most 1,000,000).
    rtol, atol : float, optional
        Tolerances (defaults 1e-6 and 1e-12) on top of the rounding slack of forming the
        log-ratios.
    reduction : {"none", "mean", "sum"}, optional
        What ``fn`` returns: per-pair losses (default), or their mean or sum.
    divergence, alpha, alpha_clamp : optional
        The f-DPO options (TRL's ``f_divergence_type``, ``f_alpha_divergence_coef`` and the alpha
        exponent clamp): the exact loss is the row's loss on the scores
        :func:`klpolicy.preference.f_divergence_score` of the log-ratios, or on the
        log-ratios where TRL ``trl_version`` keeps them (the row's ``f_divergence``;
        a ValueError where TRL refuses the pair). Log-probabilities then go down to -60
        only (so that exact scores stay finite), and derivatives are not checked. An
        implementation that clamps the alpha exponent at 80 (TRL in float32/bfloat16) or
        11 (float16) while the check does not, or the reverse, is named as such, and so is
        one that uses the other TRL versions' scores (with or without their constants,
        which matter in ``sigmoid_norm``).
    trl_version : str, optional
        The TRL release whose f-DPO scores and loss choices the check follows (default
        ``"1.16.0"``; ``"1.9.2"`` for TRL 0.29.0-1.9.2, which drop the scores' constants
        and apply ``nca_pair``, ``bco_pair`` and ``sppo_hard`` to the scores).
    **options
        The loss's options (``label_smoothing``, ``epsilon``, ``tau``, ``delta``), with
        which ``fn`` is meant to agree (``fn`` itself is called without them).

    Returns
    -------
    None
        When every property holds.

    Raises
    ------
    AssertionError
        Naming the smallest falsifying input and what is wrong: shape, inf/NaN, a
        mismatch (diagnosed when it swaps chosen and rejected, ignores the reference,
        ignores or inverts ``beta``, uses IPO's target 1/beta instead of 1/(2 beta), a
        hinge without its margin, ignores an option, or is in bits), or a gradient that
        disagrees with the registry's.
    ValueError
        For an unknown ``loss``, invalid options or settings.

    Notes
    -----
    Log-probabilities go down to -1e4 and ``beta`` ranges over [1e-3, 1e3]. For
    ``aot`` and ``aot_pair`` the per-pair values are in sorted order, as TRL returns them.

    References
    ----------
    .. [1] The papers of the rows of :data:`klpolicy.preference.LOSSES`.

    Examples
    --------
    >>> import numpy as np
    >>> def ipo(pc, pr, rc, rr, beta):
    ...     return ((pc - pr) - (rc - rr) - 1 / (2 * beta)) ** 2
    >>> check_pair_loss(ipo, "ipo")
    """
    max_examples, rtol = check_options(max_examples, rtol)
    if not isinstance(loss, str) or loss not in LOSSES:
        raise ValueError(f"`loss` must be one of {', '.join(LOSSES)}; got {loss!r}")
    row = LOSSES[loss]
    opts = row.resolve_options(options)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"`reduction` must be 'none', 'mean' or 'sum'; got {reduction!r}")
    atol = float(atol)
    if not atol >= 0:
        raise ValueError(f"`atol` must be non-negative; got {atol!r}")
    check = f"check_pair_loss[{loss}]"
    f_dpo = uses_f_divergence(divergence, alpha, alpha_clamp)
    constants = keeps_constants(trl_version)
    if f_dpo:
        f_divergence_score(0.0, divergence, alpha=alpha, alpha_clamp=alpha_clamp)  # checks
        how = check_f_loss(row, divergence, trl_version)  # TRL's refusals
        if grad is not None:
            raise ValueError("`grad` is not checked with a `divergence` (f-DPO); pass grad=None")
        check = f"check_pair_loss[{loss}, {divergence}]"
        f = _FDPO(row, opts, divergence, alpha, alpha_clamp, constants, how == "scores")
        _run_f_dpo(fn, f, reduction, rtol, atol, check, max_examples)
        return

    def reduce(x):
        return _reduce(x, reduction)

    def slack(pc, pr, rc, rr, beta):
        g = row.gradient(pc, pr, rc, rr, beta, **opts)
        s = sum(np.abs(np.asarray(gi)) for gi in g) * (
            np.abs(pc) + np.abs(pr) + np.abs(rc) + np.abs(rr)
        )
        return 16 * EPS * s

    def prop(case):
        (pc, pr, rc, rr), beta = case
        inputs, got = _call_shaped(fn, reduction, pc, pr, rc, rr, beta)
        with np.errstate(all="ignore"):
            exact = reduce(row.value(pc, pr, rc, rr, beta, **opts))
        detail = f"expected {fmt(exact)}, got {fmt(got)}"
        if np.isfinite(exact).all() and not np.isfinite(got).all():
            raise Falsified(
                _nonfinite_sentence(row, opts, pc, pr, rc, rr, beta, got, reduction),
                inputs,
                detail,
            )
        tol = rtol * np.abs(exact) + atol + reduce(slack(pc, pr, rc, rr, beta))
        if worst(got, exact, tol) is not None:
            alts = _alternatives(row, opts, pc, pr, rc, rr, beta, reduce)
            raise Falsified(
                lambda: (
                    first_alternative(got, alts, tol)
                    or f"it differs from the exact {loss} loss {row.formula}."
                ),
                inputs,
                detail,
            )
        if grad is not None:
            _gradient_ok(grad, row, opts, inputs, (pc, pr, rc, rr, beta), rtol, atol, loss)

    explicit = [
        (
            (
                np.array([-1.0, -3.0]),
                np.array([-2.0, -2.5]),
                np.array([-1.5, -2.0]),
                np.array([-1.5, -3.0]),
            ),
            0.5,
        ),
    ]
    strategy = st.tuples(kst.preference_pairs(), kst.betas(min_beta=1e-3, max_beta=1e3))
    run(check, fn, prop, strategy, max_examples, explicit)
    if grad is None:
        _check_derivative_by_differences(check, fn, row, opts, reduction)


def _gradient_ok(grad, row, opts, inputs, args, rtol, atol, loss) -> None:
    """The declared gradient ``grad(pc, pr, rc, rr, beta)`` is the exact derivative of the loss."""
    pc, pr, rc, rr, beta = args
    out = call(
        lambda *a: np.stack([np.asarray(t, float) for t in grad(*a)]),
        inputs,
        pc,
        pr,
        rc,
        rr,
        beta,
    )
    want = np.stack([np.asarray(t, float) for t in row.gradient(pc, pr, rc, rr, beta, **opts)])
    if out.shape != want.shape:
        raise Falsified(
            f"its gradient has shape {out.shape}; expected {want.shape} "
            "(d/dpc, d/dpr, d/drc, d/drr).",
            inputs,
        )
    scale = 64 * EPS * (2 + beta * beta) * (np.abs(pc) + np.abs(pr) + np.abs(rc) + np.abs(rr))
    gtol = rtol * np.abs(want) + atol + scale
    k = worst(out, want, gtol)
    if k is not None:
        field = ("pc", "pr", "rc", "rr")[np.unravel_index(k, want.shape)[0]]
        raise Falsified(
            f"its gradient with respect to {field} differs from the exact derivative of "
            f"the {loss} loss.",
            inputs,
            f"expected {fmt(want)}, got {fmt(out)}",
        )


def _check_derivative_by_differences(check, fn, row, opts, reduction):
    """fn's own derivative, by central differences on a few moderate inputs."""
    rng = np.random.default_rng(0)
    step = 1e-5
    for beta in (0.1, 1.0, 3.0):
        x = rng.uniform(-4.0, -0.5, size=(4, 5))
        want = np.stack(row.gradient(*x, beta, **opts))
        if reduction == "mean":
            want = want / x.shape[1]
        for k in range(4):
            for i in range(x.shape[1]):
                up, dn = x.copy(), x.copy()
                up[k, i] += step
                dn[k, i] -= step
                try:
                    fd = (np.sum(call(fn, {}, *up, beta)) - np.sum(call(fn, {}, *dn, beta))) / (
                        2 * step
                    )
                except Falsified as f:
                    raise AssertionError(f"{check}: {f.sentence}") from None
                if not abs(fd - want[k, i]) <= 1e-5 * abs(want[k, i]) + 1e-6:
                    field = ("pc", "pr", "rc", "rr")[k]
                    args = ", ".join(f"{n}={fmt(v)}" for n, v in zip(("pc", "pr", "rc", "rr"), x))
                    raise AssertionError(
                        f"{check}: its derivative with respect to {field}[{i}] (central "
                        f"differences) is {fd!r}; the exact derivative is {want[k, i]!r}.\n"
                        f"At: {args}, beta={beta!r}"
                    )


class _FDPO:
    """The f-DPO loss of a row as TRL forms it: the row's loss on the scores (``on_scores``)
    or on the log-ratios themselves; ``value(..., clamp=, constants=)`` for the variants."""

    def __init__(self, row, opts, divergence, alpha, clamp, constants, on_scores):
        self.row, self.opts, self.divergence, self.alpha = row, opts, divergence, alpha
        self.clamp, self.constants, self.on_scores = clamp, constants, on_scores
        frow, _, self.c = resolve_divergence(divergence, alpha)  # TRL's names resolved
        self.name = frow.name

    def scores(self, pc, pr, rc, rr, *, clamp="same", constants=None):
        clamp = self.clamp if clamp == "same" else clamp
        version = "1.16.0" if (self.constants if constants is None else constants) else "1.9.2"
        kw = {"alpha": self.alpha, "alpha_clamp": clamp, "trl_version": version}
        return (
            f_divergence_score(pc - rc, self.divergence, **kw),
            f_divergence_score(pr - rr, self.divergence, **kw),
        )

    def value(self, pc, pr, rc, rr, beta, **variant):
        if not self.on_scores:
            return self.row.value(pc, pr, rc, rr, beta, **self.opts)
        sc, sr = self.scores(pc, pr, rc, rr, **variant)
        return self.row.value(sc, sr, 0 * sc, 0 * sr, beta, **self.opts)


def _f_alternatives(f, pc, pr, rc, rr, beta, reduce):
    """The f-DPO mistakes, as (sentence, thunk) pairs; the first that matches is reported."""

    def alt(**variant):
        return lambda: reduce(f.value(pc, pr, rc, rr, beta, **variant))

    alts = []
    if f.alpha is not None and f.on_scores:  # only the alpha row takes alpha (and a clamp)
        if f.clamp is not None:
            alts.append(
                (
                    f"it does not clamp the alpha exponent at {f.clamp:g} (the check's "
                    "alpha_clamp): it computes the exact score.",
                    alt(clamp=None),
                )
            )
        for c, where in ((80.0, "float32/bfloat16"), (11.0, "float16")):
            if c != f.clamp:
                alts.append(
                    (
                        f"it clamps the alpha exponent (alpha - 1) * log-ratio at {c:g} "
                        f"(TRL's clamp in {where}): its score is constant above that; "
                        f"pass alpha_clamp={c:g} to check the clamped loss.",
                        alt(clamp=c),
                    )
                )
    if f.on_scores:  # (where both versions' scores agree this never matches: got != exact)
        if f.constants:
            alts.append(
                (
                    "it uses the scores of TRL 0.29.0-1.9.2, which drop their constants "
                    "(-exp(-l), log sigmoid(l), exp((a-1) l)/(a-1)); TRL 1.10.0 and later keep "
                    "them (1 - exp(-l), log 2 + log sigmoid(l), (exp((a-1) l) - 1)/(a-1)), "
                    "which matters where scores are divided by lengths: pass "
                    "trl_version='1.9.2' to check the older form.",
                    alt(constants=False),
                )
            )
        else:
            alts.append(
                (
                    "it uses the scores of TRL 1.10.0 and later, which keep their constants "
                    "(1 - exp(-l), log 2 + log sigmoid(l), (exp((a-1) l) - 1)/(a-1)); pass "
                    "trl_version='1.16.0' to check that form.",
                    alt(constants=True),
                )
            )
    if f.on_scores:
        alts.append(
            (
                "it ignores the divergence: it uses the log-ratios (reverse_kl) as scores.",
                lambda: reduce(f.row.value(pc, pr, rc, rr, beta, **f.opts)),
            )
        )
    return alts


def _run_f_dpo(fn, f, reduction, rtol, atol, check, max_examples):
    """check_pair_loss with a divergence: values only, the clamp and version named when
    they explain."""

    def reduce(x):
        return _reduce(x, reduction)

    def score_slope(l):
        t = np.exp(np.clip(l, -700, 700))
        with np.errstate(all="ignore"):
            d = f.c * t * DIVERGENCES[f.name].fsecond(t, alpha=f.alpha)
        if f.clamp is not None:  # (only the alpha row takes a clamp)
            d = np.where((f.alpha - 1) * l > f.clamp, 0.0, d)
        return np.where(np.isfinite(d), np.abs(d), 0.0)

    def prop(case):
        (pc, pr, rc, rr), beta = case
        inputs, got = _call_shaped(fn, reduction, pc, pr, rc, rr, beta)
        with np.errstate(all="ignore"):
            exact = reduce(f.value(pc, pr, rc, rr, beta))
            if f.on_scores:
                sc, sr = f.scores(pc, pr, rc, rr)
                sl_c, sl_r = score_slope(pc - rc), score_slope(pr - rr)
            else:
                sc, sr, sl_c, sl_r = pc - rc, pr - rr, 1.0, 1.0
            g = np.stack(f.row.gradient(sc, sr, 0 * sc, 0 * sr, beta, **f.opts))
            slack = (np.abs(g[0]) + np.abs(g[2])) * (
                np.abs(sc) + sl_c * (np.abs(pc) + np.abs(rc))
            ) + (np.abs(g[1]) + np.abs(g[3])) * (np.abs(sr) + sl_r * (np.abs(pr) + np.abs(rr)))
            slack = np.where(np.isfinite(slack), slack, 0.0)
        tol = rtol * np.abs(exact) + atol + reduce(16 * EPS * slack)
        detail = f"expected {fmt(exact)}, got {fmt(got)}"
        if np.isfinite(exact).all() and not np.isfinite(got).all():
            raise Falsified("it returns inf/nan where the f-DPO loss is finite.", inputs, detail)
        if worst(got, exact, tol) is None:
            return
        alts = _f_alternatives(f, pc, pr, rc, rr, beta, reduce)
        raise Falsified(
            lambda: (
                first_alternative(got, alts, tol)
                or f"it differs from the exact {f.row.name} loss on the {f.name} scores."
            ),
            inputs,
            detail,
        )

    strategy = st.tuples(
        kst.preference_pairs(min_logp=-60.0), kst.betas(min_beta=1e-3, max_beta=1e3)
    )
    run(check, fn, prop, strategy, max_examples, [])
