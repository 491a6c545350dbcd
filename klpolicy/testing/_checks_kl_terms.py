r"""Which divergence's gradient a KL term follows, exactly: ``kl_term_report`` and ``check_kl_term``.

A trainer's KL term is a function ``fn(logp, old_logp, ref_logp)`` of the sampled
outcomes' log-probabilities under the current policy (differentiable), the policy that
drew them and the reference, returning per-sample (or per-token) loss terms. On a small
tabular policy (``level="token"``) or a token tree (``level="sequence"``) every outcome
is enumerated, weighted by the sampler's probability and differentiated with autograd:

.. math:: G(\theta) = \nabla_\theta \sum_y \mu(y)\, \mathrm{fn}(\log\pi_\theta(y),
          \log\mu(y), \log\pi_{ref}(y)),

the exact expected gradient of the term, on-policy (:math:`\mu = \pi`, with
``old_logp`` equal to ``logp`` but detached) and off-policy (:math:`\mu = \pi_{old}`).
At several random :math:`(\pi, \pi_{old}, \pi_{ref})` it is compared with
:math:`c\,\nabla_\theta D(\pi\|\pi_{ref})` for every divergence :math:`D` that
:func:`klpolicy.estimators.divergence_gradient` knows, with one constant :math:`c`
fitted over all draws: the term *follows* :math:`D` where the residual is within the
rounding of the dtype the term computes in (never a verdict on rounding).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from .. import estimators as _est
from ..core import DIVERGENCES, f_divergence, optimal_policy
from ..core.internal import ascent_growth_rate
from ..core.internal import validation as V
from ._resolution import EPS, as_dtype, output_dtype

__all__ = ["KLTermReport", "check_kl_term", "kl_term_report"]

LEVELS = ("token", "sequence")
TERM_REDUCTIONS = ("sum", "mean")
REGIMES = ("both", "on_policy", "off_policy")
# rounding multiple: residuals below K * eps * (the size of what was summed) are rounding
_K = 64.0
_TOKEN_PREFIX = "token:"


@dataclass(frozen=True)
class KLTermReport:
    """What a KL term's expected gradient follows, on- and off-policy, and where it trains to.

    Attributes
    ----------
    follows : str or None
        The divergence both regimes follow (``"reverse_kl"``, ``"forward_kl"``,
        ``"chi2"``, ..., ``"zero"``; ``"-name"`` when the term climbs it), or ``None``
        when they differ or either follows none.
    on_policy, off_policy : str or None
        The same for samples from the current policy and from an older one.
    scale, off_policy_scale : float or None
        The constant :math:`c` with :math:`G = c\\,\\nabla D` (e.g. 0.5 for
        :math:`\\chi^2/2`; :math:`1/T` for a mean over ``T`` tokens).
    mean : str or None
        The value the term estimates on-policy, :math:`\\mathbb{E}_\\pi[\\mathrm{fn}]`, as
        a combination of divergences (``"reverse_kl"``, ``"chi2 - reverse_kl"``), or
        ``None`` when it is none of them.
    fixed_point : ndarray or None
        ``level="token"``: the policy on-policy training converges to with ``reward``
        and ``beta`` (the zero of :math:`\\pi(r - \\mathbb{E}_\\pi r) - \\beta G`), or
        ``None`` where there is none.
    optimum : ndarray
        :math:`\\pi^*_\\beta` for the same problem, for reference.
    reward, beta, ref : ndarray, float, ndarray
        The problem of the fixed point.
    residuals : dict
        ``{"on_policy": {name: r}, "off_policy": {...}}``: the largest residual of each
        candidate over the draws, in units of the rounding tolerance (<= 1 matches).
    unresolved : dict
        ``{regime: names}`` where the format the term computes in cannot tell several
        candidates apart (``bfloat16``): that regime's name is ``None`` and it is no verdict.
    level, reduction, dtype : str
        The options the report was made with.
    counterexample : dict
        For each regime that follows no divergence, the draw that shows it best:
        ``pi``, ``pi_old``, ``ref`` and the term's expected gradient.
    constant : tuple of str
        The regimes in which the term does not depend on ``logp`` at all (a constant,
        ``torch.zeros_like(logp)``, a detached term: torch records no gradient): they
        follow ``"zero"``, and ``str(report)`` says why.
    """

    follows: str | None
    on_policy: str | None
    off_policy: str | None
    scale: float | None
    off_policy_scale: float | None
    mean: str | None
    fixed_point: np.ndarray | None
    optimum: np.ndarray | None
    reward: np.ndarray | None
    beta: float
    ref: np.ndarray | None
    residuals: dict = field(repr=False)
    unresolved: dict = field(default_factory=dict)
    level: str = "token"
    reduction: str = "sum"
    dtype: str = "float64"
    counterexample: dict = field(default_factory=dict, repr=False)
    constant: tuple = ()

    def __str__(self) -> str:
        def name(n, c, regime=None):
            if n is None:
                return "no divergence's gradient (biased)"
            if n == "zero" and regime in self.constant:
                return (
                    "zero: no gradient at all (the term has no gradient path to logp: "
                    "a constant or a detached term)"
                )
            if n == "zero":
                return "zero: no gradient at all"
            c = None if c is None else abs(c)
            return n + ("" if c is None or _nice(c) == "1" else f" (times {_nice(c)})")

        def line(regime, n, c):
            if regime in self.unresolved:
                return f"unresolved at {self.dtype} (cannot tell apart {', '.join(self.unresolved[regime][:4])}, ...)"
            return "follows " + name(n, c, regime)

        lines = [
            f"on-policy:  {line('on_policy', self.on_policy, self.scale)}",
            f"off-policy: {line('off_policy', self.off_policy, self.off_policy_scale)}",
            "estimates:  "
            + (
                self.mean
                if self.mean is not None
                else f"unresolved at {self.dtype}"
                if self.unresolved
                else "none of the divergences"
            ),
        ]
        if self.dtype != "float64":
            lines.append(f"computed in: {self.dtype} (residuals within its rounding pass)")
        if self.level == "token" and not self.unresolved:
            if self.fixed_point is not None:
                gap = float(np.max(np.abs(self.fixed_point - self.optimum)))
                lines.append(
                    f"fixed point (reward {_fmt(self.reward)}, beta {self.beta:g}): "
                    f"{_fmt(self.fixed_point)}; pi* = {_fmt(self.optimum)} "
                    f"(max difference {gap:.3g})"
                )
            else:
                lines.append(
                    f"fixed point (reward {_fmt(self.reward)}, beta {self.beta:g}): none "
                    "in the interior (training drives some probabilities to zero, or never settles)"
                )
        return "\n".join(lines)


def _fmt(x) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in np.ravel(x)) + "]"


def _nice(c: float) -> str:
    for den in (1, 2, 3, 4, 6, 8):
        num = round(c * den)
        if num and abs(c * den - num) <= 1e-6 * abs(c * den):
            return f"{num}" if den == 1 else f"{num}/{den}"
    return f"{c:.6g}"


# ---------------------------------------------------------------------------
# the enumeration
# ---------------------------------------------------------------------------


def _tree_logprobs(torch, logits: list, vocab: int, length: int):
    """Per-token log-probabilities of every sequence, shape (V**T, T), from level logits."""
    seqs = np.array(np.unravel_index(np.arange(vocab**length), (vocab,) * length)).T
    cols = []
    for t in range(length):
        lsm = torch.log_softmax(logits[t], dim=-1)
        idx = tuple(torch.as_tensor(seqs[:, i]) for i in range(t + 1))
        cols.append(lsm[idx])
    return torch.stack(cols, dim=1)


def _draw(rng, vocab: int, length: int, spread: float):
    """(ref, current, old) level logits: the current near the reference, the old near it."""
    shapes = [(vocab,) * (t + 1) for t in range(length)]
    ref = [rng.normal(size=s) * 0.8 for s in shapes]
    cur = [r + rng.normal(size=s) * spread for r, s in zip(ref, shapes)]
    old = [c + rng.normal(size=s) * spread for c, s in zip(cur, shapes)]
    return ref, cur, old


def _call(torch, fn, lp, olp, rlp, dtype, level: str, reduction: str):
    """The per-sample terms of ``fn`` as float64, summed or averaged over tokens."""
    tdt = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    args = [lp.to(tdt), olp.to(tdt), rlp.to(tdt)]
    if level == "token":
        args = [a[:, 0] for a in args]
    out = fn(*args)
    if not isinstance(out, torch.Tensor):
        raise ValueError(
            f"`fn` must return a torch tensor of per-sample terms; got {type(out).__name__}"
        )
    if out.is_complex():
        raise ValueError(
            f"`fn` must return real terms; got a complex tensor ({out.dtype}): its imaginary "
            "part would be dropped"
        )
    computed = output_dtype(out) or dtype
    out = out.to(torch.float64)
    n, length = lp.shape
    if out.shape == (n, length) and level == "sequence":
        out = out.sum(1) if reduction == "sum" else out.mean(1)
    if out.shape != (n,):
        # (N, 1) included: weighted by the (N,) sample weights it would broadcast to (N, N)
        want = f"({n},)" if level == "token" else f"({n},) or ({n}, {length})"
        raise ValueError(
            f"`fn` must return one term per sample, shape {want}; got shape {tuple(out.shape)}"
        )
    # the coarser of the inputs' format and the format the term came back in (.float())
    return out, (computed if EPS.get(computed, 0) > EPS[dtype] else dtype)


def _expected(torch, fn, draw, vocab, length, dtype, level, reduction, on_policy):
    """(G, size, mean value) of the term at one draw: the gradient in the level logits."""
    ref_l, cur_l, old_l = draw
    th = [torch.tensor(c, dtype=torch.float64, requires_grad=True) for c in cur_l]
    lp = _tree_logprobs(torch, th, vocab, length)
    with torch.no_grad():
        rlp = _tree_logprobs(torch, [torch.tensor(r) for r in ref_l], vocab, length)
        olp = (
            lp.detach().clone()
            if on_policy
            else _tree_logprobs(torch, [torch.tensor(o) for o in old_l], vocab, length)
        )
        mu = torch.exp(olp.sum(1))
    lp_in = lp.to(torch.float64)
    lp_in.retain_grad()
    term, computed = _call(torch, fn, lp_in, olp, rlp, dtype, level, reduction)
    if not bool(torch.all(torch.isfinite(term))):
        raise ValueError("`fn` returned a non-finite term on an ordinary policy")
    loss = torch.sum(mu * term)
    # a term that does not depend on logp (a constant, a detached term) has no graph: its
    # gradient is zero (torch.autograd.grad would raise "does not require grad")
    constant = not loss.requires_grad
    if constant:
        grads = (None,) * (len(th) + 1)
    else:
        grads = torch.autograd.grad(loss, th + [lp_in], allow_unused=True)
    g = np.concatenate(
        [
            np.zeros(c.size) if x is None else x.detach().numpy().ravel()
            for x, c in zip(grads, cur_l)
        ]
    )
    g_in = grads[-1]
    sens = 0.0 if g_in is None else float(torch.sum(torch.abs(g_in)))
    size = 2.0 * sens * length + float(torch.sum(mu * (1 + torch.abs(term.detach()))))
    return g, size * EPS[computed] / EPS[dtype], float(loss.detach()), computed, constant


def _joint(levels: list[np.ndarray]) -> np.ndarray:
    p = np.exp(levels[0] - special_logsumexp(levels[0]))
    for lv in levels[1:]:
        cond = np.exp(lv - special_logsumexp(lv))
        p = p[..., None] * cond
    return p


def special_logsumexp(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    return m + np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def _candidates(draw, vocab: int, length: int, names: tuple[str, ...]):
    """{name: (gradient in the level logits, value)} of every divergence at a draw."""
    ref_l, cur_l, _ = draw
    pj, qj = _joint(cur_l), _joint(ref_l)
    out = {}
    # joint divergences: dD/dtheta = sum_s g_s dlogP_s/dtheta, g = divergence_gradient(log P)
    seqs = np.array(np.unravel_index(np.arange(vocab**length), (vocab,) * length)).T
    for name in names:
        gj = _est.divergence_gradient(np.log(pj.ravel()), qj.ravel(), name)
        grads = []
        for t in range(length):
            pref = [tuple(s[: t + 1]) for s in seqs]
            cond = np.exp(cur_l[t] - special_logsumexp(cur_l[t]))
            gt = np.zeros_like(cur_l[t])
            # dlogP_s/dtheta_t[prefix, a] = 1[a = s_t] - pi(a | prefix)
            for s_idx, pr in enumerate(pref):
                gt[pr] += gj[s_idx]
                gt[pr[:-1]] -= gj[s_idx] * cond[pr[:-1]]
            grads.append(gt.ravel())
        value = float(f_divergence(pj.ravel(), qj.ravel(), name))
        out[name] = (np.concatenate(grads), value)
    if length > 1:  # per-token divergences, the prefix occupancy held fixed
        for name in names:
            grads, value = [], 0.0
            occ = np.ones(())
            for t in range(length):
                g = _est.divergence_gradient(
                    cur_l[t], np.exp(ref_l[t] - special_logsumexp(ref_l[t])), name
                )
                v = f_divergence(
                    np.exp(cur_l[t] - special_logsumexp(cur_l[t])),
                    np.exp(ref_l[t] - special_logsumexp(ref_l[t])),
                    name,
                )
                grads.append((occ[..., None] * g).ravel())
                value += float(np.sum(occ * v))
                occ = occ[..., None] * np.exp(cur_l[t] - special_logsumexp(cur_l[t]))
            out[_TOKEN_PREFIX + name] = (np.concatenate(grads), value)
    return out


def _classify(gs: list, sizes: list, cands: list, tol_unit: float):
    """(name, scale, residuals, worst draw, ties) of what the gradients follow.

    ``name`` is None when no candidate matches (biased) or when several do (``ties``
    lists them: the format cannot tell them apart, which is no verdict).
    """
    tol = np.array([tol_unit * s for s in sizes])
    gnorm = np.array([np.max(np.abs(g)) for g in gs])
    residuals = {"zero": float(np.max(gnorm / tol))}
    fits = []
    for name in cands[0]:
        ds = [c[name][0] for c in cands]
        num = sum(float(np.dot(g, d)) for g, d in zip(gs, ds))
        den = sum(float(np.dot(d, d)) for d in ds)
        if not den > 0:
            continue
        c = num / den
        res = np.array([np.max(np.abs(g - c * d)) for g, d in zip(gs, ds)])
        residuals[name] = float(np.max(res / tol))
        # a match must be told apart from no gradient at all (c d above the rounding)
        if (
            residuals[name] <= 1.0
            and np.max(np.abs(c) * np.array([np.max(np.abs(d)) for d in ds]) / tol) > 1
        ):
            fits.append((residuals[name], name if c > 0 else "-" + name, c))
    matches = [(residuals["zero"], "zero", None)] if residuals["zero"] <= 1.0 else []
    matches += sorted(fits)
    if len(matches) == 1:
        return matches[0][1], matches[0][2], residuals, None, ()
    worst = int(np.argmax(gnorm / tol))
    return None, None, residuals, worst, tuple(m[1] for m in matches)


def _fit_mean(values: np.ndarray, cand_values: dict, tol: np.ndarray) -> str | None:
    """The sparsest combination of divergences equal to the term's mean at every draw."""
    if np.all(np.abs(values) <= tol):
        return "zero"
    names = list(cand_values)
    for size in (1, 2):
        best = None
        for combo in combinations(names, size):
            a = np.column_stack([cand_values[n] for n in combo])
            if not np.all(np.isfinite(a)):
                continue
            coef, *_ = np.linalg.lstsq(a, values, rcond=None)
            res = np.max(np.abs(a @ coef - values) / tol)
            # simple fractions only (near the reference every divergence is chi2/2 to
            # second order, so some real combination of two always comes close); the
            # simplest first: unit coefficients, then the registry's order
            nice = [_nice(abs(c)) for c in coef]
            if not all(re.fullmatch(r"\d+(/\d+)?", x) for x in nice):
                continue
            rank = sum(x != "1" for x in nice)
            if res <= 1.0 and np.all(np.abs(coef) > 1e-9) and (best is None or rank < best[0]):
                best = (rank, combo, coef)
        if best is not None:
            parts = []
            for n, c in sorted(zip(best[1], best[2]), key=lambda nc: nc[1] < 0):
                s = _nice(abs(c))
                term = n if s == "1" else f"{s} * {n}"
                parts.append(("- " if c < 0 else "+ ") + term)
            text = " ".join(parts)
            return text[2:] if text.startswith("+ ") else "-" + text[2:]
    return None


