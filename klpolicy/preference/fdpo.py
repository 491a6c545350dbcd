r"""f-DPO: the pair losses of :data:`LOSSES` on TRL's f-divergence scores, and their optima.

TRL's ``DPOTrainer`` (``DPOConfig.f_divergence_type``, after Wang et al. 2023) replaces
the log-ratio :math:`l = \log\pi(y) - \log\pi_{ref}(y)` of each response by a *score*
:math:`S(l)` before forming the pair losses (``delta_score = chosen_scores -
rejected_scores``). With :math:`t = e^l` and the generators of
:data:`klpolicy.DIVERGENCES`, :math:`S = c\,f'(t) + k`:

=====================  =====================================  =====================  ===
TRL name               score :math:`S(l)`, TRL 1.10.0-1.16.0  TRL 0.29.0-1.9.2       c
=====================  =====================================  =====================  ===
``reverse_kl``         :math:`l` (:math:`k = -1`)             the same               1
``forward_kl``         :math:`1 - e^{-l}` (:math:`k = 1`)     :math:`-e^{-l}`        1
``js_divergence``      :math:`\log 2 + \log\sigma(l)` (0)     :math:`\log\sigma(l)`  2
``alpha_divergence``   :math:`(e^{(a-1)l} - 1)/(a-1)` (0)     :math:`e^{(a-1)l}/(a-1)`  1
=====================  =====================================  =====================  ===

TRL 1.16.0 (``trl/trainer/dpo_trainer.py`` lines 1353-1381) and every release from
1.10.0 keep the constants (:math:`f'(t)` of TRL's own generators); TRL 0.29.0 to 1.9.2
(the same block, lines 1400-1428 of 1.9.2, from huggingface/trl#3906) drop them. The
constants cancel in the margin losses but not where a score is divided by its
completion length (``sigmoid_norm``; TRL's ``ipo`` too): ``trl_version`` picks the form.
TRL returns :math:`l` for ``alpha_divergence`` when :math:`|a - 1| < 10^{-6}` and clamps
the exponent :math:`(a-1)l` at 80 in float32/bfloat16 and 11 in float16. The other rows
of the registry (``chi2``, ``hellinger``, ``chi2_kl``, ``reverse_chi2``) take
:math:`S = f'(t)`, Wang et al.'s general recipe, in every version; ``chi2_kl`` is
chi-PO's link :math:`t + \log t`.

Which losses take the scores depends on the version too: TRL 1.10.0 and later accept an
f-divergence only with ``sigmoid``, ``sigmoid_norm``, ``hinge``, ``ipo``, ``exo_pair``,
``robust``, ``discopop`` and ``sft`` (TRL 1.16.0 ``dpo_trainer.py`` lines 808-816: a
ValueError otherwise), and ``nca_pair``, ``bco_pair`` and ``sppo_hard`` use the
log-ratios (lines 1419-1446); TRL 0.29.0-1.9.2 accept every loss, apply ``nca_pair``,
``bco_pair`` and ``sppo_hard`` to the scores, the sorting losses and ``apo_zero`` to the
log-ratios, and ``apo_down`` to both (its chosen term on the log-ratio, its margin on the
scores). Each row of :data:`LOSSES` says so in its ``f_divergence`` field.

Under Bradley-Terry preferences from a reward :math:`r`, a margin loss whose population
minimiser in the margins is the implied reward :math:`x^*` (for ``sigmoid``,
:math:`x^* = r`) is minimised by scores with :math:`\beta S(l_i) = x^*_i + \text{const}`, so
:math:`f'(t_i) = (x^*_i - \lambda)/(c\beta)`: the f-regularised optimum
``f_optimal_policy(ref, x*, c * beta, divergence=f)``, wherever that optimum is interior
(every outcome of the support keeps mass, and no clamp binds). With lengths
(``sigmoid_norm``) :math:`\beta S(l_i)/L_i = x^*_i + \lambda`, so
:math:`t_i = (f')^{-1}\big((L_i(x^*_i + \lambda)/\beta - k)/c\big)`, :math:`\lambda` the
root of :math:`\sum_i \pi_{ref,i} t_i = 1`: the constant :math:`k` enters.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import DIVERGENCES, f_optimal_policy
from ..core.internal import as_divergence, monotone_root, special
from ..core.internal import validation as V

__all__ = ["FDPO_DIVERGENCES", "f_divergence_score"]

_LOG2 = math.log(2.0)
# TRL's names -> registry rows
_TRL = {"js_divergence": "js", "alpha_divergence": "alpha"}
_REFUSED = ("tv",)  # f' is not invertible: no score
DEFAULT_TRL_VERSION = "1.16.0"


def _alpha_is_one(a) -> bool:
    return a is not None and abs(a - 1.0) < 1e-6  # TRL: the limit case, reverse_kl's score


def _alpha_exponent(l, a, clamp):
    z = (a - 1.0) * l
    return z if clamp is None else np.minimum(z, clamp)


@dataclass(frozen=True)
class _Score:
    """One divergence's f-DPO score: ``S = c f'(t) + k`` in TRL >= 1.10 and in TRL < 1.10.

    ``score(l, a, clamp)`` and ``score_before_1_10(...)`` evaluate it (float64, TRL's
    formulas); ``k(a)`` and ``k_before_1_10(a)`` are the constants (for the inverse).
    ``log_ratio(a)`` says whether TRL takes the log-ratio itself, reverse_kl's score, at
    this ``alpha`` (the alpha row near 1); ``clamped`` whether TRL clamps its exponent
    (``alpha_clamp``).
    """

    name: str
    c: float
    score: Callable[..., NDArray]
    score_before_1_10: Callable[..., NDArray]
    k: Callable[..., float]
    k_before_1_10: Callable[..., float]
    log_ratio: Callable[..., bool] = lambda a=None: False
    clamped: bool = False


def _const(v):
    return lambda a=None: v


_SCORES: Mapping[str, _Score] = MappingProxyType(
    {
        row.name: row
        for row in (
            _Score(
                "reverse_kl",
                1.0,
                lambda l, a, c: l,
                lambda l, a, c: l,
                _const(-1.0),
                _const(-1.0),
                log_ratio=_const(True),
            ),
            # TRL 1.16.0 lines 1356-1359: 1 - exp(-l); TRL 1.9.2 lines 1403-1406: -exp(-l)
            _Score(
                "forward_kl",
                1.0,
                lambda l, a, c: -np.expm1(-l),
                lambda l, a, c: -np.exp(-l),
                _const(1.0),
                _const(0.0),
            ),
            # TRL 1.16.0 lines 1360-1363: log 2 + logsigmoid(l); 1.9.2: logsigmoid(l)
            _Score(
                "js",
                2.0,
                lambda l, a, c: _LOG2 + special.log_expit(l),
                lambda l, a, c: special.log_expit(l),
                _const(0.0),
                _const(-_LOG2),
            ),
            # TRL 1.16.0 lines 1364-1379: (exp(t) - 1) / (a - 1); 1.9.2: exp(t) / (a - 1)
            _Score(
                "alpha",
                1.0,
                lambda l, a, c: np.expm1(_alpha_exponent(l, a, c)) / (a - 1.0),
                lambda l, a, c: np.exp(_alpha_exponent(l, a, c)) / (a - 1.0),
                _const(0.0),
                lambda a=None: 1.0 / (a - 1.0),
                log_ratio=_alpha_is_one,
                clamped=True,
            ),
            # not TRL's: f'(t) itself, in every version (Wang et al.'s recipe)
            _Score(
                "chi2",
                1.0,
                lambda l, a, c: 2.0 * np.expm1(l),
                lambda l, a, c: 2.0 * np.expm1(l),
                _const(0.0),
                _const(0.0),
            ),
            _Score(
                "hellinger",
                1.0,
                lambda l, a, c: -np.expm1(-0.5 * l),
                lambda l, a, c: -np.expm1(-0.5 * l),
                _const(0.0),
                _const(0.0),
            ),
            _Score(
                "chi2_kl",
                1.0,
                lambda l, a, c: np.exp(l) + l,
                lambda l, a, c: np.exp(l) + l,
                _const(0.0),
                _const(0.0),
            ),
            _Score(
                "reverse_chi2",
                1.0,
                lambda l, a, c: -np.expm1(-2.0 * l),
                lambda l, a, c: -np.expm1(-2.0 * l),
                _const(0.0),
                _const(0.0),
            ),
        )
    }
)

#: The divergences :func:`f_divergence_score` takes: every row of
#: :data:`klpolicy.DIVERGENCES` that has an f-DPO score (in the registry's order), then
#: TRL's own names of two of them.
FDPO_DIVERGENCES: tuple[str, ...] = tuple(name for name in DIVERGENCES if name in _SCORES) + tuple(
    _TRL
)


def keeps_constants(trl_version) -> bool:
    """Whether TRL ``trl_version`` keeps the scores' constants (1.10.0 and later)."""
    m = (
        re.fullmatch(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?\S*\s*", trl_version)
        if isinstance(trl_version, str)
        else None
    )
    if m is None:
        raise ValueError(
            "`trl_version` must be a TRL release such as '1.16.0' or '1.9.2' (the f-DPO "
            "scores keep their constants from 1.10.0 on); got "
            f"{V.describe(trl_version)}"
        )
    return (int(m.group(1)), int(m.group(2))) >= (1, 10)


def resolve_divergence(divergence, alpha):
    """(registry row, alpha, c) for a divergence given by its registry or its TRL name."""
    key = _TRL.get(divergence, divergence) if isinstance(divergence, str) else divergence
    if key in _REFUSED:
        raise ValueError(
            "`divergence` 'tv' has no f-DPO score: its f' is a step (0 or 1/2 in size), not "
            "invertible, so no log-ratio is recovered from a score"
        )
    row, a = as_divergence(key, alpha)
    return row, a, _SCORES[row.name].c


# the log-ratio itself: TRL's score wherever a row's ``log_ratio(alpha)`` holds
_LOG_RATIO = _SCORES["reverse_kl"]


def _score_row(name: str, a) -> _Score:
    row = _SCORES[name]
    return _LOG_RATIO if row.log_ratio(a) else row


def _score(l: NDArray, name: str, a, clamp: float | None, constants: bool = True) -> NDArray:
    """TRL's score of the log-ratios ``l`` (float64), the exact f'(e^l) for the other rows."""
    row = _score_row(name, a)
    fn = row.score if constants else row.score_before_1_10
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        return fn(l, a, clamp)


def _score_constant(name: str, a, constants: bool) -> float:
    row = _score_row(name, a)
    return float(row.k(a) if constants else row.k_before_1_10(a))


def f_divergence_score(
    logratio: ArrayLike,
    divergence: str,
    *,
    alpha: float | None = None,
    alpha_clamp: float | None = None,
    trl_version: str = DEFAULT_TRL_VERSION,
) -> NDArray[np.floating]:
    r"""TRL's f-divergence score of per-response log-ratios (f-DPO's link).

    .. math::

        S(l) = c\, f'(e^{l}) + k, \qquad
        \ell_{\text{f-DPO}} = -\log\sigma\big(\beta\,(S(l_w) - S(l_l))\big)

    Parameters
    ----------
    logratio : array_like
        :math:`l = \log\pi(y) - \log\pi_{ref}(y)`, finite, any shape.
    divergence : str
        A key of :data:`klpolicy.DIVERGENCES` except ``"tv"``, or TRL's
        ``"js_divergence"`` / ``"alpha_divergence"``.
    alpha : float, optional
        TRL's ``f_alpha_divergence_coef`` for the alpha row (required there).
    alpha_clamp : float, optional
        TRL's clamp of the exponent :math:`(a-1)l`: 80 in float32 and bfloat16, 11 in
        float16 (``None``: no clamp, the exact score). Only for the alpha row.
    trl_version : str, optional
        The TRL release whose scores to use (default ``"1.16.0"``): 1.10.0 and later keep
        the constants :math:`k` of the table in :mod:`klpolicy.preference.fdpo`
        (:math:`1 - e^{-l}`, :math:`\log 2 + \log\sigma(l)`,
        :math:`(e^{(a-1)l} - 1)/(a-1)`), 0.29.0 to 1.9.2 drop them. The rows that are not
        TRL's score :math:`f'(t)` in every version.

    Returns
    -------
    ndarray
        The scores, the shape of ``logratio``; float32 for float32 input.

    Raises
    ------
    ValueError
        For non-finite log-ratios, an unknown ``divergence`` or ``"tv"``, an ``alpha``
        missing or given to another row, an ``alpha_clamp`` that is not a positive
        number or is given to another row, or a ``trl_version`` that is not a release
        number.

    Notes
    -----
    TRL 1.16.0 (``trl/trainer/dpo_trainer.py`` lines 1353-1381): ``reverse_kl``
    :math:`l`, ``forward_kl`` :math:`1 - e^{-l}`, ``js_divergence``
    :math:`\log 2 + \log\sigma(l)`, ``alpha_divergence`` :math:`(e^{(a-1)l} - 1)/(a-1)`
    (:math:`l` when :math:`|a-1| < 10^{-6}`); TRL 1.9.2 (lines 1400-1428): :math:`l`,
    :math:`-e^{-l}`, :math:`\log\sigma(l)`, :math:`e^{(a-1)l}/(a-1)`. In the conventions
    of :data:`klpolicy.DIVERGENCES` these are :math:`c f'(t) + k` with :math:`c = 2` for
    JS (:math:`\log(2t/(1+t)) = 2 f'_{js}(t)`) and 1 otherwise. With a clamp :math:`C`
    the alpha score is constant for :math:`(a-1) l > C`: above :math:`l = C/(a-1)` when
    :math:`a > 1` (a ceiling on the chosen's score: its gradient vanishes there) and
    below :math:`l = -C/(1-a)` when :math:`a < 1` (a floor on the rejected's score).

    References
    ----------
    .. [1] Wang et al., "Beyond Reverse KL: Generalizing Direct Preference Optimization
       with Diverse Divergence Constraints", 2023, arXiv:2309.16240.
    .. [2] Huang et al., 2024, arXiv:2407.13399 (chi-PO's link t + log t).

    Examples
    --------
    >>> from klpolicy.preference import f_divergence_score
    >>> f_divergence_score([0.0, 1.0], "js_divergence").round(4)  # log 2 + log sigmoid(l)
    array([0.    , 0.3799])
    >>> f_divergence_score([0.0, 1.0], "js_divergence", trl_version="1.9.2").round(4)
    array([-0.6931, -0.3133])
    >>> f_divergence_score([0.0, 100.0], "alpha", alpha=1.5, alpha_clamp=11.0).round(1)
    array([     0. , 119746.3])
    """
    row, a, _ = resolve_divergence(divergence, alpha)
    clamp = _as_clamp(alpha_clamp, row.name)
    constants = keeps_constants(trl_version)
    arr = V.as_finite_array("logratio", logratio)
    dtype = np.float32 if arr.dtype == np.float32 else np.float64
    return _score(arr.astype(np.float64), row.name, a, clamp, constants).astype(dtype)[()]


def uses_f_divergence(divergence, alpha, alpha_clamp) -> bool:
    """Whether the f-DPO options differ from TRL's default (``f_divergence_type``
    ``"reverse_kl"``, no alpha, no clamp): the losses are then formed as TRL forms them with
    an f-divergence (its scores, or its refusals), else on the log-ratios."""
    return (divergence, alpha, alpha_clamp) != ("reverse_kl", None, None)


def _as_clamp(alpha_clamp, name: str) -> float | None:
    if alpha_clamp is None:
        return None
    if not _SCORES[name].clamped:
        raise ValueError(
            f"`alpha_clamp` applies only to the 'alpha' divergence (TRL's alpha_divergence); "
            f"got alpha_clamp={V.describe(alpha_clamp)} with divergence {name!r}"
        )
    return V.as_scalar("alpha_clamp", alpha_clamp, "(0, inf)")


def check_f_loss(row, divergence: str, trl_version) -> str:
    """How TRL ``trl_version`` forms ``row``'s loss with an f-divergence: "scores" (the
    row's loss on the scores) or "inputs" (on its own inputs: the divergence does not
    enter); a
    ValueError where TRL refuses the pair (or klpolicy does not model it)."""
    constants = keeps_constants(trl_version)
    how = row.f_divergence[0 if constants else 1]
    if how == "refused":
        raise ValueError(
            f"`loss` {row.name!r} takes no f-divergence in TRL {trl_version}: from 1.10.0 on "
            "TRL's DPOTrainer accepts f_divergence_type only with sigmoid, sigmoid_norm, "
            "hinge, ipo, exo_pair, robust, discopop and sft (TRL 1.16.0 dpo_trainer.py lines "
            f"808-816); got divergence={divergence!r}. TRL 0.29.0-1.9.2 applied it (pass "
            "trl_version='1.9.2')"
            if row.f_divergence[1] != "refused"
            else f"`loss` {row.name!r} takes no f-divergence in TRL {trl_version} (TRL 1.16.0 "
            f"dpo_trainer.py lines 808-816); got divergence={divergence!r}"
        )
    if how == "unmodelled":
        raise ValueError(
            f"`loss` {row.name!r} with an f-divergence in TRL {trl_version} applies its "
            "chosen term to the log-ratio and its margin to the scores (TRL 1.9.2 "
            "dpo_trainer.py lines 1522-1528); klpolicy does not model that mixture; got "
            f"divergence={divergence!r}"
        )
    return how


def f_population_loss(
    row, o, ell, g, w, beta, name, a, clamp, margin_only, constants, lengths=None
):
    """sum_ij W_ij ell(S_i, S_j) (or ell(S_i - S_j, 0) for margin losses) on the scores;
    with ``lengths`` (sigmoid_norm) the scores are divided by them first."""
    s = _score(g, name, a, clamp, constants)
    mask = w > 0
    with np.errstate(over="ignore", invalid="ignore"):
        if lengths is not None:  # sigmoid_norm: sigmoid on the normalised scores S / L
            s = s / lengths
            vals = np.logaddexp(0.0, -beta * (s[:, None] - s[None, :]))
        elif margin_only:
            d = s[:, None] - s[None, :]
            vals = ell(d, np.zeros_like(d), beta, o)
        else:
            vals = ell(s[:, None] + 0 * s[None, :], s[None, :] + 0 * s[:, None], beta, o)
    return float(np.sum(np.where(mask, w * np.where(mask, vals, 0.0), 0.0)))


def _implied_reward(pi_kl, ref, loss):
    support = ref > 0
    with np.errstate(divide="ignore"):
        x = np.where(
            support,
            np.log(np.where(support, pi_kl, 1.0)) - np.log(np.where(support, ref, 1.0)),
            0.0,
        )
    if not np.all(np.isfinite(x[support])):
        k = int(np.flatnonzero(support & ~np.isfinite(x))[0])
        raise ValueError(
            f"`preferences` make outcome {k} lose (or win) every comparison: the {loss!r} "
            "optimum is a limit with an infinite implied reward there, and the f-scores "
            "have no finite preimage of it"
        )
    return x


def _length_normalised_f(ref, x, lengths, beta, row, a, c, constants):
    """t_i = (f')^{-1}((L_i (x_i + lam) / beta - k) / c), lam the root of sum ref t = 1."""
    support = ref > 0
    k = _score_constant(row.name, a, constants)
    rs, xs, ls = ref[support], x[support], lengths[support]
    fp1 = float(row.fprime(1.0, alpha=a))
    edge = (c * fp1 + k) * beta / ls - xs  # lam at which t_i = 1

    def t_of(lam):
        u = (ls[None, :] * (xs[None, :] + lam[:, None]) / beta - k) / c
        return u, row.fprime_inv(u, alpha=a)

    def fun(lam, rows):
        _, t = t_of(lam)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            dt = (ls / (beta * c))[None, :] / row.fsecond(t, alpha=a)
            d = np.sum(rs * np.where(np.isfinite(dt), dt, np.nan), axis=1)
        return np.sum(rs * t, axis=1) - 1.0, d

    lo, hi = float(np.min(edge)), float(np.max(edge))
    if lo == hi:
        lam = lo
    else:
        lam = float(monotone_root(fun, lo, hi, increasing=True).x)
    _, t = t_of(np.array([lam]))
    pi = np.zeros(ref.shape)
    pi[support] = rs * t[0]
    return pi / pi.sum()


def f_population_optimum(
    pi_kl,
    ref,
    beta,
    loss,
    divergence,
    alpha,
    alpha_clamp,
    lengths=None,
    trl_version=DEFAULT_TRL_VERSION,
):
    """The f-DPO population optimum from the reverse-KL one (same loss, same data).

    ``pi_kl = ref e^{x*}/Z``, the reverse-KL optimum at beta = 1, gives the implied
    reward ``x* = log(pi_kl/ref)`` (the margin losses' x* does not depend on beta);
    the f-scores reach the same margins at ``f_optimal_policy(ref, x*, c beta, f)``,
    which is returned when it is interior and no clamp binds; otherwise a ValueError
    says which outcome leaves the interior and why. With ``lengths`` (sigmoid_norm, whose
    ``pi_kl`` is the sigmoid optimum) the normalised scores reach them at
    ``t_i = (f')^{-1}((L_i (x*_i + lam) / beta - k) / c)``, where the score's constant
    ``k`` (TRL ``trl_version``'s) enters.
    """
    row, a, c = resolve_divergence(divergence, alpha)
    clamp = _as_clamp(alpha_clamp, row.name)
    constants = keeps_constants(trl_version)
    support = ref > 0
    x = _implied_reward(pi_kl, ref, loss)
    if _SCORES[row.name].log_ratio(a):
        row, a, c = resolve_divergence(_LOG_RATIO.name, None)
        clamp = None  # TRL returns the log-ratio itself there, unclamped
        if lengths is None:
            return f_optimal_policy(ref, x, beta, divergence=row.name)
    if lengths is None:
        pi = f_optimal_policy(ref, x, c * beta, divergence=row.name, alpha=a)
    else:
        pi = _length_normalised_f(ref, x, lengths, beta, row, a, c, constants)
    fp0 = row.fprime_zero(alpha=a)
    # where f'(0) = -inf the optimum is interior in exact arithmetic: a zero is an entry
    # below the smallest float (e.g. at a subnormal beta, the greedy limit), not a boundary
    zero = support & (pi == 0) & bool(np.isfinite(fp0))
    if zero.any():
        k = int(np.flatnonzero(zero)[0])
        raise ValueError(
            f"`divergence` {row.name!r}{'' if a is None else f' (alpha={a:g})'} has no interior "
            f"population optimum here: the score is bounded below by c f'(0) = {c * fp0:g}, "
            f"and the implied reward of outcome {k} ({x[k]:.6g}) is more than "
            f"{c * beta:g} * (f'(t_best) - f'(0)) below the best, so the f-regularised "
            f"optimum gives it zero mass; the loss's infimum is then on the boundary "
            f"pi({k}) = 0, which population_optimum does not compute"
        )
    if clamp is not None:
        with np.errstate(divide="ignore"):
            lr = np.log(np.where(support, pi, 1.0)) - np.log(np.where(support, ref, 1.0))
        binds = support & ((a - 1.0) * lr > clamp)
        if binds.any():
            k = int(np.flatnonzero(binds)[0])
            edge = clamp / (a - 1.0)
            side = "above" if a > 1 else "below"
            raise ValueError(
                f"`alpha_clamp` = {clamp:g} binds at the optimum: outcome {k} has log-ratio "
                f"{lr[k]:.6g}, {side} {edge:.6g} = alpha_clamp/(alpha - 1), where the clamped "
                "score is constant (zero gradient); the clamped loss's minimiser is then not "
                "the f-regularised optimum, and population_optimum does not compute it"
            )
    return pi
