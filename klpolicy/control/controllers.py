r"""KL-coefficient controllers: steer :math:`\beta` so that the policy spends a KL budget.

RLHF trainers penalise :math:`\beta\,\mathrm{KL}(\pi\|\pi_{ref})` and adjust
:math:`\beta` between updates so that the measured KL tracks a target. This
module holds the rules in use, each with TRL's interface (a ``.value``
attribute and ``.update(current, n_steps)``), so that they can be dropped into
a trainer or into :func:`klpolicy.control.simulate`, which closes the loop on
an analytic problem whose optimum is known exactly.

===============================  =============================================================
:class:`FixedKLController`       constant :math:`\beta`
:class:`AdaptiveKLController`    Ziegler et al. (2019): clipped proportional rule on
                                 :math:`\log\beta`, as in lm-human-preferences and TRL
:class:`DeadZoneKLController`    Schulman et al. (2017), PPO paper section 4: halve or double
                                 :math:`\beta` outside a band (RLlib's variant is an option)
:class:`LagrangianKLController`  projected dual ascent on :math:`\beta` for
                                 :math:`\max \mathbb{E}[r]` s.t. :math:`\mathrm{KL}\le` target
===============================  =============================================================

A KL target is either *per sequence* (the sum of per-token log-ratios of a
response, what TRL's PPO trainer feeds to its controller) or *per token*
(that sum divided by the number of tokens); every controller with a target
says which in its ``per`` attribute, and :func:`convert_kl_target` converts.
"""

from __future__ import annotations

import sys
from typing import Any

from ..core.internal import validation as V
from ._inputs import as_factor, as_kl_measurement, as_nonnegative_scalar

__all__ = [
    "AdaptiveKLController",
    "DeadZoneKLController",
    "FixedKLController",
    "LagrangianKLController",
    "convert_kl_target",
]

_PER = ("sequence", "token")
# a multiplier 1 + step within this many ulps (of the terms 1 and |step|) of 0 is zero
_ZERO_ULPS = 8
_EPS = sys.float_info.epsilon


def _multiplier_is_positive(step: float) -> bool:
    """Whether ``1 + step`` is positive beyond the rounding of forming it.

    ``1 + (-0.1) * 10`` is 0 in exact arithmetic and ``3.3e-16`` in floats (``5.4 / 6 - 1``
    rounds to ``-0.09999999999999998``); a multiplier that small is rounding, not a step.
    """
    return 1 + step > _ZERO_ULPS * _EPS * (1 + abs(step))


def _as_per(per: Any) -> str:
    if per not in _PER:
        raise ValueError(f"`per` must be 'sequence' or 'token'; got {per!r}")
    return per


def convert_kl_target(target: float, length: float, *, to: str) -> float:
    r"""Convert a KL target between per-sequence and per-token units.

    .. math::

        \mathrm{KL}_{token} = \mathrm{KL}_{sequence} / L, \qquad
        \mathrm{KL}_{sequence} = L\,\mathrm{KL}_{token}

    Parameters
    ----------
    target : float
        The KL target to convert, in nats, ``> 0``.
    length : float
        Response length :math:`L` in tokens, ``> 0``; for responses of varying
        length, the mean length (the ratio of the summed KL to the token count
        that a masked per-token mean computes).
    to : {"token", "sequence"}
        The unit to convert *to*.

    Returns
    -------
    float
        The target in the requested unit.

    Raises
    ------
    ValueError
        For a non-positive or non-finite ``target`` or ``length``, or an
        unknown ``to``.

    Notes
    -----
    By the chain rule the KL between two autoregressive distributions over
    responses of :math:`L` tokens is the sum over positions of the expected
    per-token KL, so a per-sequence target of 6 nats over 24 tokens is a
    per-token target of 0.25 nats. TRL's ``PPOTrainer`` passes the summed
    log-ratio (per sequence, averaged over the batch) to
    ``kl_ctl.update``; trainers that average over tokens need the per-token
    target.

    References
    ----------
    .. [1] Ziegler et al., "Fine-Tuning Language Models from Human Preferences",
       2019, arXiv:1909.08593.

    Examples
    --------
    >>> from klpolicy.control import convert_kl_target
    >>> convert_kl_target(6.0, 24, to="token")
    0.25
    >>> convert_kl_target(0.25, 24, to="sequence")
    6.0
    """
    t = V.as_positive_scalar("target", target)
    n = V.as_positive_scalar("length", length)
    if to == "token":
        return t / n
    if to == "sequence":
        return t * n
    raise ValueError(f"`to` must be 'token' or 'sequence'; got {to!r}")