def _fixed_point(torch, fn, ref_l, reward, beta, dtype, computed=None):
    """The attracting zero of pi (r - E r) - beta G on-policy at level "token", or None.

    None where no zero is found, or where the zero found is unstable (training moves away).
    ``dtype`` is what the term's inputs are cast to, ``computed`` the (coarser) format it
    computes in, whose rounding bounds the residual the zero can reach.
    """
    computed = dtype if computed is None else computed
    from scipy import optimize  # lazy, as in klpolicy.estimators

    n = ref_l[0].size

    def full_field(th):
        draw = ([ref_l[0]], [th], [th])
        g = _expected(torch, fn, draw, n, 1, dtype, "token", "sum", True)[0]
        pi = np.exp(th - special_logsumexp(th))
        return pi * (reward - pi @ reward) - beta * g

    def field(head):
        return full_field(np.append(head, 0.0))[:-1]

    def search_field(head):
        # the root finder's trial steps may leave the policies where a term computed in a
        # coarse format is not finite (float32: exp(-l) overflows past l = -88): such a step
        # is answered with a large residual, so the finder shrinks its step instead of
        # giving up on a zero it was approaching
        try:
            return field(head)
        except ValueError:
            return np.full(head.shape, 1e6)

    ref = np.exp(ref_l[0] - special_logsumexp(ref_l[0]))
    tol = 1e-9 if computed == "float64" else 1e3 * EPS[computed]
    options = {"xtol": 1e-13, "maxfev": 200}
    if computed != "float64":
        # the finder's forward-difference Jacobian needs a step the format resolves (its
        # default, sqrt(float64 eps) relative, differences float32 rounding: noise), and
        # short first steps: a clamped term (OpenRLHF's [-10, 10]) has no gradient where the
        # clamp binds, so near a vertex the field vanishes too, and long steps land there
        options.update(eps=EPS[computed], factor=1.0, maxfev=400)
    for p0 in (optimal_policy(ref, reward, beta), ref):  # from pi*, then from the reference
        start = np.log(p0)
        start = start[:-1] - start[-1]
        try:
            sol = optimize.root(search_field, start, method="hybr", options=options)
            resid = float(np.max(np.abs(field(sol.x))))
        except (ValueError, FloatingPointError):
            continue
        th = np.append(sol.x, 0.0)
        pi = np.exp(th - special_logsumexp(th))
        if not (np.all(np.isfinite(pi)) and resid < tol and pi.min() > 1e-9):
            continue
        growth, rounding = ascent_growth_rate(full_field, th)
        if growth > max(rounding, tol):  # a stationary point training moves away from
            continue
        return pi
    return None


