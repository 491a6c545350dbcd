r"""Exact optima of f-divergence-regularised policy problems.

For a row ``f`` of :data:`klpolicy.DIVERGENCES`, a reference :math:`\pi_{ref}`, a reward
:math:`r` and :math:`\beta > 0`,

.. math::

    \max_{\pi \ll \pi_{ref}} \; \mathbb{E}_\pi[r] - \beta\, D_f(\pi\|\pi_{ref})
    \quad\text{is attained at}\quad
    \pi^*(y) = \pi_{ref}(y)\, \big[(f')^{-1}\big((r(y) - \lambda)/\beta\big)\big]_+ ,

with :math:`\lambda` the one number that makes :math:`\pi^*` sum to one (the KKT
conditions of a concave problem on the simplex: :math:`r - \beta f'(\pi/\pi_{ref}) =
\lambda` where :math:`\pi > 0`, :math:`\le \lambda` where :math:`\pi = 0`). For the
reverse KL this is :func:`klpolicy.optimal_policy`. See
``docs/derivations/f_divergences.md``.

Numerical method
----------------
Per row, with :math:`d(y) = (r_{max} - r(y))/\beta \ge 0` (the best reward on the
support), the density ratio of every outcome is a function of one number, solved by the
package's safeguarded root finder (:func:`klpolicy.core.roots.monotone_root`), all rows at
once. The number is chosen so that no ratio is computed by cancellation:

* :math:`f'(\infty) < \infty` (forward KL, Hellinger, JS, reverse chi2, alpha < 1): the
  distance :math:`e = f'(\infty) - s_{best}` of the best outcome's ``s = (r - lambda)/beta``
  from the pole; each outcome has :math:`e + d(y)`, and the ratio is written in it
  (``1/e``, ``1/e^2``, ``1/expm1(2e)``, ``e^{-1/2}``, ``((1-a) e)^{1/(a-1)}``);
* :math:`f'(0) > -\infty` (chi2, alpha > 1, sparse optima): the height
  :math:`u = s_{best} - f'(0)` above the clip; each outcome has :math:`u - d(y)`, and the
  ratio is ``max(u - d, 0)/2`` or ``((a-1) max(u - d, 0))^{1/(a-1)}``; the second stage
  re-anchors at the kept outcome that moves the sum most (a best outcome with ref 1e-300
  has u ~ 1e278 while the heavy one below has an O(1) height), and where the best
  outcomes' gap to the next overflows they keep the power-law ratio of that gap;
* otherwise (chi2_kl): :math:`s_{best}` itself, and :math:`W(e^{s})` through
  ``scipy.special.wrightomega``.

Reward differences are formed as ``2 ((r_1/2 - r_2/2)/beta)`` where ``r_1 - r_2`` overflows
(rewards of opposite signs near float64's limit). Where :math:`d(y)` itself is beyond
float64 (``1.6e308`` against ``-1.6e308`` at ``beta = 1``), :math:`e + d(y) = d(y)` to
float64's precision (:math:`e \le f'(\infty) - f'(1)`, the best ratio being at least 1),
and the ratio is the power law :math:`(c\,d)^p` of :math:`d` alone (forward KL
:math:`1/d`, Hellinger :math:`1/d^2`, reverse chi2 :math:`d^{-1/2}`, alpha < 1
:math:`((1-a) d)^{1/(a-1)}`; JS :math:`1/\mathrm{expm1}(2d) = 0`), assembled from the
binary exponents of :math:`r_{max}/2 - r/2` and :math:`\beta` (``numpy.frexp`` /
``ldexp``): reverse chi2 keeps :math:`3.9\times10^{-155}` where the overflowing
:math:`d` once gave 0. In the other modes an overflowing :math:`d` has the ratio 0 (a
clip, or :math:`W(e^{-\infty})`). The divergence (and the value
:math:`\mathbb{E}_{\pi^*}[r] - \beta D_f`) of the optimum takes the summands of the tiny
ratios (below ``1e-100``, or where :math:`\pi^*` is below ``1e-300``) from
:math:`\log t`, known from the pole distance, instead of from the rounded
:math:`\pi^*`, whose zero would make :math:`f(0) = \infty` (forward KL, reverse chi2,
alpha <= 0) an infinite divergence: forward KL :math:`q(t - 1 - \log t)`, reverse chi2
:math:`q(1-t)^2/t`, alpha :math:`q(t^a - 1 - a(t-1))/(a(a-1))`, with ``log q`` and
``log beta`` inside the exponentials so that :math:`\beta D_f` stays finite where
:math:`D_f` alone overflows. (The dual form :math:`\lambda + \beta
\mathbb{E}_{ref}[f^*((r-\lambda)/\beta)]` is the same sum rearranged; it would need
:math:`\lambda = r_{max} - \beta s_{best}`, which at ``r = 1.6e308`` has no digits
left for :math:`\beta s_{best}`.)

The total variation's optimum is a linear program, solved in closed form (mass moves
to the best outcomes from every outcome whose reward is more than ``beta`` below the best).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _validation as V
from .closed_form import _LOG_HUGE, _LOG_TINY, _prepare, _restore, _setup
from .fdivergences import FDivergence, Optimum, _normalised, _power_far, as_divergence
from .roots import monotone_root

__all__ = ["FFrontier", "beta_for_divergence", "f_frontier", "f_optimal_policy", "f_soft_value"]

_BIG = float(np.finfo(np.float64).max)  # the stand-in for an overflowing bracket end


def _bracket(row: FDivergence, a, mode: str) -> float:
    """The coordinate at which the best outcome's ratio is 1: f'(inf) - f'(1), f'(1) - f'(0), f'(1)."""
    fp1 = float(row.fprime(1.0, alpha=a))
    if mode == "top":
        return row.fprime_inf(alpha=a) - fp1
    if mode == "bottom":
        return fp1 - row.fprime_zero(alpha=a)
    return fp1


def _gap(x: NDArray, y: NDArray, beta: NDArray) -> NDArray:
    """``(x - y)/beta`` for finite rewards, without an overflowing ``x - y``.

    Rewards of opposite signs near float64's limit (``1.6e308`` and ``-1.6e308``) have a
    difference beyond float64 that a large ``beta`` brings back into range: it is then
    ``2 ((x/2 - y/2)/beta)``, whose half-difference cannot overflow. (Only there: halving
    a subnormal reward would lose its last bit.) ``inf`` only where the quotient itself
    is beyond float64.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        diff = x - y
        return np.where(np.isinf(diff), 2.0 * ((0.5 * x - 0.5 * y) / beta), diff / beta)


