"""Every public callable refuses every class of bad input with an error naming the argument.

The table below lists, for each public callable of klpolicy (the ``__all__`` of
every public module), a small valid call and which of its arguments take which
*kind* of input (a probability vector, a reward vector, a coefficient, a KL
budget, a count, ...). Each kind knows its classes of bad input (NaN, +-inf,
negative, wrong sums, empty, ragged, mismatched shapes, bool/complex/str/object/
None, huge integers, subnormal and huge floats); the test replaces one argument
at a time by each of them and requires a ``ValueError`` or ``TypeError`` whose
message names that argument in backticks.

A public callable that is not in the table fails :func:`test_every_public_callable_has_a_row`
with a message telling its author to add a row: new functions are covered without
editing the logic below.
"""

from __future__ import annotations

import importlib
import inspect
import signal
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

MODULES = [
    "klpolicy",
    "klpolicy.sequences",
    "klpolicy.estimators",
    "klpolicy.control",
    "klpolicy.best_of_n",
    "klpolicy.overoptimization",
    "klpolicy.preference",
    "klpolicy.diversity",
    "klpolicy.calibration",
    "klpolicy.retention",
    "klpolicy.trust_region",
    "klpolicy.sampling",
    "klpolicy.dynamics",
]
try:
    import matplotlib

    matplotlib.use("Agg")
    MODULES.append("klpolicy.plotting")
except ImportError:  # pragma: no cover - the plot extra is optional
    pass
try:
    import torch  # noqa: F401

    MODULES.append("klpolicy.torch")
except ImportError:  # pragma: no cover - the torch extra is optional
    pass

# ----------------------------------------------------------------------------------------
# Kinds of argument and their bad inputs
# ----------------------------------------------------------------------------------------

SUB = -5e-324  # the negative subnormal: negative, however small
HUGE_INT = 2**63
OBJ = object()
TYPES = [("bool", True), ("complex", 1 + 1j), ("str", "abc"), ("object", OBJ), ("None", None)]


@dataclass(frozen=True)
class Kind:
    """A kind of argument: its bad values, computed from the valid one."""

    name: str
    bad: Any  # callable(valid value) -> list of (label, bad value)


def _vec_types(v):
    n = len(v)
    return [
        ("empty", []),
        ("ragged", [v, v[:1]]),
        ("bool-array", [True] + [False] * (n - 1)),
        ("complex-array", [complex(x, 1) for x in v]),
        ("str-array", ["a"] * n),
        ("object-array", [OBJ] * n),
    ]


def _prob_bad(v):
    v = list(v)
    n = len(v)
    return [
        ("nan", [np.nan] + v[1:]),
        ("inf", [np.inf] + v[1:]),
        ("negative", [v[0] + 0.25, -0.25] + v[2:]),
        ("negative-subnormal", [v[0], SUB] + v[2:]) if n > 1 else ("neg", [-1.0]),
        ("wrong-sum", [x * 1.1 for x in v]),
        ("huge", [1e308] * n),
        ("mismatched", v + [0.0]),
        *_vec_types(v),
        *TYPES,
    ]


def _reward_bad(v):
    v = list(v)
    return [
        ("nan", [np.nan] + v[1:]),
        ("inf", [np.inf] + v[1:]),
        ("-inf", v[:-1] + [-np.inf]),
        ("overflow", [float("1e309")] + v[1:]),
        ("mismatched", v + [0.0]),
        *_vec_types(v),
        *TYPES,
    ]


def _logp_bad(v):
    v = list(v)
    return [
        ("nan", [np.nan] + v[1:]),
        ("+inf", [np.inf] + v[1:]),
        ("mismatched", v + [v[0], v[0]]),
        *_vec_types(v),
        *TYPES,
    ]


def _nonneg_coef_bad(v):  # beta-like: >= 0, inf allowed, scalar or array
    return [
        ("nan", np.nan),
        ("negative", -1.0),
        ("-inf", -np.inf),
        ("negative-subnormal", SUB),
        ("empty", []),
        ("ragged", [[1.0], [1.0, 2.0]]),
        ("nan-in-array", [1.0, np.nan]),
        ("str-number", "0.5"),
        *TYPES,
    ]


def _scalar_types():
    return [("str-number", "0.5"), ("array", [1.0, 2.0]), *TYPES]


def _positive_bad(v):  # a positive finite number
    return [
        ("zero", 0.0),
        ("negative", -1.0),
        ("negative-subnormal", SUB),
        ("nan", np.nan),
        ("inf", np.inf),
        ("-inf", -np.inf),
        *_scalar_types(),
    ]


def _nonneg_bad(v):  # a non-negative finite number
    return [
        ("negative", -1.0),
        ("negative-subnormal", SUB),
        ("nan", np.nan),
        ("inf", np.inf),
        *_scalar_types(),
    ]


def _positive_or_inf_bad(v):  # a positive number, inf allowed (no clipping)
    return [(k, x) for k, x in _positive_bad(v) if k != "inf"]


def _finite_scalar_bad(v):
    return [("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf), *_scalar_types()]


def _grid_bad(lo, lo_open, hi=np.inf):
    """A 1-D grid of numbers in an interval (no partner array to mismatch)."""

    def bad(v):
        v = list(v)
        out = [
            ("nan", [np.nan] + v[1:]),
            ("inf", [np.inf] + v[1:]) if hi == np.inf else ("above", [hi] + v[1:]),
            ("-inf", [-np.inf] + v[1:]),
            *[(k, x) for k, x in _vec_types(v)],
            *TYPES,
        ]
        if lo > -np.inf:
            out.append(("below", [lo - 1.0] + v[1:]))
            if lo_open:
                out.append(("at-bound", [lo] + v[1:]))
        return out

    return bad


def _unit_bad(v):  # a number in [0, 1) or [0, 1/2]
    return [("negative", -0.1), ("above", 1.5), ("nan", np.nan), ("inf", np.inf), *_scalar_types()]


def _factor_bad(v):  # a number > 1
    return [("one", 1.0), ("below", 0.5), ("nan", np.nan), ("inf", np.inf), *_scalar_types()]


def _kl_bad(v, allow_inf=False):
    out = [
        ("nan", np.nan),
        ("negative", -0.1),
        ("negative-subnormal", SUB),
        ("-inf", -np.inf),
        ("empty", []),
        ("ragged", [[0.1], [0.1, 0.2]]),
        ("str-number", "0.1"),
        *TYPES,
    ]
    return out if allow_inf else out + [("inf", np.inf)]


def _count_bad(v):
    return [
        ("zero", 0),
        ("negative", -1),
        ("fraction", 1.5),
        ("nan", np.nan),
        ("inf", np.inf),
        ("huge-int", HUGE_INT),
        ("huge-float", 1e300),
        ("str-number", "3"),
        ("array", [2, 3]),
        *TYPES,
    ]


def _counts_bad(v):  # an integer >= 1 or an array of them
    return [
        ("zero", [0, 2]),
        ("fraction", [1.5]),
        ("nan", [np.nan]),
        ("huge-int", [HUGE_INT]),
        ("empty", []),
        ("ragged", [[1], [1, 2]]),
        ("str-number", "3"),
        *TYPES,
    ]


def _choice_bad(v):
    return [("unknown", "no-such-choice"), ("int", 3), ("None", None), ("bool", True)]


def _flag_bad(v):
    return [("str", "yes"), ("int", 2), ("None", None), ("float", 1.0)]


def _tree_bad(v):
    v0, v1 = v[0], v[1]
    return [
        ("nan", [[np.nan] + list(v0[1:])] + list(v[1:])),
        ("negative", [[1.5, -0.5]] + list(v[1:])),
        ("wrong-sum", [[0.6, 0.6]] + list(v[1:])),
        ("ragged-level", [v0, [list(v1[0]), list(v1[0][:1])]]),
        ("mismatched-level", [v0, [list(v1[0])]]),
        ("empty", []),
        ("complex", [[complex(x, 1) for x in v0]] + list(v[1:])),
        ("str", "abc"),
        ("None", None),
        ("object", OBJ),
    ]


def _rowwise(bad):
    """Apply a vector kind's bad cases to the first row of a matrix (2-D valid value)."""

    def wrapped(v):
        if not (isinstance(v, list) and v and isinstance(v[0], list)):
            return bad(v)
        out = []
        whole = {"bool-array": bool, "complex-array": complex, "str-array": str}
        for label, x in bad(v[0]):
            if label in whole:  # a matrix of that dtype (one bad row would be cast)
                out.append((label, [[whole[label](1) for _ in r] for r in v]))
            elif label == "mismatched":
                out.append((label, v + [v[0]]))
            elif isinstance(x, list):
                out.append((label, [x] + v[1:]))
            else:
                out.append((label, x))
        return out

    return wrapped


def _prefs_bad(v):
    n = len(v)
    flip = [row[:] for row in v]
    flip[0][1] = 0.9  # P[0, 1] + P[1, 0] = 1.2
    return [
        ("nan", [[np.nan] + v[0][1:]] + v[1:]),
        ("above-one", [[0.5, 1.5] + v[0][2:]] + v[1:]),
        ("negative", [[0.5, -0.5] + v[0][2:]] + v[1:]),
        ("not-complementary", flip),
        ("mismatched", [r[: n - 1] for r in v[: n - 1]]),
        ("empty", []),
        ("ragged", [v[0], v[1][:1]]),
        ("complex", [[complex(x, 1) for x in r] for r in v]),
        *TYPES,
    ]


def _opt(kind):
    """The same kind for an optional argument: ``None`` (the default) is fine there."""
    return Kind(kind.name + "?", lambda v: [(k, x) for k, x in kind.bad(v) if k != "None"])


PROB = Kind("probabilities", _rowwise(_prob_bad))
REWARD = Kind("finite reals", _rowwise(_reward_bad))
LOGP = Kind("log-probabilities", _rowwise(_logp_bad))
PREFS_KIND = Kind("preference matrix", _prefs_bad)
COEF = Kind("coefficient >= 0", _nonneg_coef_bad)
POS = Kind("positive number", _positive_bad)
NONNEG = Kind("non-negative number", _nonneg_bad)
POS_INF = Kind("positive number (inf allowed)", _positive_or_inf_bad)
FINITE = Kind("finite number", _finite_scalar_bad)
LOGITS = Kind("logits", _rowwise(lambda v: [(k, x) for k, x in _logp_bad(v) if k != "-inf"]))
UNIT_GRID = Kind("grid in [0, 1)", _grid_bad(0.0, False, 1.0))
POS_GRID = Kind("grid of positive numbers", _grid_bad(0.0, True))
FINITE_GRID = Kind("grid of finite numbers", _grid_bad(-np.inf, False))
UNIT = Kind("number in [0, 1)", _unit_bad)
FACTOR = Kind("number > 1", _factor_bad)
KL = Kind("KL budget", _kl_bad)
KL_INF = Kind("KL budget (inf allowed)", lambda v: _kl_bad(v, allow_inf=True))
COUNT = Kind("count", _count_bad)
COUNTS = Kind("counts", _counts_bad)
CHOICE = Kind("choice", _choice_bad)
FLAG = Kind("flag", _flag_bad)
TREE = Kind("token tree", _tree_bad)


def _weights_bad(v):
    return [
        ("nan", [[np.nan] + v[0][1:]] + v[1:]),
        ("inf", [[np.inf] + v[0][1:]] + v[1:]),
        ("negative", [[-1.0] + v[0][1:]] + v[1:]),
        ("not-square", v[:-1]),
        ("empty", []),
        ("ragged", [v[0], v[1][:1]]),
        ("complex", [[complex(x, 1) for x in r] for r in v]),
        *TYPES,
    ]


def _support_bad(v):
    return [
        ("not-bool", [1, 0, 1][: len(v)]),
        ("wrong-size", v + [True]),
        ("str", "abc"),
        ("None", None),
        ("ragged", [[True], [True, False]]),
    ]


RATIO_CLIP = Kind(
    "ratio clip (low, high)",
    lambda v: [
        ("reversed", (2.0, 0.5)),
        ("negative", (-1.0, 2.0)),
        ("nan", (np.nan, 1.0)),
        ("one", (1.0,)),
        ("str", "ab"),
        ("number", 3),
    ],
)
WEIGHTS = Kind("pair weights", _weights_bad)
SUPPORT = Kind("boolean support", _support_bad)
CALLABLE = Kind("callable", lambda v: [("None", None), ("str", "abc"), ("number", 3)])
TEXT = Kind("text", lambda v: [("number", 3), ("bytes", b"t"), ("object", OBJ)])
ARRAY_KINDS = {"probabilities", "finite reals", "log-probabilities"}
AXIS = Kind("axis", lambda v: [("fraction", 0.5), ("out-of-range", 7), *TYPES[:3]])


@dataclass
class Row:
    """One public callable: a valid call and the kind of each checked argument."""

    qualname: str
    kinds: dict[str, tuple[Kind, Any]] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)  # valid, not checked here

    def call(self, **override):
        fn = resolve(self.qualname)
        kw = {**self.fixed, **{k: v for k, (_, v) in self.kinds.items()}, **override}
        return fn(**kw)


def resolve(qualname: str):
    mod, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(mod), name)


