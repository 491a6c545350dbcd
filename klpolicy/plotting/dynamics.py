"""Figures of :mod:`klpolicy.dynamics`: where trainer rules land, and the path they take."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .. import core as _cf
from ..core.internal import validation as V
from .figures import _MARKERS, _at_most_one_colour_each, _axes, _lecture, _one_problem, _style

__all__ = ["landing_points", "training_path"]

#: The rules :func:`landing_points` draws by default: GRPO as TRL 1.16.0 runs it with a KL
#: term (group std), without the std (pi* at beta G/(G-1)), and RLOO (pi* at beta).
DEFAULT_RULES: tuple[tuple[str, str, dict], ...] = (
    ("GRPO, G=2, no std", "grpo", {"num_generations": 2, "scale_rewards": "none"}),
    ("GRPO, G=8, group std", "grpo", {"num_generations": 8}),
    ("RLOO, G=2", "rloo", {}),
)


@_lecture
def landing_points(
    ref: ArrayLike,
    reward: ArrayLike,
    *,
    betas: ArrayLike | None = None,
    rules: Sequence[tuple[str, str, dict]] = DEFAULT_RULES,
    ax=None,
):
    r"""Where each trainer rule lands for each configured beta, beside pi*'s frontier.

    Plots :math:`(\mathrm{KL}(\pi\|\pi_{ref}), \mathbb{E}_\pi r)` of
    :func:`klpolicy.dynamics.landing_point` at each configured beta, one series per rule,
    over the exact frontier of :math:`\pi^*_\beta`; the pi* point of the same configured
    beta is drawn hollow, so the gap between a rule's marker and its hollow twin is what
    the rule does to the beta you set.

    Parameters
    ----------
    ref, reward : array_like, shape (n,)
        One prompt's reference and rewards.
    betas : array_like, optional
        The configured betas (default ``geomspace(0.1, 4, 6)``).
    rules : sequence of (label, rule, options)
        The rules drawn (default: GRPO with ``num_generations=2, scale_rewards="none"``,
        GRPO with ``num_generations=8`` and TRL's group std, RLOO).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax``, or a new figure's).

    Raises
    ------
    ValueError
        For invalid inputs (as :func:`klpolicy.dynamics.landing_point`), or more rules than
        one axes tells apart by colour.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import landing_points
    >>> ax = landing_points([0.5, 0.3, 0.2], [1.0, 0.0, 0.5], betas=[0.5, 1.0])
    >>> ax.get_xlabel()
    'KL($\\pi$ || ref) (nats)'
    """
    from .. import dynamics

    ref_a, rew_a = _one_problem(ref, reward)
    grid = np.geomspace(0.1, 4, 6) if betas is None else V.check_beta_values("betas", betas).ravel()
    _at_most_one_colour_each("rules", rules)
    curve = _cf.frontier(ref_a, rew_a, np.geomspace(1e-2, 1e2, 300))
    ax = _axes(ax)
    ax.plot(
        curve.kl,
        curve.expected_reward,
        color="black",
        linewidth=3.5,
        alpha=0.35,
        label=r"$\pi^*_\beta$ frontier",
    )
    star = _cf.frontier(ref_a, rew_a, grid)
    ax.plot(
        star.kl,
        star.expected_reward,
        linestyle="none",
        marker="o",
        markersize=9,
        markerfacecolor="none",
        color="#555555",
        label=r"$\pi^*$ at the configured $\beta$",
    )
    for b, x, y in zip(grid, star.kl, star.expected_reward):
        ax.annotate(
            f"$\\beta$={b:g}",
            (x, y),
            xytext=(-8, 6),
            textcoords="offset points",
            ha="right",
            fontsize="small",
        )
    for i, (label, rule, options) in enumerate(rules):
        style = _style(i)
        pts = [dynamics.landing_point(rule, ref_a, rew_a, b, **options) for b in grid]
        for p, x, y in zip(pts, star.kl, star.expected_reward):
            if p.policy is not None:  # from pi* of the configured beta to where the rule lands
                ax.plot(
                    [x, p.kl],
                    [y, float(p.policy @ rew_a)],
                    color=style["color"],
                    linewidth=1.0,
                    alpha=0.6,
                )
        kl = [p.kl for p in pts if p.policy is not None]
        er = [float(p.policy @ rew_a) for p in pts if p.policy is not None]
        ax.plot(
            kl,
            er,
            marker=_MARKERS[i % 7],
            linestyle="none",
            markersize=8,
            color=style["color"],
            label=label,
        )
    ax.set_xlabel(r"KL($\pi$ || ref) (nats)")
    ax.set_ylabel(r"$\mathbb{E}_\pi[r]$ where training lands (reward units)")
    ax.set_title(r"Where each trainer lands, for $\beta$ = " + ", ".join(f"{b:g}" for b in grid))
    ax.legend(loc="lower right")
    return ax


@_lecture
def training_path(path, *, ax=None):
    r"""A mean-field path: KL to the reference and the fitted beta, step by step.

    Draws ``path.kl_to_ref`` (left axis) and ``path.beta_fit`` (right axis, log scale) of a
    :class:`klpolicy.dynamics.Trajectory`, with the landing point's KL as a dashed line.

    Parameters
    ----------
    path : klpolicy.dynamics.Trajectory
        From :func:`klpolicy.dynamics.trajectory`.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax``, or a new figure's).

    Raises
    ------
    ValueError
        If ``path`` is not a trajectory.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.dynamics import trajectory
    >>> from klpolicy.plotting import training_path
    >>> tr = trajectory("grpo", [0.5, 0.5], [1.0, 0.0], 0.5, steps=20, lr=1.0,
    ...                 num_generations=2, scale_rewards="none")
    >>> training_path(tr).get_xlabel()
    'step'
    """
    from ..dynamics import Trajectory

    if not isinstance(path, Trajectory):
        raise ValueError(
            f"`path` must be a klpolicy.dynamics.Trajectory; got {type(path).__name__}"
        )
    steps = np.arange(path.kl_to_ref.size)
    ax = _axes(ax)
    ax.plot(steps, path.kl_to_ref, label=r"KL($\pi$ || ref)", **_style(0))
    if path.landing.policy is not None:
        ax.axhline(
            path.landing.kl,
            color="black",
            linestyle="--",
            linewidth=1.5,
            label="KL at the landing point",
        )
    ax.set_xlabel("step")
    ax.set_ylabel(r"KL($\pi$ || ref) (nats)")
    twin = ax.twinx()
    finite = np.isfinite(path.beta_fit) & (path.beta_fit > 0)
    twin.plot(steps[finite], path.beta_fit[finite], label=r"$\beta_{fit}$", **_style(1))
    twin.set_yscale("log")
    twin.set_ylabel(r"$\beta_{fit}$ (log scale)")
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="center right")
    ax.set_title(f"The mean-field path of {path.landing.rule}")
    return ax
