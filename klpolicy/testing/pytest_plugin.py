"""pytest plugin: the ``klpolicy_check`` fixture, a ``klpolicy`` marker and two options.

Registered as a ``pytest11`` entry point (``klpolicy = "klpolicy.testing.pytest_plugin"``),
so it is active wherever klpolicy is installed; without the entry point, enable it
with ``pytest -p klpolicy.testing.pytest_plugin`` or
``pytest_plugins = ["klpolicy.testing.pytest_plugin"]`` in a top-level conftest.py.
This module imports neither hypothesis nor the checks until a test asks for
them, so it costs nothing to test sessions that do not use it.

Usage in someone's test file::

    import pytest
    from scipy.special import rel_entr

    def test_my_kl(klpolicy_check):
        klpolicy_check.kl_divergence(lambda p, q: rel_entr(p, q).sum())

    @pytest.mark.klpolicy(max_examples=500, supports_zero_beta=True)
    def test_my_policy(klpolicy_check):
        klpolicy_check.optimal_policy(my_policy)

The fixture's methods are the ``check_*`` functions without the prefix
(``optimal_policy``, ``soft_value``, ``kl_divergence``, ``kl_estimator``,
``dpo_loss``, ``kl_controller``). Their options come, in increasing priority,
from the command line (``--klpolicy-max-examples``, ``--klpolicy-rtol``), from
the test's ``@pytest.mark.klpolicy(...)`` keywords, and from the call itself.
Keywords a check does not take are ignored for that check.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

_CHECKS = (
    "optimal_policy",
    "soft_value",
    "kl_divergence",
    "kl_estimator",
    "dpo_loss",
    "kl_controller",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("klpolicy", "klpolicy conformance checks")
    group.addoption(
        "--klpolicy-max-examples",
        type=int,
        default=None,
        help="hypothesis examples per klpolicy check (default: each check's own, 100)",
    )
    group.addoption(
        "--klpolicy-rtol",
        type=float,
        default=None,
        help="relative tolerance for klpolicy checks (default: each check's own)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "klpolicy(**options): options (max_examples, rtol, supports_*) for the "
        "klpolicy_check fixture in this test",
    )


class KLPolicyChecks:
    """The ``check_*`` suites with options from the command line and the ``klpolicy`` marker."""

    def __init__(self, defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)

    def __getattr__(self, name: str):
        if name not in _CHECKS:
            raise AttributeError(
                f"klpolicy_check has no check {name!r}; available: {', '.join(_CHECKS)}"
            )
        try:
            from . import checks
        except ImportError as exc:  # hypothesis missing
            pytest.fail(
                f"klpolicy_check needs hypothesis ({exc}); install it with "
                "pip install 'klpolicy[testing]'",
                pytrace=False,
            )
        check = getattr(checks, "check_" + name)
        accepted = inspect.signature(check).parameters

        def run_check(*args: Any, **kwargs: Any) -> None:
            options = {k: v for k, v in self.defaults.items() if k in accepted}
            options.update(kwargs)
            check(*args, **options)

        run_check.__name__ = "check_" + name
        run_check.__doc__ = check.__doc__
        return run_check

    def __dir__(self):
        return [*super().__dir__(), *_CHECKS]


@pytest.fixture
def klpolicy_check(request: pytest.FixtureRequest) -> KLPolicyChecks:
    """The klpolicy conformance suites, configured for this test.

    ``klpolicy_check.kl_divergence(fn)`` runs
    :func:`klpolicy.testing.check_kl_divergence` and so on; a failure is an
    ``AssertionError`` naming the smallest falsifying input.
    """
    config = request.config
    defaults: dict[str, Any] = {}
    if config.getoption("--klpolicy-max-examples") is not None:
        defaults["max_examples"] = config.getoption("--klpolicy-max-examples")
    if config.getoption("--klpolicy-rtol") is not None:
        defaults["rtol"] = config.getoption("--klpolicy-rtol")
    for mark in reversed(list(request.node.iter_markers("klpolicy"))):
        if mark.args:
            raise pytest.UsageError("@pytest.mark.klpolicy takes keyword options only")
        defaults.update(mark.kwargs)
    return KLPolicyChecks(defaults)