def row(qualname: str, fixed: dict | None = None, **kinds: tuple[Kind, Any]) -> Row:
    return Row(qualname, dict(kinds), dict(fixed or {}))


# ----------------------------------------------------------------------------------------
# The table: small valid base values
# ----------------------------------------------------------------------------------------

P = [0.5, 0.3, 0.2]
Q = [0.2, 0.3, 0.5]
R = [1.0, 0.0, -1.0]
LP = [-0.5, -1.0]
LQ = [-0.7, -0.2]
T2 = [[0.5, 0.5], [[0.3, 0.7], [0.6, 0.4]]]
T2B = [[0.4, 0.6], [[0.5, 0.5], [0.2, 0.8]]]
SEQ_R = [[1.0, 0.0], [0.0, 1.0]]
PREFS = [[0.5, 0.7, 0.6], [0.3, 0.5, 0.4], [0.4, 0.6, 0.5]]
CNTS = [[0.0, 3.0, 2.0], [1.0, 0.0, 1.0], [2.0, 2.0, 0.0]]


def _seq(name):
    return f"klpolicy.sequences.{name}"


def _core3(qualname, **extra):  # (ref, reward, beta) functions
    return row(qualname, ref=(PROB, P), reward=(REWARD, R), beta=(COEF, 1.0), **extra)


ROWS: list[Row] = [
    # --- klpolicy --------------------------------------------------------------------------
    row("klpolicy.best_of_n_kl", ref=(PROB, P), reward=(REWARD, R), n=(COUNTS, 2)),
    row("klpolicy.best_of_n_policy", ref=(PROB, P), reward=(REWARD, R), n=(COUNTS, 2)),
    row(
        "klpolicy.beta_for_kl",
        ref=(PROB, P),
        reward=(REWARD, R),
        kl=(KL, 0.1),
        rtol=(POS, 1e-13),
        max_iter=(_opt(COUNT), 200),
    ),
    row("klpolicy.cross_entropy", p=(PROB, P), q=(PROB, Q)),
    row("klpolicy.kl_divergence", p=(PROB, P), q=(PROB, Q)),
    row("klpolicy.total_variation", p=(PROB, P), q=(PROB, Q)),
    row("klpolicy.effective_support", p=(PROB, P)),
    row("klpolicy.entropy", p=(PROB, P)),
    row("klpolicy.expected_reward", pi=(PROB, P), reward=(REWARD, R)),
    row("klpolicy.frontier", ref=(PROB, P), reward=(REWARD, R), betas=(COEF, [0.5, 1.0])),
    row("klpolicy.max_kl", ref=(PROB, P), reward=(REWARD, R)),
    row("klpolicy.objective", pi=(PROB, Q), ref=(PROB, P), reward=(REWARD, R), beta=(COEF, 1.0)),
    # horizon: J(pi*) - J(pi) = beta KL(pi || pi*)
    row(
        "klpolicy.suboptimality",
        policy=(PROB, Q),
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(COEF, 1.0),
    ),
    _core3("klpolicy.optimal_kl"),
    _core3("klpolicy.optimal_policy"),
    _core3("klpolicy.soft_value"),
    row(
        "klpolicy.f_divergence",
        p=(PROB, P),
        q=(PROB, Q),
        divergence=(CHOICE, "alpha"),
        alpha=(_opt(FINITE), 0.5),
    ),
    _core3("klpolicy.f_optimal_policy", divergence=(CHOICE, "alpha"), alpha=(_opt(FINITE), 0.5)),
    _core3("klpolicy.f_soft_value", divergence=(CHOICE, "alpha"), alpha=(_opt(FINITE), 0.5)),
    row(
        "klpolicy.f_frontier",
        ref=(PROB, P),
        reward=(REWARD, R),
        betas=(COEF, [0.5, 1.0]),
        divergence=(CHOICE, "alpha"),
        alpha=(_opt(FINITE), 0.5),
    ),
    row(
        "klpolicy.beta_for_divergence",
        ref=(PROB, P),
        reward=(REWARD, R),
        target=(KL, 0.1),
        divergence=(CHOICE, "alpha"),
        alpha=(_opt(FINITE), 0.5),
        rtol=(POS, 1e-13),
    ),
    row(
        "klpolicy.preference.f_divergence_score",
        logratio=(LOGP, [-0.5, 1.0]),
        divergence=(CHOICE, "alpha_divergence"),
        alpha=(_opt(FINITE), 1.5),
        alpha_clamp=(_opt(POS), 80.0),
        trl_version=(CHOICE, "1.16.0"),
    ),
    # --- sequences -------------------------------------------------------------------------
    row(_seq("from_joint"), joint=(PROB, [0.25, 0.25, 0.25, 0.25])),
    row(_seq("joint"), conditionals=(TREE, T2)),
    row(_seq("marginals"), conditionals=(TREE, T2)),
    row(_seq("per_token_kl"), policy_conditionals=(TREE, T2), ref_conditionals=(TREE, T2B)),
    row(_seq("reward_ceiling"), ref=(PROB, P), reward=(REWARD, R), kl=(KL_INF, 0.1)),
    row(_seq("sample"), {"rng": 0}, conditionals=(TREE, T2), n=(COUNT, 4)),
    row(
        _seq("sampled_kl"),
        {"rng": 0},
        policy_conditionals=(TREE, T2),
        ref_conditionals=(TREE, T2B),
        n=(COUNT, 4),
        estimator=(CHOICE, "k1"),
    ),
    row(
        _seq("sequence_kl_moments"),
        policy_conditionals=(TREE, T2),
        ref_conditionals=(TREE, T2B),
        estimator=(CHOICE, "k1"),
    ),
    row(
        _seq("soft_bellman"), ref_conditionals=(TREE, T2), reward=(REWARD, SEQ_R), beta=(COEF, 1.0)
    ),
    row(
        _seq("token_kl_map"),
        policy_conditionals=(TREE, T2),
        ref_conditionals=(TREE, T2B),
        weighted=(FLAG, False),
    ),
    row(
        _seq("token_kl_profile"),
        policy_logprobs=(LOGP, [[-0.5, -1.0]]),
        ref_logprobs=(LOGP, [[-0.7, -0.2]]),
        estimator=(CHOICE, "k1"),
        first_k=(_opt(COUNT), 1),
    ),
    row(_seq("token_logprobs"), conditionals=(TREE, T2), sequences=(COUNTS, [[0, 1], [1, 0]])),
    # --- estimators ------------------------------------------------------------------------
    *[
        row(
            f"klpolicy.estimators.{k}",
            logp=(LOGP, LP),
            logq=(LOGP, LQ),
            clip=(_opt(POS_INF), 10.0),
            log_ratio_clip=(_opt(POS_INF), 10.0),
        )
        for k in ("k1", "k2", "k3", "abs_kl")
    ],
    *[
        row(
            f"klpolicy.estimators.{k}",
            p=(PROB, P),
            q=(PROB, Q),
            estimator=(CHOICE, "k3"),
            clip=(_opt(POS_INF), 10.0),
            log_ratio_clip=(_opt(POS_INF), 10.0),
        )
        for k in ("bias", "moments")
    ],
    *[
        row(
            f"klpolicy.estimators.{k}",
            logits=(LOGITS, [0.0, 0.1, 0.2]),
            ref=(PROB, P),
            reward=(REWARD, R),
            beta=(COEF, 1.0),
            estimator=(CHOICE, "k1"),
            placement=(CHOICE, "reward"),
            sampler=(_opt(LOGITS), [0.1, 0.0, -0.1]),
            ratio=(CHOICE, "detached"),
            ratio_clip=(_opt(RATIO_CLIP), (0.5, 2.0)),
            sample_reward=(_opt(CHOICE), "sampler"),
        )
        for k in ("expected_gradient",)
    ],
    row(
        "klpolicy.estimators.objective_gradient",
        logits=(LOGITS, [0.0, 0.1, 0.2]),
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(COEF, 1.0),
    ),
    row(
        "klpolicy.estimators.fixed_point",
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(COEF, 1.0),
        estimator=(CHOICE, "k1"),
        placement=(CHOICE, "reward"),
    ),
    row(
        "klpolicy.estimators.full_kl",
        logp_all=(LOGP, list(np.log(P))),
        logq_all=(LOGP, list(np.log(Q))),
    ),
    row(
        "klpolicy.estimators.gaussian_moments",
        mu=(FINITE_GRID, [0.1, 1.0]),
        estimator=(CHOICE, "k3"),
    ),
    row(
        "klpolicy.estimators.gradient_flow",
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(COEF, 1.0),
        estimator=(CHOICE, "k1"),
        placement=(CHOICE, "reward"),
        steps=(COUNT, 3),
        lr=(POS, 0.5),
        logits=(_opt(LOGITS), [0.0, 0.0, 0.0]),
        record_every=(COUNT, 1),
    ),
    *[
        row(
            f"klpolicy.estimators.{k}",
            p=(PROB, P),
            q=(PROB, Q),
            mu=(PROB, [0.4, 0.3, 0.3]),
            estimator=(CHOICE, "k3"),
            weighted=(FLAG, True),
        )
        for k in ("off_policy_bias", "off_policy_moments")
    ],
    row(
        "klpolicy.estimators.sample_estimates",
        {"rng": 0},
        p=(PROB, P),
        q=(PROB, Q),
        estimator=(CHOICE, "k3"),
        n=(COUNT, 5),
        clip=(_opt(POS_INF), 10.0),
        log_ratio_clip=(_opt(POS_INF), 10.0),
    ),
    row("klpolicy.estimators.schulman_table", mus=(FINITE_GRID, [0.1, 1.0])),
    # --- control ---------------------------------------------------------------------------
    row(
        "klpolicy.control.AdaptiveKLController",
        init_kl_coef=(POS, 0.1),
        target=(POS, 6.0),
        horizon=(POS, 1000.0),
        clip=(POS, 0.2),
        per=(CHOICE, "sequence"),
    ),
    row(
        "klpolicy.control.DeadZoneKLController",
        init_kl_coef=(POS, 0.1),
        target=(POS, 6.0),
        band=(FACTOR, 1.5),
        factor=(FACTOR, 2.0),
        per=(CHOICE, "sequence"),
    ),
    row("klpolicy.control.FixedKLController", kl_coef=(NONNEG, 0.1)),
    row(
        "klpolicy.control.LagrangianKLController",
        init_kl_coef=(NONNEG, 0.1),
        target=(POS, 6.0),
        lr=(POS, 0.1),
        min_kl_coef=(NONNEG, 0.0),
        per=(CHOICE, "sequence"),
    ),
    row(
        "klpolicy.control.convert_kl_target",
        target=(POS, 6.0),
        length=(POS, 100.0),
        to=(CHOICE, "token"),
    ),
    row("klpolicy.control.kl_elasticity", ref=(PROB, P), reward=(REWARD, R), beta=(POS, 1.0)),
]


