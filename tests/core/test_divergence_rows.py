"""Each DIVERGENCES row carries its behaviour: its summands, its D_f, and the Optimum that
f_optima calls (no code outside the registry compares a divergence's name).

mpmath recipe (``R.f_divergence``, tests/_mpref/divergences.py): inputs converted exactly,
rows normalised in 400 digits, ``D_f = sum_{q>0} q f(p/q) + f'(inf) sum_{q=0} p`` from
generators typed from DESIGN.md's table.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

from klpolicy.core.fdivergences import DIVERGENCES, _normalised

from .. import _mpref as R

ROWS = [(n, None) for n in DIVERGENCES if n != "alpha"] + [
    ("alpha", a) for a in (-2.0, 0.0, 0.3, 0.995, 1.0, 1.004, 1.5, 4.0)
]
CORE = Path(__file__).resolve().parents[2] / "klpolicy" / "core"


def _ids(rows):
    return [f"{n}-{a}" for n, a in rows]


@pytest.mark.parametrize(("name", "a"), ROWS, ids=_ids(ROWS))
def test_summands_sum_to_the_divergence_on_the_common_support(name, a):
    # rows with p, q > 0 everywhere: D_f is the sum of the row's summands q f~(p/q)
    rng = np.random.default_rng(31 + ROWS.index((name, a)))
    row = DIVERGENCES[name]
    for _ in range(6):
        n = int(rng.integers(2, 7))
        p, q = rng.dirichlet(np.ones(n)), rng.dirichlet(np.ones(n))
        pn, qn, d = _normalised(p[None], q[None])
        terms = row.summands(pn, qn, d, a)
        assert np.all(terms >= 0)
        want = float(R.f_divergence(p, q, name, a))
        assert float(terms.sum()) == pytest.approx(want, rel=1e-12, abs=1e-300)
        got = float(row.divergence_last(p[None], q[None], a)[0])
        assert got == pytest.approx(want, rel=1e-12, abs=1e-300)


def _points(mode):
    if mode == "top":  # a pole distance e > 0
        return np.array([1e-3, 0.1, 0.7, 2.0, 30.0])
    if mode == "bottom":  # a height u above the clip, > 0 (the ratio is 0 below it)
        return np.array([1e-3, 0.1, 0.7, 2.0, 30.0])
    return np.array([-3.0, -0.4, 0.0, 0.5, 2.5])  # s itself


@pytest.mark.parametrize(("name", "a"), ROWS, ids=_ids(ROWS))
def test_optimum_ratio_is_the_inverse_derivative_in_its_coordinate(name, a):
    # t = ratio(z) is (f')^{-1} of the scaled reward the coordinate z stands for,
    # coordinate() its inverse, and dt/dz matches a central difference
    row = DIVERGENCES[name]
    plan = row.optimum(a)
    assert plan.method
    if plan.mode is None:  # a closed form: the reverse KL's tilt or the TV linear program
        closed = (plan.policy, plan.kernel, plan.budget)
        lp = (plan.inner, plan.exact_value, plan.no_budget)
        assert all(x is not None for x in closed) != all(x is not None for x in lp)
        return
    z = _points(plan.mode)
    t, dt = plan.ratio(z)
    np.testing.assert_allclose(plan.coordinate(t), z, rtol=1e-12, atol=1e-14)
    sign = {"top": -1.0, "bottom": 1.0, "free": 1.0}[plan.mode]
    end = {"top": row.fprime_inf(alpha=a), "bottom": row.fprime_zero(alpha=a), "free": 0.0}
    s = end[plan.mode] + sign * z  # the scaled reward (r - lambda)/beta
    np.testing.assert_allclose(t, row.fprime_inv(s, alpha=a), rtol=1e-12)
    h = 1e-6 * np.maximum(np.abs(z), 1e-3)
    num = (plan.ratio(z + h)[0] - plan.ratio(z - h)[0]) / (2 * h)
    np.testing.assert_allclose(dt, num, rtol=1e-6)


@pytest.mark.parametrize(("name", "a"), ROWS, ids=_ids(ROWS))
def test_optimum_curvature_is_f2_and_f3_at_one(name, a):
    row = DIVERGENCES[name]
    plan = row.optimum(a)
    if plan.curvature is None:
        assert plan.exact_value is not None  # tv: the linear program's value instead
        return
    f2, f3 = plan.curvature
    assert f2 == float(row.fsecond(1.0, alpha=a))
    h = 1e-5
    num = float(row.fsecond(1.0 + h, alpha=a) - row.fsecond(1.0 - h, alpha=a)) / (2 * h)
    assert f3 == pytest.approx(num, rel=1e-8, abs=1e-8)
    assert plan.large_beta == 1e6 * (max(1.0, abs(a)) if a is not None else 1.0)


@pytest.mark.parametrize(("name", "a"), ROWS, ids=_ids(ROWS))
def test_optimum_far_fields_hold_the_power_law(name, a):
    # top mode: the ratio far from the pole is (c x)^p, its log from log_ratio and far()
    plan = DIVERGENCES[name].optimum(a)
    if plan.mode != "top":
        return
    x = np.array([10.0, 1e3, 1e8])
    t, _ = plan.ratio(x)
    np.testing.assert_allclose(np.exp(plan.log_ratio(x)), t, rtol=1e-13)
    if plan.power is None:  # js: exponential, 1/expm1(2x) = 0 beyond float64's x
        tf, ltf = plan.far(np.array([1e308]), np.array([1e-300]))
        assert tf[0] == 0.0 and ltf[0] == -math.inf
        return
    tf, ltf = plan.far(0.5 * x, np.ones_like(x))  # x = 2 h / beta: the exact power law
    np.testing.assert_allclose(tf, t, rtol=1e-13, atol=1e-300)
    c, p, k = plan.power
    assert p * k == pytest.approx(1.0, rel=1e-15)
    np.testing.assert_allclose(ltf, p * np.log(c * x), rtol=1e-13)


def _compared_keys(path: Path) -> list[tuple[int, str]]:
    keys = set(DIVERGENCES)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for c in [node.left, *node.comparators]:
                vals = [c] if isinstance(c, ast.Constant) else getattr(c, "elts", [])
                for v in vals:
                    if isinstance(v, ast.Constant) and v.value in keys:
                        found.append((node.lineno, v.value))
    return found


@pytest.mark.parametrize("module", ["fdivergences.py", "f_optima.py"])
def test_no_code_compares_a_divergence_name(module):
    assert _compared_keys(CORE / module) == []


def test_the_scan_finds_a_comparison(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('if row.name == "chi2" or key in ("js", "tv") or x == "other":\n    pass\n')
    assert sorted(_compared_keys(src)) == [(1, "chi2"), (1, "js"), (1, "tv")]
