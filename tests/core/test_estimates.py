"""The estimators' value formulas of core, on numpy and torch: exact, dtype-keeping, grad-safe."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from klpolicy.core import _estimates as F
from tests._mpref import assert_mp_close
from tests._mpref.estimators import k as mp_k

FORMULAS = {"k1": F.k1_value, "k2": F.k2_value, "k3": F.k3_value, "abs": F.abs_value}
ELL = np.array([-700.0, -30.0, -1.0, -0.19, -1e-8, -1e-300, 0.0, 1e-300, 1e-8, 0.19, 1.0, 30.0])


@pytest.mark.mp_dps(700)  # exp(-1e-300) - 1 + 1e-300 cancels 600 digits
@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_each_formula_is_its_definition_to_a_few_ulp(name):
    # mpmath reference: the definition at the exactly converted float (tests/_mpref/estimators)
    want = [mp_k(name, mp.mpf(float(x))) for x in ELL]
    # k1, k2 and abs are correctly rounded (one product, an exact halving); k3 a few ulp
    assert_mp_close(FORMULAS[name](np, ELL), want, rtol=4e-16 if name == "k3" else 0.0)


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_infinite_and_nan_log_ratios(name):
    ell = np.array([math.inf, -math.inf, math.nan])
    with np.errstate(over="ignore", invalid="ignore"):
        got = FORMULAS[name](np, ell)
    want_minus = -math.inf if name == "k1" else math.inf  # k1 is ell itself
    assert got[0] == math.inf and got[1] == want_minus and math.isnan(got[2])


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_float32_stays_float32_and_close(name):
    ell = np.array([-3.0, -1e-4, 1e-4, 0.5, 4.0], dtype=np.float32)
    got = FORMULAS[name](np, ell)
    assert got.dtype == np.float32
    # mpmath reference at the float32 inputs; float32 rounding of the result and of 0.5 * l^2
    want = [mp_k(name, mp.mpf(float(x))) for x in ell]
    assert_mp_close(got, want, rtol=4 * float(np.finfo(np.float32).eps))


def test_k3_keeps_its_digits_where_the_textbook_form_cancels():
    ell = np.array([1e-12, -1e-12, 1e-6])
    # mpmath: exp(-l) - 1 + l = l^2/2 - l^3/6 + ..., at 50 digits
    assert_mp_close(F.k3_value(np, ell), [mp_k("k3", mp.mpf(float(x))) for x in ell], rtol=4e-16)
    assert (F.k3_value(np, np.linspace(-5, 5, 1001)) >= 0).all()


def test_formula_by_name_and_refusal():
    assert F.formula("k2") is F.k2_value
    with pytest.raises(ValueError, match=r"`estimator` has no array-API value formula; got 'k4'"):
        F.formula("k4")
    with pytest.raises(ValueError, match="got None"):
        F.formula(None)


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_torch_values_match_numpy_and_gradients_stay_finite(name):
    torch = pytest.importorskip("torch")
    import array_api_compat.torch as xp

    ell_np = np.array([-2.0, -1e-9, 0.3, 5.0, math.inf])
    ell = torch.tensor(ell_np, dtype=torch.float64, requires_grad=True)
    out = FORMULAS[name](xp, ell)
    np.testing.assert_array_equal(out.detach().numpy(), FORMULAS[name](np, ell_np))
    # the infinite entry is masked out, as a loss masks it: 0 * inf would be NaN in backward
    torch.where(torch.isfinite(out), out, torch.zeros_like(out)).sum().backward()
    grad = ell.grad.numpy()
    assert np.isfinite(grad).all(), grad  # no inf - inf or 0 * inf in the backward pass
    x = ell_np[:-1]
    want = {"k1": np.ones_like(x), "k2": x, "k3": -np.expm1(-x), "abs": np.sign(x)}[name]
    np.testing.assert_allclose(grad[:-1], want, rtol=1e-15)
    assert grad[-1] == 0.0
