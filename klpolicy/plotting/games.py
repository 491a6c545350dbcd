"""Figures of preference games (:mod:`klpolicy.preference.games`): Nash-MD on the simplex."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .figures import _axes, _lecture, _style

__all__ = ["nash_md_trajectory"]

#: The corners of the 3-outcome simplex in the plane (an equilateral triangle).
_CORNERS = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])


def _plane(p: np.ndarray) -> np.ndarray:
    """Barycentric coordinates on the simplex -> points in the plane."""
    return np.asarray(p, dtype=np.float64) @ _CORNERS


@_lecture
def nash_md_trajectory(
    preferences: ArrayLike,
    tau: float,
    eta: float,
    *,
    mu: ArrayLike | None = None,
    init: ArrayLike | None = None,
    steps: int = 60,
    labels: Sequence[str] = ("rock", "scissors", "paper"),
    ax=None,
):
    r"""A Nash-MD trajectory on the 3-outcome simplex, with the equilibrium and the path's limit.

    Draws :func:`klpolicy.preference.nash_md_path` (one marker per step) in the triangle
    whose corners are the three outcomes, the regularised equilibrium
    :math:`\pi^*_\tau` (:func:`~klpolicy.preference.nash_equilibrium`), the constant-step
    limit :math:`\pi_\eta` (:func:`~klpolicy.preference.nash_md_rate`, which differs from
    :math:`\pi^*_\tau` by :math:`O(\eta)`) and the reference :math:`\mu`. On an intransitive
    game the path spirals in: the title gives the exact rate
    :math:`(1-\eta\tau)\sqrt{1+\eta^2\omega^2}` and the rotation :math:`\omega`.

    Parameters
    ----------
    preferences : array_like, shape (3, 3)
        As in :func:`~klpolicy.preference.nash_equilibrium`; three outcomes.
    tau, eta, mu, init
        As in :func:`~klpolicy.preference.nash_md_path` (``0 < eta tau < 1``).
    steps : int, optional
        Nash-MD steps drawn (default 60).
    labels : sequence of 3 str, optional
        The outcomes' names at the corners (default rock, scissors, paper: outcome 0 beats 1
        beats 2 beats 0 in the usual matrix).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (the simplex in barycentric coordinates).

    Raises
    ------
    ValueError
        As :func:`~klpolicy.preference.nash_md_path` and
        :func:`~klpolicy.preference.nash_md_rate`; for a game without three outcomes, or
        ``labels`` that are not three names.

    References
    ----------
    .. [1] Munos et al., "Nash Learning from Human Feedback", 2023, arXiv:2312.00886,
       section 6 (Nash-MD).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import nash_md_trajectory
    >>> rps = [[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]]
    >>> ax = nash_md_trajectory(rps, 0.2, 1.0, init=[0.8, 0.15, 0.05])
    >>> ax.get_lines()[1].get_label()
    'Nash-MD, $\\eta$ = 1'
    """
    from .. import preference as pref

    p = np.asarray(pref.nash_equilibrium(preferences, tau, mu=mu).policy)  # validates
    if p.shape != (3,):
        raise ValueError(
            f"`preferences` must be a game of 3 outcomes for the simplex figure; got {p.size}"
        )
    if isinstance(labels, str) or len(labels) != 3 or not all(isinstance(s, str) for s in labels):
        raise ValueError(f"`labels` must be three names; got {labels!r}")
    path = pref.nash_md_path(preferences, tau, eta, steps, mu=mu, init=init)
    rate = pref.nash_md_rate(preferences, tau, eta, mu=mu)
    ref = np.full(3, 1 / 3) if mu is None else np.asarray(mu, dtype=np.float64)
    ax = _axes(ax)
    tri = np.vstack([_CORNERS, _CORNERS[:1]])
    ax.plot(tri[:, 0], tri[:, 1], color="#555555", linewidth=1.2, label="_simplex")
    for corner, name, (dx, dy, ha) in zip(
        _CORNERS, labels, [(-0.02, -0.05, "right"), (0.02, -0.05, "left"), (0.0, 0.03, "center")]
    ):
        ax.text(corner[0] + dx, corner[1] + dy, name, ha=ha, va="center")
    xy = _plane(path)
    ax.plot(
        xy[:, 0],
        xy[:, 1],
        marker="o",
        markersize=6,
        linewidth=1.4,
        label=f"Nash-MD, $\\eta$ = {float(eta):g}",
        **_style(0),
    )
    star = _plane(p)
    ax.plot(
        *star,
        marker="*",
        markersize=18,
        linestyle="none",
        color=_style(1)["color"],
        label=r"equilibrium $\pi^*_\tau$",
    )
    lim = _plane(rate.fixed_point)
    ax.plot(
        *lim,
        marker="o",
        markersize=12,
        markerfacecolor="none",
        markeredgewidth=2,
        linestyle="none",
        color=_style(2)["color"],
        label=r"Nash-MD's limit $\pi_\eta$",
    )
    m = _plane(ref)
    ax.plot(
        *m, marker="s", markersize=9, linestyle="none", color=_style(3)["color"], label=r"$\mu$"
    )
    ax.set_aspect("equal")
    ax.set_xlim(-0.12, 1.12)
    ax.set_ylim(-0.12, 0.98)
    ax.set_axis_off()  # a diagram: the triangle is the coordinate system
    ax.set_title(
        f"Nash-MD, $\\tau$ = {float(tau):g}: rate {rate.rate:.4f} per step, "
        f"$\\omega$ = {rate.frequency:.3f}"
    )
    ax.legend(loc="upper left", fontsize="small")
    return ax
