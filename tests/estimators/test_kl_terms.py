"""expected_gradient off-policy (sampler, ratio, ratio_clip), the straight-through rows, and
divergence_gradient, against an independent mpmath enumeration.

mpmath recipe (the reference, written once here): at 40 digits build the trainer's
surrogate loss exactly as autograd sees it -- every outcome ``y`` weighted by the sampler's
probability ``mu_y`` (held fixed), detached factors evaluated at the current logits
``theta0`` and held fixed, live factors functions of ``theta`` -- and differentiate it by
``mpmath.diff`` at ``theta0``: no closed form of klpolicy's is used.
"""

from __future__ import annotations

import itertools

import mpmath as mp
import numpy as np
import pytest

import klpolicy.estimators as E
from klpolicy import optimal_policy

pytestmark = pytest.mark.mp_dps(40)  # mpmath's working precision here (tests/conftest.py)

# per-sample values k(l) of the estimators, in mpmath (l = log pi - log ref)
_K = {
    "k1": lambda l: l,
    "k2": lambda l: l * l / 2,
    "k3": lambda l: mp.exp(-l) - 1 + l,
    "abs": lambda l: abs(l),
}


def _softmax(th):
    m = max(th)
    e = [mp.exp(x - m) for x in th]
    s = sum(e)
    return [x / s for x in e]


def _mp_expected_gradient(th0, ref, r, beta, est, place, sampler, ratio, clip):
    th0 = [mp.mpf(float(x)) for x in th0]
    ref = [mp.mpf(float(x)) for x in ref]
    r = [mp.mpf(float(x)) for x in r]
    n = len(th0)
    pi0 = _softmax(th0)
    mu = pi0 if sampler is None else _softmax([mp.mpf(float(x)) for x in sampler])
    base = est.rstrip("+")
    lo, hi = (0, mp.inf) if clip is None else (mp.mpf(clip[0]), mp.mpf(clip[1]))

    def clipped(w):
        return min(max(w, lo), hi)

    def k_live(l, l0):  # a straight-through row: k2 live, the value held
        if est.endswith("+"):
            return _K["k2"](l) - _K["k2"](l0) + _K[base](l0)
        return _K[est](l)

    l0 = [mp.log(pi0[y] / ref[y]) for y in range(n)]
    w0 = [pi0[y] / mu[y] for y in range(n)]
    big_r = [r[y] - beta * _K[base](l0[y]) for y in range(n)]
    m = sum(mu[y] * big_r[y] for y in range(n))

    def surrogate(*th):
        pi = _softmax(list(th))
        total = 0
        for y in range(n):
            lp = mp.log(pi[y])
            w = pi[y] / mu[y]
            c = {"none": 1, "detached": clipped(w0[y]), "differentiable": clipped(w)}[ratio]
            if place == "loss":
                # reward part: the exact policy gradient of E_pi r; the KL term as written
                total += pi[y] * r[y] - beta * mu[y] * c * k_live(mp.log(pi[y] / ref[y]), l0[y])
            else:  # the whole advantage enters a (weighted) score-function surrogate
                if ratio == "differentiable":
                    total += mu[y] * c * (big_r[y] - m)
                else:
                    total += mu[y] * c * (big_r[y] - m) * lp
        return total

    return np.array(
        [float(mp.diff(surrogate, th0, tuple(int(i == j) for i in range(n)))) for j in range(n)]
    )


RNG = np.random.default_rng(25)
CASES = [
    (RNG.normal(size=3) * 0.6, RNG.dirichlet([3.0] * 3), RNG.normal(size=3) * 0.6) for _ in range(2)
]
NAMES = E.estimator_names(straight_through=True)


@pytest.mark.parametrize("est", NAMES)
@pytest.mark.parametrize("place", E.PLACEMENTS)
@pytest.mark.parametrize("ratio", E.RATIOS)
def test_expected_gradient_matches_mpmath(est, place, ratio):
    r, beta = np.array([1.0, -0.3, 0.4]), 0.7
    worst = 0.0
    for (th, ref, old), sampler, clip in itertools.product(
        CASES, [None, "old"], [None, (0.8, 1.25)]
    ):
        s = old if sampler else None
        got = E.expected_gradient(
            th,
            ref,
            r,
            beta,
            estimator=est,
            placement=place,
            sampler=s,
            ratio=ratio,
            ratio_clip=clip,
        )
        want = _mp_expected_gradient(th, ref, r, beta, est, place, s, ratio, clip)
        worst = max(worst, float(np.max(np.abs(got - want))))
    assert worst < 1e-12


