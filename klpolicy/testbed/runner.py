"""Run a real trainer (TRL 1.16) on a task and measure where it lands against the prediction."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from klpolicy import kl_divergence, optimal_policy
from klpolicy.core.internal import validation as V
from klpolicy.dynamics import beta_fit, landing_point
from klpolicy.testbed.law import sequence_law
from klpolicy.testbed.tasks import Task, bandit_task

__all__ = ["ADAPTERS", "TRL_RANGE", "Adapter", "TestbedResult", "run"]

TRL_RANGE = (">=1.16.0", "<1.17")


@dataclass(frozen=True)
class Adapter:
    """One real trainer: how to build it and which of its options the dynamics rule reads.

    Attributes
    ----------
    rule : str
        The row of :data:`klpolicy.dynamics.RULES` whose landing point predicts it.
    config, trainer : str
        TRL's config and trainer class names (``trl.<name>``).
    rule_options : tuple of str
        The config fields passed to :func:`klpolicy.dynamics.landing_point` (same names).
    defaults : dict
        Config values the testbed sets unless the caller does.
    """

    rule: str
    config: str
    trainer: str
    rule_options: tuple
    defaults: dict = field(default_factory=dict)


ADAPTERS = {
    "trl-grpo": Adapter(
        rule="grpo",
        config="GRPOConfig",
        trainer="GRPOTrainer",
        rule_options=("num_generations", "scale_rewards", "loss_type", "use_bias_correction_kl"),
        defaults={
            "beta": 0.5,
            "num_generations": 2,
            "scale_rewards": "none",
            "learning_rate": 1e-2,
        },
    ),
    "trl-rloo": Adapter(
        rule="rloo",
        config="RLOOConfig",
        trainer="RLOOTrainer",
        rule_options=("num_generations", "normalize_advantages"),
        defaults={"beta": 0.5, "num_generations": 2, "learning_rate": 1e-2},
    ),
}


@dataclass
class TestbedResult:
    """What a testbed run measured.

    Attributes
    ----------
    trainer : str
        The adapter's name.
    config : dict
        The trainer config's values that matter (beta, the rule's options, lr, batch).
    steps, seed : int
        Optimiser steps and the trainer's seed.
    completions : tuple of tuple of int
        The completions every law below is over.
    ref_law, reward : ndarray, shape (n,)
        The initial model's exact law (TRL's reference) and each completion's reward.
    law_steps : ndarray, shape (k,)
        The steps at which the policy's law was enumerated.
    laws : ndarray, shape (k, n)
        The policy's exact law at those steps.
    final_law : ndarray, shape (n,)
        The law after the last step.
    predicted : ndarray or None
        :func:`klpolicy.dynamics.landing_point`'s policy for this configuration.
    predicted_beta_eff : float or None
        Its ``beta_eff``.
    landing : str
        The landing point's one-line description.
    pistar : ndarray
        ``optimal_policy(ref_law, reward, beta)``.
    kl_to_predicted, kl_to_pistar, kl_ref_to_predicted : float or None
        ``KL(final_law || predicted)``, ``KL(final_law || pistar)``, ``KL(ref_law || predicted)``.
    beta_fit : float
        :func:`klpolicy.dynamics.beta_fit` of the final law.
    versions : dict
        trl, transformers, torch, klpolicy versions.
    wall_time : float
        Seconds the training took.
    """

    trainer: str
    config: dict
    steps: int
    seed: int
    completions: tuple
    ref_law: NDArray
    reward: NDArray
    law_steps: NDArray
    laws: NDArray
    final_law: NDArray
    predicted: NDArray | None
    predicted_beta_eff: float | None
    landing: str
    pistar: NDArray
    kl_to_predicted: float | None
    kl_to_pistar: float
    kl_ref_to_predicted: float | None
    beta_fit: float
    versions: dict
    wall_time: float

    def to_json(self) -> str:
        """The result as one JSON object (arrays as lists, non-finite floats as strings)."""

        def conv(x):
            if isinstance(x, np.ndarray):
                return [conv(v) for v in x.tolist()]
            if isinstance(x, (list, tuple)):
                return [conv(v) for v in x]
            if isinstance(x, dict):
                return {k: conv(v) for k, v in x.items()}
            if isinstance(x, (float, np.floating)):
                x = float(x)
                return x if np.isfinite(x) else str(x)
            if isinstance(x, np.integer):
                return int(x)
            return x

        return json.dumps({k: conv(v) for k, v in self.__dict__.items()})


def _check_trl():
    import trl
    from packaging.version import Version

    v = Version(trl.__version__)
    if not (Version("1.16.0") <= v < Version("1.17")):
        raise RuntimeError(
            f"klpolicy.testbed is tested with trl {','.join(TRL_RANGE)}; found trl {trl.__version__} "
            "(install `klpolicy[trl]`)"
        )
    return trl


_MAX_STEPS = 10**7  # optimiser steps of one run (a bound, so that 2**63 is refused at once)


def run(
    trainer: str,
    task: Task | None = None,
    *,
    steps: int,
    seed: int,
    device=None,
    law_every: int = 1,
    num_threads: int | None = 1,
    **trainer_options,
) -> TestbedResult:
    r"""Train ``task``'s model with a real trainer and compare its law with the prediction.

    .. math::

        \mathrm{KL}(\pi_T \,\|\, \pi_{\text{landing}}) \quad\text{vs}\quad
        \mathrm{KL}(\pi_T \,\|\, \pi^*_\beta),\qquad
        \pi^*_\beta = \pi_{\text{ref}}\, e^{r/\beta} / Z

    Parameters
    ----------
    trainer : str
        A name in :data:`ADAPTERS` (``"trl-grpo"``, ``"trl-rloo"``).
    task : Task, optional
        The task; :func:`bandit_task` by default.
    steps : int
        Optimiser steps (TRL's ``max_steps``).
    seed : int
        The trainer's seed (the initial weights come from ``task.model_seed``).
    device : str, optional
        ``None`` or ``"cpu"`` trains on the CPU (``use_cpu``); otherwise the accelerator's.
    law_every : int
        Enumerate the policy's law every ``law_every`` steps (and after the last).
    num_threads : int or None
        ``torch.set_num_threads`` for the run (``None`` leaves it).
    **trainer_options
        Fields of TRL's config (``beta``, ``num_generations``, ``scale_rewards``,
        ``loss_type``, ``learning_rate``, ...), over the adapter's defaults.

    Returns
    -------
    TestbedResult

    Raises
    ------
    ValueError
        For an unknown ``trainer``, ``steps`` or ``law_every`` below 1, or an unknown option.
    RuntimeError
        For a TRL outside ``>=1.16.0,<1.17``.

    Notes
    -----
    The trainer is TRL's, unmodified: a dataset of the task's prompt repeated, a reward
    function reading ``completion_ids``, ``max_completion_length = task.max_new_tokens``,
    ``report_to=[]``. The predicted point is :func:`klpolicy.dynamics.landing_point` for the
    config's own values of the rule's options, so both read one configuration.

    Examples
    --------
    >>> r = run("trl-grpo", steps=2, seed=0)  # doctest: +SKIP
    >>> r.predicted_beta_eff  # doctest: +SKIP
    1.0
    """
    trainer = V.as_choice("trainer", trainer, tuple(sorted(ADAPTERS)))
    if task is not None and not isinstance(task, Task):
        raise ValueError(
            f"`task` must be a klpolicy.testbed.Task (bandit_task() builds one) or None; "
            f"got {V.describe(task)}"
        )
    steps = V.as_count("steps", steps, hi=_MAX_STEPS)
    seed = V.as_count("seed", seed, lo=0, hi=2**32 - 1)  # torch's and numpy's seed range
    law_every = V.as_count("law_every", law_every, hi=_MAX_STEPS)
    if num_threads is not None:
        num_threads = V.as_count("num_threads", num_threads, hi=4096)
    if device is not None:
        import torch

        try:
            ok = isinstance(device, torch.device) or (
                isinstance(device, str) and torch.device(device) is not None
            )
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"`device` must be None, a device name such as 'cpu' or 'cuda:0', or a "
                f"torch.device; got {V.describe(device)}"
            )
    adapter = ADAPTERS[trainer]
    task = bandit_task() if task is None else task
    trl = _check_trl()
    import dataclasses as dc

    import torch
    import transformers
    from datasets import Dataset

    import klpolicy

    if num_threads is not None:
        torch.set_num_threads(int(num_threads))
    config_cls = getattr(trl, adapter.config)
    fields = {f.name for f in dc.fields(config_cls)}
    bad = sorted(set(trainer_options) - fields)
    if bad:
        raise ValueError(
            f"unknown option `{bad[0]}` for {trainer} ({adapter.config} has no such field)"
        )
    options = dict(adapter.defaults) | dict(trainer_options)
    G = int(options["num_generations"])
    options.setdefault("per_device_train_batch_size", 8 * G)
    tmp = tempfile.mkdtemp(prefix="klpolicy-testbed-")
    config = config_cls(
        output_dir=tmp,
        max_steps=int(steps),
        max_completion_length=task.max_new_tokens,
        report_to=[],
        use_cpu=device in (None, "cpu"),
        bf16=False,
        seed=int(seed),
        save_strategy="no",
        logging_steps=max(int(steps), 1),
        disable_tqdm=True,
        **options,
    )
    tok = task.tokenizer()
    model = task.model()
    prompt_ids = task.prompt_ids()
    eos = task.eos_token_id

    def law_of(m):
        was = m.training
        m.eval()
        law = sequence_law(m, prompt_ids, max_new_tokens=task.max_new_tokens, eos_token_id=eos)
        m.train(was)
        return law

    ref = law_of(model)  # the saved initial weights: TRL's reference model
    reward = np.array([task.reward(c) for c in ref.completions], dtype=np.float64)
    laws, law_steps = [], []

    class _LawCallback(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            if state.global_step % law_every == 0 or state.global_step == steps:
                laws.append(law_of(model).probs)
                law_steps.append(state.global_step)

    def reward_fn(prompts, completions, completion_ids, **kw):
        return [float(task.reward(tuple(int(t) for t in ids))) for ids in completion_ids]

    n_rows = max(int(config.per_device_train_batch_size), 1) * 4
    dataset = Dataset.from_dict({"prompt": [task.prompt] * n_rows})
    # TRL 1.16.0 builds its reference model from the policy's path
    # (trl/trainer/grpo_trainer.py:1003), so the initial model goes through a local folder.
    model_dir = f"{tmp}/initial-model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    tr = getattr(trl, adapter.trainer)(
        model=model_dir,
        reward_funcs=reward_fn,
        args=config,
        train_dataset=dataset,
        processing_class=tok,
        callbacks=[_LawCallback()],
    )
    tr.remove_callback(transformers.PrinterCallback)  # keeps stdout for `--json`
    tr.remove_callback(transformers.ProgressCallback)
    t0 = time.perf_counter()
    tr.train()
    wall = time.perf_counter() - t0
    final = law_of(tr.model).probs
    if not law_steps or law_steps[-1] != steps:
        laws.append(final)
        law_steps.append(steps)
    beta = float(config.beta)
    rule_opts = {k: getattr(config, k) for k in adapter.rule_options}
    land = landing_point(adapter.rule, ref.probs, reward, beta, **rule_opts)
    pistar = optimal_policy(ref.probs, reward, beta)
    pred = None if land.policy is None else np.asarray(land.policy, dtype=np.float64)
    kept = {
        k: getattr(config, k) for k in ("beta", "learning_rate", "per_device_train_batch_size")
    } | rule_opts
    return TestbedResult(
        trainer=trainer,
        config=kept,
        steps=int(steps),
        seed=int(seed),
        completions=ref.completions,
        ref_law=ref.probs,
        reward=reward,
        law_steps=np.array(law_steps),
        laws=np.array(laws),
        final_law=final,
        predicted=pred,
        predicted_beta_eff=land.beta_eff,
        landing=str(land),
        pistar=pistar,
        kl_to_predicted=None if pred is None else float(kl_divergence(final, pred)),
        kl_to_pistar=float(kl_divergence(final, pistar)),
        kl_ref_to_predicted=None if pred is None else float(kl_divergence(ref.probs, pred)),
        beta_fit=float(beta_fit(final, ref.probs, reward)),
        versions={
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "klpolicy": klpolicy.__version__,
        },
        wall_time=wall,
    )
