"""One kernel for every array library: the same tests over numpy, torch and JAX.

The ``xb`` fixture runs each test on three backends:

* ``numpy``: the array-API kernel (:mod:`klpolicy.core._xp`) called on numpy arrays,
  checked against the numpy core's blocked fast path;
* ``torch`` and ``jax``: the *public* functions (``klpolicy.optimal_policy`` ...)
  on float64 tensors / JAX arrays, which dispatch to the same kernel.

Backends whose library is not installed are skipped. The numpy core itself is
checked against mpmath in tests/core/test_closed_form.py (recipe in tests/_mpref/closed_form.py);
here every backend must equal it to 1e-12 relative on those cases and on extreme
draws (beta 0, 1e-310 .. 1e300, inf; ties; reference entries 1e-300 and 0;
rewards 1e6 and 1e308). A few cases are also compared with mpmath directly.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import klpolicy as kp
from klpolicy import estimators
from klpolicy.core import _xp
from klpolicy.testing.strategies import problems

from .. import _mpref as R
from .test_closed_form import BETAS, CASES

PUBLIC = {
    "optimal_policy": kp.optimal_policy,
    "soft_value": kp.soft_value,
    "optimal_kl": kp.optimal_kl,
    "max_kl": kp.max_kl,
    "kl_divergence": kp.kl_divergence,
    "total_variation": kp.total_variation,
    "entropy": kp.entropy,
    "cross_entropy": kp.cross_entropy,
    "k1": estimators.k1,
    "k2": estimators.k2,
    "k3": estimators.k3,
}


class Backend:
    """How one array library is fed and read back."""

    def __init__(self, name: str):
        self.name = name
        if name == "torch":
            import torch

            self.lib = torch
        elif name == "jax":
            import jax

            jax.config.update("jax_enable_x64", True)
            import jax.numpy as jnp

            self.lib = jnp
            self.jax = jax
        else:
            self.lib = np

    def asarray(self, x, dtype="float64"):
        x = np.asarray(x, dtype=np.float64)
        if self.name == "torch":
            return self.lib.tensor(x, dtype=getattr(self.lib, dtype))
        if self.name == "jax":
            return self.lib.asarray(x, dtype=getattr(self.lib, dtype))
        return x.astype(dtype)

    def numpy(self, y) -> np.ndarray:
        if self.name == "torch":
            return y.detach().double().numpy()
        return np.asarray(y, dtype=np.float64)

    def is_native(self, y) -> bool:
        if self.name == "torch":
            return isinstance(y, self.lib.Tensor)
        if self.name == "jax":
            return isinstance(y, self.jax.Array)
        return isinstance(y, (np.ndarray, np.generic))

    def __call__(self, fn: str, *args, **kwargs):
        if self.name == "numpy":  # the generic kernel itself, on numpy arrays
            if fn in ("k1", "k2", "k3"):
                return _xp.estimate(fn, *args, **kwargs)
            return getattr(_xp, fn)(*args, **kwargs)
        return PUBLIC[fn](*args, **kwargs)


@pytest.fixture(params=["numpy", "torch", "jax"])
def xb(request):
    if request.param != "numpy":
        pytest.importorskip(request.param)
    return Backend(request.param)


@pytest.fixture(params=["torch", "jax"])
def ad(request):
    """The backends with automatic differentiation."""
    pytest.importorskip(request.param)
    return Backend(request.param)


def assert_close(got, want, rtol=1e-12, atol=0.0):
    """|got - want| <= rtol |want| + atol entrywise; subnormal results compared absolutely."""
    got, want = np.asarray(got, float), np.asarray(want, float)
    assert got.shape == want.shape, (got.shape, want.shape)
    same_inf = np.isinf(want) & (got == want)
    err = np.abs(np.where(same_inf, 0.0, got) - np.where(same_inf, 0.0, want))
    tol = rtol * np.abs(np.where(np.isinf(want), 0, want)) + atol + 1e-300
    assert np.all(np.isfinite(got) | same_inf), (got, want)
    assert np.all(err <= tol), (got, want, np.max(err / np.maximum(np.abs(want), 1e-300)))


def value_atol(ref, reward):
    """The core's soft value is exact to a few ulp of the largest reward on the support."""
    r = np.asarray(reward, float)[np.asarray(ref) > 0]
    return 8 * np.finfo(float).eps * float(np.max(np.abs(r)))


# --------------------------------------------------------------------------- equivalence


ALL_BETAS = np.array([0.0, *BETAS, math.inf])


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_closed_form_equals_the_numpy_core_on_the_mpmath_cases(xb, case):
    # one call per function: every beta of the grid as a batch row (beta shape (B, 1))
    ref, r = CASES[case]
    q, w, b = xb.asarray(ref), xb.asarray(r), xb.asarray(ALL_BETAS[:, None])
    pi = xb("optimal_policy", q, w, b)
    assert xb.is_native(pi)
    assert_close(xb.numpy(pi), kp.optimal_policy(ref, r, ALL_BETAS[:, None]))
    v = xb("soft_value", q, w, b)
    want = kp.soft_value(ref, r, ALL_BETAS[:, None])
    assert_close(xb.numpy(v), want, atol=value_atol(ref, r))
    kl = xb("optimal_kl", q, w, b)
    assert_close(xb.numpy(kl), kp.optimal_kl(ref, r, ALL_BETAS[:, None]))


@pytest.mark.slow
@pytest.mark.parametrize("case", ["near_ties", "tiny_ref", "tiny_alternative", "large_rewards"])
@pytest.mark.parametrize("beta", [1e-4, 1.0, 1e8])
def test_closed_form_against_mpmath(xb, case, beta):
    # recipe: tests/_mpref/closed_form.py (400 digits, ref normalised exactly, formulas from the definition)
    ref, r = CASES[case]
    q, w = xb.asarray(ref), xb.asarray(r)
    want = R.to_float(R.optimal_policy(ref, r, beta))
    got = xb.numpy(xb("optimal_policy", q, w, beta))
    normal = want > 1e-290
    assert_close(got[normal], want[normal], rtol=2e-12)
    assert_close(xb.numpy(xb("optimal_kl", q, w, beta)), float(R.optimal_kl(ref, r, beta)), 2e-12)
    assert_close(
        xb.numpy(xb("soft_value", q, w, beta)),
        float(R.soft_value(ref, r, beta)),
        rtol=2e-12,
        atol=value_atol(ref, r),
    )


