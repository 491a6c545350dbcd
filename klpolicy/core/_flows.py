"""Stability of a stationary point of an expected ascent field in the logits.

Where training lands is a zero of the expected ascent direction that is *attracting*: a
zero whose Jacobian has an eigenvalue of positive real part is a point training moves
away from. One test, used wherever a fixed point is computed numerically
(``klpolicy.estimators.fixed_point``, ``grpo_fixed_point``, the KL-term report).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

#: central-difference step in the logits for the Jacobian of the ascent field
_JACOBIAN_STEP = 1e-5


def ascent_growth_rate(full_field, th: NDArray) -> tuple[float, float]:
    """(largest real part of the eigenvalues of an ascent field's Jacobian, its rounding).

    ``full_field(theta) -> g``: the expected ascent direction in all the logits of one row's
    support (``g`` sums to zero: adding a constant to every logit moves nothing); ``th``:
    the logits of the point (any gauge). The Jacobian is taken in the free coordinates
    z = theta[:-1] - theta[-1], whose flow is g[:-1] - g[-1] (its eigenvalues are those of
    the full Jacobian less the gauge's zero), by central differences of step 1e-5
    (truncation about 1e-10, rounding about 1e-11, relative). A real part above
    ``1e-7 * max(1, max |J|)`` is beyond both: training leaves the point.

    Returns
    -------
    (float, float)
        The largest real part and the rounding it is resolved to.
    """
    if th.size < 2:
        return -np.inf, 0.0

    def field(z):
        g = full_field(np.append(z, 0.0))
        return g[:-1] - g[-1]

    z0 = th[:-1] - th[-1]
    h = _JACOBIAN_STEP
    jac = np.stack(
        [(field(z0 + h * e) - field(z0 - h * e)) / (2 * h) for e in np.eye(z0.size)], axis=1
    )
    return float(np.max(np.linalg.eigvals(jac).real)), 1e-7 * max(1.0, float(np.abs(jac).max()))
