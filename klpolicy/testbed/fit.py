"""A task whose reference model is fitted to a given tabular law over its completions."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from klpolicy.core.internal import validation as V
from klpolicy.testbed.law import sequence_law
from klpolicy.testbed.tasks import TASKS, Task

__all__ = [
    "SKEWED_BANDIT_LAW",
    "FittedTask",
    "fitted_task",
    "reachable_law",
    "skewed_bandit_task",
    "task_completions",
]

#: The most fitted tasks :func:`fitted_task` keeps (a repeated call returns the kept one).
_CACHE_SIZE = 16
_CACHE: dict = {}


def task_completions(task: Task) -> tuple:
    """The completions of ``task``'s prompts, in :func:`sequence_law`'s order.

    The same after every prompt (the tree's shape does not depend on the prompt): every
    sequence of at most ``task.max_new_tokens`` tokens that stops at the first EOS,
    depth first with tokens ascending: the order of ``sequence_law(...).completions`` for
    any model of the task (the order does not depend on the probabilities).

    Parameters
    ----------
    task : Task
        The task.

    Returns
    -------
    tuple of tuple of int
        The completions (token ids, an EOS that ends one included).

    Examples
    --------
    >>> from klpolicy.testbed import bandit_task, tree_task
    >>> task_completions(bandit_task())
    ((0,), (1,), (2,), (3,), (4,), (5,), (6,))
    >>> len(task_completions(tree_task()))  # 1 + 5 + 5 * 5 * 6
    156
    """
    import torch

    _check_task(task)
    n = len(task.vocabulary)
    law = sequence_law(
        lambda ids: torch.zeros(len(ids), n),
        task.prompt_ids()[0],
        max_new_tokens=task.max_new_tokens,
        eos_token_id=task.eos_token_id,
    )
    return law.completions


def _check_task(task) -> None:
    if not isinstance(task, Task):
        raise ValueError(
            "`task` must be a klpolicy.testbed.Task (bandit_task() builds one); "
            f"got {V.describe(task)}"
        )


def _target_law(law, completions: tuple, n_prompts: int) -> NDArray[np.float64]:
    """``law`` as float64 rows over ``completions``, shape ``(P, n)``, checked.

    One prompt: a mapping or a 1-D array (or one row of them); ``P`` prompts: a sequence of
    ``P`` rows, each a mapping or a 1-D array (a 2-D array of ``P`` rows included). Errors
    name `law` (`law[i]` for the row of prompt ``i``).
    """
    rows = None
    if isinstance(law, Mapping):
        rows = [law]
    else:
        with contextlib.suppress(ValueError, TypeError):
            a = np.asarray(law)
            if a.dtype.kind in "iuf" and a.ndim in (1, 2):
                rows = [a] if a.ndim == 1 else list(a)
        if rows is None and isinstance(law, (list, tuple)) and law:
            if all(isinstance(r, Mapping) for r in law):
                rows = list(law)
    if rows is None:
        raise ValueError(
            f"`law` must be probabilities over the task's {len(completions)} completions "
            "(a 1-D array in task_completions(task)'s order or a mapping completion -> "
            f"probability; a row of them per prompt); got {V.describe(law)}"
        )
    if len(rows) != n_prompts:
        raise ValueError(
            f"`law` must have one row per prompt: the task has {n_prompts}, `law` {len(rows)}"
        )
    names = ["`law`"] if n_prompts == 1 else [f"`law[{i}]`" for i in range(n_prompts)]
    return np.stack([_target_row(r, completions, nm) for r, nm in zip(rows, names, strict=True)])


def _target_row(law, completions: tuple, name: str) -> NDArray[np.float64]:
    """One row of ``law`` over ``completions``: a mapping naming every completion once, or a
    1-D array in ``completions``' order; finite, positive (a softmax never gives 0), summing
    to 1 within 1e-9."""
    n = len(completions)
    if isinstance(law, Mapping):
        index = {c: i for i, c in enumerate(completions)}
        vec = np.full(n, np.nan)
        for key, value in law.items():
            try:
                c = tuple(int(t) for t in key) if not isinstance(key, (str, bytes)) else None
            except (TypeError, ValueError):
                c = None
            if c is None or c not in index or list(c) != list(key):
                raise ValueError(
                    f"{name} has the key {key!r}, which is not a completion of the task "
                    f"(a tuple of token ids such as {completions[0]!r}; task_completions(task) "
                    "lists them)"
                )
            vec[index[c]] = _as_prob(value, key, name)
        missing = [completions[i] for i in np.flatnonzero(np.isnan(vec))]
        if missing:
            raise ValueError(
                f"{name} must give every one of the task's {n} completions a probability; "
                f"{len(missing)} missing, the first {missing[0]!r}"
            )
    else:
        vec = np.asarray(law)
        if vec.shape[0] != n:
            raise ValueError(
                f"{name} must have one probability for each of the task's {n} completions; "
                f"got {vec.shape[0]}"
            )
        vec = vec.astype(np.float64)
        for i, c in enumerate(completions):
            _as_prob(law[i], c, name)
    with np.errstate(over="ignore"):  # a sum of huge entries is inf, refused below
        total = float(np.sum(vec))
    if not abs(total - 1.0) <= 1e-9:
        raise ValueError(
            f"{name} must sum to 1 (within 1e-9); it sums to {total!r}; klpolicy never "
            "renormalises silently"
        )
    return vec


def _as_prob(value, completion, name: str) -> float:
    """One probability of ``law``: a finite real number > 0 (a ValueError naming it)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ValueError(
            f"{name} must hold real numbers; found {V.describe(value)} at completion {completion!r}"
        )
    v = float(value)
    if not np.isfinite(v) or v < 0:
        raise ValueError(
            f"{name} must be finite and >= 0; found {v!r} at completion {completion!r}"
        )
    if v == 0:
        raise ValueError(
            f"{name} must be positive on every completion: a softmax model never gives "
            f"probability 0; found 0 at completion {completion!r} (give it a small positive "
            "probability instead)"
        )
    return v


@dataclass(frozen=True)
class FittedTask(Task):
    r"""A :class:`Task` whose initial model (TRL's reference) was fitted to a tabular law.

    Attributes
    ----------
    target : ndarray, shape (P, n)
        The law the reference was fitted to, a row per prompt, over :attr:`completions`.
    completions : tuple of tuple of int
        The task's completions (:func:`task_completions`), the order of :attr:`target`.
    fit_kl : float
        :math:`\max_x \mathrm{KL}(\text{target}_x \,\|\, \text{fitted}_x)` over the
        prompts, the fitted model's exact law enumerated by :func:`sequence_law` (float32
        weights, as :meth:`model` returns them), in nats.
    fit_steps : int
        The optimiser steps the fit took.
    tol : float
        The tolerance the fit reached (``fit_kl < tol``).
    state : dict
        The fitted weights (a ``state_dict``), which :meth:`model` loads.

    Examples
    --------
    >>> from klpolicy.testbed import bandit_task, fitted_task
    >>> t = fitted_task(bandit_task(), [0.3, 0.2, 0.1, 0.05, 0.05, 0.1, 0.2])
    >>> t.target.shape, t.fit_steps > 0, t.name
    ((1, 7), True, 'bandit')
    """

    target: NDArray | None = field(default=None, compare=False)
    completions: tuple = ()
    fit_kl: float = float("nan")
    fit_steps: int = 0
    tol: float = 1e-6
    state: dict = field(default_factory=dict, compare=False, repr=False)

    def model(self):
        """The fitted model: the task's architecture with the fitted weights, a new copy.

        Returns
        -------
        transformers.LlamaForCausalLM
            A new model, the same weights on every call (built from the kept state, no
            refitting).
        """
        m = super().model()
        m.load_state_dict(self.state)
        return m

    def base_model(self):
        """The initial model before the fit (the architecture seeded by ``model_seed``).

        Returns
        -------
        transformers.LlamaForCausalLM
            A new model with the unfitted initial weights (:meth:`Task.model`'s).
        """
        return super().model()


def _base_fields(task: Task) -> dict:
    return {f.name: getattr(task, f.name) for f in dataclasses.fields(Task)}


def _edge_masses(completions: tuple, target: NDArray, vocab: int) -> dict:
    r"""``{(x, prefix): W}`` over each prompt ``x``'s live prefixes: ``W[v]`` is the target
    mass through the edge ``prefix -> v`` (of the completions that start with ``prefix +
    (v,)``), from row ``x`` of ``target``.

    Then :math:`-\sum_c \text{target}_x(c) \log m(c \mid x) = -\sum_{\text{prefix}} \sum_v
    W_{x, \text{prefix}}[v] \log m(v \mid x, \text{prefix})`: the cross-entropy over
    completions is a weighted cross-entropy of the next-token rows of the token tree.
    """
    out: dict = {}
    for x, row in enumerate(target):
        for c, p in zip(completions, row, strict=True):
            for t in range(len(c)):
                out.setdefault((x, c[:t]), np.zeros(vocab))[c[t]] += p
    return dict(sorted(out.items()))


def _tied_nodes(prompt_ids, nodes) -> list[list]:
    """Groups of nodes ``(x, prefix)`` whose contexts have one next-token law for any weights.

    The task's Llama has no absolute position (RoPE rotates queries and keys only) and no
    biases, so on a context of one token repeated every position has the same hidden
    state, whatever the weights (attention averages equal values): the next-token law after
    ``q``, ``q q``, ``q q q`` is one law. Equal contexts (two equal prompts) are tied too.
    Groups of one are left out.
    """
    groups: dict = {}
    for x, p in nodes:
        ctx = tuple(prompt_ids[x]) + tuple(p)
        key = ("repeated", ctx[0]) if len(set(ctx)) == 1 else ("context", ctx)
        groups.setdefault(key, []).append((x, p))
    return [g for g in groups.values() if len(g) > 1]


def _projected(masses: dict, prompt_ids) -> dict:
    r"""The conditionals of the closest law (in KL(target || .)) with the tied rows equal.

    Untied rows keep the target's conditional; a tied group gets the mass-weighted
    mixture of its rows' conditionals, which minimises
    :math:`\sum_i s_i \mathrm{KL}(c_i \,\|\, m)` over one shared row ``m``.
    """
    cond = {k: w / w.sum() for k, w in masses.items()}
    for group in _tied_nodes(prompt_ids, masses):
        mix = sum(masses[k] for k in group)
        for k in group:
            cond[k] = mix / mix.sum()
    return cond


def _law_from_conditionals(completions: tuple, cond: dict, n_prompts: int) -> NDArray:
    """Each prompt's law of ``completions``, shape ``(P, n)``: products of conditionals."""
    out = np.ones((n_prompts, len(completions)))
    for x in range(n_prompts):
        for i, c in enumerate(completions):
            for t in range(len(c)):
                out[x, i] *= cond[(x, c[:t])][c[t]]
    return out


def _objective(prompt_ids, masses: dict, torch):
    """``f(model) -> (P,)``: each prompt's ``-sum_c target_x(c) log m(c | x)``, differentiable,
    from one batched forward pass per context length over the longest live prefixes (causal
    logits give every shorter prefix's row)."""
    nodes = list(masses)
    longest = [
        (x, p)
        for x, p in nodes
        if not any(y == x and len(q) > len(p) and q[: len(p)] == p for y, q in nodes)
    ]
    by_len: dict = {}
    for x, p in longest:
        by_len.setdefault(len(prompt_ids[x]) + len(p), []).append((x, p))
    passes, left = [], nodes
    for _, rows in sorted(by_len.items()):
        covered = [(x, p) for x, p in left if any(y == x and r[: len(p)] == p for y, r in rows)]
        left = [k for k in left if k not in covered]
        row_of = [
            next(i for i, (y, r) in enumerate(rows) if y == x and r[: len(p)] == p)
            for x, p in covered
        ]
        passes.append(
            (
                torch.tensor([list(prompt_ids[y]) + list(r) for y, r in rows], dtype=torch.long),
                torch.tensor(row_of),
                torch.tensor([len(prompt_ids[x]) - 1 + len(p) for x, p in covered]),
                torch.as_tensor(np.array([masses[k] for k in covered])),
                torch.tensor([x for x, _ in covered]),
            )
        )
    n_prompts = len(prompt_ids)

    def f(model):
        total = torch.zeros(n_prompts, dtype=torch.float64)
        for batch, row_of, pos, w, prompt in passes:
            out = model(input_ids=batch, attention_mask=torch.ones_like(batch)).logits
            logp = torch.log_softmax(out[row_of, pos].to(torch.float64), dim=-1)
            total = total.index_add(0, prompt, -(w * logp[:, : w.shape[1]]).sum(-1))
        return total

    return f


@contextlib.contextmanager
def _one_thread(torch):
    """One torch thread while fitting (the same float sums on every machine), restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _fit_state(task: Task, completions: tuple, target: NDArray, tol: float, steps: int):
    """The fitted state dict, each prompt's ``KL(target || fitted)`` and the steps taken.

    Full-batch Adam (learning rate 0.01, halved after 50 steps without a new best) on the
    exact cross-entropy summed over the prompts, on the task's float32 model, until every
    prompt's KL is below ``tol / 2`` or ``steps``; the weights with the lowest largest KL
    are kept and their law enumerated again for the KL reported.
    """
    import torch

    prompt_ids = task.prompt_ids()
    masses = _edge_masses(completions, target, len(task.vocabulary))
    floor = -np.sum(target * np.log(target), axis=-1)  # the entropies: the floors
    f = _objective(prompt_ids, masses, torch)
    model = Task.model(task).eval()
    with _one_thread(torch):
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=50)
        best, best_state, used = np.inf, None, 0
        for step in range(1, steps + 1):
            used = step
            opt.zero_grad()
            loss = f(model)
            kl = float(np.max(loss.detach().numpy() - floor))
            if kl < best:
                best = kl
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if kl < tol / 2:  # the enumerated law is checked after
                break
            loss.sum().backward()
            opt.step()
            sched.step(kl)
    model.load_state_dict(best_state)
    kls = np.array(
        [
            np.sum(row * (np.log(row) - _enumerated(model, task, ids).logprobs))
            for row, ids in zip(target, prompt_ids, strict=True)
        ]
    )
    return best_state, kls, used


def _enumerated(model, task: Task, ids):
    return sequence_law(
        model, ids, max_new_tokens=task.max_new_tokens, eos_token_id=task.eos_token_id
    )


def reachable_law(task: Task, law) -> NDArray[np.float64]:
    r"""The law nearest ``law`` (in :math:`\mathrm{KL}(\text{law} \,\|\, \cdot)`) that the
    task's model can express: its next-token laws after ``q``, ``q q``, ... made equal.

    .. math::

        m(v \mid h) = \frac{\sum_{h' \sim h} W_{h'}(v)}{\sum_{h' \sim h} \sum_u W_{h'}(u)},
        \qquad W_h(v) = \sum_{y \,\supseteq\, h v} \text{law}(y)

    where :math:`h' \sim h` groups the contexts ``prompt + prefix`` made of one token
    repeated; every other context keeps ``law``'s conditional, and the law of a completion
    is the product of its conditionals. A transformers Llama (RoPE, no biases, no BOS) gives
    all of such a group's contexts the same next-token law, whatever its weights; the
    minimiser of :math:`\sum_h s_h\,\mathrm{KL}(c_h \,\|\, m)` over one shared row is the
    mass-weighted mixture.

    Parameters
    ----------
    task : Task
        The task.
    law : array_like or mapping
        As in :func:`fitted_task` (a row per prompt for a task of several prompts).

    Returns
    -------
    ndarray, shape (n,) or (P, n)
        The reachable law over :func:`task_completions` (float64), in ``law``'s shape (one
        row for one row given); ``law`` itself, up to rounding, when no two tied contexts
        differ (always on :func:`bandit_task` and :func:`tree_task`).

    Raises
    ------
    ValueError
        For a bad ``task`` or ``law`` (as :func:`fitted_task`).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.testbed import Task, tree_task
    >>> tied = Task("tied", ("[PAD]", "[EOS]", "q", "a", "b"), ("q",), 3, lambda x, c: 0.0)
    >>> q = np.full(85, 1 / 85)
    >>> bool(np.allclose(reachable_law(tied, q), q))  # p(. | q) and p(. | q q) differ in q
    False
    >>> u = np.full(156, 1 / 156)  # tree_task's prompt "[BOS] q" ties no contexts
    >>> bool(np.allclose(reachable_law(tree_task(), u), u))
    True
    """
    _check_task(task)
    completions = task_completions(task)
    target = _target_law(law, completions, len(task.prompts))
    masses = _edge_masses(completions, target, len(task.vocabulary))
    out = _law_from_conditionals(completions, _projected(masses, task.prompt_ids()), len(target))
    return out[0] if _one_row(law) else out


def _one_row(law) -> bool:
    """Whether ``law`` was given as one row (a mapping or a 1-D array), not rows per prompt."""
    if isinstance(law, Mapping):
        return True
    if isinstance(law, (list, tuple)) and law and isinstance(law[0], Mapping):
        return False
    return np.ndim(law) == 1


def _check_reachable(task: Task, completions: tuple, target: NDArray, tol: float) -> None:
    """Refuse a ``law`` that no weights reach within ``tol`` (tied contexts that differ)."""
    prompt_ids = task.prompt_ids()
    masses = _edge_masses(completions, target, len(task.vocabulary))
    nearest = _law_from_conditionals(completions, _projected(masses, prompt_ids), len(target))
    gaps = np.sum(target * (np.log(target) - np.log(nearest)), axis=-1)
    if np.max(gaps) >= tol:
        x = int(np.argmax(gaps))
        group = next(g for g in _tied_nodes(prompt_ids, masses) if any(k[0] == x for k in g))
        words = [
            " ".join(task.vocabulary[t] for t in list(prompt_ids[y]) + list(p)) for y, p in group
        ]
        name = "`law`" if len(target) == 1 else f"`law[{x}]`"
        raise ValueError(
            f"{name} is out of the model's reach: its next-token laws after {words} differ, "
            "and the task's Llama (no absolute positions) gives every repetition of one token "
            f"the same next-token law; no weights come nearer than KL = {gaps[x]:.3g} (`tol` "
            f"= {tol:g}); reachable_law(task, law) is the nearest law it can fit"
        )


def fitted_task(task: Task, law, *, tol: float = 1e-6, steps: int = 2000) -> FittedTask:
    r"""``task`` with its initial model fitted to the tabular law ``law`` over its completions.

    .. math::

        \theta_{\text{ref}} = \arg\min_\theta \mathrm{KL}(q \,\|\, m_\theta)
        = \arg\min_\theta -\sum_y q(y) \log m_\theta(y \mid x),
        \qquad m_\theta(y \mid x) = \prod_t m_\theta(y_t \mid x, y_{<t})

    over every completion ``y`` of the prompt ``x`` (exactly, by enumeration; for several
    prompts the sum over them, each held to ``tol``), started at
    the task's initial weights (``task.model_seed``). The run's reference (TRL's reference
    model is the initial weights) is then the *fitted* model's exact law, within ``tol`` of
    ``q`` in KL, not ``q`` itself: :func:`klpolicy.testbed.run` reports
    ``KL(q || ref_law)`` as ``kl_target_to_ref``.

    Parameters
    ----------
    task : Task
        The task (:func:`bandit_task`, :func:`tree_task`, ...); a :class:`FittedTask` is
        refitted from its initial weights.
    law : array_like or mapping
        The target ``q``: an array of probabilities in the order of
        :func:`task_completions` (``sequence_law``'s), or a mapping ``{completion tuple:
        probability}`` naming every completion once; for a task of ``P`` prompts, a row
        per prompt (a ``(P, n)`` array or ``P`` mappings). Finite, positive, each row
        summing to 1 (within 1e-9).
    tol : float, optional
        The fit stops once :math:`\mathrm{KL}(q \,\|\, m_\theta) < tol / 2` (nats) and
        must end below ``tol``: a number in ``[1e-9, 1)`` (default 1e-6; float32 logits
        resolve the KL to about 1e-9).
    steps : int, optional
        The most optimiser steps, in ``[1, 10**6]`` (default 2000).

    Returns
    -------
    FittedTask
        The task with the fitted weights: :meth:`FittedTask.model` returns a new model with
        them on every call (no refitting); ``.target``, ``.completions``, ``.fit_kl``
        (``KL(q || fitted law)``, the law enumerated from the float32 model) and
        ``.fit_steps``. A repeated call with equal arguments returns the same object (the
        last 16 fits are kept).

    Raises
    ------
    ValueError
        For a ``task`` that is not a :class:`Task`; a ``law`` that is not a probability
        vector over exactly the task's completions (wrong length, a key that is not a
        completion, a missing completion, a value that is not finite, a zero: a softmax
        never gives probability 0, or a sum other than 1) or that the model cannot express
        (see :func:`reachable_law`); ``tol`` outside ``[1e-9, 1)``; ``steps`` outside
        ``[1, 10**6]``; or a fit that does not reach ``tol`` in ``steps`` steps (the
        message gives the KL reached).

    Notes
    -----
    The objective is the cross-entropy over completions, written as a weighted
    cross-entropy of the token tree's next-token rows (the target mass through each
    edge); causal logits give every row from one batched forward pass over the longest
    live prefixes. Full batch, no sampling: Adam (learning rate 0.01, halved after 50
    steps without a new best) on one torch thread, so the fit is deterministic; the best
    weights seen are kept. A zero in ``law`` is refused rather than floored: no weights
    attain it, and a floor would be a target the caller did not give. Contexts made of one
    token repeated (the prompt ``q``, then ``q q``, ...) have one next-token law whatever
    the weights, so a ``law`` whose conditionals differ there is refused up front, with the
    KL to the nearest law the model can express.

    Examples
    --------
    >>> from klpolicy.testbed import bandit_task
    >>> t = fitted_task(bandit_task(), [0.3, 0.2, 0.1, 0.05, 0.05, 0.1, 0.2])
    >>> bool(t.fit_kl < 1e-6), t.completions[:2]
    (True, ((0,), (1,)))
    """
    _check_task(task)
    tol = V.as_scalar("tol", tol, "(0, inf)")
    if not 1e-9 <= tol < 1:
        raise ValueError(f"`tol` must be in [1e-9, 1) (nats); got {tol!r}")
    steps = V.as_count("steps", steps, lo=1, hi=10**6)
    completions = task_completions(task)
    target = _target_law(law, completions, len(task.prompts))
    base = _base_fields(task)
    key = None
    with contextlib.suppress(TypeError):  # an unhashable task field: no caching
        key = (tuple(base.items()), target.tobytes(), tol, steps)
        hash(key)
    if key is not None and key in _CACHE:
        return _CACHE[key]
    _check_reachable(task, completions, target, tol)
    state, kls, used = _fit_state(Task(**base), completions, target, tol, steps)
    kl = float(np.max(kls))
    if not kl < tol:
        raise ValueError(
            f"the fit did not reach `tol` = {tol:g}: KL(law || fitted) = {kl:.3g} after "
            f"{used} steps; raise `steps` or `tol`"
        )
    out = FittedTask(
        **base, target=target, completions=completions, fit_kl=kl, fit_steps=used, tol=tol
    )
    object.__setattr__(out, "state", state)
    if key is not None:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = out
    return out


#: The law :func:`skewed_bandit_task`'s reference is fitted to, over the bandit's tokens
#: ``[PAD] [EOS] q a b c d``: the best answer ``a`` (reward 1) rare, ``c`` (0.25) common.
SKEWED_BANDIT_LAW = (0.04, 0.04, 0.04, 0.02, 0.1, 0.5, 0.26)


def skewed_bandit_task(*, model_seed: int = 0) -> FittedTask:
    """The bandit of :func:`bandit_task` with its reference fitted to :data:`SKEWED_BANDIT_LAW`.

    The reference puts 0.02 on the best answer ``a`` and 0.5 on ``c`` (reward 0.25):
    :func:`fitted_task` of ``bandit_task(model_seed=model_seed)`` (renamed
    ``"bandit-skewed"``) at the default tolerance 1e-6.

    Parameters
    ----------
    model_seed : int, optional
        The seed of the weights the fit starts from, an integer in ``[0, 2**32 - 1]``
        (default 0).

    Returns
    -------
    FittedTask
        The task (the fit is kept: a second call is free).

    Raises
    ------
    ValueError
        For ``model_seed`` not an integer in ``[0, 2**32 - 1]``.

    Examples
    --------
    >>> t = skewed_bandit_task()
    >>> t.name, bool(t.fit_kl < 1e-6)
    ('bandit-skewed', True)
    """
    from klpolicy.testbed.tasks import bandit_task

    base = dataclasses.replace(bandit_task(model_seed=model_seed), name="bandit-skewed")
    return fitted_task(base, SKEWED_BANDIT_LAW)


# the built-in tasks' table (the CLI's ``--task``) gets the fitted one; tasks.py cannot
# import this module (it imports tasks.py)
TASKS["bandit-skewed"] = skewed_bandit_task