EXTREME_REFS = [
    [0.5, 0.5],
    [0.3, 0.7],
    [1e-300, 1.0 - 1e-300],
    [0.0, 0.25, 0.0, 0.75],
    [1e-300, 0.0, 0.5, 0.5 - 1e-300],
    [1.0, 1e-33],
]
EXTREME_REWARDS = [
    [1.0, 1.0, 1.0, 1.0],  # ties
    [1e6, -1e6, 3.5e5, 0.0],
    [1e308, -1e308, 0.0, 1e308],
    [2.0, 3.0, -1.0, 0.5],
    [0.0, 1e-6, 0.0, -1e-6],
]
EXTREME_BETAS = [0.0, 1e-310, 1e-300, 1e-16, 1e-8, 0.5, 1e8, 1e10, 1e16, 1e300, math.inf]


def _extreme_batch():
    """Every (ref, reward) pair of the lists as one (30, 4) batch (zeros pad the short refs)."""
    refs, rewards = [], []
    for ref, rew in itertools.product(EXTREME_REFS, EXTREME_REWARDS):
        refs.append(ref + [0.0] * (4 - len(ref)))
        rewards.append(rew)
    return np.array(refs), np.array(rewards)


@pytest.mark.slow
@pytest.mark.parametrize("beta", EXTREME_BETAS)
def test_closed_form_equals_the_numpy_core_at_the_extremes(xb, beta):
    ref, r = _extreme_batch()
    q, w = xb.asarray(ref), xb.asarray(r)
    assert_close(xb.numpy(xb("optimal_policy", q, w, beta)), kp.optimal_policy(ref, r, beta))
    want = kp.soft_value(ref, r, beta)
    atol = [value_atol(a, b) for a, b in zip(ref, r)]
    assert_close(xb.numpy(xb("soft_value", q, w, beta)), want, atol=np.array(atol))
    assert_close(xb.numpy(xb("optimal_kl", q, w, beta)), kp.optimal_kl(ref, r, beta))


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(
    prob=problems(
        max_size=6,
        min_beta=1e-300,
        max_beta=1e300,
        allow_zero_beta=True,
        allow_inf_beta=True,
    ),
    big=st.booleans(),
)
def test_closed_form_equals_the_numpy_core_on_drawn_extremes(prob, big):
    ref, r, beta = prob
    if big:  # rewards of 1e308: differences overflow
        r = np.where(r == r.max(), 1e308, np.where(r == r.min(), -1e308, r))
    for name in ("numpy", "torch", "jax"):
        try:
            xb = Backend(name)
        except ImportError:
            continue
        q, w = xb.asarray(ref), xb.asarray(r)
        assert_close(xb.numpy(xb("optimal_policy", q, w, beta)), kp.optimal_policy(ref, r, beta))
        assert_close(
            xb.numpy(xb("soft_value", q, w, beta)),
            kp.soft_value(ref, r, beta),
            atol=value_atol(ref, r),
        )
        assert_close(xb.numpy(xb("optimal_kl", q, w, beta)), kp.optimal_kl(ref, r, beta))


@pytest.mark.slow
def test_batches_axis_and_beta_arrays(xb):
    rng = np.random.default_rng(3)
    ref = rng.dirichlet(np.ones(5), size=(2, 3))
    r = rng.normal(size=(2, 3, 5)) * 4
    beta = np.array([0.0, 0.1, np.inf]).reshape(1, 3, 1)
    got = xb("optimal_policy", xb.asarray(ref), xb.asarray(r), xb.asarray(beta))
    assert_close(xb.numpy(got), kp.optimal_policy(ref, r, beta))
    # the probability axis first, a python beta
    got = xb("soft_value", xb.asarray(ref.T), xb.asarray(r.T), 0.7, axis=0)
    assert_close(xb.numpy(got), kp.soft_value(ref.T, r.T, 0.7, axis=0), atol=1e-14)
    got = xb("max_kl", xb.asarray(ref), xb.asarray(r))
    assert_close(xb.numpy(got), kp.max_kl(ref, r))


@pytest.mark.slow
def test_divergences_and_estimators_equal_the_numpy_core(xb):
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.full(7, 0.5), size=4)
    q = rng.dirichlet(np.full(7, 0.5), size=4)
    p[0, 2] = 0.0
    p[0] /= p[0].sum()
    q[1, 3] = 0.0
    q[1] /= q[1].sum()  # p puts mass there: KL and cross-entropy are inf on that row
    near = np.array([0.5 + 1e-9, 0.5 - 1e-9])  # KL ~ 2e-18, exact only with log1p
    for fn in ("kl_divergence", "cross_entropy", "total_variation"):
        got = xb(fn, xb.asarray(p), xb.asarray(q))
        assert_close(xb.numpy(got), PUBLIC[fn](p, q))
    got = xb("kl_divergence", xb.asarray(near), xb.asarray([0.5, 0.5]))
    assert_close(xb.numpy(got), kp.kl_divergence(near, [0.5, 0.5]), rtol=1e-9)
    assert_close(xb.numpy(xb("entropy", xb.asarray(p))), kp.entropy(p))
    logp = np.log(rng.uniform(1e-3, 1, 50))
    logq = np.concatenate([np.log(rng.uniform(1e-3, 1, 49)), [-np.inf]])
    logq[0] = logp[0] + 1e-9  # k3 ~ 5e-19: the series keeps its digits
    for fn in ("k1", "k2", "k3"):
        got = xb(fn, xb.asarray(logp), xb.asarray(logq))
        assert_close(xb.numpy(got), PUBLIC[fn](logp, logq))
    got = xb("k3", xb.asarray(logp), xb.asarray(logq), clip=10.0, log_ratio_clip=20.0)
    assert_close(xb.numpy(got), estimators.k3(logp, logq, clip=10.0, log_ratio_clip=20.0))


