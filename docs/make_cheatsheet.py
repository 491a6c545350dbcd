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


def _lands(estimator: str, placement: str) -> str:
    try:
        fp = E.fixed_point(REF, REWARD, BETA, estimator=estimator, placement=placement)
    except ValueError:
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
    print("\n".join(loss_table()), end="\n\n")
    k1_reward, k2_loss = gradient_noise_at_optimum()
    print(
        f"gradient variance at pi*: k1 in the reward {k1_reward:.3g}, k2 in the loss {k2_loss:.4f}"
    )