def _solve_rows(
    row: FDivergence, a, ref: NDArray, reward: NDArray, beta: NDArray
) -> tuple[NDArray, NDArray]:
    """pi* for validated float64 rows (rows, n) with 0 < beta < inf, probability axis last.

    Also ``log(pi*/ref)`` where the ratio is tiny (below ``1e-100``, or ``pi*`` below
    ``1e-300``: where ``pi*`` lost digits or underflowed), NaN elsewhere, for the
    divergence of the optimum (:func:`_divergence_last`).

    The steps: rows whose rewards are constant keep ``ref``; rows whose ``beta`` is
    beyond resolution are greedy or anchored at the next outcome (:func:`_beyond_rows`,
    :func:`_greedy_beyond`); the others are solved for the normaliser in two stages
    (:class:`_LiveRows`): the best outcome's coordinate in a bracket that holds the root
    (:func:`_brackets`), then the coordinate of the outcome that moves the sum most,
    in a bracket widened around stage 1's answer.
    """
    support = ref > 0
    total = ref.sum(axis=-1, keepdims=True)
    q = ref / total
    top = np.max(np.where(support, reward, -np.inf), axis=-1, keepdims=True)
    low = np.min(np.where(support, reward, np.inf), axis=-1, keepdims=True)
    d = np.where(support, _gap(top, reward, beta), np.inf)
    spread = _gap(top, low, beta)[:, 0]
    logt = np.full(q.shape, np.nan)
    plan = row.optimum(a)
    if plan.inner is not None:  # a closed form (the total variation's linear program)
        return plan.inner(q, reward, beta), logt
    out = q.copy()
    live = np.flatnonzero(spread > 0)  # constant rewards on the support: pi = ref
    mode = plan.mode
    # beta beyond resolution: every other outcome on the support is an overflowing
    # (r_max - r)/beta = inf below the best, where the ratio is 0 (a clip, or an exponential
    # tail) unless f'(inf) is finite: there it is a power law of that distance (solved below)
    best_mask = support & (reward == top)
    beyond = np.all(best_mask | ~support | np.isinf(d), axis=-1)[live]
    lifted, k2 = _beyond_rows(plan, q, reward, beta, support, best_mask, top, live, beyond)
    beyond &= ~lifted
    if beyond.any() and mode != "top":
        _greedy_beyond(q, reward, best_mask, live[beyond], mode, out, logt)
        live, lifted, k2 = live[~beyond], lifted[~beyond], k2[~beyond]
    if live.size == 0:
        return out, logt
    lo, hi, q_best, increasing = _brackets(
        row, a, plan, q, reward, support, top, spread, live, lifted, k2
    )
    rows = _LiveRows(plan, q[live], reward[live], beta[live], top[live], lifted, k2)
    # stage 1: the coordinate of the best outcome, in a bracket that holds the root in exact
    # arithmetic; a root at a bracket end (to float resolution) is accepted here
    root = rows.solve(rows.os_best, lo, hi, increasing)
    zk, os_k, cap = rows.stage2_anchor(root.x)
    underflow = rows.underflow(root, lo, q_best)
    zsol = rows.widen(root.x, zk, os_k, cap, underflow, increasing, live, beta)
    out[live], lt = rows.assemble(zsol, os_k, underflow)
    if lt is not None:
        logt[live] = lt
    return out, logt


def _beyond_rows(plan: Optimum, q, reward, beta, support, best_mask, top, live, beyond):
    """Bottom mode, ``beta`` beyond resolution: the rows anchored at the next outcome.

    The best outcomes' height above the next outcome k2 is the overflowing ``d``, at which
    their ratio is the power law ``(c d)^p``; k2 is kept where the best outcomes' mass
    ``q_best (c d)^p < 1``, and the row is then solved anchored at k2, the best outcomes'
    ratios held at that power law (ref = (1e-320, 1), alpha = 5, beta = 5e-324).
    Returns ``(lifted, k2)`` over the live rows.
    """
    lifted = np.zeros(live.size, dtype=bool)
    k2 = np.zeros(live.size, dtype=np.int64)
    if not (beyond.any() and plan.mode == "bottom"):
        return lifted, k2
    rb = reward[live[beyond]]
    below = support[live[beyond]] & ~best_mask[live[beyond]]
    kb = np.argmax(np.where(below, rb, -np.inf), axis=-1)
    half = 0.5 * top[live[beyond], 0] - 0.5 * rb[np.arange(kb.size), kb]
    _, lt = _power_far(*plan.power, half, beta[live[beyond], 0])
    qb = np.sum(np.where(best_mask, q, 0.0), axis=-1)[live[beyond]]
    # k2's own height is at most where its level alone sums to one; where that is
    # beyond float64 too (ref_k2 ~ 1e-76 at alpha = 7) the solve has no coordinate in
    # range and the row stays greedy (left open); below it, every outcome at an
    # overflowing distance under k2 is clipped
    lev = below & (rb == rb[np.arange(kb.size), kb][:, None])
    q2 = np.sum(np.where(lev, q[live[beyond]], 0.0), axis=-1)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        fits = np.isfinite(plan.coordinate(1.0 / q2))
        keep = (np.log(qb) + lt < 0.0) & fits
    lifted[np.flatnonzero(beyond)[keep]] = True
    k2[np.flatnonzero(beyond)[keep]] = kb[keep]
    return lifted, k2


def _greedy_beyond(q, reward, best_mask, gb, mode, out, logt) -> None:
    """Rows ``gb`` whose ``beta`` is beyond resolution (not top mode): the greedy policy,
    and in bottom mode ``log t`` of the best ratio ``1/q_best`` (1e320) for the divergence."""
    out[gb] = _greedy(q[gb], reward[gb])
    if mode == "bottom":
        qb = np.sum(np.where(best_mask[gb], q[gb], 0.0), axis=-1, keepdims=True)
        huge = best_mask[gb] & (qb < 1e-100)
        logt[gb] = np.where(huge, -np.log(np.where(huge, qb, 1.0)), np.nan)