class FixedKLController:
    r"""A constant KL coefficient: :math:`\beta_{t+1} = \beta_t`.

    Parameters
    ----------
    kl_coef : float
        The coefficient, ``>= 0``.

    Attributes
    ----------
    value : float
        The current coefficient.

    Raises
    ------
    ValueError
        For a negative or non-finite ``kl_coef``; from :meth:`update`, for a
        non-finite ``current`` or an ``n_steps`` below 1.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.

    Examples
    --------
    >>> from klpolicy.control import FixedKLController
    >>> c = FixedKLController(0.05)
    >>> c.update(3.0, 256)
    >>> c.value
    0.05
    """

    def __init__(self, kl_coef: float) -> None:
        self.value = as_nonnegative_scalar("kl_coef", kl_coef)

    def update(self, current: float, n_steps: int) -> None:
        """Check the measurement and leave the coefficient unchanged."""
        as_kl_measurement("current", current)
        V.as_positive_int("n_steps", n_steps)

    def __repr__(self) -> str:
        return f"FixedKLController(kl_coef={self.value!r})"


class AdaptiveKLController:
    r"""Ziegler et al.'s (2019) clipped proportional controller, as TRL applies it.

    .. math::

        e_t = \mathrm{clip}\!\left(\frac{\mathrm{KL}_t}{\mathrm{KL}_{target}} - 1,
              -0.2, 0.2\right), \qquad
        \beta_{t+1} = \beta_t \left(1 + e_t\,\frac{n_{steps}}{H}\right)

    Parameters
    ----------
    init_kl_coef : float
        Initial coefficient :math:`\beta_0 > 0` (a multiplicative rule cannot
        leave 0). TRL's default: 0.2.
    target : float
        KL target, ``> 0``, in the unit given by ``per``. TRL's default: 6
        (nats per sequence).
    horizon : float
        :math:`H > 0`: the number of samples over which a relative error is
        integrated into :math:`\log\beta` (for small errors, :math:`\beta` moves
        by :math:`e_t` in relative terms every :math:`H` samples). TRL's
        default: 10000.
    clip : float, optional
        The clip on the proportional error (0.2 in every reference
        implementation), ``> 0``.
    per : {"sequence", "token"}, optional
        Unit of ``target`` and of the KL passed to :meth:`update`
        (default ``"sequence"``, TRL's).

    Attributes
    ----------
    value : float
        The current coefficient :math:`\beta_t`.

    Raises
    ------
    ValueError
        For ``init_kl_coef <= 0``, ``target <= 0``, ``horizon <= 0``, a
        non-finite value, or an unknown ``per``. :meth:`update` raises for a
        non-finite ``current``, ``n_steps < 1``, and when
        ``n_steps / horizon`` is so large that the multiplier is not positive
        beyond rounding (zero or negative, or within 8 ulps of zero: the
        reference implementations then return a negative coefficient, or one
        that is rounding noise); the state is left unchanged.

    Notes
    -----
    ``n_steps`` is the number of samples (TRL: ``batch_size`` times the number
    of processes) since the last update, so the gain per update is
    :math:`n_{steps}/H`. With TRL's defaults (batch 256, :math:`H = 10^4`)
    the gain is 0.0256 and :math:`\beta` moves by at most 0.512 % per update.

    A multiplier :math:`1 + e_t n_{steps}/H` that is not positive is refused,
    never clipped: a clip would pick an arbitrary floor for :math:`\beta`.
    "Not positive" is judged beyond the rounding of forming it, within
    8 ulps of the terms :math:`1` and :math:`|e_t| n_{steps}/H`:
    ``AdaptiveKLController(1.0, 6.0, 100).update(5.4, 1000)`` multiplies by
    :math:`1 + (-0.1) \cdot 10`, which is 0 in exact arithmetic and
    ``3.3e-16`` in floats (21 such updates would leave :math:`\beta = 0.0`),
    and is refused like a negative multiplier. Every multiplier that
    :math:`n_{steps}/H < 1/\mathrm{clip}` allows is at least
    :math:`1 - \mathrm{clip}\,n_{steps}/H > 0` in exact arithmetic.
    In log space the rule is an integral controller on the relative KL error
    with a saturation; :doc:`/derivations/control` derives its closed-loop
    stability (linearised: stable iff :math:`g\,\eta < 1`, with
    :math:`g = n_{steps}/H` and :math:`\eta = -d\log\mathrm{KL}/d\log\beta`).

    The defaults cited are those of TRL's ``PPOConfig`` (``adap_kl_ctrl=True,
    init_kl_coef=0.2, target=6, horizon=10000``), and the update is the one of
    ``trl.trainer.utils.AdaptiveKLController``, itself taken from OpenAI's
    lm-human-preferences code released with Ziegler et al. (2019).

    References
    ----------
    .. [1] Ziegler et al., "Fine-Tuning Language Models from Human Preferences",
       2019, arXiv:1909.08593, section 2.2.
    .. [2] von Werra et al., TRL: Transformer Reinforcement Learning,
       ``trl/trainer/utils.py`` and ``trl/trainer/ppo_config.py``.

    Examples
    --------
    >>> from klpolicy.control import AdaptiveKLController
    >>> c = AdaptiveKLController(0.2, target=6.0, horizon=10000)
    >>> c.update(3.0, 256)  # error -0.5 is clipped to -0.2
    >>> round(c.value, 12)  # 0.2 * (1 - 0.2 * 256 / 10000)
    0.198976
    """

    def __init__(
        self,
        init_kl_coef: float,
        target: float,
        horizon: float,
        *,
        clip: float = 0.2,
        per: str = "sequence",
    ) -> None:
        self.value = V.as_positive_scalar("init_kl_coef", init_kl_coef)
        self.target = V.as_positive_scalar("target", target)
        self.horizon = V.as_positive_scalar("horizon", horizon)
        self.clip = V.as_positive_scalar("clip", clip)
        self.per = _as_per(per)

    def update(self, current: float, n_steps: int) -> None:
        """Apply one step of the clipped proportional rule (see the class docstring)."""
        kl = as_kl_measurement("current", current)
        n = V.as_positive_int("n_steps", n_steps)
        error = min(max(kl / self.target - 1, -self.clip), self.clip)
        step = error * n / self.horizon
        if not _multiplier_is_positive(step):
            zero = " (zero up to rounding)" if 1 + step > 0 else ""
            raise ValueError(
                f"`n_steps` / `horizon` = {n} / {self.horizon:g} is too large: the multiplier "
                f"1 + error * n_steps / horizon = {1 + step:.6g}{zero} (error {error:.6g}) would "
                f"make the coefficient non-positive; use n_steps / horizon < {1 / self.clip:g}"
            )
        self.value *= 1 + step

    def __repr__(self) -> str:
        return (
            f"AdaptiveKLController(value={self.value!r}, target={self.target!r}, "
            f"horizon={self.horizon!r}, per={self.per!r})"
        )


