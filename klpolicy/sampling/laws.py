r"""The exact law an inference engine samples from: temperature, top-k, top-p and min-p.

RLHF rollouts are drawn by an engine (Hugging Face ``generate``, vLLM) that
transforms the policy's logits before it samples. This module gives the
transformed law :math:`s` exactly, for a batch of rows, in the processing order
of either engine.

The two orders (read at a commit; the formulas below are this module's own)
--------------------------------------------------------------------------------
``"transformers"`` (default): Hugging Face transformers
``GenerationMixin._get_logits_processor`` (``src/transformers/generation/utils.py``
at commit ``000034a44ef887621d9b36001a5eb7c46e64cb3f``) appends, when sampling, the
warpers in the order temperature, top-k, top-p, min-p, after the processors such as
``MinLengthLogitsProcessor``; the warpers are in
``src/transformers/generation/logits_process.py`` at commit
``00857b6cf63a4fa05cbd9bdc8a4fd78b6168c5af``:

* ``TemperatureLogitsWarper``: ``scores / temperature`` (``temperature > 0``;
  greedy decoding is ``do_sample=False``, an ``argmax``).
* ``TopKLogitsWarper``: ``k = max(top_k, min_tokens_to_keep)``; a token is
  removed when its score is *below* the ``k``-th largest, so every token tied with
  the ``k``-th is kept (more than ``k`` tokens can survive).
* ``TopPLogitsWarper``: sort ascending, ``cumsum(softmax)``; remove where the
  cumulative sum is ``<= 1 - top_p``; never the last ``min_tokens_to_keep``. The
  kept set is the smallest top set of mass ``>= top_p``; tokens tied at the
  boundary are split by their place in the sort.
* ``MinPLogitsWarper``: remove ``p_i < min_p * max_j p_j`` of the current
  (tempered, truncated) law, keeping the ``min_tokens_to_keep`` most probable.

``"vllm"``: vLLM v1 ``vllm/v1/sample/sampler.py`` (vllm-project/vllm at commit
``3e342658b2e9c85a30a54d19e64e5ad77b8a26a6``): greedy ``argmax`` when
``temperature < 1e-5``; else temperature, then the argmax-invariant logits
processors, min-p among them (``MinPLogitsProcessor.apply`` in
``vllm/v1/sample/logits_processor/builtin.py`` at
``bf17660a2493b9cec475b6ba790a390afd317e8b``: ``p < min_p * max p``), then
``apply_top_k_top_p`` (``vllm/v1/sample/ops/topk_topp_sampler.py`` at
``3babc05a035b42bb9d0ae51b83e102c85e3e5626``): top-k removes logits below the
``k``-th largest (ties kept), top-p removes where the ascending cumulative sum
is ``<= 1 - p`` and always keeps the last (``min_tokens_to_keep`` is 1 and
cannot be set).

Where they differ
-----------------
* **min-p's place.** Both engines apply min-p to the *tempered* law and compare
  with the most probable token, so min-p alone gives the same set. transformers
  applies it after top-p, vLLM before top-k/top-p; top-p then measures its mass
  on a different (renormalised) law, and the kept sets differ: vLLM's top-p runs
  on the min-p-truncated law and keeps fewer tokens.
* **min_tokens_to_keep.** Only transformers has it (2 in beam sampling); vLLM
  keeps at least one token.
* **Greedy.** transformers samples at every ``temperature > 0``; vLLM switches to
  ``argmax`` below ``1e-5``. Both ``argmax`` pick the *first* maximal index.
* **Ties.** Top-k keeps every tied token in both. At the top-p boundary, tied
  tokens are split by the ascending sort; this module orders ties by index (what
  a stable sort does: the lower index is removed first). ``torch.sort`` does not
  promise that order when ``stable=False``, so on an engine the split of an exact
  tie may differ; the law is exact for every token not tied at the boundary.
* **Numerics.** Engines compute in float32 (vLLM casts the logits to float32);
  this module computes in float64, so a token within float32 rounding of a
  boundary may fall on the other side. On exactly tied rows top-p's cumulative
  sum can land on ``1 - top_p`` itself, and then this is not a small effect: the
  engine may keep one tied token more (or another tied block), which moves
  ``1/(m+1)`` of the mass for a kept block of ``m`` (the measurement against
  transformers' ``TopPLogitsWarper``: ``docs/derivations/sampling.md``).
  :func:`cut_sensitivity` reports the law at both sides of the cut.
* **Defaults.** Settings not passed are off here; transformers' ``generate``
  applies ``top_k=50`` unless it is passed (:data:`ENGINE_DEFAULTS`, ``defaults=``).

All of it is re-exported by :mod:`klpolicy.sampling`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import validation as V

__all__ = [
    "ENGINE_DEFAULTS",
    "ORDERS",
    "VLLM_GREEDY_BELOW",
    "CutSensitivity",
    "cut_sensitivity",
    "sampler_law",
]

#: The processing orders :func:`sampler_law` knows.
ORDERS = ("transformers", "vllm")
#: vLLM samples greedily (``argmax``) below this temperature (``_SAMPLING_EPS``).
VLLM_GREEDY_BELOW = 1e-5
_MAX_TOP_K = 2**62
#: rows at least this long are searched one by one (binary search); shorter ones compared whole
_SEARCH_FROM = 4096
#: rows at least this long take the fast path (candidates first, then a sort of those)
_FAST_FROM = 1024
#: top-p's first candidate set: this many of the largest logits (or 1/16 of the row)
_TOP_P_START = 4096
#: a cumulative sum within (this x the row length) ulps of top-p's cut is decided by the
#: full sort: the float64 sums of the two ways differ by less than that
_TOP_P_BAND = 4
_ULP_SCALE = 2.0**-52


class Settings(NamedTuple):
    """Validated sampling settings (internal to :mod:`klpolicy.sampling`)."""

    temperature: float
    top_k: int | None
    top_p: float | None
    min_p: float | None
    order: str
    min_tokens_to_keep: int

    @property
    def greedy(self) -> bool:
        t = self.temperature
        return t == 0.0 or (self.order == "vllm" and t < VLLM_GREEDY_BELOW)


#: The engines' own defaults for the settings :func:`sampler_law` takes, by the name
#: ``defaults=`` gives them. transformers 5.25.0 fills every sampling setting left
#: unset (by the call and by the model's ``generation_config``) from
#: ``GenerationConfig._get_default_generation_params``
#: (``transformers/generation/configuration_utils.py`` lines 606-651; ``"top_k": 50`` at
#: line 623), applied in ``GenerationMixin._prepare_generation_config``
#: (``generation/utils.py`` lines 2111-2113): ``generate(do_sample=True)`` keeps the 50
#: most probable tokens unless ``top_k`` is passed (``top_k=0`` or ``None`` turns it off).
ENGINE_DEFAULTS = MappingProxyType(
    {
        "transformers": MappingProxyType(
            {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None}
        ),
    }
)
#: the settings ``defaults=`` may give (a GenerationConfig's attributes of these names)
_DEFAULTED = ("temperature", "top_k", "top_p", "min_p")


def engine_defaults(defaults: Any) -> dict[str, Any]:
    """The settings ``defaults=`` stands for: a name of :data:`ENGINE_DEFAULTS`, a mapping
    (a ``generation_config.json``) or a GenerationConfig-like object, read by attribute
    (``temperature``, ``top_k``, ``top_p``, ``min_p``), without importing transformers.
    Entries that are ``None`` or missing take transformers' global defaults, as
    ``generate`` fills them."""
    if defaults is None:
        return {}
    if isinstance(defaults, str):
        return dict(ENGINE_DEFAULTS[V.as_choice("defaults", defaults, tuple(ENGINE_DEFAULTS))])
    base = ENGINE_DEFAULTS["transformers"]
    if isinstance(defaults, Mapping):
        read = {k: defaults.get(k) for k in _DEFAULTED}
    elif all(hasattr(defaults, k) for k in _DEFAULTED):
        read = {k: getattr(defaults, k) for k in _DEFAULTED}
    else:
        names = ", ".join(repr(n) for n in ENGINE_DEFAULTS)
        raise ValueError(
            f"`defaults` must be None, one of {names}, a mapping or a GenerationConfig-like "
            f"object with attributes {', '.join(_DEFAULTED)}; got {V.describe(defaults)}"
        )
    return {k: base[k] if v is None else v for k, v in read.items()}


def settings(
    temperature: Any = None,
    top_k: Any = None,
    top_p: Any = None,
    min_p: Any = None,
    order: Any = "transformers",
    min_tokens_to_keep: Any = 1,
    defaults: Any = None,
) -> Settings:
    """Validate the sampling settings once (shared by every function of the part).

    An argument left ``None`` takes its value from ``defaults`` (:func:`engine_defaults`);
    an explicit one overrides it. ``top_k=0`` is off, as in transformers and vLLM.
    """
    check = {
        "temperature": lambda n, x: V.as_scalar(n, x, "[0, inf]", what="0 is greedy decoding"),
        "top_k": lambda n, x: V.as_count(n, x, lo=0, hi=_MAX_TOP_K) or None,  # 0: off
        "top_p": lambda n, x: V.as_scalar(n, x, "(0, 1]"),
        "min_p": lambda n, x: V.as_scalar(n, x, "[0, 1]"),
    }
    # every value defaults gives is checked, also where an argument overrides it
    filled = {
        k: None if x is None else check[k](f"defaults['{k}']", x)
        for k, x in engine_defaults(defaults).items()
    }
    given = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
    value = {k: filled.get(k) if x is None else check[k](k, x) for k, x in given.items()}
    order = V.as_choice("order", order, ORDERS)
    t = 1.0 if value["temperature"] is None else value["temperature"]
    k, p, mp = value["top_k"], value["top_p"], value["min_p"]
    keep = V.as_count("min_tokens_to_keep", min_tokens_to_keep, lo=1, hi=_MAX_TOP_K)
    if order == "vllm" and keep != 1:
        raise ValueError(
            f"`min_tokens_to_keep` must be 1 with order='vllm' (vLLM has no such setting); "
            f"got {keep}"
        )
    return Settings(t, k, p, mp, order, keep)


def as_logits(name: str, logits: ArrayLike, axis: Any = -1) -> tuple[NDArray, int]:
    """Logits (finite or ``-inf``), probability axis moved last; every row keeps a token."""
    arr = V.as_float_array(name, logits)
    if arr.ndim == 0:
        arr = V.as_log_probs(name, arr, allow_neg_inf=True)  # NaN, +inf: their messages first
        raise ValueError(f"`{name}` must have at least one dimension; got a scalar {arr.item()!r}")
    ax = V.normalise_axis(axis, arr.ndim, name)
    given, arr = arr, np.moveaxis(arr, ax, -1)
    # one reduction clears the common case: a finite maximum in every row means no NaN,
    # no +inf and no row of only -inf; only a bad array pays for the checks that word it
    if np.all(np.isfinite(np.max(arr, axis=-1))):
        return arr, ax
    V.as_log_probs(name, given, allow_neg_inf=True)  # indices as the caller laid them out
    dead = np.all(arr == -np.inf, axis=-1)
    if np.any(dead):
        idx = tuple(int(i) for i in np.argwhere(dead)[0]) if dead.ndim else ()
        raise ValueError(
            f"`{name}` must have a finite entry in every row (a row of -inf has no token to "
            f"sample); row {idx} is all -inf"
        )
    return arr, ax


def _weights(x: NDArray, top: NDArray, temperature: float) -> NDArray:
    """``exp((x - max) / T)``: the law up to its normaliser (0 at ``-inf``; T = inf: 1)."""
    if temperature == math.inf:
        return np.where(x == -np.inf, 0.0, 1.0)
    with np.errstate(invalid="ignore"):
        return np.exp((x - top) / temperature)


def _count_at_most(rows: NDArray, bound: float | NDArray) -> NDArray[np.int64]:
    """How many entries of each sorted row are ``<= bound`` (a binary search per long row)."""
    if rows.shape[-1] < _SEARCH_FROM:
        return np.sum(rows <= np.asarray(bound)[..., None], axis=-1)
    flat = rows.reshape(-1, rows.shape[-1])
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), rows.shape[:-1]).reshape(-1)
    out = np.fromiter(
        (np.searchsorted(r, x, side="right") for r, x in zip(flat, b)), np.int64, len(b)
    )
    return out.reshape(rows.shape[:-1])


def _count_below(rows: NDArray, bound: NDArray) -> NDArray[np.int64]:
    """How many entries of each sorted row are ``< bound`` (a binary search per long row)."""
    if rows.shape[-1] < _SEARCH_FROM:
        return np.sum(rows < np.asarray(bound)[..., None], axis=-1)
    flat = rows.reshape(-1, rows.shape[-1])
    b = np.broadcast_to(bound, rows.shape[:-1]).reshape(-1)
    out = np.fromiter(
        (np.searchsorted(r, x, side="left") for r, x in zip(flat, b)), np.int64, len(b)
    )
    return out.reshape(rows.shape[:-1])


def removed_prefix(
    srt: NDArray,
    e: NDArray,
    s: Settings,
    base: NDArray | None = None,
    total: NDArray | None = None,
    band: float = 0.0,
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """How many tokens, in ascending sorted order, the engine removes (one row per row).

    ``srt`` are the sorted logits, ``e`` their weights ``exp((srt - max)/T)``. Every
    filter removes a prefix of the sorted order: top-k below the ``k``-th value,
    top-p where the ascending cumulative mass is ``<= 1 - top_p``, min-p where the
    weight (``p / max p``) is below ``min_p``; the kept set is what lies past the
    longest prefix. ``min_tokens_to_keep`` caps the prefixes of top-p and min-p (and
    raises ``k``), as transformers does.

    ``srt`` may be a row's candidates only (the tokens a cheaper first step could not
    rule out). When top-p comes first, ``base`` is then the mass of the row's other
    tokens and ``total`` the whole row's mass: the cumulative sum is
    ``(base + cumsum) / total``. The second result flags the rows where a cumulative
    sum lies within ``band`` of the cut (float64 rounding): there the caller decides
    on the full sorted row.
    """
    size = srt.shape[-1]
    cut = np.zeros(srt.shape[:-1], dtype=np.int64)
    near = np.zeros(srt.shape[:-1], dtype=bool)
    keep = s.min_tokens_to_keep

    def top_k(cut):
        k = min(max(s.top_k, keep), size)
        return np.maximum(cut, _count_below(srt, srt[..., size - k]))

    def top_p(cut):
        nonlocal near
        w = np.where(np.arange(size) >= cut[..., None], e, 0.0) if np.any(cut) else e
        csum = np.cumsum(w, axis=-1)
        if base is None:
            csum /= csum[..., -1:]
        else:
            csum += base[..., None]
            csum /= total[..., None]
            near = np.any(np.abs(csum - (1.0 - s.top_p)) <= band, axis=-1)
        drop = np.minimum(_count_at_most(csum, 1.0 - s.top_p), size - keep)
        return np.maximum(cut, drop)

    def min_p(cut):
        drop = np.minimum(_count_below(e, np.full(e.shape[:-1], s.min_p)), size - keep)
        return np.maximum(cut, drop)

    steps = {"top_k": top_k, "top_p": top_p, "min_p": min_p}
    for name in active_filters(s):
        cut = steps[name](cut)
    return cut, near


def active_filters(s: Settings) -> tuple[str, ...]:
    """The filters that change something, in the engine's order."""
    names = (
        ("top_k", "top_p", "min_p") if s.order == "transformers" else ("min_p", "top_k", "top_p")
    )
    off = {
        "top_k": s.top_k is None,
        "top_p": s.top_p is None or s.top_p == 1.0,
        "min_p": s.min_p is None or s.min_p == 0,
    }
    return tuple(n for n in names if not off[n])


