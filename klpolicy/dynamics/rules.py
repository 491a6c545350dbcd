r"""The trainer rules: one row per rule, carrying its options, its sources and its behaviour.

A row says, as the trainer's own code does, how a group of completions becomes a loss: the
KL term and where it sits (in the loss, or folded into the reward), the baseline, the scale
and the aggregation over tokens; and it carries the two functions the part needs: the exact
expected update on a tabular softmax policy, and where that update vanishes. Code outside
this module looks a row up and calls it; adding a trainer rule is adding a row.

Every update function takes the whole row (``th`` is ``-inf`` and ``pi`` 0 where the policy
puts no mass, which the reference's zeros force); every landing function takes the
reference's support only (``ref > 0``). ``o`` holds the rule's options, defaults filled in.

Sources (read on 2026-12-04): TRL 1.16.0, ``trl/trainer/grpo_trainer.py``
(``_generate_and_score_completions``: the group mean, lines 2765-2766; the unbiased group
standard deviation, ``nanstd``, lines 2767-2779; ``advantages = rewards - mean`` divided by
``std + 1e-4`` unless ``scale_rewards == "none"``, lines 2785-2787; ``_compute_loss``: the k3
term ``exp(ref - logp) - (ref - logp) - 1``, multiplied by the differentiable ratio
``coef_1`` when ``use_bias_correction_kl``, lines 3099-3105; added as ``beta * per_token_kl``,
line 3150; the aggregations ``grpo``/``bnpo``/``dr_grpo``/``dapo``, lines 3153-3173),
``trl/trainer/grpo_config.py`` (defaults ``num_generations=8`` line 480, ``beta=0.0`` line 681,
``num_iterations=1`` line 689, ``epsilon=0.2`` line 693, ``importance_sampling_level="token"``
line 760, ``scale_rewards="group"`` line 789, ``loss_type="dapo"`` line 801,
``use_bias_correction_kl=True`` line 972); ``trl/trainer/rloo_trainer.py`` (the sequence
k1 ``old_logps - ref_logps`` summed over tokens and subtracted from the reward with ``beta``,
lines 1669-1673; the leave-one-out baseline, lines 1682-1690; ``normalize_advantages``:
``(A - mean A)/(std A + 1e-4)`` over the generation batch, lines 1695-1696) and
``trl/trainer/rloo_config.py`` (``num_generations=2`` line 301, ``beta=0.05`` line 502,
``normalize_advantages=False`` line 531).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core import f_optimal_policy, kl_divergence, optimal_policy
from ..core.internal import validation as V
from ..estimators import estimator_names, expected_gradient, get_estimator
from ..estimators import fixed_point as _estimator_fixed_point
from .covariance import clip_cov_weights
from .groups import group_advantage
from .results import FixedPoint, Landing
from .solvers import family_roots, fixed_points

__all__ = ["RULES", "Rule", "rule_names"]

#: TRL 1.16.0 adds this to the group's standard deviation (grpo_trainer.py line 2787).
TRL_STD_EPS = 1e-4


def _count_or_none(name: str, x) -> int | None:
    if x is None:
        return None
    g = V.as_count(name, x, lo=1)
    if g < 2:
        raise ValueError(
            f"`{name}` must be at least 2 (a group needs two members) or None; got {g}"
        )
    return g


def _choice(choices: tuple[str, ...]) -> Callable:
    return lambda name, x: V.as_choice(name, x, choices)


def _nonnegative(name: str, x) -> float:
    return V.as_scalar(name, x, "[0, inf)")


@dataclass(frozen=True)
class Option:
    """One option of a rule: its default, as the trainer spells it, and its check."""

    default: object
    check: Callable
    doc: str


@dataclass(frozen=True, kw_only=True)
class Rule:
    """A trainer rule: its source, its options and the functions that say where it goes.

    Attributes
    ----------
    name : str
        The key in :data:`RULES`.
    trainer : str
        The library, class and version the row follows.
    source : str
        Where the facts were read (file and lines, or the paper).
    options : dict of str to Option
        The options, named and defaulted as the trainer names them.
    kl_term, baseline, scale, aggregation : str
        In words: which KL term and where, how the group is centred and scaled, and how
        per-token losses are combined.
    update : callable
        ``update(th, pi, ref, r, beta, o) -> g``: minus the expected gradient of the rule's
        loss for one group, in the logits.
    land : callable
        ``land(ref, r, beta, o, update) -> Landing`` on the reference's support.
    """

    name: str
    trainer: str
    source: str
    options: dict[str, Option]
    kl_term: str
    baseline: str
    scale: str
    aggregation: str
    update: Callable
    land: Callable
    notes: str = ""
    extra: dict = field(default_factory=dict)

    def resolve(self, given: dict) -> dict:
        """The options with defaults filled in, each checked; an unknown one is refused."""
        unknown = sorted(set(given) - set(self.options))
        if unknown:
            listed = ", ".join(f"{k}={v.default!r}" for k, v in self.options.items())
            raise ValueError(
                f"rule {self.name!r} has no option {unknown[0]!r}; its options are: {listed}"
            )
        out = {}
        for key, opt in self.options.items():
            out[key] = opt.check(key, given[key]) if key in given else opt.default
        return out


# ----------------------------------------------------------------------------- the pieces


def _kl_loss_update(th, ref, beta, corrected: bool, estimator: str = "k3"):
    """-beta times the expected gradient of the estimator's term in the loss (k3: TRL's GRPO
    term; ``corrected``: times the differentiable ratio)."""
    if beta == 0:
        return np.zeros_like(th)
    return expected_gradient(
        th,
        ref,
        np.zeros_like(th),
        beta,
        estimator=estimator,
        placement="loss",
        ratio="differentiable" if corrected else "none",
    )


def _score(pi, a):
    """sum_y pi(y) a(y) (e_y - pi): the expected score-function step of advantages a(y)."""
    return pi * (a - pi @ a)


def _pistar(rule, o, ref, r, b, reason) -> Landing:
    """pi* at beta b (b = 0: the greedy limit), with its reason."""
    pi = optimal_policy(ref, r, b)
    greedy = b == 0
    return Landing(
        rule=rule,
        options=o,
        policy=pi,
        beta_eff=float(b),
        interior=bool(np.all(pi > 0)) and not greedy,
        stable=True,
        kl=float(kl_divergence(pi, ref)),
        kind="greedy" if greedy else "pistar",
        reason=reason,
        points=(FixedPoint(policy=pi, stable=True, growth=-np.inf),),
    )


def _greedy(rule, o, ref, r, why) -> Landing:
    return _pistar(rule, o, ref, r, 0.0, why)


def _forward_kl(rule, o, ref, r, b, reason) -> Landing:
    """The maximiser of E_pi r - b KL(ref || pi), pi_j = b ref_j / (lam - r_j), with its reason."""
    pi = f_optimal_policy(ref, r, b, divergence="forward_kl")
    return Landing(
        rule=rule,
        options=o,
        policy=pi,
        beta_eff=None,
        interior=bool(np.all(pi > 0)),
        stable=True,
        kl=float(kl_divergence(pi, ref)),
        kind="forward_kl",
        beta_divergence=float(b),
        reason=reason,
        points=(FixedPoint(policy=pi, stable=True, growth=-np.inf),),
    )


def _numeric(rule, o, ref, r, beta, update, scale, reason) -> Landing:
    """The fixed points of ``update`` from starts along the pi* family; the first stable wins."""
    points = fixed_points(lambda th: update(th, _softmax(th)), ref, r, scale)
    stable = [p for p in points if p.stable]
    if not stable:
        return Landing(
            rule=rule,
            options=o,
            policy=None,
            beta_eff=None,
            interior=False,
            stable=False,
            kl=np.inf,
            kind="run_off",
            reason=reason + "; no stable fixed point was found from any start: training runs off",
            points=tuple(points),
        )
    pi = stable[0].policy
    b_eff = _beta_if_pistar(pi, ref, r)
    return Landing(
        rule=rule,
        options=o,
        policy=pi,
        beta_eff=b_eff,
        interior=bool(np.all(pi > 0)),
        stable=True,
        kl=float(kl_divergence(pi, ref)),
        kind="fixed_point",
        reason=reason + _several(len(stable)),
        points=tuple(points),
    )


def _beta_if_pistar(pi, ref, r) -> float | None:
    """1/s when log(pi/ref) = s r + c on the support (pi is pi* at beta 1/s), else None.

    Fitted by least squares and accepted when the residual is below 1e-9 of the log-ratios'
    range; with two outcomes (or two reward levels) every policy is in the family.
    """
    ell = np.log(pi) - np.log(ref)
    if np.ptp(r) == 0:
        return None
    A = np.column_stack([r, np.ones_like(r)])
    coef = np.linalg.lstsq(A, ell, rcond=None)[0]
    slope = float(coef[0])
    resid = np.max(np.abs(A @ coef - ell))
    if slope <= 0 or resid > 1e-9 * max(1.0, float(np.ptp(ell))):
        return None
    return float(1.0 / slope)


def _several(n: int) -> str:
    return f" ({n} stable fixed points; the first found from the reference)" if n > 1 else ""


def _softmax(th):
    e = np.exp(th - np.max(th))
    return e / e.sum()


# ----------------------------------------------------------------------------- GRPO and GSPO


def _grpo_advantage(pi, r, o):
    scaled = o["scale_rewards"] != "none"
    return group_advantage(
        pi,
        r,
        o["num_generations"],
        baseline="mean",
        scale="std" if scaled else "none",
        eps=TRL_STD_EPS,
    )


def _grpo_update(th, pi, ref, r, beta, o):
    g = _score(pi, _grpo_advantage(pi, r, o))
    return g + _kl_loss_update(th, ref, beta, o["use_bias_correction_kl"])


def _grpo_land(ref, r, beta, o, rule="grpo") -> Landing:
    G = o["num_generations"]
    corrected = o["use_bias_correction_kl"]
    if beta == 0:
        return _greedy(
            rule, o, ref, r, "beta = 0: no KL term, nothing holds the policy (TRL 1.16.0's default)"
        )
    if o["scale_rewards"] == "none":
        c = 1.0 if G is None else (G - 1) / G
        b = beta / c
        why = (
            "the group mean includes the sample, so the expected advantage is (G-1)/G (r - E r)"
            if G is not None
            else "the infinite group's mean is E_pi r"
        )
        if corrected:
            kl = "the ratio-corrected k3 follows the reverse KL"
            return _pistar(rule, o, ref, r, b, f"{why}; {kl}: beta G/(G-1)")
        return _forward_kl(
            rule, o, ref, r, b, f"{why}; plain k3 in the loss follows the forward KL(ref||pi)"
        )
    if G is None:
        return _family_land(rule, o, ref, r, beta, corrected)
    kl = "pi = ref exp(a(pi)/beta)/Z" if corrected else "the forward-KL balance of plain k3"
    return _numeric(
        rule,
        o,
        ref,
        r,
        beta,
        lambda th, pi: _grpo_update(th, pi, ref, r, beta, o),
        _residual_scale(G, beta),
        f"the advantage is divided by the group's std + 1e-4 (G = {G}): a fixed point of {kl}",
    )


def _residual_scale(G, beta) -> float:
    """The size of update / pi at a std-scaled fixed point: |a| <= sqrt(G), plus beta's terms."""
    return float(np.sqrt(G)) + beta + 1.0


