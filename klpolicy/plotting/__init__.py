"""Figures for lectures and self-study (matplotlib; ``import klpolicy`` never imports it).

* :mod:`~klpolicy.plotting.figures`: one function per figure, each drawing on ``ax``
  when given, in the lecture style otherwise.
* :mod:`~klpolicy.plotting.dynamics`: :func:`landing_points` and :func:`training_path`,
  where trainer rules land (:mod:`klpolicy.dynamics`) and the path they take.
* :mod:`~klpolicy.plotting.games`: :func:`nash_md_trajectory`, Nash-MD on the 3-outcome
  simplex (:mod:`klpolicy.preference.games`).
* :mod:`~klpolicy.plotting.save`: :func:`save_figure`, draw one figure and write it.
* :mod:`~klpolicy.plotting.lecture`: :func:`animate_beta_sweep` (a GIF of
  :math:`\\pi^*_\\beta` as beta sweeps) and :func:`explore` (a notebook beta slider).

A leaf: it uses the library's public API and nothing in the library imports it.
"""

from . import figures as _figures
from .dynamics import landing_points, training_path
from .figures import (
    beta_sweep,
    controller_trace,
    estimator_histograms,
    fixed_points,
    frontier,
    highlighted_actions,
    kl_budget,
    lecture_style,
    soft_best_of_n,
    token_kl,
)
from .games import nash_md_trajectory
from .lecture import animate_beta_sweep, explore
from .save import save_figure

# named here with their comments, which autodoc reads from the module a page documents
#: The Okabe-Ito colour-blind-safe palette (black first).
OKABE_ITO = _figures.OKABE_ITO
#: At most this many actions are drawn one by one in a figure of one series per action;
#: with more, the figure draws a few and summarises the rest (one colour per series).
MAX_SERIES = _figures.MAX_SERIES

__all__ = [
    "MAX_SERIES",
    "OKABE_ITO",
    "animate_beta_sweep",
    "beta_sweep",
    "controller_trace",
    "estimator_histograms",
    "explore",
    "fixed_points",
    "frontier",
    "highlighted_actions",
    "kl_budget",
    "landing_points",
    "lecture_style",
    "nash_md_trajectory",
    "save_figure",
    "soft_best_of_n",
    "token_kl",
    "training_path",
]
