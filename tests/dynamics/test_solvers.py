"""beta_fit on one row and on a row per context: the beta of the nearest pi*.

mpmath recipe: pi*_{beta,b} from tests/_mpref (400 digits); the fit is the root in
t = log beta of mean_b (E_{pi*_{e^t,b}} r_b - E_{pi_b} r_b), found by mp.findroot (50 digits)
from the float answer; the mean KL(pi_b || pi*_{beta,b}) is checked to be smallest there by
evaluating it at beta (1 -+ 1e-6).
"""

import math
import re

import mpmath as mp
import numpy as np
import pytest

from klpolicy import kl_divergence, optimal_policy
from klpolicy.dynamics import beta_fit

from .. import _mpref as R

REFS = np.array([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
REWS = np.array([[1.0, 0.0, 0.5, 2.0], [2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 1.0, 0.3]])


def _mp_mean_reward_gap(policies, refs, rewards, log_b):
    gaps = []
    for p, q, r in zip(policies, refs, rewards, strict=True):
        star = R.optimal_policy(q, r, mp.exp(log_b))
        rr = [mp.mpf(float(v)) for v in r]
        gaps.append(
            mp.fsum(s * v for s, v in zip(star, rr))
            - mp.fsum(mp.mpf(float(a)) * v for a, v in zip(p, rr))
        )
    return mp.fsum(gaps) / len(gaps)


@pytest.mark.parametrize("beta", [0.05, 0.7, 30.0])
def test_rows_of_one_pistar_give_its_beta(beta):
    pis = optimal_policy(REFS, REWS, beta)
    assert beta_fit(pis, REFS, REWS) == pytest.approx(beta, rel=1e-9)


def test_rows_not_in_the_family_match_mpmath():
    # each row is pi* at its own beta: the common fit lies between them, at the root of the
    # mean expected-reward gap, and is the minimiser of the mean KL
    pis = np.stack(
        [optimal_policy(q, r, b) for q, r, b in zip(REFS, REWS, (0.3, 1.0, 3.0), strict=True)]
    )
    got = beta_fit(pis, REFS, REWS)
    with mp.workdps(50):
        root = mp.findroot(lambda t: _mp_mean_reward_gap(pis, REFS, REWS, t), math.log(got))
        want = float(mp.exp(root))
    assert got == pytest.approx(want, rel=1e-10)
    assert 0.3 < got < 3.0

    def mean_kl(b):
        return float(np.mean(kl_divergence(pis, optimal_policy(REFS, REWS, b))))

    assert mean_kl(got) < mean_kl(got * (1 - 1e-6)) and mean_kl(got) < mean_kl(got * (1 + 1e-6))
    # not the mean of the rows' own fits
    own = [beta_fit(p, q, r) for p, q, r in zip(pis, REFS, REWS, strict=True)]
    np.testing.assert_allclose(own, [0.3, 1.0, 3.0], rtol=1e-9)
    assert abs(got - np.mean(own)) > 0.1


def test_one_row_is_the_one_dimensional_fit():
    pi = np.array([0.1, 0.2, 0.3, 0.4])
    one = beta_fit(pi, REFS[0], REWS[0])
    assert beta_fit(pi[None], REFS[:1], REWS[:1]) == pytest.approx(one, rel=1e-13)
    # a 1-D reward and policy are every row's
    both = beta_fit(pi, np.stack([REFS[0], REFS[0]]), REWS[0])
    assert both == pytest.approx(one, rel=1e-13)


def test_the_ends_of_the_rows_fit():
    assert beta_fit(REFS, REFS, REWS) == math.inf  # the reference itself
    greedy = np.eye(4)[[3, 0, 2]]  # every row on its best answer
    assert beta_fit(greedy, REFS, REWS) == 0.0
    # one row below its reference, the others above: the mean decides
    pis = np.stack([REFS[0], optimal_policy(REFS[1], REWS[1], 0.5), REFS[2]])
    assert 0.5 < beta_fit(pis, REFS, REWS) < math.inf


def test_more_than_two_dimensions_are_refused():
    msg = "`policy` must be one row (n,) or a row per context (B, n); got shape (1, 3, 4)"
    with pytest.raises(ValueError, match=re.escape(msg)):
        beta_fit(REFS[None], REFS[None], REWS[None])
    with pytest.raises(ValueError, match="`reward` must have the same size as `ref`"):
        beta_fit(REFS, REFS, REWS[:, :3])
