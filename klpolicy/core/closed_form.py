r"""The closed form of the KL-regularised policy problem.

For a reference distribution :math:`\pi_{ref}` over a finite set of outcomes,
a reward :math:`r` and a coefficient :math:`\beta \ge 0`,

.. math::

    \max_\pi \; \mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi \,\|\, \pi_{ref})
    \quad\text{is attained at}\quad
    \pi^*_\beta(y) = \frac{\pi_{ref}(y)\, e^{r(y)/\beta}}{Z_\beta},
    \qquad Z_\beta = \mathbb{E}_{\pi_{ref}}\big[e^{r/\beta}\big],

with optimal value :math:`\beta \log Z_\beta` (the *soft value*). This module
computes :math:`\pi^*_\beta`, the soft value, the KL and expected reward of
:math:`\pi^*_\beta`, the reward-KL frontier, and the inverse map from a KL
budget to :math:`\beta`, exactly and stably, including the two limits
(:math:`\beta = 0`: greedy on the best rewards inside the reference's support;
:math:`\beta = \infty`: the reference).

Numerical method
----------------
With :math:`c = \max_{y:\pi_{ref}(y)>0} r(y)` and :math:`z = (r - c)/\beta \le 0`,
the log-partition is :math:`L = \log \sum_y \bar\pi_{ref}(y) e^{z(y)}` where
:math:`\bar\pi_{ref}` is the reference divided by its (rounding-level) row sum.
It is evaluated as ``log1p(sum(ref * expm1(z)) / sum(ref))`` whenever that sum
is above -1/2 (large beta: no cancellation, every summand has the same sign),
and as ``log(sum(ref * exp(z)) / sum(ref))`` otherwise (small beta: the
maximiser's term is exactly ``ref_max``). The log-ratio
:math:`u = \log(\pi^*/\pi_{ref})` and the soft value are then re-centred on the
mode :math:`k` of :math:`\pi^*` (``d = (r - r_k)/beta``, the same log1p-of-expm1 sum;
:math:`V = r_k + \beta \log(1 + S)`), which keeps the mode's own log-ratio, a soft
value far below the rewards and weights far below the best reward exact; ``u`` is
then exact to a few ulp, and the KL
is summed from non-negative terms ``ref * (u e^u - e^u + 1)`` so that it keeps
full relative precision even when it is 1e-30 (beta = 1e8).

That careful path is the reference. Most rows take a fast path instead
(:mod:`klpolicy.core._tilt`): ``w = ref * exp((r - c)/beta)`` and ``pi = w / sum(w)``,
one exponential per entry, in row blocks that stay in the CPU cache, with the
input checks fused into the same sweep. A row takes it only where that is
provably as accurate (every weight a normal float, finite positive ``beta``,
and for statistics ``spread / beta >= 2``); the other rows are recomputed by
the careful path. See ``docs/performance.md``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _tilt as _kernel
from . import _validation as V
from . import _xp
from ._tilt import _Tilt
from .roots import monotone_root

__all__ = [
    "Frontier",
    "beta_for_kl",
    "expected_reward",
    "frontier",
    "max_kl",
    "objective",
    "optimal_kl",
    "optimal_policy",
    "soft_value",
    "suboptimality",
]

# the float64 range of beta, in s = log(beta): the root finder's bracket
_LOG_TINY = math.log(5e-324)
_LOG_HUGE = math.log(np.finfo(np.float64).max)


def _prepare(ref: ArrayLike, reward: ArrayLike, axis: int, names=("ref", "reward")):
    """Validate (ref, reward) and return them broadcast, probability axis last, one dtype.

    ``names`` are the caller's names for the two arguments (e.g. ``("pi_old",
    "advantage")``), used in every error message.

    Returns
    -------
    (ndarray, ndarray)
        ``ref`` and ``reward``, validated and broadcast.
    """
    ref_a = V.as_probabilities(names[0], ref, axis)
    rew_a = V.as_rewards(names[1], reward, axis)
    ref_a, rew_a = V.broadcast_pair(names[0], ref_a, names[1], rew_a)
    dtype = V.result_dtype(ref_a, rew_a)
    return ref_a.astype(dtype, copy=False), rew_a.astype(dtype, copy=False)


def _setup(
    ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, axis: int, names=("ref", "reward", "beta")
):
    """Validate a full problem; return (ref, reward, beta, axis_neg), probability axis last.

    ``ref`` and ``reward`` are broadcast to the common shape (including any
    leading batch axes ``beta`` brings), ``beta`` to that shape with size 1
    last. ``axis_neg`` is the negative position of the probability axis in the
    caller's layout, for :func:`_restore`. ``names`` are the caller's names
    for the three arguments, used in every error message.

    Returns
    -------
    tuple
        ``(ref, reward, beta, axis_neg)``.
    """
    ref_a, rew_a = _prepare(ref, reward, axis, names[:2])
    ndim = ref_a.ndim
    ax = V.normalise_axis(axis, ndim)
    b = V.as_beta(beta, ndim, ax, name=names[2])
    shape = np.broadcast_shapes(ref_a.shape, b.shape)
    ref_a = np.broadcast_to(ref_a, shape)
    rew_a = np.broadcast_to(rew_a, shape)
    b = np.broadcast_to(b, shape[:-1] + (1,))
    if ref_a.dtype == np.float32:
        b = b.astype(np.float32)
    return ref_a, rew_a, b, ax - ndim


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _plain_setup(ref, reward, beta, axis: int):
    """:func:`_fast_setup` for the most common call, in a few attribute look-ups.

    Returns ``(ref, reward, beta, check)`` for two numpy arrays of one float dtype and
    one shape, 1-D or 2-D, probability axis last, and a finite positive float ``beta``
    (returned as a scalar of that dtype);
    ``None`` otherwise (then :func:`_fast_setup` takes the call). The values are checked
    in the kernel, as there.
    """
    if type(ref) is not np.ndarray or type(reward) is not np.ndarray:
        return None
    dtype = ref.dtype
    if reward.dtype != dtype or dtype not in _FLOATS or reward.shape != ref.shape:
        return None
    ndim = ref.ndim
    if not (ndim == 1 or ndim == 2) or ref.size == 0 or type(axis) is not int:
        return None
    if not (axis == -1 or axis == ndim - 1) or not isinstance(beta, float):
        return None
    if not 0 < beta < (3e38 if dtype == np.float32 else math.inf):
        return None
    check = (V.row_sum_tolerance(dtype, ref.shape[-1]), dtype == np.float32)
    return ref, reward, dtype.type(beta), check


def _fast_setup(ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, axis: int):
    """The structural part of :func:`_setup`; the value checks run inside the kernel's blocks.

    Returns ``(ref, reward, beta, axis_neg, check)`` for float inputs whose
    shapes, axis and ``beta`` are valid, and ``None`` otherwise (then
    :func:`_setup` runs and words the error). ``check`` is what the kernel needs
    to detect NaN, infinities, negative entries and rows that do not sum to one
    with the validators' tolerance, reading every block once while it is in cache.
    """
    try:
        ref_a, rew_a = np.asarray(ref), np.asarray(reward)
    except ValueError:  # ragged: _setup words the error
        return None
    floats = (np.float32, np.float64)
    if ref_a.dtype not in floats or rew_a.dtype not in floats:
        return None
    if ref_a.ndim == 0 or rew_a.ndim == 0 or ref_a.size == 0 or rew_a.size == 0:
        return None
    try:
        ax_ref = V.normalise_axis(axis, ref_a.ndim, "ref")
        ax_rew = V.normalise_axis(axis, rew_a.ndim, "reward")
        ref_m = ref_a if ax_ref == ref_a.ndim - 1 else np.moveaxis(ref_a, ax_ref, -1)
        rew_m = rew_a if ax_rew == rew_a.ndim - 1 else np.moveaxis(rew_a, ax_rew, -1)
        if ref_m.shape[-1] != rew_m.shape[-1]:
            return None
        pair = (
            ref_m.shape
            if ref_m.shape == rew_m.shape
            else np.broadcast_shapes(ref_m.shape, rew_m.shape)
        )
        ax = V.normalise_axis(axis, len(pair))
        b = V.as_beta(beta, len(pair), ax)
        shape = np.broadcast_shapes(pair, b.shape)
    except ValueError:
        return None
    dtype = V.result_dtype(ref_m, rew_m)
    if b.shape != shape[:-1] + (1,):
        b = np.broadcast_to(b, shape[:-1] + (1,))
    if dtype == np.float32:
        b = b.astype(np.float32)
    check = (
        V.row_sum_tolerance(ref_a.dtype, shape[-1]),
        dtype == np.float32,  # the validators sum in float64
    )
    return (
        ref_m.astype(dtype, copy=False),
        rew_m.astype(dtype, copy=False),
        b,
        ax - len(pair),
        check,
    )


def _solve(
    ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, axis: int, want, workers=None
) -> tuple:
    """Validate and run the kernel; return ``(_Tilt, axis_neg)``."""
    nw = _kernel.normalise_workers(workers)
    plain = _plain_setup(ref, reward, beta, axis)
    if plain is not None:
        ref_a, rew_a, b, check = plain
        if want == _kernel._PI:
            pi = _kernel.lean_policy(ref_a, rew_a, b, check)
            if pi is not None:
                return _Tilt(pi, None, None, None, None), -1
        t = _kernel.tilt(ref_a, rew_a, np.full((1,) * ref_a.ndim, b), want, check, nw)
        if t is not None:
            return t, -1
    fs = _fast_setup(ref, reward, beta, axis)
    if fs is not None:
        ref_a, rew_a, b, ax, check = fs
        t = _kernel.tilt(ref_a, rew_a, b, want, check=check, workers=nw)
        if t is not None:
            return t, ax
    ref_a, rew_a, b, ax = _setup(ref, reward, beta, axis)  # raises for invalid values
    return _kernel.tilt(ref_a, rew_a, b, want, workers=nw), ax


def _tilt(ref: NDArray, reward: NDArray, beta: NDArray, want=_kernel.ALL) -> _Tilt:
    """The optimum pi*_beta and its statistics for validated inputs (probability axis last).

    ``beta`` has shape (..., 1) broadcasting against ``ref``; it may contain 0
    (greedy limit) and inf (reference) alongside finite positive values.
    ``want`` names the fields to compute (``pi``, ``u``, ``value``, ``kl``,
    ``mean``, ``var``); the others are ``None``. Rows take the one-exp fast path
    of :mod:`klpolicy.core._tilt` where it is provably as accurate as the careful
    log-space path, and the careful path otherwise.

    Returns
    -------
    Tilt
        ``pi`` and the statistics named in ``want``.
    """
    return _kernel.tilt(ref, reward, beta, want)


def _restore(x: NDArray, axis_neg: int) -> NDArray:
    return x if axis_neg == -1 else np.moveaxis(x, -1, axis_neg)


def _scalar(x: NDArray):
    """Drop the kept probability axis; 0-d results become numpy scalars."""
    return x[..., 0][()]


def _greedy_kl(ref: NDArray, reward: NDArray) -> NDArray:
    """KL of the greedy limit per row, ``-log`` of the reference mass on the best set.

    For validated inputs (probability axis last); the same formula as the
    careful path's ``beta = 0`` branch, in row blocks that stay in cache.
    """
    shape = np.broadcast_shapes(ref.shape, reward.shape)
    n = shape[-1]
    q2 = np.broadcast_to(ref, shape).reshape(-1, n)
    r2 = np.broadcast_to(reward, shape).reshape(-1, n)
    out = np.empty(q2.shape[0], ref.dtype)
    step = _kernel._rows_per_block(n, ref.dtype.itemsize)
    for start in range(0, q2.shape[0], step):
        q, r = q2[start : start + step], r2[start : start + step]
        support = q > 0
        c = np.max(np.where(support, r, -np.inf), axis=-1, keepdims=True)
        best = support & (r == c)
        total = q.sum(axis=-1)
        rest = np.sum(np.where(best, 0, q), axis=-1) / total
        mass = np.sum(np.where(best, q, 0), axis=-1) / total
        with np.errstate(divide="ignore"):
            out[start : start + step] = -np.where(rest < 0.5, np.log1p(-rest), np.log(mass))
    return out.reshape(shape[:-1])


def optimal_policy(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    axis: int = -1,
    validate: bool = True,
    workers: int | None = None,
) -> NDArray[np.floating]:
    r"""The maximiser of :math:`\mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})`.

    .. math::

        \pi^*_\beta(y) = \frac{\pi_{ref}(y)\, \exp(r(y)/\beta)}
                              {\sum_{y'} \pi_{ref}(y')\, \exp(r(y')/\beta)}

    Parameters
    ----------
    ref : array_like
        Reference probabilities along ``axis`` (non-negative, rows summing to 1).
    reward : array_like
        Finite rewards, same size as ``ref`` along ``axis``; batch axes broadcast.
    beta : float or array_like
        KL coefficient (temperature), ``>= 0``. ``0`` gives the greedy limit and
        ``np.inf`` the reference. An array broadcasts over the batch axes and has
        size 1 along ``axis`` (e.g. shape ``(B, 1)`` for ``(B, V)`` inputs).
    axis : int, optional
        The probability axis (default -1).
    validate : bool, optional
        Check the values (default). Only for torch/JAX/CuPy input, where each
        check costs one device-to-host transfer and ``jax.jit`` cannot run them:
        ``validate=False`` skips them (the caller guarantees valid input).
        numpy input is always checked (the checks are fused into the kernel).
    workers : int, optional
        Threads over row blocks, for numpy input (scipy.fft's convention: ``None``
        or 1 one thread, -1 every core). The result is the same to the bit.

    Returns
    -------
    ndarray
        :math:`\pi^*_\beta`, with the broadcast shape of ``ref`` and ``reward``;
        float32 when the inputs are float32, float64 otherwise. torch tensors,
        JAX and CuPy arrays give their own array type, device and dtype
        (float16/bfloat16 are computed in float32), by the same algorithm
        (:mod:`klpolicy.core._xp`, see ``docs/backends.md``), differentiable.

    Raises
    ------
    ValueError
        For negative, NaN or non-normalised ``ref``; non-finite ``reward``;
        negative or NaN ``beta``; sizes that differ along ``axis``.

    Notes
    -----
    Entries where ``ref`` is zero stay exactly zero at every ``beta`` (the
    optimum never leaves the reference's support). As ``beta -> 0`` the mass
    concentrates on the best rewards inside the support, split in proportion
    to ``ref``; this is the value returned at ``beta = 0``. The computation
    works in log space relative to the best reward on the support, so it is
    exact for rewards of size 1e6, ``beta`` from 1e-8 to 1e8 and reference
    entries of 1e-300 (relative error about 1e-13 against mpmath).

    References
    ----------
    .. [1] Ziegler et al., "Fine-Tuning Language Models from Human Preferences",
       2019, arXiv:1909.08593.
    .. [2] Rafailov et al., "Direct Preference Optimization: Your Language Model
       is Secretly a Reward Model", 2023, arXiv:2305.18290, eq. (4).

    Examples
    --------
    The worked example: two responses of reference probability 0.5, rewards 1
    and 0.

    >>> import numpy as np
    >>> from klpolicy import optimal_policy
    >>> optimal_policy([0.5, 0.5], [1.0, 0.0], beta=0.5).round(4)
    array([0.8808, 0.1192])
    >>> optimal_policy([0.5, 0.5], [1.0, 0.0], beta=2.0).round(4)
    array([0.6225, 0.3775])
    >>> optimal_policy([0.25, 0.25, 0.5], [1.0, 1.0, 0.0], beta=0.0)
    array([0.5, 0.5, 0. ])
    """
    if _xp.is_foreign(ref, reward, beta):
        return _xp.optimal_policy(ref, reward, beta, axis=axis, validate=validate)
    t, ax = _solve(ref, reward, beta, axis, {"pi"}, workers)
    return _restore(t.pi, ax)


def soft_value(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    axis: int = -1,
    validate: bool = True,
    workers: int | None = None,
) -> NDArray[np.floating] | np.floating:
    r"""The optimal value :math:`\beta \log \mathbb{E}_{\pi_{ref}}[e^{r/\beta}]`.

    .. math::

        V_\beta = \beta \log \sum_y \pi_{ref}(y)\, e^{r(y)/\beta}
                = \max_\pi \; \mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})

    Parameters
    ----------
    ref, reward, beta, axis, validate, workers
        As in :func:`optimal_policy`.

    Returns
    -------
    ndarray or float
        The soft value for each batch row (the probability axis removed). It
        rises from :math:`\mathbb{E}_{ref}[r]` at ``beta = inf`` to the best
        reward on the support at ``beta = 0``.

    Raises
    ------
    ValueError
        As in :func:`optimal_policy`.

    Notes
    -----
    Evaluated around the mode ``k`` of :math:`\pi^*_\beta` as
    ``r_k + beta * log1p(S)``, ``S = E_ref[expm1((r - r_k)/beta)]``, and at large
    ``beta`` (every ``|r - E_ref r| < beta``) around the reference mean, so that
    the small correction ``Var_ref(r) / (2 beta)`` is not lost to rounding. The
    error is a few ulp of ``|r_k| + |V - r_k| + E_pi|r - r_k|``, the value's own
    conditioning: a value far below the rewards keeps its relative digits
    (``ref = (1e-100, 1)``, ``r = (1, 0)``, ``beta = 0.01`` gives 2.688e-59, where
    the best-reward anchor ``1 + 0.01 log(...)`` rounds to 0).

    References
    ----------
    .. [1] Haarnoja et al., "Reinforcement Learning with Deep Energy-Based
       Policies", 2017, arXiv:1702.08165 (the soft value).

    Examples
    --------
    >>> from klpolicy import soft_value
    >>> round(float(soft_value([0.5, 0.5], [1.0, 0.0], 0.5)), 10)  # 0.5 * log((e^2 + 1) / 2)
    0.7168904152
    >>> float(soft_value([0.5, 0.5], [1.0, 0.0], 0.0)), float(soft_value([0.5, 0.5], [1.0, 0.0], float("inf")))
    (1.0, 0.5)
    >>> f"{float(soft_value([1e-100, 1.0], [1.0, 0.0], 0.01)):.6e}"  # 0.01 log1p(1e-100 (e^100 - 1))
    '2.688117e-59'
    """
    if _xp.is_foreign(ref, reward, beta):
        return _xp.soft_value(ref, reward, beta, axis=axis, validate=validate)
    return _scalar(_solve(ref, reward, beta, axis, {"value"}, workers)[0].value)


def optimal_kl(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    axis: int = -1,
    validate: bool = True,
    workers: int | None = None,
) -> NDArray[np.floating] | np.floating:
    r"""The KL divergence of the optimal policy from the reference.

    .. math::

        \mathrm{KL}(\pi^*_\beta \| \pi_{ref})
          = \frac{\mathbb{E}_{\pi^*_\beta}[r] - V_\beta}{\beta}

    Parameters
    ----------
    ref, reward, beta, axis, validate, workers
        As in :func:`optimal_policy`.

    Returns
    -------
    ndarray or float
        KL in nats for each batch row. Decreasing in ``beta``, from
        :func:`max_kl` at ``beta = 0`` to 0 at ``beta = inf``.

    Raises
    ------
    ValueError
        As in :func:`optimal_policy`.

    Notes
    -----
    Summed from the non-negative terms ``ref (u e^u - e^u + 1)`` with
    ``u = log(pi*/ref)``, not from the difference above, so that the
    relative precision holds at large ``beta`` where the KL behaves like
    ``Var_ref(r) / (2 beta^2)``.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.

    Examples
    --------
    >>> from klpolicy import optimal_kl
    >>> round(float(optimal_kl([0.5, 0.5], [1.0, 0.0], 0.5)), 6)
    0.327813
    """
    if _xp.is_foreign(ref, reward, beta):
        return _xp.optimal_kl(ref, reward, beta, axis=axis, validate=validate)
    return _scalar(_solve(ref, reward, beta, axis, {"kl"}, workers)[0].kl)


def max_kl(
    ref: ArrayLike, reward: ArrayLike, *, axis: int = -1, validate: bool = True
) -> NDArray[np.floating] | np.floating:
    r"""The largest KL the optimal policy can reach: that of the greedy limit.

    .. math::

        \mathrm{KL}_{max} = \lim_{\beta\to 0}\mathrm{KL}(\pi^*_\beta\|\pi_{ref})
                          = -\log \pi_{ref}(\arg\max r)

    where :math:`\pi_{ref}(\arg\max r)` is the reference mass on the set of
    best rewards inside the support.

    Parameters
    ----------
    ref, reward, axis, validate
        As in :func:`optimal_policy`.

    Returns
    -------
    ndarray or float
        For each batch row, in nats.

    Raises
    ------
    ValueError
        As in :func:`optimal_policy`.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.

    Examples
    --------
    >>> from klpolicy import max_kl
    >>> round(float(max_kl([0.5, 0.25, 0.25], [0.0, 1.0, 1.0])), 6)  # log 2
    0.693147
    """
    if _xp.is_foreign(ref, reward):
        return _xp.max_kl(ref, reward, axis=axis, validate=validate)
    ref_a, rew_a = _prepare(ref, reward, axis)
    return _scalar(_greedy_kl(ref_a, rew_a)[..., None])


def expected_reward(
    pi: ArrayLike, reward: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""Expected reward :math:`\mathbb{E}_\pi[r] = \sum_y \pi(y) r(y)`.

    Parameters
    ----------
    pi : array_like
        Probabilities along ``axis``.
    reward : array_like
        Finite rewards of the same size along ``axis``.
    axis : int, optional
        The probability axis.

    Returns
    -------
    ndarray or float
        One value per batch row.

    Raises
    ------
    ValueError
        For invalid probabilities or rewards, as in :func:`optimal_policy`.

    References
    ----------
    .. [1] Sutton and Barto, "Reinforcement Learning: An Introduction", 2018.

    Examples
    --------
    >>> from klpolicy import expected_reward
    >>> float(expected_reward([0.25, 0.75], [1.0, 0.0]))
    0.25
    """
    p = V.as_probabilities("pi", pi, axis)
    r = V.as_rewards("reward", reward, axis)
    p, r = V.broadcast_pair("pi", p, "reward", r)
    return np.sum(p * r, axis=-1)[()]


def objective(
    pi: ArrayLike, ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The KL-regularised objective :math:`J_\beta(\pi) = \mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})`.

    Parameters
    ----------
    pi : array_like
        The policy to evaluate (probabilities along ``axis``).
    ref, reward, beta, axis
        As in :func:`optimal_policy`.

    Returns
    -------
    ndarray or float
        :math:`J_\beta(\pi)` per batch row; ``-inf`` when ``pi`` puts mass off
        the reference's support (and ``beta > 0``). At ``beta = 0`` it is
        :math:`\mathbb{E}_\pi[r]`; at ``beta = inf`` it is
        :math:`\mathbb{E}_\pi[r]` if ``pi`` equals the reference and ``-inf``
        otherwise.

    Raises
    ------
    ValueError
        As in :func:`optimal_policy`, and for an invalid ``pi``.

    Notes
    -----
    The identity :math:`J_\beta(\pi) = V_\beta - \beta\,\mathrm{KL}(\pi\|\pi^*_\beta)`
    shows that :func:`soft_value` is the maximum and :func:`optimal_policy`
    the unique maximiser.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.

    Examples
    --------
    >>> from klpolicy import objective, optimal_policy, soft_value
    >>> ref, r = [0.5, 0.5], [1.0, 0.0]
    >>> bool(abs(objective(optimal_policy(ref, r, 0.5), ref, r, 0.5) - soft_value(ref, r, 0.5)) < 1e-15)
    True
    """
    from .divergences import kl_divergence

    p = V.as_probabilities("pi", pi, axis)
    ref_a, rew_a, b, _ = _setup(ref, reward, beta, axis)
    p, ref_a = V.broadcast_pair("pi", p, "ref", ref_a)
    p, rew_a = V.broadcast_pair("pi", p, "reward", rew_a)
    b = b[..., 0]
    kl = kl_divergence(p, ref_a)
    er = np.sum(p * rew_a, axis=-1)
    with np.errstate(invalid="ignore"):
        pen = np.where(b == 0, 0.0, np.where(kl == 0, 0.0, b * kl))
    return (er - pen)[()]


def suboptimality(
    policy: ArrayLike, ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The gap :math:`J_\beta(\pi^*_\beta) - J_\beta(\pi) = \beta\,\mathrm{KL}(\pi\|\pi^*_\beta)`.

    .. math::

        J_\beta(\pi) = \mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref}),\qquad
        J_\beta(\pi^*_\beta) - J_\beta(\pi) = \beta\,\mathrm{KL}(\pi\|\pi^*_\beta)

    Parameters
    ----------
    policy : array_like
        The policy to evaluate (probabilities along ``axis``).
    ref, reward, beta, axis
        As in :func:`optimal_policy`.

    Returns
    -------
    ndarray or float
        The gap per batch row, ``>= 0``; ``inf`` when ``policy`` puts mass off the
        reference's support. At ``beta = 0`` it is
        :math:`\max_{\mathrm{supp}\,\pi_{ref}} r - \mathbb{E}_\pi[r]` (the limit of
        :math:`\beta\,\mathrm{KL}(\pi\|\pi^*_\beta)` as ``beta -> 0``); at
        ``beta = inf`` it is ``0`` if ``policy`` equals the reference and ``inf``
        otherwise.

    Raises
    ------
    ValueError
        As in :func:`optimal_policy`, and for an invalid ``policy``.

    Notes
    -----
    Write :math:`\log\pi^* = \log\pi_{ref} + r/\beta - \log Z`. Then
    :math:`\beta\,\mathrm{KL}(\pi\|\pi^*) = \beta\,\mathrm{KL}(\pi\|\pi_{ref})
    - \mathbb{E}_\pi[r] + \beta\log Z = V_\beta - J_\beta(\pi)`, and
    :math:`V_\beta = J_\beta(\pi^*)`. The gap is computed as
    :math:`\beta\,\mathrm{KL}(\pi\|\pi^*)` (no cancellation between the two
    objectives), with :func:`optimal_policy` and :func:`kl_divergence`. It is the
    identity behind the :math:`O(1/n)` sample complexity of KL-regularised
    contextual bandits: an estimation error in :math:`\pi^*` costs only its KL.

    References
    ----------
    .. [1] Zhao, Ye, Gu, Zhang, 2024, "Sharp analysis for KL-regularized
       contextual bandits and RLHF", arXiv:2411.04625.

    Examples
    --------
    >>> from klpolicy import objective, soft_value, suboptimality
    >>> ref, r, pi = [0.5, 0.5], [1.0, 0.0], [0.3, 0.7]
    >>> gap = suboptimality(pi, ref, r, 0.5)
    >>> bool(abs(gap - (soft_value(ref, r, 0.5) - objective(pi, ref, r, 0.5))) < 1e-15)
    True
    >>> float(suboptimality(pi, ref, r, 0.0))
    0.7
    """
    from .divergences import kl_divergence

    p = V.as_probabilities("policy", policy, axis)
    ref_a, rew_a, b, _ = _setup(ref, reward, beta, axis)
    p, ref_a = V.broadcast_pair("policy", p, "ref", ref_a)
    p, rew_a = V.broadcast_pair("policy", p, "reward", rew_a)
    p = p.astype(V.result_dtype(p, ref_a), copy=False)
    shape = np.broadcast_shapes(p.shape, b.shape)
    p, ref_a, rew_a = (np.broadcast_to(x, shape) for x in (p, ref_a, rew_a))
    b = np.broadcast_to(b, shape[:-1] + (1,))
    total = p.sum(axis=-1, keepdims=True)
    pn = p / total
    support = ref_a > 0
    off = np.any((pn > 0) & ~support, axis=-1)
    bs = b[..., 0]
    finite = (bs > 0) & np.isfinite(bs)
    # beta in (0, inf): beta KL(pi || pi*_beta); at beta = inf pi* = ref
    safe_b = np.where(finite, bs, 1.0)[..., None].astype(ref_a.dtype)
    pistar = optimal_policy(ref_a, rew_a, safe_b)
    with np.errstate(invalid="ignore", over="ignore"):
        kl = kl_divergence(pn, pistar)
        # where pi* underflowed under pi's mass, the KL is large and finite: take it in
        # log space, log pi* = log ref + (r - c)/beta - log sum ref exp((r - c)/beta)
        lost = np.any((pn > 0) & (pistar == 0) & support, axis=-1) & finite
        if np.any(lost):
            c = np.max(np.where(support, rew_a, -np.inf), axis=-1, keepdims=True)
            u = np.where(support, (rew_a - c) / safe_b, -np.inf)
            with np.errstate(divide="ignore"):
                lq = np.where(support, np.log(np.where(support, ref_a, 1.0)), -np.inf)
                lp = (
                    lq
                    + u
                    - np.log(np.sum(np.where(support, ref_a * np.exp(u), 0.0), -1))[..., None]
                )
                lpi = np.log(np.where(pn > 0, pn, 1.0))
            direct = np.sum(np.where(pn > 0, pn * (lpi - lp), 0.0), axis=-1)
            kl = np.where(lost, direct, kl)
        gap = safe_b[..., 0] * kl
        # beta = 0: max over ref's support of r, minus E_pi r
        best = np.max(np.where(support, rew_a, -np.inf), axis=-1)
        greedy = best - np.sum(np.where(pn > 0, pn * rew_a, 0.0), axis=-1)
        greedy = np.maximum(greedy, 0.0)
        # beta = inf: 0 for the reference itself, inf for anything else
        kl_ref = kl_divergence(pn, ref_a)
        at_inf = np.where(kl_ref == 0, 0.0, np.inf)
    out = np.where(bs == 0, greedy, np.where(finite, gap, at_inf))
    out = np.where(off, np.inf, out).astype(ref_a.dtype, copy=False)
    return out[()]


class Frontier(NamedTuple):
    """The reward-KL trade-off curve of :math:`\\pi^*_\\beta` along a grid of ``beta``.

    Each field has shape ``betas.shape + batch_shape``.
    """

    beta: NDArray
    expected_reward: NDArray
    kl: NDArray
    soft_value: NDArray


def frontier(ref: ArrayLike, reward: ArrayLike, betas: ArrayLike, *, axis: int = -1) -> Frontier:
    r"""Expected reward, KL and soft value of :math:`\pi^*_\beta` along a grid of ``beta``.

    .. math::

        \beta \mapsto \big(\mathrm{KL}(\pi^*_\beta\|\pi_{ref}),\;
        \mathbb{E}_{\pi^*_\beta}[r]\big), \qquad
        \frac{d\,\mathbb{E}_{\pi^*_\beta}[r]}{d\,\mathrm{KL}} = \beta

    The curve is the upper boundary of what any policy can reach in the
    reward-KL plane: no policy with the same KL has a larger expected reward.

    Parameters
    ----------
    ref, reward, axis
        As in :func:`optimal_policy`.
    betas : array_like
        Grid of coefficients (``>= 0``, ``inf`` allowed), any shape.

    Returns
    -------
    Frontier
        Named tuple ``(beta, expected_reward, kl, soft_value)``; each array has
        shape ``betas.shape + batch_shape``.

    Raises
    ------
    ValueError
        As in :func:`optimal_policy`.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, "Scaling Laws for Reward Model
       Overoptimization", 2022, arXiv:2210.10760.

    Examples
    --------
    >>> from klpolicy import frontier
    >>> f = frontier([0.5, 0.5], [1.0, 0.0], [0.0, 0.5, 2.0, float("inf")])
    >>> f.expected_reward.round(4)
    array([1.    , 0.8808, 0.6225, 0.5   ])
    >>> f.kl.round(4)
    array([0.6931, 0.3278, 0.0303, 0.    ])
    """
    ref_a, rew_a = _prepare(ref, reward, axis)
    grid = V.check_beta_values("betas", betas)
    flat = grid.reshape(-1)
    batch = ref_a.shape[:-1]
    b = flat.reshape((-1,) + (1,) * len(batch) + (1,)).astype(ref_a.dtype)
    r_b = np.broadcast_to(ref_a, (flat.size,) + ref_a.shape)
    w_b = np.broadcast_to(rew_a, (flat.size,) + rew_a.shape)
    t = _tilt(r_b, w_b, b, {"value", "kl", "mean"})
    shape = grid.shape + batch
    return Frontier(
        beta=np.broadcast_to(grid.reshape(grid.shape + (1,) * len(batch)), shape).copy(),
        expected_reward=t.mean[..., 0].reshape(shape),
        kl=t.kl[..., 0].reshape(shape),
        soft_value=t.value[..., 0].reshape(shape),
    )


def _large_beta_guess(ref_b, rew_b, active, safe_t) -> NDArray:
    """``log beta`` from the large-beta expansion ``KL ~ Var_ref(r) / (2 beta^2)``, the
    solver's start, computed on rewards scaled by their spread so that tiny or huge rewards
    do not under/overflow (``log spread`` where the expansion has no finite answer)."""
    support = ref_b > 0
    ref_n = ref_b / ref_b.sum(-1, keepdims=True)
    top = np.max(np.where(support, rew_b, -np.inf), -1, keepdims=True)
    spread = top - np.min(np.where(support, rew_b, np.inf), -1, keepdims=True)
    spread = np.where(spread > 0, spread, 1.0)
    mu = np.sum(ref_n * rew_b, -1, keepdims=True)
    # off the support the scaled deviation can overflow (spread is the support's): drop it
    with np.errstate(over="ignore", invalid="ignore"):
        dev = np.where(support, (rew_b - mu) / spread, 0.0)
        var_n = np.sum(ref_n * dev * dev, -1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        # a difference of logs: var / (2 kl) overflows for a subnormal kl
        s = np.log(spread) + 0.5 * (np.log(np.where(active, var_n, 1.0)) - np.log(2 * safe_t))
    return np.where(np.isfinite(s), s, np.log(spread))


def _unconverged_rows(root, act, ref_r, rew_r, safe_t, s_flat, max_iter) -> None:
    """The rows the root finder left: a true ``beta`` below the smallest float gets the
    closer of 0 and 5e-324 (in ``s_flat``, as ``log beta``); a ``beta`` above the largest
    float raises a ValueError, a row that did not converge a RuntimeError."""
    # a true beta below the smallest float: the closer of 0 and 5e-324 (a Python loop,
    # but only over such rows: kl within a few ulp of max_kl, where the KL is flat)
    for i in np.flatnonzero(~root.converged & (root.outside < 0)):
        r = int(act[i])
        km = float(_greedy_kl(ref_r[r : r + 1], rew_r[r : r + 1])[0])
        t_r = float(safe_t[r])
        at_tiny = t_r * math.exp(float(root.f[i]))
        s_flat[r] = -np.inf if abs(km - t_r) <= abs(at_tiny - t_r) else _LOG_TINY
    if (~root.converged & (root.outside >= 0)).any():
        bad = int(np.argmax(~root.converged & (root.outside >= 0)))
        row = int(act[bad])
        t_r = float(safe_t[row])
        if root.outside[bad] > 0:
            raise ValueError(
                f"`kl` = {t_r:g} is reached only at a beta above the largest float64 "
                f"(1.8e308) for row {row}; scale `reward` down"
            )
        raise RuntimeError(
            f"beta_for_kl did not converge in {max_iter} iterations (first unconverged row "
            f"{row}, relative KL error {math.expm1(abs(float(root.f[bad]))):.3g}); "
            "raise `max_iter` or report the problem"
        )


def beta_for_kl(
    ref: ArrayLike,
    reward: ArrayLike,
    kl: ArrayLike,
    *,
    axis: int = -1,
    rtol: float = 1e-13,
    max_iter: int | None = None,
) -> NDArray[np.floating] | np.floating:
    r"""The coefficient at which the optimal policy spends a given KL budget.

    Solves :math:`\mathrm{KL}(\pi^*_\beta\|\pi_{ref}) = \mathrm{kl}` for
    :math:`\beta`, for every batch row at once, using

    .. math::

        \frac{d\,\mathrm{KL}(\pi^*_\beta\|\pi_{ref})}{d\beta}
          = -\frac{\mathrm{Var}_{\pi^*_\beta}(r)}{\beta^3}.

    Parameters
    ----------
    ref, reward, axis
        As in :func:`optimal_policy`.
    kl : float or array_like
        Target KL in nats, ``>= 0``, broadcasting over the batch shape.
    rtol : float, optional
        Relative tolerance on the attained KL.
    max_iter : int, optional
        Iteration cap of the safeguarded Newton solver; a row still unresolved
        then raises ``RuntimeError``. The default ``None`` sets no cap: the
        solver's bisection safeguard ends every row after finitely many steps.

    Returns
    -------
    ndarray or float
        ``beta`` per batch row (the probability axis removed; pass
        ``beta[..., None]`` back to :func:`optimal_policy` for batches).
        ``kl = 0`` gives ``inf``; ``kl`` equal to :func:`max_kl` gives 0.

    Raises
    ------
    ValueError
        For a negative, NaN or infinite ``kl``, and for a ``kl`` above the
        largest reachable value (the greedy limit's, :func:`max_kl`); the message
        states that maximum. Also for a ``kl`` so small that only a ``beta``
        above the largest float64 reaches it (rewards of 1e300 and a ``kl`` of
        1e-300, say).
    RuntimeError
        When an explicit ``max_iter`` cap is reached before a row is resolved.

    Notes
    -----
    The KL is strictly decreasing in :math:`\beta` unless the reward is
    constant on the support. The solver works on :math:`s = \log\beta` and
    :math:`g(s) = \log \mathrm{KL} - \log \mathrm{kl}`, decreasing on the whole
    float range of :math:`\beta` (5e-324 to 1.8e308), which brackets the root.
    From the large-:math:`\beta` guess :math:`\sqrt{\mathrm{Var}_{ref}(r)/(2\,\mathrm{kl})}`
    the package's root finder (:mod:`klpolicy.core.roots`) takes Newton steps with
    :math:`g'(s) = -\mathrm{Var}_{\pi^*}(r)/(\beta^2 \mathrm{KL})` from the
    better bracket end, and bisects whenever a step leaves the bracket or
    progress stalls, so it always terminates; a KL plateau followed by a drop
    of 1e35 within a factor 2 of :math:`\beta` is crossed by bisection. All
    rows iterate together; no Python loop over rows.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593 (a target KL for beta).

    Examples
    --------
    >>> from klpolicy import beta_for_kl, optimal_kl
    >>> b = beta_for_kl([0.5, 0.5], [1.0, 0.0], 0.1)
    >>> round(float(optimal_kl([0.5, 0.5], [1.0, 0.0], b)), 12)
    0.1
    """
    ref_a, rew_a = _prepare(ref, reward, axis)
    batch = ref_a.shape[:-1]
    target = V.as_kl_budget("kl", kl)
    rtol = V.as_scalar("rtol", rtol, "(0, 1)")
    if max_iter is not None:
        max_iter = V.as_count("max_iter", max_iter, hi=V.MAX_LOOP_COUNT)
    try:
        batch = np.broadcast_shapes(batch, target.shape)
    except ValueError:
        raise ValueError(
            f"`kl` of shape {target.shape} does not broadcast against the batch shape {batch}"
        ) from None
    ref_b = np.broadcast_to(ref_a, batch + ref_a.shape[-1:]).astype(np.float64, copy=False)
    rew_b = np.broadcast_to(rew_a, batch + rew_a.shape[-1:]).astype(np.float64, copy=False)
    tgt = np.broadcast_to(target, batch)[..., None].astype(np.float64)

    kmax = _greedy_kl(ref_b, rew_b)[..., None]
    over = tgt > kmax * (1 + 4 * np.finfo(np.float64).eps)
    if over.any():
        idx = tuple(int(i) for i in np.argwhere(over[..., 0])[0]) if batch else ()
        where = f" for row {idx}" if batch else ""
        raise ValueError(
            f"`kl` = {float(tgt[idx][0]) if batch else float(tgt[0]):g} is above the largest KL "
            f"reachable{where}: {float(kmax[idx][0]) if batch else float(kmax[0]):.6g} nats "
            "(the greedy limit beta -> 0)"
        )
    at_zero = tgt == 0
    at_max = (tgt >= kmax) & ~at_zero
    active = ~(at_zero | at_max)

    safe_t = np.where(active, tgt, 1.0)
    s = _large_beta_guess(ref_b, rew_b, active, safe_t)

    # the solver works on rows (rows, n); only rows still iterating are recomputed
    n = ref_b.shape[-1]
    ref_r, rew_r = ref_b.reshape(-1, n), rew_b.reshape(-1, n)
    lo_shape = s.shape
    act = np.nonzero(active.reshape(-1))[0]
    log_t = np.log(safe_t.reshape(-1)[act])
    n_rows = ref_r.shape[0]

    def g_and_slope(s_, rows):
        """g = log KL - log kl and dg/ds = -Var/KL for the given active rows."""
        every = rows.size == n_rows  # no copy of the problem while every row iterates
        sel = slice(None) if every else act[rows]
        t = _tilt(ref_r[sel], rew_r[sel], np.exp(s_)[:, None], {"kl", "var"})
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.log(t.kl[:, 0]) - log_t[rows], -t.var[:, 0] / t.kl[:, 0]

    # g decreases in s on the whole float range of beta: bracket it by that range
    root = monotone_root(
        g_and_slope,
        _LOG_TINY,
        _LOG_HUGE,
        np.clip(s.reshape(-1)[act], _LOG_TINY, _LOG_HUGE),
        increasing=False,
        ftol=rtol,
        max_iter=max_iter,
    )
    s_flat = np.zeros(ref_r.shape[0])
    s_flat[act] = root.x
    if not root.converged.all():
        _unconverged_rows(root, act, ref_r, rew_r, safe_t.reshape(-1), s_flat, max_iter)
    s = s_flat.reshape(lo_shape)
    s = s.reshape(lo_shape)
    beta = np.where(at_zero, np.inf, np.where(at_max, 0.0, np.exp(s)))
    return beta[..., 0][()]
