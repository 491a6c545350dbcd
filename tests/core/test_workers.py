"""numpy's blocked fast path on a thread pool: ``workers=`` (scipy.fft's convention).

Each thread runs the single-threaded sweep on whole cache blocks, so every result is
the same to the bit as with one thread; speed is measured by benchmarks/core_bench.py.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import klpolicy as kp
from klpolicy.core import _tilt


def _problem(rows=64, n=4096, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.ones(n), size=rows).astype(dtype)
    ref[3, :100] = 0.0  # zeros: the careful path for that row's statistics
    ref[3] /= ref[3].sum(dtype=np.float64)
    ref[40, 7] = 1e-300 if dtype == np.float64 else 1e-40
    ref[40] /= ref[40].sum(dtype=np.float64)
    reward = (rng.normal(size=(rows, n)) * 3).astype(dtype)
    beta = np.full((rows, 1), 0.5)
    beta[5], beta[50], beta[60] = 0.0, np.inf, 1e-300  # limits: careful rows in later chunks
    return ref, reward, beta


@pytest.fixture
def threads_from_one_block(monkeypatch):
    """Threads even for a small batch (by default a batch this size runs on one thread)."""
    monkeypatch.setattr(_tilt, "_MIN_BLOCKS_PER_THREAD", 1)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("workers", [2, 3, -1, 64])
def test_threads_give_the_same_bits(dtype, workers, threads_from_one_block):
    ref, reward, beta = _problem(dtype=dtype)
    assert _tilt._rows_per_block(ref.shape[1], ref.dtype.itemsize) < ref.shape[0]  # many blocks
    for fn in (kp.optimal_policy, kp.soft_value, kp.optimal_kl):
        one = fn(ref, reward, beta)
        many = fn(ref, reward, beta, workers=workers)
        assert many.dtype == one.dtype
        np.testing.assert_array_equal(many, one)


def test_invalid_values_in_a_later_chunk_give_the_same_message(threads_from_one_block):
    ref, reward, beta = _problem()
    ref[57, 9] = -0.25
    with pytest.raises(ValueError) as one:
        kp.optimal_policy(ref, reward, beta)
    with pytest.raises(ValueError) as many:
        kp.optimal_policy(ref, reward, beta, workers=-1)
    assert (
        str(many.value)
        == str(one.value)
        == ("`ref` must be non-negative; found -0.25 at index (57, 9)")
    )


def test_workers_follow_scipy_fft():
    cores = os.cpu_count() or 1
    assert _tilt.normalise_workers(None) == 1
    assert _tilt.normalise_workers(1) == 1
    assert _tilt.normalise_workers(-1) == cores
    if cores >= 2:
        assert _tilt.normalise_workers(-2) == cores - 1
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(ValueError, match="`workers` must be a non-zero integer"):
            kp.optimal_policy([0.5, 0.5], [1.0, 0.0], 1.0, workers=bad)
    with pytest.raises(ValueError, match="fewer than one thread"):
        kp.optimal_policy([0.5, 0.5], [1.0, 0.0], 1.0, workers=-(cores + 1))


def test_threads_are_chosen_from_the_size():
    """A batch below ``_MIN_BLOCKS_PER_THREAD`` blocks per thread runs on one thread (threads
    cost more than they save there); larger ones get one thread per that many blocks."""
    per = _tilt._MIN_BLOCKS_PER_THREAD
    assert per >= 2
    assert _tilt._threads(2, 1) == 1
    assert _tilt._threads(2, 2 * per - 1) == 1
    assert _tilt._threads(2, 2 * per) == 2
    assert _tilt._threads(8, 3 * per) == 3
    assert _tilt._threads(1, 100 * per) == 1
    # (16, 4096) float64, the batch of the crossover line in benchmarks/core_bench.py
    blocks = -(-16 // _tilt._rows_per_block(4096, 8))
    assert _tilt._threads(os.cpu_count() or 1, blocks) == 1
