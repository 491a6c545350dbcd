"""Shared pytest configuration: hypothesis profiles and common helpers.

The ``ci`` profile (selected when the environment variable ``CI`` is set, or
with ``--hypothesis-profile=ci``) is derandomised, so that a CI run is
reproducible; the ``dev`` profile explores with fresh random seeds.
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def rng():
    """A seeded generator: tests never touch the global numpy RNG."""
    return np.random.default_rng(20261130)


@pytest.fixture(autouse=True)
def _numpy_print_and_error_state():
    """Each test leaves numpy's print options and error state as it found them.

    Tutorial code run by the tests sets ``np.set_printoptions(precision=4)``; leaked into
    a worker, it changed what later doctests print (an xdist scheduling made 8 of them fail).
    """
    with np.printoptions(**np.get_printoptions()), np.errstate(**np.geterr()):
        yield


@pytest.fixture(autouse=True)
def _mp_working_precision(request):
    """mpmath's working precision for one test: 50 digits, or its ``mp_dps(n)`` marker.

    Set here, for the test alone, so that no module's import changes another's references
    (the references of ``tests/_mpref`` that need more digits take them themselves).
    """
    try:
        import mpmath
    except ImportError:  # the tests that need it import it and are skipped without it
        yield
        return
    marker = request.node.get_closest_marker("mp_dps")
    with mpmath.workdps(marker.args[0] if marker else 50):
        yield
