"""Tests for klpolicy.preference.LOSSES: each row against TRL's formulas, gradients, options."""

import math

import mpmath as mp
import numpy as np
import pytest

from klpolicy.preference import LOSSES, dpo_loss, dpo_loss_grad, ipo_loss, ipo_loss_grad

from ._mp_optima import loss_function

torch = pytest.importorskip("torch")
F = torch.nn.functional

NAMES = [
    "sigmoid",
    "hinge",
    "ipo",
    "exo_pair",
    "nca_pair",
    "robust",
    "bco_pair",
    "sppo_hard",
    "aot",
    "aot_pair",
    "aot_unpaired",
    "apo_zero",
    "apo_down",
    "discopop",
]
# rows not transcribed from TRL's per-pair block (checked in tests/preference/test_fdpo.py):
# sft is a TRL loss_type but TRL computes it from token logits, chi_po is not a TRL loss
NOT_TRL = ["sft", "sigmoid_norm", "chi_po"]  # not in TRL at 9d58faa


def _trl(loss_type, pc, pr, rc, rr, beta, label_smoothing=0.0, delta=0.0, tau=0.05):
    """Transcription of TRL's DPOTrainer.dpo_loss branches (trl/trainer/dpo_trainer.py at
    commit 9d58faa), written out here independently of klpolicy, in float64 torch."""
    chosen_logratios = pc - rc
    rejected_logratios = pr - rr
    logits = (pc - pr) - (rc - rr)
    ls = label_smoothing
    if loss_type == "sigmoid":
        return -F.logsigmoid(beta * logits) * (1 - ls) - F.logsigmoid(-beta * logits) * ls
    if loss_type == "robust":
        return (-F.logsigmoid(beta * logits) * (1 - ls) + F.logsigmoid(-beta * logits) * ls) / (
            1 - 2 * ls
        )
    if loss_type == "exo_pair":
        ls = ls or 1e-3
        return (beta * logits).sigmoid() * (F.logsigmoid(beta * logits) - math.log(1 - ls)) + (
            -beta * logits
        ).sigmoid() * (F.logsigmoid(-beta * logits) - math.log(ls))
    if loss_type == "hinge":
        return torch.relu(1 - beta * logits)
    if loss_type == "ipo":
        return (logits - 1 / (2 * beta)) ** 2
    if loss_type == "bco_pair":
        return -F.logsigmoid(beta * chosen_logratios - delta) - F.logsigmoid(
            -(beta * rejected_logratios - delta)
        )
    if loss_type == "sppo_hard":
        return (chosen_logratios - 0.5 / beta) ** 2 + (rejected_logratios + 0.5 / beta) ** 2
    if loss_type == "nca_pair":
        cr, rjr = chosen_logratios * beta, rejected_logratios * beta
        return -F.logsigmoid(cr) - 0.5 * F.logsigmoid(-cr) - 0.5 * F.logsigmoid(-rjr)
    if loss_type in ("aot_pair", "aot_unpaired", "aot"):
        if loss_type in ("aot_pair", "aot_unpaired"):
            left, right = chosen_logratios, rejected_logratios
        else:
            left, right = pc - pr, rc - rr
        d = torch.sort(left, dim=0)[0] - torch.sort(right, dim=0)[0]
        return -F.logsigmoid(beta * d) * (1 - ls) - F.logsigmoid(-beta * d) * ls
    if loss_type == "apo_zero":
        return 1 - F.sigmoid(beta * chosen_logratios) + F.sigmoid(beta * rejected_logratios)
    if loss_type == "apo_down":
        return (
            F.sigmoid(beta * chosen_logratios)
            + 1
            - F.sigmoid(beta * (chosen_logratios - rejected_logratios))
        )
    if loss_type == "discopop":
        x = logits * beta
        m = torch.sigmoid(x / tau)
        return -F.logsigmoid(x) * (1 - m) + torch.exp(-x) * m
    raise AssertionError(loss_type)


OPTIONS = {
    "sigmoid": [{}, {"label_smoothing": 0.2}],
    "robust": [{}, {"label_smoothing": 0.15}],
    "exo_pair": [{}, {"epsilon": 0.1}],
    "bco_pair": [{}, {"delta": 0.3}],
    "aot": [{}, {"label_smoothing": 0.1}],
    "aot_pair": [{}, {"label_smoothing": 0.1}],
    "aot_unpaired": [{}, {"label_smoothing": 0.1}],
    "discopop": [{}, {"tau": 0.5}],
}


