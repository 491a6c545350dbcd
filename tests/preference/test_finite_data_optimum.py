"""The DPO optimum of a finite dataset whose pairs are seen one way only, against mpmath.

Finite data (counts ``C[winner, loser]``) often has a pair seen one way only, ``C_ij > 0 =
C_ji``: its own log-odds are infinite, yet when the comparisons are strongly connected the
dataset's mean loss has a finite minimiser. The float solver's start once set such a pair
at log-odds 700 and stalled on the loss's flat tails (a loss of 15.8 for a minimum of 0.636).
"""

from __future__ import annotations

import numpy as np
import pytest

from klpolicy.preference import dpo_optimum, empirical_dpo_loss, population_optimum

from .._mpref import assert_mp_close
from .._mpref.preference import finite_data_dpo_optimum

# 256 pairs drawn from the reference below, labelled by Bradley-Terry on r = (0, 0, 0, 1,
# 0.5, 0.25, 0) (sample_preference_counts(bradley_terry(r), ref, 256, rng=0)); outcome 3
# beats 0, 2, 5 and 6 every time they meet, but loses to 1 and 4 now and then.
COUNTS = np.array(
    [
        [2, 8, 0, 0, 2, 3, 2],
        [12, 76, 14, 2, 10, 6, 13],
        [2, 9, 1, 0, 0, 2, 2],
        [2, 13, 8, 4, 2, 2, 3],
        [1, 9, 3, 1, 1, 2, 4],
        [3, 8, 2, 0, 1, 1, 1],
        [3, 11, 2, 0, 2, 1, 0],
    ]
)
REF = np.array([0.0773, 0.514, 0.0876, 0.0787, 0.085, 0.0766, 0.0807])
REF = REF / REF.sum()


def _as_population(c):
    # P_ij = C_ij / (C_ij + C_ji) (1/2 where never compared), mu = (C + C^T) / 2N, so that
    # (mu_ij + mu_ji) P_ij = C_ij / N: the population loss is the dataset's mean loss
    seen = c + c.T
    p = np.where(seen > 0, c / np.maximum(seen, 1), 0.5)
    np.fill_diagonal(p, 0.5)
    return p, seen / (2.0 * c.sum())


@pytest.mark.mp_dps(40)
@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_one_way_pairs_in_a_connected_dataset(beta):
    p, mu = _as_population(COUNTS)
    assert ((COUNTS > 0) & (COUNTS.T == 0)).any()  # pairs seen one way only
    got = dpo_optimum(REF, p, beta, mu=mu)
    assert_mp_close(
        got, finite_data_dpo_optimum(REF, COUNTS, beta), rtol=1e-10, what="finite-data DPO"
    )
    np.testing.assert_array_equal(
        population_optimum(REF, p, beta, loss="sigmoid", mu=mu), got
    )  # the family's sigmoid row is the same code path
    # and no other policy of the tilted family does better on the data
    loss = empirical_dpo_loss(got, REF, COUNTS, beta)
    for t in (0.9, 1.1):
        other = REF * (got / REF) ** t
        assert empirical_dpo_loss(other / other.sum(), REF, COUNTS, beta) > loss
