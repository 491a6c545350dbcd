"""GRPO's expected update and fixed point at extreme scales."""

import warnings

import numpy as np
import pytest

from klpolicy.estimators import grpo_expected_update, grpo_fixed_point

REF = np.array([0.5, 0.3, 0.2])
R = np.array([1.0, 0.0, -1.0])


@pytest.mark.parametrize("beta", [1e7, 1e10, 1e15])
def test_fixed_point_found_at_large_beta(beta):
    # was "fixed point not found (residual 2.59e-10)" for every beta >= 1e7: the residual
    # was absolute while the field scales with beta
    p = grpo_fixed_point(REF, R, beta)
    assert np.abs(grpo_expected_update(p, REF, R, beta)).max() <= 1e-10 * (1 + beta)
    # first order in 1/beta: p = ref + F_adv(ref)/beta
    drift = grpo_expected_update(REF, REF, R, beta)  # the beta term is 0 at pi = ref
    np.testing.assert_allclose(p, REF + drift / beta, rtol=1e-6, atol=0)


@pytest.mark.parametrize("group_size", [8, None])
def test_eps_zero_is_the_limit_of_small_eps(group_size):
    # eps = 0 gave a NaN update (0/0 on a group whose rewards are all equal) and a NaN pi
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for pi in (REF, np.array([1.0, 0.0, 0.0])):
            f0 = grpo_expected_update(pi, REF, R, 1.0, group_size=group_size, eps=0.0)
            f1 = grpo_expected_update(pi, REF, R, 1.0, group_size=group_size, eps=1e-14)
            np.testing.assert_allclose(f0, f1, rtol=0, atol=1e-12)
        p0 = grpo_fixed_point(REF, R, 1.0, group_size=group_size, eps=0.0)
    p1 = grpo_fixed_point(REF, R, 1.0, group_size=group_size, eps=1e-14)
    np.testing.assert_allclose(p0, p1, rtol=1e-10)


