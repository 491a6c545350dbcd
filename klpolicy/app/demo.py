"""The worked example and the headline figures of ``klpolicy demo``.

:func:`worked_example` prints the KL penalty's worked example (two responses of
reference probability 0.5, rewards 1 and 0: the optimum puts 0.88 on the better
one at beta = 0.5 and 0.62 at beta = 2). :func:`write_figures` writes the
headline figures as PNG files, drawing each with :mod:`klpolicy.plotting` on
a small exact problem; figures that need a module that is not installed are
left out.

Importing this module does not import matplotlib; :func:`write_figures` does.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..core import beta_for_kl, max_kl, optimal_kl, optimal_policy

__all__ = [
    "FIGURES",
    "WORKED_REF",
    "WORKED_REWARD",
    "available_figures",
    "controller_problem",
    "frontier_problem",
    "overoptimization_problem",
    "token_problem",
    "worked_example",
    "write_figures",
]

#: The worked example: two responses of reference probability 0.5 ...
WORKED_REF = (0.5, 0.5)
#: ... with rewards 1 and 0.
WORKED_REWARD = (1.0, 0.0)


def worked_example(file: TextIO | None = None) -> None:
    """Print the worked example of the KL penalty (what ``klpolicy demo`` prints).

    Parameters
    ----------
    file : text stream, optional
        Where to print (default ``sys.stdout``).

    Examples
    --------
    >>> from klpolicy.app.demo import worked_example
    >>> worked_example()  # doctest: +ELLIPSIS
    The KL penalty's worked example
    ...
      beta = 0.5 : 0.8808  (= e^2 / (e^2 + 1))
      beta = 2   : 0.6225  (= e^0.5 / (e^0.5 + 1))
    ...
    """
    from .tables import beta_label as _beta_label
    from .tables import check_stream, solve_table
    from .tables import print_table as _print_table

    check_stream("file", file)
    file = file or sys.stdout
    ref, reward = list(WORKED_REF), list(WORKED_REWARD)

    def say(*lines: str) -> None:
        for line in lines:
            print(line, file=file)

    say(
        "The KL penalty's worked example",
        "===============================",
        "Two responses, each of reference probability 0.5; rewards 1 and 0.",
        "The optimal policy pi* = ref * exp(r / beta) / Z puts on the better response:",
        "",
    )
    for b in (0.5, 2.0):
        p = float(optimal_policy(ref, reward, b)[0])
        say(f"  beta = {b:<4g}: {p:.4f}  (= e^{1 / b:g} / (e^{1 / b:g} + 1))")
    say("", "beta acts as a temperature:")
    for b in (0.0, 0.1, 0.5, 2.0, 10.0, math.inf):
        p = float(optimal_policy(ref, reward, b)[0])
        kl = float(optimal_kl(ref, reward, b))
        say(f"  beta = {_beta_label(b):>4}: pi*(better) = {p:.4f}   KL = {kl:.4f} nats")
    say(
        "",
        "The largest reachable KL (greedy, beta -> 0) is "
        f"log 2 = {float(max_kl(ref, reward)):.4f} nats.",
    )
    b = float(beta_for_kl(ref, reward, 0.1))
    say(f"A KL budget of 0.1 nats is spent at beta = {b:.6f}.", "")
    _print_table(solve_table(ref, reward, [0.5, 2.0]), file=file)


# --------------------------------------------------------------------------- problems


def frontier_problem() -> tuple[np.ndarray, np.ndarray]:
    """The frontier figure's problem: five responses, the best one rare under the reference.

    Returns
    -------
    ref : ndarray, shape (5,)
        The reference policy.
    reward : ndarray, shape (5,)
        The rewards, 0 to 1 in steps of 0.25.

    Examples
    --------
    >>> from klpolicy.app.demo import frontier_problem
    >>> ref, reward = frontier_problem()
    >>> float(ref.sum()), float(reward.max())
    (1.0, 1.0)
    """
    ref = np.array([0.35, 0.3, 0.2, 0.1, 0.05])
    reward = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    return ref, reward


def token_problem(beta: float = 0.5) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The token-KL figure's problem, solved: a 3-token vocabulary, responses of 5 tokens.

    The reference conditionals are drawn from a seeded Dirichlet(1, 1, 1); the
    reward is 1 for each of the first two tokens that is token 0 plus 2 if the
    last token is token 2, so that the KL gathers at the opening and at the end.

    Parameters
    ----------
    beta : float, optional
        KL coefficient of the soft Bellman solution.

    Returns
    -------
    policy : list of ndarray
        The optimal token tree (``[t]`` of shape ``(3,)*(t+1)``).
    ref : list of ndarray
        The reference token tree, of the same shapes.

    Examples
    --------
    >>> from klpolicy.app.demo import token_problem
    >>> from klpolicy.sequences import per_token_kl
    >>> policy, ref = token_problem()
    >>> per_token_kl(policy, ref).shape
    (5,)
    """
    from ..sequences import soft_bellman

    v, t_len = 3, 5
    gen = np.random.default_rng(7)
    ref = [gen.dirichlet(np.ones(v), size=(v,) * t) for t in range(t_len)]
    grid = np.indices((v,) * t_len)
    reward = (grid[0] == 0) + (grid[1] == 0) + 2.0 * (grid[-1] == 2)
    return soft_bellman(ref, reward.astype(float), beta).policy, ref


