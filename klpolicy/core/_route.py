r"""Which way each row of the closed form is computed: the one router of the fast paths.

A row of :math:`\pi^*_\beta \propto \pi_{ref} e^{r/\beta}` takes one of five routes:

* ``UNSHIFTED``: ``w = ref * exp(r / beta)``, one exponential per entry;
* ``SHIFTED``: ``w = ref * exp((r - max r) / beta)``, when ``max |r| / beta`` exceeds
  ``_NO_SHIFT`` (the shift then costs its pass);
* ``SCALED`` (float32, ``pi`` only): the shifted exponentials times an exact power of
  two (:func:`pow2`), where only that keeps the weights in float32's normal range;
* ``WIDE`` (float32): float64's arithmetic on the row, rounded once;
* ``CAREFUL``: the log-space method of :mod:`klpolicy.core._careful`.

Every decision is made from each row's statistics (its smallest reference entry and
its extreme rewards, on and off the support) by the functions below: :func:`shifts`
(whether a row shifts), :func:`fits` (whether its weights are normal floats with a
finite sum), :func:`fast_rows` (whether the one-exponential result is provably as
accurate as the careful path) and :func:`route` (the route of each row); float64 rows
of a ``pi``-only call are first tried unshifted and kept from their weights alone
(:func:`weights_clear`), before any other statistic is taken. They use the
array API's operations only, so that the numpy kernel (:mod:`klpolicy.core._tilt`, on
row blocks, and on a small batch's extrema) and the array-API kernel
(:mod:`klpolicy.core._xp`, on torch, JAX and CuPy rows) route by the same tests.

>>> import numpy as np
>>> q, r = np.array([[0.5], [0.5]]), np.array([[1.0], [40.0]])  # a row's min and max
>>> route(np, q, r, r, r, r, np.array([[1.0], [1.0]]), 2, 8).ravel().tolist()
[0, 0]
>>> route(np, q, r, r, r, r, np.array([[10.0], [10.0]]), 2, 8).ravel().tolist()  # beta 0.1
[0, 1]
"""

from __future__ import annotations

import functools
import math

import numpy as np

UNSHIFTED, SHIFTED, SCALED, WIDE, CAREFUL = range(5)

# By item size: (low, high) exponent bounds that keep exp(z) weights normal and their
# sum finite, and the |r| / beta below which the shift by max(r) is skipped (it then
# costs a pass: without it exp(r / beta) is exact to |r / beta| * 1.5 ulp, and pi to
# twice that, 3.3e-14 relative in float64 and 2.9e-6 in float32, below what the shifted
# path admits on its far entries, |r - max r| / beta * 1.5 ulp).
_RANGE = {4: (-86.0, 80.0), 8: (-700.0, 700.0)}
_NO_SHIFT = {4: 16.0, 8: 100.0}
# Statistics take the fast path only when spread / beta >= this (see fast_rows).
_STATS_MIN_SPREAD = 2.0


def shifts(xp, rmax, rmin, ib, itemsize: int):
    """Rows shifted by their ``max r``: where ``max(|max r|, |min r|) / beta`` exceeds
    ``_NO_SHIFT`` (NaN rows shift too: they are redone or refused).

    ``ib`` is ``1 / beta``; ``itemsize`` the dtype's (4 or 8 bytes).

    >>> shifts(np, np.array([1.0, 30.0]), np.array([0.0, -2.0]), 1.0, 4).tolist()
    [False, True]
    """
    mag = xp.maximum(abs(rmax), abs(rmin)) * ib  # abs(): numpy scalars' fast operator
    return ~(mag <= _NO_SHIFT[itemsize])


