"""Run a real trainer (TRL 1.16) on a task and measure where it lands against the prediction."""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from klpolicy import kl_divergence, optimal_policy
from klpolicy.core.internal import validation as V
from klpolicy.dynamics import RULES, beta_fit, landing_point
from klpolicy.testbed.law import SequenceLaw, sequence_law
from klpolicy.testbed.own import OwnMethod
from klpolicy.testbed.tasks import Task, bandit_task

__all__ = ["ADAPTERS", "TRL_RANGE", "Adapter", "TestbedResult", "run"]

TRL_RANGE = (">=1.16.0", "<1.17")


@dataclass(frozen=True)
class Adapter:
    """One real trainer: how to build it and which of its options the dynamics rule reads.

    Attributes
    ----------
    rule : str
        The row of :data:`klpolicy.dynamics.RULES` whose landing point predicts it, or
        ``"dpo-finite-data"``: the exact optimum of the finite preference dataset
        (:func:`klpolicy.preference.population_optimum` on its counts). For klpolicy's
        own trainers the result's ``config`` holds the row's options for the run
        (see :mod:`klpolicy.testbed.own`).
    config, trainer : str
        TRL's config and trainer class names (``trl.<name>``); empty for klpolicy's own.
    rule_options : tuple of str
        The config fields the prediction reads (for the dynamics rows, passed to
        :func:`klpolicy.dynamics.landing_point` under the same names).
    defaults : dict
        Config values the testbed sets unless the caller does.
    testbed_options : dict
        Options the testbed reads itself (not TRL config fields), with their defaults:
        for ``"trl-dpo"``, ``pairs`` (the dataset's size per prompt) and ``bt_temperature``.
    prompt_coupling : dict
        Config values under which one prompt's update depends on the other prompts in the
        batch (``{"scale_rewards": ("batch",)}``: GRPO's std over the whole batch): on a
        task of several prompts there is then no per-prompt prediction.
    train : OwnMethod or None
        None: TRL's trainer, built from ``config`` and ``trainer``. Otherwise klpolicy's
        own trainer (:class:`klpolicy.testbed.own.OwnMethod`), which checks its options
        (``defaults`` are all of them) and trains the same model with
        :func:`klpolicy.torch.fit_policy`.
    """

    rule: str
    config: str = ""
    trainer: str = ""
    rule_options: tuple = ()
    defaults: dict = field(default_factory=dict)
    testbed_options: dict = field(default_factory=dict)
    prompt_coupling: dict = field(default_factory=dict)
    train: Callable | None = None


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
        prompt_coupling={"scale_rewards": ("batch",)},
    ),
    "trl-rloo": Adapter(
        rule="rloo",
        config="RLOOConfig",
        trainer="RLOOTrainer",
        rule_options=("num_generations", "normalize_advantages"),
        defaults={"beta": 0.5, "num_generations": 2, "learning_rate": 1e-2},
    ),
    "trl-dpo": Adapter(
        rule="dpo-finite-data",
        config="DPOConfig",
        trainer="DPOTrainer",
        rule_options=(
            "loss_type",
            "f_divergence_type",
            "ld_alpha",
            "use_weighting",
            "sync_ref_model",
        ),
        defaults={"beta": 0.5, "learning_rate": 1e-2},
        testbed_options={"pairs": 256, "bt_temperature": 1.0},
    ),
    # klpolicy's own trainers (klpolicy.torch) on the same model; see klpolicy.testbed.own
    "klpolicy-exact": Adapter(
        rule="reinforce",
        defaults={"beta": 0.5, "learning_rate": 1e-2},
        train=OwnMethod("exact"),
    ),
    "klpolicy-reinforce": Adapter(
        rule="reinforce",
        defaults={
            "beta": 0.5,
            "learning_rate": 1e-2,
            "batch_size": 16,
            "estimator": "k1",
            "placement": "reward",
        },
        train=OwnMethod("reinforce"),
    ),
    "klpolicy-ppo": Adapter(
        rule="ppo",
        defaults={
            "beta": 0.5,
            "learning_rate": 1e-2,
            "batch_size": 16,
            "estimator": "k1",
            "epochs": 4,
            "clip": 0.2,
        },
        train=OwnMethod("ppo"),
    ),
    "klpolicy-grpo": Adapter(
        rule="grpo",
        defaults={"beta": 0.5, "learning_rate": 1e-2, "num_generations": 2, "n_groups": 8},
        train=OwnMethod("grpo"),
    ),
}


