r"""The registry of pair preference losses: one frozen row per loss, TRL's definitions.

Every row's ``value(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps,
ref_rejected_logps, beta, **options)`` returns the per-pair losses exactly as
TRL's ``DPOTrainer.dpo_loss`` computes its ``losses`` vector (before the batch
mean), and ``gradient(...)`` the exact derivatives of the *sum* of those values
with respect to each of the four inputs (a :class:`PairGradient`).

Notation: the log-ratios :math:`a = \log\pi(y_w) - \log\pi_{ref}(y_w)` (chosen)
and :math:`b = \log\pi(y_l) - \log\pi_{ref}(y_l)` (rejected), the margin
:math:`h = a - b`, :math:`x = \beta h`, :math:`\mathrm{sp}(t) = \log(1 + e^t)`
(so :math:`-\log\sigma(t) = \mathrm{sp}(-t)`).

The definitions were read from ``trl/trainer/dpo_trainer.py`` of huggingface/trl
at commit ``9d58faa767ee18f52217b32b82d75807c8ce404a`` (the 0.1x series that has
``loss_type`` values sigmoid ... discopop and ``DPOConfig.discopop_tau = 0.05``).
``sigmoid`` takes ``label_smoothing`` with TRL 0.1x's meaning, cDPO's label-flip
rate :math:`\varepsilon`; TRL 1.x ignores ``label_smoothing`` for ``sigmoid``
(observed with TRL 1.16.0), so its sigmoid loss is this row at
``label_smoothing=0`` whatever its config says. ``sigmoid_norm`` (Tulu 3's
length-normalised DPO) was added to TRL after that commit, by huggingface/trl#5406
(merged 2026-03-30); its row follows the paper's eq. (6).
Public names are re-exported by :mod:`klpolicy.preference`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import special
from ..core.internal import validation as V
from . import populations as P
from .losses import PairGradient, _log_prob_inputs
from .populations import MarginKernel, PairKernel, PairProblem

__all__ = ["LOSSES", "LossOption", "PairLoss"]


@dataclass(frozen=True)
class LossOption:
    """One keyword option of a pair loss: its default and its valid range.

    ``low``/``high`` bound the value; ``low_open``/``high_open`` say whether the
    bound itself is excluded; ``if_ignored`` completes the check suites' sentence for an
    implementation that ignores the option.
    """

    name: str
    default: float
    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    doc: str = ""
    if_ignored: str = field(default="(uses the default)", repr=False)

    def describe(self) -> str:
        lo = "(" if self.low_open else "["
        hi = ")" if self.high_open else "]"
        return f"{lo}{self.low:g}, {self.high:g}{hi}"

    def validate(self, value: Any) -> float:
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"`{self.name}` must be a number in {self.describe()}; got {value!r}"
            ) from None
        ok = (v > self.low if self.low_open else v >= self.low) and (
            v < self.high if self.high_open else v <= self.high
        )
        if not ok:  # also refuses NaN
            raise ValueError(f"`{self.name}` must be a number in {self.describe()}; got {value!r}")
        return v


@dataclass(frozen=True)
class _LengthsOption(LossOption):
    """An array option: positive, finite response lengths (tokens); required (no default).

    ``validate`` returns the lengths as a float64 array; the caller checks their shape.
    """

    def describe(self) -> str:
        return "a positive, finite array"

    def validate(self, value: Any) -> NDArray[np.float64]:  # type: ignore[override]
        if value is None:
            raise ValueError(
                f"`{self.name}` is required: the response lengths (tokens), {self.describe()}; "
                "got None"
            )
        arr = V.as_float_array(self.name, value).astype(np.float64)
        bad = ~(np.isfinite(arr) & (arr > 0))
        if bad.any():
            k = np.unravel_index(int(np.argmax(bad)), arr.shape)
            raise ValueError(
                f"`{self.name}` must be {self.describe()}; got {float(arr[k])!r} at index "
                f"{tuple(int(i) for i in k)}"
            )
        return arr


@dataclass(frozen=True)
class LossMistake:
    """A common wrong implementation of a loss, as the check suites name it.

    ``wrong(value, pc, pr, rc, rr, beta)`` returns its per-pair values, ``value`` being the
    row's own ``value`` with the checked options bound; ``sentence`` says what it does.
    """

    sentence: str
    wrong: Callable[..., NDArray]


_KINDS = ("margin", "pair", "sorting", "likelihood")


@dataclass(frozen=True, kw_only=True)
class PairLoss:
    r"""One row of :data:`LOSSES`: a pair preference loss, its options, where it comes from,
    and the functions and facts the population code needs (built with keywords).

    Attributes
    ----------
    name : str
        The key, equal to TRL's ``loss_type``.
    formula : str
        The per-pair loss in the notation of the module docstring.
    kind : str
        ``"margin"`` (a function of the margin :math:`h = a - b` alone), ``"pair"`` (of the
        two log-ratios :math:`a, b` of the pair), ``"sorting"`` (of the batch: TRL sorts
        log-ratios across it) or ``"likelihood"`` (of the chosen log-probability alone).
    value, gradient : callable
        ``value(pc, pr, rc, rr, beta, **options)`` -> per-pair losses;
        ``gradient(...)`` -> :class:`PairGradient` of the sum of the values.
    options : tuple of LossOption
        The keyword options with defaults and valid ranges.
    reference : str
        The paper (authors, year, arXiv id).
    notes : str
        What a user comparing against TRL should know.
    f_divergence : tuple of str
        How TRL's ``DPOTrainer`` forms the loss with an f-divergence
        (``f_divergence_type``), in TRL 1.10.0 and later and in TRL 0.29.0-1.9.2:
        ``"scores"`` (the loss on the scores of
        :func:`~klpolicy.preference.f_divergence_score`), ``"inputs"`` (on the
        log-probabilities themselves: the divergence does not enter), ``"refused"`` (TRL
        raises a ValueError: TRL 1.16.0 ``dpo_trainer.py`` lines 808-816) or
        ``"unmodelled"`` (TRL 1.9.2's ``apo_down`` mixes the two).
    pair : PairKernel or None
        ``ell(a, b, beta, o)`` and ``grad`` on the log-ratios (``a = h``, ``b = 0`` for a
        margin loss); None for the sorting and likelihood kinds.
    margin : MarginKernel or None
        :math:`\phi(x)`, :math:`\phi'`, :math:`\phi''` in :math:`x = \beta h` and one pair's
        minimising margin, for the smooth and piecewise-linear margin losses; None
        elsewhere (``ipo`` is quadratic and has a closed form).
    population_loss : callable
        ``population_loss(problem)`` -> the expected loss (a
        :class:`~klpolicy.preference.populations.PairProblem`, what
        :func:`~klpolicy.preference.population_loss` validated).
    optimum : callable
        ``optimum(problem)`` -> the exact population minimiser, or a ValueError saying why
        there is none (``no_optimum``).
    no_optimum : str
        Why population_optimum computes no minimiser ("" where it does).
    per_outcome : type or None
        For a loss that splits outcome by outcome (:math:`\sum_i f_i(g_i)`): its
        :class:`~klpolicy.preference.populations.PerOutcome` class.
    minimiser_ranges : callable or None
        ``minimiser_ranges(w)`` -> the exact ranges of the score differences over all
        minimisers of one connected part (``hinge``, whose minimisers form a polyhedron);
        None where the minimiser of a part is unique.
    score_divergence : str or None
        The f-divergence whose score the loss is DPO's sigmoid of (``chi_po``: ``"chi2_kl"``),
        fixing ``divergence``; None otherwise.
    length_normalised : bool
        Whether the loss divides each log-ratio (or score) by its response length (the
        option ``lengths``).
    mistakes : tuple of LossMistake
        Common wrong implementations the check suites name.
    nonfinite_hint : callable or None
        ``nonfinite_hint(x, bad, got, options)`` -> why an implementation returns inf/nan at
        the margins ``x = beta h`` flagged ``bad`` where the loss is finite, or None.
    margin_only : bool
        (kind ``"margin"``) Whether the loss depends on the log-ratios only through
        :math:`h = a - b`.
    batch_dependent : bool
        (kind ``"sorting"``) Whether a pair's loss depends on the other pairs of the batch.
    """

    name: str
    formula: str
    kind: str
    value: Callable[..., NDArray]
    gradient: Callable[..., PairGradient]
    options: tuple[LossOption, ...] = ()
    reference: str
    notes: str = ""
    f_divergence: tuple[str, str] = ("scores", "scores")
    pair: PairKernel | None = field(default=None, repr=False)
    margin: MarginKernel | None = field(default=None, repr=False)
    population_loss: Callable[[PairProblem], float] = field(repr=False)
    optimum: Callable[[PairProblem], NDArray] = field(repr=False)
    no_optimum: str = ""
    per_outcome: type | None = field(default=None, repr=False)
    minimiser_ranges: Callable[[NDArray], tuple[NDArray, NDArray]] | None = field(
        default=None, repr=False
    )
    score_divergence: str | None = None
    length_normalised: bool = False
    mistakes: tuple[LossMistake, ...] = field(default=(), repr=False)
    nonfinite_hint: Callable[..., str | None] | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"`kind` must be one of {', '.join(_KINDS)}; got {self.kind!r}")

    @property
    def margin_only(self) -> bool:
        """Whether the loss depends on the log-ratios only through :math:`h = a - b`."""
        return self.kind == "margin"

    @property
    def batch_dependent(self) -> bool:
        """Whether a pair's loss depends on the other pairs of the batch (sorting)."""
        return self.kind == "sorting"

    def resolve_options(self, options: Mapping[str, Any]) -> dict[str, float]:
        """Validate ``options`` by name; return every option with defaults filled in.

        Returns
        -------
        dict
            Every option of the loss, by name.
        """
        known = {o.name: o for o in self.options}
        for k in options:
            if k not in known:
                names = ", ".join(f"`{n}`" for n in known) or "none"
                raise ValueError(
                    f"`loss` {self.name!r} has no option `{k}` (got {k}={options[k]!r}); "
                    f"its options: {names}"
                )
        return {n: o.validate(options.get(n, o.default)) for n, o in known.items()}


# ---------------------------------------------------------------------------
# scalar kernels on float64 arrays
# ---------------------------------------------------------------------------


def _sp(t: NDArray) -> NDArray:
    with np.errstate(under="ignore", over="ignore"):
        return np.logaddexp(0.0, t)


def _sig(t: NDArray) -> NDArray:
    return special.expit(t)


def _times(w, y):
    """w * y with 0 * inf = 0: a weight of 0 (or a factor that underflowed to 0) drops the
    term, so a margin of +-inf gives the loss's limit, not NaN."""
    with np.errstate(invalid="ignore"):
        return np.where(np.asarray(w) == 0, 0.0, w * y)


def _logit_margin(p, o):
    """One pair's minimising margin for the sigmoid loss, logit(p) (a start for the others)."""
    return special.logit(np.clip(p, 1e-300, 1 - 1e-16))


def _robust_margin(p, o):
    """robust: the logit of the de-noised preference (p - e) / (1 - 2 e)."""
    e = o["label_smoothing"]
    return special.logit(np.clip((p - e) / (1 - 2 * e), 1e-300, 1 - 1e-16))


def _hinge_margin(p, o):
    """hinge: sign(2 p - 1), the exact minimiser of p max(0, 1 - x) + (1 - p) max(0, 1 + x)
    (any x in [-1, 1] at p = 1/2: 0)."""
    return np.sign(2 * p - 1)


def _exo_margin(p, o):
    """exo_pair: (2 p - 1) log((1 - e) / e), the start of the Newton descent."""
    e = o["epsilon"]
    return (2 * p - 1) * (math.log1p(-e) - math.log(e))


def _sigmoid_phi(x, o):
    e = o["label_smoothing"]
    return _times(1 - e, _sp(-x)) + _times(e, _sp(x))


def _sigmoid_d1(x, o):
    e = o["label_smoothing"]
    return e * _sig(x) - (1 - e) * _sig(-x)


def _sigmoid_d2(x, o):
    return _sig(x) * _sig(-x)


def _robust_phi(x, o):
    e = o["label_smoothing"]
    return (_times(1 - e, _sp(-x)) - _times(e, _sp(x))) / (1 - 2 * e)


def _robust_d1(x, o):
    e = o["label_smoothing"]
    return (-(1 - e) * _sig(-x) - e * _sig(x)) / (1 - 2 * e)


def _hinge_phi(x, o):
    return np.maximum(1.0 - x, 0.0)


def _hinge_d1(x, o):
    # torch.relu has derivative 0 at 0: the kink x = 1 gets 0, like TRL's autograd
    return np.where(x < 1.0, -1.0, 0.0)


def _hinge_d2(x, o):
    return np.zeros_like(x)


def _exo_k(o):
    e = o["epsilon"]
    return math.log1p(-e) - math.log(e)


def _exo_phi(x, o):
    e = o["epsilon"]
    return _times(_sig(x), special.log_expit(x) - math.log1p(-e)) + _times(
        _sig(-x), special.log_expit(-x) - math.log(e)
    )


def _exo_d1(x, o):
    # at x = +-inf the weight sigma(x) sigma(-x) is 0 and so is the derivative (not 0 x inf)
    return _times(_sig(x) * _sig(-x), x - _exo_k(o))


def _exo_d2(x, o):
    s = _sig(x)
    return s * _sig(-x) * ((1 - 2 * s) * (x - _exo_k(o)) + 1)


def _disco_parts(x, o):
    """m = sigma(x/tau), A = sp(-x), mE = m e^{-x} (in log space), their derivatives."""
    tau = o["tau"]
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        m = _sig(x / tau)  # x / tau = +-inf: m = 1 or 0, exactly
        me = np.exp(special.log_expit(x / tau) - x)
        # x = -inf: m e^{-x} ~ e^{-x (1 - 1/tau)}, whose limit is 0, 1 or inf (not inf - inf)
        me = np.where(np.isneginf(x), 0.0 if tau < 1 else (1.0 if tau == 1 else np.inf), me)
    return tau, m, me


def _disco_phi(x, o):
    _, m, me = _disco_parts(x, o)
    return (1 - m) * _sp(-x) + me


def _disco_d1(x, o):
    tau, m, me = _disco_parts(x, o)
    a, a1 = _sp(-x), -_sig(-x)
    m1 = m * (1 - m) / tau
    # phi = A + m (E - A):  phi' = A' + m' (E - A) + m (E' - A'),  E' = -E
    return a1 + (1 - m) / tau * me - _times(m1, a) + (-me - m * a1)  # m1 = 0 where a = inf


def _disco_d2(x, o):
    tau, m, me = _disco_parts(x, o)
    a, a1, a2 = _sp(-x), -_sig(-x), _sig(x) * _sig(-x)
    m1 = m * (1 - m) / tau
    m2 = m * (1 - m) * (1 - 2 * m) / tau / tau  # not tau**2: a Python float overflows
    # phi'' = A'' + m'' (E - A) + 2 m' (E' - A') + m (E'' - A''),  E'' = E
    return (
        a2
        + (1 - m) * (1 - 2 * m) / tau / tau * me
        - m2 * a
        + 2 * ((1 - m) / tau * (-me) - m1 * a1)
        + (me - m * a2)
    )


# Each kernel: ell(a, b, beta, o) -> loss, and (d ell/da, d ell/db).
def _margin_kernel(phi, d1):
    def ell(a, b, beta, o):
        with np.errstate(over="ignore"):  # a margin beyond the largest float is +-inf
            x = beta * (a - b)
        return phi(x, o)

    def grad(a, b, beta, o):
        d = beta * d1(beta * (a - b), o)
        return d, -d

    return ell, grad


def _ipo_ell(a, b, beta, o):
    return (a - b - 1 / (2 * beta)) ** 2


def _ipo_grad(a, b, beta, o):
    d = 2 * (a - b - 1 / (2 * beta))
    return d, -d


def _nca_ell(a, b, beta, o):
    u, v = beta * a, beta * b
    return _sp(-u) + 0.5 * _sp(u) + 0.5 * _sp(v)


def _nca_grad(a, b, beta, o):
    u, v = beta * a, beta * b
    return beta * (0.5 * _sig(u) - _sig(-u)), beta * 0.5 * _sig(v)


def _bco_ell(a, b, beta, o):
    d = o["delta"]
    return _sp(d - beta * a) + _sp(beta * b - d)


def _bco_grad(a, b, beta, o):
    d = o["delta"]
    return -beta * _sig(d - beta * a), beta * _sig(beta * b - d)


def _sppo_ell(a, b, beta, o):
    k = 0.5 / beta
    return (a - k) ** 2 + (b + k) ** 2


def _sppo_grad(a, b, beta, o):
    k = 0.5 / beta
    return 2 * (a - k), 2 * (b + k)


def _apo_zero_ell(a, b, beta, o):
    return _sig(-beta * a) + _sig(beta * b)  # 1 - sigma(u) = sigma(-u), exact in the tail


def _apo_zero_grad(a, b, beta, o):
    u, v = beta * a, beta * b
    return -beta * _sig(u) * _sig(-u), beta * _sig(v) * _sig(-v)


def _apo_down_ell(a, b, beta, o):
    return _sig(beta * a) + _sig(-beta * (a - b))


def _apo_down_grad(a, b, beta, o):
    u, x = beta * a, beta * (a - b)
    dx = -beta * _sig(x) * _sig(-x)
    return beta * _sig(u) * _sig(-u) + dx, -dx


def _make_sft():
    """TRL's ``sft`` term per pair: the chosen response's negative log-likelihood -pc."""

    def value(
        policy_chosen_logps: ArrayLike,
        policy_rejected_logps: ArrayLike,
        ref_chosen_logps: ArrayLike,
        ref_rejected_logps: ArrayLike,
        beta: float,
        **options: float,
    ) -> NDArray[np.floating]:
        (pc, *_), dtype = _inputs(
            policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
        )
        V.as_positive_scalar("beta", beta)
        LOSSES["sft"].resolve_options(options)
        return (-pc).astype(dtype)[()]

    def gradient(
        policy_chosen_logps: ArrayLike,
        policy_rejected_logps: ArrayLike,
        ref_chosen_logps: ArrayLike,
        ref_rejected_logps: ArrayLike,
        beta: float,
        **options: float,
    ) -> PairGradient:
        (pc, *_), dtype = _inputs(
            policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
        )
        V.as_positive_scalar("beta", beta)
        LOSSES["sft"].resolve_options(options)
        one, zero = np.full_like(pc, -1.0, dtype=dtype), np.zeros_like(pc, dtype=dtype)
        return PairGradient(one[()], zero[()], zero[()], zero[()])

    value.__name__, gradient.__name__ = "sft_value", "sft_gradient"
    return value, gradient


def _norm_lengths(o):
    """The chosen and rejected lengths of ``sigmoid_norm``'s pair form: ``lengths[0]``, ``[1]``."""
    lengths = o["lengths"]
    if lengths.shape[:1] != (2,):
        raise ValueError(
            "`lengths` of a pair loss must have shape (2, ...): the chosen lengths, then the "
            f"rejected ones (population_loss takes one length per outcome); got shape "
            f"{lengths.shape}"
        )
    return lengths[0], lengths[1]


def _norm_ell(a, b, beta, o):
    lc, lr = _norm_lengths(o)
    return _sp(-beta * (a / lc - b / lr))


def _norm_grad(a, b, beta, o):
    lc, lr = _norm_lengths(o)
    d = -beta * _sig(-beta * (a / lc - b / lr))
    return d / lc, -d / lr


def _chipo_x(a, b, beta):
    """beta ((e^a + a) - (e^b + b)) = beta (e^m (e^{a-m} - e^{b-m}) + (a - b)), m = max(a, b):
    both e-terms past the floats give the sign of a - b (never inf - inf), a = b gives 0."""
    m = np.maximum(a, b)
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.exp(a - m) - np.exp(b - m)  # a - m = nan only for a = b = +inf (t = 0 then)
        t = np.where(np.isnan(t), 0.0, t)
        e = np.where(t == 0, 0.0, t * np.exp(m))
        return beta * (e + (a - b))


def _chipo_ell(a, b, beta, o):
    return _sp(-_chipo_x(a, b, beta))


def _chipo_grad(a, b, beta, o):
    # d/da sp(-x) = -beta sigma(-x) (e^a + 1), with sigma(-x) e^a = exp(log sigma(-x) + a)
    ls = special.log_expit(-_chipo_x(a, b, beta))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        # sigma(-x) = 0 (x = +inf): each term is 0, also where a or b is +inf itself
        ea = np.where(np.isneginf(ls), 0.0, np.exp(ls + a))
        eb = np.where(np.isneginf(ls), 0.0, np.exp(ls + b))
        da = -beta * (ea + np.exp(ls))
        db = beta * (eb + np.exp(ls))
    return da, db


# ---------------------------------------------------------------------------
# the public value / gradient wrappers (TRL's argument order)
# ---------------------------------------------------------------------------


def _beyond_floats():
    """Overflow and underflow are exact here, not warnings: a log-ratio, margin, loss or
    gradient beyond the largest float (beta x log-prob past 1.8e308, or a float32 result
    past 3.4e38) is +-inf, its correctly rounded value, and one below the smallest is 0.
    The kernels are written so that these infinities give the loss's limits (no inf - inf,
    no 0 x inf): an invalid operation still warns."""
    return np.errstate(over="ignore", under="ignore")


def _inputs(pc, pr, rc, rr):
    """The validated log-probs in float64 (the rows compute there) and the result dtype."""
    return _log_prob_inputs(pc, pr, rc, rr, compute_dtype=np.float64)


def _make_pair(row_name, ell, grad, margin):
    """value/gradient for a loss computed pair by pair from the log-ratios a and b.

    Margin-only losses get ``a = h = (pc - pr) - (rc - rr)`` (TRL's ``logits``, rounded the
    same way) and ``b = 0``.
    """

    def ratios(pc, pr, rc, rr):
        if margin:
            return (pc - pr) - (rc - rr), np.zeros_like(pc)
        return pc - rc, pr - rr

    def value(
        policy_chosen_logps: ArrayLike,
        policy_rejected_logps: ArrayLike,
        ref_chosen_logps: ArrayLike,
        ref_rejected_logps: ArrayLike,
        beta: float,
        **options: float,
    ) -> NDArray[np.floating]:
        (pc, pr, rc, rr), dtype = _inputs(
            policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
        )
        b = V.as_positive_scalar("beta", beta)
        o = LOSSES[row_name].resolve_options(options)
        with _beyond_floats():
            return ell(*ratios(pc, pr, rc, rr), b, o).astype(dtype)[()]

    def gradient(
        policy_chosen_logps: ArrayLike,
        policy_rejected_logps: ArrayLike,
        ref_chosen_logps: ArrayLike,
        ref_rejected_logps: ArrayLike,
        beta: float,
        **options: float,
    ) -> PairGradient:
        (pc, pr, rc, rr), dtype = _inputs(
            policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
        )
        b = V.as_positive_scalar("beta", beta)
        o = LOSSES[row_name].resolve_options(options)
        with _beyond_floats():
            da, db = grad(*ratios(pc, pr, rc, rr), b, o)
            if margin:
                db = -da
            da, db = da.astype(dtype), db.astype(dtype)
        return PairGradient(da[()], db[()], (-da)[()], (-db)[()])

    value.__name__ = f"{row_name}_value"
    gradient.__name__ = f"{row_name}_gradient"
    return value, gradient


def _sorted_delta(left: NDArray, right: NDArray):
    """TRL's sort along the batch axis 0: delta_k = sort(left)_k - sort(right)_k."""
    il = np.argsort(left, axis=0, kind="stable")
    ir = np.argsort(right, axis=0, kind="stable")
    sl = np.take_along_axis(left, il, axis=0)
    sr = np.take_along_axis(right, ir, axis=0)
    return sl - sr, il, ir


def _scatter(d_sorted: NDArray, order: NDArray) -> NDArray:
    out = np.empty_like(d_sorted)
    np.put_along_axis(out, order, d_sorted, axis=0)
    return out


def _make_sorted(row_name: str, paired: bool):
    """aot (sorts the policy and reference log-odds) and, ``paired``, aot_pair / aot_unpaired
    (sort a and b)."""

    def parts(pc, pr, rc, rr):
        if paired:
            return pc - rc, pr - rr
        return pc - pr, rc - rr

    def value(
        policy_chosen_logps: ArrayLike,
        policy_rejected_logps: ArrayLike,
        ref_chosen_logps: ArrayLike,
        ref_rejected_logps: ArrayLike,
        beta: float,
        **options: float,
    ) -> NDArray[np.floating]:
        (pc, pr, rc, rr), dtype = _inputs(
            policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
        )
        b = V.as_positive_scalar("beta", beta)
        o = LOSSES[row_name].resolve_options(options)
        if pc.ndim == 0:
            pc, pr, rc, rr = (np.reshape(t, (1,)) for t in (pc, pr, rc, rr))
            scalar = True
        else:
            scalar = False
        with _beyond_floats():
            left, right = parts(pc, pr, rc, rr)
            delta = _sorted_delta(left, right)[0]
            out = _sigmoid_phi(b * delta, o).astype(dtype)
        return out[0] if scalar else out

    def gradient(
        policy_chosen_logps: ArrayLike,
        policy_rejected_logps: ArrayLike,
        ref_chosen_logps: ArrayLike,
        ref_rejected_logps: ArrayLike,
        beta: float,
        **options: float,
    ) -> PairGradient:
        (pc, pr, rc, rr), dtype = _inputs(
            policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
        )
        b = V.as_positive_scalar("beta", beta)
        o = LOSSES[row_name].resolve_options(options)
        scalar = pc.ndim == 0
        if scalar:
            pc, pr, rc, rr = (np.reshape(t, (1,)) for t in (pc, pr, rc, rr))
        with _beyond_floats():
            left, right = parts(pc, pr, rc, rr)
            delta, il, ir = _sorted_delta(left, right)
            d = b * _sigmoid_d1(b * delta, o)
            dl, dr = _scatter(d, il), _scatter(-d, ir)
            if paired:  # left = pc - rc, right = pr - rr
                g = (dl, dr, -dl, -dr)
            else:  # left = pc - pr, right = rc - rr
                g = (dl, -dl, dr, -dr)
            g = tuple(t.astype(dtype) for t in g)
        if scalar:
            g = tuple(t[0] for t in g)
        return PairGradient(*g)

    value.__name__ = f"{row_name}_value"
    gradient.__name__ = f"{row_name}_gradient"
    return value, gradient


_EPS_DPO = LossOption(
    "label_smoothing", 0.0, 0.0, 0.5, doc="probability that a label is flipped (cDPO)"
)
_EPS_SIGMOID = dataclasses.replace(
    _EPS_DPO,
    if_ignored="(as TRL's current DPOTrainer does for sigmoid; TRL 0.1x applied it as "
    "cDPO: check a current trainer with label_smoothing=0)",
)
_EPS_ROBUST = LossOption(
    "label_smoothing", 0.0, 0.0, 0.5, high_open=True, doc="known label-flip rate"
)

_RDPO = "Chowdhury, Kini and Natarajan, 2024, arXiv:2403.00409 (robust DPO)"

# how TRL forms each loss with an f-divergence, (TRL >= 1.10.0, TRL 0.29.0-1.9.2); a row
# without f_divergence takes the scores in both. TRL 1.16.0 dpo_trainer.py lines 808-816
# refuse every loss outside sigmoid, sigmoid_norm, hinge, ipo, exo_pair, robust, discopop,
# sft; TRL 1.9.2 (lines 1466-1528) applies nca_pair, bco_pair, sppo_hard to the scores, aot
# and apo_zero to the log-ratios, apo_down's first term to the log-ratio and its margin to
# the scores
_REFUSED_SCORES = ("refused", "scores")
_REFUSED_INPUTS = ("refused", "inputs")

_SORTS = (
    "sorts log-ratios across the batch: its population version is the quantile coupling "
    "evaluated by population_loss, piecewise in the ordering of the log-ratios and without a "
    "per-pair minimiser; population_optimum has no exact minimiser for it"
)
_NOT_CONVEX = (
    "is a sum of sigmoids of the log-ratios, not convex in the policy (bounded, so mass runs "
    "to the net winners); population_optimum has no exact minimiser for it"
)


def _margin_row(*, name: str, margin: MarginKernel | None = None, pair=None, **fields):
    """A margin loss: value and gradient from its kernel in x = beta h (or, for ``ipo``, from
    its own ``pair`` kernel on h)."""
    if pair is None:
        pair = PairKernel(*_margin_kernel(margin.phi, margin.d1))
    value, gradient = _make_pair(name, pair.ell, pair.grad, True)
    return PairLoss(
        name=name, kind="margin", value=value, gradient=gradient, pair=pair, margin=margin, **fields
    )


def _pair_row(*, name: str, pair: PairKernel, **fields):
    """A loss of the pair's two log-ratios a and b."""
    value, gradient = _make_pair(name, pair.ell, pair.grad, False)
    return PairLoss(name=name, kind="pair", value=value, gradient=gradient, pair=pair, **fields)


def _sorting_row(*, name: str, paired: bool, **fields):
    """A loss that sorts across the batch (AOT); its population loss the quantile coupling."""
    value, gradient = _make_sorted(name, paired)
    return PairLoss(
        name=name,
        kind="sorting",
        value=value,
        gradient=gradient,
        population_loss=P.on_scores(P.sorted_coupling(paired)),
        optimum=P.refused_optimum,
        no_optimum=_SORTS,
        f_divergence=_REFUSED_INPUTS,
        **fields,
    )


def _hinge_mistakes():
    def margin(pc, pr, rc, rr, beta):
        return beta * ((pc - pr) - (rc - rr))

    return (
        LossMistake(
            "it has no margin: max(0, -beta h) instead of SLiC's max(0, 1 - beta h).",
            lambda v, pc, pr, rc, rr, beta: np.maximum(0.0, -margin(pc, pr, rc, rr, beta)),
        ),
        LossMistake(
            "its margin is beta, not 1: max(0, beta - beta h); the hinge is max(0, 1 - beta h).",
            lambda v, pc, pr, rc, rr, beta: np.maximum(0.0, beta - margin(pc, pr, rc, rr, beta)),
        ),
    )


_IPO_MISTAKES = (
    LossMistake(
        "its target margin is 1/beta; IPO regresses the margin onto 1/(2 beta) "
        "(Azar et al. 2023, eq. 17).",
        lambda v, pc, pr, rc, rr, beta: v(pc, pr, rc, rr, beta / 2),
    ),
    LossMistake(
        "its target margin is beta/2 (or 2/beta); IPO's is 1/(2 beta).",
        lambda v, pc, pr, rc, rr, beta: v(pc, pr, rc, rr, 1 / beta),
    ),
)


def _discopop_nonfinite(x, bad, got, o):
    """exp(-x) overflows in float32 below x = -88.7; the term is inf * 0 where
    sigmoid(x / tau) is 0: the sentence for an implementation that forms it so."""
    at = bad & (x < -88.0)
    if not at.any():
        return None
    i = int(np.argmin(np.where(at, x, np.inf)))
    tau = o["tau"]
    what = "nan" if np.isnan(got).any() else "inf"
    return (
        f"it returns {what} where the loss is finite: at x = beta h = {float(x[i])!r} its term "
        f"exp(-x) * sigmoid(x / tau) (tau = {tau!r}) is inf * 0, since exp(-x) overflows "
        "(below x = -709.8 in float64, -88.7 in float32) while sigmoid(x / tau) underflows to "
        "0. Evaluate the term in log space, exp(-x + log sigmoid(x / tau)) = "
        "exp(-x - softplus(-x / tau)) (np.exp(-x - np.logaddexp(0, -x / tau))), which is "
        "finite, and -log sigmoid(x) as softplus(-x)."
    )


_SIGMOID_MARGIN = MarginKernel(_sigmoid_phi, _sigmoid_d1, _sigmoid_d2, _logit_margin)


def _likelihood_row() -> PairLoss:
    """``sft``: the chosen response's negative log-likelihood (no divergence enters)."""
    value, gradient = _make_sft()
    return PairLoss(
        name="sft",
        kind="likelihood",
        formula=r"-\log\pi(y_w)",
        value=value,
        gradient=gradient,
        population_loss=P.chosen_cross_entropy,
        optimum=P.chosen_marginal,
        f_divergence=("inputs", "inputs"),
        reference="Ouyang et al., 2022, arXiv:2203.02155 (an SFT term beside a preference "
        "loss, as in RPO: Pang et al., 2024, arXiv:2404.19733)",
        notes="TRL's sft is the token-mean cross-entropy of the chosen completions over the "
        "batch; on whole responses (a tabular problem) it is the chosen response's negative "
        "log-likelihood, the value here. Combine it with another loss through "
        "population_loss(loss=[...], loss_weights=[...])",
    )


# the rows, in TRL's order of loss_type values (then sigmoid_norm and chi_po)
_ROWS: tuple[PairLoss, ...] = (
    _margin_row(
        name="sigmoid",
        formula=r"(1-\varepsilon)\,\mathrm{sp}(-x) + \varepsilon\,\mathrm{sp}(x)",
        margin=_SIGMOID_MARGIN,
        options=(_EPS_SIGMOID,),
        population_loss=P.on_scores(P.smoothed_dpo_sum),
        optimum=P.margin_optimum(P.dpo_solve),
        reference="Rafailov et al., 2023, arXiv:2305.18290 (DPO); label smoothing: "
        "Mitchell, 2023, https://ericmitchell.ai/cdpo.pdf (cDPO)",
        notes="label_smoothing is cDPO's flip rate, as TRL 0.1x applies it to sigmoid; TRL "
        "1.x ignores label_smoothing for sigmoid (observed with TRL 1.16.0): compare it at "
        "label_smoothing=0",
    ),
    _margin_row(
        name="hinge",
        formula=r"\max(0,\,1 - x)",
        margin=MarginKernel(_hinge_phi, _hinge_d1, _hinge_d2, _hinge_margin),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.margin_optimum(P.hinge_solve),
        minimiser_ranges=P.hinge_ranges,
        mistakes=_hinge_mistakes(),
        reference="Zhao et al., 2023, arXiv:2305.10425 (SLiC-HF)",
        notes="piecewise linear: the population minimiser can be a set",
    ),
    _margin_row(
        name="ipo",
        formula=r"\big(h - \tfrac{1}{2\beta}\big)^2",
        pair=PairKernel(_ipo_ell, _ipo_grad),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.margin_optimum(P.ipo_solve),
        mistakes=_IPO_MISTAKES,
        reference="Azar et al., 2023, arXiv:2310.12036, eq. (17); TRL's beta is the paper's tau",
    ),
    _margin_row(
        name="exo_pair",
        formula=r"\sigma(x)\big(\log\sigma(x) - \log(1-\epsilon)\big)"
        r" + \sigma(-x)\big(\log\sigma(-x) - \log\epsilon\big)",
        margin=MarginKernel(_exo_phi, _exo_d1, _exo_d2, _exo_margin),
        options=(
            LossOption(
                "epsilon",
                1e-3,
                0.0,
                1.0,
                low_open=True,
                high_open=True,
                doc="TRL's label_smoothing, replaced by 1e-3 when 0",
            ),
        ),
        population_loss=P.on_scores(P.pair_sum),
        # its infimum is attained: scores never run off to infinity
        optimum=P.margin_optimum(P.newton_solve(runaway=False)),
        reference="Ji et al., 2024, arXiv:2402.00856 (EXO), eq. (16)",
        notes="TRL passes label_smoothing as epsilon and substitutes 1e-3 for 0",
    ),
    _pair_row(
        name="nca_pair",
        formula=r"\mathrm{sp}(-\beta a) + \tfrac12\mathrm{sp}(\beta a)"
        r" + \tfrac12\mathrm{sp}(\beta b)",
        pair=PairKernel(_nca_ell, _nca_grad),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.per_outcome_optimum,
        per_outcome=P.NCAOutcomes,
        f_divergence=_REFUSED_SCORES,
        reference="Chen et al., 2024, arXiv:2402.05369 (NCA)",
    ),
    _margin_row(
        name="robust",
        formula=r"\frac{(1-\varepsilon)\,\mathrm{sp}(-x) - \varepsilon\,\mathrm{sp}(x)}"
        r"{1-2\varepsilon}",
        margin=MarginKernel(_robust_phi, _robust_d1, _sigmoid_d2, _robust_margin),
        options=(_EPS_ROBUST,),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.margin_optimum(P.robust_solve(_SIGMOID_MARGIN)),
        reference=_RDPO,
        notes="unbiased for labels flipped with probability label_smoothing",
    ),
    _pair_row(
        name="bco_pair",
        formula=r"\mathrm{sp}(\delta - \beta a) + \mathrm{sp}(\beta b - \delta)",
        pair=PairKernel(_bco_ell, _bco_grad),
        options=(
            LossOption(
                "delta",
                0.0,
                # beyond 2**53 the margin delta - beta a keeps none of its O(1) part
                -(2.0**53),
                2.0**53,
                False,
                False,
                doc="TRL: running mean of beta (a + b) / 2 over batches (starts at 0)",
            ),
        ),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.per_outcome_optimum,
        per_outcome=P.BCOOutcomes,
        f_divergence=_REFUSED_SCORES,
        reference="Jung et al., 2024, arXiv:2404.04656 (BCO)",
        notes="TRL's delta is a running mean of the batch means of beta a and beta b; its "
        "population value is beta E_W[(a + b) / 2]",
    ),
    _pair_row(
        name="sppo_hard",
        formula=r"\big(a - \tfrac{1}{2\beta}\big)^2 + \big(b + \tfrac{1}{2\beta}\big)^2",
        pair=PairKernel(_sppo_ell, _sppo_grad),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.per_outcome_optimum,
        per_outcome=P.QuadraticOutcomes,
        f_divergence=_REFUSED_SCORES,
        reference="Wu et al., 2024, arXiv:2405.00675 (SPPO), eq. (4.7) with hard labels",
    ),
    _sorting_row(
        name="aot",
        paired=False,
        formula=r"(1-\varepsilon)\,\mathrm{sp}(-\beta\delta_k)"
        r" + \varepsilon\,\mathrm{sp}(\beta\delta_k),"
        r"\ \delta_k = \mathrm{sort}(\log\tfrac{\pi(y_w)}{\pi(y_l)})_k"
        r" - \mathrm{sort}(\log\tfrac{\pi_{ref}(y_w)}{\pi_{ref}(y_l)})_k",
        options=(_EPS_DPO,),
        reference="Melnyk et al., 2024, arXiv:2406.05882 (AOT)",
        notes="sorts along the batch axis 0",
    ),
    _sorting_row(
        name="aot_pair",
        paired=True,
        formula=r"(1-\varepsilon)\,\mathrm{sp}(-\beta\delta_k)"
        r" + \varepsilon\,\mathrm{sp}(\beta\delta_k),"
        r"\ \delta_k = \mathrm{sort}(a)_k - \mathrm{sort}(b)_k",
        options=(_EPS_DPO,),
        reference="Melnyk et al., 2024, arXiv:2406.05882 (AOT, paired)",
        notes="sorts along the batch axis 0",
    ),
    _sorting_row(
        name="aot_unpaired",
        paired=True,
        formula=r"(1-\varepsilon)\,\mathrm{sp}(-\beta\delta_k)"
        r" + \varepsilon\,\mathrm{sp}(\beta\delta_k),"
        r"\ \delta_k = \mathrm{sort}(a)_k - \mathrm{sort}(b)_k",
        options=(_EPS_DPO,),
        reference="Melnyk et al., 2024, arXiv:2406.05882 (AOT, unpaired)",
        notes="TRL's current name for aot_pair (the same loss; aot_pair is kept as the old "
        "name); sorts along the batch axis 0",
    ),
    _pair_row(
        name="apo_zero",
        formula=r"1 - \sigma(\beta a) + \sigma(\beta b)",
        pair=PairKernel(_apo_zero_ell, _apo_zero_grad),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.refused_optimum,
        no_optimum=_NOT_CONVEX,
        f_divergence=_REFUSED_INPUTS,
        reference="D'Oosterlinck et al., 2024, arXiv:2408.06266 (APO), eq. (7)",
    ),
    _pair_row(
        name="apo_down",
        formula=r"\sigma(\beta a) + 1 - \sigma(\beta(a - b))",
        pair=PairKernel(_apo_down_ell, _apo_down_grad),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.refused_optimum,
        no_optimum=_NOT_CONVEX,
        f_divergence=("refused", "unmodelled"),
        reference="D'Oosterlinck et al., 2024, arXiv:2408.06266 (APO), eq. (8)",
    ),
    _margin_row(
        name="discopop",
        formula=r"(1 - m)\,\mathrm{sp}(-x) + m\,e^{-x},\ m = \sigma(x/\tau)",
        margin=MarginKernel(_disco_phi, _disco_d1, _disco_d2, _logit_margin),
        options=(LossOption("tau", 0.05, 0.0, math.inf, True, True, doc="TRL's discopop_tau"),),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.margin_optimum(P.newton_solve(), check=P.discopop_tau_check),
        nonfinite_hint=_discopop_nonfinite,
        reference="Chris Lu et al., 2024, arXiv:2406.08414 (DiscoPOP), eq. (5)",
    ),
    _likelihood_row(),
    _pair_row(
        name="sigmoid_norm",
        formula=r"\mathrm{sp}\big(-\beta\,[a / L_w - b / L_l]\big)",
        pair=PairKernel(_norm_ell, _norm_grad),
        options=(
            _LengthsOption("lengths", None, 0.0, math.inf, True, True, doc="response lengths"),
        ),
        population_loss=P.on_scores(P.length_normalised_sum),
        optimum=P.length_normalised_optimum,
        length_normalised=True,
        reference="Lambert et al., 2024, arXiv:2411.15124 (Tulu 3), sec. 5.1.2, eq. (6); TRL "
        "loss_type='sigmoid_norm' (huggingface/trl#5406, merged 2026-03-30)",
        notes="DPO's sigmoid loss on the length-normalised log-ratios a / L_w, b / L_l. Pair "
        "form: lengths=(L_w, L_l), each broadcasting with the pairs; population_loss and "
        "population_optimum take one length per outcome (shape of ref)",
    ),
    _pair_row(
        name="chi_po",
        formula=r"\mathrm{sp}\big(-\beta\,[(e^{a} + a) - (e^{b} + b)]\big)",
        pair=PairKernel(_chipo_ell, _chipo_grad),
        population_loss=P.on_scores(P.pair_sum),
        optimum=P.fixed_link_optimum,
        score_divergence="chi2_kl",
        reference="Huang et al., 2024, arXiv:2407.13399 (chi-PO), without the paper's clip "
        "of the margin at 2 R_max",
        notes="DPO's sigmoid loss on chi-PO's link t + log t (t = e^a): f-DPO with the "
        "chi2_kl row of klpolicy.DIVERGENCES; not a TRL loss_type",
    ),
)


LOSSES: Mapping[str, PairLoss] = MappingProxyType({r.name: r for r in _ROWS})
"""The pair losses by TRL ``loss_type``: a read-only mapping of :class:`PairLoss` rows.

``LOSSES["sigmoid"]`` follows TRL 0.1x's ``label_smoothing`` (cDPO's label-flip rate);
TRL 1.x ignores ``label_smoothing`` for ``sigmoid`` (observed with TRL 1.16.0), so a
TRL 1.x sigmoid loss is this row at ``label_smoothing=0`` (each row's ``notes`` says so).
"""


def get_loss(name: Any) -> PairLoss:
    """The registry row ``name``, or a ValueError listing the known names."""
    if not isinstance(name, str) or name not in LOSSES:
        raise ValueError(f"`loss` must be one of {', '.join(LOSSES)}; got {name!r}")
    return LOSSES[name]