# --------------------------------------------------------------------------- validation

BAD_PROBLEMS = [
    ([0.5, 0.6], [1.0, 0.0], 1.0),  # unnormalised
    ([np.inf, 0.0], [1.0, 0.0], 1.0),
    ([np.nan, 1.0], [1.0, 0.0], 1.0),
    ([-0.2, 1.2], [1.0, 0.0], 1.0),
    ([0.5, 0.5], [np.nan, 0.0], 1.0),
    ([0.5, 0.5], [np.inf, 0.0], 1.0),
    ([0.5, 0.5], [1.0, 0.0, 2.0], 1.0),  # sizes differ
    ([[0.5, 0.5], [0.2, 0.9]], [1.0, 0.0], 1.0),  # a bad row
    ([0.5, 0.5], [1.0, 0.0], -1.0),
    ([0.5, 0.5], [1.0, 0.0], np.nan),
    ([[0.5, 0.5], [0.5, 0.5]], [1.0, 0.0], [[1.0], [-2.0]]),  # a bad beta in an array
    ([[0.5, 0.5], [0.5, 0.5]], [1.0, 0.0], [1.0, 2.0]),  # beta not of size 1 along axis
]


def _message(fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        fn(*args, **kwargs)
    return str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize(("ref", "reward", "beta"), BAD_PROBLEMS)
def test_invalid_problems_are_refused_with_the_numpy_message(xb, ref, reward, beta):
    want = _message(kp.optimal_policy, ref, reward, beta)
    b = xb.asarray(beta) if np.ndim(beta) else beta
    for fn in ("optimal_policy", "soft_value", "optimal_kl"):
        assert _message(xb, fn, xb.asarray(ref), xb.asarray(reward), b) == want


@pytest.mark.parametrize(
    ("p", "q"),
    [([0.5, 0.6], [0.5, 0.5]), ([0.5, 0.5], [np.nan, 1.0]), ([0.5, 0.5], [1.5, -0.5])],
)
def test_invalid_distributions_are_refused_with_the_numpy_message(xb, p, q):
    for fn in ("kl_divergence", "cross_entropy", "total_variation"):
        want = _message(PUBLIC[fn], p, q)
        assert _message(xb, fn, xb.asarray(p), xb.asarray(q)) == want


@pytest.mark.parametrize(
    ("logp", "logq"), [([np.nan], [0.0]), ([-np.inf], [0.0]), ([0.0], [np.inf])]
)
def test_invalid_log_probs_are_refused_with_the_numpy_message(xb, logp, logq):
    want = _message(estimators.k3, logp, logq)
    assert _message(xb, "k3", xb.asarray(logp), xb.asarray(logq)) == want


# --------------------------------------------------------------------------- fast path


# Soft values far smaller than the best reward: a reference nearly all on one outcome whose
# rare alternatives score higher (V = 2.7e-59 for the second row, which c + beta log Z,
# centred on the best reward, rounded to 0 in numpy and torch alike), and a mode sitting
# 710 beta below the best reward on a subnormal reference entry (pi lost five digits), and
# modes on subnormal reference entries.
SMALL_VALUES = [
    ([1e-20, 1.0 - 1e-20], [3.0, 0.0], 0.1),
    ([1e-100, 1.0], [1.0, 0.0], 0.01),
    ([1e-100, 1.0], [1.0, 0.0], 0.1),
    ([1e-300, 1.0], [0.5, 0.0], 1e-3),
    ([0.9999, 1e-4], [0.0, 1.0], 0.5),
    ([1e-30, 1.0, 1e-30], [2.0, 1.0, -3.0], 0.05),
    ([1e-12, 1.0, 1e-15], [7.0, 7.0 - 1e-9, 6.0], 1e-3),
    ([5e-324, 1e-12, 1.0], [0.71, 0.0, -1.0], 1e-3),
    # the mode on a subnormal reference entry, e^-750 beside it (found by a fuzz against
    # mpmath: pi and KL were 3.8e-6 relative off, numpy and torch alike)
    ([1.0, 4.94e-321, 0.0], [-50.0, 700.0, 1e6], 1.0),
    ([0.5, 0.5 - 1e-300, 5e-324], [0.0, 0.1, 7.5], 0.01),
]


@pytest.mark.parametrize(("ref", "r", "beta"), SMALL_VALUES)
def test_small_soft_values_keep_their_relative_digits(xb, ref, r, beta):
    """V against mpmath to 1e-13 of ``|r_k| + |V - r_k| + E_pi|r - r_k|`` (k the mode of
    pi*), its conditioning (tests/_mpref/closed_form.py), not of the best reward: the numpy core's
    fast and careful paths and the array-API kernel alike. pi and KL to 1e-12 relative."""
    if xb.name == "jax" and min(x for x in ref if x > 0) < np.finfo(float).tiny:
        pytest.skip("XLA on CPU flushes subnormal numbers to zero (docs/backends.md)")
    want = float(R.soft_value(ref, r, beta))
    tol = 1e-13 * float(R.soft_value_scale(ref, r, beta))
    for got in (
        kp.soft_value(ref, r, beta),
        xb("soft_value", xb.asarray(ref), xb.asarray(r), beta),
    ):
        got = float(xb.numpy(got)) if not isinstance(got, float) else got
        assert abs(got - want) <= tol, (got, want, tol)
    pi_want = R.to_float(R.optimal_policy(ref, r, beta))
    kl_want = float(R.optimal_kl(ref, r, beta))
    for pi, kl in (
        (kp.optimal_policy(ref, r, beta), kp.optimal_kl(ref, r, beta)),
        (
            xb.numpy(xb("optimal_policy", xb.asarray(ref), xb.asarray(r), beta)),
            xb.numpy(xb("optimal_kl", xb.asarray(ref), xb.asarray(r), beta)),
        ),
    ):
        normal = pi_want > 1e-290
        assert_close(pi[normal], pi_want[normal], rtol=2e-12)
        assert_close(kl, kl_want, rtol=1e-11)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    tiny=st.floats(1e-300, 1e-3),
    gain=st.floats(0.0, 60.0),
    beta=st.floats(1e-4, 10.0),
    base=st.sampled_from([0.0, 1.0, -3.0, 1e3]),
)
def test_soft_value_is_exact_to_its_conditioning_on_drawn_rare_alternatives(tiny, gain, beta, base):
    """A rare alternative of reference mass ``tiny`` gaining ``gain`` beta in reward over the
    bulk: V - base ranges from ~tiny to ~gain beta. numpy core and float64 torch, against
    mpmath, to 1e-13 of the conditioning scale (tests/_mpref/closed_form.py)."""
    ref = [tiny, 1.0 - tiny]
    r = [base + gain * beta, base]
    want = float(R.soft_value(ref, r, beta))
    tol = 1e-13 * float(R.soft_value_scale(ref, r, beta))
    got = [kp.soft_value(ref, r, beta)]
    try:
        import torch
    except ImportError:
        pass
    else:
        t = torch.tensor
        got.append(
            float(kp.soft_value(t(ref, dtype=torch.float64), t(r, dtype=torch.float64), beta))
        )
    for g in got:
        assert abs(g - want) <= tol, (g, want, tol)


