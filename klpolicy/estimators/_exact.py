"""Shared kernels of the KL-estimator modules: estimator values, log-ratios, moments.

Private: import the public functions from :mod:`klpolicy.estimators`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..core.internal import pair as _pair
from ..core.internal import validation as V
from .registry import ESTIMATORS, get_estimator


def _values(name: str, ell: NDArray, clip: float | None, log_ratio_clip: float | None) -> NDArray:
    """The estimator ``name`` at log-ratios ``ell = logp - logq`` (``+inf`` allowed)."""
    if log_ratio_clip is not None:
        ell = np.clip(ell, -log_ratio_clip, log_ratio_clip)
    with np.errstate(over="ignore", invalid="ignore"):
        out = ESTIMATORS[name].value(ell)
    if clip is not None:
        out = np.clip(out, -clip, clip)
    return out


def _normalised(p: NDArray, q: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """``p/sum(p)``, ``q/sum(q)`` and their log-ratio on p's support (``+inf`` where q = 0).

    The log-ratio is ``log1p((p - q)/q) - log1p(sum(p - q)/sum(q))``, so that
    nearly equal rows keep full relative precision even though their sums
    differ from one by a few ulp (as in :func:`klpolicy.kl_divergence`).
    """
    wp, wq = p.sum(-1, keepdims=True), q.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = (p - q) / q
        ell = np.where(np.isfinite(ratio), np.log1p(ratio), np.log(p) - np.log(q))
        ell = ell - np.log1p(np.sum(p - q, -1, keepdims=True) / wq)
        ell = np.where(p > 0, np.where(q > 0, ell, np.inf), 0)
    return p / wp, q / wq, ell


def _weighted_moments(w: NDArray, k: NDArray) -> tuple[NDArray, NDArray]:
    """Mean and variance of ``k`` under the weights ``w`` (last axis); inf-aware."""
    with np.errstate(invalid="ignore", over="ignore"):
        terms = np.where(w > 0, w * k, 0)
        mean = terms.sum(-1)
        dev = np.where(w > 0, k - mean[..., None], 0)
        var = np.where(w > 0, w * dev * dev, 0).sum(-1)
    inf = ~np.isfinite(mean)
    return np.where(inf, np.inf, mean), np.where(inf, np.inf, var)


def _setup(p, q, estimator, axis, clip, log_ratio_clip):
    name = get_estimator(estimator).name
    pa, qa = _pair(p, q, axis)
    c = V.as_optional_clip("clip", clip)
    lc = V.as_optional_clip("log_ratio_clip", log_ratio_clip)
    return name, pa, qa, c, lc


def _exact_bias(pn: NDArray, qn: NDArray, ell: NDArray, name: str) -> NDArray:
    """The unclamped bias E_p[k] - KL(p||q) in closed form, for normalised rows (last axis).

    Uses E_p[q/p] = q(p > 0); every sum has terms of one sign.
    """
    q_out = np.sum(np.where(pn > 0, 0, qn), -1)
    return ESTIMATORS[name].exact_bias(pn, qn, ell, q_out)