def _brackets(row, a, plan: Optimum, q, reward, support, top, spread, live, lifted, k2):
    """Stage 1's bracket on the best outcome's coordinate: ``(lo, hi, q_best, increasing)``.

    One end is where the best ratio is 1 (the sum is <= 1), the other where the best
    outcomes alone sum to one (ratio ``1/q_best``); rows anchored at k2 (lifted) are
    bracketed by k2's clip and where k2's own level alone sums to one.
    """
    mode = plan.mode
    at_one = _bracket(row, a, mode)  # the best ratio is 1 here: the sum is <= 1
    # the best outcomes alone sum to one at ratio 1/q_best: the other end of the bracket
    q_best = np.sum(np.where(support & (reward == top), q, 0.0), axis=-1)[live]
    # (1/q_best overflows for a subnormal q_best, and so may the coordinate: brackets are
    # kept finite; a root beyond them is found by stage 2's widening below)
    with np.errstate(divide="ignore", over="ignore"):
        alone = plan.coordinate(np.minimum(1.0 / q_best, np.finfo(np.float64).max))
    alone = np.nan_to_num(alone, posinf=_BIG)
    sp = spread[live]
    if mode == "top":  # e decreases to raise the sum; e > 0
        lo = np.maximum(at_one - sp, alone * (1 - 1e-12))
        hi = np.full(live.size, at_one)
        lo = np.nan_to_num(lo, posinf=_BIG)
        return lo, hi, q_best, False
    lo = np.full(live.size, at_one)
    with np.errstate(over="ignore"):
        hi = np.minimum(at_one + sp, alone + 1e-12 * np.maximum(np.abs(alone), 1.0))
    hi = np.nan_to_num(hi, posinf=_BIG)
    if lifted.any():  # anchored at k2: its clip (the sum is the best's q (c d)^p < 1)
        rl = live[lifted]
        k2l = k2[lifted]
        q_k2 = np.sum(np.where(reward[rl] == reward[rl, k2l][:, None], q[rl], 0.0), -1)
        with np.errstate(divide="ignore", over="ignore"):
            al = plan.coordinate(np.minimum(1.0 / q_k2, _BIG))
        lo[lifted] = 0.0
        with np.errstate(over="ignore"):
            hi[lifted] = np.minimum(np.nan_to_num(al, posinf=_BIG) * (1 + 1e-12), _BIG)
    return lo, hi, q_best, True


