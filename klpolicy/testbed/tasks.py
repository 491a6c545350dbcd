"""Built-in tasks small enough to enumerate, each built offline (no hub downloads)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["TASKS", "Task", "bandit_task", "prompts_task", "tree_task"]


@dataclass(frozen=True)
class Task:
    """Prompts, a tiny causal LM that completes them, and a reward on completions.

    Attributes
    ----------
    name : str
        The task's name.
    vocabulary : tuple of str
        The words of the word-level tokenizer, in token-id order (``[PAD]`` 0, ``[EOS]`` 1).
    prompts : tuple of str
        The prompts as texts (what the trainer's dataset holds, each equally often), at
        least one; each is its own context, with its own completion law. A list is stored
        as a tuple.
    max_new_tokens : int
        The longest completion (TRL's ``max_completion_length``).
    reward : callable
        ``reward(prompt, completion_ids) -> float``: ``prompt`` is the prompt's index in
        :attr:`prompts` (always 0 for a task of one prompt, which may ignore it) and
        ``completion_ids`` a tuple of token ids.
    model_seed : int
        The seed of the initial weights (the reference model is the initial model).
    hidden_size, num_hidden_layers : int
        The transformers ``LlamaConfig`` sizes.

    Raises
    ------
    ValueError
        For ``prompts`` that is not a non-empty sequence of non-empty texts (a bare string
        included: one prompt is ``("q",)``).

    Examples
    --------
    >>> t = Task("two", ("[PAD]", "[EOS]", "p", "q", "a"), ("p", "q"), 1,
    ...          lambda i, c: float(c == (4,) and i == 1))
    >>> t.prompt_ids(), t.reward(1, (4,)), t.reward(0, (4,))
    (([2], [3]), 1.0, 0.0)
    """

    name: str
    vocabulary: tuple
    prompts: tuple
    max_new_tokens: int
    reward: Callable
    model_seed: int = 0
    hidden_size: int = 16
    num_hidden_layers: int = 2

    def __post_init__(self):
        p = self.prompts
        if (
            isinstance(p, (str, bytes))
            or not isinstance(p, (tuple, list))
            or not p
            or not all(isinstance(x, str) and x.strip() for x in p)
        ):
            raise ValueError(
                "`prompts` must be a non-empty tuple of prompt texts (one prompt is "
                f'("q",)); got {p!r:.80}'
            )
        object.__setattr__(self, "prompts", tuple(p))

    @property
    def eos_token_id(self) -> int:
        return 1

    def tokenizer(self):
        """A ``PreTrainedTokenizerFast`` over :attr:`vocabulary`, built in code.

        Returns
        -------
        transformers.PreTrainedTokenizerFast
            The tokenizer.
        """
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        vocab = {w: i for i, w in enumerate(self.vocabulary)}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=self.vocabulary[0]))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        return PreTrainedTokenizerFast(
            tokenizer_object=tok, pad_token=self.vocabulary[0], eos_token=self.vocabulary[1]
        )

    def prompt_ids(self) -> tuple[list[int], ...]:
        """Each prompt's token ids, in the order of :attr:`prompts`.

        Returns
        -------
        tuple of list of int
            One list per prompt.

        Raises
        ------
        ValueError
            For a prompt word that is not in :attr:`vocabulary` (the tokenizer would read
            it as ``[PAD]``).
        """
        known = set(self.vocabulary)
        for i, text in enumerate(self.prompts):
            unknown = [w for w in text.split() if w not in known]
            if unknown:
                raise ValueError(
                    f"`prompts[{i}]` holds the word {unknown[0]!r}, which is not in the "
                    f"task's vocabulary {self.vocabulary}"
                )
        tok = self.tokenizer()
        return tuple(tok(text)["input_ids"] for text in self.prompts)

    def model(self):
        """The initial model: a ``LlamaForCausalLM`` from a config, seeded by :attr:`model_seed`.

        Returns
        -------
        transformers.LlamaForCausalLM
            A new model, the same for the same seed.
        """
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(
            vocab_size=len(self.vocabulary),
            hidden_size=self.hidden_size,
            intermediate_size=2 * self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=32,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=None,
            tie_word_embeddings=False,
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.model_seed)
            return LlamaForCausalLM(cfg)


_BANDIT_REWARD = {"a": 1.0, "b": 0.5, "c": 0.25}
_BANDIT_VOCAB = ("[PAD]", "[EOS]", "q", "a", "b", "c", "d")


def _bandit_reward(prompt: int, completion_ids) -> float:
    ids = tuple(completion_ids)
    return _BANDIT_REWARD.get(_BANDIT_VOCAB[ids[0]], 0.0) if len(ids) == 1 else 0.0


def bandit_task(*, model_seed: int = 0) -> Task:
    """A bandit of one-token completions: prompt ``"q"``, 7 tokens, reward a=1, b=0.5, c=0.25.

    Every other token (``d``, ``q``, ``[PAD]``, ``[EOS]``) has reward 0. The model is a
    2-layer Llama of hidden size 16; its initial law over the 7 tokens is the reference.

    Returns
    -------
    Task
        The task.

    Examples
    --------
    >>> t = bandit_task()
    >>> t.prompts, t.reward(0, (3,)), t.reward(0, (6,)), t.max_new_tokens
    (('q',), 1.0, 0.0, 1)
    """
    from klpolicy.core.internal import validation as V

    return Task(
        name="bandit",
        vocabulary=_BANDIT_VOCAB,
        prompts=("q",),
        max_new_tokens=1,
        reward=_bandit_reward,
        model_seed=V.as_count("model_seed", model_seed, lo=0, hi=2**32 - 1),
    )


_TREE_VOCAB = ("[PAD]", "[EOS]", "q", "a", "b", "[BOS]")


def _tree_reward(prompt: int, completion_ids) -> float:
    ids = tuple(completion_ids)
    if not ids or ids[-1] != 1:  # cut at max_new_tokens without EOS: no answer
        return 0.0
    words = [_TREE_VOCAB[i] for i in ids[:-1]]
    return (words.count("a") - words.count("b")) / 3.0


def tree_task(*, model_seed: int = 0) -> Task:
    """A 3-token tree with EOS: completions of 1 to 3 tokens, rewards at 5 levels.

    Prompt ``"[BOS] q"``, vocabulary ``[PAD] [EOS] q a b [BOS]`` (6 tokens),
    ``max_new_tokens = 3``. A completion that ends with EOS scores ``(#a - #b) / 3`` over
    its words (so ``a a [EOS]`` is best, 2/3, and the rewards take the 5 values -2/3 ..
    2/3; ``q``, ``[PAD]`` and ``[BOS]`` count 0); one cut at 3 tokens without EOS scores 0.
    The law has 156 completions of lengths 1, 2 and 3 (1 + 5 + 5 * 5 * 6: a completion
    ends at EOS or at its third token), so the aggregation over tokens (TRL's
    ``loss_type``) and the length of what the policy says both matter.

    The prompt starts with ``[BOS]`` so that the model can give every context its own
    next-token law: the Llama has no absolute positions (RoPE) and no biases, so after a
    context of one token repeated (``q``, ``q q``, ``q q q``) its law would be one law
    whatever the weights. ``[BOS]`` is an ordinary word of the vocabulary, not a special
    token of the tokenizer, so neither the tokenizer nor TRL adds or strips it: the ids TRL
    trains on are :meth:`Task.prompt_ids`, ``[5, 2]``. The model may also generate it,
    like any word.

    Parameters
    ----------
    model_seed : int, optional
        The torch seed of the initial model's weights, an integer in ``[0, 2**32 - 1]``
        (default 0).

    Returns
    -------
    Task
        The task; its reference is the initial model's law.

    Raises
    ------
    ValueError
        For ``model_seed`` not an integer in ``[0, 2**32 - 1]`` (as :func:`bandit_task`).

    Examples
    --------
    >>> t = tree_task()
    >>> t.prompts, t.prompt_ids(), t.max_new_tokens
    (('[BOS] q',), ([5, 2],), 3)
    >>> t.reward(0, (3, 3, 1)), t.reward(0, (1,)), t.reward(0, (3, 5, 1)), t.reward(0, (3, 3, 3))
    (0.6666666666666666, 0.0, 0.3333333333333333, 0.0)
    """
    from klpolicy.core.internal import validation as V

    return Task(
        name="tree",
        vocabulary=_TREE_VOCAB,
        prompts=("[BOS] q",),
        max_new_tokens=3,
        reward=_tree_reward,
        model_seed=V.as_count("model_seed", model_seed, lo=0, hi=2**32 - 1),
    )


_PROMPTS_VOCAB = ("[PAD]", "[EOS]", "x", "y", "z", "a", "b", "c")
#: each prompt's rewards of the answers a, b, c: a Latin square, so each has its own best
_PROMPTS_REWARD = ((1.0, 0.5, 0.25), (0.25, 1.0, 0.5), (0.5, 0.25, 1.0))


def _prompts_reward(prompt: int, completion_ids) -> float:
    ids = tuple(completion_ids)
    if len(ids) != 1 or not 5 <= ids[0] <= 7:
        return 0.0
    return _PROMPTS_REWARD[prompt][ids[0] - 5]


def prompts_task(*, model_seed: int = 0) -> Task:
    """Three prompts whose best one-token answers differ: the law must be conditional.

    Prompts ``"x"``, ``"y"``, ``"z"``; vocabulary ``[PAD] [EOS] x y z a b c`` (8 tokens);
    one-token completions. The answers' rewards form a Latin square:

    ======  ====  ====  ====
    prompt  a     b     c
    ======  ====  ====  ====
    x       1     0.5   0.25
    y       0.25  1     0.5
    z       0.5   0.25  1
    ======  ====  ====  ====

    and every other token scores 0. One policy answers all three (a 2-layer Llama of hidden
    size 16), so a trainer must move three conditionals, each toward a different answer,
    through shared weights; the reference is the initial model's law after each prompt.

    Parameters
    ----------
    model_seed : int, optional
        The torch seed of the initial model's weights, an integer in ``[0, 2**32 - 1]``
        (default 0).

    Returns
    -------
    Task
        The task.

    Raises
    ------
    ValueError
        For ``model_seed`` not an integer in ``[0, 2**32 - 1]`` (as :func:`bandit_task`).

    Examples
    --------
    >>> t = prompts_task()
    >>> t.prompts, t.prompt_ids()
    (('x', 'y', 'z'), ([2], [3], [4]))
    >>> [t.reward(i, (5,)) for i in range(3)], [t.reward(i, (6,)) for i in range(3)]
    ([1.0, 0.25, 0.5], [0.5, 1.0, 0.25])
    """
    from klpolicy.core.internal import validation as V

    return Task(
        name="prompts",
        vocabulary=_PROMPTS_VOCAB,
        prompts=("x", "y", "z"),
        max_new_tokens=1,
        reward=_prompts_reward,
        model_seed=V.as_count("model_seed", model_seed, lo=0, hi=2**32 - 1),
    )


#: The built-in tasks by name (the CLI's ``--task`` choices): each a function of
#: ``model_seed=`` that builds the :class:`Task`.
TASKS = {"bandit": bandit_task, "tree": tree_task, "prompts": prompts_task}
