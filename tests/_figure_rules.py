"""The rules a lecture figure keeps, as a checker the figure tests share.

- Every panel that shows more than one labelled series has a legend that names every
  labelled series of the panel: its own (twin axes, e.g. a right-hand y axis, share one), or
  one figure-wide legend shared by panels that show the same series.
- Within a panel, no two labelled series share a colour: a dash pattern alone blurs on a
  projector (split a figure into panels where there are more series than colours).
- Every panel that draws axes has an x label, a y label (or shares its y axis with a panel
  that has one) and a title (its own or the figure's); labelled markers are at least 6 pt.
- Mathematical names are written as mathtext: no ``pi_ref``, ``a_2``, ``beta``, ``k1`` or a
  bare Greek letter in a title, axis label, legend or annotation outside ``$...$`` (text in
  backticks is a code name and is left alone).
"""

from __future__ import annotations

import re

from matplotlib.colors import to_rgba

GREEK = "alpha|beta|gamma|delta|epsilon|eps|eta|theta|kappa|lambda|mu|pi|rho|sigma|tau|phi|chi|psi"
#: Plain-text maths: a Greek name as a word, an identifier with a subscript (``a_2``,
#: ``pi_ref``, ``r_j``), an estimator name ``k1``-``k3`` or a Unicode Greek letter.
PLAIN_MATH = re.compile(
    rf"(?<![\w\\])(?:(?:{GREEK})(?![a-z])|[A-Za-z]{{1,2}}_[\w{{]|k[1-3](?!\w))|[\u0370-\u03ff]"
)


def _outside_math(text: str) -> str:
    return re.sub(r"`[^`]*`", "", re.sub(r"\$[^$]*\$", "", text))


def plain_math(text: str) -> str | None:
    """The first piece of maths written as plain text in ``text``, or None."""
    m = PLAIN_MATH.search(_outside_math(text))
    return None if m is None else m.group(0)


def _texts(ax) -> list[str]:
    out = [ax.get_title(loc) for loc in ("left", "center", "right")]
    out += [ax.get_xlabel(), ax.get_ylabel(), *(t.get_text() for t in ax.texts)]
    legend = ax.get_legend()
    if legend is not None:
        out += [t.get_text() for t in legend.get_texts()] + [legend.get_title().get_text()]
    return [t for t in out if t]


def _colour(handle):
    """The colour a legend entry shows for ``handle`` (a line, a collection, a patch or a
    container of those such as a bar chart or an error bar), as rounded RGB."""
    from matplotlib.collections import Collection
    from matplotlib.container import Container
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if isinstance(handle, Container):
        children = [c for c in handle.get_children() if c is not None]
        return _colour(children[0]) if children else None
    if isinstance(handle, Line2D):
        c = handle.get_color()
    elif isinstance(handle, Collection):
        faces = handle.get_facecolor()
        c = faces[0] if len(faces) else (handle.get_edgecolor()[:1] or [None])[0]
    elif isinstance(handle, Patch):
        c = handle.get_facecolor()
    else:
        return None
    if c is None or (isinstance(c, str) and c == "none"):
        return None
    return tuple(round(float(v), 3) for v in to_rgba(c)[:3])


def shared_colours(handles, labels) -> list[tuple[str, str]]:
    """Pairs of labels whose series are drawn in the same colour."""
    seen: dict = {}
    pairs = []
    for h, lab in zip(handles, labels):
        c = _colour(h)
        if c is None:
            continue
        if c in seen:
            pairs.append((seen[c], lab))
        else:
            seen[c] = lab
    return pairs


def _axis_problems(fig, group, panels, where: str) -> list[str]:
    """Missing axis labels or title, and labelled markers too small for a projector."""
    if not any(a.axison for a in group):
        return []  # a diagram drawn on a blank canvas
    out = []
    siblings = [s for a in group for s in a.get_shared_y_axes().get_siblings(a) if s in panels]
    if not any(a.get_xlabel() for a in group):
        out.append(f"{where} has no x label")
    if not any(a.get_ylabel() for a in group + siblings):
        out.append(f"{where} has no y label")
    suptitle = fig._suptitle is not None and fig._suptitle.get_text()
    if not suptitle and not any(
        a.get_title(loc) for a in group for loc in ("left", "center", "right")
    ):
        out.append(f"{where} has no title")
    for a in group:
        for line in a.lines:
            if line.get_label().startswith("_") or line.get_marker() in (None, "None", "", " "):
                continue
            if line.get_markersize() < 6:
                out.append(
                    f"{where}: markers of {line.get_label()!r} are {line.get_markersize()} pt"
                )
    return out


def figure_problems(fig, where: str = "figure") -> list[str]:
    """Every way ``fig`` breaks the lecture-figure rules, as readable lines (empty: none)."""
    problems = []
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    seen: set[int] = set()
    for ax in panels:
        if id(ax) in seen:
            continue
        # twin axes sit exactly on top of each other and share a legend
        group = [a for a in panels if a.get_position().bounds == ax.get_position().bounds]
        seen.update(id(a) for a in group)
        handles = [h for a in group for h in a.get_legend_handles_labels()[0]]
        labels = [lab for a in group for lab in a.get_legend_handles_labels()[1]]
        legends = [a.get_legend() for a in group if a.get_legend() is not None]
        legends += list(fig.legends)  # a figure-wide legend shared by the panels
        shown = {t.get_text() for leg in legends for t in leg.get_texts()}
        name = ax.get_title() or ax.get_ylabel() or f"panel {panels.index(ax) + 1}"
        if len(labels) > 1 and not legends:
            problems.append(f"{where}: panel {name!r} shows {labels} without a legend")
        elif len(labels) > 1 and not set(labels) <= shown:
            problems.append(f"{where}: panel {name!r}'s legend misses {set(labels) - shown}")
        for a, b in shared_colours(handles, labels):
            problems.append(f"{where}: panel {name!r} draws {a!r} and {b!r} in one colour")
        problems += _axis_problems(fig, group, panels, f"{where}: panel {name!r}")
    for ax in fig.axes:
        for text in _texts(ax):
            bad = plain_math(text)
            if bad is not None:
                problems.append(f"{where}: {bad!r} written as plain text in {text!r}")
    if fig._suptitle is not None and plain_math(fig._suptitle.get_text()):
        problems.append(f"{where}: plain-text maths in the title {fig._suptitle.get_text()!r}")
    return problems
