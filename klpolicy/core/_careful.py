r"""The careful method of the closed form, written once against the Python array API.

Every array library runs this kernel where a one-exponential fast path is not
provably as accurate: torch, JAX and CuPy input through :mod:`klpolicy.core._xp`,
and numpy input through :mod:`klpolicy.core._tilt`, whose blocked fast path hands
the rows it cannot prove to this kernel with the numpy namespace of
array-api-compat. A fix to the careful method is made here, once.

The method, for each row at ``beta`` (``0`` and ``inf`` allowed):

* the tilt relative to the best reward **on the reference's support**
  ``c``: ``z = (r - c) / beta <= 0``; the log-partition as
  ``log1p(sum(ref * expm1(z)) / sum(ref))`` when that sum is above -1/2 and as
  ``log(sum(ref * exp(z)) / sum(ref))`` otherwise;
* the log-ratio ``u = log(pi*/ref_n)`` and the soft value re-centred on the mode of
  ``pi*`` (:func:`_mode_log_ratio`), and the mode's probability as a quotient;
* the soft value re-centred on the reference mean at large ``beta``
  (``m + beta log1p(E[expm1mx(x)] + E[x])``, ``x = (r - m) / beta``);
* the KL of the optimum summed from non-negative terms ``pi (u - 1) + ref_n``
  (a series where ``|u| < 0.2``) with ``u`` centred on the mode (exact when the KL
  is 1e-34);
* the greedy (``beta = 0``) and reference (``beta = inf``) limits; the
  reference's zeros stay exactly zero.

Gradients
---------
Every branch is computed on *safe inputs*: entries that a ``where`` will
discard are replaced before the operation that could overflow or divide by
zero (``0 * inf = nan`` never appears in a backward pass). The best reward
``c`` and the mode's reward are constants for autograd (the result does not
depend on them: their derivatives cancel exactly, but as ``1/beta - 1/beta``,
which is ``inf - inf`` for a subnormal ``beta``). Entries whose weight
``exp((r - c) / beta)`` is below ``exp(-10^4)`` (zero in any float format) get
the constant log-weight ``-10^4``: their gradient is zero, as it is exactly.
"""

from __future__ import annotations

import math

import numpy as np

from ._numerics import _expm1mx, _kl_terms  # the one definition of both series

# Log-weights below -_DEAD are replaced by -_DEAD: exp(-1e4) is zero in every float format,
# while a reference entry is at least 5e-324 (log > -745), so nothing representable is lost.
_DEAD = 1.0e4


def _stop(x):
    """``x`` without gradient (torch: detach; JAX: stop_gradient; others: itself)."""
    if isinstance(x, np.ndarray):
        return x
    import array_api_compat as aac

    if aac.is_torch_array(x):
        return x.detach()
    if aac.is_jax_array(x):
        import jax

        return jax.lax.stop_gradient(x)
    return x


def _device(template):
    """``template``'s device; ``None`` (the default device) for no template or numpy."""
    if template is None or isinstance(template, np.ndarray):
        return None
    import array_api_compat as aac

    return aac.device(template)


def _const(xp, value: float, like):
    """A 0-d array of ``like``'s dtype on its device."""
    return xp.asarray(value, dtype=like.dtype, device=_device(like))


def _exp_limit(xp, dtype) -> float:
    """Largest argument with exp() comfortably finite: 707 in float64, 86 in float32."""
    return math.floor(math.log(float(xp.finfo(dtype).max))) - 2.0


def _may_need_grad(*xs) -> bool:
    """False when no argument can carry a gradient (numpy, CuPy, torch without grad)."""
    if all(isinstance(x, np.ndarray) for x in xs):
        return False
    import array_api_compat as aac

    for x in xs:
        if aac.is_torch_array(x):
            if x.requires_grad:
                import torch

                if torch.is_grad_enabled():
                    return True
        elif aac.is_jax_array(x):
            return True  # a tracer may be differentiated: keep the scaled form
    return False


def _div(xp, num, beta):
    """``num / beta`` (``beta > 0``) whose derivative in ``beta`` never forms ``beta**2``.

    Numerator and denominator are scaled by two constant powers of two ``p1 p2 ~ 1/beta``
    (exact: the quotient is the same float), so autograd differentiates ``n' / m`` with
    ``m = beta p1 p2`` in [1, 2): JAX's ``-x * y**-2`` and torch's ``(x / y) / y`` stay
    finite (and zero where the incoming gradient is zero) even for ``beta = 1e-310``.
    """
    if not _may_need_grad(num, beta):
        return num / beta  # the same float: the scaling matters only to the derivative
    b = _stop(beta)
    e = xp.floor(xp.log2(b))
    e1 = xp.floor(e * 0.5)
    p1 = xp.pow(_const(xp, 2.0, b), -e1)
    p2 = xp.pow(_const(xp, 2.0, b), -(e - e1))
    return ((num * p1) * p2) / ((beta * p1) * p2)