def controller_problem() -> dict[str, Any]:
    """The controller figure's closed loop: TRL's adaptive rule chasing 0.1 nats.

    Returns
    -------
    dict
        ``ref``, ``reward``, ``target``, ``init_kl_coef``, ``horizon``,
        ``steps`` and ``lag`` for :func:`klpolicy.control.simulate`.

    Examples
    --------
    >>> from klpolicy.app.demo import controller_problem
    >>> controller_problem()["target"]
    0.1
    """
    return {
        "ref": [0.5, 0.3, 0.2],
        "reward": [1.0, 0.0, 0.5],
        "target": 0.1,
        "init_kl_coef": 1.0,
        "horizon": 3.0,
        "steps": 60,
        "lag": 0.7,
    }


# --------------------------------------------------------------------------- figures


def _has(module: str) -> bool:
    return importlib.util.find_spec(f"klpolicy.{module}") is not None


def _beta_sweep(ax) -> None:
    from .. import plotting

    plotting.beta_sweep(
        WORKED_REF, WORKED_REWARD, labels=(r"better ($r=1$)", r"worse ($r=0$)"), ax=ax
    )
    ax.set_title(r"Worked example: $\beta$ as a temperature")


def _frontier(ax) -> None:
    from .. import plotting

    ref, reward = frontier_problem()
    bon = (1, 2, 4, 8, 16, 32) if _has("best_of_n") else None
    plotting.frontier(ref, reward, best_of_n=bon, ax=ax)


def _token_kl(ax) -> None:
    from .. import plotting
    from ..sequences import per_token_kl

    beta = 0.5
    policy, ref = token_problem(beta)
    kl = per_token_kl(policy, ref)
    plotting.token_kl(kl, ax=ax)
    ax.set_title(
        rf"Where the KL sits: $\pi^*_\beta$ at $\beta$ = {beta:g} (total {kl.sum():.3g} nats)"
        "\n3-token vocabulary, 5 tokens; reward +1 for token 0 at each of the first two"
        "\npositions, +2 for token 2 last; reference conditionals Dirichlet(1, 1, 1), seed 7",
        fontsize=13,
    )


def _controller(ax) -> None:
    from .. import plotting
    from ..control import AdaptiveKLController, simulate

    c = controller_problem()
    ctl = AdaptiveKLController(c["init_kl_coef"], target=c["target"], horizon=c["horizon"])
    tr = simulate(ctl, c["ref"], c["reward"], steps=c["steps"], lag=c["lag"])
    plotting.controller_trace(tr, ax=ax)
    step = 0.2 / c["horizon"]  # TRL's rule: beta *= 1 + clip(KL / target - 1, +-0.2) / horizon
    ax.set_title(
        f"Adaptive KL controller (TRL's rule), target {c['target']:g} nats\n"
        f"horizon {c['horizon']:g}: " + r"$\beta$" + f" moves at most {100 * step:.3g}% a step; "
        f"lag {c['lag']:g}: the policy moves {100 * (1 - c['lag']):.0f}% of the way to "
        + r"$\pi^*_\beta$"
        + " a step",
        fontsize=13,
    )


