"""Check suite for per-sample KL estimators (k1, k2, k3, "abs"): values, reductions, clamps, dtypes.

Verdicts are resolution-aware: two formulas are told apart only where they
differ by more than the rounding of the dtype the code computes in, an error
within that rounding is reported as rounding (in ulps), a result that is
float32 or bfloat16 rounding of the exact value is reported as computed in
that format, and outputs pinned at one value are reported as a clamp.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .. import estimators as _est
from ..core import kl_divergence
from ._draws import _columns, _dist_spec, _ints, _value_spec
from ._resolution import (
    EPS,
    MAX_LOG_RATIO,
    MIN_ENTRY,
    as_dtype,
    as_inputs,
    lower_formats,
    output_dtype,
    representable,
    round_to,
    ulps,
)
from ._runner import Falsified, call_raw, check_options, first_alternative, fmt, run, worst

__all__ = ["ClampBiasWarning", "check_kl_estimator"]

_LN2 = math.log(2.0)


def _exact(name: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The registry's per-sample value of ``name`` as a function of ``(logp, logq)``."""
    value = _est.get_estimator(name).value

    def f(lp, lq):
        with np.errstate(all="ignore"):
            return np.asarray(value(np.asarray(lp, np.float64) - np.asarray(lq, np.float64)))

    return f


REDUCTIONS = (
    "none",
    "mean",
    "sum",
    "masked",
    "masked_sum",
    "masked_mean",
    "seq_mean",
    "seq_sum",
)
_REDUCED = {
    "masked_sum": "the sum over every unmasked token",
    "masked_mean": "the mean over every unmasked token of the batch",
    "seq_mean": "the mean over responses of each response's token mean",
    "seq_sum": "the mean over responses of each response's token sum",
}
_MASKED = ("masked", "masked_sum", "masked_mean", "seq_mean", "seq_sum")
_ABS = (
    "|log p - log q| is not an estimator of KL(p||q), its mean under p exceeds the KL by "
    "2 E_p[max(log q - log p, 0)]"
)


class ClampBiasWarning(UserWarning):
    """What a declared clamp costs: the exact bias of the clamped estimator's mean."""


# --------------------------------------------------------------------------- draws


@st.composite
def _samples(draw, max_x: float, masked: bool):
    """Log-probabilities: 1-D (n,) or, for masked reductions, (B, T) with a 0/1 mask."""
    specs = (
        _value_spec(-max_x, max_x, (-3, 3), tiny=True),  # x = log q - log p
        _value_spec(-1e3, 0.0, (-3, 0), tiny=True),
    )
    if masked:
        b, t = draw(_ints(1, 3)), draw(_ints(1, 4))
        x, base = _columns(draw, b * t, *specs)
        lengths = np.array([draw(_ints(1, t)) for _ in range(b)])
        mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float64)
        x, base = x.reshape(b, t), base.reshape(b, t)
    else:
        x, base = _columns(draw, (1, 8), *specs)
        mask = None
    logp = base - np.maximum(x, 0.0)
    return logp, logp + x, mask


@st.composite
def _full_support_pairs(draw, min_entry: float):
    spec = _dist_spec(8, False, min_entry)
    return tuple(_columns(draw, (1, 8), spec, spec))


# --------------------------------------------------------------------------- reductions


def _reduce(k: np.ndarray, mask: np.ndarray | None, how: str) -> np.ndarray:
    """The reduction ``how`` of per-token values ``k`` (masked-out entries never enter)."""
    with np.errstate(invalid="ignore", over="ignore"):
        if how == "none":
            return k
        if how == "mean":
            return np.asarray(k.mean())
        if how == "sum":
            return np.asarray(k.sum())
        km = np.where(mask > 0, k, 0.0)
        if how == "masked":
            return km
        if how == "masked_sum":
            return np.asarray(km.sum())
        if how == "masked_mean":
            return np.asarray(km.sum() / mask.sum())
        if how == "seq_mean":
            return np.asarray((km.sum(-1) / mask.sum(-1)).mean())
        return np.asarray(km.sum(-1).mean())  # seq_sum