def _controller():
    from klpolicy.control import AdaptiveKLController

    return AdaptiveKLController(0.5, 0.1, 10.0)


_SIM = dict(
    ref=(PROB, [0.5, 0.5]),
    reward=(REWARD, [1.0, 0.0]),
    steps=(COUNT, 3),
    n_steps=(COUNT, 1),
    lag=(UNIT, 0.0),
    kl_samples=(_opt(COUNT), 4),
    length=(POS, 1.0),
    settle_tol=(POS, 0.05),
    measure=(CHOICE, "before"),
)
ROWS += [
    row("klpolicy.control.simulate", {"controller": _controller(), "rng": 0}, **_SIM),
    row(
        "klpolicy.control.compare_controllers",
        {"controllers": {"a": _controller()}, "rng": 0},
        **_SIM,
    ),
    row(
        "klpolicy.control.stability_region",
        ref=(PROB, [0.5, 0.5]),
        reward=(REWARD, [1.0, 0.0]),
        target=(POS, 0.1),
        lags=(UNIT_GRID, [0.0, 0.5]),
        horizons=(POS_GRID, [10.0]),
        init_kl_coef=(POS, 0.5),
        steps=(COUNT, 3),
        n_steps=(COUNT, 1),
        settle_tol=(POS, 0.05),
        measure=(CHOICE, "before"),
    ),
]

# --- best of n ----------------------------------------------------------------------------
_B = "klpolicy.best_of_n."
ROWS += [
    row(_B + "best_of_n_curve", ref=(PROB, P), reward=(REWARD, R), ns=(COUNTS, [1, 2])),
    row(_B + "best_of_n_expected_reward", ref=(PROB, P), reward=(REWARD, R), n=(COUNTS, 2)),
    row(_B + "best_of_n_for_kl", ref=(PROB, P), reward=(REWARD, R), kl=(KL, 0.1)),
    row(_B + "best_of_n_kl", ref=(PROB, P), reward=(REWARD, R), n=(COUNTS, 2)),
    row(_B + "best_of_n_kl_bound", n=(COUNTS, [1, 2])),
    row(_B + "best_of_n_policy", ref=(PROB, P), reward=(REWARD, R), n=(COUNTS, 2)),
    # horizon: soft best-of-n
    *[
        row(_B + k, ref=(PROB, P), reward=(REWARD, R), n=(COUNT, 2), lam=(COEF, 0.5))
        for k in ("soft_best_of_n_policy", "soft_best_of_n_kl")
    ],
    row(_B + "best_of_n_vs_optimal", ref=(PROB, P), reward=(REWARD, R), ns=(COUNTS, [1, 2])),
    row(_B + "best_of_n_win_rate", ref=(PROB, P), reward=(REWARD, R), n=(COUNTS, 2)),
]

# --- over-optimisation --------------------------------------------------------------------
_O = "klpolicy.overoptimization."
ROWS += [
    row(
        _O + "best_of_n_sweep",
        ref=(PROB, P),
        proxy=(REWARD, R),
        gold=(REWARD, [0.5, 0.0, -1.0]),
        ns=(COUNTS, [1, 2]),
    ),
    row(
        _O + "closed_form_sweep",
        ref=(PROB, P),
        proxy=(REWARD, R),
        gold=(REWARD, [0.5, 0.0, -1.0]),
        betas=(COEF, [0.5, 1.0]),
    ),
    row(_O + "fit_gao_bon", d=(REWARD, [0.5, 1.0, 1.5]), gain=(REWARD, [0.4, 0.6, 0.5])),
    row(_O + "fit_gao_rl", d=(REWARD, [0.5, 1.0, 1.5]), gain=(REWARD, [0.4, 0.6, 0.5])),
    row(
        _O + "make_problem",
        {"seed": 0},
        kind=(CHOICE, "rare_errors"),
        size=(COUNT, 20),
        error=(POS, 1.0),
    ),
]


def _curve():
    from klpolicy.overoptimization import closed_form_sweep

    return closed_form_sweep(P, R, [0.5, 0.0, -1.0], [0.5, 1.0, 2.0])


ROWS.append(row(_O + "gold_peak", {"curve": _curve()}))

# --- preference ---------------------------------------------------------------------------
_PF = "klpolicy.preference."
_PAIR = dict(
    policy_chosen_logps=(LOGP, LP),
    policy_rejected_logps=(LOGP, LQ),
    ref_chosen_logps=(LOGP, [-0.6, -0.8]),
    ref_rejected_logps=(LOGP, [-0.9, -0.4]),
)
ROWS += [
    row(_PF + "bradley_terry", reward=(REWARD, R)),
    *[
        row(_PF + k, **_PAIR, beta=(POS, 0.1), label_smoothing=(UNIT, 0.0))
        for k in ("dpo_loss", "dpo_loss_grad")
    ],
    *[row(_PF + k, **_PAIR, tau=(POS, 0.1)) for k in ("ipo_loss", "ipo_loss_grad")],
    row(
        _PF + "dpo_optimum",
        ref=(PROB, P),
        preferences=(PREFS_KIND, PREFS),
        beta=(POS, 0.5),
        mu=(_opt(PROB), P),
        label_smoothing=(UNIT, 0.0),
    ),
    row(
        _PF + "ipo_optimum",
        ref=(PROB, P),
        preferences=(PREFS_KIND, PREFS),
        tau=(POS, 0.5),
        mu=(_opt(PROB), P),
    ),
    row(
        _PF + "empirical_dpo_loss",
        policy=(PROB, Q),
        ref=(PROB, P),
        counts=(COUNTS, CNTS),
        beta=(POS, 0.5),
        label_smoothing=(UNIT, 0.0),
    ),
    row(
        _PF + "fit_dpo",
        ref=(PROB, P),
        counts=(COUNTS, CNTS),
        beta=(POS, 0.5),
        steps=(COUNT, 3),
        lr=(POS, 0.5),
        init=(_opt(PROB), Q),
        label_smoothing=(UNIT, 0.0),
    ),
    row(
        _PF + "fit_dpo_online",
        {"rng": 0},
        ref=(PROB, P),
        preferences=(PREFS_KIND, PREFS),
        beta=(POS, 0.5),
        rounds=(COUNT, 2),
        pairs_per_round=(COUNT, 4),
        steps_per_round=(COUNT, 2),
        lr=(POS, 0.5),
    ),
    row(_PF + "implicit_reward", policy_logps=(LOGP, LP), ref_logps=(LOGP, LQ), beta=(POS, 0.5)),
    row(
        _PF + "population_dpo_loss",
        policy=(PROB, Q),
        ref=(PROB, P),
        preferences=(PREFS_KIND, PREFS),
        beta=(POS, 0.5),
        mu=(_opt(PROB), P),
        label_smoothing=(UNIT, 0.0),
    ),
    row(
        _PF + "population_ipo_loss",
        policy=(PROB, Q),
        ref=(PROB, P),
        preferences=(PREFS_KIND, PREFS),
        tau=(POS, 0.5),
        mu=(_opt(PROB), P),
    ),
    row(_PF + "reward_decomposition", ref=(PROB, P), reward=(REWARD, R), beta=(POS, 0.5)),
    row(
        _PF + "sample_preference_counts",
        {"rng": 0},
        preferences=(PREFS_KIND, PREFS),
        mu=(PROB, P),
        size=(COUNT, 10),
    ),
]

