"""f-DPO as TRL writes it, version by version: scores with and without their constants,
length-normalised losses, which losses take an f-divergence, and the population optima
with unequal lengths against an independent minimiser (mpmath).

TRL 1.16.0's loss is written here in torch from ``trl/trainer/dpo_trainer.py`` (lines
1353-1381: the scores; 1504-1509: ``sigmoid_norm``), TRL 1.9.2's from lines 1400-1428
of that release. Where TRL 1.16.0 is installed its source is also read, to check that the
registry's record of which losses take an f-divergence is the trainer's own set.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import mpmath as mp
import numpy as np
import pytest
from scipy.optimize import minimize

from klpolicy.preference import LOSSES, bradley_terry, population_loss, population_optimum
from klpolicy.testing import check_pair_loss

torch = pytest.importorskip("torch")
F = torch.nn.functional

LW, LL = 3.0, 7.0  # the chosen and rejected completion lengths (tokens)


def _trl_scores(logratios, divergence, alpha, version):
    """chosen_scores as TRL's DPOTrainer forms them (torch, float64)."""
    new = version == "1.16.0"
    if divergence == "forward_kl":
        return 1 - torch.exp(-logratios) if new else -torch.exp(-logratios)
    if divergence == "js_divergence":
        return (math.log(2) if new else 0.0) + F.logsigmoid(logratios)
    if divergence == "alpha_divergence":
        coef = 1.0 / (alpha - 1.0)
        t = torch.clamp((alpha - 1.0) * logratios, max=80.0)
        return ((torch.exp(t) - 1.0) if new else torch.exp(t)) * coef
    return logratios


def trl_sigmoid_norm(divergence, alpha=None, version="1.16.0"):
    """TRL's sigmoid_norm loss: -logsigmoid(beta (S_w / |y_w| - S_l / |y_l|))."""

    def fn(pc, pr, rc, rr, beta):
        pc, pr, rc, rr = (torch.as_tensor(v, dtype=torch.float64) for v in (pc, pr, rc, rr))
        sc = _trl_scores(pc - rc, divergence, alpha, version)
        sr = _trl_scores(pr - rr, divergence, alpha, version)
        delta = sc / LW - sr / LL
        return (-F.logsigmoid(beta * delta)).numpy()

    return fn


CASES = [("forward_kl", None), ("js_divergence", None), ("alpha_divergence", 0.5)]


@pytest.mark.parametrize(("divergence", "alpha"), CASES)
def test_check_pair_loss_passes_trls_length_normalised_f_dpo(divergence, alpha):
    kw = {"divergence": divergence, "alpha": alpha, "lengths": (LW, LL), "max_examples": 25}
    if alpha is not None:
        kw["alpha_clamp"] = 80.0  # TRL's float32/bfloat16 clamp
    check_pair_loss(trl_sigmoid_norm(divergence, alpha), "sigmoid_norm", **kw)
    check_pair_loss(
        trl_sigmoid_norm(divergence, alpha, "1.9.2"), "sigmoid_norm", trl_version="1.9.2", **kw
    )
    # each version's loss checked against the other is named for what it is
    with pytest.raises(AssertionError, match=r"uses the scores of TRL 0\.29\.0-1\.9\.2"):
        check_pair_loss(trl_sigmoid_norm(divergence, alpha, "1.9.2"), "sigmoid_norm", **kw)
    with pytest.raises(AssertionError, match=r"uses the scores of TRL 1\.10\.0 and later"):
        check_pair_loss(
            trl_sigmoid_norm(divergence, alpha), "sigmoid_norm", trl_version="1.9.2", **kw
        )
    # a loss that ignores the divergence is still named so
    with pytest.raises(AssertionError, match="it ignores the divergence"):
        check_pair_loss(trl_sigmoid_norm("reverse_kl"), "sigmoid_norm", **kw)


