"""Draw one figure in the lecture style and write it to a file."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["save_figure"]

#: Resolutions a figure may be saved at: 1200 dpi is print quality (a 7.5 x 4.8 inch
#: figure is then 9000 x 5760 pixels); more only exhausts memory.
DPI_RANGE = "[1, 1200]"
#: Suffixes that name the same format.
_ALIASES = {"jpg": "jpeg", "tif": "tiff"}


def as_dpi(dpi: object) -> float:
    """``dpi`` as a resolution in :data:`DPI_RANGE`, or a ValueError naming ``dpi``."""
    from ..core.internal import validation as V

    return V.as_scalar("dpi", dpi, DPI_RANGE, what="dots per inch")


def figure_path(path: str | os.PathLike[str], format: str | None, formats) -> tuple[Path, str]:
    """The file a figure is written to and its format, refusing a suffix that names another.

    ``path`` without a suffix gets ``.png`` (matplotlib's convention) unless ``format``
    is given, in which case it is written as named.
    """
    from ..core.internal import validation as V

    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"`path` must be a file path (str or os.PathLike); got {V.describe(path)}")
    out = Path(path)
    suffix = out.suffix[1:].lower()
    known = sorted(formats)
    if format is not None:
        if not isinstance(format, str) or format.lower() not in formats:
            raise ValueError(f"`format` must be one of {', '.join(known)}; got {format!r}")
        format = format.lower()
    if suffix in formats:
        if format is not None and _ALIASES.get(format, format) != _ALIASES.get(suffix, suffix):
            raise ValueError(
                f"`format` {format!r} does not match the suffix of `path` {str(path)!r}: "
                f"name the file *.{format} or drop the format"
            )
        return out, suffix
    if format is not None:
        return out, format
    if suffix:
        raise ValueError(
            f"`path` {str(path)!r} has the suffix .{suffix}, which names no image format; "
            f"use one of {', '.join('.' + k for k in known)} or give `format`"
        )
    return out.with_name(out.name.rstrip(".") + ".png"), "png"


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
    ``.pdf``, ...); ``format`` names it for a path without a suffix and must agree
    with a suffix that names a format (``x.png`` with ``format="svg"`` is refused,
    never SVG bytes in a ``.png`` file). A path with no suffix and no ``format`` is
    written as PNG with ``.png`` appended, as matplotlib does, and the returned path
    says so.

    Parameters
    ----------
    draw : callable
        Called once with the new :class:`matplotlib.axes.Axes`; e.g.
        ``lambda ax: beta_sweep(ref, reward, ax=ax)``.
    path : str or os.PathLike
        Where to write the figure.
    dpi : float, optional
        Resolution, 1 to 1200 dots per inch; the lecture style's 150 by default.
    title : str, optional
        A title set after drawing.
    format : str, optional
        ``"png"``, ``"svg"``, ``"pdf"``, ...; by default the suffix of ``path``
        decides (SVG and PDF keep the figure as vectors, for slides).

    Returns
    -------
    pathlib.Path
        The file written: ``path``, or ``path`` with ``.png`` appended when it has no
        suffix and no ``format`` was given.

    Raises
    ------
    ValueError
        When ``draw`` is not callable, ``path`` is not a path, ``dpi`` is outside 1 to
        1200, ``title`` is not a string, ``format`` is unknown or disagrees with the
        suffix of ``path``, or the suffix names no format.
    OSError
        When the file cannot be written.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from klpolicy.plotting import beta_sweep, save_figure
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = save_figure(lambda ax: beta_sweep([0.5, 0.5], [1.0, 0.0], ax=ax), pathlib.Path(d) / "s.png")
    ...     p.stat().st_size > 0
    ...     save_figure(lambda ax: beta_sweep(ax=ax), pathlib.Path(d) / "t").name
    True
    't.png'
    """
    import matplotlib
    import matplotlib.pyplot as plt

    from ..core.internal import validation as V
    from .figures import _axes, lecture_style

    if not callable(draw):
        raise ValueError(f"`draw` must be a callable taking the axes; got {V.describe(draw)}")
    if dpi is not None:
        dpi = as_dpi(dpi)
    if title is not None and not isinstance(title, str):
        raise ValueError(f"`title` must be a string; got {V.describe(title)}")
    with matplotlib.rc_context(lecture_style()):
        ax = _axes(None)
        try:
            out, fmt = figure_path(path, format, ax.figure.canvas.get_supported_filetypes())
            draw(ax)
            if title is not None:
                ax.set_title(title)
            kwargs: dict[str, Any] = {} if dpi is None else {"dpi": dpi}
            ax.figure.savefig(out, format=fmt, **kwargs)
        finally:
            plt.close(ax.figure)
    return out
