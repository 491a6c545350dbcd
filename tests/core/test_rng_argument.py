"""One check of every rng= / seed= argument (issue 40 item 18): numpy's own message for a bad
seed ("expected non-negative integer") named no argument."""

import numpy as np
import pytest

import klpolicy
from klpolicy.core.internal import validation as V

TREE = [np.array([0.5, 0.5])]
CALLS = {
    "sequences.sample": lambda rng: klpolicy.sequences.sample(TREE, 3, rng),
    "sequences.sampled_kl": lambda rng: klpolicy.sequences.sampled_kl(TREE, TREE, 3, rng=rng),
    "estimators.sample_estimates": lambda rng: klpolicy.estimators.sample_estimates(
        [0.5, 0.5], [0.4, 0.6], "k3", 4, rng=rng
    ),
    "preference.sample_preference_counts": lambda rng: klpolicy.preference.sample_preference_counts(
        [[0.5, 0.7], [0.3, 0.5]], [0.5, 0.5], 10, rng=rng
    ),
}


@pytest.mark.parametrize("bad", [-1, 1.5, "x", True, 2**128])
@pytest.mark.parametrize("name", list(CALLS))
def test_a_bad_rng_is_refused_by_name(name, bad):
    with pytest.raises(ValueError, match=r"^`rng` must be None, an integer seed"):
        CALLS[name](bad)


@pytest.mark.parametrize(
    "good", [None, 0, 7, np.int64(3), np.random.default_rng(1), np.random.SeedSequence(5)]
)
def test_good_rngs_are_generators(good):
    assert isinstance(V.as_rng("rng", good), np.random.Generator)


def test_a_seed_gives_the_same_draws_as_numpy():
    a = V.as_rng("rng", 11).random(3)
    np.testing.assert_array_equal(a, np.random.default_rng(11).random(3))
