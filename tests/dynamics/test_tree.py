"""GRPO's loss types on a token tree: klpolicy.dynamics.expected_tree_update against an
independent mpmath enumeration of every group, the landing points as fixed points, the
closed forms as identities, and the bad inputs.

mpmath recipe (50 digits, the conftest's fixture): walk the tree to list every completion
y (it ends at the first EOS, kept, or after T tokens); pi(a|h) = softmax(logits[t][h]) with
the logits converted exactly; P(y) = prod_t pi(y_t | y_<t). For every ordered group
(y_1..y_G) in completions^G (probability prod P(y_i)): rewards v_i = f(y_i), lengths
L_i = len(y_i); A_i = v_i - mean(v), divided by the unbiased std + 1e-4 for
scale_rewards="group"; the weight w_i = 1/(G L_i) (grpo), 1/sum_j L_j (bnpo, dapo),
1/(G L_max) (dr_grpo), as TRL 1.16.0's grpo_trainer.py lines 3153-3173 aggregate; each
token t of member i adds w_i (-A_i d logp + beta d[k3 rho]) with, written out by hand,
d logp/d theta_h = e_a - pi_h at its own prefix h, d k3 = (1 - ref/pi)(e_a - pi_h), and
the ratio rho = pi/sg(pi) adding k3 (e_a - pi_h) (use_bias_correction_kl). The update is
minus the probability-weighted sum over the groups.
"""

import itertools

import mpmath as mp
import numpy as np
import pytest

from klpolicy import optimal_policy
from klpolicy.dynamics import (
    expected_tree_update,
    expected_update,
    tree_landing_point,
)

from .. import _mpref as R

EOS = 2


def _completions(T, size, eos):
    out = []

    def walk(prefix):
        for a in range(size):
            y = prefix + (a,)
            if a == eos or len(y) == T:
                out.append(y)
            else:
                walk(y)

    walk(())
    return out


def _dense_reward(f, T, size, eos):
    """reward[a_0..a_{T-1}] = f(the completion: the sequence cut after its first EOS)."""
    out = np.zeros((size,) * T)
    for idx in itertools.product(range(size), repeat=T):
        y = idx
        if eos in idx:
            y = idx[: idx.index(eos) + 1]
        out[idx] = f[y]
    return out


def _mp_tree_group_update(
    logits,
    ref,
    f,
    beta,
    G,
    loss_type,
    scaled,
    corrected,
    lmax,
    eos=EOS,
    masked=False,
    sequence=False,
):
    T, size = len(ref), len(ref[0])
    beta = mp.mpf(beta)
    eps = mp.mpf("1e-4")

    def row(arr, h):
        return [mp.mpf(float(x)) for x in np.asarray(arr)[h]]

    pi, q = {}, {}
    for t in range(T):
        for h in itertools.product(range(size), repeat=t):
            e = [mp.exp(x) if np.isfinite(float(x)) else mp.mpf(0) for x in row(logits[t], h)]
            z = mp.fsum(e)
            pi[h] = [x / z for x in e]
            qq = row(ref[t], h)
            s = mp.fsum(qq)
            q[h] = [x / s for x in qq]
    comps = _completions(T, size, eos)
    P = {y: mp.fprod(pi[y[:t]][y[t]] for t in range(len(y))) for y in comps}
    total = {h: [mp.mpf(0)] * size for h in pi}
    for group in itertools.product(comps, repeat=G):
        w_group = mp.fprod(P[y] for y in group)
        if w_group == 0:
            continue
        v = [mp.mpf(f[y]) for y in group]
        # mask_truncated_completions: a completion without an EOS has no tokens in the loss
        L = [0 if masked and y[-1] != eos else len(y) for y in group]
        m = mp.fsum(v) / G
        adv = [x - m for x in v]
        if scaled:
            s = mp.sqrt(mp.fsum((x - m) ** 2 for x in v) / (G - 1)) + eps
            adv = [a / s for a in adv]
        for i, y in enumerate(group):
            if L[i] == 0:
                continue
            if loss_type == "grpo":
                w = mp.mpf(1) / (G * L[i])
            elif loss_type in ("bnpo", "dapo"):
                w = mp.mpf(1) / sum(L)
            else:
                w = mp.mpf(1) / (G * lmax)
            k3 = [
                q[y[:t]][y[t]] / pi[y[:t]][y[t]] - 1 - mp.log(q[y[:t]][y[t]] / pi[y[:t]][y[t]])
                for t in range(len(y))
            ]
            for t in range(len(y)):
                h, a = y[:t], y[t]
                p, r = pi[h][a], q[h][a]
                dk3 = 1 - r / p
                coef = -adv[i] + beta * dk3
                if corrected and sequence:
                    # GSPO: k3_t times exp(mean_s log ratio_s); its gradient at token t is
                    # (sum_s k3_s) / L (e_a - pi_h); the policy term's L (1/L) cancels
                    coef += beta * mp.fsum(k3) / L[i]
                elif corrected:
                    coef += beta * k3[t]
                for j in range(size):
                    total[h][j] -= w_group * w * coef * ((1 if j == a else 0) - pi[h][j])
    return [
        [[total[h][j] for j in range(size)] for h in itertools.product(range(size), repeat=t)]
        for t in range(T)
    ]