_PREF3 = dict(ref=(PROB, P), preferences=(PREFS_KIND, PREFS), beta=(POS, 0.5))
ROWS += [
    row(_PF + "compare_losses", **_PREF3, reward=(_opt(REWARD), R), mu=(_opt(PROB), P)),
    row(_PF + "optimum_set", **_PREF3, loss=(CHOICE, "sigmoid"), mu=(_opt(PROB), P)),
    row(_PF + "population_optimum", **_PREF3, loss=(CHOICE, "sigmoid"), mu=(_opt(PROB), P)),
    row(
        _PF + "population_loss",
        policy=(PROB, Q),
        **_PREF3,
        loss=(CHOICE, "sigmoid"),
        mu=(_opt(PROB), P),
    ),
]

_GAME = dict(preferences=(PREFS_KIND, PREFS), mu=(_opt(PROB), P))
ROWS += [
    row(_PF + "nash_equilibrium", **_GAME, tau=(POS_INF, 0.5)),
    *[
        row(_PF + k, policy=(PROB, Q), **_GAME, tau=(POS_INF, 0.5))
        for k in ("best_response", "exploitability")
    ],
    row(
        _PF + "nash_md_path",
        **_GAME,
        tau=(POS, 0.5),
        eta=(POS, 0.5),
        steps=(COUNT, 3),
        init=(_opt(PROB), Q),
    ),
    row(_PF + "nash_md_rate", **_GAME, tau=(POS, 0.5), eta=(POS, 0.5)),
    row(
        _PF + "geometric_mixture_laws",
        policy_conditionals=(TREE, T2),
        ref_conditionals=(TREE, T2B),
        mixture_coef=(UNIT, 0.5),
    ),
]

# --- diversity, calibration, retention, trust region ----------------------------------------
_D = "klpolicy.diversity."
_C = "klpolicy.calibration."
_RT = "klpolicy.retention."
_TR = "klpolicy.trust_region."
ROWS += [
    row(_D + "best_of_n_diversity", ref=(PROB, P), reward=(REWARD, R), ns=(COUNTS, [1, 2])),
    # horizon: one policy-gradient step's entropy change
    row(
        _D + "entropy_step",
        logits=(LOGITS, [0.0, 0.1, 0.2]),
        advantage=(REWARD, R),
        eta=(FINITE, 0.1),
        step=(CHOICE, "natural"),
    ),
    row(_D + "diversity_curve", ref=(PROB, P), reward=(REWARD, R), beta=(COEF, [0.5, 1.0])),
    row(_D + "entropy_slope", ref=(PROB, P), reward=(REWARD, R), beta=(COEF, 1.0)),
    row(_D + "expected_distinct", p=(PROB, P), k=(COUNTS, 3)),
    row(_D + "expected_distinct_sequences", conditionals=(TREE, T2), k=(COUNTS, 3)),
    row(_D + "kl_decomposition", pi=(PROB, Q), ref=(PROB, P)),
    row(_D + "max_entropy_objective", pi=(PROB, Q), reward=(REWARD, R), beta=(COEF, 1.0)),
    row(_D + "optimal_effective_support", ref=(PROB, P), reward=(REWARD, R), beta=(COEF, 1.0)),
    row(_D + "optimal_entropy", ref=(PROB, P), reward=(REWARD, R), beta=(COEF, 1.0)),
    row(_C + "brier_score", pi=(PROB, Q), truth=(PROB, P), weights=(_opt(PROB), [1.0])),
    row(
        _C + "expected_calibration_error",
        pi=(PROB, Q),
        truth=(PROB, P),
        weights=(_opt(PROB), [1.0]),
        bins=(COUNT, 10),
    ),
    row(
        _C + "calibration_curve",
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(COEF, [0.5, 1.0]),
        truth=(_opt(PROB), P),
        weights=(_opt(PROB), [1.0]),
        bins=(COUNT, 10),
    ),
    row(
        _C + "calibration_threshold",
        ref=(PROB, P),
        reward=(REWARD, R),
        factor=(FACTOR, 1.5),
        metric=(CHOICE, "brier"),
        truth=(_opt(PROB), P),
        weights=(_opt(PROB), [1.0]),
        bins=(COUNT, 10),
    ),
    row(
        _RT + "retention_curve",
        ref=(PROB, P),
        reward=(REWARD, R),
        score=(REWARD, [0.0, 1.0, 0.5]),
        beta=(COEF, [0.5, 1.0]),
    ),
    row(
        _RT + "retention_slope", ref=(PROB, P), reward=(REWARD, R), score=(REWARD, [0.0, 1.0, 0.5])
    ),
    row(_RT + "worst_case_drop", ref=(PROB, P), score=(REWARD, [0.0, 1.0, 0.5]), kl=(KL_INF, 0.1)),
    row(
        _TR + "ppo_clip_step",
        pi_old=(PROB, P),
        advantage=(REWARD, R),
        clip=(POS, 0.2),
        lr=(POS, 1.0),
        epochs=(COUNT, 2),
    ),
    row(_TR + "trust_region_beta", pi_old=(PROB, P), advantage=(REWARD, R), delta=(KL, 0.05)),
    row(_TR + "trust_region_step", pi_old=(PROB, P), advantage=(REWARD, R), delta=(KL, 0.05)),
]

# --- plotting -----------------------------------------------------------------------------
_PL = "klpolicy.plotting."


def _path():
    from klpolicy.dynamics import trajectory

    return trajectory("rloo", [0.5, 0.5], [1.0, 0.0], 0.5, steps=3, lr=1.0)


def _trace():
    from klpolicy.control import FixedKLController, simulate

    return simulate(FixedKLController(0.5), [0.5, 0.5], [1.0, 0.0], steps=3)


ROWS += [
    row(_PL + "beta_sweep", ref=(PROB, P), reward=(REWARD, R), betas=(_opt(COEF), [0.5, 1.0])),
    row(_PL + "controller_trace", {"trace": _trace()}, target=(_opt(FINITE), 0.1)),
    row(
        _PL + "estimator_histograms",
        {"rng": 0},
        p=(PROB, P),
        q=(PROB, Q),
        n=(COUNT, 50),
        bins=(COUNT, 5),
    ),
    row(_PL + "fixed_points", ref=(PROB, P), reward=(REWARD, R), betas=(_opt(COEF), [0.5, 1.0])),
    row(_PL + "landing_points", ref=(PROB, P), reward=(REWARD, R), betas=(_opt(COEF), [0.5])),
    row(_PL + "training_path", path=(Kind("a trajectory", lambda v: list(TYPES)), _path())),
    row(
        _PL + "nash_md_trajectory",
        preferences=(PREFS_KIND, PREFS),
        tau=(POS, 0.5),
        eta=(POS, 0.5),
        mu=(_opt(PROB), P),
        init=(_opt(PROB), Q),
        steps=(COUNT, 5),
    ),
    row(
        _PL + "frontier",
        ref=(PROB, P),
        reward=(REWARD, R),
        betas=(_opt(COEF), [0.5, 1.0]),
        best_of_n=(_opt(COUNTS), [1, 2]),
    ),
    row(
        _PL + "kl_budget",
        d=(REWARD, [0.5, 1.0]),
        gold=(REWARD, [0.2, 0.3]),
        proxy=(_opt(REWARD), [0.3, 0.5]),
    ),
    row(_PL + "lecture_style"),
    row(
        _PL + "animate_beta_sweep",
        ref=(PROB, P),
        reward=(REWARD, R),
        frames=(COUNT, 3),
        fps=(POS, 10.0),
        dpi=(POS, 50.0),
    ),
    row(_PL + "explore", ref=(PROB, P), reward=(REWARD, R), beta=(POS, 1.0)),
    row(_PL + "token_kl", kl=(REWARD, [0.1, 0.2, 0.3])),
]


def _draw(ax):
    from klpolicy.plotting import token_kl

    return token_kl([0.1, 0.2], ax=ax)


ROWS.append(
    row(
        _PL + "save_figure",
        {"path": "/tmp/klpolicy-bad-inputs-test.png"},
        draw=(CALLABLE, _draw),
        dpi=(_opt(POS), 50.0),
        title=(_opt(TEXT), "t"),
    )
)
ROWS.append(
    row(_PL + "highlighted_actions", ref=(PROB, P), reward=(REWARD, R), top=(_opt(COUNT), 2))
)

