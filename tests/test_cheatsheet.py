"""docs/cheatsheet.md states what the library computes: its tables are regenerated here by
docs/make_cheatsheet.py (library calls on small problems) and must match the page, and the
generator's answers are checked against the formulas written out independently."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

import klpolicy as kp

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cheatsheet.md"


@pytest.fixture(scope="module")
def make():
    spec = importlib.util.spec_from_file_location(
        "make_cheatsheet", ROOT / "docs" / "make_cheatsheet.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _block(name: str) -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    m = re.search(rf"<!-- {name}: [^>]*-->\n(.*?)\n<!-- end {name} -->", text, re.S)
    assert m, f"docs/cheatsheet.md has no {name} block"
    return m.group(1).splitlines()


def test_the_estimator_table_is_the_librarys(make):
    assert _block("estimator-table") == make.estimator_table()


def test_the_loss_table_is_the_librarys(make):
    assert _block("loss-table") == make.loss_table()


def test_the_estimator_table_says_what_the_formulas_say(make):
    rows = {tuple(r.split(" | ")[:2]): r for r in make.estimator_table()[2:]}
    # k3 in the loss follows the forward KL: E_pi[(1 - ref/pi)(e_y - pi)] = pi - ref
    assert "forward KL" in rows[("| $k_3$", "loss")]
    assert "reverse KL" in rows[("| $k_1$", "reward")] and "reverse KL" in rows[("| $k_2$", "loss")]
    assert "nothing" in rows[("| $k_1$", "loss")]
    assert "no *stable* fixed point" in rows[("| $k_2$", "reward")]
    assert "no *stable* fixed point" in rows[("| $k_3$", "reward")]


def test_k2_in_the_reward_has_an_unstable_interior_point(make):
    # recipe: k2 in the reward is stationary where r - beta (log(pi/ref))^2 / 2 is one number c:
    # log(pi/ref) = s sqrt(2 (r - c)/beta) with the signs s = (+, -, -, -), c by bisection
    from scipy.optimize import brentq

    ref, r, b = make.REF, make.REWARD, make.BETA
    s = np.array([1.0, -1.0, -1.0, -1.0])
    c = brentq(lambda c: np.log(np.sum(ref * np.exp(s * np.sqrt(2 * (r - c) / b)))), -50, 0,
               xtol=1e-15)  # fmt: skip
    point = ref * np.exp(s * np.sqrt(2 * (r - c) / b))
    found = make.unstable_interior_point("k2", "reward")
    np.testing.assert_allclose(found, point, rtol=1e-9)
    kw = dict(estimator="k2", placement="reward")
    assert not kp.estimators.fixed_point_stability(point, ref, r, b, **kw).stable
    # and a stable point is never reported: k1 in the reward's only interior point is pi*
    assert make.unstable_interior_point("k1", "reward") is None


def test_the_implied_rewards_follow_from_the_per_pair_minimisers(make):
    # DPO's per-pair minimiser of the population loss is the true gap; IPO's is P - 1/2
    sigma = 1 / (1 + np.exp(-1.0))
    assert make._implied("sigmoid", {}, 0.1) == pytest.approx(1.0, abs=1e-9)
    assert make._implied("ipo", {}, 1.0) == pytest.approx(sigma - 0.5, abs=1e-9)
    # cDPO: minimise -(1-e) log s(x) - e log s(-x): s(x*) = 1 - e + ... with P = sigma(1):
    # the smoothed target is P' = (1 - e) P + e (1 - P), and x* = logit(P')
    p_smooth = 0.9 * sigma + 0.1 * (1 - sigma)
    assert make._implied("sigmoid", {"label_smoothing": 0.1}, 1.0) == pytest.approx(
        np.log(p_smooth / (1 - p_smooth)), abs=1e-9
    )


def test_the_soft_return_is_constant_at_the_optimum(make):
    k1_reward, k2_loss = make.gradient_noise_at_optimum()
    assert k1_reward < 1e-28
    # independently: (r - E r - beta l)(e_y - pi) at pi*, with beta l = r - beta log Z
    pi = kp.optimal_policy(make.REF, make.REWARD, make.BETA)
    c = make.BETA * np.log(np.sum(make.REF * np.exp(make.REWARD / make.BETA))) - pi @ make.REWARD
    expected = sum(pi[y] * c**2 * np.sum((np.eye(4)[y] - pi) ** 2) for y in range(4))
    assert k2_loss == pytest.approx(expected, rel=1e-12)
    assert f"keeps {k2_loss:.4f}" in PAGE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sampling(make):
    return make.sampling_table()


def test_the_sampling_tables_are_the_librarys(make, sampling):
    assert _block("sampling-table") == sampling
    assert _block("settings-table") == make.settings_table()


def _row(table, estimator, placement, sampling):
    label = {
        "on": "on-policy",
        "none": "off-policy, no ratio",
        "detached": "off-policy, detached ratio",
        "differentiable": "off-policy, differentiable ratio",
    }[sampling]
    name = f"`{estimator}`" if estimator.endswith("+") else f"$k_{estimator[1]}$"
    (row,) = [r for r in table if r.startswith(f"| {name} | {placement} | {label} |")]
    return row.split(" | ")


def test_the_sampling_table_says_what_the_formulas_say(sampling):
    # k3 in the loss, samples from mu weighted by a detached w = pi/mu:
    # E_mu[w (1 - ref/pi)(e_y - pi)] = pi - ref, the forward KL's gradient off-policy too
    assert "forward KL" in _row(sampling, "k3", "loss", "detached")[3]
    # with a differentiable ratio the score term pi (k3 - E k3) joins: grad E_pi[k3] = grad KL
    assert "reverse KL" in _row(sampling, "k3", "loss", "differentiable")[3]
    assert "pi^*_{\\beta}" in _row(sampling, "k3", "loss", "differentiable")[5]
    # k1 in the loss: E_mu[w grad log pi] = E_pi[grad log pi] = 0; without w: E_mu[e_y - pi] != 0
    assert "nothing" in _row(sampling, "k1", "loss", "detached")[3]
    assert "no divergence" in _row(sampling, "k1", "loss", "none")[3]
    # verl's k3+ has k2's gradient; a differentiable ratio adds k3's value: neither divergence
    assert "reverse KL" in _row(sampling, "k3+", "loss", "on")[3]
    assert "no divergence" in _row(sampling, "k3+", "loss", "differentiable")[3]
    # k1 in the reward with no ratio and a fixed sampler: the penalised reward is constant on
    # mu's support only at pi* (tutorial 15, section 4)
    assert _row(sampling, "k1", "reward", "none")[4] == "biased"
    assert _row(sampling, "k1", "reward", "none")[6].startswith("$\\pi^*_{\\beta}$")


def test_the_point_names_are_fitted_not_assumed(make):
    from klpolicy.estimators import gradients

    beta = make.BETA
    assert make.describe_point(kp.optimal_policy(make.REF, make.REWARD, 2 * beta)) == (
        "$\\pi^*_{2\\beta}$"
    )
    assert make.describe_point(kp.optimal_policy(make.REF, make.REWARD, beta / 2)) == (
        "$\\pi^*_{\\beta/2}$"
    )
    point = gradients.fixed_point(make.REF, make.REWARD, 3 * beta, estimator="k3", placement="loss")
    assert make.describe_point(point) == "the forward-KL point at $3\\beta$"
    assert make.describe_point(np.array([0.1, 0.2, 0.3, 0.4])).startswith("another point")


def test_an_unstable_stationary_point_is_not_where_training_lands(make):
    # k1 in the loss, no ratio, fixed sampler mu: g = pi (r - m) - beta (mu - pi) vanishes at
    # pi_j = beta mu_j / (beta + r_j - m) (m from sum pi = 1), but the term pushes pi away
    # from mu there: a repelling point
    from scipy.optimize import brentq

    mu, r, b = np.exp(make.MU), make.REWARD, make.BETA
    m = brentq(lambda m: np.sum(b * mu / (b + r - m)) - 1, -50, b + r.min() - 1e-12)
    point = b * mu / (b + r - m)
    kw = dict(estimator="k1", placement="loss", sampler=make.MU, ratio="none")
    g = kp.estimators.expected_gradient(np.log(point), make.REF, r, b, **kw)
    assert np.max(np.abs(g)) < 1e-12
    assert not kp.estimators.fixed_point_stability(point, make.REF, r, b, **kw).stable
    assert kp.estimators.fixed_point_stability(
        kp.optimal_policy(make.REF, r, b), make.REF, r, b, **dict(kw, ratio="detached")
    ).stable
    # the page says so through fixed_point's own refusal or the library's verdict
    assert make.lands("k1", "loss", "none", None, sampler=make.MU) in {
        "an unstable stationary point: training leaves it",
        "no interior fixed point (the support collapses)",
    }


@pytest.mark.mp_dps(30)
def test_the_logged_k1_is_kl_to_ref_minus_kl_to_pi(make):
    # recipe: mpmath at 30 digits; s_T is pi^(1/T) normalised, the logged k1 mean is
    # sum_y s(y) log(pi(y)/ref(y)); the page's T = 1.5 row
    import mpmath as mp

    ref = [mp.mpf(x) for x in ("0.4", "0.3", "0.2", "0.1")]
    r = [mp.mpf(x) for x in ("0", "0.5", "1", "2")]
    w = [q * mp.e ** (x / mp.mpf("0.5")) for q, x in zip(ref, r)]
    pi = [x / mp.fsum(w) for x in w]
    ws = [p ** (1 / mp.mpf("1.5")) for p in pi]
    s = [x / mp.fsum(ws) for x in ws]
    mean = mp.fsum(si * mp.log(p / q) for si, p, q in zip(s, pi, ref))
    (row,) = [x for x in _block("settings-table") if x.startswith("| $T = 1.5$ |")]
    cells = row.split(" | ")
    assert float(cells[3]) == pytest.approx(float(mean), abs=5e-5)
    assert float(cells[1]) - float(cells[2]) == pytest.approx(float(mean), abs=1.5e-4)
    # hot sampling logs a negative KL, although the policy's KL to the reference is 1.04 nats
    (hot,) = [x for x in _block("settings-table") if x.startswith("| $T = 10$ |")]
    assert float(hot.split(" | ")[3]) < 0 < float(hot.split(" | ")[5].rstrip(" |"))
