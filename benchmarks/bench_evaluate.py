"""``airplan evaluate --workers`` / ``--executor``: a grid (default the quick one) from a fresh
catalog, serial against parallel, with where the time goes.

Runs ``airplan evaluate --grid GRID --no-figures`` into a new catalog once per ``--workers`` value
(default 1 and 2, in this one run so both see the same machine), and with ``--dask N`` once more
on a Dask ``LocalCluster`` of N single-threaded worker processes on loopback (started before the
timed command, which connects with ``--executor``; needs ``airplan-qo[dask]``), checks that every
run was trained, and prints one JSON object:

- ``wall_s``: the whole command per configuration; ``ratio_vs_first``: its wall time over the
  first configuration's (``--workers 2`` against ``--workers 1``: the target is <= 0.6 on the
  quick grid), each repetition's in ``ratios``;
- ``split_s``: where the evaluating process spent that time, from the report's
  ``summary.json`` (``timing``): ``startup`` (the process's start, imports and the catalog's
  opening: the command's wall time less the evaluation's own), ``plan`` (ANALYZE WORKLOAD and
  planning of every (workload, seed)), ``train`` (runs it trained itself; a serial run's
  streamed recording included), ``wait`` (waiting for worker processes), ``record`` (writing
  the runs returned by workers, and the cache tags), ``read`` (reading the runs back),
  ``analysis`` (the cross-validated fits and the report; serial) and ``other``; ``split`` the
  same as shares of the wall time;
- ``train_seconds`` and ``seconds_per_run``: the runs' own training time summed, and per run (it
  grows when runs side by side contend for the machine); ``workers_busy`` = training seconds /
  (workers x measurement phase), which falls when the workers wait for the calling process;
- ``phases``: when (seconds into the measurement) the first run started training, the last
  run was submitted and the last run started, and the busy share of the training slots in
  each phase (``busy_startup`` before the first run, ``busy_planning`` while runs are still
  being submitted, ``busy_queued`` until the last one starts, ``busy_tail`` after it): where
  the workers wait;
- the machine and its load average before and after.

``--baseline DIR`` also times another source tree of the package (for instance the main
branch: ``git archive main | tar -x -C DIR``), run with ``PYTHONPATH=DIR``, alternately with
this one (for each worker count: the baseline, then this tree; the baseline's command runs in
its folder), and adds ``after_over_before``:
this tree's wall time over the baseline's, per configuration. A tree whose evaluation does not
report ``timing`` gets only ``startup`` and ``analysis`` (the wall time after its measurement
phase) in its split.

    python benchmarks/bench_evaluate.py                 # --workers 1 and 2
    python benchmarks/bench_evaluate.py --workers 1 2 4
    python benchmarks/bench_evaluate.py --workers 1 --dask 2
    python benchmarks/bench_evaluate.py --grid dcliques --seeds 8 --workers 4 16   # longer runs
    python benchmarks/bench_evaluate.py --repeats 3     # 1, 2, 1, 2, 1, 2: medians, each ratio
    python benchmarks/bench_evaluate.py --repeats 3 --baseline /tmp/airplan-main

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

#: The parts of the evaluating process's time, in the order they are printed.
PARTS = ("startup", "plan", "train", "wait", "record", "read", "analysis", "other")


def _evaluate(grid: str, seeds: int | None, label: str, args: list[str], folder: Path,
              code: str | None = None) -> dict[str, float]:
    """One timed ``airplan evaluate`` into a fresh catalog (with ``code`` first on the
    PYTHONPATH where given): its wall time, measurement phase, the runs' training seconds and
    the split of its time (:data:`PARTS`)."""
    catalog = folder / f"eval-{label}.duckdb"
    out = folder / f"out-{label}"
    cmd = [sys.executable, "-m", "airplan_qo.cli", "evaluate", "--grid", grid, "--no-figures",
           "--quiet", "--catalog", str(catalog), "--out", str(out), *args]
    g = load_grid(grid)
    if seeds:
        g = g.with_seeds(seeds)
        cmd += ["--seeds", str(seeds)]
    env = dict(os.environ)
    if code:   # ``python -m`` puts the working folder first on sys.path: run in the tree
        env["PYTHONPATH"] = os.pathsep.join([code, *filter(None, [env.get("PYTHONPATH")])])
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=code)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{label}: {' '.join(args)} failed: {done.stderr.strip()[-800:]}")
    if f"{g.n_runs} trained" not in done.stdout:
        raise SystemExit(f"{label}: {' '.join(args)} did not train all {g.n_runs} runs: "
                         f"{done.stdout}")
    summary = json.loads((out / "summary.json").read_text())
    timing = summary.get("timing") or {}
    split = {"startup": wall - summary["wall_s"]}
    if timing:
        split.update(plan=timing["plan_s"], train=timing["train_s"], wait=timing["wait_s"],
                     record=timing["record_s"], read=timing["read_s"],
                     analysis=timing["analysis_s"])
    else:   # a tree that does not split its time: what follows the measurement is analysis
        split["analysis"] = summary["wall_s"] - summary["measure_s"]
    split["other"] = wall - sum(split.values())
    phases = {f"phase_{k}": timing[k] for k in PHASES if k in timing}
    return {"wall": wall, "measure": timing.get("measure_s", summary["measure_s"]),
            "train_seconds": summary["train_seconds"], **phases,
            **{f"split_{k}": v for k, v in split.items()}}


#: the measurement's phases (``airplan_qo.evaluation.runner.occupancy``): when the first run
#: started, the last was submitted and the last started, and how busy the slots were in each
PHASES = ("first_start_s", "submitted_s", "last_start_s", "busy_startup", "busy_planning",
          "busy_queued", "busy_tail")


def _dask(grid: str, seeds: int | None, n: int, folder: Path, label: str,
          code: str | None) -> dict[str, float]:
    from distributed import LocalCluster

    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=":0") as cluster:
        return _evaluate(grid, seeds, label, ["--executor", cluster.scheduler_address],
                         folder, code)


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
    parser.add_argument("--baseline", metavar="DIR",
                        help="also time the package in this source tree, alternately")
    args = parser.parse_args()
    if args.baseline and not (Path(args.baseline) / "airplan_qo" / "__init__.py").is_file():
        raise SystemExit(f"--baseline {args.baseline}: no airplan_qo package in that folder")
    codes = ([("before", str(Path(args.baseline).resolve()))] if args.baseline else []) \
        + [("after" if args.baseline else "", None)]
    load_before = os.getloadavg()
    reps: list[dict[str, dict[str, float]]] = []
    slots: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="airplan-bench-evaluate-") as tmp:
        for r in range(max(1, args.repeats)):
            one: dict[str, dict[str, float]] = {}
            for n in args.workers:
                for tag, code in codes:
                    name = f"{tag}:{n}" if tag else str(n)
                    slots[name] = n
                    one[name] = _evaluate(args.grid, args.seeds, f"{tag or 'w'}{n}-r{r}",
                                          ["--workers", str(n)], Path(tmp), code)
            if args.dask:
                for tag, code in codes:
                    name = f"{tag}:dask-{args.dask}" if tag else f"dask-{args.dask}"
                    slots[name] = args.dask
                    one[name] = _dask(args.grid, args.seeds, args.dask, Path(tmp),
                                      f"{tag or 'w'}dask-r{r}", code)
            reps.append(one)
    names = list(reps[0])
    med = {n: {k: statistics.median(rep[n][k] for rep in reps if k in rep[n])
               for k in reps[0][n]} for n in names}
    grid = load_grid(args.grid)
    runs = (grid.with_seeds(args.seeds) if args.seeds else grid).n_runs

    def first_of(name: str) -> str:   # the first worker count of the same tree
        tag = name.split(":")[0] + ":" if ":" in name else ""
        return f"{tag}{args.workers[0]}"

    parts = {n: [p for p in PARTS if f"split_{p}" in med[n]] for n in names}
    report = {
        "grid": args.grid, "seeds": args.seeds, "runs": runs,
        "wall_s": {n: round(med[n]["wall"], 2) for n in names},
        "ratio_vs_first": {n: round(med[n]["wall"] / med[first_of(n)]["wall"], 3)
                           for n in names},
        "ratios": {n: [round(rep[n]["wall"] / rep[first_of(n)]["wall"], 3) for rep in reps]
                   for n in names},
        "measure_s": {n: round(med[n]["measure"], 2) for n in names},
        "measure_ratio_vs_first": {n: round(med[n]["measure"] / med[first_of(n)]["measure"], 3)
                                   for n in names},
        "split_s": {n: {p: round(med[n][f"split_{p}"], 3) for p in parts[n]} for n in names},
        "split": {n: {p: round(med[n][f"split_{p}"] / med[n]["wall"], 3) for p in parts[n]}
                  for n in names},
        "train_seconds": {n: round(med[n]["train_seconds"], 2) for n in names},
        "seconds_per_run": {n: round(med[n]["train_seconds"] / runs, 3) for n in names},
        "workers_busy": {n: round(med[n]["train_seconds"] / (slots[n] * med[n]["measure"]), 2)
                         for n in names},
        "phases": {n: {k: round(med[n][f"phase_{k}"], 2) for k in PHASES
                       if f"phase_{k}" in med[n]} for n in names},
        "repeats": len(reps),
        "wall_s_each": {n: [round(rep[n]["wall"], 2) for rep in reps] for n in names},
    }
    if args.baseline:
        report["baseline"] = str(Path(args.baseline).resolve())
        report["after_over_before"] = {
            n.split(":", 1)[1]: round(med[n]["wall"] / med["before:" + n.split(":", 1)[1]]["wall"],
                                      3) for n in names if n.startswith("after:")}
    report.update({"load_avg_before": load_before, "load_avg_after": os.getloadavg(),
                   "cpu_count": os.cpu_count(), "machine": platform.platform(),
                   "python": platform.python_version()})
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
