"""For the lecture hall: an animation of :math:`\\pi^*_\\beta` as beta sweeps, and a beta slider.

* :func:`animate_beta_sweep`: bars of :math:`\\pi^*_\\beta` as :math:`\\beta` goes from
  :math:`\\infty` (the reference) to 0 (greedy), with the KL and the expected reward read
  out; saved as a GIF with matplotlib's Pillow writer (``klpolicy plot beta-sweep
  --animate out.gif``).
* :func:`explore`: the same bars under an ``ipywidgets`` slider in a notebook; a static
  figure of a few betas where ipywidgets is not installed (``pip install
  'klpolicy[widgets]'``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from numpy.typing import ArrayLike

from .. import core as _cf
from ..core.internal import validation as V
from .figures import _COLOURS, _labels, _one_problem, highlighted_actions, lecture_style
from .save import as_dpi

__all__ = ["animate_beta_sweep", "explore"]


def _beta_label(b: float) -> str:
    if b == np.inf:
        return r"$\beta = \infty$ (the reference)"
    if b == 0:
        return r"$\beta = 0$ (greedy)"
    return rf"$\beta$ = {b:.3g}"


def _sweep_betas(ref, reward, frames: int) -> np.ndarray:
    """``frames`` betas from inf to 0, evenly spaced in the KL they spend."""
    kmax = float(_cf.max_kl(ref, reward))
    inner = np.linspace(0.0, kmax, frames)[1:-1]
    betas = np.asarray(_cf.beta_for_kl(ref, reward, inner), dtype=float).reshape(-1)
    return np.concatenate([[np.inf], betas, [0.0]])


#: Up to this many responses get a bar each; with more, the highlighted ones and "others".
MAX_BARS = 12


class _Bars:
    """Bars of pi*_beta beside the reference, with the KL and E[r] read out.

    Past :data:`MAX_BARS` responses the bars are the highlighted ones
    (:func:`~klpolicy.plotting.highlighted_actions`) and one bar for the total of the
    others, so the figure stays readable and fast at any size.
    """

    def __init__(self, ax, ref, reward, labels, readout=True):
        self.ref, self.reward, self.ax = ref, reward, ax
        size = ref.size
        names = _labels(labels, size)
        if size <= MAX_BARS:
            self.idx = np.arange(size)
        else:
            self.idx = highlighted_actions(ref, reward, 4)
        if names is None:
            names = [f"$r={reward[i]:.3g}$" for i in self.idx]
            if size > MAX_BARS:  # compact: "#index" over "r=value"
                names = [f"#{i}\n$r$={reward[i]:.3g}" for i in self.idx]
        else:
            names = [names[i] for i in self.idx]
        if size > MAX_BARS:
            names.append(f"{size - self.idx.size:,}\nothers")
        x = np.arange(len(names))
        ax.bar(
            x,
            self._heights(ref),
            width=0.8,
            fill=False,
            edgecolor="0.4",
            linestyle="--",
            label=r"$\pi_{\mathrm{ref}}$",
        )
        self.bars = ax.bar(
            x, self._heights(ref), width=0.55, color=_COLOURS[0], label=r"$\pi^*_\beta$"
        )
        ax.set_xticks(x, names)
        ax.set_ylim(0, 1.45)
        ax.set_yticks(np.linspace(0, 1, 6))
        ax.set_ylabel("probability")
        ax.set_xlabel("response" if size <= MAX_BARS else "response # (the rest summed)")
        ax.legend(loc="upper left")
        self.readout = None
        if readout:
            self.readout = ax.text(
                0.98, 0.97, "", transform=ax.transAxes, ha="right", va="top",
                bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.6"},
            )  # fmt: skip

    def _heights(self, pi):
        h = pi[self.idx]
        if self.idx.size < pi.size:
            h = np.append(h, max(0.0, 1.0 - float(h.sum())))
        return h

    def show(self, beta: float) -> tuple[float, float]:
        pi = _cf.optimal_policy(self.ref, self.reward, beta)
        for bar, h in zip(self.bars, self._heights(pi)):
            bar.set_height(float(h))
        kl = float(_cf.optimal_kl(self.ref, self.reward, beta))
        er = float(np.dot(pi, self.reward))
        if self.readout is not None:
            self.readout.set_text(
                f"{_beta_label(beta)}\n"
                rf"$\mathrm{{KL}}(\pi^*_\beta\,\|\,\pi_{{\mathrm{{ref}}}})$ = {kl:.3f} nats"
                "\n"
                rf"$\mathbb{{E}}_{{\pi^*_\beta}}[r]$ = {er:.3f}"
            )
        return kl, er


def _problem(ref, reward):
    return _one_problem(ref, reward)


def animate_beta_sweep(
    ref: ArrayLike = (0.5, 0.5),
    reward: ArrayLike = (1.0, 0.0),
    *,
    frames: int = 60,
    fps: float = 10.0,
    labels: Sequence[str] | None = None,
    path: str | os.PathLike[str] | None = None,
    dpi: float = 100.0,
    hold: float = 1.0,
) -> Any:
    r"""Animate :math:`\pi^*_\beta` as :math:`\beta` sweeps from :math:`\infty` to 0.

    .. math:: \pi^*_\beta(y) = \pi_{ref}(y)\, e^{r(y)/\beta} / Z_\beta

    The first frame is the reference (:math:`\beta = \infty`), the last the greedy
    policy (:math:`\beta = 0`); the frames between are evenly spaced in the KL they
    spend, so the KL readout grows by equal steps; a timeline under the bars says so,
    with round betas marked at the KL they spend and a cursor at the frame's. The
    first and last frames are held for ``hold`` seconds, so a looping GIF pauses on
    the reference and on the greedy policy. Past 12 responses the bars are the
    highlighted ones (:func:`~klpolicy.plotting.highlighted_actions`) and the others'
    total.

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
        One problem (default: the worked example).
    frames : int, optional
        Number of frames, ``>= 3``.
    fps : float, optional
        Frames per second of the saved file.
    labels : sequence of str, optional
        One tick label per response (default ``"r=..."``).
    path : str or os.PathLike, optional
        When given, the animation is written there (a ``.gif`` with matplotlib's
        Pillow writer) and the path is returned.
    dpi : float, optional
        Resolution of the saved frames.
    hold : float, optional
        Seconds the first and the last frames stay on screen (0 to 60; default 1).

    Returns
    -------
    matplotlib.animation.FuncAnimation or pathlib.Path
        The animation (``.to_jshtml()`` shows it in a notebook), or ``path``.

    Raises
    ------
    ValueError
        For an invalid problem or ``frames < 3``.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import animate_beta_sweep
    >>> import tempfile, pathlib
    >>> from PIL import Image
    >>> with tempfile.TemporaryDirectory() as d:
    ...     gif = animate_beta_sweep([0.5, 0.5], [1.0, 0.0], frames=5, path=pathlib.Path(d) / "a.gif")
    ...     Image.open(gif).n_frames
    5
    """
    from matplotlib.animation import FuncAnimation

    frames = V.as_count("frames", frames, lo=3, hi=10_000)
    fps = V.as_positive_scalar("fps", fps)
    dpi = as_dpi(dpi)
    hold = V.as_scalar("hold", hold, "[0, 60]", what="seconds")
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"`path` must be a file path (str or os.PathLike); got {V.describe(path)}")
    ref_a, rew_a = _problem(ref, reward)
    betas = _sweep_betas(ref_a, rew_a, int(frames))
    # the first and last frames (the reference, greedy) stay on screen for `hold` seconds
    extra = round(hold * fps)
    order = [0] * extra + list(range(len(betas))) + [len(betas) - 1] * extra
    with matplotlib.rc_context(lecture_style()):
        fig, (ax, line) = plt.subplots(
            2, 1, figsize=(7.5, 5.6), height_ratios=(5.0, 0.4), layout="constrained"
        )
        bars = _Bars(ax, ref_a, rew_a, labels)
        ax.set_title(r"$\pi^*_\beta$ as $\beta$ goes from $\infty$ to 0")
        kmax = float(_cf.max_kl(ref_a, rew_a))
        cursor = _timeline(line, ref_a, rew_a, kmax)

        def update(i):
            kl, _ = bars.show(float(betas[i]))
            cursor.set_xdata([kl])
            return [*bars.bars, bars.readout, cursor]

        update(0)
        if path is None:
            return FuncAnimation(fig, update, frames=order, blit=False, repeat=True)
        out = Path(path)
        try:
            _save_gif(fig, update, len(betas), out, fps=fps, dpi=dpi, hold=hold)
        finally:
            plt.close(fig)
        return out


def _save_gif(fig, update, n: int, out: Path, *, fps: float, dpi: float, hold: float) -> None:
    """Render each of the ``n`` frames once and write a looping GIF, the ends held ``hold`` s."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from PIL import Image

    fig.set_dpi(dpi)
    canvas = FigureCanvasAgg(fig)
    images = []
    for i in range(n):
        update(i)
        canvas.draw()
        images.append(Image.fromarray(np.asarray(canvas.buffer_rgba())[..., :3]).quantize(256))
    step = 1000.0 / fps
    durations = [step] * n
    durations[0] += 1000.0 * hold
    durations[-1] += 1000.0 * hold
    images[0].save(
        out, format="GIF", save_all=True, append_images=images[1:],
        duration=[round(d) for d in durations], loop=0,
    )  # fmt: skip


