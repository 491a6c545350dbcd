"""Tests for klpolicy.testing.check_pair_loss: correct losses pass, mutants are caught by name."""

import re

import numpy as np
import pytest

from klpolicy.preference import LOSSES
from klpolicy.testing import check_pair_loss

from .test_losses_registry import _trl, _trl_kwargs

torch = pytest.importorskip("torch")


def _torch_trl(name, **opts):
    def fn(pc, pr, rc, rr, beta):
        t = [torch.tensor(v) for v in (pc, pr, rc, rr)]
        return _trl(name, *t, beta, **_trl_kwargs(name, opts)).numpy()

    fn.__name__ = f"trl_{name}"
    return fn


def _torch_trl_grad(name, **opts):
    def grad(pc, pr, rc, rr, beta):
        t = [torch.tensor(v, requires_grad=True) for v in (pc, pr, rc, rr)]
        _trl(name, *t, beta, **_trl_kwargs(name, opts)).sum().backward()
        return [x.grad.numpy() for x in t]

    return grad


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, opts",
    [
        ("sigmoid", {"label_smoothing": 0.1}),
        ("hinge", {}),
        ("ipo", {}),
        ("robust", {"label_smoothing": 0.2}),
        ("nca_pair", {}),
        ("bco_pair", {"delta": 0.3}),
        ("sppo_hard", {}),
        ("aot_pair", {}),
        ("apo_down", {}),
    ],
)
def test_trl_transcriptions_pass(name, opts):
    fn = _torch_trl(name, **opts)
    check_pair_loss(fn, name, grad=_torch_trl_grad(name, **opts), max_examples=25, **opts)
    assert check_pair_loss(fn, name, max_examples=5, **opts) is None


def _expect(fn, name, sentence, **kw):
    with pytest.raises(AssertionError) as e:
        check_pair_loss(fn, name, max_examples=25, **kw)
    assert sentence in str(e.value)
    assert "Falsifying input: pc=" in str(e.value) or "At: pc=" in str(e.value)
    return str(e.value)


def test_mutants_are_caught_with_a_diagnosis():
    def ipo_one_over_beta(pc, pr, rc, rr, beta):
        return ((pc - pr) - (rc - rr) - 1 / beta) ** 2

    _expect(ipo_one_over_beta, "ipo", "its target margin is 1/beta; IPO regresses")

    def hinge_no_margin(pc, pr, rc, rr, beta):
        return np.maximum(0.0, -beta * ((pc - pr) - (rc - rr)))

    _expect(hinge_no_margin, "hinge", "it has no margin: max(0, -beta h)")

    def hinge_beta_margin(pc, pr, rc, rr, beta):
        return np.maximum(0.0, beta - beta * ((pc - pr) - (rc - rr)))

    _expect(hinge_beta_margin, "hinge", "its margin is beta, not 1")

    def sigmoid_swapped(pc, pr, rc, rr, beta):
        return np.logaddexp(0.0, beta * ((pc - rc) - (pr - rr)))

    _expect(sigmoid_swapped, "sigmoid", "it has chosen and rejected swapped")

    def nca_no_ref(pc, pr, rc, rr, beta):
        return LOSSES["nca_pair"].value(pc, pr, 0 * rc, 0 * rr, beta)

    _expect(nca_no_ref, "nca_pair", "it ignores the reference log-probabilities")

    def cdpo_ignores_smoothing(pc, pr, rc, rr, beta):
        return np.logaddexp(0.0, -beta * ((pc - rc) - (pr - rr)))

    _expect(
        cdpo_ignores_smoothing,
        "sigmoid",
        "it ignores the option label_smoothing=0.2",
        label_smoothing=0.2,
    )

    def sppo_divides(pc, pr, rc, rr, beta):
        return LOSSES["sppo_hard"].value(pc, pr, rc, rr, 1 / beta)

    _expect(sppo_divides, "sppo_hard", "it uses 1/beta where the loss has beta")


DISCOPOP_NAN_VERDICT = (
    "check_pair_loss[discopop](trl_discopop): it returns nan where the loss is finite: at x = "
    "beta h = -710.0 its term exp(-x) * sigmoid(x / tau) (tau = 0.05) is inf * 0, since "
    "exp(-x) overflows (below x = -709.8 in float64, -88.7 in float32) while sigmoid(x / tau) "
    "underflows to 0. Evaluate the term in log space, exp(-x + log sigmoid(x / tau)) = "
    "exp(-x - softplus(-x / tau)) (np.exp(-x - np.logaddexp(0, -x / tau))), which is finite, "
    "and -log sigmoid(x) as softplus(-x).\n"
    "Falsifying input: pc=[0.0], pr=[0.0], rc=[0.0], rr=[-710.0], beta=1.0\n"
    "expected [710.0], got [nan]"
)


