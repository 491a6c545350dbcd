r"""Population losses and exact population optima for every row of :data:`LOSSES`.

A tabular problem: outcomes ``0..n-1``, a reference ``ref``, a pair law ``mu``
and preferences ``P``; the pair (winner ``i``, loser ``j``) is observed with
probability ``W[i, j] = (mu[i, j] + mu[j, i]) P[i, j]`` (pairs of identical
responses included), exactly as :func:`population_dpo_loss` weighs them. With the
log-ratios :math:`g = \log(\pi/\pi_{ref})`, a per-pair loss
:math:`\ell(a, b)` has the population loss
:math:`\mathcal{L}(\pi) = \sum_{ij} W_{ij}\,\ell(g_i, g_j)`.
Public names are re-exported by :mod:`klpolicy.preference`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import validation as V
from ._inputs import as_pair_law, as_preference_matrix
from .fdpo import DEFAULT_TRL_VERSION, uses_f_divergence
from .populations import PairProblem
from .registry import LOSSES, get_loss
from .tabular import _ref_1d

__all__ = [
    "LossComparison",
    "OptimumSet",
    "compare_losses",
    "optimum_set",
    "population_loss",
    "population_optimum",
]


# ---------------------------------------------------------------------------
# population losses
# ---------------------------------------------------------------------------


def population_loss(
    policy: ArrayLike,
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    loss: str | Sequence[str] = "sigmoid",
    mu: ArrayLike | None = None,
    divergence: str = "reverse_kl",
    alpha: float | None = None,
    alpha_clamp: float | None = None,
    loss_weights: Sequence[float] | None = None,
    trl_version: str = DEFAULT_TRL_VERSION,
    **options: float,
) -> float:
    r"""Expected loss of a tabular policy for any pair loss of :data:`LOSSES`.

    .. math::

        \mathcal{L}(\pi) = \sum_{i,j} W_{ij}\,\ell\big(g_i, g_j\big),\qquad
        W_{ij} = (\mu_{ij} + \mu_{ji})P_{ij},\qquad g = \log\frac{\pi}{\pi_{ref}}

    and for the batch-sorting losses (``aot``, ``aot_pair``) the large-batch limit of
    TRL's batch mean: the quantile coupling of the two laws it sorts,

    .. math::

        \mathcal{L}_{aot\_pair}(\pi) = \int_0^1 \psi\big(\beta\,(Q_a(u) - Q_b(u))\big)\,du,

    with :math:`Q_a`, :math:`Q_b` the quantile functions of the chosen and rejected
    log-ratios under ``W`` and :math:`\psi` the (label-smoothed) sigmoid loss; ``aot``
    sorts the policy's log-odds :math:`\log\pi_i - \log\pi_j` and the reference's
    instead.

    Parameters
    ----------
    policy : array_like
        The policy, shape ``(n,)``; positive on every outcome the pairs involve.
    ref : array_like
        Reference distribution, shape ``(n,)``.
    preferences : array_like
        ``P[i, j]`` = probability that ``i`` is preferred to ``j``, ``(n, n)``.
    beta : float
        Positive, finite coefficient (TRL's ``beta``; IPO's :math:`\tau`).
    loss : str, optional
        A key of :data:`LOSSES` (default ``"sigmoid"``).
    mu : array_like, optional
        Pair law: ``None`` (``ref x ref``), a vector or an ``(n, n)`` joint law.
    divergence : str, optional
        The f-divergence whose score replaces each log-ratio (f-DPO; TRL's
        ``f_divergence_type``: ``"reverse_kl"`` (default, DPO), ``"forward_kl"``,
        ``"js_divergence"``, ``"alpha_divergence"``, or any key of
        :data:`klpolicy.DIVERGENCES` but ``"tv"``); see
        :func:`~klpolicy.preference.f_divergence_score`. Which losses take the scores
        is TRL's choice in ``trl_version`` (the row's ``f_divergence``): from 1.10.0
        only the margin losses, ``sigmoid_norm`` and ``sft`` (a ValueError otherwise,
        as TRL); in 0.29.0-1.9.2 also ``nca_pair``, ``bco_pair`` and ``sppo_hard``,
        while the sorting losses and ``apo_zero`` use the log-ratios whatever the
        divergence.
    alpha, alpha_clamp : float, optional
        TRL's ``f_alpha_divergence_coef`` and its exponent clamp (80 in
        float32/bfloat16, 11 in float16; ``None``: none), for the alpha divergence.
    trl_version : str, optional
        The TRL release whose f-DPO scores and loss choices to follow (default
        ``"1.16.0"``; see :func:`~klpolicy.preference.f_divergence_score`): the scores'
        constants matter where they are divided by lengths (``sigmoid_norm``).
    loss_weights : sequence of float, optional
        With a list of losses (TRL's ``loss_type`` list): the weight of each
        (non-negative; default 1 each, as TRL); the population loss is
        :math:`\sum_k w_k \mathcal{L}_k`, each row taking the options it knows.
    **options
        The loss's options (see ``LOSSES[loss].options``), validated by name.
        ``sigmoid_norm`` takes ``lengths``: one positive, finite response length
        (tokens) per outcome, shape of ``ref``; its loss is
        :math:`\sum W_{ij}\,\mathrm{sp}(-\beta(g_i/L_i - g_j/L_j))`.

    Returns
    -------
    float
        The expected per-pair loss.

    Raises
    ------
    ValueError
        For an unknown ``loss`` or option, an option out of range, or invalid
        ``policy``, ``ref``, ``preferences``, ``mu`` or ``beta``.

    Notes
    -----
    ``loss="sigmoid"`` runs the same computation as :func:`population_dpo_loss`
    (label smoothing folded into the weights) and returns the same float. Only
    log-ratios of outcomes the pairs involve enter. For a batch of ``N`` pairs
    replicated in the proportions ``W`` (``N W`` integers), TRL's batch mean of a
    sorting loss equals the quantile integral above exactly.

    References
    ----------
    .. [1] Rafailov et al., 2023, arXiv:2305.18290; the rows of :data:`LOSSES`.
    .. [2] Melnyk et al., 2024, arXiv:2406.05882 (AOT: sorting as 1-D optimal transport).

    Examples
    --------
    >>> from klpolicy.preference import population_loss
    >>> P = [[0.5, 0.9], [0.1, 0.5]]
    >>> round(population_loss([0.5, 0.5], [0.5, 0.5], P, 1.0), 6)  # log 2
    0.693147
    >>> round(population_loss([0.5, 0.5], [0.5, 0.5], P, 1.0, loss="hinge"), 6)
    1.0
    """
    if not isinstance(loss, str) and isinstance(loss, Sequence) and len(loss) > 0:
        common = dict(
            mu=mu,
            divergence=divergence,
            alpha=alpha,
            alpha_clamp=alpha_clamp,
            trl_version=trl_version,
        )
        problem = (policy, ref, preferences, beta)
        return _weighted_population_loss(problem, loss, loss_weights, common, options)
    if loss_weights is not None:
        raise ValueError(
            f"`loss_weights` go with a list of losses (TRL's loss_type list); got "
            f"loss={loss!r} and loss_weights={loss_weights!r}"
        )
    row = get_loss(loss)
    o = row.resolve_options(options)
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    f_dpo = uses_f_divergence(divergence, alpha, alpha_clamp)
    problem = PairProblem(
        row,
        ref_a,
        preferences,
        b,
        mu,
        o,
        divergence,
        alpha,
        alpha_clamp,
        trl_version,
        f_dpo,
        policy,
    )
    return row.population_loss(problem)


def _weighted_population_loss(problem, loss, loss_weights, common, options) -> float:
    """TRL's ``loss_type`` list with ``loss_weights``: the weighted sum of the losses'
    population values, each with its own options (an option no loss has is a ValueError)."""
    names = [get_loss(n).name for n in loss]
    weights = _loss_weights(loss_weights, len(names))
    known = {o.name for n in names for o in LOSSES[n].options}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"no loss in `loss` {names} has the option `{unknown[0]}`; their options: "
            + (", ".join(f"`{k}`" for k in sorted(known)) or "none")
        )
    total = 0.0
    for n, wk in zip(names, weights):
        own = {k: v for k, v in options.items() if k in {o.name for o in LOSSES[n].options}}
        total += wk * population_loss(*problem, loss=n, **common, **own)
    return total


# ---------------------------------------------------------------------------
# population optima
# ---------------------------------------------------------------------------


def _loss_weights(weights, n: int) -> list[float]:
    """TRL's loss_weights for n losses: default 1 each; finite, non-negative, one per loss."""
    if weights is None:
        return [1.0] * n
    arr = V.as_finite_array("loss_weights", weights).astype(np.float64).reshape(-1)
    if arr.size != n:
        raise ValueError(f"`loss_weights` must have one weight per loss ({n}); got {arr.size}")
    if (arr < 0).any():
        raise ValueError(f"`loss_weights` must be non-negative; got {arr.tolist()}")
    return arr.tolist()


def population_optimum(
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    loss: str = "sigmoid",
    mu: ArrayLike | None = None,
    divergence: str = "reverse_kl",
    alpha: float | None = None,
    alpha_clamp: float | None = None,
    trl_version: str = DEFAULT_TRL_VERSION,
    **options: float,
) -> NDArray[np.float64]:
    r"""The exact minimiser of :func:`population_loss` over tabular policies.

    .. math::

        \pi_{loss} = \arg\min_{\pi \ll \pi_{ref}} \sum_{i,j} W_{ij}\,\ell(g_i, g_j),
        \qquad g = \log\frac{\pi}{\pi_{ref}}

    Parameters
    ----------
    ref, preferences, beta, loss, mu, divergence, alpha, alpha_clamp, trl_version, **options
        As in :func:`population_loss` (``sigmoid_norm`` takes ``lengths``, one positive
        length per outcome, shape of ``ref``).

    Returns
    -------
    ndarray
        The policy, shape ``(n,)``; 0 where ``ref`` is 0. With ``divergence`` (f-DPO)
        and a margin loss: ``f_optimal_policy(ref, x*, c * beta, divergence=f)``, with
        ``x* = beta log(pi_DPO/ref)`` the implied reward of the same loss under the
        reverse KL and ``c = 2`` for JS, 1 otherwise (see Notes); with ``sigmoid_norm``
        and lengths :math:`L`, :math:`t_i = (f')^{-1}((L_i(x^*_i + \lambda)/\beta - k)/c)`
        with the score's constant :math:`k` of ``trl_version``.

    Raises
    ------
    ValueError
        For invalid inputs; for ``aot`` / ``aot_pair`` (the sorted coupling has no
        per-pair population minimiser computed here; see Notes); for ``apo_zero`` /
        ``apo_down`` (non-convex in the policy); for a margin loss whose pairs do not
        connect ``ref``'s support (the ratios between the parts are then free: see
        :func:`optimum_set`); for ``robust`` with a drawn pair whose de-noised
        probability :math:`(P_{ij} - \varepsilon)/(1 - 2\varepsilon)` leaves [0, 1]
        (there the loss is unbounded below); for ``discopop`` with ``tau`` below
        ``2**-510`` (its curvature, of order ``1/tau**2``, is beyond float64);
        for a per-outcome loss in the non-convex case (all outcomes compared, the free
        minimisers' mass below 1) with an outcome that is never chosen, and at a
        ``beta`` below ``1 / finfo.max`` (5.6e-309), whose reciprocal overflows. The
        margin losses and ``ipo`` depend on ``beta`` only as a scale: there they return
        the greedy limit of :math:`\pi_{ref}e^{x^*/\beta}`, as
        :func:`klpolicy.optimal_policy` does at ``beta = 0``.

    Notes
    -----
    *Margin-only losses* (``sigmoid``, ``robust``, ``hinge``, ``exo_pair``,
    ``discopop``) depend on :math:`\pi` only through :math:`x = \beta g` up to a
    constant, so the minimiser :math:`x^*` of :math:`\sum_{ij} W_{ij}\phi(x_i - x_j)`
    does not depend on :math:`\beta` and

    .. math::

        \pi_{loss} = \pi_{ref}\,e^{x^*/\beta}/Z,

    the KL-regularised optimum for the *implied reward* :math:`x^*` at the same
    :math:`\beta`. ``ipo`` likewise, with :math:`g^*` solving a Laplacian system
    (:func:`ipo_optimum`); ``sigmoid`` is :func:`dpo_optimum`. ``robust`` is
    ``sigmoid`` on the de-noised :math:`q = (P - \varepsilon)/(1 - 2\varepsilon)`
    (refused where :math:`q \notin [0, 1]`: the loss is unbounded below there).
    ``exo_pair`` and ``discopop`` are not convex in :math:`x`: the point returned is a
    *local minimiser* (the gradient zero to rounding, no eigenvalue of the scaled,
    gauge-fixed Hessian below -1e-9), the same in any order of the outcomes except where
    an exact symmetry of :math:`W` makes minimisers tie; it need not be the global one.
    ``hinge`` is a linear program whose minimisers can form a polyhedron: the point
    returned is the minimiser of least weighted spread
    :math:`\sum_{i<j} (\mu_{ij}+\mu_{ji})|x_i - x_j|`, with integral scores, computed
    exactly and the same in any order of the outcomes (:func:`optimum_set` gives the
    whole set). With deterministic preferences ``sigmoid`` and ``discopop`` return the
    limit of minimising sequences, as :func:`dpo_optimum`.

    *Per-outcome losses* (``nca_pair``, ``bco_pair`` with a fixed ``delta``,
    ``sppo_hard``) split as :math:`\sum_i f_i(g_i)`, coupled by
    :math:`\sum_i \pi_{ref,i}e^{g_i} = 1`. Where the free minimisers carry less than all
    the mass and an outcome of the support is never compared, the rest goes to the
    uncompared outcomes in proportion to ``ref`` (any split is optimal); where all are
    compared the problem is not convex in the masses, and the stationary point of least
    loss is returned. TRL's ``bco_pair`` ``delta`` is a running mean of
    :math:`\beta(a + b)/2`, at population level
    :math:`\delta = \tfrac{\beta}{2}\sum_i (c_i + r_i) g_i` (:math:`c_i, r_i` the chosen
    and rejected marginals of ``W``): a function of the policy, so the trainer's fixed
    point is a stationary point of the loss at its own ``delta``; pass that value.

    *f-DPO* (``divergence``): a margin loss's optimum is
    :func:`klpolicy.f_optimal_policy` for the implied reward at ``c * beta`` wherever that
    optimum is interior (every outcome of the support keeps mass, and with
    ``alpha_clamp`` = C no log-ratio lies beyond :math:`C/(a-1)`); otherwise a ValueError
    says which outcome and why. The per-outcome losses take no f-divergence in TRL
    1.10.0 and later. *Length normalisation* (``sigmoid_norm``): the formula under
    Returns, :math:`\lambda` the root of :math:`\sum_y \pi_{ref,y} t_y = 1`. *Sorting
    losses* (``aot``, ``aot_pair``): no exact minimiser is computed
    (:func:`population_loss` evaluates them).

    The derivations are in ``docs/derivations/dpo.md`` (section 6: each loss's population
    problem), ``docs/derivations/f_divergences.md`` (f-DPO and lengths) and
    ``docs/derivations/pair_solvers.md`` (the solvers: the saddle-free Newton descent and
    its extended-precision polish, the hinge descent over minimum cuts, the per-outcome
    enumeration); the times in ``docs/performance.md``.

    References
    ----------
    .. [1] Azar et al., 2023, arXiv:2310.12036 (a general paradigm; IPO).
    .. [2] The papers of the rows of :data:`LOSSES`.
    .. [3] Dauphin et al., 2014, arXiv:1406.2572 (the saddle-free Newton step).
    .. [4] K. Murota, Discrete Convex Analysis, SIAM, 2003, ch. 7 (the hinge descent).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.preference import bradley_terry, population_optimum
    >>> P = bradley_terry([1.0, 0.0])
    >>> population_optimum([0.5, 0.5], P, 1.0, loss="hinge").round(4)  # e^1 : e^0
    array([0.7311, 0.2689])
    >>> population_optimum([0.5, 0.5], P, 1.0).round(4)  # DPO: pi* = sigma(1)
    array([0.7311, 0.2689])
    """
    if not isinstance(loss, str) and isinstance(loss, Sequence):
        raise ValueError(
            f"`loss` {list(loss)!r}: population_optimum takes one loss; a weighted sum of losses "
            "(TRL's loss_type list with loss_weights, e.g. sigmoid + sft as in RPO) has no "
            "closed-form minimiser here (population_loss evaluates it)"
        )
    row = get_loss(loss)
    o = row.resolve_options(options)
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    f_dpo = uses_f_divergence(divergence, alpha, alpha_clamp)
    problem = PairProblem(
        row, ref_a, preferences, b, mu, o, divergence, alpha, alpha_clamp, trl_version, f_dpo
    )
    return row.optimum(problem)


class OptimumSet(NamedTuple):
    """The set of population minimisers, as ranges of the policy's log-odds.

    ``low[i, j] <= log(pi_i / pi_j) <= high[i, j]`` over every minimiser (and limit of
    minimising sequences); ``low == high`` where the loss fixes the ratio; ``-inf``/``inf``
    where it leaves it free (outcomes never compared, or parts of the support the pairs do
    not connect). ``unique`` says whether the set is one policy.
    """

    low: NDArray
    high: NDArray
    unique: bool


def optimum_set(
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    loss: str = "sigmoid",
    mu: ArrayLike | None = None,
    **options: float,
) -> OptimumSet:
    r"""The whole set of minimisers of :func:`population_loss`, for margin-only losses.

    .. math::

        \{\pi : \mathcal{L}(\pi) = \min \mathcal{L}\},\quad\text{described by}\quad
        \mathrm{low}_{ij} \le \log\frac{\pi_i}{\pi_j} \le \mathrm{high}_{ij}

    Parameters
    ----------
    ref, preferences, beta, loss, mu, **options
        As in :func:`population_optimum`; ``loss`` one of ``sigmoid``, ``robust``,
        ``ipo``, ``hinge``, ``exo_pair``, ``discopop``.

    Returns
    -------
    OptimumSet
        ``low``, ``high`` of shape ``(n, n)`` (``nan`` on rows/columns where ``ref`` is
        0) and ``unique``.

    Raises
    ------
    ValueError
        For invalid inputs or a loss that is not margin-only.

    Notes
    -----
    Margin losses see only log-ratio differences between outcomes that are compared,
    so: within each connected part of the comparison graph the smooth losses fix every
    ratio (``low == high``, from :func:`population_optimum` on that part), and across
    parts, or to outcomes of the support that ``mu`` never draws, the ratio is free
    (:math:`\pm\infty`): the offline-support effect, where the loss is blind to mass
    moved onto responses outside the data. For ``hinge`` the ranges within a part are
    exact: an optimal flow of the dual (a maximum flow on the weights as exact integers)
    confines every score difference of a minimiser to an interval with integer ends, and
    the extremes of :math:`x_i - x_j` are shortest-path lengths through those intervals.

    References
    ----------
    .. [1] Azar et al., 2023, arXiv:2310.12036, section 4.2.

    Examples
    --------
    >>> from klpolicy.preference import optimum_set
    >>> s = optimum_set([0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]], 1.0, loss="hinge")
    >>> float(s.low[0, 1]), float(s.high[0, 1]), s.unique  # any log-odds in [-1, 1]
    (-1.0, 1.0, False)
    """
    row = get_loss(loss)
    if not row.margin_only:
        raise ValueError(
            f"`loss` {row.name!r} is not margin-only; optimum_set describes margin-only losses"
        )
    o = row.resolve_options(options)
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    p = as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    joint = as_pair_law(mu, ref_a)
    n = ref_a.size
    support = ref_a > 0
    sym = joint + joint.T
    np.fill_diagonal(sym, 0.0)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    idx = np.flatnonzero(support)
    _, labels = connected_components(csr_matrix(sym[np.ix_(idx, idx)] > 0), directed=False)
    low = np.full((n, n), np.nan)
    high = np.full((n, n), np.nan)
    low[np.ix_(idx, idx)], high[np.ix_(idx, idx)] = -np.inf, np.inf
    lref = np.log(np.where(support, ref_a, 1.0))
    for comp in np.unique(labels):
        members = idx[labels == comp]
        if members.size == 1:
            low[members[0], members[0]] = high[members[0], members[0]] = 0.0
            continue
        sub_ref = np.zeros(n)
        sub_ref[members] = ref_a[members]
        sub_ref /= sub_ref.sum()
        sub_mu = np.zeros((n, n))
        sub_mu[np.ix_(members, members)] = joint[np.ix_(members, members)]
        sub_mu /= sub_mu.sum()
        pi = population_optimum(sub_ref, p, b, loss=row.name, mu=sub_mu, **o)
        with np.errstate(divide="ignore", invalid="ignore"):
            lp = np.log(pi[members])
            block = lp[:, None] - lp[None, :]
        block = np.where(np.isnan(block), 0.0, block)
        lo_b, hi_b = block.copy(), block.copy()
        if row.minimiser_ranges is not None and members.size > 1:
            w = (sub_mu + sub_mu.T) * p
            sub = w[np.ix_(members, members)].copy()
            np.fill_diagonal(sub, 0.0)
            xl, xh = row.minimiser_ranges(sub)
            dref = lref[members][:, None] - lref[members][None, :]
            lo_b, hi_b = xl / b + dref, xh / b + dref
        low[np.ix_(members, members)] = lo_b
        high[np.ix_(members, members)] = hi_b
    with np.errstate(invalid="ignore"):
        unique = bool(np.all((low == high)[np.ix_(idx, idx)]))
    return OptimumSet(low, high, unique)


class LossComparison(NamedTuple):
    """One row of :func:`compare_losses`."""

    loss: str
    options: dict
    policy: NDArray | None  # the population optimum (None where none is computed)
    status: str  # "unique", "set" (a documented choice), "limit", or why there is none
    # ("minimiser (set not resolved)" for hinge when optimum_set refuses)
    tv_to_target: float  # total variation to the target policy (nan without a policy)
    kl_to_ref: float  # KL(policy || ref)
    expected_reward: float  # E_policy[reward] (nan without a reward)
    beta_equivalent: float  # beta' with policy = pi*_{beta'} for `reward`, nan if none


def compare_losses(
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    reward: ArrayLike | None = None,
    mu: ArrayLike | None = None,
    losses: dict[str, dict] | None = None,
) -> list[LossComparison]:
    r"""Where each loss's population optimum lands, against the KL-regularised optimum.

    .. math::

        \mathrm{TV}(\pi_{loss}, \pi^*_\beta),\quad \mathrm{KL}(\pi_{loss}\|\pi_{ref}),\quad
        \mathbb{E}_{\pi_{loss}}[r],\quad \beta' : \pi_{loss} = \pi^*_{\beta'}

    Parameters
    ----------
    ref, preferences, beta, mu
        As in :func:`population_optimum`.
    reward : array_like, optional
        The reward the target :math:`\pi^*_\beta = \pi_{ref}e^{r/\beta}/Z` is built from
        (typically the one ``preferences = bradley_terry(reward)`` came from). Without it
        the target is the DPO (``sigmoid``) optimum and the reward columns are ``nan``.
    losses : dict, optional
        ``{name: options}``; default every registry loss with its default options
        (but ``sigmoid_norm``, whose ``lengths`` have no default).

    Returns
    -------
    list of LossComparison
        One row per loss, in the order given.

    Raises
    ------
    ValueError
        For invalid inputs (a loss without an optimum is reported in its row's
        ``status``, not raised).

    Notes
    -----
    ``beta_equivalent``: the policy equals :math:`\pi^*_{\beta'}` for the given reward
    exactly when its log-ratios are an affine function :math:`g = r/\beta' + c` of the
    reward on the support; the fit is exact to ``1e-9`` relative, else ``nan``. For a
    margin-only loss the log-ratios are :math:`x^*/\beta`, so :math:`\beta'` is a fixed
    multiple of :math:`\beta` (when it exists).

    References
    ----------
    .. [1] Azar et al., 2023, arXiv:2310.12036.

    Examples
    --------
    >>> from klpolicy.preference import bradley_terry, compare_losses
    >>> rows = compare_losses([0.5, 0.5], bradley_terry([1.0, 0.0]), 1.0, reward=[1.0, 0.0],
    ...                       losses={"sigmoid": {}, "hinge": {}})
    >>> [(r.loss, round(r.tv_to_target, 12), round(r.beta_equivalent, 12)) for r in rows]
    [('sigmoid', 0.0, 1.0), ('hinge', 0.0, 1.0)]
    """
    from ..core import kl_divergence, optimal_policy

    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    # checked here, not only inside each loss's solve (whose errors become a row's status)
    as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    if mu is not None:
        as_pair_law(mu, ref_a)
    support = ref_a > 0
    if reward is not None:
        r = V.as_rewards("reward", reward)
        if r.shape != ref_a.shape:
            raise ValueError(f"`reward` must have the shape of `ref` {ref_a.shape}; got {r.shape}")
        target = optimal_policy(ref_a, r, b)
    else:
        r = None
        target = population_optimum(ref_a, preferences, b, mu=mu)
    if losses is None:
        # every loss whose options all have defaults (sigmoid_norm's lengths have none)
        losses = {n: {} for n, r in LOSSES.items() if all(o.default is not None for o in r.options)}
    if not isinstance(losses, dict) or not all(isinstance(v, dict) for v in losses.values()):
        raise ValueError(
            "`losses` must be a dict {name: options dict}, e.g. {'sigmoid': {}}; "
            f"got {V.describe(losses)}"
        )
    rows = []
    for name, opts in losses.items():
        row = get_loss(name)
        o = row.resolve_options(opts)
        try:
            pi = population_optimum(ref_a, preferences, b, loss=name, mu=mu, **o)
        except ValueError as e:
            rows.append(LossComparison(name, o, None, str(e), np.nan, np.nan, np.nan, np.nan))
            continue
        status = "unique"
        if np.any(pi[support] == 0):
            status = "limit"
        elif row.margin_only:
            try:
                s = optimum_set(ref_a, preferences, b, loss=name, mu=mu, **o)
                status = "unique" if s.unique else "set"
            except ValueError:  # a set the solver cannot resolve
                status = "minimiser (set not resolved)"
        tv = 0.5 * float(np.abs(pi - target).sum())
        kl = float(kl_divergence(pi, ref_a))
        er = float(pi @ r) if r is not None else np.nan
        beq = np.nan
        if r is not None and status != "limit" and np.ptp(r[support]) > 0:
            g = np.log(pi[support]) - np.log(ref_a[support])
            rs = r[support]
            a_mat = np.stack([rs, np.ones_like(rs)], axis=1)
            coef = np.linalg.lstsq(a_mat, g, rcond=None)[0]
            resid = float(np.max(np.abs(a_mat @ coef - g)))
            if coef[0] > 0 and resid <= 1e-9 * max(1.0, float(np.max(np.abs(g)))):
                beq = 1.0 / float(coef[0])
        rows.append(LossComparison(name, o, pi, status, tv, kl, er, beq))
    return rows
