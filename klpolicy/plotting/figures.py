"""Figures for lectures and self-study (matplotlib, imported lazily).

Every function draws on ``ax`` when given and otherwise on a new figure, and
returns the :class:`matplotlib.axes.Axes`. Colours come from the Okabe-Ito
palette (safe for the common forms of colour blindness) and every curve also
differs in line style or marker, so the figures survive black-and-white
printing. Sizes are chosen to stay readable on a projected slide.

``import klpolicy`` never imports this module; ``import klpolicy.plotting``
imports matplotlib.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator
from numpy.typing import ArrayLike

from .. import core as _cf
from ..core.internal import validation as V

__all__ = [
    "MAX_SERIES",
    "OKABE_ITO",
    "beta_sweep",
    "controller_trace",
    "estimator_histograms",
    "fixed_points",
    "frontier",
    "highlighted_actions",
    "kl_budget",
    "lecture_style",
    "soft_best_of_n",
    "token_kl",
]

#: The Okabe-Ito colour-blind-safe palette (black first).
OKABE_ITO = (
    "#000000",
    "#E69F00",
    "#56B4E9",
    "#009E73",
    "#F0E442",
    "#0072B2",
    "#D55E00",
    "#CC79A7",
)
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_STYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)))
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def lecture_style() -> dict[str, Any]:
    """The rcParams for slides: large fonts, thick lines, the Okabe-Ito cycle.

    Every text is at least 14 pt at the figure's own size (7.5 x 4.8 inches, about
    half a 16:9 slide), labels use mathtext (real subscripts: ``$\\pi^*_\\beta$``),
    and the lines differ in style as well as colour.

    Use as ``with matplotlib.rc_context(lecture_style()): ...``, or for a whole
    notebook ``matplotlib.pyplot.rcParams.update(lecture_style())``.

    Returns
    -------
    dict
        The rcParams, for ``matplotlib.rc_context``.

    Examples
    --------
    >>> from klpolicy.plotting import lecture_style
    >>> lecture_style()["font.size"], lecture_style()["legend.fontsize"]
    (14, 14)
    """
    from cycler import cycler

    return {
        "font.size": 14,
        "axes.titlesize": 16,
        "axes.labelsize": 16,
        "xtick.labelsize": 14,
        "ytick.labelsize": 14,
        "legend.fontsize": 14,
        "legend.title_fontsize": 14,
        "figure.titlesize": 17,
        "mathtext.fontset": "dejavusans",
        "lines.linewidth": 2.2,
        "lines.markersize": 7,
        # 7 colours against 5 line styles: the first 35 curves differ in colour or style
        "axes.prop_cycle": cycler(color=list(_COLOURS[:7]) * 5)
        + cycler(linestyle=list(_STYLES[:5]) * 7),
        "axes.grid": True,
        "grid.alpha": 0.3,
        "figure.dpi": 110,
        "savefig.dpi": 150,
        "savefig.bbox": "tight",
    }


def _axes(ax):
    """``ax``, or a new lecture-size Axes (call under :func:`lecture_style`, as ``_lecture`` does)."""
    if ax is not None:
        return ax
    _, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained")
    return ax


_F = TypeVar("_F", bound=Callable[..., Any])


def _lecture(fn: _F) -> _F:
    """Draw the whole figure under :func:`lecture_style` when the function makes its own Axes.

    Text and twin axes read the rcParams when they are created, so the style
    must be in force for the whole call, not just while the figure is made.
    With a user's ``ax`` the user's style is left alone.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, ax: Any = None, **kwargs: Any) -> Any:
        if ax is not None:
            return fn(*args, ax=ax, **kwargs)
        with matplotlib.rc_context(lecture_style()):
            out = fn(*args, ax=None, **kwargs)
            # The first figure of a session may load the backend, which can switch on
            # interactive mode (Jupyter's inline backend does); leaving the context would
            # switch it off again and later figures would not show.
            interactive = matplotlib.is_interactive()
        matplotlib.interactive(interactive)
        return out

    return wrapper  # type: ignore[return-value]


def _at_most_one_colour_each(name: str, series: Sequence[Any]) -> None:
    """Refuse more series than one axes tells apart by colour (beside a black reference)."""
    if len(series) > MAX_SERIES:
        raise ValueError(
            f"`{name}` must hold at most {MAX_SERIES} entries, one colour each in one axes; "
            f"got {len(series)}: draw them over several axes"
        )


def _style(i: int) -> dict[str, Any]:
    return {"color": _COLOURS[i % len(_COLOURS)], "linestyle": _STYLES[i % len(_STYLES)]}


#: At most this many actions are drawn one by one in a figure of one series per action;
#: with more, the figure draws a few and summarises the rest (one colour per series).
MAX_SERIES = 6
#: Up to this many positions get a bar each in :func:`token_kl`; longer, a filled step curve.
_POSITION_BARS = 200
#: Probability entries computed at once when a figure sweeps beta over many actions.
_BLOCK = 1 << 21


def _one_d(name: str, x: ArrayLike) -> None:
    """Refuse anything but one 1-D array, naming ``name`` (a figure shows one problem)."""
    try:
        shape = np.shape(x)
    except (TypeError, ValueError):  # ragged or not numbers: the core validators name it
        return
    if len(shape) != 1:
        raise ValueError(
            f"`{name}` must be one problem's 1-D array (shape (V,)); got shape {shape}"
        )