def _family_land(rule, o, ref, r, beta, corrected) -> Landing:
    """Infinite group with the std scale: t = beta (sd_{pi_t} + eps) along pi* or the forward-KL family."""

    def family(t):
        if corrected:
            return optimal_policy(ref, r, t)
        return f_optimal_policy(ref, r, t, divergence="forward_kl")

    roots = family_roots(family, r, beta, TRL_STD_EPS)

    def update(th):
        return _grpo_update(th, _softmax(th), ref, r, beta, o)

    from ..core.internal import ascent_growth_rate

    points = []
    for t in roots:
        pi = family(t)
        if np.min(pi) > 1e-100:
            growth, tol = ascent_growth_rate(update, np.log(pi))
            stable = bool(growth < -tol)
        else:  # collapsed: the off-greedy mass is below 1e-100 (or underflowed); it stays there,
            # and a Jacobian by differences of the logits cannot see it
            growth, stable = -np.inf, True
        points.append((t, FixedPoint(policy=pi, stable=stable, growth=growth)))
    stable_points = [(t, p) for t, p in points if p.stable]
    t, fp = stable_points[0]
    pi = fp.policy
    interior = bool(np.all(pi > 0))
    why = (
        f"the infinite group's advantage is (r - E r)/(sd + 1e-4): beta' = beta (sd_pi*(beta') + 1e-4) "
        f"= {t:.6g}, {t / beta:.4g} times beta"
    )
    if not interior:
        why += "; the policy collapses to the greedy outcome within float64 (entropy collapse with the KL on)"
    if len(stable_points) > 1:
        why += f" ({len(stable_points)} stable roots; the one nearest the reference)"
    return Landing(
        rule=rule,
        options=o,
        policy=pi,
        beta_eff=float(t) if corrected else None,
        interior=interior,
        stable=True,
        kl=float(kl_divergence(pi, ref)),
        kind=("pistar" if interior else "greedy") if corrected else "forward_kl",
        beta_divergence=None if corrected else float(t),
        reason=why,
        points=tuple(p for _, p in points),
    )