def _fast_cases():
    """(ref, reward, beta, shifted): rows the one-exp path takes, with and without the shift."""
    rng = np.random.default_rng(11)
    ref = rng.dirichlet(np.full(64, 0.3), size=4)
    tiny = ref.copy()
    tiny[:, 0] = 1e-250  # log(1e-250) = -575: still every weight a normal float
    tiny /= tiny.sum(-1, keepdims=True)
    r = rng.normal(size=(4, 64))
    return [
        (ref, r, 0.5, False),  # |r| / beta < 50: exp(r / beta) directly
        (ref, r * 20, 0.5, True),  # |r| / beta ~ 120: shifted by max(r)
        (tiny, r, 1.0, False),
        (ref, r + 1e6, 1e4, True),  # large rewards: exp(r / beta) alone would be e^100
    ]


@pytest.mark.parametrize("case", range(4))
def test_fast_path_equals_the_careful_path(xb, case, monkeypatch):
    """The one-exp path is taken on ordinary rows and equals the careful path to 1e-13."""
    ref, r, beta, _ = _fast_cases()[case]
    q, w = xb.asarray(ref), xb.asarray(r)
    taken = []
    real = _xp._fast_policy
    monkeypatch.setattr(_xp, "_fast_policy", lambda *a: taken.append(real(*a)) or taken[-1])
    fast = xb.numpy(xb("optimal_policy", q, w, beta))
    assert taken and taken[-1][0] is not None, "the fast path was not taken"
    xp = _xp._namespace(q)[0]
    b = xp.asarray(np.full((4, 1), beta))
    if xb.name == "torch":
        b = b.to(q.dtype)
    careful = xb.numpy(_xp._tilt(xp, q, w, b, {"pi"}, limits=True)["pi"])
    assert_close(fast, careful, rtol=1e-13)
    assert_close(fast, kp.optimal_policy(ref, r, beta), rtol=1e-13)


@pytest.mark.parametrize(
    ("ref", "reward", "beta"),
    [
        ([0.0, 1.0], [1.0, 0.0], 0.5),  # a zero in the reference
        ([1e-300, 1.0 - 1e-300], [1.0, 0.0], 1e-3),  # a weight below the normal floats
        ([0.5, 0.5], [1e308, -1e308], 1.0),  # the reward's spread overflows
    ],
)
def test_fast_path_hands_unsafe_rows_to_the_careful_path(xb, ref, reward, beta):
    with np.errstate(all="ignore"):  # the overflowing spread, on numpy arrays
        q = xb.asarray([ref])
        taken = _xp._fast_policy(
            _xp._namespace(q)[0],
            q,
            xb.asarray([reward]),
            xb.asarray([[beta]]),
            1e-8,
            True,
            q.dtype,
            q.dtype,
        )
    assert taken[0] is None and taken[1] is True
    got = xb.numpy(xb("optimal_policy", xb.asarray(ref), xb.asarray(reward), beta))
    assert_close(got, kp.optimal_policy(ref, reward, beta))


@pytest.mark.parametrize("fn", ["optimal_policy", "soft_value", "optimal_kl"])
def test_fast_paths_bring_one_value_to_the_host(fn, monkeypatch):
    """Valid input costs one device-to-host transfer: the checks ride on the path's flags."""
    torch = pytest.importorskip("torch")
    ref, r, beta, _ = _fast_cases()[1]
    calls = []
    real = _xp._to_numpy
    monkeypatch.setattr(_xp, "_to_numpy", lambda x: calls.append(x.shape) or real(x))
    monkeypatch.setattr(
        _xp, "_check_probabilities", lambda *a, **k: pytest.fail("a separate check ran")
    )
    PUBLIC[fn](torch.tensor(ref), torch.tensor(r), beta)
    assert len(calls) == 1


def test_fast_path_gradient_is_the_analytic_one():
    """d pi_i / d r_j = pi_i (delta_ij - pi_j) / beta through the one-exp path (torch)."""
    torch = pytest.importorskip("torch")
    ref, r, beta, _ = _fast_cases()[0]
    rt = torch.tensor(r[:1], requires_grad=True)
    pi = kp.optimal_policy(torch.tensor(ref[:1]), rt, beta)
    jac = torch.autograd.functional.jacobian(
        lambda x: kp.optimal_policy(torch.tensor(ref[:1]), x, beta)[0], rt
    )[:, 0, :].numpy()
    p = pi.detach().numpy()[0]
    assert_close(jac, (np.diag(p) - np.outer(p, p)) / beta, rtol=1e-10, atol=1e-18)


