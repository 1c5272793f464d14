"""Estimated vs true Dirichlet alpha: the paper's KL proxy and the Polya MLE, from sketches.

For each alpha, client count N and samples per client, clients draw p_i ~ Dir(alpha * 1_C) and
about n labels each (n_i uniform in [0.8 n, 1.2 n]); every client sketches its labels
(Count-Min, eps/delta below) and the class counts are recovered from the sketches, optionally
after Gaussian noise calibrated to (dp_epsilon, dp_delta) per release. Both estimators run on
three inputs: the exact counts, the sketch estimates and the noised sketch estimates. Prints JSON
(or a text table with --format table): per cell, the median ratio estimate/true over seeds and
whether it lies within the tolerance factor.

    python benchmarks/bench_heterogeneity.py --seeds 5 --format table
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time

import numpy as np

from airplan_qo.catalog.heterogeneity import dirichlet_alpha, paper_alpha
from airplan_qo.catalog.privacy import calibrate_sketch_sigma, privatize_sketch
from airplan_qo.catalog.sketch import dimensions, estimate_counts, sketch_labels

ESTIMATORS = {"paper": paper_alpha, "dirichlet": dirichlet_alpha}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.05, 0.1, 0.3, 0.5, 1.0, 5.0])
    ap.add_argument("--clients", type=int, nargs="+", default=[20, 100])
    ap.add_argument("--samples", type=int, nargs="+", default=[90, 200],
                    help="mean samples per client (each client gets 0.8x..1.2x)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--eps", type=float, default=0.05, help="Count-Min error parameter")
    ap.add_argument("--delta", type=float, default=0.01, help="Count-Min failure probability")
    ap.add_argument("--dp-epsilon", type=float, default=1.0)
    ap.add_argument("--dp-delta", type=float, default=1e-5)
    ap.add_argument("--sketch-seed", type=int, default=12345)
    ap.add_argument("--tolerance", type=float, default=1.5)
    ap.add_argument("--format", choices=["json", "table"], default="json")
    return ap.parse_args(argv)


def client_counts(alpha, n_clients, n_mean, n_classes, rng):
    p = rng.dirichlet(np.full(n_classes, alpha), size=n_clients)
    n = rng.integers(int(round(0.8 * n_mean)), int(round(1.2 * n_mean)) + 1, size=n_clients)
    return np.array([rng.multinomial(k, pi) for k, pi in zip(n, p)])


def recovered_counts(counts, args, sigma, rng):
    """Class counts as an aggregator sees them: from plain and from noised sketches."""
    plain, noised = [], []
    for row in counts:
        labels = np.repeat(np.arange(row.size), row)
        sk = sketch_labels(labels, row.size, eps=args.eps, delta=args.delta, seed=args.sketch_seed)
        plain.append(estimate_counts(sk, row.size))
        noisy = privatize_sketch(sk, sigma, rng)
        noised.append(estimate_counts(noisy, row.size, estimator="median"))
    return np.array(plain), np.array(noised)


def run(args):
    depth, width = dimensions(args.eps, args.delta)
    sigma = calibrate_sketch_sigma(args.dp_epsilon, args.dp_delta, depth)
    cells = {}
    t0 = time.perf_counter()
    for alpha in args.alphas:
        for n_clients in args.clients:
            for n_mean in args.samples:
                for seed in range(args.seeds):
                    rng = np.random.default_rng([seed, n_clients, n_mean, int(alpha * 1000)])
                    counts = client_counts(alpha, n_clients, n_mean, args.classes, rng)
                    sketched, noised = recovered_counts(counts, args, sigma, rng)
                    inputs = {"exact": counts, "sketch": sketched, "dp_sketch": noised}
                    for source, data in inputs.items():
                        if np.any(data.sum(axis=1) <= 0):
                            # noise wiped a client out: give it one count per class, i.e. no info
                            data = np.where(data.sum(axis=1, keepdims=True) <= 0, 1.0, data)
                        for name, fn in ESTIMATORS.items():
                            key = (source, name, alpha, n_clients, n_mean)
                            cells.setdefault(key, []).append(fn(data) / alpha)
    rows = []
    for (source, name, alpha, n_clients, n_mean), ratios in cells.items():
        ratios = np.array(ratios)
        med = float(np.median(ratios))
        rows.append({
            "input": source, "estimator": name, "alpha": alpha, "clients": n_clients,
            "samples_per_client": n_mean, "median_ratio": med,
            "within_tolerance": bool(1 / args.tolerance <= med <= args.tolerance),
            "fraction_of_seeds_within": float(np.mean(
                (ratios >= 1 / args.tolerance) & (ratios <= args.tolerance))),
            "ratios": [r if math.isfinite(r) else "inf" for r in ratios.tolist()],
        })
    return {
        "benchmark": "heterogeneity",
        "config": {"alphas": args.alphas, "clients": args.clients, "samples": args.samples,
                   "classes": args.classes, "seeds": args.seeds,
                   "sketch": {"eps": args.eps, "delta": args.delta, "depth": depth,
                              "width": width},
                   "dp": {"epsilon": args.dp_epsilon, "delta": args.dp_delta,
                          "sigma_per_cell": sigma, "point_estimate": "median over rows"},
                   "tolerance": args.tolerance},
        "machine": {"python": platform.python_version(), "numpy": np.__version__},
        "seconds": time.perf_counter() - t0,
        "rows": rows,
    }


def table(result) -> str:
    rows = result["rows"]
    sources = ["exact", "sketch", "dp_sketch"]
    head = f"{'alpha':>6} {'N':>4} {'n':>4} | " + " | ".join(
        f"{s + ' paper':>16} {s + ' dirichlet':>20}" for s in sources)
    lines = [head, "-" * len(head)]
    index = {(r["input"], r["estimator"], r["alpha"], r["clients"], r["samples_per_client"]): r
             for r in rows}
    tol = result["config"]["tolerance"]
    for alpha in result["config"]["alphas"]:
        for n in result["config"]["clients"]:
            for m in result["config"]["samples"]:
                parts = []
                for s in sources:
                    cell = []
                    for e, w in (("paper", 16), ("dirichlet", 20)):
                        r = index[(s, e, alpha, n, m)]
                        mark = "ok" if r["within_tolerance"] else "--"
                        cell.append(f"{r['median_ratio']:>{w - 3}.3g} {mark}")
                    parts.append(" ".join(cell))
                lines.append(f"{alpha:>6g} {n:>4} {m:>4} | " + " | ".join(parts))
    lines.append(f"(median estimate/true over {result['config']['seeds']} seeds; ok = within "
                 f"{tol}x; dp sigma/cell = {result['config']['dp']['sigma_per_cell']:.3f})")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    result = run(args)
    if args.format == "json":
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