def law_sorted(
    arr: NDArray,
    s: Settings,
    base: NDArray | None = None,
    total: NDArray | None = None,
    band: float = 0.0,
    normalise: bool = True,
) -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    """The law by one full sort per row (``base``, ``total``, ``band``: :func:`removed_prefix`;
    ``normalise=False``: the kept weights, not yet divided by their sum)."""
    top = np.max(arr, axis=-1, keepdims=True)
    srt = np.sort(arr, axis=-1)  # the one sort per row; its order is the logits' order
    needs_mass = s.top_p is not None or s.min_p is not None
    e = _weights(srt, top, s.temperature) if needs_mass else srt
    cut, near = removed_prefix(srt, e, s, base, total, band)
    t = np.take_along_axis(srt, cut[..., None], axis=-1)
    # tokens tied with the smallest kept value t and removed: the lowest indices
    before = np.take_along_axis(srt, np.maximum(cut - 1, 0)[..., None], axis=-1)[..., 0]
    split = (cut > 0) & (before == t[..., 0])
    tied_out = np.zeros(cut.shape, dtype=np.int64)
    if np.any(split):
        tied_out = np.where(split, cut - _count_below(srt, t[..., 0]), 0)
    kept = arr >= t
    if np.any(tied_out > 0):
        tie = arr == t
        rank = np.cumsum(tie, axis=-1)
        kept &= ~(tie & (rank <= tied_out[..., None]))
    # the law on the kept tokens only (usually few: one exp per kept token)
    w = np.zeros(arr.shape, dtype=np.float64)
    tops = np.broadcast_to(top, arr.shape)[kept]
    w[kept] = _weights(arr[kept], tops, s.temperature)
    if not normalise:
        return w, near
    return w / np.sum(w, axis=-1, keepdims=True), near