def _count(mask: np.ndarray | None, n: int) -> int:
    return n if mask is None else int(mask.sum())


# --------------------------------------------------------------------------- the suite


def check_kl_estimator(
    fn: Callable[..., Any],
    estimator: str,
    *,
    max_examples: int = 100,
    rtol: float = 1e-6,
    atol: float | None = None,
    dtype: Any = None,
    reduction: str = "none",
    clamp: tuple[float, float] | None = None,
) -> None:
    r"""Check a KL estimator ``fn(logp, logq)`` against Schulman's k1, k2 or k3 (or ``|k1|``).

    For samples :math:`x \sim p` with ``logp = log p(x)`` and
    ``logq = log q(x)``: :math:`k_1 = \log p - \log q`,
    :math:`k_2 = (\log p - \log q)^2 / 2`,
    :math:`k_3 = e^{\log q - \log p} - 1 - (\log q - \log p)`. ``fn``
    receives two arrays of one shape (and a mask for the masked reductions)
    and returns the per-sample estimates or their reduction.

    Parameters
    ----------
    fn : callable
        The implementation under test.
    estimator : {"k1", "k2", "k3", "abs"}
        Which estimator ``fn`` claims to be. ``"abs"`` (``|log p - log q|``,
        TRL's and verl's ``kl_penalty="abs"``) is not an estimator of the KL;
        it is checked against ``|log p - log q|`` and its exact mean
        :math:`\mathbb{E}_p|\log p - \log q|`, never against the KL.
    max_examples : int, optional
        Hypothesis examples (default 100; at most 1,000,000).
    rtol : float, optional
        Relative tolerance per sample (default 1e-6; at least 8 ulps of
        ``dtype``).
    atol : float, optional
        Absolute tolerance per sample: default 1e-12 in float64 (the textbook
        ``exp(x) - 1 - x`` keeps only absolute precision near ``x = 0``), and
        8 ulps at 1 for float32/bfloat16; pass ``atol=0`` to demand full
        relative precision.
    dtype : {None, "float64", "float32", "bfloat16"} or numpy/torch dtype, optional
        The format ``fn`` computes in (default float64). The inputs are
        rounded to that format and passed as float32 arrays for float32 and
        bfloat16; tolerances and the rounding allowances scale with its ulp,
        log-ratios stay within +-80 and probabilities above 1e-30 so that
        ``exp`` stays finite in it.
    reduction : str, optional
        What ``fn`` returns. ``"none"`` (default): one estimate per sample of
        1-D inputs; ``"mean"``, ``"sum"``: their mean or sum. The masked forms
        take ``fn(logp, logq, mask)`` with inputs of shape ``(B, T)`` (B
        responses of up to T tokens, ``mask`` 1.0 on a response's tokens, 0.0
        on padding, whose log-probabilities are arbitrary): ``"masked"``
        returns per-token terms (padding ignored); ``"masked_sum"``,
        ``"masked_mean"``: sum and mean over every unmasked token of the
        batch (verl's ``token-mean``); ``"seq_mean"``: the mean over responses
        of each response's mean over its tokens (GRPO's loss);
        ``"seq_sum"``: the mean over responses of each response's sum.
    clamp : (float, float), optional
        A clamp ``fn`` applies to each estimate, e.g. ``(-10, 10)`` as verl's
        ``low_var_kl``: the values are then checked against
        ``clip(k, lo, hi)`` exactly, its mean under ``p`` against the exact
        mean of the clamped estimator, and what the clamp costs (its exact
        bias, the largest found) is reported as a :class:`ClampBiasWarning`.

    Returns
    -------
    None
        When every property holds.

    Raises
    ------
    AssertionError
        Naming the smallest falsifying input and what is wrong: wrong shape,
        NaN/inf (overflow), a negative k2/k3, a mismatch with the definition,
        diagnosed as rounding (in ulps), as computed in float32 or bfloat16,
        as a clamp ("capped at 10.0 for log-ratios beyond 2.61"), or as the
        inverted ratio in k3, k1 with its sign flipped, k2 without the 1/2,
        bits, ``|log p - log q|`` or another estimator (only where the two
        differ by more than the dtype's rounding); or a mean under ``p`` that
        is not the exact one (``KL(p||q)`` for the unbiased k1 and k3).
    ValueError
        For an unknown ``estimator``, ``reduction`` or ``dtype``, or invalid
        options.

    Warns
    -----
    ClampBiasWarning
        With ``clamp``, after a passing run: the largest exact bias
        ``E_p[clip(k)] - KL(p||q)`` found on the drawn distributions.

    Notes
    -----
    Log-ratios range over [-100, 100] (plus tiny ones like 1e-12) and log
    probabilities down to -1100. Unbiasedness is checked exactly, by summing
    ``p(x) fn(log p(x), log q(x))`` over the whole support of random
    full-support distributions (for the reductions that return per-token
    terms; a reduced ``fn`` is checked on the same support batches against
    the exact reduction). A value is "rounding" when its error is within 8
    ulps of the largest term the textbook formula forms (``exp(x)``, ``1``,
    ``x`` for k3; ``log p`` and ``log q`` for k1).

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
    row = _est.get_estimator(estimator)  # ValueError naming `estimator` and the registry's names
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"`reduction` must be one of {', '.join(map(repr, REDUCTIONS))}; got {reduction!r}"
        )
    max_examples, rtol = check_options(max_examples, rtol)
    fmt_name = as_dtype(dtype)
    u = EPS[fmt_name]
    rtol = max(rtol, 8 * u)
    atol = (1e-12 if fmt_name == "float64" else 8 * u) if atol is None else float(atol)
    if not atol >= 0:
        raise ValueError(f"`atol` must be non-negative; got {atol!r}")
    lo, hi = _as_clamp(clamp)
    suite = _EstimatorSuite(fn, estimator, row, reduction, fmt_name, rtol, atol, lo, hi)
    strategy = st.tuples(
        _samples(suite.max_x, suite.masked), _full_support_pairs(MIN_ENTRY[fmt_name])
    )
    run("check_kl_estimator", fn, suite.prop, strategy, max_examples, suite.explicit_cases())
    suite.warn_clamp_bias()


class _EstimatorSuite:
    """The properties :func:`check_kl_estimator` runs, for one ``fn`` and its declared options.

    Each method is one named step: the exact (clamped) values, the rounding a correct
    implementation makes, the tolerance, calling ``fn``, the per-sample check, its
    diagnosis, and the exact mean under ``p``.
    """

    def __init__(self, fn, estimator, row, reduction, fmt_name, rtol, atol, lo, hi) -> None:
        self.fn, self.estimator, self.row, self.reduction = fn, estimator, row, reduction
        self.fmt_name, self.u, self.rtol, self.atol = fmt_name, EPS[fmt_name], rtol, atol
        self.lo, self.hi = lo, hi
        self.masked = reduction in _MASKED
        self.exact_fn = _exact(estimator)
        self.formula = row.formula
        self.max_x = MAX_LOG_RATIO[fmt_name]
        # an estimator whose slope is +-1 everywhere is the log-ratio up to sign: one subtraction
        self.one_subtraction = bool(
            np.all(np.abs(row.derivative(np.array([-2.0, -0.5, 0.5, 2.0]))) == 1)
        )
        self.worst_bias: list = []

    # ----------------------------------------------------------------- exact values, rounding

    def exact_values(self, lp, lq):
        """The estimator's exact values, clipped to the declared clamp."""
        with np.errstate(all="ignore"):
            return np.clip(self.exact_fn(lp, lq), self.lo, self.hi)

    def terms(self, lp, lq):
        """Magnitude of the largest term the textbook formula forms, and its name."""
        x = lq - lp
        inputs = np.abs(lp) + np.abs(lq)
        with np.errstate(over="ignore"):
            if self.row.textbook is not None:  # k3's textbook form exp(x) - 1 - x cancels
                scale, what, _ = self.row.textbook
                return scale(-x, inputs), what
            if self.one_subtraction:  # |k'| = 1 (k1, abs): log p - log q, one subtraction
                return inputs, "log p and log q"
            scale = inputs * np.abs(self.row.derivative(-x)) + np.abs(self.row.value(-x))
            return scale, f"log p, log q and {self.estimator}"

    def resolution(self, lp, lq, mask, name, how=None):
        """The rounding a correct implementation in format ``name`` makes, reduced."""
        scale, _ = self.terms(lp, lq)
        env = 8 * EPS[name] * scale
        n = _count(mask, lp.size)
        k = np.abs(self.exact_values(lp, lq))
        how = how or self.reduction
        return _reduce(env, mask, how) + n * EPS[name] * _reduce(k, mask, how)

    def tolerance(self, lp, lq, mask, exact_k, how=None):
        """The declared tolerance plus the rounding of the inputs in the declared format."""
        u = self.u
        x = lq - lp
        with np.errstate(over="ignore", invalid="ignore"):
            deriv = np.abs(self.row.derivative(-x))
            slack = 16 * u * (np.abs(lp) + np.abs(lq)) * deriv
            per = self.rtol * np.abs(exact_k) + self.atol + slack
        n = _count(mask, lp.size)
        how = how or self.reduction
        return _reduce(per, mask, how) + n * u * _reduce(np.abs(exact_k), mask, how)

    def probe_slack(self, lp, lq, got):
        """Per-sample allowance on the clamp probe: the tolerance plus the rounding of dtype,
        or of the coarser format (float32, bfloat16) that ``fn``'s values are numbers of."""
        name = self.fmt_name
        for lower in lower_formats(self.fmt_name):
            if representable(got, lower):
                name = lower
        exact_k = self.exact_values(lp, lq)
        return self.tolerance(lp, lq, None, exact_k, "none") + self.resolution(
            lp, lq, None, name, "none"
        )

    # ----------------------------------------------------------------- calling fn

    def invoke(self, lp, lq, mask, inputs):
        """``fn``'s raw output on inputs rounded to the declared format (and the mask)."""
        args = (as_inputs(lp, self.fmt_name), as_inputs(lq, self.fmt_name))
        if self.masked:
            args = (*args, as_inputs(mask, self.fmt_name))
        return call_raw(self.fn, inputs, *args)

    def per_sample(self, lp, lq):
        """``fn``'s per-sample values on 1-D inputs, one call per batch where it can."""
        if self.reduction == "none":
            return self.invoke(lp, lq, None, {})[0]
        if self.reduction == "masked":
            return self.invoke(lp[None], lq[None], np.ones((1, lp.size)), {})[0].reshape(-1)
        out = []
        for a, b in zip(lp, lq):
            if self.masked:
                got = self.invoke(np.array([[a]]), np.array([[b]]), np.ones((1, 1)), {})[0]
            else:
                got = self.invoke(np.array([a]), np.array([b]), None, {})[0]
            out.append(float(got.reshape(-1)[0]) if got.size == 1 else math.nan)
        return np.array(out)

    # ----------------------------------------------------------------- the values

    def samples_ok(self, lp, lq, mask, inputs):
        """The shape, finiteness, sign and value of ``fn``'s output on one batch."""
        reduction = self.reduction
        got, raw = self.invoke(lp, lq, mask, inputs)
        exact_k = self.exact_values(lp, lq)
        exact = _reduce(exact_k, mask, reduction)
        if got.shape != exact.shape and not (exact.ndim == 0 and got.size == 1):
            want = {
                "none": "one estimate per sample",
                "masked": "one term per token",
            }.get(reduction, f"one number (reduction={reduction!r})")
            hint = "; pass reduction='mean' or 'sum' if it reduces" if reduction == "none" else ""
            raise Falsified(
                f"it returns shape {got.shape}; expected {want}, {exact.shape}{hint}.", inputs
            )
        got = got.reshape(exact.shape)
        if self.masked and reduction == "masked":
            got = np.where(mask > 0, got, 0.0)
        if not np.isfinite(got).all() and np.isfinite(exact).all():
            raise Falsified(
                f"it returns non-finite values {fmt(got)} (overflow?); the exact values are "
                f"{fmt(exact)}.",
                inputs,
            )
        tol = self.tolerance(lp, lq, mask, exact_k)
        i = worst(got, exact, tol)
        if i is None:
            return
        got_f = np.ravel(got)
        if self.row.nonnegative and got_f[i] < -np.ravel(tol)[i]:
            raise Falsified(
                f"it returns {float(got_f[i])!r} < 0 at index {i}; "
                f"{self.estimator} is never negative.",
                inputs,
            )
        raise Falsified(
            lambda: self.diagnose(lp, lq, mask, got, raw, exact, tol, i),
            inputs,
            f"expected {fmt(exact)}, got {fmt(got)}",
        )

    # ----------------------------------------------------------------- diagnosis

    def diagnose(self, lp, lq, mask, got, raw, exact, tol, i):
        """What a value that is off is: a clamp, rounding, a coarser format, a known wrong
        formula, or just different (in that order)."""
        err = float(np.abs(np.ravel(got)[i] - np.ravel(exact)[i]))
        where = _index_phrase(i, exact)
        res = self.resolution(lp, lq, mask, self.fmt_name)
        # 0. a clamp first, at any dtype: outputs pinned at one value where the estimator
        # exceeds it are the finding, whatever rounding the failing example also shows
        pinned = self.clamp_sentence()
        if pinned:
            return pinned
        # 1. rounding of the declared format
        if worst(got, exact, tol + res) is None:
            return self.rounding_sentence(lp, lq, mask, exact, err, where, i)
        # 2. computed in a coarser format than declared
        sentence = self.coarser_format_sentence(lp, lq, mask, got, raw, exact, tol, err, where, i)
        if sentence:
            return sentence
        # 4. a known wrong formula, where it differs from the exact one by more than rounding
        alternatives = self.wrong_formulas(lp, lq, mask, exact)
        sentence = first_alternative(got, alternatives, tol + res, exact, res)
        if sentence:
            return sentence
        g, e = float(np.ravel(got)[i]), float(np.ravel(exact)[i])
        reduction = self.reduction
        what = self.estimator if reduction == "none" else f"{self.estimator} ({reduction})"
        return f"it differs from {what} = {self.formula}{where}: expected {e!r}, got {g!r}."

    def clamp_sentence(self, lead: str = "") -> str | None:
        """The clamp ``fn`` applies, where it is pinned at one value (:func:`_clamp_sentence`)."""
        return _clamp_sentence(
            self.per_sample,
            self.estimator,
            self.exact_values,
            self.lo,
            self.hi,
            self.max_x,
            self.probe_slack,
            lead,
        )

    def rounding_sentence(self, lp, lq, mask, exact, err, where, i) -> str:
        """The error is within the rounding of the declared format: say so, in ulps."""
        fmt_name, estimator, textbook = self.fmt_name, self.estimator, self.row.textbook
        scale, what = self.terms(lp, lq)
        mag = float(np.max(_reduce(scale, mask, self.reduction)))
        e = float(np.abs(np.ravel(exact)[i]))
        of_result = f", {ulps(err, e, fmt_name):.2g} ulp of the result" if e > 0 else ""
        return (
            f"it differs from {estimator} by rounding: {err:.3g}{where}, "
            f"{ulps(err, mag, fmt_name):.2g} ulp of {fmt_name} at {mag:.6g}, the size of "
            f"the terms it forms ({what}){of_result}. That is below what the textbook formula "
            f"resolves in {fmt_name}, so it is not a different estimator; the tolerance "
            f"asks for more (rtol={self.rtol:g}, atol={self.atol:g})"
            + (f": {textbook[2]}, or pass a larger atol." if textbook is not None else ".")
        )

    def coarser_format_sentence(self, lp, lq, mask, got, raw, exact, tol, err, where, i):
        """The values are rounding of float32 or bfloat16, coarser than declared; or None."""
        fmt_name = self.fmt_name
        said = output_dtype(raw)
        for name in lower_formats(fmt_name):
            in_format = said == name or (said is None and representable(got, name))
            if in_format and worst(got, exact, tol + self.resolution(lp, lq, mask, name)) is None:
                scale, what = self.terms(lp, lq)
                mag = float(np.max(_reduce(scale, mask, self.reduction)))
                e = float(np.abs(np.ravel(exact)[i]))
                of_result = f", {ulps(err, e, name):.2g} ulp of the result" if e > 0 else ""
                return (
                    f"it computes in {name}, not {fmt_name}: its values are {name} numbers and "
                    f"differ from {self.estimator} by {err:.3g}{where}, "
                    f"{ulps(err, mag, name):.2g} ulp of {name} at {mag:.6g} ({what}){of_result}: "
                    f"{name} rounding, not a wrong formula. Pass dtype={name!r} to check it "
                    f"at {name} resolution."
                )
        return None

    def wrong_formulas(self, lp, lq, mask, exact) -> list:
        """The known wrong formulas, each a sentence and its (lazy) reduced values."""
        estimator, reduction, row, exact_fn = (
            self.estimator,
            self.reduction,
            self.row,
            self.exact_fn,
        )
        lo, hi = self.lo, self.hi
        red = lambda k: _reduce(k, mask, reduction)  # noqa: E731
        with np.errstate(all="ignore"):
            ell = lp - lq
        alternatives = [
            (
                f"it computes |log p - log q| (TRL's and verl's 'abs'), not {estimator}: {_ABS}.",
                lambda: red(np.abs(ell)) if row.estimates_kl else np.nan,
            ),
            # the registry's known wrong implementations of this estimator
            *[(sentence, lambda f=f: red(f(ell))) for sentence, f in row.known_errors],
            ("it returns bits (log base 2); klpolicy works in nats.", lambda: exact / _LN2),
            *[
                (f"it computes {o}, not {estimator}.", lambda o=o: red(_exact(o)(lp, lq)))
                for o in _est.estimator_names(kl_only=True)
                if o != estimator
            ],
        ]
        if self.masked and reduction != "masked":
            alternatives[:0] = [
                (
                    f"it reduces as reduction={r!r} ({_REDUCED[r]}), not {reduction!r} "
                    f"({_REDUCED[reduction]}).",
                    lambda r=r: _reduce(self.exact_values(lp, lq), mask, r),
                )
                for r in _MASKED[1:]
                if r != reduction
            ]
        if lo is not None or hi is not None:
            alternatives.insert(
                0,
                (
                    f"it does not apply the declared clamp ({lo!r}, {hi!r}).",
                    lambda: red(exact_fn(lp, lq)),
                ),
            )
        return alternatives

    # ----------------------------------------------------------------- the mean under p

    def exact_mean(self, p, q) -> float:
        """The exact mean under ``p`` of the (clamped) estimator; records a clamp's bias."""
        target = float(np.sum(p * self.exact_values(np.log(p), np.log(q))))
        if self.lo is None and self.hi is None:
            return float(_est.moments(p, q, self.estimator)[0])  # exact mean under p
        if self.row.estimates_kl:
            bias = target - float(kl_divergence(p, q))
            if not self.worst_bias or abs(bias) > abs(self.worst_bias[0]):
                self.worst_bias[:] = [bias, p, q, target]
        return target

    def mean_ok(self, p, q):
        """``sum_x p(x) fn(log p(x), log q(x))`` is the exact mean over the whole support."""
        fmt_name = self.fmt_name
        lp, lq = round_to(np.log(p), fmt_name), round_to(np.log(q), fmt_name)
        inputs = {"logp": lp, "logq": lq}
        exact_k = self.exact_values(lp, lq)
        target = self.exact_mean(p, q)
        # the values on the support first: a wrong formula is named as such, not as a bias
        mask = np.ones((1, lp.size)) if self.masked else None
        a, b = (lp[None], lq[None]) if self.masked else (lp, lq)
        self.samples_ok(a, b, mask, inputs)
        if self.reduction not in ("none", "masked"):
            return  # a reduced fn gives no per-sample values: the support batch is its check
        got = self.per_sample(lp, lq)
        if got.shape != lp.shape:
            return  # reported by samples_ok
        mean = float(np.sum(p * got))
        tol = self.rtol * abs(target) + float(
            np.sum(p * self.tolerance(lp, lq, None, exact_k, "none"))
        )
        if abs(mean - target) <= tol:
            return
        said = self.mean_sentence(lp, lq, p, mean, target, tol)
        raise Falsified(
            lambda: self.clamp_sentence(said) or said,
            inputs,
            f"where p = {fmt(p)} and q = {fmt(q)}",
        )

    def mean_sentence(self, lp, lq, p, mean, target, tol) -> str:
        """Why the mean under ``p`` is off: rounding, a bias, or a different expectation."""
        estimator, row, lo, hi = self.estimator, self.row, self.lo, self.hi
        res = float(np.sum(p * self.resolution(lp, lq, None, self.fmt_name, "none")))
        if lo is not None or hi is not None:
            what = f"the exact mean of the clamped {estimator}, E_p[clip({estimator}, {lo}, {hi})]"
        else:
            what = "KL(p||q)" if row.unbiased else f"E_p[{self.formula}]"
        if abs(mean - target) <= tol + res:
            verdict = f"; the difference, {mean - target:.3g}, is {self.fmt_name} rounding."
        elif row.unbiased and lo is None and hi is None:
            verdict = "; the estimator is biased."
        else:
            verdict = "."
        return (
            f"its mean under p, sum_x p(x) fn(log p(x), log q(x)) = {mean!r}, is not "
            f"{what} = {target!r}{verdict}"
        )

    # ----------------------------------------------------------------- the battery

    def prop(self, case):
        """One drawn case: a batch of samples, then a pair of full-support distributions."""
        (lp, lq, mask), (p, q) = case
        lp, lq = round_to(lp, self.fmt_name), round_to(lq, self.fmt_name)
        inputs = {"logp": lp, "logq": lq}
        if self.masked:
            inputs["mask"] = mask
        self.samples_ok(lp, lq, mask, inputs)
        self.mean_ok(p, q)

    def explicit_cases(self) -> list:
        """Small cases that find the common failures at once."""
        p0, q0 = np.array([0.5, 0.5]), np.array([0.9, 0.1])
        lp0, lq0 = np.log(p0), np.log(q0)
        # a log-ratio of 3 (k3 = 16.09, above the clamps in use), one of -12 (k1 = 12,
        # k2 = 72, k3 = 11: each above a clamp at 10, in numbers float32 holds exactly) and
        # log-probabilities of about -100 (a float32 computation loses 3e-6)
        cases = [
            (np.zeros(1), np.zeros(1)),  # p = q: every estimator is exactly 0
            (lp0, lq0),
            (np.array([-3.0]), np.array([0.0])),
            (np.array([-1.0]), np.array([-13.0])),
            (np.array([-100.1]), np.array([-103.3])),
        ]
        return [
            ((a[None], b[None], np.ones((1, a.size))) if self.masked else (a, b, None), (p0, q0))
            for a, b in cases
        ]

    def warn_clamp_bias(self) -> None:
        """After a passing run with a clamp: the largest exact bias found, as a warning."""
        if not self.worst_bias:
            return
        bias, p, q, mean = self.worst_bias
        warnings.warn(
            ClampBiasWarning(
                f"check_kl_estimator: the clamp ({self.lo!r}, {self.hi!r}) biases "
                f"{self.estimator}: on p = {fmt(p)}, q = {fmt(q)} its exact mean under p is "
                f"{mean!r} where KL(p||q) = {mean - bias!r}, a bias of {bias:.6g} (exact; the "
                "largest found)."
            ),
            stacklevel=3,
        )


