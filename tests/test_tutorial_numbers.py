"""The numbers the tutorials state in prose, recomputed independently of the code cells.

A code cell's printed output is always right; the sentence around it is written by hand and
can drift. Each test here recomputes one stated claim from scratch (scipy root finding,
mpmath, or the formula written out) and checks that the tutorial's text states it. Each would
have caught an error a student found working through the course.
"""

from __future__ import annotations

import re
from pathlib import Path

import mpmath as mp
import numpy as np
import pytest
from scipy.optimize import brentq

ROOT = Path(__file__).resolve().parents[1]


def _text(stem: str) -> str:
    (path,) = (ROOT / "tutorials").glob(f"{stem}_*.md")
    return re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))


def _tv(p, q) -> float:
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


# ------------------------------------------------------------------ tutorial 8, trust region
P_OLD = np.array([0.4, 0.3, 0.2, 0.1])
ADV = np.array([0.5, -1.0, 1.0, 0.2])


def _mirror_step(delta):
    """argmax E_pi[A] s.t. KL(pi || p_old) = delta: the tilt p_old e^{A/b}, b by bisection."""

    def tilt(b):
        w = P_OLD * np.exp((ADV - ADV.max()) / b)
        return w / w.sum()

    def gap(log_b):
        p = tilt(np.exp(log_b))
        return float(np.sum(p * np.log(p / P_OLD))) - delta

    return tilt(np.exp(brentq(gap, -4, 6, xtol=1e-15)))


def _trpo_step(delta):
    """argmax E_pi[A] s.t. KL(p_old || pi) = delta: pi = b p_old/(lam - A), the Lagrangian's
    stationary point, with lam normalising pi (bisection) and b meeting the constraint."""

    def step(b):
        lam = brentq(lambda x: np.sum(b * P_OLD / (x - ADV)) - 1, ADV.max() + 1e-15, 1e6)
        return b * P_OLD / (lam - ADV)

    def gap(log_b):
        p = step(np.exp(log_b))
        return float(np.sum(P_OLD * np.log(P_OLD / p))) - delta

    return step(np.exp(brentq(gap, -10, 8, xtol=1e-15)))


def test_tutorial_8_trpo_and_mirror_steps_differ_at_first_order_in_delta():
    deltas = np.array([1e-4, 1e-3, 1e-2, 1e-1])
    gap = np.array([_tv(_mirror_step(d), _trpo_step(d)) for d in deltas])
    moved = np.array([_tv(_mirror_step(d), P_OLD) for d in deltas])
    # each step moves O(sqrt(delta)); the two differ at O(delta), not O(delta^(3/2))
    np.testing.assert_allclose(moved / np.sqrt(deltas), 0.6, atol=0.05)
    np.testing.assert_allclose(gap / deltas, [0.33, 0.34, 0.37, 0.45], atol=0.006)
    assert np.polyfit(np.log(deltas[:2]), np.log(gap[:2]), 1)[0] == pytest.approx(1, abs=0.03)
    text = _text("08")
    assert "second order in $\\delta$" not in text
    assert "differ at order $\\delta$" in text and "about $0.33\\,\\delta$" in text
    # and the library agrees with the independent solvers
    from klpolicy.trust_region import trust_region_step

    for d in deltas:
        np.testing.assert_allclose(trust_region_step(P_OLD, ADV, d), _mirror_step(d), atol=1e-9)
        np.testing.assert_allclose(
            trust_region_step(P_OLD, ADV, d, constraint="trpo"), _trpo_step(d), atol=1e-9
        )


def test_tutorial_8_controller_overshoot_follows_from_the_largest_step():
    import klpolicy

    b_exact = float(klpolicy.beta_for_kl([0.5, 0.3, 0.2], [1.0, 0.0, 0.5], 0.05))
    # AdaptiveKLController(0.05, 0.05, 2000) fed n_steps = 256 samples: at most x(1 + 0.2 g)
    fewest = np.log(b_exact / 0.05) / np.log(1 + 0.2 * 256 / 2000)
    assert round(b_exact / 0.05, 1) == 25.8 and round(fewest) == 129
    text = _text("08")
    assert "\\ln 25.8/\\ln 1.0256 \\approx 129" in text
    assert "in well under a minute" not in text  # about a minute on 2 CPUs