@pytest.mark.parametrize("name", ["reverse_kl", "forward_kl", "chi2", "reverse_chi2"])
def test_divergence_gradient_matches_mpmath(name):
    # D(theta) at 40 digits from its definition, differentiated by mpmath.diff
    f = {
        "reverse_kl": lambda t: t * mp.log(t),
        "forward_kl": lambda t: -mp.log(t),
        "chi2": lambda t: (t - 1) ** 2,
        "reverse_chi2": lambda t: (1 - t) ** 2 / t,
    }[name]
    for th, ref, _ in CASES:
        q = [mp.mpf(float(x)) for x in ref]

        def d(*t, q=q):
            pi = _softmax(list(t))
            return sum(q[y] * f(pi[y] / q[y]) for y in range(len(q)))

        x0 = [mp.mpf(float(x)) for x in th]
        want = [float(mp.diff(d, x0, tuple(int(i == j) for i in range(3)))) for j in range(3)]
        got = E.divergence_gradient(th, ref, name)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)


def test_named_terms_follow_named_divergences():
    th, ref, old = CASES[0]
    z = np.zeros(3)

    def g(est, **kw):
        return -E.expected_gradient(th, ref, z, 1.0, estimator=est, placement="loss", **kw)

    dg = lambda name: E.divergence_gradient(th, ref, name)  # noqa: E731
    np.testing.assert_allclose(g("k2"), dg("reverse_kl"), atol=1e-15)
    np.testing.assert_allclose(g("k3+"), dg("reverse_kl"), atol=1e-15)
    np.testing.assert_allclose(g("k3"), dg("forward_kl"), atol=1e-15)
    # off-policy: k3 with a detached ratio still forward KL, a differentiable one reverse KL
    np.testing.assert_allclose(g("k3", sampler=old, ratio="detached"), dg("forward_kl"), atol=1e-15)
    np.testing.assert_allclose(
        g("k3", sampler=old, ratio="differentiable"), dg("reverse_kl"), atol=1e-15
    )
    # k1+ with a differentiable ratio: twice the reverse KL's gradient
    np.testing.assert_allclose(g("k1+", ratio="differentiable"), 2 * dg("reverse_kl"), atol=1e-15)


def test_straight_through_rows():
    ell = np.array([-1.5, 0.2, 2.0])
    for base in ("k1", "k3", "abs"):
        row = E.get_estimator(base + "+", straight_through=True)
        np.testing.assert_array_equal(row.value(ell), E.ESTIMATORS[base].value(ell))
        np.testing.assert_array_equal(row.derivative(ell), E.ESTIMATORS["k2"].derivative(ell))
        assert row.straight_through == "k2" and "core_algos.py" in row.reference
    assert E.estimator_names() == ("k1", "k2", "k3", "abs")
    with pytest.raises(ValueError, match=r"`estimator` must be one of 'k1', 'k2', 'k3', 'abs'"):
        E.get_estimator("k3+")


def test_permutation_equivariance_and_float32():
    th, ref, old = CASES[1]
    perm = [2, 0, 1]
    r = np.array([1.0, 0.0, 0.5])
    kw = dict(estimator="k3", placement="loss", ratio="differentiable", ratio_clip=(0.5, 2.0))
    a = E.expected_gradient(th, ref, r, 0.5, sampler=old, **kw)
    b = E.expected_gradient(th[perm], ref[perm], r[perm], 0.5, sampler=old[perm], **kw)
    np.testing.assert_allclose(a[perm], b, atol=1e-16)
    f = E.expected_gradient(
        th.astype(np.float32),
        ref.astype(np.float32),
        r.astype(np.float32),
        0.5,
        sampler=old.astype(np.float32),
        **kw,
    )
    assert f.dtype == np.float32
    np.testing.assert_allclose(f, a, atol=1e-6)
    d = E.divergence_gradient(th.astype(np.float32), ref.astype(np.float32), "chi2")
    assert d.dtype == np.float32
    np.testing.assert_allclose(
        E.divergence_gradient(th[perm], ref[perm], "chi2"),
        E.divergence_gradient(th, ref, "chi2")[perm],
        atol=1e-16,
    )


