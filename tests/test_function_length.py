"""No function in klpolicy/ has a body over 100 lines: long procedures are split into
named steps, each named for the property it computes or checks (issue 36, item 4).

A body is counted from its first statement after the docstring to its last line, nested
functions and classes included (a closure is part of the body that defines it). A
function that must stay longer goes in ``ALLOWED`` with the reason; an entry that is no
longer needed (the function got shorter, or is gone) fails too, so that the list only
shrinks.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import klpolicy

PACKAGE = Path(klpolicy.__file__).resolve().parent
LIMIT = 100

# (path under klpolicy/, qualified name): why it is still longer than LIMIT. Empty: a
# function that must stay longer is added here with its reason.
ALLOWED: dict[tuple[str, str], str] = {}


def _body_length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    first = body[0]
    is_doc = isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    if is_doc and isinstance(first.value.value, str):
        if len(body) == 1:
            return 0
        first = body[1]
    return node.end_lineno - first.lineno + 1


def _functions(tree: ast.Module):
    """(qualified name, node) of every function, methods and nested functions included."""
    stack = [("", tree)]
    while stack:
        prefix, node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child
                stack.append((f"{name}.", child))
            else:
                stack.append((prefix, child))


@functools.lru_cache
def long_functions(root: Path = PACKAGE, limit: int = LIMIT) -> dict[tuple[str, str], int]:
    """Every function under ``root`` whose body is over ``limit`` lines, with its length."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, node in _functions(tree):
            n = _body_length(node)
            if n > limit:
                out[(path.relative_to(root).as_posix(), name)] = n
    return out


def test_no_function_body_is_over_100_lines():
    found = dict(long_functions())
    new = {k: n for k, n in found.items() if k not in ALLOWED}
    assert new == {}, (
        f"function bodies over {LIMIT} lines: {new}; split them into named steps "
        "(or, with a reason, add them to ALLOWED)"
    )


def test_the_allow_list_only_shrinks():
    found = long_functions()
    stale = sorted(k for k in ALLOWED if k not in found)
    assert stale == [], f"no longer over {LIMIT} lines (remove from ALLOWED): {stale}"


def test_the_measure_counts_the_body_with_its_closures(tmp_path):
    inner = "\n".join(f"        y{i} = {i}" for i in range(60))
    outer = "\n".join(f"    x{i} = {i}" for i in range(40))
    src = (
        f'def f():\n    """Doc."""\n    def g():\n{inner}\n{outer}\n\n\ndef h():\n    """Doc."""\n'
    )
    (tmp_path / "m.py").write_text(src, encoding="utf-8")
    assert long_functions(tmp_path, 100) == {("m.py", "f"): 101}  # g's line, 60, then 40
    assert long_functions(tmp_path, 60) == {("m.py", "f"): 101}  # g is 60: not over 60
    assert long_functions(tmp_path, 59) == {("m.py", "f"): 101, ("m.py", "f.g"): 60}
