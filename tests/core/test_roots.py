"""The package's one root finder: safeguarded Newton with a bisection bracket."""

from __future__ import annotations

import math

import numpy as np
import pytest

from klpolicy.core.roots import monotone_root


def _cubic(c):
    """f(x) = x^3 - c per row (increasing), with its derivative."""

    def fun(x, rows):
        return x**3 - c[rows], 3 * x**2

    return fun


def test_vectorised_rows_reach_their_roots():
    c = np.array([-8.0, 0.0, 1e-30, 2.0, 1e30])
    root = monotone_root(_cubic(c), np.full(5, -1e12), 1e12, increasing=True)
    assert root.converged.all() and (root.outside == 0).all()
    np.testing.assert_allclose(root.x, np.cbrt(c), rtol=4e-16, atol=1e-300)


def test_decreasing_functions_and_starting_points():
    c = np.array([0.5, 3.0, 40.0])
    root = monotone_root(
        lambda x, rows: (np.exp(-x) - c[rows], -np.exp(-x)),
        -50.0,
        50.0,
        x0=[10.0, -10.0, 0.0],
        increasing=False,
    )
    np.testing.assert_allclose(root.x, -np.log(c), rtol=1e-15)


def test_a_flat_newton_slope_falls_back_to_bisection():
    # tanh(x - 30) is flat (slope 1e-26) at the start: Newton leaps out, bisection brings it in
    root = monotone_root(
        lambda x, rows: (np.tanh(x - 30.0), 1 / np.cosh(x - 30.0) ** 2),
        -700.0,
        700.0,
        x0=0.0,
        increasing=True,
    )
    assert bool(root.converged) and abs(float(root.x) - 30.0) < 1e-13


def test_a_step_function_terminates_pinned_between_the_jump():
    # no derivative, no zero: the bracket still halves down to adjacent floats
    root = monotone_root(
        lambda x, rows: (np.where(x < 1.0 / 3.0, -1.0, 1.0), np.full_like(x, np.nan)),
        0.0,
        1.0,
        increasing=True,
    )
    assert bool(root.converged) and abs(float(root.x) - 1 / 3) <= 4e-16
    assert root.iterations < 100


def test_a_root_outside_the_bracket_is_flagged_not_returned():
    c = np.array([1.0, 100.0, -100.0])
    root = monotone_root(
        lambda x, rows: (x - c[rows], np.ones_like(x)), -10.0, np.full(3, 10.0), increasing=True
    )
    assert root.converged.tolist() == [True, False, False]
    assert root.outside.tolist() == [0, 1, -1]


def test_nan_and_the_iteration_cap_leave_rows_unconverged():
    root = monotone_root(
        lambda x, rows: (np.where(x > 2, np.nan, x - 3), np.ones_like(x)),
        0.0,
        10.0,
        increasing=True,
    )
    assert not bool(root.converged) and int(root.outside) == 0
    capped = monotone_root(
        lambda x, rows: (np.sign(x - math.pi), np.full_like(x, np.nan)),
        0.0,
        10.0,
        increasing=True,
        max_iter=3,
    )
    assert not bool(capped.converged) and int(capped.outside) == 0


def test_the_bracket_halves_every_five_iterations_even_when_newton_crawls():
    # Newton on x^(1/9)-shaped functions crawls (each step moves 1/9 of the way); the halving
    # rule bounds the work: from width 2e6 to float resolution is ~75 halvings
    def fun(x, rows):
        return np.cbrt(np.cbrt(x)), np.where(x == 0, np.inf, np.cbrt(np.cbrt(x)) / (9 * x))

    root = monotone_root(fun, -1e6, 1e6, x0=7e5, increasing=True)
    assert bool(root.converged) and abs(float(root.x)) < 1e-100
    assert root.iterations <= 5 * 1100


@pytest.mark.parametrize("lo, hi", [(0.0, np.inf), (1.0, 0.0), (np.nan, 1.0)])
def test_brackets_must_be_finite_and_ordered(lo, hi):
    with pytest.raises(ValueError, match="finite brackets"):
        monotone_root(lambda x, rows: (x, x), lo, hi, increasing=True)


@pytest.mark.slow
def test_import_klpolicy_does_not_load_scipy_optimize():
    import subprocess
    import sys

    code = "import sys, klpolicy; print('scipy.optimize' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_one_sided_newton_sequence_closes_its_bracket_in_a_few_steps():
    # exp(x) - c is convex and increasing: Newton from the right stays right of the root, so
    # the left end never moves; the endgame probe just past the root closes the bracket.
    # (Without it the far end is bisected down to the tolerance.)
    c = np.array([1e-3, 0.5, 2.0, 7.0, 1e5])
    root = monotone_root(
        lambda x, rows: (np.exp(x) - c[rows], np.exp(x)),
        np.full(5, -20.0),
        20.0,
        x0=15.0,
        increasing=True,
    )
    assert root.converged.all()
    np.testing.assert_allclose(root.x, np.log(c), rtol=4e-16, atol=1e-16)
    # Newton from x0 = 15 needs ~22 steps down to log(1e-3); the probe adds a few more
    # (79 iterations without it, the far end bisected down to the tolerance)
    assert root.iterations <= 35