GRPO_OPTIONS = {
    "num_generations": Option(8, _count_or_none, "G, the group size (None: the infinite group)"),
    "scale_rewards": Option("group", _choice(("group", "batch", "none")), "the std scale"),
    "loss_type": Option("dapo", _choice(("grpo", "bnpo", "dr_grpo", "dapo")), "token aggregation"),
    "use_bias_correction_kl": Option(True, V.as_bool, "k3 times the differentiable ratio"),
    "epsilon": Option(0.2, _nonnegative, "the ratio's clip (inactive on-policy)"),
    "num_iterations": Option(1, lambda n, x: V.as_count(n, x, lo=1), "updates per batch"),
}

# ----------------------------------------------------------------------------- RLOO, REINFORCE, PPO


def _shaped(pi, ref, r, beta, estimator: str = "k1"):
    """r - beta k: the reward with the sample's KL estimate (k1: its log-ratio) folded in
    (detached); 0 where pi is."""
    if beta == 0:
        return r
    on = pi > 0
    out = np.zeros_like(r)
    ell = np.log(pi[on]) - np.log(ref[on])
    out[on] = r[on] - beta * get_estimator(estimator).value(ell)
    return out


def _rloo_advantage(pi, ref, r, beta, o):
    v = _shaped(pi, ref, r, beta)
    G = o["num_generations"]
    if not o["normalize_advantages"]:
        return group_advantage(pi, v, G, baseline="loo", scale="none")
    # leave-one-out advantages are G/(G-1) (v - mean); standardising them over the group is
    # (v - mean) / (std + 1e-4 (G-1)/G)
    eps = TRL_STD_EPS if G is None else TRL_STD_EPS * (G - 1) / G
    return group_advantage(pi, v, G, baseline="mean", scale="std", eps=eps)


