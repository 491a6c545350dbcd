"""The documentation covers the library: every public name in the API reference, every
tutorial a clean jupytext notebook, every page in a toctree.

The Sphinx build itself (tutorials executed, warnings as errors) runs in CI's docs step; set
``KLPOLICY_TEST_DOCS=1`` to run it here as well.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import klpolicy

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API = DOCS / "api"
TUTORIALS = sorted((ROOT / "tutorials").glob("*.md"))

# Optional dependencies whose absence lets a module's import fail (its page is still checked
# when they are installed, as in CI).
OPTIONAL = {"torch", "matplotlib", "hypothesis"}


def _public_modules() -> list[str]:
    """Top-level public modules and subpackages of klpolicy (not private)."""
    names = [m.name for m in pkgutil.iter_modules(klpolicy.__path__) if not m.name.startswith("_")]
    return sorted(names)


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as exc:  # an optional dependency is missing here
        if (exc.name or "").split(".")[0] in OPTIONAL:
            pytest.skip(f"{name} needs {exc.name}")
        raise


def _public_submodules(package) -> list:
    """Public submodules of a subpackage (e.g. klpolicy.testing.strategies), recursively."""
    if not hasattr(package, "__path__"):
        return []
    out = []
    for m in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if any(part.startswith("_") for part in m.name.split(".")[2:]):
            continue
        out.append(_import(m.name))
    return out


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


def test_the_package_has_the_parts_we_expect():
    mods = _public_modules()
    for part in ("core", "sequences", "estimators", "plotting", "app"):
        assert part in mods


@pytest.mark.parametrize("module", _public_modules())
def test_every_public_name_is_in_the_api_reference(module):
    page = API / f"{module}.md"
    assert page.exists(), f"docs/api/{module}.md is missing: klpolicy.{module} has no API page"
    text = page.read_text(encoding="utf-8")
    mod = _import(f"klpolicy.{module}")
    assert f"klpolicy.{module}" in text
    assert hasattr(mod, "__all__"), f"klpolicy.{module} has no __all__"
    missing = [n for n in mod.__all__ if not _mentions(text, n)]
    for sub in _public_submodules(mod):
        missing += [
            f"{sub.__name__}.{n}" for n in getattr(sub, "__all__", []) if not _mentions(text, n)
        ]
    assert missing == [], f"docs/api/{module}.md lacks {missing}"


def test_every_top_level_name_is_in_the_api_reference():
    text = (API / "klpolicy.md").read_text(encoding="utf-8")
    missing = [n for n in klpolicy.__all__ if not _mentions(text, n)]
    assert missing == []
    # submodules that `import klpolicy` binds are named with their page
    for name in klpolicy.__all__:
        if inspect.ismodule(getattr(klpolicy, name)):
            assert f"klpolicy.{name}" in text
            assert re.search(rf"\{{doc\}}`{name}( <\w+>)?`", text), f"no page link for {name}"


def test_autosummary_entries_exist():
    """Every name an API page lists resolves to an object (no stale entries)."""
    token = re.compile(r"^\.\. currentmodule:: (\S+)|\.\. autosummary::\n((?:   .*\n|\n)+)", re.M)
    for page in sorted(API.glob("*.md")):
        current = "klpolicy"
        for match in token.finditer(page.read_text(encoding="utf-8")):
            if match.group(1):
                current = match.group(1)
                continue
            for line in match.group(2).splitlines():
                entry = line.strip()
                if not entry or entry.startswith(":"):
                    continue
                path = entry.lstrip("~")
                full = path if path.startswith("klpolicy.") else f"{current}.{path}"
                modname, _, attr = full.rpartition(".")
                mod = _import(modname)
                assert hasattr(mod, attr), f"{page.name}: {full} does not exist"


def test_api_index_lists_every_page():
    text = (API / "index.md").read_text(encoding="utf-8")
    entries = set()
    for toctree in re.findall(r"```\{toctree\}\n(.*?)```", text, re.S):
        entries |= {
            ln.strip() for ln in toctree.splitlines() if ln.strip() and not ln.startswith(":")
        }
    assert entries == {p.stem for p in API.glob("*.md")} - {"index"}


HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorial_is_a_clean_jupytext_notebook(path):
    text = path.read_text(encoding="utf-8")
    assert re.fullmatch(r"\d\d_[a-z0-9_]+\.md", path.name)
    front = text.split("---\n", 2)
    assert text.startswith("---\n") and len(front) == 3
    header = "---\n" + front[1] + "---\n"
    # the header names the myst format and the python3 kernel (jupytext may add versions)
    for line in HEADER.splitlines():
        if line.strip() and not line.startswith("---"):
            assert line in header.splitlines(), f"{path.name}: header lacks {line!r}"
    assert "outputs" not in header and "execution_count" not in text
    cells = re.findall(r"^```\{code-cell\}(.*)$", text, re.M)
    assert cells, f"{path.name} has no code cells"
    assert all(c.strip() == "ipython3" for c in cells)
    assert re.search(r"^# ", front[2], re.M), f"{path.name} has no title"


def test_no_notebook_outputs_committed():
    assert list((ROOT / "tutorials").glob("*.ipynb")) == []
    tracked = subprocess.run(
        ["git", "ls-files", "docs/tutorials", "docs/_figures", "docs/generated"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if tracked.returncode == 0:  # a git checkout: the copies are build products
        assert tracked.stdout.split() == ["docs/tutorials/index.md"]


def test_every_derivation_page_is_reachable():
    toctree = (DOCS / "derivations" / "index.md").read_text(encoding="utf-8")
    assert ":glob:" in toctree and "\n*\n" in toctree  # the glob picks up every page
    assert (DOCS / "derivations" / "closed_form.md").exists()


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("KLPOLICY_TEST_DOCS") != "1", reason="set KLPOLICY_TEST_DOCS=1 (CI builds docs)"
)
def test_sphinx_build_passes_with_warnings_as_errors(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_nb")
    out = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(DOCS), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert (tmp_path / "api" / "core.html").exists()
    assert built_site_problems(tmp_path) == []


_FOLDED = re.compile(r":::\{admonition\} Solution\n(?::\w+:[^\n]*\n)*?:class: dropdown\n")
_DROPDOWN_DIV = re.compile(r'<div class="(?=[^"]*\bdropdown\b)(?=[^"]*\badmonition\b)[^"]*"')


def built_site_problems(site: Path) -> list[str]:
    """What keeps a built site from folding the solutions away and working offline.

    Every tutorial page must carry one ``admonition dropdown`` block per folded solution of
    its source (the blocks ``docs/_static/dropdown.js`` turns into closed ``<details>``),
    load that script and the bundled MathJax, and load no script or style sheet from the
    network.
    """
    problems = []
    js = site / "_static" / "dropdown.js"
    if not js.exists() or ".admonition.dropdown" not in js.read_text(encoding="utf-8"):
        problems.append("_static/dropdown.js is missing or does not fold .admonition.dropdown")
    for source in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.md")):
        page = site / "tutorials" / f"{source.stem}.html"
        if not page.exists():
            problems.append(f"{page.name} was not built")
            continue
        html = page.read_text(encoding="utf-8")
        want = len(_FOLDED.findall(source.read_text(encoding="utf-8")))
        got = len(_DROPDOWN_DIV.findall(html))
        if got != want:
            problems.append(f"{page.name}: {got} foldable blocks for {want} folded solutions")
        if not re.search(r'<script[^>]+src="\.\./_static/dropdown\.js', html):
            problems.append(f"{page.name} does not load dropdown.js")
        if not re.search(r'<script[^>]+src="\.\./_static/mathjax/tex-chtml\.js', html):
            problems.append(f"{page.name} does not load the bundled MathJax")
        for url in re.findall(r'<(?:script|link)[^>]+(?:src|href)="((?:https?:)?//[^"]*)"', html):
            problems.append(f"{page.name} loads {url} from the network")
    return problems


@pytest.mark.skipif(
    not os.environ.get("KLPOLICY_BUILT_DOCS"),
    reason="set KLPOLICY_BUILT_DOCS to a built site (sphinx -b html docs OUT) to check it",
)
def test_an_existing_build_folds_solutions_and_works_offline():
    assert built_site_problems(Path(os.environ["KLPOLICY_BUILT_DOCS"])) == []


def test_the_built_site_check_catches_unfolded_solutions_and_a_cdn(tmp_path):
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "dropdown.js").write_text(
        (DOCS / "_static" / "dropdown.js").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (tmp_path / "tutorials").mkdir()
    sources = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.md"))
    scripts = (
        '<script defer="defer" src="../_static/mathjax/tex-chtml.js?v=1"></script>\n'
        '<script src="../_static/dropdown.js?v=1"></script>\n'
    )
    for source in sources:
        n = len(_FOLDED.findall(source.read_text(encoding="utf-8")))
        assert n >= 2  # every tutorial has 2-3 folded solutions
        blocks = '<div class="dropdown admonition">Solution</div>\n' * n
        (tmp_path / "tutorials" / f"{source.stem}.html").write_text(scripts + blocks)
    assert built_site_problems(tmp_path) == []
    first, second = (tmp_path / "tutorials" / f"{p.stem}.html" for p in sources[:2])
    first.write_text(first.read_text().replace("dropdown admonition", "admonition", 1))
    second.write_text(
        second.read_text().replace(
            "../_static/mathjax/tex-chtml.js?v=1", "https://cdn.example/mathjax/tex-chtml.js"
        )
    )
    n1 = len(_FOLDED.findall(sources[0].read_text(encoding="utf-8")))
    assert built_site_problems(tmp_path) == [
        f"{first.name}: {n1 - 1} foldable blocks for {n1} folded solutions",
        f"{second.name} does not load the bundled MathJax",
        f"{second.name} loads https://cdn.example/mathjax/tex-chtml.js from the network",
    ]


def test_every_top_level_page_is_in_the_front_toctree():
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    toctree = re.search(r"```\{toctree\}\n(.*?)```", text, re.S).group(1)
    entries = {ln.strip() for ln in toctree.splitlines() if ln.strip() and not ln.startswith(":")}
    pages = {p.stem for p in DOCS.glob("*.md")} - {"index"}
    assert pages <= entries, f"add {sorted(pages - entries)} to the toctree of docs/index.md"


# ---------------------------------------------------------------- one KL convention
# KL(pi || pi_ref) is the *reverse* KL (mode-seeking), KL(pi_ref || pi) the *forward* KL
# (mass-covering); docs/derivations/closed_form.md states it once. These patterns are the
# ways the two have been mixed up.
_PAGES = sorted((ROOT / "tutorials").glob("*.md")) + [
    p  # docs/tutorials/NN_*.md are build copies of tutorials/
    for p in sorted(DOCS.rglob("*.md"))
    if "_build" not in p.parts and not (p.parent.name == "tutorials" and p.name[0].isdigit())
]
# the library's docstrings and comments (read as source text: LaTeX and plain spellings alike)
_SOURCES = sorted((ROOT / "klpolicy").rglob("*.py"))


def _normalise_kl(text: str) -> str:
    """LaTeX and plain spellings of KL(a || b) in one form: KL(pi||pi_ref), KL(pi_ref||pi)."""
    t = re.sub(r"\\mathrm\{KL\}|\\operatorname\{KL\}|D_\{?\\?mathrm\{?KL\}?\}?", "KL", text)
    t = re.sub(r"\\[,;!]|\\left|\\right|\\big|\\Big|[*_`]{0,1}(?=\w)", "", t)
    t = t.replace("\\|", "||").replace("\\pi", "pi").replace("{ref}", "ref")
    t = t.replace("{old}", "old").replace("π", "pi").replace("‖", "||")
    t = re.sub(r"\s+", " ", t).replace("*", "")
    t = re.sub(r"\s*\|\|\s*", "||", t)
    return t


_FORWARD = r"KL\(pi_?(?:ref|old)\|\|pi\)"
_REVERSE = r"KL\(pi\|\|pi_?(?:ref|old)\)"
_WRONG = [
    (rf"reverse[- ]KL\W{{0,4}}{_FORWARD}", "KL(pi_ref || pi) called reverse"),
    (rf"{_FORWARD}\W{{0,4}}(?:is )?(?:the )?reverse", "KL(pi_ref || pi) called reverse"),
    (rf"forward[- ]KL\W{{0,4}}{_REVERSE}", "KL(pi || pi_ref) called forward"),
    (rf"{_REVERSE}\W{{0,4}}(?:is )?(?:the )?forward", "KL(pi || pi_ref) called forward"),
    (r"k3 in the loss[^.]{0,40}reverse", "k3 in the loss differentiates the forward KL"),
    (r"k3 in the loss is a reverse", "k3 in the loss differentiates the forward KL"),
    (r"reverse-KL (?:point|fixed point|solution)", "the k3/TRPO fixed point is the forward-KL one"),
    # the k3-in-the-loss gradient, pi - ref per prefix or -E_q[grad log p], is the forward KL's
    (r"\(pi(?:\(\.\|s\))? - ref(?:\(\.\|s\))?\)[^.]{0,60}reverse", "pi - ref is grad KL(ref||pi)"),
    (r"E\}?_?q\[\\?nabla ?\\?log p\][^.]{0,40}reverse", "-E_q[grad log p] is grad KL(q||p)"),
    (r"forward-KL (?:penalty|regulari[sz]ed optimum pi\*)", "the RLHF penalty is the reverse KL"),
]


def test_the_kl_convention_is_stated_once():
    text = (DOCS / "derivations" / "closed_form.md").read_text(encoding="utf-8")
    norm = _normalise_kl(text)
    assert "(kl-direction)=" in text
    assert re.search(rf"reverse KL is \$?{_REVERSE}", norm), "the reverse KL is not defined"
    assert re.search(rf"forward KL is \$?{_FORWARD}", norm), "the forward KL is not defined"
    assert "mode-seeking" in text and "mass-covering" in text


@pytest.mark.parametrize(
    "path", _PAGES + _SOURCES, ids=[str(p.relative_to(ROOT)) for p in _PAGES + _SOURCES]
)
def test_forward_and_reverse_kl_are_named_one_way(path):
    norm = _normalise_kl(path.read_text(encoding="utf-8"))
    found = [(why, m.group(0)) for pattern, why in _WRONG for m in re.finditer(pattern, norm, re.I)]
    assert found == [], f"{path.name}: {found}"


def test_the_kl_convention_check_catches_the_old_mistakes():
    # the phrasings that used to be in tutorial 08 and would be wrong anywhere
    bad = [
        "## k3 in the loss: the reverse KL",
        r"the gradient of the *reverse* KL $\mathrm{KL}(\pi_{ref}\|\pi)$.",
        r"$\mathrm{KL}(\pi_{ref}\,\|\,\pi)$, the reverse KL,",
        "Per token, k3 in the loss is a reverse KL at every prefix",
        r"the *forward* KL $\mathrm{KL}(\pi\,\|\,\pi_{ref})$, the RLHF penalty",
        "reverse-KL point at the policy-dependent coefficient",
        # the docstrings that used to be in estimators/targets.py and torch/closed_form.py
        "* k3 in the loss has expected gradient :math:`\\nabla\\mathrm{KL}(\\pi_{ref}\\|\\pi)`\n"
        "  (the *reverse* KL), so with plain advantages",
        "the reverse-KL fixed point at the effective coefficient :math:`\\beta\\sigma_\\pi`.",
        "of the reference's support, started at the reverse-KL solution. Summing",
        "gradient ``P_pi(s) (pi(.|s) - ref(.|s))`` in the logits of prefix ``s``: a\n"
        "    reverse KL *per prefix*.",
        ":math:`-\\mathbb{E}_q[\\nabla\\log p]`, the gradient of the *reverse*\n        KL: k3",
    ]
    for line in bad:
        norm = _normalise_kl(line)
        assert any(re.search(p, norm, re.I) for p, _ in _WRONG), line
    good = r"the *forward* KL $\mathrm{KL}(\pi_{ref}\|\pi)$ (mass-covering), not the *reverse* KL"
    assert not any(re.search(p, _normalise_kl(good), re.I) for p, _ in _WRONG)


def test_the_tutorial_index_has_a_core_and_an_advanced_track():
    text = (DOCS / "tutorials" / "index.md").read_text(encoding="utf-8")
    trees = dict(
        re.findall(
            r"```\{toctree\}\n(?::maxdepth: \d\n)?:caption: ([^\n]*)\n\n(.*?)```", text, re.S
        )
    )
    assert set(trees) == {"Core track", "Advanced track"}
    core = trees["Core track"].split()
    advanced = trees["Advanced track"].split()
    for stem in ("01_worked_example", "02_kl_budget", "10_diversity_calibration",
                 "05_best_of_n_overoptimization", "04_token_level", "07_dpo"):  # fmt: skip
        assert stem in core
    assert advanced == [
        "03_estimators",
        "06_controllers",
        "08_torch_trainers",
        "09_property_testing",
        "13_your_kl_term",
        "15_negative_kl",
        "17_beta_you_get",
        "18_where_trainer_lands",
        "20_preference_games",
    ]
    # every tutorial is on exactly one track (a listed one that does not exist yet is
    # dropped by docs/conf.py until its file lands)
    listed = core + advanced
    assert len(listed) == len(set(listed))
    assert {p.stem for p in TUTORIALS} <= set(listed)


def test_math_renders_offline_with_the_bundled_mathjax():
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    path = re.search(r'^mathjax_path = "([^"]+)"', conf, re.M).group(1)
    assert not path.startswith(("http:", "https:", "//")), "MathJax must not come from a CDN"
    bundled = DOCS / "_static" / path
    assert bundled.exists() and 'VERSION="3.' in bundled.read_text(encoding="utf-8")
    fonts = DOCS / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert len(list(fonts.glob("*.woff"))) >= 20
    assert (DOCS / "_static" / "mathjax" / "input" / "tex" / "extensions" / "ams.js").exists()


def _title(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    return re.search(r"^# (.*)$", text, re.M).group(1)


def test_cross_references_show_words_not_raw_latex():
    """A {doc} link without its own text shows the target's title; a title with math would
    show as raw LaTeX in the link, so such links must carry words of their own."""
    pages = list(TUTORIALS) + sorted((DOCS / "derivations").glob("*.md"))
    bad = []
    for page in pages:
        here = DOCS / "tutorials" if page.parent.name == "tutorials" else page.parent
        for target in re.findall(r"\{doc\}`([^`<]+)`", page.read_text(encoding="utf-8")):
            if target.startswith("/"):
                path = DOCS / (target.lstrip("/") + ".md")
            elif (here / (target + ".md")).exists():
                path = here / (target + ".md")
            else:
                path = ROOT / "tutorials" / (Path(target).name + ".md")
            if "$" in _title(path):
                bad.append(f"{page.name}: {{doc}}`{target}`")
    assert bad == []


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorial_figures_use_the_lecture_style(path):
    """A tutorial that draws with pyplot switches the lecture style on first (or draws only
    through klpolicy.plotting, which applies it), and never shrinks text below 14 pt."""
    text = path.read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```\{code-cell\} ipython3\n(.*?)```", text, re.S))
    if re.search(r"\bplt\.(subplots|figure|plot|semilogx|semilogy)\(", code):
        first_draw = re.search(r"\bplt\.(subplots|figure|plot|semilogx|semilogy)\(", code).start()
        style = re.search(r"lecture_style\(\)", code)
        assert style and style.start() < first_draw, f"{path.name} draws before the lecture style"
    small = [int(n) for n in re.findall(r"fontsize=(\d+)", code) if int(n) < 14]
    assert small == [], f"{path.name} sets fontsize {small}"


# ---------------------------------------------------------------- numpydoc validation

_AUTODOC = re.compile(r"^\.\. currentmodule:: (\S+)|\.\. autosummary::\n((?:   .*\n|\n)+)", re.M)


def _documented_objects() -> list[tuple[str, str, object]]:
    """``(import path, page module, object)`` of what the API pages document: every
    autosummary entry and, for a class (the class template documents ``:members:``), its
    own public members. Modules are left out, as numpydoc's Sphinx hook does not validate
    them."""
    out = []
    for page in sorted(API.glob("*.md")):
        current = "klpolicy"
        for match in _AUTODOC.finditer(page.read_text(encoding="utf-8")):
            if match.group(1):
                current = match.group(1)
                continue
            for line in match.group(2).splitlines():
                entry = line.strip().lstrip("~")
                if not entry or entry.startswith(":"):
                    continue
                full = entry if entry.startswith("klpolicy.") else f"{current}.{entry}"
                modname, _, attr = full.rpartition(".")
                try:
                    obj = getattr(_import(modname), attr)
                except pytest.skip.Exception:  # an optional dependency is missing here
                    continue
                if inspect.ismodule(obj):
                    continue
                out.append((full, current, obj))
                if inspect.isclass(obj):
                    out += [
                        (f"{full}.{a}", current, v) for a, v in vars(obj).items() if a[0] != "_"
                    ]
    return out


def _numpydoc_errors(full: str, page_module: str, obj) -> list:
    """numpydoc's errors on ``obj`` as the docs build sees it: a constant (data) with the
    docstring autodoc gives it, its ``#:`` comment in the page's module, else its type's."""
    from numpydoc.docscrape import get_doc_object
    from numpydoc.validate import validate

    module_data = full == f"{page_module}.{full.rpartition('.')[2]}"
    if not module_data or inspect.isclass(obj) or callable(obj):
        return validate(full)["errors"]
    from sphinx.pycode import ModuleAnalyzer

    analyzer = ModuleAnalyzer.for_module(page_module)
    analyzer.analyze()
    comment = analyzer.attr_docs.get(("", full.rpartition(".")[2]))
    text = "\n".join(comment) if comment else (getattr(obj, "__doc__", None) or "")
    return validate(get_doc_object(obj, what="data", doc=text))["errors"]