def test_batch_and_axis():
    th = np.stack([c[0] for c in CASES])
    ref = np.stack([c[1] for c in CASES])
    old = np.stack([c[2] for c in CASES])
    r = np.zeros(3)
    kw = dict(estimator="k3", placement="loss", ratio="detached")
    rows = E.expected_gradient(th, ref, r, 1.0, sampler=old, **kw)
    cols = E.expected_gradient(th.T, ref.T, r[:, None], 1.0, sampler=old.T, axis=0, **kw)
    np.testing.assert_allclose(rows, cols.T, atol=1e-16)
    np.testing.assert_allclose(
        E.divergence_gradient(th.T, ref.T, "forward_kl", axis=0).T,
        E.divergence_gradient(th, ref, "forward_kl"),
        atol=1e-16,
    )


def test_divergence_gradient_support():
    th = np.array([np.log(0.6), np.log(0.4), -np.inf])
    # reverse KL: pi = 0 off the sampled support contributes nothing
    g = E.divergence_gradient(th, [0.5, 0.3, 0.2], "reverse_kl")
    assert g[2] == 0 and abs(g.sum()) < 1e-16
    with pytest.raises(ValueError, match=r"probability zero where `ref` is positive.*forward_kl"):
        E.divergence_gradient(th, [0.5, 0.3, 0.2], "forward_kl")
    # off ref's support: forward KL has f'(inf) = 0 (finite), reverse KL is infinite
    full = np.log([0.5, 0.3, 0.2])
    g = E.divergence_gradient(full, [0.5, 0.5, 0.0], "forward_kl")
    np.testing.assert_allclose(g, [0.5 - 0.5 * 0.8 / 1, 0.3 - 0.5 * 0.8, 0.2 * 0.8 - 0.0], atol=0.3)
    np.testing.assert_allclose(g.sum(), 0, atol=1e-16)
    with pytest.raises(ValueError, match=r"where `ref` is zero .*reverse_kl is infinite"):
        E.divergence_gradient(full, [0.5, 0.5, 0.0], "reverse_kl")


@pytest.mark.parametrize(
    ("est", "place", "ratio", "clip"),
    [
        ("k3", "loss", "differentiable", None),
        ("k1+", "loss", "differentiable", None),
        ("k3", "loss", "detached", (0.0, 0.5)),
        ("k3+", "loss", "differentiable", None),
    ],
)
def test_fixed_point_zeroes_the_expected_gradient(est, place, ratio, clip):
    ref, r, beta = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.0, 0.5]), 2.0
    p = E.fixed_point(ref, r, beta, estimator=est, placement=place, ratio=ratio, ratio_clip=clip)
    g = E.expected_gradient(
        np.log(p), ref, r, beta, estimator=est, placement=place, ratio=ratio, ratio_clip=clip
    )
    assert np.max(np.abs(g)) < 1e-12


def test_fixed_points_in_closed_form():
    ref, r, beta = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.0, 0.5]), 0.8
    fp = lambda est, **kw: E.fixed_point(ref, r, beta, estimator=est, placement="loss", **kw)  # noqa: E731
    np.testing.assert_allclose(
        fp("k3", ratio="differentiable"), optimal_policy(ref, r, beta), atol=1e-15
    )
    np.testing.assert_allclose(
        fp("k1+", ratio="differentiable"), optimal_policy(ref, r, 2 * beta), atol=1e-15
    )
    np.testing.assert_allclose(fp("k3+"), optimal_policy(ref, r, beta), atol=1e-15)
    # a detached weight clipped at 0.5 on-policy halves beta
    np.testing.assert_allclose(
        fp("k2", ratio="detached", ratio_clip=(0.0, 0.5)),
        optimal_policy(ref, r, beta / 2),
        atol=1e-15,
    )
    # a fixed behaviour policy with an unclipped detached ratio: the on-policy answer
    old = np.log([0.2, 0.2, 0.6])
    np.testing.assert_allclose(
        fp("k2", ratio="detached", sampler=old), optimal_policy(ref, r, beta), atol=1e-15
    )


