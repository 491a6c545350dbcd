"""The per-sample KL estimators and their exact moments, in mpmath, from their definitions.

Recipe: inputs are converted exactly (``mp.mpf(float(x))``) and rows normalised in mpmath
(as klpolicy treats rows that sum to one only up to rounding); with ``ell = log p - log q``
at a sample, k1 = ell, k2 = ell^2 / 2, k3 = exp(-ell) - 1 + ell, abs = |ell|; a moment is
the sum over the sampler's support of its probability times the (weighted) estimate.
"""

from __future__ import annotations

import mpmath as mp

from .closed_form import _norm


def k(name: str, ell):
    """The estimator ``name`` at an mpmath log-ratio ``ell = log p - log q``."""
    return {
        "k1": lambda: ell,
        "k2": lambda: ell**2 / 2,
        "k3": lambda: mp.exp(-ell) - 1 + ell,
        "abs": lambda: abs(ell),
    }[name]()


def estimator_moments(p, q, name: str, *, weighted: bool = False, sampler=None):
    """Mean and variance of ``w(x) k(x)`` under ``x ~ sampler`` (default ``p``).

    ``weighted`` uses the importance weight ``w = p / sampler`` (else ``w = 1``).
    """
    p, q = _norm(p), _norm(q)
    s = p if sampler is None else _norm(sampler)
    vals = []
    for pi, qi, si in zip(p, q, s, strict=True):
        if si == 0:
            continue
        w = pi / si if weighted else 1
        vals.append((si, w * k(name, mp.log(pi) - mp.log(qi))))
    mean = mp.fsum(a * b for a, b in vals)
    var = mp.fsum(a * (b - mean) ** 2 for a, b in vals)
    return mean, var
