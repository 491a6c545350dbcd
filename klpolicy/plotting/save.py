"""Draw one figure in the lecture style and write it to a file."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["save_figure"]


def save_figure(
    draw: Callable[[Any], Any],
    path: str | os.PathLike[str],
    *,
    dpi: float | None = None,
    title: str | None = None,
    format: str | None = None,
) -> Path:
    """Draw ``draw(ax)`` on a new lecture-size Axes under :func:`lecture_style` and save it.

    The figure is closed afterwards, so a loop of calls does not accumulate open
    figures. The file format follows the suffix of ``path`` (``.png``, ``.svg``,
    ``.pdf``, ...), as :meth:`matplotlib.figure.Figure.savefig` decides.

    Parameters
    ----------
    draw : callable
        Called once with the new :class:`matplotlib.axes.Axes`; e.g.
        ``lambda ax: beta_sweep(ref, reward, ax=ax)``.
    path : str or os.PathLike
        Where to write the figure.
    dpi : float, optional
        Resolution; the lecture style's 150 by default.
    title : str, optional
        A title set after drawing.
    format : str, optional
        ``"png"``, ``"svg"``, ``"pdf"``, ...; by default the suffix of ``path``
        decides (SVG and PDF keep the figure as vectors, for slides).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    ValueError
        When ``draw`` is not callable, ``path`` is not a path, ``dpi`` is not a
        positive finite number or ``title`` is not a string.
    OSError
        When the file cannot be written.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from klpolicy.plotting import beta_sweep, save_figure
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = save_figure(lambda ax: beta_sweep([0.5, 0.5], [1.0, 0.0], ax=ax), pathlib.Path(d) / "s.png")
    ...     p.stat().st_size > 0
    True
    """
    import matplotlib
    import matplotlib.pyplot as plt

    from ..core.internal import validation as V
    from .figures import _axes, lecture_style

    if not callable(draw):
        raise ValueError(f"`draw` must be a callable taking the axes; got {V.describe(draw)}")
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"`path` must be a file path (str or os.PathLike); got {V.describe(path)}")
    if dpi is not None:
        dpi = V.as_positive_scalar("dpi", dpi)
    if title is not None and not isinstance(title, str):
        raise ValueError(f"`title` must be a string; got {V.describe(title)}")
    path = Path(path)
    with matplotlib.rc_context(lecture_style()):
        ax = _axes(None)
        try:
            draw(ax)
            if title is not None:
                ax.set_title(title)
            kwargs: dict[str, Any] = {} if dpi is None else {"dpi": dpi}
            if format is not None:
                kwargs["format"] = format
            ax.figure.savefig(path, **kwargs)
        finally:
            plt.close(ax.figure)
    return path