# --- estimators' registry, GRPO / token-k3 targets, preference solvers -------------------------
_E = "klpolicy.estimators."
ROWS += [
    row(_E + "estimator_names", kl_only=(FLAG, False)),
    # `argument` is the caller's name for the estimator: here the test calls it `name`
    row(_E + "get_estimator", {"argument": "name"}, name=(CHOICE, "k3"), kl_only=(FLAG, False)),
]
_GRPO = dict(group_size=(_opt(COUNT), 4), eps=(NONNEG, 1e-6), unbiased_std=(FLAG, True))
W3 = [[0.0, 0.3, 0.2], [0.1, 0.0, 0.1], [0.2, 0.1, 0.0]]
ROWS += [
    row(
        _E + "grpo_expected_update",
        pi=(PROB, Q),
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(POS, 1.0),
        **_GRPO,
    ),
    row(_E + "grpo_fixed_point", ref=(PROB, P), reward=(REWARD, R), beta=(POS, 1.0), **_GRPO),
    row(
        _E + "token_k3_fixed_point",
        ref_conditionals=(TREE, T2),
        reward=(REWARD, SEQ_R),
        beta=(POS, 1.0),
    ),
    row(
        _PF + "laplacian_solve",
        sym=(WEIGHTS, [[0.0, 0.5, 0.4], [0.5, 0.0, 0.3], [0.4, 0.3, 0.0]]),
        rhs=(REWARD, [0.1, -0.05, -0.05]),
        support=(SUPPORT, [True, True, True]),
    ),
    row(
        _PF + "minimise_pair_loss",
        w=(WEIGHTS, W3),
        support=(SUPPORT, [True, True, True]),
        beta=(POS, 0.5),
        kind=(CHOICE, "dpo"),
    ),
]

# --- torch --------------------------------------------------------------------------------
_T = "klpolicy.torch."
ROWS += [
    row(
        _T + "AutoregressivePolicy",
        vocab=(COUNT, 2),
        length=(COUNT, 2),
        hidden=(COUNT, 4),
    ),
    row(_T + "TabularConditionals", conditionals=(TREE, T2)),
    row(_T + "TabularPolicy", probs=(PROB, P)),
    row(_T + "default_device", device=(_opt(CHOICE), "cpu")),
    row(
        _T + "fit_policy",
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(POS, 1.0),
        method=(CHOICE, "exact"),
        steps=(COUNT, 2),
        lr=(_opt(POS), 0.1),
        schedule=(CHOICE, "linear"),
        progress=(FLAG, False),
        policy=(_opt(Kind("model of the law", lambda v: [("str", "abc"), ("number", 3)])), None),
        callback=(_opt(CALLABLE), None),
    ),
    row(
        _T + "fit_reference",
        ref_conditionals=(TREE, T2),
        steps=(COUNT, 2),
        hidden=(COUNT, 4),
        lr=(POS, 0.03),
        progress=(FLAG, False),
    ),
    row(
        _T + "fit_sequence_policy",
        ref_conditionals=(TREE, T2),
        reward=(REWARD, SEQ_R),
        beta=(POS, 1.0),
        method=(CHOICE, "exact"),
        steps=(COUNT, 2),
        kl_level=(CHOICE, "sequence"),
        schedule=(CHOICE, "linear"),
        progress=(FLAG, False),
    ),
    *[row(_T + k, logp=(LOGP, LP), logq=(LOGP, LQ)) for k in ("k1", "k2", "k3")],
    row(_T + "kl_divergence", p=(PROB, P), q=(PROB, Q)),
    row(_T + "cross_entropy", p=(PROB, P), q=(PROB, Q)),
    row(_T + "total_variation", p=(PROB, P), q=(PROB, Q)),
    row(_T + "entropy", p=(PROB, P)),
    row(_T + "optimal_kl", ref=(PROB, P), reward=(REWARD, R), beta=(COEF, 1.0)),
    row(_T + "optimal_policy", ref=(PROB, P), reward=(REWARD, R), beta=(COEF, 1.0)),
    row(_T + "soft_value", ref=(PROB, P), reward=(REWARD, R), beta=(COEF, 1.0)),
]

# --- sampling: the laws engines sample from, trees, logged mismatch ------------------------
TEMPERATURE = Kind("temperature >= 0", lambda v: [(k, x) for k, x in _nonneg_bad(v) if k != "inf"])
LONE_LOGITS = LOGITS  # a lone array: "mismatched" is skipped by _cases
_S = "klpolicy.sampling."
# top_k=0 is off (issue 40, item 7); defaults: a name, a mapping or a GenerationConfig-like
TOP_K = Kind("count >= 0", lambda v: [(k, x) for k, x in _count_bad(v) if k != "zero"])
ENGINE_DEFAULTS_KIND = Kind(
    "engine defaults",
    lambda v: (
        [(k, x) for k, x in TYPES if k != "None"]
        + [("unknown-name", "vllm"), ("bad-entry", {"top_k": -1}), ("bad-value", {"top_p": 2.0})]
    ),
)
SAMPLER_SETTINGS = dict(
    temperature=(_opt(TEMPERATURE), 0.9),
    top_k=(_opt(TOP_K), 2),
    defaults=(ENGINE_DEFAULTS_KIND, "transformers"),
    top_p=(_opt(UNIT), 0.9),
    min_p=(_opt(UNIT), 0.05),
    order=(CHOICE, "transformers"),
    min_tokens_to_keep=(COUNT, 1),
)
INDEX = Kind("count >= 0", lambda v: [(k, x) for k, x in _count_bad(v) if k != "zero"])
ROWS += [
    row(_S + "sampler_law", logits=(LONE_LOGITS, [0.0, 0.1, 0.2]), **SAMPLER_SETTINGS),
    row(
        _S + "cut_sensitivity",
        logits=(LONE_LOGITS, [0.0, 0.1, 0.2]),
        tolerance=(_opt(UNIT), 1e-6),
        **SAMPLER_SETTINGS,
    ),
    row(
        _S + "sampler_tree",
        conditionals=(TREE, T2),
        eos_token=(_opt(INDEX), 0),
        min_length=(INDEX, 1),
        **SAMPLER_SETTINGS,
    ),
    row(
        _S + "logged_kl_moments",
        policy_conditionals=(TREE, T2),
        ref_conditionals=(TREE, T2B),
        sampler_conditionals=(TREE, T2B),
        estimator=(CHOICE, "k3"),
    ),
    row(
        _S + "corrected_kl_moments",
        policy=(PROB, P),
        ref=(PROB, Q),
        sampler=(PROB, Q),
        estimator=(CHOICE, "k1"),
        correction=(CHOICE, "tis"),
        threshold=(POS_INF, 2.0),
    ),
    row(
        _S + "corrected_gradient_moments",
        policy=(PROB, P),
        reward=(REWARD, R),
        sampler=(PROB, Q),
        correction=(CHOICE, "mis"),
        threshold=(POS_INF, 2.0),
    ),
    row(
        _S + "sampler_mismatch",
        sampler_logprobs=(LOGP, [[-0.5, -1.0]]),
        trainer_logprobs=(LOGP, [[-0.7, -0.2]]),
        estimator=(CHOICE, "k3"),
        ratio_threshold=(FACTOR, 2.0),
        strict=(FLAG, True),
        **SAMPLER_SETTINGS,
    ),
]

#: Public callables that take no user input to check: result containers (named tuples
#: and dataclasses that klpolicy builds and returns) and the like. Each says why.
# --- klpolicy.dynamics ---------------------------------------------------------------------
_DYN = dict(
    num_generations=(_opt(COUNT), 3),
    scale_rewards=(CHOICE, "group"),
    loss_type=(CHOICE, "dapo"),
    use_bias_correction_kl=(FLAG, True),
)
ROWS += [
    row(
        "klpolicy.dynamics.expected_update",
        rule=(CHOICE, "grpo"),
        logits=(LOGITS, [0.1, 0.0, -0.1]),
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(NONNEG, 0.5),
        **_DYN,
    ),
    row(
        "klpolicy.dynamics.landing_point",
        rule=(CHOICE, "grpo"),
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(NONNEG, 0.5),
        **_DYN,
    ),
    row(
        "klpolicy.dynamics.trajectory",
        rule=(CHOICE, "rloo"),
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(NONNEG, 0.5),
        steps=(COUNT, 3),
        lr=(POS, 0.5),
        optimizer=(CHOICE, "natural"),
        sync_ref_model=(FLAG, True),
        ref_model_sync_steps=(COUNT, 2),
    ),
    row("klpolicy.dynamics.beta_fit", policy=(PROB, P), ref=(PROB, Q), reward=(REWARD, R)),
    row("klpolicy.dynamics.rule_names"),
]


# --- callables of the best-of-n / calibrated-reward round (issue 40) ---------------------
def _nonzero_bad(v):  # a non-zero finite number (an exponent with a sign)
    return [("zero", 0.0), ("huge", 1e3), *_finite_scalar_bad(v)]


def _tree_logits_bad(v):
    v0, v1 = list(v[0]), [list(x) for x in v[1]]
    return [
        ("nan", [[np.nan] + v0[1:], v1]),
        ("+inf", [v0, [[np.inf] + v1[0][1:]] + v1[1:]]),
        ("missing-level", [v0]),
        ("wrong-shape", [v0 + [0.0], v1]),
        ("ragged-level", [v0, [v1[0], v1[0][:1]]]),
        ("array", np.zeros(3)),
        ("empty", []),
        ("complex", [[complex(x, 1) for x in v0], v1]),
        ("str", "abc"),
        ("None", None),
        ("object", OBJ),
    ]