@dataclass
class TestbedResult:
    r"""What a testbed run measured.

    Every law has a prompt axis, also for a task of one prompt: row ``x`` is the law after
    prompt ``x`` (``task.prompts[x]``), each prompt its own context. The distances are
    averaged over the prompts with uniform weights (the trainer's dataset holds each prompt
    equally often), and given per prompt beside.

    Attributes
    ----------
    trainer : str
        The adapter's name.
    task : str
        The task's name.
    config : dict
        The trainer config's values that matter (beta, the rule's options, lr, batch).
    steps, seed : int
        Optimiser steps and the trainer's seed.
    prompts : tuple of str
        The task's prompts, in the order of the laws' rows (P of them).
    completions : tuple of tuple of int
        The completions every law below is over (the same n for every prompt).
    ref_law, reward : ndarray, shape (P, n)
        The initial model's exact law after each prompt (TRL's reference) and each
        completion's reward there.
    law_steps : ndarray, shape (k,)
        The steps at which the policy's law was enumerated.
    laws : ndarray, shape (k, P, n)
        The policy's exact law at those steps.
    final_law : ndarray, shape (P, n)
        The law after the last step.
    predicted : ndarray of shape (P, n), or None
        The predicted landing point after each prompt (the dynamics'
        :func:`~klpolicy.dynamics.landing_point` for this configuration; DPO's finite-data
        optimum), or None where there is no prediction.
    predicted_beta_eff : float or None
        Its ``beta_eff``, when it is one number for every prompt.
    landing : str
        The landing point's description (one line per prompt where they differ).
    pistar : ndarray, shape (P, n)
        ``optimal_policy(ref_law, reward, beta)``, row by row.
    kl_to_predicted, kl_to_pistar, kl_ref_to_predicted : float or None
        ``KL(final_law || predicted)``, ``KL(final_law || pistar)``, ``KL(ref_law ||
        predicted)``, each the mean over the prompts of the rows' KLs:
        :math:`\frac1P \sum_x \mathrm{KL}(\pi(\cdot \mid x) \,\|\, q(\cdot \mid x))`.
    kl_to_predicted_by_prompt, kl_to_pistar_by_prompt, kl_ref_to_predicted_by_prompt : ndarray or None
        The same KLs per prompt, shape ``(P,)``.
    beta_fit : float
        :func:`klpolicy.dynamics.beta_fit` of the final law's rows: the one beta whose
        pi* is nearest the law, in the prompt-averaged KL.
    versions : dict
        trl, transformers, torch, klpolicy versions.
    wall_time : float
        Seconds the training took.
    completion_text : tuple of str
        Each completion as text (the task's words joined by spaces); empty if unknown.
    preference_counts : ndarray or None
        ``"trl-dpo"``: the dataset as counts ``C[x, winner, loser]``, shape ``(P, n, n)``,
        over :attr:`completions` (the trainer saw each pair ``C[x, i, j]`` times after
        prompt ``x``); None for the other trainers.
    ref_target : ndarray or None
        A :func:`~klpolicy.testbed.fitted_task`'s target law, shape ``(P, n')``, a row per
        prompt over the task's completions (:func:`~klpolicy.testbed.task_completions`);
        None for an unfitted task.
    kl_target_to_ref : float or None
        ``KL(ref_target || fitted)``, the initial model's exact law over the task's
        completions (for GRPO and RLOO that is :attr:`ref_law`; for DPO, whose outcomes are
        responses, the law the fit matched), the largest over the prompts; None for an
        unfitted task.
    """

    trainer: str
    task: str
    config: dict
    steps: int
    seed: int
    prompts: tuple
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
    kl_to_predicted_by_prompt: NDArray | None
    kl_to_pistar_by_prompt: NDArray
    kl_ref_to_predicted_by_prompt: NDArray | None
    beta_fit: float
    versions: dict
    wall_time: float
    completion_text: tuple = ()
    preference_counts: NDArray | None = None
    ref_target: NDArray | None = None
    kl_target_to_ref: float | None = None

    def kl_path(self) -> tuple[NDArray, NDArray, NDArray | None]:
        r"""The law's distance to pi* and to the predicted point, from the reference on.

        .. math::

            \big(t_k,\ \overline{\mathrm{KL}}(\pi_{t_k} \,\|\, \pi^*_\beta),\
            \overline{\mathrm{KL}}(\pi_{t_k} \,\|\, \pi_{\text{landing}})\big),
            \qquad t_0 = 0,\ \pi_{t_0} = \pi_{\text{ref}}

        where :math:`\overline{\mathrm{KL}}` is the mean over the prompts of the rows' KLs
        (as :attr:`kl_to_pistar`).

        Returns
        -------
        steps : ndarray of int, shape (k + 1,)
            0, then :attr:`law_steps`.
        to_pistar : ndarray, shape (k + 1,)
            ``KL(law || pistar)`` at each of them, averaged over the prompts (float64).
        to_predicted : ndarray or None
            ``KL(law || predicted)`` at each, or None where there is no predicted point.

        Examples
        --------
        >>> r = run("trl-rloo", steps=1, seed=0)  # doctest: +SKIP
        >>> r.kl_path()[0]  # doctest: +SKIP
        array([0, 1])
        """
        laws = np.concatenate(
            [np.asarray(self.ref_law, dtype=np.float64)[None], np.asarray(self.laws, np.float64)]
        )
        steps = np.concatenate([[0], np.asarray(self.law_steps, dtype=np.int64)])
        to_pistar = np.mean(kl_divergence(laws, self.pistar), axis=-1)
        to_pred = None
        if self.predicted is not None:
            to_pred = np.mean(kl_divergence(laws, self.predicted), axis=-1)
        return steps, to_pistar, to_pred

    def plot(self, axes=None):
        r"""Draw the run: its distances over the steps, and the final law beside the targets.

        Left: :meth:`kl_path`, ``KL(law || predicted)`` and ``KL(law || pi*)`` at each
        recorded step (step 0 is the reference), on a log scale. Right: the final law, the
        predicted landing point and :math:`\pi^*_\beta` as bars, one group per completion
        (per prompt and completion, ``"x: a"``, for a task of several prompts).

        Parameters
        ----------
        axes : pair of matplotlib Axes, optional
            Where to draw; by default a new figure of two panels in
            :func:`klpolicy.plotting.lecture_style`.

        Returns
        -------
        matplotlib.figure.Figure
            The figure of the two panels (KL over the steps; the final law beside both).

        Notes
        -----
        matplotlib is imported here, not with the module.

        Examples
        --------
        >>> r = run("trl-grpo", steps=2, seed=0)  # doctest: +SKIP
        >>> fig = r.plot()  # doctest: +SKIP
        >>> [ax.get_title() for ax in fig.axes]  # doctest: +SKIP
        ['Distance to the targets', 'The final law']
        """
        import matplotlib
        import matplotlib.pyplot as plt

        from klpolicy.plotting import lecture_style

        if axes is None:
            with matplotlib.rc_context(lecture_style()):
                fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), layout="constrained")
                self._draw(axes)
            return fig
        if len(axes) != 2:
            raise ValueError(f"`axes` must be a pair of Axes; found {len(axes)}")
        self._draw(axes)
        return axes[0].figure

    def _draw(self, axes):
        colours = {"law": "#000000", "pred": "#D55E00", "pistar": "#0072B2"}
        left, right = axes
        steps, to_pistar, to_pred = self.kl_path()
        beta = self.config.get("beta")
        star = r"$\pi^*_\beta$" + ("" if beta is None else f" ($\\beta$={beta:g})")
        pred_name = "predicted"
        if self.predicted_beta_eff is not None:
            pred_name += f" ($\\beta_{{eff}}$={self.predicted_beta_eff:g})"
        positive = np.all(to_pistar > 0) and (to_pred is None or np.all(to_pred > 0))
        few = len(steps) <= 40  # a marker per recorded step, unless they would pile up
        if to_pred is not None:
            left.plot(
                steps,
                to_pred,
                marker="o" if few else None,
                color=colours["pred"],
                label=f"to {pred_name}",
            )
        left.plot(
            steps,
            to_pistar,
            marker="s" if few else None,
            linestyle="--",
            color=colours["pistar"],
            label=f"to {star}",
        )
        if positive:
            left.set_yscale("log")
        left.set_xlabel("step")
        left.set_ylabel(r"KL($\pi_t$ || target) (nats)")
        left.set_title("Distance to the targets")
        left.legend(loc="best")
        series = [("final law", self.final_law, colours["law"])]
        if self.predicted is not None:
            series.append((pred_name, self.predicted, colours["pred"]))
        series.append((star, self.pistar, colours["pistar"]))
        names = self.completion_text or tuple(" ".join(map(str, c)) for c in self.completions)
        if len(self.prompts) > 1:  # one group per (prompt, completion), prompt by prompt
            names = tuple(f"{p}: {c}" for p in self.prompts for c in names)
        n = len(names)
        x = np.arange(n)
        width = 0.8 / len(series)
        for i, (name, p, c) in enumerate(series):
            right.bar(
                x + (i - (len(series) - 1) / 2) * width,
                np.asarray(p).reshape(-1),
                width,
                color=c,
                label=name,
            )
        right.set_xticks(x, names, rotation=90 if n > 12 else 0)
        right.set_xlabel("completion")
        right.set_ylabel("probability")
        right.set_title("The final law")
        right.legend(loc="best")

    def to_json(self) -> str:
        """The result as one JSON object (arrays as lists, non-finite floats as strings).

        Returns
        -------
        str
            One line of JSON with every field of the result.
        """

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


