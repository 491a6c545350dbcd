"""``entropy_step``: one softmax policy-gradient step's entropy change, against mpmath."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from klpolicy.diversity import ENTROPY_STEPS, entropy_step

pytestmark = pytest.mark.mp_dps(50)  # mpmath's working precision (tests/conftest.py)


def _mp_step(z, a, eta, step):
    # mpmath recipe (50 digits): pi = softmax z; d = A (natural) or pi (A - E_pi A)
    # (vanilla); H(softmax(z + eta d)) - H(pi) and -eta Cov_pi(log pi, d).
    def softmax(x):
        m = max(x)
        e = [mp.exp(v - m) for v in x]
        s = sum(e)
        return [v / s for v in e]

    z = [mp.mpf(v) for v in z]
    a = [mp.mpf(v) for v in a]
    eta = mp.mpf(eta)
    pi = softmax(z)
    if step == "natural":
        d = a
    else:
        ma = sum(p * v for p, v in zip(pi, a))
        d = [p * (v - ma) for p, v in zip(pi, a)]
    pi2 = softmax([x + eta * v for x, v in zip(z, d)])

    def h(p):
        return -sum(x * mp.log(x) for x in p)

    lp = [mp.log(p) for p in pi]
    mlp = sum(p * v for p, v in zip(pi, lp))
    md = sum(p * v for p, v in zip(pi, d))
    cov = sum(p * (u - mlp) * (v - md) for p, u, v in zip(pi, lp, d))
    return h(pi2) - h(pi), -eta * cov


@pytest.mark.parametrize("step", sorted(ENTROPY_STEPS))
@pytest.mark.parametrize("eta", [1e-3, 0.1, 1.0, -0.5])
def test_exact_change_and_covariance_law_match_mpmath(step, eta):
    z = [1.2, 0.3, -0.7, 2.0]
    a = [0.5, -1.0, 0.2, 1.5]
    got = entropy_step(z, a, eta, step=step)
    exact, cov = _mp_step(z, a, eta, step)
    assert float(got.exact) == pytest.approx(float(exact), rel=1e-9, abs=1e-14)
    assert float(got.covariance) == pytest.approx(float(cov), rel=1e-12)


def test_law_is_first_order_the_gap_shrinks_as_eta_squared():
    z, a = [1.0, 0.0, -1.0, 0.5], [1.0, -0.5, 0.3, 0.0]
    gaps = [
        abs(float(entropy_step(z, a, e).exact - entropy_step(z, a, e).covariance))
        for e in (1e-2, 1e-3)
    ]
    assert gaps[0] / gaps[1] == pytest.approx(100.0, rel=0.05)


def test_rewarding_the_favourite_lowers_entropy_and_batches():
    z = np.array([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    out = entropy_step(z, [[1.0, 0.0, 0.0]], 0.1, step="vanilla")
    assert out.exact.shape == (2,)
    assert out.exact[0] < 0 and out.exact[1] < 0
    np.testing.assert_allclose(out.entropy_before[1], np.log(3), rtol=1e-15)


def test_unknown_step_is_refused_by_name():
    with pytest.raises(ValueError, match="`step`"):
        entropy_step([0.0, 1.0], [1.0, 0.0], 0.1, step="adam")