NONZERO = Kind("non-zero finite number", _nonzero_bad)
TREE_LOGITS = Kind("logits on a token tree", _tree_logits_bad)
_CAL = dict(
    ref=(PROB, P),
    reward=(REWARD, R),
    beta=(POS, 0.5),
    transform=(CHOICE, "exp"),
    t=(NONZERO, 2.0),
    ties=(CHOICE, "mid"),
)
ROWS += [
    row(_B + "calibrated_reward", ref=(PROB, P), reward=(REWARD, R), ties=(CHOICE, "upper")),
    row(_B + "calibrated_partition", **_CAL),
    row(_B + "calibrated_policy", **_CAL),
    row(
        _B + "inference_win_rate",
        policy=(PROB, Q),
        ref=(PROB, P),
        reward=(REWARD, R),
        n=(COUNT, 3),
        decoding=(CHOICE, "worst"),
    ),
    row(
        _B + "optimal_exponent",
        ref=(PROB, P),
        reward=(REWARD, R),
        n=(COUNT, 2),
        kl=(KL, 0.1),
        decoding=(CHOICE, "best"),
        ties=(CHOICE, "mid"),
        t_max=(POS, 5.0),
    ),
    row(
        _B + "soft_best_of_n_frontier",
        ref=(PROB, P),
        reward=(REWARD, R),
        n=(COUNT, 2),
        lams=(_opt(COEF), [0.0, 0.5]),
    ),
    row(_B + "soft_best_of_n_gap", ref=(PROB, P), reward=(REWARD, R), n=(COUNT, 4), lam=(POS, 0.5)),
]
# a 2-token tree, token 1 the EOS; the options are TRL's GRPO ones (dynamics.TREE_OPTIONS)
_TREE_DYN = dict(
    ref=(TREE, T2),
    reward=(REWARD, SEQ_R),
    beta=(NONNEG, 0.1),
    eos_token=(_opt(INDEX), 1),
    num_generations=(_opt(COUNT), 2),
    scale_rewards=(CHOICE, "none"),
    loss_type=(CHOICE, "grpo"),
    use_bias_correction_kl=(FLAG, True),
    max_completion_length=(_opt(COUNT), 2),
    mask_truncated_completions=(FLAG, False),
    epsilon=(NONNEG, 0.2),
    num_iterations=(COUNT, 1),
)
ROWS += [
    row(
        "klpolicy.dynamics.expected_tree_update",
        rule=(CHOICE, "grpo"),
        logits=(TREE_LOGITS, [[0.0, 0.0], [[0.0, 0.0], [0.0, 0.0]]]),
        **_TREE_DYN,
    ),
    row("klpolicy.dynamics.tree_landing_point", rule=(CHOICE, "gspo"), **_TREE_DYN),
]
if "klpolicy.plotting" in MODULES:
    ROWS.append(
        row(
            _PL + "soft_best_of_n",
            ref=(PROB, P),
            reward=(REWARD, R),
            n=(COUNT, 2),
            lams=(_opt(COEF), [0.0, 0.5]),
        )
    )
RESULTS_ROUND = {
    # results: what these callables return (built by klpolicy, no user input)
    "klpolicy.best_of_n.CalibratedPartition",
    "klpolicy.best_of_n.OptimalExponent",
    "klpolicy.best_of_n.SoftBestOfNFrontier",
    "klpolicy.best_of_n.SoftBestOfNGap",
    "klpolicy.dynamics.TreeLanding",
    # a registry row: the definition of a transform in best_of_n.CALIBRATED_TRANSFORMS,
    # written by whoever adds one (calibrated_partition takes its name, not the row)
    "klpolicy.best_of_n.CalibratedTransform",
}


RESULTS = {
    "klpolicy.diversity.EntropyStep",
    "klpolicy.dynamics.FixedPoint",
    "klpolicy.dynamics.Landing",
    "klpolicy.dynamics.Rule",
    "klpolicy.dynamics.Trajectory",
    "klpolicy.Frontier",
    "klpolicy.sequences.Ceiling",
    "klpolicy.sequences.SoftBellman",
    "klpolicy.sequences.TokenKLProfile",
    "klpolicy.sampling.SamplerTree",
    "klpolicy.sampling.SamplerMismatch",
    "klpolicy.sampling.CorrectedMoments",
    "klpolicy.sampling.CorrectedGradient",
    "klpolicy.sampling.CutSensitivity",
    "klpolicy.estimators.Flow",
    "klpolicy.estimators.Stability",
    "klpolicy.estimators.GaussianTable",
    "klpolicy.control.SimulationTrace",
    "klpolicy.control.StabilityRegion",
    "klpolicy.best_of_n.BestOfNComparison",
    "klpolicy.best_of_n.BestOfNCurve",
    "klpolicy.overoptimization.GaoFit",
    "klpolicy.overoptimization.GoldPeak",
    "klpolicy.overoptimization.OptimizationCurve",
    "klpolicy.overoptimization.ProxyGoldProblem",
    "klpolicy.preference.DPOFit",
    "klpolicy.preference.GeometricMixtureLaws",
    "klpolicy.preference.NashEquilibrium",
    "klpolicy.preference.NashMDRate",
    "klpolicy.preference.PairGradient",
    "klpolicy.preference.RewardDecomposition",
    "klpolicy.diversity.BestOfNDiversity",
    "klpolicy.diversity.DiversityCurve",
    "klpolicy.diversity.KLDecomposition",
    "klpolicy.calibration.CalibrationCurve",
    "klpolicy.calibration.CalibrationThreshold",
    "klpolicy.retention.RetentionCurve",
    "klpolicy.torch.FitResult",
    # registry rows: the definition of an estimator or a pair loss (and a loss option),
    # written by whoever adds one
    "klpolicy.estimators.Estimator",
    "klpolicy.preference.PairLoss",
    "klpolicy.preference.LossOption",
    "klpolicy.preference.LossComparison",
    "klpolicy.preference.OptimumSet",
    "klpolicy.FDivergence",
    "klpolicy.FFrontier",
    *RESULTS_ROUND,
}


def _rows_by_name():
    return {r.qualname: r for r in ROWS if r.qualname.rpartition(".")[0] in MODULES}


def _public_callables():
    out = {}
    for m in MODULES:
        mod = importlib.import_module(m)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) and not inspect.ismodule(obj):
                out[f"{m}.{name}"] = obj
    return out


def _cases():
    cases = []
    for r in _rows_by_name().values():
        fn = resolve(r.qualname)
        kinds = dict(r.kinds)
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):  # pragma: no cover
            params = {}
        if "axis" in params and "axis" not in kinds:
            kinds["axis"] = (AXIS, -1)  # every `axis` is an axis: no table entry needed
        arrays = [a for a, (k, _) in kinds.items() if k.name.rstrip("?") in ARRAY_KINDS]
        for arg, (kind, valid) in kinds.items():
            for label, bad in kind.bad(valid):
                if label == "mismatched" and len(arrays) < 2:
                    continue  # a lone array has nothing to mismatch
                cases.append(
                    pytest.param(
                        r, arg, bad, id=f"{r.qualname.removeprefix('klpolicy.')}-{arg}-{label}"
                    )
                )
    return cases


# ----------------------------------------------------------------------------------------
# The tests
# ----------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _close_figures_and_bound_time():
    def _hang(signum, frame):
        raise TimeoutError("the call ran for more than 20 s: a count without an upper bound?")

    old = signal.signal(signal.SIGALRM, _hang)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
    if "klpolicy.plotting" in MODULES:
        import matplotlib.pyplot as plt

        plt.close("all")


def test_every_public_callable_has_a_row():
    rows = _rows_by_name()
    missing = sorted(set(_public_callables()) - set(rows) - RESULTS)
    assert not missing, (
        "public callables without a row in tests/test_bad_inputs.py: "
        + ", ".join(missing)
        + ". Add a row(...) to ROWS giving a small valid call and the kind of each argument "
        "(PROB, REWARD, COEF, KL, COUNT, ...), or add the name to RESULTS if it is a result "
        "container that takes no user input."
    )
    stale = sorted(set(rows) - set(_public_callables()))
    assert not stale, f"rows for names that are no longer public: {stale}"


def pytest_generate_tests(metafunc):
    """Parametrise the two sweeps once the whole module has run, so that they see every row.

    A ``@pytest.mark.parametrize`` here would read ``ROWS`` when the decorator runs, missing
    the rows added further down the file (the estimators' and the testbed's).
    """
    if metafunc.function is test_base_call_is_valid:
        rows = list(_rows_by_name().values())
        metafunc.parametrize("r", rows, ids=[r.qualname for r in rows])
    elif metafunc.function is test_bad_input_is_refused_by_name:
        metafunc.parametrize(("r", "arg", "bad"), _cases())


@pytest.mark.slow
def test_base_call_is_valid(r):
    """Each row's valid call succeeds, so that a refusal below is about the one bad argument."""
    if r.qualname in NO_BASE_CALL:
        pytest.skip(NO_BASE_CALL[r.qualname])
    out = r.call()
    if hasattr(out, "_draw_was_started"):  # a matplotlib animation: drawn, as a notebook would
        out._init_draw()
        out._draw_was_started = True


@pytest.mark.slow  # about 6,000 calls: 30 s of CPU
def test_bad_input_is_refused_by_name(r, arg, bad):
    try:
        out = r.call(**{arg: bad})
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        assert f"`{arg}`" in msg or f"`{arg}[" in msg, (
            f"{r.qualname}({arg}={bad!r}) raised {type(exc).__name__} without naming `{arg}`: {msg}"
        )
        assert "\n" not in msg.strip(), f"a one-line message, please: {msg!r}"
    except Exception as exc:  # the point is to report what escaped
        pytest.fail(
            f"{r.qualname}({arg}={bad!r}) raised {type(exc).__name__} ({exc}); "
            f"expected a ValueError or TypeError naming `{arg}`"
        )
    else:
        pytest.fail(f"{r.qualname}({arg}={bad!r}) accepted a bad input and returned {out!r:.200}")


# --- KL terms as trainers write them: expected gradients, divergences, the term suite -----
ROWS += [
    row(
        "klpolicy.estimators.fixed_point_stability",
        policy=(PROB, P),
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(COEF, 1.0),
        estimator=(CHOICE, "k3"),
        placement=(CHOICE, "loss"),
        sampler=(_opt(LOGITS), [0.1, 0.0, -0.1]),
        ratio=(CHOICE, "detached"),
        ratio_clip=(_opt(RATIO_CLIP), (0.5, 2.0)),
        sample_reward=(_opt(CHOICE), "sampler"),
    ),
    row(
        "klpolicy.estimators.fixed_point",
        ref=(PROB, P),
        reward=(REWARD, R),
        beta=(COEF, 1.0),
        estimator=(CHOICE, "k3"),
        placement=(CHOICE, "loss"),
        sampler=(_opt(LOGITS), [0.1, 0.0, -0.1]),
        # the detached ratio: with the differentiable one k3 in the loss has no interior
        # fixed point on this problem (the base call raised)
        ratio=(CHOICE, "detached"),
        ratio_clip=(_opt(RATIO_CLIP), (0.5, 2.0)),
        sample_reward=(_opt(CHOICE), "sampler"),
    ),
    row(
        "klpolicy.estimators.divergence_gradient",
        logits=(LOGITS, [0.0, 0.1, 0.2]),
        ref=(PROB, P),
        divergence=(CHOICE, "chi2"),
    ),
]


