"""kl_term_report / check_kl_term / `klpolicy check kl-term` on terms whose answer is known.

The expected gradient that kl_term_report differentiates with autograd is checked against
klpolicy.estimators.expected_gradient (itself checked against mpmath in
tests/estimators/test_kl_terms.py), and the verdicts against the divergences whose
gradients those are.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import klpolicy.estimators as E  # noqa: E402
from klpolicy.testing import KLTermReport, check_kl_term, kl_term_report  # noqa: E402


def k1(lp, olp, rlp):
    return lp - rlp


def k2(lp, olp, rlp):
    return 0.5 * (lp - rlp) ** 2


def k3(lp, olp, rlp):
    return torch.exp(rlp - lp) - (rlp - lp) - 1


def k3_ratio(lp, olp, rlp):
    return torch.exp(lp - olp) * k3(lp, olp, rlp)


def k3_detached(lp, olp, rlp):
    return torch.exp(lp - olp).detach() * k3(lp, olp, rlp)


def k1_in_reward(lp, olp, rlp):  # REINFORCE surrogate with the k1 penalty as the reward
    return (lp - rlp).detach() * lp


def neg_k1_in_reward(lp, olp, rlp):
    return -(lp - rlp).detach() * lp


def abs_term(lp, olp, rlp):  # E_pi[sign(l) grad log pi] = 2 grad TV(pi, ref)
    return torch.abs(lp - rlp)


def inverted_k3(lp, olp, rlp):
    ell = lp - rlp
    return torch.expm1(ell) - ell


@pytest.mark.parametrize(
    ("fn", "on", "off", "mean"),
    [
        (k1, "zero", None, "reverse_kl"),
        (k2, "reverse_kl", None, None),
        (k3, "forward_kl", None, "reverse_kl"),
        (k3_ratio, "reverse_kl", "reverse_kl", "reverse_kl"),
        (k3_detached, "forward_kl", "forward_kl", "reverse_kl"),
        (k1_in_reward, "reverse_kl", None, None),
        (neg_k1_in_reward, "-reverse_kl", None, None),
        (inverted_k3, "chi2", None, "chi2 - reverse_kl"),
        (abs_term, "tv", None, None),
    ],
)
def test_verdicts(fn, on, off, mean):
    r = kl_term_report(fn)
    assert isinstance(r, KLTermReport)
    assert (r.on_policy, r.off_policy, r.mean) == (on, off, mean)
    assert r.follows == (on if on == off else None)


@pytest.mark.parametrize("dtype", ["float32", torch.float32])
def test_float32_terms_are_judged_at_float32_resolution(dtype):
    # computed in float32, k3 still follows the forward KL and k2 the reverse KL: never
    # "biased" because of rounding, never the other KL
    assert kl_term_report(k3, dtype=dtype).on_policy == "forward_kl"
    assert kl_term_report(k2, dtype=dtype).on_policy == "reverse_kl"
    assert kl_term_report(k3_ratio, dtype=dtype).follows == "reverse_kl"
    # a float32 term handed float64 inputs (.float() inside) is detected as float32
    r = kl_term_report(lambda lp, olp, rlp: k2(lp.float(), olp.float(), rlp.float()))
    assert (r.on_policy, r.dtype) == ("reverse_kl", "float32")
    # and at float64 resolution the float32 rounding would have been a verdict
    assert r.residuals["on_policy"]["reverse_kl"] <= 1


def _float32_inside(fn, clamp=False):
    """fn as OpenRLHF/AReaL write it: the log-probabilities cast with .float() (optionally
    OpenRLHF's clamp to [-10, 10], inactive on the report's draws)."""

    def term(lp, olp, rlp):
        out = fn(lp.float(), olp.float(), rlp.float())
        return out.clamp(min=-10, max=10) if clamp else out

    return term


@pytest.mark.parametrize("clamp", [False, True])
@pytest.mark.parametrize("how", ["inside", "dtype"])
def test_float32_terms_estimate_and_train_to_what_float64_ones_do(how, clamp):
    # the means of k1 and k3 are the KL (> 0 at every draw) also when the term computes in
    # float32: not "zero" (the mean's tolerance counted float32's rounding twice); and the
    # fixed points are found to float32's resolution: k2's is pi* (closed form), k3's the
    # forward-KL optimum (estimators.fixed_point, float64), as for the float64 terms
    from klpolicy import optimal_policy

    def report(fn):
        if how == "inside":
            return kl_term_report(_float32_inside(fn, clamp))
        if clamp:
            return kl_term_report(
                lambda lp, olp, rlp: fn(lp, olp, rlp).clamp(-10, 10), dtype="float32"
            )
        return kl_term_report(fn, dtype="float32")

    r1, r2, r3 = report(k1), report(k2), report(k3)
    assert (r1.dtype, r2.dtype, r3.dtype) == ("float32",) * 3
    assert (r1.mean, r2.mean, r3.mean) == ("reverse_kl", None, "reverse_kl")
    assert "estimates:  reverse_kl" in str(r3) and "estimates:  none of the divergences" in str(r2)
    assert r1.fixed_point is None  # k1 in the loss: no gradient on-policy, greedy
    np.testing.assert_allclose(r2.fixed_point, optimal_policy(r2.ref, r2.reward, 0.5), atol=1e-6)
    want = E.fixed_point(r3.ref, r3.reward, 0.5, estimator="k3", placement="loss")
    np.testing.assert_allclose(r3.fixed_point, want, atol=1e-6)


def test_bfloat16_is_no_verdict():
    # bfloat16 rounding is larger than the differences between divergences: unresolved
    r = kl_term_report(k3, dtype="bfloat16")
    assert (r.on_policy, r.off_policy, r.mean, r.fixed_point) == (None, None, None, None)
    assert "forward_kl" in r.unresolved["on_policy"] and "zero" in r.unresolved["on_policy"]
    assert str(r).startswith("on-policy:  unresolved at bfloat16")
    check_kl_term(k3, expect="forward_kl", dtype="bfloat16")  # consistent: no failure


def test_forward_and_reverse_kl_are_far_apart():
    # the residual of the wrong KL is many tolerances away: rounding cannot swap them
    for fn, right, wrong in [(k3, "forward_kl", "reverse_kl"), (k2, "reverse_kl", "forward_kl")]:
        for dtype in ("float64", "float32"):
            res = kl_term_report(fn, dtype=dtype).residuals["on_policy"]
            assert res[right] <= 1 and res[wrong] > 100


def test_autograd_gradient_is_expected_gradient():
    # the report's exact gradient of k3 on-policy is expected_gradient's KL part
    rng = np.random.default_rng(1)
    th, ref = rng.normal(size=5), rng.dirichlet([2.0] * 5)
    rlp = torch.log(torch.tensor(ref))
    for fn, est in [(k3, "k3"), (k2, "k2"), (k1, "k1")]:
        t = torch.tensor(th, requires_grad=True)
        lp = torch.log_softmax(t, -1)
        loss = torch.sum(torch.exp(lp.detach()) * fn(lp, lp.detach(), rlp))
        (g,) = torch.autograd.grad(loss, t)
        want = -E.expected_gradient(th, ref, np.zeros(5), 1.0, estimator=est, placement="loss")
        np.testing.assert_allclose(g.numpy(), want, atol=1e-15)


def test_sequence_level_per_token_terms():
    r = kl_term_report(k3, level="sequence")
    assert r.on_policy == "token:forward_kl" and r.fixed_point is None

    # summed per-token k1 as one sequence-level reward follows the sequence's reverse KL
    def seq_k1_reward(lp, olp, rlp):
        return ((lp - rlp).sum(1).detach() * lp.sum(1))[:, None].expand(-1, lp.shape[1]) / 3

    r = kl_term_report(seq_k1_reward, level="sequence")
    assert r.on_policy == "reverse_kl"
    r = kl_term_report(k2, level="sequence", reduction="mean")
    assert r.on_policy == "token:reverse_kl" and r.scale == pytest.approx(1 / 3)


def test_fixed_point_is_the_divergence_optimum():
    from klpolicy import optimal_policy

    r = kl_term_report(k3_ratio, beta=0.7)
    np.testing.assert_allclose(r.fixed_point, optimal_policy(r.ref, r.reward, 0.7), atol=1e-10)
    r = kl_term_report(k3, beta=0.7)
    want = E.fixed_point(r.ref, r.reward, 0.7, estimator="k3", placement="loss")
    np.testing.assert_allclose(r.fixed_point, want, atol=1e-10)


def test_check_kl_term_messages():
    check_kl_term(k2, expect="reverse_kl", regime="on_policy")
    check_kl_term(k3_ratio, expect="reverse_kl")
    with pytest.raises(AssertionError) as info:
        check_kl_term(k3, expect="reverse_kl")
    msg = str(info.value)
    assert msg.startswith(
        "check_kl_term(k3): on-policy its expected gradient follows the gradient of "
        "forward_kl, not reverse_kl."
    )
    assert "Counterexample: pi=[" in msg and len(msg.splitlines()) == 2
    # a 3-outcome policy: the smallest on which the gradients are not all parallel
    assert msg.split("pi=[")[1].split("]")[0].count(",") == 2
    with pytest.raises(AssertionError, match=r"off-policy .* follows no divergence's gradient"):
        check_kl_term(
            k3_detached.__wrapped__ if hasattr(k3_detached, "__wrapped__") else k2,
            expect="reverse_kl",
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"level": "word"}, r"`level` must be one of"),
        ({"reduction": "max"}, r"`reduction` must be one of"),
        ({"dtype": "int8"}, r"`dtype` must be"),
        ({"draws": 1}, r"`draws` must be an integer >= 2"),
        ({"outcomes": 1}, r"`outcomes` must be an integer >= 2"),
        ({"beta": 0.0}, r"`beta` must be"),
        ({"reward": [1.0, 2.0]}, r"`reward` must have shape \(6,\)"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        kl_term_report(k3, **kwargs)


def test_bad_terms_and_expect():
    with pytest.raises(ValueError, match=r"`fn` must be callable"):
        kl_term_report(3)
    with pytest.raises(ValueError, match=r"`fn` must return a torch tensor"):
        kl_term_report(lambda a, b, c: 1.0)
    with pytest.raises(ValueError, match=r"`fn` must return one term per sample, shape \(6,\)"):
        kl_term_report(lambda a, b, c: a.sum())
    with pytest.raises(ValueError, match=r"`expect` must be a divergence name"):
        check_kl_term(k3, expect="kl")
    with pytest.raises(ValueError, match=r"`regime` must be one of"):
        check_kl_term(k3, expect="forward_kl", regime="sometimes")


def _cli(tmp_path, monkeypatch, capsys, *args):
    from klpolicy.testing.cli import run_check

    (tmp_path / "myterm.py").write_text(
        textwrap.dedent(
            """
            import torch
            def k3(logp, old_logp, ref_logp):
                return torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
            def pick(logp, old_logp, ref_logp, kind="k3"):
                if kind == "k2":
                    return 0.5 * (logp - ref_logp) ** 2
                return k3(logp, old_logp, ref_logp)
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = run_check(["kl-term", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli(tmp_path, monkeypatch, capsys):
    run = lambda *a: _cli(tmp_path, monkeypatch, capsys, *a)  # noqa: E731
    code, out, err = run("myterm:k3", "--expect", "forward_kl", "--regime", "on_policy")
    assert code == 0, err
    assert out.splitlines()[0] == "on-policy:  follows forward_kl"
    assert out.splitlines()[-1] == "check_kl_term(k3): follows forward_kl"
    code, out, _ = run("myterm:k3", "--expect", "reverse_kl")
    assert code == 1 and "follows the gradient of forward_kl, not reverse_kl" in out
    code, out, err = run(
        "myterm:pick", "--option", "kind=k2", "--expect", "reverse_kl", "--regime", "on_policy"
    )
    assert code == 0, out + err
    code, out, err = run("myterm:k3", "--expect", "kl")
    assert code == 2 and "`expect` must be a divergence name" in err and out == ""
    code, out, err = run("myterm:k3", "--option", "kind=k2")  # k3 takes no `kind`
    assert code == 2