def test_fixed_point_refusals():
    ref, r = [0.5, 0.3, 0.2], [1.0, 0.0, 0.5]
    with pytest.raises(ValueError, match=r"`ratio_clip` \(1.2, 2.0\) excludes 1"):
        E.fixed_point(
            ref,
            r,
            0.5,
            estimator="k3",
            placement="loss",
            ratio="differentiable",
            ratio_clip=(1.2, 2.0),
        )
    with pytest.raises(
        ValueError, match=r"'k1' in the loss with ratio='none' has no interior fixed point"
    ):
        E.fixed_point(
            ref, r, 0.5, estimator="k1", placement="loss", sampler=np.log([0.2, 0.2, 0.6])
        )
    # E_pi[l^2/2] differentiated: l + l^2/2 >= -1/2 bounds the penalty, bad actions vanish
    with pytest.raises(ValueError, match=r"'k2' in the loss with ratio='differentiable'"):
        E.fixed_point(ref, r, 0.8, estimator="k2", placement="loss", ratio="differentiable")
    with pytest.raises(ValueError, match=r"`ratio` must be one of"):
        E.expected_gradient(
            [0.0, 0.0, 0.0], ref, r, 0.5, estimator="k3", placement="loss", ratio="yes"
        )
    with pytest.raises(ValueError, match=r"`ratio_clip` must be a pair \(low, high\)"):
        E.expected_gradient(
            [0.0, 0.0, 0.0], ref, r, 0.5, estimator="k3", placement="loss", ratio_clip=(2, 1)
        )
    with pytest.raises(ValueError, match=r"`sampler` draws index \(2,\) where `logits` are -inf"):
        E.expected_gradient(
            [0.0, 0.0, -np.inf],
            [0.5, 0.5, 0.0],
            r,
            0.5,
            estimator="k3",
            placement="loss",
            sampler=[0.0, 0.0, 0.0],
        )


def test_divergence_gradient_uses_the_registry_rows():
    # every row of klpolicy.DIVERGENCES, against a central difference of f_divergence
    from klpolicy import DIVERGENCES, f_divergence

    th, ref, _ = CASES[0]
    for name in DIVERGENCES:
        alpha = 0.5 if name == "alpha" else None
        g = E.divergence_gradient(th, ref, name, alpha=alpha)
        h = 1e-6
        fd = []
        for j in range(3):
            e = np.eye(3)[j] * h
            up = np.exp(th + e) / np.exp(th + e).sum()
            dn = np.exp(th - e) / np.exp(th - e).sum()
            fd.append(
                (
                    f_divergence(up, ref, name, alpha=alpha)
                    - f_divergence(dn, ref, name, alpha=alpha)
                )
                / (2 * h)
            )
        np.testing.assert_allclose(g, fd, atol=1e-8)
    with pytest.raises(ValueError, match=r"`alpha` is required"):
        E.divergence_gradient(th, ref, "alpha")


# --- stability of stationary points -----------------------------------------------------------
# k1 in the loss, samples from a fixed mu, no ratio: g = pi (r - m + beta) - beta mu vanishes at
# pi_j = beta mu_j / (beta + r_j - m), m = E_pi r. With ref (0.5, 0.3, 0.2), mu (0.2, 0.2, 0.6),
# r (0, 0.5, 1) and beta = 1, m = 0.5 and the point is exactly (0.4, 0.2, 0.4).
_UNSTABLE = dict(ref=[0.5, 0.3, 0.2], reward=[0.0, 0.5, 1.0], beta=1.0)
_MU = np.log([0.2, 0.2, 0.6])
_POINT = np.array([0.4, 0.2, 0.4])


def _mp_growth_rate(point, ref, reward, beta, sampler):
    """Largest real part of the eigenvalues of the free-logit Jacobian, at 40 digits.

    recipe: the field z -> g[:-1] - g[-1] with g = pi (r - E_pi r) - beta (mu - pi) (k1 in the
    loss, fixed sampler mu, no ratio) written in mpmath, differentiated by mpmath.diff,
    eigenvalues by mpmath.eig
    """
    mu = _softmax([mp.mpf(float(x)) for x in sampler])
    r = [mp.mpf(float(x)) for x in reward]
    z0 = [mp.log(mp.mpf(float(p)) / mp.mpf(float(point[-1]))) for p in point[:-1]]
    n = len(point)

    def g(j, *z):
        pi = _softmax([*z, mp.mpf(0)])
        m = sum(p * x for p, x in zip(pi, r))
        full = [pi[i] * (r[i] - m) - beta * (mu[i] - pi[i]) for i in range(n)]
        return full[j] - full[-1]

    jac = mp.matrix(n - 1, n - 1)
    for i in range(n - 1):
        for k in range(n - 1):
            jac[i, k] = mp.diff(
                lambda *z, i=i: g(i, *z), z0, tuple(int(a == k) for a in range(n - 1))
            )
    return float(max(mp.re(e) for e in mp.eig(jac)[0]))


