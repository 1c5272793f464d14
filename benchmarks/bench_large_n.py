"""A whole ``EXPLAIN TRAIN ... ON N CLIENTS`` at large N (default 100 000), cold: every
candidate topology built, coloured and analysed in this run.

The dataset is the generated ``synthetic`` one with enough training samples for every client
(``--samples-per-client``, default 10, so 10^6 training samples at N = 1e5 and a fifth more for
the test split), registered before the timed
statement as the user's own data would be (``aq.register_dataset``). The statement runs on a
fresh in-memory catalog with the default plan space. Prints one JSON document: the wall time
of the statement, the planner's own ``Planning Time``, the candidates, and where the time went
(seconds inside graph generation, the OTA schedule and the spectra, summed over candidates),
with the load average seen before and after.

    python benchmarks/bench_large_n.py [--clients 100000] [--samples-per-client 10]

Target on a 2-core CPU: N = 1e5 in at most 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import time

import numpy as np


def _timed(module, name: str, spent: dict[str, float], label: str) -> None:
    """Wrap ``module.name`` so that its wall time adds to ``spent[label]`` (outermost call
    only: nested calls of the same label are not counted twice)."""
    fn = getattr(module, name)
    depth = [0]

    def wrapper(*args, **kwargs):
        depth[0] += 1
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0

    setattr(module, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--samples-per-client", type=int, default=10)
    args = parser.parse_args()
    load_before = os.getloadavg()

    import airplan_qo as aq
    from airplan_qo.data import load
    from airplan_qo.plans import spectra, topology

    spent: dict[str, float] = {}
    _timed(topology, "build_graph", spent, "graph_s")
    _timed(topology, "ota_schedule", spent, "schedule_s")
    _timed(topology, "graph_lambda2", spent, "spectra_s")
    _timed(topology, "spectral_stats", spent, "spectra_s")
    _timed(spectra, "laplacian_extremes", spent, "spectra_s")

    n = args.clients
    t0 = time.perf_counter()
    test_fraction = 0.2  # the training side must still hold samples_per_client per client
    data = load("synthetic", seed=0, n_features=20, test_fraction=test_fraction,
                n_samples=int(np.ceil(n * args.samples_per_client / (1 - test_fraction))) + 1000)
    aq.register_dataset("synthetic_large", data, replace=True)
    data_s = time.perf_counter() - t0

    with aq.connect(":memory:") as db:
        t0 = time.perf_counter()
        text = str(db.sql(f"EXPLAIN TRAIN synthetic_large ON {n} CLIENTS")[0].text)
        wall = time.perf_counter() - t0
    planning = re.search(r"Planning Time: ([0-9.]+) ms", text)
    candidates = re.search(r"Candidates: (\d+) considered", text)
    chosen = re.search(r'plan="([^"]+)"', text)
    print(json.dumps({
        "benchmark": "large_n", "clients": n, "train_samples": int(data.n_train),
        "dataset_s": round(data_s, 2), "explain_wall_s": round(wall, 2),
        "planning_time_s": round(float(planning.group(1)) / 1e3, 2) if planning else None,
        "candidates": int(candidates.group(1)) if candidates else None,
        "chosen": chosen.group(1) if chosen else None,
        "inside_s": {k: round(v, 2) for k, v in sorted(spent.items())},
        "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
        "cpu_count": os.cpu_count(), "machine": platform.platform(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}, indent=2))


if __name__ == "__main__":
    main()