def _trl_kwargs(name, opts):
    if name == "exo_pair":
        return {"label_smoothing": opts.get("epsilon", 0.0)}
    return dict(opts)


def test_registry_lists_trl_loss_types_with_references():
    assert list(LOSSES) == NAMES + NOT_TRL
    for name, row in LOSSES.items():
        assert row.name == name
        assert "arXiv:" in row.reference
        assert row.batch_dependent == (name in ("aot", "aot_pair", "aot_unpaired"))
    margin = {n for n, r in LOSSES.items() if r.margin_only}
    assert margin == {"sigmoid", "hinge", "ipo", "exo_pair", "robust", "discopop"}
    with pytest.raises(TypeError):
        LOSSES["new"] = LOSSES["sigmoid"]  # read-only mapping
    with pytest.raises(AttributeError):
        LOSSES["sigmoid"].name = "x"  # frozen rows


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("beta", [0.1, 0.7, 3.0])
def test_values_and_gradients_match_trl_in_torch(name, beta, rng):
    row = LOSSES[name]
    for opts in OPTIONS.get(name, [{}]):
        x = rng.normal(size=(4, 9)) * 2 - 3
        ts = [torch.tensor(v, requires_grad=True) for v in x]
        ref_loss = _trl(name, *ts, beta, **_trl_kwargs(name, opts))
        ref_loss.sum().backward()
        got = row.value(*x, beta, **opts)
        np.testing.assert_allclose(got, ref_loss.detach().numpy(), rtol=1e-13, atol=1e-14)
        g = row.gradient(*x, beta, **opts)
        for field, t in zip(g, ts, strict=True):
            np.testing.assert_allclose(field, t.grad.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", [n for n in NAMES if n != "hinge"])
def test_gradients_match_central_differences(name, rng):
    row = LOSSES[name]
    x = rng.normal(size=(4, 6))
    beta, step = 0.8, 1e-6
    g = row.gradient(*x, beta)
    for k in range(4):
        up, dn = x.copy(), x.copy()
        up[k] += step
        dn[k] -= step
        # the sum's derivative with respect to each element (sorting losses couple the batch)
        fd = np.array(
            [
                (
                    row.value(*_bump(x, k, i, step), beta).sum()
                    - row.value(*_bump(x, k, i, -step), beta).sum()
                )
                / (2 * step)
                for i in range(x.shape[1])
            ]
        )
        np.testing.assert_allclose(g[k], fd, rtol=1e-6, atol=1e-8)


def _bump(x, k, i, s):
    y = x.copy()
    y[k, i] += s
    return y


@pytest.mark.parametrize("x", [-40.0, -3.0, -0.01, 0.0, 0.3, 5.0, 30.0, 700.0])
def test_discopop_and_exo_against_mpmath(x):
    # mpmath recipe: phi from its definition (tests/preference/_mp_optima.py's
    # loss_function), evaluated directly at 60 digits
    with mp.workdps(60):
        for tau in (0.05, 0.5, 2.0):
            got = float(LOSSES["discopop"].value(x, 0.0, 0.0, 0.0, 1.0, tau=tau))
            assert got == pytest.approx(
                float(loss_function("discopop", {"tau": tau})(mp.mpf(x))), rel=1e-13, abs=1e-300
            )
        got = float(LOSSES["exo_pair"].value(x, 0.0, 0.0, 0.0, 1.0, epsilon=0.01))
        assert got == pytest.approx(
            float(loss_function("exo_pair", {"epsilon": 0.01})(mp.mpf(x))), rel=1e-12
        )


def test_discopop_and_exo_second_derivatives_are_exact():
    # the population solver's Hessians come from d2; check against differences of d1
    for name, opts in (("discopop", {"tau": 0.05}), ("discopop", {"tau": 1.5}), ("exo_pair", {})):
        kern = LOSSES[name].margin
        o = LOSSES[name].resolve_options(opts)
        x = np.linspace(-6, 6, 61)
        s = 1e-6
        fd = (kern.d1(x + s, o) - kern.d1(x - s, o)) / (2 * s)
        np.testing.assert_allclose(kern.d2(x, o), fd, rtol=1e-6, atol=1e-8)


def test_existing_dpo_and_ipo_functions_agree_with_their_rows(rng):
    x = rng.normal(size=(4, 20)) * 3
    for beta in (0.05, 1.0, 20.0):
        for eps in (0.0, 0.1, 0.5):
            np.testing.assert_allclose(
                dpo_loss(*x, beta, label_smoothing=eps),
                LOSSES["sigmoid"].value(*x, beta, label_smoothing=eps),
                rtol=1e-14,
            )
            for a, b in zip(
                dpo_loss_grad(*x, beta, label_smoothing=eps),
                LOSSES["sigmoid"].gradient(*x, beta, label_smoothing=eps),
                strict=True,
            ):
                np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-300)
        np.testing.assert_allclose(ipo_loss(*x, beta), LOSSES["ipo"].value(*x, beta), rtol=1e-14)
        for a, b in zip(ipo_loss_grad(*x, beta), LOSSES["ipo"].gradient(*x, beta), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-14)


