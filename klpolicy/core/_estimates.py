r"""The per-sample KL estimators' values, written once against the Python array API.

With :math:`\ell = \log p(x) - \log q(x)` at samples :math:`x \sim p` (Schulman 2020,
with his letters swapped: samples come from ``p``):

=========  ======================================
name       per-sample value :math:`k(\ell)`
=========  ======================================
``k1``     :math:`\ell`
``k2``     :math:`\ell^2/2`
``k3``     :math:`e^{-\ell} - 1 + \ell`
``abs``    :math:`|\ell|`
=========  ======================================

Each formula ``<name>_value`` takes the namespace ``xp`` first (numpy itself, or array-api-compat's
torch, JAX, CuPy namespaces) and the log-ratios ``ell``; the result has ``ell``'s
dtype. The rows of :data:`klpolicy.estimators.ESTIMATORS` evaluate numpy input with
them (``xp = numpy``) and :mod:`klpolicy.core._xp` evaluates torch, JAX and CuPy input
with them, so a fix to a formula is made here, once.

Every formula is exact where ``ell`` is infinite: ``k2``, ``k3`` and ``abs`` are
``+inf`` at ``ell = +inf`` (``q(x) = 0``) and at ``ell = -inf`` (``p(x) = 0``), ``k1``
is ``ell`` itself, and a NaN stays NaN. ``k3`` is ``expm1mx(-ell)``, the series of
:math:`e^x - 1 - x` where :math:`|x| < 0.2`: a few ulp of the result, never negative.
Where ``ell`` may be differentiated (torch with grad, JAX) the infinite entries are
replaced by 0 before any arithmetic a ``where`` discards, so no ``inf - inf`` or
``0 * inf`` reaches a backward pass; elsewhere (numpy, CuPy, torch without grad) the
plain formulas run, with the same values.

References
----------
.. [1] J. Schulman, "Approximating KL divergence", 2020,
   http://joschu.net/blog/kl-approx.html
"""

from __future__ import annotations

import math

import numpy as np

from ._careful import _const, _expm1mx, _may_need_grad

__all__ = ["abs_value", "formula", "k1_value", "k2_value", "k3_value"]


def _differentiable(ell) -> bool:
    """Whether ``ell`` may be differentiated (torch with grad, JAX): then no entry that a
    ``where`` discards may meet ``0 * inf`` in the backward pass."""
    return not isinstance(ell, (np.ndarray, np.generic)) and _may_need_grad(ell)


def _finite_or_zero(xp, ell):
    """``(isfinite(ell), ell with its non-finite entries replaced by 0)``."""
    fin = xp.isfinite(ell)
    # numpy: a scalar 0, not a fresh zeroed array (whose pages each fault in when first read)
    zero = 0.0 if isinstance(ell, np.ndarray) else xp.zeros_like(ell)
    return fin, xp.where(fin, ell, zero)


def k1_value(xp, ell):
    r"""k1 at the log-ratios ``ell``: :math:`k_1(\ell) = \ell`.

    Parameters
    ----------
    xp : namespace
        The array namespace of ``ell`` (``numpy`` for numpy arrays).
    ell : array
        Log-ratios ``log p(x) - log q(x)``.

    Returns
    -------
    array
        ``ell`` itself.

    Examples
    --------
    >>> import numpy as np
    >>> k1_value(np, np.array([-1.0, 0.5, np.inf]))
    array([-1. ,  0.5,  inf])
    """
    return ell


def k2_value(xp, ell):
    r"""k2 at the log-ratios ``ell``: :math:`k_2(\ell) = \ell^2/2` (``+inf`` at ``ell = +-inf``).

    Parameters
    ----------
    xp : namespace
        The array namespace of ``ell``.
    ell : array
        Log-ratios ``log p(x) - log q(x)``.

    Returns
    -------
    array
        ``ell**2 / 2``, correctly rounded (one product, one exact halving).

    Examples
    --------
    >>> import numpy as np
    >>> k2_value(np, np.array([-1.0, 0.5, -np.inf]))
    array([0.5  , 0.125,   inf])
    """
    if not _differentiable(ell):  # the plain product: +inf at +-inf, NaN at NaN
        return 0.5 * ell * ell
    fin, ell_s = _finite_or_zero(xp, ell)
    return xp.where(fin, 0.5 * ell_s * ell_s, xp.abs(ell))


def k3_value(xp, ell):
    r"""k3 at the log-ratios ``ell``: :math:`k_3(\ell) = e^{-\ell} - 1 + \ell`.

    Evaluated as ``expm1mx(-ell)`` (the Taylor series where :math:`|\ell| < 0.2`), so it
    keeps its relative precision at tiny log-ratios, where the textbook form
    ``exp(-ell) - 1 + ell`` cancels to rounding, and is never negative.

    Parameters
    ----------
    xp : namespace
        The array namespace of ``ell``.
    ell : array
        Log-ratios ``log p(x) - log q(x)``.

    Returns
    -------
    array
        :math:`e^{-\ell} - 1 + \ell` to a few ulp; ``+inf`` at ``ell = +-inf``.

    Examples
    --------
    >>> import numpy as np
    >>> k3_value(np, np.array([1e-10, 1.0, np.inf]))  # 1e-20 / 2 at 1e-10
    array([5.00000000e-21, 3.67879441e-01,            inf])
    """
    if not _differentiable(ell):
        # +inf at ell = +inf as computed (exp(-inf) - 1 + inf); at ell = -inf, inf - inf
        inf = math.inf if isinstance(ell, np.ndarray) else _const(xp, math.inf, ell)
        return xp.where(ell == -math.inf, inf, _expm1mx(xp, -ell))
    fin, ell_s = _finite_or_zero(xp, ell)
    return xp.where(fin, _expm1mx(xp, -ell_s), xp.abs(ell))


def abs_value(xp, ell):
    r"""TRL's and verl's ``"abs"`` at the log-ratios ``ell``: :math:`|\ell|`.

    Parameters
    ----------
    xp : namespace
        The array namespace of ``ell``.
    ell : array
        Log-ratios ``log p(x) - log q(x)``.

    Returns
    -------
    array
        ``|ell|``.

    Examples
    --------
    >>> import numpy as np
    >>> abs_value(np, np.array([-1.0, 0.5]))
    array([1. , 0.5])
    """
    return xp.abs(ell)


def formula(name: str):
    """The value formula of the estimator ``name``: the function ``<name>_value`` of this module.

    Parameters
    ----------
    name : str
        An estimator name whose formula this module defines (``"k1"``, ``"k2"``,
        ``"k3"``, ``"abs"``).

    Returns
    -------
    callable
        ``f(xp, ell)``.

    Raises
    ------
    ValueError
        For a name without a formula here.

    Examples
    --------
    >>> formula("k3") is k3_value
    True
    """
    f = globals().get(f"{name}_value") if isinstance(name, str) else None
    if f is None:
        raise ValueError(f"`estimator` has no array-API value formula; got {name!r}")
    return f
