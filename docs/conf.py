"""Sphinx configuration of the klpolicy documentation.

Build with warnings as errors from the repository root::

    python -m sphinx -W -b html docs docs/_build/html

The tutorials live in ``tutorials/`` (jupytext MyST notebooks, no outputs) and
are copied into ``docs/tutorials/`` here, then executed by myst-nb. The
headline figures of ``klpolicy demo`` are written into ``docs/_figures/``.
Both copies are build products (gitignored).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
# notebook kernels are subprocesses: let them import this checkout's klpolicy
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
)
# The kernels get an IPython profile of their own (a build product, gitignored with _build):
# it quiets the kernel's own log (ipykernel warns on every start that a local kernel talks
# over TCP without encryption), so the build prints no kernel warnings. Warnings raised by
# the tutorials' own code are cell output and still appear in the pages.
_IPYTHONDIR = DOCS / "_build" / "ipython"
(_IPYTHONDIR / "profile_default").mkdir(parents=True, exist_ok=True)
(_IPYTHONDIR / "profile_default" / "ipython_kernel_config.py").write_text(
    "c.IPKernelApp.log_level = 'ERROR'\n", encoding="utf-8"
)
os.environ["IPYTHONDIR"] = str(_IPYTHONDIR)
# kernels draw inline whatever the environment says (MPLBACKEND=Agg would hide every figure);
# this process writes files and switches itself to Agg in klpolicy.app.demo.write_figures
os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"

import klpolicy  # noqa: E402

project = "klpolicy"
author = "klpolicy developers"
copyright = "klpolicy developers, BSD-3-Clause"
release = version = klpolicy.__version__

extensions = [
    "myst_nb",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
]

exclude_patterns = ["_build", "_static", "**.ipynb_checkpoints", "jupyter_execute"]
templates_path = ["_templates"]
html_theme = "alabaster"
html_static_path = ["_static"]
# MathJax 3.2.2 is bundled in docs/_static/mathjax (taken from the PyPI wheel of
# sphinx-mathjax-offline 0.0.2; Apache-2.0): the math renders without a network, e.g. in a
# lecture room. See docs/_static/mathjax/README.md.
mathjax_path = "mathjax/tex-chtml.js"
# folded exercise solutions: admonitions with `:class: dropdown` become <details> (offline JS)
html_js_files = ["dropdown.js"]
html_css_files = ["klpolicy.css"]
html_theme_options = {"description": "Exact KL-regularised policies", "page_width": "1100px"}

# ---------------------------------------------------------------- API reference
autosummary_generate = True
autosummary_imported_members = False
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
autodoc_default_options = {"member-order": "bysource"}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# numpydoc's validation of every docstring the API pages document, for the checks every one
# of them passes (tests/test_docs.py runs the same validator on the same objects, quickly):
# layout (GL01-GL10 but GL02, GL06-GL08), a summary that starts with a capital and has
# no leading whitespace (SS02, SS04), parameters that exist, with types and descriptions that
# start with a capital and end with a period (PR02, PR05, PR06, PR08-PR10), a Returns
# section that says what a function returns (RT01-RT05, YD01), and See Also entries that
# are well formed (SA02-SA04). Not on, with the count of objects that fail today: ES01
# (no extended summary, 329), EX01 (no example, 325), SA01 (no See Also, 538), PR01
# (a parameter undocumented, 97: most are the fields of result classes, documented as
# Attributes), PR03/PR04/PR07 (order, types, descriptions
# of parameters documented together), SS01/SS03/SS05/SS06/GL02 (the summaries of data,
# of result fields, "Alias for field number 0", and of constants whose #: comment is two
# lines).
numpydoc_validation_checks = {
    "GL01", "GL03", "GL05", "GL09", "GL10",
    "SS02", "SS04",
    "PR02", "PR05", "PR06", "PR08", "PR09", "PR10",
    "RT01", "RT02", "RT03", "RT04", "RT05", "YD01",
    "SA02", "SA03", "SA04",
}  # fmt: skip
# four functions of klpolicy.dynamics lack a Returns section (RT01); that package is being
# rewritten on another branch: give them one there and drop this line
numpydoc_validation_exclude = {
    r"^klpolicy\.dynamics\.(rule_names|Rule\.resolve|solvers\.family_roots|solvers\.fixed_points)$"
}

# ---------------------------------------------------------------- MyST and notebooks
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]

nb_execution_mode = os.environ.get("KLPOLICY_NB_EXECUTION", "cache")
nb_execution_timeout = 180
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_merge_streams = True


_TORCH = re.compile(
    r"^\s*(import torch\b|from torch\b|import klpolicy\.torch|from klpolicy\.torch\b"
    r"|from klpolicy import .*\btorch\b)",
    re.M,
)


def _copy_tutorials() -> list[str]:
    """Mirror ../tutorials/*.md into docs/tutorials/; return the copies that need torch."""
    src, dst = ROOT / "tutorials", DOCS / "tutorials"
    dst.mkdir(exist_ok=True)
    wanted = {p.name: p for p in sorted(src.glob("[0-9]*.md"))}
    for old in dst.glob("[0-9]*.md"):
        if old.name not in wanted:
            old.unlink()
    needs_torch = []
    for name, path in wanted.items():
        text = path.read_text(encoding="utf-8")
        copy = dst / name
        if not copy.exists() or copy.read_text(encoding="utf-8") != text:
            shutil.copyfile(path, copy)  # only when changed: keeps Sphinx's cache valid
        if _TORCH.search(text):
            needs_torch.append(f"tutorials/{name}")
    return needs_torch


_torch_tutorials = _copy_tutorials()
# Without torch (or with KLPOLICY_DOCS_SKIP_TORCH=1), tutorials that need it are shown
# unexecuted; CI installs torch and runs them.
_skip_torch = (
    importlib.util.find_spec("torch") is None or os.environ.get("KLPOLICY_DOCS_SKIP_TORCH") == "1"
)
nb_execution_excludepatterns = list(_torch_tutorials) if _skip_torch else []


def _write_figures() -> None:
    from klpolicy.app.demo import write_figures

    write_figures(DOCS / "_figures")


_write_figures()


#: Pages of the front toctree that others write; each is linked only once it exists.
OPTIONAL_PAGES = ("testing", "performance")


def _drop_missing_pages(app, docname, source):
    if docname == "tutorials/index":
        # a tutorial another change adds (e.g. 11_*) is listed only once its file exists
        for stem in re.findall(r"^(\d\d_[a-z0-9_]+)$", source[0], flags=re.M):
            if not (ROOT / "tutorials" / f"{stem}.md").exists():
                source[0] = re.sub(rf"^{stem}\n", "", source[0], flags=re.M)
        return
    if docname != "index":
        return
    for page in OPTIONAL_PAGES:
        if not (DOCS / f"{page}.md").exists():
            source[0] = re.sub(rf"^{page}\n", "", source[0], flags=re.M)


_NUMPYDOC_SECTIONS = {
    "parameters", "returns", "yields", "receives", "raises", "warns", "other parameters",
    "attributes", "methods", "see also", "notes", "warnings", "references", "examples",
}  # fmt: skip


def _module_headings_to_rubrics(app, what, name, obj, options, lines):
    """Free-form headings in module docstrings become rubrics.

    As sections they would register labels ("Numerical method"), and two
    modules with the same heading would then clash under ``-W``.
    """
    if what != "module":
        return
    i = 0
    while i + 1 < len(lines):
        title, under = lines[i].strip(), lines[i + 1].strip()
        if (
            title
            and len(under) >= len(title)
            and set(under) <= set("-=~^")
            and title.lower() not in _NUMPYDOC_SECTIONS
            and (i == 0 or not lines[i - 1].strip())
        ):
            lines[i : i + 2] = [f".. rubric:: {title}", ""]
        i += 1


def setup(app):
    app.connect("source-read", _drop_missing_pages)
    # before numpydoc (priority 500) reads the docstring
    app.connect("autodoc-process-docstring", _module_headings_to_rubrics, priority=100)