def _response_law(law, eos: int):
    """DPO's outcomes: the completions that end at EOS, and their law normalised over them.

    TRL 1.16.0's DPOTrainer appends the EOS token to every chosen and rejected text
    (trl/trainer/dpo_trainer.py:1062), so a response is a completion that stopped at EOS
    (or a longest completion with EOS appended): one more token than the task's depth.
    """
    keep = [i for i, c in enumerate(law.completions) if c[-1] == eos]
    lp = law.logprobs[keep]
    lp = lp - (lp.max() + np.log(np.sum(np.exp(lp - lp.max()))))
    return tuple(law.completions[i] for i in keep), np.exp(lp)


def _finite_data_problem(counts: NDArray) -> tuple[NDArray, NDArray]:
    r"""A dataset of counts ``C[winner, loser]`` as a preference matrix and a pair law.

    .. math::

        P_{ij} = \frac{C_{ij}}{C_{ij} + C_{ji}}\ (\tfrac12 \text{ where never compared}),
        \qquad \mu_{ij} = \frac{C_{ij} + C_{ji}}{2N}

    so that :math:`(\mu_{ij} + \mu_{ji}) P_{ij} = C_{ij}/N`: the population DPO loss of
    ``(P, mu)`` is the dataset's mean DPO loss, and its optimum the dataset's.
    """
    c = np.asarray(counts, dtype=np.float64)
    seen = c + c.T
    p = np.where(seen > 0, c / np.where(seen > 0, seen, 1.0), 0.5)
    np.fill_diagonal(p, 0.5)
    return p, seen / (2.0 * c.sum())


def _dpo_dataset(task, completions, counts):
    """The preference rows of ``counts`` (``C[x, winner, loser]``): prompt, chosen and
    rejected texts (EOS written out), prompt by prompt."""
    words = task.vocabulary

    def text(c):
        return " " + " ".join(words[t] for t in c)

    rows = {"prompt": [], "chosen": [], "rejected": []}
    for prompt, c in zip(task.prompts, counts, strict=True):
        for i, j in zip(*np.nonzero(c), strict=True):
            for _ in range(int(c[i, j])):
                rows["prompt"].append(prompt)
                rows["chosen"].append(text(completions[i]))
                rows["rejected"].append(text(completions[j]))
    return rows


@contextlib.contextmanager
def _quiet():
    """No progress bars from transformers or datasets, and no transformers v6 deprecation
    notes (TRL 1.16.0 calls ``gradient_checkpointing_*``), while the testbed trains."""
    import datasets
    import transformers.utils.logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled(), datasets.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message=".*deprecated and will be removed in v6", category=FutureWarning
            )
            yield
    finally:
        if bars[0]:
            hf_logging.enable_progress_bar()
        if bars[1]:
            datasets.enable_progress_bars()


#: The largest group the testbed builds: TRL holds ``8 * num_generations`` completions a step.
MAX_GENERATIONS = 4096
#: ``transformers.set_seed`` seeds numpy's legacy generator, which takes seeds below 2**32.
MAX_SEED = 2**32 - 1
#: The most preference pairs a DPO run draws per prompt (its dataset is held in memory).
MAX_PAIRS = 10**6