class DeadZoneKLController:
    r"""The PPO paper's multiplicative dead-zone rule (section 4), with RLlib's variant.

    .. math::

        \beta_{t+1} =
        \begin{cases}
            \beta_t / f_{down} & \mathrm{KL}_t < \mathrm{KL}_{target} / b_{low} \\
            \beta_t \, f_{up}  & \mathrm{KL}_t > \mathrm{KL}_{target} \, b_{up} \\
            \beta_t            & \text{otherwise}
        \end{cases}

    The published rule has :math:`b_{low} = b_{up} = 1.5` and
    :math:`f_{down} = f_{up} = 2`.

    Parameters
    ----------
    init_kl_coef : float
        Initial coefficient, ``> 0``.
    target : float
        KL target :math:`d_{targ}`, ``> 0``, in the unit given by ``per``.
    band : float, optional
        :math:`b_{low} = b_{up}` unless overridden, ``> 1`` (default 1.5).
    factor : float, optional
        :math:`f_{down} = f_{up}` unless overridden, ``> 1`` (default 2.0).
    lower_band, upper_band, decrease, increase : float, optional
        Asymmetric overrides of :math:`b_{low}`, :math:`b_{up}`,
        :math:`f_{down}`, :math:`f_{up}` (each ``> 1``). RLlib's rule is
        ``band=2.0, decrease=2.0, increase=1.5``: see :meth:`rllib`.
    per : {"sequence", "token"}, optional
        Unit of ``target`` and of the KL passed to :meth:`update`.

    Attributes
    ----------
    value : float
        The current coefficient.
    low, high : float
        The edges of the dead zone, ``target / lower_band`` and
        ``target * upper_band``.

    Raises
    ------
    ValueError
        For ``init_kl_coef <= 0``, ``target <= 0``, a band or factor ``<= 1``,
        a non-finite value or an unknown ``per``; from :meth:`update`, for a
        non-finite ``current`` or ``n_steps < 1``.

    Notes
    -----
    Textbooks sometimes call this the "InstructGPT-style" controller; the
    published rule is in the PPO paper (Schulman et al., 2017, section 4,
    "Adaptive KL Penalty Coefficient"), where :math:`d` is the KL between
    successive policies. Both inequalities are strict, as in the paper and in
    RLlib. ``n_steps`` is checked and otherwise ignored: the rule acts once per
    update. With an instant response the loop can only come to rest inside
    the band if one step of the factor moves the KL by less than the band's
    width, :math:`\mathrm{KL}(\beta/f_{down})/\mathrm{KL}(\beta) < b_{low}b_{up}`;
    otherwise it can cycle across the band for ever (see
    :doc:`/derivations/control`).

    References
    ----------
    .. [1] Schulman et al., "Proximal Policy Optimization Algorithms", 2017,
       arXiv:1707.06347, section 4.
    .. [2] Ray RLlib, ``KLCoeffMixin.update_kl`` (PPO): multiply by 1.5 above
       twice the target, by 0.5 below half of it.

    Examples
    --------
    >>> from klpolicy.control import DeadZoneKLController
    >>> c = DeadZoneKLController(1.0, target=0.1)
    >>> for kl in [0.2, 0.12, 0.05]:
    ...     c.update(kl, 1)
    ...     print(c.value)
    2.0
    2.0
    1.0
    """

    def __init__(
        self,
        init_kl_coef: float,
        target: float,
        band: float = 1.5,
        factor: float = 2.0,
        *,
        lower_band: float | None = None,
        upper_band: float | None = None,
        decrease: float | None = None,
        increase: float | None = None,
        per: str = "sequence",
    ) -> None:
        self.value = V.as_positive_scalar("init_kl_coef", init_kl_coef)
        self.target = V.as_positive_scalar("target", target)
        band = as_factor("band", band)
        factor = as_factor("factor", factor)
        self.lower_band = band if lower_band is None else as_factor("lower_band", lower_band)
        self.upper_band = band if upper_band is None else as_factor("upper_band", upper_band)
        self.decrease = factor if decrease is None else as_factor("decrease", decrease)
        self.increase = factor if increase is None else as_factor("increase", increase)
        self.per = _as_per(per)

    @classmethod
    def rllib(cls, init_kl_coef: float, target: float, **kwargs: Any) -> DeadZoneKLController:
        """RLlib's PPO rule: ``*1.5`` above ``2 * target``, ``*0.5`` below ``0.5 * target``.

        Examples
        --------
        >>> from klpolicy.control import DeadZoneKLController
        >>> c = DeadZoneKLController.rllib(0.2, 0.01)
        >>> c.low, c.high, c.decrease, c.increase
        (0.005, 0.02, 2.0, 1.5)
        """
        return cls(init_kl_coef, target, band=2.0, decrease=2.0, increase=1.5, **kwargs)

    @property
    def low(self) -> float:
        """Lower edge of the dead zone, ``target / lower_band``."""
        return self.target / self.lower_band

    @property
    def high(self) -> float:
        """Upper edge of the dead zone, ``target * upper_band``."""
        return self.target * self.upper_band

    def update(self, current: float, n_steps: int) -> None:
        """Halve/double (or the configured factors) outside the band; nothing inside."""
        kl = as_kl_measurement("current", current)
        V.as_positive_int("n_steps", n_steps)
        if kl < self.low:
            self.value /= self.decrease
        elif kl > self.high:
            self.value *= self.increase

    def __repr__(self) -> str:
        return (
            f"DeadZoneKLController(value={self.value!r}, target={self.target!r}, "
            f"band=({self.lower_band!r}, {self.upper_band!r}), "
            f"factors=({self.decrease!r}, {self.increase!r}), per={self.per!r})"
        )