def kl_term_report(
    fn: Callable[..., Any],
    *,
    level: str = "token",
    reduction: str = "sum",
    dtype: Any = None,
    outcomes: int = 6,
    vocab: int = 3,
    length: int = 3,
    draws: int = 6,
    reward: Any = None,
    beta: float = 0.5,
    seed: int = 0,
) -> KLTermReport:
    r"""Which divergence's gradient a KL term follows, on- and off-policy, exactly.

    .. math:: G = \nabla_\theta\,\mathbb{E}_{y\sim\mu}\big[\mathrm{fn}(\log\pi_\theta(y),
              \log\mu(y), \log\pi_{ref}(y))\big] \overset{?}{=} c\,\nabla_\theta D(\pi\|\pi_{ref})

    Parameters
    ----------
    fn : callable
        ``fn(logp, old_logp, ref_logp) -> terms``: differentiable torch code (the KL
        term as the trainer writes it, ``beta`` excluded) taking the log-probabilities of
        the sampled outcomes under the current policy, the sampling (old) policy and the
        reference, and returning one loss term per sample: shape ``(N,)`` for
        ``level="token"``; ``(N, T)`` per token or ``(N,)`` per sequence for
        ``level="sequence"`` (inputs of shape ``(N, T)``).
    level : {"token", "sequence"}
        A tabular policy of ``outcomes`` outcomes, or the full token tree of ``vocab``
        tokens and ``length`` positions (every sequence enumerated).
    reduction : {"sum", "mean"}
        How per-token terms are combined into a sequence's (``level="sequence"``).
    dtype : {None, "float64", "float32", "bfloat16"} or a numpy/torch dtype
        The dtype ``fn`` computes in: its inputs are cast to it, and residuals within its
        rounding are never a verdict.
    outcomes, vocab, length : int
        The size of the policy (token) or the tree (sequence).
    draws : int
        How many random :math:`(\pi, \pi_{old}, \pi_{ref})` (default 6).
    reward : array_like, optional
        The reward of the fixed point (``level="token"``); default evenly spaced in
        ``[-1, 1]``.
    beta : float
        The KL coefficient of the fixed point (default 0.5).
    seed : int
        Seeds the draws (the report is deterministic).

    Returns
    -------
    KLTermReport
        ``.follows``, ``.on_policy``, ``.off_policy``, their scales, ``.mean``,
        ``.fixed_point`` and ``.optimum``; ``str(report)`` is what the command line prints.

    Raises
    ------
    ValueError
        For invalid options, an ``fn`` that does not return a torch tensor of one term
        per sample, or non-finite terms.

    Notes
    -----
    The candidates are every divergence of
    :data:`klpolicy.DIVERGENCES` (but the alpha family), of the joint law of the sequences,
    and at ``level="sequence"`` also ``"token:NAME"``: the sum over positions of the
    divergence of the next-token law, each prefix weighted by its probability under
    the current policy held fixed (what per-token k2 or k3 in the loss follows, which
    is not the sequence's divergence: it drops the credit a token gets for the
    divergence of what follows it). A constant :math:`c` is fitted over all draws;
    the term follows ``D`` when every residual is within
    :math:`64\,\varepsilon\,S` with :math:`S` the size of what was summed (the
    expected absolute sensitivities and terms) and :math:`\varepsilon` the dtype's
    unit roundoff. The draws keep :math:`|\log\pi - \log\pi_{ref}|` moderate (a few
    tenths), where clamps such as verl's and OpenRLHF's ``[-10, 10]`` are inactive.

    References
    ----------
    .. [1] Tang and Munos, "On a few pitfalls in KL divergence gradient estimation for
       RL", 2025, arXiv:2506.09477.
    .. [2] DeepSeek-AI, "DeepSeek-V3.2", 2025, arXiv:2512.02556 (the unbiased k3).

    Examples
    --------
    >>> import torch
    >>> from klpolicy.testing import kl_term_report
    >>> def k3(logp, ref_logp):
    ...     return torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    >>> def grpo_kl(logp, old_logp, ref_logp):  # TRL 1.16.0's default (1.10.0 and later)
    ...     return k3(logp, ref_logp) * torch.exp(logp - old_logp)  # use_bias_correction_kl
    >>> report = kl_term_report(grpo_kl)
    >>> report.on_policy, report.off_policy, report.mean
    ('reverse_kl', 'reverse_kl', 'reverse_kl')
    >>> def grpo_kl_old(logp, old_logp, ref_logp):  # TRL up to 1.9.2: no ratio
    ...     return k3(logp, ref_logp)
    >>> report = kl_term_report(grpo_kl_old)
    >>> report.on_policy, report.off_policy, report.mean
    ('forward_kl', None, 'reverse_kl')

    TRL 1.16.0's ``GRPOTrainer`` multiplies k3 by ``coef_1 = exp(logp - old_logp)``
    when ``GRPOConfig.use_bias_correction_kl`` (default ``True`` since TRL 1.10.0;
    ``trl/trainer/grpo_trainer.py`` lines 3095-3105, ``grpo_config.py`` line 972); its
    ``beta`` defaults to 0.0 (no KL term; ``grpo_config.py`` line 681).
    """
    return _analyse(
        fn, level, reduction, dtype, outcomes, vocab, length, draws, reward, beta, seed
    )[0]


