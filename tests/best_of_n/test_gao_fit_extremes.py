"""fit_gao_bon / fit_gao_rl at the ends of float64 (issue 40, item 18).

``d = 1e308`` put ``d**2 = inf`` into lstsq ("array must not contain infs or NaNs", numpy's
message); the fits are now solved on ``d`` and ``gain`` divided by powers of two. The
exact scaling laws of the forms are the reference: with ``d -> k d`` and ``gain -> k gain``,
``R = d (a - b d)`` has ``a' = a``, ``b' = b / k``, ``d*' = k d*``, ``R*' = k R*``; and
``R = d (a - b log d)`` has ``b' = b``, ``a' = a + b log k``, ``d*' = k d*``, ``R*' = k R*``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from klpolicy.overoptimization import fit_gao_bon, fit_gao_rl

from .._mpref import assert_mp_close

D_BON = np.linspace(0.5, 4.0, 8)
G_BON = D_BON * (1.0 - 0.25 * D_BON) + 0.01 * np.sin(7 * D_BON)  # not an exact fit
D_RL = np.linspace(0.1, 6.0, 30)
G_RL = D_RL * (1.0 - 0.5 * np.log(D_RL)) + 0.01 * np.cos(5 * D_RL)


@pytest.mark.parametrize("k", [1e160, 1e200, 2.0**1020, 1e-160, 1e-250])
def test_bon_fit_follows_its_scaling_law_at_the_ends(k):
    base = fit_gao_bon(D_BON, G_BON)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = fit_gao_bon(D_BON * k, G_BON * k)
    assert_mp_close(f.a, base.a, rtol=1e-12)
    assert_mp_close(f.b * k, base.b, rtol=1e-12)
    assert_mp_close(f.d_peak, base.d_peak * k, rtol=1e-12)
    assert_mp_close(f.gain_peak, base.gain_peak * k, rtol=1e-12)
    assert_mp_close(f.rmse, base.rmse * k, rtol=1e-9)


@pytest.mark.parametrize("k", [1e160, 1e200, 2.0**1020, 1e-160, 1e-250])
def test_rl_fit_follows_its_scaling_law_at_the_ends(k):
    base = fit_gao_rl(D_RL, G_RL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = fit_gao_rl(D_RL * k, G_RL * k)
    assert_mp_close(f.b, base.b, rtol=1e-12)
    assert_mp_close(f.a, base.a + base.b * math.log(k), rtol=1e-12)
    assert_mp_close(f.d_peak, base.d_peak * k, rtol=1e-12)
    assert_mp_close(f.gain_peak, base.gain_peak * k, rtol=1e-12)
    assert_mp_close(f.rmse, base.rmse * k, rtol=1e-9)


@pytest.mark.parametrize("fit", [fit_gao_bon, fit_gao_rl])
def test_d_at_1e308_is_fitted_not_numpys_message(fit):
    f = fit([0.5, 1e308, 2.0], [0.1, 0.2, 0.3])
    assert all(math.isfinite(v) for v in (f.a, f.b, f.rmse))
    with pytest.raises(ValueError, match=r"^`d` must be finite; found inf at index \(1,\)"):
        fit([1.0, math.inf], [0.0, 1.0])