def _timeline(ax, ref_a, rew_a, kmax: float):
    """A KL axis under the bars with round betas marked on it and a cursor at the frame's KL."""
    ax.set_xlim(-0.02 * kmax, 1.02 * kmax)
    ax.set_ylim(-1, 1)
    ax.set_yticks([])
    ax.grid(False)
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.axhline(0.0, color="0.6", linewidth=3, zorder=1)
    cands = np.array([m * 10.0**k for k in range(-3, 4) for m in (1.0, 2.0, 5.0)])
    kls = np.asarray(_cf.optimal_kl(ref_a, rew_a, cands[:, None]), dtype=float).reshape(-1)
    ticks, names = [0.0], [r"$\beta=\infty$"]
    for b, k in sorted(zip(cands, kls), key=lambda t: t[1]):
        if 0.12 * kmax < k < 0.85 * kmax and k - ticks[-1] > 0.16 * kmax:
            ticks.append(float(k))
            names.append(f"{b:g}")
    ticks.append(kmax)
    names.append("0")
    ax.set_xticks(ticks, names)
    ax.set_xlabel(
        rf"$\beta$ timeline: frames evenly spaced in KL (0 to {kmax:.3g} nats)", fontsize=14
    )
    (cursor,) = ax.plot([0.0], [0.0], marker="v", markersize=13, color="black", zorder=3)
    return cursor


