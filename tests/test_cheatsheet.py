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
    assert "no fixed point" in rows[("| $k_2$", "reward")]


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


def test_the_x_sampling_rows_are_marked_for_the_kl_terms_work():
    rows = _block("x-sampling rows")
    assert rows[0].startswith("| estimator | placement | sampled from")