def test_margin_losses_pass_either_versions_scores():
    # the constants cancel in delta_score: both versions' sigmoid losses are the same
    def sigmoid(version):
        def fn(pc, pr, rc, rr, beta):
            pc, pr, rc, rr = (torch.as_tensor(v, dtype=torch.float64) for v in (pc, pr, rc, rr))
            d = _trl_scores(pc - rc, "js_divergence", None, version) - _trl_scores(
                pr - rr, "js_divergence", None, version
            )
            return (-F.logsigmoid(beta * d)).numpy()

        return fn

    for v in ("1.16.0", "1.9.2"):
        check_pair_loss(sigmoid(v), "sigmoid", divergence="js_divergence", max_examples=20)


def test_which_losses_take_an_f_divergence_is_trls_choice():
    ref = np.array([0.2, 0.3, 0.5])
    p = bradley_terry([1.0, 0.0, -0.5])
    pi = np.array([0.3, 0.3, 0.4])
    for name in ("nca_pair", "bco_pair", "sppo_hard", "aot", "apo_zero", "apo_down"):
        assert LOSSES[name].f_divergence[0] == "refused"
        with pytest.raises(ValueError, match=r"takes no f-divergence in TRL 1\.16\.0"):
            population_loss(pi, ref, p, 0.5, loss=name, divergence="js_divergence")
        with pytest.raises(ValueError, match="takes no f-divergence"):
            check_pair_loss(lambda *a: 0.0, name, divergence="js_divergence")
    # TRL 0.29.0-1.9.2: nca_pair on the scores (lines 1466-1474 of 1.9.2), apo_zero and the
    # sorting losses on the log-ratios
    s = -np.logaddexp(0.0, -np.log(pi / ref))  # logsigmoid(l), 1.9.2's js score
    got = population_loss(pi, ref, p, 0.5, loss="nca_pair", divergence="js", trl_version="1.9.2")
    w = 2 * np.outer(ref, ref) * p
    sp = lambda x: np.logaddexp(0.0, x)  # noqa: E731
    a, b = 0.5 * s[:, None], 0.5 * s[None, :]
    want = float(np.sum(w * (sp(-a) + 0.5 * sp(a) + 0.5 * sp(b))))
    assert got == pytest.approx(want, rel=1e-13)
    for name in ("apo_zero", "aot_unpaired"):
        assert population_loss(
            pi, ref, p, 0.5, loss=name, divergence="js", trl_version="1.9.2"
        ) == population_loss(pi, ref, p, 0.5, loss=name)
    with pytest.raises(ValueError, match="does not model that mixture"):
        population_loss(pi, ref, p, 0.5, loss="apo_down", divergence="js", trl_version="1.9.2")


def test_the_registry_records_trls_own_set():
    trl = pytest.importorskip("trl")
    if trl.__version__ != "1.16.0":
        pytest.skip(f"read from TRL 1.16.0; installed {trl.__version__}")
    src = (Path(trl.__file__).parent / "trainer" / "dpo_trainer.py").read_text()
    m = re.search(r"f_divergence_loss_types = \{([^}]*)\}", src)
    accepted = set(re.findall(r'"(\w+)"', m.group(1)))
    trl_losses = {n for n in LOSSES if n not in ("chi_po", "aot_pair")}  # not TRL 1.16 names
    assert {n for n in trl_losses if LOSSES[n].f_divergence[0] != "refused"} == accepted
    # and the scores keep their constants there
    for line in (
        "chosen_scores = 1 - torch.exp(-chosen_logratios)",
        "chosen_scores = math.log(2) + F.logsigmoid(chosen_logratios)",
        "chosen_scores = (torch.exp(t_chosen_float) - 1.0).to(dtype) * coef",
        "winner_margin_error = (chosen_logratios - 0.5 / self.beta) ** 2",
    ):
        assert line in src, line


# --- the population optimum of sigmoid_norm with unequal lengths, against mpmath ---------


def _mp_score(l, divergence, alpha, version):
    new = version == "1.16.0"
    if divergence == "forward_kl":
        return (1 if new else 0) - mp.exp(-l)
    if divergence == "js_divergence":
        return (mp.log(2) if new else 0) - mp.log1p(mp.exp(-l))
    if divergence == "alpha_divergence":
        a = mp.mpf(alpha)
        return (mp.exp((a - 1) * l) - (1 if new else 0)) / (a - 1)
    if divergence == "hellinger":  # not TRL's: f'(t) = 1 - t^(-1/2)
        return 1 - mp.exp(-l / 2)
    raise AssertionError(divergence)


