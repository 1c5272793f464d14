"""Spectral statistics at scale: small_world(k=6) and ring at N in {1e3, 1e4, 1e5}.

Each configuration runs in a fresh subprocess so its peak memory (ru_maxrss) is its own.
Prints one JSON document: per configuration the seconds to build the graph and W, to compute
the spectra, to colour G^2, the solver used, and peak RSS in MiB.

    python benchmarks/bench_spectral.py [--sizes 1000 10000 100000] [--families small_world ring]

Target on a 2-core CPU: small_world at N = 1e5 under 30 s and 4 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

PARAMS = {"small_world": {"k": 6}, "ring": {}}


def run_one(family: str, n: int, seed: int) -> dict:
    from airplan_qo.plans.families import build_graph
    from airplan_qo.plans.mixing import WEIGHTS
    from airplan_qo.plans.schedule import ota_schedule
    from airplan_qo.plans.spectra import spectral_stats

    t0 = time.perf_counter()
    graph = build_graph(family, n, seed=seed, **PARAMS.get(family, {}))
    w = WEIGHTS.get("metropolis_hastings")(graph)
    t1 = time.perf_counter()
    stats = spectral_stats(graph, w, family=family)
    t2 = time.perf_counter()
    schedule = ota_schedule(graph)
    t3 = time.perf_counter()
    return {
        "family": family, "n": n, "build_s": round(t1 - t0, 3), "spectra_s": round(t2 - t1, 3),
        "schedule_s": round(t3 - t2, 3), "total_s": round(t3 - t0, 3), "method": stats.method,
        "lambda2_laplacian": stats.lambda2_laplacian,
        "lambda2_normalized": stats.lambda2_normalized, "mixing_gap": stats.mixing_gap,
        "slots_per_round": schedule.slots_per_round,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--families", nargs="+", default=["small_world", "ring"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--one", nargs=2, metavar=("FAMILY", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.seed)))
        return
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    rows = []
    for family in args.families:
        for n in args.sizes:
            out = subprocess.run([sys.executable, __file__, "--one", family, str(n),
                                  "--seed", str(args.seed)],
                                 capture_output=True, text=True, env=env, check=True)
            rows.append(json.loads(out.stdout))
            print(json.dumps(rows[-1]), file=sys.stderr)
    print(json.dumps({"benchmark": "spectral", "load_avg": os.getloadavg(), "results": rows},
                     indent=2))


if __name__ == "__main__":
    main()