def _checked(adapter: Adapter, task, steps, seed, law_every, device, num_threads, options: dict):
    """The run's numbers checked before anything is built (a bad one would train, then fail).

    ``steps`` and ``law_every`` are counts up to 10**8, ``seed`` in ``[0, 2**32 - 1]``,
    ``beta`` finite and ``>= 0``, ``learning_rate`` finite and ``> 0``,
    ``num_generations`` in ``[2, MAX_GENERATIONS]``; the dynamics rule's own options
    (``scale_rewards``, ``loss_type``) by the rule's checks.
    """
    steps = V.as_count("steps", steps, lo=1)
    law_every = V.as_count("law_every", law_every, lo=1)
    if task is not None and not isinstance(task, Task):
        raise ValueError(
            "`task` must be a klpolicy.testbed.Task (bandit_task() builds one) or None; "
            f"got {V.describe(task)}"
        )
    if task is not None:
        task.prompt_ids()  # a prompt word outside the vocabulary, by name
    if num_threads is not None:
        V.as_count("num_threads", num_threads, hi=4096)
    seed = V.as_count("seed", seed, lo=0, hi=V.MAX_EXACT_COUNT)
    if seed > MAX_SEED:
        raise ValueError(
            f"`seed` must be at most 2**32 - 1 = {MAX_SEED} (transformers.set_seed seeds "
            f"numpy's legacy generator); got {seed}"
        )
    out = dict(options)
    if "beta" in out:
        out["beta"] = V.as_scalar("beta", out["beta"], "[0, inf)")
    if "learning_rate" in out:
        out["learning_rate"] = V.as_scalar("learning_rate", out["learning_rate"], "(0, inf)")
    if "num_generations" in out:
        out["num_generations"] = V.as_count(
            "num_generations", out["num_generations"], lo=2, hi=MAX_GENERATIONS
        )
    if "pairs" in out:  # DPO's dataset is held in memory, one row a pair
        out["pairs"] = V.as_count("pairs", out["pairs"], lo=1, hi=MAX_PAIRS)
    if "bt_temperature" in out:
        out["bt_temperature"] = V.as_scalar("bt_temperature", out["bt_temperature"], "(0, inf)")
    if device not in (None, "cpu", "cuda"):
        raise ValueError(f'`device` must be None, "cpu" or "cuda"; got {device!r}')
    if adapter.rule in RULES:  # a bad scale_rewards or loss_type, by the rule's own words
        RULES[adapter.rule].resolve({k: out[k] for k in adapter.rule_options if k in out})
    return steps, seed, law_every, out