def _mp_length_normalised_optimum(ref, p, lengths, beta, divergence, alpha, version, start):
    """Minimise sum W_ij sp(-beta (S(g_i)/L_i - S(g_j)/L_j)) over the logits z (last 0),
    g = log(softmax(z) / ref), by findroot on its gradient (mp.diff) at 40 digits, from
    a scipy start; the recipe uses nothing of klpolicy."""
    with mp.workdps(40):
        n = len(ref)
        q = [mp.mpf(float(v)) for v in ref]
        w = [[2 * q[i] * q[j] * mp.mpf(float(p[i][j])) for j in range(n)] for i in range(n)]
        L = [mp.mpf(float(v)) for v in lengths]
        b = mp.mpf(beta)

        def loss(*z):
            th = list(z) + [mp.mpf(0)]
            zz = mp.log(mp.fsum(mp.exp(t) for t in th))
            s = [
                _mp_score(th[i] - zz - mp.log(q[i]), divergence, alpha, version) / L[i]
                for i in range(n)
            ]
            return mp.fsum(
                w[i][j] * mp.log1p(mp.exp(-b * (s[i] - s[j])))
                for i in range(n)
                for j in range(n)
                if i != j
            )

        def grad(*z):
            return [
                mp.diff(lambda t, k=k: loss(*[t if m == k else z[m] for m in range(n - 1)]), z[k])
                for k in range(n - 1)
            ]

        z = mp.findroot(grad, [mp.mpf(float(v)) for v in start], tol=mp.mpf(10) ** -30)
        th = [z[k] for k in range(n - 1)] + [mp.mpf(0)]
        zz = mp.fsum(mp.exp(t) for t in th)
        return np.array([float(mp.exp(t) / zz) for t in th])


OPTIMA = [
    ("forward_kl", None, "1.16.0"),
    ("forward_kl", None, "1.9.2"),
    ("js_divergence", None, "1.16.0"),
    ("alpha_divergence", 0.5, "1.16.0"),
    ("alpha_divergence", 0.5, "1.9.2"),
    ("hellinger", None, "1.16.0"),
]


@pytest.mark.parametrize(("divergence", "alpha", "version"), OPTIMA)
def test_sigmoid_norm_optimum_with_unequal_lengths(divergence, alpha, version):
    ref = np.array([0.2, 0.3, 0.5])
    p = bradley_terry([0.6, 0.0, -0.3])
    lengths = np.array([3.0, 5.0, 8.0])
    beta = 1.5
    kw = {"divergence": divergence, "alpha": alpha, "trl_version": version}
    pi = population_optimum(ref, p, beta, loss="sigmoid_norm", lengths=lengths, **kw)

    def loss(z):
        q = np.exp(np.append(z, 0.0) - np.max(np.append(z, 0.0)))
        return population_loss(
            q / q.sum(), ref, p, beta, loss="sigmoid_norm", lengths=lengths, **kw
        )

    start = minimize(
        loss, np.zeros(2), method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-14}
    ).x
    want = _mp_length_normalised_optimum(ref, p, lengths, beta, divergence, alpha, version, start)
    np.testing.assert_allclose(pi, want, rtol=1e-10)
    # the constants matter: the other version's optimum is elsewhere (TRL's rows only)
    other = "1.9.2" if version == "1.16.0" else "1.16.0"
    if divergence != "hellinger":
        moved = population_optimum(
            ref, p, beta, loss="sigmoid_norm", lengths=lengths, **{**kw, "trl_version": other}
        )
        assert np.max(np.abs(moved - pi)) > 1e-3
    # equal lengths L: the constants cancel, and the optimum is the margin loss's at beta / L
    eq = population_optimum(ref, p, beta, loss="sigmoid_norm", lengths=np.full(3, 4.0), **kw)
    np.testing.assert_allclose(eq, population_optimum(ref, p, beta / 4.0, **kw), rtol=1e-10)
