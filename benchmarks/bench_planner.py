"""Planning time, cold (spectra computed and cached) and warm (served from the catalog cache).

For N in {50, 1000, 10000} (digits at N <= 100, else the generated ``synthetic`` data with 20
samples per client): plans the default candidate space (6 families with their variants x
2 weights rules x 5 sparsity levels) on a fresh catalog file (cold), then plans again (warm).
Reports the wall time of the whole ``Session.plan`` call (statistics, costing and recording the
run with all candidates), the optimizer's own planning time (reading the workload, calibration and
cached topologies, and costing), and of the warm calls the time spent recording the planning run
and its candidates (``planner.recording.record``: one transaction, its COMMIT included). Prints JSON.

    python benchmarks/bench_planner.py [--sizes 50 1000 10000] [--repeats 5]

Target on a 2-core CPU: warm under 50 ms at N = 1000 with at least 30 candidates.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def bench(n: int, repeats: int) -> dict:
    import airplan_qo as aq
    from airplan_qo.planner import optimizer

    recording: list[float] = []
    record = optimizer.record

    def timed_record(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return record(*args, **kwargs)
        finally:
            recording.append(time.perf_counter() - t0)

    optimizer.record = timed_record
    try:
        return _bench(aq, n, repeats, recording)
    finally:
        optimizer.record = record


def _bench(aq, n: int, repeats: int, recording: list[float]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        with aq.connect(Path(tmp) / "bench.duckdb") as db:
            w = aq.Workload(dataset=_dataset(aq, n), clients=n, alpha=0.5, snr_db=10)
            t0 = time.perf_counter()
            cold = db.plan(w)
            cold_s = time.perf_counter() - t0
            warm, inner = [], []
            recording.clear()
            for _ in range(repeats):
                t0 = time.perf_counter()
                r = db.plan(w)
                warm.append(time.perf_counter() - t0)
                inner.append(r.planning_time_ms)
    return {"n": n, "candidates": len(cold.candidates), "cold_s": round(cold_s, 3),
            "warm_ms_median": round(statistics.median(warm) * 1e3, 2),
            "warm_ms_min": round(min(warm) * 1e3, 2),
            "warm_planning_time_ms_median": round(statistics.median(inner), 2),
            "warm_recording_ms_median": round(statistics.median(recording) * 1e3, 2),
            "chosen": cold.chosen.plan.label()}


def _dataset(aq, n: int) -> str:
    """digits where it has enough records for n clients, else the generated ``synthetic`` data
    with 20 samples per client, registered as a user's own data would be."""
    if n <= 100:
        return "digits"
    from airplan_qo.data import load

    name = f"synthetic_{n}"
    aq.register_dataset(name, load("synthetic", seed=0, n_samples=20 * n + 1000,
                                   n_features=20), replace=True)
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        rows.append(bench(n, args.repeats))
        print(json.dumps(rows[-1]), file=sys.stderr)
    print(json.dumps({"benchmark": "planner", "load_avg": os.getloadavg(), "results": rows},
                     indent=2))


if __name__ == "__main__":
    main()