class _LiveRows:
    """The rows solved for their normaliser: each outcome's coordinate is the anchor's
    ``z`` plus ``sgn (r_k - r_y) / beta``, its ratio the row's ``Optimum.ratio`` of that,
    except the far outcomes, whose ratio is a power law of their distance alone
    (:meth:`far_field`).
    """

    def __init__(self, plan: Optimum, qs, rs, bs, top, lifted, k2) -> None:
        self.plan, self.mode = plan, plan.mode
        self.qs, self.rs, self.bs, self.lifted = qs, rs, bs, lifted
        self.sgn = 1.0 if self.mode == "top" else -1.0  # coordinate z + sgn (r_k - r_y)/beta
        best = np.argmax(np.where(qs > 0, rs, -np.inf), axis=-1)
        self.best = np.where(lifted, k2, best)  # stage 1's anchor
        self.os_best = self.offsets(self.best)
        self.far, self.t_far, self.lt_far = self.far_field(top)

    def offsets(self, anchor):
        """(r_k - r_y)/beta for the anchor outcome k of each row, inf off the support."""
        rk = np.take_along_axis(self.rs, anchor[:, None], axis=-1)
        return np.where(self.qs > 0, _gap(rk, self.rs, self.bs), np.inf)

    def far_field(self, top):
        """``(far, t_far, log t_far)``: the outcomes whose ratio is a power law of their
        distance alone, beyond float64.

        Top mode: outcomes whose distance below the best, d = (r_best - r)/beta, is beyond
        float64: their ratio is the power law of d alone (``Optimum.far``), fixed while the best
        outcome's pole distance e <= f'(inf) - f'(1) moves (e + d = d to float64 precision);
        elsewhere an infinite d has the ratio 0 (a clip, or W(e^-inf)). Lifted rows: the
        best outcomes, at an overflowing height above k2 (c d)^p.
        """
        qs, rs, bs, plan = self.qs, self.rs, self.bs, self.plan
        if self.mode == "top":
            far = (qs > 0) & np.isinf(self.os_best)
        else:
            far = np.zeros(qs.shape, dtype=bool)
        t_far = np.zeros(qs.shape)
        lt_far = np.full(qs.shape, np.nan)
        if self.lifted.any():
            far = self.lifted[:, None] & (qs > 0) & (rs == top)
            rk = np.take_along_axis(rs, self.best[:, None], axis=-1)
            half = np.where(far, 0.5 * rs - 0.5 * rk, 1.0)
            tf, lf = _power_far(*plan.power, half, np.broadcast_to(bs, qs.shape))
            t_far, lt_far = np.where(far, tf, 0.0), np.where(far, lf, np.nan)
        elif far.any():
            half = 0.5 * np.take_along_axis(rs, self.best[:, None], axis=-1) - 0.5 * rs
            tf, lf = plan.far(np.where(far, half, 1.0), np.broadcast_to(bs, qs.shape))
            t_far, lt_far = np.where(far, tf, 0.0), np.where(far, lf, np.nan)
        return far, t_far, lt_far

    def ratio(self, x, sel=slice(None)):
        """``(t, dt/dz)`` at the coordinates ``x`` of rows ``sel``, far outcomes held."""
        t, dt = self.plan.ratio(x)
        far = self.far
        if not far.any():
            return t, dt
        return np.where(far[sel], self.t_far[sel], t), np.where(far[sel], 0.0, dt)

    def solve(self, os_, lo_, hi_, increasing):
        """The anchor's coordinate at which ``sum q t = 1``, offsets ``os_`` from it."""
        qs, sgn, n_rows = self.qs, self.sgn, self.qs.shape[0]

        def h(z, rows):
            sel = slice(None) if rows.size == n_rows else rows
            t, dt = self.ratio(z[:, None] + sgn * os_[sel], sel)
            with np.errstate(invalid="ignore", over="ignore"):
                w = np.where(qs[sel] > 0, qs[sel] * t, 0.0)
                dw = np.where(qs[sel] > 0, qs[sel] * dt, 0.0)
                return w.sum(axis=-1) - 1.0, dw.sum(axis=-1)

        return monotone_root(h, lo_, np.maximum(lo_, hi_), increasing=increasing)

    def stage2_anchor(self, z1):
        """Stage 2's anchor: the outcome that moves the sum most, and its coordinate.

        The outcome with the largest ``ref * dt/dz`` (for chi2 the one with the most
        reference mass, for alpha > 1 one just above its clip, where t ~ u^(1/(alpha-1))
        is steep), which the root finder then resolves to float precision: the best
        outcome's height u or s may be huge (1e8 when r/beta is) while the sum is decided
        where the coordinate is O(1); anchored at the best, the sum jumps between
        neighbouring floats of u and the final normalisation spreads the gap over every
        entry. (A pole distance needs no second stage: every outcome's e_best + d_y is a
        sum of non-negative numbers, while anchoring elsewhere would form e_best by
        cancellation.) Returns ``(zk, os_k, cap)``: the anchor's coordinate at stage 1's
        answer, the other outcomes' offsets from it, and a bound on its coordinate.
        """
        qs, sgn, os_best, best, far = self.qs, self.sgn, self.os_best, self.best, self.far
        _, dt1 = self.ratio(z1[:, None] + sgn * os_best)
        pull = np.where(qs > 0, np.abs(qs * dt1), 0.0)
        if self.mode == "bottom":
            # an outcome within z1's resolution below its clip may be kept in exact
            # arithmetic (the best outcome's height u ~ 1e278, ref_best ~ 1e-300: u lands on
            # the clip of the heavy outcome below it, whose O(1) height decides the sum): its
            # pull is taken at that resolution (chi2: ref (1e-300, 1), rewards +-1.63e308,
            # beta 1e30)
            res = 64 * np.finfo(np.float64).eps * np.abs(z1)[:, None]
            x1 = z1[:, None] + sgn * os_best
            edge = (qs > 0) & (x1 <= 0) & (x1 > -res) & ~far
            if edge.any():
                _, dte = self.ratio(np.broadcast_to(res, qs.shape).copy())
                pull = np.where(edge, qs * dte, pull)
        pull = np.where(np.isfinite(pull) & np.isfinite(os_best), pull, -1.0)
        anchor = np.where(pull.max(axis=-1) > 0, np.argmax(pull, axis=-1), best)
        if self.mode == "top":
            anchor = best
        zk = z1 + sgn * np.take_along_axis(os_best, anchor[:, None], axis=-1)[:, 0]
        anchor = np.where(np.isfinite(zk), anchor, best)  # an overflowing offset: stay at best
        zk = np.where(np.isfinite(zk), zk, z1)
        return zk, self.offsets(anchor), self.anchor_cap(anchor)

    def anchor_cap(self, anchor):
        """Bottom mode: the anchor's height is at most where its own outcomes alone sum to
        one, a bound that keeps the widened bracket O(1) where z1's resolution is not
        (stage 1 at u ~ 1e278 widens by ~1e265, ~800 bisections down to the anchor's
        height ~2); elsewhere float64's largest number."""
        qs, rs = self.qs, self.rs
        if self.mode != "bottom":
            return np.full(qs.shape[0], _BIG)
        ra = np.take_along_axis(rs, anchor[:, None], axis=-1)
        q_k = np.sum(np.where((qs > 0) & (rs == ra), qs, 0.0), axis=-1)
        with np.errstate(divide="ignore", over="ignore"):
            ck = self.plan.coordinate(np.minimum(1.0 / q_k, _BIG))
        return np.nan_to_num(ck * (1 + 1e-12) + 1e-300, posinf=_BIG)

    def underflow(self, root, lo, q_best):
        """Top mode: the rows whose best pole distance is below float64's range.

        Reverse chi2 and alpha < 0 have e ~ t^(a-1), ~1e-600 for t ~ 1/ref ~ 1e300: e_best
        is then negligible beside every d_y > 0, the other outcomes have their ratio at
        e = d_y and the best outcomes share the rest (in proportion to ref: equal rewards,
        equal ratios). The same where 1/ref_best overflows, a subnormal ref_best: the
        bracket end at that ratio is clipped to float64's range, and e_best ~
        ref_best^(1-a) <= 1e-308 is negligible beside every d_y >= 1e-290.
        """
        qs, os_best = self.qs, self.os_best
        if self.mode != "top":
            return np.zeros(qs.shape[0], dtype=bool)
        underflow = (root.outside == -1) & (lo <= 0)
        off = np.where((qs > 0) & (os_best > 0), os_best, np.inf).min(axis=-1)
        underflow |= (q_best * _BIG < 1.0) & (off >= 1e-290)
        return underflow

    def widen(self, z1, zk, os_k, cap, underflow, increasing, live, beta):
        """Stage 2: the anchor's coordinate, in a bracket around ``zk`` widened (by 1e4,
        up to 8 times) until it holds the root; rows in ``underflow`` are already done."""
        ok = np.zeros(self.qs.shape[0], dtype=bool)
        ok |= underflow
        zsol = zk.copy()
        width = 64 * np.finfo(np.float64).eps * (np.abs(z1) + np.abs(zk)) + 1e-300
        for _ in range(8):
            todo = np.flatnonzero(~ok)
            if todo.size == 0:
                break
            lo2 = np.clip(zk - width, -_BIG, _BIG)
            hi2 = np.clip(zk + width, -_BIG, _BIG)
            if self.mode != "free":  # the coordinate (a pole distance, or a height) is positive
                lo2 = np.maximum(lo2, 0.0)
            hi2 = np.maximum(np.minimum(hi2, cap), lo2)
            r2 = self.solve(os_k, lo2, hi2, increasing)
            good = r2.converged | ((r2.outside == 0) & (r2.f == 0))
            zsol = np.where(~ok & good, r2.x, zsol)
            ok |= good
            width = np.minimum(width * 1e4, _BIG)
        if not ok.all():  # pragma: no cover - the widened bracket holds the root
            bad = int(np.flatnonzero(~ok)[0])
            raise RuntimeError(
                f"f_optimal_policy: the multiplier of row {int(live[bad])} did not converge "
                f"(beta = {float(beta[live[bad], 0]):g}); please report the problem"
            )
        return zsol

    def assemble(self, zsol, os_k, underflow):
        """``(pi*, log t)`` of the rows at the solved coordinate, normalised; ``log t`` (the
        log of the tiny ratios, for the divergence) or None where none is needed."""
        qs, sgn, far = self.qs, self.sgn, self.far
        x = zsol[:, None] + sgn * os_k
        t, _ = self.ratio(x)
        pi = np.where(qs > 0, qs * t, 0.0)
        if underflow.any():
            u = np.flatnonzero(underflow)
            tops = (qs[u] > 0) & (self.os_best[u] == 0)
            x[u] = np.where(tops, 1.0, self.os_best[u])
            t0, _ = self.ratio(x[u], u)
            t[u] = t0
            others = np.where((qs[u] > 0) & ~tops, qs[u] * t0, 0.0)
            rest = 1.0 - others.sum(axis=-1, keepdims=True)
            share = np.where(tops, qs[u], 0.0)
            pi[u] = others + share / share.sum(axis=-1, keepdims=True) * rest
        total = pi.sum(axis=-1, keepdims=True)
        if self.mode == "top":  # the log of the tiny ratios, from the pole distance (not from t)
            tiny = (qs > 0) & ((t < 1e-100) | (pi < 1e-300)) & ~far
            with np.errstate(divide="ignore"):
                lt = np.where(tiny, self.plan.log_ratio(np.where(tiny, x, 1.0)), self.lt_far)
            return pi / total, lt - np.log(total)
        if self.lifted.any():  # t^a of the lifted best outcomes may overflow: log t for D
            return pi / total, self.lt_far - np.log(total)
        return pi / total, None