def _analyse(*args):
    """(report, draws, {regime: term gradients}, candidates, tolerances per draw)."""
    torch = _torch()
    # the tensors are tiny: one thread (several contend for microseconds of work); restored
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _analyse_inner(torch, *args)
    finally:
        torch.set_num_threads(threads)


def _analyse_inner(
    torch, fn, level, reduction, dtype, outcomes, vocab, length, draws, reward, beta, seed
):
    level = V.as_choice("level", level, LEVELS)
    reduction = V.as_choice("reduction", reduction, TERM_REDUCTIONS)
    dt = as_dtype(dtype)
    if not callable(fn):
        raise ValueError(f"`fn` must be callable; got {V.describe(fn)}")
    outcomes = V.as_count("outcomes", outcomes, lo=2, hi=64)
    vocab = V.as_count("vocab", vocab, lo=2, hi=8)
    length = V.as_count("length", length, lo=1, hi=5)
    draws = V.as_count("draws", draws, lo=2, hi=200)
    beta = V.as_positive_scalar("beta", beta)
    seed = V.as_count("seed", seed, lo=0, hi=2**32 - 1)
    if level == "token":
        vocab, length = outcomes, 1
    if reward is None:
        reward = np.linspace(1.0, -1.0, vocab)
    reward = V.as_rewards("reward", reward).astype(np.float64)
    if reward.shape != (vocab,) or (level == "sequence" and reward.ndim != 1):
        raise ValueError(f"`reward` must have shape ({vocab},); got shape {reward.shape}")
    rng = np.random.default_rng(seed)
    names = _candidate_names()
    spread = 0.35
    pool = [_draw(rng, vocab, length, spread) for _ in range(draws)]
    cands = [_candidates(d, vocab, length, names) for d in pool]
    tol_unit = _K * EPS[dt]
    reported = dt
    verdict, counter, grads, tols, constant = {}, {}, {}, {}, []
    means = None
    for regime, on in (("on_policy", True), ("off_policy", False)):
        runs = [_expected(torch, fn, d, vocab, length, dt, level, reduction, on) for d in pool]
        gs, sizes = [r[0] for r in runs], [r[1] for r in runs]
        for r in runs:  # report the coarsest format the term computed in
            reported = r[3] if EPS[r[3]] > EPS[reported] else reported
        grads[regime], tols[regime] = gs, [tol_unit * z for z in sizes]
        if all(r[4] for r in runs):
            constant.append(regime)
        verdict[regime] = _classify(gs, sizes, cands, tol_unit)
        if on:  # the sizes scaled to each run's format, and unscaled (in the inputs' format)
            raw = [r[1] * EPS[dt] / EPS[r[3]] for r in runs]
            means = (np.array([r[2] for r in runs]), np.array(sizes), np.array(raw))
        i = verdict[regime][3] if verdict[regime][0] is None else 0
        if _K * EPS[reported] > 1e-3:  # bfloat16: the divergences differ by less than that
            names_ = (*_candidate_names(), "zero")
            verdict[regime] = (None, None, verdict[regime][2], i, names_)
        counter[regime] = _counterexample(pool[i], gs[i], level)
    values, sizes, raw = means
    coarse = _K * EPS[reported] > 1e-3  # no verdict on the mean or the fixed point either
    mean = (
        None
        if coarse
        else _fit_mean(
            values,
            {n: np.array([c[n][1] for c in cands]) for n in cands[0]},
            # values are often formed in float32 inside float64 code (a detached .float() estimate
            # in a straight-through term): identify the mean to float32 resolution at least.
            # ``sizes`` already carry the rounding of the format each run computed in, so the
            # float32 floor is applied to the unscaled size (not to the scaled one: that counted
            # float32's rounding twice, a tolerance 2^29 too wide that called every float32
            # term's mean "zero")
            np.maximum(tol_unit * sizes, _K * EPS["float32"] * raw),
        )
    )
    on_name, off_name = verdict["on_policy"][0], verdict["off_policy"][0]
    follows = on_name if on_name == off_name else None
    fp = opt = ref = None
    if level == "token":
        ref_l = [rng.normal(size=vocab) * 0.5]
        ref = np.exp(ref_l[0] - special_logsumexp(ref_l[0]))
        opt = optimal_policy(ref, reward, beta)
        # a term with no gradient leaves pure reward maximisation: the greedy vertex
        skip = on_name == "zero" or coarse
        # the zero is resolved to the rounding of the format the term computes in (reported):
        # a float32 term (OpenRLHF's .float()) cannot reach a float64 residual
        fp = None if skip else _fixed_point(torch, fn, ref_l, reward, beta, dt, reported)
    report = KLTermReport(
        follows=follows,
        on_policy=on_name,
        off_policy=off_name,
        scale=verdict["on_policy"][1],
        off_policy_scale=verdict["off_policy"][1],
        mean=mean,
        fixed_point=fp,
        optimum=opt,
        reward=reward,
        beta=beta,
        ref=ref,
        residuals={k: v[2] for k, v in verdict.items()},
        unresolved={k: v[4] for k, v in verdict.items() if v[4]},
        level=level,
        reduction=reduction,
        dtype=reported,
        counterexample=counter,
        constant=tuple(constant),
    )
    return report, pool, grads, cands, tols