@pytest.mark.parametrize("case", range(3))  # the fourth has spread / beta < 2: careful
@pytest.mark.parametrize("stat", ["soft_value", "optimal_kl"])
def test_fast_statistics_equal_the_careful_path(xb, case, stat, monkeypatch):
    """The one-exp soft value and KL are taken on ordinary rows and equal the careful
    kernel and the numpy core to 1e-12 relative."""
    ref, r, beta, _ = _fast_cases()[case]
    q, w = xb.asarray(ref), xb.asarray(r)
    taken = []
    real = _xp._fast_stats
    monkeypatch.setattr(_xp, "_fast_stats", lambda *a: taken.append(real(*a)) or taken[-1])
    fast = xb.numpy(xb(stat, q, w, beta))
    assert taken and taken[-1][0] is not None, "the fast path was not taken"
    xp = _xp._namespace(q)[0]
    b = xp.asarray(np.full((4, 1), beta))
    if xb.name == "torch":
        b = b.to(q.dtype)
    key = "value" if stat == "soft_value" else "kl"
    careful = xb.numpy(_xp._tilt(xp, q, w, b, {key}, limits=True)[key][:, 0])
    assert_close(fast, careful, rtol=1e-12)
    assert_close(fast, PUBLIC[stat](ref, r, beta), rtol=1e-12)


@pytest.mark.parametrize(
    ("ref", "reward", "beta", "stat"),
    [
        ([[0.0, 1.0], [0.5, 0.5]], [[1.0, 0.0], [1.0, 0.0]], 0.2, "soft_value"),  # a zero
        # a KL of 0.008 against a rounding scale of 6 (spread / beta = 2)
        ([[0.5, 0.5], [0.999, 0.001]], [[1.0, 0.0], [0.0, 1.0]], 0.5, "optimal_kl"),
        ([[1e-100, 1.0], [0.5, 0.5]], [[1.0, 0.0], [1.0, 0.0]], 0.01, "soft_value"),  # V ~ 0
        ([[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0], [1.0, 0.0]], 10.0, "soft_value"),  # large beta
    ],
)
def test_fast_statistics_hand_unresolved_batches_to_the_careful_path(
    xb, ref, reward, beta, stat, monkeypatch
):
    """A batch with one row the one-exp form cannot resolve (a zero in the reference, a
    KL below its rounding scale, a value near 0, spread / beta < 2) runs the careful
    kernel whole, and every row matches mpmath."""
    taken = []
    real = _xp._fast_stats
    monkeypatch.setattr(_xp, "_fast_stats", lambda *a: taken.append(real(*a)) or taken[-1])
    got = xb.numpy(xb(stat, xb.asarray(ref), xb.asarray(reward), beta))
    assert taken and taken[-1][0] is None and taken[-1][1] is True
    for i in range(2):
        if stat == "soft_value":
            want = float(R.soft_value(ref[i], reward[i], beta))
            tol = 1e-13 * float(R.soft_value_scale(ref[i], reward[i], beta))
        else:
            want = float(R.optimal_kl(ref[i], reward[i], beta))
            tol = 1e-11 * want
        assert abs(got[i] - want) <= tol, (i, got[i], want)


def test_fast_statistics_gradients_are_the_analytic_ones():
    """dV/dr = pi and dKL/dr_j = pi_j (u_j - KL) / beta through the one-exp path (torch)."""
    torch = pytest.importorskip("torch")
    ref, r, beta, _ = _fast_cases()[0]
    q = torch.tensor(ref)
    rt = torch.tensor(r, requires_grad=True)
    (g_v,) = torch.autograd.grad(kp.soft_value(q, rt, beta).sum(), rt)
    (g_k,) = torch.autograd.grad(kp.optimal_kl(q, rt, beta).sum(), rt)
    pi = kp.optimal_policy(ref, r, beta)
    u = np.log(pi / ref)
    kl = kp.optimal_kl(ref, r, beta)[:, None]
    assert_close(g_v.numpy(), pi, rtol=1e-10, atol=1e-18)
    assert_close(g_k.numpy(), pi * (u - kl) / beta, rtol=1e-9, atol=1e-15)


# --------------------------------------------------------------------------- float32


@pytest.mark.slow
@pytest.mark.parametrize("beta", [0.0, 1e-30, 1e-3, 0.5, 1e4, 1e30, math.inf])
def test_float32_in_float32_out_exact_and_never_inf(xb, beta):
    refs = [[1.0, 1e-44], [0.5, 0.5], [0.0, 0.25, 0.0, 0.75], [1e-30, 1.0 - 1e-30]]
    if xb.name == "jax":  # XLA on CPU flushes float32 subnormals (1e-44) to zero
        refs = refs[1:]
    for ref, rew in itertools.product(
        refs,
        [[0.0, 1.0, -2.0, 3.0], [1e30, -1e30, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]],
    ):
        r = rew[: len(ref)]
        ref32 = np.asarray(ref, np.float32)
        r32 = np.asarray(r, np.float32)
        pi = xb("optimal_policy", xb.asarray(ref32, "float32"), xb.asarray(r32, "float32"), beta)
        assert str(pi.dtype).endswith("float32")
        got = xb.numpy(pi)
        # the float64 answer for the same (float32-rounded) inputs
        want = kp.optimal_policy(ref32.astype(float), r32.astype(float), float(np.float32(beta)))
        assert np.all(np.isfinite(got)) and np.all(got >= 0) and np.all(got <= 1), (ref, r, got)
        ok = want > 1e-30
        assert np.all(np.abs(got - want)[ok] <= 1e-5 * want[ok] + 1e-37), (ref, r, got, want)
        v = xb.numpy(
            xb("soft_value", xb.asarray(ref32, "float32"), xb.asarray(r32, "float32"), beta)
        )
        kl = xb.numpy(
            xb("optimal_kl", xb.asarray(ref32, "float32"), xb.asarray(r32, "float32"), beta)
        )
        assert np.isfinite(v) and np.isfinite(kl) and kl >= 0


