"""The tables ``klpolicy solve`` and ``klpolicy demo`` print: one column per beta."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np

from ..core import optimal_kl, optimal_policy, soft_value
from ..core.internal import validation as V

__all__ = ["beta_label", "print_table", "solve_table"]


def _fmt(x: float, width: int = 10) -> str:
    if math.isinf(x):
        s = "inf" if x > 0 else "-inf"
    elif x == 0 or 1e-4 <= abs(x) < 1e6:
        s = f"{x:.6f}"
    else:
        s = f"{x:.4e}"
    return s.rjust(width)


def beta_label(b: float) -> str:
    """``beta`` as a column label: ``inf`` or the shortest round-trip form.

    Returns
    -------
    str
        The label.
    """
    return "inf" if math.isinf(b) else f"{b:g}"


def solve_table(ref: Sequence[float], reward: Sequence[float], betas: Sequence[float]) -> dict:
    """Everything ``klpolicy solve`` prints, as a dictionary (the ``--json`` payload).

    Returns
    -------
    dict
        ``ref``, ``reward`` and ``columns``: one per beta, with its policy, log-ratios,
        KL, expected reward and soft value.

    Examples
    --------
    >>> out = solve_table([0.5, 0.5], [1.0, 0.0], [0.5])
    >>> [round(p, 4) for p in out["columns"][0]["policy"]]
    [0.8808, 0.1192]
    """
    # the library's validators first: np.asarray(..., dtype=float) drops an imaginary part
    ref_a = V.as_float_array("ref", ref).astype(float)
    rew_a = V.as_float_array("reward", reward).astype(float)
    cols = []
    for b in betas:
        pi = optimal_policy(ref_a, rew_a, b)
        with np.errstate(divide="ignore"):
            lr = np.where(
                ref_a > 0,
                np.log(np.where(pi > 0, pi, 1)) - np.log(np.where(ref_a > 0, ref_a, 1)),
                0,
            )
            lr = np.where((pi == 0) & (ref_a > 0), -np.inf, lr)
        cols.append(
            {
                "beta": float(b),
                "policy": [float(x) for x in pi],
                "log_ratio": [float(x) if ref_a[i] > 0 else None for i, x in enumerate(lr)],
                "kl": float(optimal_kl(ref_a, rew_a, b)),
                "expected_reward": float(np.dot(pi, rew_a)),
                "soft_value": float(soft_value(ref_a, rew_a, b)),
            }
        )
    return {"ref": [float(x) for x in ref_a], "reward": [float(x) for x in rew_a], "columns": cols}


_COLUMN_KEYS = ("beta", "policy", "log_ratio", "kl", "expected_reward", "soft_value")


def check_stream(name: str, file) -> None:
    """Refuse a ``file`` argument that is not a writable text stream, naming it."""
    if file is not None and not callable(getattr(file, "write", None)):
        raise ValueError(
            f"`{name}` must be a text stream with a write() method (sys.stdout, an open "
            f"file, io.StringIO) or None; got {type(file).__name__} {file!r:.60}"
        )


def _check_table(out) -> None:
    if not isinstance(out, dict):
        raise ValueError(
            f"`out` must be the dictionary solve_table returns; got {type(out).__name__}"
        )
    missing = [k for k in ("ref", "reward", "columns") if k not in out]
    if missing:
        raise ValueError(
            f"`out` must be the dictionary solve_table returns (keys 'ref', 'reward', "
            f"'columns'); it lacks {', '.join(map(repr, missing))}"
        )
    cols = out["columns"]
    if not isinstance(cols, (list, tuple)) or not cols:
        raise ValueError(f"`out['columns']` must be a non-empty list of columns; got {cols!r:.60}")
    n = len(out["ref"])
    for j, c in enumerate(cols):
        lacks = [k for k in _COLUMN_KEYS if not isinstance(c, dict) or k not in c]
        if lacks:
            raise ValueError(
                f"`out['columns'][{j}]` must be a column of solve_table (keys "
                f"{', '.join(map(repr, _COLUMN_KEYS))}); it lacks {', '.join(map(repr, lacks))}"
            )
        if len(c["policy"]) != n or len(out["reward"]) != n:
            raise ValueError(
                f"`out['columns'][{j}]['policy']`, `out['ref']` and `out['reward']` must have "
                f"the same length; got {len(c['policy'])}, {n} and {len(out['reward'])}"
            )


def print_table(out: dict, file=None) -> None:
    """Print :func:`solve_table`'s dictionary as aligned columns.

    Raises
    ------
    ValueError
        For an ``out`` that is not :func:`solve_table`'s dictionary, or a ``file`` that is
        not a text stream.
    """
    _check_table(out)
    check_stream("file", file)
    file = file or sys.stdout
    cols = out["columns"]
    single = len(cols) == 1
    head = ["action", "ref", "reward"]
    for c in cols:
        head.append(f"pi*(b={beta_label(c['beta'])})")
        if single:
            head.append("log ratio")
    rows = []
    for i, (q, r) in enumerate(zip(out["ref"], out["reward"])):
        row = [str(i), _fmt(q, 0).strip(), _fmt(r, 0).strip()]
        for c in cols:
            row.append(_fmt(c["policy"][i], 0).strip())
            if single:
                lr = c["log_ratio"][i]
                row.append("(off support)" if lr is None else _fmt(lr, 0).strip())
        rows.append(row)
    summary = [
        (label, [_fmt(c[key], 0).strip() for c in cols])
        for key, label in [
            ("kl", "KL(pi*||ref)"),
            ("expected_reward", "E_pi*[r]"),
            ("soft_value", "soft value"),
        ]
    ]
    # the summary values sit under the pi* columns (every other column with a log ratio)
    step = 2 if single else 1
    under = [[""] * 3 + [x for v in vals for x in (v, "")[:step]] for _, vals in summary]
    # each column one space wider than its own widest entry (at least 12): a long beta
    # label or a long number widens only its own column
    widths = [max(12, *(len(x) + 1 for x in col)) for col in zip(head, *rows, *under)]
    print("".join(h.rjust(w) for h, w in zip(head, widths)), file=file)
    for row in rows:
        print("".join(x.rjust(w) for x, w in zip(row, widths)), file=file)
    print(file=file)
    lead = sum(widths[:3])
    for label, vals in summary:
        col_w = widths[3::step]
        print(label.rjust(lead) + "".join(v.rjust(w) for v, w in zip(vals, col_w)), file=file)
