"""The check suites' limits and how an interrupted run is reported."""

import pytest
from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition

from klpolicy import kl_divergence
from klpolicy.preference import dpo_loss
from klpolicy.testing import check_kl_divergence, check_pair_loss
from klpolicy.testing._runner import MAX_EXAMPLES, _interruption


@pytest.mark.parametrize("n", [2**63, MAX_EXAMPLES + 1])
def test_max_examples_is_capped(n):
    # 2**63 examples were accepted and ran until killed
    msg = f"^`max_examples` must be at most 1,000,000; got {n}$"
    with pytest.raises(ValueError, match=msg):
        check_kl_divergence(kl_divergence, max_examples=n)


def test_a_timeout_during_a_run_is_reported_as_a_timeout():
    # a one-off TimeoutError in the checked function was reported as "it gives different
    # results on the same input ... (FlakyFailure)"
    calls = [0]

    def once(pc, pr, rc, rr, beta, **kw):
        calls[0] += 1
        if calls[0] == 30:
            raise TimeoutError("took too long")
        return dpo_loss(pc, pr, rc, rr, beta)

    with pytest.raises(TimeoutError, match=r"^took too long$"):
        check_pair_loss(once, "sigmoid", max_examples=50)


def test_a_timeout_while_drawing_is_not_a_flaky_strategy():
    # a timeout (e.g. a SIGALRM handler) raised while hypothesis draws an example shows as
    # FlakyStrategyDefinition caused by the TimeoutError: the cause is what is reported
    timeout = TimeoutError("timed out")
    try:
        try:
            raise timeout
        except TimeoutError as inner:
            raise FlakyStrategyDefinition("Inconsistent data generation!") from inner
    except FlakyStrategyDefinition as exc:
        assert _interruption(exc) is timeout
    assert _interruption(FlakyFailure("flaky", [TimeoutError("t")])).args == ("t",)
    # a function that really is flaky is still reported as such
    assert _interruption(FlakyFailure("flaky", [AssertionError("a")])) is None
    assert _interruption(FlakyStrategyDefinition("no cause")) is None
