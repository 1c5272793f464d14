"""Costing time of the time-varying families against the static exponential graph.

For each N: builds and describes (graph per round, OTA schedule per round, per-round spectra and
the period product's norm) ``one_peer_exponential``, ``base_k`` (k = 1) and, for comparison, the
static ``exponential`` graph with Metropolis-Hastings weights, which is what the planner does
for a candidate on a cache miss (periodic candidates are never cached). Reports the median wall
time of ``describe`` over the repeats and each periodic family's period. Prints JSON.

    python benchmarks/bench_periodic.py [--sizes 50 200 1000 4096] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def bench(n: int, repeats: int) -> dict:
    from airplan_qo.plans.topology import TopologySpec, describe

    out: dict = {"n": n}
    for family in ("one_peer_exponential", "base_k", "exponential"):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _, stats = describe(TopologySpec.create(family, n))
            times.append(time.perf_counter() - t0)
        out[family] = {"describe_s": round(statistics.median(times), 3),
                       "period": stats.period, "mixing_p": round(stats.spectra.mixing_p, 4)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200, 1000, 4096])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(json.dumps([bench(n, args.repeats) for n in args.sizes], indent=2))


if __name__ == "__main__":
    main()
