r"""f-DPO: the pair losses of :data:`LOSSES` on TRL's f-divergence scores, and their optima.

TRL's ``DPOTrainer`` (``DPOConfig.f_divergence_type``, after Wang et al. 2023) replaces
the log-ratio :math:`l = \log\pi(y) - \log\pi_{ref}(y)` of each response by a *score*
:math:`S(l)` before forming the pair losses (``delta_score = chosen_scores -
rejected_scores``; ``nca_pair``, ``bco_pair`` and ``sppo_hard`` use the scores
themselves). With :math:`t = e^l` and the generators of :data:`klpolicy.DIVERGENCES`:

=====================  ==================================  =====================  ===
TRL name               score :math:`S(l)`                  as :math:`c f'(t) + k`  c
=====================  ==================================  =====================  ===
``reverse_kl``         :math:`l`                           :math:`f'(t) - 1`      1
``forward_kl``         :math:`-e^{-l}`                     :math:`f'(t)`          1
``js_divergence``      :math:`\log\sigma(l)`               :math:`2f'(t) - \log 2`  2
``alpha_divergence``   :math:`e^{(a-1)l}/(a-1)`            :math:`f'(t) + 1/(a-1)`  1
=====================  ==================================  =====================  ===

(TRL's ``alpha_divergence`` returns :math:`l` when :math:`|a - 1| < 10^{-6}` and clamps
the exponent :math:`(a-1)l` at 80 in float32/bfloat16 and 11 in float16.) The other rows
of the registry (``chi2``, ``hellinger``, ``chi2_kl``, ``reverse_chi2``) take
:math:`S = f'(t)`, Wang et al.'s general recipe; ``chi2_kl`` is chi-PO's link
:math:`t + \log t`.

Under Bradley-Terry preferences from a reward :math:`r`, a margin loss whose population
minimiser in the margins is the implied reward :math:`x^*` (for ``sigmoid``,
:math:`x^* = r`) is minimised by scores with :math:`\beta S(l_i) = x^*_i + \text{const}`, so
:math:`f'(t_i) = (x^*_i - \lambda)/(c\beta)`: the f-regularised optimum
``f_optimal_policy(ref, x*, c * beta, divergence=f)``, wherever that optimum is interior
(every outcome of the support keeps mass, and no clamp binds). The definitions were read
from ``trl/trainer/dpo_trainer.py`` of huggingface/trl (the ``_compute_loss`` block that
forms ``chosen_scores`` and ``rejected_scores``; see ``docs/derivations/f_divergences.md``
for the commit).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import f_optimal_policy
from ..core.internal import as_divergence, special
from ..core.internal import validation as V

__all__ = ["f_divergence_score"]

# TRL's names -> (registry row, factor c between TRL's score and f')
_TRL = {"js_divergence": "js", "alpha_divergence": "alpha"}
_REFUSED = ("tv",)  # f' is not invertible: no score


def resolve_divergence(divergence, alpha):
    """(registry name, alpha, c) for a divergence given by its registry or its TRL name."""
    key = _TRL.get(divergence, divergence) if isinstance(divergence, str) else divergence
    if key in _REFUSED:
        raise ValueError(
            "`divergence` 'tv' has no f-DPO score: its f' is a step (0 or 1/2 in size), not "
            "invertible, so no log-ratio is recovered from a score"
        )
    row, a = as_divergence(key, alpha)
    return row, a, (2.0 if row.name == "js" else 1.0)


def _score(l: NDArray, name: str, a, clamp: float | None) -> NDArray:
    """TRL's score of the log-ratios ``l`` (float64), the exact f'(e^l) for the other rows."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        if name == "reverse_kl" or (name == "alpha" and abs(a - 1.0) < 1e-6):
            return l
        if name == "forward_kl":
            return -np.exp(-l)
        if name == "js":
            return special.log_expit(l)
        if name == "alpha":
            z = (a - 1.0) * l
            if clamp is not None:
                z = np.minimum(z, clamp)
            return np.exp(z) / (a - 1.0)
        if name == "chi2":
            return 2.0 * np.expm1(l)
        if name == "hellinger":
            return -np.expm1(-0.5 * l)
        if name == "chi2_kl":
            return np.exp(l) + l
        if name == "reverse_chi2":
            return -np.expm1(-2.0 * l)
    raise AssertionError(name)  # pragma: no cover


