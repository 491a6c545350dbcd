"""The rows of LOSSES carry their behaviour: kernels, population loss, optimum, facts.

Code outside ``klpolicy/preference/registry.py`` looks a row up and calls it; it never
compares a string against a loss key (the AST scan below, with its allow-list).
"""

import ast
from pathlib import Path

import numpy as np
import pytest

from klpolicy.preference import LOSSES, bradley_terry, population_optimum

ROOT = Path(__file__).resolve().parents[2] / "klpolicy"

# comparisons against a loss key that say what they mean; each with its reason
ALLOWED = {
    # whether a TRL DPOConfig is plain sigmoid DPO (the only loss whose finite-data optimum
    # the testbed predicts): a question about the trainer's config, not a row's behaviour
    ("testbed/runner.py", "loss_type"): 1,
}


def _comparisons(source: str, keys) -> list[str]:
    """The comparisons in ``source`` with a string constant of ``keys`` on either side (also
    inside a tuple, list or set)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                if any(isinstance(e, ast.Constant) and e.value in keys for e in elts):
                    out.append(ast.unparse(node))
    return out


def _key_comparisons():
    found = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "preference/registry.py":
            continue
        for text in _comparisons(path.read_text(), set(LOSSES)):
            what = "loss_type" if "loss_type" in text else text
            found[(rel, what)] = found.get((rel, what), 0) + 1
    return found


def test_no_code_outside_the_registry_compares_a_string_against_a_loss_key():
    assert _key_comparisons() == ALLOWED


def test_the_scan_finds_each_form_of_comparison():
    source = (
        'if row.name == "hinge":\n    pass\n'
        'x = name in ("aot", "aot_pair")\n'
        'y = "sft" != kind\n'
        'z = name == "hinges" or name in ("other",)\n'
    )
    assert len(_comparisons(source, set(LOSSES))) == 3


def test_every_row_has_a_kind_and_the_kernels_its_kind_needs():
    kinds = {"margin", "pair", "sorting", "likelihood"}
    for name, row in LOSSES.items():
        assert row.kind in kinds, name
        assert row.margin_only == (row.kind == "margin")
        assert row.batch_dependent == (row.kind == "sorting")
        if row.kind in ("margin", "pair"):
            assert row.pair is not None, name
        else:
            assert row.pair is None and row.margin is None, name
        assert callable(row.population_loss) and callable(row.optimum), name
        assert (row.per_outcome is None) or row.kind == "pair", name


def test_a_row_of_an_unknown_kind_is_refused():
    import dataclasses

    with pytest.raises(ValueError, match=r"`kind` must be one of margin, pair, sorting"):
        dataclasses.replace(LOSSES["hinge"], kind="margins")


@pytest.mark.parametrize("name", [n for n, r in LOSSES.items() if r.pair is not None])
def test_pair_kernel_gradient_is_the_derivative_of_its_loss(name):
    row = LOSSES[name]
    opts = {"lengths": np.array([[3.0], [5.0]])} if row.length_normalised else {}
    o = row.resolve_options(opts)
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-2, 2, size=(2, 7))
    if row.margin_only:
        b = np.zeros_like(a)
    s = 1e-6
    for beta in (0.3, 2.0):
        da, db = row.pair.grad(a, b, beta, o)
        fa = (row.pair.ell(a + s, b, beta, o) - row.pair.ell(a - s, b, beta, o)) / (2 * s)
        np.testing.assert_allclose(da, fa, rtol=1e-6, atol=1e-8)
        if not row.margin_only:
            fb = (row.pair.ell(a, b + s, beta, o) - row.pair.ell(a, b - s, beta, o)) / (2 * s)
            np.testing.assert_allclose(db, fb, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", [n for n, r in LOSSES.items() if r.margin is not None])
def test_margin_kernel_derivatives_and_pair_margin(name):
    row = LOSSES[name]
    o = row.resolve_options({})
    k = row.margin
    x = np.linspace(-5.0, 5.0, 41) + 0.0123  # off hinge's kink at 1
    s = 1e-6
    np.testing.assert_allclose(
        k.d1(x, o), (k.phi(x + s, o) - k.phi(x - s, o)) / (2 * s), rtol=1e-6, atol=1e-8
    )
    np.testing.assert_allclose(
        k.d2(x, o), (k.d1(x + s, o) - k.d1(x - s, o)) / (2 * s), rtol=1e-5, atol=1e-7
    )
    # pair_margin: the minimiser of one pair's expected loss where the kernel says it is
    # exact (sigmoid, robust, hinge), a start near it elsewhere; checked on a fine grid
    grid = np.linspace(-8.0, 8.0, 160001)
    for p in (0.2, 0.65, 0.9):
        expected = p * k.phi(grid, o) + (1 - p) * k.phi(-grid, o)
        best = grid[np.argmin(expected)]
        got = float(k.pair_margin(np.array(p), o))
        tol = 1e-3 if name in ("sigmoid", "robust", "hinge") else 1.0
        assert abs(got - best) <= tol, (name, p, got, best)


@pytest.mark.parametrize("name", [n for n, r in LOSSES.items() if r.no_optimum])
def test_a_row_without_an_optimum_says_why(name):
    row = LOSSES[name]
    P = bradley_terry([1.0, 0.0, -0.5])
    with pytest.raises(ValueError) as e:
        population_optimum([0.3, 0.3, 0.4], P, 1.0, loss=name)
    assert str(e.value) == f"`loss` {name!r} {row.no_optimum}"


def test_hinge_alone_carries_minimiser_ranges_and_chi_po_its_link():
    assert [n for n, r in LOSSES.items() if r.minimiser_ranges is not None] == ["hinge"]
    assert {n: r.score_divergence for n, r in LOSSES.items() if r.score_divergence} == {
        "chi_po": "chi2_kl"
    }
    assert [n for n, r in LOSSES.items() if r.length_normalised] == ["sigmoid_norm"]
