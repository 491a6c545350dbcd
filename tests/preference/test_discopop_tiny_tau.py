"""population_optimum(loss="discopop") at a tau whose 1/tau^2 leaves float64 (issue 40, 18).

``tau = 1e-320`` reached numpy's "Eigenvalues did not converge" (LinAlgError) from a Hessian
of ``inf - inf``; it is refused by name below 2**-510, and solved at and above it. On this
problem the optimal margins are away from 0, where ``sigmoid(x / tau)`` is exactly 0 or 1
for every tau below 1e-3: the optimum at 2**-510 is the one at 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

from klpolicy.preference import population_optimum

REF = [0.3, 0.3, 0.4]
P = np.array([[0.5, 0.7, 0.2], [0.3, 0.5, 0.6], [0.8, 0.4, 0.5]])


@pytest.mark.parametrize("tau", [1e-160, 1e-320, 5e-324])
def test_tau_below_the_float64_curvature_is_refused_by_name(tau):
    with pytest.raises(ValueError, match=rf"^`tau` = {tau!r} is below 2.98e-154 \(2\*\*-510\)"):
        population_optimum(REF, P, 1.0, loss="discopop", tau=tau)


def test_tau_at_the_limit_is_solved():
    at = population_optimum(REF, P, 1.0, loss="discopop", tau=2.0**-510)
    np.testing.assert_allclose(
        at, population_optimum(REF, P, 1.0, loss="discopop", tau=1e-6), rtol=1e-12
    )
    assert np.all(np.isfinite(at)) and abs(at.sum() - 1) < 1e-15
