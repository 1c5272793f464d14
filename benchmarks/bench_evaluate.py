"""``airplan evaluate --workers``: the quick grid from a fresh catalog, serial against parallel.

Runs ``airplan evaluate --quick --no-figures`` into a new catalog once per ``--workers`` value
(default 1 and 2, in this one run so both see the same machine), checks that every run was
trained, and prints one JSON object: wall seconds per worker count (the whole command: planning,
training, recording, analysis), the speed-up of each over the first, and the machine.

    python benchmarks/bench_evaluate.py                 # --workers 1 and 2
    python benchmarks/bench_evaluate.py --workers 1 2 4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _evaluate(workers: int, folder: Path) -> float:
    catalog = folder / f"eval-{workers}.duckdb"
    cmd = [sys.executable, "-m", "airplan_qo.cli", "evaluate", "--quick", "--no-figures",
           "--quiet", "--catalog", str(catalog), "--out", str(folder / f"out-{workers}"),
           "--workers", str(workers)]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"--workers {workers} failed: {done.stderr.strip()[-500:]}")
    if "48 trained" not in done.stdout:
        raise SystemExit(f"--workers {workers} did not train all 48 runs: {done.stdout}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="worker counts to time (the first is the baseline)")
    args = parser.parse_args()
    walls: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="airplan-bench-evaluate-") as tmp:
        for n in args.workers:
            walls[n] = _evaluate(n, Path(tmp))
    base = walls[args.workers[0]]
    print(json.dumps({
        "grid": "quick", "runs": 48,
        "wall_s": {str(n): round(w, 2) for n, w in walls.items()},
        "speedup_vs_first": {str(n): round(base / w, 2) for n, w in walls.items()},
        "cpu_count": os.cpu_count(), "machine": platform.platform(),
        "python": platform.python_version()}, indent=2))


if __name__ == "__main__":
    main()
