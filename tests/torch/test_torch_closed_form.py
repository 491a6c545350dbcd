"""The tensor twins equal the numpy core (CPU, float64) and keep device, dtype and gradients."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import klpolicy  # noqa: E402
import klpolicy.torch as kt  # noqa: E402
from klpolicy.core._numerics import expm1mx  # noqa: E402

torch.set_num_threads(1)  # tiny tensors: threads only add contention


def _problems(rng, n=40, v=5):
    ref = rng.dirichlet(np.full(v, 0.7), size=n)
    ref[::4, 0] = 0.0  # zeros in the reference
    ref /= ref.sum(-1, keepdims=True)
    reward = rng.normal(scale=2.0, size=(n, v))
    beta = np.exp(rng.uniform(-3, 3, size=(n, 1)))
    beta[1], beta[2] = 0.0, np.inf
    return ref, reward, beta


def test_optimal_policy_equals_numpy_core(rng):
    ref, reward, beta = _problems(rng)
    got = kt.optimal_policy(torch.tensor(ref), torch.tensor(reward), torch.tensor(beta))
    want = klpolicy.optimal_policy(ref, reward, beta)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-300)
    assert got.dtype == torch.float64


@pytest.mark.parametrize("beta", [1e-3, 0.5, 7.0, 1e6])
@pytest.mark.parametrize("grad", [False, True])
def test_optimal_policy_scalar_beta_paths_equal_numpy_core(rng, beta, grad):
    ref, reward, _ = _problems(rng)
    r = torch.tensor(reward, requires_grad=grad)
    got = kt.optimal_policy(torch.tensor(ref), r, beta).detach()
    np.testing.assert_allclose(
        got.numpy(), klpolicy.optimal_policy(ref, reward, beta), rtol=1e-12, atol=1e-300
    )
    assert (got.numpy()[ref == 0] == 0).all()


def test_soft_value_equals_numpy_core(rng):
    ref, reward, beta = _problems(rng)
    got = kt.soft_value(torch.tensor(ref), torch.tensor(reward), torch.tensor(beta))
    want = klpolicy.soft_value(ref, reward, beta)
    assert got.shape == (ref.shape[0],)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-13)


def test_kl_divergence_equals_numpy_core(rng):
    p = rng.dirichlet(np.ones(6), size=30)
    q = rng.dirichlet(np.ones(6), size=30)
    p[0, 2] = 0.0
    p[0] /= p[0].sum()
    got = kt.kl_divergence(torch.tensor(p), torch.tensor(q))
    np.testing.assert_allclose(got.numpy(), klpolicy.kl_divergence(p, q), rtol=1e-12)
    # mass on a zero of q: infinite, as in the core
    assert float(kt.kl_divergence(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]))) == np.inf


def test_worked_example_and_limits():
    ref, r = (
        torch.tensor([0.5, 0.5], dtype=torch.float64),
        torch.tensor([1.0, 0.0], dtype=torch.float64),
    )
    # 1 / (1 + e^-2) = 0.8807970779778823 (mpmath, dps 50: 1/(1+exp(-2)))
    assert float(kt.optimal_policy(ref, r, 0.5)[0]) == pytest.approx(0.8807970779778823, rel=1e-14)
    assert kt.optimal_policy(ref, r, 0.0).tolist() == [1.0, 0.0]
    assert kt.optimal_policy(ref, r, float("inf")).tolist() == [0.5, 0.5]
    assert float(kt.soft_value(ref, r, 0.0)) == 1.0
    assert float(kt.soft_value(ref, r, float("inf"))) == 0.5


def test_mpmath_reference_values():
    ref, r = (
        torch.tensor([0.5, 0.5], dtype=torch.float64),
        torch.tensor([1.0, 0.0], dtype=torch.float64),
    )
    # mpmath, dps 50: 0.5 * log((e^2 + 1) / 2)
    assert float(kt.soft_value(ref, r, 0.5)) == pytest.approx(0.71689041524151359351, rel=1e-14)
    # mpmath, dps 50: 0.88 log(0.88/0.5) + 0.12 log(0.12/0.5)
    p = torch.tensor([0.88, 0.12], dtype=torch.float64)
    assert float(kt.kl_divergence(p, ref)) == pytest.approx(0.32622218928723567424, rel=1e-14)


@given(
    st.integers(2, 6).flatmap(
        lambda v: st.tuples(
            st.lists(
                # zeros and tiny weights (down to subnormal best-reward mass) included
                st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
                min_size=v,
                max_size=v,
            ).filter(lambda w: sum(w) > 0.1),
            st.lists(st.floats(-20, 20), min_size=v, max_size=v),
        )
    ),
    st.one_of(st.floats(1e-3, 1e3), st.just(0.0), st.just(float("inf"))),
)
@pytest.mark.slow
def test_twins_equal_numpy_core_property(problem, beta):
    w, reward = problem
    ref = np.array(w) / np.sum(w)
    reward = np.array(reward)
    tb = torch.tensor(beta, dtype=torch.float64)
    got = kt.optimal_policy(torch.tensor(ref), torch.tensor(reward), tb).numpy()
    np.testing.assert_allclose(
        got, klpolicy.optimal_policy(ref, reward, beta), rtol=1e-11, atol=1e-300
    )
    got_v = float(kt.soft_value(torch.tensor(ref), torch.tensor(reward), tb))
    want_v = float(klpolicy.soft_value(ref, reward, beta))
    assert got_v == pytest.approx(want_v, rel=1e-12, abs=1e-12 * (1 + np.abs(reward).max()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dtype_kept(dtype):
    ref = torch.tensor([0.25, 0.75], dtype=dtype)
    r = torch.tensor([1.0, 0.0], dtype=dtype)
    assert kt.optimal_policy(ref, r, 1.0).dtype == dtype
    assert kt.soft_value(ref, r, 1.0).dtype == dtype
    assert kt.kl_divergence(ref, r.softmax(-1)).dtype == dtype
    assert kt.k3(ref.log(), r.log_softmax(-1)).dtype == dtype


def test_gradient_of_soft_value_is_the_optimal_policy(rng):
    ref, reward, _ = _problems(rng, n=6)
    r = torch.tensor(reward, requires_grad=True)
    kt.soft_value(torch.tensor(ref), r, 0.7).sum().backward()
    np.testing.assert_allclose(
        r.grad.numpy(), klpolicy.optimal_policy(ref, reward, 0.7), rtol=1e-12, atol=1e-15
    )


def test_gradients_finite_with_zeros_in_reference():
    ref = torch.tensor([0.0, 0.4, 0.6], dtype=torch.float64, requires_grad=True)
    r = torch.tensor([2.0, 1.0, 0.0], dtype=torch.float64, requires_grad=True)
    pi = kt.optimal_policy(ref, r, 0.5)
    (pi * torch.arange(3.0, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(ref.grad).all() and torch.isfinite(r.grad).all()
    assert float(pi[0].detach()) == 0.0
    p = torch.tensor([0.0, 0.3, 0.7], dtype=torch.float64, requires_grad=True)
    kt.kl_divergence(p, torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)).backward()
    assert torch.isfinite(p.grad[1:]).all()


def test_optimal_policy_gradcheck():
    ref = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64, requires_grad=True)
    r = torch.tensor([0.3, -1.0, 0.7], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    # gradcheck perturbs `ref` off the simplex: the row-sum check would refuse it, and the
    # kernel works with ref / sum(ref), so the derivative is that of the normalised problem
    assert torch.autograd.gradcheck(
        lambda a, c, d: kt.optimal_policy(a, c, d, validate=False), (ref, r, b)
    )


def test_estimators_match_their_definitions(rng):
    logp = np.log(rng.uniform(0.01, 1, size=200))
    logq = np.log(rng.uniform(0.01, 1, size=200))
    lp, lq = torch.tensor(logp), torch.tensor(logq)
    np.testing.assert_array_equal(kt.k1(lp, lq).numpy(), logp - logq)
    np.testing.assert_allclose(kt.k2(lp, lq).numpy(), 0.5 * (logp - logq) ** 2, rtol=1e-15)
    np.testing.assert_allclose(kt.k3(lp, lq).numpy(), expm1mx(logq - logp), rtol=1e-13)


def test_k3_keeps_relative_precision_for_tiny_log_ratios():
    # exp(x) - 1 - x at x = 1e-8: x^2/2 + x^3/6 = 5.0000000166666...e-17 (mpmath, dps 50)
    got = kt.k3(torch.tensor([0.0], dtype=torch.float64), torch.tensor([1e-8], dtype=torch.float64))
    assert float(got[0]) == pytest.approx(5.000000016666667e-17, rel=1e-14)


def test_estimator_expectations_are_exact(rng):
    # E_p[k1] = E_p[k3] = KL(p||q) exactly, by enumeration
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    lp, lq = torch.tensor(np.log(p)), torch.tensor(np.log(q))
    kl = klpolicy.kl_divergence(p, q)
    assert float((torch.tensor(p) * kt.k1(lp, lq)).sum()) == pytest.approx(kl, rel=1e-12)
    assert float((torch.tensor(p) * kt.k3(lp, lq)).sum()) == pytest.approx(kl, rel=1e-12)


@pytest.mark.parametrize(
    ("call", "msg"),
    [
        (
            lambda: kt.optimal_policy([0.5, -0.5, 1.0], [0.0, 0.0, 0.0], 1.0),
            "`ref` must be non-negative; found -0.5 at index (1,)",
        ),
        (
            lambda: kt.optimal_policy([0.5, 0.5], [0.0, 0.0, 1.0], 1.0),
            "`reward` must have the same size as `ref` along the probability axis; got 3 and 2",
        ),
        (
            lambda: kt.optimal_policy([0.5, 0.5], [0.0, 1.0], -1.0),
            "`beta` must be non-negative; found -1",
        ),
        (lambda: kt.soft_value([0.5, float("nan")], [0.0, 1.0], 1.0), "`ref` must not contain NaN"),
        (
            lambda: kt.kl_divergence([0.5, 0.5], [0.2, 0.3, 0.5]),
            "`q` must have the same size as `p` along the probability axis; got 3 and 2",
        ),
    ],
)
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_twins_on_gpu_keep_device_and_match_cpu(rng):
    ref, reward, beta = _problems(rng)
    dev = torch.device("cuda")
    got = kt.optimal_policy(
        torch.tensor(ref, device=dev),
        torch.tensor(reward, device=dev),
        torch.tensor(beta, device=dev),
    )
    assert got.device.type == "cuda"
    np.testing.assert_allclose(
        got.cpu().numpy(), klpolicy.optimal_policy(ref, reward, beta), rtol=1e-10, atol=1e-300
    )