@functools.lru_cache(maxsize=64)
def pow2(n: int) -> tuple[float, np.float32]:
    """``(k ln 2, 2**k)``: the power of two by which float32 rows of length ``n`` (``pi``
    only) scale their exponentials, ``w = (exp(z) * 2**k) * ref``, where ``ref * exp(z)``
    alone would fall below float32's normal range (a Dirichlet reference's 1e-8 and a
    ``(min r - max r) / beta`` of -70 at ``beta = 0.1``), so that they stay in float32
    instead of taking float64's arithmetic.

    The shift by ``max r`` leaves the upper half of the exponent range unused (every
    ``exp(z) <= 1``; ``e^16`` unshifted). ``k`` is the largest that keeps
    ``e^16 * n * 2**k`` below ``e^80`` (``_RANGE``) with a binade to spare, so that
    scaling cannot overflow a row that fits unscaled; it depends on ``n`` alone, so
    every batch routes its rows alike.

    Multiplying ``exp(z)`` in place by it is exact (a power of two times a normal float
    rounds nothing), and then ``sum(w)``, ``1 / sum(w)`` and ``w / sum(w)`` carry
    ``2**k``, ``2**-k`` and nothing: ``pi`` has the bits it has unscaled wherever both
    are normal, so whether a block is scaled changes no bit. Adding ``k ln 2`` to
    ``exp``'s argument instead would round every ``z`` to half an ulp of 55 (16 float32
    ulp on the largest entries of ``pi``); after the product with ``ref`` it is too late
    (the product has underflowed).

    >>> round(pow2(256)[0] / math.log(2)), float(pow2(256)[1]) == 2.0**83
    (83, True)
    """
    k = max(0, int((_RANGE[4][1] - _NO_SHIFT[4] - math.log(n)) / math.log(2)) - 1)
    return k * math.log(2), np.float32(2.0**k)


def fits(xp, qpos, lo, hi, log_n, itemsize: int, scale=0.0):
    """Whether weights ``ref * exp(z)`` are normal floats with a finite sum.

    For reference entries at least ``qpos`` (the smallest on the support) and exponents
    ``lo <= z <= hi`` (``hi`` over every entry, off the support too) on rows of
    ``exp(log_n)`` entries: no underflow, ``log(qpos) + lo > low``, and no overflow,
    ``hi + log_n < high`` (``_RANGE`` of ``itemsize``). With ``scale``, ``k ln 2`` of a
    factor ``2**k`` the exponentials are multiplied by (:func:`pow2`), both bounds move
    by it, and ``exp(z)`` and the reference entries must be normal themselves (the
    scaling is then exact and the weights are rounded once). Comparisons with NaN fail.

    >>> bool(fits(np, 1e-290, -10.0, 0.0, 1.0, 8)), bool(fits(np, 1e-290, -10.0, 0.0, 1.0, 4))
    (True, False)
    """
    low, high = _RANGE[itemsize]
    ok = xp.log(qpos) + lo > low - scale
    over = hi + log_n < high - scale
    if over is not True:  # a Python float hi (0 for shifted rows) gives a Python bool
        ok = ok & over
    if scale:
        ok = ok & (lo > low) & (qpos > math.exp(low))
    return ok


def fast_rows(xp, qpos, r_lo, r_hi, rmin, rmax, c, ib, n: int, itemsize: int, stats, scale=0.0):
    """Rows whose one-exponential result, shifted by ``c``, is as accurate as the careful path.

    ``qpos``, ``r_lo``, ``r_hi``: each row's smallest reference entry and extreme rewards
    on the reference's support; ``rmin``, ``rmax``: its extreme rewards over every entry
    (the same arrays where the reference has no zero); ``c``: its shift (``None``: 0);
    ``ib``: ``1 / beta``. The conditions:

    * ``0 < 1/beta < inf`` (the limits are the careful path's);
    * :func:`fits` for ``z = (r - c) / beta`` (with ``scale``, of the scaled weights):
      every weight on the support a normal float and their sum finite, so ``w / sum(w)``
      is exact to a few ulp where the careful path loses digits only on subnormal ``pi``;
    * ``(min r - c) / beta`` finite off the support too (else a statistic's summand is
      ``-inf * 0``);
    * with ``stats``, ``(max r - min r) / beta >= 2`` on the support: there the careful
      path uses neither its mean-centred soft value nor ``log1p`` near ``log Z = 0``.

    >>> one = np.array([0.0])
    >>> fast_rows(np, one + 0.5, one, one + 3, one, one + 3, None, one + 1, 2, 8, True).tolist()
    [True]
    """
    lo = r_lo * ib if c is None else (r_lo - c) * ib
    hi = rmax * ib if c is None else (rmax - c) * ib
    ok = fits(xp, qpos, lo, hi, math.log(n), itemsize, scale)
    ok = ok & (ib > 0) & (ib < math.inf)
    if r_lo is not rmin:
        lo = rmin * ib if c is None else (rmin - c) * ib
    ok = ok & xp.isfinite(lo)
    if stats:
        ok = ok & spread_ok(r_lo, r_hi, ib)
    return ok