def _compare(got, want, rtol=1e-12, atol=1e-15):
    for t, (g, w) in enumerate(zip(got, want, strict=True)):
        R.assert_mp_close(g.reshape(-1, g.shape[-1]), w, rtol=rtol, atol=atol, what=f"level {t}: ")


# a depth-2 tree: tokens 0 and 1, EOS = 2; completions (2), (0,2), (1,2), (a,b) for a,b in {0,1}
REF2 = [
    np.array([0.2, 0.5, 0.3]),
    np.array([[0.3, 0.3, 0.4], [0.6, 0.1, 0.3], [1 / 3, 1 / 3, 1 / 3]]),
]
F2 = {  # three reward levels over lengths 1 and 2
    (2,): 0.0,
    (0, 2): 1.0,
    (1, 2): 0.0,
    (0, 0): 1.0,
    (0, 1): 0.5,
    (1, 0): 0.0,
    (1, 1): 1.0,
}
TH2 = [np.array([0.3, -0.4, 0.1]), np.array([[0.2, -0.1, 0.5], [1.0, 0.0, -0.7], [0.0, 0.0, 0.0]])]
RW2 = _dense_reward(F2, 2, 3, EOS)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("G", [2, 3])
@pytest.mark.parametrize("scale_rewards", ["none", "group"])
def test_tree_update_against_mpmath_enumeration(loss_type, G, scale_rewards):
    got = expected_tree_update(
        "grpo",
        TH2,
        REF2,
        RW2,
        0.3,
        eos_token=EOS,
        num_generations=G,
        loss_type=loss_type,
        scale_rewards=scale_rewards,
        max_completion_length=3,
    )
    want = _mp_tree_group_update(TH2, REF2, F2, 0.3, G, loss_type, scale_rewards != "none", True, 3)
    _compare(got, want)
    for u in got:
        assert np.abs(u.sum(-1)).max() < 1e-16


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("scale_rewards", ["none", "group"])
def test_masked_truncated_completions_against_mpmath(loss_type, scale_rewards):
    got = expected_tree_update(
        "grpo",
        TH2,
        REF2,
        RW2,
        0.3,
        eos_token=EOS,
        num_generations=3,
        loss_type=loss_type,
        scale_rewards=scale_rewards,
        max_completion_length=2,
        mask_truncated_completions=True,
    )
    want = _mp_tree_group_update(
        TH2, REF2, F2, 0.3, 3, loss_type, scale_rewards != "none", True, 2, masked=True
    )
    _compare(got, want)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("G", [2, 3])
