"""The testbed: real trainers (TRL) train small transformers models whose law is enumerable.

A leaf of klpolicy (nothing else imports it); torch, transformers and TRL are imported
only when a function needs them (extra ``klpolicy[trl]``).
"""

from klpolicy.testbed.law import SequenceLaw, sequence_law

__all__ = ["SequenceLaw", "sequence_law"]
