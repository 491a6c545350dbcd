"""The estimator registry is the one place estimators are defined.

Two proofs: a new row added to the registry is accepted and evaluated by every numpy-side
function that takes an ``estimator`` (nothing else needs editing), and no module outside
the registry spells out a collection of estimator names (the switch that used to be
written in nine places).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import klpolicy.estimators as E
from klpolicy import sequences
from klpolicy.estimators import registry

PACKAGE = Path(E.__file__).resolve().parents[1]
NAMES = set(E.estimator_names())


def test_registry_rows_agree_with_the_formulas():
    ell = np.array([-3.0, -1e-9, 0.0, 1e-9, 0.5, 4.0])
    k = {n: E.ESTIMATORS[n].value(ell) for n in NAMES}
    np.testing.assert_allclose(k["k1"], ell, rtol=0)
    np.testing.assert_allclose(k["k2"], ell**2 / 2, rtol=1e-15)
    # mpmath: exp(-l) - 1 + l at 50 digits (the conftest fixture)
    import mpmath as mp

    ref = [float(mp.exp(-mp.mpf(x)) - 1 + mp.mpf(x)) for x in ell]
    np.testing.assert_allclose(k["k3"], ref, rtol=1e-14)
    np.testing.assert_allclose(k["abs"], np.abs(ell), rtol=0)
    for n in NAMES:  # the derivative is the derivative of the value
        h = 1e-6
        x = np.array([-1.3, 0.7, 2.1])
        fd = (E.ESTIMATORS[n].value(x + h) - E.ESTIMATORS[n].value(x - h)) / (2 * h)
        np.testing.assert_allclose(E.ESTIMATORS[n].derivative(x), fd, rtol=1e-6)


def test_names_and_refusals():
    assert E.estimator_names() == ("k1", "k2", "k3", "abs")
    assert E.estimator_names(kl_only=True) == ("k1", "k2", "k3")
    assert not E.get_estimator("abs").estimates_kl
    with pytest.raises(ValueError, match=r"`estimator` must be one of 'k1', 'k2', 'k3'; got 'abs'"):
        E.get_estimator("abs", kl_only=True)
    with pytest.raises(ValueError, match=r"`how` must be one of .*; got 3"):
        E.get_estimator(3, argument="how")


@pytest.fixture
def with_new_row(monkeypatch):
    """Register ``k3_copy``, a copy of k3 under a new name: one row, nothing else edited."""
    rows = dict(registry.ESTIMATORS)
    rows["k3_copy"] = dataclasses.replace(rows["k3"], name="k3_copy")
    monkeypatch.setattr(registry, "ESTIMATORS", rows)
    for mod in ("_exact", "gradients", "offpolicy", "gaussian", "samples"):
        module = getattr(E, mod, None) or __import__(f"klpolicy.estimators.{mod}", fromlist=["x"])
        if hasattr(module, "ESTIMATORS"):
            monkeypatch.setattr(module, "ESTIMATORS", rows)
    import klpolicy.sequences.diagnostics as D

    monkeypatch.setattr(D, "ESTIMATORS", rows)
    return rows


def test_a_new_row_is_all_a_new_estimator_needs(with_new_row):
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.2, 0.6])
    ref, r, beta = [0.5, 0.5], [1.0, 0.0], 0.5
    pairs = [
        lambda est: E.moments(p, q, est),
        lambda est: E.bias(p, q, est),
        lambda est: E.off_policy_moments(p, q, q, est),
        lambda est: E.gaussian_moments(0.7, est),
        lambda est: E.expected_gradient([0.1, -0.2], ref, r, beta, estimator=est, placement="loss"),
        lambda est: E.fixed_point(ref, r, beta, estimator=est, placement="loss"),
    ]
    for f in pairs:
        np.testing.assert_array_equal(np.asarray(f("k3_copy")), np.asarray(f("k3")))
    tree = [np.array([0.5, 0.5]), np.array([[0.3, 0.7], [0.6, 0.4]])]
    other = [np.array([0.6, 0.4]), np.array([[0.5, 0.5], [0.2, 0.8]])]
    a = sequences.sequence_kl_moments(other, tree, estimator="k3_copy")
    b = sequences.sequence_kl_moments(other, tree, estimator="k3")
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _literal_names(node: ast.AST) -> set[str]:
    elts = []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        elts = node.elts
    elif isinstance(node, ast.Dict):
        elts = [k for k in node.keys if k is not None]
    return {e.value for e in elts if isinstance(e, ast.Constant) and e.value in NAMES}


@pytest.mark.slow
def test_no_module_but_the_registry_lists_the_estimators():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "registry.py" and path.parent.name == "estimators":
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text)
        skip = set()
        for node in ast.walk(tree):  # `__all__` lists function names, not estimators
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                skip |= {id(n) for n in ast.walk(node.value)}
        for node in ast.walk(tree):
            if id(node) in skip or not hasattr(node, "lineno"):
                continue
            if "estimator-names: data" in lines[node.lineno - 1]:
                continue
            if len(_literal_names(node)) >= 2:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert offenders == [], (
        "estimator names listed outside klpolicy/estimators/registry.py (take them from "
        f"klpolicy.estimators.estimator_names()): {offenders}"
    )


def test_the_k3_loss_fixed_point_kind_is_named_for_the_forward_kl():
    # k3 in the loss lands on argmax E_pi[r] - beta KL(ref||pi): the forward KL under the
    # convention of docs/derivations/closed_form.md (the penalty KL(pi||ref) is the reverse one)
    kinds = {(n, p): E.ESTIMATORS[n].fixed_point[p] for n in E.ESTIMATORS for p in E.PLACEMENTS}
    assert kinds[("k3", "loss")] == "forward_kl"
    assert "reverse" not in kinds.values()
    assert set(kinds.values()) <= {"optimum", "greedy", "forward_kl", "none", "undefined"}
    # the point it names solves the forward-KL stationarity condition pi (r - m) = beta (pi - ref)
    ref, r, beta = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.0, 0.5, 1.0, 2.0]), 0.5
    pi = E.fixed_point(ref, r, beta, estimator="k3", placement="loss")
    np.testing.assert_allclose(pi * (r - pi @ r), beta * (pi - ref), atol=1e-14)


def test_a_row_built_with_the_old_kind_name_warns_and_is_renamed():
    row = dataclasses.replace(E.ESTIMATORS["k3"], name="k3_old")  # no warning: new kind
    with pytest.warns(DeprecationWarning, match="'reverse' is now 'forward_kl'"):
        old = dataclasses.replace(row, fixed_point={"reward": "none", "loss": "reverse"})
    assert dict(old.fixed_point) == {"reward": "none", "loss": "forward_kl"}
    with pytest.raises(TypeError):
        old.fixed_point["loss"] = "reverse"  # read-only, as the registry's rows