class LagrangianKLController:
    r"""Projected dual ascent on :math:`\beta` for the KL-constrained problem.

    .. math::

        \max_\pi \mathbb{E}_\pi[r] \ \text{s.t.}\ \mathrm{KL}(\pi\|\pi_{ref}) \le \epsilon
        \quad\Longrightarrow\quad
        \beta_{t+1} = \max\!\big(\beta_{min},\ \beta_t + \eta_\beta\,(\mathrm{KL}_t - \epsilon)\big)

    Parameters
    ----------
    init_kl_coef : float
        Initial multiplier :math:`\beta_0 \ge 0`.
    target : float
        The constraint level :math:`\epsilon > 0`, in the unit given by ``per``.
    lr : float
        Dual step size :math:`\eta_\beta > 0` (units of :math:`\beta` per nat).
    min_kl_coef : float, optional
        Projection floor :math:`\beta_{min} \ge 0` (default 0, the exact dual
        feasible set).
    per : {"sequence", "token"}, optional
        Unit of ``target`` and of the KL passed to :meth:`update`.

    Attributes
    ----------
    value : float
        The current multiplier.

    Raises
    ------
    ValueError
        For negative or non-finite coefficients, ``target <= 0``, ``lr <= 0``,
        ``init_kl_coef < min_kl_coef`` or an unknown ``per``; from
        :meth:`update`, for a non-finite ``current`` or ``n_steps < 1``.

    Notes
    -----
    The Lagrangian :math:`\mathbb{E}_\pi[r] - \beta(\mathrm{KL} - \epsilon)` is
    maximised over :math:`\pi` by :math:`\pi^*_\beta`, and the dual function
    :math:`g(\beta) = V_\beta + \beta\epsilon` has derivative
    :math:`\epsilon - \mathrm{KL}(\pi^*_\beta\|\pi_{ref})`; the update is a
    projected gradient step on :math:`g`, with the KL measured on the current
    policy. Unlike :class:`AdaptiveKLController` the step is additive, so
    its gain depends on the reward's scale: linearised around the optimum with
    an instant response, the loop is stable iff
    :math:`\eta_\beta\,\mathrm{Var}_{\pi^*}(r)/\beta^{*3} < 1`. When
    :math:`\epsilon` is at or above the greedy policy's KL the constraint is
    inactive and :math:`\beta` goes to :math:`\beta_{min}`. ``n_steps`` is
    checked and otherwise ignored (one step per update).

    References
    ----------
    .. [1] Boyd and Vandenberghe, "Convex Optimization", 2004, section 5.
    .. [2] Achiam et al., "Constrained Policy Optimization", 2017,
       arXiv:1705.10528.

    Examples
    --------
    >>> from klpolicy.control import LagrangianKLController
    >>> c = LagrangianKLController(0.5, target=0.1, lr=2.0)
    >>> c.update(0.3, 1); c.value
    0.9
    >>> c.update(0.0, 1); round(c.value, 12)
    0.7
    """

    def __init__(
        self,
        init_kl_coef: float,
        target: float,
        lr: float,
        *,
        min_kl_coef: float = 0.0,
        per: str = "sequence",
    ) -> None:
        self.value = as_nonnegative_scalar("init_kl_coef", init_kl_coef)
        self.target = V.as_positive_scalar("target", target)
        self.lr = V.as_positive_scalar("lr", lr)
        self.min_kl_coef = as_nonnegative_scalar("min_kl_coef", min_kl_coef)
        if self.value < self.min_kl_coef:
            raise ValueError(
                f"`init_kl_coef` must be >= `min_kl_coef` = {self.min_kl_coef:g}; "
                f"got {init_kl_coef!r}"
            )
        self.per = _as_per(per)

    def update(self, current: float, n_steps: int) -> None:
        """One projected dual-ascent step (see the class docstring)."""
        kl = as_kl_measurement("current", current)
        V.as_positive_int("n_steps", n_steps)
        self.value = max(self.min_kl_coef, self.value + self.lr * (kl - self.target))

    def __repr__(self) -> str:
        return (
            f"LagrangianKLController(value={self.value!r}, target={self.target!r}, "
            f"lr={self.lr!r}, per={self.per!r})"
        )
