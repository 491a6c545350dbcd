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
        "`ref` must be an array of real numbers; got dtype <U1 (strings)",
    ),
    (
        kp.optimal_policy,
        ([True, False], R, 1.0),
        {},
        "`ref` must be an array of real numbers; got dtype bool (bools)",
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
    (
        kp.beta_for_kl,
        (H, R, np.nan),
        {},
        "`kl` must be a finite non-negative number of nats; got nan",
    ),
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


@pytest.mark.slow
def test_import_klpolicy_loads_no_optional_dependency():
    code = (
        "import sys, klpolicy;"
        "bad = [m for m in ('torch', 'matplotlib', 'hypothesis') if m in sys.modules];"
        "print(','.join(bad)); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, f"import klpolicy imported {out.stdout.strip()}"


# ------------------------- generic checkers: sums, scalars, counts, one meaning of a budget

from klpolicy.core.internal import validation as V  # noqa: E402


def test_a_sum_just_outside_tolerance_shows_its_digits():
    ref = [0.5, 0.5 + 2e-8]  # about 1.00000002: 6 significant digits would print "1"
    with pytest.raises(ValueError) as exc:
        kp.optimal_policy(ref, R, 1.0)
    assert str(exc.value) == (
        "`ref` must sum to 1 along axis -1; it sums to 1.0000000199999999 (tolerance 1.5e-08)"
        + NEVER
    )
    assert 0.5 + (0.5 + 2e-8) == 1.0000000199999999  # the digits printed are the sum's
    # a sum far from 1 keeps the short form
    with pytest.raises(ValueError, match=r"it sums to 1.1 \(tolerance"):
        kp.optimal_policy([0.5, 0.6], R, 1.0)


@pytest.mark.parametrize(
    ("interval", "good", "bad"),
    [
        ("(0, inf)", [1e-300, 5e-324, 1.0, 1e308], [0.0, -1.0, np.inf, np.nan]),
        ("(0, inf]", [5e-324, np.inf], [0.0, -5e-324, np.nan, -np.inf]),
        ("[0, inf)", [0.0, 1.0], [-5e-324, np.inf, np.nan]),
        ("[0, 1)", [0.0, 0.999], [1.0, -0.1, np.nan]),
        ("(1, inf)", [1.5], [1.0, 0.5, np.inf]),
        ("[0, 0.5]", [0.0, 0.5], [0.51, -0.0001]),
    ],
)
def test_as_scalar_holds_the_interval(interval, good, bad):
    for x in good:
        assert V.as_scalar("lam", x, interval) == x
        assert V.as_scalar("lam", np.float64(x), interval) == x
        assert V.as_scalar("lam", np.asarray(x), interval) == x
    for x in bad:
        with pytest.raises(ValueError, match=r"^`lam` must be .*; got "):
            V.as_scalar("lam", x, interval)


@pytest.mark.parametrize(
    ("x", "shown"),
    [
        (True, "True"),
        (1 + 0j, "(1+0j)"),
        ("0.5", "'0.5'"),
        (None, "None"),
        ([1.0, 2.0], "[1.0, 2.0]"),
        (np.array([1.0, 2.0]), "a single number; got an array of shape (2,)"),
    ],
)
def test_as_scalar_refuses_what_is_not_one_real_number(x, shown):
    with pytest.raises(ValueError) as exc:
        V.as_scalar("beta", x, "(0, inf)")
    assert str(exc.value).startswith("`beta` must be a positive finite number")
    assert str(exc.value).endswith(shown), str(exc.value)


def test_as_count_is_bounded_so_huge_counts_fail_at_once():
    assert V.as_count("steps", 3) == 3
    assert V.as_count("steps", 4.0) == 4
    assert V.as_count("steps", np.int64(7)) == 7
    assert V.as_count("seed", 0, lo=0) == 0
    with pytest.raises(ValueError, match=r"^`steps` must be at most 100,000,000 \(a loop"):
        V.as_count("steps", 2**63)
    with pytest.raises(ValueError, match=r"^`n` must be at most 2\*\*53 to be held exactly"):
        V.as_count("n", 2**53 + 1, hi=V.MAX_EXACT_COUNT)
    for bad, shown in [(0, "0"), (1.5, "1.5"), (True, "True"), ("3", "'3'"), (np.nan, "nan")]:
        with pytest.raises(ValueError, match=rf"^`steps` must be an integer >= 1; got {shown}$"):
            V.as_count("steps", bad)


def test_one_meaning_of_a_kl_budget():
    ref, reward = [0.5, 0.3, 0.2], [1.0, 0.0, -1.0]
    finite_only = [
        lambda kl: kp.beta_for_kl(ref, reward, kl),
        lambda kl: kp.best_of_n.best_of_n_for_kl(ref, reward, kl),
        lambda kl: kp.trust_region.trust_region_beta(ref, reward, kl),
    ]
    inf_is_no_budget = [
        lambda kl: kp.sequences.reward_ceiling(ref, reward, kl).expected_reward,
        lambda kl: kp.retention.worst_case_drop(ref, reward, kl),
    ]
    for f in finite_only + inf_is_no_budget:
        for bad in (np.nan, -0.1, -5e-324):
            with pytest.raises(
                ValueError, match=r"must be a (finite )?non-negative number of nats"
            ):
                f(bad)
    for f in finite_only:
        with pytest.raises(
            ValueError, match=r"must be a finite non-negative number of nats; got inf"
        ):
            f(np.inf)
    # inf is the unconstrained limit where it is accepted: the same as any budget above max_kl
    big = 10 * float(kp.max_kl(ref, reward))
    for f in inf_is_no_budget:
        assert float(f(np.inf)) == float(f(big))


def test_log_probs_checker_with_a_mask():
    keep = np.array([[True, False]])
    # padding (masked) may hold anything; kept sampled tokens must be finite and <= 0
    out = V.as_log_probs("lp", [[-0.5, np.nan]], keep=keep, allow_neg_inf=False, at_most_zero=True)
    assert out[0, 0] == -0.5
    with pytest.raises(ValueError, match=r"^`lp` must be finite at sampled tokens"):
        V.as_log_probs("lp", [[-np.inf, 0.0]], keep=keep, allow_neg_inf=False, at_most_zero=True)
    with pytest.raises(ValueError, match=r"^`lp` must hold log-probabilities \(<= 0\); found 0.5"):
        V.as_log_probs("lp", [[0.5, 0.0]], keep=keep, allow_neg_inf=False, at_most_zero=True)
    # without a mask, log-densities may be positive
    assert V.as_log_probs("logp", [0.5, 1.0], allow_neg_inf=False)[1] == 1.0


def test_ragged_and_non_numeric_arrays_are_refused_by_name():
    for bad, words in [
        ([[0.5, 0.5], [1.0]], "`ref` must be a rectangular array of real numbers; got a ragged"),
        (None, "`ref` must be an array of real numbers; got None"),
        ("abc", "`ref` must be an array of real numbers; got 'abc'"),
        ([0.5 + 1j, 0.5], "`ref` must be an array of real numbers; got dtype complex128"),
        ([object(), object()], "`ref` must be an array of real numbers; got dtype object"),
    ]:
        with pytest.raises(ValueError) as exc:
            kp.optimal_policy(bad, R, 1.0)
        assert str(exc.value).startswith(words), str(exc.value)
