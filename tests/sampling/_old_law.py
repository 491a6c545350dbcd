"""The sampler_law implementation before issue 40's speed work (one full sort per row).

Kept verbatim (klpolicy 2026-12-04, ``klpolicy/sampling/laws.py``) so that the faster
implementation can be checked against it bit for bit on random and tied rows. It takes
the validated ``Settings`` of :mod:`klpolicy.sampling.laws` (read by attribute only).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

_SEARCH_FROM = 4096


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


def removed_prefix(srt: NDArray, e: NDArray, s) -> NDArray[np.int64]:
    """How many tokens, in ascending sorted order, the engine removes (one row per row).

    ``srt`` are the sorted logits, ``e`` their weights ``exp((srt - max)/T)``. Every
    filter removes a prefix of the sorted order: top-k below the ``k``-th value,
    top-p where the ascending cumulative mass is ``<= 1 - top_p``, min-p where the
    weight (``p / max p``) is below ``min_p``; the kept set is what lies past the
    longest prefix. ``min_tokens_to_keep`` caps the prefixes of top-p and min-p (and
    raises ``k``), as transformers does.
    """
    size = srt.shape[-1]
    cut = np.zeros(srt.shape[:-1], dtype=np.int64)
    keep = s.min_tokens_to_keep

    def top_k(cut):
        k = min(max(s.top_k, keep), size)
        return np.maximum(cut, _count_below(srt, srt[..., size - k]))

    def top_p(cut):
        w = np.where(np.arange(size) >= cut[..., None], e, 0.0) if np.any(cut) else e
        csum = np.cumsum(w, axis=-1)
        csum /= csum[..., -1:]
        drop = np.minimum(_count_at_most(csum, 1.0 - s.top_p), size - keep)
        return np.maximum(cut, drop)

    def min_p(cut):
        drop = np.minimum(_count_below(e, np.full(e.shape[:-1], s.min_p)), size - keep)
        return np.maximum(cut, drop)

    steps = {"top_k": top_k, "top_p": top_p, "min_p": min_p}
    names = (
        ("top_k", "top_p", "min_p") if s.order == "transformers" else ("min_p", "top_k", "top_p")
    )
    for name in names:
        value = getattr(s, name)
        if value is None or (name == "top_p" and value == 1.0) or (name == "min_p" and value == 0):
            continue
        cut = steps[name](cut)
    return cut


def law_last(arr: NDArray, s) -> NDArray:
    """The sampler's law of validated float64 logits, probability axis last."""
    if s.greedy:
        out = np.zeros(arr.shape, dtype=np.float64)
        np.put_along_axis(out, np.argmax(arr, axis=-1)[..., None], 1.0, axis=-1)
        return out
    top = np.max(arr, axis=-1, keepdims=True)
    filters = (
        s.top_k is not None
        or (s.top_p is not None and s.top_p < 1.0)
        or (s.min_p is not None and s.min_p > 0)
    )
    if not filters:
        w = _weights(arr, top, s.temperature)
        return w / np.sum(w, axis=-1, keepdims=True)
    srt = np.sort(arr, axis=-1)  # the one sort per row; its order is the logits' order
    needs_mass = s.top_p is not None or s.min_p is not None
    e = _weights(srt, top, s.temperature) if needs_mass else srt
    cut = removed_prefix(srt, e, s)
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
    return w / np.sum(w, axis=-1, keepdims=True)