def _rloo_update(th, pi, ref, r, beta, o):
    return _score(pi, _rloo_advantage(pi, ref, r, beta, o))


def _rloo_land(ref, r, beta, o) -> Landing:
    if beta == 0:
        return _greedy("rloo", o, ref, r, "beta = 0: no KL in the reward")
    if not o["normalize_advantages"]:
        why = "the leave-one-out baseline is unbiased and k1 in the reward follows the reverse KL"
    else:
        why = (
            "at pi*(beta) every shaped reward r - beta log(pi/ref) is the same number, so every "
            "group's advantages are 0 whatever divides them: normalize_advantages changes the "
            "speed, not the landing point"
        )
    return _pistar("rloo", o, ref, r, beta, why)


RLOO_OPTIONS = {
    "num_generations": Option(2, _count_or_none, "G, the group size (None: the infinite group)"),
    "normalize_advantages": Option(False, V.as_bool, "standardise the advantages"),
    "epsilon": Option(0.2, _nonnegative, "the ratio's clip (inactive on-policy)"),
    "num_iterations": Option(1, lambda n, x: V.as_count(n, x, lo=1), "updates per batch"),
}


def _reinforce_update(th, pi, ref, r, beta, o):
    G, baseline, est = o["num_generations"], o["baseline"], o["kl_estimator"]
    if o["placement"] == "loss":
        a = group_advantage(pi, r, G, baseline=baseline, scale="none")
        return _score(pi, a) + _kl_loss_update(th, ref, beta, False, est)
    v = _shaped(pi, ref, r, beta, est)
    return _score(pi, group_advantage(pi, v, G, baseline=baseline, scale="none"))