def test_numpy_float32_tiny_reference_entry_is_a_probability_not_inf():
    # float32 keeps its own overflow threshold (86, not float64's 707): a tiny reference
    # entry must not give a probability of inf
    got = kp.optimal_policy(np.float32([1, 1e-44]), np.float32([0, 1]), 1e-3)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.float32([0.0, 1.0]))
    # KL = -log(1e-44 in float32) = -log(9.80909e-45): the greedy mass of the subnormal entry
    assert float(kp.optimal_kl(np.float32([1, 1e-44]), np.float32([0, 1]), 1e-3)) == pytest.approx(
        -math.log(float(np.float32(1e-44))), rel=1e-6
    )


# --------------------------------------------------------------------------- gradients


def _grad(xb, fn, *args, wrt=0):
    """Gradient of the scalar fn(*args) with respect to args[wrt] (float64)."""
    if xb.name == "torch":
        torch = xb.lib
        args = [
            a.clone().requires_grad_(i == wrt) if isinstance(a, torch.Tensor) else a
            for i, a in enumerate(args)
        ]
        out = fn(*args)
        (g,) = torch.autograd.grad(out, args[wrt])
        return g.numpy()
    jax = xb.jax

    def f(x):
        a = list(args)
        a[wrt] = x
        return fn(*a)

    return np.asarray(jax.grad(f)(args[wrt]))


def _jacobian(xb, fn, x):
    if xb.name == "torch":
        return xb.lib.autograd.functional.jacobian(fn, x).numpy()
    return np.asarray(xb.jax.jacrev(fn)(x))


GRAD_CASES = [
    ([0.2, 0.3, 0.5], [0.3, -1.0, 0.7], 0.8),
    ([0.0, 0.25, 0.0, 0.75], [5.0, 1.0, -3.0, 0.2], 0.3),
    ([1e-300, 0.5, 0.5 - 1e-300], [700.0, 0.0, 1.0], 1.0),
    ([0.3, 0.7], [1e6, -1e6], 2e5),
    ([0.3, 0.7], [1e-6, 0.0], 1e10),
    ([0.3, 0.3, 0.4], [1.0, 1.0, 0.5], 1e-2),
]


@pytest.mark.slow
@pytest.mark.parametrize(("ref", "r", "beta"), GRAD_CASES)
def test_gradients_equal_the_analytic_derivatives(ad, ref, r, beta):
    q, w, b = ad.asarray(ref), ad.asarray(r), ad.asarray(beta)
    pi = kp.optimal_policy(ref, r, beta)
    kl = kp.optimal_kl(ref, r, beta)
    # d pi_i / d r_j = pi_i (delta_ij - pi_j) / beta
    jac = _jacobian(ad, lambda x: kp.optimal_policy(q, x, b), w)
    want = (np.diag(pi) - np.outer(pi, pi)) / beta
    np.testing.assert_allclose(jac, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())
    # dV/dr = pi*, dV/dbeta = -KL(pi* || ref)
    np.testing.assert_allclose(
        _grad(ad, kp.soft_value, q, w, b, wrt=1), pi, rtol=1e-10, atol=1e-300
    )
    np.testing.assert_allclose(_grad(ad, kp.soft_value, q, w, b, wrt=2), -kl, rtol=1e-9)
    # dKL/dbeta = -Var_pi(r) / beta^3
    rr = np.asarray(r)
    mean = np.sum(pi * rr)
    var = np.sum(pi * (rr - mean) ** 2)
    np.testing.assert_allclose(_grad(ad, kp.optimal_kl, q, w, b, wrt=2), -var / beta**3, rtol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ref", "r", "beta", "dv_dbeta"),
    [
        ([0.5, 0.5], [1.0, 0.0], 1e-300, -math.log(2)),  # greedy: -KL = log(1/2)
        ([0.5, 0.5], [1.0, 0.0], 1e-310, -math.log(2)),  # subnormal beta
        ([0.3, 0.7], [1.0, 1.0], 1e-16, 0.0),  # ties: pi* = ref, KL = 0
        ([0.5, 0.5], [1e308, -1e308], 1.0, -math.log(2)),
        ([1e-300, 1.0 - 1e-300], [700.0, 0.0], 1e-300, None),
        ([0.0, 0.25, 0.0, 0.75], [5.0, 1.0, -3.0, 0.2], 1e300, 0.0),
    ],
)
def test_gradients_are_finite_at_the_extremes(ad, ref, r, beta, dv_dbeta):
    if ad.name == "jax" and beta < np.finfo(float).tiny:
        beta = 0.0  # XLA on CPU flushes subnormals to zero: beta = 1e-310 is the greedy limit
        dv_dbeta = 0.0  # ... which does not depend on beta
    q, w, b = ad.asarray(ref), ad.asarray(r), ad.asarray(beta)
    for fn in (kp.soft_value, kp.optimal_kl, lambda *a: kp.optimal_policy(*a)[-1]):
        for wrt in (0, 1, 2):
            g = _grad(ad, fn, q, w, b, wrt=wrt)
            assert np.all(np.isfinite(g)), (fn, wrt, g)
    if dv_dbeta is not None:
        g = _grad(ad, kp.soft_value, q, w, b, wrt=2)
        np.testing.assert_allclose(g, dv_dbeta, rtol=1e-12, atol=1e-300)