def explore(
    ref: ArrayLike,
    reward: ArrayLike,
    *,
    beta: float = 1.0,
    labels: Sequence[str] | None = None,
) -> Any:
    r"""A :math:`\beta` slider over the bars of :math:`\pi^*_\beta`, for notebooks.

    With ``ipywidgets`` installed (``pip install 'klpolicy[widgets]'``) this returns a
    widget: a log-scale slider for :math:`\beta` from :math:`10^{-3}` to :math:`10^3`
    (in units of the reward's spread), the bars of :math:`\pi^*_\beta` beside the
    reference, and a readout of the KL and the expected reward. Without it, a
    ``UserWarning`` says so and a static figure shows the bars at six betas from the
    reference to the greedy policy, evenly spaced in KL, in 2 x 3 panels that fill a
    16:9 slide (12.8 x 7.2 inches). Past 12 responses the bars are the highlighted
    ones (:func:`~klpolicy.plotting.highlighted_actions`) and the others' total.

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
        One problem.
    beta : float, optional
        The slider's starting value.
    labels : sequence of str, optional
        One tick label per response.

    Returns
    -------
    ipywidgets.VBox or matplotlib.figure.Figure
        The widget (its ``.slider`` and ``.readout`` attributes are the slider and
        the text it updates), or the static figure.

    Raises
    ------
    ValueError
        For an invalid problem.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from klpolicy.plotting import explore
    >>> w = explore([0.5, 0.5], [1.0, 0.0], beta=0.5)
    >>> type(w).__name__ in ("VBox", "Figure")
    True
    """
    ref_a, rew_a = _problem(ref, reward)
    beta = V.as_positive_scalar("beta", beta)  # a log-scale slider holds no 0 and no inf
    try:
        import ipywidgets as widgets
    except ImportError:
        import warnings

        warnings.warn(
            "klpolicy.plotting.explore: ipywidgets is not installed, so this is a static "
            "figure of six betas, not a slider; install it with "
            "`pip install 'klpolicy[widgets]'`",
            UserWarning,
            stacklevel=2,
        )
        return _static_explore(ref_a, rew_a, labels)

    spread = float(np.sqrt(np.dot(ref_a, (rew_a - np.dot(ref_a, rew_a)) ** 2))) or 1.0
    slider = widgets.FloatLogSlider(
        value=float(beta), base=10, min=np.log10(spread) - 3, max=np.log10(spread) + 3,
        step=0.02, description="β", readout_format=".3g", continuous_update=True,
    )  # fmt: skip
    from IPython import get_ipython  # ipywidgets depends on IPython
    from IPython.display import display
    from matplotlib.figure import Figure

    # outside a notebook kernel there is nothing to show the figure in (and IPython's
    # display would print its repr): the widget still updates the figure and the readout
    shell = get_ipython()
    in_kernel = shell is not None and getattr(shell, "kernel", None) is not None

    readout = widgets.HTML()
    out = widgets.Output()
    with matplotlib.rc_context(lecture_style()):
        # not a pyplot figure: the notebook shows it only through the Output widget
        fig = Figure(figsize=(7.5, 4.8), layout="constrained")
        ax = fig.add_subplot()
        bars = _Bars(ax, ref_a, rew_a, labels)
        ax.set_title(r"$\pi^*_\beta$ against the reference")

    def update(change=None):
        kl, er = bars.show(float(slider.value))
        readout.value = f"β = {slider.value:.4g}: KL = {kl:.4f} nats, E[r] = {er:.4f}"
        if in_kernel:
            with out:  # redraw: the inline backend shows a static image per display
                out.clear_output(wait=True)
                display(fig)

    slider.observe(update, names="value")
    update()
    box = widgets.VBox([slider, readout, out])
    box.slider, box.readout, box.figure = slider, readout, fig
    return box