def _index_phrase(i: int, exact) -> str:
    """Where in ``exact`` the flat index ``i`` is, as words: empty for a scalar."""
    if np.ndim(exact) == 1:
        return f" at index {i}"
    if np.ndim(exact) == 2:
        return f" at index {tuple(int(j) for j in np.unravel_index(i, np.shape(exact)))}"
    return ""


def _as_clamp(clamp: Any) -> tuple[float | None, float | None]:
    if clamp is None:
        return None, None
    try:
        lo, hi = (float(c) for c in clamp)
    except (TypeError, ValueError):
        raise ValueError(f"`clamp` must be a pair (lo, hi) of numbers; got {clamp!r}") from None
    if math.isnan(lo) or math.isnan(hi) or not lo < hi:
        raise ValueError(f"`clamp` must be a pair (lo, hi) with lo < hi; got {clamp!r}")
    return lo, hi


def _clamp_sentence(
    per_sample, estimator, exact_values, lo, hi, max_x, slack, lead: str = ""
) -> str | None:
    """ "capped at C for log-ratios beyond T" when ``fn`` is pinned at one value over many inputs.

    Probes a sweep of log-ratios x = log q - log p (log p = -1) in one batch: where
    ``fn`` leaves the estimator by more than ``slack(lp, lq, got)`` (the tolerance plus
    the rounding of the format it computes in, so that float32 noise is not a
    departure), its outputs must sit at one value (a cap where the estimator is above
    it, a floor where below) on at least 4 inputs each, 8 in all.
    """
    half = np.logspace(-3, 2, 61) * max_x / 100
    x = np.concatenate([-half[::-1], half])
    lp = np.full_like(x, -1.0)
    lq = lp + x
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            got = np.asarray(per_sample(lp, lq), dtype=np.float64)
    except Exception:
        return None
    if got.shape != x.shape or not np.isfinite(got).all():
        return None
    exact = exact_values(lp, lq)
    off = ~(np.abs(got - exact) <= slack(lp, lq, got))
    if off.sum() < 8 or (~off).sum() < 8:
        return None
    parts = []
    for verb, sel in (("capped", off & (exact > got)), ("floored", off & (exact < got))):
        if not sel.any():
            continue
        c = float(np.median(got[sel]))
        if sel.sum() < 4 or not np.allclose(got[sel], c, rtol=1e-9, atol=1e-12):
            return None
        where = []
        for sign, word in ((1, "beyond"), (-1, "below")):
            xs = x[sel & (np.sign(x) == sign)]
            if xs.size:
                t = _crossing(estimator, c, sign, float(np.min(np.abs(xs))))
                where.append(f"{word} {t:.3g}")
        parts.append((verb, c, " and ".join(where), int(sel.sum())))
    said = " and ".join(
        f"{v} at {c!r} for log-ratios log q - log p {w} (on {n} of {x.size} probed inputs)"
        for v, c, w, n in parts
    )
    caps = [c for v, c, _, _ in parts if v == "capped"]
    floors = [c for v, c, _, _ in parts if v == "floored"]
    c_hi = caps[0] if caps else None
    c_lo = floors[0] if floors else (-c_hi if c_hi is not None and c_hi > 0 else None)
    c_hi = c_hi if c_hi is not None else (-c_lo if c_lo is not None and c_lo < 0 else None)
    declare = f"clamp=({c_lo!r}, {c_hi!r})"
    return (
        (f"{lead.rstrip('.')}: " if lead else "")
        + f"it clamps {estimator}: its values are {said}. A clamp biases the mean under p; if it "
        f"is intended, declare it with {declare} to check the clamped estimator exactly and see "
        "what it costs."
    )


def _crossing(estimator: str, c: float, sign: int, near: float) -> float:
    """The log-ratio x (of that sign) where the estimator's value reaches ``c``."""
    from scipy.optimize import brentq

    def f(x):
        with np.errstate(all="ignore"):
            return float(_exact(estimator)(np.array([0.0]), np.array([x]))[0]) - c

    a, b = 0.0, sign * near
    try:
        if f(a) * f(b) > 0:
            return b
        return float(brentq(f, min(a, b), max(a, b), xtol=1e-12))
    except (ValueError, RuntimeError):
        return b
