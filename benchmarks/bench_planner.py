"""Planning time, cold (spectra computed and cached) and warm (served from the catalog cache).

For N in {50, 1000, 10000}: plans the default candidate space (6 families with their variants x
2 weights rules x 5 sparsity levels) on a fresh catalog file (cold), then plans again (warm).
Reports the wall time of the whole ``Session.plan`` call (statistics, costing and recording the
run with all candidates), the optimizer's own planning time (reading the workload, calibration and
cached topologies, and costing), and of the warm calls the time spent recording the planning run
and its candidates (``Optimizer._record``: one transaction, its COMMIT included). Prints JSON.

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
    from airplan_qo.planner.optimizer import Optimizer

    recording: list[float] = []
    record = Optimizer._record

    def timed_record(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return record(self, *args, **kwargs)
        finally:
            recording.append(time.perf_counter() - t0)

    Optimizer._record = timed_record
    try:
        return _bench(aq, n, repeats, recording)
    finally:
        Optimizer._record = record


def _bench(aq, n: int, repeats: int, recording: list[float]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        with aq.connect(Path(tmp) / "bench.duckdb") as db:
            w = aq.Workload(dataset="digits", clients=n, alpha=0.5, snr_db=10)
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
