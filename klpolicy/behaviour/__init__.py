"""What the KL penalty does to a policy's behaviour, along the optimum pi*_beta.

* :mod:`~klpolicy.behaviour.diversity`: entropy, effective support, mode collapse,
  distinct samples, against best-of-n.
* :mod:`~klpolicy.behaviour.calibration`: calibration of a question-answering policy
  (Brier score, expected calibration error) as beta falls.
* :mod:`~klpolicy.behaviour.retention`: how much of a capability the optimum keeps,
  the worst case over a KL budget.

Each is also importable under its short path (``klpolicy.diversity``,
``klpolicy.calibration``, ``klpolicy.retention``).
"""

from . import calibration, diversity, retention

__all__ = ["calibration", "diversity", "retention"]