@pytest.mark.slow
def test_kl_divergence_and_estimator_gradients(ad):
    p, q = np.array([0.0, 0.3, 0.7]), np.array([0.2, 0.3, 0.5])
    # the kernel computes KL(p / sum p || q / sum q) (rows normalised only to rounding are
    # treated as exact): its derivative in p_i (p_i > 0) at sum p = 1 is log(p_i / q_i) - KL
    g = _grad(ad, kp.kl_divergence, ad.asarray(p), ad.asarray(q), wrt=0)
    assert np.all(np.isfinite(g))
    kl = kp.kl_divergence(p, q)
    np.testing.assert_allclose(g[1:], np.log(p[1:] / q[1:]) - kl, rtol=1e-12, atol=1e-15)
    # k3 = exp(x) - 1 - x, x = logq - logp: d/dlogp = 1 - exp(x)
    lp, lq = np.log([0.2, 0.5]), np.log([0.3, 0.5])
    g = _grad(ad, lambda a, b: estimators.k3(a, b).sum(), ad.asarray(lp), ad.asarray(lq), wrt=0)
    np.testing.assert_allclose(g, 1 - np.exp(lq - lp), rtol=1e-12, atol=1e-16)


@pytest.mark.slow
def test_torch_gradcheck_at_the_extremes():
    torch = pytest.importorskip("torch")
    t = lambda x: torch.tensor(x, dtype=torch.float64, requires_grad=True)  # noqa: E731
    cases = [
        ([0.0, 0.25, 0.0, 0.75], [5.0, 1.0, -3.0, 0.2], 0.3),  # zeros in ref
        ([1e-300, 0.5, 0.5 - 1e-300], [700.0, 0.0, 1.0], 1.0),  # a 1e-300 entry with weight
        ([0.3, 0.7], [1e6, -1e6 + 3.0], 2.0),  # large rewards, close
        ([0.3, 0.7], [1e-3, 0.0], 1e8),  # large beta: the mean-centred value
        ([1.0 - 1e-12, 1e-12], [2.0, 3.0], 0.05),  # lopsided reference: the mode-centred KL
    ]
    for ref, r, beta in cases:
        q = torch.tensor(ref, dtype=torch.float64)
        for fn in (kp.optimal_policy, kp.soft_value, kp.optimal_kl):
            assert torch.autograd.gradcheck(
                lambda w, b, fn=fn, q=q: fn(q, w, b), (t(r), t(beta)), eps=1e-6 * max(1.0, beta)
            ), (fn, ref, r, beta)


@pytest.mark.slow
def test_jax_jit_with_validate_false_equals_eager():
    jax = pytest.importorskip("jax")
    xb = Backend("jax")
    q, w = xb.asarray([0.2, 0.3, 0.5]), xb.asarray([0.3, -1.0, 0.7])
    for fn in (kp.optimal_policy, kp.soft_value, kp.optimal_kl):
        jitted = jax.jit(lambda a, b, c, fn=fn: fn(a, b, c, validate=False))
        for beta in (0.0, 1e-300, 0.8, 1e10, math.inf):
            np.testing.assert_allclose(
                np.asarray(jitted(q, w, beta)), np.asarray(fn(q, w, beta)), rtol=1e-15
            )
    # validation needs concrete values: under jit it cannot run
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(lambda a, b: kp.optimal_policy(a, b, 0.5))(q, w)


# --------------------------------------------------------------------------- torch specifics


def test_torch_issue_20_defects_are_fixed():
    torch = pytest.importorskip("torch")
    t = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    # tied rewards at a tiny beta: the reference (the naive softmax gave [0.119, 0.881])
    pi = kp.optimal_policy(t([0.3, 0.7]), t([1.0, 1.0]), 1e-16)
    np.testing.assert_array_equal(pi.numpy(), [0.3, 0.7])
    # soft value at beta = 1e10: 3e-7 + Var/(2 beta) (the naive one gave -5.55e-7)
    v = kp.soft_value(t([0.3, 0.7]), t([1e-6, 0.0]), 1e10)
    assert float(v) == pytest.approx(3e-7 + 0.21e-12 / 2e10, rel=1e-12)
    # a reward of 1e308 and a subnormal beta: finite, exact
    np.testing.assert_array_equal(kp.optimal_policy(t([0.5, 0.5]), t([1e308, 0.0]), 1.0), [1, 0])
    np.testing.assert_array_equal(kp.optimal_policy(t([0.5, 0.5]), t([1.0, 0.0]), 1e-310), [1, 0])
    # beta = 1e-300 as a tensor: dV/dbeta = -KL = log(1/2), not NaN
    b = torch.tensor(1e-300, dtype=torch.float64, requires_grad=True)
    kp.soft_value(t([0.5, 0.5]), t([1.0, 0.0]), b).backward()
    assert float(b.grad) == pytest.approx(-math.log(2), rel=1e-15)


def test_bfloat16_is_computed_in_float32_and_returned_in_bfloat16():
    torch = pytest.importorskip("torch")
    ref = torch.tensor([0.3, 0.7], dtype=torch.bfloat16)
    r = torch.tensor([1.0, 0.0], dtype=torch.bfloat16)
    pi = kp.optimal_policy(ref, r, 0.5)
    assert pi.dtype == torch.bfloat16
    want = kp.optimal_policy(ref.float().numpy(), r.float().numpy(), 0.5)
    np.testing.assert_allclose(pi.float().numpy(), want, rtol=2**-8)
    v = kp.soft_value(ref, r, 0.5)
    assert v.dtype == torch.bfloat16
    # bfloat16 rows sum to one only to bfloat16 precision: accepted with its own tolerance
    ref3 = torch.tensor([0.1, 0.2, 0.7], dtype=torch.bfloat16)
    assert torch.isfinite(kp.optimal_policy(ref3, torch.zeros(3, dtype=torch.bfloat16), 1.0)).all()