def run(
    trainer: str,
    task: Task | None = None,
    *,
    steps: int,
    seed: int,
    device=None,
    law_every: int = 1,
    num_threads: int | None = 1,
    progress: bool = False,
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
        A name in :data:`ADAPTERS`: TRL's ``"trl-grpo"``, ``"trl-rloo"``, ``"trl-dpo"``, or
        klpolicy's own ``"klpolicy-exact"``, ``"klpolicy-reinforce"``, ``"klpolicy-ppo"``,
        ``"klpolicy-grpo"``
        (:mod:`klpolicy.testbed.own`: :mod:`klpolicy.torch`'s update rules on the same model).
    task : Task, optional
        The task (one prompt or several); :func:`bandit_task` by default. A
        :class:`~klpolicy.testbed.FittedTask` (:func:`~klpolicy.testbed.fitted_task`)
        starts from its fitted reference, and the result gives its target and
        ``KL(target || ref)`` (``ref_target``, ``kl_target_to_ref``).
    steps : int
        Optimiser steps (TRL's ``max_steps``).
    seed : int
        The trainer's seed (the initial weights come from ``task.model_seed``); for
        ``"trl-dpo"`` also the seed of the preference dataset.
    device : {None, "cpu", "cuda"}
        ``None`` or ``"cpu"`` trains on the CPU (TRL's ``use_cpu``); ``"cuda"`` on the GPU
        that accelerate picks (refused when torch sees none).
    law_every : int
        Enumerate the policy's law every ``law_every`` steps (and after the last).
    num_threads : int or None
        ``torch.set_num_threads`` for the run (``None`` leaves it); the caller's count is
        restored afterwards. The trainer seeds Python's, numpy's and torch's global
        generators with ``seed`` (``transformers.set_seed``), as TRL does.
    progress : bool
        Show TRL's progress bar (on stderr); off by default, so that a script's output is
        only what it prints.
    **trainer_options
        Fields of TRL's config (``beta``, ``num_generations``, ``scale_rewards``,
        ``loss_type``, ``learning_rate``, ...), over the adapter's defaults; and the
        adapter's :attr:`Adapter.testbed_options` (``"trl-dpo"``: ``pairs``, per prompt,
        default 256, and ``bt_temperature``, default 1). klpolicy's own trainers take
        ``beta`` (> 0) and ``learning_rate``; ``"klpolicy-reinforce"`` also ``batch_size``,
        ``estimator`` and ``placement``, ``"klpolicy-ppo"`` ``batch_size``, ``estimator``,
        ``epochs`` and ``clip``, ``"klpolicy-grpo"`` ``num_generations`` and ``n_groups``
        (:attr:`Adapter.defaults` lists them with their defaults; the samples are per
        prompt).

    Returns
    -------
    TestbedResult
        The laws over the steps (a row per prompt), the predicted point, pi*, their
        distances (per prompt and their mean) and the versions.

    Raises
    ------
    ValueError
        Before anything is built: an unknown ``trainer`` or option, ``steps`` or
        ``law_every`` below 1, a ``seed`` outside ``[0, 2**32 - 1]``, a negative or
        non-finite ``beta``, a ``learning_rate`` that is not finite and positive,
        ``num_generations`` outside ``[2, 4096]``, a ``scale_rewards`` or ``loss_type``
        the dynamics rule does not know, ``pairs`` below 1, a ``bt_temperature`` that is
        not positive and finite, a klpolicy trainer's ``beta`` of 0 or bad ``estimator``,
        ``placement``, ``batch_size``, ``n_groups``, ``epochs`` or ``clip``, a ``device``
        other than None, "cpu" or "cuda" (or "cuda" without a GPU), a prompt word outside
        the task's vocabulary, or a preference dataset whose comparisons do not connect
        every response. After training: a law that is not finite (the run diverged).
    RuntimeError
        For a TRL outside ``>=1.16.0,<1.17``.

    Notes
    -----
    The trainer is TRL's, unmodified. GRPO and RLOO: a dataset holding each of the task's
    prompts equally often (with a ``prompt_index`` column), a reward function reading
    ``prompt_index`` and ``completion_ids``, ``max_completion_length =
    task.max_new_tokens``, ``report_to=[]``; the predicted point is
    :func:`klpolicy.dynamics.landing_point` for the config's own values of the rule's
    options, so both read one configuration.

    Several prompts: each prompt is its own context. Its law is enumerated after it, and
    its landing point and :math:`\pi^*_\beta` are computed from its own reference row and
    rewards (the groups of GRPO and RLOO are drawn per prompt, so one prompt's expected
    update does not see the others'; the shared weights are assumed able to hold every
    prompt's landing point at once). The distances are the mean over the prompts, uniform
    weights, as the dataset draws them, and ``beta_fit`` is the one beta whose pi*
    minimises that mean. A config that couples the prompts (GRPO's
    ``scale_rewards="batch"``, one standard deviation over the batch's prompts) has no
    per-prompt prediction there.

    DPO: TRL 1.16.0 appends EOS to each chosen and rejected text
    (trl/trainer/dpo_trainer.py:1062), so its outcomes are the *responses*, the
    completions that end at EOS (for the bandit, each one-token answer followed by EOS, and
    EOS alone); the law recorded is the policy's law of them, normalised over them
    (:math:`\tilde\pi(y) \propto \pi(y)\,\pi(\mathrm{EOS} \mid y)`), which the DPO margins
    see exactly (the normaliser cancels in each pair's log-ratio difference). ``pairs``
    pairs per prompt are drawn from that prompt's reference response law (one generator
    seeded ``seed``, prompt after prompt) and labelled by Bradley-Terry on its rewards at
    temperature :math:`T` (``bt_temperature``): :math:`P(y_1 \succ y_2) = \sigma((r_1 -
    r_2)/T)`. The batch is the whole dataset (``per_device_train_batch_size = pairs`` times
    the number of prompts), so each step is a full-batch step on the dataset's mean loss,
    whose minimiser is each prompt's own. The predicted point is that loss's exact minimiser,
    :func:`klpolicy.preference.population_optimum` (``loss="sigmoid"``, TRL's ``beta``)
    on the counts' preference matrix and pair law (see ``_finite_data_problem``);
    ``pistar`` is the population optimum, :math:`\tilde\pi_{\text{ref}}\, e^{r/(T\beta)}/Z`.
    Only the plain sigmoid loss is predicted (``loss_type=["sigmoid"]``, reverse KL, no
    ``ld_alpha``, WPO weighting or reference sync); for any other configuration
    ``predicted`` is None.

    Examples
    --------
    >>> r = run("trl-grpo", steps=2, seed=0)  # doctest: +SKIP
    >>> r.predicted_beta_eff  # doctest: +SKIP
    1.0
    """
    trainer = V.as_choice("trainer", trainer, tuple(sorted(ADAPTERS)))
    adapter = ADAPTERS[trainer]
    steps, seed, law_every, trainer_options = _checked(
        adapter, task, steps, seed, law_every, device, num_threads, trainer_options
    )
    if adapter.train is not None:  # klpolicy's own trainer: its options, by its own checks
        trainer_options = adapter.train.check(trainer, trainer_options, adapter.defaults)
    import torch

    threads = torch.get_num_threads()
    try:
        with _quiet():
            return _run(
                trainer,
                task,
                steps,
                seed,
                device,
                law_every,
                num_threads,
                progress,
                trainer_options,
            )
    finally:  # the caller's torch keeps its own thread count
        torch.set_num_threads(threads)


def _run(trainer, task, steps, seed, device, law_every, num_threads, progress, trainer_options):
    """:func:`run`'s body (its arguments checked), run under :func:`_quiet`."""
    adapter = ADAPTERS[trainer]
    task = bandit_task() if task is None else task
    if adapter.train is not None:
        return _run_own(
            trainer,
            adapter,
            task,
            steps,
            seed,
            device,
            law_every,
            num_threads,
            progress,
            trainer_options,
        )
    is_dpo = adapter.trainer == "DPOTrainer"
    trainer_options, extra = _testbed_options(adapter, trainer_options, is_dpo)
    trl = _check_trl()
    config_cls = _trl_config_class(trl, trainer, adapter, trainer_options)
    _set_up_torch(device, num_threads)
    config, tmp = _trl_config(
        config_cls, adapter, task, steps, seed, device, progress, trainer_options, extra
    )
    tok = task.tokenizer()
    model = task.model()
    law_of = _law_reader(task, is_dpo)
    completions, ref_law = law_of(model)  # the saved initial weights: TRL's reference model
    reward = _rewards(task, completions, is_dpo)
    beta = float(config.beta)
    rule_opts = {k: getattr(config, k) for k in adapter.rule_options}
    callback, laws, law_steps = _law_callback(law_of, law_every, steps)
    model_dir = _save_initial_model(model, tok, tmp)
    if is_dpo:
        pred, dataset, trainer_kwargs = _dpo_dataset_and_prediction(
            task, config, completions, ref_law, reward, beta, rule_opts, extra, seed
        )
    else:
        pred, dataset, trainer_kwargs = _prompt_dataset_and_prediction(
            task, adapter, config, completions, ref_law, reward, beta, rule_opts
        )
    tr = _trainer(trl, adapter, model_dir, config, dataset, tok, callback, progress, trainer_kwargs)
    if is_dpo:
        _check_dpo_tokenization(tr, task, completions, pred.counts)
    final, wall = _train(tr, law_of, steps, config, laws, law_steps)
    fit = _fit_report(task, model)
    kept = {
        k: getattr(config, k) for k in ("beta", "learning_rate", "per_device_train_batch_size")
    } | rule_opts
    if is_dpo:
        kept |= extra
    return _compare(
        trainer,
        task,
        kept,
        steps,
        seed,
        (completions, ref_law, reward),
        (np.array(law_steps), np.array(laws), final, wall),
        pred,
        _versions(trl),
        fit,
    )


def _run_own(trainer, adapter, task, steps, seed, device, law_every, num_threads, progress, o):
    """:func:`_run` for klpolicy's own trainers (``adapter.train``) on the task's model.

    The reference is the initial model's law (as for TRL); ``o`` are the checked options.
    """
    _set_up_torch(device, num_threads)
    model = task.model()
    law_of = _law_reader(task, False)
    completions, ref_law = law_of(model)
    reward = _rewards(task, completions, False)
    fit = _fit_report(task, model)  # before training: the model is trained in place
    trained, pred, kept = adapter.train(
        model,
        task,
        law_of,
        (completions, ref_law, reward),
        steps=steps,
        seed=seed,
        device=device,
        law_every=law_every,
        progress=progress,
        o=o,
    )
    policy, beta_eff, texts, pistar = pred
    return _compare(
        trainer,
        task,
        kept,
        steps,
        seed,
        (completions, ref_law, reward),
        trained,
        _Prediction(policy, beta_eff, _landing_text(task.prompts, texts), pistar),
        _versions(None),
        fit,
    )


def _fit_report(task, model) -> tuple:
    """A fitted task's target and the largest over its prompts of ``KL(target || initial
    model's law)``, else ``(None, None)``."""
    from klpolicy.testbed.fit import FittedTask

    if not isinstance(task, FittedTask):
        return None, None
    completions, law = _law_reader(task, False)(model)
    if completions != task.completions:
        raise RuntimeError("the fitted task's completions are not its model's")
    return task.target, float(np.max(kl_divergence(task.target, law)))


def _testbed_options(adapter: Adapter, trainer_options: dict, is_dpo: bool):
    """The caller's options split: (TRL config fields, the testbed's own options).

    The testbed's own are :attr:`Adapter.testbed_options`, their defaults filled in
    (``"trl-dpo"``: ``pairs`` as an int, ``bt_temperature`` as a float).
    """
    trainer_options = dict(trainer_options)
    extra = {k: trainer_options.pop(k, v) for k, v in adapter.testbed_options.items()}
    if is_dpo:  # checked in _checked when given; the defaults as numbers
        extra["pairs"], extra["bt_temperature"] = (
            int(extra["pairs"]),
            float(extra["bt_temperature"]),
        )
    return trainer_options, extra


def _trl_config_class(trl, trainer, adapter, trainer_options):
    """The adapter's TRL config class; a ValueError for an option that is not one of its fields."""
    import dataclasses as dc

    config_cls = getattr(trl, adapter.config)
    fields = {f.name for f in dc.fields(config_cls)}
    bad = sorted(set(trainer_options) - fields)
    if bad:
        raise ValueError(
            f"unknown option `{bad[0]}` for {trainer} ({adapter.config} has no such field)"
        )
    return config_cls


def _set_up_torch(device, num_threads) -> None:
    """Refuse ``"cuda"`` where torch sees no GPU; set torch's threads (unless None)."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f'`device` is "cuda" but torch {torch.__version__} sees no CUDA device; use "cpu"'
        )
    if num_threads is not None:
        torch.set_num_threads(int(num_threads))


def _trl_config(config_cls, adapter, task, steps, seed, device, progress, trainer_options, extra):
    """The run's TRL config and its output folder (a new temporary one).

    The adapter's defaults under the caller's options; a batch of the whole dataset for
    DPO (``pairs`` per prompt), of eight groups for GRPO and RLOO (their completions
    ``task.max_new_tokens`` long at most); no saving, no reports, one log line at the end.
    """
    options = dict(adapter.defaults) | dict(trainer_options)
    if adapter.trainer == "DPOTrainer":
        options.setdefault("per_device_train_batch_size", extra["pairs"] * len(task.prompts))
    else:
        options.setdefault("per_device_train_batch_size", 8 * int(options["num_generations"]))
        options["max_completion_length"] = task.max_new_tokens
    tmp = tempfile.mkdtemp(prefix="klpolicy-testbed-")
    config = config_cls(
        output_dir=tmp,
        max_steps=steps,
        report_to=[],
        use_cpu=device in (None, "cpu"),
        bf16=False,
        seed=int(seed),
        save_strategy="no",
        logging_steps=steps,
        disable_tqdm=not progress,
        **options,
    )
    return config, tmp


def _law_reader(task, is_dpo: bool):
    """``law_of(model) -> (completions, laws)``: the model's exact law after each prompt.

    ``laws`` has a row per prompt, over the same completions (the tree's shape does not
    depend on the prompt). Enumerated in eval mode (the model's mode restored after).
    DPO's outcomes are the responses, one token deeper (see :func:`_response_law`).
    """
    prompt_ids = task.prompt_ids()
    eos = task.eos_token_id
    depth = task.max_new_tokens + (1 if is_dpo else 0)

    def one(m, ids):
        law = sequence_law(m, ids, max_new_tokens=depth, eos_token_id=eos)
        return _response_law(law, eos) if is_dpo else (law.completions, law.probs)

    def law_of(m):
        was = m.training
        m.eval()
        try:
            rows = [one(m, ids) for ids in prompt_ids]
        finally:
            m.train(was)
        return rows[0][0], np.stack([p for _, p in rows])

    return law_of


def _rewards(task, completions, is_dpo: bool) -> NDArray:
    """Each completion's reward after each prompt, shape ``(P, n)`` (float64); a DPO
    response has its appended EOS dropped."""
    if is_dpo:  # a response longer than the task's depth is a completion with EOS appended
        completions = [c[:-1] if len(c) > task.max_new_tokens else c for c in completions]
    return np.array(
        [[task.reward(x, tuple(c)) for c in completions] for x in range(len(task.prompts))],
        dtype=np.float64,
    )


def _law_callback(law_of, law_every: int, steps: int):
    """A trainer callback that records the policy's law every ``law_every`` steps and at the
    last, with the two lists it appends to: ``(callback, laws, law_steps)``."""
    import transformers

    laws, law_steps = [], []

    class _LawCallback(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            if state.global_step % law_every == 0 or state.global_step == steps:
                laws.append(law_of(model)[1])
                law_steps.append(state.global_step)

    return _LawCallback(), laws, law_steps


def _save_initial_model(model, tok, tmp: str) -> str:
    """The initial model and tokenizer saved under ``tmp``; the folder's path.

    TRL 1.16.0 builds its reference model from the policy's path
    (trl/trainer/grpo_trainer.py:1003, dpo_trainer.py:926), so the initial model goes
    through a local folder.
    """
    model_dir = f"{tmp}/initial-model"
    model.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    return model_dir


@dataclass(frozen=True)
class _Prediction:
    """What the trained law is compared with, a row per prompt: the predicted point (None
    where there is no prediction), its ``beta_eff``, the landing's description, pi*, and
    DPO's counts ``(P, n, n)``."""

    policy: NDArray | None
    beta_eff: float | None
    landing: str
    pistar: NDArray
    counts: NDArray | None = None


def _dpo_dataset_and_prediction(
    task, config, completions, ref_law, reward, beta, rule_opts, extra, seed
):
    """DPO's preference dataset, drawn from the reference, and the exact optimum of its loss.

    Returns ``(prediction, dataset, trainer_kwargs)``: ``pairs`` pairs per prompt drawn
    from that prompt's row of ``ref_law`` (one generator seeded ``seed``, prompt after
    prompt), labelled by Bradley-Terry at ``bt_temperature``; the predicted point is, per
    prompt, the exact optimum of that prompt's pairs for plain sigmoid DPO (else None), pi*
    the population optimum.
    """
    from datasets import Dataset

    from klpolicy.preference import bradley_terry, population_optimum, sample_preference_counts

    temp, pairs = extra["bt_temperature"], extra["pairs"]
    rng = np.random.default_rng(int(seed))
    prefs = [bradley_terry(r / temp) for r in reward]
    counts = np.stack(
        [sample_preference_counts(P, q, pairs, rng=rng) for P, q in zip(prefs, ref_law)]
    )
    pistar = np.stack(
        [population_optimum(q, P, beta, loss="sigmoid") for q, P in zip(ref_law, prefs)]
    )
    plain = (
        list(config.loss_type) == ["sigmoid"]
        and config.f_divergence_type == "reverse_kl"
        and config.ld_alpha is None
        and not config.use_weighting
        and not config.sync_ref_model
    )
    pred = None
    each = ("each prompt's " if len(task.prompts) > 1 else "the ") + f"{pairs} pairs'"
    if plain:
        pred = np.stack([_dpo_optimum(q, c, beta, pairs, seed) for q, c in zip(ref_law, counts)])
        landing = (
            f"the exact optimum of {each} mean DPO loss (sigmoid, beta={beta:g}, "
            f"Bradley-Terry temperature {temp:g}); pi* at beta {temp * beta:g} is its "
            "population limit"
        )
    else:
        landing = f"no finite-data prediction for {rule_opts} (only plain sigmoid DPO is predicted)"
    dataset = Dataset.from_dict(_dpo_dataset(task, completions, counts))
    return _Prediction(pred, None, landing, pistar, counts), dataset, {}


def _dpo_optimum(ref, counts, beta, pairs, seed):
    """The exact minimiser of one prompt's dataset's mean sigmoid DPO loss."""
    from klpolicy.preference import population_optimum

    p_hat, mu_hat = _finite_data_problem(counts)
    try:
        return population_optimum(ref, p_hat, beta, loss="sigmoid", mu=mu_hat)
    except ValueError as exc:
        raise ValueError(
            f"the {pairs} preference pairs (seed {seed}) do not determine the "
            f"dataset's DPO optimum ({exc}); use more `pairs`"
        ) from None


def _prompt_dataset_and_prediction(
    task, adapter, config, completions, ref_law, reward, beta, rule_opts
):
    """GRPO's and RLOO's dataset (every prompt, equally often) and reward function, and the
    rule's landing point at the config's options, prompt by prompt: ``(prediction,
    dataset, trainer_kwargs)``.

    On a task of one token the rule's tabular landing point; GRPO on a task of several
    tokens lands on its token tree (:func:`_tree_prediction`); RLOO's sequence-level k1 in
    the reward makes the tabular one over whole completions exact there too. Each prompt is
    its own context (its own groups, its own landing point), unless the config couples
    them (:attr:`Adapter.prompt_coupling`), when there is no prediction on several prompts.
    """
    from datasets import Dataset

    pistar = optimal_policy(ref_law, reward, beta)
    coupled = [
        f"{k}={rule_opts[k]!r}" for k, vals in adapter.prompt_coupling.items()
        if rule_opts.get(k) in vals
    ]  # fmt: skip
    if len(task.prompts) > 1 and coupled:
        pred, beta_eff = None, None
        landing = (
            f"no per-prompt prediction: {coupled[0]} couples the prompts (one statistic "
            "over the whole batch)"
        )
    else:
        lands = [
            _one_landing(task, adapter, completions, q, r, beta, rule_opts)
            for q, r in zip(ref_law, reward, strict=True)
        ]
        pred = None if any(p is None for p, _, _ in lands) else np.stack([p for p, _, _ in lands])
        betas = {b for _, _, b in lands}
        beta_eff = betas.pop() if len(betas) == 1 else None
        landing = _landing_text(task.prompts, [t for _, t, _ in lands])

    def reward_fn(prompts, completions, completion_ids, prompt_index, **kw):
        return [
            float(task.reward(int(x), tuple(int(t) for t in ids)))
            for x, ids in zip(prompt_index, completion_ids, strict=True)
        ]

    P = len(task.prompts)
    n_rows = -(-max(int(config.per_device_train_batch_size), 1) * 4 // P) * P
    dataset = Dataset.from_dict(
        {
            "prompt": [task.prompts[k % P] for k in range(n_rows)],
            "prompt_index": [k % P for k in range(n_rows)],
        }
    )
    prediction = _Prediction(pred, beta_eff, landing, pistar)
    return prediction, dataset, {"reward_funcs": reward_fn}


def _landing_text(prompts, texts) -> str:
    """One line for the prompts' landing descriptions: the one text where they agree but for
    the KL each names (those KLs listed), else each prompt's own."""
    import re

    if len(set(texts)) == 1:
        return texts[0]
    kl = re.compile(r", KL ([-+0-9.e]+|inf) nats")
    masked = {kl.sub("", t) for t in texts}
    kls = [kl.search(t) for t in texts]
    if len(masked) == 1 and all(kls):
        each = ", ".join(f"{p!r} {m.group(1)}" for p, m in zip(prompts, kls, strict=True))
        return f"after each prompt, {masked.pop()} (KL to the reference: {each} nats)"
    return "; ".join(f"after {p!r}: {t}" for p, t in zip(prompts, texts, strict=True))


def _one_landing(task, adapter, completions, ref, reward, beta, rule_opts):
    """One prompt's landing point: ``(policy or None, description, beta_eff)``."""
    if adapter.rule == "grpo" and task.max_new_tokens > 1:
        return _tree_prediction(task, completions, ref, reward, beta, rule_opts)
    land = landing_point(adapter.rule, ref, reward, beta, **rule_opts)
    pred = None if land.policy is None else np.asarray(land.policy, dtype=np.float64)
    return pred, str(land), land.beta_eff


def _tree_prediction(task, completions, ref_law, reward, beta, rule_opts):
    """GRPO's landing point on a task of several tokens after one prompt, over the task's
    completions (``ref_law`` and ``reward`` that prompt's rows).

    On a token tree TRL's per-token k3 and its ``loss_type`` aggregation do not land at the
    tabular optimum over completions: :func:`klpolicy.dynamics.tree_landing_point` on the
    reference's conditionals (padded after EOS) and the reward read on the padded tree,
    ``max_completion_length`` the task's depth (as the testbed configures TRL).
    """
    from klpolicy.dynamics import tree_landing_point
    from klpolicy.sequences import joint

    T, V, eos = task.max_new_tokens, len(task.vocabulary), task.eos_token_id
    ref_seq = SequenceLaw(
        completions=tuple(completions),
        probs=np.asarray(ref_law, dtype=np.float64),
        logprobs=np.log(np.asarray(ref_law, dtype=np.float64)),
        vocab_size=V,
        eos_token_id=eos,
    )
    padded = [tuple(c) + (eos,) * (T - len(c)) for c in completions]
    r_tree = np.zeros((V,) * T)
    for idx, r in zip(padded, reward, strict=True):
        r_tree[idx] = r
    land = tree_landing_point(
        "grpo",
        ref_seq.conditionals(),
        r_tree,
        beta,
        eos_token=eos,
        max_completion_length=T,
        **rule_opts,
    )
    if land.policy is None:
        return None, str(land), None
    J = joint(land.policy)
    pred = np.array([J[idx] for idx in padded], dtype=np.float64)
    return pred / pred.sum(), str(land), None  # not pi* at any beta


def _trainer(trl, adapter, model_dir, config, dataset, tok, callback, progress, trainer_kwargs):
    """TRL's trainer on the initial model's folder, with the law callback; TRL's printer
    removed (stdout stays the caller's, for ``--json``), and its progress bar unless asked."""
    import transformers

    tr = getattr(trl, adapter.trainer)(
        model=model_dir,
        args=config,
        train_dataset=dataset,
        processing_class=tok,
        callbacks=[callback],
        **trainer_kwargs,
    )
    tr.remove_callback(transformers.PrinterCallback)  # keeps stdout for `--json`
    if not progress:
        tr.remove_callback(transformers.ProgressCallback)
    return tr


def _check_dpo_tokenization(tr, task, completions, counts) -> None:
    """The DPO trainer's texts tokenize back to the prompts and responses they were
    written from."""
    prompt_ids = task.prompt_ids()
    want = sorted(
        (tuple(prompt_ids[x]), tuple(completions[i]), tuple(completions[j]))
        for x, i, j in zip(*np.nonzero(counts), strict=True)
    )
    data = tr.train_dataset
    got = sorted(
        {
            (tuple(p), tuple(a), tuple(b))
            for p, a, b in zip(
                data["prompt_ids"], data["chosen_ids"], data["rejected_ids"], strict=True
            )
        }
    )
    if got != want:
        raise RuntimeError(f"TRL tokenized the pairs as {got[:3]}..., not {want[:3]}...")


def _train(tr, law_of, steps, config, laws, law_steps):
    """Train, and the final law (a ValueError if it is not finite) and the seconds it took;
    the final law is appended to ``laws`` unless the callback recorded the last step."""
    t0 = time.perf_counter()
    tr.train()
    wall = time.perf_counter() - t0
    final = law_of(tr.model)[1]
    if not np.isfinite(final).all():
        raise ValueError(
            f"the run diverged: the policy's law is not finite after {steps} steps; "
            f"lower `learning_rate` (got {config.learning_rate!r})"
        )
    if not law_steps or law_steps[-1] != steps:
        laws.append(final)
        law_steps.append(steps)
    return final, wall


def _versions(trl) -> dict:
    """The versions of trl (None: klpolicy's own trainer), transformers, torch and klpolicy."""
    import torch
    import transformers

    import klpolicy

    return {
        "trl": None if trl is None else trl.__version__,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "klpolicy": klpolicy.__version__,
    }


def _compare(
    trainer, task, kept, steps, seed, ref, trained, pred, versions, fit=(None, None)
) -> TestbedResult:
    """The trained law against the prediction and pi*: their KLs, and ``beta_fit``.

    ``ref`` is ``(completions, ref_law, reward)``, ``trained`` ``(law_steps, laws,
    final_law, wall_time)``, ``pred`` a :class:`_Prediction`, ``fit`` ``(ref_target,
    kl_target_to_ref)``; every law has a row per prompt, and each KL is given per prompt
    and as their mean (uniform prompt weights).
    """
    completions, ref_law, reward = ref
    law_steps, laws, final, wall = trained
    p = pred.policy
    to_pred = None if p is None else np.asarray(kl_divergence(final, p), dtype=np.float64)
    to_star = np.asarray(kl_divergence(final, pred.pistar), dtype=np.float64)
    ref_pred = None if p is None else np.asarray(kl_divergence(ref_law, p), dtype=np.float64)
    return TestbedResult(
        trainer=trainer,
        task=task.name,
        config=kept,
        steps=steps,
        seed=int(seed),
        prompts=task.prompts,
        completions=completions,
        ref_law=ref_law,
        reward=reward,
        law_steps=law_steps,
        laws=laws,
        final_law=final,
        predicted=p,
        predicted_beta_eff=pred.beta_eff,
        landing=pred.landing,
        pistar=pred.pistar,
        kl_to_predicted=None if p is None else float(np.mean(to_pred)),
        kl_to_pistar=float(np.mean(to_star)),
        kl_ref_to_predicted=None if p is None else float(np.mean(ref_pred)),
        kl_to_predicted_by_prompt=to_pred,
        kl_to_pistar_by_prompt=to_star,
        kl_ref_to_predicted_by_prompt=ref_pred,
        beta_fit=float(beta_fit(final, ref_law, reward)),
        versions=versions,
        wall_time=wall,
        completion_text=tuple(" ".join(task.vocabulary[t] for t in c) for c in completions),
        preference_counts=pred.counts,
        ref_target=fit[0],
        kl_target_to_ref=fit[1],
    )
