"""The results of :mod:`klpolicy.dynamics`: where a rule lands, and the path it takes."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

__all__ = ["FixedPoint", "Landing", "Trajectory"]


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
