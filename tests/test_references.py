"""The exact tests share one package of mpmath references (tests/_mpref) and never set
mpmath's global precision: a module that assigned ``mp.mp.dps`` at import changed the
precision of every test that ran after it in the same worker."""

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def _dps_assignments(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        lines += [
            t.lineno for t in targets if isinstance(t, ast.Attribute) and t.attr in ("dps", "prec")
        ]
    return lines


@pytest.mark.parametrize(
    "path", sorted(TESTS.rglob("*.py")), ids=lambda p: str(p.relative_to(TESTS))
)
def test_no_test_module_sets_the_global_mpmath_precision(path):
    assert _dps_assignments(path) == [], (
        f"{path.relative_to(TESTS)} assigns mpmath's precision at lines {_dps_assignments(path)}: "
        "use @pytest.mark.mp_dps(n) or `with mp.workdps(n):`"
    )


def test_the_precision_fixture_sets_the_marker_and_restores_it():
    import mpmath as mp

    assert mp.mp.dps == 50  # the default of tests/conftest.py's fixture


@pytest.mark.mp_dps(123)
def test_the_marker_sets_the_precision():
    import mpmath as mp

    assert mp.mp.dps == 123


def test_assert_mp_close_fails_with_the_worst_entry():
    import mpmath as mp

    from . import _mpref as R

    R.assert_mp_close([1.0, 2.0], [mp.mpf(1), mp.mpf(2)], rtol=0)
    with pytest.raises(AssertionError, match=r"got 2\.0000001, want 2\.0"):
        R.assert_mp_close([1.0, 2.0000001], [mp.mpf(1), mp.mpf(2)], rtol=1e-12)
    with pytest.raises(AssertionError, match="infinities differ"):
        R.assert_mp_close(1e308, mp.inf, rtol=1e-12)
    with pytest.raises(AssertionError, match="NaN"):
        R.assert_mp_close(float("nan"), 0.0, rtol=1.0)
    R.assert_mp_close(float("inf"), mp.inf, rtol=0)
