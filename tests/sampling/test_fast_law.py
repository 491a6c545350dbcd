"""sampler_law's fast path (issue 40, item 9) gives the very law of the one-sort implementation.

The fast path picks each row's candidates without a full sort (top-k: a sampled threshold or
a partition; min-p: one comparison; top-p: a partition by mass), then sorts the candidates
only. ``tests/sampling/_old_law.py`` is the implementation before it, verbatim; the two must
agree bit for bit, ties included (transformers' rule: every tie of top-k kept, top-p's tie
split by index, lower index removed first). The fast path starts at rows of 1024; here it is
forced on short rows too, so that hypothesis-sized tied rows reach it.
"""

from __future__ import annotations

import numpy as np
import pytest

import klpolicy.sampling.laws as laws
from klpolicy.sampling import sampler_law

from . import _old_law


@pytest.fixture
def fast_everywhere(monkeypatch):
    monkeypatch.setattr(laws, "_FAST_FROM", 1)
    monkeypatch.setattr(laws, "_TOP_P_START", 2)


def _rows(rng, kind, n, size):
    if kind == "normal":
        return rng.normal(size=(n, size)) * 3
    if kind == "grid":  # many ties everywhere
        return rng.integers(-4, 4, size=(n, size)) / 2.0
    if kind == "flat":  # one big tied block at the top
        lg = np.zeros((n, size))
        lg[:, : size // 3] = rng.integers(-2, 2, size=(n, size // 3))
        return lg
    lg = rng.normal(size=(n, size)).astype(np.float32).astype(np.float64)
    lg[lg < -1.5] = -np.inf  # tokens that cannot be drawn
    lg[:, 0] = 0.0
    return lg


def _settings(rng, size):
    tk = int(rng.integers(1, size + 2))
    tp = float(rng.choice([0.05, 0.3, 0.5, 0.62, 0.75, 0.9, 0.999, 1 / 3, 2 / 3]))
    mp = float(rng.choice([0.05, 0.3, 0.5, 0.7, 1.0]))
    t = float(rng.choice([0.3, 0.7, 1.0, 1.7]))
    return [
        {"top_k": tk},
        {"top_p": tp},
        {"min_p": mp},
        {"temperature": t, "top_k": tk, "top_p": tp, "min_p": mp},
        {"temperature": t, "top_p": tp, "min_p": mp},
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_path_is_the_old_law_bit_for_bit(fast_everywhere, dtype):
    rng = np.random.default_rng(1)
    checked = 0
    for trial in range(160):
        size = int(rng.integers(2, 60)) if trial % 2 else int(rng.integers(60, 2500))
        kind = ("normal", "grid", "flat", "neg_inf")[trial % 4]
        lg = _rows(rng, kind, 3, size).astype(dtype)
        for kw in _settings(rng, size):
            for order in ("transformers", "vllm"):
                keep = 1 if order == "vllm" else int(rng.integers(1, 4))
                s = laws.settings(
                    kw.get("temperature"),
                    kw.get("top_k"),
                    kw.get("top_p"),
                    kw.get("min_p"),
                    order,
                    keep,
                )
                want = _old_law.law_last(lg.astype(np.float64), s).astype(dtype)
                got = sampler_law(lg, order=order, min_tokens_to_keep=keep, **kw)
                np.testing.assert_array_equal(got, want, err_msg=f"{kind} {size} {kw} {order}")
                checked += 1
    assert checked == 160 * 5 * 2


def test_long_rows_take_the_fast_path_and_agree():
    """At the default thresholds (rows of 1024 and more), with the retry of top-p's
    candidates (top_p = 0.999 needs more than the first 4096) and min-p's fallback."""
    rng = np.random.default_rng(5)
    lg = rng.normal(size=(4, 20000)) * 3
    lg[1] = np.round(lg[1])  # ties
    for kw in [
        {"top_k": 50},
        {"top_k": 5000},
        {"top_p": 0.9},
        {"top_p": 0.999},
        {"min_p": 0.05},
        {"min_p": 0.9, "min_tokens_to_keep": 40},
        {"temperature": 0.7, "top_k": 50, "top_p": 0.9, "min_p": 0.05},
    ]:
        for order in ("transformers", "vllm"):
            if order == "vllm" and "min_tokens_to_keep" in kw:
                continue
            s = laws.settings(
                kw.get("temperature"),
                kw.get("top_k"),
                kw.get("top_p"),
                kw.get("min_p"),
                order,
                kw.get("min_tokens_to_keep", 1),
            )
            np.testing.assert_array_equal(
                sampler_law(lg, order=order, **kw), _old_law.law_last(lg, s), err_msg=str(kw)
            )


def test_top_p_near_its_cut_is_decided_by_the_full_sort(monkeypatch):
    """A row whose cumulative sum lands on 1 - top_p (equal logits) goes to the full sort."""
    calls = []
    real = laws.law_sorted

    def spy(arr, *a, **k):
        calls.append(arr.shape)
        return real(arr, *a, **k)

    monkeypatch.setattr(laws, "law_sorted", spy)
    # 100 equal top logits hold all but ~4e-18 of the mass: top_p = 0.5 puts the cut on
    # the 50th of them, within rounding of a cumulative sum
    lg = -50.0 - 1e-3 * np.arange(20000.0)[None]
    lg[0, ::200] = 0.0
    out = sampler_law(lg, top_p=0.5)
    assert calls[0] == (1, 4096)  # the candidates first ...
    assert calls[-1] == (1, 20000)  # ... then the full row decides
    s = laws.settings(None, None, 0.5, None, "transformers", 1)
    np.testing.assert_array_equal(out, _old_law.law_last(lg, s))
    assert np.count_nonzero(out) == 50