@pytest.mark.slow
def test_tutorial_8_only_the_trust_region_reaches_pi_star_to_rounding():
    torch = pytest.importorskip("torch")
    import klpolicy.torch as kt

    torch.set_num_threads(1)
    ref, reward = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.0, 0.5])
    runs = {
        "exact": dict(method="exact"),
        "k1 reward": dict(method="reinforce", estimator="k1", placement="reward"),
        "ppo": dict(method="ppo"),
        "trust region": dict(method="trust_region", delta=0.05, steps=20),
    }
    last = {
        name: kt.fit_policy(
            ref, reward, 0.5, **{"steps": 200, "seed": 1, "device": "cpu", **kw}
        ).history["distance"][-1]
        for name, kw in runs.items()
    }
    assert last["trust region"] < 1e-14
    # the exact gradient stops short (its learning rate decays to 0), as do the sampled ones
    assert 1e-6 < last["exact"] < 1e-4 and 1e-6 < last["k1 reward"] < 1e-4
    assert 1e-9 < last["ppo"] < 1e-7
    text = _text("08")
    assert "the exact gradient and the trust region reach it to rounding" not in text
    assert "Only the trust region reaches $\\pi^*$ to rounding" in text


# ---------------------------------------------------------------- tutorial 6, stability region
@pytest.mark.slow
def test_tutorial_6_the_grid_gains_near_the_limit_bracket_it_when_simulated_long_enough():
    import klpolicy as kp
    from klpolicy.control import stability_region

    ref, reward, target = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.0, 0.5]), 0.1
    lags, horizons = np.array([0.8, 0.9]), np.geomspace(0.5, 200, 20)[3:5]
    short = stability_region(ref, reward, target, lags=lags, horizons=horizons,
                             init_kl_coef=1.0, steps=400)  # fmt: skip
    long = stability_region(ref, reward, target, lags=lags, horizons=horizons,
                            init_kl_coef=1.0, steps=1000)  # fmt: skip
    assert kp is not None and short.gain.round(2).tolist() == [1.32, 0.96]
    # 400 updates: the stable column at 0.96 has not settled at lag 0.9 (so the printed
    # "largest gain settled at every lag" is 0.70, below the limit, like 0.96)
    assert not np.isfinite(short.settle_time[:, 1]).all()
    # 1000 updates: 0.96 settles at both lags (after 386 and 799 updates), 1.32 at neither
    assert long.settle_time[:, 1].tolist() == [386, 799]
    assert not np.isfinite(long.settle_time[:, 0]).any()
    text = _text("06")
    assert "bracket the predicted limit" not in text or "0.70 and 0.96, are *below*" in text
    assert "λ = 0.8 after 386 updates and λ = 0.9 after 799" in text


# ------------------------------------------------------------------------ tutorial 9
def test_tutorial_9_the_kl_gap_near_the_greedy_end_is_mpmaths():
    with mp.workdps(60):

        def kl(beta):
            p, r = [mp.mpf("0.2"), mp.mpf("0.8")], [0, 1]
            w = [p[i] * mp.exp(r[i] / mp.mpf(beta)) for i in range(2)]
            z = mp.fsum(w)
            return mp.fsum(w[i] / z * mp.log(w[i] / z / p[i]) for i in range(2))

        gap = kl("0.01") - kl("0.02")
    assert float(gap) == pytest.approx(2.459156e-21, rel=1e-6)
    assert "exact KLs 2.459e-21 apart" in _text("09")