def test_robust_with_no_smoothing_is_dpo_and_denoises_flipped_labels():
    h = np.linspace(-5, 5, 11)
    z = np.zeros_like(h)
    np.testing.assert_allclose(
        LOSSES["robust"].value(h, z, z, z, 0.5), dpo_loss(h, z, z, z, 0.5), rtol=1e-15
    )
    # unbiasedness: labels flipped with probability e give, in expectation, the clean loss
    e = 0.2
    noisy = (1 - e) * LOSSES["robust"].value(h, z, z, z, 0.5, label_smoothing=e) + e * LOSSES[
        "robust"
    ].value(z, h, z, z, 0.5, label_smoothing=e)
    np.testing.assert_allclose(noisy, dpo_loss(h, z, z, z, 0.5), rtol=1e-13)


def test_stable_in_the_tails():
    big = 5000.0
    assert float(LOSSES["sigmoid"].value(big, 0.0, 0.0, 0.0, 1.0)) == 0.0
    assert float(LOSSES["sigmoid"].value(-big, 0.0, 0.0, 0.0, 1.0)) == big
    assert float(LOSSES["nca_pair"].value(-big, big, 0.0, 0.0, 1.0)) == pytest.approx(
        big + 0.5 * big
    )
    assert float(LOSSES["apo_zero"].value(big, -big, 0.0, 0.0, 1.0)) == 0.0
    assert float(LOSSES["discopop"].value(-100.0, 0.0, 0.0, 0.0, 1.0)) == pytest.approx(100.0)
    for name in NAMES:
        g = LOSSES[name].gradient([big, -big], [-big, big], [0.0, 0.0], [0.0, 0.0], 1.0)
        assert all(np.all(np.isfinite(f)) for f in g), name


def test_float32_in_float32_out_and_scalars():
    for name in NAMES:
        v = LOSSES[name].value(*(np.float32(-1.0),) * 4, 0.5)
        assert np.asarray(v).dtype == np.float32 and np.ndim(v) == 0, name
        g = LOSSES[name].gradient(*(np.float32(-1.0),) * 4, 0.5)
        assert g.policy_chosen.dtype == np.float32, name


@pytest.mark.parametrize(
    "name, opts, msg",
    [
        (
            "sigmoid",
            {"label_smoothing": 0.7},
            "`label_smoothing` must be a number in [0, 0.5]; got 0.7",
        ),
        (
            "robust",
            {"label_smoothing": 0.5},
            "`label_smoothing` must be a number in [0, 0.5); got 0.5",
        ),
        ("exo_pair", {"epsilon": 0.0}, "`epsilon` must be a number in (0, 1); got 0.0"),
        ("discopop", {"tau": -1}, "`tau` must be a number in (0, inf); got -1"),
        (
            "bco_pair",
            {"delta": float("nan")},
            "`delta` must be a number in [-9.0072e+15, 9.0072e+15]; got nan",
        ),
        (
            "hinge",
            {"tau": 1.0},
            "`loss` 'hinge' has no option `tau` (got tau=1.0); its options: none",
        ),
        (
            "ipo",
            {"label_smoothing": 0.1},
            "`loss` 'ipo' has no option `label_smoothing` (got label_smoothing=0.1)",
        ),
    ],
)
def test_options_validated_by_name(name, opts, msg):
    with pytest.raises(ValueError) as e:
        LOSSES[name].value(0.0, 0.0, 0.0, 0.0, 1.0, **opts)
    assert msg in str(e.value)
    with pytest.raises(ValueError):
        LOSSES[name].gradient(0.0, 0.0, 0.0, 0.0, 1.0, **opts)


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="`beta` must be"):
        LOSSES["hinge"].value(0.0, 0.0, 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="`ref_rejected_logps` must be finite"):
        LOSSES["nca_pair"].value(0.0, 0.0, 0.0, np.inf, 1.0)
    with pytest.raises(ValueError, match="do not broadcast"):
        LOSSES["aot"].value(np.zeros(3), np.zeros(2), 0.0, 0.0, 1.0)