@pytest.mark.slow
def test_trl_discopop_overflows_at_large_negative_margins():
    # TRL's discopop multiplies exp(-logits) by sigmoid(logits / tau): inf * 0 = nan once
    # beta * logits < -709.8 (float64), where the loss itself is finite (~ -beta * logits);
    # the verdict names the term and its stable form
    with pytest.raises(AssertionError) as e:
        check_pair_loss(_torch_trl("discopop"), "discopop", max_examples=5)
    # where hypothesis's shrinking stops (x = -710 or -1000) varies between processes: the
    # sentence is the quoted one at that x, and the input is one where exp(-x) overflows
    sentence, falsifying, detail = str(e.value).split("\n")
    x = float(re.search(r"at x = beta h = (\S+) its term", sentence)[1])
    assert x < -709.78
    want = DISCOPOP_NAN_VERDICT.split("\n")[0].replace("-710.0", repr(x))
    assert sentence == want
    assert falsifying.startswith("Falsifying input: pc=")
    assert detail == f"expected [{-x!r}], got [nan]"


@pytest.mark.slow
def test_discopop_in_the_stable_form_of_the_hint_passes():
    def discopop_stable(pc, pr, rc, rr, beta, tau=0.05):
        x = beta * ((pc - pr) - (rc - rr))
        m_minus = np.exp(-np.logaddexp(0, x / tau))  # 1 - sigmoid(x / tau) = sigmoid(-x / tau)
        return np.logaddexp(0, -x) * m_minus + np.exp(-x - np.logaddexp(0, -x / tau))

    check_pair_loss(discopop_stable, "discopop", max_examples=25)

    # the hint is about that term: other rows keep the general sentence
    def sigmoid_overflowing(pc, pr, rc, rr, beta):
        x = beta * ((pc - pr) - (rc - rr))
        return np.log1p(np.exp(-x))

    msg = _expect(sigmoid_overflowing, "sigmoid", "it returns inf/nan where the loss is finite")
    assert "evaluate log-sigmoids as softplus (np.logaddexp(0, -x))" in msg


def test_gradient_mutants_are_caught():
    def grad_wrong_sign(pc, pr, rc, rr, beta):
        g = LOSSES["ipo"].gradient(pc, pr, rc, rr, beta)
        return [-g[0], g[1], g[2], g[3]]

    with pytest.raises(AssertionError, match="its gradient with respect to pc differs"):
        check_pair_loss(LOSSES["ipo"].value, "ipo", grad=grad_wrong_sign, max_examples=10)

    # a loss whose values are right on the drawn inputs but whose slope is not: a hinge that
    # is flat (a straight-through clamp) has derivative 0 where SLiC's is -beta
    class Hinge:
        __name__ = "hinge_stop_gradient"

        def __call__(self, pc, pr, rc, rr, beta):
            h = (pc - pr) - (rc - rr)
            return np.maximum(0.0, 1 - beta * np.round(h, 3))

    with pytest.raises(AssertionError, match=r"its derivative with respect to pc\[0\]"):
        check_pair_loss(Hinge(), "hinge", rtol=1e-2, atol=1e-2, max_examples=5)


def test_bad_options():
    f = LOSSES["ipo"].value
    with pytest.raises(ValueError, match="`loss` must be one of sigmoid"):
        check_pair_loss(f, "dpo")
    with pytest.raises(ValueError, match="`loss` 'ipo' has no option `tau`"):
        check_pair_loss(f, "ipo", tau=1.0)
    with pytest.raises(ValueError, match="`reduction` must be"):
        check_pair_loss(f, "ipo", reduction="avg")


def test_docs_quote_the_discopop_verdict_and_the_label_smoothing_meaning():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    assert f"AssertionError: {DISCOPOP_NAN_VERDICT}" in doc
    assert "TRL 1.x ignores `label_smoothing` for\n`sigmoid`" in doc
    # where a user of the registry looks: the row's notes
    assert "TRL 1.x ignores label_smoothing for sigmoid" in LOSSES["sigmoid"].notes