def _scaled_diff(xp, a, b, beta, dead):
    """``(a - b) / beta`` with ``-_DEAD`` where it is below that or where ``dead`` is set.

    ``a - b`` may overflow (rewards of 1e308): those entries are computed as
    ``(a/2 - b/2) / beta * 2``. The discarded entries are zeroed *before* the
    division, so neither value nor gradient sees an infinity.
    """
    diff = a - b
    big = xp.isinf(diff)
    if isinstance(diff, np.ndarray) and not big.any():  # values only: the same floats
        raw = diff / beta
        return xp.where((raw < -_DEAD) | dead, _const(xp, -_DEAD, a), raw)
    half = a * 0.5 - b * 0.5
    num = xp.where(big, half, diff)
    scale = xp.where(big, _const(xp, 2.0, a), _const(xp, 1.0, a))
    raw = (_stop(num) / _stop(beta)) * scale
    drop = (raw < -_DEAD) | dead
    num = xp.where(drop, xp.zeros_like(num), num)
    return xp.where(drop, _const(xp, -_DEAD, a), _div(xp, num, beta) * scale)


def _expm1_sum(xp, q, z, w, total):
    """``sum(q * expm1(z)) / total`` whose gradient is that of ``sum(w) / total``, w = q e^z.

    ``expm1``'s derivative is formed as ``expm1(z) + 1`` by torch and JAX: 0 once
    ``expm1(z)`` rounds to -1 (z < -37), where the true ``e^z`` (1e-22 at z = -50) still
    carries the gradient of an unlikely outcome. Forward value from expm1, gradient from exp.
    """
    s = xp.sum(q * xp.expm1(z), axis=-1, keepdims=True) / total
    if isinstance(s, np.ndarray):  # no gradient: the value alone
        return s
    e = xp.sum(w, axis=-1, keepdims=True) / total
    return _stop(s) + (e - _stop(e))


def _safe_exp_times(xp, q, u, limit):
    """``q * exp(u)`` for ``q >= 0``; as ``exp(log q + u)`` where ``exp(u)`` would overflow."""
    big = u >= limit
    if isinstance(u, np.ndarray) and not big.any():  # the same floats, in two passes
        return q * xp.exp(u), big
    zero = xp.zeros_like(u)
    lo = q * xp.exp(xp.where(big, zero, u))
    q_hi = xp.where(big, q, xp.ones_like(q))
    hi = xp.exp(xp.log(q_hi) + xp.where(big, u, zero))
    return xp.where(big, hi, lo), big


