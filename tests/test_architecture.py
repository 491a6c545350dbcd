"""The folder tree is the architecture: the import graph keeps the rules of docs/architecture.md.

The graph is read from the source (``ast``), every import counted, those inside
functions too. It fails on an import circle between modules, on core importing
anything else of klpolicy, on the numpy side importing a leaf (``app``, ``plotting``,
``testing``, ``torch``), on a private name (or private module) imported across
a subpackage boundary other than through ``klpolicy.core.internal``, and on a check of
``core/_validation`` that one part alone calls (it belongs in that part's ``_inputs``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import klpolicy

PACKAGE = Path(klpolicy.__file__).resolve().parent
LEAVES = {"app", "plotting", "testing", "testbed", "torch"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {
    _module_name(p): p
    for p in sorted(PACKAGE.rglob("*.py"))
    if p.name not in ("conftest.py", "__main__.py")
}


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def _part(name: str) -> str:
    """The part a module belongs to: ``klpolicy.core._tilt`` -> ``core``.

    The top level's own private file (``klpolicy._moved``, the table of moved paths) belongs
    to the top level ``""``.
    """
    parts = name.split(".")
    if len(parts) == 2 and parts[1].startswith("_") and not _is_package(name):
        return ""
    return parts[1] if len(parts) > 1 else ""


def _imports(name: str, path: Path):
    """(target module, imported name or None, line) for every klpolicy import in a module."""
    package = name if _is_package(name) else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "klpolicy":
                    yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "klpolicy":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:  # `from . import module`
                    yield sub, None, node.lineno
                else:
                    yield target, alias.name, node.lineno


EDGES = {
    (src, tgt, name, line)
    for src, path in MODULES.items()
    for tgt, name, line in _imports(src, path)
    if tgt in MODULES
}


def _private(module: str, name: str | None) -> bool:
    parts = module.split(".")[1:] + ([name] if name else [])
    return any(p.startswith("_") and not p.startswith("__") for p in parts)


def test_the_graph_was_read():
    assert len(MODULES) > 40 and len(EDGES) > 100
    assert any(
        s == "klpolicy.core.closed_form" and t == "klpolicy.core._tilt" for s, t, _, _ in EDGES
    )


def test_no_import_circles():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for src, tgt, _, _ in EDGES:
        if src != tgt:
            graph[src].add(tgt)
    # Tarjan's strongly connected components
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    assert sccs == [], f"import circles: {sccs}"


def test_core_imports_nothing_else_from_klpolicy():
    bad = [
        f"{s}:{ln} imports {t}"
        for s, t, _, ln in EDGES
        if _part(s) == "core" and _part(t) != "core"
    ]
    assert bad == []


def test_nothing_on_the_numpy_side_imports_a_leaf():
    bad = [
        f"{s}:{ln} imports {t}"
        for s, t, _, ln in EDGES
        if _part(t) in LEAVES and _part(s) not in LEAVES and s != "klpolicy"
    ]
    bad += [
        f"klpolicy/__init__.py imports {t}"
        for s, t, _, _ in EDGES
        if s == "klpolicy" and _part(t) in LEAVES
    ]
    assert bad == []


def test_no_private_name_crosses_a_subpackage_boundary():
    bad = [
        f"{s}:{ln} imports {t}" + (f".{n}" if n else "")
        for s, t, n, ln in EDGES
        if _part(s) != _part(t) and _private(t, n)
    ]
    assert bad == [], "use the part's public API or klpolicy.core.internal: " + "; ".join(bad)


def _validation_users() -> dict[str, set[str]]:
    """The parts that call each name of ``core/_validation`` (``V.name`` on its import)."""
    users: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if _is_package(name) else name.rpartition(".")[0]
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = [node.module] if node.module else []
                target = ".".join(base + module) if node.level else node.module
                for alias in node.names:
                    if (target, alias.name) in (
                        ("klpolicy.core.internal", "validation"),
                        ("klpolicy.core", "_validation"),
                    ):
                        aliases.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in aliases:
                    users.setdefault(node.attr, set()).add(_part(name))
            elif name == "klpolicy.core._validation" and isinstance(node, ast.Name):
                users.setdefault(node.id, set()).add("core")  # a building block of core's checks
    return users


def test_a_check_one_part_alone_calls_lives_in_that_part():
    """Rule 5: ``core/_validation`` holds what core or several parts call, not one part's checks."""
    tree = ast.parse((PACKAGE / "core" / "_validation.py").read_text(encoding="utf-8"))
    checks = [
        n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")
    ]
    assert len(checks) > 30
    users = _validation_users()
    assert users["as_token_tree"] >= {"sequences", "sampling", "torch"}
    bad = [
        f"{c} (called by {sorted(users[c])[0]} alone: move it to that part's _inputs)"
        for c in checks
        if "core" not in users.get(c, set()) and len(users.get(c, set())) == 1
    ]
    assert bad == [], "; ".join(bad)


def test_core_internal_lists_what_it_offers():
    from klpolicy.core import internal

    assert "internal" in internal.__doc__.lower() or internal.__doc__ is None
    for name in internal.__all__:
        assert not name.startswith("_") and hasattr(internal, name)
        if internal.__doc__ is not None:
            assert name in internal.__doc__, f"core.internal's docstring does not describe {name}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "code",
    [
        "import klpolicy",
        "import klpolicy.sequences, klpolicy.estimators, klpolicy.control, klpolicy.preference",
    ],
)
def test_import_klpolicy_loads_no_leaf_and_no_scipy_optimize(code):
    probe = (
        f"import sys; {code}; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'matplotlib', 'hypothesis', 'jax') or m.startswith('scipy.optimize') "
        "or m.split('.')[:2] in (['klpolicy', l] for l in ('app', 'plotting', 'testing', 'testbed', 'torch'))); "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_import_works_with_docstrings_stripped():
    code = "import klpolicy, klpolicy.estimators, klpolicy.app; print(klpolicy.optimal_kl([.5, .5], [1., 0.], 0.5))"
    out = subprocess.run([sys.executable, "-OO", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("0.3278")


def test_testing_without_hypothesis_names_the_extra():
    """Without hypothesis, a suite is an ImportError naming `klpolicy[testing]`, as
    klpolicy.torch names `klpolicy[torch]` (it was a bare "No module named 'hypothesis'")."""
    probe = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "import klpolicy.testing\n"
        "try:\n"
        "    klpolicy.testing.check_kl_estimator\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("ImportError klpolicy.testing's suites"), out.stdout
    assert "pip install klpolicy[testing]" in out.stdout


def test_every_core_module_is_named_in_the_architecture_page():
    """docs/architecture.md names every module of klpolicy/core (a new module is documented)."""
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "architecture.md").read_text()
    modules = sorted(
        p.stem for p in (root / "klpolicy" / "core").glob("*.py") if p.stem != "__init__"
    )
    missing = [m for m in modules if f"`{m}`" not in page]
    assert not missing, f"docs/architecture.md does not name core modules {missing}"