@pytest.mark.parametrize("low", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["torch", "jax"])
def test_low_precision_blocks_equal_one_float32_computation(name, low, monkeypatch):
    """float16/bfloat16 go through the fast path in float32 blocks of rows: the same
    numbers as casting the whole input to float32 first, in every batch layout."""
    pytest.importorskip(name)
    xb = Backend(name)
    rng = np.random.default_rng(8)
    ref = rng.dirichlet(np.ones(300), size=(5, 7))
    r = rng.normal(size=(5, 7, 300))
    beta = np.array([0.3, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]).reshape(1, 7, 1)
    monkeypatch.setattr(_xp, "_LOW_PRECISION_BLOCKS", 3)  # blocks of 2, 2 and 1 rows
    for q_in, r_in, b_in in [
        (ref, r, beta),  # (5, 7, 300) with a beta per middle row
        (ref[0, 0], r, 0.7),  # one reference row broadcast against the batch
        (ref[0], r[0], 0.7),  # 2-D
        (ref[0, 0], r[0, 0], 0.7),  # one row: no blocks
    ]:
        q, w = xb.asarray(q_in, low), xb.asarray(r_in, low)
        got = xb("optimal_policy", q, w, b_in)
        assert str(got.dtype).endswith(low)
        f32 = xb.lib.float32
        whole = xb(
            "optimal_policy",
            xb.lib.asarray(q, dtype=f32),
            xb.lib.asarray(w, dtype=f32),
            b_in,
            validate=False,  # bfloat16 rows sum to one only to bfloat16 precision
        )
        want = xb.numpy(xb.lib.asarray(whole, dtype=getattr(xb.lib, low)))
        # torch: the same bits; XLA may fuse a block's chain differently: one ulp of `low`
        ulp = 0.0 if name == "torch" else float(xb.lib.finfo(getattr(xb.lib, low)).eps)
        np.testing.assert_allclose(xb.numpy(got), want, rtol=ulp, atol=0)


def test_mixed_precision_result_is_not_rounded_to_the_low_dtype():
    """bfloat16 ref with float32 reward: a float32 result, computed in float32 throughout."""
    torch = pytest.importorskip("torch")
    ref = torch.tensor([[0.25, 0.75], [0.5, 0.5]], dtype=torch.bfloat16)
    reward = torch.tensor([[0.1234567, 0.0], [1.0, 0.3333333]])
    got = kp.optimal_policy(ref, reward, 0.7)
    assert got.dtype == torch.float32
    want = kp.optimal_policy(ref.double().numpy(), reward.double().numpy(), 0.7)
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-6)  # float32, not bfloat16's 4e-3


def _torch_cpu_peak(fn) -> int:
    """Peak bytes allocated by torch's CPU allocator during ``fn()`` (profiler's memory events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = prof.profiler.kineto_results.events()
    mem = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in mem:
        live += nbytes
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_fast_path_holds_at_most_two_input_sized_arrays(dtype):
    """The fast path holds at most two input-sized arrays, on the CPU allocator (the CUDA
    figure is benchmarks/gpu_check.sh's)."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    dt = getattr(torch, dtype)
    ref = torch.softmax(torch.randn(64, 4096, generator=gen, dtype=torch.float64), -1).to(dt)
    reward = torch.randn(64, 4096, generator=gen).to(dt)
    nbytes = ref.numel() * ref.element_size()
    baseline = _torch_cpu_peak(lambda: torch.softmax(torch.log(ref) + reward / 0.5, -1))
    assert baseline >= 3 * nbytes  # the profiler sees the allocations: the test can fail
    peak = _torch_cpu_peak(lambda: kp.optimal_policy(ref, reward, 0.5))
    assert peak <= 2 * nbytes + 64 * 1024, peak / nbytes


@pytest.mark.slow
def test_torch_keeps_device_dtype_and_klpolicy_torch_is_the_same_function():
    torch = pytest.importorskip("torch")
    import klpolicy.torch as kt

    ref = torch.tensor([[0.2, 0.8], [0.5, 0.5]], dtype=torch.float32)
    r = torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=torch.float32)
    a = kp.optimal_policy(ref, r, 0.5)
    b = kt.optimal_policy(ref, r, 0.5, dim=-1)
    assert a.dtype == torch.float32 and a.device == ref.device
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(
        kt.soft_value(ref.T, r.T, 0.5, dim=0), kp.soft_value(ref, r, 0.5), rtol=0, atol=0
    )
    with pytest.raises(ValueError, match="`dim` and `axis`"):
        kt.optimal_policy(ref, r, 0.5, dim=0, axis=1)


@pytest.mark.slow
def test_import_klpolicy_imports_neither_torch_nor_jax():
    import subprocess
    import sys

    code = "import sys, klpolicy; print('torch' in sys.modules, 'jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.gpu
def test_cuda_equals_cpu_values_and_gradients():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    for ref, r, beta in GRAD_CASES:
        for dtype in (torch.float64, torch.float32):
            q = torch.tensor(ref, dtype=dtype)
            w = torch.tensor(r, dtype=dtype)
            wc = w.cuda().requires_grad_()
            pc = kp.optimal_policy(q.cuda(), wc, beta)
            assert pc.device.type == "cuda" and pc.dtype == dtype
            tol = 1e-12 if dtype == torch.float64 else 1e-5
            torch.testing.assert_close(
                pc.cpu(), kp.optimal_policy(q, w, beta), rtol=tol, atol=1e-30
            )
            kp.soft_value(q.cuda(), wc, beta).backward()
            torch.testing.assert_close(wc.grad.cpu(), pc.detach().cpu(), rtol=tol, atol=1e-30)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_fast_path_equals_cpu_and_holds_two_input_sized_arrays(dtype):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    gen = torch.Generator().manual_seed(0)
    dt = getattr(torch, dtype)
    ref = torch.softmax(torch.randn(256, 32768, generator=gen, dtype=torch.float64), -1).to(dt)
    reward = torch.randn(256, 32768, generator=gen).to(dt)
    q, w = ref.cuda(), reward.cuda()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    pi = kp.optimal_policy(q, w, 0.5)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    assert peak <= 2 * q.numel() * q.element_size() + (1 << 20), peak / (q.numel() * 2)
    assert pi.device.type == "cuda" and pi.dtype == dt
    # the CPU kernel on the same values; float32's own rounding (bfloat16: one of its ulps)
    tol = 2e-6 if dtype == "float32" else 2**-7
    torch.testing.assert_close(pi.cpu().float(), kp.optimal_policy(ref, reward, 0.5).float(),
                               rtol=tol, atol=1e-30)  # fmt: skip
