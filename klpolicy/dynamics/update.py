"""The exact expected update of a trainer rule on a tabular softmax policy."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _inputs

__all__ = ["expected_update"]


def expected_update(
    rule: str, logits: ArrayLike, ref: ArrayLike, reward: ArrayLike, beta: float, **options
) -> NDArray[np.float64]:
    r"""Minus the expected gradient of a trainer rule's loss for one group, in the logits.

    .. math::

        u(\theta) = -\nabla_\theta\, \mathbb{E}_{y_1..y_G \sim \pi_\theta}\big[L(y_1..y_G)\big],
        \qquad \pi_\theta = \mathrm{softmax}(\theta)

    on-policy (the samples drawn from the current policy), exact: for a group baseline or
    scale the expectation is the sum over the counts of the other members
    (:func:`klpolicy.dynamics.groups.group_advantage`); the KL term's part is
    :func:`klpolicy.estimators.expected_gradient` of the rule's estimator and placement.
    An SGD step is ``logits + lr * expected_update(...)``.

    Parameters
    ----------
    rule : str
        A key of :data:`klpolicy.dynamics.RULES` (``"grpo"``, ``"rloo"``, ``"gspo"``,
        ``"reinforce"``, ``"ppo"``, ``"distill"``).
    logits : array_like, shape (n,)
        The policy's logits; ``-inf`` (probability 0) wherever ``ref`` is 0.
    ref : array_like, shape (n,)
        The reference (for ``"distill"``, the teacher).
    reward : array_like, shape (n,)
        The reward of each outcome (one-token completions of one prompt). ``None`` for
        ``"distill"`` means 0.
    beta : float
        The KL coefficient, ``>= 0``, as the trainer's ``beta``.
    **options
        The rule's options, named as the trainer names them (``RULES[rule].options``):
        for ``"grpo"`` ``num_generations`` (``None``: the infinite group),
        ``scale_rewards``, ``loss_type``, ``use_bias_correction_kl``, ``epsilon``,
        ``num_iterations``.

    Returns
    -------
    ndarray, shape (n,)
        The ascent direction; it sums to zero (0 where the policy is 0).

    Raises
    ------
    ValueError
        For an unknown ``rule`` or option (the message lists the rule's options and their
        defaults), an option's bad value (``num_generations`` below 2, a ``scale_rewards`` or
        ``loss_type`` outside TRL's list), a negative ``beta``, bad ``ref``, ``reward`` or
        ``logits``, or a finite group whose exact sum is too large.

    Notes
    -----
    For one-token completions every TRL ``loss_type`` is the mean over the group's
    ``G`` completions (``dr_grpo`` with ``max_completion_length = 1``); ``epsilon`` and
    ``num_iterations`` do not enter an on-policy step (the ratio is 1, inside the clip).
    ``scale_rewards="batch"`` equals ``"group"`` here: one prompt, one group per batch.

    References
    ----------
    .. [1] Shao et al., "DeepSeekMath", 2024, arXiv:2402.03300 (GRPO).
    .. [2] Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for
       Learning from Human Feedback in LLMs", 2024, arXiv:2402.14740 (RLOO).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.dynamics import expected_update
    >>> ref, r = np.array([0.5, 0.5]), np.array([1.0, 0.0])
    >>> expected_update("grpo", np.log(ref), ref, r, 0.1, num_generations=2, scale_rewards="none")
    array([ 0.125, -0.125])
    """
    row, o = _inputs.rule_and_options(rule, options)
    q, r, b = _inputs.problem(ref, reward, beta, rule)
    th = _inputs.logits_on(q, logits)
    e = np.exp(th - th.max())
    return row.update(th, e / e.sum(), q, r, b, o)
