"""Planning time, cold (spectra computed and cached) and warm (served from the catalog cache).

For N in {50, 1000, 10000} (digits at N <= 100, else the generated ``synthetic`` data with 20
samples per client): plans the default candidate space (6 families with their variants x
2 weights rules x 5 sparsity levels x the transports and algorithms AUTO enumerates) on a fresh
catalog file (cold), then plans again (warm). Reports the candidate count and, of the warm calls
(medians):

* ``warm_ms``: the whole ``Session.plan`` call;
* ``planning_ms``: the optimizer's own planning time (``planning_time_ms``: reading the
  workload, calibration and cached topologies, enumerating and costing);
* ``estimator_ms``: of it, the cost model's estimates (``estimate_many``, less the
  enumeration it consumes);
* ``enumeration_ms``: of it, enumerating the operators of each topology and k
  (``OperatorChoices.for_plan``);
* ``reads_ms``: the catalog reads of the call (workload facts, current calibration, cached
  topologies, label statistics);
* ``recording_ms``: recording the planning run and its candidates
  (``planner.recording.record``);
* ``commit_ms``: the rest of the call, the transaction's COMMIT for the most part.

Prints JSON with the machine's load average.

    python benchmarks/bench_planner.py [--sizes 50 1000 10000] [--repeats 5]

Target on a 2-core CPU: warm at most 10 ms at N = 1000 with every candidate recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

#: What each part of the split times: (module, attribute) pairs, patched for the benchmark.
PARTS = {
    "costing": [("airplan_qo.planner.optimizer", "estimate_many")],
    "enumeration": [("airplan_qo.planner.enumeration", "OperatorChoices.for_plan")],
    "recording": [("airplan_qo.planner.optimizer", "record")],
    "reads": [("airplan_qo.planner.optimizer", "workload_facts"),
              ("airplan_qo.planner.optimizer", "label_statistics"),
              ("airplan_qo.planner.optimizer", "cached_topologies"),
              ("airplan_qo.catalog.store", "Catalog.current_calibration")],
    "respecting": [("airplan_qo.planner.optimizer", "Optimizer._plan_respecting")],
}


@contextlib.contextmanager
def timed_parts(spent: dict[str, float]):
    """Patch the functions of :data:`PARTS` to add their wall time to ``spent`` (a part a
    version lacks is left out of it, and reported as None)."""
    import importlib

    undo = []
    for part, targets in PARTS.items():
        for module_name, attr in targets:
            owner = importlib.import_module(module_name)
            *path, name = attr.split(".")
            for p in path:
                owner = getattr(owner, p)
            original = getattr(owner, name, None)
            if original is None:    # an older version without this step: not timed
                continue

            def timed(*args, _f=original, _part=part, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _f(*args, **kwargs)
                finally:
                    spent[_part] += time.perf_counter() - t0

            spent.setdefault(part, 0.0)
            setattr(owner, name, timed)
            undo.append((owner, name, original))
    try:
        yield
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def bench(n: int, repeats: int) -> dict:
    import airplan_qo as aq

    with tempfile.TemporaryDirectory() as tmp:
        with aq.connect(Path(tmp) / "bench.duckdb") as db:
            w = aq.Workload(dataset=_dataset(aq, n), clients=n, alpha=0.5, snr_db=10)
            t0 = time.perf_counter()
            cold = db.plan(w)
            cold_s = time.perf_counter() - t0
            rows: dict[str, list[float]] = defaultdict(list)
            for _ in range(repeats):
                spent: dict[str, float] = {}
                with timed_parts(spent):
                    t0 = time.perf_counter()
                    r = db.plan(w)
                    total = time.perf_counter() - t0
                rows["warm_ms"].append(total * 1e3)
                rows["planning_ms"].append(r.planning_time_ms)
                # the batch consumes the enumeration as it goes: the estimates are the rest
                rows["estimator_ms"].append(
                    (spent["costing"] - spent["enumeration"]) * 1e3 if "costing" in spent
                    else None)
                for part in ("enumeration", "reads", "recording"):
                    rows[f"{part}_ms"].append(spent[part] * 1e3 if part in spent else None)
                rows["commit_ms"].append((total - spent["respecting"]) * 1e3)
                if r.chosen.plan != cold.chosen.plan:
                    raise AssertionError("the warm call chose another plan than the cold one")
    out = {"n": n, "candidates": len(cold.candidates), "cold_s": round(cold_s, 3)}
    out.update({f"{k}_median": None if None in v else round(statistics.median(v), 2)
                for k, v in rows.items()})
    out["warm_ms_min"] = round(min(rows["warm_ms"]), 2)
    out["chosen"] = cold.chosen.plan.label()
    return out


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