def _mode_log_ratio(xp, q, r, beta, total, pi, support, exact=False):
    """``u = log(pi*/ref_n)`` on the support, computed relative to each row's mode.

    With ``k`` the most likely outcome of ``pi*`` (the argmax of ``pi``, a first
    estimate) and ``d = (r - r_k) / beta``, ``u = d - log(sum(ref * exp(d)) / sum(ref))``,
    and the log is taken as ``log1p(S)``, ``S = sum(ref * expm1(d)) / sum(ref)``. The
    mode's own log-ratio ``-log1p(S)`` is then exact even when it is 1e-34 (a reference
    of 1 - 1e-33 whose tiny alternative gains weight), where ``z - log Z`` with ``z``
    centred on the best reward carries a rounding of eps * |z| that, squared, would
    swamp such a KL. Where the mode holds little reference mass (``S <= -1/2``) the log
    is ``log(sum(ref e^d) / sum(ref))``; where the mode sits on a reference entry below
    tiny / eps (1e-292), the weights beside it, which can still matter next to it, are
    subnormal or zero (``ref = (1, 5e-321)``, ``r = (-50, 700)``, ``beta = 1``: e^-750
    beside 5e-321 lost five digits), so they are summed relative to ``ref_k`` in log
    space. ``q``, ``r``, ``pi``, ``support``: (..., n); ``beta``, ``total``: (..., 1).
    The division by ``beta`` (not a product with ``1/beta``) keeps subnormal betas finite.

    Returns ``(u, is_mode, pi_mode, value)``: ``u`` (0 off the support), a mask of each
    row's mode, its probability as a quotient (``ref_k / sum(ref e^d)``, or
    ``ref_n_k / (1 + S)``) rather than ``ref_n_k * exp(u_k)``: no exponential of a large
    log-ratio, so a mode of 1 - 5e-135 with a reference entry of 1e-300 comes out 1.0,
    not 1 - 2e-14; and the soft value anchored on the mode, ``V = r_k + beta log1p(S)``.
    Its rounding is a few ulp of ``|r_k| + |V - r_k| + E_pi|r - r_k|``, where
    ``c + beta log Z`` with ``c`` the best reward carries a few ulp of ``|c|``: with
    ``ref = (1e-100, 1)``, ``r = (1, 0)`` and ``beta = 0.01``, V is 2.7e-59, which
    ``1 + 0.01 (-100 + 2.7e-57)`` rounds to 0. ``r_k`` enters as a constant (the
    gradient reaches it through ``d_k``), so ``dV/dr = pi`` and ``dV/dbeta = -KL``.

    ``exact=True`` appends ``u`` exact also where ``d < -10^4`` (there the weight is zero
    and the first ``u`` is held at ``-10^4 - log Z_k``, which the KL's summands, ``ref_n``
    there, never see), values only, for a caller that returns ``u`` itself (an implicit
    reward ``beta u``).
    """
    dt = q.dtype
    k = xp.argmax(_stop(pi), axis=-1, keepdims=True)
    rk = xp.take_along_axis(_stop(r), k, axis=-1)
    d = _scaled_diff(xp, r, rk, beta, ~support)
    limit = _exp_limit(xp, dt)
    w, big = _safe_exp_times(xp, q, d, limit)
    plain = isinstance(q, np.ndarray)  # numpy: values only, and rare branches skipped
    if plain and not big.any():
        term = q * xp.expm1(d)  # the same floats as below
    else:
        d_lo = xp.where(big, xp.zeros_like(d), d)
        term = xp.where(big, w, q * xp.expm1(d_lo))
    s = xp.sum(term, axis=-1, keepdims=True) / total
    if not plain:
        e = xp.sum(w, axis=-1, keepdims=True) / total
        s = _stop(s) + (e - _stop(e))  # expm1's gradient, from exp (see _expm1_sum)
    far = s <= -0.5  # the mode holds little reference mass
    near_s = xp.where(far, xp.zeros_like(s), s)
    w_sum = xp.sum(w, axis=-1, keepdims=True)
    log_zk = xp.where(far, xp.log(w_sum / total), xp.log1p(near_s))
    # a mode on a reference entry below tiny / eps: the weights beside it are subnormal;
    # sum them relative to ref_k in log space (see the docstring)
    qk = xp.take_along_axis(q, k, axis=-1)
    fi = xp.finfo(dt)
    low = far & (_stop(qk) < float(fi.smallest_normal) / float(fi.eps))
    if plain and not low.any():  # no such row (numpy knows without a device sync)
        low = None
    # ref_k enters the shift as a constant: log Z_k = log ref_k + log sum e^a then has the
    # exact gradient in every ref_i (e^{d_i} / sum(ref e^d)), without 1/ref_k - 1/ref_k
    if low is not None:
        one = xp.ones_like(qk)
        log_qk = xp.log(_stop(xp.where(low, qk, one)))  # select, then take logs
        keep = low & support
        a = xp.where(keep, d, xp.zeros_like(d))
        a = a + (xp.log(xp.where(keep, q, xp.ones_like(q))) - log_qk)
        w_rel = xp.where(keep, xp.exp(xp.where(keep, a, xp.zeros_like(a))), xp.zeros_like(a))
        s_rel = xp.sum(w_rel, axis=-1, keepdims=True)  # >= 1 on the rows used (the mode's 1)
        s_rel = xp.where(low, s_rel, one)
        log_zk = xp.where(low, log_qk - xp.log(total) + xp.log(s_rel), log_zk)
    u = xp.where(support, d - log_zk, xp.zeros_like(d))
    # w_k = ref_k e^{d_k} is ref_k in value (d_k = 0) and carries d_k's gradient (r_k enters
    # every d_j, but through rk only as a constant: see the module docstring)
    wk = xp.take_along_axis(w, k, axis=-1)
    # _div: JAX differentiates x / y as -x * y**-2, which overflows for w_sum ~ 1e-300
    pi_k = xp.where(far, _div(xp, wk, w_sum), (wk / total) / (1 + near_s))
    # 1 in value (a_k = 0), with d_k's gradient, as w_k above
    if low is not None:
        pi_k = xp.where(low, xp.take_along_axis(w_rel, k, axis=-1) / s_rel, pi_k)
    is_mode = xp.arange(q.shape[-1], device=_device(q)) == k
    value = rk + beta * log_zk
    if not exact:
        return u, is_mode, pi_k, value
    # the log-ratio below -_DEAD too; values only (no gradient flows here)
    held = support & (d <= -_DEAD)
    if plain and not held.any():
        return u, is_mode, pi_k, value, u
    diff = _stop(r) - rk
    big_diff = xp.isinf(diff)
    half = xp.where(big_diff, _stop(r) * 0.5 - rk * 0.5, xp.zeros_like(diff))
    d_val = xp.where(big_diff, (half / _stop(beta)) * 2.0, diff / _stop(beta))
    u_exact = xp.where(held, d_val - _stop(log_zk), u)
    return u, is_mode, pi_k, value, u_exact


