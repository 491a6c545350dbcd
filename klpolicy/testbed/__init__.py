"""The testbed: real trainers (TRL's, and klpolicy's own) train small transformers models
whose law is enumerable.

A leaf of klpolicy (nothing else imports it); torch, transformers and TRL are imported
only when a function needs them (extra ``klpolicy[trl]``).
"""

from klpolicy.testbed.fit import (
    SKEWED_BANDIT_LAW,
    FittedTask,
    fitted_task,
    reachable_law,
    skewed_bandit_task,
    task_completions,
)
from klpolicy.testbed.law import SequenceLaw, sequence_law
from klpolicy.testbed.runner import ADAPTERS, TRL_RANGE, Adapter, TestbedResult, run
from klpolicy.testbed.tasks import TASKS, Task, bandit_task, prompts_task, tree_task

__all__ = [
    "ADAPTERS",
    "SKEWED_BANDIT_LAW",
    "TASKS",
    "TRL_RANGE",
    "Adapter",
    "FittedTask",
    "SequenceLaw",
    "Task",
    "TestbedResult",
    "bandit_task",
    "fitted_task",
    "prompts_task",
    "reachable_law",
    "run",
    "sequence_law",
    "skewed_bandit_task",
    "task_completions",
    "tree_task",
]
