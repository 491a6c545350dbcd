r"""klpolicy's own trainers (:mod:`klpolicy.torch`) on the testbed's transformers model.

The TRL adapters run TRL's code; these run klpolicy's update rules, unchanged, on the very
same model (the task's :meth:`~klpolicy.testbed.Task.model`, tokenizer and prompt): the
model's exact law over the task's completions is one differentiable forward pass (every
completion scored after the prompt, teacher-forced), and
:func:`klpolicy.torch.fit_policy` trains it with its own steps through ``policy=``. The
sampled methods draw their completions from that law, which is the law of sampling the
model token by token at temperature 1 (how TRL's GRPO and RLOO sample by default).

Methods (``"klpolicy-<method>"`` in :data:`klpolicy.testbed.ADAPTERS`)
--------------------------------------------------------------------
``exact``
    Adam on the exact objective :math:`\mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})`
    over the completions. Its gradient in the logits is the expected step of REINFORCE
    without a baseline (the ``"reinforce"`` row of :data:`klpolicy.dynamics.RULES`,
    ``baseline="none"``): it lands at :math:`\pi^*_\beta`.
``reinforce``
    The score-function gradient from ``batch_size`` samples a step with a leave-one-out
    baseline, the KL estimator ``estimator`` in the ``"reward"`` (detached) or the
    ``"loss"`` (differentiated): the ``"reinforce"`` row with ``baseline="loo"``,
    ``num_generations = batch_size`` and the same ``kl_estimator`` and ``placement``.
    k1 in the reward and k2 in the loss land at :math:`\pi^*_\beta`, k3 in the loss at
    the forward-KL optimum, k1 in the loss goes greedy, and k2 or k3 in the reward have
    no interior fixed point (no prediction).
``ppo``
    ``batch_size`` samples a step, the estimator ``estimator`` folded into the reward, a
    leave-one-out baseline of the shaped rewards, ``epochs`` optimiser steps on the batch
    with the ratio clipped at ``1 +- clip``: the ``"ppo"`` row with the same
    ``kl_estimator`` (its value baseline and the leave-one-out one have the same expected
    step; on-policy the clip is inactive and the later epochs share its zeros). k1 lands at
    :math:`\pi^*_\beta`; k2 and k3 have no interior fixed point.
``grpo``
    ``n_groups`` groups of ``num_generations`` samples a step, advantages
    ``(r - mean) / (std + 1e-4)`` with the unbiased group std, k3 in the loss without a
    ratio: the ``"grpo"`` row at ``scale_rewards="group"``,
    ``use_bias_correction_kl=False`` (its std epsilon is TRL's 1e-4, which the testbed
    therefore sets in klpolicy's step).

The KL of the sampled methods acts on whole completions (their sequence log-ratio), so on
a task of several tokens the tabular landing point over the completions is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from klpolicy import optimal_policy
from klpolicy.core.internal import validation as V
from klpolicy.dynamics import landing_point
from klpolicy.dynamics.rules import TRL_STD_EPS
from klpolicy.estimators import estimator_names

__all__ = ["OwnMethod", "completion_policy"]

#: The most samples a step of a sampled method draws (``batch_size``; ``n_groups``).
MAX_SAMPLES = 4096

_ESTIMATORS = estimator_names(kl_only=True)


def completion_policy(model, prompt_ids, completions, *, pad_token_id: int = 0):
    r"""A causal LM's exact law over given completions after each prompt, as a module.

    .. math::

        \log \pi(y \mid x) = \sum_t \log\mathrm{softmax}(\mathrm{logits}(x, y_{<t}))_{y_t}

    Parameters
    ----------
    model : transformers causal LM
        Called as ``model(input_ids=..., attention_mask=...)``; it becomes the module's
        only submodule (``parameters()`` are the model's).
    prompt_ids : sequence of sequence of int
        The prompts' token ids, one list per prompt (as :meth:`Task.prompt_ids` gives them).
    completions : sequence of tuple of int
        The completions (e.g. :attr:`klpolicy.testbed.SequenceLaw.completions`), the same
        after every prompt.
    pad_token_id : int, optional
        What fills the batch after a short completion (causal attention: never read by
        its own tokens).

    Returns
    -------
    torch.nn.Module
        ``log_probs()``: a ``(P, n)`` float64 tensor, row ``x`` the law after prompt ``x``,
        differentiable in the model's weights; one forward pass of the ``n`` completions
        per prompt (teacher-forced, the log-softmax in float64). Its token tensors live on
        the model's device at construction.

    Examples
    --------
    >>> from klpolicy.testbed import bandit_task, sequence_law
    >>> t = bandit_task()
    >>> m = t.model()
    >>> law = sequence_law(m, t.prompt_ids()[0], max_new_tokens=1)
    >>> lp = completion_policy(m, t.prompt_ids(), law.completions).log_probs()
    >>> lp.shape, bool(abs(lp.exp().detach().numpy()[0] - law.probs).max() < 1e-6)
    (torch.Size([1, 7]), True)
    """
    import torch

    T = max(len(c) for c in completions)
    dev = next(model.parameters()).device
    batches = []
    for prompt in prompt_ids:
        prompt = [int(t) for t in prompt]
        L = len(prompt)
        ids = torch.full((len(completions), L + T), int(pad_token_id), dtype=torch.long)
        ids[:, :L] = torch.tensor(prompt)
        mask = torch.zeros(len(completions), T, dtype=torch.bool)
        for i, c in enumerate(completions):
            ids[i, L : L + len(c)] = torch.tensor(c, dtype=torch.long)
            mask[i, : len(c)] = True
        batches.append((L, ids.to(dev), mask.to(dev)))

    class _CompletionLaw(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def log_probs(self):
            rows = []
            for L, ids, mask in batches:
                x = ids[:, :-1]
                logits = self.lm(input_ids=x, attention_mask=torch.ones_like(x)).logits
                lp = torch.log_softmax(logits[:, L - 1 :, :].to(torch.float64), dim=-1)
                tok = lp.gather(-1, ids[:, L:, None])[..., 0]
                rows.append(torch.where(mask, tok, torch.zeros_like(tok)).sum(-1))
            return torch.stack(rows)

    return _CompletionLaw(model)


@dataclass(frozen=True)
class OwnMethod:
    """One of klpolicy's own trainers as a testbed adapter's ``train``.

    Attributes
    ----------
    method : str
        The :func:`klpolicy.torch.fit_policy` method: ``"exact"``, ``"reinforce"``,
        ``"ppo"`` or ``"grpo"``.

    Examples
    --------
    >>> from klpolicy.testbed import ADAPTERS
    >>> a = ADAPTERS["klpolicy-reinforce"]
    >>> o = a.train.check("klpolicy-reinforce", {"estimator": "k3", "placement": "loss"},
    ...                   a.defaults)
    >>> rule, options, (policy, beta_eff, why) = a.train.prediction([0.5, 0.5], [1.0, 0.0], o)
    >>> rule, options["baseline"], beta_eff, policy.round(4)
    ('reinforce', 'loo', None, array([0.809, 0.191]))
    """

    method: str

    def check(self, trainer: str, options: dict, defaults: dict) -> dict:
        """The caller's options over ``defaults``, each checked (an unknown one refused).

        ``beta`` must be positive (as in :func:`klpolicy.torch.fit_policy`);
        ``batch_size`` in ``[2, 4096]``, ``n_groups`` and ``epochs`` in ``[1, 4096]``,
        ``clip`` positive, ``estimator`` one of k1, k2, k3 and ``placement`` ``"reward"``
        or ``"loss"``.

        Returns
        -------
        dict
            Every option of the method, the caller's values over ``defaults``, checked.
        """
        unknown = sorted(set(options) - set(defaults))
        if unknown:
            listed = ", ".join(sorted(defaults))
            raise ValueError(
                f"unknown option `{unknown[0]}` for {trainer} (its options are {listed})"
            )
        o = dict(defaults) | dict(options)
        o["beta"] = V.as_positive_scalar("beta", o["beta"])
        o["learning_rate"] = V.as_positive_scalar("learning_rate", o["learning_rate"])
        if "batch_size" in o:
            o["batch_size"] = V.as_count("batch_size", o["batch_size"], lo=2, hi=MAX_SAMPLES)
        for name in ("n_groups", "epochs"):
            if name in o:
                o[name] = V.as_count(name, o[name], lo=1, hi=MAX_SAMPLES)
        if "clip" in o:
            o["clip"] = V.as_positive_scalar("clip", o["clip"])
        if "num_generations" in o:
            o["num_generations"] = V.as_count(
                "num_generations", o["num_generations"], lo=2, hi=MAX_SAMPLES
            )
        if "estimator" in o:
            o["estimator"] = V.as_choice("estimator", o["estimator"], _ESTIMATORS)
        if "placement" in o:
            o["placement"] = V.as_choice("placement", o["placement"], ("reward", "loss"))
        return o

    def fit_options(self, o: dict) -> dict:
        """The :func:`klpolicy.torch.fit_policy` options of checked testbed options ``o``.

        Returns
        -------
        dict
            The keyword options of :func:`klpolicy.torch.fit_policy` for this method.
        """
        if self.method == "reinforce":
            return {k: o[k] for k in ("batch_size", "estimator", "placement")}
        if self.method == "ppo":
            return {k: o[k] for k in ("batch_size", "estimator", "epochs", "clip")}
        if self.method == "grpo":
            return {
                "group_size": o["num_generations"],
                "n_groups": o["n_groups"],
                "eps": TRL_STD_EPS,
                "unbiased_std": True,
            }
        return {}

    def prediction(self, ref, reward, o: dict):
        """Where this method lands: ``(rule, rule_options, landing)`` for ``ref``, ``reward``.

        ``ref`` and ``reward`` are one context's rows ``(n,)`` or one row per prompt
        ``(P, n)``, each its own context. ``rule`` names the
        :data:`klpolicy.dynamics.RULES` row; ``landing`` is ``(policy or None, beta_eff,
        descriptions)``: the landing policy in ``ref``'s shape (None where any context has
        none), the ``beta_eff`` shared by every context (else None) and one description
        per context.

        Returns
        -------
        tuple
            ``(rule, rule_options, landing)`` as above.
        """
        rule, ro = _rule_of(self.method, o)
        q, r = np.asarray(ref, dtype=np.float64), np.asarray(reward, dtype=np.float64)
        lands = [landing_point(rule, qx, rx, o["beta"], **ro) for qx, rx in zip(
            np.atleast_2d(q), np.atleast_2d(r), strict=True
        )]  # fmt: skip
        pi = None
        if all(land.policy is not None for land in lands):
            pi = np.stack([np.asarray(land.policy, dtype=np.float64) for land in lands])
            pi = pi.reshape(q.shape)
        betas = {land.beta_eff for land in lands}
        beta_eff = betas.pop() if len(betas) == 1 else None
        return rule, ro, (pi, beta_eff, [str(land) for land in lands])

    def __call__(self, model, task, law_of, ref, *, steps, seed, device, law_every, progress, o):
        """Train ``model`` ``steps`` steps; the laws over time and the prediction.

        ``ref`` is ``(completions, ref_law, reward)``, a row per prompt ``(P, n)``: each
        prompt is a context of :func:`klpolicy.torch.fit_policy`, the samples drawn per
        prompt. Returns ``(trained, prediction, kept)``: ``trained = (law_steps, laws,
        final_law, wall_time)`` (the law read by ``law_of`` every ``law_every`` steps and
        after the last), ``prediction = (policy, beta_eff, descriptions, pistar)`` (one
        description per prompt) and ``kept`` the configuration reported.
        """
        import time

        from klpolicy.torch import fit_policy

        completions, ref_law, reward = ref
        rule, ro, (pi, beta_eff, landing) = self.prediction(ref_law, reward, o)
        pistar = optimal_policy(ref_law, reward, o["beta"])
        dev = "cpu" if device is None else device
        pad = task.tokenizer().pad_token_id
        policy = completion_policy(model.to(dev), task.prompt_ids(), completions, pad_token_id=pad)
        laws, law_steps = [], []

        def record(step, m):
            if step % law_every == 0 or step == steps:
                laws.append(law_of(m.lm)[1])
                law_steps.append(step)

        t0 = time.perf_counter()
        try:
            fit_policy(
                ref_law,
                reward,
                o["beta"],
                method=self.method,
                steps=steps,
                seed=seed,
                device=dev,
                lr=o["learning_rate"],
                schedule="linear",
                progress=progress,
                policy=policy,
                callback=record,
                **self.fit_options(o),
            )
        except ValueError as exc:
            if "diverged" not in str(exc):
                raise
            laws.append(np.full(np.shape(ref_law), np.nan))
        wall = time.perf_counter() - t0
        final = laws[-1]
        if not np.isfinite(final).all():
            raise ValueError(
                f"the run diverged: the policy's law is not finite after {steps} steps; "
                f"lower `learning_rate` (got {o['learning_rate']!r})"
            )
        kept = {"method": self.method, **o, "rule": rule} | ro
        trained = (np.array(law_steps), np.array(laws), final, wall)
        return trained, (pi, beta_eff, landing, pistar), kept


def _rule_of(method: str, o: dict) -> tuple[str, dict]:
    """The dynamics row (and its options) whose expected step is ``method``'s at ``o``."""
    if method == "exact":
        return "reinforce", {"baseline": "none"}
    if method == "ppo":
        return "ppo", {"kl_estimator": o["estimator"]}
    if method == "grpo":
        return "grpo", {
            "num_generations": o["num_generations"],
            "scale_rewards": "group",
            "use_bias_correction_kl": False,
        }
    return "reinforce", {
        "baseline": "loo",
        "num_generations": o["batch_size"],
        "kl_estimator": o["estimator"],
        "placement": o["placement"],
    }