@pytest.mark.parametrize("group_size", [4, None])
@pytest.mark.parametrize("scale", [1e-300, 1e-150, 1e150, 1e308])
def test_reward_scale_does_not_matter_at_eps_zero(scale, group_size):
    # A = (r - mean)/std does not depend on the reward's unit; a reward of 1e308 gave NaN
    kw = dict(group_size=group_size, eps=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = grpo_expected_update(REF, REF, scale * R, 0.5, **kw)
        p = grpo_fixed_point(REF, scale * R, 0.5, **kw)
    np.testing.assert_allclose(f, grpo_expected_update(REF, REF, R, 0.5, **kw), rtol=1e-13)
    np.testing.assert_allclose(p, grpo_fixed_point(REF, R, 0.5, **kw), rtol=1e-10)


def test_huge_and_tiny_rewards_together():
    # reward (1e308, 0, -1) at eps 1e-6 is (1, 0, -1e-308) at eps 1e-314: the last two
    # outcomes' variance must not underflow (it is their own group's unit)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = grpo_fixed_point(REF, [1e308, 0.0, -1.0], 1.0, group_size=4)
    # groups without outcome 0 see rewards (0, -1), groups with it see (1, 0, 0): as if
    # the rewards were (1, 0, -t) with t -> 0 in the first and t = 1 in the second kind
    assert np.all(np.isfinite(p)) and abs(p.sum() - 1) < 1e-15
    f = grpo_expected_update(p, REF, [1e308, 0.0, -1.0], 1.0, group_size=4)
    assert np.abs(f).max() < 1e-10
    assert p[1] > p[2]


# --- exact fixed points against mpmath ------------------------------------------------------
# Recipe: the expected GRPO update in 50-digit arithmetic straight from its definition,
#   F_j = (1/G) sum_n Mult(n; G, pi) n_j (r_j - mean_n) / (std_n + eps) + beta (ref_j - pi_j)
# (std with G - 1; a group of equal rewards has A = 0), or in the large-group limit
#   F_j = pi_j (r_j - E_pi r) / (sigma_pi + eps) + beta (ref_j - pi_j);
# its zero in the free logits z (pi = softmax(z, 0)) by mpmath's multidimensional Newton
# (mp.findroot), started at klpolicy's answer; then every entry compared relatively.


def _mp_grpo_field(p, q, r, beta, group_size, eps):
    import itertools

    import mpmath as mp

    v = len(p)
    if group_size is None:
        m = mp.fsum(pi * ri for pi, ri in zip(p, r))
        s = mp.sqrt(mp.fsum(pi * (ri - m) ** 2 for pi, ri in zip(p, r)))
        return [p[j] * (r[j] - m) / (s + eps) + beta * (q[j] - p[j]) for j in range(v)]
    g = group_size
    out = [mp.mpf(0)] * v
    for n in itertools.product(range(g + 1), repeat=v):
        if sum(n) != g:
            continue
        w = mp.factorial(g)
        for j in range(v):
            w = w * p[j] ** n[j] / mp.factorial(n[j])
        m = mp.fsum(n[j] * r[j] for j in range(v)) / g
        s = mp.sqrt(mp.fsum(n[j] * (r[j] - m) ** 2 for j in range(v)) / (g - 1))
        if s == 0 and eps == 0:
            continue
        for j in range(v):
            out[j] += w * n[j] * (r[j] - m) / (s + eps) / g
    return [out[j] + beta * (q[j] - p[j]) for j in range(v)]


def _mp_fixed_point(ref, reward, beta, p0, group_size=8, eps=1e-6):
    import mpmath as mp

    with mp.workdps(50):
        q = [mp.mpf(float(x)) for x in ref]
        q = [x / mp.fsum(q) for x in q]
        r = [mp.mpf(float(x)) for x in reward]
        b, e = mp.mpf(float(beta)), mp.mpf(float(eps))

        def probs(z):
            ex = [mp.exp(x) for x in (*z, 0)]
            s = mp.fsum(ex)
            return [x / s for x in ex]

        def field(*z):
            p = probs(z)
            f = _mp_grpo_field(p, q, r, b, group_size, e)
            # each component in units of its terms (entries near 0 as finely as the others)
            return [f[j] / (p[j] + b * (p[j] + q[j])) for j in range(len(z))]

        z0 = [mp.log(mp.mpf(float(x)) / mp.mpf(float(p0[-1]))) for x in p0[:-1]]
        z = mp.findroot(field, z0, tol=mp.mpf(10) ** -40)
        z = [z[i] for i in range(len(z0))] if isinstance(z, mp.matrix) else [z]
        return np.array([float(x) for x in probs(z)])


GRPO_CASES = [
    # the call ("fixed point not found"), the large-beta range, huge rewards, eps = 0
    (REF, [1e8, 0.0, -1.0], 1.0, 8, 1e-6),
    (REF, [1.0, 0.0, -1.0], 1e7, 8, 1e-6),
    (REF, [1.0, 0.0, -1.0], 3e7, 8, 1e-6),
    (REF, [1.0, 0.0, -1.0], 1e8, 8, 1e-6),
    (REF, [1e308, 0.0, -1e308], 1.0, 8, 0.0),
    (REF, [1.0, 0.0, -1.0], 1.0, 4, 0.0),
    (REF, [1e8, 0.0, -1.0], 1.0, None, 1e-6),
    (REF, [1.0, 0.0, -1.0], 1e8, None, 0.0),
    # small beta: the fixed point sits near a vertex (entries ~ beta or beta^2); these raised
    # "fixed point not found" (Powell's hybrid from the reference ran off to the wrong vertex)
    ([0.9573327669374577, 0.04266723306254239], [-0.7994, 1.0], 0.00598, 8, 0.0),
    ([0.0683434, 0.3224665, 0.6091901], [-8.2e307, 4.9e307, -1e308], 7.05e-4, 8, 1e-6),
    ([0.29378770, 0.70407477, 0.00213753], [2.75e99, -5.29e99, -1e100], 6.39e-4, 4, 1e-6),
    ([0.5, 0.3, 0.2], [1.0, 0.0, -1.0], 1e-6, None, 0.0),
    ([0.8130516, 0.1869484], [-1.0, -0.5556], 0.0125, None, 1.0),
]


@pytest.mark.parametrize(("ref", "reward", "beta", "group_size", "eps"), GRPO_CASES)
def test_grpo_fixed_point_matches_mpmath(ref, reward, beta, group_size, eps):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = grpo_fixed_point(ref, reward, beta, group_size=group_size, eps=eps)
    exact = _mp_fixed_point(ref, reward, beta, p, group_size=group_size, eps=eps)
    np.testing.assert_allclose(p, exact, rtol=1e-9, atol=0)


def test_grpo_fixed_point_is_permutation_equivariant():
    q, r = np.array([0.0683434, 0.3224665, 0.6091901]), np.array([-8.2e307, 4.9e307, -1e308])
    p = grpo_fixed_point(q, r, 7.05e-4, group_size=8)
    for perm in ([2, 0, 1], [1, 2, 0], [2, 1, 0]):
        pp = grpo_fixed_point(q[perm], r[perm], 7.05e-4, group_size=8)
        np.testing.assert_allclose(pp, p[perm], rtol=1e-9, atol=0)


def test_grpo_large_group_below_the_floats_is_greedy():
    # the effective coefficient t = beta^2 sum ref_j (r_max - r_j) = 2.5e-401 is below the
    # floats: the other entries t ref_j / (r_max - r_j) ~ 1e-401 round to 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = grpo_fixed_point([0.5, 0.5], [1.0, 0.0], 1e-200, group_size=None, eps=0.0)
    np.testing.assert_array_equal(p, [1.0, 0.0])


@pytest.mark.parametrize("group_size", [2, 4, None])
def test_grpo_expected_update_is_finite_at_the_extremes(group_size):
    # reward scales 1e-320 .. 1e308, eps 0 .. 1e308, beta 1e-300 .. 1e300, vertices and
    # subnormal probabilities: never NaN, never a warning
    pis = ([1.0, 0.0, 0.0], [5e-324, 0.5, 0.5], REF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for pi in pis:
            for scale in (1e-320, 1.0, 1e308):
                for eps in (0.0, 1e-6, 1e308):
                    for beta in (1e-300, 1.0, 1e300):
                        f = grpo_expected_update(
                            pi, REF, scale * R, beta, group_size=group_size, eps=eps
                        )
                        assert np.all(np.isfinite(f)), (pi, scale, eps, beta)