@pytest.mark.slow
def test_tutorial_9_the_falsifying_input_has_a_positive_log_ratio():
    from klpolicy.testing import check_kl_estimator

    def textbook(logp, logq):  # TRL's k3 as the tutorial writes it, in numpy
        x = np.asarray(logq, dtype=float) - np.asarray(logp, dtype=float)
        return (np.exp(x) - 1) - x

    with pytest.raises(AssertionError) as info:
        check_kl_estimator(textbook, "k3", atol=0.0)
    m = re.search(r"logp=\[([^\]]+)\], logq=\[([^\]]+)\]", str(info.value))
    x = float(m.group(2)) - float(m.group(1))
    assert x == pytest.approx(1e-5)
    assert "`x = log q - log p = +1e-5`" in _text("09")


# ------------------------------------------------------------------------ tutorial 3
def test_tutorial_3_k3_in_the_loss_adds_beta_times_ref_minus_pi_to_the_ascent_direction():
    from klpolicy import estimators as E

    ref, reward, beta = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.0, 0.5, 1.0, 2.0]), 0.5
    logits = np.log([0.25] * 4)
    pi = np.full(4, 0.25)
    # E_pi[(1 - ref/pi) d log pi / d z] with d log pi_y / d z = e_y - pi, written out
    term = sum(pi[y] * (1 - ref[y] / pi[y]) * (np.eye(4)[y] - pi) for y in range(4))
    k3 = E.expected_gradient(logits, ref, reward, beta, estimator="k3", placement="loss")
    k1 = E.expected_gradient(logits, ref, reward, beta, estimator="k1", placement="loss")
    np.testing.assert_allclose(k3 - k1, -beta * term, atol=1e-15)  # the printed rows ascend
    np.testing.assert_allclose(-beta * term, beta * (ref - pi), atol=1e-15)
    assert "k3 in the loss adds $\\beta(\\pi_{ref} - \\pi)$ to the ascent direction" in _text("03")


def test_tutorial_3_schulmans_estimators_are_ours_with_the_names_swapped():
    from klpolicy import estimators as E

    rng = np.random.default_rng(0)
    logp, logq = np.log(rng.dirichlet(np.ones(5))), np.log(rng.dirichlet(np.ones(5)))
    r = np.exp(logq - logp)  # Schulman's r = p/q, his q (sampled) is our p
    np.testing.assert_allclose(E.k1(logp, logq), -np.log(r), atol=1e-14)
    np.testing.assert_allclose(E.k2(logp, logq), np.log(r) ** 2 / 2, atol=1e-14)
    np.testing.assert_allclose(E.k3(logp, logq), (r - 1) - np.log(r), atol=1e-14)
    assert "[^schulman-map]:" in _text("03")


# ------------------------------------------------------------------------ tutorial 12
def test_tutorial_12_the_error_a_per_token_kl_makes_against_a_sequence_target():
    from klpolicy.control import AdaptiveKLController

    ctrl = AdaptiveKLController(0.2, target=6, horizon=10000)
    ctrl.update(0.25, 256)
    # one update multiplies beta by 1 + clip(error, -0.2, 0.2) * n_steps / horizon
    assert ctrl.value == pytest.approx(0.2 * (1 - 0.2 * 256 / 10000), rel=1e-12)
    assert round(0.25 / 6 - 1, 3) == -0.958
    assert "$0.25/6 - 1 = -0.958$" in _text("12")


# ------------------------------------------------------------------------ tutorial 15
T15_REF = np.array([0.35, 0.25, 0.2, 0.12, 0.08])
T15_R = np.array([0.0, 0.5, 1.0, 1.5, 2.0])
T15_BETA = 0.5


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def _t15_landing(estimator, temperature, both):
    """Where GRPO-style training lands when the engine samples s = softmax(theta / T).

    The field written out (no klpolicy): a_y = s_y (r_y - E_s r) for the reward's part when
    ``both`` (else the exact pi_y r_y), minus beta s_y k'(l_y) for the KL term in the loss
    (k2' = l, k3' = 1 - ref/pi); g = a - pi sum(a); its zero by scipy's root.
    """
    from scipy.optimize import root

    def field(z):
        th = np.append(0.0, z)
        pi, s = _softmax(th), _softmax(th / temperature)
        ell = np.log(pi / T15_REF)
        dk = ell if estimator == "k2" else 1 - T15_REF / pi
        a = (s * (T15_R - s @ T15_R) if both else pi * T15_R) - T15_BETA * s * dk
        return (a - pi * a.sum())[1:]

    start = np.log(T15_REF[1:] / T15_REF[0]) + T15_R[1:] / T15_BETA  # pi*'s logits
    sol = root(field, start, tol=1e-13)
    assert np.abs(field(sol.x)).max() < 1e-12
    return _softmax(np.append(0.0, sol.x))