def _tilt(xp, ref, reward, beta, want, limits=True):
    """pi*_beta and the statistics in ``want`` ("pi", "u", "value", "kl", "mean", "var",
    "max_kl"), as a dict of arrays (statistics with shape (..., 1)).

    ``ref``, ``reward``: (..., n) one float dtype; ``beta``: (..., 1), >= 0, inf allowed.
    ``u`` is ``log(pi*/ref_n)`` on the support and ``-inf`` off it (0 at ``beta = inf``);
    ``var`` is ``Var_pi*(r) / beta^2`` (0 at ``beta = 0`` and ``inf``).
    Discarded branches may overflow in the forward pass (never in a selected value or a
    gradient); numpy's warnings about them are silenced.
    """
    with np.errstate(all="ignore"):
        return _tilt_body(xp, ref, reward, beta, want, limits)


def _tilt_body(xp, ref, reward, beta, want, limits):
    """The kernel; ``limits=False`` when ``beta`` is known (on the host) to be finite and > 0:
    the greedy and reference branches, which every row would discard, are not computed."""
    zero_t = xp.zeros_like(ref)
    one_b = xp.ones_like(beta)
    neg_inf = _const(xp, -math.inf, ref)
    support = ref > 0
    total = xp.sum(ref, axis=-1, keepdims=True)
    ref_n = ref / total
    c = xp.max(xp.where(support, _stop(reward), neg_inf), axis=-1, keepdims=True)
    out = {}
    if limits or want == {"max_kl"}:
        zero = beta == 0
        inf = xp.isinf(beta)
        beta_s = xp.where(~(zero | inf), beta, one_b)
        if isinstance(beta, np.ndarray) and not bool(xp.any(zero | inf)):
            limits = False  # numpy knows without a device sync: the limit branches pick nothing
    else:
        beta_s = beta

    if not limits and want != {"max_kl"}:
        return _finite_rows(xp, ref, reward, beta_s, want, support, total, ref_n, c)
    # beta = 0: all mass on the best rewards inside the support, split as ref
    best = support & (reward == c)
    rest = xp.sum(xp.where(best, zero_t, ref), axis=-1, keepdims=True) / total
    best_mass = xp.sum(xp.where(best, ref, zero_t), axis=-1, keepdims=True)
    low_rest = rest < 0.5
    greedy_log_mass = xp.where(
        low_rest,
        xp.log1p(-xp.where(low_rest, rest, xp.zeros_like(rest))),
        xp.log(best_mass / total),
    )
    if want == {"max_kl"}:
        return {"max_kl": -greedy_log_mass}
    pi0 = _div(xp, xp.where(best, ref, zero_t), best_mass)  # select, then divide
    f = _finite_rows(xp, ref, reward, beta_s, want, support, total, ref_n, c)
    out["pi"] = pi = xp.where(zero, pi0, xp.where(inf, ref_n, f["pi"]))
    if "value" in want:
        # beta = 0: the best reward on the support, with the greedy policy as its gradient
        v0 = c + xp.sum(pi0 * xp.where(best, reward - c, zero_t), axis=-1, keepdims=True)
        out["value"] = xp.where(zero, v0, xp.where(inf, f["m"], f["value"]))
    if "mean" in want:
        out["mean"] = xp.sum(pi * reward, axis=-1, keepdims=True)
    if "kl" in want:
        kl = f["kl"]
        out["kl"] = xp.where(zero, -greedy_log_mass, xp.where(inf, xp.zeros_like(kl), kl))
    if "u" in want:
        u0 = xp.where(best, -greedy_log_mass, neg_inf)  # the greedy limit's log-ratio
        out["u"] = xp.where(zero, u0, xp.where(inf, zero_t, f["u"]))
    if "var" in want:
        out["var"] = xp.where(zero | inf, xp.zeros_like(f["var"]), f["var"])
    return out


