"""The exercise solutions of tutorials/11_dpo_family.md, asserted number by number."""

import math
from pathlib import Path

import numpy as np
import pytest

from klpolicy import optimal_policy
from klpolicy.preference import bradley_terry, optimum_set, population_optimum

TUTORIAL = Path(__file__).resolve().parents[2] / "tutorials" / "11_dpo_family.md"
REF, R = np.array([0.5, 0.5]), np.array([1.0, 0.0])
P = bradley_terry(R)
PDET = np.array([[0.5, 1.0], [0.0, 0.5]])


def _sigma(x):
    return 1 / (1 + math.exp(-x))


def test_exercise_1_ipo_tau_that_lands_on_pi_star():
    tau = (_sigma(1.0) - 0.5) / 2
    assert f"{tau:.7f}" == "0.1155293"
    assert "0.1155293" in TUTORIAL.read_text()
    np.testing.assert_allclose(
        population_optimum(REF, P, tau, loss="ipo"), optimal_policy(REF, R, 0.5), rtol=1e-12
    )


def test_exercise_2_hinge_beta_for_probability_point_nine():
    beta = 1 / math.log(9)
    assert f"{beta:.6f}" == "0.455120" and "0.455120" in TUTORIAL.read_text()
    assert population_optimum(REF, PDET, beta, loss="hinge")[0] == pytest.approx(0.9, rel=1e-14)
    s = optimum_set(REF, PDET, beta, loss="hinge")
    assert s.low[0, 1] == pytest.approx(1 / beta) and s.high[0, 1] == math.inf


def test_exercise_3_nca_at_beta_one():
    p = REF @ P.T  # p(y) = sum_y' ref(y') P[y, y']
    pi = population_optimum(REF, P, 1.0, loss="nca_pair")
    np.testing.assert_allclose(pi, REF * 2 * p, rtol=1e-13)
    assert f"{pi[0]:.6f}" == "0.615529" and "0.615529" in TUTORIAL.read_text()
    assert pi[0] == pytest.approx(0.25 + 0.5 * _sigma(1.0), rel=1e-14)