def _greedy(ref: NDArray, reward: NDArray) -> NDArray:
    support = ref > 0
    top = np.max(np.where(support, reward, -np.inf), axis=-1, keepdims=True)
    best = support & (reward == top)
    w = np.where(best, ref, 0.0)
    return w / w.sum(axis=-1, keepdims=True)


def _optimum_last(row: FDivergence, a, ref: NDArray, reward: NDArray, beta: NDArray, logs=False):
    """pi* along the last axis for validated arrays; beta has shape (..., 1), 0 and inf allowed.

    With ``logs=True`` also ``log(pi*/ref)`` where it is tiny (see :func:`_solve_rows`).
    """
    shape = np.broadcast_shapes(ref.shape, reward.shape, beta.shape)
    n = shape[-1]
    q = np.broadcast_to(ref, shape).reshape(-1, n).astype(np.float64)
    r = np.broadcast_to(reward, shape).reshape(-1, n).astype(np.float64)
    b = np.broadcast_to(beta, shape[:-1] + (1,)).reshape(-1, 1).astype(np.float64)
    kernel = row.optimum(a).kernel
    if kernel is not None:  # a closed form for every beta (the reverse KL's tilt)
        pi = kernel(q, r, b).reshape(shape)
        return (pi, np.full(shape, np.nan)) if logs else pi
    out = q / q.sum(axis=-1, keepdims=True)
    zero, inner = b[:, 0] == 0, np.isfinite(b[:, 0]) & (b[:, 0] > 0)
    if zero.any():
        out[zero] = _greedy(q[zero], r[zero])
    logt = np.full(q.shape, np.nan)
    if inner.any():
        out[inner], logt[inner] = _solve_rows(row, a, q[inner], r[inner], b[inner])
    if logs:
        return out.reshape(shape), logt.reshape(shape)
    return out.reshape(shape)


def _problem(ref, reward, beta, divergence, alpha, axis):
    row, a = as_divergence(divergence, alpha)
    ref_a, rew_a, b, ax = _setup(ref, reward, beta, axis)
    return row, a, ref_a, rew_a, b, ax


def f_optimal_policy(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    divergence: str,
    alpha: float | None = None,
    axis: int = -1,
) -> NDArray[np.floating]:
    r"""The maximiser of :math:`\mathbb{E}_\pi[r] - \beta\, D_f(\pi\|\pi_{ref})`.

    .. math::

        \pi^*(y) = \pi_{ref}(y)\, \Big[(f')^{-1}\Big(\frac{r(y) - \lambda}{\beta}\Big)\Big]_+,
        \qquad \sum_y \pi^*(y) = 1

    Parameters
    ----------
    ref, reward, beta, axis
        As in :func:`klpolicy.optimal_policy`: probabilities along ``axis``,
        finite rewards, ``beta >= 0`` (0: the greedy limit, ``inf``: the reference;
        an array of shape ``(..., 1)`` gives one per row).
    divergence : str
        A key of :data:`klpolicy.DIVERGENCES`.
    alpha : float, optional
        The coefficient of the ``"alpha"`` row (required there, refused elsewhere).

    Returns
    -------
    ndarray
        :math:`\pi^*`, the broadcast shape of ``ref`` and ``reward``; float32 for
        float32 input. ``"reverse_kl"`` (and ``"alpha"`` with ``alpha=1``) is
        :func:`klpolicy.optimal_policy` itself.

    Raises
    ------
    ValueError
        For invalid ``ref``, ``reward`` or ``beta`` (as in :func:`klpolicy.optimal_policy`),
        an unknown ``divergence``, or an ``alpha`` missing, not finite or given to
        another row.

    Notes
    -----
    The optimum is taken over policies on the reference's support (zeros of ``ref``
    stay zero, as for the KL); rewards off the support are ignored. There it always
    exists and is unique except for ``"tv"`` (a linear program), whose ties are
    broken by keeping the reference's mass where moving it gains nothing. Where
    :math:`f'(0)` is finite (``chi2``, ``alpha > 1``, ``tv``) the optimum is sparse:
    outcomes whose reward is more than :math:`\beta\,(f'(1) - f'(0))`-ish below the
    multiplier get no mass (exactly: :math:`r(y) \le \lambda + \beta f'(0)`). Where
    :math:`f'(\infty)` is finite the density ratio of the best outcome is bounded
    only through :math:`\lambda > r_{max} - \beta f'(\infty)`. ``chi2_kl`` (chi-PO)
    has :math:`\pi/\pi_{ref} = W(e^{(r - \lambda)/\beta})`, linear in the reward for
    large rewards where the KL's ratio is exponential. As ``beta -> 0`` every row
    tends to the greedy policy (the best rewards, split in proportion to ``ref``,
    since outcomes with equal rewards get equal ratios), returned at ``beta = 0``;
    ``beta = inf`` returns ``ref``. The multiplier is solved per row by the
    package's safeguarded root finder in a coordinate where no ratio is formed by
    cancellation (see the module docstring); the result matches a 50-digit mpmath
    maximisation to 1e-12 relative on random problems of up to 8 outcomes with
    reference entries down to 1e-12. Reward gaps beyond float64 (``(r_max - r)/beta``
    above 1.8e308) keep the exact power-law entries where :math:`f'(\infty)` is
    finite (reverse chi2 at rewards ``(1.63e308, -1.63e308)``, ``beta = 1``: ``3.9e-155``),
    and the value and divergence stay finite there (computed from the ratios' logs).

    References
    ----------
    .. [1] Wang et al., "Beyond Reverse KL: Generalizing Direct Preference
       Optimization with Diverse Divergence Constraints", 2023, arXiv:2309.16240.
    .. [2] Huang et al., "Correcting the Mythos of KL-Regularization: Direct
       Alignment without Overoptimization via Chi-Squared Preference
       Optimization", 2024, arXiv:2407.13399.

    Examples
    --------
    >>> from klpolicy import f_optimal_policy
    >>> f_optimal_policy([0.5, 0.5], [1.0, 0.0], 0.5, divergence="reverse_kl").round(4)
    array([0.8808, 0.1192])
    >>> f_optimal_policy([0.5, 0.5], [1.0, 0.0], 0.25, divergence="chi2")  # sparse
    array([1., 0.])
    >>> f_optimal_policy([0.5, 0.5], [1.0, 0.0], 0.5, divergence="chi2")
    array([0.75, 0.25])
    >>> f_optimal_policy([0.5, 0.5], [1.0, 0.0], 1.0, divergence="alpha", alpha=0.5).round(4)
    array([0.719, 0.281])
    """
    row, a = as_divergence(divergence, alpha)
    policy = row.optimum(a).policy
    if policy is not None:  # the reverse KL: klpolicy.optimal_policy
        return policy(ref, reward, beta, axis=axis)
    _, _, ref_a, rew_a, b, ax = _problem(ref, reward, beta, divergence, alpha, axis)
    pi = _optimum_last(row, a, ref_a, rew_a, b)
    return _restore(pi.astype(ref_a.dtype, copy=False), ax)


