"""Planning time, cold (spectra computed and cached) and warm (served from the catalog cache).

For N in {50, 1000, 10000} (digits at N <= 100, else the generated ``synthetic`` data with 20
samples per client): plans the default candidate space (6 families with their variants x
2 weights rules x 5 sparsity levels x the transports and algorithms AUTO enumerates) on a fresh
catalog file (cold), then plans again (warm), alternating calls served from the plan cache
(``warm_*``: the request planned before, nothing it read changed) with calls that plan anew
(``uncached_*``: the plan cache emptied first; the topologies still come from the catalog's
cache). Every call records its run and every candidate. Reports the candidate count and, of
the warm calls (medians):

* ``warm_ms``: the whole ``Session.plan`` call served from the plan cache;
* ``warm_planning_ms``: of it, the planning time it reports (the cache look-up);
* ``warm_recording_ms``: recording the run and its candidates (``planner.recording.record``),
  of which ``warm_insert_plans_ms`` the statement inserting the candidates' rows (copies of
  the rows of the run that first recorded them, ``Catalog.insert_copies``; planned anew:
  through Arrow, ``Catalog.insert_numbered``) and ``warm_insert_run_ms`` the run's row
  (``Catalog.insert_row``);
* ``warm_commit_ms``: the rest of the call, the transaction's COMMIT for the most part;
* ``uncached_ms``: the whole call planned anew, of which ``uncached_planning_ms`` the
  optimizer's own planning time (``planning_time_ms``: reading the workload, calibration and
  cached topologies, enumerating and costing), within it ``uncached_estimator_ms`` the cost
  model's estimates (``estimate_many``, less the enumeration it consumes),
  ``uncached_enumeration_ms`` enumerating the operators of each topology and k
  (``OperatorChoices.for_plan``) and ``uncached_reads_ms`` the catalog reads (workload facts,
  current calibration, cached topologies, label statistics); ``uncached_rows_ms`` building the
  candidates' rows (``candidate_rows``), ``uncached_recording_ms`` recording and
  ``uncached_commit_ms`` the rest.

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
    "rows": [("airplan_qo.planner.recording", "candidate_rows")],
    "recording": [("airplan_qo.planner.optimizer", "record")],
    "insert_plans": [("airplan_qo.catalog.store", "Catalog.insert_numbered"),
                     ("airplan_qo.catalog.store", "Catalog.insert_copies")],
    "insert_run": [("airplan_qo.catalog.store", "Catalog.insert_row")],
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
    from airplan_qo.planner.plan_cache import PlanCache

    with tempfile.TemporaryDirectory() as tmp:
        with aq.connect(Path(tmp) / "bench.duckdb") as db:
            w = aq.Workload(dataset=_dataset(aq, n), clients=n, alpha=0.5, snr_db=10)
            t0 = time.perf_counter()
            cold = db.plan(w)
            cold_s = time.perf_counter() - t0
            cache = PlanCache.of(db.catalog)
            db.plan(w)   # the first call cached its topologies: this one fills the plan cache
            rows: dict[str, list[float]] = defaultdict(list)
            for _ in range(repeats):
                for cached in (True, False):   # alternating: both under the same load
                    if not cached:
                        cache.clear()
                    spent: dict[str, float] = {}
                    with timed_parts(spent):
                        t0 = time.perf_counter()
                        r = db.plan(w)
                        total = time.perf_counter() - t0
                    if cached and r.planning_time_ms > 1.0:
                        raise AssertionError("the warm call was not served from the plan cache")
                    _split(rows, "warm" if cached else "uncached", total, r, spent)
                    if r.chosen.plan != cold.chosen.plan:
                        raise AssertionError("a warm call chose another plan than the cold one")
    out = {"n": n, "candidates": len(cold.candidates), "cold_s": round(cold_s, 3)}
    out.update({f"{k}_median": None if None in v else round(statistics.median(v), 2)
                for k, v in rows.items()})
    out["warm_ms_min"] = round(min(rows["warm_ms"]), 2)
    out["uncached_ms_min"] = round(min(rows["uncached_ms"]), 2)
    out["chosen"] = cold.chosen.plan.label()
    return out


def _split(rows: dict[str, list[float]], kind: str, total: float, r, spent: dict[str, float]
           ) -> None:
    """Add one call's split to ``rows`` (parts a version lacks are None)."""
    rows[f"{kind}_ms"].append(total * 1e3)
    rows[f"{kind}_planning_ms"].append(r.planning_time_ms)
    parts = ["recording", "insert_plans", "insert_run"]
    if kind == "uncached":
        # the batch consumes the enumeration as it goes: the estimates are the rest
        rows["uncached_estimator_ms"].append(
            (spent["costing"] - spent["enumeration"]) * 1e3 if "costing" in spent else None)
        parts += ["enumeration", "reads", "rows"]
    for part in parts:
        rows[f"{kind}_{part}_ms"].append(spent[part] * 1e3 if part in spent else None)
    rows[f"{kind}_commit_ms"].append((total - spent["respecting"]) * 1e3)


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