def test_tutorial_15_which_way_the_fixed_points_move_with_a_hot_sampler():
    w = T15_REF * np.exp(T15_R / T15_BETA)
    star = w / w.sum()

    def kl(p):
        return float(np.sum(p * np.log(p / star)))

    temps = (1.0, 1.25, 1.5)
    pts = {(e, b): [_t15_landing(e, t, b) for t in temps] for e in ("k2", "k3") for b in (0, 1)}
    kls = {key: [kl(p) for p in v] for key, v in pts.items()}
    ers = {key: [float(p @ T15_R) for p in v] for key, v in pts.items()}
    f4 = lambda xs: ", ".join(f"{x:.4f}" for x in xs)  # noqa: E731
    f3 = lambda xs: ", ".join(f"{x:.3f}" for x in xs)  # noqa: E731
    text = _text("15")
    assert f"{star @ T15_R:.3f}" == "1.526" and f"{ers['k3', 1][0]:.3f}" == "1.563"
    assert "at $\\mathbb{E}[r] = 1.563$ against $\\pi^*$'s 1.526" in text
    # both terms from s: k3 moves toward pi* as T grows, k2 away and greedier
    assert kls["k3", 1][0] > kls["k3", 1][1] > kls["k3", 1][2]
    assert f"({f4(kls['k3', 1])} nats at $T = 1, 1.25, 1.5$)" in text
    assert f"lowers its reward toward $\\pi^*$'s ({f3(ers['k3', 1][1:])})" in text
    assert min(ers["k2", 1][1:]) > star @ T15_R
    assert f"greedier than $\\pi^*_\\beta$ ({f3(ers['k2', 1][1:]).replace(', ', ' and ')})" in text
    # the exact reward gradient: k3 further away, k2 two to three times as far and less greedy
    assert kls["k3", 0][0] < kls["k3", 0][1] < kls["k3", 0][2]
    assert f"further from $\\pi^*_\\beta$ ({f4(kls['k3', 0][1:])})" in text
    ratio = np.array(kls["k2", 0][1:]) / np.array(kls["k2", 1][1:])
    assert np.all((2 < ratio) & (ratio < 3))
    a, b = f4(kls["k2", 0][1:]).split(", "), f4(kls["k2", 1][1:]).split(", ")
    assert f"two to three times as far ({a[0]} and {a[1]} against {b[0]} and {b[1]})" in text
    assert ers["k2", 0][1] < star @ T15_R
    assert f"less greedy than $\\pi^*$ ({ers['k2', 0][1]:.3f} at $T = 1.25$)" in text
    assert "sampling hot moves it further" not in text


def test_tutorial_15_the_logged_k1_turns_negative_at_t_5_453():
    w = T15_REF * np.exp(T15_R / T15_BETA)
    pi = w / w.sum()

    def logged_k1(t):  # E_s[log pi/ref] with s = softmax(log pi / T), written out
        s = _softmax(np.log(pi) / t)
        return float(s @ np.log(pi / T15_REF))

    t0 = brentq(logged_k1, 3.0, 8.0, xtol=1e-12)
    text = _text("15")
    assert f"{t0:.3f}" == "5.453" and "turns negative at $T = 5.453$" in text
    assert "near $T = 6$" not in text
    assert f"from {logged_k1(0.5):.2f} nats at $T = 0.5$ to {logged_k1(3.0):.2f} at $T = 3$" in text
    limit = float(np.mean(np.log(pi / T15_REF)))  # s -> uniform as T -> inf
    assert f"the logged k1 to ${limit:.3f}$" in text
    # the figure draws the negative part: its grid goes past the crossing
    grid = re.search(r"temps = np\.linspace\(0\.4, ([\d.]+), \d+\)", text)
    assert float(grid.group(1)) > t0 + 2