def test_gspo_tree_update_against_mpmath(loss_type, G):
    got = expected_tree_update(
        "gspo",
        TH2,
        REF2,
        RW2,
        0.4,
        eos_token=EOS,
        num_generations=G,
        loss_type=loss_type,
        max_completion_length=2,
    )
    want = _mp_tree_group_update(TH2, REF2, F2, 0.4, G, loss_type, True, True, 2, sequence=True)
    _compare(got, want)
    # without the ratio on the KL, the sequence-level ratio changes nothing on-policy
    plain = dict(num_generations=G, loss_type=loss_type, use_bias_correction_kl=False)
    a = expected_tree_update("gspo", TH2, REF2, RW2, 0.4, eos_token=EOS, **plain)
    b = expected_tree_update("grpo", TH2, REF2, RW2, 0.4, eos_token=EOS, **plain)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo"])
def test_tree_update_plain_k3_against_mpmath(loss_type):
    got = expected_tree_update(
        "grpo",
        TH2,
        REF2,
        RW2,
        0.7,
        eos_token=EOS,
        num_generations=3,
        loss_type=loss_type,
        scale_rewards="group",
        use_bias_correction_kl=False,
    )
    want = _mp_tree_group_update(TH2, REF2, F2, 0.7, 3, loss_type, True, False, 2)
    _compare(got, want)