def _divergence_last(row: FDivergence, a, q: NDArray, p: NDArray, b: NDArray, logt=None):
    """(D_f(pi*||ref), beta D_f) per row for an optimum ``p`` and its tiny log-ratios ``logt``.

    Where the optimum has tiny ratios (``logt`` finite, top mode) whose ``pi`` lost digits
    or underflowed (``f(0) = inf`` would make a zero entry's summand ``inf``), their
    summands come from ``log t`` (the row's ``Optimum.far_terms``); the others are
    :func:`klpolicy.f_divergence`'s own summands (exact near ``t = 1``).
    """
    with np.errstate(invalid="ignore", over="ignore"):
        div = row.divergence_last(p, q, a)
        pen = np.where((b == 0) | (div == 0), 0.0, b * div)
    far_terms = row.optimum(a).far_terms
    if logt is None or far_terms is None:  # (f(0) finite: pi = 0 is exact there)
        return div, pen
    far = np.isfinite(logt) & (q > 0)
    rows = np.flatnonzero(far.reshape(-1, far.shape[-1]).any(axis=-1))
    if rows.size == 0:
        return div, pen
    n = p.shape[-1]
    p2, q2, f2, lt2 = (x.reshape(-1, n)[rows] for x in (p, q, far, logt))
    b2 = np.broadcast_to(b, p.shape[:-1]).reshape(-1)[rows]
    pn, qn, d = _normalised(p2, q2)
    near = (qn > 0) & ~f2
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        terms = np.where(near, row.summands(pn, qn, d, a), 0.0)
        ft, fb = far_terms(np.where(f2, qn, 1.0), np.where(f2, lt2, 0.0), np.log(b2)[:, None])
        dn = terms.sum(axis=-1)
        d_row = dn + np.where(f2, ft, 0.0).sum(axis=-1)
        p_row = b2 * dn + np.where(f2, fb, 0.0).sum(axis=-1)
    div.reshape(-1)[rows] = d_row
    pen.reshape(-1)[rows] = p_row
    return div, pen