# ------------------------------------------------------------------------ tutorial 13
def test_tutorial_13_a_per_token_ratio_follows_the_kl_under_the_old_prefixes():
    # the tutorial's tree (same draws), in numpy; gradients by central differences
    rng = np.random.default_rng(13)
    v = 3
    ref_l = [rng.normal(size=(v,) * (t + 1)) for t in range(2)]
    cur_l = [r + 0.6 * rng.normal(size=r.shape) for r in ref_l]
    old_l = [c + 0.6 * rng.normal(size=c.shape) for c in cur_l]

    def lsm(x):
        return (
            x
            - np.log(np.sum(np.exp(x - x.max(-1, keepdims=True)), -1, keepdims=True))
            - x.max(-1, keepdims=True)
        )

    def split(z):
        return [z[:v], z[v:].reshape(v, v)]

    lo, lr = [lsm(x) for x in old_l], [lsm(x) for x in ref_l]

    def term(z):  # E_{pi_old}[sum_t (pi_t / old_t) k3_t], every sequence enumerated
        lp = [lsm(x) for x in split(z)]
        total = 0.0
        for a0 in range(v):
            for a1 in range(v):
                mu = np.exp(lo[0][a0] + lo[1][a0, a1])
                for p, o, r in (
                    (lp[0][a0], lo[0][a0], lr[0][a0]),
                    (lp[1][a0, a1], lo[1][a0, a1], lr[1][a0, a1]),
                ):
                    x = r - p
                    total += mu * np.exp(p - o) * (np.exp(x) - 1 - x)
        return total

    def token_kl(z, occ):
        lp = [lsm(x) for x in split(z)]
        kl = [np.sum(np.exp(a) * (a - b), -1) for a, b in zip(lp, lr)]
        return kl[0] + np.sum(occ * kl[1])

    def grad(f, z, h=1e-6):
        return np.array([(f(z + h * e) - f(z - h * e)) / (2 * h) for e in np.eye(z.size)])

    z = np.concatenate([c.ravel() for c in cur_l])
    g = grad(term, z)
    g_old = grad(lambda y: token_kl(y, np.exp(lo[0])), z)
    g_cur = grad(lambda y: token_kl(y, np.exp(lsm(cur_l[0]))), z)
    assert np.abs(g - g_old).max() < 1e-8
    assert round(np.abs(g - g_cur).max() / np.abs(g).max(), 1) == 0.2
    text = _text("13")
    assert "nothing off-policy" not in text
    assert "weighted by $\\pi_{old}$'s prefix occupancy" in text
    assert "off by a fifth of its own size" in text


# ------------------------------------------------------------------------ tutorial 19
def _bon_law(q, r, n):
    """Best of n draws from q, by enumerating every n-tuple (ties: the reward level only)."""
    q, r = np.asarray(q, float), np.asarray(r, float)
    idx = np.array(np.meshgrid(*[np.arange(q.size)] * n, indexing="ij")).reshape(n, -1)
    prob = np.prod(q[idx], axis=0)
    best = idx[np.argmax(r[idx], axis=0), np.arange(idx.shape[1])]
    return np.bincount(best, weights=prob, minlength=q.size)