def test_tree_update_depth_three_against_mpmath():
    rng = np.random.default_rng(3)
    ref = [rng.dirichlet(np.ones(3), size=(3,) * t) for t in range(3)]
    th = [rng.normal(size=(3,) * (t + 1)) for t in range(3)]
    comps = _completions(3, 3, EOS)
    f = {y: float(round(rng.uniform(), 1) > 0.5) + 0.5 * (len(y) == 2) for y in comps}
    rw = _dense_reward(f, 3, 3, EOS)
    for lt in ("grpo", "bnpo"):
        got = expected_tree_update(
            "grpo", th, ref, rw, 0.2, eos_token=EOS, num_generations=2, loss_type=lt
        )
        _compare(got, _mp_tree_group_update(th, ref, f, 0.2, 2, lt, True, True, 512))


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("G", [2, 5, None])
def test_a_depth_one_tree_is_the_tabular_update(loss_type, G):
    """One token: every loss_type is the group mean (L = L_max = 1)."""
    ref, r, th = [0.4, 0.35, 0.25], [1.0, 0.0, 0.5], np.array([0.3, -0.2, 0.1])
    for sc in ("none", "group"):
        got = expected_tree_update(
            "grpo",
            [th],
            [np.array(ref)],
            np.array(r),
            0.3,
            num_generations=G,
            loss_type=loss_type,
            scale_rewards=sc,
            max_completion_length=1,
        )
        want = expected_update("grpo", th, ref, r, 0.3, num_generations=G, scale_rewards=sc)
        np.testing.assert_allclose(got[0], want, rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("scale_rewards", ["none", "group"])
def test_the_infinite_group_is_the_limit_of_large_groups(loss_type, scale_rewards):
    kw = dict(eos_token=EOS, loss_type=loss_type, scale_rewards=scale_rewards)
    inf = expected_tree_update("grpo", TH2, REF2, RW2, 0.3, num_generations=None, **kw)
    errs = []
    for G in (4, 16, 64):
        got = expected_tree_update("grpo", TH2, REF2, RW2, 0.3, num_generations=G, **kw)
        errs.append(max(np.abs(a - b).max() for a, b in zip(got, inf, strict=True)))
    # the finite-group terms differ from the limit by O(1/G): 16 times G, about 16 times less
    assert errs[0] > errs[1] > errs[2] and errs[2] < errs[0] / 8


# --------------------------------------------------------------------------- landing points


def _myopic_by_hand(ref, f, b, T, size, eos):
    """pi(a|h) ∝ ref(a|h) exp(E_pi[r | h a]/b), from the deepest prefixes up (mpmath)."""
    pol, value = {}, {}
    for t in range(T - 1, -1, -1):
        for h in itertools.product(range(size), repeat=t):
            if eos in h:
                continue
            vals = []
            for a in range(size):
                y = h + (a,)
                vals.append(mp.mpf(f[y]) if (a == eos or t == T - 1) else value[y])
            qq = [mp.mpf(float(x)) for x in np.asarray(ref[t])[h]]
            e = [qi * mp.exp(v / b) for qi, v in zip(qq, vals)]
            z = mp.fsum(e)
            pol[h] = [x / z for x in e]
            value[h] = mp.fsum(p * v for p, v in zip(pol[h], vals))
    return pol


@pytest.mark.parametrize("G", [2, 4, None])
def test_dr_grpo_without_scale_lands_at_the_myopic_equilibrium(G):
    beta = 0.4
    lp = tree_landing_point(
        "grpo",
        REF2,
        RW2,
        beta,
        eos_token=EOS,
        num_generations=G,
        scale_rewards="none",
        loss_type="dr_grpo",
    )
    b = beta if G is None else beta * G / (G - 1)
    assert lp.kind == "myopic" and lp.beta_token == pytest.approx(b, rel=1e-15)
    want = _myopic_by_hand(REF2, F2, mp.mpf(b), 2, 3, EOS)
    R.assert_mp_close(lp.policy[0], want[()], rtol=1e-13)
    for a in (0, 1):
        R.assert_mp_close(lp.policy[1][a], want[(a,)], rtol=1e-13)
    # the identity: the exact update vanishes there
    th = [np.log(p) for p in lp.policy]
    u = expected_tree_update(
        "grpo",
        th,
        REF2,
        RW2,
        beta,
        eos_token=EOS,
        num_generations=G,
        scale_rewards="none",
        loss_type="dr_grpo",
    )
    assert max(np.abs(x).max() for x in u) < 1e-15
    assert lp.stable and lp.interior and lp.aggregation_bias == 0.0


def test_the_myopic_equilibrium_is_not_the_sequence_pistar():
    """A per-token KL in the loss has no return-to-go: the soft value is replaced by an
    expectation, so even dr_grpo misses pi* whenever a reward depends on a later token."""
    lp = tree_landing_point(
        "grpo",
        REF2,
        RW2,
        0.4,
        eos_token=EOS,
        num_generations=None,
        scale_rewards="none",
        loss_type="dr_grpo",
    )
    # pi* over completions: P_ref(y) exp(r/beta) / Z; its first-token marginal by hand
    comps = _completions(2, 3, EOS)
    pref = {y: np.prod([REF2[t][y[:t]][y[t]] for t in range(len(y))]) for y in comps}
    w = {y: pref[y] * np.exp(F2[y] / 0.4) for y in comps}
    z = sum(w.values())
    first = np.array([sum(w[y] for y in comps if y[0] == a) / z for a in range(3)])
    assert np.abs(lp.policy[0] - first).max() > 1e-3
    # the last level is a bandit given its prefix: there the two agree
    np.testing.assert_allclose(
        lp.policy[1][0],
        optimal_policy(REF2[1][0], [F2[(0, 0)], F2[(0, 1)], F2[(0, 2)]], 0.4),
        rtol=1e-13,
    )
    mean_star = sum((len(y)) * w[y] / z for y in comps)
    assert lp.pistar_mean_length == pytest.approx(mean_star, rel=1e-13)
    # and the sequence-level pi* is no zero of the update: its conditionals, from w
    star = [first, np.array(REF2[1])]
    for a in (0, 1):
        mass = np.array([w[(a, b)] for b in range(3)])
        star[1][a] = mass / mass.sum()
    u = expected_tree_update(
        "grpo",
        [np.log(p) for p in star],
        REF2,
        RW2,
        0.4,
        eos_token=EOS,
        num_generations=None,
        scale_rewards="none",
        loss_type="dr_grpo",
        max_completion_length=2,
    )
    assert np.abs(u[0]).max() > 1e-3 and np.abs(u[1][:2]).max() < 1e-15


def test_a_depth_one_tree_lands_at_pistar_of_beta_g_over_g_minus_1():
    ref, r = np.array([0.4, 0.3, 0.2, 0.1]), np.array([1.0, 0.0, 0.5, 2.0])
    lp = tree_landing_point(
        "grpo", [ref], r, 0.5, num_generations=3, scale_rewards="none", loss_type="grpo"
    )
    R.assert_mp_close(lp.policy[0], R.optimal_policy(ref, r, 0.75), rtol=1e-13, atol=1e-300)
    assert lp.length_bias == 0.0


def _natural_path(th, beta, steps, lr, rule="grpo", **kw):
    """The mean-field path: the exact expected step, iterated (per-prefix natural steps)."""
    for _ in range(steps):
        u = expected_tree_update(rule, th, REF2, RW2, beta, eos_token=EOS, **kw)
        pi = [np.exp(a - a.max(-1, keepdims=True)) for a in th]
        pi = [p / p.sum(-1, keepdims=True) for p in pi]
        P = [np.ones(()), pi[0] * (np.arange(3) != EOS)]
        th = [
            a + lr * np.where(p > 0, x / np.maximum(P[t][..., None] * p, 1e-300), 0.0)
            for t, (a, x, p) in enumerate(zip(th, u, pi, strict=True))
        ]
    return th


@pytest.mark.parametrize(
    "opts",
    [
        dict(loss_type="grpo", scale_rewards="none", num_generations=4),
        dict(
            rule="gspo",
            loss_type="dr_grpo",
            scale_rewards="none",
            num_generations=4,
            max_completion_length=2,
        ),
        dict(rule="gspo", loss_type="grpo", scale_rewards="group", num_generations=3),
        dict(loss_type="bnpo", scale_rewards="none", num_generations=3),
        dict(loss_type="dapo", scale_rewards="group", num_generations=4),
        dict(loss_type="grpo", scale_rewards="group", num_generations=None, beta=1.0),
        # dr_grpo divides by G L_max: L_max = 2 keeps the path's pace
        dict(
            loss_type="dr_grpo", scale_rewards="group", num_generations=3, max_completion_length=2
        ),
    ],
)
def test_numeric_landing_points_are_fixed_points_of_the_mean_field_path(opts):
    opts = dict(opts)
    beta = opts.pop("beta", 0.5)
    rule = opts.pop("rule", "grpo")
    lp = tree_landing_point(rule, REF2, RW2, beta, eos_token=EOS, **opts)
    assert lp.kind == "fixed_point" and lp.stable and lp.interior
    th = [np.log(p) for p in lp.policy]
    u = expected_tree_update(rule, th, REF2, RW2, beta, eos_token=EOS, **opts)
    assert max(np.abs(x).max() for x in u) < 1e-12
    # the exact expected step, iterated from the reference, arrives there
    end = _natural_path([np.log(q) for q in REF2], beta, 400, 0.5, rule=rule, **opts)
    pe = [np.exp(a - a.max(-1, keepdims=True)) for a in end]
    pe = [p / p.sum(-1, keepdims=True) for p in pe]
    np.testing.assert_allclose(pe[0], lp.policy[0], rtol=1e-10)
    np.testing.assert_allclose(pe[1][:2], lp.policy[1][:2], rtol=1e-10)


def test_masking_truncated_completions_leaves_a_set_of_fixed_points():
    """No loss on the truncated tokens: the split between them is held by nothing."""
    opts = dict(loss_type="dapo", scale_rewards="none", num_generations=4)
    lp = tree_landing_point(
        "grpo", REF2, RW2, 0.5, eos_token=EOS, mask_truncated_completions=True, **opts
    )
    th = [np.log(p) for p in lp.policy]
    u = expected_tree_update(
        "grpo", th, REF2, RW2, 0.5, eos_token=EOS, mask_truncated_completions=True, **opts
    )
    assert max(np.abs(x).max() for x in u) < 1e-12
    assert not lp.stable and "a set of fixed points" in lp.reason
    plain = tree_landing_point("grpo", REF2, RW2, 0.5, eos_token=EOS, **opts)
    assert plain.stable and "set of fixed points" not in plain.reason


def test_length_bias_of_the_per_sequence_mean():
    """Correct answers short or long, wrong ones likewise: grpo's 1/L weighting pushes toward
    short correct and long wrong completions (arXiv:2503.20783), dr_grpo does not."""
    f = {(2,): 0.0, (0, 2): 1.0, (1, 2): 0.0, (0, 0): 1.0, (0, 1): 1.0, (1, 0): 0.0, (1, 1): 0.0}
    rw = _dense_reward(f, 2, 3, EOS)
    kw = dict(eos_token=EOS, num_generations=4, scale_rewards="none")
    grpo = tree_landing_point("grpo", REF2, rw, 0.5, loss_type="grpo", **kw)
    dr = tree_landing_point("grpo", REF2, rw, 0.5, loss_type="dr_grpo", **kw)
    assert dr.aggregation_bias == 0.0
    assert grpo.neutral_mean_length == pytest.approx(dr.mean_length, rel=1e-14)
    assert grpo.length_bias == pytest.approx(grpo.mean_length - grpo.pistar_mean_length)
    # the sign, computed: grpo's landing point is longer where the wrong answers can be long
    assert grpo.aggregation_bias != 0.0
    assert ("longer" if grpo.length_bias > 0 else "shorter") in str(grpo)


def test_the_infinite_group_with_the_std_collapses_at_a_small_beta():
    """As for one token: below a threshold the std scale leaves no interior fixed point."""
    kw = dict(loss_type="grpo", scale_rewards="group", num_generations=None)
    lp = tree_landing_point("grpo", REF2, RW2, 0.5, eos_token=EOS, **kw)
    assert lp.policy is None and lp.kind == "run_off" and "collapse" in lp.reason
    end = _natural_path([np.log(q) for q in REF2], 0.5, 400, 0.5, **kw)
    assert np.min(end[0]) - np.max(end[0]) < -100  # the path drives a first token to 0


def test_a_tiny_beta_does_not_leak_the_solver_s_overflow():
    """Powell's method tried logits past float64 at beta = 1e-10: the softmax was NaN, no
    level was reached and np.bincount raised "'list' argument must have no negative
    elements". A non-finite trial step now has a NaN residual, which the solver backs off."""
    t2 = [[0.5, 0.5], [[0.3, 0.7], [0.6, 0.4]]]
    for beta in (1e-10, 1e-30):
        lp = tree_landing_point("grpo", t2, [[1.0, 0.0], [0.0, 1.0]], beta, eos_token=1)
        assert lp.kind in ("fixed_point", "run_off")
        if lp.policy is not None:
            assert all(np.all(np.isfinite(p)) for p in lp.policy)


def test_beta_zero_has_no_landing_point():
    lp = tree_landing_point("grpo", REF2, RW2, 0.0, eos_token=EOS)
    assert lp.policy is None and lp.kind == "greedy" and "beta = 0" in str(lp)


# --------------------------------------------------------------------------- bad input

LOG2 = [np.log(q) for q in REF2]


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: expected_tree_update("rloo", LOG2, REF2, RW2, 0.1),
            r"`rule` must be one of 'grpo', 'gspo'",
        ),
        (
            lambda: expected_tree_update("grpo", LOG2, REF2, RW2, 0.1, lr=1),
            r"no option 'lr'.*loss_type='dapo'",
        ),
        (lambda: expected_tree_update("grpo", LOG2, REF2, RW2, -0.1), r"`beta`.*-0.1"),
        (
            lambda: expected_tree_update("grpo", LOG2, REF2, RW2, 0.1, loss_type="sum"),
            r"`loss_type`.*'sum'",
        ),
        (
            lambda: expected_tree_update("grpo", LOG2, REF2, RW2, 0.1, num_generations=1),
            r"`num_generations` must be at least 2",
        ),
        (
            lambda: expected_tree_update(
                "grpo",
                LOG2,
                REF2,
                RW2,
                0.1,
                eos_token=EOS,
                loss_type="dr_grpo",
                max_completion_length=1,
            ),
            r"`max_completion_length` 1 is shorter than the tree's depth 2",
        ),
        (
            lambda: expected_tree_update("grpo", LOG2, REF2, RW2, 0.1, eos_token=3),
            r"`eos_token` must be a token id in \[0, 3\); got 3",
        ),
        (
            lambda: expected_tree_update("grpo", LOG2, REF2, RW2[0], 0.1),
            r"`reward` must have shape \(3, 3\)",
        ),
        (
            lambda: expected_tree_update("grpo", LOG2[:1], REF2, RW2, 0.1),
            r"`logits` must have 2 levels",
        ),
        (lambda: expected_tree_update("grpo", LOG2[0], REF2, RW2, 0.1), r"`logits` must be a list"),
        (
            lambda: expected_tree_update("grpo", [LOG2[0], LOG2[1][:2]], REF2, RW2, 0.1),
            r"`logits\[1\]` must have the shape of `ref\[1\]`",
        ),
        (
            lambda: expected_tree_update("grpo", [LOG2[0], LOG2[1] * np.nan], REF2, RW2, 0.1),
            r"`logits\[1\]` must be finite or -inf",
        ),
        (
            lambda: expected_tree_update("grpo", LOG2, [REF2[0], REF2[1][:2]], RW2, 0.1),
            r"`ref\[1\]` must have shape",
        ),
        (
            lambda: tree_landing_point("grpo", REF2, RW2, 0.1, eos_token=EOS, scale_rewards="all"),
            r"`scale_rewards`.*'all'",
        ),
        (lambda: tree_landing_point("grpo", REF2, RW2, 0.1, eos_token=-1), r"`eos_token`"),
        (
            lambda: expected_tree_update(
                "grpo",
                LOG2,
                REF2,
                RW2,
                0.1,
                eos_token=EOS,
                num_generations=200,
                loss_type="bnpo",
            ),
            r"`num_generations` 200 with 3 distinct rewards and lengths up to 2",
        ),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_logits_on_a_zero_of_ref_are_refused():
    ref = [np.array([0.5, 0.5, 0.0]), REF2[1]]
    with pytest.raises(ValueError, match=r"`logits\[0\]` give probability to token 2"):
        expected_tree_update("grpo", [np.zeros(3), LOG2[1]], ref, RW2, 0.1)


