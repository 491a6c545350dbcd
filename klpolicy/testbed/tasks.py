"""Built-in tasks small enough to enumerate, each built offline (no hub downloads)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Task", "bandit_task", "tree_task"]


@dataclass(frozen=True)
class Task:
    """A prompt, a tiny causal LM that completes it, and a reward on completions.

    Attributes
    ----------
    name : str
        The task's name.
    vocabulary : tuple of str
        The words of the word-level tokenizer, in token-id order (``[PAD]`` 0, ``[EOS]`` 1).
    prompt : str
        The prompt as text (what the trainer's dataset holds).
    max_new_tokens : int
        The longest completion (TRL's ``max_completion_length``).
    reward : callable
        ``reward(completion_ids) -> float`` on a tuple of token ids.
    model_seed : int
        The seed of the initial weights (the reference model is the initial model).
    hidden_size, num_hidden_layers : int
        The transformers ``LlamaConfig`` sizes.
    """

    name: str
    vocabulary: tuple
    prompt: str
    max_new_tokens: int
    reward: Callable
    model_seed: int = 0
    hidden_size: int = 16
    num_hidden_layers: int = 2

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

    def prompt_ids(self) -> list:
        return self.tokenizer()(self.prompt)["input_ids"]

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


def _bandit_reward(completion_ids) -> float:
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
    >>> t.reward((3,)), t.reward((6,)), t.max_new_tokens
    (1.0, 0.0, 1)
    """
    from klpolicy.core.internal import validation as V

    return Task(
        name="bandit",
        vocabulary=_BANDIT_VOCAB,
        prompt="q",
        max_new_tokens=1,
        reward=_bandit_reward,
        model_seed=V.as_count("model_seed", model_seed, lo=0, hi=2**32 - 1),
    )


_TREE_VOCAB = ("[PAD]", "[EOS]", "q", "a", "b")


def _tree_reward(completion_ids) -> float:
    ids = tuple(completion_ids)
    if not ids or ids[-1] != 1:  # cut at max_new_tokens without EOS: no answer
        return 0.0
    words = [_TREE_VOCAB[i] for i in ids[:-1]]
    return (words.count("a") - words.count("b")) / 3.0


def tree_task(*, model_seed: int = 0) -> Task:
    """A 3-token tree with EOS: completions of 1 to 3 tokens, rewards at 5 levels.

    Prompt ``"q"``, vocabulary ``[PAD] [EOS] q a b``, ``max_new_tokens = 3``. A completion
    that ends with EOS scores ``(#a - #b) / 3`` over its words (so ``a a [EOS]`` is best,
    2/3, and the rewards take the 5 values -2/3 .. 2/3); one cut at 3 tokens without EOS
    scores 0. The law has 85 completions of lengths 1, 2 and 3 (1 + 4 + 4 * 4 * 5: a
    completion ends at EOS or at its third token), so
    the aggregation over tokens (TRL's ``loss_type``) and the length of what the policy
    says both matter.

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
    >>> t.reward((3, 3, 1)), t.reward((1,)), t.reward((3, 3, 3)), t.max_new_tokens
    (0.6666666666666666, 0.0, 0.0, 3)
    """
    from klpolicy.core.internal import validation as V

    return Task(
        name="tree",
        vocabulary=_TREE_VOCAB,
        prompt="q",
        max_new_tokens=3,
        reward=_tree_reward,
        model_seed=V.as_count("model_seed", model_seed, lo=0, hi=2**32 - 1),
    )
