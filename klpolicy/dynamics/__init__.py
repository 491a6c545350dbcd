"""Training dynamics: each trainer rule's exact expected update, where it lands, how it gets there.

A trainer's KL term decides which divergence its gradient follows
(:func:`klpolicy.estimators.expected_gradient`); where the *trainer* lands also depends on
its baseline (GRPO's group mean includes the sample: pi* at beta G/(G-1)), its scale (the
group's standard deviation: a fixed point that can collapse toward greedy), its
aggregation over tokens, and its defaults (TRL 1.16.0's GRPO has ``beta = 0``). On a
tabular softmax policy every part has an exact answer.

Modules
-------
``rules``
    :data:`RULES`, one row per trainer rule with its source, options and behaviour.
``groups``
    :func:`~klpolicy.dynamics.groups.group_advantage`: a group member's expected advantage.
``update``
    :func:`expected_update`.
``landing``
    :func:`landing_point`.
``paths``
    :func:`trajectory`.
``trees``
    :func:`expected_tree_update`, :func:`tree_landing_point`: GRPO's ``loss_type`` on token
    trees with EOS and variable lengths, and the length bias.
``solvers``
    the fixed-point solvers and :func:`beta_fit`.
``results``
    :class:`Landing`, :class:`FixedPoint`, :class:`Trajectory`, :class:`TreeLanding`.
"""

from .landing import landing_point
from .paths import trajectory
from .results import FixedPoint, Landing, Trajectory, TreeLanding
from .rules import RULES, Rule, rule_names
from .solvers import beta_fit
from .trees import TREE_OPTIONS, TREE_RULES, expected_tree_update, tree_landing_point
from .update import expected_update

__all__ = [
    "RULES",
    "TREE_OPTIONS",
    "TREE_RULES",
    "FixedPoint",
    "Landing",
    "Rule",
    "Trajectory",
    "TreeLanding",
    "beta_fit",
    "expected_tree_update",
    "expected_update",
    "landing_point",
    "rule_names",
    "trajectory",
    "tree_landing_point",
]
