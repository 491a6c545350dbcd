"""Speed of the f-regularised optima and f_divergence, per row of klpolicy.DIVERGENCES.

For each row (alpha at 0.5 and 3): ``f_optimal_policy`` and ``f_soft_value`` on one
8-outcome problem (per call), ``f_optimal_policy`` on a batch of 2000 rows of 16
outcomes, ``f_divergence`` on that batch, and ``beta_for_divergence`` of a budget of
0.05 nats on the 8-outcome problem (not ``"tv"``, which has none). Each time is the
minimum of ``--repeat`` runs; run it before and after a change, in the same session.

    python benchmarks/f_optima_bench.py [--repeat 5]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import best_time

import klpolicy as kp

ROWS = [(n, None) for n in kp.DIVERGENCES if n != "alpha"] + [("alpha", 0.5), ("alpha", 3.0)]


def _times(name, a, small, batch, repeat):
    """The row's five times in seconds (None for a beta_for_divergence the row refuses)."""
    kw = {"divergence": name, "alpha": a}
    kp.f_optimal_policy(*small, 0.3, **kw)  # warm-up
    out = [
        best_time(lambda: kp.f_optimal_policy(*small, 0.3, **kw), repeat),
        best_time(lambda: kp.f_soft_value(*small, 0.3, **kw), repeat),
        best_time(lambda: kp.f_optimal_policy(*batch, 0.3, **kw), repeat),
        best_time(lambda: kp.f_divergence(batch[0], batch[0][::-1], name, alpha=a), repeat),
    ]
    try:
        kp.beta_for_divergence(*small, 0.05, **kw)
    except ValueError:  # tv: no beta attains most budgets
        return [*out, None]
    return [*out, best_time(lambda: kp.beta_for_divergence(*small, 0.05, **kw), repeat)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    small = (rng.dirichlet(np.ones(8)), rng.normal(size=8))
    batch = (rng.dirichlet(np.ones(16), size=2000), rng.normal(size=(2000, 16)))
    heads = ("pi (8)", "V (8)", "pi (2000x16)", "D (2000x16)", "beta (8)")
    print(f"{'row (ms)':16s}" + "".join(f"{h:>14s}" for h in heads))
    for name, a in ROWS:
        times = _times(name, a, small, batch, args.repeat)
        label = name if a is None else f"{name}={a:g}"
        cells = "".join(f"{'-':>14s}" if t is None else f"{t * 1e3:14.3f}" for t in times)
        print(f"{label:16s}" + cells)


if __name__ == "__main__":
    main()