def test_an_unstable_stationary_point_is_refused():
    kw = dict(estimator="k1", placement="loss", sampler=_MU)
    g = E.expected_gradient(np.log(_POINT), **_UNSTABLE, **kw)
    assert np.max(np.abs(g)) < 1e-15  # stationary ...
    s = E.fixed_point_stability(_POINT, **_UNSTABLE, **kw)
    assert not s.stable and s.growth_rate > 0.4  # ... and repelling
    msg = r"a stationary point at \[0\.4, 0\.2, 0\.4\] is unstable: training moves away from it"
    with pytest.raises(ValueError, match=msg):
        E.fixed_point(**_UNSTABLE, **kw)
    # training started next to it leaves it: 300 small ascent steps on the exact gradient
    th = np.log(_POINT) + np.array([1e-4, -1e-4, 0.0])
    for _ in range(300):
        th = th + 0.1 * E.expected_gradient(th, **_UNSTABLE, **kw)
    pi = np.exp(th - th.max()) / np.exp(th - th.max()).sum()
    assert np.max(np.abs(pi - _POINT)) > 1e-2


def test_the_jacobian_matches_mpmath():
    kw = dict(estimator="k1", placement="loss", sampler=_MU)
    want = _mp_growth_rate(_POINT, **_UNSTABLE, sampler=_MU)
    got = E.fixed_point_stability(_POINT, **_UNSTABLE, **kw).growth_rate
    assert abs(got - want) < 1e-8 * max(1.0, abs(want))
    # permuted outcomes: the same eigenvalues
    perm = [2, 0, 1]
    u = {k: np.asarray(v)[perm] if k != "beta" else v for k, v in _UNSTABLE.items()}
    got_p = E.fixed_point_stability(
        _POINT[perm], **u, estimator="k1", placement="loss", sampler=_MU[perm]
    ).growth_rate
    assert abs(got_p - want) < 1e-8 * max(1.0, abs(want))


def test_known_fixed_points_are_stable():
    ref, r, beta = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.0, 0.5]), 0.8
    cases = [
        ("k1", "reward", {}),
        ("k2", "loss", {}),
        ("k3", "loss", {}),  # the forward-KL point
        ("k3", "loss", {"ratio": "differentiable"}),
        ("k1+", "loss", {"ratio": "differentiable"}),
        ("k2", "loss", {"sampler": np.log([0.2, 0.2, 0.6])}),  # numeric, fixed sampler
        ("k3", "loss", {"sampler": np.log([0.2, 0.2, 0.6])}),
    ]
    for est, place, kw in cases:
        p = E.fixed_point(ref, r, beta, estimator=est, placement=place, **kw)
        s = E.fixed_point_stability(p, ref, r, beta, estimator=est, placement=place, **kw)
        assert s.stable and s.growth_rate < -1e-3, (est, place, kw, s)
    # batched rows, float32 in: one verdict per row
    pts = np.stack([optimal_policy(ref, r, b) for b in (0.5, 1.0)])
    s = E.fixed_point_stability(
        pts.astype(np.float32), ref, r, [[0.5], [1.0]], estimator="k1", placement="reward"
    )
    assert s.stable.shape == (2,) and s.stable.all()


def test_fixed_point_stability_refusals():
    kw = dict(estimator="k1", placement="reward")
    with pytest.raises(ValueError, match=r"`policy` puts probability where `ref` is zero"):
        E.fixed_point_stability([0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [1.0, 0.0, 0.0], 1.0, **kw)
    # a policy's zeros stay zero: the verdict is on its own support (here two outcomes)
    s = E.fixed_point_stability([0.5, 0.0, 0.5], [0.5, 0.0, 0.5], [1.0, 0.0, 0.0], 1.0, **kw)
    assert s.stable and s.growth_rate == pytest.approx(-0.5, abs=1e-8)


def test_fixed_point_sampler_messages_name_its_own_arguments():
    # issue 40 item 19: fixed_point's sampler messages spoke of `logits`, which it does not take
    with pytest.raises(ValueError, match="as `ref`; got shape"):
        E.fixed_point(
            [0.5, 0.3, 0.2],
            [1.0, 0.0, 0.5],
            0.5,
            estimator="k2",
            placement="loss",
            sampler=[0.0, 1.0],
        )
    with pytest.raises(ValueError, match="where `ref` is 0"):
        E.fixed_point(
            [0.5, 0.5, 0.0],
            [1.0, 0.0, 0.5],
            0.5,
            estimator="k2",
            placement="loss",
            sampler=[0.0, 1.0, 0.0],
        )