def _soft_law(q, r, n, lam):
    """Soft best-of-n by enumerating every n-tuple: draw i kept with softmax(r/lam)."""
    q, r = np.asarray(q, float), np.asarray(r, float)
    idx = np.array(np.meshgrid(*[np.arange(q.size)] * n, indexing="ij")).reshape(n, -1)
    prob = np.prod(q[idx], axis=0)
    w = np.exp((r[idx] - r[idx].max(axis=0)) / lam)  # the tuple's best weighs 1
    keep = prob * w / w.sum(axis=0)
    return np.array([keep[idx == y].sum() for y in range(q.size)])


def _kl(p, q):
    p, q = np.asarray(p), np.asarray(q)
    on = p > 0
    return float(np.sum(p[on] * np.log(p[on] / q[on])))


def _tilt(q, r, b):
    w = np.asarray(q) * np.exp((np.asarray(r) - max(r)) / b)
    return w / w.sum()


def _tilt_reward_at_kl(q, r, kl):
    lb = brentq(lambda x: _kl(_tilt(q, r, np.exp(x)), q) - kl, -8, 8, xtol=1e-14)
    return float(_tilt(q, r, np.exp(lb)) @ np.asarray(r))


def test_tutorial_19_best_of_4_is_within_0003_of_the_optimum():
    q, r, beta = [0.2, 0.5, 0.3], [1.0, 0.3, -2.0], 0.5
    bon = _bon_law(q, r, 4)
    star = _tilt(q, r, beta)
    gap = float((star - bon) @ np.array(r)) - beta * (_kl(star, q) - _kl(bon, q))
    assert 0.0025 < gap < 0.003
    assert "Best-of-4 is within 0.003 of the optimum" in _text("19")


def test_tutorial_19_the_rare_answer_frontier_numbers():
    q, r = [0.05, 0.45, 0.5], [3.0, 1.0, 0.0]
    shortfall = {}
    for n in (4, 8):
        law = _bon_law(q, r, n)
        shortfall[n] = _tilt_reward_at_kl(q, r, _kl(law, q)) - float(law @ np.array(r))
    assert round(shortfall[4], 2) == 0.19 and round(shortfall[8], 2) == 0.18
    # soft best-of-8 at the KL of best-of-4: solve lam by bisection on the enumerated law
    bon4 = _bon_law(q, r, 4)
    k4 = _kl(bon4, q)
    lam = np.exp(brentq(lambda x: _kl(_soft_law(q, r, 8, np.exp(x)), q) - k4, -6, 6, xtol=1e-12))
    more = float((_soft_law(q, r, 8, lam) - bon4) @ np.array(r))
    assert round(more, 2) == 0.17
    text = _text("19")
    assert "give up 0.19 and 0.18 reward units" in text and "earns about 0.17 more" in text


# ------------------------------------------------------------------------ tutorial 20
def test_tutorial_20_dpo_on_a_cycle_is_exploitable_by_the_stated_amount():
    from scipy.optimize import minimize

    rps = np.array([[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]])
    soft = 0.5 + 0.6 * (rps - 0.5)
    beta, m = 0.5, np.array([0.6, 0.3, 0.1])
    # the population DPO loss written out: W[i, j] = 2 m_i m_j P[i, j], uniform reference
    w = 2 * np.outer(m, m) * soft

    def loss(g):
        h = beta * (g[:, None] - g[None, :])
        return float(np.sum(w * np.logaddexp(0.0, -h)))

    g = minimize(loss, np.zeros(3), method="BFGS", options={"gtol": 1e-12}).x
    pi = np.exp(g - g.max()) / np.exp(g - g.max()).sum()
    # exploitability tau KL(pi || BR(pi)) at tau = beta, BR = softmax(P pi / tau) (uniform mu)
    br = np.exp(soft @ pi / beta)
    br /= br.sum()
    gap = beta * float(np.sum(pi * np.log(pi / br)))
    assert round(gap, 3) == 0.116
    assert "beats it by 0.116" in _text("20")
    # rock-paper-scissors breaks Bradley-Terry's additivity of logits
    assert round(float(np.log(0.8 / 0.2)), 3) == 1.386
    assert "$1.386 + 1.386 \\ne -1.386$" in _text("20")
