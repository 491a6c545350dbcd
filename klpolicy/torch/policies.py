r"""Learned policies whose full distribution can be enumerated and compared exactly.

Every policy here exposes ``log_probs()``: the log-probabilities of *all*
outcomes, shape ``(B, K)`` (``B`` contexts, ``K`` outcomes), differentiable in
the parameters. On a token tree of vocabulary ``V`` and length ``T`` the
outcomes are the ``K = V**T`` whole sequences in C order (the flattening of a
``(V,)*T`` array), so a joint law from :meth:`log_probs` reshapes to the
``klpolicy.sequences.joint`` layout.

* :class:`TabularPolicy` -- free logits per context, batched over contexts;
* :class:`TabularConditionals` -- free logits per prefix of a token tree;
* :class:`AutoregressivePolicy` -- a small GRU over tokens whose
  conditionals :meth:`~AutoregressivePolicy.conditionals` enumerates into the
  dense ``klpolicy.sequences`` format (``conditionals[t]`` has shape
  ``(V,)*(t+1)``).
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch
from numpy.typing import ArrayLike

from klpolicy.core.internal import validation as V

#: Largest number of whole sequences V**T a model that enumerates them may hold.
MAX_SEQUENCES = 10**7

__all__ = [
    "AutoregressivePolicy",
    "TabularConditionals",
    "TabularPolicy",
    "all_sequences",
    "default_device",
    "joint_from_conditionals",
    "token_log_probs_from_conditionals",
]


def default_device(device: str | torch.device | None = None) -> torch.device:
    """``device`` if given, else ``"cuda"`` when a GPU is available, else ``"cpu"``.

    Returns
    -------
    torch.device
        The device.

    Examples
    --------
    >>> from klpolicy.torch import default_device
    >>> default_device("cpu")
    device(type='cpu')
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, (str, torch.device)) or isinstance(device, bool):
        raise ValueError(
            f"`device` must be a device name such as 'cpu' or 'cuda:0', or a torch.device; "
            f"got {V.describe(device)}"
        )
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"`device` is not a device torch knows: {device!r} ({exc})") from None


def _masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(torch.where(mask, logits, -math.inf), dim=-1)