def _finite_rows(xp, ref, reward, beta_s, want, support, total, ref_n, c):
    """pi, soft value (and the reference mean m), KL at a finite positive ``beta_s``."""
    dt = ref.dtype
    zero_t = xp.zeros_like(ref)
    out = {}
    z = _scaled_diff(xp, reward, c, beta_s, ~support)  # <= 0; -_DEAD off the support
    w = ref * xp.exp(z)
    s = _expm1_sum(xp, ref, z, w, total)
    low = s <= -0.5
    direct = xp.log(xp.sum(w, axis=-1, keepdims=True) / total)
    log_z = xp.where(low, direct, xp.log1p(xp.where(low, xp.zeros_like(s), s)))
    limit = _exp_limit(xp, dt)
    pi, _ = _safe_exp_times(xp, ref_n, z - log_z, limit)
    out["pi"] = pi
    if want & {"pi", "u", "mean", "kl", "value", "var"}:
        # u centred on the mode of pi, so that d = (r - r_mode) / beta_s stays below ~745
        # and the weights ref e^d <= ref_mode do not underflow where the mode sits far below
        # the best reward; pi from that u (the KL below keeps this pi, which matches u),
        # and the mode's probability as a quotient, not exp of a large log-ratio (a mode
        # of 1 - 5e-135 on a reference entry of 1e-300 is 1.0, not 1 - 2e-14).
        u, is_mode, pi_k, v_mode, *u_out = _mode_log_ratio(
            xp, ref, reward, beta_s, total, pi, support, exact="u" in want
        )
        pi, _ = _safe_exp_times(xp, ref_n, u, limit)
        out["pi"] = xp.where(is_mode & (pi_k > 0) & (pi_k <= 1), pi_k, pi)

    if "value" in want:
        value = v_mode  # anchored on the mode of pi (see _mode_log_ratio)
        # large beta: re-centre on the reference mean m (no cancellation between m and
        # the O(Var / beta) correction)
        m = xp.sum(ref_n * reward, axis=-1, keepdims=True)
        x_raw = _scaled_diff(xp, _stop(reward), _stop(m), _stop(beta_s), ~support)
        near = xp.max(xp.where(support, xp.abs(x_raw), zero_t), axis=-1, keepdims=True) < 1
        keep = near & support
        x = _div(xp, xp.where(keep, reward - m, zero_t), beta_s)
        e1 = xp.sum(ref_n * _expm1mx(xp, x), axis=-1, keepdims=True)
        e1 = xp.where(near, e1, xp.zeros_like(e1))
        # E_ref[x] is 0 in exact arithmetic (m = E_ref[r]) and only the rounding of m: the
        # value keeps it, the gradient is that of m + beta log1p(e1), where it would
        # otherwise swamp dV/dbeta = -KL ~ -Var / (2 beta^2)
        mean_x = xp.where(near, xp.sum(ref_n * x, axis=-1, keepdims=True), xp.zeros_like(e1))
        v_near = m + beta_s * xp.log1p(e1 + mean_x)
        g_near = m + beta_s * xp.log1p(e1)
        v_near = _stop(v_near) + (g_near - _stop(g_near))
        out["value"] = xp.where(near, v_near, value)
        out["m"] = m
    if want & {"mean", "var"}:
        out["mean"] = xp.sum(out["pi"] * reward, axis=-1, keepdims=True)
    if "var" in want:  # E_pi[((r - mean) / beta)^2]
        x = _div(xp, xp.where(support, reward - out["mean"], zero_t), beta_s)
        out["var"] = xp.sum(out["pi"] * x * x, axis=-1, keepdims=True)
    if "kl" in want:
        terms = xp.where(support, _kl_terms(xp, pi, ref_n, u), zero_t)
        out["kl"] = xp.sum(terms, axis=-1, keepdims=True)
    if "u" in want:
        out["u"] = xp.where(support, u_out[0], _const(xp, -math.inf, ref))
    return out