def _counterexample(draw, g, level: str) -> dict:
    ref_l, cur_l, old_l = draw
    if level == "token":
        sm = lambda x: np.exp(x - special_logsumexp(x))  # noqa: E731
        return {"pi": sm(cur_l[0]), "pi_old": sm(old_l[0]), "ref": sm(ref_l[0]), "gradient": g}
    return {
        "pi": _joint(cur_l).ravel(),
        "pi_old": _joint(old_l).ravel(),
        "ref": _joint(ref_l).ravel(),
        "gradient": g,
    }


def _torch():
    try:
        import torch
    except ModuleNotFoundError as exc:  # pragma: no cover - torch is an extra
        raise ImportError(
            "klpolicy.testing.kl_term_report differentiates your term with torch, which is "
            "not installed. Install it with `pip install klpolicy[torch]`."
        ) from exc
    return torch


def _candidate_names() -> tuple[str, ...]:
    """Every divergence of the registry but the alpha family (its orders repeat the others:
    2 is chi2/2, 1/2 four times Hellinger, -1 the reverse chi2/2)."""
    return tuple(n for n, row in DIVERGENCES.items() if not row.takes_alpha)


def _as_expect(expect: Any, level: str = "sequence") -> str:
    """The divergence name inside ``expect`` ("-", "token:" stripped), or a ValueError.

    ``"token:NAME"`` (the per-token divergence) exists at ``level="sequence"`` only: at
    ``level="token"`` there is one position, where it is ``NAME`` itself.
    """
    known = {*_candidate_names(), "zero"}
    base = expect.removeprefix("-").removeprefix(_TOKEN_PREFIX) if isinstance(expect, str) else ""
    if base not in known:
        raise ValueError(
            f"`expect` must be a divergence name ({', '.join(sorted(known))}, or 'token:NAME', "
            f"'-NAME'); got {expect!r}"
        )
    if level == "token" and _TOKEN_PREFIX in expect:
        plain = expect.replace(_TOKEN_PREFIX, "")
        raise ValueError(
            f"`expect`={expect!r} is a per-token divergence of a sequence (level='sequence'); "
            f"at level='token' (one position) it is {plain!r}"
        )
    return base


