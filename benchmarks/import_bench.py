"""Time `import klpolicy` against bare Python and against its floor (numpy + scipy.special).

Each command runs in a fresh interpreter, ``--repeat`` times (default 15); the table
shows the median wall time and the time over bare Python. ``--baseline DIR`` also times
``import klpolicy`` from another checkout (e.g. ``git worktree add /tmp/old v0.1.0``),
in the same run. Run on a quiet machine:

    python benchmarks/import_bench.py --baseline /tmp/old
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "bare python": "pass",
    "numpy + scipy.special (floor)": "import numpy, scipy.special",
    "import klpolicy": "import klpolicy",
}


def _time(code: str, repeat: int, path: str | None = None) -> float:
    env = None if path is None else {**os.environ, "PYTHONPATH": path}
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        # from the checkout's folder: `python -c` puts the working directory first on sys.path
        subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=path)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--baseline", help="another checkout whose import to time too")
    args = parser.parse_args()
    times = {name: _time(code, args.repeat) for name, code in COMMANDS.items()}
    if args.baseline:
        times["import klpolicy (baseline checkout)"] = _time(
            "import klpolicy", args.repeat, args.baseline
        )
    bare = times["bare python"]
    print(f"{'command':45s} {'median s':>9s} {'over bare s':>12s} {'ratio to klpolicy':>18s}")
    for name, t in times.items():
        ratio = (t - bare) / (times["import klpolicy"] - bare)
        print(f"{name:45s} {t:9.3f} {t - bare:12.3f} {ratio:18.2f}")


if __name__ == "__main__":
    main()