def _candidates(rows: NDArray, mask: NDArray) -> tuple[NDArray, NDArray]:
    """Each row's tokens under ``mask``, in index order, packed left (``-inf`` padding),
    and their flat positions in ``rows`` (``-1`` at the padding)."""
    n, size = rows.shape
    idx = np.flatnonzero(mask)
    r = idx // size
    counts = np.bincount(r, minlength=n)
    starts = np.cumsum(counts) - counts
    pos = np.arange(idx.size) - np.repeat(starts, counts)
    width = max(int(counts.max(initial=0)), 1)
    sub = np.full((n, width), -np.inf)
    sub[r, pos] = rows.reshape(-1)[idx]
    where = np.full((n, width), -1, dtype=np.int64)
    where[r, pos] = idx
    return sub, where


def _scatter(sub_w: NDArray, where: NDArray, shape) -> NDArray:
    """The candidates' weights put back at their flat positions ``where`` and normalised
    in their rows (the sum over the whole row, zeros included, is the one the full sort
    forms: the same bits)."""
    k = np.flatnonzero(sub_w > 0)  # the kept candidates only (padding has weight 0)
    idx, vals, rr = where.reshape(-1)[k], sub_w.reshape(-1)[k], k // sub_w.shape[-1]
    out = np.zeros(shape, dtype=np.float64)
    flat = out.reshape(-1)
    flat[idx] = vals
    flat[idx] = vals / np.sum(out, axis=-1)[rr]
    return out


