"""Compute the tables of ``docs/cheatsheet.md`` with klpolicy.

Every entry of the cheat sheet comes from a library call on a small problem, not from
memory; ``tests/test_cheatsheet.py`` recomputes the tables and fails when the page differs.
Run from the repository root to print them::

    python docs/make_cheatsheet.py

Estimator x placement: the expected on-policy gradient of each KL term
(``klpolicy.estimators.expected_gradient``) is matched against the ascent gradient of
``E_pi[r] - beta D`` for D the reverse KL, the forward KL or nothing, written out in the
logits (``pi (log(pi/ref) - KL)``, ``pi - ref``, ``0``), and the fixed point is
``klpolicy.estimators.fixed_point`` compared with the closed form and the greedy limit.

Estimator x placement x sampling: the same gradients with the samples drawn from another
policy ``mu`` (``expected_gradient(..., sampler=, ratio=, ratio_clip=)``) at three random
(policy, sampler) pairs: the KL term's part ``(g(beta=0) - g(beta)) / beta`` is fitted by one
constant times ``klpolicy.estimators.divergence_gradient`` of each divergence of
``klpolicy.DIVERGENCES`` (the candidates of ``klpolicy.testing.kl_term_report``), and
``fixed_point`` with the same arguments says where training lands, described by fitting its
log-odds (``pi*`` at some ``beta'``) or its forward-KL stationarity condition. The sampling
settings block gives what the logged k1 averages when the engine samples from
``klpolicy.sampling.sampler_law`` instead of the policy.

Pair losses: the implied reward of each loss is ``beta (g_1 - g_2)`` at its population
optimum (``klpolicy.preference.population_optimum``) on two outcomes with Bradley-Terry
preferences from the reward difference 1, at two values of ``beta``; a value that does not
move with ``beta`` is a fixed implied reward, and the optimum is then ``pi*`` at
``beta' = beta / x*``.
"""

from __future__ import annotations

import numpy as np

import klpolicy as kp
from klpolicy import estimators as E
from klpolicy.preference import LOSSES, bradley_terry, population_optimum

#: the problem of the estimator table (tutorial 03's), at a policy that is not special
REF = np.array([0.4, 0.3, 0.2, 0.1])
REWARD = np.array([0.0, 0.5, 1.0, 2.0])
BETA = 0.5
LOGITS = np.log([0.1, 0.2, 0.3, 0.4])


def _follows(estimator: str, placement: str) -> str:
    pi = np.exp(LOGITS) / np.exp(LOGITS).sum()
    bare = E.objective_gradient(LOGITS, REF, REWARD, 0.0)
    candidates = {
        # \Vert, not \|: a bar would end the markdown table's cell
        r"reverse KL $\mathrm{KL}(\pi\Vert\pi_{ref})$": pi * (np.log(pi / REF) - kp.kl_divergence(pi, REF)),
        r"forward KL $\mathrm{KL}(\pi_{ref}\Vert\pi)$": pi - REF,
        "nothing (expected gradient 0)": np.zeros_like(pi),
    }  # fmt: skip
    g = E.expected_gradient(LOGITS, REF, REWARD, BETA, estimator=estimator, placement=placement)
    hits = [name for name, d in candidates.items() if np.allclose(g, bare - BETA * d, atol=1e-14)]
    return hits[0] if hits else "no divergence: the term penalises rare responses most"


#: where a search for an interior stationary point starts (logits; the last one is fixed at 0):
#: mass on the worst response, where the k2/k3-in-reward points lie, then a few spread ones
_STARTS = (np.log([0.8, 0.1, 0.07, 0.03]), np.zeros(4), np.log([0.1, 0.2, 0.3, 0.4]))


def unstable_interior_point(estimator: str, placement: str, **kw) -> np.ndarray | None:
    """An interior policy where the exact expected gradient vanishes (a root in the free
    logits) and that ``fixed_point_stability`` calls unstable, or None if the search finds
    none. ``fixed_point`` refuses these combinations; training leaves such a point."""
    from scipy.optimize import root

    def ascent(z):
        th = np.append(z, 0.0)
        return E.expected_gradient(th, REF, REWARD, BETA, estimator=estimator,
                                   placement=placement, **kw)[:-1]  # fmt: skip

    for start in _STARTS:
        z = root(ascent, start[:-1] - start[-1], tol=1e-14).x
        pi = np.exp(np.append(z, 0.0) - max(z.max(), 0.0))
        pi /= pi.sum()
        if np.abs(ascent(z)).max() < 1e-12 and pi.min() > 1e-9:
            st = E.fixed_point_stability(pi, REF, REWARD, BETA, estimator=estimator,
                                         placement=placement, **kw)  # fmt: skip
            if not bool(st.stable):
                return pi
    return None