def _describe(name: str | None) -> str:
    if name is None:
        return "no divergence's gradient (it is biased)"
    if name == "zero":
        return "no gradient at all (zero)"
    if name.startswith("-"):
        return f"the gradient of {name[1:]} with the sign flipped (it climbs it)"
    if name.startswith(_TOKEN_PREFIX):
        return f"the per-token {name[len(_TOKEN_PREFIX) :]} (prefix occupancy held fixed)"
    return f"the gradient of {name}"


def check_kl_term(
    fn: Callable[..., Any],
    *,
    expect: str,
    regime: str = "both",
    level: str = "token",
    reduction: str = "sum",
    dtype: Any = None,
    draws: int = 6,
    seed: int = 0,
) -> None:
    """Assert that a KL term's expected gradient follows ``expect``'s; else say what it follows.

    Parameters
    ----------
    fn : callable
        As in :func:`kl_term_report`.
    expect : str
        A divergence name (``"reverse_kl"``, ``"forward_kl"``, ``"chi2"``, ...,
        ``"token:reverse_kl"`` at ``level="sequence"``) or ``"zero"``. A positive
        constant factor is allowed (a mean over tokens, chi2/2).
    regime : {"both", "on_policy", "off_policy"}
        Where it must hold: samples from the current policy, from an older one, or both.
    level, reduction, dtype, draws, seed
        As in :func:`kl_term_report`.

    Returns
    -------
    None
        When it follows ``expect`` in ``regime``.

    Raises
    ------
    AssertionError
        Saying in one sentence what it follows instead, with the smallest counterexample
        (a draw on the smallest policy that shows it).
    ValueError
        For invalid options.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.testing import check_kl_term
    >>> def k2(logp, old_logp, ref_logp):
    ...     return 0.5 * (logp - ref_logp) ** 2
    >>> check_kl_term(k2, expect="reverse_kl", regime="on_policy")  # passes
    """
    regime = V.as_choice("regime", regime, REGIMES)
    level = V.as_choice("level", level, LEVELS)
    base = _as_expect(expect, level)
    args = (reduction, dtype)
    sizes = (3, 4, 6) if level == "token" else (6,)
    regimes = ("on_policy", "off_policy") if regime == "both" else (regime,)
    for n in sizes:  # the smallest policy that shows it (at 2 outcomes every gradient is parallel)
        report, pool, grads, cands, tols = _analyse(
            fn, level, *args, n, 3, 3, draws, None, 0.5, seed
        )
        wrong = [
            r
            for r in regimes
            if getattr(report, r) != expect and expect not in report.unresolved.get(r, ())
        ]
        if wrong:
            break
    if not wrong:
        return None
    r = wrong[0]
    got = getattr(report, r)
    where = "on-policy" if r == "on_policy" else "off-policy (samples from an older policy)"
    name = getattr(fn, "__name__", type(fn).__name__)
    sentence = (
        f"check_kl_term({name}): {where} its expected gradient follows {_describe(got)}, "
        f"not {_describe(expect).removeprefix('the gradient of ')}"
    )
    gs = grads[r]
    if base == "zero":
        want = [np.zeros_like(g) for g in gs]
    else:
        sign = -1.0 if expect.startswith("-") else 1.0
        ds = [sign * c[expect.removeprefix("-")][0] for c in cands]
        den = sum(float(np.dot(d, d)) for d in ds)
        c = max(sum(float(np.dot(g, d)) for g, d in zip(gs, ds)) / den, 0.0) if den else 0.0
        want = [c * d for d in ds]
    i = int(np.argmax([np.max(np.abs(g - w)) / t for g, w, t in zip(gs, want, tols[r])]))
    ce = _counterexample(pool[i], gs[i], level)
    detail = ", ".join(f"{k}={_fmt(v)}" for k, v in ce.items() if k != "gradient")
    tail = (
        f"; expected gradient of the term {_fmt(gs[i])}, the nearest multiple of "
        f"{expect}'s {_fmt(want[i])}"
    )
    raise AssertionError(f"{sentence}.\nCounterexample: {detail}{tail}")


def cli_kl_term(
    fn: Callable[..., Any],
    *,
    expect: str | None = None,
    regime: str = "both",
    level: str = "token",
    reduction: str = "sum",
    dtype: Any = None,
    draws: int = 6,
    seed: int = 0,
) -> None:
    """Print :func:`kl_term_report`; with ``expect``, then run :func:`check_kl_term`.

    What ``klpolicy check kl-term module:function [--expect NAME]`` runs.
    """
    kw = dict(level=level, reduction=reduction, dtype=dtype, draws=draws, seed=seed)
    if expect is not None:
        _as_expect(expect, V.as_choice("level", level, LEVELS))
    print(kl_term_report(fn, **kw))
    if expect is not None:
        check_kl_term(fn, expect=expect, regime=regime, **kw)


cli_kl_term.__name__ = "check_kl_term"
cli_kl_term.prints_report = True  # type: ignore[attr-defined]