# --------------------------------------------------------------------------- TRL's own code


def _trl_tree_update(
    th, ref, f, beta, G, loss_type, scale_rewards, lmax, masked=False, sequence=False
):
    """Every ordered group through TRL 1.16.0's lines: the advantages (grpo_trainer.py
    2765-2787, its `nanstd`), the completion mask up to and with the EOS (1881-1885), the
    per-token loss (3099-3105, 3119, 3150) and each loss_type's aggregation (3153-3173, dapo's
    normaliser the group's token count), differentiated by torch autograd in float64."""
    torch = pytest.importorskip("torch")
    utils = pytest.importorskip("trl.trainer.utils")
    T = len(ref)
    thetas = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in th]
    refs = [torch.tensor(q, dtype=torch.float64) for q in ref]
    comps = _completions(T, 3, EOS)
    total = [torch.zeros_like(t) for t in thetas]
    for group in itertools.product(comps, repeat=G):
        # padded completions (B, T): the pad token is EOS, masked out after the first EOS
        ids = torch.tensor([list(y) + [EOS] * (T - len(y)) for y in group])
        is_eos = ids == EOS
        eos_idx = torch.full((G,), T, dtype=torch.long)
        eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
        mask = (torch.arange(T).expand(G, -1) <= eos_idx.unsqueeze(1)).double()
        alive = mask.clone()
        if masked:  # lines 2487-2492: the last token is neither EOS nor pad
            is_truncated = torch.tensor([y[-1] != EOS for y in group])
            mask = mask * (~is_truncated).unsqueeze(1).double()
        logps, ref_logps = [], []
        for i in range(G):
            row, rrow = [], []
            for t in range(T):
                h = tuple(int(x) for x in ids[i, :t])
                a = int(ids[i, t])
                row.append(torch.log_softmax(thetas[t][h], -1)[a])
                rrow.append(torch.log(refs[t][h][a]))
            logps.append(torch.stack(row))
            ref_logps.append(torch.stack(rrow))
        per_token_logps, ref_per_token_logps = torch.stack(logps), torch.stack(ref_logps)
        weight = torch.exp((per_token_logps.detach() * alive).sum())
        rewards = torch.tensor([f[y] for y in group], dtype=torch.float64)
        mean = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G)
        std = utils.nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G)
        adv = rewards - mean
        if scale_rewards != "none":
            adv = adv / (std + 1e-4)
        advantages = adv.unsqueeze(1)
        log_ratio = per_token_logps - per_token_logps.detach()
        if sequence:  # importance_sampling_level="sequence", lines 3086-3088
            log_ratio = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
            log_ratio = log_ratio.unsqueeze(-1)
        coef_1 = torch.exp(log_ratio)
        per_token_kl = (
            torch.exp(ref_per_token_logps - per_token_logps)
            - (ref_per_token_logps - per_token_logps)
            - 1
        ) * coef_1
        coef_2 = torch.clamp(coef_1, 0.8, 1.2)
        per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages) + beta * per_token_kl
        if loss_type == "grpo":
            loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
        elif loss_type in ("bnpo", "dapo"):
            loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
        else:
            loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * lmax)
        grads = torch.autograd.grad(loss, thetas, allow_unused=True)
        for acc, g in zip(total, grads, strict=True):
            if g is not None:
                acc -= weight * g
    return [t.numpy() for t in total]


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("scale_rewards", ["none", "group"])
@pytest.mark.parametrize("masked", [False, True])
def test_tree_update_against_trl_code_and_autograd(loss_type, scale_rewards, masked):
    for rule in ("grpo", "gspo"):
        _against_trl(rule, loss_type, scale_rewards, masked)