def f_divergence_score(
    logratio: ArrayLike,
    divergence: str,
    *,
    alpha: float | None = None,
    alpha_clamp: float | None = None,
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

    Returns
    -------
    ndarray
        The scores, the shape of ``logratio``; float32 for float32 input.

    Raises
    ------
    ValueError
        For non-finite log-ratios, an unknown ``divergence`` or ``"tv"``, an ``alpha``
        missing or given to another row, or an ``alpha_clamp`` that is not a positive
        number or is given to another row.

    Notes
    -----
    The scores of TRL's four names: ``reverse_kl`` :math:`l`, ``forward_kl``
    :math:`-e^{-l}`, ``js_divergence`` :math:`\log\sigma(l)`, ``alpha_divergence``
    :math:`e^{(a-1)l}/(a-1)` (:math:`l` when :math:`|a-1| < 10^{-6}`, as TRL). In the
    conventions of :data:`klpolicy.DIVERGENCES` these are :math:`c f'(t) + k` with
    :math:`c = 2` for JS (:math:`\log\sigma(l) = 2 f'_{js}(t) - \log 2`) and 1 otherwise;
    the other rows score :math:`f'(t)` itself. With a clamp :math:`C` the alpha score is
    constant for :math:`(a-1) l > C`: above :math:`l = C/(a-1)` when :math:`a > 1`
    (a ceiling on the chosen's score: its gradient vanishes there) and below
    :math:`l = -C/(1-a)` when :math:`a < 1` (a floor on the rejected's score).

    References
    ----------
    .. [1] Wang et al., "Beyond Reverse KL: Generalizing Direct Preference Optimization
       with Diverse Divergence Constraints", 2023, arXiv:2309.16240.
    .. [2] Huang et al., 2024, arXiv:2407.13399 (chi-PO's link t + log t).

    Examples
    --------
    >>> from klpolicy.preference import f_divergence_score
    >>> f_divergence_score([0.0, 1.0], "js_divergence").round(4)  # log sigmoid(l)
    array([-0.6931, -0.3133])
    >>> f_divergence_score([0.0, 100.0], "alpha", alpha=1.5, alpha_clamp=11.0).round(1)
    array([2.0000e+00, 1.1975e+05])
    """
    row, a, _ = resolve_divergence(divergence, alpha)
    clamp = _as_clamp(alpha_clamp, row.name)
    arr = V.as_finite_array("logratio", logratio)
    dtype = np.float32 if arr.dtype == np.float32 else np.float64
    return _score(arr.astype(np.float64), row.name, a, clamp).astype(dtype)[()]


def _as_clamp(alpha_clamp, name: str) -> float | None:
    if alpha_clamp is None:
        return None
    if name != "alpha":
        raise ValueError(
            f"`alpha_clamp` applies only to the 'alpha' divergence (TRL's alpha_divergence); "
            f"got alpha_clamp={V.describe(alpha_clamp)} with divergence {name!r}"
        )
    return V.as_scalar("alpha_clamp", alpha_clamp, "(0, inf)")


def f_population_loss(row, o, ell, g, w, beta, name, a, clamp, margin_only) -> float:
    """sum_ij W_ij ell(S_i, S_j) (or ell(S_i - S_j, 0) for margin losses) on the scores."""
    s = _score(g, name, a, clamp)
    mask = w > 0
    with np.errstate(over="ignore", invalid="ignore"):
        if margin_only:
            d = s[:, None] - s[None, :]
            vals = ell(d, np.zeros_like(d), beta, o)
        else:
            vals = ell(s[:, None] + 0 * s[None, :], s[None, :] + 0 * s[:, None], beta, o)
    return float(np.sum(np.where(mask, w * np.where(mask, vals, 0.0), 0.0)))


def f_population_optimum(pi_kl, ref, beta, loss, divergence, alpha, alpha_clamp):
    """The f-DPO population optimum from the reverse-KL one (same loss, same data).

    ``pi_kl = ref e^{x*}/Z``, the reverse-KL optimum at beta = 1, gives the implied
    reward ``x* = log(pi_kl/ref)`` (the margin losses' x* does not depend on beta);
    the f-scores reach the same margins at ``f_optimal_policy(ref, x*, c beta, f)``,
    which is returned when it is interior and no clamp binds; otherwise a ValueError
    says which outcome leaves the interior and why.
    """
    row, a, c = resolve_divergence(divergence, alpha)
    clamp = _as_clamp(alpha_clamp, row.name)
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
    if row.name == "reverse_kl" or (row.name == "alpha" and abs(a - 1.0) < 1e-6):
        return f_optimal_policy(ref, x, beta, divergence="reverse_kl")
    pi = f_optimal_policy(ref, x, c * beta, divergence=row.name, alpha=a)
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
