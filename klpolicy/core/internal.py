"""The internal interface of :mod:`klpolicy.core`: the one door into core besides its public API.

Internal: other klpolicy subpackages use these names; users should not (they may
change without notice). Everything else in ``klpolicy.core`` whose name starts with
an underscore is private to core. An architecture test
(``tests/test_architecture.py``) fails if another subpackage imports a private name
of core, or of any other subpackage, directly.

What it offers
--------------
special
    ``scipy.special``, imported on first use (``special.expit(x)``), so that
    ``import klpolicy`` does not pay for scipy's import.
validation
    The checkers the parts share (probability arrays, rewards, beta, scalars with
    bounds, counts, KL budgets, token trees, masks, log-probabilities, ...). Each takes
    the caller's argument name and raises a ``ValueError`` that names it. A part's own
    checks (its ``_inputs`` module) word their messages with ``validation.format_value``,
    ``format_index`` (an index as ``(0, 2)``), ``first_index`` (the first bad entry)
    and ``describe`` (a bounded ``repr``).
prepare(ref, reward, axis) -> (ref, reward)
    Validate a ``(ref, reward)`` pair; broadcast, probability axis last, one dtype.
setup(ref, reward, beta, axis) -> (ref, reward, beta, axis_neg)
    Validate a whole problem; ``beta`` shaped ``(..., 1)``; ``axis_neg`` for :func:`restore`.
restore(x, axis_neg)
    Move the probability axis back where the caller had it.
tilt(ref, reward, beta, want=TILT_ALL) -> Tilt
    The closed-form kernel on validated numpy inputs (the blocked fast path of
    ``_tilt``, which hands the rows it cannot prove to the careful kernel of
    ``_careful``): ``pi``, ``u = log(pi/ref)``,
    ``value``, ``kl``, ``mean`` (those named in ``want``), with the greedy
    (``beta = 0``) and reference (``beta = inf``) limits.
Tilt, TILT_ALL
    The kernel's result type and the set of all its fields.
pair(p, q, axis, names) -> (p, q, axis_neg)
    Validate two distributions over the same outcomes.
kl_last(p, q), entropy_last(p), cross_entropy_last(p, q)
    The divergences on validated arrays, probability axis last.
array_api
    The closed form, divergences and per-sample estimators written once against the
    Python array API (:mod:`klpolicy.core._xp`), for torch/JAX/CuPy input:
    ``is_foreign(*xs)`` (is one argument such an array), ``optimal_policy``,
    ``soft_value``, ``optimal_kl``, ``max_kl``, ``kl_divergence``, ``cross_entropy``,
    ``entropy``, ``total_variation`` (``axis=``, ``validate=``) and
    ``estimate(estimator, logp, logq, clip, log_ratio_clip, validate=True)`` (``estimator``
    a formula of ``estimator_values`` or its name).
estimator_values
    The per-sample KL estimators' values written once against the array API
    (:mod:`klpolicy.core._estimates`): ``k1_value(xp, ell)``, ``k2_value``, ``k3_value``,
    ``abs_value`` and ``formula(name)`` (the one of that name), evaluated by the
    estimators registry's rows (``xp = numpy``) and by ``array_api.estimate``.
expm1mx(x), kl_unit_series(u), kl_terms(p, q, u), horner_x2(x, coeffs), EXPM1MX_COEFFICIENTS, SERIES_RADIUS
    Precise numerics: ``exp(x) - 1 - x`` without cancellation, the KL summand
    ``p log(p/q) - p + q`` from a log-ratio, and the series behind them.
normalised_log_ratio(p, q)
    ``log(p_n/q_n)`` of rows taken as exactly normalised, exact for nearly equal rows.
as_divergence(divergence, alpha, name="divergence") -> (FDivergence, alpha)
    The row of :data:`klpolicy.DIVERGENCES` and the checked ``alpha`` (errors name the
    arguments); ``f_divergence_last(name, p, q, alpha)``: D_f on validated float64 rows.
ascent_growth_rate(full_field, theta) -> (growth, tolerance)
    The largest real part of the eigenvalues of an ascent field's Jacobian in the free
    logits at a point, and the rounding below which it means nothing: a growth above the
    tolerance is a stationary point training moves away from.
monotone_root(fun, lo, hi, x0, *, increasing, ftol, xtol, xatol, max_iter) -> Roots
    The one root finder for monotone inverses: safeguarded Newton with bisection,
    vectorised over rows, guaranteed to terminate, unconverged rows flagged.
"""

from . import _estimates as estimator_values
from . import _lazy as special
from . import _validation as validation
from . import _xp as array_api
from ._flows import ascent_growth_rate
from ._numerics import _EXPM1MX as EXPM1MX_COEFFICIENTS
from ._numerics import _SERIES_RADIUS as SERIES_RADIUS
from ._numerics import _horner_x2 as horner_x2
from ._numerics import expm1mx, kl_terms, kl_unit_series, normalised_log_ratio
from ._tilt import ALL as TILT_ALL
from ._tilt import _Tilt as Tilt
from .closed_form import _prepare as prepare
from .closed_form import _restore as restore
from .closed_form import _setup as setup
from .closed_form import _tilt as tilt
from .divergences import _cross_entropy_last as cross_entropy_last
from .divergences import _entropy_last as entropy_last
from .divergences import _kl_last as kl_last
from .divergences import _pair as pair
from .fdivergences import _f_divergence_last as f_divergence_last
from .fdivergences import as_divergence
from .roots import Roots, monotone_root

__all__ = [
    "EXPM1MX_COEFFICIENTS",
    "SERIES_RADIUS",
    "TILT_ALL",
    "Roots",
    "Tilt",
    "array_api",
    "as_divergence",
    "ascent_growth_rate",
    "cross_entropy_last",
    "entropy_last",
    "estimator_values",
    "expm1mx",
    "f_divergence_last",
    "horner_x2",
    "kl_last",
    "kl_terms",
    "kl_unit_series",
    "monotone_root",
    "normalised_log_ratio",
    "pair",
    "prepare",
    "restore",
    "setup",
    "special",
    "tilt",
    "validation",
]
