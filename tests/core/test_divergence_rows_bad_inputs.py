"""The DIVERGENCES rows' array methods refuse None, complex and non-numeric input, and the
alpha row a non-finite alpha, by name (issue 40, item 19: they returned NaN, dropped the
imaginary part, or took alpha = nan silently)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from klpolicy import DIVERGENCES

METHODS = {"f": "t", "fprime": "t", "fsecond": "t", "fprime_inv": "s", "conjugate": "s"}
BAD = [
    (None, "None"),
    (np.array([1.0 + 1.0j]), "array([1.+1.j]) (dtype complex128)"),
    (2.0 + 0.5j, "(2+0.5j) (dtype complex128)"),
    ("a", "'a' (dtype <U1)"),
    ([None, 1.0], "[None, 1.0] (dtype object)"),
]
CASES = [
    (row, method, value, shown) for row in DIVERGENCES for method in METHODS for value, shown in BAD
]


@pytest.mark.parametrize(("row", "method", "value", "shown"), CASES)
def test_row_methods_refuse_non_real_input_by_name(row, method, value, shown):
    alpha = 0.5 if row == "alpha" else None
    fn = getattr(DIVERGENCES[row], method)
    msg = f"`{METHODS[method]}` must be a real number or array of them; got {shown}"
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        fn(value, alpha=alpha)
    assert not np.isnan(fn(np.array([0.5]), alpha=alpha)).any()  # real input still works


@pytest.mark.parametrize("alpha", [math.nan, math.inf, -math.inf, "x", 1 + 2j])
@pytest.mark.parametrize(
    "method",
    ["f", "fprime", "fsecond", "fprime_inv", "conjugate", "fprime_zero", "fprime_inf", "f_zero"],
)
def test_alpha_row_refuses_non_finite_alpha_by_name(method, alpha):
    fn = getattr(DIVERGENCES["alpha"], method)
    args = () if method in ("fprime_zero", "fprime_inf", "f_zero") else (np.array([0.5]),)
    with pytest.raises(ValueError, match=r"^`alpha` must be a finite real number; got "):
        fn(*args, alpha=alpha)
    with pytest.raises(ValueError, match=r"^`alpha` is required for the 'alpha' divergence"):
        fn(*args, alpha=None)