# --- klpolicy.testbed: refused before any training --------------------------------------
try:
    import torch as _torch
    import trl  # noqa: F401

    MODULES.append("klpolicy.testbed")

    def _zero_lm(ids):
        """A model of three tokens, uniform: ids -> next-token logits (B, 3)."""
        return _torch.zeros(len(ids), 3)

    from klpolicy.testbed import bandit_task as _bandit_task

    _BANDIT = _bandit_task()

except ImportError:  # pragma: no cover - the testbed needs torch, transformers and trl
    _zero_lm = None
    _BANDIT = None

#: a law over the bandit's seven completions (a valid `law` of fitted_task)
FIT_LAW = [0.3, 0.2, 0.1, 0.05, 0.05, 0.1, 0.2]

_TB = "klpolicy.testbed."
TOKEN_IDS = Kind(
    "token ids",
    lambda v: [
        ("empty", []),
        ("negative", [-1]),
        ("fraction", [0.5]),
        ("ragged", [[0], [1, 2]]),
        ("complex", [1j]),
        *TYPES,
    ],
)
TASK = Kind("testbed task", lambda v: [(k, x) for k, x in TYPES if k != "None"] + [("number", 3)])
DEVICE = Kind("device", lambda v: [("unknown", "no-such-device"), ("int", 3), ("bool", True)])
SEED = Kind("seed", lambda v: [(k, x) for k, x in _count_bad(v) if k != "zero"])
PROMPTS = Kind(
    "prompt texts",
    lambda v: [
        ("bare-str", v[0]),  # a string is a sequence of characters, not of prompts
        ("empty", ()),
        ("empty-text", (*v, " ")),
        ("number-item", (*v, 3)),
        ("list-of-lists", [list(v)]),
        *[(k, x) for k, x in TYPES if k != "str"],
    ],
)
ROWS += [
    # run's valid call trains (tests/testbed/test_runner.py); every bad call here is refused
    # before TRL is set up
    row(
        _TB + "run",
        trainer=(CHOICE, "trl-rloo"),
        task=(_opt(TASK), None),
        steps=(COUNT, 1),
        seed=(SEED, 0),
        device=(_opt(DEVICE), "cpu"),
        law_every=(COUNT, 1),
        num_threads=(_opt(COUNT), 1),
    ),
    row(
        _TB + "sequence_law",
        model=(CALLABLE, _zero_lm),
        prompt_ids=(TOKEN_IDS, [0]),
        max_new_tokens=(COUNT, 2),
        eos_token_id=(_opt(Kind("eos ids", lambda v: TOKEN_IDS.bad(v)[1:])), 2),
    ),
    row(_TB + "bandit_task", model_seed=(SEED, 0)),
    row(_TB + "tree_task", model_seed=(SEED, 0)),
    row(_TB + "prompts_task", model_seed=(SEED, 0)),
    # fitted references: every bad call is refused before the fit
    row(
        _TB + "fitted_task",
        task=(TASK, _BANDIT),
        law=(PROB, FIT_LAW),
        tol=(POS, 1e-6),
        steps=(COUNT, 2000),
    ),
    row(_TB + "reachable_law", task=(TASK, _BANDIT), law=(PROB, FIT_LAW)),
    row(_TB + "task_completions", task=(TASK, _BANDIT)),
    row(_TB + "skewed_bandit_task", model_seed=(SEED, 0)),
    # a task's prompts are checked when it is built (its other fields are what run() reads)
    row(
        _TB + "Task",
        fixed={
            "name": "t",
            "vocabulary": ("[PAD]", "[EOS]", "q"),
            "max_new_tokens": 1,
            "reward": lambda prompt, ids: 0.0,
        },
        prompts=(PROMPTS, ("q",)),
    ),
]
RESULTS |= {
    # testbed containers: the adapter table's rows and results, and a fitted task (what
    # fitted_task builds)
    "klpolicy.testbed.Adapter",
    "klpolicy.testbed.FittedTask",
    "klpolicy.testbed.SequenceLaw",
    "klpolicy.testbed.TestbedResult",
}
#: rows whose valid call is too slow for the base-call sweep, with where it is tested
NO_BASE_CALL = {
    "klpolicy.testbed.run": "trains a model: tests/testbed/test_runner.py",
    "klpolicy.testbed.fitted_task": "fits a model: tests/testbed/test_fit.py",
    "klpolicy.testbed.skewed_bandit_task": "fits a model: tests/testbed/test_fit.py",
}


# --- exact messages of the dynamics, testbed and horizon callables (issue 40, item 19) ---
def _exact_message_rows():
    import klpolicy as kp
    from klpolicy import best_of_n as bn
    from klpolicy import diversity as dv
    from klpolicy import dynamics as dy
    from klpolicy.estimators import divergence_gradient, fixed_point_stability

    lp = [0.1, 0.0, -0.1]
    out = [
        (
            lambda: dy.expected_update("grpo", [np.nan, 0, -0.1], P, R, 0.5),
            "`logits` must be finite or -inf; found nan at index 0",
        ),
        (
            lambda: dy.expected_update("grpo", lp, P, R, -1.0),
            "`beta` must be a non-negative finite number; got -1.0",
        ),
        (
            lambda: dy.expected_update("grpo", lp, P, R, 0.5, num_generations=1),
            "`num_generations` must be at least 2 (a group needs two members) or None; got 1",
        ),
        (
            lambda: dy.expected_update("nope", lp, P, R, 0.5),
            "`rule` must be one of 'grpo', 'gspo', 'rloo', 'reinforce', 'ppo', 'distill', "
            "'clip_cov', 'kl_cov'; got 'nope'",
        ),
        (
            lambda: dy.landing_point("grpo", [0.5, 0.6, 0.2], R, 0.5),
            "`ref` must sum to 1 along axis -1; it sums to 1.3 (tolerance 1.5e-08); "
            "klpolicy never renormalises silently",
        ),
        (
            lambda: dy.landing_point("grpo", P, R, 0.5, loss_type="nope"),
            "`loss_type` must be one of 'grpo', 'bnpo', 'dr_grpo', 'dapo'; got 'nope'",
        ),
        (
            lambda: dy.trajectory("rloo", P, R, 0.5, steps=2**63, lr=0.5),
            "`steps` must be at most 100,000,000 (a loop length or an allocation that large "
            "would not finish); got 9223372036854775808",
        ),
        (
            lambda: dy.trajectory("rloo", P, R, 0.5, steps=3, lr=0.5, optimizer="adam"),
            "`optimizer` must be one of 'sgd', 'natural'; got 'adam'",
        ),
        (
            lambda: dy.beta_fit(P, Q, [1.0, 2.0]),
            "`reward` must have the same size as `ref` along the probability axis; got 2 and 3",
        ),
        (
            lambda: bn.soft_best_of_n_policy(P, R, 2, -0.5),
            "`lam` must be non-negative; found -0.5",
        ),
        (lambda: bn.soft_best_of_n_policy(P, R, 0, 0.5), "`n` must be an integer >= 1; got 0"),
        (
            lambda: kp.suboptimality([0.2, 0.3], P, R, 1.0),
            "`policy` must sum to 1 along axis -1; it sums to 0.5 (tolerance 1.5e-08); "
            "klpolicy never renormalises silently",
        ),
        (lambda: kp.suboptimality(Q, P, R, -1.0), "`beta` must be non-negative; found -1"),
        (
            lambda: dv.entropy_step([0, 0.1, 0.2], R, np.inf),
            "`eta` must be a finite real number; got inf",
        ),
        (
            lambda: dv.entropy_step([0, 0.1, 0.2], R, 0.1, step="sgd"),
            "`step` must be one of 'natural', 'vanilla'; got 'sgd'",
        ),
        (  # numpy's "inhomogeneous shape" before
            lambda: divergence_gradient([0.0, 0.1], [[0.5, 0.5], [1.0]], "chi2"),
            "`ref` must be a rectangular array of real numbers; got a ragged or malformed "
            "sequence [[0.5, 0.5], [1.0]]",
        ),
        (  # the logits' check said `logits`, a name the caller never used
            lambda: fixed_point_stability(
                [0.5, 0.3, 0.2, 0.0], P, R, 1.0, estimator="k3", placement="loss"
            ),
            "`policy` must have the same size as `ref` along the probability axis; got 4 and 3",
        ),
    ]
    if "klpolicy.testbed" in MODULES:
        from klpolicy import testbed as tb

        out += [
            (
                lambda: tb.run("trl-ppo", steps=1, seed=0),
                "`trainer` must be one of 'klpolicy-exact', 'klpolicy-grpo', 'klpolicy-ppo', "
                "'klpolicy-reinforce', 'trl-dpo', 'trl-grpo', 'trl-rloo'; got 'trl-ppo'",
            ),
            (  # klpolicy's own trainers: their options, refused before the model is built
                lambda: tb.run("klpolicy-exact", steps=1, seed=0, scale_rewards="none"),
                "unknown option `scale_rewards` for klpolicy-exact (its options are beta, "
                "learning_rate)",
            ),
            (
                lambda: tb.run("klpolicy-exact", steps=1, seed=0, beta=0),
                "`beta` must be a positive finite number; got 0.0",
            ),
            (
                lambda: tb.run("klpolicy-reinforce", steps=1, seed=0, estimator="k3+"),
                "`estimator` must be one of 'k1', 'k2', 'k3'; got 'k3+'",
            ),
            (
                lambda: tb.run("klpolicy-reinforce", steps=1, seed=0, placement=None),
                "`placement` must be one of 'reward', 'loss'; got None",
            ),
            (
                lambda: tb.run("klpolicy-reinforce", steps=1, seed=0, batch_size=2**63),
                "`batch_size` must be at most 4,096 (a loop length or an allocation that large "
                "would not finish); got 9223372036854775808",
            ),
            (
                lambda: tb.run("klpolicy-grpo", steps=1, seed=0, n_groups=1.5),
                "`n_groups` must be an integer >= 1; got 1.5",
            ),
            (
                lambda: tb.run("trl-rloo", steps=2**63, seed=0),
                "`steps` must be at most 100,000,000 (a loop length or an allocation that large "
                "would not finish); got 9223372036854775808",
            ),
            (
                lambda: tb.run("trl-rloo", steps=1, seed=-1),
                "`seed` must be an integer >= 0; got -1",
            ),
            (
                lambda: tb.run("trl-rloo", "bandit", steps=1, seed=0),
                "`task` must be a klpolicy.testbed.Task (bandit_task() builds one) or None; "
                "got 'bandit'",
            ),
            (
                lambda: tb.run("trl-rloo", steps=1, seed=0, device="gpu0"),
                '`device` must be None, "cpu" or "cuda"; got \'gpu0\'',
            ),
            (
                lambda: tb.sequence_law(_zero_lm, [0], max_new_tokens=30),
                "`max_new_tokens` = 30 with a vocabulary of 3 gives more than 1,000,000 "
                "sequences to enumerate (every one is held in memory); lower it or pass "
                "`eos_token_id`",
            ),
            (
                lambda: tb.sequence_law(_zero_lm, [[0], [1, 2]], max_new_tokens=1),
                "`prompt_ids` must be token ids: integers >= 0 in a flat sequence; got "
                "[[0], [1, 2]]",
            ),
            (
                lambda: tb.sequence_law(None, [0], max_new_tokens=1),
                "`model` must be callable (a causal LM or ids -> logits); got None",
            ),
            (lambda: tb.bandit_task(model_seed=-1), "`model_seed` must be an integer >= 0; got -1"),
            (lambda: tb.tree_task(model_seed=-1), "`model_seed` must be an integer >= 0; got -1"),
            (
                lambda: tb.fitted_task(tb.bandit_task(), [0.3, 0.2, 0.1, 0.15, 0.0, 0.05, 0.2]),
                "`law` must be positive on every completion: a softmax model never gives "
                "probability 0; found 0 at completion (4,) (give it a small positive "
                "probability instead)",
            ),
            (
                lambda: tb.fitted_task(tb.bandit_task(), FIT_LAW[:6]),
                "`law` must have one probability for each of the task's 7 completions; got 6",
            ),
            (
                lambda: tb.fitted_task(tb.bandit_task(), {(3,): 1.0}),
                "`law` must give every one of the task's 7 completions a probability; 6 "
                "missing, the first (0,)",
            ),
            (
                lambda: tb.fitted_task(tb.bandit_task(), {(9,): 1.0}),
                "`law` has the key (9,), which is not a completion of the task (a tuple of "
                "token ids such as (0,); task_completions(task) lists them)",
            ),
            (
                lambda: tb.fitted_task(tb.bandit_task(), [x * 2 for x in FIT_LAW]),
                "`law` must sum to 1 (within 1e-9); it sums to 2.0; klpolicy never "
                "renormalises silently",
            ),
            (
                lambda: tb.fitted_task(tb.bandit_task(), FIT_LAW, tol=1.0),
                "`tol` must be in [1e-9, 1) (nats); got 1.0",
            ),
            (
                lambda: tb.fitted_task(tb.prompts_task(), FIT_LAW + [0.0]),
                "`law` must have one row per prompt: the task has 3, `law` 1",
            ),
            (
                lambda: tb.fitted_task(
                    tb.Task("tied", ("[PAD]", "[EOS]", "q", "a", "b"), ("q",), 3, lambda x, c: 0.0),
                    [1 / 85] * 85,
                ),
                "`law` is out of the model's reach: its next-token laws after ['q', 'q q', "
                "'q q q'] differ, and the task's Llama (no absolute positions) gives every "
                "repetition of one token the same next-token law; no weights come nearer than "
                "KL = 0.0216 (`tol` = 1e-06); reachable_law(task, law) is the nearest law it "
                "can fit",
            ),
            (
                lambda: tb.prompts_task(model_seed=-1),
                "`model_seed` must be an integer >= 0; got -1",
            ),
            (
                lambda: tb.Task("t", ("[PAD]", "[EOS]", "q"), "q", 1, lambda i, c: 0.0),
                '`prompts` must be a non-empty tuple of prompt texts (one prompt is ("q",)); '
                "got 'q'",
            ),
            (
                lambda: tb.Task(
                    "t", ("[PAD]", "[EOS]", "q"), ("q w",), 1, lambda i, c: 0.0
                ).prompt_ids(),
                "`prompts[0]` holds the word 'w', which is not in the task's vocabulary "
                "('[PAD]', '[EOS]', 'q')",
            ),
        ]
    return out


