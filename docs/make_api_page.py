"""Write the API page ``docs/api/<module>.md`` of a klpolicy module from its ``__all__``.

Run from the repository root when a module is added (``tests/test_docs.py`` fails until
every public name has a page), then edit the page freely and add it to
``docs/api/index.md``::

    python docs/make_api_page.py estimators preference

Names are grouped into functions, classes and constants; a name defined in another public
module is linked to its page there instead of being documented twice; the public
submodules of a subpackage (``klpolicy.testing.strategies``) get a section each.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from pathlib import Path

API = Path(__file__).resolve().parent / "api"


def _is_public(modname: str) -> bool:
    parts = modname.split(".")
    return parts[0] == "klpolicy" and not any(p.startswith("_") for p in parts[1:])


def _home(obj) -> str | None:
    if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return getattr(obj, "__module__", None)
    return None


def _autosummary(names: list[str], toctree: bool = True) -> list[str]:
    head = ["```{eval-rst}", ".. autosummary::"]
    head += ["   :toctree: ../generated/", ""] if toctree else [""]
    return [*head, *(f"   {n}" for n in names), "```", ""]


def _groups(mod, names: list[str]) -> tuple[dict[str, list[str]], list[str], list[str]]:
    groups: dict[str, list[str]] = {"Functions": [], "Classes": [], "Constants": []}
    linked, subs = [], []
    for name in names:
        obj = getattr(mod, name)
        if inspect.ismodule(obj):
            subs.append(name)
            continue
        home = _home(obj)
        if (
            home
            and home != mod.__name__
            and not home.startswith(mod.__name__ + ".")
            and _is_public(home)
            and name in getattr(importlib.import_module(home), "__all__", [])
        ):
            linked.append(f"{home}.{name}")
        elif inspect.isclass(obj):
            groups["Classes"].append(name)
        elif callable(obj):
            groups["Functions"].append(name)
        else:
            groups["Constants"].append(name)
    return groups, linked, subs


def page(module: str, title: str | None = None) -> str:
    """The MyST source of the API page of ``klpolicy.<module>``."""
    mod = importlib.import_module(f"klpolicy.{module}")
    groups, linked, subs = _groups(mod, list(mod.__all__))
    out = [f"# `klpolicy.{module}`" + (f": {title}" if title else ""), ""]
    out += ["```{eval-rst}", f".. automodule:: klpolicy.{module}", "   :no-members:", ""]
    out += [f".. currentmodule:: klpolicy.{module}", "```", ""]
    for heading, names in groups.items():
        if names:
            out += [f"## {heading}", "", *_autosummary(names)]
    if linked:
        out += ["## Re-exported", "", "Documented where they are defined.", ""]
        out += _autosummary([f"~{n}" for n in linked], toctree=False)
    documented = {id(getattr(mod, n)) for n in mod.__all__}
    if hasattr(mod, "__path__"):
        for info in pkgutil.walk_packages(mod.__path__, mod.__name__ + "."):
            if not _is_public(info.name) or info.name.endswith(".conftest"):
                continue
            sub = importlib.import_module(info.name)
            names = [
                n for n in getattr(sub, "__all__", []) if id(getattr(sub, n)) not in documented
            ]
            g, _, _ = _groups(sub, names)
            flat = [n for ns in g.values() for n in ns]
            if flat:
                out += [f"## `{info.name}`", "", "```{eval-rst}", f".. currentmodule:: {info.name}"]
                out += ["```", "", *_autosummary(flat)]
    elif subs:
        out += ["## Submodules", "", *(f"* `klpolicy.{module}.{s}`" for s in subs), ""]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(API.parents[1]))
    for name in sys.argv[1:]:
        path = API / f"{name}.md"
        path.write_text(page(name), encoding="utf-8")
        print(f"wrote {path}; add `{name}` to docs/api/index.md")