def _conf_value(name: str):
    """A literal assigned in docs/conf.py (read, not executed: conf.py sets the environment)."""
    tree = ast.parse((DOCS / "conf.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"docs/conf.py does not set {name}")


@pytest.mark.slow
def test_docstrings_pass_the_numpydoc_checks_the_docs_build_turns_on():
    # the same validator numpydoc's Sphinx hook runs, on the same objects, for the checks
    # docs/conf.py turns on: a failure here is a warning (an error under -W) in the build
    pytest.importorskip("numpydoc")
    pytest.importorskip("sphinx")
    checks = _conf_value("numpydoc_validation_checks")
    assert {"PR02", "PR08", "RT01", "RT02", "RT03", "SS02"} <= checks
    excluded = [re.compile(p) for p in _conf_value("numpydoc_validation_exclude")]
    objects = [o for o in _documented_objects() if not any(p.search(o[0]) for p in excluded)]
    assert len(objects) > 400  # every page read
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated aliases warn when loaded
        for name, page_module, obj in objects:
            for code, message in _numpydoc_errors(name, page_module, obj):
                if code in checks:
                    failures.append(f"{name}: {code} {message}")
    assert failures == [], "\n".join(failures)


def test_the_numpydoc_check_reads_conf_and_finds_failures():
    validate = pytest.importorskip("numpydoc.validate").validate
    assert "RT03" in _conf_value("numpydoc_validation_checks")

    def bad(x):
        """lower-case summary.

        Parameters
        ----------
        x : int
            an input.
        y : int
            Not a parameter.

        Returns
        -------
        int
        """
        return x

    bad.__module__ = __name__
    globals()["_numpydoc_bad"] = bad
    bad.__qualname__ = bad.__name__ = "_numpydoc_bad"
    codes = {code for code, _ in validate(f"{__name__}._numpydoc_bad")["errors"]}
    assert {"SS02", "PR02", "PR08", "RT03"} <= codes