def _lands(estimator: str, placement: str) -> str:
    try:
        fp = E.fixed_point(REF, REWARD, BETA, estimator=estimator, placement=placement)
    except ValueError:
        if unstable_interior_point(estimator, placement) is not None:
            return (
                "no *stable* fixed point: an interior stationary point exists but training "
                "leaves it, and rare responses are driven to 0 (`gradient_flow` simulates it)"
            )
        return "no fixed point: rare responses are driven to 0 (`gradient_flow` simulates it)"
    if np.allclose(fp, kp.optimal_policy(REF, REWARD, BETA), atol=1e-12):
        return r"$\pi^*_\beta = \pi_{ref}e^{r/\beta}/Z$"
    if np.allclose(fp, kp.optimal_policy(REF, REWARD, 0.0), atol=1e-12):
        return r"greedy $\pi^*_0$ (no regularisation at all)"
    lam = REWARD + BETA * REF / fp  # the forward-KL stationarity condition, one number
    if np.ptp(lam) < 1e-9:
        return r"$\beta\pi_{ref}/(\lambda - r)$, the forward-KL optimum (heavier tails)"
    return "another point"  # pragma: no cover - the table test fails on it


def estimator_table() -> list[str]:
    rows = [
        "| estimator | placement | its expected gradient follows | on-policy training lands on |",
        "|---|---|---|---|",
    ]
    for est in ("k1", "k2", "k3"):
        for place in ("reward", "loss"):
            name = f"$k_{est[1]}$"
            rows.append(f"| {name} | {place} | {_follows(est, place)} | {_lands(est, place)} |")
    return rows


#: how a trainer draws and weights the KL term: (row label, sampled off-policy, ratio, clip)
SAMPLINGS = (
    ("on-policy", False, "none", None),
    ("off-policy, no ratio", True, "none", None),
    ("off-policy, detached ratio", True, "detached", None),
    ("off-policy, differentiable ratio", True, "differentiable", None),
    (r"off-policy, differentiable ratio clipped to $[0.8, 1.2]$", True, "differentiable", (0.8, 1.2)),
)  # fmt: skip
#: the estimators of the sampling table (k3+: verl's straight-through, value k3, gradient k2)
SAMPLING_ESTIMATORS = ("k1", "k2", "k3", "k3+")
#: a fixed behaviour policy (a rollout engine's, or the data's) for the last column
MU = np.log([0.3, 0.2, 0.25, 0.25])
#: the divergences a term may follow (kl_term_report's candidates: the alpha family repeats them)
CANDIDATES = tuple(n for n in kp.DIVERGENCES if n != "alpha")
_SHOW = {
    "reverse_kl": r"reverse KL $\mathrm{KL}(\pi\Vert\pi_{ref})$",
    "forward_kl": r"forward KL $\mathrm{KL}(\pi_{ref}\Vert\pi)$",
    "chi2": r"$\chi^2(\pi\Vert\pi_{ref})$",
    "reverse_chi2": r"$\chi^2(\pi_{ref}\Vert\pi)$",
}


