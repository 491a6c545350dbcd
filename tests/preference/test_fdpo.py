"""f-DPO: TRL's f-divergence scores, population losses and optima, chi-PO, the alpha clamp.

The scores are transcribed independently from TRL's ``DPOTrainer`` (trl/trainer/
dpo_trainer.py, the block that forms ``chosen_scores`` / ``rejected_scores``) in numpy.
The optima are checked three ways: against ``f_optimal_policy`` at ``c * beta`` (the
claim), by the stationarity of the population loss along the simplex (central
differences), and against a direct numerical minimisation with scipy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

import klpolicy as kp
from klpolicy.core import DIVERGENCES
from klpolicy.preference import (
    LOSSES,
    bradley_terry,
    f_divergence_score,
    population_loss,
    population_optimum,
)


def _trl_score(name, l, alpha=None, clamp=None, version="1.16.0"):
    """TRL's scores, transcribed from dpo_trainer.py: TRL 1.16.0 lines 1353-1381 (and every
    release from 1.10.0) keep the constants; TRL 1.9.2 lines 1400-1428 (0.29.0-1.9.2) drop
    them."""
    new = version == "1.16.0"
    if name == "reverse_kl":
        return l
    if name == "forward_kl":
        return 1 - np.exp(-l) if new else -np.exp(-l)
    if name == "js_divergence":
        return (math.log(2) if new else 0.0) - np.logaddexp(0.0, -l)  # F.logsigmoid
    if name == "alpha_divergence":
        if abs(alpha - 1.0) < 1e-6:
            return l
        t = (alpha - 1.0) * l
        if clamp is not None:
            t = np.minimum(t, clamp)
        return ((np.exp(t) - 1.0) if new else np.exp(t)) / (alpha - 1.0)
    raise AssertionError(name)


TRL = [
    ("reverse_kl", None),
    ("forward_kl", None),
    ("js_divergence", None),
    ("alpha_divergence", 0.5),
    ("alpha_divergence", 1.5),
    ("alpha_divergence", -0.5),
]


@pytest.mark.parametrize(("name", "alpha"), TRL)
@pytest.mark.parametrize("version", ["1.16.0", "1.9.2"])
def test_scores_are_trls_and_c_times_f_prime(name, alpha, version):
    l = np.linspace(-6, 6, 25)
    got = f_divergence_score(l, name, alpha=alpha, trl_version=version)
    want = _trl_score(name, l, alpha, version=version)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    key = {"js_divergence": "js", "alpha_divergence": "alpha"}.get(name, name)
    c = 2.0 if key == "js" else 1.0
    fp = DIVERGENCES[key].fprime(np.exp(l), alpha=alpha)
    shift = got - c * fp
    np.testing.assert_allclose(shift, shift[0], atol=1e-12)  # S = c f'(t) + constant
    # TRL 1.10.0 and later: S = f'(t) of TRL's generators, the constant k of the fdpo table
    k = {"reverse_kl": -1.0, "forward_kl": 1.0}.get(name, 0.0) if version == "1.16.0" else None
    if k is not None and not (name == "alpha_divergence" and abs(alpha - 1) < 1e-6):
        np.testing.assert_allclose(shift, k, atol=1e-12)
    assert f_divergence_score(np.float32(0.5), name, alpha=alpha).dtype == np.float32


def test_the_version_is_parsed_and_checked():
    l = np.array([0.3])
    assert f_divergence_score(l, "forward_kl", trl_version="1.10.0")[0] == pytest.approx(
        1 - math.exp(-0.3), rel=1e-15
    )
    for v in ("1.9.2", "0.29.1", "v1.0.0", "1.9.0.dev0"):
        assert f_divergence_score(l, "forward_kl", trl_version=v)[0] == pytest.approx(
            -math.exp(-0.3), rel=1e-15
        )
    for bad in ("latest", 1.16, None, "1"):
        with pytest.raises(ValueError, match="`trl_version` must be a TRL release"):
            f_divergence_score(l, "forward_kl", trl_version=bad)


def test_the_alpha_clamp_is_trls():
    l = np.array([-400.0, -30.0, 0.0, 10.0, 30.0, 200.0])
    for a in (0.5, 1.5, 3.0):
        for c in (80.0, 11.0):
            got = f_divergence_score(l, "alpha_divergence", alpha=a, alpha_clamp=c)
            np.testing.assert_allclose(got, _trl_score("alpha_divergence", l, a, c), rtol=1e-14)
    # a > 1: a ceiling above l = C/(a-1); a < 1: a floor below l = -C/(1-a)
    s = f_divergence_score([22.0, 23.0, 40.0], "alpha", alpha=1.5, alpha_clamp=11.0)
    assert s[0] == s[1] == s[2] == pytest.approx(2 * math.expm1(11.0), rel=1e-15)
    s = f_divergence_score([-22.0, -30.0], "alpha", alpha=0.5, alpha_clamp=11.0)
    assert s[0] == s[1] == pytest.approx(-2 * math.expm1(11.0), rel=1e-15)
    s = f_divergence_score(
        [-22.0, -30.0], "alpha", alpha=0.5, alpha_clamp=11.0, trl_version="1.9.2"
    )
    assert s[0] == s[1] == pytest.approx(-2 * math.exp(11.0), rel=1e-15)


def _problem(n=4, seed=0):
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.ones(n))
    r = rng.normal(size=n)
    return ref, r, bradley_terry(r)


@pytest.mark.parametrize(("name", "alpha"), TRL)
def test_population_loss_uses_the_scores(name, alpha):
    ref, r, prefs = _problem()
    pi = kp.optimal_policy(ref, r, 0.8)
    got = population_loss(pi, ref, prefs, 0.5, divergence=name, alpha=alpha)
    s = _trl_score(name, np.log(pi / ref), alpha)
    w = np.outer(ref, ref) * 2 * prefs  # W_ij = (mu_ij + mu_ji) P_ij, mu = ref x ref
    want = float(np.sum(w * np.logaddexp(0.0, -0.5 * (s[:, None] - s[None, :]))))
    assert got == pytest.approx(want, rel=1e-13)
    if name == "reverse_kl":
        assert got == pytest.approx(population_loss(pi, ref, prefs, 0.5), rel=1e-14)


F_ROWS = [
    ("forward_kl", None),
    ("js_divergence", None),
    ("alpha_divergence", 0.5),
    ("alpha_divergence", -0.5),
    ("alpha_divergence", 1.5),
    ("hellinger", None),
    ("chi2_kl", None),
    ("reverse_chi2", None),
    ("chi2", None),
]


@pytest.mark.parametrize(("name", "alpha"), F_ROWS)
def test_sigmoid_optimum_is_the_f_regularised_optimum_at_c_beta(name, alpha):
    ref, r, prefs = _problem(4, 1)
    beta = 2.0  # interior for chi2 and alpha = 1.5 too
    got = population_optimum(ref, prefs, beta, divergence=name, alpha=alpha)
    key = {"js_divergence": "js", "alpha_divergence": "alpha"}.get(name, name)
    c = 2.0 if key == "js" else 1.0
    want = kp.f_optimal_policy(ref, r, c * beta, divergence=key, alpha=alpha)
    np.testing.assert_allclose(got, want, rtol=1e-9)

    # stationary on the simplex: no direction e_i - e_j lowers the loss (central differences)
    def loss(p):
        return population_loss(p, ref, prefs, beta, divergence=name, alpha=alpha)

    h = 1e-6
    for i, j in ((0, 1), (2, 3), (1, 3)):
        d = np.zeros(4)
        d[i], d[j] = h, -h
        slope = (loss(got + d) - loss(got - d)) / (2 * h)
        assert abs(slope) < 1e-6


@pytest.mark.parametrize(("name", "alpha"), [("js_divergence", None), ("alpha_divergence", 1.5)])
def test_optimum_against_a_direct_numerical_minimisation(name, alpha):
    ref, _, prefs = _problem(3, 2)
    beta = 5.0  # interior for alpha = 1.5

    def loss(z):
        p = np.exp(z - z.max())
        return population_loss(p / p.sum(), ref, prefs, beta, divergence=name, alpha=alpha)

    res = minimize(loss, np.log(ref), method="BFGS", options={"gtol": 1e-10})
    p = np.exp(res.x - res.x.max())
    got = population_optimum(ref, prefs, beta, divergence=name, alpha=alpha)
    np.testing.assert_allclose(got, p / p.sum(), atol=1e-6)
    assert population_loss(got, ref, prefs, beta, divergence=name, alpha=alpha) <= res.fun + 1e-12


def test_not_interior_is_refused_with_the_reason():
    ref, r, prefs = _problem(4, 1)
    beta = 0.05  # chi2's optimum at this beta is sparse
    assert (kp.f_optimal_policy(ref, r, beta, divergence="chi2") == 0).any()
    with pytest.raises(ValueError, match="`divergence` 'chi2' has no interior population"):
        population_optimum(ref, prefs, beta, divergence="chi2")
    with pytest.raises(ValueError, match=r"alpha=1.5\) has no interior"):
        population_optimum(ref, prefs, 0.02, divergence="alpha_divergence", alpha=1.5)


def test_the_clamp_leaves_the_optimum_where_it_does_not_bind():
    # a best outcome of reference mass 1e-11: its optimal log-ratio is about 23.8, so
    # (alpha - 1) l = 11.9 passes float16's clamp (11) but not float32's (80)
    ref = np.array([1e-11, 1 - 1e-11])
    r = np.array([30.0, 0.0])
    prefs = bradley_terry(r)
    beta = 1e-4
    free = population_optimum(ref, prefs, beta, divergence="alpha_divergence", alpha=1.5)
    np.testing.assert_allclose(
        free, kp.f_optimal_policy(ref, r, beta, divergence="alpha", alpha=1.5), rtol=1e-6
    )
    lr = np.log(free / ref)
    assert 11.0 < 0.5 * lr.max() < 80.0
    clamped = population_optimum(
        ref, prefs, beta, divergence="alpha_divergence", alpha=1.5, alpha_clamp=80.0
    )
    np.testing.assert_array_equal(clamped, free)
    with pytest.raises(ValueError, match="`alpha_clamp` = 11 binds at the optimum: outcome 0"):
        population_optimum(
            ref, prefs, beta, divergence="alpha_divergence", alpha=1.5, alpha_clamp=11.0
        )
    # the clamped loss is flat in the chosen's score beyond the clamp
    a = population_loss(free, ref, prefs, beta, divergence="alpha", alpha=1.5, alpha_clamp=11.0)
    b = population_loss(free, ref, prefs, beta, divergence="alpha", alpha=1.5)
    assert a > b


def test_chi_po_row_and_its_optimum():
    row = LOSSES["chi_po"]
    pc, pr = np.array([-1.0, -2.0]), np.array([-1.5, -0.5])
    rc, rr = np.array([-1.2, -1.0]), np.array([-1.0, -1.1])
    a, b = pc - rc, pr - rr
    want = np.logaddexp(0.0, -0.7 * ((np.exp(a) + a) - (np.exp(b) + b)))
    np.testing.assert_allclose(row.value(pc, pr, rc, rr, 0.7), want, rtol=1e-15)
    # it is sigmoid on the chi2_kl score, and its gradient is the derivative of its value
    s_c, s_r = f_divergence_score(a, "chi2_kl"), f_divergence_score(b, "chi2_kl")
    np.testing.assert_allclose(
        LOSSES["sigmoid"].value(s_c, s_r, 0 * s_c, 0 * s_r, 0.7), want, rtol=1e-14
    )
    g = row.gradient(pc, pr, rc, rr, 0.7)
    h = 1e-6
    for k, x in enumerate((pc, pr, rc, rr)):
        up = [v.copy() for v in (pc, pr, rc, rr)]
        dn = [v.copy() for v in (pc, pr, rc, rr)]
        up[k] = x + h
        dn[k] = x - h
        fd = (row.value(*up, 0.7) - row.value(*dn, 0.7)) / (2 * h)
        np.testing.assert_allclose(g[k], fd, rtol=1e-6)
    ref, r, prefs = _problem(4, 3)
    got = population_optimum(ref, prefs, 0.9, loss="chi_po")
    np.testing.assert_allclose(
        got, kp.f_optimal_policy(ref, r, 0.9, divergence="chi2_kl"), rtol=1e-9
    )
    assert population_loss(got, ref, prefs, 0.9, loss="chi_po") == pytest.approx(
        population_loss(got, ref, prefs, 0.9, divergence="chi2_kl"), rel=1e-13
    )


def test_aot_unpaired_is_aot_pair():
    rng = np.random.default_rng(5)
    x = [-rng.uniform(0, 5, 6) for _ in range(4)]
    np.testing.assert_array_equal(
        LOSSES["aot_unpaired"].value(*x, 0.3), LOSSES["aot_pair"].value(*x, 0.3)
    )
    ref, r, prefs = _problem(4, 4)
    pi = kp.optimal_policy(ref, r, 1.0)
    assert population_loss(pi, ref, prefs, 0.5, loss="aot_unpaired") == population_loss(
        pi, ref, prefs, 0.5, loss="aot_pair"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"divergence": "tv"}, "`divergence` 'tv' has no f-DPO score"),
        ({"divergence": "kl"}, "`divergence` must be one of"),
        ({"divergence": "alpha_divergence"}, "`alpha` is required"),
        ({"divergence": "js_divergence", "alpha": 0.5}, "`alpha` applies only"),
        ({"divergence": "js_divergence", "alpha_clamp": 80}, "`alpha_clamp` applies only"),
        ({"divergence": "alpha", "alpha": 1.5, "alpha_clamp": -1}, "`alpha_clamp` must be"),
        ({"divergence": "js", "loss": "nca_pair"}, r"takes no f-divergence in TRL 1\.16\.0"),
        (
            {"divergence": "js", "loss": "nca_pair", "trl_version": "1.9.2"},
            "is not a function of score differences",
        ),
        ({"divergence": "js", "trl_version": "newest"}, "`trl_version` must be a TRL release"),
        ({"divergence": "js", "loss": "chi_po"}, "`divergence` is fixed by `loss` 'chi_po'"),
    ],
)
def test_bad_input_names_the_argument(kwargs, message):
    ref, _, prefs = _problem(3, 6)
    with pytest.raises(ValueError, match=message):
        population_optimum(ref, prefs, 1.0, **kwargs)


@pytest.mark.slow  # hypothesis runs and shrinks four suites: about 10 s
def test_check_pair_loss_names_the_clamp():
    from klpolicy.testing import check_pair_loss

    def trl_alpha(clamp):
        def fn(pc, pr, rc, rr, beta):
            sc = _trl_score("alpha_divergence", pc - rc, 1.5, clamp)
            sr = _trl_score("alpha_divergence", pr - rr, 1.5, clamp)
            return np.logaddexp(0.0, -beta * (sc - sr))

        return fn

    kw = {"divergence": "alpha_divergence", "alpha": 1.5, "max_examples": 30}
    assert check_pair_loss(trl_alpha(None), "sigmoid", **kw) is None
    assert check_pair_loss(trl_alpha(11.0), "sigmoid", alpha_clamp=11.0, **kw) is None
    with pytest.raises(AssertionError, match=r"it clamps the alpha exponent .* at 11"):
        check_pair_loss(trl_alpha(11.0), "sigmoid", **kw)
    with pytest.raises(AssertionError, match="it does not clamp the alpha exponent at 11"):
        check_pair_loss(trl_alpha(None), "sigmoid", alpha_clamp=11.0, **kw)

    def js_as_dpo(pc, pr, rc, rr, beta):
        return np.logaddexp(0.0, -beta * ((pc - rc) - (pr - rr)))

    with pytest.raises(AssertionError, match="it ignores the divergence"):
        check_pair_loss(js_as_dpo, "sigmoid", divergence="js_divergence", max_examples=30)


def test_sft_row_loss_weights_and_label_smoothing_note():
    row = LOSSES["sft"]
    pc, pr = np.array([-1.0, -2.5]), np.array([-0.5, -3.0])
    np.testing.assert_array_equal(row.value(pc, pr, pc, pr, 0.1), -pc)
    ref, r, prefs = _problem(4, 7)
    pi = kp.optimal_policy(ref, r, 1.0)
    w = np.outer(ref, ref) * 2 * prefs
    chosen = w.sum(1)
    sft = population_loss(pi, ref, prefs, 0.5, loss="sft")
    assert sft == pytest.approx(float(-np.sum(chosen * np.log(pi))), rel=1e-14)
    # its minimiser is the chosen responses' marginal law (maximum likelihood)
    np.testing.assert_allclose(
        population_optimum(ref, prefs, 0.5, loss="sft"), chosen / chosen.sum(), rtol=1e-15
    )
    # TRL's loss_type list with loss_weights: the weighted sum, each row with its options
    both = population_loss(
        pi, ref, prefs, 0.5, loss=["sigmoid", "sft"], loss_weights=[1.0, 0.25], label_smoothing=0.1
    )
    want = population_loss(pi, ref, prefs, 0.5, label_smoothing=0.1) + 0.25 * sft
    assert both == pytest.approx(want, rel=1e-14)
    assert population_loss(pi, ref, prefs, 0.5, loss=["ipo", "sft"]) == pytest.approx(
        population_loss(pi, ref, prefs, 0.5, loss="ipo") + sft, rel=1e-14
    )
    with pytest.raises(ValueError, match="`loss_weights` must have one weight per loss"):
        population_loss(pi, ref, prefs, 0.5, loss=["ipo", "sft"], loss_weights=[1.0])
    with pytest.raises(ValueError, match="population_optimum takes one loss"):
        population_optimum(ref, prefs, 0.5, loss=["sigmoid", "sft"])
    assert "ignores label_smoothing for sigmoid" in LOSSES["sigmoid"].notes


def test_fdpo_divergences_are_exactly_what_the_score_takes():
    """FDPO_DIVERGENCES (the CLI's choices) lists every name f_divergence_score takes, and
    every other registry row is refused by name."""
    from klpolicy.core import DIVERGENCES
    from klpolicy.preference import FDPO_DIVERGENCES, f_divergence_score

    for name in FDPO_DIVERGENCES:
        alpha = 0.5 if name in ("alpha", "alpha_divergence") else None
        assert np.isfinite(f_divergence_score([0.0, 1.0], name, alpha=alpha)).all(), name
    for name in set(DIVERGENCES) - set(FDPO_DIVERGENCES):
        with pytest.raises(ValueError, match="divergence"):
            f_divergence_score([0.0, 1.0], name)
