"""``airplan evaluate --workers`` / ``--executor``: a grid (default the quick one) from a fresh
catalog, serial against parallel.

Runs ``airplan evaluate --grid GRID --no-figures`` into a new catalog once per ``--workers`` value
(default 1 and 2, in this one run so both see the same machine), and with ``--dask N`` once more
on a Dask ``LocalCluster`` of N single-threaded worker processes on loopback (started before the
timed command, which connects with ``--executor``; needs ``airplan-qo[dask]``), checks that every
run was trained, and prints one JSON object: wall seconds per configuration (the whole command:
planning, training, recording, analysis; and its measurement phase alone, without the serial
analysis), the speed-up of each over the first, the mean training seconds of a run (it grows
when runs side by side contend for the machine) and how busy the workers were (it falls when
they wait for the calling process to plan and record), and the machine.

    python benchmarks/bench_evaluate.py                 # --workers 1 and 2
    python benchmarks/bench_evaluate.py --workers 1 2 4
    python benchmarks/bench_evaluate.py --workers 1 --dask 2
    python benchmarks/bench_evaluate.py --grid dcliques --seeds 8 --workers 4 16   # longer runs
    python benchmarks/bench_evaluate.py --repeats 3     # 1, 2, 1, 2, 1, 2: medians, each ratio

With ``--repeats R`` the configurations are run R times, interleaved (1, 2, 1, 2, ...), each into
a fresh catalog; the figures are medians over the repetitions, and ``ratios`` lists each
repetition's wall time over the first configuration's in the same repetition (on a shared
machine the load drifts: neighbouring runs see about the same).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airplan_qo.evaluation.grid import load_grid


def _evaluate(grid: str, seeds: int | None, label: str, args: list[str], folder: Path
              ) -> tuple[float, float, float]:
    """Wall seconds of the whole command and of its measurement phase (planning, training and
    recording, from the report's ``summary.json``; the analysis after it is serial), and the
    training seconds summed over the runs (each run's own wall time in its worker)."""
    catalog = folder / f"eval-{label}.duckdb"
    cmd = [sys.executable, "-m", "airplan_qo.cli", "evaluate", "--grid", grid, "--no-figures",
           "--quiet", "--catalog", str(catalog), "--out", str(folder / f"out-{label}"), *args]
    g = load_grid(grid)
    if seeds:
        g = g.with_seeds(seeds)
        cmd += ["--seeds", str(seeds)]
    runs = g.n_runs
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = json.loads((folder / f"out-{label}" / "summary.json").read_text())
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    if f"{runs} trained" not in done.stdout:
        raise SystemExit(f"{' '.join(args)} did not train all {runs} runs: {done.stdout}")
    return wall, summary["measure_s"], summary["train_seconds"]


def _dask(grid: str, seeds: int | None, n: int, folder: Path) -> tuple[float, float, float]:
    from distributed import LocalCluster

    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster:
        return _evaluate(grid, seeds, f"dask{n}", ["--executor", cluster.scheduler_address],
                         folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="worker counts to time (the first is the baseline)")
    parser.add_argument("--grid", default="quick",
                        help="built-in grid name or TOML file (default quick: 48 short runs)")
    parser.add_argument("--seeds", type=int, help="seeds per plan (default: the grid's)")
    parser.add_argument("--dask", type=int, metavar="N",
                        help="also time a Dask LocalCluster of N single-threaded workers")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run the configurations this many times, interleaved (medians)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    reps: list[dict[str, tuple[float, float, float]]] = []
    with tempfile.TemporaryDirectory(prefix="airplan-bench-evaluate-") as tmp:
        for r in range(max(1, args.repeats)):
            one: dict[str, tuple[float, float, float]] = {}
            for n in args.workers:
                one[str(n)] = _evaluate(args.grid, args.seeds, f"{n}-r{r}",
                                        ["--workers", str(n)], Path(tmp))
            if args.dask:
                one[f"dask-{args.dask}"] = _dask(args.grid, args.seeds, args.dask, Path(tmp))
            reps.append(one)
    first = str(args.workers[0])
    walls = {k: tuple(statistics.median(rep[k][i] for rep in reps) for i in range(3))
             for k in reps[0]}
    grid = load_grid(args.grid)
    runs = (grid.with_seeds(args.seeds) if args.seeds else grid).n_runs
    base, base_measure, _ = walls[str(args.workers[0])]
    slots = {**{str(n): n for n in args.workers}, **({f"dask-{args.dask}": args.dask}
                                                     if args.dask else {})}
    print(json.dumps({
        "grid": args.grid, "seeds": args.seeds, "runs": runs,
        "wall_s": {n: round(w, 2) for n, (w, _, _) in walls.items()},
        "speedup_vs_first": {n: round(base / w, 2) for n, (w, _, _) in walls.items()},
        "measure_s": {n: round(m, 2) for n, (_, m, _) in walls.items()},
        "measure_speedup_vs_first": {n: round(base_measure / m, 2)
                                     for n, (_, m, _) in walls.items()},
        # a run's own wall time grows when runs side by side share caches, memory bandwidth
        # and clock; busy = run seconds / (workers x measurement phase) falls when the workers
        # wait for this process (planning and recording) instead
        "seconds_per_run": {n: round(t / runs, 3) for n, (_, _, t) in walls.items()},
        "workers_busy": {n: round(t / (slots[n] * m), 2) for n, (_, m, t) in walls.items()},
        "repeats": len(reps),
        "ratios": {n: [round(rep[n][0] / rep[first][0], 2) for rep in reps] for n in walls},
        "wall_s_each": {n: [round(rep[n][0], 2) for rep in reps] for n in walls},
        "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
        "cpu_count": os.cpu_count(), "machine": platform.platform(),
        "python": platform.python_version()}, indent=2))


if __name__ == "__main__":
    main()