def _against_trl(rule, loss_type, scale_rewards, masked):
    got = expected_tree_update(
        rule,
        TH2,
        REF2,
        RW2,
        0.3,
        eos_token=EOS,
        num_generations=2,
        loss_type=loss_type,
        scale_rewards=scale_rewards,
        max_completion_length=4,
        mask_truncated_completions=masked,
    )
    want = _trl_tree_update(
        TH2, REF2, F2, 0.3, 2, loss_type, scale_rewards, 4, masked, sequence=rule == "gspo"
    )
    for t in range(2):
        reach = np.array([True, True, False]) if t == 1 else slice(None)
        np.testing.assert_allclose(got[t][reach], want[t][reach], rtol=1e-12, atol=1e-15)


def test_a_hundred_leaf_tree_lands_stably_in_closed_form():
    """121 completions, L_max = 512: the SGD field's eigenvalues at rare prefixes are tiny;
    the per-prefix field judges them (regression: every point once read unstable)."""
    rng = np.random.default_rng(1)
    ref = [rng.dirichlet(np.ones(4), size=(4,) * t) for t in range(4)]
    reward = rng.integers(0, 5, size=(4,) * 4) / 4.0
    lp = tree_landing_point(
        "grpo",
        ref,
        reward,
        1.0,
        eos_token=3,
        num_generations=8,
        loss_type="dr_grpo",
        scale_rewards="none",
    )
    assert lp.kind == "myopic" and lp.stable and lp.interior
    u = expected_tree_update(
        "grpo",
        [np.log(p) for p in lp.policy],
        ref,
        reward,
        1.0,
        eos_token=3,
        num_generations=8,
        loss_type="dr_grpo",
        scale_rewards="none",
    )
    assert max(np.abs(x).max() for x in u) * 8 * 512 < 1e-13  # in units of 1/(G L_max)


def test_plain_k3_lands_at_the_myopic_forward_kl_equilibrium():
    """Without the ratio the per-token term follows KL(ref || pi) at each prefix."""
    kw = dict(
        eos_token=EOS,
        num_generations=3,
        scale_rewards="none",
        loss_type="dr_grpo",
        use_bias_correction_kl=False,
    )
    lp = tree_landing_point("grpo", REF2, RW2, 0.6, **kw)
    assert lp.kind == "myopic_forward_kl" and lp.stable
    u = expected_tree_update("grpo", [np.log(p) for p in lp.policy], REF2, RW2, 0.6, **kw)
    assert max(np.abs(x).max() for x in u) * 3 * 512 < 1e-13
    # at each last-level prefix: pi_j = b ref_j / (lambda - r_j), b = 0.6 * 3/2
    for a in (0, 1):
        r = np.array([F2[(a, 0)], F2[(a, 1)], F2[(a, 2)]])
        lam = 0.9 * REF2[1][a] / lp.policy[1][a] + r
        np.testing.assert_allclose(lam, lam[0], rtol=1e-12)