def _memory_bytes() -> int:
    """This machine's physical memory in bytes (2**40 where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return 1 << 40


def _check_table_fits(vocab: int, length: int) -> None:
    """Refuse a ``(vocab**length, length)`` int64 table beyond memory, without forming it."""
    log2_bytes = length * math.log2(vocab) + math.log2(length) + 3.0  # 8 bytes an entry
    mem = _memory_bytes()
    if log2_bytes > math.log2(mem):
        digits = length * math.log10(vocab)
        count = f"{vocab}**{length}" + (f" (about 10^{digits:.3g})" if digits > 6 else "")
        raise ValueError(
            f"`vocab` ** `length` = {count} sequences of {length} tokens (8 bytes a token: "
            f"about 2**{log2_bytes:.4g} bytes) do not fit in this machine's memory "
            f"({mem / 2**30:.3g} GiB); enumerate a smaller tree"
        )


def all_sequences(vocab: int, length: int, device=None) -> torch.Tensor:
    """Every token sequence of a tree, shape ``(vocab**length, length)``, in C order.

    Returns
    -------
    torch.Tensor
        The sequences, int64, shape ``(vocab**length, length)``.

    Examples
    --------
    >>> from klpolicy.torch.policies import all_sequences
    >>> all_sequences(2, 2).tolist()
    [[0, 0], [0, 1], [1, 0], [1, 1]]

    Raises
    ------
    ValueError
        For a ``vocab`` or ``length`` that is not a positive integer, and at once (before
        ``vocab**length`` is formed) for a table larger than this machine's memory
        (``vocab**length * length`` int64 entries): ``all_sequences(3, 2**63)`` once computed
        ``3**(2**63)`` exactly, and hung.
    """
    vocab = V.as_count("vocab", vocab, hi=10**30)
    length = V.as_count("length", length, hi=10**30)
    _check_table_fits(vocab, length)
    idx = torch.arange(vocab**length, device=device)
    powers = vocab ** torch.arange(length - 1, -1, -1, device=device)
    return (idx[:, None] // powers) % vocab


def joint_from_conditionals(log_conditionals: list[torch.Tensor]) -> torch.Tensor:
    """Joint log-probabilities ``(V,)*T`` from log-conditionals ``(V,)*(t+1)``.

    ``log p(a_0..a_{T-1}) = sum_t log p(a_t | a_<t)``; each term is broadcast
    over the later tokens.

    Returns
    -------
    torch.Tensor
        The log-probabilities, shape ``(V,)*T``.
    """
    length = len(log_conditionals)
    out = None
    for t, lc in enumerate(log_conditionals):
        term = lc.reshape(lc.shape + (1,) * (length - t - 1))
        out = term if out is None else out + term
    return out


def token_log_probs_from_conditionals(log_conditionals: list[torch.Tensor]) -> torch.Tensor:
    """Per-position log-probabilities of all sequences, shape ``(V**T, T)``, from log-conditionals.

    Returns
    -------
    torch.Tensor
        The log-probabilities, shape ``(V**T, T)``.
    """
    length = len(log_conditionals)
    cols = []
    for t, lc in enumerate(log_conditionals):
        full = lc.reshape(lc.shape + (1,) * (length - t - 1)).expand((lc.shape[0],) * length)
        cols.append(full.reshape(-1))
    return torch.stack(cols, dim=-1)


class TabularPolicy(torch.nn.Module):
    r"""A softmax policy with one free logit per (context, outcome).

    .. math:: \pi_\theta(y \mid c) = \operatorname{softmax}(\theta_c)_y

    Parameters
    ----------
    probs : array_like, shape (V,) or (B, V)
        Initial probabilities (usually the reference); zeros are masked out
        for good (the policy never leaves their support).
    device, dtype
        Where the logits live; ``dtype`` defaults to float64.

    Examples
    --------
    >>> from klpolicy.torch import TabularPolicy
    >>> pol = TabularPolicy([[0.5, 0.5], [0.25, 0.75]], device="cpu")
    >>> pol.probs().round(2)
    array([[0.5 , 0.5 ],
           [0.25, 0.75]])
    """

    def __init__(self, probs: ArrayLike, *, device=None, dtype=torch.float64):
        super().__init__()
        # NaN would fail `p > 0` and silently leave the support: validate as distributions
        p = torch.as_tensor(np.atleast_2d(V.as_probabilities("probs", probs)), dtype=dtype)
        p = p.to(default_device(device))
        self.register_buffer("mask", p > 0)
        self.logits = torch.nn.Parameter(torch.where(p > 0, torch.log(p.clamp_min(1e-300)), 0.0))

    def log_probs(self) -> torch.Tensor:
        """Log-probabilities of all outcomes, shape ``(B, V)``; ``-inf`` off the support.

        Returns
        -------
        torch.Tensor
            The log-probabilities, shape ``(B, V)``.
        """
        return _masked_log_softmax(self.logits, self.mask)

    @torch.no_grad()
    def set_probs(self, probs: ArrayLike) -> None:
        """Overwrite the policy with the given probabilities (on the same support)."""
        p = torch.as_tensor(
            np.atleast_2d(probs), dtype=self.logits.dtype, device=self.logits.device
        )
        self.logits.copy_(torch.where(self.mask, torch.log(p.clamp_min(1e-300)), 0.0))

    @torch.no_grad()
    def probs(self) -> np.ndarray:
        """The current policy as a numpy array ``(B, V)``.

        Returns
        -------
        ndarray
            The probabilities, shape ``(B, V)``, float64.
        """
        return self.log_probs().exp().cpu().numpy()


class TabularConditionals(torch.nn.Module):
    r"""A token-tree policy with free logits for every prefix.

    .. math:: \pi_\theta(a_t \mid a_{<t}) = \operatorname{softmax}(\theta_t[a_{<t}])_{a_t}

    Parameters
    ----------
    conditionals : list of array_like
        Initial conditionals, ``conditionals[t]`` of shape ``(V,)*(t+1)``
        (usually the reference's); zeros stay zero.
    device, dtype
        As in :class:`TabularPolicy`.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.torch import TabularConditionals
    >>> pol = TabularConditionals([np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.2, 0.8]])])
    >>> pol.log_probs().exp().detach().numpy().round(2)
    array([[0.45, 0.05, 0.1 , 0.4 ]])
    """

    def __init__(self, conditionals, *, device=None, dtype=torch.float64):
        super().__init__()
        dev = default_device(device)
        conditionals = V.as_token_tree("conditionals", conditionals)
        self.vocab = int(np.shape(conditionals[0])[-1])
        self.length = len(conditionals)
        self.logits = torch.nn.ParameterList()
        for t, c in enumerate(conditionals):
            p = torch.as_tensor(np.asarray(c, dtype=np.float64), dtype=dtype, device=dev)
            if p.shape != (self.vocab,) * (t + 1):
                raise ValueError(
                    f"`conditionals[{t}]` must have shape {(self.vocab,) * (t + 1)}; "
                    f"got {tuple(p.shape)}"
                )
            self.register_buffer(f"mask{t}", p > 0)
            self.logits.append(
                torch.nn.Parameter(torch.where(p > 0, torch.log(p.clamp_min(1e-300)), 0.0))
            )

    def log_conditionals(self) -> list[torch.Tensor]:
        """Log-conditionals, ``[t]`` of shape ``(V,)*(t+1)``.

        Returns
        -------
        list of torch.Tensor
            The log-conditionals.
        """
        return [
            _masked_log_softmax(lg, getattr(self, f"mask{t}")) for t, lg in enumerate(self.logits)
        ]

    def log_probs(self) -> torch.Tensor:
        """Joint log-probabilities of all ``V**T`` sequences, shape ``(1, V**T)``.

        Returns
        -------
        torch.Tensor
            The log-probabilities, shape ``(1, V**T)``.
        """
        return joint_from_conditionals(self.log_conditionals()).reshape(1, -1)

    def token_log_probs(self) -> torch.Tensor:
        """``log p(a_t | a_<t)`` for every sequence and position, shape ``(1, V**T, T)``.

        Returns
        -------
        torch.Tensor
            The log-probabilities, shape ``(1, V**T, T)``.
        """
        return token_log_probs_from_conditionals(self.log_conditionals()).unsqueeze(0)

    @torch.no_grad()
    def set_conditionals(self, conditionals) -> None:
        """Overwrite every conditional (same supports)."""
        for t, lg in enumerate(self.logits):
            p = torch.as_tensor(np.asarray(conditionals[t]), dtype=lg.dtype, device=lg.device)
            lg.copy_(torch.where(getattr(self, f"mask{t}"), torch.log(p.clamp_min(1e-300)), 0.0))

    @torch.no_grad()
    def conditionals(self) -> list[np.ndarray]:
        """The conditionals as numpy arrays, ``[t]`` of shape ``(V,)*(t+1)``.

        Returns
        -------
        list of ndarray
            The conditionals, float64.
        """
        return [lc.exp().cpu().numpy() for lc in self.log_conditionals()]


class AutoregressivePolicy(torch.nn.Module):
    r"""A tiny autoregressive model over a token tree: embedding, GRU, linear head.

    .. math:: \pi_\theta(a_t \mid a_{<t}) = \operatorname{softmax}\big(W h_t + b\big),
              \quad h_t = \mathrm{GRU}(h_{t-1}, e(a_{t-1})),\ a_{-1} = \mathrm{BOS}

    Parameters
    ----------
    vocab : int
        Vocabulary size ``V``.
    length : int
        Sequence length ``T``.
    hidden : int, optional
        GRU width.
    seed : int, optional
        Seeds the initial weights (the global RNG state is restored afterwards).
    device, dtype
        As in :class:`TabularPolicy`.

    Notes
    -----
    Every conditional is strictly positive, so the model's support is the
    whole tree. :meth:`conditionals` runs the model once on all ``V**(T-1)``
    prefixes (teacher forcing) and reads off each conditional, which is what
    makes the exact optimum of a *learned* reference computable with
    ``klpolicy.sequences.soft_bellman``.

    Examples
    --------
    >>> from klpolicy.torch import AutoregressivePolicy
    >>> model = AutoregressivePolicy(3, 2, seed=0)
    >>> [c.shape for c in model.conditionals()]
    [(3,), (3, 3)]
    >>> round(float(model.log_probs().exp().sum().detach()), 12)
    1.0
    """

    def __init__(
        self,
        vocab: int,
        length: int,
        *,
        hidden: int = 32,
        seed: int = 0,
        device=None,
        dtype=torch.float64,
    ):
        super().__init__()
        self.vocab = V.as_count("vocab", vocab, hi=MAX_SEQUENCES)
        self.length = V.as_count("length", length, hi=MAX_SEQUENCES)
        if self.vocab**self.length > MAX_SEQUENCES:
            raise ValueError(
                f"`vocab` ** `length` = {self.vocab}**{self.length} sequences is more than the "
                f"{MAX_SEQUENCES:,} this exact (enumerating) model holds"
            )
        hidden = V.as_count("hidden", hidden, hi=1 << 16)
        seed = V.as_count("seed", seed, lo=0, hi=2**63 - 1)
        dev = default_device(device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.embed = torch.nn.Embedding(self.vocab + 1, hidden)
            self.gru = torch.nn.GRU(hidden, hidden, batch_first=True)
            self.head = torch.nn.Linear(hidden, self.vocab)
        self.to(device=dev, dtype=dtype)
        self.register_buffer("_sequences", all_sequences(self.vocab, self.length, dev))

    def next_token_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of ``a_t`` given ``a_<t`` at each position: ``(N, T)`` -> ``(N, T, V)``.

        Returns
        -------
        torch.Tensor
            The logits, shape ``(N, T, V)``.
        """
        bos = torch.full((tokens.shape[0], 1), self.vocab, dtype=torch.long, device=tokens.device)
        inp = torch.cat([bos, tokens[:, :-1]], dim=1)
        h, _ = self.gru(self.embed(inp))
        return self.head(h)

    def sequence_log_prob(self, tokens: torch.Tensor) -> torch.Tensor:
        """``log p(a_0..a_{T-1})`` for each row of ``(N, T)`` tokens.

        Returns
        -------
        torch.Tensor
            The log-probabilities, shape ``(N,)``.
        """
        lp = torch.log_softmax(self.next_token_logits(tokens), dim=-1)
        return lp.gather(-1, tokens[..., None])[..., 0].sum(-1)

    def log_probs(self) -> torch.Tensor:
        """Joint log-probabilities of all ``V**T`` sequences (C order), shape ``(1, V**T)``.

        Returns
        -------
        torch.Tensor
            The log-probabilities, shape ``(1, V**T)``.
        """
        return self.sequence_log_prob(self._sequences).reshape(1, -1)

    def token_log_probs(self) -> torch.Tensor:
        """``log p(a_t | a_<t)`` for every sequence and position, shape ``(1, V**T, T)``.

        Returns
        -------
        torch.Tensor
            The log-probabilities, shape ``(1, V**T, T)``.
        """
        seqs = self._sequences
        lp = torch.log_softmax(self.next_token_logits(seqs), dim=-1)
        return lp.gather(-1, seqs[..., None])[..., 0].unsqueeze(0)

    @torch.no_grad()
    def sample(self, n: int, *, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw ``n`` sequences token by token, shape ``(n, T)``.

        Returns
        -------
        torch.Tensor
            The token ids, shape ``(n, T)``.
        """
        dev = self.head.weight.device
        tokens = torch.zeros((n, self.length), dtype=torch.long, device=dev)
        for t in range(self.length):
            logits = self.next_token_logits(tokens)[:, t]
            tokens[:, t] = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)[
                :, 0
            ]
        return tokens

    @torch.no_grad()
    def conditionals(self) -> list[np.ndarray]:
        """The dense conditionals: ``[t]`` of shape ``(V,)*(t+1)``, as numpy float64.

        Returns
        -------
        list of ndarray
            The conditionals.
        """
        v, length = self.vocab, self.length
        seqs = self._sequences.reshape((v,) * length + (length,))
        # one row per prefix of length T-1: the last token does not affect any conditional
        prefixes = seqs[..., 0, :] if length > 1 else seqs[:1]
        flat = prefixes.reshape(-1, length)
        probs = torch.softmax(self.next_token_logits(flat), -1)
        probs = probs.reshape((v,) * (length - 1) + (length, v)).double().cpu().numpy()
        out = []
        for t in range(length):
            index = (slice(None),) * t + (0,) * (length - 1 - t) + (t, slice(None))
            out.append(np.ascontiguousarray(probs[index]))
        return out