def _large_beta_last(row: FDivergence, a, q: NDArray, r: NDArray, b: NDArray):
    r"""Value, expected reward and divergence per row from the expansion in ``1/beta``.

    With :math:`c = r - \mathbb{E}_{ref}[r]` on the support, :math:`f_2 = f''(1)`,
    :math:`f_3 = f^{(3)}(1)`, :math:`V_2 = \mathbb{E}_{ref}[c^2]`, :math:`M_3 = \mathbb{E}_{ref}[c^3]`
    (the KKT condition :math:`f'(t) = f'(1) + (c - \mu)/\beta` expanded to second order,
    :math:`\mu = O(\beta^{-2})`; then :math:`dV/d\beta = -D`):

    .. math::

        D = \frac{V_2}{2 f_2 \beta^2} - \frac{f_3 M_3}{3 f_2^3 \beta^3},\quad
        V = \mathbb{E}_{ref}[r] + \frac{V_2}{2 f_2 \beta} - \frac{f_3 M_3}{6 f_2^3 \beta^2},\quad
        \mathbb{E}_{\pi^*}[r] = \mathbb{E}_{ref}[r] + \frac{V_2}{f_2 \beta}
            - \frac{f_3 M_3}{2 f_2^3 \beta^2},

    each to :math:`O(\beta^{-3})` relative to its first term times ``(spread/beta)^2``
    (the KL's cumulant expansion :math:`\beta \log \mathbb{E} e^{r/\beta}` for the
    reverse KL), :math:`(f_2, f_3)` the row's ``Optimum.curvature``. Used where
    ``beta >= 1e6 * spread`` (spread ``= max |c|``; times ``max(1, |alpha|)``, whose higher
    derivatives grow with ``alpha``: ``Optimum.large_beta``), so that the
    truncation is below ``1e-17 * spread``, and at ``beta = inf`` (the limit
    :math:`\mathbb{E}_{ref}[r]`, divergence 0). There the optimum is the reference to
    within rounding, and ``beta`` times the divergence of the rounded optimum (``1e-33``
    for a reference whose sum is off by one rounding) would be ``beta * 1e-33``, not the
    ``V_2 / (2 f_2 beta)`` it is.

    A row whose optimum has an ``exact_value`` (the total variation's linear program)
    takes it instead, at every ``beta``.

    Returns ``(use, value, expected_reward, divergence)``, ``use`` the rows it applies to.
    """
    plan = row.optimum(a)
    if plan.exact_value is not None:
        return plan.exact_value(q, r, b)
    sup = q > 0
    qn = np.where(sup, q, 0.0) / np.sum(np.where(sup, q, 0.0), axis=-1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore", under="ignore", divide="ignore"):
        mean = np.sum(np.where(sup, qn * r, 0.0), axis=-1)
        c = np.where(sup, r - mean[..., None], 0.0)
        f2, f3 = plan.curvature
        spread = np.max(np.abs(c), axis=-1)
        k = plan.large_beta
        use = np.isfinite(spread) & np.isfinite(mean) & (b >= k * spread) & (b > 0)
        z = np.where(use[..., None], c / b[..., None], 0.0)  # c / beta, 0 at beta = inf
        v1 = np.sum(qn * c * z, axis=-1)  # V_2 / beta
        m1 = np.sum(qn * c * z * z, axis=-1)  # M_3 / beta^2
        div = np.sum(qn * z * z, axis=-1) / (2 * f2) - f3 * np.sum(qn * z**3, axis=-1) / (3 * f2**3)
        value = mean + v1 / (2 * f2) - f3 * m1 / (6 * f2**3)
        er = mean + v1 / f2 - f3 * m1 / (2 * f2**3)
    return use, value, er, div


def _value_last(row, a, ref, reward, beta, pi, logt=None):
    """E_pi r - beta D_f(pi||ref) per row (keepdims=False), with the limits.

    Rows at large ``beta`` (and ``inf``; every ``beta`` for ``"tv"``) take the
    expansion of :func:`_large_beta_last` instead of the rounded optimum.
    """
    shape = pi.shape
    q = np.broadcast_to(ref, shape).astype(np.float64)
    r = np.broadcast_to(reward, shape).astype(np.float64)
    b = np.broadcast_to(beta, shape[:-1] + (1,))[..., 0].astype(np.float64)
    p = pi.astype(np.float64)
    er = np.sum(np.where(q > 0, p * r, 0.0), axis=-1)
    div, pen = _divergence_last(row, a, q, p, b, logt)
    value = er - pen
    use, v_l, er_l, div_l = _large_beta_last(row, a, q, r, b)
    if np.any(use):
        value, er, div = (np.where(use, x, y) for x, y in ((v_l, value), (er_l, er), (div_l, div)))
    return value, er, div


def f_soft_value(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    divergence: str,
    alpha: float | None = None,
    axis: int = -1,
) -> NDArray[np.floating] | np.floating:
    r"""The optimal value :math:`\max_\pi \mathbb{E}_\pi[r] - \beta\, D_f(\pi\|\pi_{ref})`.

    .. math::

        V_\beta = \mathbb{E}_{\pi^*}[r] - \beta\, D_f(\pi^*\|\pi_{ref})
                = \lambda + \beta\, \mathbb{E}_{\pi_{ref}}\big[f^*\big((r - \lambda)/\beta\big)\big]

    Parameters
    ----------
    ref, reward, beta, divergence, alpha, axis
        As in :func:`f_optimal_policy`.

    Returns
    -------
    ndarray or float
        One value per batch row; ``max r`` on the support at ``beta = 0``,
        ``E_ref[r]`` at ``beta = inf``. ``"reverse_kl"`` equals
        :func:`klpolicy.soft_value` (to rounding: computed from the optimum).

    Raises
    ------
    ValueError
        As in :func:`f_optimal_policy`.

    Notes
    -----
    Computed as :math:`\mathbb{E}_{\pi^*}[r] - \beta D_f(\pi^*\|\pi_{ref})` from the
    exact optimum and :func:`klpolicy.f_divergence` (the second form, the convex
    dual, is what the tests check it against). :math:`dV/d\beta = -D_f(\pi^*_\beta\|\pi_{ref})`
    (the envelope theorem). Where ``beta >= 1e6`` times the reward's spread about
    :math:`\mathbb{E}_{ref}[r]` (and at ``beta = inf``) the optimum is the reference to
    rounding, and the value is the expansion
    :math:`V = \mathbb{E}_{ref}[r] + \mathrm{Var}_{ref}(r)/(2 f''(1)\beta) - f^{(3)}(1)\,
    \mathbb{E}_{ref}[(r - \mathbb{E}_{ref} r)^3]/(6 f''(1)^3 \beta^2)` (the penalty
    :math:`\beta D_f` is :math:`O(1/\beta)`; taken from the rounded optimum it would be
    ``beta`` times a rounding: ``-inf`` at ``beta = inf`` for a reference whose sum is off by
    one rounding). The ``"tv"`` value is the linear program's, exact at every ``beta``:
    :math:`\mathbb{E}_{ref}[r] + \sum_{gap > \beta} \pi_{ref}\,(gap - \beta)`, with
    :math:`gap = r_{max} - r` on the support.

    References
    ----------
    .. [1] Wang et al., 2023, arXiv:2309.16240.

    Examples
    --------
    >>> from klpolicy import f_soft_value
    >>> float(f_soft_value([0.5, 0.5], [1.0, 0.0], 0.5, divergence="chi2"))  # 0.75 - 0.5 * 0.25
    0.625
    """
    row, a = as_divergence(divergence, alpha)
    _, _, ref_a, rew_a, b, _ = _problem(ref, reward, beta, divergence, alpha, axis)
    pi, logt = _optimum_last(row, a, ref_a, rew_a, b, logs=True)
    value, _, _ = _value_last(row, a, ref_a, rew_a, b, pi, logt)
    return value.astype(ref_a.dtype, copy=False)[()]


class FFrontier(NamedTuple):
    """The reward-divergence curve of the f-regularised optimum along a grid of ``beta``.

    Each field has shape ``betas.shape + batch_shape``.
    """

    beta: NDArray
    expected_reward: NDArray
    divergence: NDArray
    value: NDArray


def f_frontier(
    ref: ArrayLike,
    reward: ArrayLike,
    betas: ArrayLike,
    *,
    divergence: str,
    alpha: float | None = None,
    axis: int = -1,
) -> FFrontier:
    r"""Expected reward, divergence and value of the f-regularised optimum along ``betas``.

    .. math::

        \beta \mapsto \big(D_f(\pi^*_\beta\|\pi_{ref}),\; \mathbb{E}_{\pi^*_\beta}[r]\big),
        \qquad \frac{d\,\mathbb{E}_{\pi^*_\beta}[r]}{d\,D_f} = \beta

    No policy with the same divergence has a larger expected reward: the curve is
    the upper boundary of the reward-divergence plane.

    Parameters
    ----------
    ref, reward, divergence, alpha, axis
        As in :func:`f_optimal_policy`.
    betas : array_like
        Grid of coefficients (``>= 0``, ``inf`` allowed), any shape.

    Returns
    -------
    FFrontier
        ``(beta, expected_reward, divergence, value)``, each of shape
        ``betas.shape + batch_shape``.

    Raises
    ------
    ValueError
        As in :func:`f_optimal_policy`.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, "Scaling Laws for Reward Model
       Overoptimization", 2022, arXiv:2210.10760 (the KL frontier).

    Examples
    --------
    >>> from klpolicy import f_frontier
    >>> f = f_frontier([0.5, 0.5], [1.0, 0.0], [0.0, 0.25, 0.5, float("inf")], divergence="chi2")
    >>> f.expected_reward
    array([1.  , 1.  , 0.75, 0.5 ])
    >>> f.divergence
    array([1.  , 1.  , 0.25, 0.  ])
    """
    row, a = as_divergence(divergence, alpha)
    ref_a, rew_a = _prepare(ref, reward, axis)
    grid = V.check_beta_values("betas", betas)
    flat = grid.reshape(-1)
    batch = ref_a.shape[:-1]
    b = flat.reshape((-1,) + (1,) * len(batch) + (1,))
    r_b = np.broadcast_to(ref_a, (flat.size,) + ref_a.shape)
    w_b = np.broadcast_to(rew_a, (flat.size,) + rew_a.shape)
    pi, logt = _optimum_last(row, a, r_b, w_b, b, logs=True)
    value, er, div = _value_last(row, a, r_b, w_b, b, pi, logt)
    shape = grid.shape + batch
    dt = ref_a.dtype
    return FFrontier(
        beta=np.broadcast_to(grid.reshape(grid.shape + (1,) * len(batch)), shape).astype(dt),
        expected_reward=er.reshape(shape).astype(dt),
        divergence=div.reshape(shape).astype(dt),
        value=value.reshape(shape).astype(dt),
    )


def beta_for_divergence(
    ref: ArrayLike,
    reward: ArrayLike,
    target: ArrayLike,
    *,
    divergence: str,
    alpha: float | None = None,
    axis: int = -1,
    rtol: float = 1e-13,
) -> NDArray[np.floating] | np.floating:
    r"""The coefficient at which the f-regularised optimum spends a divergence budget.

    Solves :math:`D_f(\pi^*_\beta\|\pi_{ref}) = \mathrm{target}` for :math:`\beta`, every
    batch row at once, with

    .. math::

        \frac{d D_f(\pi^*_\beta\|\pi_{ref})}{d \log\beta}
          = -\sum_y \frac{\pi_{ref}(y)}{f''(t_y)} \big(s_y - \bar s\big)^2 \le 0,
        \qquad s_y = f'(t_y),\ \bar s = \frac{\sum_y \pi_{ref}(y) s_y / f''(t_y)}
                                             {\sum_y \pi_{ref}(y) / f''(t_y)}

    (sums over the outcomes with :math:`t_y = \pi^*(y)/\pi_{ref}(y) > 0`).

    Parameters
    ----------
    ref, reward, divergence, alpha, axis
        As in :func:`f_optimal_policy`.
    target : float or array_like
        The divergence budget, ``>= 0``, broadcasting over the batch shape.
    rtol : float, optional
        Relative tolerance on the attained divergence.

    Returns
    -------
    ndarray or float
        ``beta`` per batch row; ``target = 0`` gives ``inf`` and a ``target``
        equal to the greedy policy's divergence gives 0.
        ``"reverse_kl"`` is :func:`klpolicy.beta_for_kl`.

    Raises
    ------
    ValueError
        As in :func:`f_optimal_policy`; for a ``target`` above the greedy policy's
        divergence (the largest reachable, stated in the message; infinite for
        ``forward_kl``, ``reverse_chi2`` and ``alpha <= 0``, whose greedy policy
        leaves the support); for ``"tv"``, whose optimum's divergence is a step function of
        ``beta`` (no ``beta`` attains a budget between the steps); and for a budget
        reached only beyond float64's range of ``beta``.

    Notes
    -----
    The divergence of the optimum decreases in ``beta`` (by the formula above). The
    solver works on ``log beta`` over the whole float64 range, with Newton steps
    from that derivative and bisection whenever a step leaves the bracket
    (:mod:`klpolicy.core.roots`).

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593 (a target KL for beta).

    Examples
    --------
    >>> from klpolicy import beta_for_divergence, f_optimal_policy, f_divergence
    >>> b = beta_for_divergence([0.5, 0.5], [1.0, 0.0], 0.25, divergence="chi2")
    >>> round(float(b), 12)
    0.5
    """
    row, a = as_divergence(divergence, alpha)
    rtol = V.as_scalar("rtol", rtol, "(0, 1)")
    plan = row.optimum(a)
    if plan.budget is not None:  # the reverse KL: klpolicy.beta_for_kl
        V.as_kl_budget("target", target)  # refused under this function's name for it
        return plan.budget(ref, reward, target, axis=axis, rtol=rtol)
    if plan.no_budget is not None:
        raise ValueError(plan.no_budget)
    ref_a, rew_a = _prepare(ref, reward, axis)
    tgt = V.as_kl_budget("target", target)
    batch = ref_a.shape[:-1]
    try:
        batch = np.broadcast_shapes(batch, tgt.shape)
    except ValueError:
        raise ValueError(
            f"`target` of shape {tgt.shape} does not broadcast against the batch shape {batch}"
        ) from None
    n = ref_a.shape[-1]
    q = np.broadcast_to(ref_a, batch + (n,)).reshape(-1, n).astype(np.float64)
    r = np.broadcast_to(rew_a, batch + (n,)).reshape(-1, n).astype(np.float64)
    t_flat = np.broadcast_to(tgt, batch).reshape(-1).astype(np.float64)
    greedy = _greedy(q, r)
    dmax = row.divergence_last(greedy, q, a)
    over = t_flat > dmax * (1 + 4 * np.finfo(np.float64).eps)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        where = f" for row {i}" if batch else ""
        raise ValueError(
            f"`target` = {t_flat[i]:g} is above the largest {row.name} divergence "
            f"reachable{where}: {dmax[i]:.6g} nats (the greedy limit beta -> 0)"
        )
    at_zero = t_flat == 0
    at_max = (t_flat >= dmax) & ~at_zero
    act = np.flatnonzero(~(at_zero | at_max))
    out = np.where(at_zero, np.inf, 0.0)
    if act.size:
        log_t = np.log(t_flat[act])

        def g(s, rows):
            sel = act[rows]
            b = np.exp(s)[:, None]
            pi, logt = _optimum_last(row, a, q[sel], r[sel], b, logs=True)
            div, _ = _divergence_last(row, a, q[sel], pi, b[:, 0], logt)
            tt = np.where(q[sel] > 0, pi / np.where(q[sel] > 0, q[sel], 1.0), 0.0)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                on = tt > 0
                w = np.where(on, q[sel] / row.fsecond(np.where(on, tt, 1.0), alpha=a), 0.0)
                sy = np.where(on, row.fprime(np.where(on, tt, 1.0), alpha=a), 0.0)
                sbar = np.sum(w * sy, -1, keepdims=True) / np.sum(w, -1, keepdims=True)
                slope = -np.sum(w * (sy - sbar) ** 2, -1) / div
                return np.log(div) - log_t[rows], slope

        # a start from the large-beta expansion D ~ f''(1) Var_ref(r) / (2 beta^2)
        # (rewards scaled by their largest magnitude: a variance of rewards near 1e308
        # overflows, its log does not)
        qn = q[act] / q[act].sum(-1, keepdims=True)
        scale = np.max(np.where(qn > 0, np.abs(r[act]), 0.0), -1, keepdims=True)
        rs = r[act] / np.where(scale > 0, scale, 1.0)
        mu = np.sum(qn * rs, -1, keepdims=True)
        var = np.sum(qn * (rs - mu) ** 2, -1)
        f2 = float(row.fsecond(1.0, alpha=a))
        with np.errstate(divide="ignore", invalid="ignore"):
            s0 = 0.5 * np.log(var / (2.0 * f2 * t_flat[act])) + np.log(scale[:, 0])
        s0 = np.where(np.isfinite(s0), s0, 0.0)
        root = monotone_root(
            g, _LOG_TINY, _LOG_HUGE, np.clip(s0, _LOG_TINY, _LOG_HUGE), increasing=False, ftol=rtol
        )
        if not root.converged.all():
            i = int(np.flatnonzero(~root.converged)[0])
            raise ValueError(
                f"`target` = {t_flat[act[i]]:g} for row {int(act[i])} is reached only at a beta "
                "outside float64's range; scale `reward`"
            )
        out[act] = np.exp(root.x)
    return out.reshape(batch)[()]