_REINFORCE_BASELINES = {
    "none": "no baseline: E[grad log pi] = 0, so the expected step is the exact gradient",
    "loo": "the leave-one-out baseline is unbiased",
    "mean": "the batch mean includes the sample and scales the advantage by (G-1)/G",
}


def _reinforce_land(ref, r, beta, o) -> Landing:
    est, place = o["kl_estimator"], o["placement"]
    if beta == 0:
        return _greedy("reinforce", o, ref, r, f"beta = 0: no KL in the {place}")
    why = _REINFORCE_BASELINES[o["baseline"]]
    kind = get_estimator(est).fixed_point[place]
    if place == "reward":  # a mean baseline scales the whole shaped reward, KL too
        if kind == "optimum":
            return _pistar(
                "reinforce", o, ref, r, beta, f"{why}; k1 in the reward follows the reverse KL"
            )
        return _estimator_land("reinforce", o, ref, r, beta, est, "reward")
    G = o["num_generations"]
    b = beta * G / (G - 1) if o["baseline"] == "mean" and G is not None else beta
    if kind == "greedy":
        return _greedy("reinforce", o, ref, r, f"{why}; {est} in the loss has no expected gradient")
    if kind == "optimum":
        return _pistar(
            "reinforce", o, ref, r, b, f"{why}; {est} in the loss follows the reverse KL"
        )
    return _forward_kl(
        "reinforce", o, ref, r, b, f"{why}; {est} in the loss follows the forward KL(ref||pi)"
    )


def _ppo_update(th, pi, ref, r, beta, o):
    return expected_gradient(th, ref, r, beta, estimator=o["kl_estimator"], placement="reward")


def _ppo_land(ref, r, beta, o) -> Landing:
    if beta == 0:
        return _greedy("ppo", o, ref, r, "beta = 0: no KL in the reward")
    name = o["kl_estimator"]
    if get_estimator(name).fixed_point["reward"] == "optimum":  # k1
        why = f"{name} in the reward with a value baseline is the exact gradient"
        return _pistar("ppo", o, ref, r, beta, why)
    return _estimator_land("ppo", o, ref, r, beta, o["kl_estimator"], "reward")


def _estimator_land(rule, o, ref, r, beta, estimator, placement) -> Landing:
    """:func:`klpolicy.estimators.fixed_point` as a Landing; a run-off where it has none."""
    try:
        pi = _estimator_fixed_point(ref, r, beta, estimator=estimator, placement=placement)
    except ValueError as exc:
        return Landing(
            rule=rule,
            options=o,
            policy=None,
            beta_eff=None,
            interior=False,
            stable=False,
            kl=np.inf,
            kind="run_off",
            reason=str(exc).split(";")[0],
        )
    return Landing(
        rule=rule,
        options=o,
        policy=pi,
        beta_eff=None,
        interior=bool(np.all(pi > 0)),
        stable=True,
        kl=float(kl_divergence(pi, ref)),
        kind="fixed_point",
        reason=f"{estimator} in the {placement} (klpolicy.estimators.fixed_point)",
    )


