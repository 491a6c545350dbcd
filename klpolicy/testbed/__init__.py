"""The testbed: real trainers (TRL) train small transformers models whose law is enumerable.

A leaf of klpolicy (nothing else imports it); torch, transformers and TRL are imported
only when a function needs them (extra ``klpolicy[trl]``).
"""

from klpolicy.testbed.law import SequenceLaw, sequence_law
from klpolicy.testbed.runner import ADAPTERS, TRL_RANGE, Adapter, TestbedResult, run
from klpolicy.testbed.tasks import TASKS, Task, bandit_task, prompts_task, tree_task

__all__ = [
    "ADAPTERS",
    "TASKS",
    "TRL_RANGE",
    "Adapter",
    "SequenceLaw",
    "Task",
    "TestbedResult",
    "bandit_task",
    "prompts_task",
    "run",
    "sequence_law",
    "tree_task",
]
