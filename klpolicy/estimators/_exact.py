"""Shared kernels of the KL-estimator modules: estimator values, log-ratios, moments.

Private: import the public functions from :mod:`klpolicy.estimators`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..core.internal import normalised_log_ratio
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

    The log-ratio is core's ``normalised_log_ratio``: nearly equal rows keep full
    relative precision even though their sums differ from one by a few ulp (as in
    :func:`klpolicy.kl_divergence`).
    """
    wp, wq = p.sum(-1, keepdims=True), q.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        ell = normalised_log_ratio(p, q).astype(p.dtype, copy=False)
        ell = np.where(p > 0, np.where(q > 0, ell, np.inf), 0)
    return p / wp, q / wq, ell


def _weighted_moments(w: NDArray, k: NDArray) -> tuple[NDArray, NDArray]:
    """Mean and variance of ``k`` under the weights ``w`` (last axis); inf-aware."""
    # centred on the value c at the heaviest weight (an exact zero there), not on the rounded
    # mean: for a near point mass, k - mean is rounding noise (eps |k|, squared 1e-38) beside
    # a variance of 1e-60; with d = k - c and m = E[d], Var = E[(d - m)^2] is exact
    with np.errstate(invalid="ignore", over="ignore"):
        c = np.take_along_axis(k, np.argmax(w, axis=-1)[..., None], axis=-1)
        d = np.where(w > 0, k - c, 0)
        m = np.where(w > 0, w * d, 0).sum(-1)
        mean = c[..., 0] + m
        dev = np.where(w > 0, d - m[..., None], 0)
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