def _one_problem(ref: ArrayLike, reward: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``ref`` and ``reward`` as one 1-D problem (float64), or a ValueError naming the argument."""
    _one_d("ref", ref)
    _one_d("reward", reward)
    ref_a = np.asarray(_cf.optimal_policy(ref, reward, np.inf), dtype=float)  # validates both
    return ref_a, np.asarray(reward, dtype=float)


def _labels(labels: Sequence[str] | None, size: int) -> list[str] | None:
    if labels is None:
        return None
    if not all(isinstance(s, str) for s in labels):
        raise ValueError(f"`labels` must be a sequence of strings; got {V.describe(labels)}")
    labels = list(labels)
    if len(labels) != size:
        raise ValueError(
            f"`labels` must hold one label per action ({size}); got {len(labels)} labels"
        )
    return labels


def highlighted_actions(ref: ArrayLike, reward: ArrayLike, top: int | None = None) -> np.ndarray:
    """The actions a figure draws one by one: the best, the reference's most likely, the next best.

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
        One problem.
    top : int, optional
        How many actions (1 to :data:`MAX_SERIES`); by default all of them when
        ``V <= MAX_SERIES``, else 4.

    Returns
    -------
    ndarray of int
        Indices in decreasing order of reward: the action of highest reward inside the
        reference's support (ties: the likelier under the reference), the reference's
        most likely action, then the next highest rewards inside the support.

    Raises
    ------
    ValueError
        For an invalid problem or ``top`` outside 1 to :data:`MAX_SERIES`.

    Examples
    --------
    >>> from klpolicy.plotting import highlighted_actions
    >>> highlighted_actions([0.1, 0.6, 0.1, 0.1, 0.1], [0.0, 0.1, 0.9, 0.3, 0.2], top=3).tolist()
    [2, 3, 1]
    """
    ref_a, rew_a = _one_problem(ref, reward)
    size = ref_a.size
    if top is None:
        top = size if size <= MAX_SERIES else 4
    top = V.as_count("top", top, lo=1)
    if top > MAX_SERIES:
        raise ValueError(
            f"`top` must be at most {MAX_SERIES}, the series one axes tells apart by colour; "
            f"got {top}"
        )
    support = np.flatnonzero(ref_a > 0)
    # highest reward first, the likelier under ref on ties (a stable order)
    order = support[np.lexsort((-ref_a[support], -rew_a[support]))]
    chosen = [int(order[0])]
    mode = int(np.argmax(ref_a))
    if top > 1 and mode != chosen[0]:
        chosen.append(mode)
    for i in order[1:]:
        if len(chosen) >= min(top, size):
            break
        if int(i) not in chosen:
            chosen.append(int(i))
    if len(chosen) < min(top, size):  # actions off the support come last
        chosen += [i for i in range(size) if i not in chosen][: min(top, size) - len(chosen)]
    return np.array(sorted(chosen, key=lambda i: (-rew_a[i], -ref_a[i], i)), dtype=np.intp)


def _sweep_summary(ref_a, rew_a, grid, idx):
    """pi*_beta on ``grid`` for the actions ``idx``, and the others' total, min and max.

    Computed in blocks of betas, so memory stays near ``_BLOCK`` entries at any V.
    """
    n, size = grid.size, ref_a.size
    sel = np.empty((n, idx.size))
    rest = np.ones(size, dtype=bool)
    rest[idx] = False
    n_rest = int(rest.sum())
    total = np.empty(n)
    lo = np.empty(n)
    hi = np.empty(n)
    step = max(1, _BLOCK // size)
    for s in range(0, n, step):
        pi = np.asarray(_cf.optimal_policy(ref_a, rew_a, grid[s : s + step, None]), dtype=float)
        sel[s : s + step] = pi[:, idx]
        if n_rest:
            others = pi[:, rest] if n_rest < size else pi
            total[s : s + step] = others.sum(axis=1)
            lo[s : s + step] = others.min(axis=1)
            hi[s : s + step] = others.max(axis=1)
    return sel, (total, lo, hi) if n_rest else None


def _declutter(ax, texts, pad: float = 2.0, up: bool = True) -> None:
    """Move the offset-point annotations ``texts`` up (or down) until no two overlap."""
    if len(texts) < 2:
        return
    fig = ax.figure
    try:
        renderer = fig.canvas.get_renderer()
    except AttributeError:  # a backend without a renderer to measure with
        return
    placed = []
    for t in texts:
        for _ in range(12):
            box = t.get_window_extent(renderer).expanded(1.0, 1.0)
            clash = next((b for b in placed if box.overlaps(b)), None)
            if clash is None:
                break
            x, y = t.get_position() if t.get_anncoords() == "offset points" else (0, 0)
            gap = (clash.y1 - box.y0) if up else (box.y1 - clash.y0)
            shift = gap * 72.0 / fig.dpi + pad
            t.set_position((x, y + shift if up else y - shift))
        placed.append(t.get_window_extent(renderer))


@_lecture
def beta_sweep(
    ref: ArrayLike = (0.5, 0.5),
    reward: ArrayLike = (1.0, 0.0),
    *,
    betas: ArrayLike | None = None,
    labels: Sequence[str] | None = None,
    mark: Sequence[float] = (0.5, 2.0),
    top: int | None = None,
    ax=None,
):
    r"""Probability of each action under :math:`\pi^*_\beta` against :math:`\beta` (log axis).

    .. math:: \pi^*_\beta(y) = \pi_{ref}(y) e^{r(y)/\beta} / Z_\beta

    Up to :data:`MAX_SERIES` actions get a curve each; with more, the figure draws
    the best action, the reference's most likely one and the next best rewards
    (:func:`highlighted_actions`), and summarises the others by their total
    probability and the band between their smallest and largest single
    probability. Any number of actions draws in about the same time (1e5 actions
    in seconds: ``benchmarks/plot_bench.py``).

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
        One problem; the defaults are the worked example (0.5/0.5, rewards 1/0).
    betas : array_like, optional
        The grid (default ``geomspace(1e-2, 1e2, 400)``; 100 to 400 betas past
        25,000 actions, so the cost stays near 10^7 probabilities).
    labels : sequence of str, optional
        One label per action (default ``"y=i (r=...)"``); only the highlighted
        actions' labels are shown.
    mark : sequence of float, optional
        Betas to mark with a dot and the probability of the best action (the
        worked example's 0.88 at 0.5 and 0.62 at 2 by default).
    top : int, optional
        How many actions to draw one by one (1 to :data:`MAX_SERIES`; default all
        when ``V <= MAX_SERIES``, else 4).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax``, or a new figure's).

    Raises
    ------
    ValueError
        For invalid ``ref``, ``reward`` or ``betas`` (as :func:`klpolicy.optimal_policy`),
        a 2-D ``ref`` or ``reward``, ``labels`` of the wrong length or a bad ``top``.

    Notes
    -----
    The left end shows the greedy limit (all mass on the best reward in the
    support), the right end the reference: beta is a temperature. The
    probabilities are computed in blocks of betas, so memory stays bounded at any
    number of actions.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import beta_sweep
    >>> ax = beta_sweep()
    >>> ax.get_xscale()
    'log'
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> ax = beta_sweep(rng.dirichlet(np.ones(1000)), rng.standard_normal(1000))
    >>> len(ax.get_legend().get_texts())  # 4 actions, the others' total and their band
    6
    """
    ref_a, rew_a = _one_problem(ref, reward)
    # the default grid thins to 100 betas (25 a decade) for many actions: the cost is V * betas
    n_default = int(np.clip(10_000_000 // ref_a.size, 100, 400))
    grid = (
        np.geomspace(1e-2, 1e2, n_default)
        if betas is None
        else V.check_beta_values("betas", betas).reshape(-1)
    )
    names = _labels(labels, ref_a.size)
    mark = [float(b) for b in V.check_beta_values("mark", mark).reshape(-1)] if len(mark) else []
    idx = highlighted_actions(ref_a, rew_a, top)
    best, mode = int(idx[0]), int(np.argmax(ref_a))
    if idx.size == ref_a.size:  # every action drawn: in their own order
        idx = np.arange(ref_a.size)
    unique_mode = np.count_nonzero(ref_a == ref_a[mode]) == 1
    sel, rest = _sweep_summary(ref_a, rew_a, grid, idx)
    ax = _axes(ax)
    for j, i in enumerate(idx):
        if names is not None:
            lab = names[i]
        else:
            roles = [f"$r={rew_a[i]:.3g}$"] + (["best"] if i == best else [])
            if i == mode and unique_mode:
                roles.append(r"mode of $\pi_{\mathrm{ref}}$")
            lab = f"$y={i}$ ({', '.join(roles)})"
        ax.plot(grid, sel[:, j], label=lab, **_style(j))
    if rest is not None:
        total, lo, hi = rest
        n_rest = ref_a.size - idx.size
        what = "1 other" if n_rest == 1 else f"{n_rest:,} others"
        if n_rest > 1:
            ax.fill_between(
                grid, lo, hi, color="0.55", alpha=0.35, linewidth=0,
                label=f"{what}: range of each",
            )  # fmt: skip
        ax.plot(grid, total, color="0.35", linestyle=(0, (1, 1)), label=f"{what}: total")
    texts = []
    for j, b in enumerate(sorted(mark)):
        pb = float(_cf.optimal_policy(ref_a, rew_a, b)[best])
        ax.plot([b], [pb], marker=_MARKERS[j % 7], color="black", linestyle="none", zorder=5)
        who = "" if best == 0 else f" ($y={best}$)"
        texts.append(
            ax.annotate(
                rf"{pb:.2f} at $\beta$={b:g}{who}", (b, pb), textcoords="offset points",
                xytext=(8, 6), zorder=6,
            )
        )  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlim(grid[0], grid[-1])
    # the two limits, at the two ends of the axis
    box = {"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "0.6", "alpha": 0.9}
    ax.annotate(
        "greedy\n" r"($\beta \to 0$)",
        xy=(0.0, 1.0),
        xycoords="axes fraction",
        xytext=(6, -6),
        textcoords="offset points",
        ha="left",
        va="top",
        bbox=box,
    )
    ax.annotate(
        "reference\n" r"($\beta \to \infty$)",
        xy=(1.0, 1.0),
        xycoords="axes fraction",
        xytext=(-6, -6),
        textcoords="offset points",
        ha="right",
        va="top",
        bbox=box,
    )
    ax.set_xlabel(r"$\beta$ (KL coefficient, reward units per nat; log scale)")
    ax.set_ylabel(r"$\pi^*_\beta(y)$ (probability)")
    ax.set_ylim(-0.02, 1.25)
    ax.set_title(r"$\beta$ as a temperature")
    # below the axes: inside, a legend covers some curve at some beta
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    _declutter(ax, texts)
    return ax


@_lecture
def frontier(
    ref: ArrayLike,
    reward: ArrayLike,
    *,
    betas: ArrayLike | None = None,
    best_of_n: Sequence[int] | None = (1, 2, 4, 8, 16, 32, 64),
    mark: Sequence[float] | None = None,
    ax=None,
):
    r"""The reward-KL frontier of :math:`\pi^*_\beta`, with best-of-n points.

    .. math:: \beta \mapsto \big(\mathrm{KL}(\pi^*_\beta\|\pi_{ref}),\ \mathbb{E}_{\pi^*_\beta}[r]\big)

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
    betas : array_like, optional
        The beta grid for the curve (default: 301 betas evenly spaced in KL from
        0 to the greedy KL, so the curve is smooth at both ends; past 10^4 actions
        fewer, down to 25, plus 8 close to KL = 0, so 10^5 actions draw in seconds).
    best_of_n : sequence of int or None, optional
        Values of n whose exact (KL, E[r]) points are drawn
        (:mod:`klpolicy.best_of_n`); None for none.
    mark : sequence of float or None, optional
        Betas to mark along the curve with their value (default: up to five
        round values, 1, 2 or 5 times a power of ten, spread along the curve).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax``, or a new figure's).

    Raises
    ------
    ValueError
        For invalid inputs.

    Notes
    -----
    No policy lies above the curve: at any KL, :math:`\pi^*_\beta` has the
    largest expected reward. Best-of-n points lie on or below it.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, 2022, arXiv:2210.10760.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import frontier
    >>> ax = frontier([0.25, 0.25, 0.5], [1.0, 0.5, 0.0], best_of_n=None)
    >>> ax.get_xlabel()
    '$\\mathrm{KL}(\\pi\\,\\|\\,\\pi_{\\mathrm{ref}})$ (nats)'
    """
    ref, reward = _one_problem(ref, reward)
    if betas is None:
        kmax = float(_cf.max_kl(ref, reward))
        # 301 KLs, fewer past 10^4 actions (each costs a root search over all of them), and
        # a few close to 0, where the curve rises like sqrt(KL)
        n = int(np.clip(3_000_000 // ref.size, 25, 301))
        near0 = np.geomspace(1e-4, 1.0 / n, 8) if n < 301 else np.empty(0)
        targets = kmax * np.unique(np.concatenate([np.linspace(0.0, 1.0, n), near0]))
        grid = np.asarray(_cf.beta_for_kl(ref, reward, targets), dtype=float)
    else:
        grid = V.check_beta_values("betas", betas).reshape(-1)
    f = _cf.frontier(ref, reward, grid)
    ax = _axes(ax)
    ax.plot(f.kl, f.expected_reward, label=r"$\pi^*_\beta$ (KL-regularised optimum)", **_style(0))
    # beta along the curve
    kmax = float(np.max(f.kl))
    if mark is None:
        cands = [m * 10.0**k for k in range(-3, 4) for m in (1.0, 2.0, 5.0)]
        kls = np.asarray(_cf.optimal_kl(ref, reward, np.asarray(cands)[:, None]), dtype=float)
        inside = [(b, k) for b, k in zip(cands, kls) if 0.04 * kmax < k < 0.9 * kmax]
        chosen: list[float] = []
        for b, k in sorted(inside, key=lambda t: t[1]):  # at least a sixth of the range apart
            if not chosen or k - float(_cf.optimal_kl(ref, reward, chosen[-1])) > kmax / 6:
                chosen.append(b)
        mark = chosen[:5]
    texts = []
    for b in mark:
        pi_b = _cf.optimal_policy(ref, reward, b)
        x, y = float(_cf.optimal_kl(ref, reward, b)), float(np.dot(pi_b, reward))
        ax.plot(
            [x], [y], marker="o", color="black", markersize=6, linestyle="none", zorder=5,
            clip_on=False,
        )  # fmt: skip
        # above-left of the point, outside the concave curve; below-right near KL = 0,
        # where the left has no room (the axis starts at KL = 0: there is no negative KL)
        left = x > 0.2 * kmax
        texts.append(
            ax.annotate(
                rf"$\beta$={b:g}", (x, y), textcoords="offset points",
                xytext=(-8, 8) if left else (10, -6), ha="right" if left else "left",
                va="bottom" if left else "top",
            )
        )  # fmt: skip
    if best_of_n is not None:
        from .. import best_of_n as bon

        ns = [int(n) for n in V.as_positive_int_array("best_of_n", best_of_n).reshape(-1)]
        kl = [float(bon.best_of_n_kl(ref, reward, n)) for n in ns]
        er = [float(np.dot(bon.best_of_n_policy(ref, reward, n), reward)) for n in ns]
        # hollow squares: a best-of-n point on the curve leaves the beta dot visible
        ax.plot(
            kl, er, marker="s", markersize=10, markerfacecolor="none", markeredgewidth=2,
            linestyle="none", color=_COLOURS[1], label="best-of-n", clip_on=False,
        )  # fmt: skip
        for n, x, y in zip(ns, kl, er):
            texts.append(
                ax.annotate(
                    f"$n={n}$", (x, y), textcoords="offset points", xytext=(10, -6), va="top"
                )
            )
    ax.margins(y=0.1)
    ax.set_xlim(0.0, 1.03 * kmax)  # KL >= 0: the axis starts at 0
    # labels of points close together (beta = 0.1 next to n = 32) move apart, downwards
    _declutter(ax, texts, up=False)
    ax.set_xlabel(r"$\mathrm{KL}(\pi\,\|\,\pi_{\mathrm{ref}})$ (nats)")
    ax.set_ylabel(r"$\mathbb{E}_\pi[r]$ (reward units)")
    ax.set_title("Reward-KL frontier")
    ax.legend(loc="lower right")
    return ax


@_lecture
def soft_best_of_n(
    ref: ArrayLike,
    reward: ArrayLike,
    n: int = 8,
    *,
    lams: ArrayLike | None = None,
    ax=None,
):
    r"""Soft best-of-n's reward-KL curve at one ``n``, between the tilt's frontier and best-of-n.

    .. math::

        \lambda \mapsto \big(\mathrm{KL}(\pi_{n,\lambda}\|\pi_{ref}),\
        \mathbb{E}_{\pi_{n,\lambda}}[r]\big)

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
    n : int, optional
        Number of draws (default 8).
    lams : array_like, optional
        Temperatures for the curve (default as in
        :func:`klpolicy.best_of_n.soft_best_of_n_frontier`).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on: reward against KL for the three families.

    Raises
    ------
    ValueError
        For invalid inputs (as in :func:`klpolicy.best_of_n.soft_best_of_n_frontier`).

    Notes
    -----
    Three series: the frontier of :math:`\pi^*_\beta` (solid, the upper boundary),
    soft best-of-n along ``lam`` (dashed, from the reference at ``lam = inf`` to hard
    best-of-n at ``lam = 0``) and hard best-of-n at ``1, 2, 4, ..., n`` (hollow squares).
    All numbers are exact (:func:`klpolicy.best_of_n.soft_best_of_n_frontier`).

    References
    ----------
    .. [1] Verdun et al., 2025, "Soft best-of-n sampling for model alignment",
       arXiv:2505.03156.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import soft_best_of_n
    >>> ax = soft_best_of_n([0.2, 0.5, 0.3], [1.0, 0.3, -2.0], 4)
    >>> len(ax.lines)
    3
    """
    from .. import best_of_n as bon

    _one_d("ref", ref)
    _one_d("reward", reward)
    f = bon.soft_best_of_n_frontier(ref, reward, n, lams)
    ref_a, rew_a = _one_problem(ref, reward)
    kmax = float(max(f.kl.max(), f.best_of_n.kl.max()))
    targets = kmax * np.linspace(0.0, 1.0, 201)
    grid = np.asarray(_cf.beta_for_kl(ref_a, rew_a, targets), dtype=float)
    opt = _cf.frontier(ref_a, rew_a, grid)
    ax = _axes(ax)
    ax.plot(
        opt.kl, opt.expected_reward, label=r"$\pi^*_\beta$ (KL-regularised optimum)", **_style(0)
    )
    order = np.argsort(f.kl)
    ax.plot(
        f.kl[order], f.expected_reward[order], label=rf"soft best-of-$n$, $n={f.n}$ (along $\lambda$)",
        **_style(1),
    )  # fmt: skip
    ax.plot(
        f.best_of_n.kl, f.best_of_n.expected_reward, marker="s", markersize=10,
        markerfacecolor="none", markeredgewidth=2, linestyle="none", color=_COLOURS[2],
        label="best-of-n", clip_on=False,
    )  # fmt: skip
    last = len(f.best_of_n.n) - 1
    for i, (m, x, y) in enumerate(zip(f.best_of_n.n, f.best_of_n.kl, f.best_of_n.expected_reward)):
        # below-right of each point; the last (at the right edge) below-left, inside the axes
        right = i < last or last == 0
        ax.annotate(
            f"$n={int(m)}$", (x, y), textcoords="offset points", xytext=(10 if right else -10, -8),
            va="top", ha="left" if right else "right",
        )  # fmt: skip
    ax.margins(y=0.1)
    ax.set_xlim(0.0, 1.05 * kmax)
    ax.set_xlabel(r"$\mathrm{KL}(\pi\,\|\,\pi_{\mathrm{ref}})$ (nats)")
    ax.set_ylabel(r"$\mathbb{E}_\pi[r]$ (reward units)")
    ax.set_title(r"Soft best-of-$n$ between best-of-$n$ and the tilt")
    ax.legend(loc="lower right")
    return ax


@_lecture
def kl_budget(
    d: ArrayLike,
    gold: ArrayLike,
    proxy: ArrayLike | None = None,
    *,
    fits: dict[str, Any] | None = None,
    label: str = "",
    proxy_axis: str = "left",
    ax=None,
):
    r"""Gold (and proxy) reward against :math:`d = \sqrt{\mathrm{KL}}`: over-optimisation.

    Parameters
    ----------
    d : array_like, shape (N,)
        :math:`\sqrt{\mathrm{KL}}` of each point.
    gold : array_like, shape (N,)
        True reward at each point.
    proxy : array_like, shape (N,), optional
        The optimised (proxy) reward at each point.
    fits : dict, optional
        ``{"label": callable d -> R}`` curves to overlay (e.g. Gao et al.'s
        fitted forms).
    label : str, optional
        Prefix for the legend entries.
    proxy_axis : {"left", "right", "panel"}, optional
        ``"right"`` draws the proxy on its own axis (``ax.right_ax``), so that a
        proxy that keeps rising does not squeeze the gold curve flat; ``"panel"``
        draws it in a panel of its own below, sharing the :math:`d` axis
        (``ax.proxy_ax``): two scales whose curves never cross by accident, the
        clearer choice for slides.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax``, or a new figure's).

    Raises
    ------
    ValueError
        When the arrays differ in length or hold non-finite values, or ``fits`` holds
        more curves than the palette has colours left (5).

    References
    ----------
    .. [1] Gao, Schulman and Hilton, "Scaling Laws for Reward Model
       Overoptimization", 2022, arXiv:2210.10760.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from klpolicy.plotting import kl_budget
    >>> d = np.linspace(0, 3, 20)
    >>> ax = kl_budget(d, d * (1 - 0.3 * d), proxy=d)
    >>> len(ax.lines)
    2
    """
    d_a = V.as_rewards("d", d)
    g_a = V.as_rewards("gold", gold)
    if g_a.shape != d_a.shape:
        raise ValueError(f"`gold` must have the shape of `d`; got {g_a.shape} and {d_a.shape}")
    ax = _axes(ax)
    pre = f"{label} " if label else ""
    # dense sweeps: markers evenly spaced along the drawn curve, not one per point
    every = None if d_a.size <= 25 else 0.04
    if proxy_axis not in ("left", "right", "panel"):
        raise ValueError(f"`proxy_axis` must be 'left', 'right' or 'panel'; got {proxy_axis!r}")
    if fits is not None and len(fits) > len(_COLOURS) - 2:
        raise ValueError(
            f"`fits` must hold at most {len(_COLOURS) - 2} curves (one colour each beside "
            f"gold and proxy); got {len(fits)}: draw the others on another axes"
        )
    ax.plot(d_a, g_a, marker="o", markevery=every, label=f"{pre}gold reward", **_style(0))
    lines = list(ax.get_lines()[-1:])
    split = proxy is not None and proxy_axis == "panel"
    if proxy is not None:
        p_a = V.as_rewards("proxy", proxy)
        if p_a.shape != d_a.shape:
            raise ValueError(f"`proxy` must have the shape of `d`; got {p_a.shape} and {d_a.shape}")
        target = ax
        if proxy_axis == "right":
            target = ax.twinx()
            target.grid(False)
            target.set_ylabel("proxy reward", color=_COLOURS[1])
            target.tick_params(axis="y", colors=_COLOURS[1])
            ax.right_ax = target
        elif split:
            # a panel of its own below, sharing d: two scales that never cross by accident
            spec = ax.get_subplotspec()
            if spec is None:
                raise ValueError("`proxy_axis='panel'` needs an `ax` made by subplots")
            grid = spec.subgridspec(2, 1)
            ax.set_subplotspec(grid[0])
            target = ax.figure.add_subplot(grid[1], sharex=ax)
            target.set_ylabel("proxy reward\n(reward units)")
            ax.proxy_ax = target
        target.plot(d_a, p_a, marker="^", markevery=every, label=f"{pre}proxy reward", **_style(1))
        if not split:
            lines.append(target.get_lines()[-1])
    for i, (name, fn) in enumerate((fits or {}).items()):
        xs = np.linspace(max(d_a.min(), 1e-6), d_a.max(), 200)
        ax.plot(xs, fn(xs), label=name, color=_COLOURS[i + 2], linestyle=":")
        lines.append(ax.get_lines()[-1])
    d_label = r"$d = \sqrt{\mathrm{KL}(\pi\,\|\,\pi_{\mathrm{ref}})}$ ($\sqrt{\mathrm{nats}}$)"
    if split:  # each panel stands alone on a slide: its own x label and title
        ax.set_xlabel(d_label)
        target.set_xlabel(d_label)
        target.set_title("The proxy reward the policy optimises", fontsize=14)
        ax.set_ylabel("gold reward\n(reward units)")
    else:
        ax.set_xlabel(d_label)
        ax.set_ylabel(
            "gold reward (reward units)"
            if proxy_axis == "right" and proxy is not None
            else "reward (reward units)"
        )
    ax.set_title("Over-optimisation: the KL budget as a safety margin")
    if proxy_axis == "right" and proxy is not None:
        # below the axes: the rising proxy crosses every corner inside
        ax.legend(
            lines,
            [ln.get_label() for ln in lines],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.2),
            ncol=2,
            frameon=False,
        )
    else:
        ax.legend(lines, [ln.get_label() for ln in lines], loc="best")
    return ax


@_lecture
def token_kl(kl: ArrayLike, *, ax=None, cmap: str = "cividis"):
    r"""Per-position KL along a response: a bar chart for one sequence, a heatmap for a batch.

    .. math:: \mathrm{KL}_t = \mathbb{E}_{a_{<t}}\,\mathrm{KL}(\pi(\cdot|a_{<t})\,\|\,\pi_{ref}(\cdot|a_{<t}))

    Parameters
    ----------
    kl : array_like, shape (T,) or (B, T)
        Per-position KL (e.g. :func:`klpolicy.sequences.per_token_kl`, or the
        per-token values of :func:`klpolicy.sequences.token_kl_profile`). Past 200
        positions one sequence is drawn as a filled step curve, not one bar each.
    ax : matplotlib Axes, optional
    cmap : str, optional
        Colour map of the heatmap (``cividis`` is colour-blind safe).

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax``, or a new figure's).

    Raises
    ------
    ValueError
        For non-finite values or more than two dimensions.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593 (per-token KL in the reward).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import token_kl
    >>> ax = token_kl([0.5, 0.1, 0.05, 0.02])
    >>> len(ax.patches)
    4
    """
    a = V.as_rewards("kl", kl)
    ax = _axes(ax)
    if a.ndim == 1:
        if a.size <= _POSITION_BARS:
            ax.bar(np.arange(a.size), a, color=_COLOURS[0], edgecolor="black")
        else:  # one bar per position would be slow and unreadable: one filled step curve
            ax.fill_between(np.arange(a.size), a, step="mid", color=_COLOURS[0], linewidth=0)
            ax.set_xlim(-0.5, a.size - 0.5)
        ax.set_axisbelow(True)
        ax.set_ylabel(r"KL at position $t$ (nats)")
        ax.set_title(f"Where the KL sits (total {a.sum():.3g} nats)")
    elif a.ndim == 2:
        im = ax.imshow(a, aspect="auto", cmap=cmap, interpolation="nearest")
        ax.figure.colorbar(im, ax=ax, label="KL (nats)")
        ax.set_ylabel("sequence (batch row)")
        ax.set_title("Per-token KL across a batch")
        ax.grid(False)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        raise ValueError(f"`kl` must have shape (T,) or (B, T); got shape {a.shape}")
    ax.set_xlabel(r"position $t$ (token index)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return ax


@_lecture
def controller_trace(trace: Any, *, target: float | None = None, ax=None):
    r"""A KL controller's closed loop: KL against step, with beta on a second axis.

    Parameters
    ----------
    trace : object
        Anything with ``.kl`` and ``.beta`` arrays of equal length, such as the
        result of :func:`klpolicy.control.simulate`.
    target : float, optional
        The KL target to draw as a horizontal line (default ``trace.target`` if
        present).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The KL axis (beta is on ``ax.right_ax``).

    Raises
    ------
    ValueError
        When ``trace`` lacks ``.kl``/``.beta`` or they differ in length.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593; Schulman et al., 2017,
       arXiv:1707.06347, sec. 4.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from types import SimpleNamespace
    >>> from klpolicy.plotting import controller_trace
    >>> ax = controller_trace(SimpleNamespace(kl=[1.0, 0.5, 0.4], beta=[0.1, 0.2, 0.25]), target=0.4)
    >>> ax.right_ax.get_ylabel()
    '$\\beta$ (reward units per nat)'
    """
    if not (hasattr(trace, "kl") and hasattr(trace, "beta")):
        raise ValueError(f"`trace` must have `.kl` and `.beta` arrays; got {type(trace).__name__}")
    kl = np.asarray(trace.kl, dtype=float)
    beta = np.asarray(trace.beta, dtype=float)
    if kl.shape != beta.shape:
        raise ValueError(
            f"`trace.kl` and `trace.beta` must have one shape; got {kl.shape} and {beta.shape}"
        )
    if target is not None:
        target = V.as_scalar("target", target, what="a KL in nats")
    target = getattr(trace, "target", None) if target is None else target
    ax = _axes(ax)
    steps = np.arange(kl.size)
    ax.plot(steps, kl, label="KL", **_style(0))
    if target is not None:
        ax.axhline(float(target), color="black", linestyle=":", label="target")
    ax.set_xlabel("step (controller updates)")
    ax.set_ylabel("KL (nats)")
    right = ax.twinx()
    right.plot(steps, beta, label=r"$\beta$", **_style(1))
    right.set_ylabel(r"$\beta$ (reward units per nat)")
    right.grid(False)
    ax.right_ax = right
    lines = ax.get_lines() + right.get_lines()
    # below the plot: the two axes' curves cross, so no corner inside is reliably free
    ax.legend(
        lines,
        [ln.get_label() for ln in lines],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=len(lines),
        frameon=False,
    )
    ax.set_title("KL controller, closed loop")
    return ax


@_lecture
def estimator_histograms(
    p: ArrayLike,
    q: ArrayLike,
    *,
    n: int = 20000,
    rng: np.random.Generator | int | None = 0,
    estimators: Sequence[str] | None = None,
    bins: int = 60,
    ax=None,
):
    r"""Histograms of per-sample KL estimates from samples of ``p``, with the true KL.

    .. math:: k_1 = \log\tfrac{p}{q},\quad k_2 = \tfrac12 \log^2\tfrac{p}{q},\quad
              k_3 = \tfrac{q}{p} - 1 - \log\tfrac{q}{p}

    Parameters
    ----------
    p, q : array_like, shape (V,)
        Sampling distribution and reference.
    n : int, optional
        Number of samples.
    rng : Generator or int or None, optional
        Randomness (seeded by default, so the figure is reproducible).
    estimators : sequence of str, optional
        Which estimators of :mod:`klpolicy.estimators` to draw; by default every KL
        estimator of the registry (``estimator_names(kl_only=True)``).
    bins : int, optional
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax``, or a new figure's).

    Raises
    ------
    ValueError
        For invalid distributions or estimator names.

    References
    ----------
    .. [1] Schulman, "Approximating KL Divergence", 2020,
       http://joschu.net/blog/kl-approx.html.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import estimator_histograms
    >>> ax = estimator_histograms([0.6, 0.3, 0.1], [0.3, 0.3, 0.4], n=2000)
    >>> ax.get_xlabel()
    'per-sample estimate (nats)'
    """
    from .. import estimators as est

    if estimators is None:
        estimators = est.estimator_names(kl_only=True)
    if isinstance(estimators, str):  # one name, not its letters
        estimators = (estimators,)
    for name in estimators:  # a mistyped name: the registry's message, naming `estimators`
        est.get_estimator(name, argument="estimators")
    _at_most_one_colour_each("estimators", estimators)
    from ..core import kl_divergence

    n = V.as_positive_int("n", n, hi=V.MAX_LOOP_COUNT)
    bins = V.as_positive_int("bins", bins, hi=10**6)
    gen = V.as_rng("rng", rng)
    _one_d("p", p)
    _one_d("q", q)
    p_a = V.as_probabilities("p", p)
    q_a = V.as_probabilities("q", q)
    if p_a.shape != q_a.shape:
        raise ValueError(f"`q` must have the shape of `p`; got {q_a.shape} and {p_a.shape}")
    x = gen.choice(p_a.size, size=n, p=p_a / p_a.sum())
    with np.errstate(divide="ignore"):
        logp, logq = np.log(p_a[x]), np.log(q_a[x])
    ax = _axes(ax)
    for i, name in enumerate(estimators):
        vals = getattr(est, name)(logp, logq)
        # samples where q = 0 give infinite estimates (the KL is then infinite too): the
        # histogram shows the finite ones and the label says how many are not
        finite = np.isfinite(vals)
        sub = re.fullmatch(r"([a-z])(\d+)", name)  # k1 -> $k_1$; other names as they are
        math = (
            (f"${sub[1]}_{sub[2]}$" if len(sub[2]) == 1 else f"${sub[1]}_{{{sub[2]}}}$")
            if sub
            else name
        )
        label = f"{math} (mean {vals.mean():.3f})"
        if not finite.all():
            label = f"{math}: {np.count_nonzero(~finite):,} of {n:,} samples infinite ($q = 0$)"
        if finite.any():
            ax.hist(vals[finite], bins=bins, histtype="step", linewidth=2, label=label, **_style(i))
        else:
            ax.plot([], [], label=label, **_style(i))
    true_kl = float(kl_divergence(p_a, q_a))
    if np.isfinite(true_kl):
        ax.axvline(true_kl, color="black", linestyle=":", label="true KL")
    else:
        ax.plot(
            [],
            [],
            color="black",
            linestyle=":",
            label=r"true KL $= \infty$ ($p > 0$ where $q = 0$)",
        )
    ax.set_xlabel("per-sample estimate (nats)")
    ax.set_ylabel(f"count (of {n:,} samples)")
    ax.set_title("KL estimators: per-sample spread")
    # below the plot: tall spikes can fill any corner inside; one column when a label is
    # long (the counts of infinite samples), so the legend is never wider than the figure
    long = max(len(t) for t in ax.get_legend_handles_labels()[1]) > 30
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1 if long else 2, frameon=False)
    return ax


@_lecture
def fixed_points(
    ref: ArrayLike,
    reward: ArrayLike,
    *,
    betas: ArrayLike | None = None,
    combos: Sequence[tuple[str, str]] = (
        ("k1", "reward"),
        ("k2", "loss"),
        ("k3", "loss"),
        ("k1", "loss"),
    ),
    ax=None,
):
    r"""Where on-policy training converges for each estimator placement, against beta.

    Plots :math:`\mathbb{E}_{\pi}[r]` at the fixed point of
    :func:`klpolicy.estimators.fixed_point` for each (estimator, placement),
    beside the exact optimum :math:`\pi^*_\beta` (which k1-in-reward and
    k2-in-loss reach).

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
    betas : array_like, optional
        Grid (default ``geomspace(0.05, 20, 160)``: smooth curves).
    combos : sequence of (estimator, placement)
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on (``ax``, or a new figure's).

    Raises
    ------
    ValueError
        For invalid inputs (as :func:`klpolicy.estimators.fixed_point`).

    References
    ----------
    .. [1] Shao et al., "DeepSeekMath", 2024, arXiv:2402.03300 (k3 in the loss).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import fixed_points
    >>> ax = fixed_points([0.5, 0.3, 0.2], [1.0, 0.0, 0.5], betas=[0.5, 1.0, 2.0])
    >>> ax.get_xscale()
    'log'
    """
    from .. import estimators as est

    grid = (
        np.geomspace(0.05, 20, 160)
        if betas is None
        else V.check_beta_values("betas", betas).reshape(-1)
    )
    _at_most_one_colour_each("combos", combos)
    exact = _cf.frontier(ref, reward, grid).expected_reward  # validates ref and reward
    r = np.asarray(reward, dtype=float)
    ax = _axes(ax)
    ax.plot(grid, exact, label=r"$\pi^*_\beta$ (exact)", color="black", linewidth=3.5, alpha=0.35)
    for i, (e, place) in enumerate(combos):
        vals = [
            float(np.dot(est.fixed_point(ref, reward, b, estimator=e, placement=place), r))
            for b in grid
        ]
        ax.plot(
            grid,
            vals,
            label=f"$k_{e[1:]}$ in the {place}",
            marker=_MARKERS[i % 7],
            markevery=max(1, grid.size // 8),
            **_style(i),
        )
    ax.set_xscale("log")
    ax.set_xlabel(r"$\beta$ (reward units per nat; log scale)")
    ax.set_ylabel(r"$\mathbb{E}_\pi[r]$ at convergence (reward units)")
    ax.set_title("Where each KL estimator placement converges")
    ax.legend(loc="best")
    return ax
