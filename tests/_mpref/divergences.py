"""f-divergences in mpmath, from their generators (DESIGN.md's table of conventions)."""

import mpmath as mp

from .closed_form import DPS
from .closed_form import _norm as normalise


def f(name, t, a=None):
    """The generator f of the divergence ``name`` at t (DESIGN.md's conventions)."""
    if name == "reverse_kl":
        return t * mp.log(t)
    if name == "forward_kl":
        return -mp.log(t)
    if name == "chi2":
        return (t - 1) ** 2
    if name == "hellinger":
        return (mp.sqrt(t) - 1) ** 2
    if name == "js":
        return (t * mp.log(t) - (1 + t) * mp.log((1 + t) / 2)) / 2
    if name == "alpha":
        a = mp.mpf(a)
        if a == 1:
            return t * mp.log(t) - t + 1
        if a == 0:
            return t - 1 - mp.log(t)
        return (t**a - a * t - (1 - a)) / (a * (a - 1))
    if name == "chi2_kl":
        return (t - 1) ** 2 / 2 + t * mp.log(t)
    if name == "tv":
        return abs(t - 1) / 2
    if name == "reverse_chi2":
        return (1 - t) ** 2 / t
    raise AssertionError(name)


def f_divergence(p, q, name, a=None):
    """D_f(p||q) = sum q f(p/q) in 400 digits, rows normalised; the limits f(0) and
    f'(inf) = lim f(t)/t read off at t = 1e150 and 1e300 (inf where they still grow)."""
    with mp.workdps(DPS):
        pn, qn = normalise(p), normalise(q)
        t1, t2 = mp.mpf(10) ** 150, mp.mpf(10) ** 300
        slope, slope2 = f(name, t1, a) / t1, f(name, t2, a) / t2
        slope = mp.inf if slope2 > 1.5 * abs(slope) + 1 else slope2
        f0, f02 = f(name, 1 / t1, a), f(name, 1 / t2, a)
        f0 = mp.inf if f02 > 1.5 * abs(f0) + 1 else f02
        total = mp.mpf(0)
        for x, y in zip(pn, qn):
            if y > 0:
                total += y * (f0 if x == 0 else f(name, x / y, a))
            elif x > 0:
                total += x * slope
        return total


def f_ratio(name, s, a):
    """t = (f')^{-1}(s), the optimum's ratio pi/ref at the scaled reward s (0 or inf at the
    ends of the range of f')."""
    if name == "reverse_kl":
        return mp.exp(s - 1)
    if name == "forward_kl":
        return -1 / s if s < 0 else mp.inf
    if name == "chi2":
        return max(mp.mpf(0), 1 + s / 2)
    if name == "hellinger":
        return 1 / (1 - s) ** 2 if s < 1 else mp.inf
    if name == "js":
        return mp.exp(2 * s) / (2 - mp.exp(2 * s)) if s < mp.log(2) / 2 else mp.inf
    if name == "alpha":
        a = mp.mpf(a)
        if a == 1:
            return mp.exp(s)
        base = 1 + (a - 1) * s
        if base <= 0:
            return mp.mpf(0) if a > 1 else mp.inf
        return base ** (1 / (a - 1))
    if name == "chi2_kl":
        return mp.re(mp.lambertw(mp.exp(s)))
    if name == "reverse_chi2":
        return 1 / mp.sqrt(1 - s) if s < 1 else mp.inf
    raise AssertionError(name)


def f_optimum(ref, reward, beta, name, a=None):
    """The f-regularised optimum pi = ref f_ratio((r - lam) / beta), lam by 320 bisections
    at 80 digits, normalised (ref normalised first)."""
    with mp.workdps(80):
        q = [mp.mpf(float(x)) for x in ref]
        tot = mp.fsum(q)
        q = [x / tot for x in q]
        r = [mp.mpf(float(x)) for x in reward]
        b = mp.mpf(float(beta))
        sup = [ri for qi, ri in zip(q, r) if qi > 0]
        lo, hi = min(sup) - 100 * b - 10, max(sup) + 100 * b + 10

        def total(lam):
            return mp.fsum(qi * f_ratio(name, (ri - lam) / b, a) for qi, ri in zip(q, r) if qi > 0)

        for _ in range(320):
            mid = (lo + hi) / 2
            if total(mid) > 1:
                lo = mid
            else:
                hi = mid
        lam = (lo + hi) / 2
        pi = [
            qi * f_ratio(name, (ri - lam) / b, a) if qi > 0 else mp.mpf(0) for qi, ri in zip(q, r)
        ]
        s = mp.fsum(pi)
        pi = [x / s for x in pi]
    return pi


def fprime(name, t, a):
    """f'(t), the derivative of the generator."""
    if name == "reverse_kl":
        return mp.log(t) + 1
    if name == "forward_kl":
        return -1 / t
    if name == "chi2":
        return 2 * (t - 1)
    if name == "hellinger":
        return 1 - 1 / mp.sqrt(t)
    if name == "js":
        return (mp.log(t) - mp.log((1 + t) / 2)) / 2
    if name == "alpha":
        a = mp.mpf(a)
        return mp.log(t) if a == 1 else (t ** (a - 1) - 1) / (a - 1)
    if name == "chi2_kl":
        return (t - 1) + mp.log(t) + 1
    if name == "reverse_chi2":
        return 1 - 1 / t**2
    raise AssertionError(name)


def forward_kl_optimum(ref, reward, beta):
    """argmax E_pi[r] - beta KL(ref || pi): pi_j = ref_j / (u + d_j), sum pi = 1 (mpfs).

    The forward-KL row of :func:`f_optimum` (pi_j = beta ref_j / (lam - r_j), u = (lam -
    r_max) / beta), solved in a form that keeps its digits at the extremes. Recipe: ref
    normalised, d_j = (r_max - r_j) / beta on the support; u is the root in [W_best, 1] of
    sum_j ref_j / (u + d_j) - 1 (W_best the reference mass on the best reward), solved by
    400-digit bisection on log u (120 halvings of a bracket at most 700 wide: 5e-34 relative
    in u); entries off the support are 0.
    """
    with mp.workdps(DPS):
        q = normalise(ref)
        r = [mp.mpf(float(v)) for v in reward]
        b = mp.mpf(float(beta))
        c = max(ri for qi, ri in zip(q, r) if qi > 0)
        d = [(c - ri) / b for ri in r]

        def excess(u):
            return mp.fsum(qi / (u + di) for qi, di in zip(q, d) if qi > 0) - 1

        lo = mp.log(mp.fsum(qi for qi, di in zip(q, d) if qi > 0 and di == 0))
        hi = mp.mpf(0)
        for _ in range(120):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if excess(mp.exp(mid)) > 0 else (lo, mid)
        u = mp.exp(lo)
        return [qi / (u + di) if qi > 0 else mp.mpf(0) for qi, di in zip(q, d)]