def _distill_update(th, pi, ref, r, beta, o):
    # the advantage of a token is r + beta (log teacher - log pi): with r = 0 the per-token
    # negative reverse KL to the teacher (`ref`); no baseline (its expectation is 0 anyway)
    return _score(pi, _shaped(pi, ref, r, beta))


def _distill_land(ref, r, beta, o) -> Landing:
    if beta == 0:
        return _greedy("distill", o, ref, r, "beta = 0: the teacher's term is off")
    why = "the per-token negative reverse KL to the teacher is the advantage: " + (
        "it lands on the teacher" if np.all(r == r[0]) else "with a reward, at pi* of the teacher"
    )
    return _pistar("distill", o, ref, r, beta, why)


def _gspo_land(ref, r, beta, o) -> Landing:
    return _grpo_land(ref, r, beta, o, rule="gspo")


# ----------------------------------------------------------------------------- Clip-Cov, KL-Cov

#: verl 0.9.1 adds this to the group's std (core_algos.py, compute_grpo_outcome_advantage).
VERL_STD_EPS = 1e-6


def _verl_advantage(pi, r, o):
    """verl's GRPO outcome advantage, infinite group: (r - E r)/(sd + 1e-6), or r - E r."""
    scaled = o["norm_adv_by_std_in_grpo"]
    return group_advantage(
        pi, r, None, baseline="mean", scale="std" if scaled else "none", eps=VERL_STD_EPS
    )


def _clip_cov_update(th, pi, ref, r, beta, o):
    a = _verl_advantage(pi, r, o)
    w = clip_cov_weights(
        pi, a, ratio=o["clip_cov_ratio"], lower=o["clip_cov_lb"], upper=o["clip_cov_ub"]
    )
    return _score(pi, w * a) + _kl_loss_update(th, ref, beta, False)


def _kl_cov_update(th, pi, ref, r, beta, o):
    # on-policy |log pi - log pi_old| is |0|, whose gradient torch takes as sign(0) = 0: the
    # selected tokens' penalty adds nothing to the expected step
    return _score(pi, _verl_advantage(pi, r, o)) + _kl_loss_update(th, ref, beta, False)


def _covariance_land(rule, update_fn, why):
    def land(ref, r, beta, o) -> Landing:
        if beta == 0:
            return _greedy(
                rule, o, ref, r, f"{why}; beta = 0 (no KL loss): nothing holds the policy"
            )
        if rule == "clip_cov" and not o["clip_cov_lb"] < o["clip_cov_ub"]:
            clip_cov_weights(ref, r, ratio=1.0, lower=o["clip_cov_lb"], upper=o["clip_cov_ub"])
        got = _numeric(
            rule,
            o,
            ref,
            r,
            beta,
            lambda th, pi: update_fn(th, pi, ref, r, beta, o),
            _residual_scale(2, beta),
            f"{why}; the KL loss is plain k3 (verl's low_var_kl): a fixed point of the "
            "mean-field step",
        )
        if got.policy is not None:
            x = np.log(ref) - np.log(got.policy)
            k3 = float(np.max(np.expm1(x) - x))
            if k3 >= 10.0:
                got = dataclasses.replace(
                    got,
                    reason=got.reason + f"; here k3 reaches {k3:.4g}, beyond the +-10 at which "
                    "verl clamps it (a clamped term has no gradient there): verl lands elsewhere",
                )
        return got

    return land


_VERL_ADV = {
    "norm_adv_by_std_in_grpo": Option(
        True, V.as_bool, "divide by the group's std + 1e-6 (the infinite group here)"
    ),
}

CLIP_COV_OPTIONS = _VERL_ADV | {
    "clip_cov_ratio": Option(
        2e-4, lambda n, x: V.as_scalar(n, x, "(0, 1]"), "fraction of the batch's tokens detached"
    ),
    "clip_cov_lb": Option(1.0, lambda n, x: V.as_scalar(n, x), "the band's lower end"),
    "clip_cov_ub": Option(5.0, lambda n, x: V.as_scalar(n, x), "the band's upper end"),
}

