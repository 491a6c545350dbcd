"""The f-divergence registry and f_divergence against mpmath, permuted, in float32, bad input.

mpmath recipe (``R.f_divergence``): every float input converted exactly
(``mp.mpf(float(x))``), rows normalised in 400-digit arithmetic, then the definition
``D_f(p||q) = sum_{q>0} q f(p/q) + f'(inf) sum_{q=0} p`` with ``f`` typed from the
issue's table (not from the library) and ``f'(inf) = f(T)/T`` at ``T = 1e300`` and ``f(0) = f(1/T)``, each taken as
infinite where it still grows by half between ``T = 1e150`` and ``T = 1e300``.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

import klpolicy as kp
from klpolicy.core.fdivergences import DIVERGENCES

from .. import _mpref as R

NAMES = list(DIVERGENCES)
ALPHAS = [-1.5, -0.3, 0.0, 0.25, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0]


def _cases(rng, count):
    for _ in range(count):
        n = int(rng.integers(2, 9))
        q = 10.0 ** rng.uniform(-12, 0, n)
        p = 10.0 ** rng.uniform(-12, 0, n)
        if rng.random() < 0.3:
            p[rng.integers(n)] = 0.0
        if rng.random() < 0.3:
            q[rng.integers(n)] = 0.0
        q[rng.integers(n)] = 1.0
        p[rng.integers(n)] = 1.0
        yield p / p.sum(), q / q.sum()


def _check(got, want, rtol=1e-12):
    if want == mp.inf:
        assert got == math.inf
    else:
        assert abs(got - float(want)) <= rtol * float(want) + 1e-300, (got, float(want))


@pytest.mark.parametrize("name", NAMES)
def test_against_mpmath_on_random_rows(name):
    rng = np.random.default_rng(2800 + NAMES.index(name))
    alphas = ALPHAS if name == "alpha" else [None]
    for p, q in _cases(rng, 12):
        for a in alphas:
            got = float(kp.f_divergence(p, q, name, alpha=a))
            _check(got, R.f_divergence(p, q, name, a))


@pytest.mark.parametrize("name", NAMES)
def test_nearly_equal_rows_keep_their_digits(name):
    # p = q exp(eps z), renormalised: D ~ eps^2, where sum q f(p/q) loses every digit
    rng = np.random.default_rng(281)
    alphas = [-0.3, 0.5, 1 + 1e-9, 2.0] if name == "alpha" else [None]
    for scale in (1e-4, 1e-9, 1e-14):
        q = rng.dirichlet(np.ones(5))
        p = q * np.exp(scale * rng.normal(size=5))
        p = p / p.sum()
        for a in alphas:
            got = float(kp.f_divergence(p, q, name, alpha=a))
            _check(got, R.f_divergence(p, q, name, a), rtol=1e-11 if name != "tv" else 1e-12)


def test_reverse_kl_is_kl_divergence_and_forward_kl_its_mirror():
    rng = np.random.default_rng(282)
    p, q = rng.dirichlet(np.ones(6), size=4), rng.dirichlet(np.ones(6), size=4)
    np.testing.assert_array_equal(kp.f_divergence(p, q, "reverse_kl"), kp.kl_divergence(p, q))
    np.testing.assert_array_equal(kp.f_divergence(p, q, "forward_kl"), kp.kl_divergence(q, p))
    np.testing.assert_array_equal(kp.f_divergence(p, q, "alpha", alpha=1), kp.kl_divergence(p, q))
    np.testing.assert_array_equal(kp.f_divergence(p, q, "alpha", alpha=0), kp.kl_divergence(q, p))
    np.testing.assert_allclose(kp.f_divergence(p, q, "tv"), kp.total_variation(p, q), rtol=1e-15)
    # alpha = 1/2 is twice the Hellinger row; alpha = 2 is half chi2; alpha = -1 half reverse chi2
    h = kp.f_divergence(p, q, "hellinger")
    np.testing.assert_allclose(kp.f_divergence(p, q, "alpha", alpha=0.5), 2 * h, rtol=1e-14)
    c = kp.f_divergence(p, q, "chi2")
    np.testing.assert_allclose(kp.f_divergence(p, q, "alpha", alpha=2), c / 2, rtol=1e-14)
    rc = kp.f_divergence(p, q, "reverse_chi2")
    np.testing.assert_allclose(kp.f_divergence(p, q, "alpha", alpha=-1), rc / 2, rtol=1e-14)


def test_alpha_is_continuous_through_its_kl_limits():
    p, q = np.array([0.7, 0.2, 0.1]), np.array([0.2, 0.3, 0.5])
    for a0, ref in ((1.0, kp.kl_divergence(p, q)), (0.0, kp.kl_divergence(q, p))):
        for h in (1e-4, 1e-8, 1e-12):
            for a in (a0 - h, a0 + h):
                got = float(kp.f_divergence(p, q, "alpha", alpha=a))
                assert abs(got - float(R.f_divergence(p, q, "alpha", a))) <= 1e-12 * got
                assert abs(got - float(ref)) <= 3 * h * float(ref)


@pytest.mark.parametrize("name", NAMES)
def test_permutation_batch_and_float32(name):
    a = 0.5 if name == "alpha" else None
    rng = np.random.default_rng(283)
    p, q = rng.dirichlet(np.ones(5), size=3), rng.dirichlet(np.ones(5), size=3)
    d = kp.f_divergence(p, q, name, alpha=a)
    assert d.shape == (3,) and d.dtype == np.float64
    perm = rng.permutation(5)
    np.testing.assert_allclose(
        kp.f_divergence(p[:, perm], q[:, perm], name, alpha=a), d, rtol=1e-14
    )
    np.testing.assert_allclose(kp.f_divergence(p.T, q.T, name, alpha=a, axis=0), d, rtol=1e-14)
    one = kp.f_divergence(p[1], q[1], name, alpha=a)
    assert np.ndim(one) == 0 and float(one) == pytest.approx(d[1], rel=1e-14)
    d32 = kp.f_divergence(p.astype(np.float32), q.astype(np.float32), name, alpha=a)
    assert d32.dtype == np.float32
    np.testing.assert_allclose(d32, d, rtol=2e-5)


def test_off_the_support_follows_f_at_zero_and_the_slope_at_infinity():
    p, q = [0.5, 0.5, 0.0], [0.5, 0.0, 0.5]  # mass where q has none, and a zero of p
    want = {
        "reverse_kl": math.inf,
        "forward_kl": math.inf,
        "chi2": math.inf,
        "hellinger": 1.0,
        "js": math.log(2) / 2,
        "chi2_kl": math.inf,
        "tv": 0.5,
        "reverse_chi2": math.inf,
    }
    for name, w in want.items():
        assert float(kp.f_divergence(p, q, name)) == pytest.approx(w, rel=1e-15), name
    # only mass off q's support: finite for the forward KL (f'(inf) = 0), alpha < 1
    assert float(kp.f_divergence([0.5, 0.5], [1.0, 0.0], "forward_kl")) == pytest.approx(
        math.log(2), rel=1e-15
    )
    assert float(kp.f_divergence([0.5, 0.5], [1.0, 0.0], "alpha", alpha=0.5)) == pytest.approx(
        4 * (1 - math.sqrt(0.5)), rel=1e-15
    )
    assert float(kp.f_divergence([0.5, 0.5], [1.0, 0.0], "alpha", alpha=1.5)) == math.inf
    assert float(kp.f_divergence([1.0, 0.0], [0.5, 0.5], "alpha", alpha=-0.5)) == math.inf


@pytest.mark.parametrize("name", NAMES)
def test_rows_are_consistent(name):
    """(f')^{-1} inverts f', f*(f'(t)) = t f'(t) - f(t), f'' is the slope of f', f(1) = 0."""
    row = DIVERGENCES[name]
    alphas = ALPHAS if name == "alpha" else [None]
    t = np.array([1e-6, 0.01, 0.3, 0.9, 1.0, 1.7, 5.0, 80.0])
    for a in alphas:
        assert float(row.f(1.0, alpha=a)) == 0.0
        s = row.fprime(t, alpha=a)
        if name != "tv":
            # f'(f'^{-1}(s)) = s: the well-conditioned direction (f' is flat near 0 for a > 1)
            back = row.fprime(row.fprime_inv(s, alpha=a), alpha=a)
            np.testing.assert_allclose(back, s, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(
                row.conjugate(s, alpha=a),
                t * s - row.f(t, alpha=a),
                rtol=1e-9,
                atol=1e-12,
            )
            h = 1e-6 * t
            slope = (row.fprime(t + h, alpha=a) - row.fprime(t - h, alpha=a)) / (2 * h)
            np.testing.assert_allclose(row.fsecond(t, alpha=a), slope, rtol=1e-3, atol=1e-5)
        # the limits the optimum relies on
        fp0, fpinf = row.fprime_zero(alpha=a), row.fprime_inf(alpha=a)
        assert np.all(s >= fp0) and np.all(s <= fpinf)
        assert float(row.fprime_inv(fp0 - 1.0, alpha=a)) == 0.0 or fp0 == -math.inf
        if fpinf < math.inf:
            assert float(row.fprime_inv(fpinf + 0.1, alpha=a)) == math.inf
            assert float(row.conjugate(fpinf + 0.1, alpha=a)) == math.inf


def test_chi2_kl_inverse_is_lambert_w():
    from scipy.special import lambertw

    s = np.linspace(-30, 30, 61)
    want = lambertw(np.exp(s)).real
    np.testing.assert_allclose(DIVERGENCES["chi2_kl"].fprime_inv(s), want, rtol=1e-14)
    # past exp's range too: t + log t = 1000 at t = 993.09...
    t = float(DIVERGENCES["chi2_kl"].fprime_inv(1000.0))
    assert abs(t + math.log(t) - 1000.0) < 1e-12


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"divergence": "kl"}, "`divergence` must be one of 'reverse_kl'"),
        ({"divergence": None}, "`divergence` must be one of"),
        ({"divergence": "alpha"}, "`alpha` is required when `divergence` is 'alpha'"),
        ({"divergence": "alpha", "alpha": np.nan}, "`alpha` must be"),
        ({"divergence": "alpha", "alpha": np.inf}, "`alpha` must be"),
        ({"divergence": "alpha", "alpha": "0.5"}, "`alpha` must be"),
        ({"divergence": "chi2", "alpha": 0.5}, "`alpha` applies only when `divergence` is"),
        ({"divergence": "chi2", "p": [0.5, 0.6]}, "`p`"),
        ({"divergence": "chi2", "q": [0.5, 0.5, 0.0]}, "`q`"),
    ],
)
def test_bad_input_names_the_argument(kwargs, message):
    call = {"p": [0.5, 0.5], "q": [0.3, 0.7], **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        kp.f_divergence(**call)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "x"])
def test_beta_for_divergence_names_target_for_the_kl_row(bad):
    # issue 40 item 19: the reverse_kl row passed `target` on to beta_for_kl, whose message
    # named its own argument `kl`
    with pytest.raises(ValueError, match=r"^`target` "):
        kp.beta_for_divergence([0.5, 0.5], [1.0, 0.0], bad, divergence="reverse_kl")