def spread_ok(r_lo, r_hi, ib):
    """Rows whose statistics may be fast: ``(max r - min r) / beta >= 2`` on the support
    (the careful path's mean-centred soft value and ``log1p`` near ``log Z = 0`` are then
    not in use). Operators only: any array, or Python floats.

    >>> bool(spread_ok(0.0, 2.0, 1.0)), bool(spread_ok(0.0, 1.0, 1.0))
    (True, False)
    """
    return (r_hi - r_lo) * ib >= _STATS_MIN_SPREAD


# The smallest normal float64: a weight at or above it has its full 53 bits.
_TINY64 = float(np.finfo(np.float64).tiny)


def weights_clear(w_min, w_sum):
    """float64 rows taken ``UNSHIFTED`` from their weights ``w = ref * exp(r / beta)``
    alone (``pi`` only, before any other statistic): every weight a normal float
    (``min w >= tiny``) and a finite sum. With ``0 < 1/beta < inf`` that stands for
    :func:`fast_rows` and the input checks: a NaN or an infinity anywhere, a negative or
    zero reference entry and an overflow all fail it, and it bounds ``|r / beta|`` by
    709.8, where the unshifted exponent's rounding is what the shifted path admits on
    its far entries. Works on Python floats too (one long row, a tenth of the time).

    >>> bool(weights_clear(1e-300, 1.0)), bool(weights_clear(0.0, 1.0))
    (True, False)
    """
    return (w_min >= _TINY64) & (w_sum < math.inf)


def route(xp, qpos, r_lo, r_hi, rmin, rmax, ib, n: int, itemsize: int, stats=False, ib64=None):
    """Each row's route (``UNSHIFTED`` ... ``CAREFUL``, integers) from its statistics.

    The arguments are :func:`fast_rows`'; each row's shift is :func:`shifts`'. A row that
    is fast in its dtype is ``UNSHIFTED`` or ``SHIFTED``; else a float32 row of a
    ``pi``-only call (``stats`` false) whose scaled weights fit is ``SCALED``; else, for
    float32 rows given ``ib64`` (``1 / beta`` in float64), a row fast in float64 (its
    statistics are exact there) is ``WIDE``; every other row is ``CAREFUL``. A soft
    value is also checked once computed (``_tilt._value_resolved``).
    """
    shift = shifts(xp, rmax, rmin, ib, itemsize)
    c = xp.where(shift, rmax, xp.zeros_like(rmax))
    fast = fast_rows(xp, qpos, r_lo, r_hi, rmin, rmax, c, ib, n, itemsize, stats)
    code = xp.where(fast, xp.where(shift, SHIFTED, UNSHIFTED), CAREFUL)
    if itemsize == 4 and not stats:
        scaled = fast_rows(xp, qpos, r_lo, r_hi, rmin, rmax, c, ib, n, 4, False, pow2(n)[0])
        code = xp.where(~fast & scaled, SCALED, code)
    if itemsize == 4 and ib64 is not None:
        wide = [xp.astype(a, xp.float64) for a in (qpos, r_lo, r_hi, rmin, rmax)]
        c64 = xp.where(shifts(xp, wide[4], wide[3], ib64, 8), wide[4], xp.zeros_like(wide[4]))
        fast64 = fast_rows(xp, *wide, c64, ib64, n, 8, stats)
        code = xp.where((code == CAREFUL) & fast64, WIDE, code)
    return code
