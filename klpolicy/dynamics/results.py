"""The results of :mod:`klpolicy.dynamics`: where a rule lands, and the path it takes."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

__all__ = ["FixedPoint", "Landing", "Trajectory", "TreeLanding"]


@dataclass(frozen=True)
class FixedPoint:
    """One zero of a rule's expected update: the policy, whether training stays there.

    ``growth`` is the largest real part of the eigenvalues of the update's Jacobian in the
    free logits (negative: stable; :func:`klpolicy.core.internal.ascent_growth_rate`).
    """

    policy: NDArray[np.float64]
    stable: bool
    growth: float


@dataclass(frozen=True)
class Landing:
    """Where on-policy training with a rule converges, and why.

    Attributes
    ----------
    rule : str
        The rule's name in :data:`klpolicy.dynamics.RULES`.
    options : dict
        Every option of the rule, as the trainer names them (defaults filled in).
    policy : ndarray or None
        The landing point (``None`` for a run-off: no point to land on).
    beta_eff : float or None
        The beta at which ``policy`` is the KL-regularised optimum
        ``pi* = ref exp(r / beta_eff) / Z`` (``0.0`` for the greedy limit); ``None`` where
        the policy is not in that family (a forward-KL optimum, a fixed point of a scaled
        advantage, a run-off).
    interior : bool
        Whether the policy keeps every outcome of the reference's support (in float64).
        ``False`` for the greedy limit (``kind == "greedy"``), a collapse whose
        off-greedy mass underflows, and a run-off.
    stable : bool
        Whether training stays at the point (every eigenvalue of the expected update's
        Jacobian has negative real part, or a closed form's concavity).
    kl : float
        ``KL(policy || ref)`` in nats (``inf`` for a run-off).
    kind : str
        ``"pistar"``, ``"greedy"``, ``"forward_kl"`` (the forward-KL-regularised optimum at
        ``beta_divergence``), ``"fixed_point"`` or ``"run_off"``.
    beta_divergence : float or None
        For ``kind == "forward_kl"``: the coefficient of KL(ref || pi) whose optimum it is.
    points : tuple of FixedPoint
        Every fixed point found (several stable ones are all reported); the landing point
        is the first stable one reached from the reference.
    reason : str
        Why it lands there, in words.
    """

    rule: str
    options: dict
    policy: NDArray[np.float64] | None
    beta_eff: float | None
    interior: bool
    stable: bool
    kl: float
    kind: str
    reason: str
    beta_divergence: float | None = None
    points: tuple[FixedPoint, ...] = field(default_factory=tuple)

    def __str__(self) -> str:
        if self.kind == "run_off":
            where = "runs off (no fixed point)"
        elif self.kind == "greedy" and self.beta_eff:
            where = (
                f"collapses to the greedy limit (pi* at beta_eff = {self.beta_eff:.3g}, whose "
                "off-greedy mass underflows)"
            )
        elif self.kind == "greedy":
            where = "lands at the greedy limit (beta_eff = 0)"
        elif self.beta_eff is not None:
            where = f"lands at pi* at beta_eff = {self.beta_eff:.6g}"
        elif self.kind == "forward_kl":
            where = f"lands at the forward-KL optimum at beta = {self.beta_divergence:.6g}"
        else:
            where = "lands at a fixed point outside the pi* family"
        extra = "" if self.kind in ("run_off",) else f", KL {self.kl:.4g} nats"
        unstable = "" if self.stable or self.kind == "run_off" else " (unstable)"
        return f"{self.rule} {where}{unstable}{extra}: {self.reason}"


@dataclass(frozen=True)
class Trajectory:
    """The mean-field path: the exact expected update iterated from the reference.

    Attributes
    ----------
    policy : ndarray, shape (steps + 1, n)
        The policy after each step (row 0: the start).
    reward : ndarray, shape (steps + 1,)
        ``E_pi[r]`` along the path.
    entropy : ndarray, shape (steps + 1,)
        ``H(pi)`` in nats.
    kl_to_ref : ndarray, shape (steps + 1,)
        ``KL(pi || ref0)`` to the initial reference.
    kl_to_landing : ndarray, shape (steps + 1,)
        ``KL(pi || landing)`` to the rule's landing point for the initial reference
        (NaN where it has none).
    beta_fit : ndarray, shape (steps + 1,)
        The beta whose pi* (of the initial reference) has the policy's expected reward:
        the pi* nearest the policy in KL(pi || pi*_beta), exactly (``inf`` at or below
        E_ref r).
    ref : ndarray, shape (steps + 1, n)
        The reference the step used (it moves with ``sync_ref_model``).
    landing : Landing
        :func:`klpolicy.dynamics.landing_point` of the rule on the initial reference.
    """

    policy: NDArray[np.float64]
    reward: NDArray[np.float64]
    entropy: NDArray[np.float64]
    kl_to_ref: NDArray[np.float64]
    kl_to_landing: NDArray[np.float64]
    beta_fit: NDArray[np.float64]
    ref: NDArray[np.float64]
    landing: Landing


@dataclass(frozen=True)
class TreeLanding:
    """Where on-policy GRPO training on a token tree lands, and how long its completions are.

    Attributes
    ----------
    rule : str
        ``"grpo"``.
    options : dict
        Every option (TRL's names, defaults filled in, ``max_completion_length`` resolved).
    policy : list of ndarray or None
        The landing point's conditionals (the reference's rows at prefixes it never
        reaches); ``None`` when there is none (``beta = 0``, a run-off).
    kind : str
        ``"myopic"`` (the closed form: the per-node reverse-KL optimum with the policy's own
        expected reward below each token, at ``beta_token``), ``"myopic_forward_kl"`` (the
        same with the plain k3's forward KL), ``"fixed_point"`` (a root of the exact
        update), ``"greedy"`` (``beta = 0``) or ``"run_off"``.
    stable : bool
        Every eigenvalue of the Jacobian of the per-prefix natural field (the update divided
        by ``P(h) pi`` at each reached prefix, the free logits) has negative real part.
    interior : bool
        The policy keeps every token of the reference's support at every reached prefix.
    kl : float
        The sequence-level ``KL(policy || ref)`` in nats.
    mean_length : float or None
        ``E[L]`` of the landing law, in tokens (an EOS counts, as in TRL's mask).
    pistar_mean_length : float or None
        ``E[L]`` of the sequence-level ``pi* = ref exp(r / beta) / Z`` at the configured beta.
    length_bias : float or None
        ``mean_length - pistar_mean_length``: positive, the trainer lands on longer
        completions than pi*; negative, shorter.
    neutral_mean_length : float or None
        ``E[L]`` of the landing point with ``loss_type="dr_grpo"`` and the same options
        (the length-neutral aggregation).
    aggregation_bias : float or None
        ``mean_length - neutral_mean_length``: what the aggregation over tokens alone does
        to the length (0 for ``dr_grpo``).
    beta_token : float or None
        For the closed forms: the coefficient ``b`` of the per-token KL of the myopic
        equilibrium (``beta G/(G-1)``; ``beta`` for the infinite group).
    reason : str
        Why it lands there, in words.
    """

    rule: str
    options: dict
    policy: list | None
    kind: str
    stable: bool
    interior: bool
    kl: float
    mean_length: float | None
    pistar_mean_length: float | None
    length_bias: float | None
    neutral_mean_length: float | None
    aggregation_bias: float | None
    beta_token: float | None
    reason: str

    def __str__(self) -> str:
        lt = self.options.get("loss_type")
        head = f"{self.rule} (loss_type={lt!r})"
        if self.policy is None:
            where = "has no landing point" if self.kind == "greedy" else "runs off"
            return f"{head} {where}: {self.reason}"
        what = {
            "myopic": f"lands at the myopic equilibrium at b = {self.beta_token:.6g}"
            if self.beta_token is not None
            else "lands at the myopic equilibrium",
            "myopic_forward_kl": "lands at the myopic forward-KL equilibrium",
            "fixed_point": "lands at a fixed point",
        }.get(self.kind, "lands")
        unstable = "" if self.stable else " (unstable)"
        bias = self.length_bias
        way = "longer" if bias > 0 else "shorter"
        agg = (
            ""
            if self.aggregation_bias is None
            else f" (aggregation alone: {self.aggregation_bias:+.3g})"
        )
        return (
            f"{head} {what}{unstable}: mean length {self.mean_length:.4g} tokens, "
            f"{abs(bias):.3g} {way} than pi*'s {self.pistar_mean_length:.4g}{agg}, "
            f"KL {self.kl:.4g} nats: {self.reason}"
        )