KL_COV_OPTIONS = _VERL_ADV | {
    "kl_cov_ratio": Option(
        2e-4, lambda n, x: V.as_scalar(n, x, "(0, 1]"), "fraction of tokens penalised"
    ),
    "ppo_kl_coef": Option(0.1, _nonnegative, "the |log ratio| penalty's coefficient"),
}


RULES: dict[str, Rule] = {
    "grpo": Rule(
        name="grpo",
        trainer="TRL 1.16.0 GRPOTrainer",
        source="trl/trainer/grpo_trainer.py lines 2765-2787, 3099-3173; grpo_config.py",
        options=GRPO_OPTIONS,
        kl_term="k3 in the loss, times the differentiable ratio when use_bias_correction_kl",
        baseline="the group mean (the sample included)",
        scale="the group's unbiased std + 1e-4 ('group', 'batch'; one group per batch here), or none",
        aggregation="loss_type: per-sequence token mean (grpo), global token mean (bnpo, dapo), "
        "a constant (dr_grpo); all the group mean for one-token completions",
        update=_grpo_update,
        land=_grpo_land,
        notes="epsilon and num_iterations do not enter an on-policy step: at a fixed point the "
        "ratio is 1 in every inner iteration",
    ),
    "gspo": Rule(
        name="gspo",
        trainer="TRL 1.16.0 GRPOTrainer with importance_sampling_level='sequence' (GSPO)",
        source="Zheng et al. 2025, arXiv:2507.18071; grpo_trainer.py lines 3084-3092 (log_importance_weights)",
        options=GRPO_OPTIONS,
        kl_term="as grpo",
        baseline="the group mean",
        scale="as grpo",
        aggregation="the sequence-level ratio exp(mean_t log ratio); for one-token completions as grpo",
        update=_grpo_update,
        land=_gspo_land,
    ),
    "rloo": Rule(
        name="rloo",
        trainer="TRL 1.16.0 RLOOTrainer",
        source="trl/trainer/rloo_trainer.py lines 1669-1696; rloo_config.py",
        options=RLOO_OPTIONS,
        kl_term="sequence k1 folded into the reward with beta (detached)",
        baseline="leave-one-out mean of the shaped rewards",
        scale="none, or the advantages standardised over the batch (normalize_advantages)",
        aggregation="per-sequence loss, mean over the batch",
        update=_rloo_update,
        land=_rloo_land,
    ),
    "reinforce": Rule(
        name="reinforce",
        trainer="REINFORCE with a KL-shaped reward (Williams 1992; Ziegler et al. 2019), "
        "or a KL estimator in the reward or the loss (klpolicy.torch's 'reinforce')",
        source="arXiv:1909.08593 eq. 2; klpolicy/torch/_steps.py (step_reinforce)",
        options={
            "baseline": Option(
                "none",
                _choice(("none", "mean", "loo")),
                "none, the batch mean, or the leave-one-out mean",
            ),
            "num_generations": Option(8, _count_or_none, "batch size of the mean baseline"),
            "kl_estimator": Option(
                "k1", _choice(estimator_names(kl_only=True)), "the per-sample KL estimate"
            ),
            "placement": Option(
                "reward",
                _choice(("reward", "loss")),
                "folded into the reward (detached) or added to the loss (differentiated)",
            ),
        },
        kl_term="kl_estimator folded into the reward (k1 by default), or added to the loss",
        baseline="none, the batch mean (the sample included), or the leave-one-out mean",
        scale="none",
        aggregation="per sequence",
        update=_reinforce_update,
        land=_reinforce_land,
    ),
    "ppo": Rule(
        name="ppo",
        trainer="PPO with the KL in the reward (Ziegler et al. 2019; InstructGPT)",
        source="arXiv:1909.08593, arXiv:2203.02155; large batch, exact value baseline",
        options={
            # TRL's PPOTrainer offers k1 and k3; every KL estimator of the registry is a row here
            "kl_estimator": Option(
                "k1", _choice(estimator_names(kl_only=True)), "the per-sample KL in the reward"
            )
        },
        kl_term="kl_estimator folded into the reward",
        baseline="the value function (exactly E_pi of the shaped reward)",
        scale="none",
        aggregation="per token, summed (one token here)",
        update=_ppo_update,
        land=_ppo_land,
    ),
    "distill": Rule(
        name="distill",
        trainer="on-policy distillation (Agarwal et al. 2024, arXiv:2306.13649; Thinking Machines 2025)",
        source="per-token advantage -(log pi - log teacher); `ref` is the teacher",
        options={"discount": Option(0.0, V.as_closed_interval, "0: own token; 1: return-to-go")},
        kl_term="the negative per-token reverse KL to the teacher as the advantage, times beta",
        baseline="none",
        scale="none",
        aggregation="per token (discount 0) or return-to-go (discount 1); the same for one token",
        update=_distill_update,
        land=_distill_land,
    ),
    "clip_cov": Rule(
        name="clip_cov",
        trainer="verl 0.9.1 policy_loss.loss_mode='clip_cov' (Cui et al. 2025, Clip-Cov)",
        source="arXiv:2505.22617; verl/trainer/ppo/core_algos.py lines 1744-1846 "
        "(compute_policy_loss_clip_cov); verl/workers/config/actor.py lines 95-97 (defaults)",
        options=CLIP_COV_OPTIONS,
        kl_term="beta times plain k3 in the loss (use_kl_loss, low_var_kl); beta = 0 is off",
        baseline="the group mean (verl's GRPO advantage), the infinite group",
        scale="the std + 1e-6 (norm_adv_by_std_in_grpo), or none",
        aggregation="token mean over the batch; a random clip_cov_ratio of the batch's tokens "
        "whose covariance c lies in (clip_cov_lb, clip_cov_ub) is detached: in the mean-field "
        "limit outcome y of the band S keeps 1 - min(1, clip_cov_ratio / pi(S)) of its gradient",
        update=_clip_cov_update,
        land=_covariance_land(
            "clip_cov",
            _clip_cov_update,
            "the band's outcomes lose min(1, clip_cov_ratio / pi(band)) of their policy gradient",
        ),
        notes="mean-field: an infinite batch and group (verl's int() rounding and its floor of "
        "one detached token vanish); on-policy the PPO clip is inactive",
    ),
    "kl_cov": Rule(
        name="kl_cov",
        trainer="verl 0.9.1 policy_loss.loss_mode='kl_cov' (Cui et al. 2025, KL-Cov)",
        source="arXiv:2505.22617; verl/trainer/ppo/core_algos.py lines 1849-1920 "
        "(compute_policy_loss_kl_cov); verl/workers/config/actor.py lines 98-99 (defaults)",
        options=KL_COV_OPTIONS,
        kl_term="beta times plain k3 in the loss (use_kl_loss); plus ppo_kl_coef |log pi - "
        "log pi_old| on the top kl_cov_ratio of tokens by covariance",
        baseline="the group mean (verl's GRPO advantage), the infinite group",
        scale="the std + 1e-6 (norm_adv_by_std_in_grpo), or none",
        aggregation="token mean over the batch",
        update=_kl_cov_update,
        land=_covariance_land(
            "kl_cov",
            _kl_cov_update,
            "on-policy the |log ratio| penalty is |0| with gradient sign(0) = 0: KL-Cov's step is "
            "the plain policy gradient's, and it lands where that does (its penalty acts only "
            "off-policy, within a batch's later mini-batches)",
        ),
        notes="mean-field, on-policy: the penalty changes the path of later mini-batch steps, "
        "not the expected on-policy step or the landing point",
    ),
}


def rule_names() -> tuple[str, ...]:
    """The names of :data:`RULES`."""
    return tuple(RULES)