def _first_filter_mask(rows: NDArray, s: Settings, first: str) -> NDArray:
    """Tokens the first filter may keep (a superset of what it keeps; every other token
    it removes for certain), from one partition (top-k) or one comparison (min-p)."""
    size = rows.shape[-1]
    if first == "top_k":
        k = min(max(s.top_k, s.min_tokens_to_keep), size)
        # a guess from every `step`-th logit: a value with some 4k logits above it; where
        # fewer than k lie above (or far more), the k-th largest itself (a partition)
        step = max(size // 2048, 1)
        sample = rows[:, ::step]
        j = min(sample.shape[1], 4 * (-(-k // step)) + 8)
        lo = np.partition(sample, sample.shape[1] - j, axis=-1)[:, sample.shape[1] - j]
        mask = rows >= lo[:, None]
        count = np.count_nonzero(mask, axis=-1)
        bad = (count < k) | (count > max(size // 8, 64 * k))
        if np.any(bad):
            sub = rows[bad]
            kth = np.partition(sub, size - k, axis=-1)[:, size - k]
            mask[bad] = sub >= kth[:, None]  # exactly top-k's kept set (ties included)
        return mask  # holds every logit >= the k-th largest: top-k is decided on it
    # min-p keeps exp((x - top)/T) >= min_p, i.e. x >= top + T log(min_p) up to the rounding
    # of the subtraction, division and exp: widen by far more than that, decide exactly later
    top = np.max(rows, axis=-1)
    t, lg = s.temperature, math.log(s.min_p)
    lo = top + t * lg
    lo -= 1e-9 * (np.abs(top) + t * abs(lg) + t)
    return rows >= lo[:, None]


def _row_mass(rows: NDArray, top: NDArray, temperature: float) -> NDArray[np.float64]:
    """``sum exp((x - top) / T)`` per row, a block of rows at a time in one reused buffer."""
    n, size = rows.shape
    step = max(1, (1 << 17) // size)
    buf = np.empty((min(step, n), size))
    total = np.empty(n)
    with np.errstate(invalid="ignore"):
        for i in range(0, n, step):
            b = buf[: min(step, n - i)]
            np.subtract(rows[i : i + step], top[i : i + step], out=b)
            if temperature != 1.0:
                b /= temperature
            total[i : i + step] = np.sum(np.exp(b, out=b), axis=-1)
    return total


def _law_top_p_first(rows: NDArray, s: Settings, start: int) -> NDArray[np.float64]:
    """Rows whose first filter is top-p: candidates by mass, the cut decided on them.

    The ``m`` largest logits (one ``argpartition``) are the candidates; the mass of the
    rest is ``base``. Their cut is exact when the rest lies below it with room to spare
    (else: more candidates), no cumulative sum lies within rounding of it and no
    candidate tied with the ``m``-th largest is kept (a tie may continue outside the
    candidates): else the full sort decides.
    """
    n, size = rows.shape
    m = min(size, max(start, s.min_tokens_to_keep))
    if m >= size:
        return law_sorted(rows, s)[0]
    cols = np.sort(np.argpartition(rows, size - m, axis=-1)[:, size - m :], axis=-1)
    sub = np.take_along_axis(rows, cols, axis=-1)  # the candidates, in index order
    kth = np.min(sub, axis=-1)
    top = np.max(sub, axis=-1, keepdims=True)
    # the row's mass (only to decide which tokens need looking at: the cut itself is
    # decided by the candidates' cumulative sums, or by the full sort within rounding)
    total = _row_mass(rows, top, s.temperature)
    inside = np.sum(_weights(sub, top, s.temperature), axis=-1)
    base = np.maximum(total - inside, 0.0)
    band = _TOP_P_BAND * (size + 16) * _ULP_SCALE
    sub_w, near = law_sorted(sub, s, base, total, band, normalise=False)
    near |= np.any((sub == kth[:, None]) & (sub_w > 0), axis=-1)
    out = _scatter(sub_w, cols + (np.arange(n) * size)[:, None], rows.shape)
    short = base / total > (1.0 - s.top_p) - band
    retry = short & (m < size)
    if np.any(retry):  # the candidates hold too little mass: more of them
        out[retry] = _law_top_p_first(rows[retry], s, 8 * m)
    exact = near & ~retry
    if np.any(exact):  # a cumulative sum within rounding of the cut: the full sort decides
        out[exact] = law_sorted(rows[exact], s)[0]
    return out


def law_last(arr: NDArray, s: Settings) -> NDArray[np.float64]:
    """The sampler's law of validated float64 logits, probability axis last.

    The same law (bit for bit) as one sort of every row, at a fraction of its cost on
    long rows: the first filter picks candidates without a sort (top-k: a partition;
    min-p: a comparison; top-p: a partition by mass), then the candidates alone are
    sorted and every filter is applied to them in the engine's order.
    """
    if s.greedy:
        out = np.zeros(arr.shape, dtype=np.float64)
        np.put_along_axis(out, np.argmax(arr, axis=-1)[..., None], 1.0, axis=-1)
        return out
    names = active_filters(s)
    if not names:
        top = np.max(arr, axis=-1, keepdims=True)
        w = _weights(arr, top, s.temperature)
        return w / np.sum(w, axis=-1, keepdims=True)
    size = arr.shape[-1]
    if size < _FAST_FROM or arr.size == 0 or s.temperature == math.inf:
        return law_sorted(arr, s)[0]
    rows = arr.reshape(-1, size)
    first = names[0]
    if first == "top_p":
        out = _law_top_p_first(rows, s, max(_TOP_P_START, size // 20))
    else:
        sub, where = _candidates(rows, _first_filter_mask(rows, s, first))
        out = _scatter(law_sorted(sub, s, normalise=False)[0], where, rows.shape)
        if first == "min_p":  # min_tokens_to_keep reaches below the candidates: sort all
            few = np.count_nonzero(where >= 0, axis=-1) < s.min_tokens_to_keep
            if np.any(few):
                out[few] = law_sorted(rows[few], s)[0]
    return out.reshape(arr.shape)


def sampler_law(
    logits: ArrayLike,
    *,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    order: str = "transformers",
    min_tokens_to_keep: int = 1,
    defaults: Any = None,
    axis: int = -1,
) -> NDArray[np.floating]:
    r"""The exact distribution an inference engine samples the next token from.

    .. math::

        s(x) = \frac{\mathbb{1}[x \in K]\, e^{\ell_x / T}}{\sum_{y \in K} e^{\ell_y / T}},
        \qquad K = K_{\text{top-k}} \cap K_{\text{top-p}} \cap K_{\text{min-p}}

    where each kept set is computed on the law left by the filters before it, in
    the engine's order (transformers: temperature, top-k, top-p, min-p; vLLM:
    temperature, min-p, top-k, top-p). Top-k keeps the tokens whose logit is at
    least the ``k``-th largest; top-p the smallest top set of mass ``>= top_p``;
    min-p the tokens with :math:`p_x \ge \text{min\_p} \cdot \max_y p_y`.

    .. warning::

       The settings left unset are *off* here, but not in ``generate``: transformers
       5.25.0 fills them from its global defaults, among them ``top_k=50``
       (``transformers/generation/configuration_utils.py`` line 623), so
       ``sampler_law(logits, temperature=0.7)`` is **not** the law of
       ``model.generate(do_sample=True, temperature=0.7)``; that law is
       ``sampler_law(logits, temperature=0.7, defaults="transformers")`` (or
       ``defaults=model.generation_config``, which may set more).

    Parameters
    ----------
    logits : array_like
        Logits along ``axis`` (any shift; ``-inf`` marks a token that cannot be
        drawn, e.g. ``log`` of a zero probability). Other axes are batch rows.
    temperature : float, optional
        ``T >= 0`` (``None``: 1, or the one ``defaults`` gives); ``0`` is greedy decoding (all mass on the first maximal logit,
        as ``argmax`` picks it; filters are then ignored, as the engines do).
        With ``order="vllm"`` every ``T < 1e-5`` is greedy. ``inf`` is the limit
        ``T -> inf``: uniform over the kept set, which is chosen by the order of
        the logits as at any finite ``T``.
    top_k : int, optional
        Keep the ``top_k`` largest logits (ties with the ``top_k``-th all kept).
        ``None`` (default) keeps all (or takes ``defaults``' value); ``0`` is off, as
        in transformers (``generation/utils.py`` line 1626 appends no
        ``TopKLogitsWarper`` for ``top_k == 0``) and vLLM.
    top_p : float, optional
        Nucleus mass in ``(0, 1]``; ``None`` or ``1`` keeps all.
    min_p : float, optional
        In ``[0, 1]``; ``None`` or ``0`` keeps all.
    order : {"transformers", "vllm"}
        Whose processing order (see the module notes for what differs).
    min_tokens_to_keep : int, optional
        The least number of tokens each filter keeps, as transformers'
        ``min_tokens_to_keep`` (1; ``generate`` uses 2 for beam
        sampling). Must be 1 with ``order="vllm"``.
    defaults : str, mapping or GenerationConfig-like, optional
        Where the settings left ``None`` come from: ``None`` (default: they are
        off), ``"transformers"`` (transformers 5.25.0's global defaults,
        :data:`ENGINE_DEFAULTS`: ``top_k=50``), or a ``transformers.GenerationConfig``
        (any object with attributes ``temperature``, ``top_k``, ``top_p``,
        ``min_p``; read by attribute, transformers is not imported) or a mapping
        such as a ``generation_config.json``; its ``None`` or missing entries take
        transformers' global defaults, as ``generate`` fills them. Explicit
        arguments override it. ``do_sample`` and ``num_beams`` are not read (this is
        the law of sampling; pass ``min_tokens_to_keep`` for beam sampling).
    axis : int, optional
        The vocabulary axis.

    Returns
    -------
    ndarray
        The law ``s``, same shape as ``logits``; rows sum to one, tokens at
        ``-inf`` and removed tokens are exactly zero. float32 in, float32 out.

    Raises
    ------
    ValueError
        For logits with NaN or ``+inf`` or a row of only ``-inf``; ``temperature``
        negative or NaN; ``top_k < 0``; ``top_p`` outside ``(0, 1]``; ``min_p``
        outside ``[0, 1]``; an unknown ``order``; ``min_tokens_to_keep < 1`` (or
        not 1 with vLLM's order); ``defaults`` of another kind, or a value it
        gives that is out of range (named ``defaults['top_k']`` etc.).

    Notes
    -----
    Every filter removes a prefix of the ascending order of the logits
    (temperature ``T > 0`` does not change that order), so sorted logits and one
    cumulative sum decide the kept set. Long rows (1024 tokens and more) are not
    sorted whole: the first filter picks candidates (top-k: a sampled threshold or a
    partition; min-p: one comparison; top-p: an ``argpartition`` and the row's
    mass), only those are sorted, and the result is the one-sort law bit for bit
    (top-p rows whose cut lies within float64 rounding of a cumulative sum are
    sorted whole). The law is read off in the original order. Tokens tied at the top-p boundary are split by index
    (lower index removed first), as a stable sort orders them. Computed in
    float64 from the logits shifted by their row maximum.

    As ``T -> 0+`` the law tends to the uniform law on the maximal logits, which
    is the greedy law when the maximum is unique; engines' greedy ``argmax``
    takes the first maximal index, and so does ``temperature=0`` here.

    References
    ----------
    .. [1] Holtzman et al., "The Curious Case of Neural Text Degeneration", 2020,
       arXiv:1904.09751 (top-p).
    .. [2] Fan et al., "Hierarchical Neural Story Generation", 2018,
       arXiv:1805.04833 (top-k).
    .. [3] Nguyen et al., "Turning Up the Heat: Min-p Sampling for Creative and
       Coherent LLM Outputs", 2024, arXiv:2407.01082.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.sampling import sampler_law
    >>> logits = np.log([0.5, 0.3, 0.15, 0.05])
    >>> sampler_law(logits, top_k=2).round(4)
    array([0.625, 0.375, 0.   , 0.   ])
    >>> sampler_law(logits, top_p=0.75).round(4)
    array([0.625, 0.375, 0.   , 0.   ])
    >>> sampler_law(logits, temperature=0)
    array([1., 0., 0., 0.])

    ``generate(do_sample=True)`` keeps 50 tokens unless told otherwise:

    >>> big = np.linspace(0.0, 6.0, 100)
    >>> int(np.count_nonzero(sampler_law(big, temperature=0.7)))
    100
    >>> int(np.count_nonzero(sampler_law(big, temperature=0.7, defaults="transformers")))
    50
    >>> int(np.count_nonzero(sampler_law(big, top_k=0, defaults="transformers")))
    100

    min-p after top-p (transformers) or before it (vLLM):

    >>> logits = np.log([0.48, 0.22, 0.2, 0.1])
    >>> sampler_law(logits, top_p=0.5, min_p=0.25).round(4)
    array([0.6857, 0.3143, 0.    , 0.    ])
    >>> sampler_law(logits, top_p=0.5, min_p=0.25, order="vllm")
    array([1., 0., 0., 0.])
    """
    s = settings(temperature, top_k, top_p, min_p, order, min_tokens_to_keep, defaults)
    arr, ax = as_logits("logits", logits, axis)
    out = law_last(arr.astype(np.float64, copy=False), s)
    return np.moveaxis(out.astype(arr.dtype, copy=False), -1, ax)


class CutSensitivity(NamedTuple):
    """Result of :func:`cut_sensitivity` (see there for the meaning of each field)."""

    law: NDArray
    fewer: NDArray
    more: NDArray
    reversed_ties: NDArray
    moved: NDArray
    tie_moved: NDArray
    kept: NDArray
    kept_range: NDArray


def _tv(a: NDArray, b: NDArray) -> NDArray:
    """Total variation of two laws of the same logits: 0 when they keep the same tokens
    (the same law; summed in another order it may differ in the last bit)."""
    same = np.all((a > 0) == (b > 0), axis=-1)
    return np.where(same, 0.0, 0.5 * np.sum(np.abs(a - b), axis=-1))


def cut_sensitivity(
    logits: ArrayLike,
    *,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    order: str = "transformers",
    min_tokens_to_keep: int = 1,
    defaults: Any = None,
    tolerance: float | None = None,
    axis: int = -1,
) -> CutSensitivity:
    r"""How much of the sampler's law hangs on rounding at the top-p and min-p cuts.

    .. math::

        \text{moved} = \max\big(\mathrm{TV}(s, s_-), \mathrm{TV}(s, s_+)\big), \qquad
        \text{tie\_moved} = \mathrm{TV}(s, s_\leftrightarrow)

    where :math:`s` is :func:`sampler_law`, :math:`s_-` the law with top-p's cut
    raised by ``tolerance`` (``1 - top_p + tol``) and min-p's threshold by the factor
    ``1 + tol`` (every token within rounding of a cut removed), :math:`s_+` with both
    lowered (every such token kept), and :math:`s_\leftrightarrow` the law with the
    tokens tied at top-p's cut split the other way (highest index removed first).

    Parameters
    ----------
    logits, temperature, top_k, top_p, min_p, order, min_tokens_to_keep, defaults, axis
        As in :func:`sampler_law`.
    tolerance : float, optional
        How far from a cut a comparison may land by rounding, on the cumulative mass
        (top-p) and relatively on ``p / max p`` (min-p), in ``[0, 1)``. ``None``
        (default): ``(V + 8) * 2**-24``, the worst-case error of a float32 softmax
        and cumulative sum over ``V`` tokens (what the engines compute).

    Returns
    -------
    CutSensitivity
        ``law``, ``fewer``, ``more``, ``reversed_ties``: the four laws above (same
        shape as ``logits``); ``moved``: per row, the larger total variation between
        ``law`` and ``fewer`` or ``more`` (0: no comparison lands within ``tolerance``
        of a cut); ``tie_moved``: per row, the total variation between ``law`` and
        ``reversed_ties`` (0: the cut splits no tie; where both are 0 every engine
        that rounds within the tolerance samples this very law); ``kept``: per row, the number of tokens ``law`` keeps;
        ``kept_range``: shape ``(..., 2)``, the fewest and most tokens kept within
        the tolerance.

    Raises
    ------
    ValueError
        As :func:`sampler_law`, and for ``tolerance`` outside ``[0, 1)``.

    Notes
    -----
    On exactly tied rows top-p's ascending cumulative sum can land on ``1 - top_p``
    itself (four equal logits and ``top_p = 0.5``: the sums are 0.25, 0.5, ...).
    Then ``<=`` in exact arithmetic removes the token, float32 or float64 rounding
    may keep it, and an unstable ``torch.sort`` decides *which* of the tied tokens
    go: engines and this module can keep different tied blocks. One token more or
    less of a tied block of ``m`` kept tokens moves :math:`1/(m+1)` of the mass (how
    often and how much against transformers' ``TopPLogitsWarper``:
    ``docs/derivations/sampling.md``). Top-k compares logits, not sums: it keeps
    every tie and has no such cut.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.sampling import cut_sensitivity
    >>> res = cut_sensitivity(np.zeros(4), top_p=0.5)
    >>> res.law, res.more.round(4)
    (array([0. , 0. , 0.5, 0.5]), array([0.    , 0.3333, 0.3333, 0.3333]))
    >>> round(float(res.moved), 4), float(res.tie_moved), res.kept_range.tolist()
    (0.3333, 1.0, [2, 3])
    >>> res = cut_sensitivity(np.log([0.5, 0.3, 0.2]), top_p=0.6)
    >>> float(res.moved), float(res.tie_moved)
    (0.0, 0.0)
    """
    s = settings(temperature, top_k, top_p, min_p, order, min_tokens_to_keep, defaults)
    arr, ax = as_logits("logits", logits, axis)
    size = arr.shape[-1]
    tol = (
        (size + 8) * 2.0**-24
        if tolerance is None
        else V.as_scalar("tolerance", tolerance, "[0, 1)")
    )
    x = arr.astype(np.float64, copy=False)
    law = law_last(x, s)
    fewer_s, more_s = s, s
    if s.top_p is not None and s.top_p < 1.0:
        fewer_s = fewer_s._replace(top_p=max(s.top_p - tol, 5e-324))
        more_s = more_s._replace(top_p=min(s.top_p + tol, 1.0))
    if s.min_p is not None and s.min_p > 0:
        fewer_s = fewer_s._replace(min_p=min(s.min_p * (1 + tol), 1.0))
        more_s = more_s._replace(min_p=s.min_p * (1 - tol))
    fewer, more = law_last(x, fewer_s), law_last(x, more_s)
    flipped = law_last(x[..., ::-1], s)[..., ::-1]
    moved = np.maximum(_tv(law, fewer), _tv(law, more))
    count = np.stack([np.count_nonzero(fewer, -1), np.count_nonzero(more, -1)], axis=-1)
    dt = arr.dtype

    def back(a):
        return np.moveaxis(a.astype(dt, copy=False), -1, ax)

    return CutSensitivity(
        law=back(law),
        fewer=back(fewer),
        more=back(more),
        reversed_ties=back(flipped),
        moved=moved.astype(dt)[()],
        tie_moved=_tv(law, flipped).astype(dt)[()],
        kept=np.count_nonzero(law, -1)[()],
        kept_range=count,
    )