def overoptimization_problem() -> dict[str, Any]:
    """The over-optimisation figure's sweep: a proxy that over-rates rare outcomes, optimised exactly.

    The beta grid is uniform in :math:`d = \\sqrt{\\mathrm{KL}}` (0.03 to 3.6), so the
    curves are smooth along the axis they are drawn against.

    Returns
    -------
    dict
        ``curve`` (:class:`klpolicy.overoptimization.OptimizationCurve` of the
        sweep on ``make_problem("rare_errors", size=5000, error=2.0, seed=0)``),
        ``proxy_gain`` (proxy reward minus its reference mean) and ``fit``
        (Gao et al.'s RL form fitted to the gold gain).

    Examples
    --------
    >>> from klpolicy.app.demo import overoptimization_problem
    >>> out = overoptimization_problem()
    >>> bool(out["curve"].gold_gain.max() > out["curve"].gold_gain[-1])  # gold peaks, then falls
    True
    """
    from ..best_of_n import overoptimization as oo

    prob = oo.make_problem("rare_errors", size=5000, error=2.0, seed=0)
    d = np.linspace(0.03, 3.6, 120)
    betas = np.asarray(beta_for_kl(prob.ref, prob.proxy, d**2), dtype=float)
    curve = oo.closed_form_sweep(prob.ref, prob.proxy, prob.gold, betas)
    proxy_gain = curve.proxy_reward - float(np.dot(prob.ref, prob.proxy))
    return {
        "curve": curve,
        "proxy_gain": proxy_gain,
        "fit": oo.fit_gao_rl(curve.d, curve.gold_gain),
    }


def _overoptimization(ax) -> None:
    from .. import plotting

    o = overoptimization_problem()
    c, fit = o["curve"], o["fit"]

    def gao(d):
        return d * (fit.a - fit.b * np.log(d))

    ax.figure.set_size_inches(7.5, 7.2)
    plotting.kl_budget(
        c.d,
        c.gold_gain,
        o["proxy_gain"],
        fits={r"Gao et al. fit $d\,(a - b\log d)$": gao},
        proxy_axis="panel",
        ax=ax,
    )
    ax.set_ylabel("gold reward gained\n(reward units)")
    ax.proxy_ax.set_ylabel("proxy reward gained\n(reward units)")
    ax.set_title("Over-optimisation: the proxy over-rates rare outcomes")


#: Figure name -> (drawing function, klpolicy modules it needs).
FIGURES: dict[str, tuple[Callable[[Any], None], tuple[str, ...]]] = {
    "beta_sweep": (_beta_sweep, ()),
    "frontier": (_frontier, ()),
    "token_kl": (_token_kl, ("sequences",)),
    "controller_trace": (_controller, ("control",)),
    "overoptimization": (_overoptimization, ("overoptimization",)),
}


def available_figures() -> list[str]:
    """Names of the headline figures whose modules are installed, in drawing order.

    Returns
    -------
    list of str
        The figure names, in drawing order.

    Examples
    --------
    >>> from klpolicy.app.demo import available_figures
    >>> available_figures()[:2]
    ['beta_sweep', 'frontier']
    """
    return [name for name, (_, needs) in FIGURES.items() if all(_has(m) for m in needs)]


def write_figures(out: str | Path, names: Sequence[str] | None = None) -> list[Path]:
    """Write the headline figures as PNG files into ``out`` (created if missing).

    Parameters
    ----------
    out : str or path
        Output directory.
    names : sequence of str, optional
        Which figures (default :func:`available_figures`); one file
        ``<name>.png`` each.

    Returns
    -------
    list of pathlib.Path
        The files written, in order.

    Raises
    ------
    ValueError
        For an ``out`` that is not a path or is a file, and an unknown figure name.
    ModuleNotFoundError
        When matplotlib is not installed.

    Examples
    --------
    >>> import tempfile
    >>> from klpolicy.app.demo import write_figures
    >>> with tempfile.TemporaryDirectory() as d:
    ...     [p.name for p in write_figures(d, ["beta_sweep"])]
    ['beta_sweep.png']
    """
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")

    from ..plotting import save_figure

    if not isinstance(out, (str, os.PathLike)) or not str(out):
        raise ValueError(
            f"`out` must be the path of a folder (a str or a pathlib.Path); got {out!r:.60}"
        )
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"`out` must be a folder; {str(out_dir)!r} is a file")
    if isinstance(names, str):
        raise ValueError(f"`names` must be a list of figure names; got the string {names!r}")
    chosen = available_figures() if names is None else list(names)
    for name in chosen:
        if name not in FIGURES:
            raise ValueError(
                f"`names` has an unknown figure {name!r}; choose from {', '.join(FIGURES)}"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in chosen:
        paths.append(save_figure(FIGURES[name][0], out_dir / f"{name}.png"))
    return paths
