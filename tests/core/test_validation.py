"""Every public function of the core refuses bad input with the exact message below."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import klpolicy as kp

H = [0.5, 0.5]
R = [1.0, 0.0]
NEVER = "; klpolicy never renormalises silently"

BAD = [
    (
        kp.optimal_policy,
        ([0.5, -0.5, 1.0], [1, 0, 0], 1.0),
        {},
        "`ref` must be non-negative; found -0.5 at index (1,)",
    ),
    (
        kp.optimal_policy,
        ([[0.5, 0.5], [1.2, -0.2]], R, 1.0),
        {},
        "`ref` must be non-negative; found -0.2 at index (1, 1)",
    ),
    (
        kp.optimal_policy,
        ([0.5, np.nan], R, 1.0),
        {},
        "`ref` must not contain NaN; found nan at index (1,)",
    ),
    (
        kp.optimal_policy,
        ([0.5, np.inf], R, 1.0),
        {},
        "`ref` must be finite; found inf at index (1,)",
    ),
    (
        kp.optimal_policy,
        ([0.5, 0.6], R, 1.0),
        {},
        "`ref` must sum to 1 along axis -1; it sums to 1.1 (tolerance 1.5e-08)" + NEVER,
    ),
    (
        kp.optimal_policy,
        ([H, [0.5, 0.6]], R, 1.0),
        {},
        "`ref` must sum to 1 along axis -1; row (1,) sums to 1.1 (tolerance 1.5e-08)" + NEVER,
    ),
    (
        kp.optimal_policy,
        (H, [1, np.nan], 1.0),
        {},
        "`reward` must be finite; found nan at index (1,)",
    ),
    (
        kp.optimal_policy,
        (H, [1, -np.inf], 1.0),
        {},
        "`reward` must be finite; found -inf at index (1,)",
    ),
    (kp.optimal_policy, (H, R, -1.0), {}, "`beta` must be non-negative; found -1"),
    (kp.optimal_policy, (H, R, np.nan), {}, "`beta` must not be NaN; found nan"),
    (
        kp.optimal_policy,
        (H, R, [[0.5], [np.nan]]),
        {},
        "`beta` must not be NaN; found nan at index (1, 0)",
    ),
    (
        kp.optimal_policy,
        (H, [1, 0, 2], 1.0),
        {},
        "`reward` must have the same size as `ref` along the probability axis; got 3 and 2",
    ),
    (
        kp.optimal_policy,
        (H, R, [1.0, 2.0]),
        {},
        "`beta` must have size 1 along the probability axis (one beta per row); got shape (2,)",
    ),
    (
        kp.optimal_policy,
        ([H] * 3, [R] * 2, 1.0),
        {},
        "the batch shapes of `ref` (3,) and `reward` (2,) do not broadcast",
    ),
    (
        kp.optimal_policy,
        (H, R, 1.0),
        {"axis": 2},
        "`axis` 2 is out of bounds for `ref` with 1 dimension",
    ),
    (kp.optimal_policy, ([], [], 1.0), {}, "`ref` must not be empty; got shape (0,)"),
    (
        kp.optimal_policy,
        (0.5, 1, 1.0),
        {},
        "`ref` must have at least one dimension; got a scalar 0.5",
    ),
    (
        kp.optimal_policy,
        (["a", "b"], R, 1.0),
        {},
        "`ref` must be an array of real numbers; got dtype <U1",
    ),
    (
        kp.optimal_policy,
        ([True, False], R, 1.0),
        {},
        "`ref` must be an array of real numbers; got dtype bool",
    ),
    (kp.soft_value, (H, R, -2), {}, "`beta` must be non-negative; found -2"),
    (
        kp.soft_value,
        ([0.5, 0.6], R, 1.0),
        {},
        "`ref` must sum to 1 along axis -1; it sums to 1.1 (tolerance 1.5e-08)" + NEVER,
    ),
    (kp.optimal_kl, (H, R, -3), {}, "`beta` must be non-negative; found -3"),
    (
        kp.max_kl,
        (H, [1, 0, 3]),
        {},
        "`reward` must have the same size as `ref` along the probability axis; got 3 and 2",
    ),
    (
        kp.kl_divergence,
        (H, [0.3, 0.3]),
        {},
        "`q` must sum to 1 along axis -1; it sums to 0.6 (tolerance 1.5e-08)" + NEVER,
    ),
    (
        kp.kl_divergence,
        (H, [0.3, 0.3, 0.4]),
        {},
        "`q` must have the same size as `p` along the probability axis; got 3 and 2",
    ),
    (kp.kl_divergence, ([-0.5, 1.5], H), {}, "`p` must be non-negative; found -0.5 at index (0,)"),
    (
        kp.total_variation,
        (H, [1.5, -0.5]),
        {},
        "`q` must be non-negative; found -0.5 at index (1,)",
    ),
    (
        kp.beta_for_kl,
        (H, R, -0.1),
        {},
        "`kl` must be a finite non-negative number of nats; got -0.1",
    ),
    (kp.beta_for_kl, (H, R, np.nan), {}, "`kl` must not be NaN"),
    (
        kp.beta_for_kl,
        (H, R, np.inf),
        {},
        "`kl` must be a finite non-negative number of nats; got inf",
    ),
    (
        kp.beta_for_kl,
        (H, R, 2.0),
        {},
        "`kl` = 2 is above the largest KL reachable: 0.693147 nats (the greedy limit beta -> 0)",
    ),
    (kp.frontier, (H, R, [1.0, -1.0]), {}, "`betas` must be non-negative; found -1 at index (1,)"),
    (kp.frontier, (H, R, []), {}, "`betas` must not be empty; got shape (0,)"),
    (
        kp.objective,
        ([0.5, 0.6], H, R, 1.0),
        {},
        "`pi` must sum to 1 along axis -1; it sums to 1.1 (tolerance 1.5e-08)" + NEVER,
    ),
    (kp.objective, (H, H, R, -1.0), {}, "`beta` must be non-negative; found -1"),
    (kp.expected_reward, (H, [1, np.nan]), {}, "`reward` must be finite; found nan at index (1,)"),
]


@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "message"),
    BAD,
    ids=[f"{b[0].__name__}-{i}" for i, b in enumerate(BAD)],
)
def test_bad_input_gives_exact_message(fn, args, kwargs, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        fn(*args, **kwargs)


def test_float32_rows_get_a_float32_tolerance():
    ref = np.array([0.3, 0.7 + 1e-5], dtype=np.float32)  # off by 1e-5: fine in float32
    assert kp.optimal_policy(ref, np.array(R, dtype=np.float32), 1.0).dtype == np.float32
    with pytest.raises(ValueError, match=r"tolerance 0.00035"):
        kp.optimal_policy(np.array([0.3, 0.71], dtype=np.float32), R, 1.0)


def test_import_klpolicy_loads_no_optional_dependency():
    code = (
        "import sys, klpolicy;"
        "bad = [m for m in ('torch', 'matplotlib', 'hypothesis') if m in sys.modules];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, f"import klpolicy imported {out.stdout.strip()}"