_EXACT = _exact_message_rows()


@pytest.mark.parametrize(("call", "msg"), _EXACT, ids=[m[:48] for _, m in _EXACT])
def test_new_callables_give_exact_messages(call, msg):
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == msg


# --- permutation: outcomes permuted in, the answer permuted out ----------------------------
def _permutation_cases():
    import klpolicy as kp
    from klpolicy import best_of_n as bn
    from klpolicy import dynamics as dy
    from klpolicy import preference as pf

    ref = np.array([0.3, 0.05, 0.25, 0.15, 0.25])
    rew = np.array([0.7, -1.2, 0.3, 1.1, 0.3])  # a tie (0.3): equal outcomes stay equal
    pi = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    prefs = np.array(
        [
            [0.5, 0.7, 0.4, 0.8, 0.6],
            [0.3, 0.5, 0.2, 0.55, 0.35],
            [0.6, 0.8, 0.5, 0.9, 0.45],
            [0.2, 0.45, 0.1, 0.5, 0.3],
            [0.4, 0.65, 0.55, 0.7, 0.5],
        ]
    )
    vec = [  # (name, fn(ref, reward, pi, prefs) -> vector over the outcomes)
        ("optimal_policy", lambda q, r, p, w: kp.optimal_policy(q, r, 0.7)),
        ("best_of_n_policy", lambda q, r, p, w: kp.best_of_n_policy(q, r, 4)),
        ("soft_best_of_n_policy", lambda q, r, p, w: bn.soft_best_of_n_policy(q, r, 4, 0.5)),
        ("landing_point(grpo)", lambda q, r, p, w: dy.landing_point("grpo", q, r, 0.5).policy),
        ("landing_point(rloo)", lambda q, r, p, w: dy.landing_point("rloo", q, r, 0.5).policy),
    ]
    vec += [
        (
            f"f_optimal_policy({d})",
            lambda q, r, p, w, d=d: kp.f_optimal_policy(
                q, r, 0.7, divergence=d, alpha=1.5 if d == "alpha" else None
            ),
        )
        for d in kp.DIVERGENCES
    ]
    vec += [
        (
            f"population_optimum({loss})",
            lambda q, r, p, w, loss=loss, o=o: pf.population_optimum(q, w, 0.5, loss=loss, **o),
        )
        for loss, o in [
            ("sigmoid", {}),
            ("ipo", {}),
            ("hinge", {}),
            ("robust", {"label_smoothing": 0.1}),
        ]
    ]
    scal = [
        ("soft_value", lambda q, r, p, w: kp.soft_value(q, r, 0.7)),
        ("optimal_kl", lambda q, r, p, w: kp.optimal_kl(q, r, 0.7)),
        ("max_kl", lambda q, r, p, w: kp.max_kl(q, r)),
        ("beta_for_kl", lambda q, r, p, w: kp.beta_for_kl(q, r, 0.2)),
        ("kl_divergence", lambda q, r, p, w: kp.kl_divergence(p, q)),
        ("cross_entropy", lambda q, r, p, w: kp.cross_entropy(p, q)),
        ("total_variation", lambda q, r, p, w: kp.total_variation(p, q)),
        ("entropy", lambda q, r, p, w: kp.entropy(p)),
        ("effective_support", lambda q, r, p, w: kp.effective_support(p)),
        ("expected_reward", lambda q, r, p, w: kp.expected_reward(p, r)),
        ("objective", lambda q, r, p, w: kp.objective(p, q, r, 0.7)),
        ("suboptimality", lambda q, r, p, w: kp.suboptimality(p, q, r, 0.7)),
        ("best_of_n_kl", lambda q, r, p, w: kp.best_of_n_kl(q, r, 4)),
        ("soft_best_of_n_kl", lambda q, r, p, w: bn.soft_best_of_n_kl(q, r, 4, 0.5)),
        ("best_of_n_expected_reward", lambda q, r, p, w: bn.best_of_n_expected_reward(q, r, 4)),
        ("best_of_n_win_rate", lambda q, r, p, w: bn.best_of_n_win_rate(q, r, 4)),
        ("frontier.kl", lambda q, r, p, w: kp.frontier(q, r, [0.3, 1.0]).kl),
    ]
    scal += [
        (
            f"f_soft_value({d})",
            lambda q, r, p, w, d=d: kp.f_soft_value(
                q, r, 0.7, divergence=d, alpha=1.5 if d == "alpha" else None
            ),
        )
        for d in kp.DIVERGENCES
    ]
    scal += [
        (
            f"f_divergence({d})",
            lambda q, r, p, w, d=d: kp.f_divergence(
                p, q, divergence=d, alpha=1.5 if d == "alpha" else None
            ),
        )
        for d in kp.DIVERGENCES
    ]
    data = (ref, rew, pi, prefs)
    return [pytest.param(n, f, True, data, id=n) for n, f in vec] + [
        pytest.param(n, f, False, data, id=n) for n, f in scal
    ]


@pytest.mark.parametrize(("name", "fn", "is_vector", "data"), _permutation_cases())
def test_permuted_outcomes_give_the_permuted_answer(name, fn, is_vector, data):
    ref, rew, pi, prefs = data
    base = np.asarray(fn(ref, rew, pi, prefs), dtype=np.float64)
    rng = np.random.default_rng(7)
    for _ in range(4):
        perm = rng.permutation(ref.size)
        got = np.asarray(
            fn(ref[perm], rew[perm], pi[perm], prefs[np.ix_(perm, perm)]), dtype=np.float64
        )
        want = base[perm] if is_vector else base
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15, err_msg=f"{name} {perm}")