def _draws(n: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    """(policy logits, sampler logits) pairs, the sampler well away from the policy."""
    rng = np.random.default_rng(20261201)
    out = []
    for _ in range(n):
        th = rng.normal(size=REF.size)
        out.append((th, th + rng.normal(scale=0.7, size=REF.size)))
    return out


def _fraction(c: float) -> str:
    """c as a small fraction (1, 2, 1/2, ...) or with four digits."""
    for den in (1, 2, 3, 4):
        if abs(c * den - round(c * den)) < 1e-9 and round(c * den) != 0:
            num = round(c * den)
            return str(num) if den == 1 else f"{num}/{den}"
    return f"{c:.4f}"


def term_follows(estimator: str, placement: str, off_policy: bool, ratio: str, clip) -> str:
    """The divergence whose gradient the KL term's expected gradient is a constant times."""
    kl_parts, cands = [], []
    for th, ph in _draws():
        kw = dict(estimator=estimator, placement=placement, ratio=ratio, ratio_clip=clip)
        kw["sampler"] = ph if off_policy else None
        g0 = E.expected_gradient(th, REF, REWARD, 0.0, **kw)
        g1 = E.expected_gradient(th, REF, REWARD, BETA, **kw)
        kl_parts.append((g0 - g1) / BETA)  # the term's own gradient, descent on it
        cands.append({n: E.divergence_gradient(th, REF, n) for n in CANDIDATES})
    size = max(float(np.max(np.abs(g))) for g in kl_parts)
    if size < 1e-13:
        return "nothing (expected gradient 0)"
    for name in CANDIDATES:
        ds = [c[name] for c in cands]
        c = sum(float(g @ d) for g, d in zip(kl_parts, ds)) / sum(float(d @ d) for d in ds)
        if max(float(np.max(np.abs(g - c * d))) for g, d in zip(kl_parts, ds)) < 1e-10 * size:
            scale = _fraction(c)
            shown = _SHOW.get(name, f"`{name}`")
            return shown if scale == "1" else rf"${scale}\times$ {shown}"
    return "no divergence (biased)"


def reward_gradient_exact(placement: str, off_policy: bool, ratio: str, clip) -> bool:
    """Whether the reward's part of the gradient is the true pi (r - E_pi r) at every draw."""
    for th, ph in _draws():
        pi = np.exp(th - th.max())
        pi /= pi.sum()
        g0 = E.expected_gradient(
            th, REF, REWARD, 0.0, estimator="k1", placement=placement,
            sampler=ph if off_policy else None, ratio=ratio, ratio_clip=clip,
        )  # fmt: skip
        if not np.allclose(g0, pi * (REWARD - pi @ REWARD), rtol=0, atol=1e-14):
            return False
    return True


def describe_point(fp: np.ndarray) -> str:
    """Name a policy: greedy, pi*_beta' (log-odds affine in r) or the forward-KL point at beta'
    (ref/pi affine in r, decreasing), with beta'/beta as a fraction; else its distance to pi*."""
    if np.allclose(fp, kp.optimal_policy(REF, REWARD, 0.0), rtol=0, atol=1e-12):
        return r"greedy $\pi^*_0$"
    design = np.stack([REWARD, np.ones_like(REWARD)], axis=1)
    for target, family in ((np.log(fp / REF), "reverse"), (REF / fp, "forward")):
        coef = np.linalg.lstsq(design, target, rcond=None)[0]
        if np.max(np.abs(design @ coef - target)) < 1e-9 * np.max(np.abs(target)):
            # reverse: log(pi/ref) = r/beta' - log Z; forward: ref/pi = (lambda - r)/beta'
            scale = _fraction((1 / coef[0] if family == "reverse" else -1 / coef[0]) / BETA)
            at = {"1": r"\beta", "1/2": r"\beta/2"}.get(
                scale, rf"({scale})\beta" if "/" in scale else rf"{scale}\beta"
            )
            if family == "reverse":
                return rf"$\pi^*_{{{at}}}$"
            return rf"the forward-KL point at ${at}$"
    kl = float(kp.kl_divergence(fp, kp.optimal_policy(REF, REWARD, BETA)))
    return rf"another point, $\mathrm{{KL}}(\cdot\Vert\pi^*_\beta) = {kl:.4f}$"


def lands(estimator: str, placement: str, ratio: str, clip, sampler=None) -> str:
    """Where training converges (``fixed_point``), or why it does not."""
    kw = dict(estimator=estimator, placement=placement, sampler=sampler, ratio=ratio)
    try:
        fp = E.fixed_point(REF, REWARD, BETA, ratio_clip=clip, **kw)
    except ValueError as exc:
        if "every policy is stationary" in str(exc):
            return "nowhere: the gradient is zero"
        if "is unstable" in str(exc):
            return "an unstable stationary point: training leaves it"
        if unstable_interior_point(estimator, placement, sampler=sampler, ratio=ratio,
                                   ratio_clip=clip) is not None:  # fmt: skip
            return "an unstable stationary point: training leaves it"
        return "no interior fixed point (the support collapses)"
    if sampler is not None and clip is not None and placement == "reward":
        w = fp / np.exp(sampler - np.log(np.exp(sampler).sum()))
        if np.all((w < clip[0]) | (w > clip[1])):
            # in the reward a clipped ratio passes no gradient: zero gradient, not a point
            return r"stalls where every ratio $\pi/\mu$ leaves the clip range"
    if not np.allclose(fp, kp.optimal_policy(REF, REWARD, 0.0), rtol=0, atol=1e-12):
        # the library's stability verdict (fixed_point checks its numerical points itself;
        # the closed forms are checked here too)
        if not E.fixed_point_stability(fp, REF, REWARD, BETA, ratio_clip=clip, **kw).stable:
            return "an unstable stationary point: training leaves it"
    return describe_point(fp)


def sampling_table() -> list[str]:
    rows = [
        "| estimator | placement | samples and ratio | the KL term's expected gradient follows "
        "| reward gradient | lands on (rollouts refreshed) | lands on (fixed sampler $\\mu$) |",
        "|---|---|---|---|---|---|---|",
    ]
    for est in SAMPLING_ESTIMATORS:
        name = f"`{est}`" if est.endswith("+") else f"$k_{est[1]}$"
        for place in ("reward", "loss"):
            for label, off, ratio, clip in SAMPLINGS:
                follows = term_follows(est, place, off, ratio, clip)
                exact = "exact" if reward_gradient_exact(place, off, ratio, clip) else "biased"
                refreshed = lands(est, place, ratio, clip)
                fixed = lands(est, place, ratio, clip, sampler=MU) if off else "-"
                rows.append(
                    f"| {name} | {place} | {label} | {follows} | {exact} | {refreshed} | {fixed} |"
                )
    return rows


#: the sampling settings of the block: (label, sampler_law keywords)
SETTINGS = (
    ("$T = 1$ (the policy itself)", {}),
    ("$T = 0.7$", {"temperature": 0.7}),
    ("$T = 1.5$", {"temperature": 1.5}),
    ("$T = 3$", {"temperature": 3.0}),
    ("$T = 10$", {"temperature": 10.0}),
    ("top-$k$ 2", {"top_k": 2}),
    ("top-$k$ 3", {"top_k": 3}),
    ("$T = 1.5$, top-$k$ 3", {"temperature": 1.5, "top_k": 3}),
)


def settings_table() -> list[str]:
    """What the logged k1 (and k3) average when the engine samples from s, for pi = pi*_beta."""
    from klpolicy.sampling import logged_kl_moments, sampler_law

    pi = kp.optimal_policy(REF, REWARD, BETA)
    true = float(kp.kl_divergence(pi, REF))
    rows = [
        r"| sampling | $\mathrm{KL}(s\Vert\pi_{ref})$ | $\mathrm{KL}(s\Vert\pi)$ "
        r"| logged $k_1$: mean | logged $k_3$: mean | $\mathrm{KL}(\pi\Vert\pi_{ref})$ |",
        "|---|---|---|---|---|---|",
    ]
    for label, kw in SETTINGS:
        s = sampler_law(np.log(pi), **kw)
        k1_mean = logged_kl_moments([pi], [REF], [s])[0]
        k3_mean = logged_kl_moments([pi], [REF], [s], estimator="k3")[0]
        to_ref = float(kp.kl_divergence(s, REF))
        to_pi = float(kp.kl_divergence(s, pi))
        rows.append(
            f"| {label} | {to_ref:.4f} | {to_pi:.4f} | {k1_mean:.4f} | {k3_mean:.4f} | {true:.4f} |"
        )
    return rows


#: the pair losses of the table, with the options tutorial 11 uses
LOSS_ROWS = {
    "sigmoid (DPO)": ("sigmoid", {}),
    r"sigmoid, $\epsilon = 0.1$ (cDPO)": ("sigmoid", {"label_smoothing": 0.1}),
    r"robust, $\epsilon = 0.1$": ("robust", {"label_smoothing": 0.1}),
    "hinge (SLiC)": ("hinge", {}),
    r"ipo ($\tau = \beta$)": ("ipo", {}),
    "exo_pair": ("exo_pair", {}),
    "discopop": ("discopop", {}),
    "nca_pair": ("nca_pair", {}),
    "bco_pair": ("bco_pair", {}),
    "sppo_hard": ("sppo_hard", {}),
}


def _implied(name: str, opts: dict, beta: float, gap: float = 1.0) -> float:
    ref, P = np.array([0.5, 0.5]), bradley_terry([gap, 0.0])
    o = population_optimum(ref, P, beta, loss=name, **opts)
    return float(beta * (np.log(o[0] / ref[0]) - np.log(o[1] / ref[1])))


def loss_table() -> list[str]:
    rows = [
        r"| loss | implied reward gap $x^*$: $\beta = 0.1$, true gap 1 | $\beta = 1$, gap 1 "
        r"| $\beta = 1$, gap 2 | the population optimum is |",
        "|---|---|---|---|---|",
    ]
    for label, (name, opts) in LOSS_ROWS.items():
        lo, hi, two = (_implied(name, opts, b, g) for b, g in ((0.1, 1), (1, 1), (1, 2)))
        if abs(lo - hi) > 1e-9:
            lands = r"not $\pi^*$ of a fixed reward: the implied reward moves with $\beta$"
        elif abs(hi - 1) < 1e-9 and abs(two - 2) < 1e-9:
            lands = r"$\pi^*_\beta$ itself: the implied reward is the reward"
        elif abs(hi - 1) < 1e-9:
            lands = (
                r"$\pi^*_\beta$ only when the gap is 1: the margin is fixed whatever the "
                r"preference, $\pi^*_{\beta'}$ at $\beta' = \beta\,(r_1 - r_2)/x^*$"
            )
        else:
            lands = rf"$\pi^*_{{\beta'}}$ at $\beta' = \beta\,(r_1 - r_2)/x^*$ ($= {1 / hi:.3f}\,\beta$ for gap 1)"
        rows.append(f"| {label} | {lo:.4f} | {hi:.4f} | {two:.4f} | {lands} |")
    for name, row in LOSSES.items():
        if row.batch_dependent:
            rows.append(f"| {name} | - | - | - | no per-pair optimum (the loss sorts the batch) |")
        elif name == "sigmoid_norm":  # the optimum needs a length per outcome
            rows.append(
                f"| {name} | - | - | - | lengths $L$: "
                r"$\pi_{ref}e^{L(x^* + c)/\beta}$, $c$ normalising; "
                r"$\pi^*_{\beta/L}$ for equal lengths |"
            )
        elif name not in {n for n, _ in LOSS_ROWS.values()}:
            try:
                _implied(name, {}, 1.0)
            except ValueError:
                rows.append(
                    f"| {name} | - | - | - | no population optimum (see the loss's notes) |"
                )
    return rows


def gradient_noise_at_optimum() -> tuple[float, float]:
    """Per-sample variance of the REINFORCE gradient in the logits at pi* (one sample, exact).

    k1 in the reward subtracts the baseline from the whole return r - beta log(pi/ref), which
    at pi* is the constant beta log Z: every sample's gradient is 0. k2 in the loss subtracts
    the baseline from r alone and adds beta l grad l, so a sample's gradient is
    (r - E r - beta l)(e_y - pi): mean zero, variance positive.
    """
    pi = kp.optimal_policy(REF, REWARD, BETA)
    ell = np.log(pi / REF)
    eye = np.eye(len(pi))

    def variance(h):
        return float(sum(pi[y] * np.sum((h[y] * (eye[y] - pi)) ** 2) for y in range(len(pi))))

    ret = REWARD - BETA * ell
    return variance(ret - pi @ ret), variance(REWARD - pi @ REWARD - BETA * ell)


if __name__ == "__main__":
    print("\n".join(estimator_table()), end="\n\n")
    print("\n".join(sampling_table()), end="\n\n")
    print("\n".join(settings_table()), end="\n\n")
    print("\n".join(loss_table()), end="\n\n")
    k1_reward, k2_loss = gradient_noise_at_optimum()
    print(
        f"gradient variance at pi*: k1 in the reward {k1_reward:.3g}, k2 in the loss {k2_loss:.4f}"
    )