def _static_explore(ref_a, rew_a, labels):
    """Six betas from the reference to greedy, 2 x 3 panels on a 16:9 slide (12.8 x 7.2 in)."""
    betas = _sweep_betas(ref_a, rew_a, 6)
    with matplotlib.rc_context(lecture_style()):
        fig, axes = plt.subplots(
            2, 3, figsize=(12.8, 7.2), sharey=True, sharex=True, layout="constrained"
        )
        for k, (ax, b) in enumerate(zip(axes.flat, betas)):
            bars = _Bars(ax, ref_a, rew_a, labels, readout=False)
            kl, er = bars.show(float(b))
            ax.set_title(
                f"{_beta_label(float(b))}\n"
                rf"KL = {kl:.3f} nats, $\mathbb{{E}}[r]$ = {er:.3f}",
                fontsize=14,
            )
            ax.set_ylim(0, 1.25)
            if k:
                ax.get_legend().remove()
            if k % 3:
                ax.set_ylabel("")
            if k < 3:
                ax.set_xlabel("")
            ax.tick_params(axis="x", labelsize=11 if ref_a.size > MAX_BARS else 14)
        fig.suptitle(
            r"$\pi^*_\beta$ from the reference to greedy, evenly spaced in KL"
            " (a static figure: install ipywidgets for the slider)"
        )
    return fig
